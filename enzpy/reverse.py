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

import itertools
import re
from contextlib import contextmanager

from . import rules
from .analysis import DERIVED_POINTERS
from .emitter import Emitter
from .errors import UnsupportedError
from .ir import (Instruction, Value, contains_float, contains_pointer, fields_of, is_float_type,
                 local)
from .augment import AugmentedForward
from .generator import DerivativeGenerator
from .memory import ShadowMemory, null_shadow, shadow_name
from .remat import DependenceGraph
from .tape import TapeRecord

RECOMPUTABLE = {
    "fadd", "fsub", "fmul", "fneg", "add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "udiv", "sdiv",
    "urem", "srem", "trunc", "zext", "sext", "sitofp", "uitofp", "fptosi", "fptoui",
    "fpext", "fptrunc", "icmp", "fcmp", "select", "getelementptr", "extractvalue",
    "insertvalue", "bitcast", "ptrtoint", "inttoptr", "freeze", "fdiv",
}
# Pure intrinsics about as cheap as a division (a handful of cycles, no libm call): the
# minimum cut may recompute them rather than record 8 bytes per value on the tape.
# (Numba's range loops count max(n, 0) iterations: llvm.smax.)
RECOMPUTABLE_CALLS = re.compile(
    r"^llvm\.(sqrt|fabs|copysign|minnum|maxnum|minimum|maximum|floor|ceil|trunc|rint|"
    r"nearbyint|round|roundeven|fma|fmuladd|smax|smin|umax|umin)\.")
_ALIGN = {"double": 8, "float": 4, "half": 2}
_RECOMPUTE_DEPTH = 10        # how long a chain of operands the reverse sweep may recompute


def _recomputable(ins) -> bool:
    """A pure instruction the reverse sweep may execute again from its operands."""
    return ins.opcode in RECOMPUTABLE or (ins.opcode == "call" and bool(
        RECOMPUTABLE_CALLS.match(ins.callee or "")))


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

    def __init__(self, fn, activity, index, atomic=False, stable=frozenset(),
                 nonnull=frozenset(), failures_propagate=True):
        self.fn = fn
        self.activity = tuple(activity)
        self.atomic = atomic
        self.stable = stable
        # every caller fails when this function does: its reverse starts only
        # at exits at which it succeeded (ControlFlow.failing_edges)
        self.failures_propagate = failures_propagate
        # the 'dup' parameters whose shadows every caller passes non-null
        self.nonnull_shadows = {shadow_name(fn.args[k].name) for k in nonnull}
        base = f"enzpy.d{index}.{fn.name}"
        self.aug_name = base + ".aug"
        self.rev_name = base + ".rev"
        self.names = (self.aug_name, self.rev_name)
        self.adjoint_args = [a for a, act in zip(fn.args, activity) if act == "active"]
        self.rev_type = self._struct([a.type for a in self.adjoint_args])
        params = [f"{a.type} {local(a.name)}" for a in fn.args]
        params += [f"ptr {local(shadow_name(a.name))}"
                   for a, act in zip(fn.args, activity) if act == "dup"]
        # No derivative stores its tape's address (the tape runtime and the rules
        # only access it): said so, a derivative kept as a call (another build's)
        # leaves LLVM free to keep the tape position in a register in loops
        # elsewhere in the caller, and to vectorise them.
        params.append('ptr noalias captures(none) %"enzpy.tape"')
        self.params = params
        # names of the parameters the rev function reads, once written
        self.reverse_reads = None

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


