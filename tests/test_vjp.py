"""enzpy.vjp: reverse mode of functions returning arrays and tuples."""
import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Const, Reverse, UnsupportedError, autodiff


@njit
def softmax(x, t):
    z = np.exp((x - x.max()) / t)
    return z / z.sum()


@njit
def affine_and_energy(A, x, n):
    y = A @ x
    return y * 2.0, (y ** 2).sum() + n


@njit
def scalar_result(x):
    return (x ** 3).sum()


def fd_vjp(f, args, i, g, h=1e-6):
    """<g, d f / d args[i]> by central differences."""
    def pair(out):
        if isinstance(out, tuple):
            return sum(np.sum(o * gi) for o, gi in zip(out, g))
        return np.sum(out * g)
    x = args[i]
    if not isinstance(x, np.ndarray):
        up, dn = list(args), list(args)
        up[i], dn[i] = x + h, x - h
        return (pair(f(*up)) - pair(f(*dn))) / (2 * h)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        dn = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        up[i][idx] += h
        dn[i][idx] -= h
        grad[idx] = (pair(f(*up)) - pair(f(*dn))) / (2 * h)
    return grad


def test_array_result():
    x = np.array([0.3, -1.2, 2.0, 0.1])
    out, pullback = enzpy.vjp(softmax, x, 1.5)
    np.testing.assert_allclose(out, softmax(x, 1.5))
    for g in (np.array([1.0, 0.0, -1.0, 0.5]), np.ones(4)):     # called many times
        dx, dt = pullback(g)
        np.testing.assert_allclose(dx, fd_vjp(softmax, [x, 1.5], 0, g), rtol=1e-6, atol=1e-9)
        assert dt == pytest.approx(fd_vjp(softmax, [x, 1.5], 1, g), rel=1e-6, abs=1e-9)
    for g in ((np.ones(4),), (np.ones(4), np.ones(2))):   # a tuple for one array
        with pytest.raises(ValueError, match=r"one array of shape \(4,\), like the result"):
            pullback(g)


def test_tuple_result_and_undifferentiated_arguments():
    A = np.arange(6.0).reshape(2, 3) / 6.0
    x = np.array([0.5, -1.0, 2.0])
    out, pullback = enzpy.vjp(affine_and_energy, A, Const(x), 3)
    g = (np.array([1.0, -0.5]), 2.0)
    dA, dx, dn = pullback(g)
    assert dx is None and dn is None
    np.testing.assert_allclose(dA, fd_vjp(affine_and_energy, [A, x, 3], 0, g), rtol=1e-6)
    out, pullback = enzpy.vjp(affine_and_energy, A, x, 3)
    np.testing.assert_allclose(pullback(g)[1], fd_vjp(affine_and_energy, [A, x, 3], 1, g),
                               rtol=1e-6)


def test_scalar_result_and_bad_cotangents():
    x = np.array([1.0, 2.0])
    out, pullback = enzpy.vjp(scalar_result, x)
    assert out == pytest.approx(9.0)
    np.testing.assert_allclose(pullback(2.0)[0], 2.0 * 3 * x ** 2)
    np.testing.assert_allclose(pullback(np.array(2.0))[0], 2.0 * 3 * x ** 2)   # 0-d, as JAX
    _, pullback = enzpy.vjp(softmax, x, 1.0)
    with pytest.raises(ValueError, match="shape"):
        pullback(np.ones(3))
    _, pullback = enzpy.vjp(affine_and_energy, np.ones((2, 2)), np.ones(2), 1)
    with pytest.raises(ValueError, match="tuple of 2"):
        pullback(np.ones(2))


def test_reverse_mode_on_an_array_result_points_to_vjp():
    with pytest.raises(UnsupportedError, match="vjp"):
        autodiff(Reverse, softmax, enzpy.Duplicated(np.ones(3), np.zeros(3)), Const(1.0))


@njit
def two_outputs(x):
    return np.array([x.sum(), (x ** 2).sum()])


def test_jacobian_picks_reverse_mode_for_few_outputs():
    x = np.arange(1.0, 6.0)
    np.testing.assert_allclose(enzpy.jacobian(two_outputs, x),
                               np.stack([np.ones(5), 2 * x]))


