"""Analyses on the IR model: control flow, loops and activity.

Activity (as in Enzyme): a value is *active* iff it is *varied* (depends on an
active input) and *useful* (influences an active output or active memory).
Integers are never active. A pointer is *shadowed* when it points to memory
that carries derivatives: a Duplicated argument or a float-holding alloca.
"""
from __future__ import annotations

import re

from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from .ir import (Function, Instruction, Value, local, contains_float, contains_pointer,
                 field_offsets, fields_of, is_float_type, leaf_kinds, size_and_alignment)

# Instructions whose result is a pointer into the same object as an operand.
POINTER_PROPAGATING = ("getelementptr", "bitcast", "addrspacecast", "phi", "select", "freeze")
# Numba runtime calls returning a new allocation that gets a shadow allocation:
# a meminfo (arrays), or raw memory (e.g. the temporary copy of an overlapping slice).
RAW_ALLOCATORS = ("NRT_Allocate", "NRT_Allocate_External")
# (with a destructor: lists, jitclass instances; their shadows get the same one)
ALLOCATORS = ("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned",
              "NRT_MemInfo_alloc", "NRT_MemInfo_alloc_safe", "NRT_MemInfo_new_varsize",
              "NRT_MemInfo_alloc_dtor", "NRT_MemInfo_alloc_dtor_safe",
              "NRT_MemInfo_new_varsize_dtor") + RAW_ALLOCATORS
# The allocations of Numba's arrays (a meminfo whose data are the elements).
ARRAY_ALLOCATORS = ("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned")
# Numba runtime calls returning a pointer into their (first) argument's allocation.
DERIVED_POINTERS = ("NRT_MemInfo_data_fast", "NRT_MemInfo_data")
# Numba runtime calls giving the allocation of their first argument (a
# variable-size meminfo: a list's) new data, returned: the shadow allocation
# is resized alike. (Never recomputed: the reverse sweep finds the data again
# through the meminfo.)
RESIZERS = ("NRT_MemInfo_varsize_realloc", "NRT_MemInfo_varsize_alloc")
# Runtime calls storing a pointer argument into the memory another one points
# to, whatever that memory's type says (a dictionary's iterator, a byte array,
# holds its dictionary): callee -> (index of the memory, index of the pointer).
POINTER_STORING_CALLS = {"numba_dict_iter": (0, 1)}


@dataclass
class Loop:
    """A natural loop with one entering edge source and one latch.

    Its trip count is reconstructed in the reverse sweep: the augmented forward
    counts header executions and records the count once per loop exit (unless
    the header's test of an induction gives it: ``ReverseGenerator._trip_count``);
    the reverse sweep counts down, so neither the header's predecessor nor the
    loop's induction variables need the tape.
    """
    header: str
    preheader: str
    latch: str
    body: frozenset


