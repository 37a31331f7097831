"""Second order and Jacobians: ``hvp``, ``hessian`` and ``jacobian``.

``hvp`` (reverse over forward) is checked against analytic Hessians and against
central differences of the reverse-mode gradient,
``(grad(x + eps v) - grad(x - eps v)) / 2 eps``; ``jacobian`` against analytic
Jacobians and reverse-mode gradients. The seed programs of ``examples/`` (the
DynamicExpressions-style tree evaluator and the scan MWE) are differentiated
twice too; the fuse-level-2 evaluator is a ~1 minute build and only runs with
``ENZPY_SLOW=1``.

Every distinct (function, argument types) is one build of ~0.3-1 s (an hvp
build is a forward and a reverse build), so functions are reused across
parameters: depths, trip counts and branch selectors are runtime constants.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, Reverse, autodiff, build_report,
                   cache_info, hessian, hvp, jacobian)

SLOW = bool(os.environ.get("ENZPY_SLOW"))
f32 = np.float32
RNG = np.random.default_rng(2024)


# =============================================================================
# helpers
# =============================================================================
def grad(f, x, *consts):
    """The reverse-mode gradient of the scalar f(x, *consts) w.r.t. x (x unchanged)."""
    if isinstance(x, np.ndarray):
        g = np.zeros_like(x)
        autodiff(Reverse, f, Duplicated(x.copy(), g),
                 *[Const(c.copy() if isinstance(c, np.ndarray) else c) for c in consts])
        return g
    ((g, *_),) = autodiff(Reverse, f, Active(x), *[Const(c) for c in consts])
    return g


def fd_hvp(f, x, v, *consts, eps=None):
    """Central difference of the reverse-mode gradient along v."""
    if eps is None:
        eps = 1e-6 * max(1.0, float(np.max(np.abs(x))))
    up, dn = x + eps * v, x - eps * v
    return (np.asarray(grad(f, up, *consts)) - np.asarray(grad(f, dn, *consts))) / (2 * eps)


def fd_hessian(f, x, *consts):
    n = x.size
    cols = []
    for i in range(n):
        e = np.zeros(n)
        e[i] = 1.0
        cols.append(fd_hvp(f, x, e.reshape(x.shape), *consts).ravel())
    return np.stack(cols, axis=-1).reshape(x.shape + x.shape)


def assert_close(got, want, rtol=1e-6, atol=1e-9, what=""):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol + rtol * scale, err_msg=what)


def check_hvp_fd(f, x, *consts, n_dirs=2, rtol=1e-6, seed=0):
    """hvp along random directions against central differences of the gradient;
    neither x nor v is modified."""
    rng = np.random.default_rng(seed)
    for _ in range(n_dirs):
        v = rng.standard_normal(x.shape)
        x0, v0 = x.copy(), v.copy()
        hv = hvp(f, x, v, *consts)
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(v, v0)
        assert isinstance(hv, np.ndarray) and hv.shape == x.shape and hv.dtype == x.dtype
        assert_close(hv, fd_hvp(f, x, v, *consts), rtol=rtol, what=f"hvp of {f}")


# =============================================================================
# analytic Hessians
# =============================================================================
@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i, i + 1] -= 400 * x[i]
        H[i + 1, i] -= 400 * x[i]
        H[i + 1, i + 1] += 200
    return H


@pytest.mark.parametrize("x", [
    np.array([-1.2, 1.0]),
    np.array([1.0, 1.0]),
    np.array([0.3, -0.5, 1.2, 0.8, -1.1]),
], ids=["n2", "n2_minimum", "n5"])
def test_rosenbrock_hessian(x):
    H = hessian(rosenbrock, x)
    assert H.shape == (x.size, x.size) and H.dtype == np.float64
    assert_close(H, rosenbrock_hessian(x), rtol=1e-13, atol=1e-12)
    v = RNG.standard_normal(x.size)
    assert_close(hvp(rosenbrock, x, v), rosenbrock_hessian(x) @ v, rtol=1e-13, atol=1e-12)


def test_rosenbrock_float32():
    x = np.array([0.3, -0.5, 1.2, 0.8, -1.1], dtype=np.float32)
    H = hessian(rosenbrock, x)
    assert H.dtype == np.float32
    assert_close(H, rosenbrock_hessian(x.astype(np.float64)), rtol=1e-5, atol=1e-4)
    v = np.linspace(-1, 1, 5).astype(np.float32)
    hv = hvp(rosenbrock, x, v)
    assert hv.dtype == np.float32
    assert_close(hv, rosenbrock_hessian(x.astype(np.float64)) @ v, rtol=1e-5, atol=1e-4)


@njit
def quadratic_form(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            s += x[i] * A[i, j] * x[j]
    return 0.5 * s


def test_quadratic_form_hessian_is_sym_A():
    A = RNG.standard_normal((4, 4))        # not symmetric
    x = RNG.standard_normal(4)
    H = hessian(quadratic_form, x, A)
    assert_close(H, 0.5 * (A + A.T), rtol=1e-14, atol=1e-15)
    # independent of x
    assert_close(hessian(quadratic_form, 3 * x + 1, A), 0.5 * (A + A.T), rtol=1e-14, atol=1e-15)
    # the constant A is untouched
    A0 = A.copy()
    hvp(quadratic_form, x, x, A)
    np.testing.assert_array_equal(A, A0)


def test_quadratic_form_constant_as_const_annotation():
    A = RNG.standard_normal((3, 3))
    x = RNG.standard_normal(3)
    v = RNG.standard_normal(3)
    assert_close(hvp(quadratic_form, x, v, Const(A)), 0.5 * (A + A.T) @ v, rtol=1e-14,
                 atol=1e-15)


@njit
def exp_coupling(x):
    """sum_i sum_j exp(x_i) x_j."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            s += math.exp(x[i]) * x[j]
    return s


def test_exp_coupling_hessian():
    x = np.array([0.3, -0.7, 0.1, 1.1])
    e, S = np.exp(x), x.sum()
    # d2/dx_k dx_l = delta_kl e_k S + e_k + e_l
    want = np.diag(e * S) + e[:, None] + e[None, :]
    assert_close(hessian(exp_coupling, x), want, rtol=1e-13)


