"""The linear algebra helpers enzpy's own rules call (enzpy/linalg.py): the
triangular solve (BLAS trsm) of cholesky's rules and the determinant and inverse
from one LU factorization of det's and slogdet's, each with a rule of its own
(their values, and their rules in reverse mode, forward mode and second order,
against finite differences; only the triangle ``lower`` names is read by the
triangular solve: the other one carries no derivative), cholesky's blocked
reverse sweep, and cholesky, eigh and eigvalsh of matrices that are not symmetric
(they read the lower triangle only). The tests marked ``_slow`` (QR's second order,
float32 lstsq, lstsq compiled in a fresh process) run with ``ENZPY_SLOW=1``."""
import os
import subprocess
import sys
import warnings

import numba
import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Forward, Reverse, autodiff, frontend
from enzpy.linalg import _cholesky_adjoint, _slogdet_inverse, _trsolve

SLOW = bool(os.environ.get("ENZPY_SLOW"))
_slow = pytest.mark.skipif(not SLOW, reason="half a minute or more; set ENZPY_SLOW=1")
CASES = [(lower, trans) for lower in (True, False) for trans in (False, True)]


def _triangular(rng, n, lower):
    t = rng.standard_normal((n, n)) + 3.0 * np.eye(n)
    return t                  # the other triangle is garbage _trsolve must not read


def _op(t, lower, trans):
    tri = np.tril(t) if lower else np.triu(t)
    return tri.T if trans else tri


@pytest.mark.parametrize("lower,trans", CASES)
@pytest.mark.parametrize("n,k", [(1, 1), (4, 3), (5, 1)])
def test_values(lower, trans, n, k):
    rng = np.random.default_rng(n + 10 * k)
    t, b = _triangular(rng, n, lower), rng.standard_normal((n, k))
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-4)):
        x = _trsolve(t.astype(dtype), b.astype(dtype), lower, trans)
        assert x.dtype == dtype
        np.testing.assert_allclose(_op(t, lower, trans) @ x, b, rtol=tol, atol=tol)
    # any layout of either operand
    x = _trsolve(np.asfortranarray(t), np.asfortranarray(b), lower, trans)
    np.testing.assert_allclose(_op(t, lower, trans) @ x, b, rtol=1e-12, atol=1e-12)


@njit
def _weighted(t, b, w, lower, trans):
    return (w * _trsolve(t, b, lower, trans)).sum()