class ControlFlow:
    def __init__(self, fn: Function, functions=None, failures_propagate=False):
        self.fn = fn
        self.functions = functions or {}     # the module's definitions, by name
        # whether every caller fails when ``fn`` does (see failing_edges)
        self.failures_propagate = failures_propagate
        self.graph = nx.DiGraph()
        self.graph.add_nodes_from(b.name for b in fn.blocks)
        # Predecessor edges in order, one per CFG edge (a switch may have two
        # edges to the same block; they share one index).
        self.pred_edges = {b.name: [] for b in fn.blocks}
        for b in fn.blocks:
            for succ in b.successors:
                self.graph.add_edge(b.name, succ)
                self.pred_edges[succ].append(b.name)

    def preds(self, block: str) -> list:
        """Distinct predecessors, in a fixed order."""
        return list(dict.fromkeys(self.pred_edges[block]))

    @cached_property
    def loop_blocks(self) -> set:
        """Blocks that may run more than once per call."""
        inside = set()
        for scc in nx.strongly_connected_components(self.graph):
            if len(scc) > 1:
                inside |= scc
            else:
                (node,) = scc
                if self.graph.has_edge(node, node):
                    inside.add(node)
        return inside

    @cached_property
    def reverse_postorder(self) -> list:
        """Blocks with each one after its dominators (unreachable blocks last)."""
        order = list(nx.dfs_postorder_nodes(self.graph, self.fn.entry.name))[::-1]
        seen = set(order)
        return order + [b.name for b in self.fn.blocks if b.name not in seen]

    @cached_property
    def idom(self) -> dict:
        return nx.immediate_dominators(self.graph, self.fn.entry.name)

    def dominates(self, a: str, b: str) -> bool:
        while True:
            if a == b:
                return True
            parent = self.idom.get(b, b)
            if parent == b:
                return False
            b = parent

    def edge_condition(self, block: str):
        """For a join reached by exactly one edge from each side of one
        conditional branch, return (branch instruction, pred if true, pred if
        false): the edge taken is then known from the branch condition."""
        preds = self.preds(block)
        if len(preds) != 2 or len(self.pred_edges[block]) != 2:
            return None
        head = self.idom.get(block)
        if head is None or head == block:
            return None
        br = self.fn.block_map[head].terminator
        if br.opcode != "br" or len(br.targets) != 2:
            return None
        sides = {}
        for pred in preds:
            # The edge head -> succ must dominate pred: succ dominates it and is
            # entered only from head.
            on = [side for side, succ in zip((True, False), br.targets)
                  if (succ == block and pred == head) or
                  (succ != block and self.preds(succ) == [head]
                   and self.dominates(succ, pred))]
            if len(on) != 1 or on[0] in sides:
                return None
            sides[on[0]] = pred
        return br, sides[True], sides[False]

    @cached_property
    def counted_loops(self) -> dict:
        """header -> Loop, for the loops whose trip count can be reconstructed."""
        back = {}
        for u, h in self.graph.edges:
            if self.dominates(h, u):
                back.setdefault(h, []).append(u)
        loops = {}
        for h, latches in back.items():
            if len(latches) != 1:
                continue
            latch = latches[0]
            body = {h}
            stack = [latch]
            while stack:
                n = stack.pop()
                if n not in body:
                    body.add(n)
                    stack.extend(self.graph.predecessors(n))
            outside = [p for p in self.pred_edges[h] if p not in body]
            if len(outside) != 1 or self.pred_edges[h].count(latch) != 1:
                continue
            exits = {s for b in body for s in self.graph.successors(b) if s not in body}
            if not all(self.dominates(h, y) for y in exits):
                continue
            loops[h] = Loop(h, outside[0], latch, frozenset(body))
        return loops

    @cached_property
    def exits(self) -> list:
        return [b.name for b in self.fn.blocks if b.terminator.opcode == "ret"]

    # -- the edges a reverse sweep can come back through ------------------------
    # Numba's functions return a status: 0 (or -2, returning None) when they
    # succeed; any other status is an exception, which Numba's callers propagate
    # (enzpy refuses the callers that catch one: frontend._refuse_caught_exceptions;
    # a parallel loop's wrapper does not propagate), and enzpy runs a reverse
    # sweep only after its root call succeeded. So the reverse of a function all
    # of whose callers propagate (``propagates_failure``: one derivative for
    # them, another for the others) is entered only at an exit that succeeded:
    # an edge into an exit on which the status returned is an exception needs
    # no record, and its exit none either.
    @cached_property
    def failing_edges(self) -> frozenset:
        """The ``exceptions_returned`` a reverse sweep never starts at: all of
        them when every caller propagates them, else none."""
        return self.exceptions_returned if self.failures_propagate else frozenset()

    @cached_property
    def exceptions_returned(self) -> frozenset:
        """(pred, exit) edges on which the function surely returns an exception
        (a constant status other than 0 and -2, or a callee's status on the
        way Numba propagates it); ``(None, exit)`` for an exit that fails
        however it is entered."""
        if not numba_convention(self.fn):
            return frozenset()
        failing = set()
        for x in self.exits:
            status = self.fn.block_map[x].terminator.operands[0]
            ins = self.fn.defs.get(status.name) if status.kind == "inst" else None
            if ins is not None and ins.opcode == "phi" and ins.block.name == x:
                failing.update((p, x) for v, p in ins.incoming
                               if _fails(v) or self._enters_failing(p, v, x))
            elif _fails(status) or self._enters_failing(None, status, x):
                failing.add((None, x))
        return frozenset(failing)

    def _enters_failing(self, pred, status: Value, x: str) -> bool:
        """Whether ``status`` is a failing callee status when control goes from
        ``pred`` to ``x`` (``pred`` None: however ``x`` is entered): the edge,
        or the only edge into ``pred``, is the way a test of it goes on failure."""
        edges = [(pred, x)] if pred is not None else []
        block = pred if pred is not None else x
        if len(self.pred_edges[block]) == 1:
            edges.append((self.pred_edges[block][0], block))
        return any(self._on_failure(self.fn.block_map[source].terminator, status) == target
                   for source, target in edges)

    def _on_failure(self, term: Instruction, status: Value):
        """Where ``term`` goes when ``status`` (a callee's) is a failure, if it
        tests it as Numba does: a switch with cases 0 and -2, or a branch on
        ``status == 0`` when the callee never returns -2."""
        if status.kind != "inst":
            return None
        if term.opcode == "switch" and term.operands[0] == status:
            default = term.targets[0]
            if all(t != default for _, t in term.cases) and \
                    {c for c, _ in term.cases} >= {"i32 0", "i32 -2"}:
                return default
        if term.opcode == "br" and len(term.targets) == 2 and term.targets[0] != term.targets[1]:
            test = self.fn.defs.get(term.operands[0].name)
            if test is not None and test.opcode == "icmp" and test.predicate in ("eq", "ne") \
                    and test.operands[0] == status and test.operands[1].ref == "0" \
                    and not self._may_return_none(status):
                return term.targets[1] if test.predicate == "eq" else term.targets[0]
        return None

    def _may_return_none(self, status: Value) -> bool:
        """Unless the callee's definition says its status lies in a range without -2."""
        call = self.fn.defs.get(status.name)
        callee = self.functions.get(call.callee) if call.opcode == "call" else None
        m = re.search(r"\brange\(i32 (-?\d+), (-?\d+)\)", callee.attributes) if callee else None
        if m is None:
            return True
        low, high = int(m.group(1)), int(m.group(2))
        return low <= -2 < high if low < high else (-2 >= low or -2 < high)

    @cached_property
    def doomed(self) -> frozenset:
        """Blocks from which every path returns an exception."""
        failing = self.exceptions_returned
        doomed = {x for x in self.exits if (None, x) in failing}
        # Successors first (postorder): outside loops one pass reaches the fixed point.
        changed = True
        while changed:
            changed = False
            for name in reversed(self.reverse_postorder):
                succs = self.fn.block_map[name].successors
                if name not in doomed and succs and all(
                        s in doomed or (name, s) in failing for s in succs):
                    doomed.add(name)
                    changed = True
        return frozenset(doomed)

    def propagates_failure(self, call: Instruction) -> bool:
        """Whether the function fails whenever ``call`` (of a function returning
        Numba's status) fails, as the reverse sweep of the callee assumes: the
        status is tested as Numba does, and a failure leads to a return of an
        exception."""
        if not call.name:
            return False            # the status is not even read
        status = call.value
        if any(u.opcode == "ret" and u.block is call.block
               for u in self.fn.users.get(call.name, ())):
            return True             # returned as it is (a tangent function's call)
        tests = [u for t in self.fn.users.get(call.name, ())
                 for u in ([t] if t.opcode == "switch" else
                           self.fn.users.get(t.name, ()) if t.opcode == "icmp" else ())]
        for term in tests:
            target = self._on_failure(term, status)
            if target is not None and (target in self.doomed or
                                       (term.block.name, target) in self.exceptions_returned):
                return True
        return False

    def reverse_preds(self, block: str) -> list:
        """The predecessors a reverse sweep can go back to from ``block``."""
        return [p for p in self.preds(block) if (p, block) not in self.failing_edges]

    @cached_property
    def returning_exits(self) -> list:
        """The exits at which a reverse sweep can start (see failing_edges)."""
        return [x for x in self.exits if (None, x) not in self.failing_edges
                and (self.reverse_preds(x) or not self.pred_edges[x])]


def numba_convention(fn: Function) -> bool:
    """Whether ``fn`` returns a status as Numba's functions do."""
    return fn.return_type == "i32" and len(fn.args) >= 2 and fn.args[1].name == "excinfo"


def _fails(status: Value) -> bool:
    return (status.kind == "const" and re.fullmatch(r"-?\d+", status.ref) is not None
            and status.ref not in ("0", "-2"))


