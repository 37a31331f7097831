"""The public API: ``autodiff`` with Enzyme.jl's modes and annotations.

The derivative itself is built by ``pipeline.build``; this module checks the
arguments, finds or builds the derivative for their types, calls it and gives
the results back in Enzyme.jl's shapes.
"""
from __future__ import annotations

import dis
import inspect
import types

import numba
import numpy as np
from numba.core.registry import cpu_target

from . import arguments, diskcache, fastpath, fingerprint, frontend
from .arguments import (aliasing_message, arrays_in, check_shadow, conflicting_objects,
                        conflicting_shadows, object_address, objects_in, overlaps_itself,
                        positional_parameters, rebuild_adjoint, reference_fields,
                        restore_reference_fields, share_memory, star_parameter,
                        strided_like, strides_fit, unlike_shadows_message)
from .cache import STATS
from .errors import UnsupportedError, raise_exception_set_by
from .pipeline import build, entries as _entries, fast_paths as _fast_paths
from .pipeline import lock as _pipeline_lock, reports as _reports, typed_signature


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


_jitted: dict = {}
# plain function a plain function calls (register_jitable) -> [its (code, values)
# when enzpy compiled a caller of it, those callers' dispatchers]: Numba compiles
# it once per signature, with the values of then
_helpers_seen: dict = {}


def _dispatcher(f, caller="autodiff"):
    if isinstance(f, numba.core.dispatcher.Dispatcher):
        return f
    if isinstance(f, Mode):
        raise TypeError("autodiff(mode, f, *args): the function comes second"
                        if caller == "autodiff" else
                        f"{caller} takes the function first, and no mode")
    if not callable(f):
        raise TypeError(f"{caller} expects a function, got {type(f).__name__}")
    if inspect.ismethod(f):
        raise TypeError(f"{caller} expects a function, got the bound method "
                        f"'{f.__qualname__}': differentiate a function taking the object as an "
                        f"argument (def g(obj, x): return obj.{f.__name__}(x)), the object "
                        f"annotated like any argument")
    found = _jitted.get(f)
    state = _values_read(f)
    if found is None or found[1][0] != state[0]:
        # (new code: its ``__code__`` replaced, as IPython's autoreload does)
        found = _jitted[f] = [numba.njit(f), state]
    elif found[1] != state:
        # A plain function reads today's globals; Numba froze those of its first
        # call: compiled again (which drops its derivatives), it reads them too.
        found[0].recompile()
        found[1] = state
    changed = _changed_helpers(state[2], found[0])
    if changed:
        raise UnsupportedError(
            f"{f.__qualname__}: the globals or code of {', '.join(changed)}, which Numba "
            f"compiles into it (register_jitable), changed since Numba compiled it: Numba "
            f"keeps running its first compilation; restart Python to differentiate "
            f"today's code")
    return found[0]


def _changed_helpers(helpers, dispatcher) -> list:
    """The names of the plain functions among ``helpers`` and the helpers they
    call whose code or values changed since Numba compiled a caller enzpy made."""
    changed, pending, visited = [], list(helpers), set()
    while pending:
        helper = pending.pop()
        if id(helper) in visited:
            continue
        visited.add(id(helper))
        code, values, more = _values_read(helper)
        pending += more
        seen = _helpers_seen.get(helper)
        if seen is None or seen[0] != (code, values) and \
                not any(d.overloads for d in seen[1]):       # (none compiled yet)
            _helpers_seen[helper] = [(code, values), [dispatcher]]
        elif seen[0] != (code, values):
            changed.append(helper.__qualname__)
        elif all(d is not dispatcher for d in seen[1]):
            seen[1].append(dispatcher)
    return changed


