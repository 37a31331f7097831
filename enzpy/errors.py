"""The errors enzpy raises on purpose."""


class UnsupportedError(Exception):
    """A construct enzpy cannot differentiate (yet), named with where it occurs."""


class InternalError(RuntimeError):
    """A failure of enzpy itself while building a derivative: a bug to report."""


class RuleError(TypeError):
    """A custom derivative rule that does not fit its function (signature,
    number, types or shapes of what it returns), found when it is used."""
