"""The shadows of arrays a call allocates come from the call's arena (enzpy/tape.py)
when no shadow can outlive the call, and are Numba allocations otherwise.

Checked: gradients of programs allocating arrays in loops (0, 1 and many steps,
both branches) against central differences; arenas reused, not accumulated (the
process's heap does not grow over many calls); a shadow array stored into a container
the caller passes with its shadow stays a valid array after the call (no arena
then); and parallel loops (whose per-thread tapes never use an arena).
"""
import ctypes
import sys

import numpy as np
import pytest
from numba import njit, prange, types
from numba.experimental import jitclass

from enzpy import Const, Duplicated, Reverse, autodiff, check_gradient, zeros_like


@njit
def new_array_per_step(s0, steps):
    s = s0.copy()
    total = 0.0
    for t in range(steps):
        if s[0] > 0.0:
            s = np.sin(s) + 0.5 * s           # a new array each step
        else:
            s = s * s - 0.25
        total += s[0] * s[1]
    return total + np.sum(s)


@njit
def temporaries_per_row(a):
    total = 0.0
    for i in range(a.shape[0]):
        z = a[i] - np.max(a[i])
        total += np.log(np.sum(np.exp(z))) - z[0]
    return total


S0 = np.array([0.7, -0.3])


@pytest.mark.parametrize("steps", [0, 1, 7, 200])
@pytest.mark.parametrize("start", [S0, -S0], ids=["positive", "negative"])
def test_arrays_allocated_per_step(steps, start):
    check = check_gradient(new_array_per_step, Duplicated(start.copy(), np.zeros(2)),
                           Const(steps))
    assert check.worst_relative_error < 1e-6, str(check)


@pytest.mark.parametrize("rows", [0, 1, 50])
def test_temporaries_per_row(rows):
    a = np.random.default_rng(rows).standard_normal((rows, 5))
    check = check_gradient(temporaries_per_row, Duplicated(a, np.zeros_like(a)))
    assert check.worst_relative_error < 1e-6, str(check)


def _heap_bytes():
    info = ctypes.CDLL(None).mallinfo2

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    info.restype = MallInfo2
    got = info()
    return got.uordblks + got.hblkhd


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallinfo2")
def test_arenas_are_reused_not_accumulated():
    s0, ds0 = S0.copy(), np.zeros(2)
    call = lambda: autodiff(Reverse, new_array_per_step, Duplicated(s0, ds0), Const(2000))
    for _ in range(3):
        call()
    before = _heap_bytes()
    for _ in range(200):
        call()
    # one call's shadows take 2000 x 64 bytes: 200 calls keeping them would be 25 MB
    assert _heap_bytes() - before < 1 << 20


@jitclass([("a", types.float64[:]), ("c", types.float64)])
class Model:
    def __init__(self, a, c):
        self.a = a
        self.c = c


@njit
def replace_member(m, x):
    m.a = m.a * x                 # a new array, stored into the caller's object
    return np.sum(m.a * m.a) * m.c


def test_a_shadow_stored_into_the_callers_object_outlives_the_call():
    x = np.array([1.5, -2.0, 0.5])
    for _ in range(3):
        m = Model(np.array([0.2, 0.4, -0.6]), 2.0)
        dm = zeros_like(m)
        a0 = m.a.copy()
        autodiff(Reverse, replace_member, Duplicated(m, dm), Const(x))
        # The derivative went through the new member's shadow on to the old member's,
        # which autodiff puts back in the shadow object; the new member, stored into
        # the caller's object, stays a live array (freed memory would read as the
        # bytes the test run's malloc fills freed memory with: see conftest).
        assert dm.c == pytest.approx(np.sum((a0 * x) ** 2))
        for _ in range(2):
            np.testing.assert_allclose(dm.a, 2 * a0 * x * x * 2.0)
            np.testing.assert_allclose(m.a, a0 * x)
            np.ones(4096)              # (reuse of freed memory, were either freed)


@njit(parallel=True)
def rows_in_parallel(a):
    out = np.zeros(a.shape[0])
    for i in prange(a.shape[0]):
        row = np.exp(a[i]) * 2.0       # a new array in each iteration, on any thread
        out[i] = np.sum(row * row)
    return np.sum(out)


def test_parallel_loops_allocate_their_shadows_as_numba_does():
    a = np.random.default_rng(5).standard_normal((40, 3)) * 0.3
    check = check_gradient(rows_in_parallel, Duplicated(a, np.zeros_like(a)))
    assert check.worst_relative_error < 1e-6, str(check)
