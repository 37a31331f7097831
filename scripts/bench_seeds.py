"""Seed benchmark suite: the DynamicExpressions.jl evaluator and the JAX scan MWE.

Measures, for the two seed workloads of ``examples/`` (``dynamic_expressions.py``
and ``scan.py``):

a. build time of enzpy's derivative, Numba's own compile of the primal reported
   apart, with the primal IR size and enzpy's per-stage split: the tree evaluator
   for operator sets 2+2, 4+4, 8+8 and 16+16 at fuse levels 1 and 2, and the scan
   at T = 80, 10^3, 10^5 (T is a ``Const`` argument: one build serves every T);
b. gradient runtime / primal runtime: trees of 10, 30 and 100 nodes at n = 10^2
   and 10^4 data points, and the scan at T = 10^5 (PyTorch eager at T = 10^4);
c. the same workloads in a hand-written Numba adjoint (written below; trees over
   the MWE's 4+4 operators; it reuses its workspaces across calls), JAX ``jit(grad)`` (a per-tree traced evaluator,
   which recompiles for every tree, and a tree-independent interpreter:
   ``lax.switch`` over the operators inside a ``lax.fori_loop`` over the tree's
   postfix program; the scan as ``lax.scan``) and PyTorch eager. JAX and PyTorch
   are optional: comparisons whose package is missing are skipped and said so;
d. the goals, printed next to the numbers as met / MISSED.

Every configuration runs in its own subprocess: each evaluator is a fresh Numba
compile, and a configuration whose Numba compile or enzpy build exceeds
``--budget`` seconds is stopped and recorded as "skipped: over budget", and so
are the larger ones after it. All runtime ratios are measured within one
process, the functions timed in alternation (``_timing.interleaved``).

    python scripts/bench_seeds.py --budget 120 --out docs     # full, ~15-25 min
    python scripts/bench_seeds.py --quick --out /tmp/seeds    # subset, ~3-5 min

Writes ``<out>/seeds.csv``, ``<out>/seeds.md`` and, with matplotlib,
``<out>/build_time.png`` and ``<out>/runtime.png``.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
for _p in (HERE, EXAMPLES):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402

# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------
FULL_BUILD_CONFIGS = [(2, 1), (4, 1), (8, 1), (16, 1), (2, 2), (4, 2), (8, 2), (16, 2)]
QUICK_BUILD_CONFIGS = [(2, 1), (4, 1), (2, 2)]
FULL_RUNTIME_CONFIGS = {(4, 1), (4, 2)}   # the MWE's operators, both fuse levels
QUICK_RUNTIME_CONFIGS = {(2, 1)}
TREE_SIZES = (10, 30, 100)
ROW_COUNTS = (100, 10_000)
N_FEATURES = 3
SCAN_TS = (80, 1_000, 100_000)
SCAN_RUNTIME_T = 100_000
#: PyTorch eager runs the scan as a Python loop of ~12 tensor operations per step,
#: ~1 ms per step on this machine: 10^5 steps would take minutes per call, so it is
#: timed at T = 10^4 (against the Numba primal at the same T)
TORCH_SCAN_T = 10_000
JAX_PROGRAM_LENGTH = 128          # the interpreter's padded program: trees up to 128 nodes
IMPORT_SLACK = 180.0              # seconds a worker may take to start (imports), before the budget

GOAL_BUILD_8_FUSE2 = 2.0          # s
GOAL_GROWTH_EXPONENT = 1.1        # build time ~ IR size ** exponent
GOAL_SCAN_BUILD = 0.3             # s
GOAL_GRAD_OVER_PRIMAL = 3.0


def runtime_goals(label, row):
    """(gradient/primal, gradient/hand-written or None) goals of a runtime row (issue 15):
    the tree at fuse 1 within 2x its primal, and 1.2x the hand-written adjoint for 10^4
    rows; the fused evaluator within 3x for 10^4 rows (2x for 100); the scan within 3x its
    primal and 2x the hand-written adjoint."""
    if label == "scan":
        return 3.0, 2.0
    large = row["n"] >= 10_000
    if row["fuse"] == 2:
        return (3.0 if large else 2.0), None
    return 2.0, (1.2 if large else None)

METHODS = ["numba_primal", "enzpy", "hand_numba", "jax_per_tree", "jax_interpreter",
           "torch_eager"]
METHOD_LABELS = {
    "numba_primal": "Numba primal",
    "enzpy": "enzpy gradient",
    "hand_numba": "hand-written Numba adjoint",
    "jax_per_tree": "JAX jit(grad), per-tree trace",
    "jax_interpreter": "JAX jit(grad), lax.switch interpreter",
    "jax_scan": "JAX jit(grad), lax.scan",
    "torch_eager": "PyTorch eager",
}
STAGES = ["capture", "cleanup", "read_ir", "reverse", "parse", "optimize", "codegen", "wrap"]


def say(*parts):
    """A progress line from a worker to the parent (stdout, flushed)."""
    print("@@", *parts, flush=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def optional_imports():
    """(jax or None, torch or None, list of messages about what is missing)."""
    missing = []
    # single-threaded like Numba (and steadier on a shared 2-core machine): XLA's
    # CPU thread pool off unless the caller set XLA_FLAGS, PyTorch on one thread
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                       "intra_op_parallelism_threads=1")
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
    except Exception as exc:  # noqa: BLE001 (any import failure means: skip JAX)
        jax = None
        missing.append(f"JAX not importable ({type(exc).__name__}: {exc}): the JAX "
                       f"comparisons (per-tree jit(grad), lax.switch interpreter, "
                       f"lax.scan) are skipped")
    try:
        import torch
        torch.set_num_threads(1)
    except Exception as exc:  # noqa: BLE001
        torch = None
        missing.append(f"PyTorch not importable ({type(exc).__name__}: {exc}): the "
                       f"PyTorch eager comparisons are skipped")
    return jax, torch, missing


# --------------------------------------------------------------------------------------
# Hand-written Numba adjoints (the practical limit)
# --------------------------------------------------------------------------------------
# Importing the examples imports enzpy before anything is compiled.
import dynamic_expressions as de  # noqa: E402
import scan as scan_example  # noqa: E402
from numba import njit  # noqa: E402

#: the operators the hand-written adjoint (and the JAX / PyTorch ports) know: the
#: MWE's (+, -, *, safe_div) and (cos, sin, exp, tanh), the first four of each list
HAND_K = 4


@njit
def _unary(o, x):
    if o == 0:
        return math.cos(x)
    elif o == 1:
        return math.sin(x)
    elif o == 2:
        return math.exp(x)
    return math.tanh(x)


@njit
def _binary(o, a, b):
    if o == 0:
        return a + b
    elif o == 1:
        return a - b
    elif o == 2:
        return a * b
    return a * b / (1.0 + b * b)


@njit
def _fill(row, c):
    for j in range(row.shape[0]):
        row[j] = c


@njit
def _fwd(i, degree, constant, val, feature, op, left, right, X, vals, cval, isc):
    """Node i's value: a scalar ``cval[i]`` for a constant subtree (``isc[i]``),
    else the row ``vals[i]``. Returns ``isc[i]``."""
    d = degree[i]
    if d == 0:
        if constant[i] != 0:
            cval[i] = val[i]
            isc[i] = True
            return True
        out = vals[i]
        x = X[feature[i]]
        for j in range(out.shape[0]):
            out[j] = x[j]
        isc[i] = False
        return False
    o = op[i]
    l = left[i]
    if d == 1:
        if _fwd(l, degree, constant, val, feature, op, left, right, X, vals, cval, isc):
            cval[i] = _unary(o, cval[l])
            isc[i] = True
            return True
        out = vals[i]
        x = vals[l]
        n = out.shape[0]
        if o == 0:
            for j in range(n):
                out[j] = math.cos(x[j])
        elif o == 1:
            for j in range(n):
                out[j] = math.sin(x[j])
        elif o == 2:
            for j in range(n):
                out[j] = math.exp(x[j])
        else:
            for j in range(n):
                out[j] = math.tanh(x[j])
        isc[i] = False
        return False
    r = right[i]
    cl = _fwd(l, degree, constant, val, feature, op, left, right, X, vals, cval, isc)
    cr = _fwd(r, degree, constant, val, feature, op, left, right, X, vals, cval, isc)
    if cl and cr:
        cval[i] = _binary(o, cval[l], cval[r])
        isc[i] = True
        return True
    if cl:
        _fill(vals[l], cval[l])
    if cr:
        _fill(vals[r], cval[r])
    out = vals[i]
    a = vals[l]
    b = vals[r]
    n = out.shape[0]
    if o == 0:
        for j in range(n):
            out[j] = a[j] + b[j]
    elif o == 1:
        for j in range(n):
            out[j] = a[j] - b[j]
    elif o == 2:
        for j in range(n):
            out[j] = a[j] * b[j]
    else:
        for j in range(n):
            bj = b[j]
            out[j] = a[j] * bj / (1.0 + bj * bj)
    isc[i] = False
    return False


@njit
def _const_reverse(i, s, degree, op, left, right, cval, dval):
    """Reverse of a constant subtree (scalars): ``s`` is node i's adjoint."""
    d = degree[i]
    if d == 0:
        dval[i] += s
        return
    o = op[i]
    l = left[i]
    x = cval[l]
    if d == 1:
        if o == 0:
            g = -s * math.sin(x)
        elif o == 1:
            g = s * math.cos(x)
        elif o == 2:
            g = s * cval[i]
        else:
            g = s * (1.0 - cval[i] * cval[i])
        _const_reverse(l, g, degree, op, left, right, cval, dval)
        return
    r = right[i]
    b = cval[r]
    if o == 0:
        gl, gr = s, s
    elif o == 1:
        gl, gr = s, -s
    elif o == 2:
        gl, gr = s * b, s * x
    else:
        q = 1.0 / (1.0 + b * b)
        gl, gr = s * b * q, s * x * (1.0 - b * b) * q * q
    _const_reverse(l, gl, degree, op, left, right, cval, dval)
    _const_reverse(r, gr, degree, op, left, right, cval, dval)