def _fd(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("lower,trans", CASES)
def test_reverse_and_forward_mode(lower, trans):
    rng = np.random.default_rng(3)
    n, k = 4, 3
    t, b, w = _triangular(rng, n, lower), rng.standard_normal((n, k)), rng.standard_normal((n, k))
    dt, db = np.zeros_like(t), np.zeros_like(b)
    autodiff(Reverse, _weighted, Duplicated(t, dt), Duplicated(b, db), Const(w), Const(lower),
             Const(trans))
    want_t = _fd(lambda x: _weighted(x, b, w, lower, trans), t)
    want_b = _fd(lambda x: _weighted(t, x, w, lower, trans), b)
    np.testing.assert_allclose(dt, want_t, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, want_b, rtol=1e-6, atol=1e-8)
    assert not (np.triu(dt, 1) if lower else np.tril(dt, -1)).any()
    vt, vb = rng.standard_normal((n, n)), rng.standard_normal((n, k))
    (tangent,) = autodiff(Forward, _weighted, Duplicated(t, vt), Duplicated(b, vb), Const(w),
                          Const(lower), Const(trans))
    assert tangent == pytest.approx(np.sum(dt * vt) + np.sum(db * vb), rel=1e-10)


@njit
def _squared(t, b, lower, trans):
    x = _trsolve(t, b, lower, trans)
    return (x * x).sum()


@pytest.mark.parametrize("lower,trans", [(True, False), (True, True)])
def test_second_order(lower, trans):
    # reverse over the rule's forward mode, and its bwd differentiated again
    rng = np.random.default_rng(4)
    t, b, v = _triangular(rng, 3, lower), rng.standard_normal((3, 2)), rng.standard_normal((3, 3))

    def gradient(x):
        g = np.zeros_like(x)
        autodiff(Reverse, _squared, Duplicated(x, g), Const(b), Const(lower), Const(trans))
        return g

    h = 1e-5
    want = (gradient(t + h * v) - gradient(t - h * v)) / (2 * h)
    got = enzpy.hvp(_squared, t, v, b, lower, trans)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# -- sign, log|det| and inverse from one LU factorization ------------------------------------
@njit
def _logdet_and_inverse(a, w):
    sign, logdet, ainv = _slogdet_inverse(a)
    return sign * logdet + (w * ainv).sum()


@njit
def _numba_slogdet(a):
    return np.linalg.slogdet(a)


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_slogdet_inverse_values(n, dtype):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dtype)
    a[0] *= -1.0                                   # negative determinants too
    sign, logdet, ainv = _slogdet_inverse(a)
    assert (sign, logdet) == _numba_slogdet(a)         # the same factorization and walk
    want_sign, want_logdet = np.linalg.slogdet(a.astype(np.float64))
    assert sign == want_sign
    assert logdet == pytest.approx(want_logdet, rel=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(ainv, np.linalg.inv(a.astype(np.float64)),
                               rtol=1e-3 if dtype == np.float32 else 1e-10, atol=1e-5)
    assert ainv.dtype == dtype


def test_slogdet_inverse_rule_in_reverse_mode():
    rng = np.random.default_rng(7)
    a, w = rng.standard_normal((4, 4)) + 2.0 * np.eye(4), rng.standard_normal((4, 4))
    da = np.zeros_like(a)
    autodiff(Reverse, _logdet_and_inverse, Duplicated(a, da), Const(w))
    np.testing.assert_allclose(da, _fd(lambda x: _logdet_and_inverse(x, w), a),
                               rtol=1e-6, atol=1e-8)


@njit
def _det(a):
    return np.linalg.det(a)


@njit
def _logabsdet(a):
    return np.linalg.slogdet(a)[1]


def test_slogdet_of_a_singular_matrix_follows_its_minus_infinity():
    """log|det| is -inf there and its gradient, adj(a) / det(a), infinite (both
    modes raised LinAlgError where the primal returns -inf; once a rule's float
    result was infinite, its cotangent was NaN too)."""
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    da = np.zeros_like(a)
    _, logdet = autodiff(enzpy.ReverseWithPrimal, _logabsdet, Duplicated(a, da))
    assert logdet == -np.inf
    np.testing.assert_array_equal(da, [[np.inf, -np.inf], [-np.inf, np.inf]])
    (t,) = autodiff(Forward, _logabsdet, Duplicated(a, np.array([[1.0, 0.0], [0.0, 0.0]])))
    assert not np.isfinite(t)       # (inf times the zero entries of the direction: nan)


def _point_gradient(f):
    """(a, v, the gradient of f) at a point with a negative determinant."""
    rng = np.random.default_rng(8)
    a, v = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    a[0] *= -1.0

    def gradient(x):
        g = np.zeros_like(x)
        autodiff(Reverse, f, Duplicated(x, g))
        return g

    return a, v, gradient


@pytest.mark.parametrize("f", [_det, _logabsdet], ids=["det", "slogdet"])
def test_det_and_slogdet_in_forward_mode(f):
    a, v, gradient = _point_gradient(f)
    np.testing.assert_allclose(gradient(a), _fd(f, a), rtol=1e-6, atol=1e-8)
    (tangent,) = autodiff(Forward, f, Duplicated(a, v))
    assert tangent == pytest.approx(np.sum(gradient(a) * v), rel=1e-10)


def test_slogdet_second_order():
    # (det's: test_det_second_order_through_its_cofactors_rule) second order
    # differentiates slogdet's jvp rule in reverse, through the rule above
    a, v, gradient = _point_gradient(_logabsdet)
    h = 1e-5
    want = (gradient(a + h * v) - gradient(a - h * v)) / (2 * h)
    np.testing.assert_allclose(enzpy.hvp(_logabsdet, a, v), want, rtol=1e-5, atol=1e-7)


# -- cholesky's blocked reverse sweep ---------------------------------------------------------
def _cholesky_closed_form(lower, g):
    """sym(L^-T Phi(L^T g) L^-1), Phi: the lower triangle, its diagonal halved;
    folded into the lower triangle, the one cholesky reads."""
    p = np.tril(lower.T @ g)
    p[np.diag_indices_from(p)] *= 0.5
    s = np.linalg.solve(lower.T, np.linalg.solve(lower.T, p).T)
    return np.tril(s + s.T, -1) + np.diag(np.diag(s))


@pytest.mark.parametrize("n", [1, 2, 5, 31, 32, 33, 100, 450])
def test_cholesky_adjoint_across_blocks(n):
    # blocks of 32 rows (64 from n = 400): one block, a block and a row, many
    rng = np.random.default_rng(n)
    s = rng.standard_normal((n, n))
    lower = np.linalg.cholesky(s @ s.T + n * np.eye(n))
    g = rng.standard_normal((n, n))                # (its upper triangle is not read)
    want = _cholesky_closed_form(lower, g)
    np.testing.assert_allclose(_cholesky_adjoint(lower, g), want, rtol=0,
                               atol=1e-12 * np.abs(want).max())
    got32 = _cholesky_adjoint(lower.astype(np.float32), g.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=0, atol=1e-5 * np.abs(want).max())


@njit
def _weighted_cholesky(s0, w):
    return (w * np.linalg.cholesky(0.5 * (s0 + s0.T))).sum()


def test_cholesky_gradient_of_a_large_matrix():
    # several blocks, against a central difference along a random direction
    rng = np.random.default_rng(9)
    n = 100
    s = rng.standard_normal((n, n))
    a, w, v = s @ s.T + n * np.eye(n), rng.standard_normal((n, n)), rng.standard_normal((n, n))
    da = np.zeros_like(a)
    autodiff(Reverse, _weighted_cholesky, Duplicated(a, da), Const(w))
    h = 1e-6
    fd = (_weighted_cholesky(a + h * v, w) - _weighted_cholesky(a - h * v, w)) / (2 * h)
    assert np.sum(da * v) == pytest.approx(fd, rel=1e-6)


@njit
def _lstsq_weighted(A, b, w):
    x, res, rank, sv = np.linalg.lstsq(A, b)
    return np.dot(w, x)


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.float32, marks=_slow)])
def test_lstsq_of_a_wide_matrix_is_the_minimum_norm_solution(dtype):
    # Fewer rows than columns: LAPACK returns x = pinv(A) b. The rule solved with
    # A^T A (singular there) and returned a wrong derivative without an error.
    rng = np.random.default_rng(7)
    A = rng.standard_normal((3, 5)).astype(dtype)
    b = rng.standard_normal(3).astype(dtype)
    w = np.arange(1.0, 6.0).astype(dtype)
    P = np.linalg.pinv(A.astype(np.float64))
    dA, db = np.zeros_like(A), np.zeros_like(b)
    autodiff(Reverse, _lstsq_weighted, Duplicated(A, dA), Duplicated(b, db), Const(w))
    tol = 1e-9 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(db, P.T @ w, rtol=tol, atol=tol)
    # d/dA of w . pinv(A) b, by central differences in float64
    h, fd = 1e-6, np.zeros((3, 5))
    A64, b64, w64 = A.astype(np.float64), b.astype(np.float64), w.astype(np.float64)
    for i in range(3):
        for j in range(5):
            up, dn = A64.copy(), A64.copy()
            up[i, j] += h
            dn[i, j] -= h
            fd[i, j] = (w64 @ np.linalg.pinv(up) @ b64 - w64 @ np.linalg.pinv(dn) @ b64) / (2 * h)
    np.testing.assert_allclose(dA, fd, rtol=tol, atol=tol * 10)
    tA, tb = rng.standard_normal((3, 5)).astype(dtype), rng.standard_normal(3).astype(dtype)
    (t,) = autodiff(Forward, _lstsq_weighted, Duplicated(A, tA), Duplicated(b, tb), Const(w))
    assert t == pytest.approx(float(np.sum(dA * tA) + db @ tb), rel=tol * 10, abs=tol)


