"""``autodiff`` inside ``@njit`` code: Numba types for the modes and annotations.

A call ``autodiff(Reverse, f, Active(x), Duplicated(a, da))`` in a jitted
function is typed by an overload that builds the derivative when the caller
is compiled (the same build, and the same cache, as from Python) and calls its
entry point directly: a Newton iteration or an optimizer loop runs with no
Python in it. Results have the shapes ``autodiff`` returns in Python.
"""
from __future__ import annotations

import itertools

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.imputils import lower_constant
from numba.extending import (lower_builtin, make_attribute_wrapper, models,
                             overload, register_model, type_callable, typeof_impl)

from . import pipeline
from .api import Active, Const, Duplicated, Mode, autodiff
from .arguments import (aliasing_message, may_share_memory_nopython, positional_parameters,
                        star_parameter,
                        strides_fit, unlike_shadows_message)
from .cache import STATS
from .errors import UnsupportedError


class ModeType(types.Dummy):
    def __init__(self, mode: Mode):
        self.mode = mode
        super().__init__(name=f"enzpy.{mode.name}")


class AnnotationType(types.Type):
    def __init__(self, kind, value, shadow=None):
        self.kind, self.value, self.shadow = kind, value, shadow
        extra = f", {shadow}" if shadow is not None else ""
        super().__init__(name=f"enzpy.{kind.__name__}({value}{extra})")


@typeof_impl.register(Mode)
def _typeof_mode(mode, context):
    return ModeType(mode)


register_model(ModeType)(models.OpaqueModel)


@lower_constant(ModeType)
def _mode_constant(context, builder, ty, value):
    return context.get_dummy_value()


@register_model(AnnotationType)
class _AnnotationModel(models.StructModel):
    def __init__(self, dmm, fe_type):
        members = [("val", fe_type.value)]
        if fe_type.shadow is not None:
            members.append(("dval", fe_type.shadow))
        super().__init__(dmm, fe_type, members)


make_attribute_wrapper(AnnotationType, "val", "val")
make_attribute_wrapper(AnnotationType, "dval", "dval")


def _constructor(kind, arity):
    @type_callable(kind)
    def _type(context):
        if arity == 1:
            return lambda val: AnnotationType(kind, val)
        return lambda val, dval: AnnotationType(kind, val, dval)

    @lower_builtin(kind, *([types.Any] * arity))
    def _lower(context, builder, sig, args):
        made = cgutils.create_struct_proxy(sig.return_type)(context, builder)
        for field, ty, value in zip(("val", "dval"), sig.args, args):
            context.nrt.incref(builder, ty, value)     # the annotation holds a reference
            setattr(made, field, value)
        return made._getvalue()


_constructor(Active, 1)
_constructor(Const, 1)
_constructor(Duplicated, 2)


@overload(autodiff, jit_options={"nogil": False})
def _autodiff_jitted(mode, f, *args):
    if not isinstance(mode, ModeType):
        raise TypeError("autodiff: the first argument must be a mode (Reverse, Forward, ...)")
    if not isinstance(f, types.Dispatcher):
        raise TypeError("autodiff inside @njit code needs f to be an @njit function")
    mode, disp = mode.mode, f.dispatcher
    signature = [(a.kind, a.value, a.shadow) if isinstance(a, AnnotationType) else
                 (Const, a, None) for a in args]
    defaults = _omitted_defaults(disp, len(args))
    signature += [(Const, numba.typeof(d), None) for d in defaults]
    _check_signature(disp, signature, mode)
    key = ("njit", disp, mode.reverse, tuple(map(tuple, signature)))
    entry = pipeline.entries.get(key)
    if entry is None:
        typed = [(kind.__name__, ty, ty if kind is Duplicated and isinstance(ty, types.Float)
                  else shadow) for kind, ty, shadow in signature]
        entry = pipeline.build(disp, typed, "reverse" if mode.reverse else "forward", key,
                               by_address=True)
    else:
        STATS.hits += 1
    return _implementation(entry, mode, signature,
                           [isinstance(a, AnnotationType) for a in args], defaults)


def _omitted_defaults(disp, given):
    """The default values of the parameters a call passing ``given`` arguments
    leaves out (numbers, booleans, None, strings and tuples of them: the
    jitted call holds them as constants, as Numba holds defaults)."""
    fn = disp.py_func
    if star_parameter(fn) is not None:
        raise TypeError(f"autodiff inside @njit code: {fn.__qualname__} takes *args, which "
                        f"only autodiff called from Python packs; give it named parameters")
    positional = positional_parameters(fn)
    if given > len(positional):
        raise TypeError(f"{fn.__qualname__}: takes {len(positional)} positional arguments "
                        f"but {given} were given")
    omitted = positional[given:]
    missing = [p.name for p in omitted if p.default is p.empty]
    if missing:
        raise TypeError(f"{fn.__qualname__}: missing the argument(s) {', '.join(missing)}")
    for p in omitted:
        if not _constant_default(p.default):
            raise TypeError(f"autodiff inside @njit code: pass {fn.__qualname__}'s parameter "
                            f"'{p.name}' explicitly (its default, a "
                            f"{type(p.default).__name__}, is not a number or tuple of them)")
    return [p.default for p in omitted]


