"""Dictionaries (``numba.typed.Dict``, and ``{...}`` in ``@njit`` code): derivatives
through their C implementation (Numba's ``cext/dictobject.c``), by mirroring.

Every operation on a dictionary is repeated on its shadow dictionary with the
same keys and hashes, in the same order, so both tables keep the same layout
(an entry has the same index in both: ``numba_dict_delitem`` takes one, and an
iterator's position means the same entry in both). The shadow dictionary
compares keys with the dictionary's own function but holds no reference to
them: a key is in the shadow dictionary exactly while it is in the dictionary,
which holds one.

* Reverse mode: the shadow dictionary maps a key to a *cell*, a zeroed block the
  size of a value holding the value's shadow (the shadow pointers of an array,
  the adjoint of a float). A cell never moves (the table's entries do, when it
  grows), so what the reverse sweep needs is the cell's address, recorded on the
  tape: the reverse of a lookup adds the adjoint of the value read into the
  cell, the reverse of the insertion that made the cell moves the cell's adjoint
  to the value inserted, then frees the cell (its last use in reverse order).
* Forward mode: the tangent dictionary maps a key to the value's tangent, with
  the dictionary's reference counting of values (tangent arrays are counted
  like their primals).

The adjoint arithmetic needs the value's type, which the C calls do not carry:
``name_dict_calls`` names each insertion, lookup and pop after the value type of
the dictionary the calling function works on (from its Numba signature), and a
value holding both pointers and floats (a tuple of an array and a float) is
refused. The mirrored calls go through aliases of the C functions
(``enzpy.dict.*``), so that differentiating a derivative again (second order)
meets calls it refuses by name instead of mirroring the mirror.
"""
from __future__ import annotations

import ctypes

from llvmlite import binding as llvm
from numba import _helperlib, types
from numba.core.registry import cpu_target

from .custom import FunctionRule, register
from .errors import UnsupportedError
from .frontend import signature_of
from .ir import Function, Value, leaf_kinds, local, tangent_name
from .irtext import type_text
from .reverse import locals_read
from .runtime import counted_loop
from .tape import POP, PUSH

# The C functions, their parameters, and which of them depend on the value type.
_PARAMS = {
    "numba_dict_new_sized": ("i32", [("ptr", "out"), ("i64", "n_keys"), ("i64", "key_size"),
                                     ("i64", "val_size")]),
    "numba_dict_set_method_table": ("void", [("ptr", "d"), ("ptr", "methods")]),
    "numba_dict_insert": ("i32", [("ptr", "d"), ("ptr", "key"), ("i64", "hash"), ("ptr", "val"),
                                  ("ptr", "old")]),
    "numba_dict_lookup": ("i64", [("ptr", "d"), ("ptr", "key"), ("i64", "hash"),
                                  ("ptr", "val")]),
    "numba_dict_delitem": ("i32", [("ptr", "d"), ("i64", "hash"), ("i64", "ix")]),
    "numba_dict_popitem": ("i32", [("ptr", "d"), ("ptr", "key"), ("ptr", "val")]),
    "numba_dict_iter": ("void", [("ptr", "it"), ("ptr", "d")]),
    "numba_dict_iter_next": ("i32", [("ptr", "it"), ("ptr", "key_ptr"), ("ptr", "val_ptr")]),
}
_TYPED = ("numba_dict_insert", "numba_dict_lookup", "numba_dict_popitem")
# What ``name_dict_calls`` appends: the value's kind ('double', 'float': floats
# of that type; 'ptr': pointers, e.g. arrays; 'int': no derivative; 'mixed';
# 'unknown': no dictionary type in the calling function's signature).
_KIND_SUFFIX = "["
MIRROR = "enzpy.dict."        # prefix of the aliases of the C functions

# The C layout read here (cext/dictobject.h): NB_Dict {used, keys};
# NB_DictKeys {size, usable, nentries, key_size, val_size, ...};
# NB_DictIter {parent, parent_keys, size, pos}; a methods table of 5 pointers
# {key_equal, key_incref, key_decref, value_incref, value_decref}.
_KEYS_OFFSET, _KEY_SIZE_OFFSET, _VAL_SIZE_OFFSET, _METHODS_OFFSET = 8, 24, 32, 56
_VALUE_INCREF = _METHODS_OFFSET + 3 * 8
_ERROR = 0          # statuses below this are errors (OK = 0, OK_REPLACED = 1)


