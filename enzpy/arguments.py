"""How annotated arguments become the LLVM parameters of a derivative.

Numba passes every argument as a flat list of LLVM parameters: an array as
(meminfo, parent, size, itemsize, data, shape..., strides...), a tuple as its
members' parameters in order, a jitclass object as (meminfo, data), a
reflected list as (meminfo, parent), a structref as (meminfo). Each parameter
gets an activity: 'active' (a float passed by value: its adjoint is returned in
reverse mode, its tangent passed in forward mode), 'dup' (a pointer to memory
with a shadow: the shadow object's parameter at the same position is passed
along) or 'const'.

The shadow of a container is a container of the same shape whose float leaves
are shadows (``zeros_like`` makes one); it is checked against its primal on
every call, so a missing or misshapen shadow is an error, never a silently
lost derivative.
"""
from __future__ import annotations

import ctypes
import functools
import inspect
from dataclasses import dataclass

import numpy as np
from numba import njit, typed, types
from numba.core import cgutils
from numba.experimental.jitclass import _box
from numba.experimental.jitclass.base import imp_dtor
from numba.extending import intrinsic

_ARRAY_HEAD = ("dup", "const", "const", "const", "dup")    # meminfo parent size itemsize data


def _leaves(ty) -> list:
    """Per LLVM parameter of a value of Numba type ``ty``: 'float' (a float
    passed by value), 'dup' (a pointer to memory that may carry derivatives)
    or 'const'."""
    if isinstance(ty, types.Float):
        return ["float"]
    if isinstance(ty, (types.Integer, types.Boolean, types.NoneType, types.Omitted)):
        return ["const"]
    if isinstance(ty, types.Array):
        if _holds_complex(ty.dtype):
            raise TypeError(f"{ty}: complex arrays are not differentiated (nor in a "
                            f"container): pass the real and imaginary parts as float arrays, or "
                            f"the array apart as Const")
        float_data = _holds_floats(ty.dtype)
        head = list(_ARRAY_HEAD) if float_data else ["const"] * 5
        return head + ["const"] * (2 * ty.ndim)
    if isinstance(ty, types.BaseTuple):
        members = [_leaves(member) for member in ty]
        return None if None in members else [leaf for leaves in members for leaf in leaves]
    if isinstance(ty, types.ClassInstanceType):
        return ["dup", "dup"]
    if isinstance(ty, types.List):
        if _floats_by_value(ty.dtype):
            raise TypeError(f"{ty}: a Python list holding floats cannot carry their "
                            f"derivatives back (Numba works on a copy of it); pass the floats "
                            f"as a NumPy array")
        return ["dup", "const"]
    if isinstance(ty, types.StructRef):
        return ["dup"]
    if isinstance(ty, (types.ListType, types.DictType)):
        raise TypeError(f"{ty} cannot carry derivatives as an argument yet (numba.typed.List "
                        f"and numba.typed.Dict are refused); pass a NumPy array, a tuple or "
                        f"a list of arrays, or a jitclass object")
    return None


def _holds_floats(dtype) -> bool:
    """Whether an array element of Numba type ``dtype`` holds floats: a float,
    or a record with float fields, subarrays of floats or such records."""
    return _element_holds(dtype, types.Float)


def _holds_complex(dtype) -> bool:
    return _element_holds(dtype, types.Complex)


def _element_holds(dtype, scalar) -> bool:
    if isinstance(dtype, scalar):
        return True
    if isinstance(dtype, types.NestedArray):
        return _element_holds(dtype.dtype, scalar)
    if isinstance(dtype, types.Record):
        return any(_element_holds(t, scalar) for _, t in dtype.members)
    return False


def _floats_by_value(ty) -> bool:
    """Whether values of ``ty`` hold floats directly (not behind a pointer)."""
    if isinstance(ty, types.Float):
        return True
    if isinstance(ty, types.BaseTuple):
        return any(_floats_by_value(t) for t in ty)
    return False


@dataclass
class ArgumentLayout:
    """One annotated argument's LLVM parameters."""
    activity: list          # per LLVM parameter: 'active', 'dup' or 'const'
    shadow_fields: list     # positions, among the shadow's parameters, passed along
    adjoint_types: list     # Numba types of the adjoints returned (reverse mode, Active)
    numba_type: object