def _constant_default(value) -> bool:
    if isinstance(value, tuple):
        return all(_constant_default(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, complex, str, np.number))


def forget_typed_calls():
    """Numba keeps the implementation it typed for each call of ``autodiff``
    with given argument types: a caller compiled after a rule changed must
    get a derivative built with the new rule, not that one."""
    from numba.core.typing.templates import builtin_registry
    for fn, fnty in builtin_registry.globals:
        for template in fnty.templates if fn is autodiff else ():
            if getattr(template, "_overload_func", None) is _autodiff_jitted:
                template._impl_cache.clear()
                template._compiled_overloads.clear()


# A caller compiled after ``f.recompile()`` must call the derivative of the code
# ``f`` runs now, not the one Numba typed into ``autodiff`` for an earlier caller.
pipeline.RECOMPILE_HOOKS.append(lambda disp: forget_typed_calls())


def _check_signature(disp, signature, mode):
    """The checks ``autodiff`` makes in Python on values, made here on types."""
    for i, (kind, ty, shadow) in enumerate(signature):
        scalar = isinstance(ty, types.Float)
        if kind is Active and (not mode.reverse or not scalar):
            raise TypeError(f"argument {i}: Active expects a float scalar in reverse mode, "
                            f"got {ty}" + ("" if mode.reverse else
                                          "; forward mode takes Duplicated(x, dx)"))
        if kind is Duplicated:
            if scalar and not mode.reverse:
                if not isinstance(shadow, types.Float):
                    raise TypeError(f"argument {i}: the tangent of a float scalar must be "
                                    f"a float scalar, got {shadow}")
                continue
            if not (isinstance(ty, types.Array) and isinstance(ty.dtype, types.Float)):
                raise TypeError(f"argument {i}: inside @njit code, Duplicated takes a float "
                                f"array (or a float in forward mode), got {ty}; containers "
                                f"(tuples, lists, jitclass objects) are differentiated when "
                                f"autodiff is called from Python")
            if not isinstance(shadow, types.Array) or shadow.dtype != ty.dtype or \
                    shadow.ndim != ty.ndim:
                raise TypeError(f"argument {i}: the shadow {shadow} does not fit {ty}")


@njit
def _overlaps_itself(a):
    """``arguments.overlaps_itself`` in nopython mode."""
    if a.flags.c_contiguous or a.flags.f_contiguous or a.size == 0:
        return False
    span = a.itemsize
    done = np.zeros(a.ndim, np.bool_)
    for _ in range(a.ndim):             # dimensions by increasing stride
        k = -1
        for j in range(a.ndim):
            if not done[j] and a.shape[j] > 1 and \
                    (k < 0 or abs(a.strides[j]) < abs(a.strides[k])):
                k = j
        if k < 0:
            break
        done[k] = True
        if abs(a.strides[k]) < span:
            return True
        span += abs(a.strides[k]) * (a.shape[k] - 1)
    return False


_strides_fit = njit(strides_fit)


@njit
def _shadows_mix(x, dx, y, dy, held):
    """``arguments.conflicting_shadows`` for one pair, in nopython mode: the
    shadows share memory in a way the arrays do not (or, ``held``, the arrays
    share memory in a way the shadows do not)."""
    if not (may_share_memory_nopython(dx, dy) or held and may_share_memory_nopython(x, y)):
        return False
    if not (_strides_fit(x, dx) and _strides_fit(y, dy)):
        return True
    return np.intp(dx.ctypes.data) - np.intp(dy.ctypes.data) != \
        np.intp(x.ctypes.data) - np.intp(y.ctypes.data)