def _layout_checked() -> bool:
    """Whether Numba's dictionary has the layout read here (made and read
    through its own C functions, once)."""
    c = ctypes
    address = _helperlib.c_helpers
    new = c.CFUNCTYPE(c.c_int, c.POINTER(c.c_void_p), c.c_ssize_t, c.c_ssize_t,
                      c.c_ssize_t)(address["dict_new_sized"])
    set_table = c.CFUNCTYPE(None, c.c_void_p, c.c_void_p)(address["dict_set_method_table"])
    free = c.CFUNCTYPE(None, c.c_void_p)(address["dict_free"])
    d = c.c_void_p()
    if new(c.byref(d), 0, 24, 40) != 0:
        return False
    try:
        table = (c.c_void_p * 5)(0, 0, 0, 0x1230, 0)
        set_table(d, c.cast(table, c.c_void_p))
        keys = c.c_void_p.from_address(d.value + _KEYS_OFFSET).value

        def word(offset):
            return c.c_ssize_t.from_address(keys + offset).value
        return (word(_KEY_SIZE_OFFSET), word(_VAL_SIZE_OFFSET), word(_VALUE_INCREF)) == \
            (24, 40, 0x1230)
    finally:
        set_table(d, c.cast((c.c_void_p * 5)(), c.c_void_p))
        free(d)


def _alias(name):
    """enzpy's name for the C function ``name`` (numba_dict_insert -> enzpy.dict.insert)."""
    return MIRROR + name[len("numba_dict_"):]


def _publish_aliases():
    for name in _PARAMS:
        llvm.add_symbol(_alias(name), _helperlib.c_helpers[name[len("numba_"):]])


_publish_aliases()
_LAYOUT_KNOWN = _layout_checked()


def _kind_of(value_type) -> str:
    try:
        llty = cpu_target.target_context.get_data_type(value_type)
    except (KeyError, NotImplementedError):
        return "unknown"
    kinds = leaf_kinds(type_text(llty)) - {"int"}
    if not kinds:
        return "int"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _dict_types(ty, found):
    if isinstance(ty, types.DictType):
        found.add(ty)
    elif isinstance(ty, types.BaseTuple):
        for t in ty:
            _dict_types(t, found)
    else:        # iterators and views (d.items(), d.values()) know their dictionary
        parent = getattr(ty, "parent", None) or getattr(ty, "iterable", None)
        if isinstance(parent, types.Type):
            _dict_types(parent, found)


def dictionary_kinds(symbol: str) -> tuple:
    """The kinds of the values and of the keys of the dictionary the function
    ``symbol`` works on: its first argument holding one (Numba's implementations
    take the dictionary, or an iterator over it, first)."""
    signature = signature_of(symbol)
    for ty in signature[0] if signature is not None else ():
        found = set()
        _dict_types(ty, found)
        if len(found) == 1:
            dict_type = found.pop()
            return _kind_of(dict_type.value_type), _kind_of(dict_type.key_type)
        if found:
            break
    return "unknown", "unknown"


_FLOAT_KEYS = ",float keys"


def name_dict_calls(module):
    """Give each insertion, lookup and pop its value kind (``numba_dict_insert[double]``),
    and an insertion into a dictionary whose keys may hold floats its key kind
    (``numba_dict_insert[double,float keys]``)."""
    for fn in module.functions.values():
        kinds = None
        for block in fn.blocks:
            for ins in block.instructions:
                if ins.opcode == "call" and ins.callee in _TYPED:
                    kinds = kinds or dictionary_kinds(fn.name)
                    value, key = kinds
                    float_keys = _FLOAT_KEYS if ins.callee == "numba_dict_insert" and \
                        key not in ("int", "ptr") else ""
                    ins.callee = f"{ins.callee}{_KIND_SUFFIX}{value}{float_keys}]"


