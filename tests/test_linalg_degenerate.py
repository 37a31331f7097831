"""Linear algebra where a derivative is undefined: equal eigenvalues or singular
values, and cotangents that are already inf or nan. The result follows the
primal's inf/nan, never an exception; what stays defined (the eigenvalues and
singular values themselves) keeps its exact derivative."""
import os

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Duplicated, Forward, Reverse, autodiff

@njit
def eigh_values(a):
    w = np.linalg.eigh(a)[0]
    return np.sum(w * w)                    # = |a|_F^2 for symmetric a: gradient 2a


@njit
def eigh_vectors(a):
    w, v = np.linalg.eigh(0.5 * (a + a.T))
    return np.sum(v[0] * v[0] * np.arange(1.0, 4.0)) + np.sum(w)   # (whatever the signs)


@njit
def eig_values(a):
    return np.sum(np.linalg.eig(a)[0])


@njit
def eig_vectors(a):
    w, v = np.linalg.eig(a)
    return np.sum(v[0]) + np.sum(w)


@njit
def singular_values(a):
    return np.sum(np.linalg.svd(a)[1])


@njit
def singular_vectors(a):
    u, s, vh = np.linalg.svd(a)
    return np.sum(u[0] * s) + np.sum(vh[:, 1])


@njit
def vectors_of_a_solve(a, b):
    return np.sum(np.linalg.eigh(np.linalg.solve(b, a))[1][:, 0])


# symmetric with eigenvalues 2, 2, 5 (a double one), and the identity
DOUBLE = np.array([[3.0, 1.0, 1.0], [1.0, 3.0, 1.0], [1.0, 1.0, 3.0]])
MATRICES = {"identity": np.eye(3), "double": DOUBLE}


def _reverse(f, a):
    da = np.zeros_like(a)
    autodiff(Reverse, f, Duplicated(a.copy(), da))
    return da


def _forward(f, a, direction):
    (tangent,) = autodiff(Forward, f, Duplicated(a.copy(), direction))
    return tangent


@pytest.mark.parametrize("which", list(MATRICES))
def test_eigenvalues_keep_their_derivative_when_equal(which):
    """Symmetric functions of the eigenvalues (sums, sums of squares) and the sum
    of the singular values (the trace, for these positive definite matrices)."""
    a = MATRICES[which]
    # (eigh reads the lower triangle: an entry below the diagonal counts twice)
    np.testing.assert_allclose(_reverse(eigh_values, a),
                               np.tril(4.0 * a, -1) + np.diag(2.0 * np.diag(a)), atol=1e-10)
    np.testing.assert_allclose(_reverse(eig_values, a), np.eye(3), atol=1e-10)
    np.testing.assert_allclose(_reverse(singular_values, a), np.eye(3), atol=1e-10)
    direction = np.array([[0.3, -0.2, 0.1], [-0.2, 0.5, 0.4], [0.1, 0.4, -0.6]])
    assert _forward(eigh_values, a, direction) == pytest.approx(2.0 * np.sum(a * direction))
    assert _forward(eig_values, a, direction) == pytest.approx(np.trace(direction))
    assert _forward(singular_values, a, direction) == pytest.approx(np.trace(direction))


@pytest.mark.parametrize("which", list(MATRICES))
@pytest.mark.parametrize("f", [eigh_vectors, eig_vectors, singular_vectors],
                         ids=lambda f: f.__name__)
def test_vectors_of_equal_values_give_nan_not_an_exception(f, which):
    """The identity's eigenvalues are exactly equal: inf and nan. Inside the
    rules, LAPACK may return a double eigenvalue as two numbers an ulp apart:
    the vectors it picks are then as arbitrary as their derivative (no
    exception is all that is asked there)."""
    a = MATRICES[which]
    assert np.isfinite(f(a))
    gradient, tangent = _reverse(f, a), _forward(f, a, np.ones((3, 3)))
    if which == "identity":
        assert not np.all(np.isfinite(gradient)) and not np.isfinite(tangent)