@njit
def logsumexp(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@njit
def logsumexp_np(x):
    return np.log(np.sum(np.exp(x)))


@pytest.mark.parametrize("f", [logsumexp, logsumexp_np], ids=["loops_max_shift", "numpy"])
def test_logsumexp_hessian(f):
    x = np.array([0.5, -1.0, 2.0, 0.1, 0.0])
    p = np.exp(x) / np.exp(x).sum()
    want = np.diag(p) - np.outer(p, p)
    H = hessian(f, x)
    assert_close(H, want, rtol=1e-12, atol=1e-15)
    # rows sum to zero: the function is shift invariant
    assert_close(H.sum(axis=1), np.zeros(5), atol=1e-14)


@njit
def branchy(x, t):
    if x[0] > t:
        return np.sum(x ** 3)
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i])
    return s * x[1]


@pytest.mark.parametrize("x0", [0.9, -0.9], ids=["cubic_branch", "sine_branch"])
def test_branch_both_ways(x0):
    x = np.array([x0, 0.4, -1.3])
    H = hessian(branchy, x, 0.0)
    if x0 > 0:
        want = np.diag(6 * x)
    else:
        # (sum_i sin x_i) * x_1
        want = np.diag(-np.sin(x) * x[1])
        want[:, 1] += np.cos(x)
        want[1, :] += np.cos(x)
    assert_close(H, want, rtol=1e-13, atol=1e-15)


@njit
def loop_carried(x, n):
    s = 0.5 * np.sum(x * x)
    for k in range(n):
        s = math.sin(s) + x[k % x.shape[0]]
    return s


@pytest.mark.parametrize("n", [0, 1, 2, 30])
def test_loops_of_0_1_many_iterations(n):
    x = np.array([0.3, -0.2, 0.5])
    H = hessian(loop_carried, x, n)
    if n == 0:
        assert_close(H, np.eye(3), rtol=1e-15)
    elif n == 1:
        s0 = 0.5 * x @ x
        assert_close(H, math.cos(s0) * np.eye(3) - math.sin(s0) * np.outer(x, x), rtol=1e-14)
    else:
        assert_close(H, fd_hessian(loop_carried, x, n), rtol=1e-6)
    assert_close(H, H.T, rtol=1e-13)


@njit
def rec(x, d):
    if d == 0:
        return np.sum(x * x)
    return math.sin(rec(x, d - 1)) + x[0] * x[d % x.shape[0]]


@pytest.mark.parametrize("d", [0, 1, 2, 25])
def test_self_recursion_depths(d):
    x = np.array([0.4, -0.3, 0.2])
    H = hessian(rec, x, d)
    if d == 0:
        assert_close(H, 2 * np.eye(3), rtol=1e-15)
    elif d == 1:
        s0 = x @ x
        want = 2 * math.cos(s0) * np.eye(3) - 4 * math.sin(s0) * np.outer(x, x)
        want[0, 1] += 1.0
        want[1, 0] += 1.0
        assert_close(H, want, rtol=1e-14)
    else:
        assert_close(H, fd_hessian(rec, x, d), rtol=1e-6)


@njit
def even_f(x, n):
    if n == 0:
        return x * x * x
    return math.sin(odd_f(x, n - 1)) * x


@njit
def odd_f(x, n):
    if n == 0:
        return math.exp(x)
    return even_f(x, n - 1) + 0.5 * x * x


@pytest.mark.parametrize("n", [0, 1, 2, 9])
def test_mutual_recursion_scalar(n):
    x = 0.45
    h = hvp(even_f, x, 1.0, n)
    if n == 0:
        assert h == pytest.approx(6 * x, rel=1e-14)
    elif n == 1:
        # sin(e^x) x: d2 = -sin(e^x) e^{2x} x + cos(e^x) e^x x + 2 cos(e^x) e^x
        e = math.exp(x)
        assert h == pytest.approx(-math.sin(e) * e * e * x + math.cos(e) * e * x
                                  + 2 * math.cos(e) * e, rel=1e-13)
    assert h == pytest.approx(float(fd_hvp(even_f, x, 1.0, n)), rel=1e-6)


def test_recursion_depth_does_not_change_the_build():
    x = np.array([0.4, -0.3, 0.2])
    hvp(rec, x, x, 3)
    m = cache_info()["misses"]
    n_functions = build_report(rec)[-1].derivative_functions
    hvp(rec, x, x, 60)
    assert cache_info()["misses"] == m
    assert build_report(rec)[-1].derivative_functions == n_functions


# -- scalar x and constants after x ----------------------------------------------
@njit
def scalar_fn(x, c, n):
    r = 0.0
    for k in range(n):
        r += math.sin(c * x) * x ** k
    return r + math.exp(-x * x)


def scalar_fn_second(x, c, n):
    d2 = (4 * x * x - 2) * math.exp(-x * x)
    for k in range(n):
        s, co = math.sin(c * x), math.cos(c * x)
        p = x ** k
        dp = k * x ** (k - 1) if k else 0.0
        d2p = k * (k - 1) * x ** (k - 2) if k > 1 else 0.0
        d2 += -c * c * s * p + 2 * c * co * dp + s * d2p
    return d2


@pytest.mark.parametrize("x, c, n", [(0.7, 1.3, 0), (0.7, 1.3, 1), (0.7, 1.3, 4),
                                     (-1.1, 0.5, 6)])
def test_scalar_x_with_constants(x, c, n):
    h = hvp(scalar_fn, x, 1.0, c, n)
    assert isinstance(h, float)
    assert h == pytest.approx(scalar_fn_second(x, c, n), rel=1e-12)
    assert hvp(scalar_fn, x, 2.5, c, n) == pytest.approx(2.5 * h, rel=1e-14)
    assert hessian(scalar_fn, x, c, n) == pytest.approx(h, rel=1e-15)
    # constants may be given as Const too
    assert hvp(scalar_fn, x, 1.0, Const(c), Const(n)) == pytest.approx(h, rel=1e-15)


