"""Shadow memory: the shadows of pointers, allocas and runtime calls on memory.

Mixed into the generator (``reverse.ReverseGenerator``): address computations
replayed on shadow pointers, the one zeroed block per call holding the shadows
of a function's allocas, null shadows (memory that carries no derivative),
Numba's reference counting and frees (postponed to the reverse sweep when the
reverse sweep may still need the memory), and bulk copies.
"""
from __future__ import annotations

import hashlib
import re
from functools import cached_property

from numba.core import serialize

from .analysis import (ALLOCATORS, ARRAY_ALLOCATORS, DERIVED_POINTERS, POINTER_PROPAGATING,
                       RAW_ALLOCATORS, RESIZERS, pointer_roots, region)
from .custom import rule_for
from .emitter import Emitter
from .errors import UnsupportedError
from .ir import (Instruction, Value, contains_float, contains_pointer, fields_of, is_float_type,
                 local)
from .runtime import VARSIZE_FREE
from .tape import SHADOW_DROP, SHADOW_HOLD, SINK_READ, SINK_WRITE, TAPE_ARG, slot_bytes

FREES = ("NRT_decref", "NRT_Free")
_METADATA = __import__("re").compile(r",\s*!\w+\s+!\d+")


# Calls that receive a pointer to copied memory without reading its content as
# data: reference counts, a meminfo's data pointer, lifetime markers.
_OPAQUE_SAFE = __import__("re").compile(
    r"^(NRT_(incref|decref|MemInfo_data_fast|MemInfo_data)|llvm\.(lifetime|assume))")
# A varsize (re)allocation or free moves or drops the bytes, whatever they hold:
# it tells nothing of them, so the loads and stores must.
_VARSIZE_CALLS = __import__("re").compile(r"^NRT_MemInfo_varsize_(alloc|realloc|free)$")


# Calls that write no memory a memset could have initialized.
_WRITES_NO_MEMORY = __import__("re").compile(
    r"^(NRT_(incref|decref|MemInfo_data_fast|MemInfo_data)$|llvm\.(?!mem))")


def _scalar_kind(ty: str):
    """'ptr', a float type, 'int', or None (an aggregate: see its leaves)."""
    if ty == "ptr" or is_float_type(ty):
        return ty
    if ty.startswith("i"):
        return "int"
    return None


def _leaf_types(ty: str) -> list:
    """The scalar types an aggregate type is made of."""
    fields = fields_of(ty)
    return [leaf for t in set(fields) for leaf in _leaf_types(t)] if fields else [ty.strip()]


def shadow_name(name: str) -> str:
    return "~s." + name


def explain(callee: str) -> str:
    callee = callee or ""            # (an indirect call)
    if callee.startswith("numba_list_"):
        return ("; this is numba.typed.List, whose C implementation enzpy cannot differentiate "
                "yet: use a list ([...]), a tuple, an array or a jitclass object")
    if callee.startswith(("numba_x", "numba_ez_")):
        return ("; this is LAPACK or BLAS, differentiated only through enzpy's rules for "
                "np.linalg and products, which cover real (float32, float64) matrices: "
                "complex ones are not differentiated")
    if callee in ("numba_frexp", "numba_frexpf"):
        return ("; this is math.frexp (np.frexp), whose mantissa x / 2**e depends on x: "
                "compute the exponent e apart and the mantissa as x * 2.0**-e")
    if callee in ("numba_cpow", "numba_cpowf"):
        return ("; this is a complex power (z ** p, p not a small integer), which enzpy "
                "does not differentiate: write it as np.exp(p * np.log(z))")
    if callee.startswith("numba_dict_"):
        return "; this is numba.typed.Dict, whose operation enzpy does not mirror"
    if callee.startswith("enzpy.dict."):
        return ("; this is the first derivative's mirror of a numba.typed.Dict: second-order "
                "derivatives through a dictionary are not supported")
    if PYTHON_OBJECT_CALL.match(callee):
        return ("; this turns the value into a Python object for Python code (objmode, a "
                "call into Python), where enzpy cannot follow its derivative: hand to Python "
                "only values that do not depend on the differentiated inputs (print() of a "
                "float or an array is fine)")
    return ""


# Python's C API, which Numba calls to box values (print, objmode, callbacks).
PYTHON_OBJECT_CALL = re.compile(r"Py[A-Z]\w*_|numba_(box|unbox)_|NRT_adapt_ndarray_to_python")


def null_shadow(ty: str) -> Value:
    return Value("null" if ty == "ptr" else "zeroinitializer", ty, "const")


