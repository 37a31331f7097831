"""gmm (ADBench GMM with the paper's errors fixed): the log-likelihood of a Gaussian mixture
with a Wishart prior, written with matrix products and a max-based logsumexp; the gradient
with respect to (alpha, mu, q, l) by one enzpy reverse-mode call."""
import math

import numpy as np
from numba import njit

from enzpy import Const, Duplicated, Reverse, autodiff

from ._common import array, integer, number, tofloat

FUNCTIONS = ("objective", "jacobian")


@njit
def logsumexp(v):
    mx = np.max(v)
    return mx + np.log(np.sum(np.exp(v - mx)))


@njit
def log_gamma_distrib(a, p):
    out = 0.25 * p * (p - 1) * math.log(math.pi)
    for j in range(1, p + 1):
        out += math.lgamma(a + 0.5 * (1 - j))
    return out


@njit
def make_q(q, l):
    """Lower-triangular Q: diagonal exp(q), strict lower part filled column by column."""
    d = q.shape[0]
    Q = np.diag(np.exp(q))
    pos = 0
    for j in range(d):
        for i in range(j + 1, d):
            Q[i, j] = l[pos]
            pos += 1
    return Q


@njit
def gmm_objective(alpha, mu, q, l, x, gamma, m):
    n, d = x.shape
    k = alpha.shape[0]
    beta = np.empty((n, k))
    for c in range(k):
        Q = make_q(q[c], l[c])
        z = (x - mu[c]) @ Q.T
        beta[:, c] = alpha[c] + np.sum(q[c]) - 0.5 * np.sum(z * z, axis=1)
    total = 0.0
    for i in range(n):
        total += logsumexp(beta[i])
    nn = d + m + 1
    prior = (-0.5 * gamma * gamma * (np.sum(np.exp(q) ** 2) + np.sum(l ** 2))
             + m * np.sum(q))
    const = (-0.5 * n * d * math.log(2.0 * math.pi)
             + k * (nn * d * (math.log(gamma) - 0.5 * math.log(2.0))
                    - log_gamma_distrib(0.5 * nn, d)))
    return const + total - n * logsumexp(alpha) + prior


def gradient(alpha, mu, q, l, x, gamma, m):
    shadows = [np.zeros_like(a) for a in (alpha, mu, q, l)]
    autodiff(Reverse, gmm_objective, *[Duplicated(a, s) for a, s in
                                       zip((alpha, mu, q, l), shadows)],
             Const(x), Const(gamma), Const(m))
    return shadows


def _jacobian_json(shadows):
    return {name: s.tolist() for name, s in zip(("alpha", "mu", "q", "l"), shadows)}


def prepare(function, inp):
    d, k, n = integer(inp, "d", 1), integer(inp, "k", 1), integer(inp, "n", 1)
    m = integer(inp, "m", 0)
    gamma = number(inp, "gamma")
    args = (array(inp, "alpha", (k,)), array(inp, "mu", (k, d)), array(inp, "q", (k, d)),
            array(inp, "l", (k, d * (d - 1) // 2)), array(inp, "x", (n, d)), gamma, m)
    if function == "objective":
        return (lambda: gmm_objective(*args)), tofloat
    return (lambda: gradient(*args)), _jacobian_json


def _tiny():
    rng = np.random.default_rng(0)
    d, k, n = 3, 2, 4
    return {"d": d, "k": k, "n": n, "m": 0, "gamma": 1.0,
            "x": rng.standard_normal((n, d)).tolist(), "alpha": rng.standard_normal(k).tolist(),
            "mu": rng.uniform(size=(k, d)).tolist(), "q": rng.standard_normal((k, d)).tolist(),
            "l": rng.standard_normal((k, 3)).tolist()}


WARMUP = [(f, _tiny()) for f in FUNCTIONS]
