"""The JAX ``lax.scan`` MWE ("backward pass of scan is very slow to compile"), in Numba.

JAX original::

    def f(s):
        def scan_fn(carry, y_t):
            level, s = carry
            exp_val = (level + 2 * level ** 0.5) * s[0]
            exp_val = np.clip(exp_val, a_min=0)
            level = y_t / s[0] + 0.5 * level
            s = y_t / level + 0.5 * s
            return (level, s), exp_val
        return lax.scan(scan_fn, (1., s), np.ones(80))[1].sum()

    jit(grad(f))(np.ones(2))

Here ``scan`` is a plain loop carrying ``(level, s)`` (``s`` a 2-vector, a new
array each step as in JAX), stacking the per-step outputs, and the loss is their
sum. enzpy differentiates it with respect to the initial ``s``:
``autodiff(Reverse, f, Duplicated(s0, ds0), Const(T))``. ``f`` copies ``s0``
first, so the caller's array is never written.

Run ``python examples/scan.py`` (``--T 100000`` for a longer scan).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

# enzpy records the IR of functions compiled after it is imported
import enzpy
from enzpy import Const, Duplicated, Reverse, ReverseWithPrimal, autodiff


@njit
def scan_fn(level, s, y_t):
    """One step: ``(level, s), y_t -> (level, s), exp_val``."""
    exp_val = (level + 2 * level ** 0.5) * s[0]
    exp_val = max(exp_val, 0.0)               # np.clip(exp_val, a_min=0)
    level = y_t / s[0] + 0.5 * level
    s = y_t / level + 0.5 * s
    return level, s, exp_val


@njit
def scan(level, s, ys):
    """``lax.scan(scan_fn, (level, s), ys)``: the final carry and the stacked outputs."""
    out = np.empty(ys.shape[0])
    for t in range(ys.shape[0]):
        level, s, exp_val = scan_fn(level, s, ys[t])
        out[t] = exp_val
    return level, s, out


@njit
def scan_loss(s0, ys):
    """``lax.scan(scan_fn, (1., s0), ys)[1].sum()`` for any ``ys``."""
    s = s0.copy()
    level, s, exp_vals = scan(1.0, s, ys)
    return exp_vals.sum()


@njit
def f(s0, T):
    """The MWE's ``f``: ``T`` steps with ``y = ones(T)`` (``T`` = 80 in the MWE)."""
    return scan_loss(s0, np.ones(T))


def gradient(s0, T=80):
    """``(f(s0, T), df/ds0)`` by enzpy; ``s0`` is not modified."""
    ds0 = np.zeros_like(s0)
    _, value = autodiff(ReverseWithPrimal, f, Duplicated(s0, ds0), Const(T))
    return value, ds0


@njit
def hand_gradient(s0, T, ds0):
    """``f(s0, T)``, and ``df/ds0`` into ``ds0``, by hand (the reference of the
    benchmarks):
    a forward loop storing (level, s) per step, then the backward loop."""
    L = np.empty(T + 1)
    S0 = np.empty(T + 1)
    S1 = np.empty(T + 1)
    L[0] = 1.0
    S0[0] = s0[0]
    S1[0] = s0[1]
    total = 0.0
    y = 1.0
    for t in range(T):
        lv = L[t]
        a = S0[t]
        e = (lv + 2.0 * lv ** 0.5) * a
        total += max(e, 0.0)
        ln = y / a + 0.5 * lv
        L[t + 1] = ln
        S0[t + 1] = y / ln + 0.5 * a
        S1[t + 1] = y / ln + 0.5 * S1[t]
    gl = 0.0        # adjoint of L[t + 1]
    g0 = 0.0        # adjoints of S[t + 1]
    g1 = 0.0
    for t in range(T - 1, -1, -1):
        lv = L[t]
        a = S0[t]
        ln = L[t + 1]
        # s' = y / level' + 0.5 s
        gln = gl - y / (ln * ln) * (g0 + g1)
        g0 *= 0.5
        g1 *= 0.5
        # level' = y / s[0] + 0.5 level
        gl = 0.5 * gln
        g0 -= y / (a * a) * gln
        # exp_val = max((level + 2 sqrt(level)) s[0], 0)
        sq = lv ** 0.5
        if (lv + 2.0 * sq) * a > 0.0:
            g0 += lv + 2.0 * sq
            gl += a * (1.0 + 1.0 / sq)
    ds0[0] = g0
    ds0[1] = g1
    return total


def central_difference(s0, T=80, h=1e-6):
    """Central differences of ``f(., T)`` at ``s0``."""
    g = np.zeros_like(s0)
    for i in range(s0.shape[0]):
        up, down = s0.copy(), s0.copy()
        up[i] += h
        down[i] -= h
        g[i] = (f(up, T) - f(down, T)) / (2 * h)
    return g


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=80, help="scan length (80 in the MWE)")
    args = parser.parse_args(argv)
    T = args.T
    s0 = np.ones(2)

    t0 = time.perf_counter()
    value = f(s0, T)
    numba_seconds = time.perf_counter() - t0
    print(f"f(ones(2), T={T}) = {value:.12g}")
    print(f"Numba compile + first call of the primal: {numba_seconds:.2f} s")

    t0 = time.perf_counter()
    (ds, _), = autodiff(Reverse, f, Duplicated(s0, np.zeros(2)), Const(T))
    first = time.perf_counter() - t0
    value2, ds0 = gradient(s0, T)
    assert value2 == value and np.all(s0 == 1.0)
    fd = central_difference(s0, T)
    err = np.max(np.abs(ds0 - fd) / np.maximum(1.0, np.abs(fd)))
    print(f"grad f (enzpy)        = {ds0}")
    print(f"central differences   = {fd}")
    print(f"largest relative error: {err:.1e}")

    # a less symmetric point: random s0 > 0 and random observations y
    rng = np.random.default_rng(1)
    s1, ys = rng.uniform(0.5, 1.5, 2), rng.uniform(0.5, 1.5, T)
    ds1 = np.zeros(2)
    autodiff(Reverse, scan_loss, Duplicated(s1, ds1), Const(ys))
    fd1 = np.zeros(2)
    for i in range(2):
        up, down = s1.copy(), s1.copy()
        up[i] += 1e-6
        down[i] -= 1e-6
        fd1[i] = (scan_loss(up, ys) - scan_loss(down, ys)) / 2e-6
    err1 = np.max(np.abs(ds1 - fd1) / np.maximum(1.0, np.abs(fd1)))
    print(f"random s0, y: enzpy {ds1}, central differences {fd1}, "
          f"largest relative error {err1:.1e}")
    for report in enzpy.build_report(f):
        print(f"enzpy build: {report.total:.3f} s (excluding Numba's compile); {report}")
    print(f"first autodiff call (build + run): {first:.2f} s")

    for n in sorted({T, 1000, 100000}):
        reps = 20 if n <= 1000 else 3
        f(s0, n)
        gradient(s0, n)
        t0 = time.perf_counter()
        for _ in range(reps):
            f(s0, n)
        primal = (time.perf_counter() - t0) / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            gradient(s0, n)
        grad = (time.perf_counter() - t0) / reps
        print(f"T={n:>6}: primal {primal * 1e3:8.3f} ms, gradient {grad * 1e3:8.3f} ms "
              f"({grad / primal:.1f}x)")
    print("cache:", enzpy.cache_info())


if __name__ == "__main__":
    main()
