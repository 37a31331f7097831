"""Random programs from ``scripts/fuzz.py``, differentiated by enzpy and checked
against central finite differences (see that script for the generator and the
rejection of points where finite differences are unreliable).

About 100 programs, in four seeded chunks of 25, with every generator feature.
Every failure fails the test. Minimal cases of the bugs the fuzzer found are at
the end.
``ENZPY_FUZZ_SEED`` / ``ENZPY_FUZZ_PROGRAMS`` change the seed and the number of
programs per chunk; a failing program is printed in full in the assertion
message and can be re-run with ``python scripts/fuzz.py --seed S --only I``
(with ``--max-statements 5 --points 1`` as here).
"""
from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Active, Const

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                     "fuzz.py")


def _load_fuzz():
    spec = importlib.util.spec_from_file_location("_enzpy_fuzz_script", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()

SEED = int(os.environ.get("ENZPY_FUZZ_SEED", "20240"))
PER_CHUNK = int(os.environ.get("ENZPY_FUZZ_PROGRAMS", "25"))
CHUNKS = 4
MAX_STATEMENTS = 5
POINTS = 1
FEATURES = list(fuzz.FEATURES)


def _run(seed, indices, features):
    """(counts, failures)."""
    counts = {"passed": 0, "rejected": 0, "failed": 0, "invalid": 0}
    failures = []
    for index in indices:
        prog = fuzz.generate_program(fuzz.program_rng(seed, index), features, MAX_STATEMENTS,
                                     POINTS)
        prog.tag = f"fuzz-{seed}-{index}"
        result = fuzz.run_program(prog)
        counts[result["status"]] += 1
        if result["status"] in ("failed", "invalid"):
            text = (f"--- program {index} (seed {seed}): {result['status']}\n"
                    f"{prog.source}\n{result['detail']}")
            failures.append(text)
    return counts, failures


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_programs(chunk):
    indices = range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)
    counts, failures = _run(SEED, indices, FEATURES)
    assert not failures, (f"{len(failures)} of {PER_CHUNK} programs failed ({counts}):\n\n"
                          + "\n\n".join(failures))
    # most points are usable: rejection must not hide everything
    assert counts["passed"] >= PER_CHUNK // 2, counts


# -- the generator and the rejection, without enzpy ----------------------------------------
def test_generator_is_deterministic_and_valid_python():
    for index in range(40):
        a = fuzz.generate_program(fuzz.program_rng(7, index))
        b = fuzz.generate_program(fuzz.program_rng(7, index))
        assert a.source == b.source
        compile(a.source, "<fuzz>", "exec")
        compile(fuzz.instrumented_source(a.source), "<fuzz-instrumented>", "exec")
        assert [n for n, _ in a.params] == [n for n, _ in b.params]
        assert any(kind == "active" for _, kind in a.params)
        for pa, pb in zip(a.points, b.points):
            for name in pa:
                assert np.array_equal(pa[name], pb[name])


def test_generator_covers_its_features():
    text = "\n".join(fuzz.generate_program(fuzz.program_rng(3, i)).source for i in range(200))
    for needle in ["if ", "elif ", "else:", "for ", "while ", "break", "continue", "@njit",
                   "d - 1", "np.zeros(", "np.empty(", "np.ones(", ".copy()", ".sum()",
                   "np.dot(", "[1:]", "[::2]", " *= ", "out[", "idx[", "range(n)", "abs(",
                   "max(", "min(", "math.exp(", "math.log(", "math.sqrt(", " ** 3",
                   "a.size"]:
        assert needle in text, needle


def _program(source, params, point):
    return fuzz.Program(source, params, [point], {})


def test_rejects_point_near_a_branch_flip():
    src = ("def f(x0):\n"
           "    if x0 * 2.0 > 1.0:\n"
           "        return x0 * x0\n"
           "    return math.sin(x0)\n")
    params = [("x0", "active")]
    assert fuzz.fd_rejection(_program(src, params, {"x0": 0.3}), {"x0": 0.3}) is None
    for x in (0.5 + 1e-7, 0.5 - 2e-5):
        reason = fuzz.fd_rejection(_program(src, params, {"x0": x}), {"x0": x})
        assert reason is not None and ("flip" in reason or "branches" in reason), reason


def test_rejects_loop_trip_count_change_and_huge_values():
    src = ("def f(x0):\n"
           "    t = x0\n"
           "    k = 0\n"
           "    while t < 1.0 and k < 10:\n"
           "        t = t + 0.25\n"
           "        k += 1\n"
           "    return t\n")
    params = [("x0", "active")]
    assert fuzz.fd_rejection(_program(src, params, {"x0": 0.1}), {"x0": 0.1}) is None
    assert fuzz.fd_rejection(_program(src, params, {"x0": 0.5}), {"x0": 0.5}) is not None
    big = "def f(x0):\n    return math.exp(x0) ** 3\n"
    assert fuzz.fd_rejection(_program(big, params, {"x0": 5.0}), {"x0": 5.0}) is not None


def test_ties_that_cannot_flip_are_not_rejected():
    src = ("def f(x0, c0):\n"
           "    if max(c0, 3.0) < 3.0:\n"
           "        return x0\n"
           "    return x0 * x0\n")
    params = [("x0", "active"), ("c0", "const")]
    point = {"x0": 0.7, "c0": 1.0}
    assert fuzz.fd_rejection(_program(src, params, point), point) is None


def test_a_wrong_derivative_is_reported():
    """The checker itself: a program whose derivative enzpy gets wrong (here an
    objmode block, which enzpy treats as constant) is reported as failed."""
    src = ("def f(x0):\n"
           "    with numba.objmode(y='float64'):\n"
           "        y = x0 * 2.0\n"
           "    return y * x0\n")
    prog = _program(src, [("x0", "active")], {"x0": 0.7})
    prog.source = "import numba\n" + src
    result = fuzz.run_program(prog)
    assert result["status"] in ("failed",), result


# -- bugs the fuzzer found (fixed in 6da8ef7): KeyError '~exit...' in split_loop_exits -----
@njit
def _while_in_for(x, n):
    s = 0.0
    for i in range(n):
        j = 0
        while j < i:
            s += x * j
            j += 1
    return s


@njit
def _dead_loop(x, y):
    for i in range(3):
        v = np.cos(y)         # noqa: F841 - the loop survives enzpy's light cleanup
    return math.sin(x)


def test_while_loop_nested_in_for_loop():
    (dx, dn), = enzpy.autodiff(enzpy.Reverse, _while_in_for, Active(0.3), Const(5))
    assert dx == pytest.approx(sum(j for i in range(5) for j in range(i)))


def test_dead_loop_calling_a_ufunc():
    (dx, dy), = enzpy.autodiff(enzpy.Reverse, _dead_loop, Active(0.3), Active(0.2))
    assert dx == pytest.approx(math.cos(0.3)) and dy == 0.0