def test_scalar_hvp_simple():
    @njit
    def f(x):
        return x ** 4 - 3.0 * x

    assert hvp(f, 0.7, 1.0) == pytest.approx(12 * 0.49, rel=1e-14)
    assert hvp(f, 0.7, 1) == pytest.approx(12 * 0.49, rel=1e-14)     # an int v
    assert hvp(f, np.float64(0.7), np.float64(-2.0)) == pytest.approx(-24 * 0.49, rel=1e-14)


def test_scalar_float32():
    x = f32(0.7)
    h = hvp(scalar_fn, x, f32(1.0), f32(1.3), 4)
    assert isinstance(h, (np.float32, float))
    assert float(h) == pytest.approx(scalar_fn_second(float(x), float(f32(1.3)), 4), rel=1e-4)


@njit
def with_many_constants(x, w, c, n, flag):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] ** 3 * c
    if flag:
        s += n * x[0] * x[-1]
    return s


@pytest.mark.parametrize("flag", [True, False])
def test_array_x_with_array_scalar_int_bool_constants(flag):
    x = np.array([0.5, -1.5, 2.0])
    w = np.array([1.0, 2.0, -0.5])
    H = hessian(with_many_constants, x, w, 0.7, 3, flag)
    want = np.diag(6 * w * x * 0.7)
    if flag:
        want[0, 2] += 3
        want[2, 0] += 3
    assert_close(H, want, rtol=1e-14)


# =============================================================================
# hvp against finite differences of reverse-mode gradients
# =============================================================================
@njit
def with_temporaries(x, c):
    t = np.zeros(x.shape[0])
    u = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        t[i] = math.exp(x[i] * c)
        u[i] = x[i] * x[(i + 1) % x.shape[0]]
    w = t * u + np.sin(x) - 0.5 * x.copy() ** 2
    return np.sum(w * w) + np.dot(t, u)


@njit
def with_in_place(x):
    y = x.copy()
    for i in range(1, y.shape[0]):
        y[i] = y[i] * y[i - 1] + math.cos(y[i])
    y *= 0.5
    y[0] = y[-1] * y[1]
    return np.sum(y ** 2) + y[0] * y[2]


@njit
def writes_x_in_place(x):
    """x itself is overwritten (the function value is that of the old x)."""
    for i in range(x.shape[0]):
        x[i] = math.sin(x[i]) * x[i]
    return np.sum(x * x * x)


@njit
def inner(a, b):
    return math.tanh(a * b) + a * a


@njit
def middle(x, i):
    return inner(x[i], x[i + 1]) * inner(x[i + 1], 0.5)


