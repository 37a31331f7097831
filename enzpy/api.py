"""The public API: ``autodiff`` with Enzyme.jl's modes and annotations."""
from __future__ import annotations

import inspect
import os
import logging
import threading
import time
from dataclasses import dataclass, field

import numba
import numpy as np
from numba import types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from . import backend, frontend
from .cache import (STATS, ModuleBuilder, entry_function, forward_entry_function,
                    tangent_function)
from .augment import INLINE_LIMIT
from .errors import UnsupportedError
from .irtext import read_module_text

log = logging.getLogger("enzpy")


# -- modes and annotations -----------------------------------------------------
class Mode:
    def __init__(self, name, reverse, with_primal):
        self.name, self.reverse, self.with_primal = name, reverse, with_primal

    def __repr__(self):
        return self.name


Reverse = Mode("Reverse", True, False)
ReverseWithPrimal = Mode("ReverseWithPrimal", True, True)
Forward = Mode("Forward", False, False)
ForwardWithPrimal = Mode("ForwardWithPrimal", False, True)


class Annotation:
    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def __repr__(self):
        return f"{type(self).__name__}({self.val!r})"


class Active(Annotation):
    """A float scalar whose adjoint ``autodiff`` returns."""


class Const(Annotation):
    """An argument that is not differentiated."""


class Duplicated(Annotation):
    """An array ``val`` with its shadow ``dval``; the shadow accumulates (``dval +=``)."""
    __slots__ = ("dval",)

    def __init__(self, val, dval):
        super().__init__(val)
        self.dval = dval

    def __repr__(self):
        return f"Duplicated({self.val!r}, {self.dval!r})"


# -- build reports -------------------------------------------------------------
@dataclass
class BuildReport:
    function: str
    signature: str
    timings: dict = field(default_factory=dict)   # stage -> seconds
    primal_instructions: int = 0
    peak_tape_bytes: int = 0          # the largest tape of any call so far
    derivative_functions: int = 0
    module_bytes: int = 0

    @property
    def total(self):
        return sum(v for k, v in self.timings.items() if k != "numba_compile")

    def __str__(self):
        stages = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items())
        return (f"{self.function}{self.signature}: {stages}; "
                f"{self.primal_instructions} primal instructions, "
                f"{self.derivative_functions} derivative functions")


class _Stopwatch:
    def __init__(self, report):
        self.report = report

    def stage(self, name):
        watch = self

        class _Stage:
            def __enter__(self):
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                watch.report.timings[name] = time.perf_counter() - self.t
        return _Stage()


# -- the entry cache -------------------------------------------------------------
class _Entry:
    __slots__ = ("call", "active_positions", "shadow_positions", "report", "alias_checks",
                 "library", "returns_tangent")

    def __init__(self, call, active_positions, shadow_positions, report, alias_checks,
                 library, returns_tangent=False):
        self.returns_tangent = returns_tangent    # forward mode: the call returns a tangent
        self.call = call
        self.library = library            # the machine code ``call`` jumps to
        self.active_positions = active_positions
        self.shadow_positions = shadow_positions
        self.report = report
        # (written, re-read) argument pairs that must not share memory
        self.alias_checks = alias_checks


_entries: dict = {}
_jitted: dict = {}
_build_lock = threading.RLock()
_reports: dict = {}


def _dispatcher(f):
    if isinstance(f, numba.core.dispatcher.Dispatcher):
        return f
    if isinstance(f, Mode):
        raise TypeError("autodiff(mode, f, *args): the function comes second")
    if not callable(f):
        raise TypeError(f"autodiff expects a function, got {type(f).__name__}")
    disp = _jitted.get(f)
    if disp is None:
        disp = _jitted[f] = numba.njit(f)
    return disp


def _annotate(arg):
    return arg if isinstance(arg, Annotation) else Const(arg)