class Activity:
    """Activity of every value of ``fn`` for the given argument activities.

    ``arg_activity`` holds one of 'active' (float scalar), 'dup' (pointer with a
    shadow) or 'const' per argument. ``callee_is_differentiable(name)`` says
    whether a call target carries derivatives through its arguments;
    ``selector_params(name)`` the pointer parameters a call target only reads
    (``FunctionRule.selector_params``).
    """

    def __init__(self, fn: Function, arg_activity, call_propagates,
                 selector_params=lambda name: frozenset()):
        self.fn = fn
        self.shadowed = set()
        self.varied = set()
        self._roots = {}                # pointer name -> its roots
        self._varying_slots = set()     # stack slots a varying value may be written to
        self._visiting = set()          # stack slots whose writes are being looked at
        for arg, act in zip(fn.args, arg_activity):
            if act == "dup":
                self.shadowed.add(arg.name)
            elif act == "active":
                self.varied.add(arg.name)
        self._call_propagates = call_propagates
        self._selector_params = selector_params
        self._forward()
        self.useful = self._backward()
        self.active = self.varied & self.useful

    def is_active(self, value) -> bool:
        return value.kind in ("inst", "arg") and value.name in self.active

    def is_varied(self, value) -> bool:
        return value.kind in ("inst", "arg") and value.name in self.varied

    def is_shadowed(self, value) -> bool:
        return value.kind in ("inst", "arg") and value.name in self.shadowed

    def call_activity(self, ins) -> tuple:
        """The activity of a call's arguments ('dup', 'active', 'const'); a
        shadowed pointer the callee only reads to select, into memory holding
        no varying value, is 'const'."""
        selectors = self._selector_params(ins.callee)
        return tuple("dup" if self.is_shadowed(a) and not (
                         k in selectors and not self.memory_varies(a)) else
                     "active" if self.is_active(a) and is_float_type(a.type) else "const"
                     for k, a in enumerate(ins.args))

    def _forward(self):
        changed = True
        while changed:
            changed = False
            for b in self.fn.blocks:
                for ins in b.instructions:
                    if not ins.name:
                        continue
                    if ins.name not in self.shadowed and self._shadows(ins):
                        self.shadowed.add(ins.name)
                        changed = True
                    if ins.name not in self.varied and self._varies(ins):
                        self.varied.add(ins.name)
                        changed = True

    def _shadows(self, ins) -> bool:
        if not contains_pointer(ins.type):
            return False
        op = ins.opcode
        if op == "alloca":
            return contains_float(ins.source_type) or (
                contains_pointer(ins.source_type) and not self._exception_slot(ins)) or \
                self._holds_shadowed_pointer(ins)
        if op in POINTER_PROPAGATING or op == "insertvalue":
            ops = [v for v, _ in ins.incoming] if op == "phi" else ins.operands
            return any(self._shadowed_operand(o) for o in ops)
        if op in ("load", "extractvalue"):
            return self._shadowed_operand(ins.operands[0])
        if op == "call":
            if ins.callee in ALLOCATORS:
                return True
            if ins.callee in DERIVED_POINTERS or ins.callee in RESIZERS:
                return self._shadowed_operand(ins.operands[0])
        return False

    def _holds_shadowed_pointer(self, alloca) -> bool:
        for user in self.fn.users.get(alloca.name, ()):
            memory, pointer = POINTER_STORING_CALLS.get(user.callee, (None, None))
            if memory is not None and user.args[memory].name == alloca.name and \
                    self._shadowed_operand(user.args[pointer]):
                return True
        return False

    def _shadowed_operand(self, o) -> bool:
        return o.kind in ("inst", "arg") and o.name in self.shadowed

    def _exception_slot(self, alloca) -> bool:
        """Numba's per-call ``excinfo`` slots: passed as a call's second
        argument, loaded, or set to null (and given a lifetime, where a call
        was inlined); they never hold differentiable data."""
        for user in self.fn.users.get(alloca.name, ()):
            if user.opcode == "load" or (user.callee or "").startswith("llvm.lifetime."):
                continue
            if user.opcode == "store" and user.operands[1].name == alloca.name \
                    and user.operands[0].ref == "null":
                continue
            if user.opcode == "call" and len(user.args) > 1 and \
                    user.args[1].name == alloca.name and \
                    all(a.name != alloca.name for i, a in enumerate(user.args) if i != 1):
                continue
            return False
        return True

    def _varies(self, ins) -> bool:
        if not contains_float(ins.type):
            return False
        if ins.opcode == "load":
            return ins.operands[0].name in self.shadowed and \
                self.memory_varies(ins.operands[0])
        if ins.opcode == "call":
            # A float returned directly may also come from memory the call reads.
            return self._call_propagates(ins) and any(
                o.name in self.varied or o.name in self.shadowed
                for o in ins.args if o.kind in ("inst", "arg"))
        ops = [v for v, _ in ins.incoming] if ins.opcode == "phi" else ins.operands
        return any(o.name in self.varied for o in ops if o.kind in ("inst", "arg"))

    # -- what stack memory holds ------------------------------------------------------
    # Memory with a shadow may still hold only values that do not depend on the
    # differentiated inputs (the pair of Gaussian draws Numba's np.random.normal
    # writes into a stack slot): a load from it varies only if a write there
    # may store such a value. Proven only for stack slots holding no pointers
    # (nothing reachable through them) whose every write is seen: stores, and
    # calls; a call writes a varying value only if another of its arguments
    # varies or has a shadow (memory enzpy does not differentiate holds none).
    def memory_varies(self, ptr) -> bool:
        roots = self._pointer_roots(ptr)
        return not roots or any(self._slot_varies(root) for root in roots)

    def _pointer_roots(self, ptr):
        found = self._roots.get(ptr.name)
        if found is None:
            found = self._roots[ptr.name] = frozenset(pointer_roots(self.fn, ptr))
        return found

    def _slot_varies(self, root) -> bool:
        if root in self._varying_slots:
            return True
        if root in self._visiting:
            # (a cycle adds no varying value: whether one reaches the slot is
            # decided along the other paths of the search that started it)
            return False
        writers = self._slot_writers.get(root)
        self._visiting.add(root)
        try:
            varies = writers is None or any(self._writes_varying(w, root) for w in writers)
        finally:
            self._visiting.discard(root)
        if varies:
            self._varying_slots.add(root)
        return varies

    def _writes_varying(self, ins, root) -> bool:
        if ins.opcode == "store":
            return self.is_varied(ins.operands[0])
        # (an indirect call, a C function through ctypes or a cfunc, reaches memory
        # through its arguments as a direct one does)
        selectors = self._selector_params(ins.callee) if ins.callee else ()
        if selectors and all(k in selectors for k, a in enumerate(ins.args)
                             if a.type == "ptr" and root in self._pointer_roots(a)):
            return False        # (the call only reads the slot)
        # (another stack slot passed along, such as the tangent slot of the pair of
        # Gaussian draws in a tangent function, varies only if a write to it may)
        return any(root not in self._pointer_roots(a) and (
            self.is_varied(a) or (self.is_shadowed(a) and self.memory_varies(a)))
            if a.type == "ptr" else self.is_varied(a) for a in ins.args)

    @cached_property
    def _slot_writers(self) -> dict:
        """Root -> the instructions writing it, for the stack slots holding no
        pointers whose address goes nowhere else (not stored, not returned, not
        turned into an integer)."""
        writers = {("local", ins.name): [] for b in self.fn.blocks for ins in b.instructions
                   if ins.opcode == "alloca" and not contains_pointer(ins.source_type)}
        escaped = set()
        for b in self.fn.blocks:
            for ins in b.instructions:
                op = ins.opcode
                if op in POINTER_PROPAGATING or op in ("load", "icmp") or not ins.operands:
                    continue        # (a comparison of the address writes nothing)
                pointers = [o for o in ins.operands if o.type == "ptr" and o.kind == "inst"]
                touched = {r for o in pointers for r in self._pointer_roots(o) if r in writers}
                if not touched:
                    continue
                if op == "store":
                    escaped |= {r for r in self._pointer_roots(ins.operands[0])
                                if ins.operands[0].type == "ptr"} & touched
                    for r in self._pointer_roots(ins.operands[1]) & touched:
                        writers[r].append(ins)
                elif op == "call":
                    if not (ins.callee or "").startswith(("llvm.lifetime", "llvm.assume")):
                        for r in touched:
                            writers[r].append(ins)
                else:               # ptrtoint, ret, insertvalue...: an address seen
                    escaped |= touched
        return {root: w for root, w in writers.items() if root not in escaped}

    def _backward(self) -> set:
        useful = set()
        work = []

        def mark(value):
            if value.kind in ("inst", "arg") and value.name in self.varied \
                    and value.name not in useful:
                useful.add(value.name)
                work.append(value.name)

        for b in self.fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "store" and ins.operands[1].name in self.shadowed:
                    mark(ins.operands[0])
                elif ins.opcode == "call" and any(
                        o.name in self.shadowed for o in ins.args if o.kind in ("inst", "arg")):
                    for o in ins.args:
                        mark(o)
        while work:
            ins = self.fn.defs.get(work.pop())
            if ins is None or ins.opcode == "load":
                continue
            ops = [v for v, _ in ins.incoming] if ins.opcode == "phi" else ins.args
            for o in ops:
                mark(o)
        return useful


