"""math.lgamma and math.gamma: derivatives through digamma and trigamma (special.py).

Checked against SciPy's digamma and polygamma on both sides of the recurrence's
threshold (10), tiny, huge and negative arguments (the reflection), in reverse
and forward mode, float32, second order (``hvp``: trigamma), at the poles, and
in a negative-binomial likelihood written as statistics code writes it.
"""
import math

import numpy as np
import pytest
import scipy.special as sp
from numba import njit

from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff, hvp

from helpers import check_reverse

POINTS = [1e-3, 0.3, 0.5, 1.0, 2.5, 9.99, 10.0, 10.01, 37.2, 1e6, -0.3, -2.7, -11.4, -100.25]


@njit
def log_gamma(x):
    return math.lgamma(x)


@njit
def gamma(x):
    return math.gamma(x)


@njit
def both(x):
    return math.lgamma(x[0]) + math.gamma(x[1])


@pytest.mark.parametrize("x", POINTS)
def test_lgamma_differentiates_to_digamma(x):
    (d,), = autodiff(Reverse, log_gamma, Active(x))[:1]
    np.testing.assert_allclose(d, sp.digamma(x), rtol=1e-13)
    (t,) = autodiff(Forward, log_gamma, Duplicated(x, 1.0))
    np.testing.assert_allclose(t, sp.digamma(x), rtol=1e-13)


@pytest.mark.parametrize("x", [p for p in POINTS if abs(p) < 170])
def test_gamma_differentiates_to_gamma_times_digamma(x):
    (d,), = autodiff(Reverse, gamma, Active(x))[:1]
    np.testing.assert_allclose(d, math.gamma(x) * sp.digamma(x), rtol=1e-13)


@pytest.mark.parametrize("x", [0.3, 2.5, 13.0, -2.7])
def test_second_order_is_trigamma(x):
    at = np.array([x, 1.7])
    h = hvp(both, at, np.array([1.0, 0.0]))
    np.testing.assert_allclose(h, [sp.polygamma(1, x), 0.0], rtol=1e-12, atol=1e-300)
    h = hvp(both, at, np.array([0.0, 1.0]))
    g = math.gamma(1.7) * (sp.digamma(1.7) ** 2 + sp.polygamma(1, 1.7))
    np.testing.assert_allclose(h, [0.0, g], rtol=1e-12, atol=1e-300)


def test_float32():
    x = np.array([2.5, 1.7], dtype=np.float32)
    dx = np.zeros(2, np.float32)
    autodiff(Reverse, both, Duplicated(x, dx))
    np.testing.assert_allclose(dx, [sp.digamma(2.5), math.gamma(1.7) * sp.digamma(1.7)],
                               rtol=1e-6)


@pytest.mark.parametrize("x", [0.0, -1.0, -2.0])
def test_at_the_poles_the_derivative_is_not_finite(x):
    # lgamma is infinite there; so is its derivative (no crash, no finite number)
    (d,), = autodiff(Reverse, log_gamma, Active(x))[:1]
    assert not np.isfinite(d)


@njit
def negative_binomial_nll(log_mu, log_r, y):
    r = math.exp(log_r)
    s = 0.0
    for i in range(y.shape[0]):
        mu = math.exp(log_mu[i])
        s -= (math.lgamma(y[i] + r) - math.lgamma(r) - math.lgamma(y[i] + 1.0)
              + r * math.log(r / (r + mu)) + y[i] * math.log(mu / (r + mu)))
    return s


@pytest.mark.parametrize("n", [0, 1, 40])
def test_negative_binomial_likelihood(n):
    rng = np.random.default_rng(n)
    y = rng.poisson(3.0, n).astype(np.float64)
    log_mu = 1.0 + 0.3 * rng.standard_normal(n)
    d_log_mu = np.zeros(n)
    check_reverse(negative_binomial_nll, [Duplicated(log_mu, d_log_mu), Active(0.4), Const(y)])
    h = 1e-6
    for i in range(n):
        e = np.zeros(n)
        e[i] = h
        fd = (negative_binomial_nll(log_mu + e, 0.4, y)
              - negative_binomial_nll(log_mu - e, 0.4, y)) / (2 * h)
        assert abs(d_log_mu[i] - fd) <= 1e-6 * (1 + abs(fd)), (i, d_log_mu[i], fd)
