"""Shared checks for the enzpy test-suite.

``check_reverse(f, args)`` differentiates ``f`` with ``ReverseWithPrimal`` and
checks

* the primal against ``f(*plain_values)`` (exact, or 1e-12 relative),
* ``None`` for every non-Active argument,
* every Active argument's adjoint against a central finite difference,
* optionally (``expected=``) against hand-written analytic derivatives.

``check_analytic(f, args, expected)`` compares with the analytic derivatives
only (for functions where a finite difference is meaningless).

``Guards().copy(a)`` places an array between two guard zones, whose bytes
``Guards.check()`` finds changed when compiled code wrote outside the array.
"""
from __future__ import annotations

import math
import types

import numba
import numpy as np

from enzpy import Active, Const, ReverseWithPrimal, autodiff

try:  # the annotation base class; fall back to the two public annotations
    from enzpy.api import Annotation as _Annotation
except ImportError:  # pragma: no cover
    _Annotation = (Active, Const)

EPS64 = np.finfo(np.float64).eps

_GUARD_BYTES = 64
_GUARD_BYTE = 0xA7


class Guards:
    """The guard zones of the arrays ``copy`` made.

    Compiled code does not check indices: a derivative writing past an array
    (or a program indexing out of bounds, which its reverse sweep mirrors)
    changes the bytes next to it, in the heap allocator's own bookkeeping
    when the array is a plain allocation, and the process aborts much later,
    anywhere. Between guard zones, the test that wrote fails instead."""

    def __init__(self):
        self._buffers = []

    def copy(self, a):
        """A C-contiguous copy of array ``a`` between two guard zones."""
        raw = np.full(a.nbytes + 2 * _GUARD_BYTES, _GUARD_BYTE, np.uint8)
        inner = raw[_GUARD_BYTES:_GUARD_BYTES + a.nbytes].view(a.dtype).reshape(a.shape)
        inner[...] = a
        self._buffers.append(raw)
        return inner

    def check(self):
        for raw in self._buffers:
            zones = np.concatenate([raw[:_GUARD_BYTES], raw[-_GUARD_BYTES:]])
            changed = np.flatnonzero(zones != _GUARD_BYTE)
            assert changed.size == 0, (
                f"compiled code wrote outside an array of {raw.size - 2 * _GUARD_BYTES} "
                f"bytes: guard bytes {changed.tolist()} changed (0-{_GUARD_BYTES - 1} "
                f"before it, {_GUARD_BYTES}-{2 * _GUARD_BYTES - 1} after)")


def plain(arg):
    """The bare value behind an annotation (an unannotated argument is itself)."""
    return arg.val if isinstance(arg, _Annotation) else arg


def is_dispatcher(f):
    return isinstance(f, numba.core.dispatcher.Dispatcher)


def python_function(f):
    """The pure-Python function behind ``f`` (``f`` itself if it is not jitted)."""
    return f.py_func if is_dispatcher(f) else f


def _is_float32(v):
    return isinstance(v, np.float32)


class _WideNumpy:
    """``numpy`` with ``float32`` replaced by ``float64``."""

    def __getattr__(self, name):
        return np.float64 if name == "float32" else getattr(np, name)


def widened(fn):
    """``fn`` re-bound to globals in which ``np.float32`` means ``np.float64``.

    float32 test functions cast their constants with ``np.float32``; under
    NumPy 2 promotion a Python float times a ``np.float32`` stays float32, so
    the finite difference would be taken in float32. The widened copy computes
    the same expression in float64.
    """
    g = dict(fn.__globals__)
    for k, v in list(g.items()):
        if v is np.float32:
            g[k] = np.float64
        elif v is np:
            g[k] = _WideNumpy()
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def _as_float(y):
    if isinstance(y, (bool, np.bool_)):
        return float(bool(y))
    return float(y)


def assert_primal(y, y_ref, what=""):
    """Exact, or within 1e-12 relative."""
    if isinstance(y_ref, (bool, np.bool_)):
        assert bool(y) == bool(y_ref), f"{what}primal {y!r} != {y_ref!r}"
        return
    if isinstance(y_ref, (int, np.integer)) and not isinstance(y_ref, bool):
        assert int(y) == int(y_ref), f"{what}primal {y!r} != {y_ref!r}"
        return
    if y_ref is None:
        assert y is None, f"{what}primal {y!r} != None"
        return
    a, b = float(y), float(y_ref)
    if a == b or (math.isnan(a) and math.isnan(b)):
        return
    assert abs(a - b) <= 1e-12 * max(abs(a), abs(b)), f"{what}primal {a!r} != {b!r}"