@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (3, 3)])
def test_lstsq_of_a_rank_deficient_matrix_is_the_derivative_at_constant_rank(shape):
    # LAPACK returns pinv(A) b (cut at the rank it finds); the rule raised LinAlgError where
    # JAX is finite. A has an exactly zero column (tall) or row, which perturbations E A
    # (A E) keep, so the rank stays and central differences along them check the
    # derivative; it equals that of x = pinv(A) b, whose rule is checked apart.
    rng = np.random.default_rng(11)
    m, n = shape
    A, b, w = rng.standard_normal((m, n)), rng.standard_normal(m), rng.standard_normal(n)
    tall = m > n
    if tall:
        A[:, -1] = 0.0
    else:
        A[-1] = 0.0
    assert np.linalg.matrix_rank(A) == min(m, n) - 1
    dA, db = np.zeros_like(A), np.zeros_like(b)
    autodiff(Reverse, _lstsq_weighted, Duplicated(A, dA), Duplicated(b, db), Const(w))
    for _ in range(3):
        V = rng.standard_normal((m, m)) @ A if tall else A @ rng.standard_normal((n, n))
        h = 1e-6
        fd = (_lstsq_weighted(A + h * V, b, w) - _lstsq_weighted(A - h * V, b, w)) / (2 * h)
        assert np.sum(dA * V) == pytest.approx(fd, rel=1e-6, abs=1e-9)
        (t,) = autodiff(Forward, _lstsq_weighted, Duplicated(A, V), Duplicated(b, np.zeros(m)),
                        Const(w))
        assert t == pytest.approx(fd, rel=1e-6, abs=1e-9)
    dA_pinv, db_pinv = np.zeros_like(A), np.zeros_like(b)
    autodiff(Reverse, _pinv_weighted, Duplicated(A, dA_pinv), Duplicated(b, db_pinv), Const(w))
    np.testing.assert_allclose(dA, dA_pinv, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, db_pinv, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, np.linalg.pinv(A).T @ w, rtol=1e-9, atol=1e-12)


