"""Array benchmark: gradient/primal time and tape size of three array workloads.

Measured in one run (median of several calls each):
  * sum of squares of 10^6 elements (read-only input: the tape must stay O(1)),
  * the norm of a 1000x1000 matrix-vector product, written as loops,
  * an in-place 1-D nonlinear stencil, 2*10^4 points, 20 steps (values overwritten
    in place: the tape records the old values).

    python scripts/bench_arrays.py [--repeat 7]
"""
import argparse
import math

import numpy as np
from numba import njit

from _timing import interleaved

import enzpy
from enzpy import Duplicated, Reverse, autodiff


@njit
def sum_of_squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit
def matvec_norm(A, v):
    total = 0.0
    for i in range(A.shape[0]):
        r = 0.0
        for j in range(A.shape[1]):
            r += A[i, j] * v[j]
        total += r * r
    return math.sqrt(total)


@njit
def stencil(u, steps):
    n = u.shape[0]
    for _ in range(steps):
        for i in range(1, n - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) - 0.01 * u[i] ** 3
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s



def workloads():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10**6)
    A = rng.standard_normal((1000, 1000))
    v = rng.standard_normal(1000)
    u0 = rng.uniform(0.0, 1.0, 2 * 10**4)
    return [
        ("sum of squares, n=10^6", sum_of_squares, lambda: (x,), 0, 3.0),
        ("matvec norm, 1000x1000", matvec_norm, lambda: (A, v), 0, 3.0),
        ("in-place stencil, 2*10^4 x 20", stencil, lambda: (u0.copy(), 20), 0, 2.5),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for name, fn, make_args, wrt, goal in workloads():
        fn(*make_args())

        shadow = np.zeros_like(make_args()[wrt])

        def gradient():
            # the shadow is allocated once, as a user would; it accumulates
            values = make_args()
            annotated = [Duplicated(a, shadow) if i == wrt else a
                         for i, a in enumerate(values)]
            autodiff(Reverse, fn, *annotated)

        gradient()
        primal, grad = interleaved([lambda: fn(*make_args()), gradient], args.repeat)
        report = enzpy.build_report(fn)[-1]
        rows.append((name, primal, grad, goal, report.peak_tape_bytes, report.total))
    print(f"\nArray workloads (median of {args.repeat}; both columns include making the "
          f"inputs, e.g. the stencil's copy of u)\n")
    print("| workload | primal ms | gradient ms | gradient/primal | goal | peak tape bytes | build s |")
    print("|---|---|---|---|---|---|---|")
    for name, primal, grad, goal, tape, build in rows:
        ratio = grad / primal
        print(f"| {name} | {primal * 1e3:.2f} | {grad * 1e3:.2f} | {ratio:.2f} | "
              f"<= {goal:g} ({'met' if ratio <= goal else 'MISSED'}) | {tape:,} | {build:.3f} |")


if __name__ == "__main__":
    main()
