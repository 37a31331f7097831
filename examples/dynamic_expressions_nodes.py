"""DynamicExpressions.jl's tree evaluator over its own data structure: a linked
tree of mutable ``@jitclass`` nodes, differentiated by enzpy.

:mod:`dynamic_expressions` (next to this file) ports the evaluator over an
array-encoded tree (seven flat arrays). This file ports it over the structure
DynamicExpressions.jl actually uses, ``Node{T}``::

    mutable struct Node{T} <: AbstractExpressionNode{T}
        degree::UInt8    # 0 leaf, 1 unary, 2 binary
        constant::Bool   # leaf: a constant (val) or a feature
        val::T
        feature::UInt16
        op::UInt8
        l::Node{T}
        r::Node{T}
    end

as the :class:`Node` jitclass (``l`` and ``r`` are ``optional(node_type)``,
``None`` where Julia leaves them undefined; ``feature`` and ``op`` are 0-based).
The evaluator is the same generated code (``@nif`` if-chains over the
operators, the fused kernels of ``fuse_level = 2``), recursing through
``tree.l`` / ``tree.r`` instead of child indices, as the Julia code does.

The gradient of ``loss(root, X) = sum(eval_tree_array(root, X)[0])`` with
respect to every node's ``val`` (only the constants' matter) and to ``X`` is
taken with ``autodiff(Reverse, loss, Duplicated(root, zeros_like(root)),
Duplicated(X, dX))``: the shadow tree ``zeros_like(root)`` is a tree of the same
shape whose ``val`` fields receive the derivatives (:func:`node_gradients`,
read back in preorder by :func:`node_values`).

Numba note: ``tree.l`` has type ``Optional(Node)``, the root ``Node``, so Numba
compiles each recursive function twice (once per type), and every field access
through an optional reference carries a ``None`` check; a Numba user writing
this naturally gets exactly that, and so does enzpy.

Everything that does not depend on the tree encoding (the operators,
``operator_set``, ``_nif``, ``random_tree``, ``pick_tree``, ``tree_string``,
``eval_tree_reference``, ``fill_similar``, ``deg1_eval``, ``deg2_eval``, ...) is
imported from :mod:`dynamic_expressions`.

Run ``python examples/dynamic_expressions_nodes.py`` (options: ``--k 2
--fuse-level 1 --nodes 15 --n 50``); it checks the gradient against the
array-encoded port's and against central differences, and exits with status
1 if they disagree.
"""
from __future__ import annotations

import linecache
import math
import os
import sys
import time

import numba
import numpy as np
from numba import njit, types
from numba.experimental import jitclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dynamic_expressions as de  # noqa: E402  (imports enzpy before anything is compiled)

import enzpy  # noqa: E402
from enzpy import Duplicated, Reverse, autodiff, zeros_like  # noqa: E402

fill_similar = de.fill_similar
is_bad_array = de.is_bad_array
deg1_eval = de.deg1_eval
deg2_eval = de.deg2_eval

# ---------------------------------------------------------------------------
# Node{T} (Node.jl)
# ---------------------------------------------------------------------------

node_type = numba.deferred_type()


@jitclass([
    ("degree", types.int64),
    ("constant", types.boolean),
    ("val", types.float64),
    ("feature", types.int64),
    ("op", types.int64),
    ("l", types.optional(node_type)),
    ("r", types.optional(node_type)),
])
class Node:
    """One node of an expression tree: a leaf (``degree`` 0: the constant
    ``val`` if ``constant``, else the feature ``feature``), a unary (``degree``
    1: ``op`` applied to ``l``) or a binary node (``degree`` 2: ``op(l, r)``)."""

    def __init__(self, degree, constant, val, feature, op):
        self.degree = degree
        self.constant = constant
        self.val = val
        self.feature = feature
        self.op = op
        self.l = None
        self.r = None


node_type.define(Node.class_type.instance_type)


def constant_node(val):
    return Node(0, True, float(val), 0, 0)


def feature_node(feature):
    return Node(0, False, 0.0, int(feature), 0)


def unary_node(op, l):
    n = Node(1, False, 0.0, 0, int(op))
    n.l = l
    return n


def binary_node(op, l, r):
    n = Node(2, False, 0.0, 0, int(op))
    n.l = l
    n.r = r
    return n