class ReverseGenerator(DerivativeGenerator, AugmentedForward, ShadowMemory):
    """Writes the aug and rev functions of one FunctionDerivative."""

    def __init__(self, builder, deriv: FunctionDerivative, describe):
        super().__init__(builder, deriv, describe)
        self.shadow_memory = self._shadow_memory_layout()   # alloca name -> offset
        self.reverse_stack_shadows = self._adjoint_only_allocas()   # alloca name -> type
        self._early_freed = {}        # allocation name -> freed where Numba frees it
        self._roots_read = None       # roots of the memory loaded or passed to calls
        self.loops = self.cfg.counted_loops
        self._loops_at = {}           # block -> headers of the counted loops running it
        for h, loop in self.loops.items():
            for name in loop.body:
                self._loops_at.setdefault(name, []).append(h)
        self.multi_entry = self._multi_entry_loops()  # header -> exiting blocks
        self.inductions = self._find_inductions()   # phi name -> (header, init, step, op)
        self.header_tests = self._find_header_tests()   # header -> (first, last, inclusive)
        self.frame = {}               # key -> type, in insertion order
        # Whether the reverse sweep reads the shadow of an alloca (a stack
        # slot's adjoint, or a shadow pointer kept there): known after planning.
        self.reverse_reads_alloca_shadows = False
        self.pushed = {}              # block -> {key: type}
        # loop header -> {key: type}: values recorded once per run of the loop,
        # at its exits (see _hoisting_loop)
        self.hoisted = {}
        self.dependences = {}         # block -> DependenceGraph, filled while planning
        self.recorded = {}            # block -> primal keys recorded, the others recomputed
        self._recomputing = []        # the primal key being recomputed, None for other work

    # -- entry point ---------------------------------------------------------
    def generate(self) -> str:
        self._check_unsupported()
        self.planning = True
        self._reverse_function()          # discover what the reverse needs
        self.planning = False
        self.recorded = {b: graph.recorded() for b, graph in self.dependences.items()}
        self.frame, self.pushed = {}, {}
        self.reverse_reads_alloca_shadows = False
        rev = self._reverse_function()
        aug = self._augmented_function()
        self.d.reverse_reads = locals_read(rev.split(" {\n", 1)[1])
        return aug + "\n" + rev

    def _find_inductions(self) -> dict:
        """Integer phis ``i = phi [init, preheader], [i +/- step, latch]`` of
        counted loops, plus each loop's own counter (a synthetic phi)."""
        found = {}
        for h, loop in self.loops.items():
            counter = Instruction(f"~ctr.{h}", "phi", "i64", [], "", self.fn.block_map[h])
            self.fn.defs[counter.name] = counter
            found[counter.name] = (h, Value("0", "i64", "const"), Value("1", "i64", "const"), "add")
            for ins in self.fn.block_map[h].instructions:
                if ins.opcode != "phi" or not (ins.type.startswith("i") or ins.type == "ptr") \
                        or len(ins.incoming) != 2:
                    continue
                incoming = {blk: v for v, blk in ins.incoming}
                init, nxt = incoming.get(loop.preheader), incoming.get(loop.latch)
                step_ins = self.fn.defs.get(nxt.name) if nxt is not None and nxt.kind == "inst" else None
                if init is None or step_ins is None:
                    continue
                if ins.type == "ptr":
                    # a pointer stepped by a fixed offset: p = gep T, p, step
                    if step_ins.opcode != "getelementptr" or len(step_ins.operands) != 2 or \
                            step_ins.operands[0].name != ins.name or \
                            step_ins.operands[0].kind != "inst":
                        continue
                    step, op = step_ins.operands[1], f"gep {step_ins.source_type}"
                elif step_ins.opcode not in ("add", "sub"):
                    continue
                else:
                    a, b = step_ins.operands
                    if a.kind == "inst" and a.name == ins.name:
                        step = b
                    elif b.kind == "inst" and b.name == ins.name and step_ins.opcode == "add":
                        step = a
                    else:
                        continue
                    op = step_ins.opcode
                if step.kind == "inst" and self.fn.defs[step.name].block.name in loop.body:
                    continue
                found[ins.name] = (h, init, step, op)
        return found

    # a comparison with its operands swapped, and its negation
    _SWAPPED = {"slt": "sgt", "sle": "sge", "sgt": "slt", "sge": "sle"}
    _NEGATED = {"slt": "sge", "sle": "sgt", "sgt": "sle", "sge": "slt"}

    def _find_header_tests(self) -> dict:
        """header -> (first, last, inclusive) for the loops left only through
        their header's test of an i64 induction stepping by 1 (``iv < bound``,
        ``iv <= bound``) or by -1 (``iv > bound``, ``iv >= bound``, Numba's
        count of the iterations left), with ``bound`` defined outside the loop.
        Their trip count, max(last - first (+ 1 when inclusive), 0), is computed
        in the reverse sweep instead of recorded at every run of the loop:
        (first, last) is (init, bound) counting up, (bound, init) counting down."""
        found = {}
        for h, loop in self.loops.items():
            br = self.fn.block_map[h].terminator
            if br.opcode != "br" or len(br.targets) != 2:
                continue
            leaving = [(b, s) for b in loop.body for s in self.fn.block_map[b].successors
                       if s not in loop.body]
            if len(leaving) != 1 or leaving[0][0] != h:
                continue
            cond = br.operands[0]
            test = self.fn.defs.get(cond.name) if cond.kind == "inst" else None
            if test is None or test.opcode != "icmp":
                continue
            iv, bound = test.operands
            pred = test.predicate
            if bound.kind == "inst" and bound.name in self.inductions:
                iv, bound, pred = bound, iv, self._SWAPPED.get(pred, "")
            if br.targets[0] not in loop.body:       # (the loop goes on while the test fails)
                pred = self._NEGATED.get(pred, "")
            induction = self.inductions.get(iv.name) if iv.kind == "inst" else None
            if induction is None or induction[0] != h or iv.type != "i64" or \
                    bound.type != "i64" or (bound.kind == "inst" and
                                            self.fn.defs[bound.name].block.name in loop.body):
                continue
            _, init, step, op = induction
            direction = {("add", "1"): 1, ("add", "-1"): -1, ("sub", "1"): -1,
                         ("sub", "-1"): 1}.get((op, step.ref))
            if direction == 1 and pred in ("slt", "sle"):
                found[h] = (init, bound, pred == "sle")
            elif direction == -1 and pred in ("sgt", "sge"):
                found[h] = (bound, init, pred == "sge")
        return found

    def _trip_count(self, h, block) -> Value:
        """The number of times loop ``h`` went round, in the reverse block ``block``
        (after the loop): from its header's test, or recorded."""
        test = self.header_tests.get(h)
        if test is None:
            return self.primal(self.fn.defs[f"~ctr.{h}"].value, block)
        first, last, inclusive = test
        first, last = self.primal(first, block), self.primal(last, block)
        span = self.e.define("i64", f"sub i64 {last.ref}, {first.ref}")
        if inclusive:
            span = self.e.define("i64", f"add i64 {span.ref}, 1")
        none = self.e.define("i1", f"icmp slt i64 {span.ref}, 0")
        return self.e.define("i64", f"select i1 {none.ref}, i64 0, i64 {span.ref}")

    def _induction_free(self, v: Value, block, depth=0) -> bool:
        """Whether ``v`` is available in the reverse block without the tape."""
        if v.kind != "inst":
            return True
        if depth > _RECOMPUTE_DEPTH:
            return False
        ins = self.fn.defs[v.name]
        if ins.block.name not in self.cfg.loop_blocks or \
                self._hoisting_loop(ins, block) is not None:
            return True             # (the frame, or once per run of the loop)
        iv = self.inductions.get(v.name)
        if iv is not None and block in self.loops[iv[0]].body:
            return self._induction_free(iv[1], block, depth + 1) and \
                self._induction_free(iv[2], block, depth + 1)
        return (_recomputable(ins) or self._rereadable(ins)) and all(
            self._induction_free(o, block, depth + 1) for o in ins.operands)

    def _rereadable(self, ins) -> bool:
        """A load from memory nothing writes during the call: the reverse
        sweep reads it again instead of recording it."""
        return ins.opcode == "load" and self.builder.readonly.is_readonly(self.fn, ins.operands[0])

    # -- where the reverse gets primal values --------------------------------
    def _storage(self, key, ins) -> str:
        if key[0] == "p" and (_recomputable(ins) or self._rereadable(ins)):
            return "recompute"
        if key[0] == "s" and (ins.opcode in ("getelementptr", "bitcast", "select", "freeze",
                                             "alloca",
                                             "addrspacecast", "insertvalue", "extractvalue")
                              or ins.callee in DERIVED_POINTERS):
            return "recompute"
        if key[0] == "p" and ins.callee in DERIVED_POINTERS and self.held(ins.operands[0]):
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
        value = self._fetch(("s", v.name), self.fn.defs[v.name], block, depth)
        if self.shadow_never_null(v.name):
            self.never_null_refs.add(value.ref)
        return value

    def _fetch(self, key, ins, block, depth):
        iv = self.inductions.get(key[1])
        if iv is not None and (key[0] == "p" or iv[3].startswith("gep")) and \
                block in self.loops[iv[0]].body and self._induction_free(ins.value, block):
            memo = self.recomputed.get((key, block))
            if memo is None:
                with self._recomputing_for(None):
                    memo = self._induction_value(ins, iv, block, depth + 1,
                                                 shadow=key[0] == "s")
                self.recomputed[(key, block)] = memo
            return memo
        how = self._storage(key, ins)
        ty = ins.type
        loop = self._hoisting_loop(ins, block) if how != "frame" else None
        if loop is not None:
            # (outside the block's choice of what to record: this costs once per loop run)
            self.hoisted.setdefault(loop, {}).setdefault(key, ty)
            memo = self.recomputed.get((key, block))
            if memo is None:
                memo = self.recomputed[(key, block)] = self.e.define(
                    ty, f"load {ty}, ptr {self._hoisted_slot(loop, key)}")
            return memo
        recorded = "push" if ins.block.name in self.cfg.loop_blocks else "frame"
        if key[0] == "p":
            how = self._record_or_recompute(key, ins, block, how, recorded, depth)
        elif how == "recompute" and depth > _RECOMPUTE_DEPTH:
            how = recorded
        if how == "frame":
            self.frame.setdefault(key, ty)
            return Value(local(f"~fr.{key[0]}.{key[1]}"), ty, "inst")
        if how == "push":
            self.pushed.setdefault(block, {}).setdefault(key, ty)
            return Value(local(f"~rv.{block}.{key[0]}.{key[1]}"), ty, "inst")
        memo = self.recomputed.get((key, block))
        if memo is None:
            with self._recomputing_for(key if key[0] == "p" else None):
                memo = self._recompute(key, ins, block, depth + 1)
            self.recomputed[(key, block)] = memo
        return memo

    def _hoisting_loop(self, ins, block):
        """The outermost counted loop running ``block`` but not ``ins``'s block, or
        None. A value the reverse of ``block`` needs is the same in every
        iteration of that loop (it is defined before the loop runs): it is
        recorded (or recomputed) once per run of the loop, at its exits, and
        kept in a slot the reverse sweep fills when it enters the loop. (The
        index Numba's broadcasting keeps for an outer dimension is recorded
        once per row, not once per element; an array's data pointer, a call,
        is recomputed once, not in every iteration, which kept the loop from
        vectorising.)"""
        found = None
        for h in self._loops_at.get(block, ()):
            if ins.block.name not in self.loops[h].body and (
                    found is None or len(self.loops[h].body) > len(self.loops[found].body)):
                found = h
        return found

    @staticmethod
    def _hoisted_slot(header, key) -> str:
        return local(f"~hv.{header}.{key[0]}.{key[1]}")

    def _fill_hoisted(self, sites):
        """Write, where the reverse sweep enters each loop (``sites``: header ->
        [(block, emitter, marker)]), the stores of the values recorded for the
        loop. Fetching them may record values for other loops (outer ones):
        written again until no loop gains a value."""
        rounds = itertools.count()
        while True:
            before = {h: len(values) for h, values in self.hoisted.items()}
            fills = []
            for h, entries in sites.items():
                for block, emitter, marker in entries:
                    self.e = fill = Emitter(f"~hf{next(rounds)}")
                    self.recomputed = {}
                    for key, ty in list(self.hoisted.get(h, {}).items()):
                        v = self.fn.defs[key[1]].value
                        v = self.primal(v, block) if key[0] == "p" else self.shadow(v, block)
                        fill.emit(f"store {ty} {v.ref}, ptr {self._hoisted_slot(h, key)}")
                    fills.append((emitter, marker, fill))
            if before == {h: len(values) for h, values in self.hoisted.items()}:
                break
        for emitter, marker, fill in fills:
            index = emitter.lines.index(marker)
            emitter.lines[index:index + 1] = fill.lines
            emitter.declarations.update(fill.declarations)

    @contextmanager
    def _recomputing_for(self, key):
        """Primal values fetched meanwhile are operands of ``key`` (None: demands)."""
        self._recomputing.append(key)
        try:
            yield
        finally:
            self._recomputing.pop()

    def _record_or_recompute(self, key, ins, block, how, recorded, depth) -> str:
        """Where the reverse of ``block`` gets the primal value ``key``. Planning
        recomputes what can be (within a depth) and notes the dependences; the
        final pass follows the block's minimum cut (see remat.py)."""
        graph = self.dependences.get(block)
        if not self.planning and graph is not None and key in graph.cost:
            return recorded if key in self.recorded[block] else "recompute"
        recomputable = how == "recompute" and depth <= _RECOMPUTE_DEPTH
        if self.planning:
            if graph is None:
                graph = self.dependences[block] = DependenceGraph(
                    block in self.cfg.loop_blocks)
            graph.visit(key, ins.type, recorded == "push", recomputable,
                        self._recomputing[-1] if self._recomputing else None)
        return how if recomputable else recorded

    def _counter(self, header) -> Value:
        return self.e.define("i64", f"load i64, ptr {local('~k.' + header)}")

    def _induction_value(self, ins, iv, block, depth, shadow=False) -> Value:
        """init +/- k * step (a pointer: init advanced k steps; its shadow: the
        shadow of init advanced as far), k being the loop's reverse iteration
        counter."""
        header, init, step, op = iv
        e = self.e
        k = self._counter(header)
        ty = step.type if ins.type == "ptr" else ins.type
        if ty != "i64":
            k = e.cast("trunc" if int(ty[1:]) < 64 else "zext", k, ty)
        step = self.primal(step, block, depth)
        scaled = e.define(ty, f"mul {ty} {k.ref}, {step.ref}")
        if not op.startswith("gep"):
            init = self.primal(init, block, depth)
            value = e.define(ty, f"{op} {ty} {init.ref}, {scaled.ref}")
            if op == "add" and step.ref == "1" and init.kind == "const" and \
                    init.ref.lstrip("-").isdigit() and int(init.ref) >= 0:
                # ``for i in range(a, n)``: i = a + k is never negative, which
                # LLVM cannot see in a loop counting down; told, it drops
                # Numba's wrap-around of negative indices and can vectorise.
                nonnegative = e.define("i1", f"icmp sge {ty} {value.ref}, 0")
                e.emit(f"call void @llvm.assume(i1 {nonnegative.ref})")
            return value
        base = self.shadow(init, block, depth) if shadow else self.primal(init, block, depth)
        if base.ref == "null":
            return base
        address = e.define("ptr", f"getelementptr {op[4:]}, ptr {base.ref}, {ty} {scaled.ref}")
        return self.null_with(base, address) if shadow else address

    def _recompute(self, key, ins, block, depth) -> Value:
        e = self.e
        if key[0] == "s" and ins.opcode == "alloca" and ins.name in self.reverse_stack_shadows:
            return Value(local("~rs." + ins.name), "ptr", "inst")
        if key[0] == "s" and ins.opcode == "alloca":
            self.reverse_reads_alloca_shadows = True
            mem = self.primal(self.fn.defs["~mem"].value, block, depth)
            return e.define("ptr", f"getelementptr inbounds i8, ptr {mem.ref}, "
                                   f"i64 {self.shadow_memory[ins.name]}")
        if key[0] == "s":
            return self.shadow_value(e, ins, lambda v: self.primal(v, block, depth),
                                     lambda v: self.shadow(v, block, depth))
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
        self.hoisted, self._entry_sites, reverses = {}, {}, []
        for b in self.fn.blocks:
            self.e = e = Emitter(f"~r.{b.name}")
            self.recomputed = {}
            for ins in reversed(b.instructions[:-1]):
                if ins.opcode != "phi":
                    self._reverse_instruction(ins, b.name)
            self._dispatch(b)
            reverses.append(e)
        self._fill_hoisted(self._entry_sites)
        for b, e in zip(self.fn.blocks, reverses):
            # what the block's record holds is known once every reverse is written
            self.e = pop = Emitter(f"~pop.{b.name}")
            pop.label("~rev." + b.name)
            self._pop_block(b)
            body.lines += pop.lines + e.lines
            body.declarations.update(pop.declarations)
            body.declarations.update(e.declarations)
        entry_blocks = self._loop_entry_blocks()
        body.lines += entry_blocks.lines
        self.e = tail = Emitter("~r.tail")
        tail.label("~exit")
        if self.shadow_memory and self.reverse_reads_alloca_shadows:
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
        for h in self.multi_entry:
            head.emit(f"{local('~rlt.' + h)} = alloca i32")
        for name, ty in self.reverse_stack_shadows.items():
            head.emit(f"{local('~rs.' + name)} = alloca {ty}, align 16")
            head.emit(f"store {ty} {head.zero(ty).ref}, ptr {local('~rs.' + name)}")
        for h, values in self.hoisted.items():
            for key, ty in values.items():
                head.emit(f"{self._hoisted_slot(h, key)} = alloca {ty}")
        self._pop_frame(head)
        self.builder.declarations.update(body.declarations)
        self.builder.declarations.update(head.declarations)
        self.builder.declarations.update(tail.declarations)
        lines = head.lines + body.lines + tail.lines
        return (f"define internal {d.rev_type} @\"{d.rev_name}\"({', '.join(d.params)})"
                f"{self._inlining()} {{\n"
                + "\n".join(lines) + "\n}\n")

    def _frame_recorded(self) -> bool:
        """A call records its frame (values kept outside loops, and the exit it
        left by when there are several) unless there is nothing to tell."""
        return bool(self.frame) or len(self.cfg.returning_exits) > 1

    def _pop_frame(self, e):
        exits = self.cfg.returning_exits
        if self._frame_recorded():
            TapeRecord(self.frame.values(), len(exits) > 1).pop(
                e, [local(f"~fr.{key[0]}.{key[1]}") for key in self.frame], local("~exit.id"))
        if not exits:
            e.emit("unreachable")           # the function never succeeds: no reverse
            return
        if len(exits) == 1:
            e.emit(f"br label {local('~rev.' + exits[0])}")
            return
        cases = " ".join(f"i32 {i}, label {local('~rev.' + b)}" for i, b in enumerate(exits))
        e.emit(f"switch i32 {local('~exit.id')}, label {local('~rev.' + exits[0])} [ {cases} ]")

    def _pop_block(self, b):
        e = self.e
        pushed = self.pushed.get(b.name, {})
        if self.planning or not (pushed or self._needs_edge(b)):
            return
        names = [local(f"~rv.{b.name}.{key[0]}.{key[1]}") for key in pushed]
        TapeRecord(pushed.values(), self._needs_edge(b)).pop(e, names, local(f"~edge.{b.name}"))
        for key, name in zip(pushed, names):
            if key[1].startswith("~ctr."):
                # A trip count is never negative: told so, LLVM sees that the
                # reverse loop's recomputed indices are too (no wrap-around of
                # negative indices), and can vectorise the loop.
                nonnegative = e.define("i1", f"icmp sge i64 {name}, 0")
                e.emit(f"call void @llvm.assume(i1 {nonnegative.ref})")

    def _needs_edge(self, b) -> bool:
        """Whether the edge into ``b`` must be recorded (it cannot be recomputed)."""
        return len(self.cfg.reverse_preds(b.name)) > 1 and b.name not in self.loops \
            and self.cfg.edge_condition(b.name) is None

    def _edge_index(self, b) -> str:
        if self._needs_edge(b):
            return local("~edge." + b.name)
        loop = self.loops.get(b.name)
        if loop is not None:
            # Count down: the first iteration came from the preheader.
            e = self.e
            preds = self.cfg.reverse_preds(b.name)
            k = self._counter(b.name)
            first = e.define("i1", f"icmp eq i64 {k.ref}, 0")
            e.emit(f"store i64 {e.define('i64', f'sub i64 {k.ref}, 1').ref}, "
                   f"ptr {local('~k.' + b.name)}")
            return e.define("i32", f"select i1 {first.ref}, i32 {preds.index(loop.preheader)}, "
                                   f"i32 {preds.index(loop.latch)}").ref
        br, if_true, if_false = self.cfg.edge_condition(b.name)
        preds = self.cfg.reverse_preds(b.name)
        cond = self.primal(br.operands[0], b.name)
        return self.e.define("i32", f"select i1 {cond.ref}, i32 {preds.index(if_true)}, "
                                    f"i32 {preds.index(if_false)}").ref

    def _loop_entries(self, b) -> dict:
        """pred -> [(header, count)]: loops the reverse sweep enters through
        the edge pred -> b, with their recorded trip count."""
        entries = {}
        for pred in self.cfg.reverse_preds(b.name):
            for h in self._loops_at.get(pred, ()):
                if b.name not in self.loops[h].body:
                    count = self._trip_count(h, b.name)
                    entries.setdefault(pred, []).append((h, count))
        return entries

    def _enter_loops(self, entries, pred, block):
        """Go from the reverse of ``block`` to that of its predecessor ``pred``,
        entering the loops ``entries`` lists for the edge: their trip counts and
        hoisted values, and the tokens of those with several reverse entries
        (see ``_multi_entry_loops``; the back edge of such a loop is one too)."""
        e = self.e
        for h, count in entries.get(pred, []):
            e.emit(f"store i64 {count.ref}, ptr {local('~k.' + h)}")
            # (the loop's hoisted values are stored here once all are known)
            marker = f"; hoisted values of {h} entered from {block}.{pred}"
            e.lines.append(marker)
            self._entry_sites.setdefault(h, []).append((block, e, marker))
        tokens = sorted(((h, self.multi_entry[h].index(pred) + 1)
                         for h, _ in entries.get(pred, []) if h in self.multi_entry),
                        key=lambda entry: -len(self.loops[entry[0]].body))  # outermost first
        if block in self.multi_entry and pred == self.loops[block].latch:
            tokens.insert(0, (block, 0))
        for h, token in tokens:
            e.emit(f"store i32 {token}, ptr {local('~rlt.' + h)}")
        e.emit(f"br label {local('~rl.' + tokens[0][0] if tokens else '~rev.' + pred)}")

    def _dispatch(self, b):
        e = self.e
        preds = self.cfg.reverse_preds(b.name)
        if not preds:
            e.emit(f"br label {local('~exit')}")
            return
        entries = self._loop_entries(b)
        phis = [i for i in b.instructions if i.opcode == "phi" and self.act.is_active(i.value)]
        incoming_adjoints = [(phi, self._take_adjoint(phi.value)) for phi in phis]
        if len(preds) == 1:
            self._transfer(incoming_adjoints, preds[0])
            self._enter_loops(entries, preds[0], b.name)
            return
        targets = [f"~rev.{b.name}.from.{i}" for i in range(len(preds))]
        cases = " ".join(f"i32 {i}, label {local(t)}" for i, t in enumerate(targets))
        e.emit(f"switch i32 {self._edge_index(b)}, label {local(targets[0])} [ {cases} ]")
        for target, pred in zip(targets, preds):
            e.label(target)
            self._transfer(incoming_adjoints, pred)
            self._enter_loops(entries, pred, b.name)

    # -- loops the reverse sweep enters at several blocks -----------------------
    # The reverse of a loop is entered at the reverse of the block the primal
    # left it from. A loop left from two blocks (its header's test, and a call's
    # exception exit in its body: any loop calling a function) would give a
    # reverse cycle with two entries, which LLVM's loop passes (LICM,
    # vectorisation, unrolling) do not handle. Such a reverse loop gets one
    # entry block, ``~rl.<header>``, which every entry and the back edge go
    # through, switching on a token (0: the back edge, i + 1: left from
    # exiting block i) to where the reverse sweep resumes.
    def _multi_entry_loops(self) -> dict:
        exiting = {}
        for b in self.fn.blocks:
            for p in self.cfg.reverse_preds(b.name):
                for h in self._loops_at.get(p, ()):
                    if b.name not in self.loops[h].body:
                        exiting.setdefault(h, set()).add(p)
        return {h: sorted(blocks) for h, blocks in exiting.items() if len(blocks) > 1}

    def _entry_hop(self, h, exiting) -> str:
        """Where ``~rl.h`` goes for a reverse sweep resuming at ``exiting`` (an
        exiting block, or the latch): the entry block of the outermost such loop
        inside ``h`` on the way, else the reverse of ``exiting``."""
        inner = [g for g in self._loops_at[exiting] if g != h and g in self.multi_entry
                 and self.loops[g].body < self.loops[h].body]
        if not inner:
            return "~rev." + exiting
        return "~rl." + max(inner, key=lambda g: len(self.loops[g].body))

    def _loop_entry_blocks(self) -> Emitter:
        e = Emitter("~rl")
        for h, exiting in self.multi_entry.items():
            e.label("~rl." + h)
            token = e.define("i32", f"load i32, ptr {local('~rlt.' + h)}")
            cases = " ".join(f"i32 {i + 1}, label {local(self._entry_hop(h, x))}"
                             for i, x in enumerate(exiting))
            back = self._entry_hop(h, self.loops[h].latch)
            e.emit(f"switch i32 {token.ref}, label {local(back)} [ {cases} ]")
        return e

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
                if contains_pointer(value.type) and value.kind == "const":
                    # a constant (Numba's nulling of a new jitclass object):
                    # its float leaves carry no adjoint; shadow pointers stay
                    zero_float_leaves(e, value.type, self.guard(self.shadow(ptr, block),
                                                                write=True))
                    return
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
            if self.d.atomic and is_float_type(ins.type):
                # other threads may add into the same shadow at once
                e.emit(f"atomicrmw fadd ptr {self.guard(sp, write=True).ref}, "
                       f"{ins.type} {adj.ref} monotonic, align {_ALIGN[ins.type]}")
                return
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

    def _apply_rule(self, ins, adj, block):
        e = self.e
        name = ins.callee if ins.opcode == "call" else ins.opcode
        if ins.opcode == "call" and not ins.callee:
            raise UnsupportedError(f"indirect call with active arguments `{ins.text}`"
                                   f"{self._where(ins)}")
        rule = rules.lookup(name, lambda: self._where(ins))
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
                product = e.fmul(adj, p) if self.fn.name in self.builder.recursive \
                    else rules.strong_product(e, adj, p)
                self._accumulate(operand, product)

    def _lazy(self, v: Value, block) -> Value:
        if v.kind != "inst":
            return v
        return Lazy(lambda: self.primal(v, block), v.type)

    def _reverse_call(self, ins, block):
        e = self.e
        callee = self._callee(ins)
        reads = self.builder.reverse_reads(callee)

        def passed(fetch, a, param):
            # what the callee's reverse never reads is not recorded for it
            if reads is None or param in reads:
                return fetch(a, block)
            return Value("undef", a.type, "const")

        params = callee.fn.args
        args = [passed(self.primal, a, p.name) for a, p in zip(ins.args, params)]
        args += [passed(self.shadow, a, shadow_name(p.name))
                 for a, p, act in zip(ins.args, params, callee.activity) if act == "dup"]
        args.append(Value('%"enzpy.tape"', "ptr", "arg"))
        out = e.call(callee.rev_name, callee.rev_type, args, callee.param_types())
        for i, a in enumerate(callee.adjoint_args):
            operand = ins.args[callee.fn.args.index(a)]
            self._accumulate(operand, e.extract(out, i, a.type))

    # -- the augmented forward function ------------------------------------------
