"""The cache-hit path of autodiff (enzpy/fastpath.py): repeated calls give the first call's
results, and every argument check still holds once the generated path exists."""
import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                   ReverseWithPrimal, autodiff, pipeline)
from test_arrays import reads_after_write


@njit
def weighted(a, x, c):
    return a * (x ** 2).sum() + c


X = np.array([0.5, -1.0, 2.0])


def _reverse(mode, a=2.0, x=X):
    dx = np.zeros_like(x)
    out = autodiff(mode, weighted, Active(a), Duplicated(x.copy(), dx), Const(1.0))
    return out, dx


@pytest.mark.parametrize("mode", [Reverse, ReverseWithPrimal])
def test_repeated_reverse_calls_match_the_first(mode):
    first, dx = _reverse(mode)
    assert first[0] == (pytest.approx((X ** 2).sum()), None, None)
    np.testing.assert_allclose(dx, 4.0 * X)
    if mode is ReverseWithPrimal:
        assert first[1] == pytest.approx(2.0 * (X ** 2).sum() + 1.0)
    hits = enzpy.cache_info()["hits"]
    for _ in range(3):
        again, dx_again = _reverse(mode)
        assert again == first
        np.testing.assert_array_equal(dx_again, dx)
    assert enzpy.cache_info()["hits"] == hits + 3
    assert (weighted, mode) in pipeline.fast_paths


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal])
def test_repeated_forward_calls_match_the_first(mode):
    results = [autodiff(mode, weighted, Duplicated(2.0, 1.0), Duplicated(X.copy(), np.ones(3)),
                        1.0) for _ in range(3)]
    want = (X ** 2).sum() + 4.0 * X.sum()
    assert results[0][0] == pytest.approx(want)
    assert results[1] == results[0] == results[2]


def test_checks_still_hold_once_the_path_exists():
    _reverse(Reverse)
    _reverse(Reverse)
    x = X.copy()
    with pytest.raises(ValueError, match="shape"):
        autodiff(Reverse, weighted, Active(2.0), Duplicated(x, np.zeros(4)), Const(1.0))
    with pytest.raises(ValueError, match="shares memory"):
        autodiff(Reverse, weighted, Active(2.0), Duplicated(x, x), Const(1.0))
    with pytest.raises(ValueError, match="shares memory"):       # a view of the array
        autodiff(Reverse, weighted, Active(2.0), Duplicated(x, x[::-1]), Const(1.0))
    readonly = np.zeros(3)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        autodiff(Reverse, weighted, Active(2.0), Duplicated(x, readonly), Const(1.0))
    with pytest.raises(TypeError, match="float"):
        autodiff(Reverse, weighted, Active(2), Duplicated(x, np.zeros(3)), Const(1.0))
    assert (x == X).all()


def test_other_kinds_of_arguments_after_the_path_exists():
    _reverse(Reverse)
    _reverse(Reverse)
    (da, _, _), = autodiff(Reverse, weighted, Const(2.0), Duplicated(X.copy(), np.zeros(3)),
                           Const(1.0))
    assert da is None
    wide = np.array([0.5, 7.0, -1.0, 7.0, 2.0, 7.0])
    strided, dx = wide[::2], np.zeros(3)                   # a shadow laid out otherwise
    (da, _, _), = autodiff(Reverse, weighted, Active(2.0), Duplicated(strided, dx), Const(1.0))
    np.testing.assert_allclose(dx, 4.0 * X)
    single = X.astype(np.float32)
    dx32 = np.zeros(3, np.float32)
    (da, _, _), = autodiff(Reverse, weighted, Active(2.0), Duplicated(single, dx32), Const(1.0))
    np.testing.assert_allclose(dx32, 4.0 * single, rtol=1e-6)


def test_arrays_that_share_memory_are_refused_on_every_call():
    x = X.copy()
    for _ in range(2):
        autodiff(Reverse, reads_after_write, Duplicated(x.copy(), np.zeros(3)),
                 Duplicated(np.zeros(3), np.zeros(3)))
    with pytest.raises(ValueError, match="share memory"):
        autodiff(Reverse, reads_after_write, Duplicated(x, np.zeros(3)),
                 Duplicated(x, np.zeros(3)))


def test_arrays_found_apart_are_compared_again_when_one_changes():
    """The fast path skips the comparison for the arrays of the last call that
    passed it: a new array in either place is compared again."""
    x, y = X.copy(), np.zeros(3)
    for _ in range(3):
        autodiff(Reverse, reads_after_write, Duplicated(x, np.zeros(3)),
                 Duplicated(y, np.zeros(3)))
    with pytest.raises(ValueError, match="share memory"):
        autodiff(Reverse, reads_after_write, Duplicated(x, np.zeros(3)),
                 Duplicated(x[:], np.zeros(3)))
    with pytest.raises(ValueError, match="share memory"):
        autodiff(Reverse, reads_after_write, Duplicated(y[::-1], np.zeros(3)),
                 Duplicated(y, np.zeros(3)))
    dx = np.zeros(3)
    autodiff(Reverse, reads_after_write, Duplicated(x, dx), Duplicated(y, np.zeros(3)))
    np.testing.assert_allclose(dx, 4.0 * X)


@njit
def _reads_last(a, b):
    s = 0.0
    for i in range(a.size):
        s += a[i] * b[b.size - 1]
    return s