@njit
def hand_tree_gradient(degree, constant, val, feature, op, left, right, X, dX, dval, vals, adj):
    """``sum(eval_tree(tree, X))``; its gradient overwrites ``dX`` and ``dval``.

    ``vals`` and ``adj`` are ``(nodes, n)`` workspaces that the caller allocates
    once and reuses across calls (as a fitting loop would). Forward: the recursive
    pass above, with constant subtrees folded to scalars as the evaluator does.
    Reverse: the nodes in preorder (a parent's index is below its children's, as in
    ``random_tree``), each writing its children's adjoint rows with the operator's
    hand-written derivative.
    """
    m = degree.shape[0]
    n = X.shape[1]
    cval = np.empty(m)
    isc = np.empty(m, dtype=np.bool_)
    dX[:, :] = 0.0
    dval[:] = 0.0
    if _fwd(0, degree, constant, val, feature, op, left, right, X, vals, cval, isc):
        _const_reverse(0, float(n), degree, op, left, right, cval, dval)
        return n * cval[0]
    root = vals[0]
    g0 = adj[0]
    loss = 0.0
    for j in range(n):
        loss += root[j]
        g0[j] = 1.0
    # preorder: a node's adjoint row is complete before its children's (each node has
    # one parent, so children's rows are assigned, not accumulated); constant subtrees
    # below a non-constant parent are reversed as scalars and their nodes skipped
    skip = np.zeros(m, dtype=np.bool_)
    for i in range(m):
        if skip[i]:
            continue
        g = adj[i]
        if isc[i]:
            s = 0.0
            for j in range(n):
                s += g[j]
            _const_reverse(i, s, degree, op, left, right, cval, dval)
            stack = [i]
            while stack:
                k = stack.pop()
                skip[k] = True
                if degree[k] >= 1:
                    stack.append(left[k])
                if degree[k] == 2:
                    stack.append(right[k])
            continue
        d = degree[i]
        if d == 0:
            gx = dX[feature[i]]
            for j in range(n):
                gx[j] += g[j]
            continue
        l = left[i]
        gl = adj[l]
        o = op[i]
        if d == 1:
            x = vals[l]
            y = vals[i]
            if o == 0:
                for j in range(n):
                    gl[j] = -g[j] * math.sin(x[j])
            elif o == 1:
                for j in range(n):
                    gl[j] = g[j] * math.cos(x[j])
            elif o == 2:
                for j in range(n):
                    gl[j] = g[j] * y[j]
            else:
                for j in range(n):
                    gl[j] = g[j] * (1.0 - y[j] * y[j])
        else:
            r = right[i]
            gr = adj[r]
            a = vals[l]
            b = vals[r]
            if o == 0:
                for j in range(n):
                    gl[j] = g[j]
                    gr[j] = g[j]
            elif o == 1:
                for j in range(n):
                    gl[j] = g[j]
                    gr[j] = -g[j]
            elif o == 2:
                for j in range(n):
                    gl[j] = g[j] * b[j]
                    gr[j] = g[j] * a[j]
            else:
                for j in range(n):
                    bj = b[j]
                    q = 1.0 / (1.0 + bj * bj)
                    gl[j] = g[j] * bj * q
                    gr[j] = g[j] * a[j] * (1.0 - bj * bj) * q * q
    return loss


# --------------------------------------------------------------------------------------
# JAX and PyTorch ports
# --------------------------------------------------------------------------------------
_NP_BINOPS = [np.add, np.subtract, np.multiply, lambda a, b: a * b / (1.0 + b * b)]
_NP_UNAOPS = [np.cos, np.sin, np.exp, np.tanh]


def node_values(tree, X):
    """Every node's output on ``X`` (NumPy, the MWE's 4+4 operators), node -> array."""
    out = {}

    def ev(i):
        d = tree.degree[i]
        if d == 0:
            v = (np.full(X.shape[1], tree.val[i]) if tree.constant[i]
                 else X[tree.feature[i]].copy())
        elif d == 1:
            v = _NP_UNAOPS[tree.op[i]](ev(tree.left[i]))
        else:
            v = _NP_BINOPS[tree.op[i]](ev(tree.left[i]), ev(tree.right[i]))
        out[i] = v
        return v

    with np.errstate(all="ignore"):
        ev(0)
    return out


def pick_benchmark_tree(nodes, operators, X, seed, bound=20.0):
    """The first random tree (seeds ``seed``, ``seed + 1``, ...) with at least two
    constants and every node's value on ``X`` finite and below ``bound`` in
    magnitude: a well-conditioned tree, so that gradients computed in different
    frameworks agree (``cos(exp(exp(x)))`` differs between libm implementations)."""
    while True:
        tree = de.random_tree(nodes, X.shape[0], operators, np.random.default_rng(seed))
        if int(((tree.degree == 0) & (tree.constant == 1)).sum()) >= min(2, nodes):
            values = node_values(tree, X)
            if all(np.all(np.abs(v) < bound) for v in values.values()):
                return tree, seed
        seed += 1


def jax_ops(jnp):
    binops = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
              lambda a, b: a * b / (1.0 + b * b)]
    unaops = [jnp.cos, jnp.sin, jnp.exp, jnp.tanh]
    return binops, unaops


def torch_ops(torch):
    binops = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
              lambda a, b: a * b / (1.0 + b * b)]
    unaops = [torch.cos, torch.sin, torch.exp, torch.tanh]
    return binops, unaops