_PARALLEL_LOOP = "numba_parallel_for"
# Calls that never write memory through their pointer arguments.
_NON_WRITING_CALLS = ("NRT_incref", "NRT_decref", "NRT_MemInfo_data_fast", "NRT_MemInfo_data",
                      "llvm.lifetime", "llvm.assume", "llvm.smax", "llvm.smin", "llvm.umax",
                      "llvm.umin", "llvm.abs", "llvm.expect")
_FREE = "NRT_Free"
# Pointer arguments a runtime call writes through (all others are only read).
_WRITTEN_ARGS = {"numba_xxdot": (5,), "numba_xxgemv": (9,), "numba_xxgemm": (12,),
                 "llvm.memset": (0,), "llvm.memcpy": (0,),
                 "llvm.memmove": (0,)}


def pointer_roots(fn: Function, value, seen=None) -> set:
    """Where a pointer comes from: ('arg', index), ('local', name) for allocas and
    allocations, or ('unknown', name) for pointers loaded from memory."""
    if value.kind == "arg":
        return {("arg", [a.name for a in fn.args].index(value.name))}
    if value.kind != "inst":
        return set()
    seen = set() if seen is None else seen
    if value.name in seen:
        return set()
    seen.add(value.name)
    ins = fn.defs[value.name]
    if ins.opcode in ("getelementptr", "bitcast", "addrspacecast", "freeze"):
        return pointer_roots(fn, ins.operands[0], seen)
    if ins.opcode in ("phi", "select"):
        ops = [v for v, _ in ins.incoming] if ins.opcode == "phi" else ins.operands[1:]
        return set().union(*(pointer_roots(fn, o, seen) for o in ops))
    if ins.opcode == "alloca" or ins.callee in ALLOCATORS:
        return {("local", ins.name)}
    if ins.callee in DERIVED_POINTERS or ins.callee in RESIZERS:
        return pointer_roots(fn, ins.operands[0], seen)
    return {("unknown", ins.name)}


def pointee_kinds(fn: Function, ptr):
    """What the memory ``ptr`` points into may hold ('int', 'ptr', float type
    names), from the type of the alloca it is derived from and the constant
    offsets of the address computations; for a pointer into a struct, the
    whole field it points into (a callee may read all of it). None when
    unknown."""
    found = region(fn, ptr)
    if found is None:
        return None
    ty, offset = found
    return leaf_kinds(ty if offset is None else _field_at(ty, offset))


def kinds_from(fn: Function, ptr):
    """What the memory from ``ptr`` to the end of its allocation may hold (as
    ``pointee_kinds``): all a callee given ``ptr`` may write. None when unknown."""
    found = region(fn, ptr)
    if found is None:
        return None
    ty, offset = found
    fields = fields_of(ty)
    if offset is None or not fields:
        return leaf_kinds(ty)
    ends = field_offsets(ty)[1:] + [size_and_alignment(ty)[0]]
    return set().union(*(leaf_kinds(f) for f, end in zip(fields, ends) if end > offset))


def region(fn, value):
    """(type of the allocation, byte offset or None if variable) of a pointer."""
    if value.kind != "inst":
        return None
    ins = fn.defs[value.name]
    if ins.opcode == "alloca":
        return ins.source_type, 0
    if ins.opcode != "getelementptr":
        return None
    base = region(fn, ins.operands[0])
    if base is None:
        return None
    delta = _gep_offset(ins.source_type, ins.operands[1:])
    ty, offset = base
    return ty, None if offset is None or delta is None else offset + delta


