"""Record or recompute: which primal values the tape keeps, by a minimum cut.

The reverse of a block needs some primal values (its *demands*). The forward sweep
can record a value on the tape, or, when its instruction is cheap and pure, the
reverse sweep can recompute it from its operands, which are in turn recorded or
recomputed. Recomputing whatever can be recomputed records more than needed when a
value's operands are not needed themselves: ``x = a * b`` (``a``, ``b`` loaded from
memory that is written later) costs two records recomputed and one recorded.

The cheapest choice is a minimum s-t cut of the block's dependence graph, as in
Enzyme's cache analysis and JAX's rematerialization: each value is an edge of
capacity the cost of recording it; values that can only be recorded hang from the
source, operand edges lead to the values recomputed from them, demands lead to the
sink. The values whose edges are cut are the ones recorded; every demand is then
recorded or recomputed from recorded (or free: constants, arguments, loop counters)
values.
"""
from __future__ import annotations

import os

import networkx as nx

from .tape import slot_bytes

LOOP_WEIGHT = 8          # a record in a loop's block is written once per iteration
# Recording a value that could be recomputed costs a little more than its bytes: a
# tie between recording it and recording its operands goes to recomputing.
_BYTE_SCALE = 1000


def greedy() -> bool:
    """``ENZPY_REMAT=greedy``: recompute whatever can be recomputed (the rule before
    the cut), for scripts/bench_tape.py's comparison."""
    return os.environ.get("ENZPY_REMAT") == "greedy"


class DependenceGraph:
    """The primal values one block's reverse uses, and what each is recomputed from."""

    def __init__(self, in_loop: bool):
        self.in_loop = in_loop
        self.cost = {}            # key -> cost of recording it
        self.recomputable = set()
        self.operands = {}        # key -> keys it is recomputed from
        self.demands = set()

    def visit(self, key, ty: str, pushed: bool, recomputable: bool, parent):
        """``key`` is fetched (by ``parent``'s recomputation, or by the rules when
        ``parent`` is None); ``pushed``: recorded in the block's record (else in the
        call's frame, once per call)."""
        if key not in self.cost:
            weight = LOOP_WEIGHT if pushed and self.in_loop else 1
            self.cost[key] = slot_bytes(ty) * weight * _BYTE_SCALE
        if recomputable and key not in self.recomputable:
            self.recomputable.add(key)
            self.cost[key] += 1
        if parent is None:
            self.demands.add(key)
        else:
            self.operands.setdefault(parent, set()).add(key)

    def recorded(self) -> frozenset:
        """The keys to record: a minimum-cost set through which every demand is recorded
        or recomputed."""
        forced = set(self.cost) - self.recomputable
        if not forced:
            return frozenset()
        if not self.recomputable or greedy():
            return frozenset(forced)
        graph = nx.DiGraph()
        for key, cost in self.cost.items():
            graph.add_edge(("in", key), ("out", key), capacity=cost)
            if key in forced:
                graph.add_edge("source", ("in", key))      # no capacity: unbounded
        for key, operands in self.operands.items():
            for operand in operands:
                graph.add_edge(("out", operand), ("in", key))
        for key in self.demands:
            graph.add_edge(("out", key), "sink")
        _, (reached, _) = nx.minimum_cut(graph, "source", "sink")
        return frozenset(key for key in self.cost
                         if ("in", key) in reached and ("out", key) not in reached)