@njit
def _pinv_weighted(A, b, w):
    return np.dot(w, np.linalg.pinv(A) @ b)


@njit
def _qr_weighted(A, wq, wr):
    Q, R = np.linalg.qr(A)
    return (wq * Q).sum() + (wr * R * R).sum()


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (1, 3)])
def test_qr_of_wide_tall_and_square_matrices_in_every_mode(shape):
    rng = np.random.default_rng(8)
    A = rng.standard_normal(shape)
    k = min(shape)
    wq, wr = rng.standard_normal((shape[0], k)), rng.standard_normal((k, shape[1]))
    want = _fd(lambda x: _qr_weighted(x, wq, wr), A)
    dA = np.zeros_like(A)
    autodiff(Reverse, _qr_weighted, Duplicated(A, dA), Const(wq), Const(wr))
    np.testing.assert_allclose(dA, want, rtol=1e-6, atol=1e-7)
    v = rng.standard_normal(shape)
    (tangent,) = autodiff(Forward, _qr_weighted, Duplicated(A, v), Const(wq), Const(wr))
    assert tangent == pytest.approx(np.sum(want * v), rel=1e-6, abs=1e-7)


@_slow
def test_qr_of_a_wide_matrix_second_order():
    rng = np.random.default_rng(9)
    A = rng.standard_normal((2, 4))
    wq, wr = rng.standard_normal((2, 2)), rng.standard_normal((2, 4))
    v = rng.standard_normal(A.shape)

    def gradient(x):
        dx = np.zeros_like(x)
        autodiff(Reverse, _qr_weighted, Duplicated(x, dx), Const(wq), Const(wr))
        return dx

    h = 1e-5
    want = (gradient(A + h * v) - gradient(A - h * v)) / (2 * h)
    np.testing.assert_allclose(enzpy.hvp(_qr_weighted, A, v, wq, wr), want, rtol=1e-5, atol=1e-6)


