"""Gradient speedup of ``@njit(parallel=True)`` code on 1 and 2 threads.

Two loops: an elementwise ``prange`` loop writing an output array, and a
``prange`` reduction into a scalar. Each is timed (primal and gradient) with
``numba.set_num_threads(1)`` and ``(2)`` in alternation, and the gradient is
checked against the serial version of the same function. Prints a Markdown
table::

    python scripts/bench_parallel.py [--n 2000000] [--repeat 15]
"""
from __future__ import annotations

import argparse
import os
import sys

import numba
import numpy as np
from numba import njit, prange

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import interleaved  # noqa: E402

from enzpy import Duplicated, Reverse, autodiff  # noqa: E402


def elementwise(x, y):
    for i in prange(x.shape[0]):
        y[i] = np.sin(x[i]) * np.exp(-0.5 * x[i] * x[i])
    return 0.0


def reduction(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.log1p(x[i] * x[i]) * np.cos(x[i])
    return s


def gradient_of(f, x, y=None):
    dx = np.zeros_like(x)
    if y is None:
        autodiff(Reverse, f, Duplicated(x, dx))
    else:
        autodiff(Reverse, f, Duplicated(x, dx), Duplicated(y, np.ones_like(y)))
    return dx


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    x = np.random.default_rng(0).uniform(-2, 2, args.n)
    y = np.zeros_like(x)
    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    print(f"n = {args.n}, threads available to Numba: {numba.config.NUMBA_NUM_THREADS}\n")
    print("| loop | primal 1 thread (ms) | primal 2 (ms) | gradient 1 thread (ms) | "
          "gradient 2 (ms) | gradient speedup | max error vs serial |")
    print("|---|---|---|---|---|---|---|")
    for name, py, wants_y in (("elementwise", elementwise, True),
                              ("reduction", reduction, False)):
        parallel, serial = njit(parallel=True)(py), njit(py)
        call_args = (x, y) if wants_y else (x,)
        want = gradient_of(serial, *call_args)
        got = gradient_of(parallel, *call_args)
        error = float(np.max(np.abs(got - want)))

        def on(n_threads, fn):
            def run():
                numba.set_num_threads(n_threads)
                fn()
            return run

        primal = lambda: parallel(*call_args)                       # noqa: E731
        grad = lambda: gradient_of(parallel, *call_args)            # noqa: E731
        p1, p2, g1, g2 = interleaved([on(1, primal), on(threads, primal), on(1, grad),
                                      on(threads, grad)], args.repeat)
        print(f"| {name} | {p1 * 1e3:.2f} | {p2 * 1e3:.2f} | {g1 * 1e3:.2f} | "
              f"{g2 * 1e3:.2f} | {g1 / g2:.2f}x | {error:.1e} |")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


if __name__ == "__main__":
    main()
