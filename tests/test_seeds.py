"""Seed workloads: the DynamicExpressions.jl evaluator and the JAX scan MWE.

Both ports live in ``examples/``; their enzpy gradients are checked against
central finite differences. Every tree evaluator is a fresh Numba compile (and
enzpy build) of 20-40 s on a 2-core machine, so evaluators are built once per
module and each is differentiated with ``val`` and ``X`` both ``Duplicated``
(one enzpy build per evaluator). The 4+4-operator evaluator at fuse level 2
(the MWE's own configuration, ~2 minutes; ``python examples/dynamic_expressions.py``
runs it too) only runs with ``ENZPY_SLOW=1``.

The last tests are minimal reproducers of enzpy bugs met while porting.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

import dynamic_expressions as de  # noqa: E402  (imports enzpy first)
import scan as scan_example  # noqa: E402
from enzpy import Active, Const, Duplicated, Reverse, autodiff  # noqa: E402
from helpers import check_reverse  # noqa: E402

SLOW = bool(os.environ.get("ENZPY_SLOW"))
N_FEATURES, N = 3, 100

# ---------------------------------------------------------------------------
# DynamicExpressions
# ---------------------------------------------------------------------------

_evaluators: dict = {}


def evaluator(k, fuse_level):
    key = (k, fuse_level)
    if key not in _evaluators:
        _evaluators[key] = de.build_evaluator(k, fuse_level)
    return _evaluators[key]


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(123).standard_normal((N_FEATURES, N))


def hand_written_trees():
    """Trees over 2+2 operators (indices valid for every operator set) covering
    each branch of ``_eval_tree_array`` and of the fused kernels."""
    x0, x1, x2 = ("x", 0), ("x", 1), ("x", 2)
    c = lambda v: ("c", v)  # noqa: E731
    add = lambda a, b: ("b", 0, a, b)  # noqa: E731
    sub = lambda a, b: ("b", 1, a, b)  # noqa: E731
    cos = lambda a: ("u", 0, a)  # noqa: E731
    sin = lambda a: ("u", 1, a)  # noqa: E731
    return {
        "feature_leaf": x1,
        "constant_leaf": c(0.7),
        "unary_of_feature": sin(x2),
        "unary_of_constant": cos(c(0.3)),
        "mwe_x1_plus_cos_x2": add(x0, cos(x1)),
        "unary_binary_ff": cos(sub(x0, x2)),
        "unary_binary_cf": sin(add(c(0.4), x1)),
        "unary_binary_fc": cos(sub(x2, c(-1.1))),
        "unary_unary_f": sin(cos(x0)),
        "binary_ff_fc_cf": sub(add(x0, c(0.5)), add(c(1.5), x2)),
        "binary_expr_leaf": add(sin(sub(x0, x1)), x2),
        "binary_leaf_expr": sub(c(0.2), cos(sin(cos(x1)))),
        "binary_expr_expr": add(cos(add(x0, x1)), sin(sin(x2))),
        "constant_subtrees": sub(cos(add(c(0.5), c(-1.2))),
                                 add(sin(cos(x0)), sin(sin(c(0.3))))),
        "deep_unary_chain": cos(sin(cos(sin(cos(add(x0, c(0.1))))))),
    }


def random_trees(k):
    """Random trees of several sizes (fixed seeds) over ``operator_set(k)``."""
    ops = de.operator_set(k)
    trees = {}
    for n_nodes, seed in [(1, 3), (2, 4), (3, 5), (7, 6), (15, 7), (30, 8), (30, 9)]:
        rng = np.random.default_rng(1000 * k + seed)
        trees[f"random_{n_nodes}_seed{seed}"] = de.random_tree(n_nodes, N_FEATURES, ops, rng)
    return trees


def richardson(ev, tree, X, what, index, loss, h):
    """Central difference with one Richardson step (error O(h^4))."""
    d1 = de.central_difference(ev, tree, X, what, index, h, loss)
    d2 = de.central_difference(ev, tree, X, what, index, h / 2, loss)
    return (4 * d2 - d1) / 3


def tol(fd, value):
    return 1e-6 * (1 + np.abs(fd)) + 1e-9 * abs(value)


def finite_difference(got, value, ev, tree, X, what, index, loss):
    """A Richardson-extrapolated central difference at h = 2e-5; where it
    disagrees with ``got``, again at h = 2e-6, whose error is ~1e-4 of the
    difference between the two estimates (some random trees, e.g. with
    cos(exp(x^2) ...), have derivatives of higher order so large that the first
    estimate is off by 1e-3 relative)."""
    d1 = richardson(ev, tree, X, what, index, loss, 2e-5)
    if abs(got - d1) <= tol(d1, value):
        return d1
    d2 = richardson(ev, tree, X, what, index, loss, 2e-6)
    if abs(got - d2) <= tol(d2, value) + 1e-3 * abs(d1 - d2):
        return got
    return d2


def check_tree(ev, tree, X, loss="loss"):
    ops = ev.operators
    n_nodes = tree.degree.shape[0]
    values, ok = ev.predict(*tree, X)
    ref = de.eval_tree_reference(tree, X, ops)
    np.testing.assert_allclose(values, ref, rtol=1e-12, atol=1e-12)
    assert ok
    # finite differences only mean something with moderate values
    assert np.max(np.abs(values)) < 1e6, de.tree_string(tree, ops)

    X_before, tree_before = X.copy(), de.Tree(*(a.copy() for a in tree))
    value, dX, dval = de.gradients(ev, tree, X, loss=loss)
    np.testing.assert_array_equal(X, X_before)
    for a, b in zip(tree, tree_before):
        np.testing.assert_array_equal(a, b)
    assert value == pytest.approx(de.loss_value(ev, tree, X, loss), rel=1e-14)

    fd_X = np.zeros_like(X)
    for idx in np.ndindex(*X.shape):
        fd_X[idx] = finite_difference(dX[idx], value, ev, tree, X, "X", idx, loss)
    bad = np.abs(dX - fd_X) > tol(fd_X, value)
    assert not bad.any(), (
        f"{de.tree_string(tree, ops)}: dX differs from central differences at "
        f"{np.argwhere(bad)[:5].tolist()}: enzpy {dX[bad][:5]}, fd {fd_X[bad][:5]}")
    fd_val = np.array([finite_difference(dval[i], value, ev, tree, X, "val", i, loss)
                       for i in range(n_nodes)])
    bad = np.abs(dval - fd_val) > tol(fd_val, value)
    assert not bad.any(), (
        f"{de.tree_string(tree, ops)}: dval differs from central differences at "
        f"{np.flatnonzero(bad).tolist()}: enzpy {dval[bad]}, fd {fd_val[bad]}")
    # only constant leaves have a derivative
    assert not dval[(tree.degree != 0) | (tree.constant == 0)].any()
    return dX, dval


_slow = pytest.mark.skipif(not SLOW, reason="a 2-3 minute Numba compile; set ENZPY_SLOW=1")
CONFIGS = [(2, 1), (2, 2), (4, 1),
           pytest.param(4, 2, marks=_slow),      # the MWE's configuration
           pytest.param(8, 1, marks=_slow)]


@pytest.mark.parametrize("k, fuse_level", CONFIGS)
def test_tree_gradients_hand_written(k, fuse_level, X):
    ev = evaluator(k, fuse_level)
    for name, expr in hand_written_trees().items():
        tree = de.tree_from_nested(expr)
        try:
            check_tree(ev, tree, X)
        except AssertionError as e:
            raise AssertionError(f"tree {name}: {e}") from None


@pytest.mark.parametrize("k, fuse_level", CONFIGS)
def test_tree_gradients_random(k, fuse_level, X):
    ev = evaluator(k, fuse_level)
    for name, tree in random_trees(k).items():
        try:
            check_tree(ev, tree, X)
        except AssertionError as e:
            raise AssertionError(f"tree {name}: {e}") from None


def test_mwe_tree_analytic(X):
    """x1 + cos(x2) (the MWE's tree): d/dX[0] = 1, d/dX[1] = -sin(X[1])."""
    tree = de.tree_from_nested(("b", 0, ("x", 0), ("u", 0, ("x", 1))))
    for fuse_level in (1, 2):
        _, dX, dval = de.gradients(evaluator(2, fuse_level), tree, X)
        np.testing.assert_allclose(dX[0], 1.0, rtol=1e-15)
        np.testing.assert_allclose(dX[1], -np.sin(X[1]), rtol=1e-13)
        assert not dX[2].any() and not dval.any()


def test_fuse_levels_agree(X):
    tree = random_trees(2)["random_30_seed8"]
    g1 = de.gradients(evaluator(2, 1), tree, X)
    g2 = de.gradients(evaluator(2, 2), tree, X)
    assert g1[0] == pytest.approx(g2[0], rel=1e-13)
    np.testing.assert_allclose(g1[1], g2[1], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g1[2], g2[2], rtol=1e-12, atol=1e-13)


def test_sum_of_squares_loss(X):
    ev = evaluator(2, 2)
    for name in ["random_15_seed7", "random_30_seed9"]:
        check_tree(ev, random_trees(2)[name], X, loss="loss_sumsq")


def test_gradients_accumulate(X):
    """Shadows accumulate (dX += ...), as in Enzyme."""
    ev = evaluator(2, 1)
    tree = random_trees(2)["random_15_seed7"]
    _, dX, dval = de.gradients(ev, tree, X)
    dX2, dval2 = np.ones_like(X), np.ones_like(tree.val)
    args = [Const(a) for a in tree]
    args[2] = Duplicated(tree.val, dval2)
    autodiff(Reverse, ev.loss, *args, Duplicated(X, dX2), Duplicated(np.zeros(1), np.ones(1)))
    np.testing.assert_allclose(dX2, 1.0 + dX, rtol=1e-14)
    np.testing.assert_allclose(dval2, 1.0 + dval, rtol=1e-14)


def test_every_operator_is_differentiable():
    """All 16+16 operators (the 8+8 and 16+16 sets are too slow to compile as
    evaluators here), as scalar functions."""
    for op in de.UNARY_OPERATORS:
        for x in (-1.3, 0.2, 0.9):
            check_reverse(op, [Active(x)])
    for op in de.BINARY_OPERATORS:
        for a, b in ((-1.3, 0.4), (0.2, -0.7), (0.9, 1.6)):
            check_reverse(op, [Active(a), Active(b)])


def test_random_tree_sizes_and_operator_sets():
    for k in (2, 4, 8, 16):
        ops = de.operator_set(k)
        assert len(ops.binops) == len(ops.unaops) == k
        names = [de.operator_name(f) for f in ops.binops + ops.unaops]
        assert len(set(names)) == 2 * k
        rng = np.random.default_rng(k)
        for n in (1, 2, 3, 10, 31):
            tree = de.random_tree(n, N_FEATURES, ops, rng)
            assert tree.degree.shape == (n,)
            # a valid preorder tree: children after the parent, every node reached once
            seen = [0]
            stack = [0]
            while stack:
                i = stack.pop()
                kids = [tree.left[i], tree.right[i]][:tree.degree[i]]
                assert all(c > i for c in kids)
                seen += kids
                stack += kids
            assert sorted(seen) == list(range(n))
            assert (tree.op[tree.degree == 1] < k).all() and (tree.op[tree.degree == 2] < k).all()


# ---------------------------------------------------------------------------
# scan
# ---------------------------------------------------------------------------


def fd_scan(fn, s0, *rest, h=1e-6):
    g = np.zeros_like(s0)
    for i in range(s0.shape[0]):
        up, down = s0.copy(), s0.copy()
        up[i] += h
        down[i] -= h
        g[i] = (fn(up, *rest) - fn(down, *rest)) / (2 * h)
    return g


@pytest.mark.parametrize("T", [1, 2, 80])
def test_scan_gradient(T):
    s0 = np.ones(2)
    value, ds0 = scan_example.gradient(s0, T)
    assert np.all(s0 == 1.0)
    assert value == scan_example.f(s0, T)
    np.testing.assert_allclose(ds0, fd_scan(scan_example.f, s0, T), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("T", [0, 1, 80])
def test_scan_hand_written_adjoint(T):
    # the benchmarks' reference (scan.hand_gradient) agrees with enzpy
    s0 = np.array([0.9, 1.2])
    value, ds0 = scan_example.gradient(s0, T)
    ds_hand = np.zeros(2)
    assert scan_example.hand_gradient(s0, T, ds_hand) == pytest.approx(value, rel=1e-14)
    np.testing.assert_allclose(ds_hand, ds0, rtol=1e-12, atol=1e-15)


def test_scan_first_step_analytic():
    # T=1: exp_val = (1 + 2) * s[0], so df/ds0 = (3, 0)
    value, ds0 = scan_example.gradient(np.array([0.7, 1.3]), 1)
    assert value == pytest.approx(2.1, rel=1e-15)
    np.testing.assert_allclose(ds0, [3.0, 0.0], rtol=1e-15)


@pytest.mark.parametrize("T", [2, 80])
def test_scan_random_point(T):
    rng = np.random.default_rng(T)
    s0, ys = rng.uniform(0.5, 1.5, 2), rng.uniform(0.5, 1.5, T)
    ds0 = np.zeros(2)
    autodiff(Reverse, scan_example.scan_loss, Duplicated(s0, ds0), Const(ys))
    np.testing.assert_allclose(ds0, fd_scan(scan_example.scan_loss, s0, ys),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("s0, ys", [
    ([-1.42, -1.13], [0.51, 0.44]),                       # step 1 clipped
    ([0.5, 1.38], [1.28, 0.74, 1.08, -0.76, -1.08, 0.51]),  # 2 of 6 steps clipped
])
def test_scan_with_active_clip(s0, ys):
    s0, ys = np.array(s0), np.array(ys)
    ds0 = np.zeros(2)
    autodiff(Reverse, scan_example.scan_loss, Duplicated(s0, ds0), Const(ys))
    assert np.isfinite(scan_example.scan_loss(s0, ys))
    np.testing.assert_allclose(ds0, fd_scan(scan_example.scan_loss, s0, ys),
                               rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------
# enzpy bugs met while porting (minimal reproducers; expected to pass once fixed)
# ---------------------------------------------------------------------------


@njit
def _rec_copy(i, n, X):
    if i == n:
        return X[i, :].copy()
    return _rec_copy(i + 1, n, X)


@njit
def _sum_rec_copy_literal_start(n, X):
    # the literal 0 makes Numba compile _rec_copy for (Literal[int](0), int64, array),
    # which then calls the (int64, int64, array) specialisation of itself
    return np.sum(_rec_copy(0, n, X))


def test_bug_recursion_into_other_specialisation_memcpy():
    X = np.arange(6.0).reshape(3, 2)
    dX = np.zeros_like(X)
    autodiff(Reverse, _sum_rec_copy_literal_start, Const(2), Duplicated(X, dX))
    np.testing.assert_array_equal(dX, [[0, 0], [0, 0], [1, 1]])


def test_bug_recursive_function_compiled_before_enzpy_import():
    script = textwrap.dedent("""
        from numba import njit

        @njit
        def power(x, n):
            if n <= 0:
                return 1.0
            return x * power(x, n - 1)

        power(1.5, 3)          # compiled before enzpy is imported
        from enzpy import Active, Const, Reverse, autodiff
        (dx, _), = autodiff(Reverse, power, Active(1.5), Const(3))
        assert abs(dx - 3 * 1.5 ** 2) < 1e-12, dx
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-1500:]