def nodes_from_tree(tree):
    """The linked :class:`Node` tree of an array-encoded :class:`dynamic_expressions.Tree`
    (node ``i`` of the array tree is the ``i``-th node of the result in preorder)."""
    def build(i):
        n = Node(int(tree.degree[i]), bool(tree.constant[i]), float(tree.val[i]),
                 int(tree.feature[i]), int(tree.op[i]))
        if tree.degree[i] >= 1:
            n.l = build(int(tree.left[i]))
        if tree.degree[i] == 2:
            n.r = build(int(tree.right[i]))
        return n

    order = preorder_indices(tree)
    if order != list(range(len(tree.degree))):
        raise ValueError("the array tree's nodes are not in preorder")
    return build(0)


def preorder_indices(tree, i=0):
    """The array tree's node indices in preorder (from node ``i``)."""
    out = [i]
    if tree.degree[i] >= 1:
        out += preorder_indices(tree, int(tree.left[i]))
    if tree.degree[i] == 2:
        out += preorder_indices(tree, int(tree.right[i]))
    return out


def preorder(root):
    """The nodes of the tree, in preorder (a list of :class:`Node`, views of the
    same objects: setting ``.val`` on one changes the tree)."""
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        out.append(n)
        if n.degree == 2:
            stack.append(n.r)
        if n.degree >= 1:
            stack.append(n.l)
    return out


def node_values(root):
    """``val`` of every node, in preorder (for a shadow tree: d loss / d val)."""
    return np.array([n.val for n in preorder(root)], dtype=np.float64)


def node_string(root, operators):
    """The expression as a string, like :func:`dynamic_expressions.tree_string`."""
    d = root.degree
    if d == 0:
        return f"{root.val:.4g}" if root.constant else f"x{root.feature}"
    if d == 1:
        return f"{de.operator_name(operators.unaops[root.op])}({node_string(root.l, operators)})"
    return (f"{de.operator_name(operators.binops[root.op])}("
            f"{node_string(root.l, operators)}, {node_string(root.r, operators)})")


# ---------------------------------------------------------------------------
# EvaluateEquation.jl: the kernels that do not depend on the operator set,
# over nodes (``tree.l``, ``tree.r`` for the children).
# ---------------------------------------------------------------------------


@njit
def is_constant(tree):
    if tree.degree == 0:
        return tree.constant
    elif tree.degree == 1:
        return is_constant(tree.l)
    else:
        return is_constant(tree.l) and is_constant(tree.r)


@njit
def deg0_eval(tree, cX):
    if tree.constant:
        return fill_similar(tree.val, cX), True
    else:
        return cX[tree.feature, :].copy(), True


