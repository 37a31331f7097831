"""The errors enzpy raises on purpose."""


class UnsupportedError(Exception):
    """A construct enzpy cannot differentiate (yet), named with where it occurs."""


class InternalError(RuntimeError):
    """A failure of enzpy itself while building a derivative: a bug to report."""


class RuleError(TypeError):
    """A custom derivative rule that does not fit its function (signature,
    number, types or shapes of what it returns), found when it is used."""


class RuleShapeError(RuleError, ValueError):
    """A rule's cotangent or tangent of another shape than its argument or
    result: found when the derivative runs (the shadows may hold part of the
    derivative then). A ``TypeError`` as every misfit of a rule, and a
    ``ValueError`` as every shape mismatch."""


def raise_exception_set_by(error: SystemError):
    """Raise the exception native code set while still returning a result (a
    parallel loop's body raising in a worker thread: CPython reports a
    SystemError caused by it), else ``error`` itself."""
    cause = error.__cause__
    if cause is not None and "returned a result with an exception set" in str(error):
        raise cause from None
    raise error