def _split(name):
    """(C function, value kind, whether keys may hold floats) of a named call."""
    base, _, kind = name.partition(_KIND_SUFFIX)
    kind = kind.rstrip("]")
    return base, kind.removesuffix(_FLOAT_KEYS) or None, kind.endswith(_FLOAT_KEYS)


def _element(kind):
    return {"double": 8, "float": 4}.get(kind)


# -- IR pieces ---------------------------------------------------------------------------
def _size(d, field, name):
    return (f"  %{name}.keys.p = getelementptr i8, ptr {d}, i64 {_KEYS_OFFSET}\n"
            f"  %{name}.keys = load ptr, ptr %{name}.keys.p\n"
            f"  %{name}.p = getelementptr i8, ptr %{name}.keys, i64 {field}\n"
            f"  %{name} = load i64, ptr %{name}.p\n")


# A buffer for the key a pop from the shadow dictionary writes (the key is the primal's).
_KEY_SCRATCH = _size("%d", _KEY_SIZE_OFFSET, "ks") + "  %scratch = alloca i8, i64 %ks\n"


def _accumulate(kind):
    """``dst[i] += src[i]`` over ``bytes`` of floats of ``kind``."""
    ty, size = kind, _element(kind)
    body = (f"  %d = getelementptr {ty}, ptr %dst, i64 %i\n  %s = getelementptr {ty}, ptr %src, "
            f"i64 %i\n  %a = load {ty}, ptr %d\n  %b = load {ty}, ptr %s\n"
            f"  %sum = fadd {ty} %a, %b\n  store {ty} %sum, ptr %d")
    return f"""
define internal void @{MIRROR}accumulate.{kind}(ptr %dst, ptr %src, i64 %bytes) {{
entry:
  %n = udiv i64 %bytes, {size}
{counted_loop("elements", "%n", body, "done")}done:
  ret void
}}
"""


_DECLARATIONS = {
    **{symbol: f"declare {ret} @{symbol}({', '.join(t for t, _ in params)})"
       for name, (ret, params) in _PARAMS.items() for symbol in (name, _alias(name))},
    "calloc": "declare ptr @calloc(i64, i64)",
    "free": "declare void @free(ptr)",
    "llvm.memcpy.p0.p0.i64": "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
    "llvm.memset.p0.i64": "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
    **{f"{MIRROR}accumulate.{k}": _accumulate(k) for k in ("double", "float")},
}


class _Call:
    """One rule function of a dictionary operation: its C function (``base``), the
    value kind, which parameters are 'dup', and their shadows (tangents) by
    parameter name ("null" for a const one)."""

    def __init__(self, deriv, prefix):
        self.base, self.kind, self.float_keys = _split(deriv.fn.name)
        self.ret, params = _PARAMS[self.base]
        self.dup = {n: act == "dup" for (_, n), act in zip(params, deriv.activity)}
        self.s = {n: (local(prefix + n) if self.dup[n] else "null") for _, n in params}
        self.floats = _element(self.kind) is not None
        args = ", ".join(f"{t} {local(n)}" for t, n in params)
        self.primal = ("  " if self.ret == "void" else "  %status = ") + \
            f"call {self.ret} @{self.base}({args})\n"
        self.returned = "  ret void\n" if self.ret == "void" else f"  ret {self.ret} %status\n"

    def mirror(self, name, args, result="mirrored"):
        """The same C function called on the shadow dictionary (through its alias)."""
        ret = _PARAMS["numba_dict_" + name][0]
        call = f"call {ret} @{_alias('numba_dict_' + name)}({args})"
        return f"  {call}\n" if ret == "void" else f"  %{result} = {call}\n"

    def guarded(self, test, mirror):
        """The primal call, then ``mirror`` when the dictionary has a shadow and
        ``test`` (on %status) holds."""
        go, check = "%has", ""
        if test:
            go, check = "%go", f"  %ok = {test}\n  %go = and i1 %has, %ok\n"
        return (f"{self.primal}  %has = icmp ne ptr {self.s['d']}, null\n{check}"
                f"  br i1 {go}, label %mirror, label %done\n"
                f"mirror:\n{mirror}  br label %done\ndone:\n{self.returned}")