def _gep_offset(source_type, indices):
    offset, ty = 0, source_type
    for k, index in enumerate(indices):
        if index.kind != "const":
            return None
        n = int(index.ref)
        if k == 0:
            offset += n * size_and_alignment(ty)[0]
        else:
            offset += field_offsets(ty)[n]
            ty = fields_of(ty)[n]
    return offset


def _field_at(ty, offset):
    fields = fields_of(ty)
    if not fields:
        return ty
    starts = field_offsets(ty)
    inside = [f for f, start in zip(fields, starts) if start <= offset]
    return inside[-1] if inside else ty


_WALKING = object()      # (a slot whose contents are being found)
# Instructions that use a pointer without letting its address escape.
_ADDRESS_ONLY = ("load", "getelementptr", "bitcast", "addrspacecast", "freeze", "phi", "select",
                 "icmp", "alloca")


def _pointers_in(fn, value) -> list:
    """The pointers a stored value holds (itself, or the fields of an aggregate built here)."""
    if value.type == "ptr":
        return [value]
    if value.kind == "inst" and contains_pointer(value.type) and \
            fn.defs[value.name].opcode == "insertvalue":
        return [p for o in fn.defs[value.name].operands for p in _pointers_in(fn, o)]
    return []


def _as_returned(fn, held):
    """What ``fn``'s callers see of the pointers it stores through parameter 0:
    its allocations are memory made during the call ('fresh'); a stack slot
    of its own would dangle, so it makes the result unknown (None)."""
    if held is None:
        return None
    returned = set()
    for s in held:
        if s != "fresh" and s[0] == "local":
            if fn.defs[s[1]].opcode == "alloca":
                return None
            s = "fresh"
        returned.add(s)
    return returned


