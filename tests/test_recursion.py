"""Calls, recursion and the memoized per-function derivative cache."""
import gc
import math
import os
import sys

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff


def scalar_fd(f, args, i, h=1e-6):
    up, down = list(args), list(args)
    up[i] += h
    down[i] -= h
    return (f(*up) - f(*down)) / (2 * h)


def array_fd(f, args, wrt, h=1e-6):
    grad = np.zeros(args[wrt].shape)
    for idx in np.ndindex(*grad.shape):
        vals = []
        for sign in (1, -1):
            trial = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            trial[wrt][idx] += sign * h
            vals.append(f(*trial))
        grad[idx] = (vals[0] - vals[1]) / (2 * h)
    return grad


# -- calls with mixed activity -------------------------------------------------
@njit
def blend(x, y, w):
    return w * math.sin(x) + (1.0 - w) * math.cos(y) * x


@njit
def calls_mixed(x, y):
    a = blend(x, y, 0.3)          # both active
    b = blend(x, 2.0, 0.5)        # only x active
    c = blend(1.5, y, x)          # x enters through the weight
    d = blend(0.1, 0.2, 0.7)      # inactive call
    return a * b + c + d


@pytest.mark.parametrize("x, y", [(0.4, 0.9), (-1.2, 0.3)])
def test_calls_with_mixed_activity(x, y):
    (dx, dy), value = autodiff(ReverseWithPrimal, calls_mixed, Active(x), Active(y))
    assert value == pytest.approx(calls_mixed(x, y))
    assert dx == pytest.approx(scalar_fd(calls_mixed, [x, y], 0), rel=1e-6)
    assert dy == pytest.approx(scalar_fd(calls_mixed, [x, y], 1), rel=1e-6)


# -- self recursion ------------------------------------------------------------
@njit
def rpow(x, n):
    if n == 0:
        return 1.0
    return x * rpow(x, n - 1)


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_self_recursion_depths(n):
    (dx, dn), value = autodiff(ReverseWithPrimal, rpow, Active(1.1), Const(n))
    assert dn is None
    assert value == pytest.approx(1.1 ** n)
    assert dx == pytest.approx(n * 1.1 ** (n - 1) if n else 0.0, rel=1e-12)


@njit
def damped(x, n):
    if n == 0:
        return x
    return damped(x, n - 1) * 0.9999 + 1e-4 * math.sin(x)


def test_recursion_depth_100000():
    (dx, _), value = autodiff(ReverseWithPrimal, damped, Active(0.3), Const(100000))
    # closed form: d_n = d_{n-1} * r + c cos(x) with d_0 = 1, r = 0.9999, c = 1e-4
    r, n = 0.9999, 100000
    expected = r ** n + 1e-4 * math.cos(0.3) * (1 - r ** n) / (1 - r)
    assert dx == pytest.approx(expected, rel=1e-9)
    assert np.isfinite(value)


# -- mutual recursion ----------------------------------------------------------
@njit
def even_branch(x, n):
    if n == 0:
        return x
    return math.sin(odd_branch(x, n - 1))


@njit
def odd_branch(x, n):
    if n == 0:
        return x * x
    return 1.5 * even_branch(x, n - 1)


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_mutual_recursion(n):
    (dx, _), value = autodiff(ReverseWithPrimal, even_branch, Active(0.7), Const(n))
    assert value == pytest.approx(even_branch(0.7, n))
    assert dx == pytest.approx(scalar_fd(even_branch, [0.7, n], 0), rel=1e-6)


def test_mutual_recursion_entered_from_the_other_function():
    (dx, _), = autodiff(Reverse, odd_branch, Active(0.7), Const(4))
    assert dx == pytest.approx(scalar_fd(odd_branch, [0.7, 4], 0), rel=1e-6)


@njit
def h_fact(x, n):
    if n <= 0:
        return 1.0
    return x * h_fact(x, n - 1)


@njit
def calls_with_literal(x):
    return h_fact(x, 2) + h_fact(x, 3)


def test_recursive_callee_specialised_on_a_literal():
    (dx,), = autodiff(Reverse, calls_with_literal, Active(0.9))
    assert dx == pytest.approx(2 * 0.9 + 3 * 0.9 ** 2)


# -- divide and conquer over an array ------------------------------------------
@njit
def dc_sum(x, lo, hi):
    if hi - lo == 1:
        return math.exp(x[lo]) * x[lo]
    mid = (lo + hi) // 2
    return dc_sum(x, lo, mid) * 0.5 + dc_sum(x, mid, hi)


