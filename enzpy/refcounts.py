"""Reference counts a derivative can drop: Numba's increfs and decrefs of a
function's own (borrowed) arrays.

Numba passes arrays to a function borrowed: the caller holds a reference for
the whole call, and the callee increfs each array it binds to a variable and
decrefs it when the variable dies (Numba's reference-count pruning removes only
the pairs it can match within a block or a diamond). A recursive evaluator
passing a tree of arrays down each call therefore spends most of its time in
atomic increments and decrements of counts that can never reach zero there.

For a pointer parameter ``p`` whose every use is one of

- ``NRT_incref(p)`` / ``NRT_decref(p)``,
- an argument of a call of a function of the module (Numba functions borrow
  their arguments too and never consume them), or of a call that only reads
  the meminfo (``NRT_MemInfo_data_fast``),

and along whose every path from the entry the function's own increfs of ``p``
never fall below its decrefs, the count of ``p``'s object never drops below the
caller's reference during the call, and no reference to ``p`` can be handed on
(it is never stored, returned or merged with another pointer). All of the
function's increfs and decrefs of ``p`` can then go: what they add up to is
zero, or a reference leaked on an exception path (Numba's pruning leaks on
raising paths on purpose). The derivative's functions are written from the
model without them, and so are the derivative module's copies of the primal
functions (which the derivative calls where nothing is differentiated); Numba's
own compiled functions are left as they are.
"""
from __future__ import annotations

from .ir import Function, Module
from .irtext import defined_name

REFCOUNTS = ("NRT_incref", "NRT_decref")
# Runtime calls that only read a meminfo.
_READS_MEMINFO = ("NRT_MemInfo_data_fast", "NRT_MemInfo_data")


def drop_borrowed_refcounts(model: Module) -> int:
    """Remove, in place, the increfs and decrefs of borrowed parameters from
    every function of ``model`` (see the module docstring); returns how many."""
    dropped, count = {}, 0              # function -> the text of the calls dropped
    for fn in model.functions.values():
        stands_for = _borrowed_params(fn, model.functions)
        if not stands_for:
            continue
        texts = dropped[fn.name] = set()
        for b in fn.blocks:
            kept = []
            for ins in b.instructions:
                if _refcount_of(ins, stands_for):
                    texts.add(ins.text)
                else:
                    kept.append(ins)
            count += len(b.instructions) - len(kept)
            b.instructions = kept
        fn.__dict__.pop("users", None)
    if dropped:
        model.text = _without(model.text, dropped)
    return count


def _without(text: str, dropped: dict) -> str:
    """``text`` without the lines of ``dropped`` in their functions (every
    incref and decref of a dropped parameter: each such line goes)."""
    lines, current = [], None
    for line in text.splitlines():
        if line.startswith("define"):
            current = dropped.get(defined_name(line))
        elif line == "}":
            current = None
        elif current is not None and line.strip() in current:
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def _refcount_of(ins, stands_for) -> str | None:
    """The parameter ``ins`` increfs or decrefs, if it is one of ``stands_for``'s."""
    if ins.opcode == "call" and ins.callee in REFCOUNTS:
        target = ins.args[0]
        if target.kind in ("arg", "inst"):
            return stands_for.get(target.name)
    return None


def _borrowed_params(fn: Function, defined) -> dict:
    """The values whose reference counting ``fn`` can drop, each mapped to its
    parameter: the pointer parameters that qualify, and the phis choosing
    between one of them and null that are only decref'd, in their own block
    (Numba's decref of a variable assigned on some paths only)."""
    candidates = {a.name for a in fn.args if a.type == "ptr"}
    counted, phis = set(), {}
    for b in fn.blocks:
        for ins in b.instructions:
            for o in ins.operands:
                if o.kind != "arg" or o.name not in candidates:
                    continue
                if ins.opcode == "call" and ins.callee in REFCOUNTS:
                    counted.add(o.name)
                elif ins.opcode == "phi" and _only_decrefd_here(fn, ins, o.name):
                    phis[ins.name] = o.name
                elif not (ins.opcode == "call" and o is not ins.operands[-1] and
                          (ins.callee in defined or ins.callee in _READS_MEMINFO)):
                    candidates.discard(o.name)
    candidates &= counted
    if not candidates:
        return {}
    stands_for = {p: p for p in candidates}
    stands_for.update((phi, p) for phi, p in phis.items() if p in candidates)
    alive = _never_below_zero(fn, candidates, stands_for)
    return {v: p for v, p in stands_for.items() if p in alive}


def _only_decrefd_here(fn, phi, param) -> bool:
    return all(v.name == param and v.kind == "arg" or v.ref == "null"
               for v, _ in phi.incoming) and \
        all(u.opcode == "call" and u.callee == "NRT_decref" and u.block is phi.block
            for u in fn.users.get(phi.name, ()))


def _never_below_zero(fn: Function, params: set, stands_for: dict) -> set:
    """Those of ``params`` whose count (the function's increfs minus its
    decrefs) is never negative on any path from the entry: a forward data flow
    of the smallest count on entry to each block. A decref of a phi counts on
    the edges where the phi is the parameter, as if at the start of the block
    (earlier than it is: never a count higher than the true one)."""
    summaries, on_edges = {}, {}        # block -> {param: (net change, lowest prefix)}
    for b in fn.blocks:
        summary = {}
        for ins in b.instructions:
            p = _refcount_of(ins, stands_for)
            if p is None:
                continue
            target = ins.args[0]
            if target.kind == "inst":   # a phi's decref: on the edges bringing p
                phi = fn.defs[target.name]
                for v, pred in phi.incoming:
                    if v.kind == "arg":
                        edge = on_edges.setdefault((pred, b.name), {})
                        edge[p] = edge.get(p, 0) + 1
                continue
            net, low = summary.get(p, (0, 0))
            net += 1 if ins.callee == "NRT_incref" else -1
            summary[p] = (net, min(low, net))
        summaries[b.name] = summary
    alive = set(params)
    lowest = {fn.entry.name: dict.fromkeys(params, 0)}
    work = [fn.entry.name]
    while work and alive:
        name = work.pop()
        entry = lowest[name]
        out = {}
        for p in list(alive):
            net, low = summaries[name].get(p, (0, 0))
            if entry[p] + low < 0:
                alive.discard(p)
            out[p] = entry[p] + net
        for succ in fn.block_map[name].successors:
            taken = on_edges.get((name, succ), {})
            arriving = {p: out[p] - taken.get(p, 0) for p in alive}
            alive -= {p for p, n in arriving.items() if n < 0}
            known = lowest.get(succ)
            if known is None:
                lowest[succ] = arriving
                work.append(succ)
            elif any(arriving[p] < known[p] for p in alive):
                for p in alive:
                    known[p] = min(known[p], arriving[p])
                work.append(succ)
    return alive