class ReadOnlyMemory:
    """Which memory no code writes while a derivative runs.

    A load from such memory is re-executed by the reverse sweep instead of
    being recorded on the tape. Writes are tracked through the call graph
    (a callee writing through its parameter writes the caller's root); a write
    through a pointer of unknown origin makes no memory read-only.
    """

    def __init__(self, module):
        self.module = module
        self.roots = {}
        self.written = {name: set() for name in module.functions}
        # parameters a function may free: NRT_Free frees raw memory only (from
        # NRT_Allocate), never an argument's array data, so they count as written
        # where a caller's allocation reaches them. (Numba's copy of an array
        # assigned from one it may overlap, ``a[1:] = b``, frees a pointer that is
        # either the copy or b's data: b is not written.)
        self.freed_params = {name: set() for name in module.functions}
        self.unknown_write = False
        self.never_run = self._never_run()
        self._slot_uses = {}          # function name -> {root: [(instruction, how)]}
        self._held = {}               # (function, roots) -> what that memory may hold
        self._cycle = set()           # slots being walked that a walk met again
        self.returned = self._returned()
        self._propagate_writes()
        self.readonly = {name: {r for r in self._all_roots(fn) if r not in self.written[name]}
                         for name, fn in module.functions.items()}
        self._propagate_call_sites()

    def trust_only(self, symbol, params):
        """Of ``symbol``'s parameters from index 2 on, only those in ``params``
        may be read-only (and so re-read by the reverse sweep), down the call
        graph too. The entry checks per call that no written argument shares
        memory with a re-read one; it can do so only for the arrays passed as
        arguments themselves, not for those inside a tuple, list or object."""
        self.readonly[symbol] = {r for r in self.readonly[symbol]
                                 if r[0] != "arg" or r[1] < 2 or r[1] in params}
        self._propagate_call_sites()

    def _never_run(self) -> set:
        """Functions nothing calls and whose address is only stored to memory,
        in a module without indirect calls: they cannot run during the call
        (an address handed to a call, e.g. a destructor given to Numba's
        runtime, may be called there), so their writes are none of its writes.
        These are Numba's ``__excinfo_unwrap_args`` functions, which rebuild an
        exception's arguments as Python objects once the compiled code has
        returned: their address is stored into the exception's record."""
        called, stored, other = set(), set(), set()
        for fn in self.module.functions.values():
            for b in fn.blocks:
                for ins in b.instructions:
                    if ins.opcode in ("call", "invoke"):
                        if not ins.callee:
                            return set()
                        called.add(ins.callee)
                        other.update(o.name for o in ins.args if o.kind == "global")
                    elif ins.opcode == "store" and ins.operands[0].kind == "global":
                        stored.add(ins.operands[0].name)
                    else:
                        other.update(o.name for o in ins.operands if o.kind == "global")
        return {name for name in self.module.functions
                if name in stored and name not in called and name not in other}

    def _running(self):
        """(name, function) of the functions that may run during the call."""
        return ((name, fn) for name, fn in self.module.functions.items()
                if name not in self.never_run)

    def _roots(self, fn, value):
        key = (fn.name, value.ref)
        if key not in self.roots:
            self.roots[key] = pointer_roots(fn, value)
        return self.roots[key]

    def _all_roots(self, fn):
        found = {("arg", i) for i, a in enumerate(fn.args) if a.type == "ptr"}
        for b in fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "alloca" or ins.callee in ALLOCATORS:
                    found.add(("local", ins.name))
        return found

    def _writes(self, fn):
        """(pointer operand, whether it is freed) for every write in ``fn``,
        callees' params included."""
        for b in fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "store":
                    yield ins.operands[1], False
                elif ins.opcode == "call":
                    callee = ins.callee
                    if callee.startswith(_PARALLEL_LOOP):
                        # the loop body writes through the pointers it is given
                        self.unknown_write = True
                        continue
                    if callee in self.module.functions:
                        # (copies: a recursive call's sets grow while they are read)
                        for kind, j in list(self.written[callee]):
                            if kind == "arg" and j < len(ins.args):
                                yield ins.args[j], False
                        for j in list(self.freed_params[callee]):
                            if j < len(ins.args):
                                yield ins.args[j], True
                        continue
                    if callee == _FREE:
                        yield ins.args[0], True
                        continue
                    if callee.startswith(_NON_WRITING_CALLS):
                        continue
                    written = next((idx for prefix, idx in _WRITTEN_ARGS.items()
                                    if callee.startswith(prefix)), None)
                    for k, a in enumerate(ins.args):
                        if a.type == "ptr" and (written is None or k in written):
                            yield a, False

    # -- pointers held in memory ---------------------------------------------------
    # Numba returns an array by storing its fields into a stack slot the caller
    # passes (parameter 0); the caller loads the data pointer back from that slot
    # and may write through it. Which memory that pointer reaches decides which
    # of the caller's roots such a write writes: memory allocated during the
    # callee's call ('fresh': no root of the caller reaches it, and nothing read
    # through a loaded pointer is ever read-only), or memory of the arguments it
    # was derived from (a view, or ``np.dot(a, b, out)`` returning ``out``).
    def _returned(self) -> dict:
        """name -> what a function stores into memory reached from parameter 0:
        a set of 'fresh' and ('arg', k) (pointers derived from parameter k), or
        None when unknown. The least fixed point, callees before callers."""
        self.returned = {name: set() for name in self.module.functions}
        order = list(nx.dfs_postorder_nodes(self._call_graph()))
        changed = True
        while changed:
            changed = False
            self._held.clear()         # (computed from the previous round's returns)
            for name in order:
                fn = self.module.functions[name]
                returned = _as_returned(fn, self._held_in(fn, {("arg", 0)}))
                if returned != self.returned[name] and self.returned[name] is not None:
                    self.returned[name] = returned
                    changed = True
        return self.returned

    def _call_graph(self):
        graph = nx.DiGraph()
        for name, fn in self.module.functions.items():
            graph.add_node(name)
            for b in fn.blocks:
                for ins in b.instructions:
                    if ins.opcode == "call" and ins.callee in self.module.functions:
                        graph.add_edge(name, ins.callee)
        return graph

    def _uses(self, fn) -> dict:
        """root -> how ``fn`` touches the memory of that root: ``('store', ins)``
        (a store into it), ``('call', ins, k)`` (passed as argument k of a call
        that may write it), ``('escape', ins)`` (its address stored, or used other
        than by loads, stores, calls and address arithmetic)."""
        uses = self._slot_uses.get(fn.name)
        if uses is not None:
            return uses
        uses = self._slot_uses[fn.name] = {}

        def add(value, use):
            for root in self._roots(fn, value):
                uses.setdefault(root, []).append(use)
        for b in fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "store":
                    add(ins.operands[1], ("store", ins))
                    for p in _pointers_in(fn, ins.operands[0]):
                        add(p, ("escape", ins))
                elif ins.opcode == "call":
                    if (ins.callee or "").startswith(_NON_WRITING_CALLS):
                        continue
                    written = None if ins.callee in self.module.functions else next(
                        (idx for prefix, idx in _WRITTEN_ARGS.items()
                         if (ins.callee or "").startswith(prefix)), None)
                    for k, a in enumerate(ins.args):
                        # (a call writing only integers there stores no pointer)
                        if a.type == "ptr" and (written is None or k in written) and \
                                "ptr" in (kinds_from(fn, a) or {"ptr"}):
                            add(a, ("call", ins, k))
                elif ins.opcode not in _ADDRESS_ONLY:
                    for o in ins.operands:
                        if o.type == "ptr":
                            add(o, ("escape", ins))
        return uses

    def _held_in(self, fn, slot):
        """What the memory of roots ``slot`` of ``fn`` may hold as pointers: a
        set of 'fresh', ('arg', k) and ('local', name) (allocations and stack
        slots of ``fn``), or None when unknown. Memoized per round, except what
        a cycle of slots (assumed to hold nothing more while it is walked) made."""
        key = (fn.name, frozenset(slot))
        if key in self._held:
            got = self._held[key]
            if got is _WALKING:
                self._cycle.add(key)
                return set()
            return got
        self._held[key] = _WALKING
        outer, self._cycle = self._cycle, set()
        held = set()
        uses = self._uses(fn)
        for use in (use for root in slot for use in uses.get(root, ())):
            if use[0] == "store":
                got = self._held_by(fn, use[1].operands[0])
            elif use[0] == "call" and use[2] == 0 and use[1].callee in self.module.functions:
                got = self._returned_by(fn, use[1])
            else:
                got = None
            if got is None:
                held = None
                break
            held |= got
        self._cycle.discard(key)
        if self._cycle:
            del self._held[key]
        else:
            self._held[key] = held
        self._cycle |= outer
        return held

    def _returned_by(self, fn, call):
        """What call ``call`` in ``fn`` stores into memory reached from its argument 0."""
        returned = self.returned[call.callee]
        if returned is None:
            return None
        held = set()
        for s in returned:
            got = {"fresh"} if s == "fresh" else self._held_by(fn, call.args[s[1]])
            if got is None:
                return None
            held |= got
        return held

    def _held_by(self, fn, value, phis=None):
        """The pointers in ``value`` (as ``_held_in`` describes them)."""
        if not contains_pointer(value.type):
            return set()
        if value.kind == "const":
            return set() if value.ref in ("null", "zeroinitializer", "undef", "poison") else None
        if value.kind == "arg":
            return {("arg", [a.name for a in fn.args].index(value.name))}
        if value.kind != "inst":
            return None
        ins = fn.defs[value.name]
        if ins.opcode in ("phi", "select", "insertvalue"):
            phis = set() if phis is None else phis
            if value.name in phis:
                return set()
            phis.add(value.name)
            ops = [o for o, _ in ins.incoming] if ins.opcode == "phi" else \
                ins.operands[1:] if ins.opcode == "select" else ins.operands
            held = set()
            for o in ops:
                got = self._held_by(fn, o, phis)
                if got is None:
                    return None
                held |= got
            return held
        if ins.opcode in ("getelementptr", "bitcast", "addrspacecast", "freeze") or \
                ins.callee in DERIVED_POINTERS:
            return self._held_by(fn, ins.operands[0], phis)
        if ins.opcode == "load":
            return self.loaded(fn, ins)
        if ins.opcode == "alloca":
            return {("local", ins.name)}
        if ins.callee in ALLOCATORS:
            return {("local", ins.name)}
        return None

    def loaded(self, fn, load):
        """What the pointer ``load`` reads may point to (``_held_in``), when
        it reads a stack slot of ``fn``; None otherwise."""
        slot = self._roots(fn, load.operands[0])
        if not slot or any(kind != "local" or fn.defs[name].opcode != "alloca"
                           for kind, name in slot):
            return None
        return self._held_in(fn, slot)

    def _loaded_roots(self, fn, name):
        """The roots of ``fn`` a pointer loaded by instruction ``name`` may
        point into, 'fresh' for memory a callee allocated; None when unknown."""
        load = fn.defs[name]
        return self.loaded(fn, load) if load.opcode == "load" else None

    def _propagate_writes(self):
        changed = True
        while changed:
            changed = False
            for name, fn in self._running():
                for ptr, freed in self._writes(fn):
                    for root in self._roots(fn, ptr):
                        if freed and root[0] == "arg":
                            # freed only if the caller passed raw memory it allocated
                            if root[1] not in self.freed_params[name]:
                                self.freed_params[name].add(root[1])
                                changed = True
                            continue
                        targets = {root}
                        if root[0] == "unknown":
                            targets = self._loaded_roots(fn, root[1])
                            if targets is None:
                                self.unknown_write = True
                                continue
                        for target in targets:
                            if target != "fresh" and target not in self.written[name]:
                                self.written[name].add(target)
                                changed = True

    def _propagate_call_sites(self):
        """A callee's parameter is read-only only if every caller passes read-only memory."""
        changed = True
        while changed:
            changed = False
            for name, fn in self._running():
                for b in fn.blocks:
                    for ins in b.instructions:
                        if ins.opcode != "call" or ins.callee not in self.module.functions:
                            continue
                        callee_ro = self.readonly[ins.callee]
                        for k, a in enumerate(ins.args):
                            if ("arg", k) in callee_ro and not self.is_readonly(fn, a):
                                callee_ro.discard(("arg", k))
                                changed = True

    def is_readonly(self, fn, ptr) -> bool:
        if self.unknown_write:
            return False
        roots = self._roots(fn, ptr)
        if not roots:
            return False
        readonly = self.readonly[fn.name]
        for root in roots:
            if root[0] != "unknown":
                if root not in readonly:
                    return False
                continue
            # a pointer loaded from a stack slot (a view a callee returned): only
            # into arguments' memory, which outlives the call for the reverse sweep
            targets = self._loaded_roots(fn, root[1])
            if not targets or any(t == "fresh" or t[0] != "arg" or t not in readonly
                                  for t in targets):
                return False
        return True


