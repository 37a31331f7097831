"""Second derivatives and Jacobians, built from the two modes.

``hvp`` is reverse mode over forward mode: one derivative module per function
and argument types, built once (see ``pipeline.Build._transform_hvp``). ``hessian`` calls it
once per basis vector; ``jacobian`` runs forward mode once per basis vector.
"""
from __future__ import annotations

import numba
import numba.extending
import numpy as np
from numba import types

from .api import (_ANNOTATIONS, Active, Annotation, Const, Duplicated, Forward, Reverse,
                  _check_aliases, _dispatcher, _is_float_scalar, _signature_key, autodiff)
from .arguments import arrays_in, positional_parameters, star_parameter
from .cache import STATS
from .errors import UnsupportedError
from . import pipeline
from .pipeline import build, entries


def _plain_consts(consts, disp):
    """The values of the arguments after x, then the defaults of the parameters
    left out (as autodiff passes them: constants)."""
    for i, c in enumerate(consts):
        if isinstance(c, Annotation) and type(c) is not Const:
            raise TypeError(f"argument {i + 1}: the arguments after x are constants; "
                            f"got {type(c).__name__}")
    if star_parameter(disp.py_func) is not None:
        raise TypeError(f"'{disp.py_func.__qualname__}' takes *args, which hvp, hessian and "
                        f"jacobian do not fill: give it named parameters (autodiff, gradient "
                        f"and vjp take *args)")
    params = positional_parameters(disp.py_func)
    missing = [p.name for p in params[1 + len(consts):] if p.default is p.empty]
    if missing:
        raise TypeError(f"'{disp.py_func.__qualname__}' is missing the argument(s) "
                        f"{', '.join(missing)}: pass them after x")
    omitted = [p.default for p in params[1 + len(consts):]]
    return tuple(c.val if type(c) in _ANNOTATIONS else c for c in consts) + tuple(omitted)


def _point(x, name):
    """``x`` as a float scalar or a C-contiguous float array."""
    if _is_float_scalar(x):
        return x
    if isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64):
        return np.asarray(x, order="C")         # (0-d stays 0-d)
    raise TypeError(f"{name}: x must be a float scalar or a float32/float64 array, "
                    f"got {type(x).__name__}"
                    + (f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else ""))


def hvp(f, x, v, *args):
    """The Hessian of the scalar ``f(x, *args)`` at ``x`` times ``v``.

    ``x`` is a float scalar or array, ``v`` has its shape and dtype; the other
    arguments are constants. Returns an array like ``x`` (a float for a scalar);
    ``x`` and ``v`` are not modified, even if ``f`` writes ``x`` in place.
    """
    disp = _dispatcher(f, "hvp")
    x = _point(x, "hvp")
    consts = _plain_consts(args, disp)
    if isinstance(x, np.ndarray):
        v = np.asarray(v)
        if v.dtype.kind not in "fiub":
            raise TypeError(f"hvp: v must hold real numbers, like x; got dtype {v.dtype}")
        if v.shape != x.shape:
            raise ValueError(f"hvp: v has shape {v.shape}, x has shape {x.shape}")
        v = np.asarray(v, dtype=x.dtype, order="C")
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
    initial = _fresh(args)          # (each column at the same point, if f updates them)
    columns = [hvp(f, x, e, *_fresh(initial)).ravel() for e in _basis(x)]
    if not columns:
        return np.zeros(x.shape + x.shape, dtype=x.dtype)
    return np.stack(columns, axis=-1).reshape(x.shape + x.shape)


