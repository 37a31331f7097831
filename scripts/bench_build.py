"""Time to first gradient, in a fresh process and in a warm one (persistent cache).

For each workload, one subprocess starts with an empty derivative cache
(fresh: Numba types and lowers the primal, enzpy builds the derivative and
saves it), then a second subprocess runs the same code against that cache
(warm: the derivative is loaded). Each reports its import time apart and the
time of its first ``autodiff`` call, with enzpy's stages and Numba's share
split into typing, lowering and Numba's own optimization and machine code.
For the scan, JAX's first ``jit(grad(f))`` call is timed the same way when JAX
is installed.

    python scripts/bench_build.py [--workloads scan,tree2f1,tree4f2,tree8f2]
                                  [--budget 600] [--out docs]

Writes docs/build.md and docs/build.csv with ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# workload -> (description, goal fresh s, goal warm s)
WORKLOADS = {
    "scan": ("scan, T = 80", 1.0, 0.3),
    "tree2f1": ("tree, 2+2 operators, fuse level 1", 8.0, 1.0),
    "tree4f2": ("tree, 4+4 operators, fuse level 2", 30.0, 2.0),
    "tree8f2": ("tree, 8+8 operators, fuse level 2", 90.0, 3.0),
}
TREE = {"tree2f1": (2, 1), "tree4f2": (4, 2), "tree8f2": (8, 2)}


# -- the measured process -------------------------------------------------------------
def worker(name):
    start = time.perf_counter()
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    import enzpy
    if name == "scan":
        import scan as example
        imported = time.perf_counter()
        s0 = np.array([0.5, 1.5, 2.5])
        t = time.perf_counter()
        value, ds0 = example.gradient(s0, 80)
        first = time.perf_counter() - t
        report = enzpy.build_report(example.f)[-1]
        check = float(np.max(np.abs(ds0 - example.central_difference(s0, 80))))
    else:
        import dynamic_expressions as de
        imported = time.perf_counter()
        k, fuse = TREE[name]
        ops = de.operator_set(k)
        X = np.random.default_rng(2024).standard_normal((3, 100))
        tree, _ = de.pick_tree(30, 3, ops, X)
        ev = de.build_evaluator(k, fuse)
        t = time.perf_counter()
        _, dX, dval = de.gradients(ev, tree, X)
        first = time.perf_counter() - t
        report = enzpy.build_report(ev.loss)[-1]
        fd = de.central_difference(ev, tree, X, "X", (1, 7))
        check = abs(dX[1, 7] - fd) / max(1.0, abs(fd))
    print(json.dumps({"import_s": imported - start, "first_gradient_s": first,
                      "stages": report.timings, "numba": report.numba, "cache": report.cache,
                      "primal_instructions": report.primal_instructions,
                      "check": check}))


def jax_worker():
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    imported = time.perf_counter()

    def scan_fn(carry, y_t):
        level, s = carry
        exp_val = jnp.maximum((level + 2 * level ** 0.5) * s[0], 0.0)
        level = y_t / s[0] + 0.5 * level
        s = y_t / level + 0.5 * s
        return (level, s), exp_val

    def f(s0):
        return jax.lax.scan(scan_fn, (1.0, s0), jnp.ones(80))[1].sum()

    t = time.perf_counter()
    jax.jit(jax.grad(f))(jnp.array([0.5, 1.5, 2.5])).block_until_ready()
    print(json.dumps({"import_s": imported - start, "first_gradient_s":
                      time.perf_counter() - t}))


# -- the driver -----------------------------------------------------------------------
def run(args, cache_dir, budget):
    env = dict(os.environ, ENZPY_CACHE_DIR=cache_dir, PYTHONDONTWRITEBYTECODE="1")
    try:
        done = subprocess.run([sys.executable, __file__] + args, capture_output=True,
                              text=True, env=env, timeout=budget)
    except subprocess.TimeoutExpired:
        return None, f"over the {budget:.0f} s budget"
    if done.returncode != 0:
        return None, "failed: " + done.stderr.strip().splitlines()[-1][:200]
    return json.loads(done.stdout.strip().splitlines()[-1]), "ok"


def fmt(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="scan,tree2f1,tree4f2,tree8f2")
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds per process before it is stopped")
    parser.add_argument("--out", help="folder for build.md and build.csv")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "jax":
        return jax_worker()
    if args.worker:
        return worker(args.worker)

    rows = []
    started = time.time()
    for name in args.workloads.split(","):
        with tempfile.TemporaryDirectory(prefix="enzpy-bench-cache-") as cache:
            fresh, status = run(["--worker", name], cache, args.budget)
            warm, warm_status = run(["--worker", name], cache, args.budget) if fresh else \
                (None, "not run")
        jax = None
        if name == "scan":
            jax, _ = run(["--worker", "jax"], tempfile.gettempdir(), args.budget)
        rows.append(dict(name=name, fresh=fresh, warm=warm, status=status,
                         warm_status=warm_status, jax=jax))
        print(f"{name}: fresh {fmt(fresh and fresh['first_gradient_s'])} s ({status}), "
              f"warm {fmt(warm and warm['first_gradient_s'])} s ({warm_status})", flush=True)

    lines = table(rows)
    header = (f"Generated by `python scripts/bench_build.py` on "
              f"{datetime.datetime.now():%Y-%m-%d %H:%M} ({os.cpu_count()} cores, "
              f"{platform.machine()}); total wall time {(time.time() - started) / 60:.1f} min.")
    print("\n" + header + "\n\n" + "\n".join(lines))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "build.md"), "w") as fh:
            fh.write("# Time to first gradient: fresh and warm processes\n\n" + header +
                     "\n\n" + DESCRIPTION + "\n\n" + "\n".join(lines) + "\n")
        with open(os.path.join(args.out, "build.csv"), "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["workload", "process", "import_s", "first_gradient_s",
                             "numba_typing_s", "numba_lowering_s", "numba_codegen_s",
                             "enzpy_s", "cache"])
            for r in rows:
                for kind in ("fresh", "warm"):
                    m = r[kind]
                    if m:
                        n = m["numba"]
                        writer.writerow([r["name"], kind, m["import_s"], m["first_gradient_s"],
                                         n.get("typing"), n.get("lowering"),
                                         n.get("optimize_codegen"), _enzpy(m), m["cache"]])


DESCRIPTION = """\
Each process imports NumPy, Numba and enzpy (reported apart), then calls `autodiff` once; the
primal itself is never called first. *Fresh*: an empty derivative cache, so Numba types and
lowers the primal and its callees (typing, lowering, and Numba's own LLVM optimization and
machine code of functions it compiles along the way), and enzpy builds the derivative and saves
it. *Warm*: a second process on the same cache loads it. enzpy's stages are those of
`build_report(f)[-1].timings` without Numba's part."""