def split_loop_exits(fn: Function):
    """Give every loop exit edge a block of its own (LLVM's "dedicated exits").

    The block runs once per exit, so the loop's trip count can be recorded
    there even when the exit target is shared with other paths (an outer loop's
    header, a common return). Done once per function, before any derivative.
    """
    if getattr(fn, "_exits_split", False):
        return
    fn._exits_split = True
    cfg = ControlFlow(fn)
    edges = set()             # an edge leaving nested loops is split once
    for h, latches in _back_edges(cfg).items():
        body = _loop_body(cfg, h, latches)
        for x in body:
            for y in fn.block_map[x].successors:
                if y not in body and not cfg.dominates(h, y):
                    edges.add((x, y))
    new_blocks = [_split_edge(fn, x, y) for x, y in sorted(edges)]
    if new_blocks:
        fn.blocks.extend(new_blocks)
        fn.__post_init__()
        fn.__dict__.pop("users", None)


# Instructions whose result depends on more than their operands (or that a
# loop may run with other operands each time).
_NOT_INVARIANT = ("phi", "load", "call", "alloca", "store", "atomicrmw", "cmpxchg", "freeze",
                  "landingpad", "va_arg", "invoke")


def untie_carried_selects(fn: Function):
    """Untie a loop-carried value that a loop-invariant condition keeps.

    Numba's broadcasting loops (every array expression) keep one index per
    operand and dimension, updated only where that dimension is longer than
    one: ``p = phi [init, outside], [s, latch]`` with ``s = select c, x, p``.
    With ``c`` the same in every iteration, ``p`` stays ``init`` whenever ``c``
    is false, so ``s`` is ``select c, x, init``: rewritten so, the reverse sweep
    recomputes ``s`` from the loop's index instead of recording ``p`` (and
    the address of every element read through it) in every iteration. Done
    once per function, before any derivative.
    """
    if getattr(fn, "_selects_untied", False):
        return
    fn._selects_untied = True
    cfg = ControlFlow(fn)
    changed = False
    for header, latches in _back_edges(cfg).items():
        body = _loop_body(cfg, header, latches)
        invariant = _invariance(fn, body)
        for phi in fn.block_map[header].instructions:
            if phi.opcode != "phi":
                break
            outside = {v.ref: v for v, b in phi.incoming if b not in body}
            inside = {v.ref: v for v, b in phi.incoming if b in body}
            if len(outside) != 1 or len(inside) != 1:
                continue
            (init,), (carried,) = outside.values(), inside.values()
            s = fn.defs.get(carried.name) if carried.kind == "inst" else None
            if s is None or s.opcode != "select" or not s.type.startswith("i") or \
                    not invariant(s.operands[0]) or not invariant(init):
                continue
            c, a, b = s.operands
            if b.ref == phi.value.ref and a.ref != phi.value.ref:
                b = init
            elif a.ref == phi.value.ref and b.ref != phi.value.ref:
                a = init
            else:
                continue
            s.operands = [c, a, b]
            s.text = f"{local(s.name)} = select i1 {c.ref}, {s.type} {a.ref}, {s.type} {b.ref}"
            changed = True
    if changed:
        fn.__dict__.pop("users", None)


# The side of zero a select keeps its identity operand off: ``select c, k, x`` keeps x
# where c is false, ``select c, x, k`` where c is true (an unordered test is true at nan).
_EXCLUDED_SIDE = {("olt", 2): "<", ("ogt", 2): ">", ("uge", 1): "<", ("ule", 1): ">"}