def _check_args(disp, annotated, mode):
    try:
        inspect.signature(disp.py_func).bind(*annotated)
    except TypeError as exc:
        raise TypeError(f"{disp.py_func.__qualname__}: {exc}") from None
    for i, a in enumerate(annotated):
        if isinstance(a, Active) and not mode.reverse:
            raise TypeError(f"argument {i}: {mode.name} mode takes Duplicated(x, dx) for a "
                            f"scalar too (dx is the tangent of x), not Active")
        if isinstance(a, Duplicated) and not mode.reverse and _is_float_scalar(a.val):
            if not _is_float_scalar(a.dval):
                raise TypeError(f"argument {i}: the tangent of a float scalar must be a float "
                                f"scalar, got {type(a.dval).__name__}")
            continue
        if isinstance(a, Active):
            if isinstance(a.val, np.ndarray):
                raise TypeError(f"argument {i}: Active expects a float scalar, got an array; "
                                f"use Duplicated(x, dx) for arrays")
            if not _is_float_scalar(a.val):
                raise TypeError(f"argument {i}: Active expects a float scalar "
                                f"(float, numpy.float32 or numpy.float64), got "
                                f"{type(a.val).__name__}")
        elif isinstance(a, Duplicated):
            if not isinstance(a.val, np.ndarray):
                advice = ("use Active for scalars" if mode.reverse else
                          "a float scalar with a float tangent")
                raise TypeError(f"argument {i}: Duplicated expects a numpy array and its "
                                f"shadow, got {type(a.val).__name__}; {advice}")
            if a.val.dtype not in (np.float32, np.float64):
                raise TypeError(f"argument {i}: Duplicated expects a float32 or float64 array, "
                                f"got dtype {a.val.dtype}; pass integer arrays as Const")
            if not isinstance(a.dval, np.ndarray):
                raise TypeError(f"argument {i}: the shadow of a Duplicated array must be a "
                                f"numpy array, got {type(a.dval).__name__}")
    _check_shadows(annotated)


def _check_shadows(args):
    """Shadows must fit their arrays exactly: same shape, dtype and strides."""
    for i, a in enumerate(args):
        if type(a) is not Duplicated or not isinstance(a.val, np.ndarray):
            continue
        x, dx = a.val, a.dval
        if dx.shape != x.shape:
            raise ValueError(f"argument {i}: the shadow's shape {dx.shape} does not fit the "
                             f"array's shape {x.shape}")
        if dx.dtype != x.dtype:
            raise ValueError(f"argument {i}: the shadow's dtype {dx.dtype} does not fit the "
                             f"array's dtype {x.dtype}")
        if dx.strides != x.strides:
            raise ValueError(f"argument {i}: the shadow's layout (strides {dx.strides}) does "
                             f"not fit the array's layout (strides {x.strides}); make the "
                             f"shadow the same way as the array, e.g. np.zeros_like(base)"
                             f"[same slice]")
        if not dx.flags.writeable:
            raise ValueError(f"argument {i}: the shadow is read-only; it must be writeable")
        if np.may_share_memory(x, dx):
            raise ValueError(f"argument {i}: the shadow shares memory with the array")


def _is_float_scalar(x) -> bool:
    return isinstance(x, (float, np.floating)) and not isinstance(x, np.float16)


_SCALARS = {float, int, bool, np.float64, np.float32, np.int64, np.int32, np.int16,
            np.int8, np.uint64, np.uint32, np.uint16, np.uint8, np.bool_, complex}
_ANNOTATIONS = (Active, Const, Duplicated)


def _signature_key(arg):
    """A cheap key for the argument's annotation and Numba type."""
    cls = type(arg)
    if cls in _ANNOTATIONS:
        value = arg.val
    else:
        if isinstance(arg, type) and issubclass(arg, Annotation):
            raise TypeError(f"annotation {arg.__name__} must wrap a value, "
                            f"e.g. {arg.__name__}(x)")
        cls, value = Const, arg
    vt = type(value)
    if vt in _SCALARS:
        return (cls, vt, type(arg.dval)) if cls is Duplicated else (cls, vt)
    if cls is Duplicated:
        return (cls, _type_key(value), _type_key(arg.dval))
    return (cls, _type_key(value))


