"""Errors enzpy raises on purpose, exceptions raised by the primal, and the cache."""
from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import (Active, Const, Forward, Reverse, ReverseWithPrimal, UnsupportedError,
                   autodiff, cache_info)


@njit
def sq(x):
    return x * x


@njit
def two(x, y):
    return x * y


# -- bad annotations ------------------------------------------------------------
@pytest.mark.parametrize("bad", [3, np.int64(3), True, np.array([1.0, 2.0]), np.zeros(()),
                                 "0.5", 1 + 2j, np.float16(0.5), None, [0.5]],
                         ids=["int", "np_int64", "bool", "array", "array0d", "str",
                              "complex", "float16", "None", "list"])
def test_active_non_float_is_type_error(bad):
    with pytest.raises(TypeError):
        autodiff(Reverse, sq, Active(bad))


def test_active_array_message_suggests_duplicated():
    with pytest.raises(TypeError, match="(?i)array"):
        autodiff(Reverse, sq, Active(np.ones(3)))


def test_active_int_message_names_type():
    with pytest.raises(TypeError, match="int"):
        autodiff(Reverse, sq, Active(3))


def test_active_str_message_names_type():
    with pytest.raises(TypeError, match="str"):
        autodiff(Reverse, sq, Active("x"))


# -- wrong arity ----------------------------------------------------------------
def test_too_few_arguments():
    with pytest.raises(TypeError):
        autodiff(Reverse, two, Active(1.0))


def test_too_many_arguments():
    with pytest.raises(TypeError):
        autodiff(Reverse, sq, Active(1.0), Active(2.0))


def test_no_arguments():
    with pytest.raises(TypeError):
        autodiff(Reverse, sq)


_WEIGHTS = np.array([1.0, 2.0])


@njit
def _of_globals_only():
    return (_WEIGHTS ** 2).sum()


def test_function_of_no_arguments():
    # before: a SyntaxError from the fast path's generated code in reverse mode
    for _ in range(2):              # (the second call takes the fast path)
        assert autodiff(Reverse, _of_globals_only) == ((),)
        assert autodiff(ReverseWithPrimal, _of_globals_only) == ((), 5.0)
        assert autodiff(Forward, _of_globals_only) == (0.0,)


def test_wrong_arity_plain_python_function():
    with pytest.raises(TypeError):
        autodiff(Reverse, lambda x, y: x * y, Active(1.0))


# -- bad modes and functions -------------------------------------------------------
@pytest.mark.parametrize("mode", ["notamode", None, 1, "Reverse"], ids=repr)
def test_bad_mode(mode):
    with pytest.raises(TypeError):
        autodiff(mode, sq, Active(1.0))


def test_mode_and_function_swapped():
    with pytest.raises(TypeError):
        autodiff(sq, Reverse, Active(1.0))


def test_not_callable():
    with pytest.raises(TypeError, match="autodiff expects a function, got int"):
        autodiff(Reverse, 42, Active(1.0))


def test_a_bound_method_is_refused_with_the_way_to_differentiate_it():
    # (Numba's "The decorated object is not a function (got type <class 'method'>)")
    class Model:
        def energy(self, x):
            return x * x

    with pytest.raises(TypeError, match=r"bound method 'test_a_bound.*Model.energy'.*"
                                        r"def g\(obj, x\): return obj.energy\(x\)"):
        autodiff(Reverse, Model().energy, Active(1.0))


def test_helpers_name_themselves_when_not_given_a_function():
    x = np.ones(2)
    with pytest.raises(TypeError, match="vjp expects a function, got float"):
        enzpy.vjp(3.0, x)
    with pytest.raises(TypeError, match="jacobian takes the function first, and no mode"):
        enzpy.jacobian(Reverse, x)
    with pytest.raises(TypeError, match="hvp expects a function"):
        enzpy.hvp(None, x, x)


def test_annotation_class_instead_of_instance():
    with pytest.raises(TypeError):
        autodiff(Reverse, sq, Active)


# -- exceptions raised inside f ------------------------------------------------------
@njit
def recip(x):
    return 1.0 / x


@njit
def raises_on_branch(x):
    if x < 0.0:
        raise ValueError("bad value")
    return math.sqrt(x)


@njit
def raises_in_loop(x, n):
    s = 0.0
    for i in range(n):
        s += x * i
        if s > 5.0:
            raise RuntimeError("overflowed the budget")
    return s


@njit
def inner_raises(x):
    if x > 1.0:
        raise ValueError("inner: x too large")
    return x * 2.0


@njit
def outer_calls_raiser(x):
    return inner_raises(x * x) + 1.0


