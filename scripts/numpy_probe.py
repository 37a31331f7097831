"""Probe enzpy's NumPy coverage: run the programs of tests/numpy_corpus.py through
enzpy in reverse mode, forward mode and hvp, and compare with finite differences.

    python scripts/numpy_probe.py                       # every program
    python scripts/numpy_probe.py --only matmul --tag fortran --json out.json
    python scripts/numpy_probe.py --modes reverse --jobs 2

Per program and mode the status is one of ok, WRONG, refused, error (with "crash" or
"timeout" when the worker died) and n/a; the checks themselves (what is compared with what,
tolerances, finite-difference steps) live in tests/numpy_checks.py, shared with
tests/test_numpy.py. Reverse mode covers every program: programs returning an array or a
tuple go through enzpy.vjp with a random cotangent.

Programs run in worker subprocesses (one Numba/enzpy process each, restarted after a
crash or a timeout, which then count as "error" for the mode being run); --no-isolate
runs them in this process.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.numpy_checks import MODES, STATUSES, run as run_mode  # noqa: E402


# -- running programs ---------------------------------------------------------------------
def _programs():
    from tests.numpy_corpus import PROGRAMS
    return {p.name: p for p in PROGRAMS}


def run_program_inline(program, modes, emit):
    for mode in modes:
        emit({"start": mode})
        emit({"mode": mode, **run_mode(program, mode)})


def _worker_main():
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import faulthandler
    faulthandler.enable()
    import warnings
    warnings.simplefilter("ignore")
    programs = _programs()

    def emit(msg):
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    for line in sys.stdin:
        job = json.loads(line)
        run_program_inline(programs[job["name"]], job["modes"], emit)
        emit({"done": True})


def _crash_summary(stderr):
    """The fatal error and the innermost Python frames of a faulthandler dump."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    fatal = next((line for line in lines if line.startswith("Fatal Python error")), "")
    frames = []
    for i, line in enumerate(lines):
        if "most recent call first" in line:
            frames = [f.replace('File "', "").replace('", line ', ":")
                      for f in lines[i + 1:i + 4] if f.startswith("File")]
            frames = [os.path.relpath(f, ROOT) if f.startswith(ROOT) else f for f in frames]
            break
    if not fatal and not frames:
        return " | ".join(lines[-3:])[:300]
    return (fatal + "; in " + " < ".join(frames))[:300]


class Worker:
    def __init__(self):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, cwd=ROOT)
        self.messages = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                pass
        self.messages.put(None)

    count = 0

    def run(self, name, modes, timeout):
        """Results per mode; the mode running at a crash or a timeout gets an error and
        the remaining modes are returned as not run."""
        self.err.seek(0)
        self.err.truncate()
        self.count += 1
        self.proc.stdin.write(json.dumps({"name": name, "modes": list(modes)}) + "\n")
        self.proc.stdin.flush()
        results, current, deadline = {}, None, time.monotonic() + timeout
        started = time.perf_counter()
        while True:
            try:
                msg = self.messages.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                results[current or modes[0]] = {
                    "status": "error", "detail": f"timeout: no result after {timeout:.0f} s",
                    "err": None, "seconds": round(time.perf_counter() - started, 3)}
                return results, False
            if msg is None:
                rc = self.proc.wait()
                self.err.seek(0)
                tail = _crash_summary(self.err.read().decode(errors="replace"))
                results[current or modes[0]] = {
                    "status": "error", "detail": f"crash: worker died (exit code {rc}): {tail}",
                    "err": None, "seconds": round(time.perf_counter() - started, 3)}
                return results, False
            if "start" in msg:
                current = msg["start"]
                started = time.perf_counter()
            elif "mode" in msg:
                results[msg.pop("mode")] = msg
            elif msg.get("done"):
                return results, True

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:            # noqa: BLE001
            self.kill()


def run_isolated(name, modes, timeout, worker_box):
    """All modes of one program in a worker, restarting it after a crash or a timeout."""
    results, todo = {}, list(modes)
    while todo:
        if worker_box[0] is None or worker_box[0].proc.poll() is not None:
            worker_box[0] = Worker()
        got, alive = worker_box[0].run(name, todo, timeout)
        for r in got.values():       # where it ran: replay a crash with --names
            r["worker"] = [worker_box[0].proc.pid, worker_box[0].count]
        results.update(got)
        if not alive:
            worker_box[0].kill()
            worker_box[0] = None
        todo = [m for m in todo if m not in results]
    return results


# -- reporting ----------------------------------------------------------------------------
def _short(r):
    s = r["status"]
    if s == "WRONG" and r.get("detail", "").startswith("max rel err"):
        return f"WRONG({r['detail'].split()[3]})"
    return s


def format_line(name, results, modes, seconds):
    cols = "  ".join(f"{m}={_short(results[m]):<12}" for m in modes)
    lines = [f"{name:<38} {cols} {seconds:7.1f}s"]
    for m in modes:
        r = results[m]
        if r["status"] in ("WRONG", "refused", "error"):
            lines.append(f"    {m}: {r['status']}: {r['detail']}")
    return "\n".join(lines)