def _type_key(value):
    """What Numba's type of ``value`` depends on; much cheaper than ``typeof`` for arrays."""
    if type(value) is np.ndarray:
        flags = value.flags
        return (value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous,
                flags.writeable, flags.aligned)
    return numba.typeof(value)


def autodiff(mode, f, *args):
    """Differentiate ``f`` at ``args`` (each ``Active``, ``Const`` or ``Duplicated``).

    ``Reverse``: ``((d1, d2, ...),)`` with ``None`` for non-Active arguments;
    ``ReverseWithPrimal``: ``((d1, ...), primal)``. ``Forward``: ``(tangent,)``,
    the directional derivative of the return along the tangents of the
    ``Duplicated`` arguments (a ``Duplicated`` array's shadow receives the
    tangent of what ``f`` writes there); ``ForwardWithPrimal``: ``(tangent, primal)``.
    """
    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff: the first argument must be a mode (Reverse, "
                        f"ReverseWithPrimal, Forward, ForwardWithPrimal), got {mode!r}")
    disp = _dispatcher(f)
    key = (disp, mode.reverse, tuple(map(_signature_key, args)))
    entry = _entries.get(key)
    if entry is None:
        annotated = [_annotate(a) for a in args]
        _check_args(disp, annotated, mode)
        entry = _build(disp, _typed(annotated), key, mode)
    else:
        STATS.hits += 1
        if entry.shadow_positions:
            _check_shadows(args)
    values = [a.val if type(a) in _ANNOTATIONS else a for a in args]
    _check_aliases(entry, values)
    values += [args[i].dval for i in entry.shadow_positions]
    out = entry.call(*values)
    if not mode.reverse:
        tangent = out[0] if entry.returns_tangent else None
        return (tangent, out[-2]) if mode.with_primal else (tangent,)
    report = entry.report
    if out[-1] > report.peak_tape_bytes:
        report.peak_tape_bytes = out[-1]
    n = len(entry.active_positions)
    grads = [None] * len(args)
    for pos, value in zip(entry.active_positions, out[:n]):
        grads[pos] = value
    grads = tuple(grads)
    return (grads, out[n]) if mode.with_primal else (grads,)


def _check_aliases(entry, values):
    for written, reread in entry.alias_checks:
        if np.may_share_memory(values[written], values[reread]):
            raise ValueError(
                f"arguments {written} and {reread} share memory: the function writes "
                f"argument {written}, and the derivative reads argument {reread} again "
                f"during the reverse sweep; pass distinct arrays")


@dataclass
class _Primal:
    """A function lowered by Numba, read into enzpy's IR model."""
    low: frontend.Lowered
    model: object
    lowered: dict
    blocks: dict


def _lower(watch, disp, argtypes) -> _Primal:
    with watch.stage("numba_compile"):
        low = frontend.lower(disp, argtypes)
    with watch.stage("capture"):
        module, lowered = frontend.collect_module(low)
    with watch.stage("cleanup"):
        blocks = frontend.original_blocks(module)
        frontend.cleanup(module)
    with watch.stage("read_ir"):
        model = read_module_text(str(module))
    watch.report.primal_instructions = _size(model)
    _dump(disp, "primal", model.text)
    return _Primal(low, model, lowered, blocks)


def _size(model) -> int:
    return sum(len(b.instructions) for fn in model.functions.values() for b in fn.blocks)


def _check_return(low, forward):
    restype = low.restype
    if isinstance(restype, (types.Float, types.Integer, types.Boolean)) or \
            restype == types.none:
        return
    if forward and isinstance(restype, types.Array) and isinstance(restype.dtype, types.Float):
        return
    returned = "a scalar, None or a float array" if forward else "a scalar or None"
    raise UnsupportedError(f"function '{low.name}' returns {restype}; enzpy "
                           f"differentiates functions returning {returned}")