def _for_each_array(ty, expr, position, indent, body) -> list:
    """Lines running ``body(array expression, indent)`` on each array a value
    of type ``ty`` (at ``expr``) holds: in tuples, lists, dictionaries and
    jitclass fields."""
    if isinstance(ty, types.Array):
        return body(expr, indent)
    if isinstance(ty, types.BaseTuple):
        return [line for k, t in enumerate(ty.types)
                for line in _for_each_array(t, f"{expr}[{k}]", position, indent, body)]
    if isinstance(ty, types.ClassInstanceType):
        return [line for name, t in ty.struct.items()
                for line in _for_each_array(t, f"{expr}.{name}", position, indent, body)]
    if isinstance(ty, (types.List, types.ListType, types.DictType)):
        item = f"item{next(_item_names)}"
        items, held = (f"{expr}.values()", ty.value_type) if isinstance(ty, types.DictType) \
            else (expr, ty.dtype)
        inner = _for_each_array(held, item, position, indent + "    ", body)
        return [f"{indent}for {item} in {items}:"] + inner if inner else []
    if not pipeline._may_hold_arrays(ty):
        return []
    raise UnsupportedError(
        f"argument {position}: the derivative writes into an argument and takes that write to "
        f"leave this {ty} unchanged, which only autodiff called from Python can check; pass "
        f"its arrays as arguments of their own")


_item_names = itertools.count()


def _implementation(entry, mode, signature, annotated, defaults):
    """The jitted body: checks, the call, the results in autodiff's shapes
    (``defaults``: the values of the parameters the call leaves out, which
    follow ``annotated``'s; no result entry for them)."""
    n = len(annotated)
    values = [f"args[{i}].val" if annotated[i] else f"args[{i}]" for i in range(n)] + \
        [f"default{k}" for k in range(len(defaults))]
    lines = ["def impl(mode, f, *args):"]
    for i, (kind, ty, _) in enumerate(signature):
        if kind is Duplicated and isinstance(ty, types.Array):
            lines += [
                f"    if {values[i]}.shape != args[{i}].dval.shape:",
                f"        raise ValueError('argument {i}: the shadow\\'s shape does not fit "
                f"the array\\'s shape')",
                f"    if not strides_fit({values[i]}, args[{i}].dval):",
                f"        raise ValueError('argument {i}: the shadow\\'s layout (strides) "
                f"does not fit the array\\'s layout')",
                f"    if overlaps_itself({values[i]}):",
                f"        raise ValueError('argument {i}: the array\\'s elements overlap in "
                f"memory (e.g. a np.broadcast_to view), so they cannot have a derivative "
                f"each')"]
    pairs = [(i, values[i], f"args[{i}].dval") for i, (kind, ty, _) in enumerate(signature)
             if kind is Duplicated and isinstance(ty, types.Array)]
    for k, (i, a, d) in enumerate(pairs):
        lines += [f"    if may_share_memory({a}, {d}):",
                  f"        raise ValueError('argument {i}: the shadow shares memory with its "
                  f"array')"]
        for j, b, e in pairs[k + 1:]:
            held = i in entry.written_shadowed or j in entry.written_shadowed
            lines += [f"    if shadows_mix({a}, {d}, {b}, {e}, {held}):",
                      f"        raise ValueError({unlike_shadows_message(i, j)!r})"]
    for i, _, d in pairs:
        for j, (_, ty, _) in enumerate(signature):
            if j != i and isinstance(ty, types.Array):
                lines += [f"    if may_share_memory({values[j]}, {d}):",
                          f"        raise ValueError('argument {i}: its shadow shares memory "
                          f"with the array of argument {j}; a shadow receives the "
                          f"derivatives, so it needs memory of its own')"]
    for written, other in entry.alias_checks:
        def test(a, indent, other=other, written=written):
            return _for_each_array(
                signature[other][1], values[other], other, indent,
                lambda b, inner: [f"{inner}if may_share_memory({a}, {b}):",
                                  f"{inner}    raise ValueError("
                                  f"{aliasing_message(written, other)!r})"])
        lines += _for_each_array(signature[written][1], values[written], written, "    ", test)
    shadows = [f"args[{i}].dval" for i in entry.shadow_positions]
    lines.append(f"    out = call({', '.join(values + shadows)})")
    if mode.reverse:
        grads = ["None"] * n
        for k, pos in enumerate(entry.active_positions):
            grads[pos] = f"out[{k}]"
        grads = f"({', '.join(grads)},)"
        primal = f"out[{len(entry.active_positions)}]"
        lines.append(f"    return ({grads}, {primal})" if mode.with_primal
                     else f"    return ({grads},)")
    else:
        tangent = "out[0]" if entry.returns_tangent else "None"
        lines.append(f"    return ({tangent}, out[-2])" if mode.with_primal
                     else f"    return ({tangent},)")
    namespace = {"__name__": __name__, "call": entry.call,
                 "may_share_memory": may_share_memory_nopython, "overlaps_itself": _overlaps_itself, "shadows_mix": _shadows_mix,
                 "strides_fit": _strides_fit,
                 **{f"default{k}": d for k, d in enumerate(defaults)}}
    exec("\n".join(lines), namespace)
    return namespace["impl"]