_LOCAL_NAME = re.compile(r'%"([^"]+)"|%([-a-zA-Z$._0-9]+)')


def locals_read(body: str) -> frozenset:
    """Every local name IR text ``body`` mentions, quoted or not."""
    return frozenset(q or p for q, p in _LOCAL_NAME.findall(body))


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


def zero_float_leaves(e: Emitter, root: str, ptr: Value, ty=None, path=()):
    """Store 0 into every float leaf of the value of type ``root`` at ``ptr``."""
    ty = root if ty is None else ty
    if is_float_type(ty):
        address = ptr.ref
        if path:
            indices = ", ".join(f"i32 {k}" for k in (0,) + path)
            address = e.define("ptr", f"getelementptr {root}, ptr {ptr.ref}, {indices}").ref
        e.emit(f"store {ty} {e.zero(ty).ref}, ptr {address}, align 1")
        return
    for k, field in enumerate(fields_of(ty)):
        if contains_float(field):
            zero_float_leaves(e, root, ptr, field, path + (k,))


def add_values(e: Emitter, a: Value, b: Value) -> Value:
    """a + b for float scalars, float vectors and aggregates holding floats, adding
    adjoints: the sign of a zero adjoint means nothing (``nsz``), so LLVM drops the
    ``+ 0.0`` of a first contribution to a freshly reset adjoint."""
    ty = a.type
    if is_float_type(ty) or (ty.startswith("<") and contains_float(ty)):
        return e.binop("fadd nsz", a, b)
    if ty.startswith("{") or ty.startswith("["):
        out = a
        for i, fty in enumerate(fields_of(ty)):
            if contains_float(fty):
                s = add_values(e, e.extract(a, i, fty), e.extract(b, i, fty))
                out = e.insert(out, s, i)
        return out
    return a
