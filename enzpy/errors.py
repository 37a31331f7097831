"""The errors enzpy raises on purpose."""


class UnsupportedError(Exception):
    """A construct enzpy cannot differentiate (yet), named with where it occurs."""


class InternalError(RuntimeError):
    """A failure of enzpy itself while building a derivative: a bug to report."""
