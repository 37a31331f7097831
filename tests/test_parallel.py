"""Parallel loops (``@njit(parallel=True)``: ``prange``, parallel array expressions).

The reverse of a parallel loop runs in parallel, each schedule entry with its
own tape, shadows accumulated atomically where entries share memory (a scalar
or an array every iteration reads). Checked against the serial version of the
same code and finite differences, with 1 and 2 threads.
"""
import math
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba import njit, prange

import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff


def fd(f, args, i, h=1e-6):
    x = args[i]
    if not isinstance(x, np.ndarray):
        up, dn = list(args), list(args)
        up[i], dn[i] = x + h, x - h
        return (f(*up) - f(*dn)) / (2 * h)
    g = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        dn = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        up[i][idx] += h
        dn[i][idx] -= h
        g[idx] = (f(*up) - f(*dn)) / (2 * h)
    return g


def scaled_sines(a, w):
    out = np.empty_like(a)
    for i in prange(a.size):
        out[i] = math.sin(a[i]) * w          # w: read by every iteration
    return out.sum()


def weighted_reduction(a, b):
    s = 0.0
    for i in prange(a.size):
        s += a[i] * a[i] * b[i % b.size]     # b: entries read by several iterations
    return s


def stencil(a):
    out = np.zeros_like(a)
    for i in prange(1, a.size - 1):
        out[i] = a[i - 1] * a[i + 1] - math.cos(a[i])
    return (out * out).sum()


def array_expression(a, b):
    return (np.exp(a) * b + a * a).sum()


def nested(a):
    total = 0.0
    for i in prange(a.shape[0]):
        row = 0.0
        for j in range(a.shape[1]):
            row += math.tanh(a[i, j] * (j + 1))
        total += row * row
    return total


# linear algebra of views of an argument in the loop's body: the views' meminfo has no
# shadow there, and the rules' glue referred to one (an IR parsing error)
def batch_solve(As, b):
    acc = 0.0
    for i in prange(As.shape[0]):
        acc += np.linalg.solve(As[i], b)[0]
    return acc


def batch_det(As):
    acc = 0.0
    for i in prange(As.shape[0]):
        acc += np.linalg.det(As[i])
    return acc


def batch_norm(X):
    acc = 0.0
    for i in prange(X.shape[0]):
        acc += np.linalg.norm(X[i]) ** 2 * (i + 1)
    return acc


# products and solves with operands every iteration shares: their rules' reverses add
# into the shared shadows with plain loads and stores (BLAS), so iterations running at
# once lost each other's additions (dw 25% short at 2000 rows, different every call)
def shared_operands(X, w, M):
    acc = 0.0
    for i in prange(X.shape[0]):
        acc += X[i] @ w + np.sum(np.tanh(M @ X[i])) + np.linalg.solve(M, X[i])[0]
    return acc


def _well_conditioned(rng, n, k):
    return rng.uniform(-1, 1, (n, k, k)) + 3 * np.eye(k)


PROGRAMS = [
    (batch_solve, lambda rng: [_well_conditioned(rng, 5, 3), rng.uniform(-1, 1, 3)], (0, 1)),
    (batch_det, lambda rng: [_well_conditioned(rng, 4, 3)], (0,)),
    (batch_norm, lambda rng: [rng.uniform(-1, 1, (6, 4))], (0,)),
    (shared_operands, lambda rng: [rng.uniform(-1, 1, (800, 3)), rng.uniform(-1, 1, 3),
                                   _well_conditioned(rng, 1, 3)[0]], (1, 2)),
    (scaled_sines, lambda rng: [rng.uniform(-2, 2, 37), 1.7], (0, 1)),
    (weighted_reduction, lambda rng: [rng.uniform(-2, 2, 41), rng.uniform(-1, 1, 5)], (0, 1)),
    (stencil, lambda rng: [rng.uniform(-2, 2, 33)], (0,)),
    (array_expression, lambda rng: [rng.uniform(-1, 1, 29), rng.uniform(-1, 1, 29)], (0, 1)),
    (nested, lambda rng: [rng.uniform(-1, 1, (9, 4))], (0,)),
]
PARALLEL = {f: njit(parallel=True)(f) for f, _, _ in PROGRAMS}
SERIAL = {f: njit(f) for f, _, _ in PROGRAMS}


def _annotate(args, wrt, shadows):
    out = []
    for i, a in enumerate(args):
        if i not in wrt:
            out.append(Const(a))
        elif isinstance(a, np.ndarray):
            out.append(Duplicated(a.copy(), shadows.setdefault(i, np.zeros_like(a))))
        else:
            out.append(Active(a))
    return out


def gradients(f, args, wrt):
    shadows = {}
    (grads,) = autodiff(Reverse, f, *_annotate(args, wrt, shadows))
    return [shadows[i] if i in shadows else grads[i] for i in wrt]


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    saved = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield request.param
    numba.set_num_threads(saved)


