"""Arrays and memory: Duplicated arrays, in-place writes, allocation, array expressions."""
import math

import numpy as np
import pytest
from helpers import Guards
from numba import njit
from numba.core.runtime import _nrt_python, rtsys

import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff


def fd_gradient(f, args, wrt, h=1e-6):
    """Central differences of scalar f(*args) with respect to the array args[wrt]."""
    base = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    x = base[wrt]
    grad = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape):
        vals = []
        for sign in (1, -1):
            trial = [a.copy() if isinstance(a, np.ndarray) else a for a in base]
            trial[wrt][idx] += sign * h
            vals.append(f(*trial))
        grad[idx] = (vals[0] - vals[1]) / (2 * h)
    return grad


def gradient(f, args, wrt, mode=Reverse):
    """enzpy's gradient of f w.r.t. the array args[wrt] (inputs are not modified)."""
    guards = Guards()
    work = [guards.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    shadow = guards.copy(np.zeros_like(work[wrt]))
    annotated = [Duplicated(a, shadow) if i == wrt else Const(a) for i, a in enumerate(work)]
    out = autodiff(mode, f, *annotated)
    guards.check()
    return shadow, out


def check(f, args, wrt=0, rtol=1e-5, atol=1e-7):
    got, _ = gradient(f, args, wrt)
    np.testing.assert_allclose(got, fd_gradient(f, args, wrt), rtol=rtol, atol=atol)


X = np.linspace(0.1, 1.3, 7)


@njit
def sum_of_squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 2
    return s


@njit
def in_place_map(x):
    for i in range(x.shape[0]):
        x[i] = math.sin(x[i]) * 2.0
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit
def stencil(u, steps):
    n = u.shape[0]
    for _ in range(steps):
        for i in range(1, n - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
    return (u ** 2).sum()


@njit
def temporaries(x):
    y = np.zeros(x.shape[0])
    z = np.ones_like(x)
    w = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = x[i] * 3.0
        w[i] = y[i] * z[i] + x[i] ** 2
    return w.sum() + np.copy(x).sum() * x.copy()[2]


@njit
def array_expression(x, y):
    return (np.sin(x) * y + x ** 2).sum()


@njit
def slices_and_views(x):
    v = x[1:5]
    w = x[::2]
    return (v * v).sum() + w.sum() * x[2:].sum()


@njit
def dot_1d(x, y):
    return np.dot(x, y) + np.dot(x, x)


@njit
def affine(x):
    return x * 2.0 + 1.0


@njit
def uses_returned_array(x):
    y = affine(x)
    return (y * y).sum()


@njit
def grid_sum(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += math.exp(a[i, j]) * (i + 1) * a[i, j]
    return s


@pytest.mark.parametrize("f, args", [
    (sum_of_squares, [X]),
    (in_place_map, [X]),
    (stencil, [X, 4]),
    (stencil, [X, 0]),
    (stencil, [X, 1]),
    (temporaries, [X]),
    (array_expression, [X, X + 1.0]),
    (slices_and_views, [X]),
    (dot_1d, [X, X[::-1].copy()]),
    (uses_returned_array, [X]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_gradient_matches_finite_differences(f, args):
    check(f, args)


def test_second_argument_of_array_expression():
    check(array_expression, [X, X + 1.0], wrt=1)


def test_dot_wrt_second_operand_float32():
    x = X.astype(np.float32)
    y = (X[::-1] + 0.5).astype(np.float32)
    got, _ = gradient(dot_1d, [x, y], wrt=1)
    np.testing.assert_allclose(got, x, rtol=1e-6)


@pytest.mark.parametrize("order", ["C", "F"])
def test_two_dimensional_layouts(order):
    a = np.asarray(np.linspace(0.1, 1.2, 12).reshape(3, 4), order=order)
    check(grid_sum, [a])


def test_strided_view_with_matching_shadow():
    base = np.linspace(0.1, 2.0, 14)
    x = base[::2]
    dbase = np.zeros_like(base)
    expected = fd_gradient(in_place_map, [x.copy()], 0)
    autodiff(Reverse, in_place_map, Duplicated(x, dbase[::2]))
    np.testing.assert_allclose(dbase[::2], expected, rtol=1e-5, atol=1e-7)
    assert not dbase[1::2].any()          # the gaps of the view are untouched


def test_shadow_accumulates():
    x = X.copy()
    dx = np.ones_like(x)
    autodiff(Reverse, sum_of_squares, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 1.0 + 2 * X)


@njit
def model(X, out):
    out[0] = np.sin(X).sum() + X[1] * 2.0


def test_output_array_convention():
    x = X.copy()
    dx, out, dout = np.zeros_like(x), np.zeros(1), np.ones(1)
    result = autodiff(Reverse, model, Duplicated(x, dx), Duplicated(out, dout))
    assert result == ((None, None),)
    expected = np.cos(X)
    expected[1] += 2.0
    np.testing.assert_allclose(dx, expected)
    assert out[0] == pytest.approx(np.sin(X).sum() + 2 * X[1])
    assert dout[0] == 0.0                 # the output's old value was overwritten


@njit
def weighted(x, w, a):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * math.tanh(a * x[i])
    return s


def test_mixed_active_and_duplicated():
    x, w = X.copy(), np.arange(7.0)
    dx = np.zeros_like(x)
    (gx, gw, ga), value = autodiff(ReverseWithPrimal, weighted, Duplicated(x, dx), Const(w),
                                   Active(0.7))
    assert gx is None and gw is None
    assert value == pytest.approx(weighted(X, w, 0.7))
    np.testing.assert_allclose(dx, w * 0.7 / np.cosh(0.7 * X) ** 2, rtol=1e-10)
    h = 1e-6
    fd = (weighted(X, w, 0.7 + h) - weighted(X, w, 0.7 - h)) / (2 * h)
    assert ga == pytest.approx(fd, rel=1e-6)


def test_read_only_input_keeps_tape_constant():
    peaks = []
    for n in (10, 1000, 100000):
        x = np.ones(n)
        autodiff(Reverse, sum_of_squares, Duplicated(x, np.zeros(n)))
        peaks.append(enzpy.build_report(sum_of_squares)[-1].peak_tape_bytes)
    assert peaks[0] == peaks[1] == peaks[2]


@njit
def checked_sum_of_squares(x):
    n = x.shape[0]
    if n == 3:
        raise ValueError("bad length:", n)      # a message built at run time
    total = 0.0
    for i in range(n):
        total += x[i] * x[i]
    return total


def test_exception_with_run_time_message_keeps_inputs_read_only():
    # Numba builds such an exception's arguments in a function it stores into the
    # exception's record, run after the compiled code returns: its writes are
    # not the call's, and the input is still read again instead of recorded.
    peaks = []
    for n in (10, 1000):
        x = np.linspace(0.0, 1.0, n)
        dx = np.zeros(n)
        peaks.append(_tape_bytes(checked_sum_of_squares, [x]))
        autodiff(Reverse, checked_sum_of_squares, Duplicated(x, dx))
        np.testing.assert_allclose(dx, 2 * x)
    assert peaks[0] == peaks[1]
    dx = np.zeros(3)
    with pytest.raises(ValueError, match="bad length"):
        autodiff(Reverse, checked_sum_of_squares, Duplicated(np.ones(3), dx))
    assert not dx.any()


@njit
def numpy_sum(x):
    return np.sum(x)


@njit
def shifted_sum(x):
    return np.sum(x - 0.5)


@njit
def squared_sum(x):
    return np.sum((x - 0.5) ** 2)


def test_tape_of_numpy_reductions_and_array_expressions():
    # np.sum walks its array with a stepped pointer, which the reverse sweep
    # recomputes (nothing recorded per element); x - 0.5 is a small kernel
    # called per element, inlined so its derivative records nothing either:
    # only the broadcast index of the expression's loop is kept. The kernel of
    # (x - 0.5) ** 2 calls Numba's int_power, which keeps its derivative rule:
    # the kernel is inlined all the same (no derivative call, no heap shadow
    # of its result slot per element).
    for f, per_element in ((numpy_sum, 0), (shifted_sum, 8), (squared_sum, 8)):
        peaks = []
        for n in (10, 1000):
            x = np.linspace(0.0, 1.0, n)
            dx = np.zeros(n)
            autodiff(Reverse, f, Duplicated(x, dx))
            np.testing.assert_allclose(dx, 2.0 * (x - 0.5) if f is squared_sum else np.ones(n))
            peaks.append(enzpy.build_report(f)[-1].peak_tape_bytes)
        assert peaks[1] - peaks[0] <= per_element * 990, (f.__name__, peaks)


@njit
def squares_by_row(A):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            s += A[i, j] * A[i, j]
    return s


def test_nested_range_loops_record_nothing():
    # The inner loop's trip count follows from its bound (Numba counts max(n, 0)
    # iterations down to 0), and the row index's wrap-around test is recomputed:
    # nothing is recorded per row or per element.
    for rows in (3, 300):
        A = np.linspace(-1.0, 1.0, rows * 4).reshape(rows, 4)
        dA = np.zeros_like(A)
        autodiff(Reverse, squares_by_row, Duplicated(A, dA))
        np.testing.assert_allclose(dA, 2.0 * A)
        assert enzpy.build_report(squares_by_row)[-1].peak_tape_bytes == 0


@njit
def shifted_triangle(x, start):
    # inner loops counting up from a start that may be past the end (no iterations)
    # or far below 0 (j % n keeps the index in bounds: Numba wraps a negative index
    # once and does not check it, so x[-9] of 7 elements would read, and the
    # reverse sweep write, before the arrays)
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(start + i, n):
            s += x[j % n] * math.sin(x[i])
    return s


@njit
def countdown_loops(x, stop):
    # inner loops counting down to an inclusive and to an exclusive bound
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        j = i
        while j >= stop:
            s += x[j] * x[i]
            j -= 1
        k = n - 1
        while k > i + stop:
            s += math.cos(x[k]) * x[i]
            k -= 1
    return s


@njit
def inclusive_count_up(x, last):
    s = 0.0
    for i in range(x.shape[0]):
        j = 0
        while j <= last - i:
            s += x[j] * x[i] ** 2
            j += 1
    return s


@pytest.mark.parametrize("bound", [-9, -1, 0, 1, 3, 6, 7, 20])
def test_loops_whose_trip_count_follows_from_their_test(bound):
    # 0, 1 and many iterations of each inner loop, over the outer loop's rows
    check(shifted_triangle, [X, bound])
    check(countdown_loops, [X, min(max(bound, 0), 6)])
    check(inclusive_count_up, [X, min(bound, 6)])


@njit
def below_the_start(x, start):
    s = 0.0
    for j in range(start, x.shape[0]):
        s += x[j] * x[j]        # x[-9] of 7 elements: Numba wraps once, to -2
    return s


def test_an_index_out_of_bounds_is_mirrored_and_caught_by_the_guards():
    """Numba does not check indices, and the reverse sweep writes where the
    program read: 16 bytes before the shadow here, the size field of its heap
    block when it is a plain allocation (the process then aborted minutes
    later, in another test). The tests' arrays sit between guard zones."""
    with pytest.raises(AssertionError, match="wrote outside an array of 56 bytes"):
        gradient(below_the_start, [X, -9], 0)
    got, _ = gradient(below_the_start, [X, -7], 0)      # x[-7..-1] is x[0..6]: in bounds
    np.testing.assert_allclose(got, 4 * X, rtol=1e-15)


def test_in_place_updates_record_old_values():
    small, large = X.copy(), np.linspace(0.1, 1.3, 70)
    autodiff(Reverse, stencil, Duplicated(small, np.zeros_like(small)), 3)
    first = enzpy.build_report(stencil)[-1].peak_tape_bytes
    autodiff(Reverse, stencil, Duplicated(large, np.zeros_like(large)), 3)
    assert enzpy.build_report(stencil)[-1].peak_tape_bytes > first


def test_no_leak_over_many_calls():
    x = X.copy()
    dx = np.zeros_like(x)
    autodiff(Reverse, temporaries, Duplicated(x, dx))
    _nrt_python.memsys_enable_stats()
    before = rtsys.get_allocation_stats()
    for _ in range(1000):
        autodiff(Reverse, temporaries, Duplicated(x, dx))
    after = rtsys.get_allocation_stats()
    assert after.alloc - before.alloc == after.free - before.free
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free
    assert after.mi_alloc > before.mi_alloc          # the function really allocates


# -- errors ----------------------------------------------------------------------
def test_shadow_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        autodiff(Reverse, sum_of_squares, Duplicated(X.copy(), np.zeros(3)))


def test_shadow_dtype_mismatch():
    with pytest.raises(ValueError, match="dtype"):
        autodiff(Reverse, sum_of_squares, Duplicated(X.copy(), np.zeros(7, np.float32)))


def test_shadow_of_another_layout_is_laid_out_like_its_array():
    """np.zeros_like of a strided view is contiguous: enzpy passes a stand-in
    with the view's strides and copies the derivative back."""
    base = np.linspace(0.1, 2.0, 14)
    view = base[::2]
    shadow = np.full(7, 0.5)                     # accumulates: dx += d/dx
    autodiff(Reverse, sum_of_squares, Duplicated(view, shadow))
    np.testing.assert_allclose(shadow, 0.5 + 2 * view)
    transposed = np.arange(1.0, 7.0).reshape(2, 3).T / 7.0
    dt = np.zeros((3, 2))                       # C-contiguous, the view is Fortran
    autodiff(Reverse, grid_sum, Duplicated(transposed, dt))
    np.testing.assert_allclose(dt, fd_gradient(grid_sum, [transposed], 0), rtol=1e-6)


def test_shadow_of_another_layout_for_an_ndarray_subclass(tmp_path):
    """A np.memmap view (an ndarray subclass) gets the stand-in as a plain view
    does: the shadow was passed as it was, addressed with the view's strides (wrong
    derivatives, writes past the shadow's end, tangents read from beyond it)."""
    mapped = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=(14,))
    mapped[:] = np.linspace(0.1, 2.0, 14)
    view = mapped[::2]
    backing = np.zeros(14)
    shadow = backing[:7]
    autodiff(Reverse, sum_of_squares, Duplicated(view, shadow))
    np.testing.assert_allclose(shadow, 2 * np.asarray(view))
    assert not backing[7:].any()
    (tangent,) = autodiff(Forward, sum_of_squares, Duplicated(view, np.ones(7)))
    assert tangent == pytest.approx(2 * np.asarray(view).sum())
    grid = np.memmap(tmp_path / "g.dat", dtype=np.float64, mode="w+", shape=(2, 3))
    grid[:] = np.arange(1.0, 7.0).reshape(2, 3) / 7.0
    dg = np.zeros((2, 3), order="F")
    autodiff(Reverse, grid_sum, Duplicated(grid, dg))
    np.testing.assert_allclose(dg, fd_gradient(grid_sum, [np.asarray(grid)], 0), rtol=1e-6)


def test_shadow_checked_on_cached_calls_too():
    autodiff(Reverse, sum_of_squares, Duplicated(X.copy(), np.zeros(7)))
    with pytest.raises(ValueError, match="shape"):
        autodiff(Reverse, sum_of_squares, Duplicated(np.ones(5), np.zeros(4)))


@njit
def _weighted_cubes(x):
    s = 0.0
    for i in range(x.size):
        s += x.flat[i] ** 3 * (i + 1)
    return s


@njit
def _weighted_cubes_gradient(x, dx):
    return autodiff(Reverse, _weighted_cubes, Duplicated(x, dx))


@pytest.mark.parametrize("make", [
    lambda: np.broadcast_to(np.array([0.5]), (3,)),                  # stride 0
    lambda: np.broadcast_to(np.array([[0.5], [0.25]]), (2, 3)),       # (8, 0)
    lambda: np.lib.stride_tricks.as_strided(np.arange(1.0, 6.0) / 7, (3, 3), (8, 8)),
], ids=["broadcast", "broadcast_2d", "overlapping_windows"])
def test_array_whose_elements_overlap_is_refused(make):
    """Elements sharing memory cannot have a derivative each (the reverse
    sweep added every element's into the same place): ValueError, from the
    first call and from a call that would hit the cache, and inside njit."""
    x = make()
    fresh = np.ascontiguousarray(x)
    dx = np.zeros(x.shape)
    autodiff(Reverse, _weighted_cubes, Duplicated(fresh, np.zeros(x.shape)))   # cached now
    for shadow in (dx, np.zeros(x.shape)[..., ::-1]):
        with pytest.raises(ValueError, match="overlap"):
            autodiff(Reverse, _weighted_cubes, Duplicated(x, shadow))
    with pytest.raises(ValueError, match="overlap"):
        autodiff(Reverse, _weighted_cubes, Duplicated((x,), (dx,)))
    overlapping_shadow = np.lib.stride_tricks.as_strided(np.zeros(x.size), x.shape,
                                                         (0,) * x.ndim)
    with pytest.raises(ValueError, match="overlap"):
        autodiff(Reverse, _weighted_cubes, Duplicated(fresh, overlapping_shadow))
    with pytest.raises(ValueError, match="overlap"):
        _weighted_cubes_gradient(x, np.lib.stride_tricks.as_strided(np.zeros(x.size), x.shape,
                                                                    x.strides))
    assert not dx.any()


def test_interleaved_views_are_not_overlapping():
    x = np.arange(1.0, 13.0).reshape(3, 4)[:, ::2] / 13      # strides (32, 16)
    dx = np.zeros_like(x)
    autodiff(Reverse, _weighted_cubes, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 3 * x ** 2 * np.arange(1, 7).reshape(3, 2), rtol=1e-12)


@njit
def _weighted_pair(a, b):
    s = 0.0
    for i in range(a.size):
        s += a[i] * a[i] * (i + 1) + 3.0 * b[i]
    return s


def test_shadows_of_two_arguments_may_not_mix():
    """Shadows sharing memory the way their arrays do are fine (the same
    array twice, shifted views of one buffer); otherwise ValueError, on cached
    calls too, before anything is written."""
    x, y = np.arange(1.0, 4.0), np.arange(4.0, 7.0)
    autodiff(Reverse, _weighted_pair, Duplicated(x, np.zeros(3)), Duplicated(y, np.zeros(3)))
    d = np.zeros(4)
    with pytest.raises(ValueError, match="shadows do not share memory alike"):
        autodiff(Reverse, _weighted_pair, Duplicated(x, d[:3]), Duplicated(y, d[1:]))
    with pytest.raises(ValueError, match="shadows do not share memory alike"):
        autodiff(Reverse, _weighted_pair, Duplicated(x, d[:3]), Duplicated(y, d[:3]))
    assert not d.any()
    z, dz = np.arange(1.0, 4.0), np.zeros(3)
    autodiff(Reverse, _weighted_pair, Duplicated(z, dz), Duplicated(z, dz))
    np.testing.assert_allclose(dz, 2 * z * np.arange(1, 4) + 3)
    w, dw = np.arange(1.0, 5.0), np.zeros(4)
    autodiff(Reverse, _weighted_pair, Duplicated(w[:3], dw[:3]), Duplicated(w[1:], dw[1:]))
    np.testing.assert_allclose(dw, [2.0, 11.0, 21.0, 3.0])


@njit
def _square_first_then_read(t):
    a, b = t
    a[0] = a[0] * a[1]
    return (b * b).sum()


def test_an_array_held_twice_gets_one_shadow_from_zeros_like():
    """Written through one entry of a tuple and read through the other: with a shadow
    each, the derivative split between them and came out wrong."""
    x = np.array([0.7, 0.3])
    a = x.copy()
    shadow = enzpy.zeros_like((a, a))
    assert shadow[0] is shadow[1]
    autodiff(Reverse, _square_first_then_read, Duplicated((a, a), shadow))
    np.testing.assert_allclose(shadow[0], [2 * x[0] * x[1] ** 2,
                                           2 * x[0] ** 2 * x[1] + 2 * x[1]], rtol=1e-12)
    a = x.copy()
    with pytest.raises(ValueError, match="shadows do not share memory alike"):
        autodiff(Reverse, _square_first_then_read,
                 Duplicated((a, a), (np.zeros(2), np.zeros(2))))
    assert (a == x).all()


@njit
def _weighted_pair_in_tuple(t):
    return _weighted_pair(t[0], t[1])


@njit
def _weighted_pair_in_list(arrays):
    return _weighted_pair(arrays[0], arrays[1])


def test_shadows_inside_a_container_may_not_mix():
    """The same check for the arrays a tuple or list holds: one shadow for two distinct
    arrays summed both derivatives into it, silently."""
    x, y = np.arange(1.0, 4.0), np.arange(4.0, 7.0)
    d = np.zeros(3)
    with pytest.raises(ValueError, match=r"0 \(its array 0\) and 0 \(its array 1\).*"
                                         r"shadows do not share memory alike"):
        autodiff(Reverse, _weighted_pair_in_tuple, Duplicated((x, y), (d, d)))
    with pytest.raises(ValueError, match="shadows do not share memory alike"):
        autodiff(Reverse, _weighted_pair_in_list, Duplicated([x, y], [d, d]))
    assert not d.any()
    z, dz = np.arange(1.0, 4.0), np.zeros(3)          # the same array twice: fine
    autodiff(Reverse, _weighted_pair_in_tuple, Duplicated((z, z), (dz, dz)))
    np.testing.assert_allclose(dz, 2 * z * np.arange(1, 4) + 3)
    with pytest.raises(ValueError, match="shadows do not share memory alike"):
        autodiff(Reverse, _weighted_pair_in_tuple, Duplicated((z, z), (np.zeros(3), dz)))
    dx, dy = np.zeros(3), np.zeros(3)
    autodiff(Reverse, _weighted_pair_in_list, Duplicated([x, y], [dx, dy]))
    np.testing.assert_allclose(dx, 2 * x * np.arange(1, 4))
    np.testing.assert_allclose(dy, 3.0)


@njit
def _accumulate_squares_of(a, b):
    for i in range(a.size):
        b[i] = b[i] + a[i] * a[i]
    return (np.sin(a) * b).sum()


def test_interleaved_views_of_one_buffer_are_apart():
    """x[0::2] and x[1::2] span the same addresses but share no element."""
    x, d = np.array([0.3, 0.7, 1.1, 0.5, 0.9, 1.3]), np.zeros(6)
    a, b = x[0::2].copy(), x[1::2].copy()
    autodiff(Reverse, _accumulate_squares_of, Duplicated(x[0::2], d[0::2]),
             Duplicated(x[1::2], d[1::2]))
    u = b + a * a
    np.testing.assert_allclose(d[0::2], np.cos(a) * u + np.sin(a) * 2 * a, rtol=1e-12)
    np.testing.assert_allclose(d[1::2], np.sin(a), rtol=1e-12)


def test_errors_leave_shadow_untouched():
    dx = np.full(7, 3.0)
    with pytest.raises(ValueError):
        autodiff(Reverse, sum_of_squares, Duplicated(X.copy(), dx[:4]))
    assert (dx == 3.0).all()


def test_active_on_array_is_type_error():
    with pytest.raises(TypeError, match="Duplicated"):
        autodiff(Reverse, sum_of_squares, Active(X.copy()))


def test_duplicated_on_int_is_type_error():
    with pytest.raises(TypeError, match="Duplicated"):
        autodiff(Reverse, sum_of_squares, Duplicated(3, 0))
    with pytest.raises(TypeError, match="float32 or float64.*integer and boolean arrays as Const"):
        autodiff(Reverse, sum_of_squares, Duplicated(np.arange(3), np.zeros(3, np.int64)))


@pytest.mark.parametrize("dtype, advice", [
    (">f8", r"astype\(np.float64\)"), (">f4", r"astype\(np.float32\)"),
    ("f2", r"astype\(np.float64\)"), ("c16", "real and imaginary parts")])
def test_duplicated_array_of_another_float_dtype_gets_fitting_advice(dtype, advice):
    x = np.ones(3, dtype)
    with pytest.raises(TypeError, match=advice):
        autodiff(Reverse, sum_of_squares, Duplicated(x, np.zeros(3, dtype)))


@njit
def _sine_sum(x):
    return np.sin(x).sum()


@pytest.mark.parametrize("mode", [Reverse, enzpy.Forward])
def test_a_byte_swapped_array_after_a_cached_call_is_refused(mode):
    """Numba's dispatch takes a big-endian float64 array for the unaligned one it saw
    last: the cached call path read its bytes swapped (a wrong derivative)."""
    x = np.array([0.3, 0.6, 0.9])
    raw = np.zeros(3 * 8 + 1, np.uint8)
    unaligned = raw[1:].view(np.float64)
    unaligned[:] = x
    for _ in range(2):          # (the second call takes the cached path)
        autodiff(mode, _sine_sum, Duplicated(unaligned, np.zeros(3)))
    with pytest.raises(TypeError, match=r"astype\(np.float64\)"):
        autodiff(mode, _sine_sum, Duplicated(x.astype(">f8"), np.zeros(3)))


@njit
def scale_into(x, out, a):
    for i in range(x.shape[0]):
        out[i] = x[i] * a


@njit
def through_const_output(x, out, a):
    scale_into(x, out, a)
    s = 0.0
    for i in range(out.shape[0]):
        s += out[i] * x[i]
    return s


def test_active_data_into_const_array_is_refused():
    x = X.copy()
    with pytest.raises(enzpy.UnsupportedError, match="Duplicated"):
        autodiff(Reverse, through_const_output, Duplicated(x, np.zeros_like(x)),
                 Const(np.zeros_like(x)), Active(2.0))


def test_through_duplicated_output_is_right():
    x = X.copy()
    dx = np.zeros_like(x)
    autodiff(Reverse, through_const_output, Duplicated(x, dx),
             Duplicated(np.zeros_like(x), np.zeros_like(x)), Active(2.0))
    np.testing.assert_allclose(dx, 4.0 * X)


@njit
def reads_after_write(x, y):
    for i in range(y.shape[0]):
        y[i] = 2.0 * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


def test_overlapping_arguments_are_refused():
    x = X.copy()
    with pytest.raises(ValueError, match="share memory"):
        autodiff(Reverse, reads_after_write, Duplicated(x, np.zeros_like(x)),
                 Duplicated(x, np.zeros_like(x)))


def test_overlapping_arguments_are_refused_in_forward_mode():
    """A tangent function reads the shadow of what it reads: a write through an
    aliasing argument would not reach it."""
    x = X.copy()
    with pytest.raises(ValueError, match="arguments 1 and 0 share memory"):
        autodiff(Forward, reads_after_write, Duplicated(x, np.ones_like(x)),
                 Duplicated(x, np.zeros_like(x)))
    y = np.zeros_like(x)
    (tangent,) = autodiff(Forward, reads_after_write, Duplicated(x, np.ones_like(x)),
                          Duplicated(y, np.zeros_like(x)))
    np.testing.assert_allclose(tangent, 4.0 * X.sum())


@njit
def writes_both(x, a, b):
    a[0] = x * x
    b[1] = 1.0
    return b[0]


@pytest.mark.parametrize("reverse", [True, False])
def test_two_written_arguments_sharing_memory(reverse):
    """Both written, the same buffer: one shadow (the derivative 2x reaches the
    read through b) or a refusal, never the 0 that two shadows gave."""
    def call(a, da, b, db):
        if reverse:
            return autodiff(Reverse, writes_both, Active(3.0), Duplicated(a, da),
                            Duplicated(b, db))[0][0]
        return autodiff(Forward, writes_both, Duplicated(3.0, 1.0), Duplicated(a, da),
                        Duplicated(b, db))[0]

    buf, d = np.zeros(2), np.zeros(2)
    assert call(buf, d, buf, d) == 6.0
    buf = np.zeros(2)
    with pytest.raises(ValueError, match="arguments 1 and 2: the arrays and their shadows"):
        call(buf, np.zeros(2), buf, np.zeros(2))
    big, dbig = np.zeros(4), np.zeros(4)
    with pytest.raises(ValueError, match="arguments 1 and 2: the arrays and their shadows"):
        call(big[:2], dbig[:2], big[:2], dbig[1:3])
    # distinct buffers: b[0] does not depend on x
    assert call(np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2)) == 0.0


@pytest.mark.parametrize("reverse", [True, False])
def test_written_const_argument_sharing_memory_is_refused(reverse):
    """b is Const, so its reads carry no derivative: after a's write of x*x
    through the same memory, that would drop the derivative."""
    buf = np.zeros(2)
    x = Active(3.0) if reverse else Duplicated(3.0, 1.0)
    with pytest.raises(ValueError, match="arguments 1 and 2 share memory"):
        autodiff(Reverse if reverse else Forward, writes_both, x,
                 Duplicated(buf, np.zeros(2)), Const(buf))


@njit
def matvec(A, v):
    return (A @ v).sum()


def test_matrix_product_through_blas():
    A = np.arange(1.0, 10.0).reshape(3, 3) / 9.0
    v = np.array([0.5, -1.0, 2.0])
    check(matvec, [A, v], wrt=0)
    check(matvec, [A, v], wrt=1)


@njit
def matmul_sum(A, B):
    return (A @ B).sum()


@njit
def dot_sq(a, b):
    return np.dot(a, b) ** 2


@njit
def products_then_overwrite(A, B, x):
    # every operand is written after the products: the reverse needs the old values
    y = A @ x
    C = A @ B
    t = np.dot(x, y) + (C * C).sum()
    A[:] = 0.5 * A
    B[0, 0] = 3.0
    x[:] = x * x
    return t + A.sum() + B.sum() + x.sum()


@pytest.mark.parametrize("n", [1, 4])
def test_operands_written_after_a_product_are_recorded(n):
    rng = np.random.default_rng(n)
    args = [rng.standard_normal((n, n)), rng.standard_normal((n, n)), rng.standard_normal(n)]
    work = [a.copy() for a in args]
    shadows = [np.zeros_like(a) for a in args]
    autodiff(Reverse, products_then_overwrite, *map(Duplicated, work, shadows))
    for wrt, shadow in enumerate(shadows):
        np.testing.assert_allclose(shadow, fd_gradient(products_then_overwrite, args, wrt),
                                   rtol=1e-5, atol=1e-7)


def _tape_bytes(f, args):
    """The tape one call of f's gradient takes."""
    def call():
        autodiff(Reverse, f, *[Duplicated(a.copy(), np.zeros_like(a)) for a in args])
    call()
    report = enzpy.build_report(f)[-1]
    report.peak_tape_bytes = 0
    call()
    return report.peak_tape_bytes


def test_products_of_inputs_record_no_operand():
    # The reverse of A @ x reads A and x again: nothing writes them during the
    # call, so the tape does not grow with their size (16 bytes a row of A @ B:
    # the 2-D sum's loop, not the product).
    rng = np.random.default_rng(0)
    for f, shapes in ((matvec, lambda n: [(n, n), (n,)]), (matmul_sum, lambda n: [(n, n)] * 2),
                      (dot_sq, lambda n: [(n,), (n,)])):
        small, large = ([rng.standard_normal(s) for s in shapes(n)] for n in (3, 300))
        growth = _tape_bytes(f, large) - _tape_bytes(f, small)
        assert growth <= (16 * 297 if f is matmul_sum else 0), (f.__name__, growth)
        for wrt in range(2):
            check(f, small, wrt=wrt)
    # written after the products: recorded (n^2 + n elements per product at least)
    small, large = ([rng.standard_normal(s) for s in [(n, n), (n, n), (n,)]] for n in (3, 300))
    assert _tape_bytes(products_then_overwrite, large) - \
        _tape_bytes(products_then_overwrite, small) >= 8 * (300 ** 2 - 9)


@njit
def carried_fresh_arrays(s0, steps):
    # a new array every step, carried to the next one (the JAX scan pattern)
    s = s0.copy()
    total = 0.0
    for _ in range(steps):
        total += s[0] * s[1]
        s = 1.0 / (1.0 + s * s) + 0.5 * s
    return total


def test_many_fresh_arrays_stay_alive_for_the_reverse_sweep():
    # Regression: frees of fresh arrays must wait for the reverse sweep, however
    # many steps run; a premature free crashed at random.
    s0 = np.array([0.3, 0.7])
    for steps in (1, 50, 3000, 3000):
        ds = np.zeros(2)
        autodiff(Reverse, carried_fresh_arrays, Duplicated(s0, ds), Const(steps))
        if steps == 50:
            np.testing.assert_allclose(ds, fd_gradient(carried_fresh_arrays, [s0, 50], 0),
                                       rtol=1e-6, atol=1e-9)
        assert np.isfinite(ds).all()


@njit
def step_with_fresh_array(level, s, y):
    out = max((level + 2.0 * level ** 0.5) * s[0], 0.0)
    level = y / s[0] + 0.5 * level
    s = y / level + 0.5 * s
    return level, s, out


@njit
def scan_like(s0, steps):
    s = s0.copy()
    level = 1.0
    total = 0.0
    for _ in range(steps):
        level, s, out = step_with_fresh_array(level, s, 1.0)
        total += out
    return total


def test_arrays_passed_through_callees_stay_alive():
    # Regression (same bug, the JAX-scan shape): run it repeatedly, it crashed at random.
    s0 = np.ones(2)
    first = None
    for _ in range(8):
        ds = np.zeros(2)
        autodiff(Reverse, scan_like, Duplicated(s0, ds), Const(3000))
        first = ds.copy() if first is None else first
        np.testing.assert_array_equal(ds, first)


@njit
def raises_midway(x, limit):
    s = 0.0
    for i in range(x.shape[0]):
        x[i] = x[i] * 2.0
        s += x[i] ** 2
        if s > limit:
            raise ValueError("too large")
    return s


def test_exception_midway_leaves_shadows_untouched():
    x = np.linspace(1.0, 2.0, 6)
    dx = np.full(6, 7.0)
    with pytest.raises(ValueError, match="too large"):
        autodiff(Reverse, raises_midway, Duplicated(x, dx), Const(10.0))
    assert (dx == 7.0).all()
    # and the same derivative works when nothing raises
    y = np.linspace(1.0, 2.0, 6)
    dy = np.zeros(6)
    autodiff(Reverse, raises_midway, Duplicated(y, dy), Const(1e9))
    np.testing.assert_allclose(dy, 8.0 * np.linspace(1.0, 2.0, 6))


@njit
def _first_plus_sum(arr, p):
    return arr[0] * p + arr[1:].sum()


@njit
def copy_of_a_copy(out, x):
    tmp = out.copy()
    unused = tmp.copy()            # noqa: F841 - a copy nothing reads in this function
    return _first_plus_sum(tmp, x) * x


def test_copy_of_a_copy_only_used_by_callees():
    """The element type of a copy comes from the copies it chains with and the
    callees the memory goes to (found by the fuzzer)."""
    check(copy_of_a_copy, [np.array([0.3, -1.2, 0.7]), 1.5])


@njit
def overlapping_copy(a):
    a[1:] = a[:-1]                 # Numba copies the source to raw temporary memory
    return (a * a).sum()


@njit
def overlapping_update(a):
    a[1:] += a[:-1]                # element by element in Numba: a running sum
    return (a * a).sum()


@pytest.mark.parametrize("f", [overlapping_copy, overlapping_update], ids=lambda f: f.__name__)
def test_overlapping_slices_in_place(f):
    """Raw temporaries (NRT_Allocate) get shadows, freed after the reverse of
    every use (a crash and a refusal before)."""
    check(f, [np.linspace(0.5, 1.5, 7)])


@njit
def _clip_between_bounds(x, lo, hi, steps):
    # np.clip with array bounds broadcasts its three arguments with a loop over
    # them whose tuple items Numba keeps in stack slots of the loop.
    s = 0.0
    for k in range(steps):
        s += (np.clip(x, lo, hi) * x).sum() * (k + 1)
    return s


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_clip_with_array_bounds(steps):
    x = np.array([-1.5, -0.2, 0.3, 0.7, 1.2, 2.0])
    lo, hi = np.full(6, -0.5) + 0.01 * np.arange(6), np.full(6, 0.9)
    inside = (x > lo) & (x < hi)
    scale = steps * (steps + 1) / 2
    shadows = [np.zeros(6) for _ in range(3)]
    autodiff(Reverse, _clip_between_bounds, *[Duplicated(a.copy(), d) for a, d in
                                             zip((x, lo, hi), shadows)], Const(steps))
    np.testing.assert_allclose(shadows[0], scale * (np.clip(x, lo, hi) + x * inside))
    np.testing.assert_allclose(shadows[1], scale * x * (x <= lo))
    np.testing.assert_allclose(shadows[2], scale * x * (x >= hi))
    direction = np.linspace(-1.0, 1.0, 6)
    (tangent,) = enzpy.autodiff(enzpy.Forward, _clip_between_bounds,
                                Duplicated(x.copy(), direction), Const(lo), Const(hi),
                                Const(steps))
    assert tangent == pytest.approx(shadows[0] @ direction, rel=1e-12, abs=1e-12)


@njit
def _squares_weighted(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i] * x[i]
    return s


@njit
def _weighted_square(w, v):
    return w * v * v


@njit
def _squares_weighted_by_call(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += _weighted_square(w[i], x[i])
    return s


@pytest.mark.parametrize("f", [_squares_weighted, _squares_weighted_by_call])
def test_reverse_of_an_elementwise_loop_is_vectorised(f):
    # The reverse loop (dx[i] += 2 w[i] x[i] ds) is elementwise: with no
    # per-element null tests of shadows and no wrap-around of negative
    # indices left, LLVM's loop vectoriser turns it into vector instructions.
    # Through a call too: the loop has one reverse entry, and the shadow of the
    # slot the call returns its float through lives on the reverse sweep's
    # stack, not in a heap block (no calloc).
    import re

    from enzpy import pipeline
    x, w = np.linspace(-1.0, 1.0, 1001), np.linspace(0.5, 2.0, 1001)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    autodiff(Reverse, f, Duplicated(x, dx), Duplicated(w, dw))
    np.testing.assert_allclose(dx, 2.0 * w * x)
    np.testing.assert_allclose(dw, x * x)
    entry, = [e for key, e in pipeline.entries.items() if key[0] is f]
    ir = entry.library.get_llvm_str()
    reverse = ir[ir.index(".rev"):]
    assert "calloc" not in ir
    assert re.search(r"<\d+ x double>", reverse), "the reverse loop was not vectorised"


@njit
def _weighted_products_large(x, w, c):
    t = w * x
    s = 0.0
    for i in range(x.shape[0]):
        s += t[i] * x[i]
    if c > 0:           # (code enough that the derivative is not inlined into the entry)
        s += (x[0] * w[1] - x[1] * w[2]) / (1.0 + x[2] ** 2) + np.sqrt(abs(w[0] * x[1])) * c
        s -= np.exp(-x[3] * w[3]) * np.log1p(w[4] ** 2) / (2.0 + np.cos(x[4] * c))
        s += np.tanh(x[5] - w[5]) ** 3 - np.arctan2(x[6], 1.0 + w[6] ** 2)
    return s


def test_reverse_loops_of_a_function_not_inlined_are_vectorised():
    # A derivative too big to inline into the entry keeps its own function.
    # Its array parameters' shadows are the entry's, never null, and so are the
    # shadows of the arrays it allocates: no per-element null test is left in
    # its reverse loops (dx[i] += t[i] ds, dt[i] += x[i] ds, then t = w * x),
    # which vectorise.
    import re

    from enzpy import pipeline
    f = _weighted_products_large
    x, w = np.linspace(-1.0, 1.0, 1001), np.linspace(0.5, 2.0, 1001)
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    autodiff(Reverse, f, Duplicated(x, dx), Duplicated(w, dw), Const(0.0))
    np.testing.assert_allclose(dx, 2.0 * w * x)
    np.testing.assert_allclose(dw, x * x)
    entry, = [e for key, e in pipeline.entries.items() if key[0] is f]
    ir = entry.library.get_llvm_str()
    start = re.search(r'^define[^\n]*_weighted_products_large[^\n(]*\.rev"?\(', ir, re.M)
    assert start, "the reverse function was inlined"
    reverse = ir[start.start():ir.index("\n}\n", start.start())]
    assert re.search(r"<\d+ x double>", reverse), "the reverse loops were not vectorised"


# -- writes through views and arrays a callee returns ----------------------------------
# Numba returns an array by storing it into a slot its caller passes: a write
# through the array loaded back from there is a write of whatever memory the
# callee derived it from (here the argument x), and the reverse must then
# record x's old values instead of reading x again.
@njit
def write_through_reshape(x):
    t = 0.0
    for i in range(x.size):
        t += x[i] ** 2
    v = x.reshape((x.size, 1))
    v[:, 0] = 3.0 * v[:, 0]
    return t + (x * x).sum()


@njit
def write_through_transpose(A):
    t = (A * A).sum()
    At = A.T
    At[0, :] = np.sin(At[0, :])
    return t + A[:, 0].sum() + (A * A).sum()


@njit
def write_through_asarray(x):
    t = np.exp(x).sum()
    y = np.asarray(x)
    y[0] = y[0] ** 3
    return t + np.exp(x).sum()


@njit
def write_through_dot_out(A, b, out):
    t = (out * out).sum()
    y = np.dot(A, b, out)          # returns out
    y[0] = 2.0 * y[0]
    return t + (out ** 3).sum()


@pytest.mark.parametrize("f, shapes", [
    (write_through_reshape, [(1,)]), (write_through_reshape, [(5,)]),
    (write_through_transpose, [(3, 4)]), (write_through_asarray, [(4,)]),
    (write_through_dot_out, [(3, 3), (3,), (3,)])])
def test_writes_through_returned_views_are_writes_of_the_argument(f, shapes):
    rng = np.random.default_rng(len(shapes))
    args = [rng.uniform(0.2, 1.0, s) for s in shapes]
    shadows = [np.zeros_like(a) for a in args]
    autodiff(Reverse, f, *map(Duplicated, [a.copy() for a in args], shadows))
    for wrt, shadow in enumerate(shadows):
        np.testing.assert_allclose(shadow, fd_gradient(f, args, wrt), rtol=1e-5, atol=1e-7)


def test_product_into_memory_without_shadow_is_refused():
    # np.dot(A, b, out) with out Const would lose the derivative through out
    A, b, out = np.eye(3), np.ones(3), np.ones(3)
    with pytest.raises(enzpy.UnsupportedError, match="np.dot at .*written to memory without "
                       "a shadow.*pass 'out' as Duplicated"):
        autodiff(Reverse, write_through_dot_out, Duplicated(A, np.zeros_like(A)), Const(b),
                 Const(out))


@njit
def squares_through_views(x):
    # x is only read, through views a callee returns: read again by the reverse
    v = x.reshape((x.size, 1))
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i, 0] * v[i, 0]
    return s + (x.T * x.T).sum()


@njit
def ridge_residual(X, y):
    beta = np.linalg.solve(X.T @ X + 0.1 * np.eye(X.shape[1]), X.T @ y)
    r = X @ beta - y
    return r @ r


def test_reads_through_views_of_read_only_inputs_are_not_recorded():
    peaks = [_tape_bytes(squares_through_views, [np.linspace(0.0, 1.0, n)]) for n in (3, 300)]
    assert peaks[0] == peaks[1]
    check(squares_through_views, [np.linspace(0.0, 1.0, 6)])
    # X.T @ X, X.T @ y and X @ beta read X and y again; only the residual r (a
    # temporary, both operands of r @ r) is recorded: 16 bytes a row
    rng = np.random.default_rng(0)
    sizes = [[rng.standard_normal((n, 4)), rng.standard_normal(n)] for n in (10, 1000)]
    peaks = [_tape_bytes(ridge_residual, args) for args in sizes]
    assert peaks[1] - peaks[0] <= 16 * 990, peaks
    for wrt in range(2):
        check(ridge_residual, sizes[0], wrt=wrt)


@njit
def _divide_where_nonzero(x, y):
    return np.where(y != 0.0, x / np.where(y != 0.0, y, 1.0), x).sum()


def test_the_double_where_the_readme_advises_keeps_an_untaken_division_out_of_the_gradient():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 0.0, 4.0])
    dx, dy = np.zeros(3), np.zeros(3)
    autodiff(Reverse, _divide_where_nonzero, Duplicated(x, dx), Duplicated(y, dy))
    np.testing.assert_allclose(dx, [0.5, 1.0, 0.25])
    np.testing.assert_allclose(dy, [-0.25, 0.0, -3.0 / 16.0])
    (t,) = autodiff(Forward, _divide_where_nonzero, Duplicated(x, np.ones(3)),
                    Duplicated(y, np.ones(3)))
    assert t == pytest.approx(0.5 + 1.0 + 0.25 - 0.25 - 3.0 / 16.0)


@njit
def _printing(x, a, b, w):
    print("weights", w)                     # a Const array
    c = np.ones(2) * x
    print("x =", x, c)                      # an active float, a local array holding x
    b[0] = b[0] * x
    print(b)                                # a Duplicated array, written
    return x * w.sum() + (c * b).sum() + a[0] * x


def test_print_inside_differentiated_functions(capfd):
    """print() of floats and arrays, active or not, only reads them (Numba boxes
    them, takes their str() and releases them): it was refused like an objmode
    block, which can compute with them (still refused)."""
    w, b0, x = np.array([1.0, 2.0]), np.array([2.0, 3.0]), 0.5
    db, da = np.array([1.0, 0.0]), np.zeros(2)
    ((dx, _, _, _),) = autodiff(Reverse, _printing, Active(x), Duplicated(np.array([0.4, 0.0]), da),
                                Duplicated(b0.copy(), db), Const(w))
    # f = 3x + 2x^2 + 3x + 0.4x, and db's seed adds b[0] = 2x after the call
    assert dx == pytest.approx(3 + 4 * x + 3 + 0.4 + 2, rel=1e-12)
    np.testing.assert_allclose(db, [x * x + x, x])
    np.testing.assert_allclose(da, [x, 0.0])
    (t,) = autodiff(Forward, _printing, Duplicated(x, 1.0), Const(np.array([0.4, 0.0])),
                    Duplicated(b0.copy(), np.zeros(2)), Const(w))
    assert t == pytest.approx(3 + 4 * x + 3 + 0.4, rel=1e-12)
    out = capfd.readouterr().out
    assert out.count("weights [1. 2.]") == 2 and out.count("x = 0.5 [0.5 0.5]") == 2
    assert out.count("[1. 3.]") == 2


@njit
def _printed_energy(x):
    y = np.sin(x) * x[0]
    print("y =", y, y[0])
    return (y * y).sum()


def test_print_in_second_order(capfd):
    x, v = np.array([0.3, 0.7]), np.array([1.0, -0.5])
    hv = enzpy.hvp(_printed_energy, x, v)
    eps = 1e-6
    fd = (enzpy.gradient(_printed_energy, x + eps * v)
          - enzpy.gradient(_printed_energy, x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6)
    assert capfd.readouterr().out.count("y = [") == 3


@njit
def _solve_against_transpose(A, B):
    return np.sum(np.linalg.solve(A, B.T) ** 2)


@njit
def _shifted_copy_into(x, out):
    out[1:] = x[:-1] * 2.0          # Numba copies x first where they may overlap
    out[0] = x[-1]
    return (x ** 2).sum() + (out * x).sum()


def test_the_source_of_an_array_assignment_is_not_written():
    # (Numba's copy of a source that may overlap its destination frees a pointer
    # that is the copy or the source's data: the source counted as written, so
    # np.linalg.solve(A, A) refused one array passed as both, and every source of
    # a slice assignment was recorded on the tape instead of read again)
    A = np.array([[3.0, 0.4, -0.2], [0.1, 2.5, 0.3], [-0.4, 0.2, 3.3]])
    shadow = np.zeros_like(A)
    autodiff(Reverse, _solve_against_transpose, Duplicated(A, shadow), Duplicated(A, shadow))
    expected = np.zeros_like(A)
    for i, j in np.ndindex(*A.shape):
        E = np.zeros_like(A)
        E[i, j] = 1e-6
        expected[i, j] = (_solve_against_transpose(A + E, A + E)
                          - _solve_against_transpose(A - E, A - E)) / 2e-6
    np.testing.assert_allclose(shadow, expected, rtol=1e-6, atol=1e-8)
    tangent = np.cos(A)
    (t,) = autodiff(Forward, _solve_against_transpose, Duplicated(A, tangent),
                    Duplicated(A, tangent))
    assert t == pytest.approx(np.sum(expected * tangent), rel=1e-6)
    x = np.array([0.3, -1.1, 0.8, 2.0])
    check = enzpy.check_gradient(_shifted_copy_into, Duplicated(x, np.zeros(4)),
                                 Duplicated(np.zeros(4), np.zeros(4)))
    assert check.worst_relative_error < 1e-7, check


@njit
def _product_of_a_reshaped_copy_in_a_list(x, B):
    A = x.reshape(3, 3).copy()
    arrays = [A, np.empty((3, 3))]
    np.dot(B, arrays[0], arrays[1])
    return (arrays[1] ** 2).sum()


@njit
def _product_of_a_reshaped_local_copy_in_a_list(x, B):
    A = (x * 2.0).reshape(3, 3).copy()
    arrays = [A, np.empty((3, 3))]
    np.dot(B, arrays[0], arrays[1])
    return (arrays[1] ** 2).sum()


@pytest.mark.parametrize("f", [_product_of_a_reshaped_copy_in_a_list,
                               _product_of_a_reshaped_local_copy_in_a_list])
def test_a_copy_of_a_view_the_function_built_is_typed_by_the_viewed_memory(f):
    # (found by reviews: refused, "cannot tell what llvm.memcpy copies": the copy's
    # source was a data pointer read back from the view's struct on the stack, and
    # its destination only reached a product through the list)
    x = np.cos(np.arange(9.0))
    B = np.sin(np.arange(9.0)).reshape(3, 3)
    check = enzpy.check_gradient(f, Duplicated(x, np.zeros(9)), Const(B))
    assert check.worst_relative_error < 1e-7, check
    (t,) = autodiff(Forward, f, Duplicated(x, np.ones(9)), Const(B))
    h = 1e-6
    expected = (f(x + h, B) - f(x - h, B)) / (2 * h)
    assert t == pytest.approx(expected, rel=1e-6)
