"""Rules for NumPy functions whose Numba implementation branches on exact ties (ufuncs.py)."""
import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Forward, Reverse, autodiff


@njit
def _logaddexp_of_pairs(w, base2):
    if base2:
        return np.logaddexp2(w[:2], w[2:]).sum() + np.logaddexp2(w[0], w[3])
    return np.logaddexp(w[:2], w[2:]).sum() + np.logaddexp(w[0], w[3])


@pytest.mark.parametrize("base2", [False, True])
@pytest.mark.parametrize("w", [np.zeros(4), np.array([0.3, -1.0, 0.3, 2.0])],
                         ids=["ties", "mixed"])
def test_logaddexp_at_ties(w, base2):
    """Numba returns x + log(2) at x == y: the derivative there is (1/2, 1/2),
    not (1, 0), in every mode, as away from the tie."""
    dw = np.zeros(4)
    autodiff(Reverse, _logaddexp_of_pairs, Duplicated(w, dw), Const(base2))
    h = 1e-6
    fd = np.array([(_logaddexp_of_pairs(w + h * e, base2) - _logaddexp_of_pairs(w - h * e, base2))
                   / (2 * h) for e in np.eye(4)])
    np.testing.assert_allclose(dw, fd, rtol=1e-7)
    (t,) = autodiff(Forward, _logaddexp_of_pairs, Duplicated(w, np.ones(4)), Const(base2))
    assert t == pytest.approx(fd.sum(), rel=1e-7)
    hv = enzpy.hvp(_logaddexp_of_pairs, w, np.array([1.0, 0.0, 0.0, 0.0]), base2)
    fd2 = (enzpy.gradient(_logaddexp_of_pairs, w + h * np.eye(4)[0], base2)
           - enzpy.gradient(_logaddexp_of_pairs, w - h * np.eye(4)[0], base2)) / (2 * h)
    np.testing.assert_allclose(hv, fd2, rtol=1e-5, atol=1e-8)


@njit
def _signs_times(w, k):
    return np.sum(np.sign(w) * k) + np.sign(w[0] - 1.0) * w[1]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sign_has_a_zero_derivative_at_zero(dtype):
    # Found by review: Numba's np.sign returns x itself at 0 (and nan), so its
    # derivative there was 1 (a gradient of 1 for every weight starting at 0).
    w = np.array([0.0, 1.5, -2.0, -0.0, 0.0], dtype)
    k = np.arange(1.0, 6.0).astype(dtype)
    dw, dk = np.zeros_like(w), np.zeros_like(k)
    autodiff(Reverse, _signs_times, Duplicated(w.copy(), dw), Duplicated(k.copy(), dk))
    np.testing.assert_array_equal(dw, [0.0, np.sign(w[0] - 1.0), 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(dk, np.sign(w))
    tangent, = autodiff(Forward, _signs_times, Duplicated(w.copy(), np.ones_like(w)),
                        Const(k))
    assert tangent == -1.0


def test_sign_keeps_its_values_at_signed_zeros_and_nan():
    @njit
    def signs(w, out):
        out[:] = np.sign(w) * 1.0
        return out.sum()

    w = np.array([-0.0, 0.0, np.nan, 2.0])
    out, dout = np.zeros(4), np.zeros(4)
    _, primal = autodiff(enzpy.ReverseWithPrimal, signs, Duplicated(w.copy(), np.zeros(4)),
                         Duplicated(out, dout))
    assert np.isnan(primal)
    np.testing.assert_array_equal(np.signbit(out), [True, False, False, False])
    assert np.isnan(out[2]) and out[3] == 1.0