def _generate(builder, symbol, activity, name):
    try:
        return builder.build(symbol, activity)
    except UnsupportedError as exc:
        if f"'{name}'" in str(exc):
            raise
        raise UnsupportedError(f"differentiating '{name}': {exc}") from None


def _typed(annotated) -> list:
    """(annotation class, Numba type of the value, Numba type of the shadow or None)."""
    return [(type(a), numba.typeof(a.val),
             numba.typeof(a.dval) if type(a) is Duplicated else None) for a in annotated]


def _build(disp, signature, key, mode) -> _Entry:
    """The derivative of ``disp`` for ``signature`` (see ``_typed``) in ``mode``."""
    with _build_lock, global_compiler_lock:
        if key in _entries:             # another thread built it meanwhile
            STATS.hits += 1
            return _entries[key]
        STATS.misses += 1
        argtypes = tuple(ty for _, ty, _ in signature)
        report = BuildReport(disp.py_func.__qualname__, str(argtypes))
        watch = _Stopwatch(report)
        primal = _lower(watch, disp, argtypes)
        low = primal.low
        _check_return(low, not mode.reverse)
        ctx = cpu_target.target_context
        restype = low.restype
        returns_derivative = isinstance(restype, (types.Float, types.Array))
        activity, shadow_types = _activity(ctx, signature, returns_derivative)
        shadows = [i for i, (kind, _, _) in enumerate(signature) if kind is Duplicated]
        if mode.reverse:
            builder, entry_name, text = _reverse_module(
                watch, primal, low.symbol, activity, shadow_types, restype)
            alias_checks = _alias_checks(ctx, builder.readonly, low.symbol, argtypes)
        else:
            with watch.stage("forward"):
                builder = ModuleBuilder(primal.model, primal.lowered, primal.blocks,
                                        mode="forward")
                root = _generate(builder, low.symbol, activity, low.name)
                entry_name = f"enzpy.entry.{next(backend._ids)}.{low.symbol}"
                text = builder.module_text(forward_entry_function(
                    entry_name, root, _return_slot_type(ctx, restype), returns_derivative,
                    *_tangent_params(ctx, signature)))
            alias_checks = []
        _dump(disp, "derivative", text)
        report.derivative_functions = len(builder.derivatives)
        report.module_bytes = len(text)
        library, address = _compile(watch, text, entry_name, builder, primal.model)
        with watch.stage("wrap"):
            adjoint_types = [ty for kind, ty, _ in signature if kind is Active]
            call = backend.numba_entry(address, argtypes + tuple(shadow_types), adjoint_types,
                                       restype, tangent=not mode.reverse and returns_derivative)
        positions = [i for i, (kind, _, _) in enumerate(signature) if kind is Active]
        entry = _Entry(call, positions, shadows, report, alias_checks, library,
                       returns_tangent=not mode.reverse and returns_derivative)
        _entries[key] = entry
        _reports.setdefault(disp.py_func, []).append(report)
        log.info("built %s", report)
        return entry


def _reverse_module(watch, primal, symbol, activity, shadow_types, restype, name=None):
    """(builder, entry name, module text) of the reverse derivative of ``symbol``."""
    ctx = cpu_target.target_context
    with watch.stage("reverse"):
        builder = ModuleBuilder(primal.model, primal.lowered, primal.blocks)
        root = _generate(builder, symbol, activity, name or primal.low.name)
        entry_name = f"enzpy.entry.{next(backend._ids)}.{symbol}"
        text = builder.module_text(entry_function(
            entry_name, root, _return_slot_type(ctx, restype), activity[0] == "dup",
            _flat_types(ctx, shadow_types), _ARRAY_SHADOWED_FIELDS))
    return builder, entry_name, text


def _compile(watch, text, entry_name, builder, model):
    """Machine code of a derivative module: (library, entry address)."""
    with watch.stage("parse"):
        big = [name for name, fn in model.functions.items()
               if sum(len(b.instructions) for b in fn.blocks) > INLINE_LIMIT]
        module = backend.prepare_module(text, entry_name, builder.exported, big)
    codegen = cpu_target.target_context.codegen()
    with watch.stage("optimize"):
        backend.optimize(module, codegen)
    with watch.stage("codegen"):
        library, address = backend.compile_module(module, entry_name, codegen)
        builder.publish(library)
    return library, address


