"""Random programs from ``scripts/fuzz.py``, differentiated by enzpy and checked
against central finite differences (see that script for the generator and the
rejection of points where finite differences are unreliable).

About 50 programs, in four seeded chunks of 12 (of 25, 100 programs, with
``ENZPY_SLOW=1``), with every generator feature but the NumPy ones (the same
programs as before the fuzzer drew NumPy calls), and a chunk of 3 (5) programs
with NumPy statements (reductions, logsumexp,
reshaping, cumsum/diff, where/clip/maximum, matrix products, array helpers), and 6 (12)
programs checked in second order too (``hvp``), and 3 (5) with ``prange`` loops
(``parallel``).
``linalg`` (solve/inv/det/cholesky) is left to the standalone fuzzer: the first
build of each of those rules costs 10-45 s, more than this whole file may take.
Every failure fails the test. Minimal cases of the bugs the fuzzer found are at
the end.
``ENZPY_FUZZ_SEED`` / ``ENZPY_FUZZ_PROGRAMS`` / ``ENZPY_FUZZ_NUMPY_PROGRAMS``
change the seed, the number of programs per chunk and in the NumPy chunk; a
failing program is printed in full in the assertion message with the command
that re-runs it (``python scripts/fuzz.py --seed S --only I --exclude ...``,
with ``--max-statements 5 --points 1`` as here).
"""
from __future__ import annotations

import importlib.util
import math
import os
import re

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
SLOW = bool(os.environ.get("ENZPY_SLOW"))
PER_CHUNK = int(os.environ.get("ENZPY_FUZZ_PROGRAMS", "25" if SLOW else "12"))
CHUNKS = 4
NUMPY_PROGRAMS = int(os.environ.get("ENZPY_FUZZ_NUMPY_PROGRAMS", "5" if SLOW else "3"))
HVP_PROGRAMS = 12 if SLOW else 6
PARALLEL_PROGRAMS = 5 if SLOW else 3
MAX_STATEMENTS = 5
POINTS = 1
FEATURES = [f for f in fuzz.FEATURES if f not in ("numpy", "linalg", "parallel")]
NUMPY_FEATURES = [f for f in fuzz.FEATURES if f not in ("linalg", "parallel")]
PARALLEL_FEATURES = FEATURES + ["parallel"]


def _run(seed, indices, features, hvp=False):
    """(counts, failures)."""
    counts = {"passed": 0, "rejected": 0, "failed": 0, "invalid": 0}
    failures = []
    exclude = ",".join(f for f in fuzz.FEATURES if f not in features)
    for index in indices:
        prog = fuzz.generate_program(fuzz.program_rng(seed, index), features, MAX_STATEMENTS,
                                     POINTS)
        prog.tag = f"fuzz-{seed}-{index}"
        result = fuzz.run_program(prog, hvp=hvp)
        counts[result["status"]] += 1
        if result["status"] in ("failed", "invalid"):
            text = (f"--- program {index} (seed {seed}): {result['status']}; re-run with "
                    f"python scripts/fuzz.py --seed {seed} --only {index} --max-statements "
                    f"{MAX_STATEMENTS} --points {POINTS} --exclude {exclude}"
                    f"{' --hvp' if hvp else ''}\n"
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


def test_fuzz_second_order():
    """hvp of generated programs (lists that grow, jitclasses, recursion, loops) against
    differences of reverse-mode gradients."""
    indices = range(CHUNKS * PER_CHUNK, CHUNKS * PER_CHUNK + HVP_PROGRAMS)
    counts, failures = _run(SEED, indices, FEATURES, hvp=True)
    assert not failures, (f"{len(failures)} of {HVP_PROGRAMS} programs failed ({counts}):\n\n"
                          + "\n\n".join(failures))
    assert counts["passed"] >= HVP_PROGRAMS // 2, counts


def _indices_with(kind, seed, count, features):
    """The first ``count`` program indices whose program has a ``kind``
    statement (``uses_numpy``, ``parallel``)."""
    indices, index = [], 0
    while len(indices) < count:
        if getattr(fuzz.generate_program(fuzz.program_rng(seed, index), features,
                                         MAX_STATEMENTS, POINTS), kind):
            indices.append(index)
        index += 1
    return indices


@pytest.mark.parametrize("kind, features, count", [
    ("uses_numpy", NUMPY_FEATURES, NUMPY_PROGRAMS),
    ("parallel", PARALLEL_FEATURES, PARALLEL_PROGRAMS)])
def test_fuzz_numpy_and_parallel_programs(kind, features, count):
    counts, failures = _run(SEED, _indices_with(kind, SEED, count, features), features)
    assert not failures, (f"{len(failures)} of {count} programs failed ({counts}):"
                          "\n\n" + "\n\n".join(failures))
    assert counts["passed"] >= count // 2, counts


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
                   "a.size", "prange(", ".pop() * ", ".pop(0) * ", ".insert(0, ", "del L"]:
        assert needle in text, needle


