"""The GradBench message loop.

Each line on stdin is one JSON message with an integer ``id`` and a ``kind``; each gets
exactly one JSON line on stdout (flushed), carrying the same ``id``:

- ``start``: ``{"id", "tool": "enzpy"}``; ``analysis``: ``{"id"}``;
- ``define``: imports the eval's module and runs its warm-up (Numba compiles, enzpy builds
  every derivative) on tiny inputs: ``{"id", "success": true, "timings": [compile]}``, or
  ``success: false`` with the error for an unknown module or a failed build;
- ``evaluate``: converts the input (timed as ``prepare``), calls the function until it has
  made ``min_runs`` calls and spent ``min_seconds`` (one ``evaluate`` timing per call; a
  first call of a function not compiled at ``define`` is made untimed and reported as
  ``compile``), answers the last call's output;
- any other kind (one a later protocol adds, or none): ``{"id"}``, which the protocol asks
  of every kind but ``define`` and ``evaluate``.

Bad messages (malformed JSON, no integer ``id``, a ``define`` or ``evaluate`` missing a
field, a wrong shape, an unknown module or function, an exception inside the computation)
get ``success: false`` with the reason; the loop goes on.
It ends at end of input. What Numba, LLVM or enzpy print goes to stderr: stdout (file
descriptor 1) is redirected there, and answers are written to a private copy of it.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
import traceback

from . import EVALS
from ._common import InputError

TOOL = "enzpy"


class Server:
    def __init__(self):
        self.modules = {}          # name -> module, after a successful define
        self.warm = set()          # (module, function, key) compiled already

    # -- messages -------------------------------------------------------------------------
    def handle(self, line: str) -> dict:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:
            # (ValueError: JSONDecodeError, and Python's limit on an integer's digits;
            # RecursionError: arrays nested deeper than the decoder recurses)
            return {"id": None, "success": False,
                    "error": f"malformed JSON message: {type(exc).__name__}: {exc}"}
        if not isinstance(msg, dict):
            return {"id": None, "success": False,
                    "error": f"a message must be a JSON object, got {type(msg).__name__}"}
        mid = msg.get("id")
        if isinstance(mid, bool) or not isinstance(mid, int):
            echoed = mid if isinstance(mid, str) or \
                isinstance(mid, float) and math.isfinite(mid) else None
            return {"id": echoed, "success": False,
                    "error": f"the message has no integer 'id' (got {mid!r})"}
        kind = msg.get("kind")
        try:
            if kind == "start":
                return {"id": mid, "tool": TOOL}
            if kind == "define":
                return {"id": mid, **self.define(msg)}
            if kind == "evaluate":
                return {"id": mid, **self.evaluate(msg)}
            return {"id": mid}
        except InputError as exc:
            return {"id": mid, "success": False, "error": f"bad input: {exc}"}
        except Exception as exc:                                   # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            return {"id": mid, "success": False, "error": f"{type(exc).__name__}: {exc}"}

    def _module(self, msg):
        name = msg.get("module")
        if not isinstance(name, str) or name not in EVALS:
            raise InputError(f"unknown module {name!r}; enzpy implements {', '.join(EVALS)}")
        module = self.modules.get(name)
        if module is None:
            module = importlib.import_module(f"{__package__}.{name}")
        return name, module

    def define(self, msg) -> dict:
        name, module = self._module(msg)
        t0 = time.perf_counter_ns()
        for function, inp in module.WARMUP:
            call, _ = module.prepare(function, inp)
            call()
            self.warm.add((name, function, getattr(module, "key", _no_key)(function, inp)))
        self.modules[name] = module
        return {"success": True,
                "timings": [{"name": "compile", "nanoseconds": time.perf_counter_ns() - t0}]}

    def evaluate(self, msg) -> dict:
        name, module = self._module(msg)
        function = msg.get("function")
        if function not in module.FUNCTIONS:
            raise InputError(f"module {name!r} has no function {function!r}; it has "
                             f"{', '.join(sorted(module.FUNCTIONS))}")
        if "input" not in msg:
            raise InputError("the message has no 'input'")
        inp = msg["input"]
        min_runs, min_seconds = _runs(inp) if name != "hello" else (1, 0.0)
        timings = []
        t0 = time.perf_counter_ns()
        call, to_json = module.prepare(function, inp)
        timings.append({"name": "prepare", "nanoseconds": time.perf_counter_ns() - t0})
        key = (name, function, getattr(module, "key", _no_key)(function, inp))
        if key not in self.warm:
            t0 = time.perf_counter_ns()
            call()
            timings.append({"name": "compile", "nanoseconds": time.perf_counter_ns() - t0})
            self.warm.add(key)
        runs, total = 0, 0
        while runs < min_runs or total < min_seconds * 1e9:
            t0 = time.perf_counter_ns()
            result = call()
            elapsed = time.perf_counter_ns() - t0
            timings.append({"name": "evaluate", "nanoseconds": elapsed})
            runs += 1
            total += elapsed
        return {"success": True, "output": to_json(result), "timings": timings}


def _no_key(function, inp):
    return None


def _runs(inp):
    if not isinstance(inp, dict):
        raise InputError(f"input must be a JSON object, got {type(inp).__name__}")
    min_runs = inp.get("min_runs", 1)
    min_seconds = inp.get("min_seconds", 1.0)
    if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 0:
        raise InputError(f"'min_runs' must be a non-negative integer, got {min_runs!r}")
    if isinstance(min_seconds, bool) or not isinstance(min_seconds, (int, float)) \
            or not math.isfinite(min_seconds) or min_seconds < 0:
        raise InputError(f"'min_seconds' must be a non-negative number, got {min_seconds!r}")
    return max(min_runs, 1), float(min_seconds)


def _answer(reply: dict) -> str:
    """``reply`` as JSON; GradBench's reader takes no NaN or infinity, so an output holding
    one is answered as a failure."""
    try:
        return json.dumps(reply, allow_nan=False)
    except ValueError:
        return json.dumps({"id": reply["id"], "success": False,
                           "error": "the output holds a non-finite number (NaN or infinity), "
                                    "which JSON cannot carry"})


def serve(lines, write) -> None:
    """Answer each of ``lines`` (bytes, or str) with ``write``; a line that is not
    UTF-8 is a malformed message, not the end of the loop."""
    server = Server()
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        write(_answer(server.handle(line)) + "\n")


# The environment variables that choose a BLAS library's thread count: one the user set wins.
_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _single_threaded_blas() -> None:
    """One BLAS thread, as GradBench's other tools run, unless the environment chose: the
    evals' products are small, and OpenBLAS's threads cost far more than they save there
    (gmm's objective at d=64, k=100 ran tens of times slower with two threads on a busy
    two-core machine)."""
    if any(name in os.environ for name in _BLAS_THREAD_VARIABLES):
        return
    try:        # (loaded now, the BLAS Numba calls, so that the limit reaches it)
        import scipy.linalg.cython_blas     # noqa: F401
        import scipy.linalg.cython_lapack   # noqa: F401
    except ImportError:
        pass
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")


def main() -> int:
    # Answers go to a private copy of stdout; anything else printed (by Numba, LLVM, enzpy
    # or a C library, at the file-descriptor level too) goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr

    def write(text):
        out.write(text)
        out.flush()

    _single_threaded_blas()
    serve(sys.stdin.buffer, write)
    return 0