def static_exception(cls, message) -> tuple:
    """(global name, IR definition) of the record Numba's code stores into its
    ``excinfo`` to raise ``cls(message)``: the pickled exception, its length
    and its SHA-1, laid out as ``numba.core.pythonapi`` serializes it."""
    data = serialize.dumps((cls, (message,), None))
    digest = hashlib.sha1(data).digest()
    name = f"enzpy.exc.{digest.hex()}"

    def array(raw: bytes) -> str:
        return f"[{len(raw)} x i8] c\"" + "".join(f"\\{b:02X}" for b in raw) + "\""

    return name, (f"@{name}.data = internal constant {array(data)}\n"
                  f"@{name}.sha1 = internal constant {array(digest)}\n"
                  f"@{name} = internal constant {{ ptr, i32, ptr, ptr, i32 }} "
                  f"{{ ptr @{name}.data, i32 {len(data)}, ptr @{name}.sha1, ptr null, i32 0 }}")


def zero_allocation(e: Emitter, ins, shadow: Value):
    """Zero the data of ``shadow``, a new allocation made like ``ins`` (whose
    first argument is the size in bytes)."""
    data = shadow if ins.callee in RAW_ALLOCATORS else \
        e.call("NRT_MemInfo_data_fast", "ptr", [shadow])
    e.emit(f"call void @llvm.memset.p0.i64(ptr {data.ref}, i8 0, {ins.args[0].typed()}, "
           f"i1 false)")


def strip_metadata(text: str) -> str:
    return _METADATA.sub("", text)