def test_generator_covers_numpy():
    progs = [fuzz.generate_program(fuzz.program_rng(3, i)) for i in range(600)]
    text = "\n".join(p.source for p in progs)
    for needle in ["np.max(", ".max()", ".min()", "np.mean(", "np.prod(", "axis=0", "axis=1",
                   "np.log(np.sum(np.exp(", ".reshape(", ".ravel()", ".T", "np.cumsum(",
                   "np.diff(", "np.where(", "np.clip(", "np.maximum(", "np.minimum(", " @ ",
                   "np.dot(", "np.outer(", "np.linalg.solve(", "np.linalg.inv(",
                   "np.linalg.det(", "np.linalg.slogdet(", "np.linalg.cholesky(",
                   "np.linalg.norm(", "np.diag(", "np.array([", "np.abs(", "np.sign(", "raise ValueError("]:
        assert needle in text, needle
    assert sum(p.uses_numpy for p in progs) > 100
    # writes through a 1-D view of a matrix (the matrix A, or a fresh one)
    view_write = re.compile(r"(u\d+) = (np\.ravel\(\w+\)|\w+\.(reshape\(-1\)|ravel\(\)))\n"
                            r"\s*\1\[")
    sources = [fuzz.generate_program(fuzz.program_rng(0, i)).source for i in range(1000)]
    assert sum(bool(view_write.search(source)) for source in sources) >= 3
    # views whose Numba implementations build lists of axes (second order frees their shadows)
    assert sum(any(f"np.{name}(" in source for name in ("swapaxes", "moveaxis", "rot90"))
               for source in sources) >= 3
    # without the feature, no NumPy statement and the programs drawn before it existed
    plain = [f for f in fuzz.FEATURES if f not in ("numpy", "linalg")]
    for i in range(20):
        prog = fuzz.generate_program(fuzz.program_rng(3, i), plain)
        assert not prog.uses_numpy and "np.linalg" not in prog.source


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


def test_numpy_kinks_are_recorded():
    """np.max / x.min() select an element, np.clip / np.maximum / np.where take a
    side per element: a point near such a kink is rejected; exact ties that hold
    at every finite-difference point (clipped values) are not."""
    src = ("def f(A):\n"
           "    m = np.max(A)\n"
           "    return m + np.clip(A, -0.5, 0.5).sum() + np.maximum(A, 0.25).sum() + "
           "np.where(A > 1.0, A, -A).sum() + A.min()\n")
    params = [("A", "dup")]
    good = {"A": np.array([[0.1, 0.9], [-0.8, 0.6]])}
    assert fuzz.fd_rejection(_program(src, params, good), good) is None
    for bad in ([[0.1, 0.9], [-0.8, 0.9 - 1e-6]],        # max nearly tied
                [[0.1, 0.5 + 1e-6], [-0.8, 0.6]],        # at a clip bound
                [[0.25 + 1e-6, 0.9], [-0.8, 0.6]],       # at maximum's kink
                [[0.1, 0.9], [-0.8, 1.0 - 2e-5]]):       # np.where's condition
        point = {"A": np.array(bad)}
        assert fuzz.fd_rejection(_program(src, params, point), point) is not None, bad
    # several elements clipped to the same bound: max is tied at every point, fine
    tied = "def f(A):\n    return np.max(np.clip(A, -0.5, 0.5)) * A[0, 0]\n"
    point = {"A": np.array([[0.1, 0.9], [-0.8, 0.7]])}
    assert fuzz.fd_rejection(_program(tied, params, point), point) is None


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


def test_aliased_arguments_are_checked():
    """The aliasing check: one buffer passed as two written arrays. With one shadow
    enzpy's derivative is that of the function of the buffer (passes); a wrong
    adjoint of x0 (as two shadows once gave) is reported."""
    src = ("def f(x0, a, out):\n"
           "    a[0] = x0 * x0\n"
           "    out[1] = 1.0\n"
           "    return out[0] + a[1] * x0\n")
    prog = fuzz.Program(src, [("x0", "active"), ("a", "dup"), ("out", "dup")],
                        [{"x0": 1.3, "a": np.array([0.5, 0.7]), "out": np.array([0.1, 0.2])}],
                        {"a": np.array([0.3, -0.2]), "out": np.array([1.0, 2.0])})
    namespace = {}
    exec("from numba import njit\n" + src, namespace)
    f = njit(namespace["f"])
    assert fuzz._check_aliasing(enzpy, f, prog, prog.points[0], 1e-6, 1e-4) is None

    class TwoShadowsBug:                # a stand-in for enzpy returning a wrong adjoint
        Duplicated, Reverse = enzpy.Duplicated, enzpy.Reverse

        @staticmethod
        def autodiff(mode, f, *args):
            return ((1.78, None, None),)

    problem = fuzz._check_aliasing(TwoShadowsBug, f, prog, prog.points[0], 1e-6, 1e-4)
    assert problem is not None and "ALIASED ARGUMENTS" in problem


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
