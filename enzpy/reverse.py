"""Reverse mode: an augmented forward and a reverse function per (function, activity).

For a Numba function ``F(retptr, excinfo, args...) -> i32`` and an activity key
(one of 'active' / 'dup' / 'const' per argument) this writes

* ``aug``: ``F``'s body plus shadow pointers, which records on the tape what the
  reverse sweep needs: per basic-block execution, the values that block's
  reverse uses (and the predecessor it came from); per call, the values defined
  in blocks outside loops (the *frame*), pushed once at return;
* ``rev``: same arguments, returns the adjoints of the 'active' arguments as a
  struct; pops the frame, then walks the blocks backwards.

Cheap, pure values (integer arithmetic, casts, GEPs, ...) are recomputed from
recorded operands instead of being recorded. Calls to other Numba functions
call their own ``aug``/``rev``, obtained from the memoized cache, so recursion
(self or mutual) is differentiated once per key.
"""
from __future__ import annotations

import re

from . import rules
from .analysis import (ALLOCATORS, DERIVED_POINTERS, POINTER_PROPAGATING, Activity, ControlFlow,
                       pointer_roots)
from .custom import BLAS_UNSUPPORTED
from .emitter import Emitter
from .errors import UnsupportedError
from .ir import (Instruction, Value, contains_float, contains_pointer, is_float_type, local,
                 split_top)
from .tape import POP, PUSH, SINK_READ, SINK_WRITE, slot_bytes

RECOMPUTABLE = {
    "fadd", "fsub", "fmul", "fneg", "add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "udiv", "sdiv",
    "urem", "srem", "trunc", "zext", "sext", "sitofp", "uitofp", "fptosi", "fptoui",
    "fpext", "fptrunc", "icmp", "fcmp", "select", "getelementptr", "extractvalue",
    "insertvalue", "bitcast", "ptrtoint", "inttoptr", "freeze",
}
_RECOMPUTE_DEPTH = 6
INLINE_LIMIT = 120
FREES = ("NRT_decref", "NRT_Free")         # instructions of a primal function whose derivative may be inlined
_METADATA = re.compile(r",\s*!\w+\s+!\d+")


def shadow_name(name: str) -> str:
    return "~s." + name


class Lazy(Value):
    """A primal value fetched only if a rule actually uses it."""

    def __new__(cls, resolve, ty):
        obj = Value.__new__(cls)
        object.__setattr__(obj, "_resolve", resolve)
        object.__setattr__(obj, "_cache", None)
        object.__setattr__(obj, "type", ty)
        object.__setattr__(obj, "kind", "inst")
        object.__setattr__(obj, "name", "")
        return obj

    def __init__(self, resolve, ty):
        pass

    @property
    def ref(self):
        if self._cache is None:
            object.__setattr__(self, "_cache", self._resolve())
        return self._cache.ref


class FunctionDerivative:
    """Names and signature of one (function, activity) derivative pair."""

    def __init__(self, fn, activity, index):
        self.fn = fn
        self.activity = tuple(activity)
        base = f"enzpy.d{index}.{fn.name}"
        self.aug_name = base + ".aug"
        self.rev_name = base + ".rev"
        self.adjoint_args = [a for a, act in zip(fn.args, activity) if act == "active"]
        self.rev_type = self._struct([a.type for a in self.adjoint_args])
        params = [f"{a.type} {local(a.name)}" for a in fn.args]
        params += [f"ptr {local(shadow_name(a.name))}"
                   for a, act in zip(fn.args, activity) if act == "dup"]
        params.append('ptr noalias %"enzpy.tape"')
        self.params = params

    @staticmethod
    def _struct(types):
        return "{ " + ", ".join(types) + " }" if types else "void"

    def param_types(self):
        return [p.rsplit(" ", 1)[0].replace(" noalias", "") for p in self.params]

    def declarations(self) -> list:
        """IR declarations of the pair, for modules that call it from elsewhere."""
        types = ", ".join(self.param_types())
        return [f'declare {self.fn.return_type} @"{self.aug_name}"({types})',
                f'declare {self.rev_type} @"{self.rev_name}"({types})']