def _build_hvp(disp, x, consts, key) -> _Entry:
    """The Hessian-vector product of ``f(x, *consts)``: reverse mode over the
    tangent function that forward mode writes (its IR is read back and
    differentiated like any Numba function's).

    The entry takes ``(x, *consts, v[, hv, scratch])``: an array x's product
    is accumulated into ``hv`` (``scratch``, like x, receives the gradient
    w.r.t. v, unused); a scalar x's is returned as the adjoint."""
    with _build_lock, global_compiler_lock:
        if key in _entries:
            STATS.hits += 1
            return _entries[key]
        STATS.misses += 1
        ctx = cpu_target.target_context
        argtypes = (numba.typeof(x),) + tuple(numba.typeof(c) for c in consts)
        report = BuildReport(disp.py_func.__qualname__, f"hvp{argtypes}")
        watch = _Stopwatch(report)
        primal = _lower(watch, disp, argtypes)
        low = primal.low
        if not isinstance(low.restype, types.Float):
            raise TypeError(f"hvp: '{low.name}' returns {low.restype}; it needs a function "
                            f"returning a float scalar")
        scalar = isinstance(argtypes[0], types.Float)
        first = _typed([Duplicated(x, x)] + [Const(c) for c in consts])
        activity, _ = _activity(ctx, first, True)
        tx = argtypes[0]
        v_fields = ctx.get_arg_packer([tx]).argument_types
        v_params = [(str(t), f"v.{k}") for k, t in enumerate(v_fields)]
        v_passed = ["v.0"] if scalar else [f"v.{k}" for k in _ARRAY_SHADOWED_FIELDS]
        with watch.stage("forward"):
            tangents = ModuleBuilder(primal.model, primal.lowered, primal.blocks,
                                     mode="forward", share=False)
            root = _generate(tangents, low.symbol, activity, low.name)
            name = f"enzpy.tangent.{next(backend._ids)}.{low.symbol}"
            text = tangents.module_text(tangent_function(
                name, root, _return_slot_type(ctx, low.restype), v_params, v_passed))
        _dump(disp, "tangent", text)
        with watch.stage("read_tangent_ir"):
            model = read_module_text(text)
        # v is Duplicated too (with a scratch shadow): the tangent function
        # writes tangents into it where f writes into x.
        second = _typed([Active(x) if scalar else Duplicated(x, x)] +
                        [Const(c) for c in consts] + [Const(x) if scalar else Duplicated(x, x)])
        argtypes2 = argtypes + (tx,)
        activity2, shadow_types = _activity(ctx, second, True)
        builder, entry_name, text = _reverse_module(
            watch, _Primal(low, model, primal.lowered, primal.blocks), name, activity2,
            shadow_types, low.restype, name=low.name)
        _dump(disp, "hvp", text)
        report.derivative_functions = len(builder.derivatives) + len(tangents.derivatives)
        report.module_bytes = len(text)
        library, address = _compile(watch, text, entry_name, builder, model)
        with watch.stage("wrap"):
            call = backend.numba_entry(address, argtypes2 + tuple(shadow_types),
                                       [tx] if scalar else [], low.restype)
        entry = _Entry(call, [0] if scalar else [], [] if scalar else [0, len(argtypes)], report,
                       _alias_checks(ctx, builder.readonly, name, argtypes2), library)
        _entries[key] = entry
        _reports.setdefault(disp.py_func, []).append(report)
        log.info("built %s", report)
        return entry


# Numba passes an array as (meminfo, parent, nitems, itemsize, data, shape..., strides...):
# the meminfo and the data pointer get shadows.
_ARRAY_SHADOWED_FIELDS = (0, 4)