def layout(ctx, kind: str, ty, shadow_ty, reverse: bool) -> ArgumentLayout:
    """The layout of an argument annotated ``kind`` ('Active', 'Duplicated' or
    'Const') of Numba type ``ty`` (shadow of type ``shadow_ty``)."""
    width = len(ctx.get_arg_packer([ty]).argument_types)
    if kind == "Const":
        return ArgumentLayout(["const"] * width, [], [], ty)
    leaves = _leaves(ty)
    if leaves is None or len(leaves) != width:
        raise TypeError(f"{kind} does not support values of type {ty}")
    if kind == "Active":
        if "dup" in leaves:
            raise TypeError(f"Active expects float scalars (or a tuple of them), got {ty}: "
                            f"use Duplicated(x, dx) for arrays and objects")
        if "float" not in leaves:
            raise TypeError(f"Active expects a float scalar (or a tuple of floats), got {ty}")
        activity = ["active" if leaf == "float" else "const" for leaf in leaves]
        floats = [t for t in _flat_numba_types(ty) if isinstance(t, types.Float)]
        return ArgumentLayout(activity, [], floats, ty)
    if reverse and "float" in leaves and isinstance(ty, types.BaseTuple):
        raise TypeError(f"Duplicated {ty}: the floats of a tuple are passed by value, so "
                        f"their derivatives cannot accumulate into a shadow; pass a tuple "
                        f"of floats as Active and arrays as Duplicated")
    if "dup" not in leaves and not (not reverse and "float" in leaves):
        raise TypeError(f"Duplicated expects a float array or a container of them, got {ty}")
    activity = ["dup" if leaf == "dup" else "active" if leaf == "float" else "const"
                for leaf in leaves]
    shadow_leaves = _leaves(shadow_ty) if shadow_ty is not None else None
    if shadow_leaves is None or len(shadow_leaves) != len(leaves):
        raise TypeError(f"the shadow of type {shadow_ty} does not fit {ty}")
    return ArgumentLayout(activity, [k for k, a in enumerate(activity) if a != "const"], [], ty)


def _flat_numba_types(ty) -> list:
    if isinstance(ty, types.BaseTuple):
        return [t for member in ty for t in _flat_numba_types(member)]
    return [ty]


def rebuild_adjoint(value, adjoints):
    """The adjoint of an Active ``value`` (a float, or a tuple of floats and
    other values) from the adjoints of its float leaves, in order: a tuple of
    the same shape, None where a leaf is not a float."""
    it = iter(adjoints)

    def build(v):
        if isinstance(v, tuple):
            items = [build(item) for item in v]
            return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
        if isinstance(v, (float, np.floating)):
            return next(it)
        return None
    return build(value)


# -- shadows of containers ----------------------------------------------------------------
def strided_like(x: np.ndarray) -> np.ndarray:
    """A zero array with the shape, dtype and strides of ``x`` (the memory it
    spans is fresh), so derivative code can address it like ``x``."""
    if x.size == 0:
        return np.zeros_like(x)
    low, high = _byte_offsets(x)
    buffer = np.zeros(high - low + 16, dtype=np.uint8)
    offset = (-buffer.ctypes.data) % 16 - low        # aligned like NumPy's allocations
    return np.ndarray(x.shape, dtype=x.dtype, buffer=buffer, offset=offset,
                      strides=x.strides)


def _shadows_sharing_memory(arrays) -> dict:
    """{``_view_key(array)``: shadow} for the arrays among ``arrays`` whose memory
    overlaps another's (``x`` and ``x[::-1]``): their shadows are views of one
    zero buffer, at the same distances as the arrays, so they share memory as
    the arrays do."""
    views = {}                              # view -> [array, how many objects are it]
    for a in {id(a): a for a in arrays}.values():
        views.setdefault(_view_key(a), [a, 0])[1] += 1
    spans = sorted(((*_byte_span(a), a, count) for a, count in views.values() if a.size),
                   key=lambda span: span[:2])
    groups, shadows = [], {}
    for low, high, a, count in spans:
        if groups and low < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], high)
            groups[-1][2].append(a)
            groups[-1][3] += count
        else:
            groups.append([low, high, [a], count])
    for low, high, members, count in groups:
        if count < 2:                       # (x and x[:] are two)
            continue
        buffer = np.zeros(high - low + 64, dtype=np.uint8)
        start = (low - buffer.ctypes.data) % 64          # (aligned as the arrays are)
        for a in members:
            shadows[_view_key(a)] = np.ndarray(
                a.shape, dtype=a.dtype, buffer=buffer, offset=start + a.ctypes.data - low,
                strides=a.strides)
    return shadows