def _code_and_nested(code):
    """``code`` and the code nested in it (comprehensions, inner functions, lambdas)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_and_nested(const)


def _attribute_chains(code) -> list:
    """The names the code reads, each with the attributes it reads from it
    (``cfg.sub.K``: ('cfg', 'sub', 'K')), from its bytecode."""
    chains = set()
    for nested in _code_and_nested(code):
        chain = None
        for ins in dis.get_instructions(nested):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF"):
                chain = (ins.argval,)
                chains.add(chain)
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and chain is not None:
                chain += (ins.argval,)
                chains.add(chain)
            else:
                chain = None
    return sorted(chains)


def _values_read(f) -> tuple:
    """(code, values, helpers) of a plain function: its code; a digest of
    each global, module attribute and closure value it reads (arrays by their
    content), or its identity where it has none (modules, dispatchers, other
    objects); and the plain functions among them (Numba compiles them into it:
    ``register_jitable``)."""
    code = getattr(f, "__code__", None)
    if code is None:
        return None, (), ()
    names = getattr(f, "__globals__", {})
    values = []
    # (``params.S``, ``cfg.sub.K``: attributes of modules it reads, which Numba
    # freezes too)
    for chain in _attribute_chains(code):
        if chain[0] not in names:
            continue
        value = names[chain[0]]
        if len(chain) == 1:
            values.append(value)
        for attr in chain[1:]:
            if not inspect.ismodule(value) or not hasattr(value, attr):
                break
            value = getattr(value, attr)
            values.append(value)
    for cell in getattr(f, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:              # (an empty cell)
            values.append(None)

    def state(v):
        if isinstance(v, numba.core.dispatcher.Dispatcher):
            # (recompiled, it runs other code: a caller compiled before keeps the old)
            return id(v), frontend.recompilations(v)
        if callable(v) or inspect.ismodule(v):
            return id(v)
        try:
            return fingerprint.value_digest(v)
        except fingerprint.NotCacheable:
            return id(v)
    return (code, tuple(state(v) for v in values),
            tuple(v for v in values if isinstance(v, types.FunctionType)
                  and fingerprint.library_path(v) is None))


def _annotate(arg):
    return arg if isinstance(arg, Annotation) else Const(arg)


def _check_args(disp, annotated, mode):
    """Annotations must fit the values and the mode, shadows their primals:
    ``TypeError`` / ``ValueError`` before anything is built or run."""
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
            if not _is_float_scalar(a.val) and not isinstance(a.val, tuple):
                raise TypeError(f"argument {i}: Active expects a float scalar "
                                f"(float, numpy.float32 or numpy.float64), got "
                                f"{type(a.val).__name__}")
        elif isinstance(a, Duplicated):
            if _is_float_scalar(a.val) or isinstance(a.val, (int, complex, np.number)):
                advice = ("use Active for scalars" if mode.reverse else
                          "a float scalar with a float tangent")
                raise TypeError(f"argument {i}: Duplicated expects a numpy array (or a "
                                f"container of them) and its shadow, got "
                                f"{type(a.val).__name__}; {advice}")
            if isinstance(a.val, np.ndarray) and a.val.dtype.fields is None and \
                    a.val.dtype not in (np.float32, np.float64):
                raise TypeError(f"argument {i}: Duplicated expects a float32 or float64 array, "
                                f"got dtype {a.val.dtype}; {_dtype_advice(a.val.dtype)}")
            if isinstance(a.val, np.ndarray) and not isinstance(a.dval, np.ndarray):
                raise TypeError(f"argument {i}: the shadow of a Duplicated array must be a "
                                f"numpy array, got {type(a.dval).__name__}")
    ctx = cpu_target.target_context
    for i, (kind, ty, shadow) in enumerate(typed_signature(annotated)):
        try:
            arguments.layout(ctx, kind, ty, shadow, mode.reverse)
        except TypeError as exc:
            raise TypeError(f"argument {i}: {exc}") from None
    _check_shadows(annotated)


def _dtype_advice(dtype) -> str:
    if dtype.kind in "biu":
        return "pass integer and boolean arrays as Const"
    if dtype.kind == "f" and dtype.itemsize in (4, 8):        # another byte order
        return f"convert it with x.astype(np.{dtype.newbyteorder('=').name})"
    if dtype.kind == "c":
        return "complex arrays are not differentiated: pass the real and imaginary parts"
    return "convert it with x.astype(np.float64)"


def _check_shadows(args):
    """Shadows must fit their primals: the same shapes, dtypes and classes."""
    for i, a in enumerate(args):
        if type(a) is Duplicated and not _is_float_scalar(a.val):
            check_shadow(i, a.val, a.dval)


def _shadow_values(args, values, positions, written=()):
    """The shadows to pass, each checked against its primal (``check_shadow``
    says what does not fit), and (shadow, stand-in) pairs to copy back after
    the call: a shadow array laid out unlike its array (e.g. ``np.zeros_like``
    of a strided view, which is contiguous) is replaced by a stand-in with the
    array's strides, since the derivative addresses shadows like primals.
    ``values``: the arguments' values. Nothing is written before every shadow
    has passed."""
    shadows, copies = [], None
    for i in positions:
        a = args[i]
        x, dx = a.val, a.dval
        if isinstance(x, np.ndarray):          # (subclasses too: a np.memmap view)
            if not isinstance(dx, np.ndarray) or dx.shape != x.shape or dx.dtype != x.dtype \
                    or not dx.flags.writeable or share_memory(x, dx) \
                    or overlaps_itself(x) or overlaps_itself(dx):
                check_shadow(i, x, dx)
            if not strides_fit(x, dx):
                copies = (copies or []) + [(dx, len(shadows))]
        elif not _is_float_scalar(x):
            check_shadow(i, x, dx)
        shadows.append(dx)
    # (objects first: the arrays of an object held twice are walked once, so its
    # array pairs line up only if it has one shadow)
    _check_object_shadows(args, values, positions)
    pairs = _array_shadow_pairs(args, positions)
    _check_shadows_apart(pairs, written)
    _check_shadows_off_values(values, pairs)
    for k, (dx, slot) in enumerate(copies or ()):
        stand_in = strided_like(args[positions[slot]].val)
        stand_in[...] = dx
        shadows[slot] = stand_in
        copies[k] = (dx, stand_in)
    return shadows, copies


def _array_shadow_pairs(args, positions):
    """(label, array, shadow) of the arrays the Duplicated arguments are or hold
    (a container's shadow has its shape, ``check_shadow``: its arrays come in the
    same order)."""
    pairs = []
    for i in positions:
        x, dx = args[i].val, args[i].dval
        if isinstance(x, np.ndarray):
            pairs.append((i, x, dx))
        elif not _is_float_scalar(x):
            pairs += [(f"{i} (its array {k})", a, da)
                      for k, (a, da) in enumerate(zip(arrays_in(x), arrays_in(dx)))]
    return pairs


def _check_shadows_apart(pairs, written=()):
    """Arrays of containers and written arrays (no alias check separates their
    writes from other reads) share memory only as their shadows do."""
    held = {label for label, _, _ in pairs if isinstance(label, str)} | set(written)
    conflict = conflicting_shadows(pairs, held) if len(pairs) > 1 else None
    if conflict is None:
        return
    for label, x, dx in pairs:
        if label in conflict and not strides_fit(x, dx):
            # (laid out like the array in a copy of its own, the shadow would no longer
            # share memory with the others: the message the user needs is that one)
            raise ValueError(f"argument {label}: the shadow's layout (strides {dx.strides}) "
                             f"does not fit the array's (strides {x.strides}) and the shadow "
                             f"shares memory with another argument's; lay it out like the "
                             f"array (enzpy.zeros_like, or for big[::2], "
                             f"np.zeros_like(big)[::2])")
    raise ValueError(unlike_shadows_message(*conflict))


def _check_shadows_off_values(values, pairs):
    """A shadow receives derivatives: memory an argument's value also is (a
    Const array, another argument's array, an array of its own container)
    would be read as a value after the derivative wrote to it."""
    arrays = [(j, x) for j, v in enumerate(values) for x in arrays_in(v)]
    for label, _, dx in pairs:
        for j, x in arrays:
            if share_memory(dx, x):
                raise ValueError(f"argument {label}: its shadow shares memory with the array "
                                 f"of argument {j}; a shadow receives the derivatives, so it "
                                 f"needs memory of its own (np.zeros_like, enzpy.zeros_like)")


def _check_object_shadows(args, values, positions):
    """One jitclass object held twice (in a list, or as two arguments) has one
    shadow object, and distinct objects distinct ones; no shadow object is also
    a value."""
    pairs = [(i if x is args[i].val else f"{i} (its object {k})", x, dx)
             for i in positions if not isinstance(args[i].val, np.ndarray)
             for k, (x, dx) in enumerate(zip(objects_in(args[i].val),
                                             objects_in(args[i].dval)))]
    if not pairs:
        return
    conflict = conflicting_objects(pairs)
    if conflict is not None:
        raise ValueError(f"arguments {conflict[0]} and {conflict[1]}: one object held twice "
                         f"has two shadow objects, or two objects one shadow, so derivatives "
                         f"would split or mix; give each object one shadow, held alike "
                         f"(enzpy.zeros_like does)")
    held = {object_address(o) for v in values for o in objects_in(v)}
    for label, _, dx in pairs:
        if object_address(dx) in held:
            raise ValueError(f"argument {label}: its shadow holds an object that is also an "
                             f"argument's value; a shadow receives the derivatives, so it "
                             f"needs objects of its own (enzpy.zeros_like)")


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
    if cls is Duplicated and vt is not np.ndarray:       # an array's shadow is laid out like it
        return (cls, _type_key(value), _type_key(arg.dval))
    return (cls, _type_key(value))


# The array flags Numba's type of an array depends on: its layout (C or F
# contiguous, or any), whether it is read-only, and its alignment.
_TYPE_FLAGS = 0x1 | 0x2 | 0x100 | 0x400     # NPY_ARRAY_{C,F}_CONTIGUOUS, ALIGNED, WRITEABLE


def _type_key(value):
    """What Numba's type of ``value`` depends on; much cheaper than ``typeof`` for arrays."""
    if type(value) is np.ndarray:
        return (value.dtype, value.ndim, value.flags.num & _TYPE_FLAGS)
    try:
        return numba.typeof(value)
    except ValueError:      # (no derivative has this key: the checks then say what is wrong)
        return ("no Numba type", type(value))