def _define(name, ret, params, body):
    return f'\ndefine internal {ret} @"{name}"({", ".join(params)}) {{\n{body}}}\n'


def _refuse(message):
    error = UnsupportedError(message)
    error.construct = "numba.typed.Dict"
    return error


def _check_stored(call, what):
    """A value with a shadow inserted into a dictionary without one (reading
    from one gives values without derivatives: it holds none)."""
    if call.base == "numba_dict_insert" and call.dup["val"] and not call.dup["d"]:
        raise _refuse(f"a value that may carry a derivative is inserted into a "
                      f"numba.typed.Dict enzpy keeps no {what} for (one passed in as an "
                      f"argument, or read from memory without a {what})")
    if call.float_keys and call.dup["key"]:
        # (a key read back, by iteration or popitem, would come without its derivative)
        raise _refuse("a dictionary key that may carry a derivative (a float computed from "
                      "the differentiated inputs) is inserted: keys carry no derivative; key "
                      "the dictionary by something constant and keep the float in its value")


# -- what both modes mirror alike ---------------------------------------------------------------
def _new_sized(call, value_size):
    """The shadow dictionary, made with the dictionary (values of ``value_size``)."""
    if not call.dup["out"]:
        return "entry:\n" + call.primal + call.returned
    mirror = call.mirror("new_sized", f"ptr {call.s['out']}, i64 %n_keys, i64 %key_size, "
                                      f"i64 {value_size}")
    return (f"entry:\n{call.primal}  %ok = icmp eq i32 %status, 0\n"
            f"  br i1 %ok, label %mirror, label %done\n"
            f"mirror:\n{mirror}  br label %done\ndone:\n{call.returned}")


def _method_table(call, count_values):
    """A copy of ``methods`` for the shadow dictionary: the key comparison, no key
    references; the value references if ``count_values``."""
    values = ("  %vi.p = getelementptr ptr, ptr %methods, i64 3\n  %vi = load ptr, ptr %vi.p\n"
              "  %vd.p = getelementptr ptr, ptr %methods, i64 4\n  %vd = load ptr, ptr %vd.p\n"
              if count_values else "")
    vi, vd = ("%vi", "%vd") if count_values else ("null", "null")
    stores = "".join(f"  %t{k} = getelementptr ptr, ptr %table, i64 {k}\n"
                     f"  store ptr {v}, ptr %t{k}\n"
                     for k, v in enumerate(["%eq", "null", "null", vi, vd]))
    mirror = call.mirror("set_method_table", f"ptr {call.s['d']}, ptr %table")
    return (f"entry:\n  %table = alloca [5 x ptr]\n{call.primal}"
            f"  %none = icmp eq ptr {call.s['d']}, null\n"
            f"  br i1 %none, label %done, label %mirror\n"
            f"mirror:\n  %eq = load ptr, ptr %methods\n{values}{stores}{mirror}"
            f"  br label %done\ndone:\n  ret void\n")


def _delitem(call):
    mirror = call.mirror("delitem", f"ptr {call.s['d']}, i64 %hash, i64 %ix")
    return "entry:\n" + call.guarded("icmp eq i32 %status, 0", mirror)


def _iter(call):
    """The shadow iterator walks the shadow dictionary (no shadow: a null parent)."""
    if not call.dup["it"]:
        return f"entry:\n{call.primal}  ret void\n"
    s = call.s
    mirror = call.mirror("iter", f"ptr {s['it']}, ptr {s['d']}")
    return (f"entry:\n{call.primal}  %none = icmp eq ptr {s['d']}, null\n"
            f"  br i1 %none, label %clear, label %mirror\n"
            f"clear:\n  store ptr null, ptr {s['it']}\n  ret void\n"
            f"mirror:\n{mirror}  ret void\n")