@njit
def _vector_norm(x):
    return np.linalg.norm(x)


@njit
def _ridge(w):
    return 0.5 * np.linalg.norm(w) ** 2 + w.sum()


@pytest.mark.parametrize("x", [
    np.array([1e200, 1e200]), np.array([3e-170, 4e-170]),
    np.array([1e20, 1e20], np.float32), np.array([1e-23, 1e-23], np.float32),
    np.array([0.3, -0.4, 1.2])], ids=["huge", "tiny", "huge_f32", "tiny_f32", "plain"])
def test_vector_norm_scales_like_blas(x):
    """The rule's norm is BLAS's scaled one: no overflow to inf or division by
    an underflowed 0 where the norm itself is finite and non-zero."""
    dx = np.zeros_like(x)
    _, primal = autodiff(enzpy.ReverseWithPrimal, _vector_norm, Duplicated(x, dx))
    scale = np.abs(x.astype(np.float64)).max()
    r = scale * np.linalg.norm(x / scale)           # (NumPy's own norm overflows)
    rtol = 1e-6 if x.dtype == np.float32 else 1e-14
    assert primal == pytest.approx(r, rel=rtol)
    np.testing.assert_allclose(dx, x / scale / (r / scale), rtol=rtol)
    v = np.linspace(1.0, 2.0, x.size).astype(x.dtype)
    (t,) = autodiff(Forward, _vector_norm, Duplicated(x, v))
    assert t == pytest.approx(float(np.dot(x / scale / (r / scale), v)), rel=rtol)


def test_norm_at_zero_takes_the_zero_subgradient():
    """At 0 the norm has a kink; its gradient there is 0 (as PyTorch), so a
    smooth function of it, 0.5 * norm(w)**2, has its true gradient."""
    w = np.zeros(3)
    dw = np.zeros(3)
    autodiff(Reverse, _vector_norm, Duplicated(w, dw))
    assert not dw.any()
    autodiff(Reverse, _ridge, Duplicated(w, dw))
    np.testing.assert_array_equal(dw, np.ones(3))
    (t,) = autodiff(Forward, _ridge, Duplicated(w, np.array([1.0, 2.0, 3.0])))
    assert t == 6.0


@pytest.mark.parametrize("a, cofactors", [
    (np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[4.0, -2.0], [-2.0, 1.0]])),   # rank 1
    (np.zeros((3, 3)), np.zeros((3, 3))),                                        # rank 0
    (np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]),
     np.array([[-3.0, 6.0, -3.0], [6.0, -12.0, 6.0], [-3.0, 6.0, -3.0]]))])
def test_det_gradient_at_a_singular_matrix_is_the_cofactor_matrix(a, cofactors):
    """det is a polynomial: its gradient, the cofactor matrix, exists at a
    singular matrix too (the inverse does not)."""
    da = np.zeros_like(a)
    _, d = autodiff(enzpy.ReverseWithPrimal, _det, Duplicated(a, da))
    assert d == 0.0
    np.testing.assert_allclose(da, cofactors, atol=1e-12)
    direction = np.arange(1.0, a.size + 1.0).reshape(a.shape)
    (tangent,) = autodiff(Forward, _det, Duplicated(a.copy(), direction))
    assert tangent == pytest.approx(np.sum(cofactors * direction), abs=1e-12)


@njit
def _det_squared(a):
    return np.linalg.det(a) ** 2 + np.linalg.det(a)


