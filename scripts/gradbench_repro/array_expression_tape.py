"""Performance: reverse mode over NumPy array expressions and reductions on 10^6 elements
runs at 4-80x the primal (``np.max`` 80x, ``np.sum(x - 0.5)`` 10x, the max-based logsumexp of
the lse eval 20x, one RK4-like step of the ode eval 16x with 200 bytes of tape per element),
where logsumexp written as two loops runs at 3.4x. A broadcasting sum (a column plus a row, as
in kmeans' distance matrix) runs at 23x and ``np.min`` over the rows of a matrix (kmeans'
nearest centroid) at 60x. This dominates enzpy's GradBench ratios (lse, llsq, ode, gmm,
kmeans). The last line is the fixed cost of a derivative call from Python
(``enzpy.gradient`` on 3 elements). Figures of one run on the 2-core machine (loaded).
Run: OPENBLAS_NUM_THREADS=1 python scripts/gradbench_repro/array_expression_tape.py"""
import time

import numpy as np
from numba import njit

import enzpy


@njit
def sum_shift(x):
    return np.sum(x - 0.5)


@njit
def max_(x):
    return np.max(x)


@njit
def sum_exp(x):
    return np.sum(np.exp(x))


@njit
def logsumexp(x):
    a = np.max(x)
    return a + np.log(np.sum(np.exp(x - a)))


@njit
def logsumexp_loop(x):          # the same as a loop, for comparison only
    a = x[0]
    for v in x:
        a = max(a, v)
    s = 0.0
    for v in x:
        s += np.exp(v - a)
    return a + np.log(s)


@njit
def rk4_step(x):                # one step of the ode eval, 1 element = 1 unknown
    y = np.zeros_like(x)
    for _ in range(1):
        k1 = np.empty_like(y)
        k1[0] = x[0]
        k1[1:] = x[1:] * y[:-1]
        y = y + 0.5 * k1
    return np.sum(y)


@njit
def broadcast_add(x):           # a 1000 x 1000 sum of a column and a row
    return np.sum(x[:1000].reshape((-1, 1)) + x[1000:2000])


@njit
def row_min(x):                 # the minimum of each row of a 1000 x 1000 matrix
    X = x.reshape((1000, 1000))
    s = 0.0
    for i in range(X.shape[0]):
        s += np.min(X[i])
    return s


def best(f, *a, r=7):
    t = float("inf")
    for _ in range(r):
        t0 = time.perf_counter()
        f(*a)
        t = min(t, time.perf_counter() - t0)
    return t


n = 1_000_000
x = np.random.default_rng(0).uniform(size=n)
print(f"{'function':16} {'primal ms':>10} {'gradient ms':>12} {'ratio':>6} {'tape B/elem':>12}")
for f in (sum_shift, max_, sum_exp, logsumexp, logsumexp_loop, rk4_step, broadcast_add,
          row_min):
    f(x)
    enzpy.gradient(f, x)
    p, g = best(f, x), best(enzpy.gradient, f, x)
    tape = enzpy.build_report(f)[0].peak_tape_bytes / n
    print(f"{f.__name__:16} {p * 1e3:10.2f} {g * 1e3:12.2f} {g / p:6.1f} {tape:12.1f}")

small = np.array([0.1, 0.2, 0.3])
print(f"\nfixed cost on 3 elements: primal {best(logsumexp, small) * 1e6:.1f} us, "
      f"enzpy.gradient {best(enzpy.gradient, logsumexp, small) * 1e6:.1f} us")