def test_an_undefined_cotangent_flows_through_a_solve_as_nan():
    """The eigenvectors of solve(2I, I) = I / 2 have no derivative: the solve's
    reverse receives nan (LAPACK's solve would raise LinAlgError on it)."""
    da, db = np.zeros((3, 3)), np.zeros((3, 3))
    autodiff(Reverse, vectors_of_a_solve, Duplicated(np.eye(3), da),
             Duplicated(2.0 * np.eye(3), db))
    assert not np.all(np.isfinite(da))
    assert not np.all(np.isfinite(db))


@njit
def solve_sum(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solves_of_either_precision(dtype):
    """The guarded solve in the rules keeps float32 (a float64 nan would not)."""
    a = np.array([[3.0, 0.5], [0.2, 2.0]], dtype=dtype)
    b = np.array([1.0, -2.0], dtype=dtype)
    da, db = np.zeros_like(a), np.zeros_like(b)
    autodiff(Reverse, solve_sum, Duplicated(a, da), Duplicated(b, db))
    x = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    gb = np.linalg.solve(a.T.astype(np.float64), 2.0 * x)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(db, gb, rtol=tol)
    np.testing.assert_allclose(da, -np.outer(gb, x), rtol=tol)
    (tangent,) = autodiff(Forward, solve_sum, Duplicated(a, np.zeros_like(a)),
                          Duplicated(b, np.ones_like(b)))
    assert tangent == pytest.approx(np.sum(gb), rel=tol)


def test_distinct_values_are_unchanged():
    """Away from equal values the rules are the usual ones (central differences)."""
    a = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, -1.5]])
    for f in (eigh_vectors, eig_vectors, singular_vectors):
        check = enzpy.check_gradient(f, Duplicated(a.copy(), np.zeros((3, 3))))
        assert check.worst_relative_error < 1e-5, (f.__name__, str(check))


@njit
def _pinv_sum(a):
    return np.sum(np.linalg.pinv(a)) + 1.0


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0)])
def test_pinv_of_an_empty_matrix(shape):
    """Numba's pinv returns an empty matrix; the rule's SVD (Numba's, which
    refuses empty arrays) made both modes raise LinAlgError."""
    a, da = np.zeros(shape), np.zeros(shape)
    assert autodiff(Reverse, _pinv_sum, Duplicated(a, da)) == ((None,),)
    assert autodiff(Forward, _pinv_sum, Duplicated(a, np.zeros(shape))) == (0.0,)


@njit
def _lstsq_of_every_other(a, b):
    x, residuals, rank, s = np.linalg.lstsq(a, b[::2])
    return np.sum(x * x) + np.sum(residuals)


@njit
def _lstsq_plain(a, b):
    x, residuals, rank, s = np.linalg.lstsq(a, b)
    return np.sum(x * x) + np.sum(residuals)


def test_lstsq_with_a_strided_right_hand_side():
    """A strided b (b[::2], b[::-1]) made the rules' reshape fail to compile
    (RuleError) in every mode."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal(10)
    da, want = np.zeros_like(a), np.zeros_like(a)
    autodiff(Reverse, _lstsq_of_every_other, Duplicated(a, da), b)
    autodiff(Reverse, _lstsq_plain, Duplicated(a.copy(), want), b[::2].copy())
    np.testing.assert_allclose(da, want, rtol=1e-12)
    v = rng.standard_normal((5, 3))
    (t,) = autodiff(Forward, _lstsq_of_every_other, Duplicated(a, v), b)
    assert t == pytest.approx(np.sum(want * v), rel=1e-10)


@pytest.mark.skipif(not os.environ.get("ENZPY_SLOW"),
                    reason="half a minute of builds; set ENZPY_SLOW=1")
def test_lstsq_with_a_strided_right_hand_side_second_order():
    rng = np.random.default_rng(4)
    a, b, v = rng.standard_normal((5, 3)), rng.standard_normal(10), rng.standard_normal((5, 3))

    def gradient(at):
        g = np.zeros_like(at)
        autodiff(Reverse, _lstsq_of_every_other, Duplicated(at, g), b)
        return g

    h = 1e-6            # (central differences of the gradient: one hvp build, not two)
    np.testing.assert_allclose(enzpy.hvp(_lstsq_of_every_other, a, v, b),
                               (gradient(a + h * v) - gradient(a - h * v)) / (2 * h),
                               rtol=1e-6, atol=1e-8)