@njit
def calls_between(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += middle(x, i)
    return s + inner(x[0], x[-1])


@njit
def matrix_input(m):
    s = 0.0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            s += math.exp(0.3 * m[i, j]) * m[(i + 1) % m.shape[0], j]
    return s + np.sum(np.sin(m) * m)


X5 = np.array([0.3, -0.6, 0.9, 0.2, -0.4])


def test_hvp_temporaries_vs_fd():
    check_hvp_fd(with_temporaries, X5, 0.7)


@njit
def dot_self(x, a):
    return np.dot(x, x) + np.dot(x, a) * x[0]


def test_hvp_of_dot_with_both_operands_active():
    """np.dot of two active operands: forward mode's dot helpers return through
    memory, so reverse mode follows the second-order term (it was lost)."""
    x = np.array([1.0, 2.0, 3.0])
    a = np.array([0.5, -1.0, 2.0])
    want = 2 * np.eye(3)
    want[0, :] += a
    want[:, 0] += a
    assert_close(hessian(dot_self, x, a), want, rtol=1e-14)


def test_hvp_in_place_updates_vs_fd():
    check_hvp_fd(with_in_place, X5)


def test_hvp_of_function_writing_x_in_place():
    x = X5.copy()
    v = RNG.standard_normal(5)
    v0 = v.copy()
    hv = hvp(writes_x_in_place, x, v)
    np.testing.assert_array_equal(v, v0)         # v is the caller's: not written
    # g(x) = sum((x sin x)^3): H = diag(d2/dx2 (x sin x)^3)
    q = X5 * np.sin(X5)
    dq = np.sin(X5) + X5 * np.cos(X5)
    d2q = 2 * np.cos(X5) - X5 * np.sin(X5)
    want = (6 * q * dq ** 2 + 3 * q ** 2 * d2q) * v
    assert_close(hv, want, rtol=1e-12)


def test_hvp_calls_between_njit_functions_vs_fd():
    check_hvp_fd(calls_between, X5)


@pytest.mark.parametrize("order", ["C", "F"])
def test_hvp_2d_input(order):
    m = np.array(RNG.uniform(-1, 1, (3, 4)), order=order)
    check_hvp_fd(matrix_input, m, n_dirs=1)
    H = hessian(matrix_input, m)
    assert H.shape == (3, 4, 3, 4)
    assert_close(H.reshape(12, 12), H.reshape(12, 12).T, rtol=1e-13)


@pytest.mark.parametrize("f, consts", [(with_temporaries, (0.7,)), (calls_between, ()),
                                       (with_in_place, ()), (exp_coupling, ())],
                         ids=["temporaries", "calls", "in_place", "exp_coupling"])
def test_hessian_matches_fd_and_is_symmetric(f, consts):
    H = hessian(f, X5, *consts)
    assert H.shape == (5, 5)
    assert_close(H, H.T, rtol=1e-12, what=f"symmetry of {f}")
    assert_close(H, fd_hessian(f, X5, *consts), rtol=1e-6, what=f"hessian of {f}")


def test_hvp_is_linear_in_v():
    v1, v2 = RNG.standard_normal(5), RNG.standard_normal(5)
    h1 = hvp(calls_between, X5, v1)
    h2 = hvp(calls_between, X5, v2)
    assert_close(hvp(calls_between, X5, 2 * v1 - 3 * v2), 2 * h1 - 3 * h2, rtol=1e-13)
    assert_close(hvp(calls_between, X5, np.zeros(5)), np.zeros(5), atol=0)
    H = hessian(calls_between, X5)
    assert_close(h1, H @ v1, rtol=1e-13)


def test_hvp_non_contiguous_x_and_list_v():
    base = np.zeros(10)
    base[::2] = X5
    x = base[::2]
    v = [1.0, 0.0, -1.0, 0.5, 2.0]
    assert_close(hvp(calls_between, x, v), hvp(calls_between, X5, np.array(v)), rtol=1e-15)


def test_hvp_builds_once():
    v = RNG.standard_normal(5)
    hvp(with_in_place, X5, v)
    m = cache_info()["misses"]
    hvp(with_in_place, X5 + 0.1, v)
    hessian(with_in_place, X5)
    assert cache_info()["misses"] == m


# =============================================================================
# jacobian
# =============================================================================
@njit
def vec_fn(x, c):
    out = np.empty(x.shape[0] + 1)
    for i in range(x.shape[0]):
        out[i] = math.sin(x[i]) * x[(i + 1) % x.shape[0]] * c
    out[-1] = np.sum(x * x)
    return out


def vec_fn_jacobian(x, c):
    n = x.size
    J = np.zeros((n + 1, n))
    for i in range(n):
        J[i, i] += math.cos(x[i]) * x[(i + 1) % n] * c
        J[i, (i + 1) % n] += math.sin(x[i]) * c
    J[n] = 2 * x
    return J


def test_jacobian_of_array_returning_function():
    x = np.array([0.3, -1.2, 0.8, 2.0])
    J = jacobian(vec_fn, x, 1.5)
    assert J.shape == (5, 4)
    assert_close(J, vec_fn_jacobian(x, 1.5), rtol=1e-14)


@njit
def mat_out(x):
    out = np.empty((2, x.shape[0]))
    for i in range(x.shape[0]):
        out[0, i] = x[i] ** 2
        out[1, i] = x[0] * x[i]
    return out


def test_jacobian_of_2d_output():
    x = np.array([0.5, -1.0, 1.5])
    J = jacobian(mat_out, x)
    assert J.shape == (2, 3, 3)
    want = np.zeros((2, 3, 3))
    for i in range(3):
        want[0, i, i] = 2 * x[i]
        want[1, i, 0] += x[i]
        want[1, i, i] += x[0]
    assert_close(J, want, rtol=1e-15)


@njit
def vec_of_scalar(t):
    out = np.empty(3)
    out[0] = math.cos(t)
    out[1] = t * t
    out[2] = math.exp(2 * t)
    return out


def test_jacobian_of_scalar_input():
    J = jacobian(vec_of_scalar, 0.4)
    assert J.shape == (3,)
    assert_close(J, [-math.sin(0.4), 0.8, 2 * math.exp(0.8)], rtol=1e-14)


@njit
def mat_input_fn(m):
    r = np.empty(m.shape[0])
    for i in range(m.shape[0]):
        r[i] = np.sum(m[i, :] ** 2)
    return r


@njit
def _sum_of_squares(x):
    return (x ** 2).sum()


def test_jacobian_of_a_float32_scalar_function_is_float32_as_its_gradient():
    """Found by review: float64 (Numba returns a float32 result as a Python float; a
    float64 result of float32 x stays float64: see the test below)."""
    x = np.array([0.1, 0.2, 0.3], np.float32)
    J = enzpy.jacobian(_sum_of_squares, x)
    assert J.dtype == np.float32 == enzpy.gradient(_sum_of_squares, x).dtype
    np.testing.assert_allclose(J, 2 * x, rtol=1e-6)


def test_jacobian_of_2d_input():
    m = RNG.standard_normal((2, 3))
    J = jacobian(mat_input_fn, m)
    assert J.shape == (2, 2, 3)
    want = np.zeros((2, 2, 3))
    for i in range(2):
        want[i, i, :] = 2 * m[i]
    assert_close(J, want, rtol=1e-15)


@njit
def _exp_sum(x):
    return np.sum(np.exp(x))


@njit
def _doubled(x):
    return x * 2.0


def test_shapes_for_0d_and_empty_x():
    # x.shape + x.shape and out.shape + x.shape, for a 0-d x (NumPy's
    # ascontiguousarray made it 1-d) and an empty one (nothing to stack)
    H = hessian(_exp_sum, np.array(0.5))
    assert H.shape == () and float(H) == pytest.approx(math.exp(0.5))
    J = jacobian(_doubled, np.array(0.5))
    assert J.shape == () and float(J) == 2.0
    assert hessian(_exp_sum, np.zeros(0)).shape == (0, 0)
    assert jacobian(_doubled, np.zeros(0)).shape == (0, 0)
    assert jacobian(_exp_sum, np.zeros(0)).shape == (0,)


def test_jacobian_of_scalar_function_is_the_gradient():
    for f, consts in ((rosenbrock, ()), (calls_between, ()), (with_temporaries, (0.7,))):
        J = jacobian(f, X5, *consts)
        assert J.shape == X5.shape
        assert_close(J, grad(f, X5, *consts), rtol=1e-13, what=str(f))


def test_jacobian_of_scalar_function_of_scalar():
    J = jacobian(scalar_fn, 0.7, 1.3, 4)
    assert type(J) is float         # (was a 0-d array; gradient and hessian give floats)
    assert J == pytest.approx(grad(scalar_fn, 0.7, 1.3, 4), rel=1e-14)


@njit
def _tanh_field(x, A):
    return np.tanh(A @ x)


def test_jacobian_of_read_only_arrays():
    # before: "assignment destination is read-only" (the values were copied back)
    x = np.array([0.1, 0.2, 0.3])
    A = np.arange(6.0).reshape(2, 3) / 10
    want = (1 - np.tanh(A @ x) ** 2)[:, None] * A
    for x_read_only in (False, True):
        x_in, A_in = x.copy(), A.copy()
        (x_in if x_read_only else A_in).flags.writeable = False
        np.testing.assert_allclose(jacobian(_tanh_field, x_in, A_in), want, rtol=1e-14)


@njit
def _widened_prefix(x):
    return x.astype(np.float64)[:2] * 2.0


@njit
def _widened_twice(x):
    return np.concatenate((x.astype(np.float64), x.astype(np.float64)))


@njit
def _widened_sum(x):
    return (x.astype(np.float64) ** 2).sum()


def test_jacobian_has_the_results_dtype_in_either_mode():
    # before: float32 by rows (reverse mode), float64 by columns (forward mode)
    x = np.ones(3, np.float32)
    for f in (_widened_prefix, _widened_twice, _widened_sum):
        assert jacobian(f, x).dtype == np.float64, f


@njit
def out_writer(x, c, out):
    for i in range(out.shape[0]):
        out[i] = 0.0
    for i in range(x.shape[0]):
        out[i % out.shape[0]] += math.exp(x[i] * c)
    out[-1] = x[0] * x[-1]


def test_jacobian_of_out_writing_function():
    x = np.array([0.1, -0.2, 0.3, 0.4])
    out = np.zeros(3)
    J = jacobian(out_writer, x, 0.5, out)
    assert J.shape == (3, 4)
    want = np.zeros((3, 4))
    for i in range(4):
        want[i % 3, i] += 0.5 * math.exp(0.5 * x[i])
    want[-1] = 0.0
    want[-1, 0] = x[-1]
    want[-1, -1] = x[0]
    assert_close(J, want, rtol=1e-14)


@njit
def _accumulate_squares(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i] ** 2


def test_jacobian_of_a_function_accumulating_into_its_output():
    # every pass starts from the output's values; the caller's output ends as
    # after one call (not one per pass)
    x = np.array([1.0, 2.0, 3.0])
    out = np.ones(3)
    J = jacobian(_accumulate_squares, x, out)
    assert_close(J, np.diag(2.0 * x), rtol=1e-15)
    assert_close(out, 1.0 + x ** 2, rtol=1e-15)


def test_jacobian_of_a_function_writing_fewer_entries_than_x_runs_one_reverse_pass_each(
        monkeypatch):
    # (it ran forward mode once per entry of x: 4 passes where 3 pullbacks suffice)
    import enzpy.higher
    modes = []

    def counting(mode, *args):
        modes.append(mode)
        return autodiff(mode, *args)

    monkeypatch.setattr(enzpy.higher, "autodiff", counting)
    x, out = np.array([0.1, -0.2, 0.3, 0.4]), np.zeros(3)
    J = jacobian(out_writer, x, 0.5, out)
    assert modes == [Reverse] * 3
    h, fd = 1e-6, np.zeros((3, 4))
    for j in range(4):
        up, down, o_up, o_down = x.copy(), x.copy(), np.zeros(3), np.zeros(3)
        up[j] += h
        down[j] -= h
        out_writer(up, 0.5, o_up)
        out_writer(down, 0.5, o_down)
        fd[:, j] = (o_up - o_down) / (2 * h)
    assert_close(J, fd, rtol=1e-8, atol=1e-9)
    modes.clear()
    jacobian(out_writer, x[:2].copy(), 0.5, np.zeros(3))          # taller: forward
    assert modes == [Forward] * 2
    # of the output's dtype, as by columns
    assert jacobian(out_writer, x.astype(np.float32), 0.5, np.zeros(3)).dtype == np.float64


@njit
def _double_in_place_into_sum(x, out):
    x *= 2.0
    out[0] += (x * 2.0).sum()


@njit
def _update_in_place(x):
    x[:] = np.sin(x) * x
    return x * 2.0


@njit
def _double_in_place_then_cube(x):
    x *= 2.0
    return np.array([(x ** 3).sum()])


@njit
def _double_in_place_into(x, out):
    x *= 2.0
    out[:] = x * 2.0


@pytest.mark.parametrize("g, args, want", [
    (_update_in_place, (), lambda x: np.diag(2 * (np.cos(x) * x + np.sin(x)))),
    (_double_in_place_then_cube, (), lambda x: (24 * x ** 2)[None, :]),      # by rows
    (_double_in_place_into, (np.zeros(3),), lambda x: 4.0 * np.eye(3)),
    (_double_in_place_into_sum, (np.ones(1),), lambda x: np.full((1, 3), 4.0)),
], ids=["forward", "reverse", "output_argument", "output_argument_by_rows"])
def test_jacobian_of_a_function_updating_its_input_in_place(g, args, want):
    """Every pass starts from x's initial values (not from what the previous
    pass left), and x ends as after one call of g."""
    x0 = np.array([0.3, 0.7, 1.1])
    x = x0.copy()
    once = x0.copy()
    g(once, *[a.copy() for a in args])
    assert_close(jacobian(g, x, *args), want(x0), rtol=1e-14)
    assert_close(x, once, rtol=1e-15)


def test_jacobian_consistent_with_hessian():
    """The Jacobian of the gradient (written to an output) is the Hessian."""
    @njit
    def rosen_grad_out(x, g):
        for i in range(g.shape[0]):
            g[i] = 0.0
        for i in range(x.shape[0] - 1):
            r = x[i + 1] - x[i] ** 2
            g[i] += -400.0 * x[i] * r - 2.0 * (1.0 - x[i])
            g[i + 1] += 200.0 * r

    x = np.array([0.3, -0.5, 1.2, 0.8])
    J = jacobian(rosen_grad_out, x, np.zeros(4))
    assert_close(J, hessian(rosenbrock, x), rtol=1e-13)


# =============================================================================
# errors
# =============================================================================
@njit
def returns_array(x):
    return x * 2.0


@njit
def returns_none(x, out):
    out[0] = np.sum(x)


def test_hvp_of_array_returning_function_is_type_error():
    with pytest.raises(TypeError, match="float scalar"):
        hvp(returns_array, X5, X5)


def test_hessian_of_array_returning_function_is_type_error():
    with pytest.raises(TypeError):
        hessian(returns_array, X5)


def test_hvp_of_none_returning_function_is_type_error():
    with pytest.raises(TypeError):
        hvp(returns_none, X5, X5, np.zeros(1))


def test_hvp_with_v_of_wrong_shape_is_value_error():
    with pytest.raises(ValueError, match="shape"):
        hvp(rosenbrock, X5, np.ones(4))
    with pytest.raises(ValueError):
        hvp(rosenbrock, X5, np.ones((5, 1)))


def test_hvp_with_array_v_for_scalar_x_is_type_error():
    with pytest.raises(TypeError):
        hvp(scalar_fn, 0.7, np.ones(3), 1.3, 2)


def test_hvp_of_integer_x_is_type_error():
    with pytest.raises(TypeError):
        hvp(rosenbrock, np.arange(5), np.ones(5))
    with pytest.raises(TypeError):
        hessian(scalar_fn, 1, 1.3, 2)


def test_hvp_with_non_const_annotation_after_x_is_type_error():
    with pytest.raises(TypeError):
        hvp(quadratic_form, X5, X5, Duplicated(np.eye(5), np.eye(5)))
    with pytest.raises(TypeError):
        hvp(scalar_fn, 0.7, 1.0, Active(1.3), 2)


def test_jacobian_of_none_returning_function_without_output_is_type_error():
    @njit
    def nothing(x, k):
        return None

    with pytest.raises(TypeError):
        jacobian(nothing, X5, 3)


# =============================================================================
# the seed programs (examples/)
# =============================================================================
_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "examples")
if _EXAMPLES not in sys.path:
    sys.path.insert(0, _EXAMPLES)

