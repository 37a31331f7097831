"""Second derivatives and Jacobians, built from the two modes.

``hvp`` is reverse mode over forward mode: one derivative module per function
and argument types, built once (see ``api._build_hvp``). ``hessian`` calls it
once per basis vector; ``jacobian`` runs forward mode once per basis vector.
"""
from __future__ import annotations

import numpy as np

from .api import (_ANNOTATIONS, Annotation, Const, Duplicated, Forward, _build_hvp, autodiff,
                  _dispatcher, _entries, _is_float_scalar, _signature_key)
from .cache import STATS


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
    arguments are constants. Returns an array like ``x`` (a float for a scalar).
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
    entry = _entries.get(key)
    if entry is None:
        entry = _build_hvp(disp, x, consts, key)
    else:
        STATS.hits += 1
    if isinstance(x, np.ndarray):
        hv = np.zeros_like(x)
        entry.call(x, *consts, v, hv)
        return hv
    return entry.call(x, *consts, type(x)(v))[0]


def hessian(f, x, *args):
    """The dense Hessian of the scalar ``f(x, *args)`` at ``x``, of shape
    ``x.shape + x.shape`` (a float for a scalar ``x``): one ``hvp`` per entry of x."""
    x = _point(x, "hessian")
    if not isinstance(x, np.ndarray):
        return hvp(f, x, type(x)(1.0), *args)
    n = x.size
    columns = np.empty((n, n), dtype=x.dtype)
    basis = np.zeros(n, dtype=x.dtype)
    for i in range(n):
        basis[i] = 1.0
        columns[:, i] = hvp(f, x, basis.reshape(x.shape), *args).ravel()
        basis[i] = 0.0
    return columns.reshape(x.shape + x.shape)


def jacobian(g, x, *args):
    """The Jacobian of ``g(x, *args)`` at ``x`` by forward mode, one tangent per
    entry of ``x``.

    ``g`` returns a float array (shape ``out.shape + x.shape``) or a float, or
    returns None and writes its last argument, an output array (the Jacobian
    of what it writes there). The other arguments are constants.
    """
    disp = _dispatcher(g)
    x = _point(x, "jacobian")
    consts = _plain_consts(args)
    writes_last = None
    scalar = not isinstance(x, np.ndarray)
    n = 1 if scalar else x.size
    basis = np.zeros(n, dtype=np.float64 if scalar else x.dtype)
    columns = []
    for i in range(n):
        basis[i] = 1.0
        seed = Duplicated(x, type(x)(1.0)) if scalar else Duplicated(x, basis.reshape(x.shape))
        if writes_last is None:
            (tangent,) = _forward(disp, seed, consts, None)
            writes_last = tangent is None and len(consts) > 0 and \
                isinstance(consts[-1], np.ndarray)
            if tangent is None and not writes_last:
                raise TypeError(f"jacobian: '{disp.py_func.__qualname__}' returns None and "
                                f"its last argument is not an output array")
        if writes_last:
            out = consts[-1]
            dout = np.zeros_like(out)
            _forward(disp, seed, consts, dout)
            tangent = dout
        elif i > 0:
            (tangent,) = _forward(disp, seed, consts, None)
        columns.append(np.asarray(tangent).copy())
        basis[i] = 0.0
    first = columns[0]
    jac = np.stack([c.ravel() for c in columns], axis=-1) if first.ndim else np.array(columns)
    if scalar:
        return jac.reshape(first.shape)
    return jac.reshape(first.shape + x.shape)


def _forward(disp, seed, consts, dout):
    """Forward mode along ``seed``; with ``dout``, the last constant is the
    output array and ``dout`` receives its tangent."""
    if dout is None:
        return autodiff(Forward, disp, seed, *consts)
    return autodiff(Forward, disp, seed, *consts[:-1], Duplicated(consts[-1], dout))
