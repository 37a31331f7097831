"""Build time of second derivatives (``enzpy.hvp``) next to the first-order build.

For the seed's tree evaluator (``examples/dynamic_expressions.py``) at fuse
level 2 with 2+2, 4+4 and 8+8 operators (and fuse level 1 for reference), and
for the scan (``examples/scan.py``) and for losses through NumPy's linear
algebra (``det``, ``slogdet``, ``cholesky``, a Kalman filter: enzpy's rules,
whose glue second order compiles too), each configuration in its own process with an empty
cache folder:

* Numba's compile of the primal (a scalar loss ``value(X, *tree)`` around the
  evaluator's ``loss``),
* enzpy's first-order build (``autodiff(Reverse, value, Duplicated(X, dX), ...)``),
* enzpy's ``hvp`` build (reverse over forward), its stages, and the ratio to
  the first-order build (goal: <= 3),
* a check of the Hessian-vector product against central differences of the
  reverse-mode gradient.

    python scripts/bench_hvp.py [--configs scan,det,2:2,4:2] [--budget 900] [--out docs]
                                [--stem hvp]

Prints a table and writes ``<out>/<stem>.csv`` and ``<out>/<stem>.md``. Build times
exclude Numba's compile (``BuildReport.total``). A configuration that exceeds
its budget (seconds, per process) is reported as such.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

GOAL_RATIO = 3.0
N_FEATURES = 5


def _fd_error(hv, grad, x, v, eps=1e-5):
    fd = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    scale = max(1.0, float(np.abs(fd).max()))
    return float(np.abs(hv - fd).max() / scale)


def _measure(config, f, x, v, *consts):
    """Numba's compile of ``f(x, *consts)``, enzpy's first-order build (reverse
    mode w.r.t. ``x``) and its ``hvp`` build in direction ``v``, checked
    against central differences of the gradient."""
    import enzpy
    from enzpy import Const, Duplicated, Reverse, autodiff

    t = time.perf_counter()
    f(x, *consts)
    numba_s = time.perf_counter() - t

    def grad(point):
        dx = np.zeros_like(point)
        autodiff(Reverse, f, Duplicated(point, dx), *map(Const, consts))
        return dx

    grad(x)
    first = enzpy.build_report(f)[-1]
    hv = enzpy.hvp(f, x, v, *consts)
    second = enzpy.build_report(f)[-1]
    return dict(config=config, numba_s=numba_s, first_s=first.total, hvp_s=second.total,
                first_instructions=first.primal_instructions, stages=second.timings,
                fd_rel_err=_fd_error(hv, grad, x, v))


def tree_worker(k, fuse):
    import dynamic_expressions as de
    from numba import njit

    ops = de.operator_set(k)
    X = np.random.default_rng(2024).standard_normal((N_FEATURES, 100))
    tree, _ = de.pick_tree(30, N_FEATURES, ops, X)
    loss = de.build_evaluator(k, fuse).loss

    @njit
    def value(X, degree, constant, val, feature, op, left, right):
        out = np.zeros(1)
        loss(degree, constant, val, feature, op, left, right, X, out)
        return out[0]

    V = np.random.default_rng(1).standard_normal(X.shape)
    return _measure(f"tree {k}+{k} fuse {fuse}", value, X, V, *tree)


def scan_worker():
    import scan as scan_example

    return _measure("scan T=80", scan_example.scan_loss, np.array([1.0, 1.3]),
                    np.array([0.3, -0.7]), np.ones(80))


LINALG = {
    # name: (the body of a scalar loss of a square matrix ``a``, its description)
    "det": ("return np.linalg.det(a) ** 2 + np.linalg.det(a)", "det(a)^2 + det(a)"),
    "slogdet": ("return np.linalg.slogdet(a)[1] ** 2", "logabsdet(a)^2"),
    "cholesky": ("return np.sum(np.log(np.diag(np.linalg.cholesky(a @ a.T + 4.0 * np.eye(4)))))"
                 " ** 2", "sum(log diag chol(a a^T + 4I))^2"),
    "kalman": ("""
n = a.shape[0]
x, p, total = np.zeros(n), np.eye(n), 0.0
for t in range(20):
    x = a @ x + 0.1
    p = a @ p @ a.T + 0.1 * np.eye(n)
    s = p + np.eye(n)
    y = 0.05 * t - x
    total += np.linalg.slogdet(s)[1] + y @ np.linalg.solve(s, y)
    k = np.linalg.solve(s, p).T
    x = x + k @ y
    p = p - k @ p