def jax_per_tree_gradient(jax, tree):
    """``jit(grad)`` of a Python-recursive evaluator of this one tree: the tree's
    structure is baked into the trace, so every new tree is a new compile."""
    jnp = jax.numpy
    binops, unaops = jax_ops(jnp)
    degree, constant, feature, op, left, right = (
        [int(v) for v in a] for a in (tree.degree, tree.constant, tree.feature, tree.op,
                                      tree.left, tree.right))

    def ev(i, val, X):
        if degree[i] == 0:
            return val[i] if constant[i] else X[feature[i], :]
        if degree[i] == 1:
            return unaops[op[i]](ev(left[i], val, X))
        return binops[op[i]](ev(left[i], val, X), ev(right[i], val, X))

    def loss(val, X):
        return jnp.sum(jnp.broadcast_to(ev(0, val, X), (X.shape[1],)))

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def postfix_program(tree, length=JAX_PROGRAM_LENGTH):
    """The tree as a postfix program for the JAX interpreter, padded to ``length``.

    Instruction t: ``kind`` (0 no-op, 1 feature, 2 constant, 3 + u unary operator
    u, 3 + HAND_K + b binary operator b), the node it writes (``dest``, its
    register), its feature / constant index (``arg``) and its children's
    registers (``lhs``, ``rhs``). Register ``length`` is the no-ops' scratch.
    """
    m = len(tree.degree)
    if m > length:
        raise ValueError(f"tree of {m} nodes > interpreter program length {length}")
    order = []

    def visit(i):
        if tree.degree[i] >= 1:
            visit(int(tree.left[i]))
        if tree.degree[i] == 2:
            visit(int(tree.right[i]))
        order.append(i)

    visit(0)
    kind = np.zeros(length, np.int32)
    dest = np.full(length, length, np.int32)
    arg = np.zeros(length, np.int32)
    lhs = np.zeros(length, np.int32)
    rhs = np.zeros(length, np.int32)
    for t, i in enumerate(order):
        dest[t] = i
        d = tree.degree[i]
        if d == 0:
            kind[t] = 2 if tree.constant[i] else 1
            arg[t] = i if tree.constant[i] else tree.feature[i]
        elif d == 1:
            kind[t] = 3 + tree.op[i]
            lhs[t] = tree.left[i]
        else:
            kind[t] = 3 + HAND_K + tree.op[i]
            lhs[t], rhs[t] = tree.left[i], tree.right[i]
    return kind, dest, arg, lhs, rhs


def jax_interpreter_gradient(jax):
    """``jit(grad)`` of a tree-independent interpreter: a ``lax.fori_loop`` over the
    padded postfix program, ``lax.switch`` over the instruction kinds. One compile
    per data shape serves every tree of up to ``JAX_PROGRAM_LENGTH`` nodes (the
    constants ``val`` padded to that length)."""
    jnp = jax.numpy
    lax = jax.lax
    binops, unaops = jax_ops(jnp)
    branches = [lambda a, b, x, c: a,                                   # no-op
                lambda a, b, x, c: x,                                   # feature
                lambda a, b, x, c: jnp.broadcast_to(c, a.shape)]        # constant
    branches += [(lambda f: lambda a, b, x, c: f(a))(f) for f in unaops]
    branches += [(lambda f: lambda a, b, x, c: f(a, b))(f) for f in binops]

    def loss(val, X, kind, dest, arg, lhs, rhs):
        regs = jnp.zeros((JAX_PROGRAM_LENGTH + 1, X.shape[1]), X.dtype)

        def step(t, regs):
            k = kind[t]
            result = lax.switch(k, branches, regs[lhs[t]], regs[rhs[t]],
                                X[jnp.where(k == 1, arg[t], 0)],
                                val[jnp.where(k == 2, arg[t], 0)])
            return regs.at[dest[t]].set(result)

        regs = lax.fori_loop(0, JAX_PROGRAM_LENGTH, step, regs)
        return jnp.sum(regs[0])

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def torch_tree_gradient(torch, tree, X, val):
    """PyTorch eager: recursive evaluation on tensors, then ``backward``."""
    binops, unaops = torch_ops(torch)
    degree, constant, feature, op, left, right = (
        [int(v) for v in a] for a in (tree.degree, tree.constant, tree.feature, tree.op,
                                      tree.left, tree.right))
    Xt = torch.from_numpy(X.copy()).requires_grad_()
    vt = torch.from_numpy(val.copy()).requires_grad_()
    n = X.shape[1]

    def ev(i):
        if degree[i] == 0:
            return vt[i].expand(n) if constant[i] else Xt[feature[i]]
        if degree[i] == 1:
            return unaops[op[i]](ev(left[i]))
        return binops[op[i]](ev(left[i]), ev(right[i]))

    def call():
        Xt.grad = None
        vt.grad = None
        ev(0).sum().backward()
        return Xt.grad, vt.grad

    return call


def jax_scan_gradient(jax, T):
    """The MWE itself: ``jit(grad(f))`` with ``lax.scan`` over ``ones(T)``."""
    jnp = jax.numpy

    def f(s):
        def scan_fn(carry, y_t):
            level, s = carry
            exp_val = (level + 2 * level ** 0.5) * s[0]
            exp_val = jnp.maximum(exp_val, 0.0)        # np.clip(exp_val, a_min=0)
            level = y_t / s[0] + 0.5 * level
            s = y_t / level + 0.5 * s
            return (level, s), exp_val
        return jax.lax.scan(scan_fn, (1.0, s), jnp.ones(T))[1].sum()

    return jax.jit(jax.grad(f))


def torch_scan_gradient(torch, s0, T):
    s = torch.from_numpy(s0.copy()).requires_grad_()

    def call():
        s.grad = None
        level = torch.tensor(1.0, dtype=torch.float64)
        st = s
        outs = []
        for _ in range(T):
            exp_val = torch.clamp((level + 2 * level ** 0.5) * st[0], min=0.0)
            level = 1.0 / st[0] + 0.5 * level
            st = 1.0 / level + 0.5 * st
            outs.append(exp_val)
        torch.stack(outs).sum().backward()
        return s.grad

    return call