def _reason_key(detail):
    """The key phrase of a refusal or error message, without the program's own names or
    register numbers, plus the Numba implementation it occurs in."""
    d = re.sub(r"^differentiating '[^']*': ", "", detail)
    m = re.match(r"(\w+): enzpy failed while building the derivative of '[^']*' .*?"
                 r"\(stage '([^']*)'\): (.*)", d)
    if m:
        d = f"{m.group(1)} at stage '{m.group(2)}': {m.group(3)}"
    d = re.sub(r"<string>:\d+:\d+: ", "", d)
    d = re.sub(r"`[^`]*?(@[\w.]+)[^`]*`", r"`\1(...)`", d)     # an instruction: its callee
    if d.count("`") % 2:                                       # a truncated instruction
        d = d[:d.rindex("`")] + "`...`"
    d = re.sub(r"function '(\w+)' returns [^;]*;", "function returns a tuple/other;", d)
    where = re.search(r" in function '([^']*)'", d)
    for cut in (" in function", " (in ", " at line", " [", " (near line", " File ", "; this"):
        if cut in d:
            d = d[:d.index(cut)]
    if where:
        d += f" [in {where.group(1).split('.<locals>')[0].split('.')[-1][:40]}]"
    return d[:140]


def summarize(records, modes, out=sys.stdout):
    counts = {m: Counter(r["modes"][m]["status"] for r in records) for m in modes}
    print("\nsummary (programs per status)", file=out)
    print(f"{'mode':<9}" + "".join(f"{s:>9}" for s in STATUSES) + f"{'total':>9}", file=out)
    for m in modes:
        print(f"{m:<9}" + "".join(f"{counts[m][s]:>9}" for s in STATUSES)
              + f"{sum(counts[m].values()):>9}", file=out)
    for status in ("WRONG", "error", "refused"):
        groups = defaultdict(list)
        for r in records:
            for m in modes:
                res = r["modes"][m]
                if res["status"] == status:
                    key = (res["detail"] if status == "WRONG"
                           else _reason_key(res.get("message") or res["detail"]))
                    groups[key if status != "WRONG" else f"{m}: {key}"].append(
                        r["name"] if status == "WRONG" else f"{r['name']}[{m[0]}]")
        if not groups:
            continue
        print(f"\n{status} ({sum(len(v) for v in groups.values())}):", file=out)
        for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:6]) + (f", ... (+{len(names) - 6})" if len(names) > 6 else "")
            print(f"  [{len(names)}] {key}\n      {shown}", file=out)


def _enzpy_state():
    """The commit enzpy was probed at, '+dirty' when enzpy/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "enzpy"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except Exception:                # noqa: BLE001
        return "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="programs whose name contains SUBSTRING")
    parser.add_argument("--tag", default=None, help="programs with this tag")
    parser.add_argument("--names", default=None,
                        help="comma-separated program names, run in this order (e.g. to "
                             "replay a worker's sequence with --no-isolate)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--json", default=None, help="write the results to PATH")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per program (all modes) before it counts as a hang")
    parser.add_argument("--no-isolate", action="store_true",
                        help="run in this process (a crash ends the probe)")
    parser.add_argument("--summary-from", default=None, metavar="JSON",
                        help="print the summary of a saved --json result and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main()
        return 0
    if args.summary_from:
        with open(args.summary_from) as fh:
            saved = json.load(fh)
        print(f"{len(saved['programs'])} programs, enzpy at {saved.get('enzpy_version')}")
        summarize(saved["programs"], tuple(saved["modes"]))
        return 0
    modes = tuple(m for m in args.modes.split(",") if m)
    bad = [m for m in modes if m not in MODES]
    if bad:
        parser.error(f"unknown modes {bad}")

    programs = _programs()
    if args.names:
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        unknown = [n for n in names if n not in programs]
        if unknown:
            parser.error(f"unknown programs {unknown}")
        pool = [programs[n] for n in names]
    else:
        pool = list(programs.values())
    selected = [p for p in pool
                if (args.only is None or args.only in p.name)
                and (args.tag is None or args.tag in p.tags)]
    print(f"{len(selected)} programs, modes {', '.join(modes)}, enzpy at {_enzpy_state()}",
          flush=True)
    records, lock, t_start = [], threading.Lock(), time.perf_counter()

    def record(p, results, seconds):
        rec = {"name": p.name, "covers": list(p.covers), "tags": list(p.tags),
               "returns": p.returns, "hvp": p.hvp, "seconds": round(seconds, 2),
               "modes": {m: results[m] for m in modes}}
        with lock:
            records.append(rec)
            print(format_line(p.name, results, modes, seconds), flush=True)

    if args.no_isolate:
        import warnings
        warnings.simplefilter("ignore")
        for p in selected:
            t0 = time.perf_counter()
            results = {}
            run_program_inline(p, modes, lambda msg: results.__setitem__(msg["mode"], msg)
                               if "mode" in msg else None)
            for r in results.values():
                r.pop("mode", None)
            record(p, results, time.perf_counter() - t0)
    else:
        todo = queue.Queue()
        for p in selected:
            todo.put(p)

        def work():
            box = [None]
            try:
                while True:
                    try:
                        p = todo.get_nowait()
                    except queue.Empty:
                        return
                    t0 = time.perf_counter()
                    results = run_isolated(p.name, modes, args.timeout, box)
                    record(p, results, time.perf_counter() - t0)
            finally:
                if box[0] is not None:
                    box[0].close()

        threads = [threading.Thread(target=work) for _ in range(max(1, args.jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    order = {p.name: i for i, p in enumerate(selected)}
    records.sort(key=lambda r: order[r["name"]])
    summarize(records, modes)
    total = time.perf_counter() - t_start
    print(f"\n{len(records)} programs in {total:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"modes": list(modes), "seconds": round(total, 1),
                       "enzpy_version": _enzpy_state(), "programs": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