def test_pullback_stays_at_the_point_of_out():
    # An optimizer may update x in place between vjp and the pullback: the
    # pullback is J^T g at the x that ``out`` was computed at, as in JAX.
    x = np.array([0.3, -1.2, 2.0, 0.1])
    g = np.array([1.0, 0.0, -1.0, 0.5])
    expected = fd_vjp(softmax, [x.copy(), 1.5], 0, g)
    out, pullback = enzpy.vjp(softmax, x, 1.5)
    x[:] = 5.0
    np.testing.assert_allclose(pullback(g)[0], expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(out, softmax(np.array([0.3, -1.2, 2.0, 0.1]), 1.5))


@njit
def _scaled_and_first_f32(x):
    return x * np.float32(2.0), x[0] * np.float32(3.0)


@njit
def _through_a_callee_f32(x):
    y, first = _scaled_and_first_f32(x)
    return y.sum() * first


def test_tuple_of_a_float32_array_and_a_float32():
    # LLVM keeps this tuple's store to the return slot whole (padding after the
    # float): it was refused as "a value holding both floats and pointers"
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    _, pullback = enzpy.vjp(_scaled_and_first_f32, x)
    (dx,) = pullback((np.ones(3, np.float32), np.float32(1.0)))
    np.testing.assert_allclose(dx, [5.0, 2.0, 2.0])
    dx = np.zeros_like(x)
    autodiff(Reverse, _through_a_callee_f32, enzpy.Duplicated(x, dx))
    # f = 2 sum(x) * 3 x0: df/dx = 6 x0 + [6 sum(x), 0, 0]
    np.testing.assert_allclose(dx, 6.0 * x[0] + np.array([6.0 * x.sum(), 0.0, 0.0]),
                               rtol=1e-6)


@njit
def _zero_d_square_sum(x):
    r = np.empty(())
    r[()] = np.sum(x * x)
    return r


def test_zero_d_array_result():
    x = np.array([1.0, 2.0])
    out, pullback = enzpy.vjp(_zero_d_square_sum, x)
    assert out.shape == () and out == 5.0
    for g in (np.array(1.0), 1.0):
        np.testing.assert_array_equal(pullback(g)[0], 2 * x)
    np.testing.assert_array_equal(enzpy.jacobian(_zero_d_square_sum, x), 2 * x)


@pytest.mark.parametrize("g", [np.array([1j, 1j]), np.array([1.0, None], dtype=object),
                               np.array(["1", "2"])], ids=["complex", "object", "str"])
def test_cotangents_that_are_not_real_numbers_are_refused(g):
    _, pullback = enzpy.vjp(_doubled, np.ones(2))
    with pytest.raises(TypeError, match="real numbers"):
        pullback(g)
    with pytest.raises(TypeError, match="real numbers"):
        enzpy.hvp(_square_sum, np.ones(2), g)


@njit
def _doubled(x):
    return 2.0 * x


@njit
def _square_sum(x):
    return (x * x).sum()


@njit
def _pair_product(t, s):
    return t[0] * t[1] * s


def test_an_argument_holding_floats_is_refused_not_left_undifferentiated():
    """A tuple of arrays got None, as if it were Const: now a TypeError that says what to do;
    Const(...) keeps it undifferentiated on purpose."""
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with pytest.raises(TypeError, match="argument 0 \\(tuple\\) holds floats"):
        enzpy.vjp(_pair_product, (a, b), 1.1)
    with pytest.raises(TypeError, match="argument 0 \\(list\\) holds floats"):
        enzpy.vjp(_pair_product, [a, b], 1.1)
    out, pullback = enzpy.vjp(_pair_product, Const((a, b)), 1.1)
    ct, cs = pullback(np.ones(2))
    assert ct is None and cs == pytest.approx((a * b).sum())


@njit
def counted_scaling(x, counter):
    counter[0] += 1.0          # the function's own bookkeeping, in a constant array
    return x * counter[0]


@njit
def counted_pair(x, state):
    state[0][0] += 1.0
    return x * state[0][0]


def test_every_pullback_is_at_the_point_of_out():
    # before: each pullback call ran f on the one stored copy of the constant array,
    # which f updates: [2, 2], then [3, 3], then [4, 4]
    x = np.array([1.0, 2.0])
    for counter in (Const(np.array([1.0])), np.array([1])):
        out, pullback = enzpy.vjp(counted_scaling, x, counter)
        np.testing.assert_array_equal(out, [2.0, 4.0])
        for _ in range(3):
            np.testing.assert_array_equal(pullback(np.ones(2))[0], [2.0, 2.0])
    state = (np.array([1.0]),)
    out, pullback = enzpy.vjp(counted_pair, x, Const(state))
    state[0][0] = 9.0                       # the caller's array, changed afterwards
    np.testing.assert_array_equal(pullback(np.ones(2))[0], [2.0, 2.0])
    hess = enzpy.hessian(_counted_energy, np.array([1.0, 2.0]), np.array([1.0]))
    np.testing.assert_array_equal(hess, [[12.0, 0.0], [0.0, 24.0]])   # each column at buf = 2


@njit
def _counted_energy(x, buf):
    buf[0] += 1.0
    return (x ** 3).sum() * buf[0]


def test_pullback_follows_a_recompiled_function():
    # before: vjp after f.recompile() returned the new out with the old code's pullback
    namespace = {"K": 2.0, "njit": njit}
    exec("@njit\ndef scaled(x):\n    return x * K\n", namespace)
    scaled = namespace["scaled"]
    x = np.array([1.0, 2.0])
    out, pullback = enzpy.vjp(scaled, x)
    np.testing.assert_array_equal(pullback(np.ones(2))[0], [2.0, 2.0])
    namespace["K"] = 3.0
    scaled.recompile()
    out, pullback = enzpy.vjp(scaled, x)
    np.testing.assert_array_equal(out, [3.0, 6.0])
    np.testing.assert_array_equal(pullback(np.ones(2))[0], [3.0, 3.0])
    np.testing.assert_array_equal(enzpy.jacobian(scaled, x), 3.0 * np.eye(2))