def autodiff(mode, f, *args):
    """Differentiate ``f`` at ``args`` (each ``Active``, ``Const`` or ``Duplicated``).

    ``Reverse``: ``((d1, d2, ...),)`` with ``None`` for non-Active arguments;
    ``ReverseWithPrimal``: ``((d1, ...), primal)``. ``Forward``: ``(tangent,)``,
    the directional derivative of the return along the tangents of the
    ``Duplicated`` arguments (a ``Duplicated`` array's shadow receives the
    tangent of what ``f`` writes there); ``ForwardWithPrimal``: ``(tangent, primal)``.
    """
    try:
        paths = _fast_paths.get((f, mode))
    except TypeError:               # an unhashable f: the general path says what is wrong
        paths = None
    if paths is not None:
        for fast in paths:
            out = fast(args)
            if out is not fastpath.MISS:
                return out
    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff: the first argument must be a mode (Reverse, "
                        f"ReverseWithPrimal, Forward, ForwardWithPrimal), got {mode!r}")
    disp = _dispatcher(f)
    folded = _folded_call(disp, args)
    if folded is not None:
        args, unfold = folded
        return unfold(_differentiate(mode, f, disp, args), mode)
    return _differentiate(mode, f, disp, args)


def _differentiate(mode, f, disp, args):
    key = (disp, mode.reverse, tuple(map(_signature_key, args)))
    entry = _entries.get(key)
    if entry is None:
        annotated = [_annotate(a) for a in args]
        _check_args(disp, annotated, mode)
        entry = build(disp, typed_signature(annotated),
                      "reverse" if mode.reverse else "forward", key)
    else:
        STATS.hits += 1
    values = [a.val if type(a) in _ANNOTATIONS else a for a in args]
    _check_aliases(entry, values)
    shadows, copies = _shadow_values(args, values, entry.shadow_positions,
                                     entry.written_shadowed)
    # A field the function reassigns (o.w = o.w * x, o.inner = Lin(...)) leaves the
    # shadow object's field on the new value's shadow, spent by the reverse sweep; the
    # derivative is in the shadow the field held, which it gets back. So do a list's
    # items (L[0] = L[0] * x, L.pop(), L.reverse()): the shadow list keeps the
    # derivatives of the items passed in, in their order.
    held = [field for a in args
            if mode.reverse and type(a) is Duplicated and not isinstance(a.val, np.ndarray)
            for field in reference_fields(a.dval)]
    try:
        out = entry.call(*values, *shadows)
    except SystemError as error:
        raise_exception_set_by(error)
    finally:
        restore_reference_fields(held)
    if copies:
        for dx, stand_in in copies:
            dx[...] = stand_in
    else:
        _add_fast_path(f, mode, entry, args, key)
    if not mode.reverse:
        tangent = out[0] if entry.returns_tangent else None
        if type(tangent) is tuple:
            tangent = _float_tangents(tangent)
        return (tangent, out[-2]) if mode.with_primal else (tangent,)
    report = entry.report
    if out[-1] > report.peak_tape_bytes:
        report.peak_tape_bytes = out[-1]
    grads = [None] * len(args)
    k = 0
    for pos, count in zip(entry.active_positions, entry.adjoint_counts):
        value = args[pos].val
        grads[pos] = rebuild_adjoint(value, out[k:k + count]) if isinstance(value, tuple) \
            else out[k]
        k += count
    grads = tuple(grads)
    return (grads, out[k]) if mode.with_primal else (grads,)