return total""", "Kalman filter: solve, slogdet, @ in a loop"),
}


def linalg_worker(name):
    """A loss through one of NumPy's LAPACK functions (a 4x4 matrix): its build
    is mostly the compile of enzpy's rule glue, cold (``run_config`` gives each
    worker an empty cache folder)."""
    from numba import njit

    namespace = {"np": np}
    exec("def loss(a):\n" + textwrap.indent(LINALG[name][0].strip(), "    ") + "\n", namespace)
    rng = np.random.default_rng(3)
    a = 0.3 * rng.standard_normal((4, 4)) + np.eye(4)
    v = rng.standard_normal(a.shape)
    return _measure(f"{name}: {LINALG[name][1]}", njit(namespace["loss"]), a, v)


def run_config(config, budget):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", config]
    with tempfile.TemporaryDirectory() as cache:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget,
                                  env=dict(os.environ, ENZPY_CACHE_DIR=cache))
        except subprocess.TimeoutExpired:
            return dict(config=config, error=f"over the {budget:.0f} s budget")
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return dict(config=config, error=(done.stderr.strip().splitlines() or ["failed"])[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="scan,det,slogdet,cholesky,kalman,2:1,2:2,4:2,8:2",
                        help="comma-separated: 'scan', " + ", ".join(map(repr, LINALG))
                        + " or k:fuse")
    parser.add_argument("--budget", type=float, default=900.0)
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs"))
    parser.add_argument("--stem", default="hvp", help="name of the CSV and Markdown files")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker == "scan":
            result = scan_worker()
        elif args.worker in LINALG:
            result = linalg_worker(args.worker)
        else:
            k, fuse = map(int, args.worker.split(":"))
            result = tree_worker(k, fuse)
        print("RESULT " + json.dumps(result), flush=True)
        return

    rows = []
    header = (f"{'configuration':<20} {'numba s':>9} {'1st order s':>12} {'hvp s':>9} "
              f"{'ratio':>7} {'goal':>6} {'hvp vs FD':>10}")
    print(header)
    for config in args.configs.split(","):
        r = run_config(config, args.budget)
        rows.append(r)
        if "error" in r:
            print(f"{r['config']:<20} {r['error']}")
            continue
        r["ratio"] = r["hvp_s"] / r["first_s"]
        r["goal_met"] = r["ratio"] <= GOAL_RATIO
        print(f"{r['config']:<20} {r['numba_s']:9.2f} {r['first_s']:12.2f} {r['hvp_s']:9.2f} "
              f"{r['ratio']:7.2f} {'met' if r['goal_met'] else 'MISSED':>6} "
              f"{r['fd_rel_err']:10.1e}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    fields = ["config", "numba_s", "first_s", "hvp_s", "ratio", "goal_met", "fd_rel_err",
              "first_instructions", "error"]
    with open(os.path.join(args.out, args.stem + ".csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, args.stem + ".md"), "w") as fh:
        fh.write("# hvp build time (reverse over forward) vs first-order build\n\n"
                 "Written by `python scripts/bench_hvp.py`; seconds of enzpy's build "
                 "(Numba's compile excluded), goal: hvp <= 3x first order.\n\n"
                 "| configuration | Numba compile s | first order s | hvp s | ratio | goal "
                 "| hvp vs FD of gradient |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            if "error" in r:
                fh.write(f"| {r['config']} | {r['error']} | | | | | |\n")
            else:
                fh.write(f"| {r['config']} | {r['numba_s']:.2f} | {r['first_s']:.2f} | "
                         f"{r['hvp_s']:.2f} | {r['ratio']:.2f} | "
                         f"{'met' if r['goal_met'] else 'MISSED'} | {r['fd_rel_err']:.1e} |\n")
        stages = [r for r in rows if "stages" in r]
        if stages:
            fh.write("\nStages of the hvp build (seconds):\n\n")
            names = list(stages[0]["stages"])
            fh.write("| configuration | " + " | ".join(names) + " |\n|---|"
                     + "---|" * len(names) + "\n")
            for r in stages:
                fh.write(f"| {r['config']} | " + " | ".join(
                    f"{r['stages'].get(n, 0.0):.2f}" for n in names) + " |\n")


if __name__ == "__main__":
    main()