import dynamic_expressions as de  # noqa: E402
import scan as scan_example  # noqa: E402

_slow = pytest.mark.skipif(not SLOW, reason="a ~1 minute Numba compile and enzpy "
                                            "builds; set ENZPY_SLOW=1")
_losses: dict = {}


def tree_losses(k, fuse_level):
    """(loss_wrt_X, loss_wrt_val) for the evaluator of ``operator_set(k)`` at
    ``fuse_level``: the differentiated array comes first (hvp's x)."""
    key = (k, fuse_level)
    if key not in _losses:
        ev = de.build_evaluator(k, fuse_level)
        eta = ev.eval_tree_array

        @njit
        def loss_wrt_X(X, degree, constant, val, feature, op, left, right):
            tree = (degree, constant, val, feature, op, left, right)
            return np.sum(eta(tree, X)[0])

        @njit
        def loss_wrt_val(val, degree, constant, feature, op, left, right, X):
            tree = (degree, constant, val, feature, op, left, right)
            r = eta(tree, X)[0]
            return np.sum(r * r)

        _losses[key] = (loss_wrt_X, loss_wrt_val, ev)
    return _losses[key]


def seed_trees():
    x0, x1, x2 = ("x", 0), ("x", 1), ("x", 2)
    c = lambda v: ("c", v)  # noqa: E731
    add = lambda a, b: ("b", 0, a, b)  # noqa: E731
    sub = lambda a, b: ("b", 1, a, b)  # noqa: E731
    cos = lambda a: ("u", 0, a)  # noqa: E731
    sin = lambda a: ("u", 1, a)  # noqa: E731
    return {
        # fused patterns at fuse level 2, plain recursion at level 1
        "mixed": add(cos(sub(x0, c(0.5))), sin(add(x1, x2))),
        "deep": sub(sin(cos(add(x0, c(0.3)))), cos(sub(c(1.2), sin(x2)))),
        "products_of_features": cos(add(sin(sub(x0, x1)), add(x2, cos(x0)))),
        # operator_set(1) (add, cos) only: the fused patterns at a small build
        "one_operator_each": add(cos(add(x0, c(0.5))), cos(add(cos(x1), add(x2, x0)))),
    }