@njit
def deg1_l2_ll0_lr0_eval(tree, cX, op, op_l):
    """op(op_l(x, y)) for x, y constants or variables."""
    l = tree.l
    ll = l.l
    lr = l.r
    if ll.constant and lr.constant:
        val_ll = ll.val
        val_lr = lr.val
        x_l = op_l(val_ll, val_lr)
        x = op(x_l)
        return fill_similar(x, cX), True
    elif ll.constant:
        val_ll = ll.val
        feature_lr = lr.feature
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(val_ll, cX[feature_lr, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True
    elif lr.constant:
        feature_ll = ll.feature
        val_lr = lr.val
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j], val_lr)
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True
    else:
        feature_ll = ll.feature
        feature_lr = lr.feature
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j], cX[feature_lr, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True


@njit
def deg1_l1_ll0_eval(tree, cX, op, op_l):
    """op(op_l(x)) for x a constant or variable."""
    ll = tree.l.l
    if ll.constant:
        val_ll = ll.val
        x_l = op_l(val_ll)
        x = op(x_l)
        return fill_similar(x, cX), True
    else:
        feature_ll = ll.feature
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        for j in range(cX.shape[1]):
            x_l = op_l(cX[feature_ll, j])
            x = op(x_l) if math.isfinite(x_l) else math.inf
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_l0_r0_eval(tree, cX, op):
    """op(x, y) for x and y constants or variables."""
    l = tree.l
    r = tree.r
    if l.constant and r.constant:
        val_l = l.val
        val_r = r.val
        x = op(val_l, val_r)
        return fill_similar(x, cX), True
    elif l.constant:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        val_l = l.val
        feature_r = r.feature
        for j in range(cX.shape[1]):
            x = op(val_l, cX[feature_r, j])
            cumulator[j] = x
        return cumulator, True
    elif r.constant:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        feature_l = l.feature
        val_r = r.val
        for j in range(cX.shape[1]):
            x = op(cX[feature_l, j], val_r)
            cumulator[j] = x
        return cumulator, True
    else:
        cumulator = np.empty(cX.shape[1], dtype=cX.dtype)
        feature_l = l.feature
        feature_r = r.feature
        for j in range(cX.shape[1]):
            x = op(cX[feature_l, j], cX[feature_r, j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_l0_eval(tree, cumulator, cX, op):
    """op(x, y) for x a constant or variable, y arbitrary (already in ``cumulator``)."""
    l = tree.l
    if l.constant:
        v = l.val
        for j in range(cumulator.shape[0]):
            x = op(v, cumulator[j])
            cumulator[j] = x
        return cumulator, True
    else:
        f = l.feature
        for j in range(cumulator.shape[0]):
            x = op(cX[f, j], cumulator[j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg2_r0_eval(tree, cumulator, cX, op):
    """op(x, y) for x arbitrary (already in ``cumulator``), y a constant or variable."""
    r = tree.r
    if r.constant:
        v = r.val
        for j in range(cumulator.shape[0]):
            x = op(cumulator[j], v)
            cumulator[j] = x
        return cumulator, True
    else:
        f = r.feature
        for j in range(cumulator.shape[0]):
            x = op(cumulator[j], cX[f, j])
            cumulator[j] = x
        return cumulator, True


@njit
def deg0_eval_constant(tree):
    output = tree.val
    out = np.empty(1)
    out[0] = output
    return out, True


_KERNELS = dict(
    math=math, np=np, fill_similar=fill_similar, is_bad_array=is_bad_array,
    is_constant=is_constant, deg0_eval=deg0_eval, deg1_eval=deg1_eval, deg2_eval=deg2_eval,
    deg1_l2_ll0_lr0_eval=deg1_l2_ll0_lr0_eval, deg1_l1_ll0_eval=deg1_l1_ll0_eval,
    deg2_l0_r0_eval=deg2_l0_r0_eval, deg2_l0_eval=deg2_l0_eval, deg2_r0_eval=deg2_r0_eval,
    deg0_eval_constant=deg0_eval_constant,
)

# ---------------------------------------------------------------------------
# The generated part (the @generated functions of EvaluateEquation.jl).
# ---------------------------------------------------------------------------

_nif = de._nif


def node_evaluator_source(nbin, nuna):
    """Python source of the node evaluator for ``nbin`` binary and ``nuna`` unary
    operators (globals ``BINOPS_i`` / ``UNAOPS_i`` and ``fuse_level``, supplied by
    :func:`build_node_evaluator`)."""
    L = []
    w = L.append

    # _eval_tree_array ----------------------------------------------------
    def unary_branch(i):
        fused_bin = _nif(nbin, lambda j: f"l_op_idx == {j}",
                         lambda j: [f"return deg1_l2_ll0_lr0_eval(tree, cX, op, BINOPS_{j})"],
                         0)
        fused_una = _nif(nuna, lambda j: f"l_op_idx == {j}",
                         lambda j: [f"return deg1_l1_ll0_eval(tree, cX, op, UNAOPS_{j})"],
                         0)
        return ([f"op = UNAOPS_{i}",
                 "if fuse_level > 1 and tree.l.degree == 2 and tree.l.l.degree == 0 "
                 "and tree.l.r.degree == 0:",
                 "    # op(op2(x, y)), where x, y are constants or variables.",
                 "    l_op_idx = tree.l.op"]
                + ["    " + s for s in fused_bin]
                + ["elif fuse_level > 1 and tree.l.degree == 1 and tree.l.l.degree == 0:",
                   "    # op(op2(x)), where x is a constant or variable.",
                   "    l_op_idx = tree.l.op"]
                + ["    " + s for s in fused_una]
                + ["else:",
                   "    # op(x), for any x.",
                   "    result, ok = _eval_tree_array(tree.l, cX)",
                   "    if not ok:",
                   "        return result, ok",
                   "    return deg1_eval(result, op)"])

    def binary_branch(i):
        return [f"op = BINOPS_{i}",
                "if fuse_level > 1 and tree.l.degree == 0 and tree.r.degree == 0:",
                "    return deg2_l0_r0_eval(tree, cX, op)",
                "elif tree.r.degree == 0:",
                "    result_l, ok_l = _eval_tree_array(tree.l, cX)",
                "    if not ok_l:",
                "        return result_l, ok_l",
                "    # op(x, y), where y is a constant or variable but x is not.",
                "    return deg2_r0_eval(tree, result_l, cX, op)",
                "elif tree.l.degree == 0:",
                "    result_r, ok_r = _eval_tree_array(tree.r, cX)",
                "    if not ok_r:",
                "        return result_r, ok_r",
                "    # op(x, y), where x is a constant or variable but y is not.",
                "    return deg2_l0_eval(tree, result_r, cX, op)",
                "else:",
                "    result_l, ok_l = _eval_tree_array(tree.l, cX)",
                "    if not ok_l:",
                "        return result_l, ok_l",
                "    result_r, ok_r = _eval_tree_array(tree.r, cX)",
                "    if not ok_r:",
                "        return result_r, ok_r",
                "    # op(x, y), for any x or y",
                "    return deg2_eval(result_l, result_r, op)"]

    w("def _eval_tree_array(tree, cX):")
    w("    # First, we see if there are only constants in the tree - meaning")
    w("    # we can just return the constant result.")
    w("    if tree.degree == 0:")
    w("        return deg0_eval(tree, cX)")
    w("    elif is_constant(tree):")
    w("        # Speed hack for constant trees.")
    w("        const_x, const_ok = _eval_constant_tree(tree)")
    w("        if not const_ok:")
    w("            return np.empty(cX.shape[1], dtype=cX.dtype), False")
    w("        return fill_similar(const_x[0], cX), True")
    w("    elif tree.degree == 1:")
    w("        op_idx = tree.op")
    L.extend(_nif(nuna, lambda i: f"op_idx == {i}", unary_branch, 8))
    w("    else:")
    w("        op_idx = tree.op")
    L.extend(_nif(nbin, lambda i: f"op_idx == {i}", binary_branch, 8))
    w("")

    # _eval_constant_tree, deg1_eval_constant, deg2_eval_constant ----------
    w("def _eval_constant_tree(tree):")
    w("    op_idx = tree.op")
    w("    if tree.degree == 0:")
    w("        return deg0_eval_constant(tree)")
    w("    elif tree.degree == 1:")
    L.extend(_nif(nuna, lambda i: f"op_idx == {i}",
                  lambda i: [f"return deg1_eval_constant(tree, UNAOPS_{i})"], 8))
    w("    else:")
    L.extend(_nif(nbin, lambda i: f"op_idx == {i}",
                  lambda i: [f"return deg2_eval_constant(tree, BINOPS_{i})"], 8))
    w("")
    w("def deg1_eval_constant(tree, op):")
    w("    result, ok = _eval_constant_tree(tree.l)")
    w("    if not ok:")
    w("        return result, ok")
    w("    output = op(result[0])")
    w("    out = np.empty(1)")
    w("    out[0] = output")
    w("    return out, math.isfinite(output)")
    w("")
    w("def deg2_eval_constant(tree, op):")
    w("    cumulator, ok = _eval_constant_tree(tree.l)")
    w("    if not ok:")
    w("        return cumulator, ok")
    w("    result_r, ok_r = _eval_constant_tree(tree.r)")
    w("    if not ok_r:")
    w("        return result_r, ok_r")
    w("    output = op(cumulator[0], result_r[0])")
    w("    out = np.empty(1)")
    w("    out[0] = output")
    w("    return out, math.isfinite(output)")
    w("")

    # eval_tree_array and the losses ---------------------------------------
    w("def eval_tree_array(tree, cX):")
    w("    result, ok = _eval_tree_array(tree, cX)")
    w("    return result, ok and not is_bad_array(result)")
    w("")
    w("def loss(root, X):")
    w("    # the MWE's f, returning the value: sum(eval_tree_array(tree, X, operators)[1])")
    w("    return np.sum(eval_tree_array(root, X)[0])")
    w("")
    w("def predict(root, X):")
    w("    return eval_tree_array(root, X)")
    return "\n".join(L) + "\n"


_GENERATED = ("_eval_tree_array", "_eval_constant_tree", "deg1_eval_constant",
              "deg2_eval_constant", "eval_tree_array", "loss", "predict")
_build_counter = [0]


class NodeEvaluator:
    """The jitted functions generated for one operator set and fuse level.

    * ``loss(root, X)``: ``sum(eval_tree_array(root, X)[0])`` (a float);
    * ``predict(root, X)``: ``(values, ok)``;
    * ``eval_tree_array``, ``_eval_tree_array``, ... : the generated internals;
    * ``source``: the generated Python source.
    """

    def __init__(self, operators, fuse_level, source, namespace):
        self.operators = operators
        self.fuse_level = fuse_level
        self.source = source
        for name in _GENERATED:
            setattr(self, name, namespace[name])

    def __repr__(self):
        b = ", ".join(map(de.operator_name, self.operators.binops))
        u = ", ".join(map(de.operator_name, self.operators.unaops))
        return f"NodeEvaluator(binops=({b}), unaops=({u}), fuse_level={self.fuse_level})"


def build_node_evaluator(k=4, fuse_level=2, operators=None):
    """Generate, exec and ``njit`` the node evaluator for ``operator_set(k)``
    (or ``operators``). Nothing is compiled until the first call; each call
    returns new dispatchers."""
    if fuse_level not in (1, 2):
        raise ValueError("fuse_level must be 1 or 2")
    ops = operators if operators is not None else de.operator_set(k)
    source = node_evaluator_source(len(ops.binops), len(ops.unaops))
    _build_counter[0] += 1
    filename = f"<dynamic_expressions node evaluator {_build_counter[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(_KERNELS, fuse_level=fuse_level)
    namespace.update({f"BINOPS_{i}": f for i, f in enumerate(ops.binops)})
    namespace.update({f"UNAOPS_{i}": f for i, f in enumerate(ops.unaops)})
    exec(compile(source, filename, "exec"), namespace)
    for name in _GENERATED:
        namespace[name] = numba.njit(namespace[name])
    return NodeEvaluator(ops, fuse_level, source, namespace)


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------


def node_gradients(evaluator, root, X, droot=None, dX=None):
    """enzpy gradient of ``evaluator.loss(root, X)`` w.r.t. every node's ``val`` and ``X``.

    Returns ``(value, dX, dval)``, ``dval`` the shadow tree's ``val`` in preorder
    (non-zero only at constants). The shadows ``droot`` (default
    ``zeros_like(root)``) and ``dX`` (default zeros) accumulate, as in Enzyme.
    ``root`` and ``X`` are not modified.
    """
    if droot is None:
        droot = zeros_like(root)
    if dX is None:
        dX = np.zeros_like(X)
    autodiff(Reverse, evaluator.loss, Duplicated(root, droot), Duplicated(X, dX))
    return float(evaluator.loss(root, X)), dX, node_values(droot)


def node_central_difference(evaluator, root, X, what, index, h=1e-5):
    """Central difference of ``evaluator.loss`` w.r.t. ``X[index]`` or the
    ``val`` of node ``index`` (preorder). Restores ``root`` exactly."""
    if what == "X":
        vals = []
        for sign in (1.0, -1.0):
            x = X.copy()
            x[index] += sign * h
            vals.append(evaluator.loss(root, x))
        return (vals[0] - vals[1]) / (2 * h)
    node = preorder(root)[index]
    v = node.val
    try:
        node.val = v + h
        up = evaluator.loss(root, X)
        node.val = v - h
        down = evaluator.loss(root, X)
    finally:
        node.val = v
    return (up - down) / (2 * h)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(
        description="DynamicExpressions.jl MWE over a linked jitclass Node tree, with enzpy")
    parser.add_argument("--k", type=int, default=4, help="k binary + k unary operators")
    parser.add_argument("--fuse-level", type=int, default=2, choices=(1, 2))
    parser.add_argument("--nodes", type=int, default=30, help="nodes of the random tree")
    parser.add_argument("--n", type=int, default=100, help="data points (columns of X)")
    args = parser.parse_args(argv)
    k, fuse_level, n_nodes, n_features, n = args.k, args.fuse_level, args.nodes, 3, args.n
    ops = de.operator_set(k)
    X = np.random.default_rng(2024).standard_normal((n_features, n))
    tree, seed = de.pick_tree(n_nodes, n_features, ops, X)
    root = nodes_from_tree(tree)
    evaluator = build_node_evaluator(k, fuse_level)
    print(f"operators: binary {[de.operator_name(f) for f in ops.binops]}, "
          f"unary {[de.operator_name(f) for f in ops.unaops]}, fuse_level={fuse_level}")
    print(f"tree ({n_nodes} nodes, seed {seed}): {node_string(root, ops)}")
    failures = []
    if node_string(root, ops) != de.tree_string(tree, ops):
        failures.append("the node tree prints differently from the array tree")

    t0 = time.perf_counter()
    value = evaluator.loss(root, X)
    numba_seconds = time.perf_counter() - t0
    ref = de.eval_tree_reference(tree, X, ops).sum()
    print(f"loss = sum(eval_tree_array(root, X)) = {value:.10g} (plain Python: {ref:.10g})")
    if not abs(value - ref) <= 1e-12 * max(1.0, abs(ref)) * n:
        failures.append(f"loss {value!r} != plain Python {ref!r}")
    print(f"Numba compile + first call of the primal: {numba_seconds:.2f} s")

    X_before, vals_before = X.copy(), node_values(root)
    t0 = time.perf_counter()
    _, dX, dval = node_gradients(evaluator, root, X)
    first_grad = time.perf_counter() - t0
    if not (np.array_equal(X, X_before) and np.array_equal(node_values(root), vals_before)):
        failures.append("autodiff modified X or the tree")
    reports = enzpy.build_report(evaluator.loss)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        droot, dX_ = zeros_like(root), np.zeros_like(X)
        autodiff(Reverse, evaluator.loss, Duplicated(root, droot), Duplicated(X, dX_))
    later_grad = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        evaluator.loss(root, X)
    primal = (time.perf_counter() - t0) / reps
    print(f"|dX| = {np.linalg.norm(dX):.10g}, |dval| = {np.linalg.norm(dval):.10g}")

    # the array-encoded port's enzpy gradient
    t0 = time.perf_counter()
    array_evaluator = de.build_evaluator(k, fuse_level)
    a_value, a_dX, a_dval = de.gradients(array_evaluator, tree, X)
    array_seconds = time.perf_counter() - t0
    err_X = np.max(np.abs(dX - a_dX) / np.maximum(1.0, np.abs(a_dX)))
    err_val = np.max(np.abs(dval - a_dval) / np.maximum(1.0, np.abs(a_dval)))
    print(f"array-encoded port: loss {a_value:.10g}; largest relative difference of dX "
          f"{err_X:.1e}, of dval {err_val:.1e}")
    if not abs(value - a_value) <= 1e-12 * max(1.0, abs(a_value)):
        failures.append(f"loss {value!r} != array port's {a_value!r}")
    if not (err_X <= 1e-10 and err_val <= 1e-10):
        failures.append("the gradient differs from the array-encoded port's")

    worst = 0.0
    big = np.unravel_index(int(np.argmax(np.abs(dX))), dX.shape)
    for index in [(0, 0), (1, n // 3), (2, n // 2), (0, n - 1), tuple(map(int, big))]:
        fd = node_central_difference(evaluator, root, X, "X", index)
        err = abs(dX[index] - fd) / max(1.0, abs(fd))
        worst = max(worst, err)
        print(f"  dX{index}: enzpy {dX[index]: .10e}   finite difference {fd: .10e}   "
              f"rel. error {err:.1e}")
    for c, node in enumerate(preorder(root)):
        if node.degree != 0 or not node.constant:
            if dval[c] != 0.0:
                failures.append(f"dval[{c}] = {dval[c]!r} at a node that is not a constant")
            continue
        fd = node_central_difference(evaluator, root, X, "val", c)
        err = abs(dval[c] - fd) / max(1.0, abs(fd))
        worst = max(worst, err)
        print(f"  dval[{c}] (constant {node.val:+.4f}): enzpy {dval[c]: .10e}   "
              f"finite difference {fd: .10e}   rel. error {err:.1e}")
    print(f"largest relative error vs central differences: {worst:.1e}")
    if not worst <= 1e-5:
        failures.append(f"relative error {worst:.1e} vs central differences")

    for r in reports:
        stages = ", ".join(f"{name} {sec:.2f}" for name, sec in r.timings.items())
        print(f"enzpy build: {r.total:.2f} s (excluding Numba's compile) [{stages}]; "
              f"{r.primal_instructions} primal instructions, "
              f"{r.derivative_functions} derivative functions")
    print(f"first autodiff call (build + run): {first_grad:.2f} s")
    print(f"per call: primal {primal * 1e3:.3f} ms, gradient (X and constants, with "
          f"zeros_like(root)) {later_grad * 1e3:.3f} ms")
    print(f"array-encoded port (compile, build and run, for the check): {array_seconds:.2f} s")
    print("cache:", enzpy.cache_info())
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