def _view_key(a: np.ndarray) -> tuple:
    """What makes two arrays the same view of memory (a jitclass field is
    boxed anew at every read: ids do not tell)."""
    return a.ctypes.data, a.shape, a.strides, a.dtype.str


def _byte_offsets(a: np.ndarray) -> tuple:
    """The offsets, from ``a``'s data pointer, of the first and one past the
    last byte a non-empty ``a`` spans (its strides may be negative)."""
    low = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + a.itemsize
    return low, high


def _byte_span(a: np.ndarray) -> tuple:
    """The addresses of the first and one past the last byte ``a`` spans."""
    low, high = _byte_offsets(a)
    return a.ctypes.data + low, a.ctypes.data + high


def zeros_like(obj, _shadows=None):
    """A zero shadow for ``obj``: a float array (with ``obj``'s strides), a
    float, or a container (tuple, named tuple, list, jitclass object) of the
    same shape whose float leaves are zero; integers and other values that
    carry no derivative are kept as they are. An array or object held twice
    gets one shadow, held twice alike; arrays sharing memory (views of one
    buffer) get shadows sharing memory alike."""
    if _shadows is None:
        _shadows = {"sharing": _shadows_sharing_memory(list(arrays_in(obj)))}
    shadows = _shadows
    if isinstance(obj, np.ndarray):
        if id(obj) not in shadows:
            shadow = shadows["sharing"].get(_view_key(obj))
            shadows[id(obj)] = (obj, strided_like(obj) if shadow is None else shadow)
        return shadows[id(obj)][1]      # (obj kept above: ids stay unique)
    if isinstance(obj, (float, np.floating)):
        return type(obj)(0.0)
    if isinstance(obj, tuple):
        items = [zeros_like(v, shadows) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [zeros_like(v, shadows) for v in obj]
    fields = _object_fields(obj)
    if fields is not None:
        if isinstance(_object_type(obj), types.StructRef):
            raise TypeError(f"zeros_like: no shadow for a structref "
                            f"({type(obj).__name__}): make one of its class with zero arrays")
        key = ("object", object_address(obj))     # (two Python boxes of one object: one key)
        if key not in shadows:
            shadows[key] = shadow = _blank_like(obj)
            for name in fields:
                setattr(shadow, name, zeros_like(getattr(obj, name), shadows))
        return shadows[key]
    if isinstance(obj, (int, bool, np.integer, np.bool_, str, type(None))):
        return obj
    raise TypeError(f"zeros_like: no shadow for a {type(obj).__name__}")


def arrays_in(obj):
    """The NumPy arrays ``obj`` is or holds: in tuples, lists, typed lists and
    dictionaries, and the fields of jitclass objects, at any depth, in order
    (an object's fields once: a linked structure may be long, or a cycle)."""
    pending, visited = [obj], set()
    while pending:
        obj = pending.pop()
        if isinstance(obj, np.ndarray):
            yield obj
        elif isinstance(obj, (tuple, list, typed.List)):
            pending += reversed(list(obj))
        elif isinstance(obj, (dict, typed.Dict)):
            pending += reversed(list(obj.values()))
        elif (fields := _object_fields(obj)) is not None and \
                (address := object_address(obj)) not in visited:
            visited.add(address)
            pending += [getattr(obj, name) for name in reversed(fields)]


def objects_in(obj, _path=()):
    """The jitclass and structref objects ``obj`` is or holds (each before
    those its fields hold; one held twice comes twice), walked as ``arrays_in``
    walks arrays; a field holding an object that holds it is not followed."""
    if isinstance(obj, (tuple, list, typed.List)):
        for v in obj:
            yield from objects_in(v, _path)
    elif isinstance(obj, (dict, typed.Dict)):
        for v in obj.values():
            yield from objects_in(v, _path)
    elif (fields := _object_fields(obj)) is not None and \
            (address := object_address(obj)) not in _path:
        yield obj
        for name in fields:
            yield from objects_in(getattr(obj, name), _path + (address,))


def object_address(obj) -> int:
    """Where a jitclass or structref object's data lives: its identity (each
    time Numba hands an object to Python it makes a new box of it)."""
    if isinstance(obj, _box.Box):
        return ctypes.c_void_p.from_address(id(obj) + _box.box_dataptr_offset).value
    return obj._meminfo.data


def _same_memory(now, before) -> bool:
    """Whether a field's value ``now`` is the array or object it held ``before``
    (it may now hold None, an optional field cleared)."""
    if isinstance(before, np.ndarray):
        return isinstance(now, np.ndarray) and now.shape == before.shape and \
            now.__array_interface__["data"][0] == before.__array_interface__["data"][0]
    return _object_fields(now) is not None and object_address(now) == object_address(before)


def _holds_references(value) -> bool:
    """Whether ``value`` is an array or an object, or a tuple holding one."""
    if isinstance(value, tuple):
        return any(_holds_references(v) for v in value)
    return isinstance(value, np.ndarray) or _object_fields(value) is not None


def reference_fields(obj) -> list:
    """(object, name, value) of the fields holding arrays or objects (tuples of
    them included), of the jitclass and structref objects ``obj`` is or holds
    (as ``objects_in`` walks it), and (list, None, its items) of the Python lists
    it is or holds (in tuples and lists)."""
    fields = [(holder, name, getattr(holder, name)) for holder in objects_in(obj)
              for name in _object_fields(holder) if _holds_references(getattr(holder, name))]
    lists, stack = {}, [obj]
    while stack:
        value = stack.pop()
        if type(value) is list:
            lists.setdefault(id(value), value)
        if isinstance(value, (tuple, list)):
            stack.extend(value)
    return fields + [(items, None, list(items)) for items in lists.values()]


def _restored(now, before):
    """``now`` with each array or object that is not the one ``before`` held
    there replaced by that one (in a tuple item by item: its floats are kept)."""
    if isinstance(before, tuple):
        if not (isinstance(now, tuple) and len(now) == len(before)):
            return before
        items = [_restored(n, b) if _holds_references(b) else n for n, b in zip(now, before)]
        if all(i is n for i, n in zip(items, now)):
            return now
        return before._make(items) if hasattr(before, "_make") else tuple(items)
    return now if _same_memory(now, before) else before


def restore_reference_fields(fields):
    """Point the fields (``reference_fields`` before a call) that the call made
    refer to another array or object back to the one they held, and give the
    lists back the items they held."""
    for obj, name, value in fields:
        if name is None:
            if len(obj) != len(value) or any(a is not b for a, b in zip(obj, value)):
                obj[:] = value
            continue
        now = getattr(obj, name)
        restored = _restored(now, value)
        if restored is not now:
            _set_field(obj, name, restored)


def _set_field(obj, name, value):
    """Set a field of a jitclass object, or of a structref object through Numba
    (its proxy class's properties may have no setter: Numba's docs give none)."""
    if isinstance(obj, _box.Box):
        setattr(obj, name, value)
    else:
        _field_setter(name)(obj, value)


@functools.lru_cache(maxsize=None)
def _field_setter(name):
    namespace = {"__name__": __name__}
    exec(f"def set_{name}(obj, value):\n    obj.{name} = value\n", namespace)
    return njit(namespace[f"set_{name}"])


def conflicting_objects(pairs):
    """Labels (i, j) of two objects, among (label, object, shadow) ``pairs``,
    that are one object with two shadows, or two objects with one shadow (so
    derivatives would split or mix), or None."""
    shadow_of, primal_of = {}, {}
    for label, x, dx in pairs:
        a, da = object_address(x), object_address(dx)
        for table, key, value in ((shadow_of, a, da), (primal_of, da, a)):
            seen = table.setdefault(key, (label, value))
            if seen[1] != value:
                return seen[0], label
    return None



def positional_parameters(fn) -> list:
    """The parameters of ``fn`` a call can fill by position (not ``*args``)."""
    return [p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def star_parameter(fn):
    """The ``*args`` parameter of ``fn``, or None."""
    return next((p for p in inspect.signature(fn).parameters.values()
                 if p.kind == p.VAR_POSITIONAL), None)

_TooHardError = getattr(np, "exceptions", np).TooHardError


def share_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` have an element in common: exactly for the usual
    views (interleaved ones such as ``x[0::2]`` and ``x[1::2]`` share none),
    and whenever their address ranges overlap where that takes too long."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return np.shares_memory(a, b, max_work=10_000)
    except _TooHardError:
        return True


def conflicting_shadows(pairs, held=()):
    """Positions (i, j) of two arrays, among (position, array, shadow)
    ``pairs``, whose shadows share memory in a way their arrays do not (so
    derivatives of distinct elements would mix), or None. Shadows may share
    memory as their arrays do (the same array passed twice with its shadow).
    Arrays at positions in ``held`` (inside containers, where no alias check
    separates a write from a read) that share memory must have shadows that
    share it alike."""
    for k, (i, x, dx) in enumerate(pairs):
        for j, y, dy in pairs[k + 1:]:
            held_pair = i in held or j in held
            if not held_pair and not np.may_share_memory(dx, dy):
                continue            # (the usual case, decided by address ranges alone)
            alike = strides_fit(x, dx) and strides_fit(y, dy) and \
                dx.ctypes.data - dy.ctypes.data == x.ctypes.data - y.ctypes.data
            if alike:
                continue
            if share_memory(dx, dy) or (held_pair and share_memory(x, y)):
                return i, j
    return None


def unlike_shadows_message(i, j) -> str:
    return (f"arguments {i} and {j}: the arrays and their shadows do not share memory "
            f"alike, so derivatives of distinct elements would mix or those of one element "
            f"split; give an array held twice the same shadow twice (enzpy.zeros_like does)")


def aliasing_message(written, other) -> str:
    """Why arguments ``written`` and ``other`` may not share memory."""
    return (f"arguments {written} and {other} share memory: the function may write argument "
            f"{written} (as far as enzpy can tell), and its derivative takes such a write to "
            f"leave argument {other} unchanged; pass distinct arrays (a copy)")


@njit
def _extent(a):
    """The addresses ``a``'s elements span, [low, high)."""
    low = high = np.intp(a.ctypes.data)     # (uintp + intp would be a float)
    for k in range(a.ndim):
        step = (a.shape[k] - 1) * a.strides[k]
        if step < 0:
            low += step
        else:
            high += step
    return low, high + a.itemsize


@njit
def may_share_memory_nopython(a, b):
    """``np.may_share_memory`` (which Numba does not provide): overlapping extents."""
    if a.size == 0 or b.size == 0:
        return False
    a_low, a_high = _extent(a)
    b_low, b_high = _extent(b)
    return a_low < b_high and b_low < a_high


def overlaps_itself(a: np.ndarray) -> bool:
    """Whether elements of ``a`` may share memory (a ``np.broadcast_to`` view's
    zero stride, overlapping ``as_strided`` strides): such an array cannot hold
    one derivative per element. From the smallest stride up, each must step
    past all that the smaller ones span."""
    if a.flags.c_contiguous or a.flags.f_contiguous or a.size == 0:
        return False
    span = a.itemsize
    for stride, n in sorted((abs(s), n) for n, s in zip(a.shape, a.strides) if n > 1):
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def strides_fit(x, dx) -> bool:
    """The shadow ``dx`` is laid out as ``x`` wherever that matters: along every
    axis longer than 1 (an axis of length 1 is only read at 0, and an empty
    array not at all; NumPy and Numba give those other strides). Plain enough
    for nopython mode: ``jitted`` compiles it for shadows made inside ``@njit``."""
    if x.size == 0:
        return True
    for k in range(x.ndim):
        if x.shape[k] > 1 and x.strides[k] != dx.strides[k]:
            return False
    return True


def check_shadow(i, x, dx, where=""):
    """``dx`` must be a shadow of ``x``: the same container shape, arrays of
    the same shape and dtype (and, inside containers, strides that fit:
    ``strides_fit``), objects of the same class. ``ValueError`` or
    ``TypeError`` otherwise, before anything runs.
    (An argument that is an array may have a shadow of another layout: it is
    passed laid out like the array.)"""
    here = f"argument {i}{where}"
    if isinstance(x, np.ndarray):
        if not isinstance(dx, np.ndarray):
            raise TypeError(f"{here}: the shadow of an array must be an array, got "
                            f"{type(dx).__name__}")
        if dx.shape != x.shape:
            raise ValueError(f"{here}: the shadow's shape {dx.shape} does not fit the "
                             f"array's shape {x.shape}")
        if dx.dtype != x.dtype:
            raise ValueError(f"{here}: the shadow's dtype {dx.dtype} does not fit the "
                             f"array's dtype {x.dtype}")
        for what, a in (("array", x), ("shadow", dx)):
            if overlaps_itself(a):
                raise ValueError(f"{here}: the {what}'s elements overlap in memory (strides "
                                 f"{a.strides}, e.g. a np.broadcast_to view), so they cannot "
                                 f"have a derivative each; pass a copy (np.array(...))")
        if where and not strides_fit(x, dx):
            raise ValueError(f"{here}: the shadow's layout (strides {dx.strides}) does not "
                             f"fit the array's layout (strides {x.strides}); make the shadow "
                             f"with enzpy.zeros_like")
        if not dx.flags.writeable:
            raise ValueError(f"{here}: the shadow is read-only; it must be writeable")
        if share_memory(x, dx):
            raise ValueError(f"{here}: the shadow shares memory with the array")
        return
    if isinstance(x, (tuple, list)):
        if type(dx) is not type(x) or len(dx) != len(x):
            raise ValueError(f"{here}: the shadow must be a {type(x).__name__} of "
                             f"{len(x)} items, like the value")
        for k, (a, b) in enumerate(zip(x, dx)):
            check_shadow(i, a, b, f"{where}[{k}]")
        return
    fields = _object_fields(x)
    if fields is not None:
        if type(dx) is not type(x) or _object_type(dx) != _object_type(x):
            raise TypeError(f"{here}: the shadow must be an object of the same class "
                            f"({type(x).__name__}); make it with enzpy.zeros_like")
        if dx is x:
            raise ValueError(f"{here}: the shadow is the object itself")
        for name in fields:
            check_shadow(i, getattr(x, name), getattr(dx, name), f"{where}.{name}")


def _object_type(obj):
    return getattr(obj, "_numba_type_", None) or getattr(obj, "_type", None)


def _object_fields(obj):
    """Field names of a jitclass or structref object, or None."""
    ty = _object_type(obj)
    if isinstance(ty, types.ClassInstanceType):
        return list(ty.struct)
    if isinstance(ty, types.StructRef):
        hidden = [name for name in ty.field_dict if not hasattr(type(obj), name)]
        if hidden:          # (enzpy walks the fields to check shadows and find arrays)
            raise TypeError(f"{type(obj).__name__}: a structref whose fields enzpy cannot "
                            f"read from Python ({', '.join(hidden)}): give its proxy class a "
                            f"property for each (structref.define_proxy does)")
        return list(ty.field_dict)
    return None


@intrinsic
def _blank_instance(typingctx, like):
    """A new jitclass object of ``like``'s class with every field null, its
    ``__init__`` not run."""
    def codegen(context, builder, sig, args):
        inst_type = sig.return_type
        data_type = context.get_data_type(inst_type.get_data_type())
        size = context.get_constant(types.uintp, context.get_abi_sizeof(data_type))
        meminfo = context.nrt.meminfo_alloc_dtor(builder, size,
                                                 imp_dtor(context, builder.module, inst_type))
        data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo),
                               data_type.as_pointer())
        builder.store(cgutils.get_null_value(data_type), data)
        made = context.make_helper(builder, inst_type)
        made.meminfo = meminfo
        made.data = data
        return made._getvalue()
    return like(like), codegen


@njit
def _blank_like(obj):
    return _blank_instance(obj)