@pytest.mark.parametrize("program", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_parallel_loop_gradients(program, threads):
    py, make, wrt = program
    args = make(np.random.default_rng(7))
    parallel, serial = PARALLEL[py], SERIAL[py]
    got = gradients(parallel, args, wrt)
    want = gradients(serial, args, wrt)
    for i, g, w in zip(wrt, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g, fd(serial, args, i), rtol=1e-5, atol=1e-8)
    # forward mode along a random direction
    rng = np.random.default_rng(1)
    directions = {i: (rng.standard_normal(np.shape(args[i])) if isinstance(args[i], np.ndarray)
                      else float(rng.standard_normal())) for i in wrt}
    annotated = [Duplicated(a.copy() if isinstance(a, np.ndarray) else a, directions[i])
                 if i in wrt else Const(a) for i, a in enumerate(args)]
    (tangent,) = autodiff(Forward, parallel, *annotated)
    expected = sum(np.sum(g * directions[i]) for i, g in zip(wrt, want))
    assert tangent == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_gradient_is_the_same_on_every_call_and_thread_count():
    args = [np.random.default_rng(3).uniform(-2, 2, 101), 0.7]
    f = PARALLEL[scaled_sines]
    first = gradients(f, args, (0, 1))
    for n in (1, 2, 1, 2):
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        again = gradients(f, args, (0, 1))
        np.testing.assert_allclose(again[0], first[0], rtol=0, atol=0)
        assert again[1] == pytest.approx(first[1], rel=1e-13)


@njit(parallel=True)
def _product_max_min(x):
    p, m, lo = 1.0, -np.inf, np.inf
    for i in prange(x.size):
        p *= x[i]
        m = max(m, x[i] * x[i])
        lo = min(lo, x[i] - 0.1 * i)
    return p + m + 2.0 * lo


@njit(parallel=True)
def _per_thread_products(x):
    slots = np.ones(numba.get_num_threads())
    for i in prange(x.size):
        t = numba.get_thread_id()
        slots[t] = slots[t] * x[i]
    return np.prod(slots) + np.max(x * x)


@pytest.mark.parametrize("f", [_product_max_min, _per_thread_products])
@pytest.mark.parametrize("chunk", [0, 1, 3])
@pytest.mark.parametrize("size", [1, 2, 9])
def test_reductions_chaining_through_a_threads_slot_under_a_chunk_size(f, chunk, size,
                                                                       threads):
    """With a chunk size, one thread runs several entries through its reduction
    slot; a product, a max or a min make their order matter: the gradient (which
    was wrong, at one thread too) runs them in order."""
    x = np.linspace(0.5, 1.7, size)[::-1].copy()
    saved = numba.get_parallel_chunksize()
    numba.set_parallel_chunksize(chunk)
    try:
        dx = np.zeros_like(x)
        autodiff(Reverse, f, Duplicated(x.copy(), dx))
        (tangent,) = autodiff(Forward, f, Duplicated(x.copy(), np.ones_like(x)))
    finally:
        numba.set_parallel_chunksize(saved)
    expected = fd(f.py_func, [x], 0)
    np.testing.assert_allclose(dx, expected, rtol=1e-6, atol=1e-9)
    assert tangent == pytest.approx(expected.sum(), rel=1e-6)


UNDER_TBB = """
import sys
import numba
import numpy as np
from enzpy import Duplicated, Forward, Reverse, autodiff

sys.path.insert(0, sys.argv[1])
from test_parallel import _per_thread_products, _product_max_min

worst = 0.0
for f in (_product_max_min, _per_thread_products):
    for size in (2, 3, 9, 40):
        x = np.linspace(0.5, 1.7, size)[::-1].copy()
        for _ in range(5):          # (TBB's schedule changes from call to call)
            dx = np.zeros(size)
            autodiff(Reverse, f, Duplicated(x.copy(), dx))
            (tangent,) = autodiff(Forward, f, Duplicated(x.copy(), np.ones(size)))
            fd = np.zeros(size)
            for i in range(size):
                up, down = x.copy(), x.copy()
                up[i] += 1e-6
                down[i] -= 1e-6
                fd[i] = (f.py_func(up) - f.py_func(down)) / 2e-6
            scale = np.abs(fd).max()
            worst = max(worst, np.abs(dx - fd).max() / scale, abs(tangent - fd.sum()) / scale)
print(numba.threading_layer(), worst)
"""


def test_reductions_under_tbbs_threading_layer(tmp_path):
    """TBB (Numba's layer when the tbb package is installed) may run several
    schedule entries on one thread with no more entries than threads: a product,
    max or min reduction's gradient was wrong (3.9 came out 6.4) until such loops
    ran their entries in order there too."""
    script = tmp_path / "under_tbb.py"
    script.write_text(UNDER_TBB)
    # (pip puts libtbb beside the interpreter's libraries)
    libraries = os.pathsep.join(filter(None, [os.path.join(sys.prefix, "lib"),
                                              os.environ.get("LD_LIBRARY_PATH")]))
    done = subprocess.run([sys.executable, str(script), os.path.dirname(__file__)],
                          capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, NUMBA_THREADING_LAYER="tbb",
                                                NUMBA_NUM_THREADS="2",
                                                LD_LIBRARY_PATH=libraries))
    assert done.returncode == 0, done.stderr[-3000:]
    layer, worst = done.stdout.split()
    assert layer == "tbb"
    assert float(worst) < 1e-6, worst


