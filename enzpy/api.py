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
from .cache import STATS, ModuleBuilder, entry_function
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
                 "library")

    def __init__(self, call, active_positions, shadow_positions, report, alias_checks,
                 library):
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


def _check_args(disp, annotated):
    try:
        inspect.signature(disp.py_func).bind(*annotated)
    except TypeError as exc:
        raise TypeError(f"{disp.py_func.__qualname__}: {exc}") from None
    for i, a in enumerate(annotated):
        if isinstance(a, Active):
            if isinstance(a.val, np.ndarray):
                raise TypeError(f"argument {i}: Active expects a float scalar, got an array; "
                                f"use Duplicated(x, dx) for arrays")
            if not isinstance(a.val, (float, np.floating)) or isinstance(a.val, np.float16):
                raise TypeError(f"argument {i}: Active expects a float scalar "
                                f"(float, numpy.float32 or numpy.float64), got "
                                f"{type(a.val).__name__}")
        elif isinstance(a, Duplicated):
            if not isinstance(a.val, np.ndarray):
                raise TypeError(f"argument {i}: Duplicated expects a numpy array and its "
                                f"shadow, got {type(a.val).__name__}; use Active for scalars")
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
        if type(a) is not Duplicated:
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
        return (cls, vt)
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
    ``ReverseWithPrimal``: ``((d1, ...), primal)``.
    """
    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff: the first argument must be a mode (Reverse, "
                        f"ReverseWithPrimal, Forward, ForwardWithPrimal), got {mode!r}")
    if not mode.reverse:
        raise UnsupportedError(f"{mode.name} mode is not implemented yet; use Reverse")
    disp = _dispatcher(f)
    key = (disp, tuple(map(_signature_key, args)))
    entry = _entries.get(key)
    if entry is None:
        annotated = [_annotate(a) for a in args]
        _check_args(disp, annotated)
        entry = _build(disp, annotated, key)
    else:
        STATS.hits += 1
        if entry.shadow_positions:
            _check_shadows(args)
    values = [a.val if type(a) in _ANNOTATIONS else a for a in args]
    for written, reread in entry.alias_checks:
        if np.may_share_memory(values[written], values[reread]):
            raise ValueError(
                f"arguments {written} and {reread} share memory: the function writes "
                f"argument {written}, and the derivative reads argument {reread} again "
                f"during the reverse sweep; pass distinct arrays")
    values += [args[i].dval for i in entry.shadow_positions]
    out = entry.call(*values)
    report = entry.report
    if out[-1] > report.peak_tape_bytes:
        report.peak_tape_bytes = out[-1]
    n = len(entry.active_positions)
    grads = [None] * len(args)
    for pos, value in zip(entry.active_positions, out[:n]):
        grads[pos] = value
    grads = tuple(grads)
    return (grads, out[n]) if mode.with_primal else (grads,)


def _build(disp, annotated, key) -> _Entry:
    with _build_lock, global_compiler_lock:
        if key in _entries:             # another thread built it meanwhile
            STATS.hits += 1
            return _entries[key]
        STATS.misses += 1
        argtypes = tuple(numba.typeof(a.val) for a in annotated)
        report = BuildReport(disp.py_func.__qualname__, str(argtypes))
        watch = _Stopwatch(report)
        with watch.stage("numba_compile"):
            low = frontend.lower(disp, argtypes)
        restype = low.restype
        return_active = isinstance(restype, types.Float)
        if not (return_active or isinstance(restype, (types.Integer, types.Boolean))
                or restype == types.none):
            raise UnsupportedError(f"function '{low.name}' returns {restype}; enzpy "
                                   f"differentiates functions returning a scalar or None")
        with watch.stage("capture"):
            module, lowered = frontend.collect_module(low)
        with watch.stage("cleanup"):
            blocks = frontend.original_blocks(module)
            frontend.cleanup(module)
        with watch.stage("read_ir"):
            model = read_module_text(str(module))
        report.primal_instructions = sum(
            len(b.instructions) for fn in model.functions.values() for b in fn.blocks)
        ctx = cpu_target.target_context
        activity, shadow_types = _activity(ctx, annotated, argtypes, return_active)
        with watch.stage("reverse"):
            builder = ModuleBuilder(model, lowered, blocks)
            try:
                root = builder.build(low.symbol, activity)
            except UnsupportedError as exc:
                if f"'{low.name}'" in str(exc):
                    raise
                raise UnsupportedError(f"differentiating '{low.name}': {exc}") from None
            entry_name = f"enzpy.entry.{next(backend._ids)}.{low.symbol}"
            ret_slot = _return_slot_type(ctx, restype)
            text = builder.module_text(entry_function(
                entry_name, root, ret_slot, return_active, _flat_types(ctx, shadow_types),
                _ARRAY_SHADOWED_FIELDS))
        _dump(disp, "primal", model.text)
        _dump(disp, "derivative", text)
        report.derivative_functions = len(builder.derivatives)
        report.module_bytes = len(text)
        with watch.stage("parse"):
            big = [name for name, fn in model.functions.items()
                   if sum(len(b.instructions) for b in fn.blocks) > INLINE_LIMIT]
            module = backend.prepare_module(text, entry_name, builder.exported, big)
        codegen = ctx.codegen()
        with watch.stage("optimize"):
            backend.optimize(module, codegen)
        with watch.stage("codegen"):
            library, address = backend.compile_module(module, entry_name, codegen)
            builder.publish(library)
        with watch.stage("wrap"):
            adjoint_types = [ty for a, ty in zip(annotated, argtypes) if isinstance(a, Active)]
            call = backend.numba_entry(address, argtypes + tuple(shadow_types), adjoint_types,
                                       restype)
        positions = [i for i, a in enumerate(annotated) if isinstance(a, Active)]
        shadows = [i for i, a in enumerate(annotated) if isinstance(a, Duplicated)]
        entry = _Entry(call, positions, shadows, report,
                       _alias_checks(ctx, builder.readonly, low.symbol, argtypes), library)
        _entries[key] = entry
        _reports.setdefault(disp.py_func, []).append(report)
        log.info("built %s", report)
        return entry


# Numba passes an array as (meminfo, parent, nitems, itemsize, data, shape..., strides...):
# the meminfo and the data pointer get shadows.
_ARRAY_SHADOWED_FIELDS = (0, 4)


def _activity(ctx, annotated, argtypes, return_active):
    """Activity of each LLVM parameter of the root function, and the shadow types."""
    activity = ["dup" if return_active else "const", "const"]
    shadow_types = []
    for a, ty in zip(annotated, argtypes):
        width = len(ctx.get_arg_packer([ty]).argument_types)
        if isinstance(a, Active):
            activity.append("active")
        elif isinstance(a, Duplicated):
            activity.extend("dup" if k in _ARRAY_SHADOWED_FIELDS else "const"
                            for k in range(width))
            shadow_types.append(numba.typeof(a.dval))
        else:
            activity.extend(["const"] * width)
    return activity, shadow_types


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

    ``derivative_functions`` counts the (augmented forward, reverse) pairs
    written; each (function, activity) key is written once per process, so it
    equals ``distinct_keys``.
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
