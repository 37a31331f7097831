"""Check enzpy on one program of ``numpy_corpus`` in one mode against finite differences.

Shared by ``scripts/numpy_probe.py`` (all programs, worker processes, a summary) and
``tests/test_numpy.py`` (pytest). One entry point::

    status, detail = check(program, mode)      # mode: "reverse", "forward" or "hvp"

status is one of
  ok       enzpy agrees with the reference
  WRONG    the numbers differ (the max relative error and the worst entry are in detail)
  refused  enzpy.UnsupportedError (the start of its message)
  error    any other exception (its type and message; "harness: ..." when the reference
           computation itself failed)
  n/a      the mode does not apply (hvp: a program not marked hvp=True)

``run(program, mode)`` returns the same as a dict with the error measure, the seconds spent
and, for a refusal, the whole message (what the probe records).

reverse  programs returning a float: Duplicated shadows (same layout as the array) for the
         wrt arrays, Active for the wrt scalars, Const for the rest, compared with central
         differences of the program. Programs returning an array or a tuple:
         ``out, pullback = enzpy.vjp(f, *args)`` (Const for the non-wrt arguments), a random
         cotangent g shaped like ``out``, and ``pullback(g)`` for each wrt argument compared
         with the central differences of ``<g, f(args)>``. References are computed in float64
         (float32 arguments are cast); rtol 1e-4 for float64 programs and 1e-2 for programs
         with float32 differentiated arguments.
forward  the tangent along a random direction (Duplicated(x, t) for every wrt argument)
         against the float64 central difference along that direction, elementwise for
         array or tuple results.
hvp      enzpy.hvp(f, x, v, *rest) for hvp=True programs (x = the first argument, a float
         result) against the central difference of enzpy's reverse-mode gradient along v
         (finite differences of finite differences if reverse mode fails).

The error measure is per argument (or result) normwise: max|got - ref| / max(max|ref|,
max|got|, 1e-8). When the error exceeds rtol at step 1e-6, steps 1e-5 and 1e-7 are tried
and the best is kept.
"""
from __future__ import annotations

import os
import time
import traceback
import zlib
from dataclasses import replace

import numpy as np

MODES = ("reverse", "forward", "hvp")
STATUSES = ("ok", "WRONG", "refused", "error", "n/a")
STEPS = (1e-6, 1e-5, 1e-7)