@njit(parallel=True)
def _parallel_cubes(x):
    s = 0.0
    for i in prange(x.size):
        s += x[i] ** 3
    return s


def test_second_order_through_a_parallel_loop_is_refused():
    """(It crashed: the first derivative's parallel loop keeps its tapes in memory
    no derivative follows.)"""
    import enzpy
    with pytest.raises(enzpy.UnsupportedError, match="second-order derivatives through a "
                                                     "parallel loop"):
        enzpy.hvp(_parallel_cubes, np.linspace(0.1, 1.0, 5), np.ones(5))


@njit(parallel=True)
def frexp_in_parallel(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += math.frexp(x[i])[0]
    return s


def test_a_refusal_inside_a_parallel_loop_names_the_loop():
    # (the message's source lines were looked up among statements a parallel loop's
    # node is one of: an InternalError, KeyError 'value', instead of the refusal)
    x = np.linspace(1.0, 2.0, 10)
    with pytest.raises(enzpy.UnsupportedError) as info:
        autodiff(Reverse, frexp_in_parallel, Duplicated(x, np.zeros(10)))
    msg = str(info.value)
    assert "frexp_in_parallel" in msg and "numba_frexp" in msg, msg
    assert "in the body of a parallel loop (prange)" in msg, msg
    assert "__numba_parfor_gufunc" not in msg, msg


GLOBALS_IN_A_LOOP_BODY = '''
import os
import numpy as np
from numba import njit, prange

W = np.linspace(0.1, 1.0, 8)
S = float(os.environ["S"])


@njit(parallel=True, cache=True)
def cached(x):
    s = 0.0
    for i in prange(x.size):
        s += S * x[i] ** 2
    return s


@njit(parallel=True)
def weighted(x):
    s = 0.0
    for i in prange(x.size):
        s += W[i] * x[i] ** 2
    return s


@njit(parallel=True)
def scaled(x):
    s = 0.0
    for i in prange(x.size):
        s += S * x[i] ** 2
    return s


x = np.linspace(-1.0, 1.5, 8)
for f in (cached, weighted, scaled):
    f(x)
W[:] = 5.0                 # (later cells of a notebook)
S = 7.0
import enzpy               # noqa: E402
for f in (cached, weighted, scaled):
    try:
        enzpy.autodiff(enzpy.Reverse, f, enzpy.Duplicated(x.copy(), np.zeros(8)))
        print(f.__name__, "differentiated")
    except enzpy.UnsupportedError as error:
        print(f.__name__, "refused:", error)
'''


def test_globals_read_only_inside_a_parallel_loop_are_checked_like_the_others(tmp_path):
    """A global Numba froze into a parallel loop's body, compiled before ``import
    enzpy`` (or loaded from Numba's cache), then changed: Numba runs the old value,
    so differentiating today's is refused, as for a global read outside the loop
    (it was differentiated with today's value). Numba's cache keeps no text of the
    numbers such a body reads: a function loaded from it is refused, saying so."""
    script = tmp_path / "globals_in_loops.py"
    script.write_text(GLOBALS_IN_A_LOOP_BODY)
    runs = []
    for _ in range(2):      # (the second loads `cached` from Numba's cache)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path, env=dict(os.environ, S="2.0"))
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(dict(line.split(" ", 1) for line in done.stdout.strip().splitlines()))
    for run in runs:
        assert "global 'W' held other values" in run["weighted"], run
        assert "global 'S' was 2.0; it is now 7.0" in run["scaled"], run
    assert "global 'S' was 2.0; it is now 7.0" in runs[0]["cached"], runs[0]
    assert "keeps no text of the value of global 'S' read inside its parallel loop" in \
        runs[1]["cached"], runs[1]


FIRST_PRODUCT_IN_THE_REVERSE_SWEEP = '''
import numpy as np
from numba import njit, prange
from enzpy import Duplicated, Reverse, autodiff

@njit(parallel=True)
def batch_solve(As, b):
    acc = 0.0
    for i in prange(As.shape[0]):
        x = np.linalg.solve(As[i], b)
        acc += x[0] * x[0]
    return acc

As = np.random.default_rng(0).uniform(-1, 1, (4, 2, 2)) + 3 * np.eye(2)
b = np.ones(2)
dAs = np.zeros_like(As)
autodiff(Reverse, batch_solve, Duplicated(As, dAs), Duplicated(b, np.zeros(2)))
h = 1e-6
up, down = As.copy(), As.copy()
up[1, 0, 1] += h
down[1, 0, 1] -= h
print(abs(dAs[1, 0, 1] - (batch_solve(up, b) - batch_solve(down, b)) / (2 * h)))
'''


def test_reverse_loop_calling_into_python_for_the_first_time_does_not_deadlock(tmp_path):
    # The reverse of solve multiplies matrices: the process's first product makes Numba
    # look BLAS up through Python in a worker thread, which waited forever for the GIL
    # the calling thread held (Numba's launcher releases it around the forward loop)
    script = tmp_path / "first_product.py"
    script.write_text(FIRST_PRODUCT_IN_THE_REVERSE_SWEEP)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.split()[-1]) < 1e-6