@pytest.mark.parametrize("n", [1, 2, 13])
def test_divide_and_conquer(n):
    x = np.linspace(-0.5, 0.8, n)
    dx = np.zeros_like(x)
    autodiff(Reverse, dc_sum, Duplicated(x, dx), Const(0), Const(n))
    np.testing.assert_allclose(dx, array_fd(dc_sum, [x, 0, n], 0), rtol=1e-6, atol=1e-9)


# -- recursion returning arrays: an expression-tree evaluator -------------------
@njit
def evaluate(t, degree, op, feature, value, left, right, X):
    n = X.shape[1]
    if degree[t] == 0:
        out = np.empty(n)
        if feature[t] < 0:
            for j in range(n):
                out[j] = value[t]
        else:
            for j in range(n):
                out[j] = X[feature[t], j]
        return out
    a = evaluate(left[t], degree, op, feature, value, left, right, X)
    if degree[t] == 1:
        if op[t] == 0:
            for j in range(n):
                a[j] = math.cos(a[j])
        else:
            for j in range(n):
                a[j] = math.exp(-a[j] * a[j])
        return a
    b = evaluate(right[t], degree, op, feature, value, left, right, X)
    if op[t] == 0:
        for j in range(n):
            a[j] = a[j] + b[j]
    elif op[t] == 1:
        for j in range(n):
            a[j] = a[j] * b[j]
    else:
        for j in range(n):
            a[j] = a[j] - b[j]
    return a


@njit
def tree_loss(degree, op, feature, value, left, right, X, out):
    r = evaluate(0, degree, op, feature, value, left, right, X)
    s = 0.0
    for j in range(r.shape[0]):
        s += r[j] * r[j]
    out[0] = s


def random_tree(rng, size):
    """Array-encoded random tree with about ``size`` nodes; node 0 is the root."""
    degree, op, feature, value, left, right = [], [], [], [], [], []

    def grow(budget):
        t = len(degree)
        for column in (degree, op, feature, value, left, right):
            column.append(0)
        if budget <= 1:
            if rng.random() < 0.5:
                feature[t] = int(rng.integers(0, 2))
            else:
                feature[t] = -1
                value[t] = float(rng.uniform(-1, 1))
            return t
        if budget == 2 or rng.random() < 0.3:
            degree[t], op[t] = 1, int(rng.integers(0, 2))
            left[t] = grow(budget - 1)
            return t
        degree[t], op[t] = 2, int(rng.integers(0, 3))
        k = int(rng.integers(1, budget - 1))
        left[t] = grow(k)
        right[t] = grow(budget - 1 - k)
        return t

    grow(size)
    ints = [np.array(c, np.int64) for c in (degree, op, feature)]
    return (*ints, np.array(value, np.float64), np.array(left, np.int64),
            np.array(right, np.int64))


def tree_value(degree, op, feature, value, left, right, X):
    out = np.zeros(1)
    tree_loss(degree, op, feature, value, left, right, X, out)
    return out[0]


@pytest.mark.parametrize("seed, size", [(0, 1), (1, 2), (2, 9), (3, 25)])
def test_tree_evaluator_gradients(seed, size):
    rng = np.random.default_rng(seed)
    degree, op, feature, value, left, right = random_tree(rng, size)
    X = rng.uniform(-1, 1, (2, 6))
    dX, dvalue = np.zeros_like(X), np.zeros_like(value)
    out, dout = np.zeros(1), np.ones(1)
    autodiff(Reverse, tree_loss, Const(degree), Const(op), Const(feature),
             Duplicated(value, dvalue), Const(left), Const(right), Duplicated(X, dX),
             Duplicated(out, dout))
    args = [degree, op, feature, value, left, right, X]
    assert out[0] == pytest.approx(tree_value(*args))
    np.testing.assert_allclose(dX, array_fd(tree_value, args, 6), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(dvalue, array_fd(tree_value, args, 3), rtol=1e-5, atol=1e-8)


# -- the memoized cache ----------------------------------------------------------
@njit
def leaf_a(x):
    return x * x + math.sin(x)


@njit
def leaf_b(x, y):
    return leaf_a(x) * y


@njit
def uses_both(x, y):
    return leaf_b(x, y) + leaf_a(y) + leaf_b(y, 2.0)


def test_one_derivative_per_function_and_activity():
    autodiff(Reverse, uses_both, Active(0.3), Active(0.8))
    info = enzpy.cache_info()
    # (a build saved to the persistent cache writes again what an unsaved one wrote)
    assert info["derivative_functions"] == info["distinct_keys"] + info["rewritten"]
    report = enzpy.build_report(uses_both)[-1]
    # uses_both; leaf_b with (x, y) active and with only its first argument active;
    # leaf_a with its argument active: 4 keys
    assert report.derivative_functions == 4


def test_second_call_builds_nothing():
    autodiff(Reverse, rpow, Active(1.3), Const(3))
    before = enzpy.cache_info()
    autodiff(Reverse, rpow, Active(0.7), Const(40))          # deeper recursion
    after = enzpy.cache_info()
    assert after["misses"] == before["misses"]
    assert after["derivative_functions"] == before["derivative_functions"]
    assert after["hits"] == before["hits"] + 1


def test_a_different_tree_builds_nothing():
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, (2, 4))
    for size in (3, 11):
        degree, op, feature, value, left, right = random_tree(rng, size)
        before = enzpy.cache_info()
        autodiff(Reverse, tree_loss, Const(degree), Const(op), Const(feature),
                 Duplicated(value, np.zeros_like(value)), Const(left), Const(right),
                 Duplicated(X, np.zeros_like(X)), Duplicated(np.zeros(1), np.ones(1)))
        after = enzpy.cache_info()
        if size == 11:
            assert after["misses"] == before["misses"]
            assert after["derivative_functions"] == before["derivative_functions"]