# -- arrays and finite differences --------------------------------------------------------
def zeros_like_layout(a):
    """Zeros with the shape, dtype and strides of ``a`` (C, Fortran or a strided view)."""
    if a.flags.c_contiguous:
        return np.zeros(a.shape, a.dtype)
    if a.flags.f_contiguous:
        return np.zeros(a.shape, a.dtype, order="F")
    lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    buf = np.zeros((hi - lo) // a.itemsize + 1, a.dtype)
    return np.ndarray(a.shape, a.dtype, buffer=buf, offset=-lo, strides=a.strides)


def like_layout(a, values):
    out = zeros_like_layout(a)
    out[...] = values
    return out


def is_float_scalar(v):
    return isinstance(v, (float, np.floating)) and not isinstance(v, bool)


def is_f32(v):
    return (isinstance(v, np.ndarray) and v.dtype == np.float32) or isinstance(v, np.float32)


def to64(v):
    if isinstance(v, np.ndarray) and v.dtype == np.float32:
        return v.astype(np.float64)
    if isinstance(v, np.float32):
        return float(v)
    return v


def copy_args(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def copy_args_layout(args):
    return [like_layout(a, a) if isinstance(a, np.ndarray) else a for a in args]


def flat_result(r):
    """A function result as a flat float64 vector (None stays None)."""
    if r is None:
        return None
    if isinstance(r, tuple):
        parts = [flat_result(x) for x in r]
        if any(p is None for p in parts):
            return None
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(r, np.ndarray):
        return np.asarray(r, dtype=np.float64).ravel()
    return np.array([float(r)])


def rel_error(got, ref):
    got = np.asarray(got, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if got.shape != ref.shape:
        return np.inf, -1
    if got.size == 0:
        return 0.0, -1
    if not np.all(np.isfinite(got)):
        return np.inf, int(np.argmax(~np.isfinite(got)))
    diff = np.abs(got - ref)
    denom = max(float(np.max(np.abs(ref))), float(np.max(np.abs(got))), 1e-8)
    k = int(np.argmax(diff))
    return float(diff[k]) / denom, k


def _is_float_value(v):
    return is_float_scalar(v) or (isinstance(v, np.ndarray) and v.dtype.kind == "f")


def random_cotangent(out, rng):
    """A random cotangent shaped like a result: a float, a float array or a tuple of them
    (0 for the parts that carry no derivative, e.g. integers)."""
    if isinstance(out, tuple):
        return tuple(random_cotangent(o, rng) for o in out)
    if isinstance(out, np.ndarray) and out.dtype.kind == "f":
        return rng.standard_normal(out.shape).astype(out.dtype)
    if is_float_scalar(out):
        return type(out)(rng.standard_normal())
    return 0


def pair(result, g):
    """<g, result> in float64, summed over the float parts of a (tuple) result."""
    if isinstance(result, tuple):
        return sum(pair(r, gi) for r, gi in zip(result, g))
    if isinstance(result, np.ndarray) and result.dtype.kind == "f":
        return float(np.sum(np.asarray(result, np.float64) * np.asarray(g, np.float64)))
    if is_float_scalar(result):
        return float(result) * float(g)
    return 0.0


class Reference:
    """The program evaluated in float64 (or natively if that fails, e.g. float32 jitclass
    fields), for finite differences. ``objective`` maps a result to the float that is
    differentiated (default: the result itself, a float)."""

    def __init__(self, program, args, objective=float):
        self.fn = program.fn
        self.objective = objective
        self.native = False
        self.base = [to64(a) for a in args]
        try:
            self.fn(*copy_args(self.base))
        except Exception:            # noqa: BLE001 - no float64 specialization: stay native
            self.native = True
            self.base = copy_args(args)

    def scale(self, h):
        return h * 1000.0 if self.native else h

    def call(self, args):
        return self.fn(*args)

    def gradient(self, wrt, h):
        """Central differences of the objective with respect to args[wrt]."""
        h = self.scale(h)
        grads = {}
        for i in wrt:
            x = self.base[i]
            if isinstance(x, np.ndarray):
                g = np.zeros(x.shape)
                for idx in np.ndindex(*x.shape):
                    vals = []
                    for sign in (1.0, -1.0):
                        trial = copy_args(self.base)
                        trial[i][idx] += sign * h
                        vals.append(self.objective(self.call(trial)))
                    g[idx] = (vals[0] - vals[1]) / (2.0 * h)
                grads[i] = g
            else:
                vals = []
                for sign in (1.0, -1.0):
                    trial = copy_args(self.base)
                    trial[i] = type(x)(x + sign * h)
                    vals.append(self.objective(self.call(trial)))
                grads[i] = np.array((vals[0] - vals[1]) / (2.0 * h))
        return grads

    def directional(self, tangents, h):
        """Central difference of the (flattened) result along the tangents."""
        h = self.scale(h)
        outs = []
        for sign in (1.0, -1.0):
            trial = copy_args(self.base)
            for i, t in tangents.items():
                if isinstance(trial[i], np.ndarray):
                    trial[i] = trial[i] + sign * h * np.asarray(t, dtype=trial[i].dtype)
                else:
                    trial[i] = type(trial[i])(trial[i] + sign * h * float(t))
            outs.append(flat_result(self.call(trial)))
        return (outs[0] - outs[1]) / (2.0 * h)


# -- the three modes ----------------------------------------------------------------------
class Wrong(Exception):
    """enzpy's numbers differ from the reference."""


class Harness(Exception):
    """The reference itself could not be computed (not enzpy's fault)."""


def _rtol(program, args):
    return 1e-2 if any(is_f32(args[i]) for i in program.wrt) else 1e-4


def _describe(err, k, got, ref, label=""):
    if k < 0:
        return f"max rel err {err:.3g}{label}"
    g = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if g.shape != r.shape:
        return f"shape mismatch{label}: enzpy {np.shape(got)} vs reference {np.shape(ref)}"
    return (f"max rel err {err:.3g}{label} at [{k}]: enzpy {g[k]:.10g} vs fd {r[k]:.10g}"
            f" (|ref|max {np.max(np.abs(r)):.3g})")


def _best_of_steps(compute_ref, got, rtol, steps=STEPS):
    """Compare ``got`` with references at several steps; the best (err, k, ref)."""
    best = None
    for h in steps:
        try:
            ref = compute_ref(h)
        except Exception as exc:     # noqa: BLE001
            raise Harness(f"reference failed: {type(exc).__name__}: {exc}") from exc
        err, k = rel_error(got, ref)
        if best is None or err < best[0]:
            best = (err, k, ref)
        if err <= rtol:
            break
    return best


def _annotate_reverse(program, args):
    from enzpy import Active, Const, Duplicated
    shadows, annotated = {}, []
    for i, a in enumerate(args):
        if i in program.wrt and isinstance(a, np.ndarray):
            shadows[i] = zeros_like_layout(a)
            annotated.append(Duplicated(a, shadows[i]))
        elif i in program.wrt:
            annotated.append(Active(a))
        else:
            annotated.append(Const(a))
    return shadows, annotated


def enzpy_gradient(program, args, wrt=None):
    """enzpy's reverse-mode gradient of the scalar program: {arg index: array}."""
    import enzpy
    prog = program if wrt is None else replace(program, wrt=tuple(wrt))
    work = copy_args_layout(args)
    shadows, annotated = _annotate_reverse(prog, work)
    (grads,) = enzpy.autodiff(enzpy.Reverse, prog.fn, *annotated)
    out = {}
    for i in prog.wrt:
        out[i] = np.array(shadows[i]) if i in shadows else np.array(grads[i], dtype=np.float64)
    return out


def enzpy_vjp(program, args, rng):
    """enzpy.vjp of the program at ``args`` with a random cotangent: (g, {arg index: J^T g})."""
    import enzpy
    work = copy_args_layout(args)
    values = [a if i in program.wrt else enzpy.Const(a) for i, a in enumerate(work)]
    out, pullback = enzpy.vjp(program.fn, *values)
    g = random_cotangent(out, rng)
    cotangents = pullback(g)
    got = {}
    for i in program.wrt:
        c = cotangents[i]
        if c is None:
            raise Wrong(f"pullback returned None for wrt argument {i}")
        got[i] = np.array(c, dtype=np.float64)
    return g, got


def _compare_gradients(ref, got, rtol):
    worst = None
    for i in sorted(got):
        err, k, r = _best_of_steps(lambda h: ref.gradient((i,), h)[i], got[i], rtol)
        if worst is None or err > worst[0]:
            worst = (err, k, got[i], r, i)
    return worst


def check_reverse(program):
    args = program.make_args()
    rtol = _rtol(program, args)
    label = ""
    if program.returns == "scalar":
        got = enzpy_gradient(program, args)
        objective = float
    else:
        rng = np.random.default_rng(zlib.crc32(program.name.encode()) + 2)
        g, got = enzpy_vjp(program, args, rng)
        objective = lambda result: pair(result, g)    # noqa: E731
        label = ", vjp"
    try:
        ref = Reference(program, args, objective)
    except Exception as exc:         # noqa: BLE001
        raise Harness(str(exc)) from exc
    err, k, g_, r, i = _compare_gradients(ref, got, rtol)
    if err > rtol:
        raise Wrong(_describe(err, k, g_, r, f" (arg {i}, rtol {rtol:g}{label})"))
    return "ok", f"max rel err {err:.2g}{label}", err


def check_forward(program):
    import enzpy
    from enzpy import Const, Duplicated
    args = program.make_args()
    rtol = _rtol(program, args)
    rng = np.random.default_rng(zlib.crc32(program.name.encode()))
    work = copy_args_layout(args)
    tangents, annotated = {}, []
    for i, a in enumerate(work):
        if i in program.wrt:
            if isinstance(a, np.ndarray):
                t = like_layout(a, rng.standard_normal(a.shape).astype(a.dtype))
            else:
                t = type(a)(rng.standard_normal())
            tangents[i] = t
            annotated.append(Duplicated(a, t))
        else:
            annotated.append(Const(a))
    saved = {i: (np.array(t) if isinstance(t, np.ndarray) else t) for i, t in tangents.items()}
    (tangent,) = enzpy.autodiff(enzpy.Forward, program.fn, *annotated)
    got = flat_result(tangent)
    if got is None:
        raise Wrong(f"tangent is None (result type {program.returns})")
    try:
        ref = Reference(program, args)
    except Exception as exc:         # noqa: BLE001
        raise Harness(str(exc)) from exc
    err, k, r = _best_of_steps(lambda h: ref.directional(saved, h), got, rtol)
    if err > rtol:
        raise Wrong(_describe(err, k, got, r, f" (rtol {rtol:g})"))
    return "ok", f"max rel err {err:.2g}", err


def check_hvp(program):
    import enzpy
    if not program.hvp:
        return "n/a", "", None
    if program.wrt[0] != 0:
        raise Harness("hvp=True needs the first wrt argument to be argument 0")
    if program.returns != "scalar":
        raise Harness("hvp=True needs a program returning a float")
    args = program.make_args()
    rtol = _rtol(program, args)
    x, rest = args[0], args[1:]
    rng = np.random.default_rng(zlib.crc32(program.name.encode()) + 1)
    if isinstance(x, np.ndarray):
        v = rng.standard_normal(x.shape).astype(x.dtype)
    else:
        v = type(x)(rng.standard_normal())
    hv = enzpy.hvp(program.fn, np.array(x) if isinstance(x, np.ndarray) else x, v,
                   *copy_args(rest))
    got = np.asarray(hv, dtype=np.float64)

    # Reference: central difference of the reverse gradient along v, in float64.
    base = [to64(a) for a in args]
    v64 = np.asarray(v, dtype=np.float64) if isinstance(v, np.ndarray) else float(v)

    def shifted(s):
        trial = copy_args(base)
        if isinstance(trial[0], np.ndarray):
            trial[0] = trial[0] + s * v64
        else:
            trial[0] = float(trial[0] + s * v64)
        return trial

    label = ""
    try:
        def ref_at(h):
            gp = enzpy_gradient(program, shifted(h), wrt=(0,))[0]
            gm = enzpy_gradient(program, shifted(-h), wrt=(0,))[0]
            return (gp - gm) / (2.0 * h)
        ref_at(1e-5)
        steps = (1e-5, 1e-4, 1e-6)
    except Exception:                # noqa: BLE001 - reverse mode fails: FD of FD
        label = ", ref: fd of fd"
        rtol = max(rtol, 1e-3)

        def ref_at(h):
            def grad(trial):
                ref = Reference(program, trial)
                return ref.gradient((0,), 1e-5)[0]
            return (grad(shifted(h)) - grad(shifted(-h))) / (2.0 * h)
        steps = (1e-4, 1e-3)
    err, k, r = _best_of_steps(ref_at, got, rtol, steps)
    if err > rtol:
        raise Wrong(_describe(err, k, got, r, f" (rtol {rtol:g}{label})"))
    return "ok", f"max rel err {err:.2g}{label}", err


CHECKS = {"reverse": check_reverse, "forward": check_forward, "hvp": check_hvp}


def run(program, mode):
    """One mode of one program: a result dict (status, detail, err, seconds and, for a
    refusal, the whole message), never an exception."""
    import enzpy
    t0 = time.perf_counter()
    message = None
    try:
        status, detail, err = CHECKS[mode](program)
    except Wrong as exc:
        status, detail, err = "WRONG", str(exc), None
    except Harness as exc:
        status, detail, err = "error", "harness: " + str(exc)[:300], None
    except enzpy.UnsupportedError as exc:
        status, detail, err = "refused", " ".join(str(exc).split())[:150], None
        message = " ".join(str(exc).split())[:1000]
    except Exception as exc:         # noqa: BLE001
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" [{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}]" if tb else ""
        status = "error"
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}{where}"
        err = None
    result = {"status": status, "detail": detail, "err": err,
              "seconds": round(time.perf_counter() - t0, 3)}
    if message is not None:
        result["message"] = message      # the whole refusal, for grouping
    return result


def check(program, mode):
    """``(status, detail)`` of one program in one mode (see the module docstring)."""
    if mode not in CHECKS:
        raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
    r = run(program, mode)
    detail = r.get("message") or r["detail"]
    return r["status"], detail
