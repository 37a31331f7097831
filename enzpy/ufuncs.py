"""Rules for NumPy functions whose Numba implementation branches on an exact tie.

``np.logaddexp(x, y)`` returns ``x + log(2)`` when ``x == y`` (so equal
infinities give no warning): differentiated as written, that branch gives the
whole derivative to ``x`` (1, 0) where it is (1/2, 1/2), e.g. for two logits
initialised alike. The rules give ``exp(x - r)``, ``exp(y - r)`` everywhere
(``2 ** (x - r)`` for ``np.logaddexp2``).
"""
from __future__ import annotations

import numpy as np

from .userrules import builtin_variants, builtin_vjp

_MODULE = "numba.np.npyfuncs"
_IMPL = "_generate_logaddexp.<locals>.ol_npy_logaddexp.<locals>.impl"


def _variant(py_func) -> str:
    """'[2]' for np.logaddexp2's implementation (its exponential is exp2), else '[e]'."""
    cells = dict(zip(py_func.__code__.co_freevars,
                     (c.cell_contents for c in py_func.__closure__ or ())))
    return "[2]" if cells.get("expfn") is np.exp2 else "[e]"


def _rules(logaddexp, exp):
    """fwd, bwd, jvp of ``logaddexp`` (r = log(exp(x) + exp(y)) in the base of ``exp``)."""
    def fwd(x, y):
        r = logaddexp(x, y)
        return r, (x, y, r)

    def bwd(res, g):
        x, y, r = res
        return g * exp(x - r), g * exp(y - r)

    def jvp(primals, tangents):
        (x, y), (dx, dy) = primals, tangents
        r = logaddexp(x, y)
        return r, exp(x - r) * dx + exp(y - r) * dy

    return fwd, bwd, jvp


builtin_variants(_MODULE, _IMPL, _variant)
builtin_vjp(_MODULE, _IMPL + "[e]", *_rules(np.logaddexp, np.exp))
builtin_vjp(_MODULE, _IMPL + "[2]", *_rules(np.logaddexp2, np.exp2))
