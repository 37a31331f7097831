"""Build-time scaling: derivative build time of generated branching evaluators.

For k = 2, 4, ..., 64 operators, generate a recursive expression evaluator with
one if-chain branch per operator (half unary, half binary, each a loop over the
data, each recursive call returning a fresh array), differentiate it with
respect to the data and the tree's constants, and print enzpy's build time
(Numba's own compile of the primal reported apart) next to the size of the IR.
A least-squares fit of log(build time) against log(IR instructions) gives the
growth exponent; the goal is <= 1.1 (linear in the code).

    python scripts/bench_build_scaling.py [--max-k 64] [--csv build_scaling.csv]
"""
import argparse
import csv
import math
import time

import numpy as np
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Reverse, autodiff

UNARY = ["math.sin({a})", "math.cos({a})", "math.tanh({a})", "math.exp(-{a} * {a})",
         "math.atan({a})", "math.log(1.0 + {a} * {a})", "math.sqrt(1.0 + {a} * {a})",
         "{a} * {a}"]
BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} * {b} / (1.0 + {b} * {b})",
          "{a} * math.cos({b})", "math.sin({a}) * {b}", "{a} + {b} * {b}",
          "math.tanh({a} - {b})"]


def operator_expressions(k):
    """k/2 unary and k/2 binary smooth operators, distinct for any k."""
    half = max(k // 2, 1)
    unary = [UNARY[i % len(UNARY)].format(a=f"({1 + i // len(UNARY)}.0 * a[j])")
             for i in range(half)]
    binary = [BINARY[i % len(BINARY)].format(a=f"({1 + i // len(BINARY)}.0 * a[j])",
                                             b="b[j]")
              for i in range(half)]
    return unary, binary


def evaluator_source(k):
    unary, binary = operator_expressions(k)
    lines = [
        "def evaluate(t, degree, op, feature, value, left, right, X):",
        "    n = X.shape[1]",
        "    if degree[t] == 0:",
        "        out = np.empty(n)",
        "        if feature[t] < 0:",
        "            for j in range(n):",
        "                out[j] = value[t]",
        "        else:",
        "            for j in range(n):",
        "                out[j] = X[feature[t], j]",
        "        return out",
        "    a = evaluate(left[t], degree, op, feature, value, left, right, X)",
        "    if degree[t] == 1:",
    ]
    for i, expr in enumerate(unary):
        lines += [f"        {'if' if i == 0 else 'elif'} op[t] == {i}:",
                  "            for j in range(n):",
                  f"                a[j] = {expr}"]
    lines += ["        return a",
              "    b = evaluate(right[t], degree, op, feature, value, left, right, X)"]
    for i, expr in enumerate(binary):
        lines += [f"    {'if' if i == 0 else 'elif'} op[t] == {i}:",
                  "        for j in range(n):",
                  f"            a[j] = {expr}"]
    lines += ["    return a",
              "",
              "def loss(degree, op, feature, value, left, right, X, out):",
              "    r = evaluate(0, degree, op, feature, value, left, right, X)",
              "    s = 0.0",
              "    for j in range(r.shape[0]):",
              "        s += r[j] * r[j]",
              "    out[0] = s"]
    return "\n".join(lines) + "\n"


def build_evaluator(k):
    namespace = {"math": math, "np": np}
    exec(evaluator_source(k), namespace)
    evaluate = njit(namespace["evaluate"])
    namespace["evaluate"] = evaluate
    return njit(namespace["loss"])


def small_tree():
    # root: binary op 0 of (unary op 0 of x0) and the constant 0.5
    degree = np.array([2, 1, 0, 0], np.int64)
    op = np.zeros(4, np.int64)
    feature = np.array([-1, -1, 0, -1], np.int64)
    value = np.array([0.0, 0.0, 0.0, 0.5])
    left = np.array([1, 2, -1, -1], np.int64)
    right = np.array([3, -1, -1, -1], np.int64)
    return degree, op, feature, value, left, right


def measure(k):
    loss = build_evaluator(k)
    degree, op, feature, value, left, right = small_tree()
    X = np.random.default_rng(0).standard_normal((2, 8))
    out = np.zeros(1)
    t = time.perf_counter()
    loss(degree, op, feature, value, left, right, X, out)
    numba_seconds = time.perf_counter() - t
    autodiff(Reverse, loss, Const(degree), Const(op), Const(feature),
             Duplicated(value, np.zeros_like(value)), Const(left), Const(right),
             Duplicated(X, np.zeros_like(X)), Duplicated(out, np.ones(1)))
    report = enzpy.build_report(loss)[-1]
    return report, numba_seconds


def fit_exponent(sizes, seconds):
    logs = np.log(np.array(sizes, float)), np.log(np.array(seconds, float))
    slope, _ = np.polyfit(*logs, 1)
    return slope


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-k", type=int, default=64)
    parser.add_argument("--csv", default=None, help="also write the table as CSV")
    args = parser.parse_args()
    ks = [k for k in (2, 4, 8, 16, 32, 64) if k <= args.max_k]
    rows = []
    print("\n| k operators | primal IR instructions | Numba compile s | enzpy build s | "
          "transform s (capture..reverse) | optimize+codegen s |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        report, numba_seconds = measure(k)
        t = report.timings
        transform = sum(t[s] for s in ("capture", "cleanup", "read_ir", "reverse"))
        machine = t["optimize"] + t["codegen"]
        rows.append((k, report.primal_instructions, numba_seconds, report.total, transform,
                     machine))
        print(f"| {k} | {report.primal_instructions} | {numba_seconds:.2f} | "
              f"{report.total:.3f} | {transform:.3f} | {machine:.3f} |", flush=True)
    if len(rows) >= 3:
        sizes = [r[1] for r in rows]
        for label, column in (("enzpy build", 3), ("transformation", 4),
                              ("optimize+codegen", 5)):
            exponent = fit_exponent(sizes, [r[column] for r in rows])
            verdict = "met" if exponent <= 1.1 else "MISSED"
            print(f"\ngrowth exponent of {label} time vs IR size: {exponent:.2f} "
                  f"(goal <= 1.1: {verdict})")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["k", "primal_instructions", "numba_compile_s", "enzpy_build_s",
                             "transform_s", "optimize_codegen_s"])
            writer.writerows(rows)


if __name__ == "__main__":
    main()