def test_a_shadow_that_is_another_arguments_value_is_refused_on_every_call():
    """Duplicated(a, b) with b also passed as a value: the reverse sweep read b after
    writing a's derivatives into it (a wrong gradient, and the Const b changed)."""
    a, b = np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0, 2.0, 3.0, 0.5])
    c = np.arange(1.0, 7.0)                    # (two overlapping views of it)
    for _ in range(3):                         # built, then through the generated path
        da = np.zeros(4)
        autodiff(Reverse, _reads_last, Duplicated(a, da), Const(b))
        np.testing.assert_allclose(da, np.full(4, 0.5))
    for call in (lambda: autodiff(Reverse, _reads_last, Duplicated(a, b), Const(b)),
                 lambda: autodiff(Reverse, _reads_last, Duplicated(a, c[2:]), Const(c[:4])),
                 lambda: autodiff(Reverse, _reads_last, Duplicated(a, b),
                                  Duplicated(b, np.zeros(4))),
                 lambda: autodiff(Forward, _reads_last, Duplicated(a, b), Const(b))):
        with pytest.raises(ValueError, match="shadow shares memory with the array of argument 1"):
            call()
        np.testing.assert_array_equal(b, [1.0, 2.0, 3.0, 0.5])
        np.testing.assert_array_equal(c, np.arange(1.0, 7.0))


def test_changed_rules_drop_the_generated_paths():
    _reverse(Reverse)
    _reverse(Reverse)
    assert pipeline.fast_paths

    @njit
    def unrelated(v):
        return v
    enzpy.inactive(unrelated)
    try:
        assert not pipeline.fast_paths
        again, dx = _reverse(Reverse)
        np.testing.assert_allclose(dx, 4.0 * X)
    finally:
        enzpy.clear_rules(unrelated)


@njit
def counts_then_may_raise(x, counter):
    counter[0] += 1.0
    if x[0] < 0.0:
        raise TypeError("x[0] must not be negative")
    return x[0] * x[1]


def test_types_left_to_numba_dispatch_and_errors_raised_once():
    """The generated path leaves array types to the entry's dispatch: another layout or
    dtype takes the general path (which builds for it); a TypeError raised by the
    function itself passes through after one run, not two."""
    counter = np.zeros(1)
    for _ in range(2):
        autodiff(Reverse, counts_then_may_raise, Duplicated(X.copy(), np.zeros(3)),
                 Const(counter))
    fortran = np.asfortranarray(np.arange(1.0, 7.0).reshape(2, 3))[0]      # strided row
    dx = np.zeros(3)
    autodiff(Reverse, counts_then_may_raise, Duplicated(fortran, dx), Const(counter))
    np.testing.assert_allclose(dx, [fortran[1], fortran[0], 0.0])
    counter[0] = 0.0
    with pytest.raises(TypeError, match="must not be negative"):
        autodiff(Reverse, counts_then_may_raise, Duplicated(-X, np.zeros(3)), Const(counter))
    assert counter[0] == 1.0


@njit
def _with_default(x, a, n=3):
    s = 0.0
    for i in range(n):
        s += np.sum(np.sin((i + 1.0) * x) ** 2) * a
    return s


@njit
def _with_star_args(x, *ws):
    s = 0.0
    for w in ws:
        s += (w * x).sum()
    return s


def test_omitted_defaults_are_const():
    x = np.array([0.2, 0.5, 0.9])
    dx, dx3 = np.zeros(3), np.zeros(3)
    (d, da), = autodiff(Reverse, _with_default, Duplicated(x, dx), Active(1.5))
    assert d is None
    (_, da3, dn), = autodiff(Reverse, _with_default, Duplicated(x, dx3), Active(1.5), Const(3))
    assert dn is None and da == da3
    np.testing.assert_array_equal(dx, dx3)
    (t,) = autodiff(Forward, _with_default, Duplicated(x, np.ones(3)), Const(1.5))
    assert t == pytest.approx(dx.sum(), rel=1e-12)
    assert np.allclose(enzpy.gradient(_with_default, x, 1.5), dx)


def test_star_args_get_one_entry_each():
    x, a, b = np.ones(3), np.arange(3.0), np.full(3, 2.0)
    dx, da, db = np.zeros(3), np.zeros(3), np.zeros(3)
    assert autodiff(Reverse, _with_star_args, Duplicated(x, dx), Duplicated(a, da),
                    Duplicated(b, db)) == ((None, None, None),)
    np.testing.assert_array_equal(dx, a + b)
    np.testing.assert_array_equal(da, x)
    np.testing.assert_array_equal(db, x)
    (t,) = autodiff(Forward, _with_star_args, Duplicated(x, np.ones(3)), a, b)
    assert t == (a + b).sum()

    @njit
    def scaled(x, *ws):
        return x * ws[0] + ws[1] * ws[1]
    assert autodiff(Reverse, scaled, Active(2.0), Active(3.0), Active(0.5)) == \
        ((3.0, 2.0, 1.0),)
    with pytest.raises(TypeError, match=r"\*ws receives are one tuple to enzpy: annotate them "
                                        r"alike"):
        autodiff(Reverse, _with_star_args, Duplicated(x, dx), Duplicated(a, da), b)
