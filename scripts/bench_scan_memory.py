"""Memory and time of the scan's gradient (examples/scan.py) as T grows.

For T = 10^3, 10^4, 10^5 (``--T`` to change): enzpy's peak tape (what the
derivative records, reported by enzpy), the peak heap of one gradient call, and
the same peak for the hand-written adjoint (``scan.hand_gradient``, which keeps
three floats per step) and for the primal; then the gradient's time over the
primal's and over the hand-written adjoint's, timed alternately in one process.

The peak heap of a call is how far the process's resident memory rises above
its size before the call (Linux's peak resident size, restarted just before the
call, after freed memory is given back), measured in a fresh process per
(method, T) after a warm-up call at T = 10 (so compiling is not counted). It
includes the tape and every array the call keeps alive; it counts whole pages,
so the smallest workloads read as a few KB or 0.

    python scripts/bench_scan_memory.py [--T 1000,10000,100000] [--csv out.csv]
"""
import argparse
import csv
import ctypes
import json
import os
import subprocess
import sys

import numpy as np

from _timing import interleaved

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

METHODS = ("primal", "hand", "enzpy")


def _status_bytes(field) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024          # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def _start_peak() -> int:
    """Give freed memory back to the system and restart the peak resident size
    (Linux's clear_refs), so that the next peak is the call's own; returns the
    resident size now."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status_bytes("VmRSS")


def _call(method, T):
    """A function making one call of ``method`` at scan length ``T``."""
    import scan
    from enzpy import Const, Duplicated, Reverse, autodiff
    s0, ds0 = np.ones(2), np.zeros(2)
    if method == "primal":
        return lambda: scan.f(s0, T)
    if method == "hand":
        return lambda: scan.hand_gradient(s0, T, ds0)
    return lambda: autodiff(Reverse, scan.f, Duplicated(s0, ds0), Const(T))


def worker(method, T):
    """Peak heap growth of one call (and enzpy's peak tape), as JSON on stdout."""
    import enzpy
    import scan
    _call(method, 10)()
    before = _start_peak()
    if method == "enzpy":
        report = enzpy.build_report(scan.f)[0]
        report.peak_tape_bytes = 0
    _call(method, T)()
    out = {"heap": _status_bytes("VmHWM") - before}
    if method == "enzpy":
        out["tape"] = report.peak_tape_bytes
    print(json.dumps(out))


def measure_memory(method, T) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, os.path.join(ROOT, "scripts"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, __file__, "--worker", method, "--T", str(T)],
                          capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--csv", help="also write the table as CSV here")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, int(args.T))
        return
    lengths = [int(t) for t in args.T.split(",")]
    rows = []
    for T in lengths:
        memory = {m: measure_memory(m, T) for m in METHODS}
        calls = [_call(m, T) for m in METHODS]
        for c in calls:
            c()
        primal, hand, grad = interleaved(calls, args.repeat)
        rows.append(dict(T=T, tape_bytes=memory["enzpy"]["tape"],
                         enzpy_heap_bytes=memory["enzpy"]["heap"],
                         hand_heap_bytes=memory["hand"]["heap"],
                         primal_heap_bytes=memory["primal"]["heap"],
                         primal_ms=primal * 1e3, hand_ms=hand * 1e3, enzpy_ms=grad * 1e3))

    def mb(b):
        return f"{b / 2**20:.2f}"

    print("| T | enzpy tape MB | tape bytes / step | enzpy peak heap MB | hand-written peak "
          "heap MB | primal peak heap MB | enzpy heap / hand | primal ms | enzpy gradient ms "
          "| gradient / primal | gradient / hand-written |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        over_hand = (f"{r['enzpy_heap_bytes'] / r['hand_heap_bytes']:.0f}x"
                     if r["hand_heap_bytes"] > 0 else "n/a (hand-written below a page)")
        print(f"| {r['T']} | {mb(r['tape_bytes'])} | {r['tape_bytes'] / r['T']:.0f} | "
              f"{mb(r['enzpy_heap_bytes'])} | {mb(r['hand_heap_bytes'])} | "
              f"{mb(r['primal_heap_bytes'])} | {over_hand} | {r['primal_ms']:.3f} | "
              f"{r['enzpy_ms']:.3f} | {r['enzpy_ms'] / r['primal_ms']:.1f}x | "
              f"{r['enzpy_ms'] / r['hand_ms']:.1f}x |")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = last["T"] / first["T"]
        print(f"\nfrom T = {first['T']} to {last['T']} ({growth:.0f}x): tape grows "
              f"{last['tape_bytes'] / first['tape_bytes']:.1f}x, enzpy's peak heap "
              f"{last['enzpy_heap_bytes'] / max(first['enzpy_heap_bytes'], 1):.1f}x")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
