"""The augmented forward sweep: the primal's code plus shadows and the tape's records.

Mixed into ``reverse.ReverseGenerator``: the reverse sweep decides what it
needs (planning pass); this writes the function that computes the primal,
maintains shadow pointers and records, per basic-block execution, the values
and edges the reverse sweep will pop, and the per-call frame at return.
"""
from __future__ import annotations

from .emitter import Emitter
from .ir import Value, contains_float, contains_pointer, local
from .memory import (ALLOCATORS, FREES, null_shadow, shadow_name, strip_metadata,
                     zero_allocation)
from .analysis import ARRAY_ALLOCATORS, RAW_ALLOCATORS, RESIZERS
from .runtime import VARSIZE_FREE, free_shadow, resize_shadow
from .tape import SHADOW_ARRAY, TAPE_ARG, TapeRecord

INLINE_LIMIT = 120         # instructions of a primal function whose derivative may be inlined


class AugmentedForward:
    """Generator methods writing the augmented forward function."""

    def _augmented_function(self) -> str:
        d = self.d
        e = self.e = Emitter("~a")
        frame_keys = list(self.frame)
        slots = {key: f"~slot.{key[0]}.{key[1]}" for key in frame_keys}
        defined_in = {}
        for key in frame_keys:
            defined_in.setdefault(self.fn.defs[key[1]].block.name, []).append(key)
        for b in self.fn.blocks:
            e.label(b.name)
            if b is self.fn.entry:
                self.declare_lost_flag()
                for key in frame_keys:
                    e.emit(f"{local(slots[key])} = alloca {self.frame[key]}")
                if self.shadow_memory and self.reverse_reads_alloca_shadows:
                    e.emit(f'{local("~mem")} = call ptr @calloc(i64 1, '
                           f'i64 {self.shadow_memory_bytes})')
                elif self.shadow_memory:
                    # only the forward sweep uses them: they live on its stack
                    e.emit(f'{local("~mem")} = alloca i8, i64 {self.shadow_memory_bytes}, '
                           f'align 16')
                    e.call("llvm.memset.p0.i64", "void", [
                        Value(local("~mem"), "ptr", "inst"), Value("0", "i8", "const"),
                        Value(str(self.shadow_memory_bytes), "i64", "const"),
                        Value("false", "i1", "const")])
            if self._needs_edge(b):
                # (an edge the reverse sweep never comes back through records 0)
                back = self.cfg.reverse_preds(b.name)
                edges = ", ".join(f"[ {back.index(p) if p in back else 0}, {local(p)} ]"
                                  for p in self.cfg.pred_edges[b.name])
                e.emit(f"{local('~edge.' + b.name)} = phi i32 {edges}")
            loop = self.loops.get(b.name)
            if loop is not None:
                counter = local(f"~ctr.{b.name}")
                e.emit(f"{counter} = phi i64 [ 0, {local(loop.preheader)} ], "
                       f"[ {local(f'~ctr.{b.name}.next')}, {local(loop.latch)} ]")
            for ins in b.instructions[:-1]:
                self._forward_instruction(ins)
            if loop is not None:
                e.emit(f"{local(f'~ctr.{b.name}.next')} = add i64 {counter}, 1")
            for key in defined_in.get(b.name, []):
                value = self._forward_value(key)
                e.emit(f"store {self.frame[key]} {value}, ptr {local(slots[key])}")
            self._push_block(b)
            if b.terminator.opcode == "ret":
                self._push_frame(b, slots)
            if not self.return_raising_if_lost(b.terminator):
                e.emit(strip_metadata(b.terminator.text))
        self.builder.declarations.update(e.declarations)
        return (f"define internal {self.fn.return_type} @\"{d.aug_name}\"({', '.join(d.params)})"
                f"{self._inlining()} {{\n"
                + "\n".join(e.lines) + "\n}\n")

    def _inlining(self) -> str:
        """Derivatives of big functions stay separate functions: inlining them
        into their callers makes giant functions whose machine code takes
        superlinear time to generate (what stalled Enzyme's builds)."""
        size = sum(len(b.instructions) for b in self.fn.blocks)
        return " noinline" if size > INLINE_LIMIT else ""

    def _forward_value(self, key) -> str:
        return local(key[1]) if key[0] == "p" else local(shadow_name(key[1]))

    def _forward_instruction(self, ins):
        e = self.e
        if ins.opcode == "call" and self._is_derivative_call(ins):
            callee = self._callee(ins)
            args = list(ins.args)
            args += [self.forward_shadow(a) for a, act in zip(ins.args, callee.activity)
                     if act == "dup"]
            args.append(TAPE_ARG)
            argtext = ", ".join(a.typed() for a in args)
            e.emit(f"{local(ins.name)} = call {ins.type} @\"{callee.aug_name}\"({argtext})"
                   if ins.name else f"call {ins.type} @\"{callee.aug_name}\"({argtext})")
            return
        if ins.opcode == "call" and self._freed_by_reverse(ins):
            return      # postponed to the reverse sweep
        e.emit(strip_metadata(ins.text))
        if ins.opcode == "call" and ins.callee in FREES and self.act.is_shadowed(ins.args[0]):
            e.emit(f'call void @"{ins.callee}"(ptr {self.forward_shadow(ins.args[0]).ref})')
        if ins.opcode == "store":
            value, ptr = ins.operands
            if self.act.is_shadowed(ptr) and not contains_float(value.type):
                # Shadow memory mirrors pointers with their shadows, and
                # integers (a shadow list's length, for its destructor).
                mirrored = self.forward_shadow(value) if contains_pointer(value.type) \
                    else value
                addr = self.guard(self.forward_shadow(ptr), write=True)
                e.emit(f"store {value.type} {mirrored.ref}, ptr {addr.ref}, align 1")
            elif self.may_lose_derivative(ins):
                self.check_lost_derivative(self.forward_shadow(ptr))
        elif ins.opcode == "call":
            self._forward_runtime_call(ins)
        if ins.callee in ALLOCATORS and ins.callee not in RAW_ALLOCATORS and \
                ins.name not in self.act.shadowed:
            self._hold_for_reverse(e, ins, None)
        if ins.name in self.act.shadowed:
            sname = local(shadow_name(ins.name))
            if ins.opcode == "alloca":
                e.emit(f'{sname} = getelementptr inbounds i8, ptr {local("~mem")}, '
                       f"i64 {self.shadow_memory[ins.name]}")
            elif ins.callee in ARRAY_ALLOCATORS:
                # (zeroed, from the call's arena where the entry allows it)
                args = ", ".join(a.typed() for a in ins.args)
                e.emit(f'{sname} = call ptr @"{SHADOW_ARRAY}"({TAPE_ARG.typed()}, {args})')
                self._hold_for_reverse(e, ins, Value(sname, "ptr", "inst"))
            elif ins.callee in ALLOCATORS:
                args = ", ".join(a.typed() for a in ins.args)
                e.emit(f'{sname} = call ptr @"{ins.callee}"({args})')
                zero_allocation(e, ins, Value(sname, "ptr", "inst"))
                if ins.callee not in RAW_ALLOCATORS:
                    self._hold_for_reverse(e, ins, Value(sname, "ptr", "inst"))
            elif ins.callee in RESIZERS:
                resized = resize_shadow(e, ins, self.forward_shadow(ins.args[0]))
                e.emit(f"{sname} = getelementptr i8, ptr {resized.ref}, i64 0")
            else:
                self.shadow_value(e, ins, lambda v: v, self.forward_shadow, shadow_name(ins.name))

    def _forward_runtime_call(self, ins):
        """Shadow bookkeeping for Numba runtime calls and memory intrinsics."""
        e = self.e
        callee = ins.callee
        if callee == "NRT_incref" and self.act.is_shadowed(ins.args[0]):
            e.emit(f'call void @"NRT_incref"(ptr {self.forward_shadow(ins.args[0]).ref})')
        elif callee == VARSIZE_FREE and self.act.is_shadowed(ins.args[0]):
            free_shadow(e, self.forward_shadow(ins.args[0]),
                        self.forward_shadow(ins.args[1]))
        elif callee.startswith(("llvm.memset", "llvm.memcpy", "llvm.memmove")):
            dst = ins.args[0]
            if self.act.is_shadowed(dst) and (self._set_type(ins) if callee.startswith(
                    "llvm.memset") else self._copied_type(ins)) == "ptr":
                self._mirror_pointer_bulk(ins)

    def _mirror_pointer_bulk(self, ins):
        """A memset or memcpy of pointers (a container's payload) mirrored on
        the shadow memory. Without a destination shadow nothing is written, and
        pointers copied from memory without a shadow are null shadows: the
        scratch buffers a null shadow's accesses go to hold 1024 bytes, which a
        large copy would overrun, so their byte counts are made 0 instead."""
        e = self.e
        dst, src, n, volatile = ins.args[:4]
        zero = Value("0", n.type, "const")
        dst_shadow = self.forward_shadow(dst)
        no_dst = self._null_test(dst_shadow)
        target = self.guard(dst_shadow, write=True)
        if ins.callee.startswith("llvm.memset"):
            count = e.define(n.type, f"select i1 {no_dst.ref}, {zero.typed()}, {n.typed()}")
            e.call(ins.callee, "void", [target, src, count, volatile])
            return
        src_shadow = self.forward_shadow(src)
        no_src = self._null_test(src_shadow)
        skip = e.define("i1", f"or i1 {no_dst.ref}, {no_src.ref}")
        copied = e.define(n.type, f"select i1 {skip.ref}, {zero.typed()}, {n.typed()}")
        e.call(ins.callee, "void", [target, self.guard(src_shadow), copied, volatile])
        has_dst = e.define("i1", f"xor i1 {no_dst.ref}, true")
        clear = e.define("i1", f"and i1 {has_dst.ref}, {no_src.ref}")
        cleared = e.define(n.type, f"select i1 {clear.ref}, {n.typed()}, {zero.typed()}")
        e.call(f"llvm.memset.p0.{n.type}", "void",
               [target, Value("0", "i8", "const"), cleared, volatile])

    def forward_shadow(self, v: Value) -> Value:
        if v.kind in ("inst", "arg") and v.name in self.act.shadowed:
            return Value(local(shadow_name(v.name)), v.type, v.kind, shadow_name(v.name))
        return null_shadow(v.type)

    def _push_block(self, b):
        pushed = self.pushed.get(b.name, {})
        if not (pushed or self._needs_edge(b)):
            return
        TapeRecord(pushed.values(), self._needs_edge(b)).push(
            self.e, [self._forward_value(key) for key in pushed], local("~edge." + b.name))

    def _push_frame(self, b, slots):
        exits = self.cfg.returning_exits
        if not self._frame_recorded() or b.name not in exits:
            return
        e = self.e
        values = [e.define(ty, f"load {ty}, ptr {local(slots[key])}").ref
                  for key, ty in self.frame.items()]
        TapeRecord(self.frame.values(), len(exits) > 1).push(e, values, str(exits.index(b.name)))