def _enzpy(m):
    return sum(v for k, v in m["stages"].items() if k != "numba_compile")


def table(rows):
    out = ["| workload | fresh: first gradient (s) | goal | Numba typing | Numba lowering | "
           "Numba opt. + codegen | enzpy | warm: first gradient (s) | goal | verdict | "
           "import (s) | check |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        title, goal_fresh, goal_warm = WORKLOADS[r["name"]]
        fresh, warm = r["fresh"], r["warm"]
        if fresh is None:
            out.append(f"| {title} | {r['status']} | {goal_fresh:g} |  |  |  |  |  | "
                       f"{goal_warm:g} | **MISSED** |  |  |")
            continue
        n = fresh["numba"]
        met_fresh = fresh["first_gradient_s"] <= goal_fresh
        met_warm = warm is not None and warm["first_gradient_s"] <= goal_warm
        verdict = ("met" if met_fresh else "fresh MISSED") + ", " + \
            ("warm met" if met_warm else "warm MISSED")
        out.append(
            f"| {title} | {fmt(fresh['first_gradient_s'])} | {goal_fresh:g} | "
            f"{fmt(n.get('typing'))} | {fmt(n.get('lowering'))} | "
            f"{fmt(n.get('optimize_codegen'))} | {fmt(_enzpy(fresh))} | "
            f"{fmt(warm and warm['first_gradient_s'], 3)} ({warm['cache'] if warm else r['warm_status']}) | "
            f"{goal_warm:g} | {verdict} | {fmt(fresh['import_s'])} | {fresh['check']:.1e} |")
    jax = [r["jax"] for r in rows if r.get("jax")]
    if jax:
        out.append("")
        out.append(f"JAX, scan with T = 80: first `jit(grad(f))` call {jax[0]['first_gradient_s']:.2f} s "
                   f"(import {jax[0]['import_s']:.2f} s), in a fresh process.")
    stages = [r for r in rows if r["fresh"]]
    if stages:
        names = sorted({k for r in stages for k in r["fresh"]["stages"]},
                       key=lambda k: list(stages[0]["fresh"]["stages"]).index(k)
                       if k in stages[0]["fresh"]["stages"] else 99)
        out += ["", "Stages of the fresh build (s):", "",
                "| workload | " + " | ".join(names) + " |",
                "|---|" + "---|" * len(names)]
        for r in stages:
            out.append(f"| {r['name']} | " + " | ".join(
                fmt(r["fresh"]["stages"].get(k)) for k in names) + " |")
    return out


if __name__ == "__main__":
    main()