def test_det_second_order_through_its_cofactors_rule():
    """hvp differentiates det's jvp rule, det(a) and cofactors(a), in reverse:
    against central differences of the gradient, and exactly at a singular
    matrix (2 <cof, v> cof + dcof[v], with dcof[v] = [[v11, -v10], [-v01, v00]]
    for 2x2), where the inverse the rule used does not exist."""
    a, v, expected = _det_squared_point()
    np.testing.assert_allclose(enzpy.hvp(_det_squared, a, v), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        enzpy.hvp(_det_squared, np.array([[1.0, 2.0], [2.0, 4.0]]), np.ones((2, 2))),
        [[9.0, -5.0], [-5.0, 3.0]], atol=1e-12)


def _det_squared_point():
    """(a, v, central differences of the gradient along v)."""
    rng = np.random.default_rng(3)
    a, v = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))

    def gradient(at):
        da = np.zeros_like(at)
        autodiff(Reverse, _det_squared, Duplicated(at.copy(), da))
        return da

    return a, v, (gradient(a + 1e-6 * v) - gradient(a - 1e-6 * v)) / 2e-6


def test_det_second_order_in_single_precision():
    # det is a float64 (as Numba's), its cofactors too (the rule failed to compile)
    a, v, expected = _det_squared_point()
    single = enzpy.hvp(_det_squared, a.astype(np.float32), v.astype(np.float32))
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, expected, rtol=2e-3, atol=2e-3 * np.abs(expected).max())


@njit
def _det_of_dependent_rows(a):
    b = a.copy()
    b[3] = b[0] + b[1]                  # singular whatever a is: det(b) = 0 everywhere
    return np.linalg.det(b)


def test_det_second_order_at_nearly_singular_matrices():
    """Rounding leaves such a b a tiny det and a huge inverse: the second-order
    term det(a) a^-T dA^T a^-T cancelled them into 6.6 where the Hessian is 0
    (found by a review). The cofactors' derivative now comes from the SVD,
    without a division."""
    rng = np.random.default_rng(0)
    a, v = rng.standard_normal((4, 4)) + 3 * np.eye(4), rng.standard_normal((4, 4))
    assert np.abs(enzpy.hvp(_det_of_dependent_rows, a, v)).max() < 1e-12
    # a row a hair from dependent: the exact Hessian of the polynomial det
    b = a.copy()
    b[3] = b[0] + b[1] + 1e-13 * rng.standard_normal(4)
    hv = enzpy.hvp(_det, b, v)
    eps = 1e-5                           # (the cofactors by their minors: no inverse)
    cof = [np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(m, i, 0), j, 1))
                      for j in range(4)] for i in range(4)]) for m in (b + eps * v, b - eps * v)]
    np.testing.assert_allclose(hv, (cof[0] - cof[1]) / (2 * eps), atol=1e-7)


# -- cholesky, eigh and eigvalsh read the lower triangle only --------------------------------
@njit
def _cholesky_entry(a):
    return np.linalg.cholesky(a)[2, 1] + 0.3 * np.linalg.cholesky(a)[1, 0]


@njit
def _eigh_entry(a):
    w, v = np.linalg.eigh(a)
    return w[0] + 0.5 * w[2] + v[0, 1] * v[0, 1]


@njit
def _eigvalsh_entry(a):
    return (np.linalg.eigvalsh(a) * np.array([1.0, -0.5, 2.0])).sum()


