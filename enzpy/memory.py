"""Shadow memory: the shadows of pointers, allocas and runtime calls on memory.

Mixed into the generator (``reverse.ReverseGenerator``): address computations
replayed on shadow pointers, the one zeroed block per call holding the shadows
of a function's allocas, null shadows (memory that carries no derivative),
Numba's reference counting and frees (postponed to the reverse sweep when the
reverse sweep may still need the memory), and bulk copies.
"""
from __future__ import annotations

from .analysis import (ALLOCATORS, DERIVED_POINTERS, POINTER_PROPAGATING, RAW_ALLOCATORS,
                       pointer_roots)
from .custom import BLAS_UNSUPPORTED
from .emitter import Emitter
from .errors import UnsupportedError
from .ir import Instruction, Value, contains_float, contains_pointer, is_float_type, local
from .tape import SINK_READ, SINK_WRITE, slot_bytes

FREES = ("NRT_decref", "NRT_Free")
_METADATA = __import__("re").compile(r",\s*!\w+\s+!\d+")


def shadow_name(name: str) -> str:
    return "~s." + name


def explain(callee: str) -> str:
    if callee in BLAS_UNSUPPORTED:
        return ("; this is BLAS, which Numba calls for np.dot / @ on 2-D arrays: enzpy has "
                "no derivative for it yet (write the product as loops)")
    return ""


def null_shadow(ty: str) -> Value:
    return Value("null" if ty == "ptr" else "zeroinitializer", ty, "const")


