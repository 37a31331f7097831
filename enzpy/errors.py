"""The errors enzpy raises on purpose."""


class UnsupportedError(Exception):
    """A construct enzpy cannot differentiate (yet), named with where it occurs."""
