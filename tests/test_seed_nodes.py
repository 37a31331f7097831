"""The DynamicExpressions.jl seed over its literal data structure: a linked tree
of ``@jitclass`` nodes with ``optional`` children (examples/dynamic_expressions_nodes.py).

For 1+1 operators at fuse level 1 and 2+2 operators at fuse level 2 (and,
with ``ENZPY_SLOW=1``, the other two combinations), on trees of depth 0 (a
single leaf), 1 and more (hand-written shapes reaching every branch of the
evaluator and the fused kernels, and a random ~10-node tree with several
constants), over X of shape (3, 20):

* the node evaluator's values equal the array-encoded port's and plain Python's;
* ``autodiff(Reverse, loss, Duplicated(root, zeros_like(root)), Duplicated(X, dX))``
  gives, in the shadow tree's ``val`` fields (read in preorder) and in ``dX``,
  the array-encoded port's enzpy gradient (rtol 1e-10) and central differences
  (rtol 1e-5);
* the shadows accumulate (a second call doubles them) and nothing else changes.

Each evaluator is a Numba compile plus an enzpy build (15-60 s on a 2-core
machine, the node evaluator costing about twice the array one: Numba compiles
every recursive function for the root's type ``Node`` and for the children's
``Optional(Node)``), so node and array evaluators are built once per module and
shared by all the trees of their configuration.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

import dynamic_expressions as de  # noqa: E402  (imports enzpy first)
import dynamic_expressions_nodes as den  # noqa: E402
from enzpy import Duplicated, Reverse, autodiff, zeros_like  # noqa: E402

SLOW = bool(os.environ.get("ENZPY_SLOW"))
N_FEATURES, N = 3, 20
# (k, fuse_level): 1+1 operators unfused (no if-chains) and 2+2 operators fused
# (if-chains and every fused kernel) cover k = 1, 2 and fuse levels 1, 2; the
# two mixed configurations add ~40 s of compiling and run with ENZPY_SLOW=1.
CONFIGS = [(1, 1), (2, 2)] + ([(1, 2), (2, 1)] if SLOW else [])

_node_evaluators: dict = {}
_array_evaluators: dict = {}


def node_evaluator(k, fuse_level):
    key = (k, fuse_level)
    if key not in _node_evaluators:
        _node_evaluators[key] = den.build_node_evaluator(k, fuse_level)
    return _node_evaluators[key]


def array_evaluator(k, fuse_level):
    key = (k, fuse_level)
    if key not in _array_evaluators:
        _array_evaluators[key] = de.build_evaluator(k, fuse_level)
    return _array_evaluators[key]


_X = np.random.default_rng(321).standard_normal((N_FEATURES, N))


@pytest.fixture
def X():
    return _X.copy()


def trees(k):
    """Trees over ``operator_set(k)`` (operator indices 0 and k-1), by name."""
    a, b = 0, k - 1
    x0, x1, x2 = ("x", 0), ("x", 1), ("x", 2)
    c = lambda v: ("c", v)  # noqa: E731
    bin_a = lambda l, r: ("b", a, l, r)  # noqa: E731
    bin_b = lambda l, r: ("b", b, l, r)  # noqa: E731
    una_a = lambda l: ("u", a, l)  # noqa: E731
    una_b = lambda l: ("u", b, l)  # noqa: E731
    nested = {
        # depth 0
        "constant_leaf": c(0.7),
        "feature_leaf": x2,
        # depth 1
        "unary_of_constant": una_b(c(-0.4)),
        "binary_constant_feature": bin_b(c(1.3), x1),
        "binary_feature_constant": bin_a(x0, c(-0.6)),
        # deeper: op(op2(c, x)), op(op2(x, x)), op(op1(c)), op(op1(x)), binary
        # expr-leaf, leaf-expr, expr-expr, a constant subtree
        "all_shapes": bin_a(
            bin_b(una_a(bin_b(c(0.4), x1)), una_b(bin_a(x0, x2))),
            bin_a(bin_b(c(0.2), una_a(una_b(x0))),
                  bin_b(una_b(una_a(c(0.3))), una_a(bin_a(c(0.5), c(-1.2)))))),
        "deep_unary_chain": una_a(una_b(una_a(una_b(bin_a(x1, c(0.1)))))),
    }
    out = {name: de.tree_from_nested(e) for name, e in nested.items()}
    tree, _ = de.pick_tree(10, N_FEATURES, de.operator_set(k), _X, seed=10 * k,
                           min_constants=3)
    out["random_10"] = tree
    return out


TREE_NAMES = list(trees(1))
_trees = {k: trees(k) for k in (1, 2)}


def test_trees_have_the_advertised_shapes():
    for k in (1, 2):
        t = _trees[k]
        assert t["constant_leaf"].degree.shape == (1,)
        assert t["binary_constant_feature"].degree.tolist() == [2, 0, 0]
        r = t["random_10"]
        assert r.degree.shape == (10,)
        assert ((r.degree == 0) & (r.constant == 1)).sum() >= 3


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("name", TREE_NAMES)
def test_nodes_from_tree(k, name):
    """The linked tree is the array tree, node for node in preorder."""
    tree = _trees[k][name]
    ops = de.operator_set(k)
    root = den.nodes_from_tree(tree)
    nodes = den.preorder(root)
    assert len(nodes) == tree.degree.shape[0]
    for i, n in enumerate(nodes):
        assert (n.degree, n.constant, n.val, n.feature, n.op) == (
            tree.degree[i], bool(tree.constant[i]), tree.val[i], tree.feature[i], tree.op[i])
        assert (n.l is None) == (tree.degree[i] < 1)
        assert (n.r is None) == (tree.degree[i] < 2)
    np.testing.assert_array_equal(den.node_values(root), tree.val)
    assert den.node_string(root, ops) == de.tree_string(tree, ops)
    shadow = zeros_like(root)
    snodes = den.preorder(shadow)
    assert [(s.degree, s.constant, s.feature, s.op) for s in snodes] == \
        [(n.degree, n.constant, n.feature, n.op) for n in nodes]
    assert not den.node_values(shadow).any()


@pytest.mark.parametrize("name", TREE_NAMES)
@pytest.mark.parametrize("k,fuse_level", CONFIGS)
def test_value(k, fuse_level, name, X):
    tree = _trees[k][name]
    ev = node_evaluator(k, fuse_level)
    root = den.nodes_from_tree(tree)
    values, ok = ev.predict(root, X)
    assert ok
    ref = de.eval_tree_reference(tree, X, ev.operators)
    np.testing.assert_allclose(values, ref, rtol=1e-13, atol=1e-13)
    a_values, a_ok = array_evaluator(k, fuse_level).predict(*tree, X)
    assert a_ok
    np.testing.assert_array_equal(values, a_values)
    loss = ev.loss(root, X)
    assert isinstance(loss, float)
    assert loss == de.loss_value(array_evaluator(k, fuse_level), tree, X)


def central_differences(ev, root, X, h=1e-5):
    n_nodes = len(den.preorder(root))
    fd_X = np.zeros_like(X)
    for idx in np.ndindex(*X.shape):
        fd_X[idx] = den.node_central_difference(ev, root, X, "X", idx, h)
    fd_val = np.array([den.node_central_difference(ev, root, X, "val", i, h)
                       for i in range(n_nodes)])
    return fd_X, fd_val


@pytest.mark.parametrize("name", TREE_NAMES)
@pytest.mark.parametrize("k,fuse_level", CONFIGS)
def test_gradient(k, fuse_level, name, X):
    tree = _trees[k][name]
    ev = node_evaluator(k, fuse_level)
    root = den.nodes_from_tree(tree)
    X_before, vals_before = X.copy(), den.node_values(root)

    value, dX, dval = den.node_gradients(ev, root, X)
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(den.node_values(root), vals_before)
    assert dval.shape == tree.val.shape

    # the array-encoded port's enzpy gradient
    a_value, a_dX, a_dval = de.gradients(array_evaluator(k, fuse_level), tree, X)
    assert value == a_value
    scale = 1e-14 * (1.0 + abs(value))
    np.testing.assert_allclose(dX, a_dX, rtol=1e-10, atol=scale)
    np.testing.assert_allclose(dval, a_dval, rtol=1e-10, atol=scale)
    # only the constants' val matters
    not_constant = (tree.degree != 0) | (tree.constant == 0)
    assert not dval[not_constant].any()

    # central differences, through the node tree
    fd_X, fd_val = central_differences(ev, root, X)
    np.testing.assert_array_equal(den.node_values(root), vals_before)
    np.testing.assert_allclose(dX, fd_X, rtol=1e-5, atol=1e-7 * (1.0 + abs(value)))
    np.testing.assert_allclose(dval, fd_val, rtol=1e-5, atol=1e-7 * (1.0 + abs(value)))


@pytest.mark.parametrize("k,fuse_level", CONFIGS[:2])
def test_shadow_tree_accumulates(k, fuse_level, X):
    tree = _trees[k]["random_10"]
    ev = node_evaluator(k, fuse_level)
    root = den.nodes_from_tree(tree)
    droot, dX = zeros_like(root), np.zeros_like(X)
    autodiff(Reverse, ev.loss, Duplicated(root, droot), Duplicated(X, dX))
    once_val, once_X = den.node_values(droot), dX.copy()
    assert np.abs(once_val).max() > 0 and np.abs(once_X).max() > 0
    autodiff(Reverse, ev.loss, Duplicated(root, droot), Duplicated(X, dX))
    np.testing.assert_allclose(den.node_values(droot), 2 * once_val, rtol=1e-15)
    np.testing.assert_allclose(dX, 2 * once_X, rtol=1e-15)
    # node_gradients adds into given shadows too
    _, _, thrice_val = den.node_gradients(ev, root, X, droot=droot, dX=dX)
    np.testing.assert_allclose(thrice_val, 3 * once_val, rtol=1e-15)
    np.testing.assert_allclose(dX, 3 * once_X, rtol=1e-15)
    # the shadow tree's structure (ints, bools, children) is left as it was
    assert [(s.degree, s.constant, s.feature, s.op) for s in den.preorder(droot)] == \
        [(n.degree, n.constant, n.feature, n.op) for n in den.preorder(root)]