class ShadowMemory:
    """Generator methods for memory: see the module docstring."""

    sink_read, sink_write = SINK_READ, SINK_WRITE
    # (the tangent function's differs from the augmented forward's: a tangent
    # function is differentiated again for second order)
    lost_flag = "~lost"

    def guard(self, ptr: Value, write=False) -> Value:
        """``ptr``, or scratch memory when it is null: a shadow pointer is null
        when its primal points to memory that carries no derivative. Reads then
        see zeros (a buffer never written); writes go to a second buffer."""
        sink = Value(f"@{self.sink_write if write else self.sink_read}", "ptr", "global")
        if ptr.ref == "null":
            return sink
        if self._never_null(ptr):
            return ptr
        return self.e.define("ptr", f"select i1 {self._null_test(ptr).ref}, ptr {sink.ref}, "
                                    f"ptr {ptr.ref}")

    # -- derivatives written where memory has no shadow at run time -------------
    def may_lose_derivative(self, ins) -> bool:
        """A store of a float that depends on the differentiated inputs through a
        pointer whose shadow may be null at run time: memory that carries no
        derivative (an array held in a Const ``numba.typed.Dict``/``List``, a
        Const array in a Duplicated container), where the derivative would be
        dropped. Such a store is checked when it runs (``check_lost_derivative``)."""
        if ins.opcode != "store":
            return False
        value, ptr = ins.operands
        if not (contains_float(value.type) and self.act.is_varied(value)
                and self.act.is_shadowed(ptr)):
            return False
        if ptr.kind == "arg":
            return shadow_name(ptr.name) not in self.nonnull_params
        return ptr.kind != "inst" or not self.shadow_never_null(ptr.name)

    def lost_derivative_checks(self) -> list:
        """The stores of this function checked by ``check_lost_derivative``."""
        if self._lossy_stores is None:
            self._lossy_stores = [ins for b in self.fn.blocks for ins in b.instructions
                                  if self.may_lose_derivative(ins)]
        return self._lossy_stores

    def declare_lost_flag(self):
        """In the entry block: the flag the checks raise (before any of them runs)."""
        if self.lost_derivative_checks():
            self.e.emit(f"{local(self.lost_flag)} = alloca i1")
            self.e.emit(f"store i1 false, ptr {local(self.lost_flag)}")

    def check_lost_derivative(self, shadow: Value):
        """After a store that ``may_lose_derivative``: raise the flag when the
        shadow it writes through is null."""
        e = self.e
        flag = local(self.lost_flag)
        was = e.define("i1", f"load i1, ptr {flag}")
        now = e.define("i1", f"or i1 {was.ref}, {self._null_test(shadow).ref}")
        e.emit(f"store i1 {now.ref}, ptr {flag}")

    def return_raising_if_lost(self, ret) -> bool:
        """Emit the function's return ``ret`` so that a call that wrote a
        derivative where no shadow was (``check_lost_derivative``) raises
        UnsupportedError instead of returning a wrong derivative. The check is
        made where the function returns (whatever the primal did is done, and
        recorded: a caller catching the exception finds a consistent tape), and
        an exception the primal raised is kept. False: nothing to check."""
        checks = self.lost_derivative_checks()
        if not checks or ret.opcode != "ret" or not ret.operands:
            return False
        status = ret.operands[0]
        if status.type != "i32":
            return False
        e = self.e
        exc = self._lost_excinfo(checks[0])
        lost = e.define("i1", f"load i1, ptr {local(self.lost_flag)}")
        ok = e.define("i1", f"icmp eq i32 {status.ref}, 0")
        none = e.define("i1", f"icmp eq i32 {status.ref}, -2")
        fine = e.define("i1", f"or i1 {ok.ref}, {none.ref}")
        raise_ = e.define("i1", f"and i1 {lost.ref}, {fine.ref}")
        excinfo = self.fn.args[1]
        old = e.define("ptr", f"load ptr, ptr {excinfo.ref}")
        new = e.define("ptr", f"select i1 {raise_.ref}, ptr {exc}, ptr {old.ref}")
        e.emit(f"store ptr {new.ref}, ptr {excinfo.ref}")
        code = e.define("i32", f"select i1 {raise_.ref}, i32 1, i32 {status.ref}")
        e.emit(f"ret i32 {code.ref}")
        return True

    def _lost_excinfo(self, ins) -> str:
        """A Numba static exception (pickled, as Numba emits ``raise``) naming
        the first checked store of the function."""
        message = (f"a value that depends on the differentiated inputs is written into "
                   f"memory that has no derivative at run time{self._where(ins)}: the "
                   f"array written has no shadow (an argument passed as Const, an array "
                   f"held in a Const container such as numba.typed.Dict or "
                   f"numba.typed.List, or a Const array inside a Duplicated one), and its "
                   f"derivative would be lost; pass the array itself as Duplicated, or "
                   f"keep it in a tuple, list or jitclass object passed as Duplicated "
                   f"(typed dictionaries and lists cannot be)")
        name, definition = static_exception(UnsupportedError, message)
        self.builder.declarations[name] = definition
        return f"@{name}"

    def _null_test(self, ptr: Value) -> Value:
        """An i1 true when the shadow pointer ``ptr`` is null. An address
        computed from a shadow is null exactly when that shadow is: its test is
        the one of the pointer it came from, so after inlining into the entry
        (which passes array shadows known not to be null) every test of a loop
        over an array folds away and the loop can vectorise."""
        e = self.e
        test = e.null_tests.get(ptr.ref)
        if test is None:
            test = e.define("i1", f"icmp eq ptr {ptr.ref}, null")
        return test

    def _never_null(self, ptr: Value) -> bool:
        """Whether the shadow pointer ``ptr`` cannot be null: the forward
        sweep's shadow of an instruction (``~s.<name>``) or a value of one the
        reverse sweep got back (``never_null_refs``), when ``shadow_never_null``;
        or a parameter's shadow every caller passes non-null (``nonnull_params``).
        Accesses through it need no test,
        and loops over it can vectorise where the derivative is not inlined."""
        if ptr.ref in self.never_null_refs or ptr.name in self.nonnull_params:
            return True
        return ptr.name.startswith("~s.") and self.shadow_never_null(ptr.name[len("~s."):])

    def shadow_never_null(self, name: str) -> bool:
        """Whether the shadow of instruction ``name`` is never null: it is the
        shadow of an allocation of this function (enzpy's shadow allocations
        never return null: an arena traps when out of memory, and a failed
        Numba allocation would fault in the zeroing that follows it) or of a
        parameter in ``nonnull_params``, an address into one or its data
        pointer, or a phi or select of such values. Other parameters' shadows
        may be null (the shadow of memory that carries no derivative), and so
        may a pointer loaded from memory."""
        known = self._shadows_never_null
        if name not in known:
            known[name] = self._allocation_shadow(name, set())
        return known[name]

    def _allocation_shadow(self, name: str, visiting: set) -> bool:
        if name in visiting:
            return True         # a cycle of phis adds no value of its own
        ins = self.fn.defs.get(name)
        if ins is None:
            return False
        if ins.opcode == "alloca" or ins.callee in ALLOCATORS:
            return True
        visiting.add(name)
        if ins.opcode in ("getelementptr", "bitcast") or ins.callee in DERIVED_POINTERS:
            sources = ins.operands[:1] if ins.opcode != "call" else ins.args[:1]
        elif ins.opcode == "phi":
            sources = [v for v, _ in ins.incoming]
        elif ins.opcode == "select":
            sources = ins.operands[1:]
        else:
            return False
        return all(shadow_name(v.name) in self.nonnull_params if v.kind == "arg" else
                   v.kind == "inst" and v.name in self.act.shadowed
                   and self._allocation_shadow(v.name, visiting) for v in sources)

    @cached_property
    def nonnull_params(self) -> frozenset:
        """The shadow names of the parameters whose shadows are never null: those
        every caller passes non-null (``nonnull_shadows``: the root's array data,
        from the entry), and Numba's return slot (parameter 0, ``retptr``). Every
        caller passes a return slot of its own: a stack slot it allocates (the
        entry's, when the return is differentiated), or its own return slot where
        LLVM forwarded it; a slot's shadow is a slot too."""
        first = self.fn.args[0].name if self.fn.args else ""
        slot = {shadow_name(first)} if first.startswith("retptr") else set()
        return frozenset(getattr(self.d, "nonnull_shadows", ())) | slot

    def _reverse_runtime_call(self, ins, block) -> bool:
        """Reverse of Numba runtime calls and memory intrinsics; False if ``ins`` is none."""
        e, callee = self.e, ins.callee
        if callee in RAW_ALLOCATORS:
            # Raw memory (no reference count) and its shadow live until here,
            # after the reverse of every use (see _freed_by_reverse).
            for pointer in (self.primal(ins.value, block), self.shadow(ins.value, block)):
                e.call("NRT_Free", "void", [pointer])
            return True
        if callee in ALLOCATORS:
            # Drop the reference the reverse sweep held (see _hold_for_reverse).
            if not self.freed_by_primal(ins):
                e.call("NRT_decref", "void", [self.primal(ins.value, block)])
            if self.act.is_shadowed(ins.value):
                shadow = self.shadow(ins.value, block)
                if callee in ARRAY_ALLOCATORS:      # (possibly an arena's: see tape)
                    e.call(SHADOW_DROP, "void", [TAPE_ARG, shadow])
                else:
                    e.call("NRT_decref", "void", [shadow])
            return True
        if callee in FREES or callee == VARSIZE_FREE:
            return True
        if callee.startswith("llvm.memset") and self.act.is_shadowed(ins.args[0]):
            # The bytes set carry no adjoint. Shadow pointers are left alone
            # (the destructor of a shadow container still needs them).
            if self._set_type(ins) != "ptr" and not self._initializes(ins):
                e.call("enzpy.memzero", "void", [self.shadow(ins.args[0], block),
                                                 self.primal(ins.args[2], block)])
            return True
        if callee.startswith(("llvm.memcpy", "llvm.memmove")) and (
                self.act.is_shadowed(ins.args[0]) or self.act.is_shadowed(ins.args[1])):
            elt = self._copied_type(ins)
            if elt in (None, "ptr"):
                return True
            e.call(f"enzpy.memcpy.adjoint.{elt}", "void",
                   [self.shadow(ins.args[0], block), self.shadow(ins.args[1], block),
                    self.primal(ins.args[2], block)])
            return True
        return False

    def _set_type(self, ins):
        """What a memset writes over: as ``_copied_type``, or None when unknown."""
        return self._copied_type(ins, refuse=False)

    def _initializes(self, ins) -> bool:
        """A memset of a fresh allocation, reached from the allocation along a
        straight path (blocks with one predecessor) with no float written and
        nothing called there (Numba's initialization of a list's items): no
        adjoint can reach what it overwrites, so its reverse has nothing to
        zero (zeroing could wipe the shadow pointers of containers holding both
        pointers and floats)."""
        root = self._root(ins.args[0])[2]
        if root is None or root.callee not in ALLOCATORS:
            return False
        block, end = ins.block, ins.block.instructions.index(ins)
        while True:
            body = block.instructions[:end]
            start = body.index(root) + 1 if root.block is block else 0
            for other in body[start:]:
                if other.opcode == "store" and contains_float(other.operands[0].type):
                    return False
                if other.opcode == "call" and not _WRITES_NO_MEMORY.match(other.callee):
                    return False
            if root.block is block:
                return True
            preds = self.cfg.preds(block.name)
            if len(preds) != 1:
                return False
            block = self.fn.block_map[preds[0]]
            end = len(block.instructions)

    def _hold_for_reverse(self, e, ins, shadow):
        """The reverse sweep holds one reference to every allocation (and its
        shadow), dropped by the reverse of the allocation, which comes after
        the reverse of every use: the forward sweep frees nothing the reverse
        sweep still reads, whatever the order of Numba's reference counting.
        An array the reverse sweep never reads is not held (``freed_by_primal``)."""
        if not self.freed_by_primal(ins):
            e.call("NRT_incref", "void", [ins.value])
        if shadow is not None and ins.callee in ARRAY_ALLOCATORS:
            e.call(SHADOW_HOLD, "void", [TAPE_ARG, shadow])
        elif shadow is not None:
            e.call("NRT_incref", "void", [shadow])

    def freed_by_primal(self, ins) -> bool:
        """An array allocation the reverse sweep never reads, freed where Numba
        frees it. Only read-only memory is read again by a reverse sweep
        (ReadOnlyMemory; a callee's parameter is read-only only if every caller
        passes read-only memory, and memory reached through a pointer read from
        memory never is): the array is written during the call, or this function
        only hands it on (Numba's allocation helper returns it). No address into
        it is recomputed from its meminfo either (``held``). Its shadow is held:
        the reverse sweep adds into it."""
        if ins.callee not in ARRAY_ALLOCATORS:
            return False
        key = ins.name
        if key not in self._early_freed:
            self._early_freed[key] = not self.builder.readonly.is_readonly(
                self.fn, ins.value) or not self._read_here(ins.value)
        return self._early_freed[key]

    def _read_here(self, allocation) -> bool:
        """Whether this function loads from, or passes to a call, memory of ``allocation``."""
        if self._roots_read is None:
            self._roots_read = set()
            for b in self.fn.blocks:
                for ins in b.instructions:
                    if ins.opcode == "load":
                        pointers = [ins.operands[0]]
                    elif ins.opcode == "call" and not _OPAQUE_SAFE.match(ins.callee or ""):
                        pointers = [a for a in ins.args if a.type == "ptr"]
                    else:
                        continue
                    for p in pointers:
                        self._roots_read |= pointer_roots(self.fn, p)
        return ("local", allocation.name) in self._roots_read

    def held(self, meminfo) -> bool:
        """Whether the allocation of ``meminfo`` is alive until the reverse sweep is
        done (its data pointer can be computed from it again there): an allocation
        here that is held, or a parameter whose Numba type is not an array (a
        list's, a jitclass object's: only arrays are freed early). A meminfo read
        from memory may be an array freed since."""
        kind, name, root = self._root(meminfo)
        if root is not None:
            return root.opcode == "call" and root.callee in ALLOCATORS and \
                root.callee not in RAW_ALLOCATORS and not self.freed_by_primal(root)
        if kind != "arg":
            return False
        index = [a.name for a in self.fn.args].index(name)
        return self.builder.array_meminfo_param(self.fn.name, index) is False

    def _freed_by_reverse(self, ins) -> bool:
        """A free of raw memory with a shadow: the reverse of its allocation frees
        it (with its shadow), after the reverse of every use; the reverse of the
        free itself comes before the reverse of the uses before it."""
        return ins.callee == "NRT_Free" and self.act.is_shadowed(ins.args[0])

    def _root(self, v: Value):
        """The allocation, argument or load a pointer is derived from, as
        (kind, name, instruction or None); a meminfo's data is its meminfo's."""
        while v.kind == "inst":
            ins = self.fn.defs[v.name]
            if ins.opcode in ("getelementptr", "bitcast", "addrspacecast", "freeze") or \
                    ins.callee in DERIVED_POINTERS or ins.callee in RESIZERS:
                v = ins.operands[0]
            else:
                return ("inst", ins.name, ins)
        return (v.kind, v.name or v.ref, None)

    def _copied_type(self, ins, refuse=True):
        """What a memcpy/memmove moves (or a memset sets): ``'ptr'`` (shadow memory mirrors
        pointers with their shadows), a float type, or None for memory holding
        only integers. Decided from every load and store on the memory it
        copies from or to (following chains of copies), the allocas' types and
        the types of the arrays received as arguments or passed to calls there;
        memory holding both pointers and floats, or whose content is unknown,
        is refused (without ``refuse``: None, and no message is made)."""
        roots = self._merged_roots({self._root(a)[:2] for a in ins.args[:2]
                                    if a.type == "ptr"})
        own = set(roots)            # this copy's own source and destination
        accessed, calls, copies = self._memory_uses
        grown = True
        while grown:                # copies sharing memory with this one move the same type
            grown = False
            for touched in copies:
                if touched & roots and not touched <= roots:
                    roots |= self._merged_roots(touched)
                    grown = True
        # typed_ints: this copy's source or destination is an integer or boolean
        # array's data (its element type, unlike a load's, covers all of the
        # memory): the copy moves integers, whatever else is unknown
        found, unknown, resized, typed_ints = set(), False, False, False
        for root in roots:
            found |= accessed.get(root, set())
            for callee, index in calls.get(root, ()):
                element = self.builder.data_pointer_type(callee, index) if callee else None
                if element is not None:
                    found.add(element)
                    typed_ints |= element == "int" and root in own
                elif _VARSIZE_CALLS.match(callee or ""):
                    resized = True
                elif not _OPAQUE_SAFE.match(callee or ""):
                    unknown = True
        unknown |= resized and not (found - {None})
        names = [a.name for a in self.fn.args]
        for kind, name in roots:
            if kind == "arg":
                element = self.builder.data_pointer_type(self.fn.name, names.index(name))
                found.add(element)
                unknown |= element is None
                typed_ints |= element == "int" and (kind, name) in own
            elif kind == "inst" and self.fn.defs[name].opcode == "alloca":
                source = self.fn.defs[name].source_type
                found |= {_scalar_kind(t) for t in _leaf_types(source)}
            elif kind == "inst" and (self.fn.defs[name].opcode in ("phi", "select") or
                                     self.fn.defs[name].opcode == "load" and
                                     self._slot_sources(self.fn.defs[name]) is not None):
                continue                # its sources are roots too (_merged_roots)
            elif kind == "inst" and self.fn.defs[name].opcode == "load":
                element = self._returned_element(self.fn.defs[name])
                found.add(element)
                unknown |= element is None
                typed_ints |= element == "int" and (kind, name) in own
            elif kind != "inst" or self.fn.defs[name].opcode != "call" or \
                    self.fn.defs[name].callee not in ALLOCATORS:
                unknown = True
        found.discard(None)
        found.discard("int")
        if found == {"ptr"}:
            return "ptr"
        if len(found) == 1 and found <= {"double", "float"}:
            try:
                self._refuse_off_stride_records(ins)
            except UnsupportedError:
                if refuse:
                    raise
                return None
            return found.pop()
        if found and refuse:
            raise UnsupportedError(f"`{ins.text}` copies memory holding both pointers and "
                                   f"floats (or floats of two types){self._where(ins)}")
        if unknown and not typed_ints and refuse:   # (an integer array's bytes are moved)
            raise UnsupportedError(f"cannot tell what `{ins.text}` copies{self._where(ins)}")
        return None

    @cached_property
    def _memory_uses(self) -> tuple:
        """What ``_copied_type`` reads of the function, by root (as ``_root``): the
        kinds of the loads and stores, the (callee, argument index) of the calls
        other than bulk copies, and the roots each bulk copy touches (computed
        once: a function copies memory often)."""
        accessed, calls, copies = {}, {}, []
        for b in self.fn.blocks:
            for other in b.instructions:
                if other.opcode in ("load", "store"):
                    ptr = other.operands[0] if other.opcode == "load" else other.operands[1]
                    ty = other.type if other.opcode == "load" else other.operands[0].type
                    accessed.setdefault(self._root(ptr)[:2], set()).add(_scalar_kind(ty))
                elif other.opcode == "call" and other.callee.startswith(
                        ("llvm.memcpy", "llvm.memmove", "llvm.memset")):
                    copies.append({self._root(a)[:2] for a in other.args[:2] if a.type == "ptr"})
                elif other.opcode == "call":
                    for index, a in enumerate(other.args):
                        if a.type == "ptr":
                            calls.setdefault(self._root(a)[:2], []).append((other.callee, index))
        return accessed, calls, copies

    def _refuse_off_stride_records(self, ins):
        """A copy of floats moves their derivatives as an array of floats: refuse
        it where the function holds records whose floats are off that stride
        (``frontend.off_stride_records``), which it would scramble."""
        low = self.builder.lowered.get(self.fn.name)
        packed = low.off_stride_records if low is not None else []
        if packed:
            raise UnsupportedError(
                f"a bulk copy (`{ins.text.strip()}`){self._where(ins)}, which holds records "
                f"of a packed dtype ({packed[0]}): their floats are not at multiples of "
                f"their size, and a copy's derivative moves whole floats; make the dtype "
                f"with np.dtype(..., align=True)")

    def _merged_roots(self, roots) -> set:
        """``roots`` with the roots of what each phi or select among them picks
        from (a pointer that is null or an allocation on different paths, as a
        set's table is): the memory is any of them. A null source is no memory."""
        merged, todo = set(), list(roots)
        while todo:
            root = todo.pop()
            if root in merged:
                continue
            merged.add(root)
            kind, name = root
            ins = self.fn.defs.get(name) if kind == "inst" else None
            if ins is not None and ins.opcode in ("phi", "select"):
                sources = [v for v, _ in ins.incoming] if ins.opcode == "phi" \
                    else ins.operands[1:]
                todo += [self._root(v)[:2] for v in sources if v.ref != "null"]
            elif ins is not None and ins.opcode == "load":
                todo += [self._root(v)[:2] for v in self._slot_sources(ins) or ()]
        return merged

    def _stack_slot(self, load):
        """(the alloca ``load`` reads from, the call returning into it or None),
        or None when ``load`` does not read from a stack slot."""
        slot = self._root(load.operands[0])[2]
        if slot is None or slot.opcode != "alloca":
            return None
        return slot, next((user for user in self.fn.users.get(slot.name, ())
                           if user.opcode == "call" and user.args
                           and user.args[0].name == slot.name), None)

    def _slot_sources(self, load):
        """The pointers the function stored where ``load`` reads a pointer from a
        stack slot it fills itself (an array's struct it built on the stack: a
        view, ``x.reshape(3, 3)``, of memory allocated or received), or None."""
        found = self._stack_slot(load)
        if found is None or found[1] is not None:
            return None
        return self._stored_at(found[0], load.operands[0]) or None

    def _returned_element(self, load):
        """The float type of an array a call returned (its data pointer ``load``
        read from the return slot the call filled)."""
        found = self._stack_slot(load)
        if found is None or found[1] is None:
            return None
        return self.builder.data_pointer_type(found[1].callee, 0)

    def _after(self, pointer, offset) -> bool:
        """Whether ``pointer`` points at a constant offset past ``offset``."""
        at = region(self.fn, Value(local(pointer.name), "ptr", "inst", pointer.name))
        return at is not None and at[1] is not None and at[1] > offset

    def _stored_at(self, slot, address):
        """The pointers (other than null) stored into ``slot`` at ``address``'s
        constant offset, or None unless every write to the slot is a store of a
        scalar at a constant offset or a call given a pointer past that offset
        (Numba's reshape writes the shape and strides after the data pointer)."""
        offset = region(self.fn, address)
        if offset is None or offset[1] is None:
            return None
        stored, pending = [], [slot]
        while pending:
            pointer = pending.pop()
            for user in self.fn.users.get(pointer.name, ()):
                if user.opcode in ("getelementptr", "bitcast") and \
                        user.operands[0].ref == local(pointer.name):
                    pending.append(user)
                elif user.opcode == "load" or user.opcode == "call" and \
                        user.callee.startswith("llvm.lifetime"):
                    continue
                elif user.opcode == "call" and self._after(pointer, offset[1]):
                    continue        # (a call writes from the pointer it is given on)
                elif user.opcode == "store" and user.operands[1].ref == local(pointer.name) \
                        and user.operands[0].ref != local(pointer.name):
                    at = region(self.fn, user.operands[1])
                    if at is None or at[1] is None or \
                            user.operands[0].type.startswith(("{", "[", "<")):
                        return None
                    if at[1] == offset[1] and user.operands[0].ref != "null":
                        stored.append(user.operands[0])
                else:
                    return None
        return stored

    def shadow_value(self, e, ins, primal, shadow, name=None) -> Value:
        """Emit the same address computation as ``ins`` on shadow pointers
        (into ``name`` if given). An address computed from a null shadow (the
        shadow of memory that carries no derivative: a Const array kept in a
        list beside shadowed ones) stays null, so ``guard`` sees it."""
        ty = ins.type
        if ins.opcode == "getelementptr":
            base = shadow(ins.operands[0])
            flags = "inbounds " if " inbounds " in ins.text else ""
            indices = "".join(f", {i.type} {primal(i).ref}" for i in ins.operands[1:])
            text = f"getelementptr {flags}{ins.source_type}, ptr {base.ref}{indices}"
            if base.ref != "null" and not self._never_null(base):
                return self.null_with(base, e.define(ty, text), name)
        else:
            text = self._shadow_text(ins, primal, shadow)
        if name is None:
            return e.define(ty, text)
        e.emit(f"{local(name)} = {text}")
        return Value(local(name), ty, "inst", name)

    def null_with(self, base: Value, address: Value, name=None) -> Value:
        """``address`` (computed from the shadow pointer ``base``), or null when
        ``base`` is null; its null test is ``base``'s (see ``_null_test``)."""
        e = self.e
        is_null = self._null_test(base)
        text = f"select i1 {is_null.ref}, ptr null, ptr {address.ref}"
        if name is None:
            result = e.define("ptr", text)
        else:
            e.emit(f"{local(name)} = {text}")
            result = Value(local(name), "ptr", "inst", name)
        e.null_tests[result.ref] = is_null
        return result

    def _shadow_text(self, ins, primal, shadow) -> str:
        """The same computation as ``ins`` (but a getelementptr), on shadows."""
        op, ty = ins.opcode, ins.type
        if op == "select":
            c, a, b = ins.operands
            return f"select i1 {primal(c).ref}, {ty} {shadow(a).ref}, {ty} {shadow(b).ref}"
        if op == "phi":
            inc = ", ".join(f"[ {shadow(v).ref}, {local(blk)} ]" for v, blk in ins.incoming)
            return f"phi {ty} {inc}"
        if op == "load":
            addr = self.guard(shadow(ins.operands[0]))
            return f"load {ty}, ptr {addr.ref}, align 1"
        if op == "extractvalue":
            agg = ins.operands[0]
            return f"extractvalue {agg.type} {shadow(agg).ref}, {', '.join(map(str, ins.indices))}"
        if op == "insertvalue":
            agg, elt = ins.operands
            elt_shadow = shadow(elt) if contains_pointer(elt.type) else elt
            return (f"insertvalue {ty} {shadow(agg).ref}, {elt.type} {elt_shadow.ref}, "
                    f"{', '.join(map(str, ins.indices))}")
        if op == "call" and ins.callee in DERIVED_POINTERS:
            addr = self.guard(shadow(ins.operands[0]))
            return f'call ptr @"{ins.callee}"(ptr {addr.ref})'
        if op in POINTER_PROPAGATING:
            return f"{op} {ins.operands[0].type} {shadow(ins.operands[0]).ref} to {ty}"
        raise UnsupportedError(f"cannot build the shadow of `{ins.text}`{self._where(ins)}")

    def _shadow_memory_layout(self) -> dict:
        """Offsets of the shadows of this function's allocas (outside loops: each
        runs at most once per call) in one zeroed block (``~mem``): on the heap,
        freed by the reverse sweep, when the reverse reads any of them; else on
        the augmented forward's stack (see ``reverse_reads_alloca_shadows``)."""
        offsets, total = {}, 0
        for ins in (i for b in self.fn.blocks if b.name not in self.cfg.loop_blocks
                    for i in b.instructions):
            if ins.opcode == "alloca" and ins.name in self.act.shadowed:
                offsets[ins.name] = total
                total += -(-slot_bytes(ins.source_type) // 16) * 16
        if offsets:
            mem = Instruction("~mem", "call", "ptr", [], "", self.fn.entry, callee="calloc")
            self.fn.defs[mem.name] = mem
            self.shadow_memory_bytes = total
        return offsets

    def _adjoint_only_allocas(self) -> dict:
        """alloca name -> type: the stack slots of ``~mem`` whose shadows only
        ever hold adjoints (Numba's slot for a float a callee returns): the
        slot holds floats alone and is only loaded, stored to, or passed to
        derivative calls whose parameter is itself only loaded and stored to.
        The augmented forward then never writes their shadows and nothing it
        records derives from them, so the reverse sweep gives them zeroed
        slots on its own stack (which LLVM turns into registers) instead of
        reading them back from a heap block the forward allocated."""
        found = {}
        for name in self.shadow_memory:
            slot = self.fn.defs[name].source_type
            if _floats_only(slot) and all(self._adjoint_only_use(user, name)
                                          for user in self.fn.users.get(name, ())):
                found[name] = slot
        return found

    def _adjoint_only_use(self, user, name) -> bool:
        if user.opcode == "call" and self._is_derivative_call(user):
            callee = self.builder.module.functions.get(user.callee)
            if callee is None or rule_for(user.callee, self.builder.module)[0] is not None:
                return False         # (a rule's derivative may use the shadow otherwise)
            return all(_only_loaded_and_stored(callee, param.name)
                       for param, a in zip(callee.args, user.args)
                       if a.kind == "inst" and a.name == name)
        return _loaded_or_stored_through(user, name)


def _floats_only(ty: str) -> bool:
    fields = fields_of(ty)
    return all(_floats_only(f) for f in fields) if fields else is_float_type(ty)


def _loaded_or_stored_through(user, name) -> bool:
    """``user`` loads floats from the pointer ``name`` or stores floats (not the
    pointer) to it, or marks its lifetime."""
    if user.opcode == "load":
        return _floats_only(user.type)
    if user.opcode == "store":
        value = user.operands[0]
        return _floats_only(value.type) and value.name != name
    return user.opcode == "call" and (user.callee or "").startswith("llvm.lifetime")


def _only_loaded_and_stored(fn, param) -> bool:
    return all(_loaded_or_stored_through(user, param) for user in fn.users.get(param, ()))