@pytest.fixture(scope="module")
def seed_X():
    return np.random.default_rng(123).standard_normal((3, 12))


def _check_tree_hvps(k, fuse_level, X, names, wrt_val=True):
    loss_X, loss_val, ev = tree_losses(k, fuse_level)
    trees = seed_trees()
    rng = np.random.default_rng(7)
    for name in names:
        tree = de.tree_from_nested(trees[name])
        rest = (tree.degree, tree.constant, tree.val, tree.feature, tree.op, tree.left,
                tree.right)
        # the wrapper is the evaluator's loss
        out = np.zeros(1)
        ev.loss(*tree, X, out)
        assert loss_X(X, *rest) == pytest.approx(out[0], rel=1e-14)
        v = rng.standard_normal(X.shape)
        hv = hvp(loss_X, X, v, *rest)
        assert_close(hv, fd_hvp(loss_X, X, v, *rest, eps=1e-5), rtol=1e-6, atol=1e-8,
                     what=f"tree {name}: hvp wrt X")
        # sum over columns: the Hessian wrt X is block diagonal over data points,
        # so a direction in one column only moves that column
        e = np.zeros_like(X)
        e[:, 3] = rng.standard_normal(3)
        hv1 = hvp(loss_X, X, e, *rest)
        assert not np.delete(hv1, 3, axis=1).any(), f"tree {name}"
        if not wrt_val:
            continue
        # wrt the constants of the tree, of the sum of squares
        rest_val = (tree.degree, tree.constant, tree.feature, tree.op, tree.left,
                    tree.right, X)
        w = np.where(tree.constant == 1, rng.standard_normal(tree.val.shape), 0.0)
        hw = hvp(loss_val, tree.val, w, *rest_val)
        assert_close(hw, fd_hvp(loss_val, tree.val, w, *rest_val, eps=1e-5), rtol=1e-6,
                     atol=1e-8, what=f"tree {name}: hvp wrt val")
        assert not hw[tree.constant == 0].any()


def test_tree_evaluator_hvp_fuse_level_1(seed_X):
    """The regular run: hvp wrt X (one hvp build and one reverse build of a
    ~4600-instruction program, after a ~15 s Numba compile)."""
    _check_tree_hvps(2, 1, seed_X, ["mixed", "deep", "products_of_features"], wrt_val=False)


def test_tree_evaluator_hvp_fuse_level_2_one_operator_each():
    """The regular run at fuse level 2: the fused kernels, with one binary and
    one unary operator (a new process: a separate evaluator's builds)."""
    _in_fresh_process("""
        import numpy as np
        X = np.random.default_rng(123).standard_normal((3, 12))
        t._check_tree_hvps(1, 2, X, ["one_operator_each"])
    """)