def slot_at(e: Emitter, base: Value, offset: int) -> str:
    if offset == 0:
        return base.ref
    return e.define("ptr", f"getelementptr inbounds i8, ptr {base.ref}, i64 {offset}").ref


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

    def guard(self, ptr: Value, write=False) -> Value:
        """``ptr``, or scratch memory when it is null: a shadow pointer is null
        when its primal points to memory that carries no derivative. Reads then
        see zeros (a buffer never written); writes go to a second buffer."""
        sink = Value(f"@{self.sink_write if write else self.sink_read}", "ptr", "global")
        if ptr.ref == "null":
            return sink
        if self._never_null(ptr):
            return ptr
        e = self.e
        is_null = e.define("i1", f"icmp eq ptr {ptr.ref}, null")
        return e.define("ptr", f"select i1 {is_null.ref}, ptr {sink.ref}, ptr {ptr.ref}")

    def _never_null(self, ptr: Value) -> bool:
        name = ptr.name[len("~s."):] if ptr.name.startswith("~s.") else None
        ins = self.fn.defs.get(name) if name else None
        while ins is not None and ins.opcode in ("getelementptr", "bitcast"):
            base = ins.operands[0]
            ins = self.fn.defs.get(base.name) if base.kind == "inst" else None
        return ins is not None and (ins.opcode == "alloca" or ins.callee in ALLOCATORS)

    def _reverse_runtime_call(self, ins, block) -> bool:
        """Reverse of Numba runtime calls and memory intrinsics; False if ``ins`` is none."""
        e, callee = self.e, ins.callee
        if callee in RAW_ALLOCATORS:
            # Raw memory (no reference count) and its shadow live until here,
            # after the reverse of every use (see _freed_by_reverse).
            for pointer in (self.primal(ins.value, block), self.shadow(ins.value, block)):
                e.call("NRT_Free", "void", [pointer])
            return True
        if callee in FREES:
            if not self._postponed(ins) or self._freed_by_reverse(ins):
                return True
            # The forward sweep postponed the free to here, after every use.
            p = ins.args[0]
            e.call(callee, "void", [self.primal(p, block)])
            if self.act.is_shadowed(p):
                e.call(callee, "void", [self.shadow(p, block)])
            return True
        if callee.startswith("llvm.memset") and self.act.is_shadowed(ins.args[0]):
            e.call("enzpy.memzero", "void", [self.shadow(ins.args[0], block),
                                             self.primal(ins.args[2], block)])
            return True
        if callee.startswith(("llvm.memcpy", "llvm.memmove")) and (
                self.act.is_shadowed(ins.args[0]) or self.act.is_shadowed(ins.args[1])):
            if self._holds_pointers(ins.args[0]):
                return True
            elt = self._float_element(ins)
            e.call(f"enzpy.memcpy.adjoint.{elt}", "void",
                   [self.shadow(ins.args[0], block), self.shadow(ins.args[1], block),
                    self.primal(ins.args[2], block)])
            return True
        return False

    def _freed_by_reverse(self, ins) -> bool:
        """A free of raw memory with a shadow: the reverse of its allocation frees
        it (with its shadow), after the reverse of every use; the reverse of the
        free itself comes before the reverse of the uses before it."""
        return ins.callee == "NRT_Free" and self.act.is_shadowed(ins.args[0])

    def _postponed(self, ins) -> bool:
        """Whether a free waits for the reverse sweep. Memory reached through
        an argument stays alive in the caller, so only frees of this
        function's own allocations (or of pointers loaded from memory) wait."""
        roots = pointer_roots(self.fn, ins.args[0])
        return not roots or any(kind != "arg" for kind, _ in roots)

    def _root(self, v: Value):
        """The allocation, argument or load a pointer is derived from, as
        (kind, name, instruction or None)."""
        while v.kind == "inst":
            ins = self.fn.defs[v.name]
            if ins.opcode in ("getelementptr", "bitcast", "addrspacecast", "freeze"):
                v = ins.operands[0]
            else:
                return ("inst", ins.name, ins)
        return (v.kind, v.name or v.ref, None)

    def _holds_pointers(self, ptr: Value) -> bool:
        root = self._root(ptr)[2]
        return root is not None and root.opcode == "alloca" and \
            contains_pointer(root.source_type) and not contains_float(root.source_type)

    def _float_element(self, ins) -> str:
        """The float type a memcpy moves: from the loads and stores on the memory
        it copies from or to (following chains of copies), and from the types of
        the arrays received as arguments or passed to calls there."""
        roots = {self._root(a)[:2] for a in ins.args[:2]}
        copies = [other for b in self.fn.blocks for other in b.instructions
                  if other.opcode == "call"
                  and other.callee.startswith(("llvm.memcpy", "llvm.memmove"))]
        grown = True
        while grown:                # copies sharing memory with this one move the same type
            grown = False
            for other in copies:
                touched = {self._root(a)[:2] for a in other.args[:2]}
                if touched & roots and not touched <= roots:
                    roots |= touched
                    grown = True
        found = set()
        for b in self.fn.blocks:
            for other in b.instructions:
                if other.opcode in ("load", "store"):
                    ptr = other.operands[0] if other.opcode == "load" else other.operands[1]
                    ty = other.type if other.opcode == "load" else other.operands[0].type
                    if is_float_type(ty) and self._root(ptr)[:2] in roots:
                        found.add(ty)
                elif other.opcode == "call" and other.callee:
                    for index, a in enumerate(other.args):
                        if a.type == "ptr" and self._root(a)[:2] in roots:
                            found.add(self.builder.data_pointer_type(other.callee, index))
        names = [a.name for a in self.fn.args]
        for kind, name in roots:
            if kind == "arg":
                found.add(self.builder.data_pointer_type(self.fn.name, names.index(name)))
        found.discard(None)
        if len(found) != 1:
            raise UnsupportedError(f"cannot tell which float type `{ins.text}` copies"
                                   f"{self._where(ins)}")
        return found.pop()

    def _shadow_text(self, ins, primal, shadow) -> str:
        """The same address computation as ``ins``, on shadow pointers."""
        op, ty = ins.opcode, ins.type
        if op == "getelementptr":
            base, *idx = ins.operands
            flags = "inbounds " if " inbounds " in ins.text else ""
            indices = "".join(f", {i.type} {primal(i).ref}" for i in idx)
            return f"getelementptr {flags}{ins.source_type}, ptr {shadow(base).ref}{indices}"
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
        """Offsets of the shadows of this function's allocas in one zeroed block,
        allocated once per call (``~mem``) and freed by the reverse sweep."""
        offsets, total = {}, 0
        for ins in self.fn.entry.instructions:
            if ins.opcode == "alloca" and ins.name in self.act.shadowed:
                offsets[ins.name] = total
                total += -(-slot_bytes(ins.source_type) // 16) * 16
        if offsets:
            mem = Instruction("~mem", "call", "ptr", [], "", self.fn.entry, callee="calloc")
            self.fn.defs[mem.name] = mem
            self.shadow_memory_bytes = total
        return offsets