def test_shared_callee_is_reused_by_a_later_build():
    @njit
    def first(x):
        return leaf_a(x) + 1.0

    @njit
    def second(x):
        return leaf_a(x) * 2.0

    autodiff(Reverse, first, Active(0.5))
    before = enzpy.cache_info()["derivative_functions"]
    (dx,), = autodiff(Reverse, second, Active(0.5))
    assert dx == pytest.approx(2 * (2 * 0.5 + math.cos(0.5)))
    assert enzpy.cache_info()["derivative_functions"] == before + 1   # only `second`


def test_cache_info_reports_stage_timings():
    info = enzpy.cache_info()
    assert {"entries", "derivative_functions", "distinct_keys", "hits", "misses",
            "build_seconds"} <= set(info)
    assert info["build_seconds"]["reverse"] > 0


def _enzpy_stage_on_stack():
    frame = sys._getframe(1)
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) in ("irtext.py", "reverse.py",
                                                           "augment.py"):
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("caller_disabled_gc", [False, True])
def test_a_build_pauses_the_cyclic_gc_only_while_its_stages_run(caller_disabled_gc):
    """A build's own stages allocate many long-lived objects; collections during
    them only cost time (the caller's gc setting is restored after)."""
    scale = 2.0 if caller_disabled_gc else 1.0      # two functions: two builds

    @njit
    def chain(x):
        y = x * scale
        for _ in range(3):
            y = math.sin(y) * x + y * y
            y = math.cos(y) * x - math.exp(-y * y)
            y = math.tanh(y + x) * math.log(1.0 + y * y) + math.atan(x * y)
            y = math.sqrt(1.0 + y * y) * math.sin(x - y) + math.cos(x * y) * y
        return y

    collections_in_stages = []
    watch = lambda phase, info: collections_in_stages.append(_enzpy_stage_on_stack())  # noqa
    gc.callbacks.append(watch)
    if caller_disabled_gc:
        gc.disable()
    try:
        (dx,), = autodiff(Reverse, chain, Active(0.7))
        assert gc.isenabled() is not caller_disabled_gc
    finally:
        gc.callbacks.remove(watch)
        gc.enable()
    assert not any(collections_in_stages)
    assert dx == pytest.approx(scalar_fd(chain, [0.7], 0), rel=1e-6)


@njit
def _integer_powers_by_depth(x, depth):
    if depth == 0:
        return 1.0
    return _integer_powers_by_depth(x, depth - 1) + np.sum(x ** 2)


@pytest.mark.parametrize("depth", [0, 1, 4])
def test_array_integer_power_in_a_recursive_function(depth):
    # x ** 2 on an array calls Numba's int_power once per element with an
    # exception slot of its own; inlined into a recursive function, the slot
    # gets a lifetime too, which made it look like memory holding derivatives
    # (refused: "a pointer to differentiable memory is stored ...").
    x = np.array([0.3, -0.2, 0.5])
    dx = np.zeros(3)
    autodiff(Reverse, _integer_powers_by_depth, Duplicated(x, dx), Const(depth))
    np.testing.assert_allclose(dx, 2.0 * depth * x)
    (t,) = autodiff(enzpy.Forward, _integer_powers_by_depth,
                    Duplicated(x, np.array([1.0, 2.0, 3.0])), Const(depth))
    assert t == pytest.approx(2.0 * depth * (x @ [1.0, 2.0, 3.0]))
    np.testing.assert_allclose(enzpy.hvp(_integer_powers_by_depth, x, np.ones(3), depth),
                               np.full(3, 2.0 * depth))