def _iter_next(call, cells):
    """Both iterators step together. The shadow of the pointer to the value is
    the cell (reverse mode: ``cells``) or the tangent dictionary's value; keys
    have none."""
    s, dup = call.s, call.dup
    clear_key = f"  store ptr null, ptr {s['key_ptr']}\n" if dup["key_ptr"] else ""
    clear_value = f"  store ptr null, ptr {s['val_ptr']}\n" if dup["val_ptr"] else ""
    if not dup["it"]:
        return f"entry:\n{call.primal}{clear_key}{clear_value}{call.returned}"
    value = ""
    if dup["val_ptr"]:
        at = "  %shadow.v = load ptr, ptr %at\n" if cells else \
            "  %shadow.v = getelementptr i8, ptr %at, i64 0\n"
        value = (f"  %ok = icmp eq i32 %mirrored, 0\n  br i1 %ok, label %found, label %end\n"
                 f"found:\n  %at = load ptr, ptr %valp\n{at}  br label %end\n"
                 f"end:\n  %shadow = phi ptr [ null, %step ], [ %shadow.v, %found ]\n"
                 f"  store ptr %shadow, ptr {s['val_ptr']}\n")
    step = call.mirror("iter_next", f"ptr {s['it']}, ptr %keyp, ptr %valp")
    return (f"entry:\n  %keyp = alloca ptr\n  %valp = alloca ptr\n{call.primal}{clear_key}"
            f"  %parent = load ptr, ptr {s['it']}\n  %none = icmp eq ptr %parent, null\n"
            f"  br i1 %none, label %absent, label %step\n"
            f"absent:\n{clear_value}  br label %done\n"
            f"step:\n{step}{value}  br label %done\n"
            f"done:\n{call.returned}")


# -- reverse mode: cells -------------------------------------------------------------------------
def _reverse(deriv) -> str:
    call = _Call(deriv, "~s.")
    if deriv.atomic:
        raise _refuse("a numba.typed.Dict used in a parallel loop (prange)")
    if call.base in _TYPED and call.kind not in ("double", "float", "ptr", "int") and \
            any(call.dup.get(n) for n in ("val", "old")):
        what = ("hold both pointers and floats (e.g. a tuple of an array and a float)"
                if call.kind == "mixed" else "have a type enzpy cannot tell")
        raise _refuse(f"a numba.typed.Dict whose values {what}: their adjoints cannot be kept "
                      f"per key; use one dictionary per value type")
    _check_stored(call, "shadow")
    aug, rev = _REVERSE[call.base](call)
    deriv.reverse_reads = locals_read(rev)
    return (_define(deriv.aug_name, call.ret, deriv.params, aug) +
            _define(deriv.rev_name, "void", deriv.params, rev))


_NO_REVERSE = "entry:\n  ret void\n"


def _cell_to_shadow(call, out, cell, label):
    """Forward: the shadow of a value read from the dictionary into ``out``: the
    cell's shadow pointers (zeros when absent). Floats: nothing (no adjoint yet)."""
    if call.kind != "ptr" or not call.dup[out]:
        return ""
    target = call.s[out]
    return (f"  %{label}.found = icmp ne ptr {cell}, null\n"
            f"  br i1 %{label}.found, label %{label}.copy, label %{label}.zero\n"
            f"{label}.copy:\n  call void @llvm.memcpy.p0.p0.i64(ptr {target}, ptr {cell}, "
            f"i64 %vs, i1 false)\n  br label %{label}.end\n"
            f"{label}.zero:\n  call void @llvm.memset.p0.i64(ptr {target}, i8 0, i64 %vs, "
            f"i1 false)\n  br label %{label}.end\n{label}.end:\n")


def _shadow_to_cell(call, out, cell, label):
    """Reverse of ``_cell_to_shadow`` for floats: the cell gains the adjoint of
    the value read; ``out`` loses it (the read overwrote it)."""
    if not (call.floats and call.dup[out]):
        return ""
    target = call.s[out]
    return (f"  %{label}.found = icmp ne ptr {cell}, null\n"
            f"  br i1 %{label}.found, label %{label}.add, label %{label}.end\n"
            f"{label}.add:\n  call void @{MIRROR}accumulate.{call.kind}(ptr {cell}, "
            f"ptr {target}, i64 %vs)\n  br label %{label}.end\n{label}.end:\n"
            f"  call void @llvm.memset.p0.i64(ptr {target}, i8 0, i64 %vs, i1 false)\n")