def jacobian(g, x, *args):
    """The Jacobian of ``g(x, *args)`` at ``x``.

    ``g`` returns a float array (Jacobian of shape ``out.shape + x.shape``) or
    a float (the gradient, shape ``x.shape``), or returns None and writes its
    last argument, a float output array (the Jacobian of what it writes there).
    The other arguments are constants. Forward mode (one tangent per entry of
    ``x``) or reverse mode (one pullback per entry of the result), whichever
    needs fewer passes.
    """
    disp = _dispatcher(g, "jacobian")
    x = _point(x, "jacobian")
    consts = _plain_consts(args, disp)
    restype = _return_type(disp, (x, *consts))
    if isinstance(restype, types.Optional):     # (np.linalg.matrix_power's result)
        restype = restype.type
    writes_out = restype == types.none
    name = disp.py_func.__qualname__
    if writes_out and not (consts and isinstance(consts[-1], np.ndarray)
                           and consts[-1].dtype in (np.float32, np.float64)):
        raise TypeError(f"jacobian: '{name}' returns None, so its last argument must be "
                        f"the float array it writes")
    if not writes_out and not isinstance(restype, (types.Float, types.Array)):
        raise TypeError(f"jacobian: '{name}' returns {restype}; it needs a function "
                        f"returning a float or a float array, or writing an output array")
    # Every call runs on copies of the arguments' initial values (g may update
    # x, or accumulate into its output, in place); the caller's arrays end as
    # after one call of g.
    values = (x, *consts)
    initial = _fresh(values)

    def keep(last):
        for mine, theirs in zip(last, values):
            if isinstance(theirs, np.ndarray) and theirs.flags.writeable:
                theirs[...] = mine          # (g cannot write a read-only array)

    last = ()
    if writes_out and isinstance(x, np.ndarray) and consts[-1].size < x.size:
        jac, last = _jacobian_of_writes_by_rows(disp, initial)
        keep(last)
        return jac
    if not writes_out:
        last = _fresh(initial)
        out = disp(*last)
        if np.size(out) < np.size(x):
            keep(last)
            return _jacobian_by_rows(disp, initial[0], initial[1:], out, restype)
    columns = []
    for direction in _basis(x):
        last = _fresh(initial)
        x_pass, *consts_pass = last
        if writes_out:
            dout = np.zeros_like(consts_pass[-1])
            autodiff(Forward, disp, Duplicated(x_pass, direction), *consts_pass[:-1],
                     Duplicated(consts_pass[-1], dout))
            columns.append(dout)
        else:
            (tangent,) = autodiff(Forward, disp, Duplicated(x_pass, direction), *consts_pass)
            columns.append(tangent)
    keep(last)
    if not isinstance(x, np.ndarray):
        return columns[0]               # (a float for a float result, as gradient's)
    if not columns:                     # an empty x
        result = consts[-1] if writes_out else out
        return np.zeros(np.shape(result) + x.shape, dtype=x.dtype)
    jac = np.stack([np.ravel(c) for c in columns], axis=-1)
    return jac.reshape(np.shape(columns[0]) + x.shape)


def _jacobian_by_rows(disp, x, consts, out, restype):
    """Reverse mode: row i of the Jacobian is the pullback of unit vector e_i."""
    _, pullback = vjp(disp, x, *[Const(c) for c in consts])
    if not isinstance(out, np.ndarray):
        row = pullback(type(out)(1.0))[0]
        # (of the result's dtype, as forward mode's columns are: the compiled one,
        # since Numba returns a float32 result as a Python float)
        return row.astype(np.dtype(str(restype)), copy=False) if isinstance(row, np.ndarray) \
            else row
    return _stacked_rows([np.asarray(pullback(e)[0]).ravel() for e in _basis(out)], out, x)


def _stacked_rows(rows, out, x):
    """The Jacobian of ``out`` with respect to ``x`` from its rows (flat), of
    ``out``'s dtype (as forward mode's columns are)."""
    if not rows:
        return np.zeros(out.shape + np.shape(x), dtype=out.dtype)
    return np.stack(rows).reshape(out.shape + np.shape(x)).astype(out.dtype, copy=False)


def _jacobian_of_writes_by_rows(disp, initial):
    """Reverse mode for a function writing its last argument (an array ``x``):
    row i is the derivative of entry i of what it writes there, seeded in that
    argument's shadow. Returns the Jacobian and the arguments of the last pass."""
    x, out = initial[0], initial[-1]
    rows, last = [], _fresh(initial)
    for seed in _basis(out):
        last = _fresh(initial)
        dx = np.zeros_like(x)
        autodiff(Reverse, disp, Duplicated(last[0], dx), *last[1:-1],
                 Duplicated(last[-1], seed))
        rows.append(dx.ravel())
    return _stacked_rows(rows, out, x), last


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