def _folded_call(disp, args):
    """``args`` as Numba compiles the call: omitted parameters with a default
    become ``Const(default)``, the arguments ``*args`` receives one tuple; and
    the function giving the result one entry per argument passed. None when
    nothing is folded (or when the arguments do not fit: ``_check_args`` says so)."""
    positional = positional_parameters(disp.py_func)
    star = star_parameter(disp.py_func)
    n = len(positional)
    if star is None:
        missing = positional[len(args):]
        if not missing or any(p.default is p.empty for p in missing):
            return None
        return [*args, *(Const(p.default) for p in missing)], \
            lambda out, mode: _unfolded(out, mode, lambda grads: grads[:len(args)])
    if len(args) < n:
        return None
    rest = [_annotate(a) for a in args[n:]]
    kinds = {type(a) for a in rest}
    if len(kinds) > 1:
        raise TypeError(f"{disp.py_func.__qualname__}: the arguments *{star.name} receives "
                        f"are one tuple to enzpy: annotate them alike (all Active, all "
                        f"Duplicated or all Const), got {', '.join(sorted(k.__name__ for k in kinds))}")
    kind = kinds.pop() if kinds else Const
    values = tuple(a.val for a in rest)
    packed = Duplicated(values, tuple(a.dval for a in rest)) if kind is Duplicated else \
        kind(values)

    def spread(grads):
        inner = grads[n] if grads[n] is not None else (None,) * len(rest)
        return (*grads[:n], *inner)
    return [*args[:n], packed], lambda out, mode: _unfolded(out, mode, spread)