# --------------------------------------------------------------------------------------
# Workers (one subprocess per configuration)
# --------------------------------------------------------------------------------------
def _rel_err(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def _repeat_for(seconds_per_round, target=3.0, lo=5, hi=60):
    return int(max(lo, min(hi, target / max(seconds_per_round, 1e-9))))


def _timed_first_call(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


CORE_METHODS = ("numba_primal", "enzpy", "hand_numba")


def time_methods(funcs, target):
    """Median seconds per call of each function in ``funcs`` (name -> callable).

    The primal, enzpy and the hand-written adjoint are timed in one alternation;
    each other framework is timed in its own alternation with the primal (JAX's
    and PyTorch's worker threads and large temporaries would otherwise slow the
    calls timed after theirs). Returns (seconds, ratio to the primal, ratio to the
    hand-written adjoint, repeats), ratios taken within each alternation.
    """
    from _timing import interleaved

    core = [m for m in CORE_METHODS if m in funcs]
    est = interleaved([funcs[m] for m in core], 2)
    reps = _repeat_for(sum(est), target)
    times = dict(zip(core, interleaved([funcs[m] for m in core], reps)))
    ratio = {m: times[m] / times["numba_primal"] for m in core}
    repeats = dict.fromkeys(core, reps)
    for m in funcs:
        if m in core:
            continue
        pair = [funcs["numba_primal"], funcs[m]]
        r = _repeat_for(sum(interleaved(pair, 1)), target / 2, lo=3)
        tp, tm = interleaved(pair, r)
        times[m], ratio[m], repeats[m] = tm, tm / tp, r
    ratio_hand = ({m: ratio[m] / ratio["hand_numba"] for m in funcs if m != "numba_primal"}
                  if "hand_numba" in funcs else {})
    return times, ratio, ratio_hand, repeats


@njit
def _trivial_loss(degree, constant, val, feature, op, left, right, X, output):
    output[0] = val[0] + X[0, 0]


def call_overhead(tree, X):
    """Seconds per call of Numba and of enzpy's ``autodiff`` on a function with the
    loss's arguments and annotations that does (almost) nothing: the fixed cost
    of a call, paid by every gradient call whatever the tree or n."""
    from enzpy import Const, Duplicated, Reverse, autodiff
    from _timing import interleaved

    out, dout = np.zeros(1), np.ones(1)
    dX, dval = np.zeros_like(X), np.zeros_like(tree.val)
    args = ([Const(a) for a in tree[:2]] + [Duplicated(tree.val, dval)]
            + [Const(a) for a in tree[3:]] + [Duplicated(X, dX), Duplicated(out, dout)])

    def primal():
        _trivial_loss(*tree, X, out)

    def grad():
        dout[0] = 1.0
        autodiff(Reverse, _trivial_loss, *args)

    primal()
    grad()
    return interleaved([primal, grad], 200)


def worker_tree(k, fuse, runtime, quick):
    import enzpy
    from enzpy import Const, Duplicated, Reverse, autodiff

    ops = de.operator_set(k)
    rng = np.random.default_rng(2024)
    X = rng.standard_normal((N_FEATURES, 100))
    tree, _ = de.pick_tree(30, N_FEATURES, ops, X)
    ev = de.build_evaluator(k, fuse)
    out = np.zeros(1)
    say("numba_start")
    numba_seconds, _ = _timed_first_call(lambda: ev.loss(*tree, X, out))
    say("numba_done", f"{numba_seconds:.3f}")
    first_grad, (_, dX, dval) = _timed_first_call(lambda: de.gradients(ev, tree, X))
    report = enzpy.build_report(ev.loss)[-1]
    say("enzpy_done", f"{report.total:.3f}")
    # sanity: two entries against central differences
    fd_err = 0.0
    for what, index in (("X", (1, 7)), ("val", int(np.flatnonzero(tree.constant)[0]))):
        fd = de.central_difference(ev, tree, X, what, index)
        got = dX[index] if what == "X" else dval[index]
        fd_err = max(fd_err, abs(got - fd) / max(1.0, abs(fd)))
    result = dict(kind="tree_build", k=k, fuse=fuse, numba_compile_s=numba_seconds,
                  enzpy_build_s=report.total, first_grad_call_s=first_grad,
                  stages={s: report.timings.get(s, 0.0) for s in STAGES},
                  primal_instructions=report.primal_instructions,
                  derivative_functions=report.derivative_functions,
                  module_bytes=report.module_bytes, fd_rel_err=fd_err,
                  peak_tape_bytes=report.peak_tape_bytes)
    if not runtime:
        return result

    # ---- runtime: trees of 10, 30, 100 nodes at n = 1e2, 1e4 -------------------------
    if k > HAND_K:
        raise ValueError(f"runtime comparisons need k <= {HAND_K}")
    jax, torch, missing = optional_imports()
    for m in missing:
        log(m)
    result["missing"] = missing
    result["numba_call_overhead_s"], result["enzpy_call_overhead_s"] = call_overhead(tree, X)
    builds_before = enzpy.cache_info()["misses"]
    t_hand_compile = None
    jax_interp = {}
    rows = []
    sizes = TREE_SIZES
    for nodes in sizes:
        big = np.random.default_rng(7).standard_normal((N_FEATURES, max(ROW_COUNTS)))
        tree, seed = pick_benchmark_tree(nodes, ops, big, seed=1000 + nodes)
        per_tree_jit = jax_per_tree_gradient(jax, tree) if jax is not None else None
        for n in ROW_COUNTS:
            say("runtime", nodes, n)
            Xn = np.random.default_rng(nodes * 7 + n).standard_normal((N_FEATURES, n))
            val = tree.val.copy()
            targs = (tree.degree, tree.constant, val, tree.feature, tree.op, tree.left,
                     tree.right)
            outp = np.zeros(1)

            def primal():
                ev.loss(*targs, Xn, outp)

            primal()
            if not np.isfinite(outp[0]):
                raise RuntimeError(f"tree of {nodes} nodes is not finite at n={n}")
            dXe, dve = np.zeros_like(Xn), np.zeros_like(val)
            oute, doute = np.zeros(1), np.ones(1)
            eargs = ([Const(a) for a in targs[:2]] + [Duplicated(val, dve)]
                     + [Const(a) for a in targs[3:]]
                     + [Duplicated(Xn, dXe), Duplicated(oute, doute)])

            def enz():
                dXe.fill(0.0)
                dve.fill(0.0)
                doute[0] = 1.0
                autodiff(Reverse, ev.loss, *eargs)

            compile_s = {}
            # the report keeps the largest tape of any call: reset it per workload
            entry_report = enzpy.build_report(ev.loss)[-1]
            entry_report.peak_tape_bytes = 0
            compile_s["enzpy"], _ = _timed_first_call(enz)
            tape_bytes = entry_report.peak_tape_bytes
            ref_dX, ref_dv = dXe.copy(), dve.copy()
            funcs = {"numba_primal": primal, "enzpy": enz}
            errs = {"enzpy": 0.0}

            dXh, dvh = np.zeros_like(Xn), np.zeros_like(val)
            work = np.empty((nodes, n)), np.empty((nodes, n))

            def hand():
                hand_tree_gradient(*targs, Xn, dXh, dvh, *work)

            compile_s["hand_numba"], _ = _timed_first_call(hand)
            if t_hand_compile is None:
                t_hand_compile = compile_s["hand_numba"]
            funcs["hand_numba"] = hand
            errs["hand_numba"] = max(_rel_err(dXh, ref_dX), _rel_err(dvh, ref_dv))

            if jax is not None:
                jnp = jax.numpy
                vj, Xj = jnp.asarray(val), jnp.asarray(Xn)

                def jpt():
                    return jax.block_until_ready(per_tree_jit(vj, Xj))

                compile_s["jax_per_tree"], (gv, gX) = _timed_first_call(jpt)
                errs["jax_per_tree"] = max(_rel_err(gX, ref_dX), _rel_err(gv, ref_dv))
                funcs["jax_per_tree"] = jpt

                prog = tuple(jnp.asarray(a) for a in postfix_program(tree))
                # constants padded to the program length: one compile for all trees
                vpad = np.zeros(JAX_PROGRAM_LENGTH)
                vpad[:nodes] = val
                vpj = jnp.asarray(vpad)
                if n not in jax_interp:
                    jax_interp[n] = jax_interpreter_gradient(jax)

                def jin(g=jax_interp[n]):
                    gv, gX = g(vpj, Xj, *prog)
                    return jax.block_until_ready((gv[:nodes], gX))

                compile_s["jax_interpreter"], (gv, gX) = _timed_first_call(jin)
                errs["jax_interpreter"] = max(_rel_err(gX, ref_dX), _rel_err(gv, ref_dv))
                funcs["jax_interpreter"] = jin
            if torch is not None:
                tcall = torch_tree_gradient(torch, tree, Xn, val)
                compile_s["torch_eager"], (gX, gv) = _timed_first_call(tcall)
                errs["torch_eager"] = max(_rel_err(gX.numpy(), ref_dX),
                                          _rel_err(gv.numpy(), ref_dv))
                funcs["torch_eager"] = tcall

            times, ratio, ratio_hand, reps = time_methods(funcs, 1.5 if quick else 3.0)
            for name in funcs:
                rows.append(dict(kind="tree_runtime", k=k, fuse=fuse, nodes=nodes, n=n,
                                 tree_seed=seed, method=name, runtime_s=times[name],
                                 ratio_primal=ratio[name], ratio_hand=ratio_hand.get(name),
                                 first_call_s=compile_s.get(name),
                                 grad_rel_err_vs_enzpy=errs.get(name), repeat=reps[name],
                                 enzpy_peak_tape_bytes=tape_bytes if name == "enzpy" else None))
    result["runtime"] = rows
    result["enzpy_builds_during_runtime"] = enzpy.cache_info()["misses"] - builds_before
    result["hand_compile_s"] = t_hand_compile
    return result


def worker_scan(quick):
    import enzpy
    from enzpy import Const, Duplicated, Reverse, autodiff
    from _timing import interleaved

    f = scan_example.f
    s0 = np.ones(2)
    say("numba_start")
    numba_seconds, _ = _timed_first_call(lambda: f(s0, 80))
    say("numba_done", f"{numba_seconds:.3f}")
    builds = []
    for T in SCAN_TS:
        misses = enzpy.cache_info()["misses"]
        first, (value, ds) = _timed_first_call(lambda: scan_example.gradient(s0, T))
        reports = enzpy.build_report(f)
        fd = scan_example.central_difference(s0, T)
        builds.append(dict(kind="scan_build", T=T, first_grad_call_s=first,
                           new_builds=enzpy.cache_info()["misses"] - misses,
                           builds_total=len(reports), enzpy_build_s=reports[0].total,
                           stages={s: reports[0].timings.get(s, 0.0) for s in STAGES},
                           primal_instructions=reports[0].primal_instructions,
                           numba_compile_s=numba_seconds,
                           fd_rel_err=_rel_err(ds, fd), value=value))
    say("enzpy_done", f"{enzpy.build_report(f)[0].total:.3f}")
    result = dict(kind="scan", builds=builds)

    jax, torch, missing = optional_imports()
    for m in missing:
        log(m)
    result["missing"] = missing
    if jax is not None:
        for b in builds:
            g = jax_scan_gradient(jax, b["T"])
            sj = jax.numpy.asarray(s0)
            b["jax_compile_s"], gj = _timed_first_call(
                lambda: jax.block_until_ready(g(sj)))

    T = SCAN_RUNTIME_T
    say("runtime", T)
    ds0 = np.zeros(2)
    eargs = (Duplicated(s0, ds0), Const(T))

    def primal():
        f(s0, T)

    def enz():
        ds0.fill(0.0)
        autodiff(Reverse, f, *eargs)

    scan_report = enzpy.build_report(f)[0]
    scan_report.peak_tape_bytes = 0
    enz()
    tape_bytes = scan_report.peak_tape_bytes
    ref = ds0.copy()
    dsh = np.zeros(2)

    def hand():
        scan_example.hand_gradient(s0, T, dsh)

    compile_s, errs = {}, {"enzpy": 0.0}
    compile_s["enzpy"] = builds[0]["enzpy_build_s"]
    compile_s["hand_numba"], _ = _timed_first_call(hand)
    errs["hand_numba"] = _rel_err(dsh, ref)
    funcs = {"numba_primal": primal, "enzpy": enz, "hand_numba": hand}
    if jax is not None:
        g = jax_scan_gradient(jax, T)
        sj = jax.numpy.asarray(s0)

        def jsc():
            return jax.block_until_ready(g(sj))

        compile_s["jax_scan"], gj = _timed_first_call(jsc)
        errs["jax_scan"] = _rel_err(np.asarray(gj), ref)
        funcs["jax_scan"] = jsc
    times, ratio, ratio_hand, reps = time_methods(funcs, 3.0)
    rows = []
    for name in funcs:
        rows.append(dict(kind="scan_runtime", T=T, method=name, runtime_s=times[name],
                         ratio_primal=ratio[name], ratio_hand=ratio_hand.get(name),
                         first_call_s=compile_s.get(name),
                         grad_rel_err_vs_enzpy=errs.get(name), repeat=reps[name],
                         enzpy_peak_tape_bytes=tape_bytes if name == "enzpy" else None))
    if torch is not None:
        # a Python loop: timed at TORCH_SCAN_T, in alternation with the Numba primal
        # and the hand-written adjoint at the same T
        Tt = TORCH_SCAN_T
        say("runtime", Tt)
        ds_ref, dsh_t = np.zeros(2), np.zeros(2)
        autodiff(Reverse, f, Duplicated(s0, ds_ref), Const(Tt))
        # the primal and the hand-written adjoint first (a call of the Python loop
        # takes seconds: timed apart, 2 calls)
        tp, th = interleaved([lambda: f(s0, Tt), lambda: scan_example.hand_gradient(s0, Tt, dsh_t)],
                             50)
        tcall = torch_scan_gradient(torch, s0, Tt)
        first, gt = _timed_first_call(tcall)
        tt, = interleaved([tcall], 1 if quick else 2)
        rows.append(dict(kind="scan_runtime", T=Tt, method="torch_eager", runtime_s=tt,
                         ratio_primal=tt / tp, ratio_hand=tt / th, first_call_s=first,
                         grad_rel_err_vs_enzpy=_rel_err(gt.numpy(), ds_ref)))
    result["runtime"] = rows
    result["enzpy_builds_total"] = len(enzpy.build_report(f))
    return result


def worker_main(args):
    if args.worker == "tree":
        result = worker_tree(args.k, args.fuse, args.runtime, args.quick)
    else:
        result = worker_scan(args.quick)
    with open(args.result, "w") as fh:
        json.dump(result, fh)
    say("done")


# --------------------------------------------------------------------------------------
# Parent: run the workers under the budget
# --------------------------------------------------------------------------------------
def run_worker(argv, budget, label, logdir):
    """Run a worker; returns (result dict or None, status string)."""
    fd, result_path = tempfile.mkstemp(suffix=".json", dir=logdir)
    os.close(fd)
    err_path = os.path.join(logdir, label.replace(" ", "_").replace("+", "p") + ".log")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *argv, "--result",
           result_path]
    t_start = time.perf_counter()
    with open(err_path, "w") as err:
        # (enzpy's disk cache off: the build time is what is measured, not a load
        # of what an earlier run saved)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, env={**os.environ, "ENZPY_CACHE": "0"})
        lines = queue.Queue()

        def pump():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        phase = "start"
        deadline = time.monotonic() + IMPORT_SLACK + (budget or 0) if budget else None
        numba_s = None
        status = None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                os.killpg(proc.pid, signal.SIGKILL)   # the worker's own process group
                proc.wait()
                if phase in ("start", "numba"):
                    status = f"skipped: over budget (Numba compile > {budget:g} s)"
                else:
                    status = (f"skipped: over budget (enzpy build > {budget:g} s, "
                              f"after a Numba compile of {numba_s:.1f} s)")
                log(f"  {label}: {status}")
                return dict(numba_compile_s=numba_s), status
            if line is None:
                break
            parts = line.split()
            if not parts or parts[0] != "@@":
                continue
            log(f"  {label}: {' '.join(parts[1:])}  [{time.perf_counter() - t_start:.0f} s]")
            if parts[1] == "numba_start":
                phase = "numba"
                deadline = time.monotonic() + budget if budget else None
            elif parts[1] == "numba_done":
                phase = "enzpy"
                numba_s = float(parts[2])
                deadline = time.monotonic() + budget if budget else None
            elif parts[1] == "enzpy_done":
                phase = "runtime"
                deadline = None
        proc.wait()
    if proc.returncode != 0:
        with open(err_path) as fh:
            tail = fh.read()[-3000:]
        log(f"  {label}: FAILED (exit {proc.returncode}); log {err_path}:\n{tail}")
        return None, f"failed (exit {proc.returncode}; see {err_path})"
    with open(result_path) as fh:
        result = json.load(fh)
    os.unlink(result_path)
    return result, "ok"


# --------------------------------------------------------------------------------------
# Tables, goals, plots
# --------------------------------------------------------------------------------------
def fmt_s(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def fmt_ms(x):
    if x is None:
        return ""
    ms = x * 1e3
    return f"{ms:.3f}" if ms < 1 else (f"{ms:.2f}" if ms < 100 else f"{ms:.0f}")


def fmt_ratio(x):
    return "" if x is None else (f"{x:.2f}x" if x < 10 else f"{x:.0f}x")


def verdict(ok):
    return "met" if ok else "MISSED"


def growth_exponent(rows):
    pts = [(r["primal_instructions"], r["enzpy_build_s"]) for r in rows
           if r.get("status") == "ok"]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def goals(build_rows, scan, tree_runtime, scan_runtime):
    """[(goal, value text, verdict)]"""
    out = []
    by = {(r["k"], r["fuse"]): r for r in build_rows}
    r8 = by.get((8, 2))
    if r8 and r8["status"] == "ok":
        out.append(("enzpy build, 8+8 operators at fuse level 2 <= 2 s",
                    f"{r8['enzpy_build_s']:.2f} s", verdict(r8["enzpy_build_s"] <= 2.0)))
    else:
        smaller = [r for r in build_rows if r["fuse"] == 2 and r["status"] == "ok"]
        why = r8["status"] if r8 else "not in this run (--quick)"
        if smaller:
            big = max(smaller, key=lambda r: r["k"])
            text = (f"not measured ({why}); the smaller {big['k']}+{big['k']} at fuse 2 "
                    f"already takes {big['enzpy_build_s']:.2f} s")
            out.append(("enzpy build, 8+8 operators at fuse level 2 <= 2 s", text,
                        "MISSED" if big["enzpy_build_s"] > GOAL_BUILD_8_FUSE2
                        else "NOT MEASURED"))
        else:
            out.append(("enzpy build, 8+8 operators at fuse level 2 <= 2 s",
                        f"not measured ({why})", "NOT MEASURED"))
    for fuse in (1, 2):
        rows = [r for r in build_rows if r["fuse"] == fuse]
        e = growth_exponent(rows)
        goal = f"enzpy build grows no faster than the primal IR (fuse {fuse}: exponent <= 1.1)"
        if e is None:
            out.append((goal, "fewer than 2 sizes measured", "NOT MEASURED"))
        else:
            n_ok = sum(r["status"] == "ok" for r in rows)
            out.append((goal, f"build ~ IR^{e:.2f} over {n_ok} operator sets",
                        verdict(e <= GOAL_GROWTH_EXPONENT)))
    if scan:
        b = scan["builds"]
        build = b[0]["enzpy_build_s"]
        out.append(("scan derivative build <= 0.3 s", f"{build:.3f} s",
                    verdict(build <= GOAL_SCAN_BUILD)))
        total = scan.get("enzpy_builds_total")
        indep = total == 1 and all(x["new_builds"] == (1 if i == 0 else 0)
                                   for i, x in enumerate(b))
        out.append(("scan derivative build independent of T",
                    f"{total} build(s) for T = {', '.join(str(x['T']) for x in b)}",
                    verdict(indep)))
    for label, rows in (("tree", tree_runtime), ("scan", scan_runtime)):
        for r in rows:
            if r["method"] != "enzpy":
                continue
            where = (f"{label} {r['k']}+{r['k']} fuse {r['fuse']}, {r['nodes']} nodes, "
                     f"n={r['n']}" if label == "tree" else f"scan T={r['T']}")
            over_primal, over_hand = runtime_goals(label, r)
            out.append((f"gradient <= {over_primal:g}x primal ({where})",
                        fmt_ratio(r["ratio_primal"]), verdict(r["ratio_primal"] <= over_primal)))
            if over_hand is not None:
                out.append((f"gradient within {over_hand:g}x of hand-written ({where})",
                            fmt_ratio(r["ratio_hand"]), verdict(r["ratio_hand"] <= over_hand)))
    return out


def write_csv(path, rows):
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, restval="")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def markdown(build_rows, scan, scan_status, tree_runtime, scan_runtime, goal_rows,
             notes, meta):
    L = []
    w = L.append
    w("# Seed benchmarks: DynamicExpressions evaluator and JAX scan MWE")
    w("")
    w(f"Generated by `python scripts/bench_seeds.py {meta['argv']}` on {meta['date']} "
      f"({meta['machine']}), enzpy at commit {meta['commit']}; total wall time "
      f"{meta['wall'] / 60:.1f} min. "
      f"Python {meta['python']}, numba {meta['numba']}, "
      f"JAX {meta['jax'] or 'not installed'}, PyTorch {meta['torch'] or 'not installed'}.")
    w("")
    w("Each configuration ran in its own process. Numba's compile of the primal "
      "(first call) is reported apart from enzpy's build (`build_report(...).total`, "
      "which excludes Numba's compile). Runtimes are medians of calls timed "
      "alternately in one process (`scripts/_timing.interleaved`), so the ratios "
      "hold even though the machine was shared (absolute times are noisy). "
      "Everything runs on one thread: Numba and enzpy's code are single-threaded, "
      "PyTorch runs with `torch.set_num_threads(1)`, XLA with its CPU thread pool "
      "off (`XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1`).")
    w("")
    for note in notes:
        w(f"* {note}")
    if notes:
        w("")
    w("## Goals")
    w("")
    w("| goal | measured | verdict |")
    w("|---|---|---|")
    for g, v, ok in goal_rows:
        w(f"| {g} | {v} | **{ok}** |")
    w("")
    w("## a. Build time: tree evaluator (gradient w.r.t. X and the constants)")
    w("")
    w("Seconds. The tree is a random 30-node tree over the operator set, X is 3x100; "
      "the build does not depend on the tree or on n.")
    w("")
    head = ("| operators | fuse | Numba compile | enzpy build | primal IR instr. | "
            "enzpy µs / instr. | " + " | ".join(STAGES) + " | status |")
    w(head)
    w("|" + "---|" * (7 + len(STAGES)))
    for r in build_rows:
        ok = r["status"] == "ok"
        per = (f"{r['enzpy_build_s'] / r['primal_instructions'] * 1e6:.0f}"
               if ok and r.get("primal_instructions") else "")
        stages = " | ".join(fmt_s(r["stages"].get(s)) if ok else "" for s in STAGES)
        w(f"| {r['k']}+{r['k']} | {r['fuse']} | {fmt_s(r.get('numba_compile_s'), 1)} | "
          f"{fmt_s(r.get('enzpy_build_s')) if ok else ''} | "
          f"{r.get('primal_instructions', '') if ok else ''} | {per} | {stages} | "
          f"{r['status']} |")
    w("")
    w("## a. Build time: scan (gradient w.r.t. s0; T is a `Const` argument)")
    w("")
    if scan:
        w("One derivative is built at the first call (T = 80) and serves every T: "
          "the build count stays at 1.")
        w("")
        w("| T | Numba compile s | enzpy builds so far | new builds at this T | "
          "enzpy build s | first gradient call s | primal IR instr. | "
          "JAX jit(grad) compile s | rel. error vs central diff. |")
        w("|---|---|---|---|---|---|---|---|---|")
        for b in scan["builds"]:
            w(f"| {b['T']} | {fmt_s(b['numba_compile_s'])} | {b['builds_total']} | "
              f"{b['new_builds']} | {b['enzpy_build_s']:.3f} | "
              f"{b['first_grad_call_s']:.3f} | {b['primal_instructions']} | "
              f"{fmt_s(b.get('jax_compile_s'))} | {b['fd_rel_err']:.1e} |")
        w("")
        st = scan["builds"][0]["stages"]
        w("enzpy stages of the scan build (ms): "
          + ", ".join(f"{s} {st[s] * 1e3:.1f}" for s in STAGES) + ".")
    else:
        w(f"Scan: {scan_status}.")
    w("")
    w("## b/c. Runtime: tree gradient (X and constants) / Numba primal")
    w("")
    w("Per call in ms, with the ratio to the Numba primal of the same workload; "
      "`first` is the first call (compile / trace / build, seconds). enzpy's first "
      "call reuses the build of part a (no rebuild per tree or per n); the JAX "
      "per-tree function recompiles for every tree (and shape), the JAX interpreter "
      "compiles once per n (program and constants padded to "
      f"{JAX_PROGRAM_LENGTH}) and serves every tree. The hand-written adjoint "
      "(Numba, in the script) folds constant subtrees to scalars as the evaluator "
      "does and reuses two nodes x n workspaces across calls, as a fitting loop "
      "would; it knows the MWE's 4+4 operators only. JAX and PyTorch are each timed "
      "in alternation with the Numba primal alone (their worker threads would "
      "otherwise slow the calls timed after theirs); their ratio to the hand-written "
      "adjoint goes through the primal. Trees are random, with every node's value "
      "below 20 in magnitude (so that all frameworks agree to ~1e-14).")
    w("")
    configs = sorted({(r["k"], r["fuse"]) for r in tree_runtime})
    present = [m for m in METHODS if any(r["method"] == m for r in tree_runtime)]
    for k, fuse in configs:
        rows = [r for r in tree_runtime if (r["k"], r["fuse"]) == (k, fuse)]
        w(f"### operators {k}+{k}, fuse level {fuse}")
        w("")
        w("| nodes | n | " + " | ".join(METHOD_LABELS[m] for m in present)
          + " | enzpy tape MB | enzpy / primal (goal) | enzpy / hand (goal) |")
        w("|---|---|" + "---|" * (len(present) + 3))
        for nodes in TREE_SIZES:
            for n in ROW_COUNTS:
                cell = {r["method"]: r for r in rows if r["nodes"] == nodes and r["n"] == n}
                if not cell:
                    continue
                parts = []
                for m in present:
                    r = cell.get(m)
                    if r is None:
                        parts.append("")
                    elif m == "numba_primal":
                        parts.append(f"{fmt_ms(r['runtime_s'])} ms")
                    else:
                        first = (f"; first {r['first_call_s']:.2f} s"
                                 if r.get("first_call_s") is not None else "")
                        parts.append(f"{fmt_ms(r['runtime_s'])} ms "
                                     f"({fmt_ratio(r['ratio_primal'])}{first})")
                e = cell["enzpy"]
                tape = e.get("enzpy_peak_tape_bytes")
                over_primal, over_hand = runtime_goals("tree", e)
                hand = (f"{fmt_ratio(e['ratio_hand'])} (<= {over_hand:g}x: "
                        f"{verdict(e['ratio_hand'] <= over_hand)})" if over_hand is not None
                        else fmt_ratio(e["ratio_hand"]))
                w(f"| {nodes} | {n} | " + " | ".join(parts)
                  + f" | {'' if tape is None else format(tape / 1e6, '.2f')}"
                  + f" | {fmt_ratio(e['ratio_primal'])} (<= {over_primal:g}x: "
                  f"{verdict(e['ratio_primal'] <= over_primal)}) | {hand} |")
        errs = {m: max((r["grad_rel_err_vs_enzpy"] or 0.0) for r in rows if r["method"] == m)
                for m in present if m not in ("numba_primal", "enzpy")}
        w("")
        w("Largest relative difference of each gradient from enzpy's: "
          + ", ".join(f"{METHOD_LABELS[m]} {e:.1e}" for m, e in errs.items()) + ".")
        w("")
    if not tree_runtime:
        w("(no tree runtime measured in this run)")
        w("")
    w("## b/c. Runtime: scan (gradient w.r.t. s0)")
    w("")
    if scan_runtime:
        w("| method | T | per call ms | / Numba primal | / hand-written | first call s | "
          "rel. diff. from enzpy | enzpy tape MB |")
        w("|---|---|---|---|---|---|---|---|")
        for r in scan_runtime:
            err = r["grad_rel_err_vs_enzpy"]
            tape = r.get("enzpy_peak_tape_bytes")
            w(f"| {METHOD_LABELS[r['method']]} | {r['T']} | {fmt_ms(r['runtime_s'])} | "
              f"{fmt_ratio(r['ratio_primal'])} | {fmt_ratio(r['ratio_hand'])} | "
              f"{fmt_s(r.get('first_call_s'), 3)} | "
              f"{'' if err is None else format(err, '.1e')} | "
              f"{'' if tape is None else format(tape / 1e6, '.2f')} |")
        w("")
        torch_note = any(r["method"] == "torch_eager" for r in scan_runtime)
        w("enzpy's first call is its one build (part a)." + ("" if not torch_note else
          f" PyTorch eager runs the scan as "
          f"a Python loop (about 1 ms per step here), so it is timed at "
          f"T = {TORCH_SCAN_T} (2 calls, timed after 50 alternating calls of the "
          f"Numba primal and the hand-written adjoint at that same T, which give its "
          f"ratios); the other rows are at T = {SCAN_RUNTIME_T}."))
    else:
        w(f"Scan: {scan_status}.")
    w("")
    return "\n".join(L) + "\n"


def plots(out, build_rows, scan, tree_runtime, scan_runtime):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: the plots (build_time.png, runtime.png) are "
            "skipped (pip install matplotlib)")
        return []
    written = []
    # ---- build time --------------------------------------------------------------
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw=dict(width_ratios=[2, 1]))
    ax = axes[0]
    labels = [f"{r['k']}+{r['k']}\nfuse {r['fuse']}" for r in build_rows]
    x = np.arange(len(build_rows))
    groups = [("enzpy: capture..reverse", ("capture", "cleanup", "read_ir", "reverse"),
               "#1f77b4"),
              ("enzpy: parse+optimize+codegen", ("parse", "optimize", "codegen"), "#ff7f0e"),
              ("enzpy: wrap", ("wrap",), "#2ca02c")]
    ymax = 0.0
    for i, r in enumerate(build_rows):
        if r.get("numba_compile_s") is not None:
            ymax = max(ymax, r["numba_compile_s"])
    for i, r in enumerate(build_rows):
        if r["status"] == "ok":
            ax.bar(x[i] - 0.2, r["numba_compile_s"], 0.4, color="0.6",
                   label="Numba compile of the primal" if i == 0 else None)
            bottom = 0.0
            for j, (name, stages, color) in enumerate(groups):
                h = sum(r["stages"][s] for s in stages)
                ax.bar(x[i] + 0.2, h, 0.4, bottom=bottom, color=color,
                       label=name if i == 0 else None)
                bottom += h
            ax.text(x[i] + 0.2, bottom, f"{bottom:.1f}", ha="center", va="bottom",
                    fontsize=8)
            ax.text(x[i] - 0.2, r["numba_compile_s"], f"{r['numba_compile_s']:.0f}",
                    ha="center", va="bottom", fontsize=8)
        else:
            txt = "skipped:\nover budget" if "budget" in r["status"] else r["status"][:20]
            ax.text(x[i], max(ymax, 1.0) * 0.05, txt, ha="center", va="bottom",
                    fontsize=8, rotation=90, color="firebrick")
    ax.axhline(GOAL_BUILD_8_FUSE2, color="firebrick", ls="--", lw=1,
               label="enzpy goal (8+8, fuse 2): 2 s")
    ax.set_xlim(-0.6, len(build_rows) - 0.4)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("seconds")
    ax.set_title("Tree evaluator: Numba compile vs enzpy derivative build")
    ax.legend(fontsize=8, loc="upper right")
    ax = axes[1]
    if scan:
        Ts = [b["T"] for b in scan["builds"]]
        ax.plot(Ts, [b["enzpy_build_s"] for b in scan["builds"]], "o-",
                label="enzpy build (one build for all T)")
        ax.plot(Ts, [b["numba_compile_s"] for b in scan["builds"]], "s--", color="0.5",
                label="Numba compile of the primal")
        if all(b.get("jax_compile_s") is not None for b in scan["builds"]):
            ax.plot(Ts, [b["jax_compile_s"] for b in scan["builds"]], "^-",
                    label="JAX jit(grad) compile (per T)")
        ax.axhline(GOAL_SCAN_BUILD, color="firebrick", ls="--", lw=1, label="goal: 0.3 s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo / 1.5, hi * 8)          # room for the legend above the lines
        ax.set_xlabel("T (scan length)")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8, loc="upper right")
    ax.set_title("Scan MWE: derivative build vs T")
    fig.tight_layout()
    path = os.path.join(out, "build_time.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # ---- runtime -------------------------------------------------------------------
    configs = sorted({(r["k"], r["fuse"]) for r in tree_runtime})
    ncols = len(configs) + (1 if scan_runtime else 0)
    if ncols == 0:
        return written
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 5.2), squeeze=False)
    colors = {"enzpy": "#1f77b4", "hand_numba": "#2ca02c", "jax_per_tree": "#ff7f0e",
              "jax_interpreter": "#d62728", "torch_eager": "#9467bd", "jax_scan": "#ff7f0e"}
    for ax, (k, fuse) in zip(axes[0], configs):
        rows = [r for r in tree_runtime if (r["k"], r["fuse"]) == (k, fuse)]
        present = [m for m in METHODS[1:] if any(r["method"] == m for r in rows)]
        workloads = [(s, n) for s in TREE_SIZES for n in ROW_COUNTS
                     if any(r["nodes"] == s and r["n"] == n for r in rows)]
        width = 0.8 / len(present)
        for j, m in enumerate(present):
            ys = []
            for s, n in workloads:
                r = [r for r in rows if r["nodes"] == s and r["n"] == n and r["method"] == m]
                ys.append(r[0]["ratio_primal"] if r else np.nan)
            ax.bar(np.arange(len(workloads)) + (j - (len(present) - 1) / 2) * width, ys,
                   width, label=METHOD_LABELS[m], color=colors.get(m))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(GOAL_GRAD_OVER_PRIMAL, color="firebrick", ls="--", lw=1,
                   label="goal: 3x primal")
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(workloads)),
                      [f"{s} nodes\nn={n:g}" for s, n in workloads], fontsize=8)
        ax.set_ylabel("gradient time / Numba primal time")
        ax.set_title(f"Tree gradient, {k}+{k} operators, fuse {fuse}")
        ax.legend(fontsize=7, loc="upper right")
    if scan_runtime:
        ax = axes[0][-1]
        rows = [r for r in scan_runtime if r["method"] != "numba_primal"]
        ax.bar(range(len(rows)), [r["ratio_primal"] for r in rows],
               color=[colors.get(r["method"], "0.5") for r in rows])
        for i, r in enumerate(rows):
            ax.text(i, r["ratio_primal"], fmt_ratio(r["ratio_primal"]), ha="center",
                    va="bottom", fontsize=8)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(GOAL_GRAD_OVER_PRIMAL, color="firebrick", ls="--", lw=1,
                   label="goal: 3x primal")
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)),
                      [METHOD_LABELS[r["method"]].replace(", ", ",\n")
                       + (f"\n(T = {r['T']:,})" if r["T"] != SCAN_RUNTIME_T else "")
                       for r in rows], fontsize=8)
        ax.set_ylabel("gradient time / Numba primal time")
        ax.set_title(f"Scan MWE, T = {SCAN_RUNTIME_T:,}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "runtime.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a subset: 2+2 and 4+4 at fuse 1, 2+2 at fuse 2 (~3-5 min)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds: stop a configuration whose Numba compile or enzpy "
                             "build exceeds this, and skip the larger ones")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"))
    # internal: run one configuration
    parser.add_argument("--worker", choices=("tree", "scan"), help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fuse", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--runtime", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)

    t_start = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    try:  # the enzpy version measured (enzpy/ is being developed alongside)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "enzpy"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        commit = (commit + (" with uncommitted changes in enzpy/" if dirty else "")) or "?"
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    logdir = tempfile.mkdtemp(prefix="bench_seeds_")
    jax, torch, missing = optional_imports()
    notes = list(missing)
    for m in missing:
        print(m)
    build_configs = QUICK_BUILD_CONFIGS if args.quick else FULL_BUILD_CONFIGS
    runtime_configs = QUICK_RUNTIME_CONFIGS if args.quick else FULL_RUNTIME_CONFIGS
    extra = ["--quick"] if args.quick else []

    # ---- scan first (small) ----------------------------------------------------------
    print("scan MWE ...", flush=True)
    scan, scan_status = run_worker(["scan", *extra], args.budget, "scan", logdir)
    if scan_status != "ok":
        scan = None
        notes.append(f"scan: {scan_status}")

    # ---- tree evaluators -------------------------------------------------------------
    build_rows, tree_runtime = [], []
    over = None        # the first configuration over budget
    for k, fuse in build_configs:
        label = f"{k}+{k} fuse {fuse}"
        if over is not None and (k >= over[0] and fuse >= over[1]):
            status = (f"skipped: over budget (not run: {over[0]}+{over[0]} at fuse "
                      f"{over[1]} already exceeded {args.budget:g} s)")
            print(f"{label}: {status}", flush=True)
            build_rows.append(dict(kind="tree_build", k=k, fuse=fuse, status=status,
                                   stages={}))
            continue
        print(f"tree evaluator {label} ...", flush=True)
        runtime = (k, fuse) in runtime_configs
        wargv = ["tree", "--k", str(k), "--fuse", str(fuse), *extra] + (
            ["--runtime"] if runtime else [])
        result, status = run_worker(wargv, args.budget, label, logdir)
        if status != "ok":
            row = dict(kind="tree_build", k=k, fuse=fuse, status=status, stages={})
            if result:
                row["numba_compile_s"] = result.get("numba_compile_s")
            build_rows.append(row)
            if "budget" in status:
                over = (k, fuse) if over is None else min(over, (k, fuse))
            continue
        for m in result.get("missing", []):
            if m not in notes:
                notes.append(m)
        tree_runtime += result.pop("runtime", [])
        if runtime and result.get("enzpy_builds_during_runtime"):
            notes.append(f"{label}: enzpy built {result['enzpy_builds_during_runtime']} "
                         f"more derivative(s) during the runtime measurements")
        if result.get("enzpy_call_overhead_s") is not None:
            notes.append(
                f"{label}: fixed cost of one call, measured on a function with the loss's "
                f"9 arguments and annotations that does nothing: Numba "
                f"{result['numba_call_overhead_s'] * 1e6:.0f} µs, enzpy `autodiff` "
                f"{result['enzpy_call_overhead_s'] * 1e6:.0f} µs (this bounds the "
                f"gradient/primal ratio of the smallest workloads).")
        result["status"] = status
        build_rows.append(result)
        print(f"  Numba compile {result['numba_compile_s']:.1f} s, enzpy build "
              f"{result['enzpy_build_s']:.2f} s, {result['primal_instructions']} primal "
              f"instructions", flush=True)
    missing_rt = sorted(runtime_configs - {(r["k"], r["fuse"]) for r in tree_runtime})
    for k, fuse in missing_rt:
        notes.append(f"tree runtime for {k}+{k} at fuse {fuse} not measured: its build "
                     f"was skipped or failed")

    # ---- outputs ---------------------------------------------------------------------
    scan_runtime = scan.pop("runtime", []) if scan else []
    goal_rows = goals(build_rows, scan, tree_runtime, scan_runtime)
    csv_rows = []
    for r in build_rows:
        row = {k: v for k, v in r.items() if k not in ("stages", "missing")}
        row.update({f"stage_{s}_s": r.get("stages", {}).get(s) for s in STAGES})
        csv_rows.append(dict(section="tree_build", **row))
    for b in (scan or {}).get("builds", []):
        row = {k: v for k, v in b.items() if k != "stages"}
        row.update({f"stage_{s}_s": b["stages"].get(s) for s in STAGES})
        csv_rows.append(dict(section="scan_build", status="ok", **row))
    csv_rows += [dict(section="tree_runtime", **r) for r in tree_runtime]
    csv_rows += [dict(section="scan_runtime", **r) for r in scan_runtime]
    csv_rows += [dict(section="goal", goal=g, measured=v, verdict=ok)
                 for g, v, ok in goal_rows]
    for r in csv_rows:
        r.pop("kind", None)
    write_csv(os.path.join(args.out, "seeds.csv"), csv_rows)

    import platform

    import numba
    meta = dict(argv=" ".join(sys.argv[1:] if argv is None else argv), commit=commit,
                date=time.strftime("%Y-%m-%d %H:%M"),
                machine=f"{os.cpu_count()} cores, {platform.machine()}",
                wall=time.perf_counter() - t_start, python=platform.python_version(),
                numba=numba.__version__, jax=getattr(jax, "__version__", None),
                torch=getattr(torch, "__version__", None))
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        notes.append("matplotlib is not installed: the plots build_time.png and "
                     "runtime.png were not made")
    md = markdown(build_rows, scan, scan_status, tree_runtime, scan_runtime, goal_rows,
                  notes, meta)
    with open(os.path.join(args.out, "seeds.md"), "w") as fh:
        fh.write(md)
    written = plots(args.out, build_rows, scan, tree_runtime, scan_runtime)
    print()
    print(md)
    print("goals:")
    for g, v, ok in goal_rows:
        print(f"  [{ok}] {g}: {v}")
    print("wrote", ", ".join([os.path.join(args.out, "seeds.csv"),
                              os.path.join(args.out, "seeds.md")] + written))
    print(f"worker logs: {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