@_slow
def test_tree_evaluator_hvp_fuse_level_1_wrt_constants(seed_X):
    _check_tree_hvps(2, 1, seed_X, ["mixed", "deep", "products_of_features"])


def _in_fresh_process(body, timeout=900):
    """Run ``body`` (Python source; ``t`` is this module) in a new interpreter.

    The bigger evaluators are checked in processes of their own, so their
    builds do not accumulate in the test process."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = (f"import sys; sys.path[:0] = [{here!r}, {_EXAMPLES!r}]\n"
              "import test_second_order as t\n" + textwrap.dedent(body))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-1000:], proc.stderr[-3000:])
    return proc.stdout


@_slow
def test_tree_evaluator_hvp_fuse_level_2():
    _in_fresh_process("""
        import numpy as np
        X = np.random.default_rng(123).standard_normal((3, 12))
        t._check_tree_hvps(2, 2, X, ["mixed", "deep", "products_of_features"])
    """)


@_slow
def test_tree_evaluator_hvp_random_trees_4_ops():
    _in_fresh_process("""
        import numpy as np
        X = np.random.default_rng(123).standard_normal((3, 12))
        loss_X, loss_val, ev = t.tree_losses(4, 1)
        ops = t.de.operator_set(4)
        seen = set()
        for seed in (1, 20, 40):
            tree, _ = t.de.pick_tree(12, 3, ops, X, seed=seed)
            name = t.de.tree_string(tree, ops)
            assert name not in seen
            seen.add(name)
            rest = (tree.degree, tree.constant, tree.val, tree.feature, tree.op, tree.left,
                    tree.right)
            v = np.random.default_rng(seed).standard_normal(X.shape)
            # some random trees (exp(exp(...))) have huge third derivatives:
            # one Richardson step on the central difference
            d1 = t.fd_hvp(loss_X, X, v, *rest, eps=2e-5)
            d2 = t.fd_hvp(loss_X, X, v, *rest, eps=1e-5)
            t.assert_close(t.hvp(loss_X, X, v, *rest), (4 * d2 - d1) / 3, rtol=1e-6,
                           atol=1e-7, what=name)
    """)


def test_evaluator_compiled_after_a_build_runs():
    """After an enzpy build of one evaluator's loss (Reverse here; Forward and
    hvp builds too), a second evaluator compiled afterwards runs. It used to
    segfault: Numba's runtime linker bound a mutual-recursion pointer to the
    derivative module's optimized internal copy of a shared kernel, which
    kept the kernel's name (``is_constant``); the copies are renamed now."""
    _in_fresh_process("""
        import numpy as np
        from enzpy import Const, Duplicated, Reverse, autodiff
        de = t.de
        X = np.random.default_rng(123).standard_normal((3, 12))
        tree = de.tree_from_nested(("u", 0, ("x", 0)))          # cos(x0)
        ev1 = de.build_evaluator(1, 1)
        out = np.zeros(1)
        args = [Const(a) for a in tree] + [Duplicated(X.copy(), np.zeros_like(X)),
                                           Duplicated(out, np.ones(1))]
        autodiff(Reverse, ev1.loss, *args)
        ev2 = de.build_evaluator(1, 1)
        ev2.loss(*tree, X, out)
        assert abs(out[0] - np.cos(X[0]).sum()) < 1e-12
    """)


@_slow
def test_tree_evaluator_forward_tangent(seed_X):
    """Forward mode through the evaluator: the tangent of the loss along V
    equals <grad, V>."""
    loss_X, _, _ = tree_losses(2, 1)
    tree = de.tree_from_nested(seed_trees()["mixed"])
    rest = (tree.degree, tree.constant, tree.val, tree.feature, tree.op, tree.left,
            tree.right)
    V = np.random.default_rng(3).standard_normal(seed_X.shape)
    (t,) = autodiff(Forward, loss_X, Duplicated(seed_X.copy(), V.copy()), *rest)
    g = grad(loss_X, seed_X, *rest)
    assert t == pytest.approx(np.sum(g * V), rel=1e-12)


@pytest.mark.parametrize("T", [1, 2, 40])
def test_scan_hvp(T):
    rng = np.random.default_rng(T)
    s0, ys = rng.uniform(0.5, 1.5, 2), rng.uniform(0.5, 1.5, T)
    for v in (np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.3, -0.7])):
        hv = hvp(scan_example.scan_loss, s0, v, ys)
        assert_close(hv, fd_hvp(scan_example.scan_loss, s0, v, ys), rtol=1e-6, atol=1e-8)
    H = hessian(scan_example.scan_loss, s0, ys)
    assert_close(H, H.T, rtol=1e-12, atol=1e-12)


def test_scan_mwe_hvp():
    """The MWE's f(s0, T) with ys = ones(T)."""
    s0 = np.ones(2)
    for T in (1, 80):
        H = hessian(scan_example.f, s0, T)
        assert_close(H, fd_hessian(scan_example.f, s0, T), rtol=1e-6, atol=1e-8)
    # T = 1: f = (1 + 2) s0[0], linear
    assert_close(hessian(scan_example.f, s0, 1), np.zeros((2, 2)), atol=0)


# -- a derivative shared between builds ------------------------------------------------------
def test_a_shared_derivative_keeps_what_it_assumed_of_memory():
    """hvp of a dot of read-only inputs writes the second-order derivative of
    BLAS's dot re-reading its operands in the reverse sweep; the later build of
    an ODE whose final dot is of an array written during the call must not
    reuse it (it did, and its Hessian-vector product was wrong by 10%)."""
    import numpy_corpus as corpus                # (tests/: the NumPy corpus)
    dot = njit(corpus.dot_11.py_func)             # (fresh: built here, in this order)
    ode = njit(corpus.ode_rk4.py_func)
    rng = np.random.default_rng(21)
    x, y, v = rng.standard_normal(5), rng.standard_normal(5), rng.standard_normal(5)
    hvp(dot, x, v, y)
    y0, a, w = rng.standard_normal(3), 0.5 * rng.standard_normal((3, 3)), rng.standard_normal(3)
    got = hvp(ode, y0, w, a, 0.1, 10)
    h = 1e-5

    def gradient(point):
        g = np.zeros(3)
        autodiff(Reverse, ode, Duplicated(point.copy(), g), Const(a), Const(0.1), Const(10))
        return g
    expected = (gradient(y0 + h * w) - gradient(y0 - h * w)) / (2 * h)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