def _unfolded(out, mode, per_argument):
    if not mode.reverse:
        return out
    return (tuple(per_argument(out[0])), *out[1:])


def _add_fast_path(f, mode, entry, args, key):
    """Calls shaped like ``args`` take a generated path next time (fastpath.py);
    not those of a plain function, whose globals ``_dispatcher`` checks each time."""
    if not isinstance(f, numba.core.dispatcher.Dispatcher):
        return
    with _pipeline_lock:
        if _entries.get(key) is not entry:
            return      # (dropped meanwhile: f.recompile(), or Numba compiled f since)
        paths = _fast_paths.get((f, mode))
        if paths is not None and (len(paths) >= fastpath.KEPT_PER_FUNCTION
                                  or entry in (p.entry for p in paths)):
            return      # (a call style that keeps missing stays on the general path)
        fast = fastpath.generate(entry, mode, args, _ANNOTATIONS, STATS, _float_tangents)
        if fast is not None:
            fast.entry = entry
            _fast_paths[(f, mode)] = [fast] + (paths or [])


def _float_tangents(tangent):
    """A tuple result's tangent: None for its integers (they carry none)."""
    return tuple(_float_tangents(t) if type(t) is tuple else
                 None if isinstance(t, (int, np.integer, bool, np.bool_)) else t
                 for t in tangent)


def _check_aliases(entry, values):
    for written, reread in entry.alias_checks:
        if any(share_memory(a, b) for a in arrays_in(values[written])
               for b in arrays_in(values[reread])):
            raise ValueError(aliasing_message(written, reread))


def build_report(f):
    """The build reports (per-stage timings, IR sizes) of ``f``'s derivatives."""
    fn = f.py_func if isinstance(f, numba.core.dispatcher.Dispatcher) else f
    return list(_reports.get(fn, []))


def cache_info() -> dict:
    """Counters of the derivative cache, and build seconds per stage summed over builds.

    ``derivative_functions`` counts the derivatives written: (augmented
    forward, reverse) pairs and tangent functions; each (mode, function,
    activity) key is written once per process, so it equals ``distinct_keys``
    plus ``rewritten``: derivatives written again, by a build saved to the
    persistent cache instead of calling the copy of a build that was not saved
    (the saved one must load alone in a later process), or after the custom
    rules changed (``clear_rules``). (The tangent
    functions an ``hvp`` build differentiates again are private to that build
    and not counted.)
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
            "loaded": STATS.loaded,
            "saved": STATS.saved,
            "rewritten": STATS.rewritten,
            "build_seconds": stages,
        }


def cache_clear() -> int:
    """Empty the persistent derivative cache (``ENZPY_CACHE_DIR``); returns the
    number of entries removed. Derivatives already loaded in this process stay."""
    return diskcache.clear()