class ReverseGenerator:
    """Writes the aug and rev functions of one FunctionDerivative."""

    def __init__(self, builder, deriv: FunctionDerivative, describe):
        self.builder = builder
        self.d = deriv
        self.fn = deriv.fn
        self.describe = describe      # (function name, instruction) -> " in function 'f' ..."
        self.cfg = ControlFlow(self.fn)
        self.act = Activity(self.fn, deriv.activity, builder.call_propagates)
        self.calls = {}               # instruction name / id -> callee derivative
        self.shadow_memory = self._shadow_memory_layout()   # alloca name -> offset
        self.loops = self.cfg.counted_loops
        self.inductions = self._find_inductions()   # phi name -> (header, init, step, op)
        self.frame = {}               # key -> type, in insertion order
        self.pushed = {}              # block -> {key: type}

    # -- entry point ---------------------------------------------------------
    def generate(self) -> str:
        self._check_unsupported()
        self.planning = True
        self._reverse_function()          # discover what the reverse needs
        self.planning = False
        rev = self._reverse_function()
        aug = self._augmented_function()
        return aug + "\n" + rev

    def _where(self, ins) -> str:
        return self.describe(self.fn.name, ins)

    def _check_unsupported(self):
        for b in self.fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "alloca" and ins.name in self.act.shadowed \
                        and b is not self.fn.entry:
                    raise UnsupportedError(
                        f"alloca of float memory outside the entry block{self._where(ins)}")
                if ins.opcode == "store" and self.act.is_varied(ins.operands[0]) \
                        and not self.act.is_shadowed(ins.operands[1]):
                    raise UnsupportedError(
                        f"a value that depends on the differentiated inputs is stored to "
                        f"memory without a shadow (`{ins.text}`){self._where(ins)}: pass "
                        f"the array it writes as Duplicated(array, zero shadow), not Const")
                if ins.opcode == "call" and self._escapes(ins):
                    what = (f"'{ins.callee}', which enzpy cannot differentiate" if ins.callee
                            else "an indirect call (indirect call with active arguments)")
                    raise UnsupportedError(
                        f"a value that depends on the differentiated inputs flows into "
                        f"{what}{self._where(ins)}{_explain(ins.callee)}")
                if ins.opcode == "call" and not self._is_derivative_call(ins) \
                        and not rules.INACTIVE_CALLS.match(ins.callee) \
                        and not rules.MEMORY_CALLS.match(ins.callee) \
                        and any(self.act.is_shadowed(a) for a in ins.args):
                    raise UnsupportedError(
                        f"call to '{ins.callee or 'an indirect function'}' with "
                        f"differentiable memory{self._where(ins)}{_explain(ins.callee)}")

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

    def _find_inductions(self) -> dict:
        """Integer phis ``i = phi [init, preheader], [i +/- step, latch]`` of
        counted loops, plus each loop's own counter (a synthetic phi)."""
        found = {}
        for h, loop in self.loops.items():
            counter = Instruction(f"~ctr.{h}", "phi", "i64", [], "", self.fn.block_map[h])
            self.fn.defs[counter.name] = counter
            found[counter.name] = (h, Value("0", "i64", "const"), Value("1", "i64", "const"), "add")
            for ins in self.fn.block_map[h].instructions:
                if ins.opcode != "phi" or not ins.type.startswith("i") or len(ins.incoming) != 2:
                    continue
                incoming = {blk: v for v, blk in ins.incoming}
                init, nxt = incoming.get(loop.preheader), incoming.get(loop.latch)
                step_ins = self.fn.defs.get(nxt.name) if nxt is not None and nxt.kind == "inst" else None
                if init is None or step_ins is None or step_ins.opcode not in ("add", "sub"):
                    continue
                a, b = step_ins.operands
                if a.kind == "inst" and a.name == ins.name:
                    step = b
                elif b.kind == "inst" and b.name == ins.name and step_ins.opcode == "add":
                    step = a
                else:
                    continue
                if step.kind == "inst" and self.fn.defs[step.name].block.name in loop.body:
                    continue
                found[ins.name] = (h, init, step, step_ins.opcode)
        return found

    def _induction_free(self, v: Value, block, depth=0) -> bool:
        """Whether ``v`` is available in the reverse block without the tape."""
        if v.kind != "inst":
            return True
        if depth > _RECOMPUTE_DEPTH:
            return False
        ins = self.fn.defs[v.name]
        if ins.block.name not in self.cfg.loop_blocks:
            return True
        iv = self.inductions.get(v.name)
        if iv is not None and block in self.loops[iv[0]].body:
            return self._induction_free(iv[1], block, depth + 1) and \
                self._induction_free(iv[2], block, depth + 1)
        return (ins.opcode in RECOMPUTABLE or self._rereadable(ins)) and all(
            self._induction_free(o, block, depth + 1) for o in ins.operands)

    def _rereadable(self, ins) -> bool:
        """A load from memory nothing writes during the call: the reverse
        sweep reads it again instead of recording it."""
        return ins.opcode == "load" and self.builder.readonly.is_readonly(self.fn, ins.operands[0])

    def _escapes(self, ins) -> bool:
        """A call outside enzpy's knowledge receiving a varied float (e.g. boxing
        it into a Python object in an objmode block): its derivative would be lost."""
        if self.builder.differentiable_callee(ins.callee) or rules.has_rule(ins.callee) \
                or rules.INACTIVE_CALLS.match(ins.callee) or rules.MEMORY_CALLS.match(ins.callee):
            return False
        return any(self.act.is_varied(a) and contains_float(a.type) for a in ins.args)

    def _is_derivative_call(self, ins) -> bool:
        """A call to a Numba function that must be differentiated itself."""
        return ins.opcode == "call" and self.builder.differentiable_callee(ins.callee) and any(
            self.act.is_shadowed(a) or self.act.is_active(a) for a in ins.args)

    def _callee_activity(self, ins):
        return tuple("dup" if self.act.is_shadowed(a) else
                     "active" if self.act.is_active(a) and is_float_type(a.type) else "const"
                     for a in ins.args)

    def _callee(self, ins) -> FunctionDerivative:
        key = id(ins)
        if key not in self.calls:
            self.calls[key] = self.builder.derivative(ins.callee, self._callee_activity(ins))
        return self.calls[key]

    # -- where the reverse gets primal values --------------------------------
    def _storage(self, key, ins) -> str:
        if key[0] == "p" and (ins.opcode in RECOMPUTABLE or self._rereadable(ins)):
            return "recompute"
        if key[0] == "s" and (ins.opcode in ("getelementptr", "bitcast", "select", "freeze",
                                             "alloca",
                                             "addrspacecast", "insertvalue", "extractvalue")
                              or ins.callee in DERIVED_POINTERS):
            return "recompute"
        if key[0] == "p" and ins.callee in DERIVED_POINTERS:
            return "recompute"
        return "push" if ins.block.name in self.cfg.loop_blocks else "frame"

    def primal(self, v: Value, block, depth=0) -> Value:
        if v.kind not in ("inst",):
            return v
        ins = self.fn.defs[v.name]
        return self._fetch(("p", v.name), ins, block, depth)

    def shadow(self, v: Value, block, depth=0) -> Value:
        if v.kind == "arg" and v.name in self.act.shadowed:
            return Value(local(shadow_name(v.name)), v.type, "arg", shadow_name(v.name))
        if v.kind != "inst" or v.name not in self.act.shadowed:
            return null_shadow(v.type)
        return self._fetch(("s", v.name), self.fn.defs[v.name], block, depth)

    def guard(self, ptr: Value, write=False) -> Value:
        """``ptr``, or scratch memory when it is null: a shadow pointer is null
        when its primal points to memory that carries no derivative. Reads then
        see zeros (a buffer never written); writes go to a second buffer."""
        sink = Value(f"@{SINK_WRITE if write else SINK_READ}", "ptr", "global")
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

    def _fetch(self, key, ins, block, depth):
        iv = self.inductions.get(key[1]) if key[0] == "p" else None
        if iv is not None and block in self.loops[iv[0]].body and \
                self._induction_free(ins.value, block):
            memo = self.recomputed.get((key, block))
            if memo is None:
                memo = self._induction_value(ins, iv, block, depth + 1)
                self.recomputed[(key, block)] = memo
            return memo
        how = self._storage(key, ins)
        if how == "recompute" and depth > _RECOMPUTE_DEPTH:
            how = "push" if ins.block.name in self.cfg.loop_blocks else "frame"
        ty = ins.type
        if how == "frame":
            self.frame.setdefault(key, ty)
            return Value(local(f"~fr.{key[0]}.{key[1]}"), ty, "inst")
        if how == "push":
            self.pushed.setdefault(block, {}).setdefault(key, ty)
            return Value(local(f"~rv.{block}.{key[0]}.{key[1]}"), ty, "inst")
        memo = self.recomputed.get((key, block))
        if memo is None:
            memo = self._recompute(key, ins, block, depth + 1)
            self.recomputed[(key, block)] = memo
        return memo

    def _counter(self, header) -> Value:
        return self.e.define("i64", f"load i64, ptr {local('~k.' + header)}")

    def _induction_value(self, ins, iv, block, depth) -> Value:
        """init +/- k * step, k being the loop's reverse iteration counter."""
        header, init, step, op = iv
        e = self.e
        k = self._counter(header)
        if ins.type != "i64":
            k = e.cast("trunc" if int(ins.type[1:]) < 64 else "zext", k, ins.type)
        init, step = self.primal(init, block, depth), self.primal(step, block, depth)
        scaled = e.define(ins.type, f"mul {ins.type} {k.ref}, {step.ref}")
        return e.define(ins.type, f"{op} {ins.type} {init.ref}, {scaled.ref}")

    def _recompute(self, key, ins, block, depth) -> Value:
        e = self.e
        if key[0] == "s" and ins.opcode == "alloca":
            mem = self.primal(self.fn.defs["~mem"].value, block, depth)
            return e.define("ptr", f"getelementptr inbounds i8, ptr {mem.ref}, "
                                   f"i64 {self.shadow_memory[ins.name]}")
        if key[0] == "s":
            return e.define(ins.type, self._shadow_text(
                ins, lambda v: self.primal(v, block, depth), lambda v: self.shadow(v, block, depth)))
        if ins.opcode == "load":
            addr = self.primal(ins.operands[0], block, depth)
            return e.define(ins.type, f"load {ins.type}, ptr {addr.ref}")
        if ins.opcode == "call":
            return e.define(ins.type, f'call {ins.type} @"{ins.callee}"('
                            + ", ".join(self.primal(o, block, depth).typed() for o in ins.args) + ")")
        ops = [self.primal(o, block, depth) for o in ins.operands]
        return e.define(ins.type, _rewrite(ins, ops))

    # -- the reverse function --------------------------------------------------
    def _reverse_function(self) -> str:
        d = self.d
        self.e = e = Emitter("~r")
        self.recomputed = {}
        self.adjoints = {}
        body = Emitter("~r")
        for b in self.fn.blocks:
            self.e = e = Emitter(f"~r.{b.name}")
            self.recomputed = {}
            e.label("~rev." + b.name)
            self._pop_block(b)
            for ins in reversed(b.instructions[:-1]):
                if ins.opcode != "phi":
                    self._reverse_instruction(ins, b.name)
            self._dispatch(b)
            body.lines += e.lines
            body.declarations.update(e.declarations)
        self.e = tail = Emitter("~r.tail")
        tail.label("~exit")
        if self.shadow_memory:
            tail.call("free", "void", [self.primal(self.fn.defs["~mem"].value, "~exit")])
        if d.adjoint_args:
            agg = Value("undef", d.rev_type, "const")
            for i, a in enumerate(d.adjoint_args):
                agg = tail.insert(agg, self._adjoint(a), i)
            tail.emit(f"ret {d.rev_type} {agg.ref}")
        else:
            tail.emit("ret void")
        self.e = head = Emitter("~r.head")
        head.label("~start")
        for name, ty in self.adjoints.items():
            head.emit(f"{local('~adj.' + name)} = alloca {ty}")
            head.emit(f"store {ty} {head.zero(ty).ref}, ptr {local('~adj.' + name)}")
        for h in self.loops:
            head.emit(f"{local('~k.' + h)} = alloca i64")
        self._pop_frame(head)
        self.builder.declarations.update(body.declarations)
        self.builder.declarations.update(head.declarations)
        self.builder.declarations.update(tail.declarations)
        lines = head.lines + body.lines + tail.lines
        return (f"define internal {d.rev_type} @\"{d.rev_name}\"({', '.join(d.params)})"
                f"{self._inlining()} {{\n"
                + "\n".join(lines) + "\n}\n")

    def _pop_frame(self, e):
        exits = self.cfg.exits
        size = sum(slot_bytes(t) for t in self.frame.values()) + 8
        slot = e.call(POP, "ptr", [Value('%"enzpy.tape"', "ptr", "arg"), Value(str(size), "i64", "const")])
        offset = 0
        for key, ty in self.frame.items():
            e.emit(f"{local(f'~fr.{key[0]}.{key[1]}')} = load {ty}, ptr "
                   f"{_at(e, slot, offset)}, align 8")
            offset += slot_bytes(ty)
        exit_id = e.define("i32", f"load i32, ptr {_at(e, slot, offset)}, align 8")
        cases = " ".join(f"i32 {i}, label {local('~rev.' + b)}" for i, b in enumerate(exits))
        e.emit(f"switch i32 {exit_id.ref}, label {local('~rev.' + exits[0])} [ {cases} ]")

    def _pop_block(self, b):
        e = self.e
        pushed = self.pushed.get(b.name, {})
        if self.planning or not (pushed or self._needs_edge(b)):
            return
        size = sum(slot_bytes(t) for t in pushed.values()) + (8 if self._needs_edge(b) else 0)
        slot = e.call(POP, "ptr", [Value('%"enzpy.tape"', "ptr", "arg"), Value(str(size), "i64", "const")])
        offset = 0
        for key, ty in pushed.items():
            e.emit(f"{local(f'~rv.{b.name}.{key[0]}.{key[1]}')} = load {ty}, ptr "
                   f"{_at(e, slot, offset)}, align 8")
            offset += slot_bytes(ty)
        if self._needs_edge(b):
            e.emit(f"{local(f'~edge.{b.name}')} = load i32, ptr {_at(e, slot, offset)}, align 8")

    def _needs_edge(self, b) -> bool:
        """Whether the edge into ``b`` must be recorded (it cannot be recomputed)."""
        return len(self.cfg.preds(b.name)) > 1 and b.name not in self.loops \
            and self.cfg.edge_condition(b.name) is None

    def _edge_index(self, b) -> str:
        if self._needs_edge(b):
            return local("~edge." + b.name)
        loop = self.loops.get(b.name)
        if loop is not None:
            # Count down: the first iteration came from the preheader.
            e = self.e
            preds = self.cfg.preds(b.name)
            k = self._counter(b.name)
            first = e.define("i1", f"icmp eq i64 {k.ref}, 0")
            e.emit(f"store i64 {e.define('i64', f'sub i64 {k.ref}, 1').ref}, "
                   f"ptr {local('~k.' + b.name)}")
            return e.define("i32", f"select i1 {first.ref}, i32 {preds.index(loop.preheader)}, "
                                   f"i32 {preds.index(loop.latch)}").ref
        br, if_true, if_false = self.cfg.edge_condition(b.name)
        preds = self.cfg.preds(b.name)
        cond = self.primal(br.operands[0], b.name)
        return self.e.define("i32", f"select i1 {cond.ref}, i32 {preds.index(if_true)}, "
                                    f"i32 {preds.index(if_false)}").ref

    def _loop_entries(self, b) -> dict:
        """pred -> [(header, count)]: loops the reverse sweep enters through
        the edge pred -> b, with their recorded trip count."""
        entries = {}
        for pred in self.cfg.preds(b.name):
            for h, loop in self.loops.items():
                if pred in loop.body and b.name not in loop.body:
                    count = self.primal(self.fn.defs[f"~ctr.{h}"].value, b.name)
                    entries.setdefault(pred, []).append((h, count))
        return entries

    def _enter_loops(self, entries, pred):
        for h, count in entries.get(pred, []):
            self.e.emit(f"store i64 {count.ref}, ptr {local('~k.' + h)}")

    def _dispatch(self, b):
        e = self.e
        preds = self.cfg.preds(b.name)
        if not preds:
            e.emit(f"br label {local('~exit')}")
            return
        entries = self._loop_entries(b)
        phis = [i for i in b.instructions if i.opcode == "phi" and self.act.is_active(i.value)]
        incoming_adjoints = [(phi, self._take_adjoint(phi.value)) for phi in phis]
        if len(preds) == 1:
            self._transfer(incoming_adjoints, preds[0])
            self._enter_loops(entries, preds[0])
            e.emit(f"br label {local('~rev.' + preds[0])}")
            return
        targets = [f"~rev.{b.name}.from.{i}" for i in range(len(preds))]
        cases = " ".join(f"i32 {i}, label {local(t)}" for i, t in enumerate(targets))
        e.emit(f"switch i32 {self._edge_index(b)}, label {local(targets[0])} [ {cases} ]")
        for target, pred in zip(targets, preds):
            e.label(target)
            self._transfer(incoming_adjoints, pred)
            self._enter_loops(entries, pred)
            e.emit(f"br label {local('~rev.' + pred)}")

    def _transfer(self, incoming_adjoints, pred):
        for phi, adj in incoming_adjoints:
            for value, block in phi.incoming:
                if block == pred:
                    self._accumulate(value, adj)
                    break

    # -- adjoint bookkeeping ---------------------------------------------------
    def _slot(self, v: Value) -> str:
        self.adjoints.setdefault(v.name, v.type)
        return local("~adj." + v.name)

    def _adjoint(self, v: Value) -> Value:
        return self.e.define(v.type, f"load {v.type}, ptr {self._slot(v)}")

    def _take_adjoint(self, v: Value) -> Value:
        """Read the adjoint of ``v`` and reset it (its definition is being reversed)."""
        adj = self._adjoint(v)
        self.e.emit(f"store {v.type} {self.e.zero(v.type).ref}, ptr {self._slot(v)}")
        return adj

    def _accumulate(self, v: Value, contribution: Value):
        if not self.act.is_active(v) or contribution is None:
            return
        e = self.e
        total = add_values(e, self._adjoint(v), contribution)
        e.emit(f"store {v.type} {total.ref}, ptr {self._slot(v)}")

    # -- reverse of one instruction --------------------------------------------
    def _reverse_instruction(self, ins, block):
        e = self.e
        op = ins.opcode
        if op == "store":
            value, ptr = ins.operands
            if self.act.is_shadowed(ptr) and contains_float(value.type):
                if contains_pointer(value.type):
                    raise UnsupportedError(f"a store of a value holding both floats and "
                                           f"pointers (`{ins.text}`){self._where(ins)}")
                sp = self.shadow(ptr, block)
                if self.act.is_active(value):
                    self._accumulate(value, e.define(
                        value.type, f"load {value.type}, ptr {self.guard(sp).ref}, align 1"))
                e.emit(f"store {value.type} {e.zero(value.type).ref}, "
                       f"ptr {self.guard(sp, write=True).ref}, align 1")
            return
        if op == "call" and self._is_derivative_call(ins):
            self._reverse_call(ins, block)
            return
        if op == "call" and self._reverse_runtime_call(ins, block):
            return
        if not ins.name or not self.act.is_active(ins.value):
            return
        adj = self._take_adjoint(ins.value)
        if op == "load":
            sp = self.shadow(ins.operands[0], block)
            old = e.define(ins.type, f"load {ins.type}, ptr {self.guard(sp).ref}, align 1")
            e.emit(f"store {ins.type} {add_values(e, old, adj).ref}, "
                   f"ptr {self.guard(sp, write=True).ref}, align 1")
        elif op in ("fpext", "fptrunc"):
            src = ins.operands[0]
            back = "fptrunc" if op == "fpext" else "fpext"
            self._accumulate(src, e.cast(back, adj, src.type))
        elif op == "select":
            cond = self.primal(ins.operands[0], block)
            zero = e.zero(ins.type)
            self._accumulate(ins.operands[1], e.select(cond, adj, zero))
            self._accumulate(ins.operands[2], e.select(cond, zero, adj))
        elif op == "extractvalue":
            agg = ins.operands[0]
            idx = ", ".join(map(str, ins.indices))
            self._accumulate(agg, e.insert(e.zero(agg.type), adj, idx))
        elif op == "insertvalue":
            agg, elt = ins.operands
            idx = ", ".join(map(str, ins.indices))
            self._accumulate(elt, e.extract(adj, idx, elt.type))
            self._accumulate(agg, e.insert(adj, e.zero(elt.type), idx))
        elif op == "call" or op in rules.RULES:
            self._apply_rule(ins, adj, block)
        else:
            raise UnsupportedError(f"no derivative rule for instruction `{ins.text}`"
                                   f"{self._where(ins)}")

    def _reverse_runtime_call(self, ins, block) -> bool:
        """Reverse of Numba runtime calls and memory intrinsics; False if ``ins`` is none."""
        e, callee = self.e, ins.callee
        if callee in FREES:
            if not self._postponed(ins):
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
        """The float type a memcpy moves, from the loads and stores on its operands."""
        roots = {self._root(a)[:2] for a in ins.args[:2]}
        found = set()
        for b in self.fn.blocks:
            for other in b.instructions:
                if other.opcode in ("load", "store"):
                    ptr = other.operands[0] if other.opcode == "load" else other.operands[1]
                    ty = other.type if other.opcode == "load" else other.operands[0].type
                    if is_float_type(ty) and self._root(ptr)[:2] in roots:
                        found.add(ty)
        if not found:
            for kind, name, _ in (self._root(a) for a in ins.args[:2]):
                if kind == "arg":
                    index = [a.name for a in self.fn.args].index(name)
                    ty = self.builder.data_pointer_type(self.fn.name, index)
                    if ty:
                        found.add(ty)
        if len(found) != 1:
            raise UnsupportedError(f"cannot tell which float type `{ins.text}` copies"
                                   f"{self._where(ins)}")
        return found.pop()

    def _apply_rule(self, ins, adj, block):
        e = self.e
        name = ins.callee if ins.opcode == "call" else ins.opcode
        if ins.opcode == "call" and not ins.callee:
            raise UnsupportedError(f"indirect call with active arguments `{ins.text}`"
                                   f"{self._where(ins)}")
        rule = rules.lookup(name, self._where(ins))
        operands = ins.args
        args = [self._lazy(o, block) for o in operands]
        result = self._lazy(ins.value, block)
        for operand, partial in zip(operands, rule.partials):
            if partial is None or not self.act.is_active(operand):
                continue
            p = partial(e, *args, result)
            if p == rules.ONE:
                self._accumulate(operand, adj)
            elif p == rules.MINUS_ONE:
                self._accumulate(operand, e.fneg(adj))
            else:
                self._accumulate(operand, e.fmul(adj, p))

    def _lazy(self, v: Value, block) -> Value:
        if v.kind != "inst":
            return v
        return Lazy(lambda: self.primal(v, block), v.type)

    def _reverse_call(self, ins, block):
        e = self.e
        callee = self._callee(ins)
        args = [self.primal(a, block) for a in ins.args]
        args += [self.shadow(a, block) for a, act in zip(ins.args, callee.activity) if act == "dup"]
        args.append(Value('%"enzpy.tape"', "ptr", "arg"))
        out = e.call(callee.rev_name, callee.rev_type, args, callee.param_types())
        for i, a in enumerate(callee.adjoint_args):
            operand = ins.args[callee.fn.args.index(a)]
            self._accumulate(operand, e.extract(out, i, a.type))

    # -- the augmented forward function ------------------------------------------
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
                for key in frame_keys:
                    e.emit(f"{local(slots[key])} = alloca {self.frame[key]}")
                if self.shadow_memory:
                    e.emit(f'{local("~mem")} = call ptr @calloc(i64 1, '
                           f'i64 {self.shadow_memory_bytes})')
            if self._needs_edge(b):
                edges = ", ".join(f"[ {self.cfg.preds(b.name).index(p)}, {local(p)} ]"
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
            e.emit(_strip_metadata(b.terminator.text))
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
            args.append(Value('%"enzpy.tape"', "ptr", "arg"))
            argtext = ", ".join(a.typed() for a in args)
            e.emit(f"{local(ins.name)} = call {ins.type} @\"{callee.aug_name}\"({argtext})"
                   if ins.name else f"call {ins.type} @\"{callee.aug_name}\"({argtext})")
            return
        if ins.opcode == "call" and ins.callee in FREES and self._postponed(ins):
            return      # postponed to the matching point of the reverse sweep
        e.emit(_strip_metadata(ins.text))
        if ins.opcode == "call" and ins.callee in FREES and self.act.is_shadowed(ins.args[0]):
            e.emit(f'call void @"{ins.callee}"(ptr {self.forward_shadow(ins.args[0]).ref})')
        if ins.opcode == "store":
            value, ptr = ins.operands
            if self.act.is_shadowed(ptr) and contains_pointer(value.type):
                # Shadow memory mirrors pointers with their shadows.
                addr = self.guard(self.forward_shadow(ptr), write=True)
                e.emit(f"store {value.type} {self.forward_shadow(value).ref}, "
                       f"ptr {addr.ref}, align 1")
        elif ins.opcode == "call":
            self._forward_runtime_call(ins)
        if ins.name in self.act.shadowed:
            sname = local(shadow_name(ins.name))
            if ins.opcode == "alloca":
                e.emit(f'{sname} = getelementptr inbounds i8, ptr {local("~mem")}, '
                       f"i64 {self.shadow_memory[ins.name]}")
            elif ins.callee in ALLOCATORS:
                args = ", ".join(a.typed() for a in ins.args)
                e.emit(f'{sname} = call ptr @"{ins.callee}"({args})')
                data = e.call("NRT_MemInfo_data_fast", "ptr", [Value(sname, "ptr", "inst")])
                e.emit(f"call void @llvm.memset.p0.i64(ptr {data.ref}, i8 0, "
                       f"{ins.args[0].typed()}, i1 false)")
            else:
                e.emit(f"{sname} = " + self._shadow_text(ins, lambda v: v, self.forward_shadow))

    def _forward_runtime_call(self, ins):
        """Shadow bookkeeping for Numba runtime calls and memory intrinsics."""
        e = self.e
        callee = ins.callee
        if callee == "NRT_incref" and self.act.is_shadowed(ins.args[0]):
            e.emit(f'call void @"NRT_incref"(ptr {self.forward_shadow(ins.args[0]).ref})')
        elif callee.startswith(("llvm.memset", "llvm.memcpy", "llvm.memmove")):
            dst = ins.args[0]
            if self.act.is_shadowed(dst) and self._holds_pointers(dst):
                args = [self.guard(self.forward_shadow(dst), write=True).typed()]
                src = ins.args[1]
                args.append(self.guard(self.forward_shadow(src)).typed()
                            if callee.startswith(("llvm.memcpy", "llvm.memmove")) else src.typed())
                args += [a.typed() for a in ins.args[2:]]
                e.emit(f'call void @"{callee}"({", ".join(args)})')

    def forward_shadow(self, v: Value) -> Value:
        if v.kind in ("inst", "arg") and v.name in self.act.shadowed:
            return Value(local(shadow_name(v.name)), v.type, v.kind, shadow_name(v.name))
        return null_shadow(v.type)

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

    def _push_block(self, b):
        pushed = self.pushed.get(b.name, {})
        if not (pushed or self._needs_edge(b)):
            return
        e = self.e
        size = sum(slot_bytes(t) for t in pushed.values()) + (8 if self._needs_edge(b) else 0)
        slot = e.call(PUSH, "ptr", [Value('%"enzpy.tape"', "ptr", "arg"), Value(str(size), "i64", "const")])
        offset = 0
        for key, ty in pushed.items():
            e.emit(f"store {ty} {self._forward_value(key)}, ptr {_at(e, slot, offset)}, align 8")
            offset += slot_bytes(ty)
        if self._needs_edge(b):
            e.emit(f"store i32 {local('~edge.' + b.name)}, ptr {_at(e, slot, offset)}, align 8")

    def _push_frame(self, b, slots):
        e = self.e
        size = sum(slot_bytes(t) for t in self.frame.values()) + 8
        slot = e.call(PUSH, "ptr", [Value('%"enzpy.tape"', "ptr", "arg"), Value(str(size), "i64", "const")])
        offset = 0
        for key, ty in self.frame.items():
            v = e.define(ty, f"load {ty}, ptr {local(slots[key])}")
            e.emit(f"store {ty} {v.ref}, ptr {_at(e, slot, offset)}, align 8")
            offset += slot_bytes(ty)
        e.emit(f"store i32 {self.cfg.exits.index(b.name)}, ptr {_at(e, slot, offset)}, align 8")


def _explain(callee: str) -> str:
    if callee in BLAS_UNSUPPORTED:
        return ("; this is BLAS, which Numba calls for np.dot / @ on 2-D arrays: enzpy has "
                "no derivative for it yet (write the product as loops)")
    return ""


def null_shadow(ty: str) -> Value:
    return Value("null" if ty == "ptr" else "zeroinitializer", ty, "const")


def _at(e: Emitter, base: Value, offset: int) -> str:
    if offset == 0:
        return base.ref
    return e.define("ptr", f"getelementptr inbounds i8, ptr {base.ref}, i64 {offset}").ref


def _strip_metadata(text: str) -> str:
    return _METADATA.sub("", text)


def _rewrite(ins, ops) -> str:
    """``ins`` as text with its operands replaced by ``ops`` (for recomputation)."""
    op = ins.opcode
    t = [o.typed() for o in ops]
    if op in ("icmp", "fcmp"):
        return f"{op} {ins.predicate} {t[0]}, {ops[1].ref}"
    if op == "select":
        return f"select {t[0]}, {t[1]}, {t[2]}"
    if op == "getelementptr":
        flags = "inbounds " if " inbounds " in ins.text else ""
        return f"getelementptr {flags}{ins.source_type}, {', '.join(t)}"
    if op == "extractvalue":
        return f"extractvalue {t[0]}, {', '.join(map(str, ins.indices))}"
    if op == "insertvalue":
        return f"insertvalue {t[0]}, {t[1]}, {', '.join(map(str, ins.indices))}"
    if op in ("trunc", "zext", "sext", "sitofp", "uitofp", "fptosi", "fptoui", "fpext",
              "fptrunc", "bitcast", "ptrtoint", "inttoptr"):
        return f"{op} {t[0]} to {ins.type}"
    if op in ("freeze", "fneg"):
        return f"{op} {t[0]}"
    # binary operators, keeping flags such as nsw / exact
    flags = re.match(r"^\s*%\S+\s*=\s*\w+((?:\s+(?:nsw|nuw|exact|disjoint))*)", ins.text)
    return f"{op}{flags.group(1) if flags else ''} {t[0]}, {ops[1].ref}"


def add_values(e: Emitter, a: Value, b: Value) -> Value:
    """a + b for float scalars, float vectors and aggregates holding floats."""
    ty = a.type
    if is_float_type(ty) or (ty.startswith("<") and contains_float(ty)):
        return e.fadd(a, b)
    if ty.startswith("{") or ty.startswith("["):
        if ty.startswith("{"):
            fields = split_top(ty.strip("{} "))
        else:
            count, elt = ty[1:-1].split(" x ", 1)
            fields = [elt.strip()] * int(count)
        out = a
        for i, fty in enumerate(fields):
            if contains_float(fty):
                s = add_values(e, e.extract(a, i, fty), e.extract(b, i, fty))
                out = e.insert(out, s, i)
        return out
    return a