# -- vjp: functions returning arrays and tuples ---------------------------------------------
def _pair(out, g):
    """sum(out * g) over the floats and arrays of a result (tuples included)."""


@numba.extending.overload(_pair)
def _ol_pair(out, g):
    if isinstance(out, types.Array) and out.ndim == 0:
        return lambda out, g: out[()] * g[()]
    if isinstance(out, types.Array):
        return lambda out, g: (out * g).sum()
    if isinstance(out, types.Float):
        return lambda out, g: out * g
    if isinstance(out, (types.Integer, types.Boolean, types.NoneType)):
        return lambda out, g: 0.0
    if isinstance(out, types.BaseTuple):
        terms = " + ".join(f"_pair(out[{i}], g[{i}])" for i in range(len(out))) or "0.0"
        namespace = {"_pair": _pair}
        exec(f"def impl(out, g):\n    return {terms}\n", namespace)
        return namespace["impl"]
    return None


_pullback_objectives: dict = {}


def _objective(disp, n):
    """``lambda *args, g: _pair(f(*args), g)`` for ``n`` arguments (Numba fills
    in the defaults of the others): reverse mode of it gives J^T g."""
    found = _pullback_objectives.get((disp, n))
    if found is None:
        names = ", ".join(f"a{i}" for i in range(n))
        namespace = {"f": disp, "_pair": _pair}
        exec(f"def objective({names}{', ' if n else ''}g):\n"
             f"    return _pair(f({names}), g)\n", namespace)
        objective = namespace["objective"]
        objective.__qualname__ = f"vjp({disp.py_func.__qualname__})"
        found = _pullback_objectives[disp, n] = numba.njit(objective)
    return found


def _fresh(values):
    """``values`` (a list or tuple) with their arrays copied, laid out alike
    (Numba's types keep layouts), in tuples and lists too, and ``Const``
    annotations kept."""
    def fresh(v):
        if isinstance(v, np.ndarray):
            return v.copy(order="K")
        if type(v) is Const:
            return Const(fresh(v.val))
        if isinstance(v, list):
            return [fresh(x) for x in v]
        if isinstance(v, tuple):
            items = [fresh(x) for x in v]
            return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
        return v
    return type(values)(fresh(v) for v in values)


def forget(disp):
    """Drop the objectives built around ``disp`` (it was recompiled)."""
    for key in [k for k in _pullback_objectives if k[0] is disp]:
        del _pullback_objectives[key]


pipeline.RECOMPILE_HOOKS.append(forget)


def _differentiable(v) -> bool:
    return _is_float_scalar(v) or (isinstance(v, np.ndarray) and v.dtype in
                                   (np.float32, np.float64))


def _holds_floats(v) -> bool:
    """A container (tuple, list, dictionary, jitclass object) with float leaves."""
    if isinstance(v, np.ndarray):
        return False
    if isinstance(v, (tuple, list)):
        return any(_differentiable(x) or _holds_floats(x) for x in v)
    return any(a.dtype.kind == "f" for a in arrays_in(v))