def _activity(ctx, signature, return_active):
    """Activity of each LLVM parameter of the root function, and the shadow types
    (a Duplicated float scalar, in forward mode, is 'active': its tangent is a scalar)."""
    activity = ["dup" if return_active else "const", "const"]
    shadow_types = []
    for kind, ty, shadow_type in signature:
        width = len(ctx.get_arg_packer([ty]).argument_types)
        if kind is Active:
            activity.append("active")
        elif kind is Duplicated and isinstance(ty, types.Float):
            activity.append("active")
            shadow_types.append(ty)
        elif kind is Duplicated:
            activity.extend("dup" if k in _ARRAY_SHADOWED_FIELDS else "const"
                            for k in range(width))
            shadow_types.append(shadow_type)
        else:
            activity.extend(["const"] * width)
    return activity, shadow_types


def _tangent_params(ctx, signature):
    """The extra parameters of a forward entry, as (LLVM type, name), and the
    names of those passed on as the root's tangents and shadows, in order."""
    params, passed = [], []
    for j, (kind, ty, shadow_type) in enumerate(signature):
        if kind is not Duplicated:
            continue
        if isinstance(ty, types.Float):
            params.append((str(ctx.get_value_type(ty)), f"t{j}"))
            passed.append(f"t{j}")
        else:
            fields = ctx.get_arg_packer([shadow_type]).argument_types
            params += [(str(t), f"t{j}.{k}") for k, t in enumerate(fields)]
            passed += [f"t{j}.{k}" for k in _ARRAY_SHADOWED_FIELDS]
    return params, passed


def _alias_checks(ctx, readonly, symbol, argtypes):
    """Pairs (written array argument, re-read array argument) to check per call."""
    if readonly.unknown_write:
        return []
    owner, index = {}, 2
    for pos, ty in enumerate(argtypes):
        width = len(ctx.get_arg_packer([ty]).argument_types)
        owner.update({index + k: pos for k in range(width)})
        index += width
    arrays = {pos for pos, ty in enumerate(argtypes) if isinstance(ty, types.Array)}
    written = {owner[i] for kind, i in readonly.written[symbol] if kind == "arg" and i in owner}
    return [(w, r) for w in sorted(written & arrays) for r in sorted(arrays - written)]


def _flat_types(ctx, numba_types):
    """LLVM parameter types of the shadow arrays, per array."""
    return [[str(t) for t in ctx.get_arg_packer([ty]).argument_types] for ty in numba_types]


def _dump(disp, stage, text):
    """With ENZPY_DUMP=<folder>, write each stage's IR there (``f.primal.ll``, ...)."""
    folder = os.environ.get("ENZPY_DUMP")
    if folder:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{disp.py_func.__name__}.{stage}.ll")
        with open(path, "w") as fh:
            fh.write(text)


def _return_slot_type(ctx, restype) -> str:
    if restype == types.none:
        return "i8"
    return str(ctx.data_model_manager[restype].get_return_type())


def build_report(f):
    """The build reports (per-stage timings, IR sizes) of ``f``'s derivatives."""
    fn = f.py_func if isinstance(f, numba.core.dispatcher.Dispatcher) else f
    return list(_reports.get(fn, []))


def cache_info() -> dict:
    """Counters of the derivative cache, and build seconds per stage summed over builds.

    ``derivative_functions`` counts the derivatives written: (augmented
    forward, reverse) pairs and tangent functions; each (mode, function,
    activity) key is written once per process, so it equals ``distinct_keys``.
    (The tangent functions an ``hvp`` build differentiates again are private
    to that build and not counted.)
    """
    stages = {}
    for reports in _reports.values():
        for report in reports:
            for stage, seconds in report.timings.items():
                stages[stage] = stages.get(stage, 0.0) + seconds
    with STATS.lock:
        return {
            "entries": len(_entries),
            "derivative_functions": STATS.derivative_functions,
            "distinct_keys": len(STATS.keys),
            "hits": STATS.hits,
            "misses": STATS.misses,
            "build_seconds": stages,
        }
