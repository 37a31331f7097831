"""Second derivatives and Jacobians, built from the two modes.

``hvp`` is reverse mode over forward mode: one derivative module per function
and argument types, built once (see ``pipeline.Build._transform_hvp``). ``hessian`` calls it
once per basis vector; ``jacobian`` runs forward mode once per basis vector.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types

from .api import (_ANNOTATIONS, Annotation, Const, Duplicated, Forward, _check_aliases,
                  _dispatcher, _is_float_scalar, _signature_key, autodiff)
from .cache import STATS
from .pipeline import build, entries


def _plain_consts(consts):
    for i, c in enumerate(consts):
        if isinstance(c, Annotation) and type(c) is not Const:
            raise TypeError(f"argument {i + 1}: the arguments after x are constants; "
                            f"got {type(c).__name__}")
    return tuple(c.val if type(c) in _ANNOTATIONS else c for c in consts)


def _point(x, name):
    """``x`` as a float scalar or a C-contiguous float array."""
    if _is_float_scalar(x):
        return x
    if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64):
        return np.ascontiguousarray(x)
    raise TypeError(f"{name}: x must be a float scalar or a float32/float64 array, "
                    f"got {type(x).__name__}"
                    + (f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else ""))


def hvp(f, x, v, *args):
    """The Hessian of the scalar ``f(x, *args)`` at ``x`` times ``v``.

    ``x`` is a float scalar or array, ``v`` has its shape and dtype; the other
    arguments are constants. Returns an array like ``x`` (a float for a scalar);
    ``x`` and ``v`` are not modified, even if ``f`` writes ``x`` in place.
    """
    disp = _dispatcher(f)
    x = _point(x, "hvp")
    consts = _plain_consts(args)
    if isinstance(x, np.ndarray):
        v = np.asarray(v)
        if v.shape != x.shape:
            raise ValueError(f"hvp: v has shape {v.shape}, x has shape {x.shape}")
        v = np.ascontiguousarray(v, dtype=x.dtype)
    elif not _is_float_scalar(v) and not isinstance(v, (int, np.integer)):
        raise TypeError(f"hvp: x is a scalar, so v must be a float, got {type(v).__name__}")
    key = ("hvp", disp, _signature_key(Duplicated(x, x)),
           tuple(_signature_key(c) for c in consts))
    entry = entries.get(key)
    if entry is None:
        signature = [("Duplicated", numba.typeof(x), numba.typeof(x))] + [
            ("Const", numba.typeof(c), None) for c in consts]
        entry = build(disp, signature, "hvp", key)
    else:
        STATS.hits += 1
    _check_aliases(entry, (x, *consts, v))
    if isinstance(x, np.ndarray):
        hv = np.zeros_like(x)
        # Copies: f may write x in place, and its tangent function then writes v.
        entry.call(x.copy(), *consts, v.copy(), hv, np.zeros_like(x))
        return hv
    return entry.call(x, *consts, type(x)(v))[0]


def hessian(f, x, *args):
    """The dense Hessian of the scalar ``f(x, *args)`` at ``x``, of shape
    ``x.shape + x.shape`` (a float for a scalar ``x``): one ``hvp`` per entry of x."""
    x = _point(x, "hessian")
    if not isinstance(x, np.ndarray):
        return hvp(f, x, type(x)(1.0), *args)
    columns = [hvp(f, x, e, *args).ravel() for e in _basis(x)]
    return np.stack(columns, axis=-1).reshape(x.shape + x.shape)


def jacobian(g, x, *args):
    """The Jacobian of ``g(x, *args)`` at ``x`` by forward mode, one tangent per
    entry of ``x``.

    ``g`` returns a float array (Jacobian of shape ``out.shape + x.shape``) or
    a float (the gradient, shape ``x.shape``), or returns None and writes its
    last argument, a float output array (the Jacobian of what it writes there).
    The other arguments are constants.
    """
    disp = _dispatcher(g)
    x = _point(x, "jacobian")
    consts = _plain_consts(args)
    restype = _return_type(disp, (x, *consts))
    writes_out = restype == types.none
    name = disp.py_func.__qualname__
    if writes_out and not (consts and isinstance(consts[-1], np.ndarray)
                           and consts[-1].dtype in (np.float32, np.float64)):
        raise TypeError(f"jacobian: '{name}' returns None, so its last argument must be "
                        f"the float array it writes")
    if not writes_out and not isinstance(restype, (types.Float, types.Array)):
        raise TypeError(f"jacobian: '{name}' returns {restype}; it needs a function "
                        f"returning a float or a float array, or writing an output array")
    columns = []
    for direction in _basis(x):
        if writes_out:
            dout = np.zeros_like(consts[-1])
            autodiff(Forward, disp, Duplicated(x, direction), *consts[:-1],
                     Duplicated(consts[-1], dout))
            columns.append(dout)
        else:
            (tangent,) = autodiff(Forward, disp, Duplicated(x, direction), *consts)
            columns.append(np.asarray(tangent))
    if not isinstance(x, np.ndarray):
        return columns[0]
    jac = np.stack([c.ravel() for c in columns], axis=-1)
    return jac.reshape(columns[0].shape + x.shape)


def _basis(x):
    """Unit tangents: 1.0 for a scalar, each entry of an array in turn."""
    if not isinstance(x, np.ndarray):
        yield type(x)(1.0)
        return
    for i in range(x.size):
        e = np.zeros(x.size, dtype=x.dtype)
        e[i] = 1.0
        yield e.reshape(x.shape)


def _return_type(disp, values):
    argtypes = tuple(numba.typeof(v) for v in values)
    disp.compile(argtypes)
    return disp.overloads[argtypes].signature.return_type