# -- parameters left to their defaults, as autodiff takes them (Const(default)) ------------
@njit
def _cubes_scaled(x, c=2.0):
    return (x ** 3).sum() * c


@njit
def _cubes_scaled_array(x, c=2.0):
    return x ** 3 * c


def test_defaulted_parameters_in_every_helper():
    """hvp, hessian, jacobian and vjp raised Numba's "Signature mismatch" when a
    parameter was left to its default."""
    x, v = np.array([0.3, 0.5, 0.9]), np.array([1.0, -0.5, 0.25])
    np.testing.assert_allclose(hvp(_cubes_scaled, x, v), 12 * x * v, rtol=1e-12)
    np.testing.assert_allclose(hvp(_cubes_scaled, x, v, 3.0), 18 * x * v, rtol=1e-12)
    np.testing.assert_allclose(hessian(_cubes_scaled, x), np.diag(12 * x), rtol=1e-12)
    np.testing.assert_allclose(jacobian(_cubes_scaled, x), 6 * x ** 2, rtol=1e-12)
    np.testing.assert_allclose(jacobian(_cubes_scaled_array, x), np.diag(6 * x ** 2),
                               rtol=1e-12)
    out, pullback = enzpy.vjp(_cubes_scaled_array, x)
    np.testing.assert_allclose(out, 2 * x ** 3, rtol=1e-12)
    (dx,) = pullback(v)
    np.testing.assert_allclose(dx, 6 * x ** 2 * v, rtol=1e-12)
    (dx, dc) = enzpy.vjp(_cubes_scaled_array, x, 3.0)[1](v)
    np.testing.assert_allclose(dx, 9 * x ** 2 * v, rtol=1e-12)
    assert dc == pytest.approx((x ** 3 * v).sum(), rel=1e-12)
    np.testing.assert_allclose(enzpy.gradient(_cubes_scaled, x), 6 * x ** 2, rtol=1e-12)


@njit
def _weighted_cubes(x, w, c=2.0):
    return (w * x ** 3).sum() * c


def test_a_missing_argument_is_named():
    x = np.array([0.3, 0.5])
    for call in (lambda: hvp(_weighted_cubes, x, x), lambda: jacobian(_weighted_cubes, x),
                 lambda: hessian(_weighted_cubes, x)):
        with pytest.raises(TypeError, match="'_weighted_cubes' is missing the argument"
                                            r"\(s\) w: pass them after x"):
            call()


@njit
def _squares_through_a_scratch(c, scratch):
    scratch[0] = c[0] * c[1]
    return scratch[0] ** 2


def test_hvp_of_a_function_writing_a_constant_buffer_says_what_to_do_there():
    # (the advice was only to pass the buffer as Duplicated, which hvp refuses: a dead end)
    c, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    with pytest.raises(enzpy.UnsupportedError,
                       match=r"pass 'scratch' as Duplicated.*hvp and hessian take the "
                             r"arguments after x as constants: allocate such a buffer inside"):
        hvp(_squares_through_a_scratch, c, v, np.zeros(2))


@njit
def _product_energy(A, B):
    return np.sum((A @ B) ** 2)


def test_hvp_with_a_constant_sharing_memory_with_x_says_what_it_knows():
    """Through a product's rule hvp cannot tell which arguments the function
    writes, so a constant sharing memory with x is refused; the message claimed
    the function writes x, which it does not."""
    E = np.eye(3) + 1.0
    with pytest.raises(ValueError, match=r"may write argument 0 \(as far as enzpy can tell\)"
                                         r".*pass distinct arrays \(a copy\)"):
        enzpy.hvp(_product_energy, E, np.ones((3, 3)), E)
    np.testing.assert_allclose(enzpy.hvp(_product_energy, E, np.ones((3, 3)), E.copy()),
                               np.full((3, 3), 32.0), rtol=1e-12)


@njit
def _many_scalars(x, a0, a1, a2, a3, a4, a5):
    s = math.sin(a0 * x[0]) * a1 + math.sin(a1 * x[1]) * a2 + math.sin(a2 * x[2]) * a3
    return s + math.sin(a3 * x[0]) * a4 + math.sin(a4 * x[1]) * a5 + math.sin(a5 * x[2]) * a0


@njit
def straight_line_of_scalars(x):
    return _many_scalars(x, x[0] * 1.5, x[1] * 2.0, x[2] * 0.5, x[0] * x[1], x[2] + 1.0, x[1])


def test_long_blocks_get_fast_code_generation_and_the_same_derivative(monkeypatch):
    # (register allocation of a block keeping thousands of values live grew about
    # quadratically: an hvp through 80 scalars built in 20 s, 3 s with LLVM's fast
    # code generation of such functions; a small threshold makes this one qualify)
    monkeypatch.setenv("ENZPY_CACHE", "0")
    x, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    full, fast_built = (njit(straight_line_of_scalars.py_func) for _ in range(2))
    expected = enzpy.hvp(full, x, v)
    assert build_report(full)[-1].fast_codegen == []
    monkeypatch.setattr(enzpy.backend, "FAST_CODEGEN_INSTRUCTIONS", 40)
    fast = enzpy.hvp(fast_built, x, v)
    assert build_report(fast_built)[-1].fast_codegen
    np.testing.assert_allclose(fast, expected, rtol=1e-13)
    h = 1e-6
    grad = lambda y: enzpy.gradient(full, y)       # noqa: E731
    np.testing.assert_allclose(fast, (grad(x + h * v) - grad(x - h * v)) / (2 * h), rtol=1e-6)