def pin_sign_identities(fn: Function):
    """Give ``np.sign``'s identity branch a zero derivative.

    Numba's ``np.sign(x)`` is ``select x > 0, 1, (select x < 0, -1, x)``: ``x``
    itself where it is 0 or nan, so differentiated as written its derivative is
    1 there (a gradient of 1 for every weight that starts at 0). The inner
    select's ``x`` becomes ``x * 0.0``, the same value (+-0, nan) wherever the
    outer select keeps it, with derivative 0. Done once per function, before
    any derivative.
    """
    if getattr(fn, "_sign_identities_pinned", False):
        return
    fn._sign_identities_pinned = True
    users = fn.users
    changed = False
    for b in fn.blocks:
        out = []
        for ins in b.instructions:
            side = _identity_off_zero_side(fn, ins)
            if side is not None:
                uses = users.get(ins.name, [])
                outer = uses[0] if len(uses) == 1 else None
                x = ins.operands[side[1]]
                if outer is not None and _identity_off_zero_side(fn, outer, ins.value) == \
                        ({"<": ">", ">": "<"}[side[0]], None) and \
                        outer.operands[0].ref != ins.operands[0].ref and \
                        _compared(fn, outer.operands[0]) == x.ref:
                    name = f"~sign0.{ins.name}"
                    out.append(Instruction(name, "fmul", x.type, [x, Value("0.0", x.type, "const")],
                                           f"{local(name)} = fmul {x.type} {x.ref}, 0.0", b))
                    zeroed = Value(local(name), x.type, "inst", name)
                    ins.operands[side[1]] = zeroed
                    c, t, f = ins.operands
                    ins.text = (f"{local(ins.name)} = select i1 {c.ref}, {ins.type} {t.ref}, "
                                f"{ins.type} {f.ref}")
                    changed = True
            out.append(ins)
        b.instructions = out
    if changed:
        fn.__post_init__()
        fn.__dict__.pop("users", None)


def _compared(fn: Function, condition):
    """The ref of ``x`` in ``condition = fcmp pred x, 0.0``, else None."""
    test = fn.defs.get(condition.name) if condition.kind == "inst" else None
    if test is None or test.opcode != "fcmp" or test.operands[1].kind != "const":
        return None
    try:
        zero = float(test.operands[1].ref) == 0.0
    except ValueError:
        return None
    return test.operands[0].ref if zero else None


def _identity_off_zero_side(fn: Function, ins, identity=None):
    """For ``select (fcmp pred x, 0.0), ...`` keeping ``x`` (or ``identity``) on
    one side of zero only and a constant on the other: (the side excluded,
    the operand position of ``x``; None for an ``identity`` given)."""
    if ins.opcode != "select" or ins.type not in ("double", "float"):
        return None
    x = _compared(fn, ins.operands[0])
    if x is None:
        return None
    predicate = fn.defs[ins.operands[0].name].predicate
    for position in (1, 2):
        kept, other = ins.operands[position], ins.operands[3 - position]
        wanted = x if identity is None else identity.ref
        if kept.ref == wanted and other.kind == "const":
            side = _EXCLUDED_SIDE.get((predicate, position))
            if side is not None:
                return side, (position if identity is None else None)
    return None


def split_mixed_stores(fn: Function):
    """Store an aggregate holding both floats and pointers field by field.

    LLVM keeps some such stores whole (a tuple of a float32 array and a float32,
    returned through Numba's return slot, has padding that stops it splitting
    the store): its pointers need mirroring on the shadow in the forward sweep
    and its floats an adjoint in the reverse sweep, which enzpy does per store.
    Each field gets an ``extractvalue``, a ``getelementptr`` and a store of its
    own (split again while mixed). Done once per function, before any derivative.
    """
    if getattr(fn, "_mixed_stores_split", False):
        return
    fn._mixed_stores_split = True
    changed = False
    for b in fn.blocks:
        out = []
        for ins in b.instructions:
            if ins.opcode == "store" and _mixed(ins.operands[0]):
                out += _split_store(ins.operands[0], ins.operands[1],
                                    f"~split.{b.name}.{len(out)}", b)
                changed = True
            else:
                out.append(ins)
        b.instructions = out
    if changed:
        fn.__post_init__()
        fn.__dict__.pop("users", None)


def _mixed(value) -> bool:
    return value.kind != "const" and contains_float(value.type) and \
        contains_pointer(value.type) and bool(fields_of(value.type))


def _split_store(value, ptr, stem, block) -> list:
    made = []
    for i, ty in enumerate(fields_of(value.type)):
        part, address = f"{stem}.v{i}", f"{stem}.p{i}"
        made.append(Instruction(part, "extractvalue", ty, [value],
                                f"{local(part)} = extractvalue {value.type} {value.ref}, {i}",
                                block, indices=(i,)))
        index = [Value("0", "i32", "const"), Value(str(i), "i32", "const")]
        made.append(Instruction(address, "getelementptr", "ptr", [ptr] + index,
                                f"{local(address)} = getelementptr inbounds {value.type}, "
                                f"ptr {ptr.ref}, i32 0, i32 {i}", block,
                                source_type=value.type))
        field = Value(local(part), ty, "inst", part)
        address_value = Value(local(address), "ptr", "inst", address)
        if _mixed(field):
            made += _split_store(field, address_value, f"{stem}.{i}", block)
        else:
            made.append(Instruction("", "store", "void", [field, address_value],
                                    f"store {ty} {field.ref}, ptr {address_value.ref}", block))
    return made


def _invariance(fn, body):
    """A test that a value is the same in every iteration of the loop ``body``."""
    known = {}

    def invariant(v) -> bool:
        if v.kind != "inst":
            return True
        ins = fn.defs.get(v.name)
        if ins is None or ins.block.name not in body:
            return True
        if v.name not in known:
            known[v.name] = False       # (a cycle goes through a phi: not invariant)
            known[v.name] = ins.opcode not in _NOT_INVARIANT and \
                all(invariant(o) for o in ins.operands)
        return known[v.name]

    return invariant


def _back_edges(cfg) -> dict:
    back = {}
    for u, h in cfg.graph.edges:
        if cfg.dominates(h, u):
            back.setdefault(h, []).append(u)
    return back


def _loop_body(cfg, header, latches) -> set:
    body, stack = {header}, list(latches)
    while stack:
        n = stack.pop()
        if n not in body:
            body.add(n)
            stack.extend(cfg.graph.predecessors(n))
    return body


def _split_edge(fn, x, y):
    from .ir import Block, Instruction, local
    name = f"~exit.{x}.{y}"
    term = fn.block_map[x].terminator
    term.text = re.sub(r"label %(?:\"" + re.escape(y) + r"\"|" + re.escape(y) + r")(?=[\s,\]]|$)",
                       "label " + local(name), term.text)
    term.targets = [name if t == y else t for t in term.targets]
    term.cases = [(c, name if t == y else t) for c, t in term.cases]
    for ins in fn.block_map[y].instructions:
        if ins.opcode != "phi":
            break
        kept, moved = [], None
        for value, blk in ins.incoming:
            if blk == x:
                moved = value
            else:
                kept.append((value, blk))
        ins.set_incoming(kept + [(moved, name)])
    br = Instruction("", "br", "void", [], f"br label {local(y)}", targets=[y])
    return Block(name, [br])
