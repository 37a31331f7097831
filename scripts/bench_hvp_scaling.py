"""hvp build time of straight-line code through N scalars, with and without LLVM's
fast code generation of functions holding a very long block.

For N = 10, 20, 40, 80, ``f(x)`` calls one function of N float arguments summing
N terms ``sin(a_i * x_k) * a_j``: the reverse of its tangent is one block keeping
thousands of values live, whose register allocation grew about quadratically
(``backend.FAST_CODEGEN_INSTRUCTIONS``). Prints, per N, the build time and its
code generation stage with the threshold (as shipped) and without it (the
threshold out of reach), the time of one hvp call in each, and the growth
exponent of the build time in N. Each build is in a fresh process-local state
(new functions, persistent cache off).

    python scripts/bench_hvp_scaling.py [--sizes 10 20 40 80] [--csv hvp_scaling.csv]
"""
import argparse
import csv
import math
import os
import time

os.environ["ENZPY_CACHE"] = "0"

import numpy as np            # noqa: E402

import enzpy                  # noqa: E402
from enzpy import backend     # noqa: E402


def many_scalars(n):
    """A fresh ``f(x)`` calling a function of ``n`` float arguments."""
    args = ", ".join(f"a{i}" for i in range(n))
    source = "\n".join(
        ["import math", "from numba import njit", "@njit", f"def g(x, {args}):", "    s = 0.0"]
        + [f"    s += math.sin(a{i} * x[{i % 8}]) * a{(i + 1) % n}" for i in range(n)]
        + ["    return s", "@njit", "def f(x):",
           "    return g(x, " + ", ".join(f"x[{i % 8}] * {i + 1}.0" for i in range(n)) + ")"])
    namespace = {}
    exec(compile(source + "\n", f"<many_scalars_{n}>", "exec"), namespace)
    return namespace["f"]


def measure(n, threshold, calls=500):
    backend.FAST_CODEGEN_INSTRUCTIONS = threshold
    f = many_scalars(n)
    x = np.linspace(0.1, 0.9, 8)
    v = np.ones_like(x)
    f(x)
    start = time.perf_counter()
    result = enzpy.hvp(f, x, v)
    build = time.perf_counter() - start
    report = enzpy.build_report(f)[-1]
    start = time.perf_counter()
    for _ in range(calls):
        enzpy.hvp(f, x, v)
    run = (time.perf_counter() - start) / calls
    return build, report.timings.get("codegen", 0.0), run, result


def exponent(sizes, seconds):
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40, 80])
    parser.add_argument("--csv")
    options = parser.parse_args()
    shipped = backend.FAST_CODEGEN_INSTRUCTIONS
    rows = []
    print(f"{'N':>4} {'build s':>9} {'codegen s':>10} {'call us':>8} | "
          f"{'build s (full codegen)':>22} {'codegen s':>10} {'call us':>8}")
    for n in options.sizes:
        fast = measure(n, shipped)
        full = measure(n, 10**9)
        assert np.allclose(fast[3], full[3], rtol=1e-12)
        rows.append((n, *fast[:3], *full[:3]))
        print(f"{n:>4} {fast[0]:>9.2f} {fast[1]:>10.2f} {fast[2] * 1e6:>8.1f} | "
              f"{full[0]:>22.2f} {full[1]:>10.2f} {full[2] * 1e6:>8.1f}", flush=True)
    sizes = [r[0] for r in rows]
    print(f"growth exponent of the build time in N: {exponent(sizes, [r[1] for r in rows]):.2f} "
          f"(full code generation: {exponent(sizes, [r[4] for r in rows]):.2f})")
    if options.csv:
        with open(options.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["n", "build_s", "codegen_s", "call_s", "full_build_s",
                             "full_codegen_s", "full_call_s"])
            writer.writerows(rows)


if __name__ == "__main__":
    main()