def _tape(slots):
    """Reserve ``slots`` (name, type) of 8 bytes, each set to zero."""
    text = f'  %slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 {8 * len(slots)})\n'
    for k, (_, ty) in enumerate(slots):
        zero = "null" if ty == "ptr" else "0"
        text += (f"  %slot.{k} = getelementptr i8, ptr %slot, i64 {8 * k}\n"
                 f"  store {ty} {zero}, ptr %slot.{k}\n")
    return text


def _record(slots):
    return "".join(f"  store {ty} %{name}, ptr %slot.{k}\n" for k, (name, ty) in enumerate(slots))


def _untape(slots):
    text = f'  %slot = call ptr @{POP}(ptr %"enzpy.tape", i64 {8 * len(slots)})\n'
    for k, (name, ty) in enumerate(slots):
        text += (f"  %slot.{k} = getelementptr i8, ptr %slot, i64 {8 * k}\n"
                 f"  %{name} = load {ty}, ptr %slot.{k}\n")
    return text


_INSERTED = [("cell", "ptr"), ("oldcell", "ptr"), ("vs", "i64")]
_READ = [("cell", "ptr"), ("vs", "i64")]


def _rev_insert(call):
    """A new cell holding the value's shadow; the cell it replaces comes back
    as the old value's."""
    s, dup = call.s, call.dup
    copy_in = (f"  call void @llvm.memcpy.p0.p0.i64(ptr %cell, ptr {s['val']}, i64 %vs, "
               f"i1 false)\n" if call.kind == "ptr" and dup["val"] else "")
    mirror = (_size("%d", _VAL_SIZE_OFFSET, "vs") +
              "  %cell = call ptr @calloc(i64 1, i64 %vs)\n" + copy_in +
              "  store ptr %cell, ptr %cellp\n  store ptr null, ptr %oldp\n" +
              call.mirror("insert", f"ptr {s['d']}, ptr %key, i64 %hash, ptr %cellp, ptr %oldp") +
              "  %oldcell = load ptr, ptr %oldp\n" + _record(_INSERTED) +
              _cell_to_shadow(call, "old", "%oldcell", "old"))
    aug = ("entry:\n  %cellp = alloca ptr\n  %oldp = alloca ptr\n" + _tape(_INSERTED) +
           call.guarded(f"icmp sge i32 %status, {_ERROR}", mirror))
    moved = (f"  call void @{MIRROR}accumulate.{call.kind}(ptr {s['val']}, ptr %cell, i64 %vs)\n"
             if call.floats and dup["val"] else "")
    rev = ("entry:\n" + _untape(_INSERTED) + _shadow_to_cell(call, "old", "%oldcell", "old") +
           "  %made = icmp ne ptr %cell, null\n  br i1 %made, label %release, label %done\n"
           f"release:\n{moved}  call void @free(ptr %cell)\n  br label %done\n"
           "done:\n  ret void\n")
    return aug, rev


def _rev_read(call, mirror_call, counted=""):
    """Lookup and pop: a value copied out of the dictionary into ``val``."""
    mirror = (_size("%d", _VAL_SIZE_OFFSET, "vs") + mirror_call +
              "  %cell = load ptr, ptr %cellp\n" + _record(_READ) +
              _cell_to_shadow(call, "val", "%cell", "out") + counted)
    test = "icmp eq i32 %status, 0" if call.ret == "i32" else None
    aug = ("entry:\n  %cellp = alloca ptr\n  store ptr null, ptr %cellp\n" + _tape(_READ) +
           call.guarded(test, mirror))
    rev = "entry:\n" + _untape(_READ) + _shadow_to_cell(call, "val", "%cell", "out")
    return aug, rev + "  ret void\n"


def _rev_lookup(call):
    return _rev_read(call, call.mirror("lookup", f"ptr {call.s['d']}, ptr %key, i64 %hash, "
                                                 f"ptr %cellp"))