@pytest.mark.parametrize("f", [_cholesky_entry, _eigh_entry, _eigvalsh_entry])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_symmetric_routines_of_a_matrix_that_is_not_symmetric(f, layout):
    # The upper triangle is never read: its derivative is 0 (before, half the lower
    # one's, as JAX's symmetrized convention gives; central differences disagreed)
    rng = np.random.default_rng(4)
    s = rng.standard_normal((3, 3))
    a = np.array(s @ s.T + 3 * np.eye(3) + np.triu(rng.standard_normal((3, 3)), 1), order=layout)
    want = _fd(f, a)
    assert np.all(np.triu(want, 1) == 0.0)
    da = np.zeros_like(a)
    autodiff(Reverse, f, Duplicated(a, da))
    np.testing.assert_allclose(da, want, rtol=1e-6, atol=1e-8)
    v = rng.standard_normal((3, 3))
    (t,) = autodiff(Forward, f, Duplicated(a, v))
    assert t == pytest.approx(np.sum(want * v), rel=1e-6)
    h = 1e-5
    w = rng.standard_normal((3, 3))

    def gradient(x):
        g = np.zeros_like(x)
        autodiff(Reverse, f, Duplicated(x, g))
        return g

    np.testing.assert_allclose(enzpy.hvp(f, a, w),
                               (gradient(a + h * w) - gradient(a - h * w)) / (2 * h),
                               rtol=1e-5, atol=1e-7)


# -- a cut-off that drops singular values that are not zero ------------------------------------
def _with_singular_values(rng, m, n, values):
    u = np.linalg.qr(rng.standard_normal((m, m)))[0][:, :len(values)]
    v = np.linalg.qr(rng.standard_normal((n, n)))[0][:, :len(values)]
    return u @ np.diag(values) @ v.T


@njit
def _weighted_pinv(a, w, rcond):
    return np.sum(np.linalg.pinv(a, rcond) * w)


@njit
def _weighted_lstsq(a, b, w, rcond):
    return np.dot(w, np.linalg.lstsq(a, b, rcond)[0])


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5)])
def test_pinv_cut_by_rcond_differentiates_the_truncation(shape):
    # rcond = 0.1 drops the singular value 0.01, far from the cut-off: the primal is
    # smooth there. The rule differentiated the pseudo-inverse of a itself (1-8% off).
    rng = np.random.default_rng(sum(shape))
    m, n = shape
    a = _with_singular_values(rng, m, n, [1.0, 0.5, 0.01])
    w = rng.standard_normal((n, m))

    def f(x):
        return _weighted_pinv(x, w, 0.1)

    def gradient(x):
        g = np.zeros_like(x)
        autodiff(Reverse, _weighted_pinv, Duplicated(x, g), Const(w), Const(0.1))
        return g

    want = _fd(f, a)
    np.testing.assert_allclose(gradient(a), want, rtol=1e-6, atol=1e-8)
    v = rng.standard_normal(shape)
    (t,) = autodiff(Forward, _weighted_pinv, Duplicated(a, v), Const(w), Const(0.1))
    assert t == pytest.approx(np.sum(want * v), rel=1e-6)
    h = 1e-5
    np.testing.assert_allclose(enzpy.hvp(_weighted_pinv, a, v, w, 0.1),
                               (gradient(a + h * v) - gradient(a - h * v)) / (2 * h),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4)])
def test_lstsq_cut_by_rcond_differentiates_the_truncation(shape):
    rng = np.random.default_rng(10 + sum(shape))
    m, n = shape
    a = _with_singular_values(rng, m, n, [1.0, 0.5, 0.01])
    b, w = rng.standard_normal(m), rng.standard_normal(n)
    da, db = np.zeros_like(a), np.zeros_like(b)
    autodiff(Reverse, _weighted_lstsq, Duplicated(a, da), Duplicated(b, db), Const(w),
             Const(0.1))
    np.testing.assert_allclose(da, _fd(lambda x: _weighted_lstsq(x, b, w, 0.1), a),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, _fd(lambda y: _weighted_lstsq(a, y, w, 0.1), b),
                               rtol=1e-6, atol=1e-8)
    va, vb = rng.standard_normal(shape), rng.standard_normal(m)
    (t,) = autodiff(Forward, _weighted_lstsq, Duplicated(a, va), Duplicated(b, vb), Const(w),
                    Const(0.1))
    assert t == pytest.approx(np.sum(da * va) + db @ vb, rel=1e-6)