@njit
def int_div_zero(x, n):
    return x * (7 // n)


def _message(f, *values):
    with pytest.raises(Exception) as info:
        f(*values)
    return type(info.value), str(info.value)


def test_zero_division_surfaces():
    exc_type, msg = _message(recip, 0.0)
    assert exc_type is ZeroDivisionError
    with pytest.raises(ZeroDivisionError) as info:
        autodiff(Reverse, recip, Active(0.0))
    assert str(info.value) == msg


def test_zero_division_then_normal_call_still_works():
    with pytest.raises(ZeroDivisionError):
        autodiff(ReverseWithPrimal, recip, Active(0.0))
    (dx,), y = autodiff(ReverseWithPrimal, recip, Active(0.5))
    assert y == 2.0 and dx == -4.0


def test_integer_zero_division_surfaces():
    exc_type, msg = _message(int_div_zero, 1.0, 0)
    with pytest.raises(exc_type) as info:
        autodiff(Reverse, int_div_zero, Active(1.0), Const(0))
    assert str(info.value) == msg


def test_value_error_on_branch():
    with pytest.raises(ValueError, match="^bad value$"):
        autodiff(Reverse, raises_on_branch, Active(-1.0))
    # the other side of the branch differentiates normally
    (dx,), = autodiff(Reverse, raises_on_branch, Active(4.0))
    assert dx == pytest.approx(0.25)


def test_runtime_error_in_loop():
    with pytest.raises(RuntimeError, match="overflowed the budget"):
        autodiff(Reverse, raises_in_loop, Active(1.0), Const(10))
    (dx, dn), = autodiff(Reverse, raises_in_loop, Active(0.1), Const(10))
    assert dx == pytest.approx(45.0) and dn is None


def test_exception_in_called_function():
    with pytest.raises(ValueError, match="inner: x too large"):
        autodiff(Reverse, outer_calls_raiser, Active(1.5))
    (dx,), = autodiff(Reverse, outer_calls_raiser, Active(0.5))
    assert dx == pytest.approx(4 * 0.5)


def test_exception_from_plain_python_function():
    def f(x):
        if x > 2.0:
            raise ValueError("plain function raised")
        return x * x
    with pytest.raises(ValueError, match="plain function raised"):
        autodiff(Reverse, f, Active(3.0))


# -- constructs without a derivative rule -------------------------------------------------
@njit
def uses_frexp(x):
    return math.frexp(x)[0] * 2.0


@njit
def uses_frexp_mantissa_sum(x):
    m, e = math.frexp(x)
    return m + x


@njit
def uses_frexp_nested(x):
    return uses_frexp(x * 0.5) + x


@pytest.mark.parametrize("f, name", [(uses_frexp, "uses_frexp"),
                                     (uses_frexp_mantissa_sum, "uses_frexp_mantissa_sum")],
                         ids=["frexp", "frexp_sum"])
def test_unsupported_math_function(f, name):
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, f, Active(2.5))
    msg = str(info.value)
    assert name in msg, msg
    assert "frexp" in msg.replace(name, ""), msg   # names the callee, too


def test_unsupported_in_callee_names_callee():
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, uses_frexp_nested, Active(2.5))
    assert "uses_frexp" in str(info.value)


def test_unsupported_error_is_exception_subclass():
    assert issubclass(UnsupportedError, Exception)
    assert enzpy.UnsupportedError is UnsupportedError


def test_gamma_of_const_is_fine():
    @njit
    def f(x, c):
        return x * math.gamma(c)
    (dx, dc), = autodiff(Reverse, f, Active(2.0), Const(4.0))
    assert dx == pytest.approx(6.0) and dc is None


# -- the cache --------------------------------------------------------------------------
@njit
def cached_fn(x, y, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i) * y
    return s


def test_second_call_does_not_rebuild():
    autodiff(Reverse, cached_fn, Active(0.3), Active(1.2), Const(5))
    before = cache_info()
    (dx, dy, dn), = autodiff(Reverse, cached_fn, Active(0.7), Active(-1.0), Const(9))
    after = cache_info()
    assert after["misses"] == before["misses"]
    assert after["hits"] == before["hits"] + 1
    assert after["entries"] == before["entries"]
    assert dx == pytest.approx(sum(i * math.cos(0.7 * i) * -1.0 for i in range(9)))


def test_second_call_with_primal_mode_does_not_rebuild():
    autodiff(Reverse, cached_fn, Active(0.3), Active(1.2), Const(5))
    before = cache_info()["misses"]
    autodiff(ReverseWithPrimal, cached_fn, Active(0.1), Active(0.2), Const(3))
    assert cache_info()["misses"] == before


def test_plain_python_function_is_cached():
    def g(x):
        return x * x * x
    autodiff(Reverse, g, Active(1.0))
    before = cache_info()["misses"]
    (dx,), = autodiff(Reverse, g, Active(2.0))
    assert dx == pytest.approx(12.0)
    assert cache_info()["misses"] == before


def test_new_activity_pattern_is_a_new_build():
    autodiff(Reverse, cached_fn, Active(0.3), Active(1.2), Const(5))
    before = cache_info()["misses"]
    autodiff(Reverse, cached_fn, Active(0.3), Const(1.2), Const(5))
    mid = cache_info()["misses"]
    assert mid == before + 1
    autodiff(Reverse, cached_fn, Active(0.4), Const(1.3), Const(6))
    assert cache_info()["misses"] == mid


def test_unannotated_and_const_share_an_entry():
    autodiff(Reverse, cached_fn, Active(0.3), Const(1.2), Const(5))
    before = cache_info()["misses"]
    (dx, dy, dn), = autodiff(Reverse, cached_fn, Active(0.3), 1.2, 5)
    assert dy is None and dn is None
    assert cache_info()["misses"] == before


def test_cache_info_keys():
    info = cache_info()
    for k in ("hits", "misses", "entries"):
        assert isinstance(info[k], int)


@pytest.mark.parametrize("symbol, name", [
    ("_ZN8__main__8f_3cb_3eB2v1E", "__main__.f<b>"),       # escaped characters decoded
    ("_ZN5numba2np8arrayobj15_call_allocatorB2v1E", "numba.np.arrayobj._call_allocator"),
    ("plain_c_name", "plain_c_name"),
])
def test_messages_name_numba_functions_as_written(symbol, name):
    assert enzpy.frontend.demangle(symbol).startswith(name)