def _rev_popitem(call):
    s = call.s
    mirror = _KEY_SCRATCH + call.mirror("popitem", f"ptr {s['d']}, ptr %scratch, ptr %cellp")
    # The dictionary's reference to the value passes to the caller, who drops
    # it; the shadow dictionary holds none (cells are not counted): the shadow
    # value gets one, from the dictionary's own value_incref.
    counted = ""
    if call.kind == "ptr" and call.dup["val"]:
        counted = (f"  %vi.p = getelementptr i8, ptr %ks.keys, i64 {_VALUE_INCREF}\n"
                   f"  %vi = load ptr, ptr %vi.p\n  %counts = icmp ne ptr %vi, null\n"
                   f"  br i1 %counts, label %incref, label %counted\n"
                   f"incref:\n  call void %vi(ptr {s['val']})\n  br label %counted\n"
                   f"counted:\n")
    return _rev_read(call, mirror, counted)


_REVERSE = {"numba_dict_new_sized": lambda call: (_new_sized(call, 8), _NO_REVERSE),
            "numba_dict_set_method_table": lambda call: (_method_table(call, False),
                                                         _NO_REVERSE),
            "numba_dict_insert": _rev_insert, "numba_dict_lookup": _rev_lookup,
            "numba_dict_popitem": _rev_popitem,
            "numba_dict_delitem": lambda call: (_delitem(call), _NO_REVERSE),
            "numba_dict_iter": lambda call: (_iter(call), _NO_REVERSE),
            "numba_dict_iter_next": lambda call: (_iter_next(call, cells=True), _NO_REVERSE)}


# -- forward mode: the tangent dictionary -------------------------------------------------------
def _forward(deriv) -> str:
    call = _Call(deriv, tangent_name(""))
    _check_stored(call, "tangent")
    body = {"numba_dict_new_sized": lambda: _new_sized(call, "%val_size"),
            "numba_dict_set_method_table": lambda: _method_table(call, True),
            "numba_dict_delitem": lambda: _delitem(call),
            "numba_dict_iter": lambda: _iter(call),
            "numba_dict_iter_next": lambda: _iter_next(call, cells=False)}.get(
        call.base, lambda: _fwd_copying(call))()
    return _define(deriv.name, call.ret, deriv.params, body)


def _fwd_copying(call):
    """Insertion, lookup, pop on the tangent dictionary: the value's tangent
    goes in or comes out (zeros in for a const value, scratch memory out)."""
    t, dup = call.s, call.dup

    def buffer(name, zero):
        if dup[name]:
            return t[name], ""
        fill = f"  call void @llvm.memset.p0.i64(ptr %{name}.b, i8 0, i64 %vs, i1 false)\n"
        return f"%{name}.b", f"  %{name}.b = alloca i8, i64 %vs\n" + (fill if zero else "")

    size = _size("%d", _VAL_SIZE_OFFSET, "vs")
    if call.base == "numba_dict_insert":
        (val, v), (old, o) = buffer("val", True), buffer("old", False)
        mirror = size + v + o + call.mirror(
            "insert", f"ptr {t['d']}, ptr %key, i64 %hash, ptr {val}, ptr {old}")
        test = f"icmp sge i32 %status, {_ERROR}"
    elif call.base == "numba_dict_lookup":
        val, v = buffer("val", False)
        mirror = size + v + call.mirror("lookup", f"ptr {t['d']}, ptr %key, i64 %hash, "
                                                  f"ptr {val}")
        test = None
    else:
        val, v = buffer("val", False)
        mirror = size + v + _KEY_SCRATCH + call.mirror(
            "popitem", f"ptr {t['d']}, ptr %scratch, ptr {val}")
        test = "icmp eq i32 %status, 0"
    return "entry:\n" + call.guarded(test, mirror)


class DictRule(FunctionRule):
    def selector_params(self, name):
        base, _, _ = _split(name)
        if base in ("numba_dict_insert", "numba_dict_lookup"):
            return frozenset({[n for _, n in _PARAMS[base][1]].index("key")})
        return frozenset()

    def signature(self, name, module):
        base, _, _ = _split(name)
        if base not in _PARAMS or not _LAYOUT_KNOWN:
            return None
        ret, params = _PARAMS[base]
        return Function(name, ret, [Value(local(n), t, "arg", n) for t, n in params], [])

    def reverse(self, deriv, builder):
        return _reverse(deriv)

    def forward(self, deriv, builder):
        return _forward(deriv)

    def declarations(self):
        return _DECLARATIONS


register(DictRule())