def central_difference(f, values, i, h=None):
    """(f(x_i + h) - f(x_i - h)) / 2h, and the scale of f used for the noise bound.

    float32 arguments are widened to float64 and the pure-Python function is
    used, so the difference is taken in float64.
    """
    vals = list(values)
    g = f
    if any(_is_float32(v) for v in vals):
        g = widened(python_function(f))
        vals = [float(v) if _is_float32(v) else v for v in vals]
    x = float(vals[i])
    if h is None:
        h = 1e-6 * max(1.0, abs(x))
    up = list(vals)
    dn = list(vals)
    # keep the perturbed point exactly representable so the step is exact
    xp, xm = x + h, x - h
    up[i], dn[i] = xp, xm
    fp, fm = _as_float(g(*up)), _as_float(g(*dn))
    return (fp - fm) / (xp - xm), max(abs(fp), abs(fm)), (xp - xm) / 2


def check_reverse(f, args, rtol=1e-5, atol=1e-7, expected=None, fd=True):
    """Differentiate ``f`` at ``args`` and check primal, adjoints, FD and analytic.

    ``expected``: optional callable ``expected(*plain_values)`` returning one
    entry per argument (``None`` or anything for non-Active ones) with the
    analytic adjoint, or a tuple of such entries.
    Returns ``(grads, primal)``.
    """
    args = list(args)
    values = [plain(a) for a in args]
    active = [i for i, a in enumerate(args) if isinstance(a, Active)]
    if any(_is_float32(values[i]) for i in active):
        rtol = max(rtol, 1e-3)
        atol = max(atol, 1e-5)

    grads, y = autodiff(ReverseWithPrimal, f, *args)
    y_ref = f(*values)
    assert_primal(y, y_ref)

    assert isinstance(grads, tuple) and len(grads) == len(args), grads
    for i, a in enumerate(args):
        if not isinstance(a, Active):
            assert grads[i] is None, f"argument {i} is not Active but got adjoint {grads[i]!r}"
        else:
            assert grads[i] is not None, f"argument {i}: Active but got None"
            assert np.isfinite(float(grads[i])), f"argument {i}: adjoint {grads[i]!r}"

    int_result = isinstance(y_ref, (bool, np.bool_, int, np.integer))
    for i in active:
        g = float(grads[i])
        if int_result:
            # an int or bool result carries no derivative
            assert g == 0.0, f"argument {i}: int/bool result but adjoint {g!r}"
            continue
        if fd:
            d, scale, h = central_difference(f, values, i)
            # rounding noise of the difference quotient itself
            noise = 64 * EPS64 * scale / h
            tol = atol + rtol * abs(d) + noise
            assert abs(g - d) <= tol, (
                f"argument {i} (x={values[i]!r}): enzpy adjoint {g!r}, central "
                f"difference {d!r} (|diff| {abs(g - d):.3g} > tol {tol:.3g})")

    if expected is not None:
        exp = expected(*values) if callable(expected) else expected
        if not isinstance(exp, (tuple, list)):
            exp = (exp,)
        assert len(exp) == len(args), f"expected has {len(exp)} entries for {len(args)} args"
        check_adjoints(grads, exp, args, rtol=rtol, atol=atol)
    return grads, y


def check_adjoints(grads, exp, args, rtol=1e-5, atol=1e-7):
    for i, a in enumerate(args):
        if not isinstance(a, Active):
            continue
        g, e = float(grads[i]), float(exp[i])
        assert abs(g - e) <= atol + rtol * abs(e), (
            f"argument {i}: enzpy adjoint {g!r}, analytic {e!r}")


def check_analytic(f, args, expected, rtol=1e-9, atol=1e-12):
    """Compare with hand-written derivatives only (the primal is checked too)."""
    args = list(args)
    values = [plain(a) for a in args]
    grads, y = autodiff(ReverseWithPrimal, f, *args)
    assert_primal(y, f(*values))
    exp = expected(*values) if callable(expected) else expected
    if not isinstance(exp, (tuple, list)):
        exp = (exp,)
    check_adjoints(grads, exp, args, rtol=rtol, atol=atol)
    return grads, y