@njit
def _lstsq_all(a, b):
    return np.linalg.lstsq(a, b)


def test_float32_tangents_of_lstsq_have_its_dtype():
    """The tangent of the residuals came back float64 for float32 inputs and was
    read as float32s (-3.7e19 for 0.50); the glue now checks jvp tangents' dtypes."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((5, 2)), rng.standard_normal(5)
    da, db = rng.standard_normal((5, 2)), rng.standard_normal(5)
    (wide,) = autodiff(Forward, _lstsq_all, Duplicated(a, da), Duplicated(b, db))
    (single,) = autodiff(Forward, _lstsq_all, Duplicated(a.astype(np.float32),
                                                          da.astype(np.float32)),
                         Duplicated(b.astype(np.float32), db.astype(np.float32)))
    for k in (0, 1, 3):
        assert single[k].dtype == np.float32
        np.testing.assert_allclose(single[k], wide[k], rtol=1e-4, atol=1e-5)



def test_numbas_performance_hints_about_enzpys_own_rules_are_not_shown():
    # (compiling the lstsq tangent rule told users "'@' is faster on contiguous arrays",
    # pointing into enzpy/linalg.py: nothing they could act on); theirs still show
    hint = numba.NumbaPerformanceWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with frontend.enzpy_hints_hidden():
            warnings.warn_explicit("'@' is faster", hint, enzpy.linalg.__file__, 920)
            warnings.warn_explicit("'@' is faster", hint, os.path.join(
                "cache", "glue", "glue_41108710d0dcf4110bec7ad6c6414302.py"), 5)
            warnings.warn_explicit("'@' is faster", hint, __file__, 1)
    assert [w.filename for w in caught] == [__file__]


_LSTSQ_FORWARD = """
import warnings, numpy as np, numba, enzpy
warnings.simplefilter("always")
@numba.njit
def f(A, b):
    return np.sum(np.linalg.lstsq(A, b)[0])
A = np.eye(4) + 0.1 * np.arange(16.0).reshape(4, 4); b = np.ones(4)
print(enzpy.autodiff(enzpy.Forward, f, enzpy.Duplicated(A, np.ones_like(A)), enzpy.Const(b)))
"""


@_slow
def test_forward_mode_through_lstsq_compiled_afresh_shows_no_hint_of_enzpys(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               ENZPY_CACHE_DIR=str(tmp_path / "enzpy"))
    done = subprocess.run([sys.executable, "-c", _LSTSQ_FORWARD], env=env, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr


_READ_ONLY_A = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])   # (a global: read-only)


@njit
def _solve_with_a_global(b):
    return np.sum(np.linalg.solve(_READ_ONLY_A, b)) + np.linalg.det(_READ_ONLY_A) * b[0]


@njit
def _det_times_sum(x, A):
    return np.linalg.det(A) * x.sum()


def test_read_only_arrays_into_linear_algebra():
    # Found by review: the rule's glue typed the shadow like its read-only array
    # (a global, a non-writeable argument) and failed to compile (an InternalError).
    b = np.array([1.0, 2.0, 3.0])
    want = np.linalg.solve(_READ_ONLY_A.T, np.ones(3)) + [np.linalg.det(_READ_ONLY_A), 0, 0]
    db = np.zeros(3)
    autodiff(Reverse, _solve_with_a_global, Duplicated(b.copy(), db))
    np.testing.assert_allclose(db, want, rtol=1e-12)
    np.testing.assert_allclose(enzpy.vjp(_solve_with_a_global, b)[1](1.0)[0], want, rtol=1e-12)
    A = _READ_ONLY_A.copy()
    A.setflags(write=False)
    dA = np.zeros((3, 3))
    autodiff(Reverse, _det_times_sum, Const(b), Duplicated(A, dA))
    np.testing.assert_allclose(dA, np.linalg.det(A) * np.linalg.inv(A).T * b.sum(), rtol=1e-12)