def _check_cotangent(g, out, where="g"):
    if isinstance(out, tuple):
        if not isinstance(g, tuple) or len(g) != len(out):
            raise ValueError(f"pullback: {where} must be a tuple of {len(out)} cotangents, "
                             f"like the result")
        return tuple(_check_cotangent(gi, oi, f"{where}[{i}]")
                     for i, (gi, oi) in enumerate(zip(g, out)))
    if isinstance(out, np.ndarray):
        if isinstance(g, tuple):
            raise ValueError(f"pullback: {where} must be one array of shape {out.shape}, like "
                             f"the result, not a tuple")
        g = np.asarray(g)
        if g.dtype.kind not in "fiub":
            raise TypeError(f"pullback: {where} must hold real numbers, like the result; got "
                            f"dtype {g.dtype}")
        if g.shape != out.shape:
            raise ValueError(f"pullback: {where} has shape {g.shape}; the result has shape "
                             f"{out.shape}")
        return np.asarray(g, dtype=out.dtype, order="C")
    if isinstance(out, (float, np.floating)):
        if isinstance(g, np.ndarray) and g.shape == () and g.dtype.kind in "fiu":
            g = g[()]                   # (a 0-d array has a float's shape, as in JAX)
        if not isinstance(g, (float, int, np.floating, np.integer)):
            raise TypeError(f"pullback: {where} must be a float, like the result")
        return type(out)(g)
    return out             # an integer or None: carries no derivative


def _described(out) -> str:
    if isinstance(out, tuple):
        return "a tuple of " + ", ".join(_described(o) for o in out)
    if isinstance(out, np.ndarray):
        return f"an array of {out.dtype}"
    return type(out).__name__


def _cotangent_shaped(out) -> bool:
    """Whether ``out`` is what a cotangent can be shaped like (integers and None
    carry no derivative)."""
    if isinstance(out, tuple):
        return all(_cotangent_shaped(o) for o in out)
    if isinstance(out, (complex, np.complexfloating)) or \
            (isinstance(out, np.ndarray) and out.dtype.kind == "c"):
        return False        # (complex results are not differentiated)
    return out is None or isinstance(out, (np.ndarray, float, int, np.number, bool, np.bool_))


def vjp(f, *args):
    """``out, pullback = vjp(f, *args)``: the result of ``f(*args)`` and a
    function mapping a cotangent ``g`` shaped like ``out`` (a float, an array or
    a tuple of them) to a tuple with one cotangent per argument: ``J^T g`` for
    float scalars and float arrays, None for ``Const(v)`` and other values.
    The pullback can be called many times (each call runs ``f`` once more),
    always at the point ``out`` was computed at: the arrays among ``args`` are
    copied here, so changing them afterwards (an optimizer's step in place)
    does not move the pullback."""
    disp = _dispatcher(f, "vjp")
    values = _fresh([a.val if isinstance(a, Annotation) else a for a in args])
    for i, a in enumerate(args):
        if isinstance(a, Annotation) and type(a) is not Const:
            raise TypeError(f"vjp: argument {i}: pass values (or Const(v) for what is not "
                            f"differentiated), not {type(a).__name__}")
    wrt = [i for i, (a, v) in enumerate(zip(args, values))
           if type(a) is not Const and _differentiable(v)]
    for i, (a, v) in enumerate(zip(args, values)):
        if type(a) is not Const and i not in wrt and _holds_floats(v):
            raise TypeError(f"vjp: argument {i} ({type(v).__name__}) holds floats (in arrays "
                            f"or as scalars), and vjp differentiates float scalars and float "
                            f"arrays passed themselves: pass its arrays as arguments of their "
                            f"own, or wrap it in Const(...) to leave it undifferentiated")
    out = disp(*_fresh(values))
    if not _cotangent_shaped(out):
        raise UnsupportedError(f"vjp: '{getattr(disp, '__name__', disp)}' returns "
                               f"{_described(out)}; vjp differentiates functions returning "
                               f"real floats, arrays or tuples of them")
    objective = _objective(disp, len(args))

    def pullback(g):
        g = _check_cotangent(g, out)
        annotated, shadows = [], {}
        for i, v in enumerate(_fresh(values)):      # (f may update them in place)
            if i not in wrt:
                annotated.append(Const(v))
            elif isinstance(v, np.ndarray):
                shadows[i] = np.zeros_like(v)
                annotated.append(Duplicated(v, shadows[i]))
            else:
                annotated.append(Active(v))
        (grads,) = autodiff(Reverse, objective, *annotated, Const(g))
        return tuple(shadows[i] if i in shadows else grads[i] if i in wrt else None
                     for i in range(len(values)))
    return out, pullback