@njit(parallel=True)
def _writes_a_const_argument(x, out):
    for i in prange(x.shape[0]):
        out[i] = math.sin(x[i]) * x[(i + 1) % x.shape[0]]
    return out.sum()


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_a_parallel_loop_writing_into_a_const_argument_is_refused_by_its_own_error(mode):
    """(it came out as CPython's SystemError 'returned a result with an exception set',
    the UnsupportedError only in its cause, which spoke of Const containers)"""
    x = np.linspace(0.1, 1.0, 10)
    with pytest.raises(enzpy.UnsupportedError, match="has no shadow .an argument passed as "
                                                     "Const"):
        autodiff(mode, _writes_a_const_argument, Duplicated(x, np.ones(10)),
                 Const(np.zeros(10)))


# -- a schedule entry that raises ----------------------------------------------------------
@njit
def _checked(v):
    if v < 0:
        raise ValueError("negative entry")
    return v


@njit(parallel=True)
def _sqrt_sum_checked(x):
    s = 0.0
    for i in prange(x.shape[0]):
        t = x[i] * 2.0                      # (an allocation in each iteration)
        s += math.sqrt(_checked(t.sum()))
    return s


@njit(parallel=True)
def _batch_solve(As, b):
    acc = 0.0
    for i in prange(As.shape[0]):
        acc += np.linalg.solve(As[i], b)[0]
    return acc


@njit
def _gradient_inside_njit(x):
    dx = np.zeros_like(x)
    autodiff(Reverse, _sqrt_sum_checked, Duplicated(x, dx))
    return dx


_RAISED = (ValueError, RuntimeError, np.linalg.LinAlgError)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_parallel_loop_whose_body_raises_fails_leaving_shadows_untouched(threads):
    # Found by review: the reverse sweep ran over the tape of the entry that stopped
    # half-way: zero or partial gradients (silently, under @njit), shadows written
    # before the exception, a segfault when the entry was np.linalg.solve's.
    # Numba reports the exception from the thread that ran the entry, which CPython
    # may drop: either it or enzpy's own RuntimeError is raised.
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        x = np.abs(np.random.default_rng(0).normal(size=(6, 3))) + 0.1
        x[(0, 4)[threads - 1], 1] = -10.0
        for mode, shadow in ((Reverse, np.zeros_like(x)), (Forward, np.ones_like(x))):
            dx = shadow.copy()
            with pytest.raises(_RAISED, match="negative entry|inside a parallel loop"):
                autodiff(mode, _sqrt_sum_checked, Duplicated(x, dx))
            np.testing.assert_array_equal(dx, shadow)
        with pytest.raises(_RAISED, match="negative entry|inside a parallel loop"):
            _gradient_inside_njit(x)
        As = np.random.default_rng(1).normal(size=(4, 2, 2)) + 3 * np.eye(2)
        As[(3, 0)[threads - 1]] = [[1.0, 2.0], [2.0, 4.0]]          # singular
        dAs = np.zeros_like(As)
        with pytest.raises(_RAISED, match="singular|inside a parallel loop"):
            autodiff(Reverse, _batch_solve, Duplicated(As, dAs), Const(np.array([1.0, 0.5])))
        assert not dAs.any()
        x[:] = np.abs(x)                    # (and nothing is left over for the next call)
        dx = np.zeros_like(x)
        autodiff(Reverse, _sqrt_sum_checked, Duplicated(x, dx))
        np.testing.assert_allclose(dx, 1.0 / np.sqrt(2.0 * x.sum(axis=1, keepdims=True))
                                   * np.ones_like(x), rtol=1e-12)
        np.testing.assert_allclose(_gradient_inside_njit(x), dx, rtol=1e-12)
    finally:
        numba.set_num_threads(before)