# -- recursion over complex arrays ---------------------------------------------
@njit
def fft(z):
    """Radix-2 FFT by recursion (depth log2(n)); the base case copies its input."""
    n = z.shape[0]
    if n == 1:
        return z.copy()
    even, odd = fft(z[0::2]), fft(z[1::2])
    out = np.empty(n, dtype=np.complex128)
    for k in range(n // 2):
        t = np.exp(-2j * np.pi * k / n) * odd[k]
        out[k] = even[k] + t
        out[k + n // 2] = even[k] - t
    return out


@njit
def weighted_power_spectrum(x, w):
    spectrum = fft(x * (1.0 + 0.5j))
    return np.sum(w * np.abs(spectrum) ** 2)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_recursion_over_complex_arrays(n):
    # before: the base case's copy of a complex array it was passed ("cannot tell what
    # memcpy copies"): complex arrays' data was not typed as their parts' floats
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, n), rng.uniform(0.5, 1.5, n)
    assert np.allclose(fft(x + 0j), np.fft.fft(x))
    dx = np.zeros(n)
    autodiff(Reverse, weighted_power_spectrum, Duplicated(x.copy(), dx), Const(w))
    np.testing.assert_allclose(dx, array_fd(weighted_power_spectrum, [x, w], 0),
                               rtol=1e-6, atol=1e-9)
    v = rng.standard_normal(n)
    (t,) = enzpy.autodiff(enzpy.Forward, weighted_power_spectrum, Duplicated(x.copy(), v),
                          Const(w))
    assert t == pytest.approx(dx @ v, rel=1e-9, abs=1e-12)


# -- results written into buffers passed down the recursion (DynamicExpressions' pool) --
@njit
def evaluate_into(node, depth, kind, left, right, consts, X, pool, out):
    n = X.shape[1]
    if kind[node] == 0:
        for i in range(n):
            out[i] = consts[node]
    elif kind[node] == 1:
        for i in range(n):
            out[i] = X[0, i]
    else:
        evaluate_into(left[node], depth + 1, kind, left, right, consts, X, pool, out)
        tmp = pool[depth]
        evaluate_into(right[node], depth + 1, kind, left, right, consts, X, pool, tmp)
        for i in range(n):
            out[i] = out[i] * tmp[i] if kind[node] == 2 else math.sin(out[i]) + tmp[i]


@njit
def pooled_loss(kind, left, right, consts, X):
    pool = np.empty((kind.shape[0] + 1, X.shape[1]))
    out = np.empty(X.shape[1])
    evaluate_into(0, 0, kind, left, right, consts, X, pool, out)
    return (out * out).sum()


POOLED_TREES = {   # (kind, left, right): depth 0, 1 and 3
    0: ([0], [-1], [-1]),
    1: ([2, 0, 1], [1, -1, -1], [2, -1, -1]),
    3: ([3, 2, 0, 1, 3, 0, 2, 0, 1], [1, 2, -1, -1, 5, -1, 7, -1, -1],
        [4, 3, -1, -1, 6, -1, 8, -1, -1]),
}


@pytest.mark.parametrize("depth", sorted(POOLED_TREES))
def test_recursion_writing_into_a_pool_passed_down(depth):
    # before: "Set changed size during iteration" (what a self-recursive function writes
    # was read while it grew)
    kind, left, right = (np.array(a) for a in POOLED_TREES[depth])
    rng = np.random.default_rng(depth)
    consts, X = rng.uniform(-1, 1, kind.size), rng.uniform(-1, 1, (1, 5))
    args = [kind, left, right, consts, X]
    dc = np.zeros_like(consts)
    autodiff(Reverse, pooled_loss, Const(kind), Const(left), Const(right),
             Duplicated(consts.copy(), dc), Const(X))
    np.testing.assert_allclose(dc, array_fd(pooled_loss, args, 3), rtol=1e-6, atol=1e-9)
    v = rng.standard_normal(kind.size)
    (t,) = enzpy.autodiff(enzpy.Forward, pooled_loss, Const(kind), Const(left), Const(right),
                          Duplicated(consts.copy(), v), Const(X))
    assert t == pytest.approx(dc @ v, rel=1e-9, abs=1e-12)
