"""Dictionaries in differentiated code (``{...}`` literals and ``numba.typed.Dict``):
derivatives through Numba's C dictionary, mirrored on a shadow dictionary
(``enzpy/typeddict.py``), in reverse and forward mode, against central
differences: values that are floats, float32, complex numbers, tuples of floats,
arrays and dictionaries; keys that are integers, strings, floats and tuples;
insertion, overwriting, lookups with and without defaults, ``in``, ``del``,
``pop``, ``popitem``, ``setdefault``, ``copy``, ``clear``, iteration over keys,
values and items; loops of 0, 1 and many iterations and branches taken both ways.
Refusals: differentiable values inserted into a dictionary passed in as ``Const``,
second order, dictionaries as ``Duplicated`` arguments and as results (values mixing
arrays and floats: ``test_unsupported.py``).
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from numba import njit, types
from numba.typed import Dict

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, Reverse, UnsupportedError, autodiff,
                   check_gradient)
from numpy_corpus import dict_of_arrays as array_values


@njit
def scalar_values(x):
    d = {1: x[0]}
    d[2] = x[0] * x[1]
    return d[2] + d[1] * d[1]


@njit
def every_operation(x):
    d = {}
    for i in range(20):                         # grows the table several times
        d[i] = x[i % x.size] * (i + 1.0)
    s = d.get(3, 0.0) + d.get(100, 1.0) * x[0]
    if 4 in d:
        s += d[4] * d[4]
    del d[5]
    s += d.pop(6) * x[1]
    for k, v in d.items():
        s += v * k
    for v in d.values():
        s += v * v
    for k in d.keys():
        s += k
    s += len(d)
    k, v = d.popitem()
    s += v * x[2]
    d.setdefault(50, x[3])
    d.setdefault(7, 100.0)                      # present: keeps its value
    e = d.copy()
    s += e[50] * e[7]
    d[50] = 3.0 * x[0]                          # overwrites
    s += d[50] * x[1]
    d.clear()
    d[1] = x[2]
    return s + d[1]


@njit
def overwritten_in_loop(x, n):
    d = {0: 0.0}
    for i in range(n):
        d[i % 3] = d.get(i % 3, 1.0) * x[i % x.size] + i
    return d[0] + 2.0 * d.get(1, 0.0) + 3.0 * d.get(2, 0.0)


@njit
def branches(x, n):
    d = Dict.empty(key_type=types.int64, value_type=types.float64)
    for i in range(n):
        xi = x[i % x.size]
        if xi > 0:
            d[i % 2] = d.get(i % 2, 0.0) + xi ** 2
        else:
            d[i % 2] = d.get(i % 2, 1.0) * xi
    t = 0.0
    for v in d.values():
        t += v
    return t


@njit
def string_keys(x):
    d = Dict.empty(key_type=types.unicode_type, value_type=types.float64)
    d["a"] = x[0]
    d["b"] = np.sin(x[1])
    t = 0.0
    for k, v in d.items():
        t += v * v * len(k)
    return t


@njit
def float_and_tuple_keys(x):
    d = {0.5: x[0], 1.5: x[1] * x[0]}
    e = {}
    for i in range(2):
        for j in range(2):
            e[(i, j)] = x[i] * x[j] + i
    return d[0.5] * d[1.5] + e[(0, 1)] * e[(1, 1)]


@njit
def looked_up_by_a_varying_key(x):
    d = {0.5: 2.0, 1.5: 3.0}
    for i in range(x.size):
        d[float(i)] = x[i] * x[i]            # constant float keys, varying values
    k = 0.5 if x[0] * x[1] < 0.0 else 1.5
    s = d[k] * x[2] + d[0.0] + d.get(x[3] - x[3] + 0.5, 0.0) * x[1]   # a varying key selects
    for key in d.keys():
        s += key * d[key]
    return s


@njit
def float32_values(x):
    d = Dict.empty(key_type=types.int64, value_type=types.float32)
    for i in range(x.size):
        d[i] = np.float32(x[i]) * np.float32(i)
    s = 0.0
    for v in d.values():
        s += float(v) * float(v)
    return s


@njit
def complex_values(x):
    d = {0: x[0] + 1j * x[1]}
    d[1] = d[0] * d[0]
    return d[1].real + d[1].imag * x[2]


@njit
def tuple_values(x):
    d = {}
    for i in range(x.size - 1):
        d[i] = (x[i], x[i + 1] * 2.0)
    s = 0.0
    for k in d:
        a, b = d[k]
        s += a * b
    return s


@njit
def array_values_mutated(x):
    d = {"a": x.copy()}
    a = d["a"]
    a[0] = a[0] * 3.0
    d["a"][1] = np.sin(x[1])
    return (d["a"] ** 2).sum()


@njit
def array_values_popped(x):
    d = {1: x * 2.0, 2: np.cos(x)}
    k, v = d.popitem()
    w = d.pop(1)
    return (v * w).sum()


@njit
def array_values_overwritten(x, n):
    d = {0: x}
    for i in range(n):
        d[0] = d[0] * x + 1.0
    return d[0].sum()


@njit
def array_values_iterated(x):
    d = {}
    for i in range(3):
        d[i] = x * (i + 1.0)
    s = 0.0
    for v in d.values():
        s += (v * v).sum()
    return s


@njit
def _sum_entry(d, k):
    return d[k].sum()


@njit
def passed_to_a_function(x):
    d = {"p": x ** 2}
    d["q"] = np.exp(x)
    return _sum_entry(d, "p") * _sum_entry(d, "q")


@njit
def dictionary_values(x):
    inner = {0: x[0], 1: x[1]}
    outer = {"in": inner}
    outer["in"][2] = x[0] * x[1]
    return outer["in"][2] + outer["in"][0] ** 2


@njit
def one_per_iteration(x, n):
    s = 0.0
    for i in range(n):
        d = {0: x[0] * i, 1: x[1]}
        s += d[0] * d[1]
    return s


@njit
def integer_values(x):
    d = Dict.empty(key_type=types.int64, value_type=types.int64)
    for v in x:
        k = 1 if v > 0 else 0
        d[k] = d.get(k, 0) + 1
    return x.sum() * d.get(1, 0)


X = np.array([0.3, -0.7, 0.5, 1.1])

PROGRAMS = [
    ("scalar_values", scalar_values, ()),
    ("every_operation", every_operation, ()),
    *[(f"overwritten_in_loop_n{n}", overwritten_in_loop, (n,)) for n in (0, 1, 7)],
    *[(f"branches_n{n}", branches, (n,)) for n in (0, 1, 2, 9)],
    ("string_keys", string_keys, ()),
    ("float_and_tuple_keys", float_and_tuple_keys, ()),
    ("looked_up_by_a_varying_key", looked_up_by_a_varying_key, ()),
    ("complex_values", complex_values, ()),
    ("tuple_values", tuple_values, ()),
    ("array_values", array_values, ()),
    ("array_values_mutated", array_values_mutated, ()),
    ("array_values_popped", array_values_popped, ()),
    *[(f"array_values_overwritten_n{n}", array_values_overwritten, (n,)) for n in (0, 1, 5)],
    ("array_values_iterated", array_values_iterated, ()),
    ("passed_to_a_function", passed_to_a_function, ()),
    ("dictionary_values", dictionary_values, ()),
    *[(f"one_per_iteration_n{n}", one_per_iteration, (n,)) for n in (0, 1, 6)],
    ("integer_values", integer_values, ()),
]


def _central_difference(f, x, consts, v, h=1e-6):
    return (f(x + h * v, *consts) - f(x - h * v, *consts)) / (2 * h)


@pytest.mark.parametrize("f, consts", [p[1:] for p in PROGRAMS], ids=[p[0] for p in PROGRAMS])
def test_reverse_matches_central_differences(f, consts):
    check = check_gradient(f, Duplicated(X.copy(), np.zeros_like(X)), *map(Const, consts))
    assert check.worst_relative_error < 1e-6, check


@pytest.mark.parametrize("f, consts", [p[1:] for p in PROGRAMS], ids=[p[0] for p in PROGRAMS])
def test_forward_matches_central_differences(f, consts):
    v = np.array([0.4, -1.0, 0.7, 0.2])
    (t,) = autodiff(Forward, f, Duplicated(X.copy(), v.copy()), *map(Const, consts))
    assert t == pytest.approx(_central_difference(f, X, consts, v), rel=1e-6, abs=1e-8)


def test_float32_values_against_the_analytic_gradient():
    """float32 values (finite differences in float32 are too coarse): s = sum (i x_i)^2."""
    dx = np.zeros_like(X)
    autodiff(Reverse, float32_values, Duplicated(X.copy(), dx))
    i = np.arange(X.size)
    expected = 2 * i * i * X
    np.testing.assert_allclose(dx, expected, rtol=1e-6)
    (t,) = autodiff(Forward, float32_values, Duplicated(X.copy(), np.ones_like(X)))
    assert t == pytest.approx(expected.sum(), rel=1e-6)


def test_repeated_calls_free_what_they_make():
    """Cells and shadow dictionaries are freed: the derivative runs many times in a
    constant footprint, and gives the same result each time."""
    first = None
    for _ in range(200):
        dx = np.zeros_like(X)
        autodiff(Reverse, array_values_popped, Duplicated(X.copy(), dx))
        (t,) = autodiff(Forward, array_values_popped, Duplicated(X.copy(), np.ones_like(X)))
        first = (dx, t) if first is None else first
        np.testing.assert_array_equal(dx, first[0])
        assert t == first[1]


def test_dictionary_passed_as_const_is_read_without_derivative():
    @njit
    def scaled(x, d):
        return x * d["a"] + d["b"]

    d = Dict.empty(key_type=types.unicode_type, value_type=types.float64)
    d["a"], d["b"] = 2.0, 3.0
    assert autodiff(Reverse, scaled, Active(1.5), Const(d)) == ((2.0, None),)
    assert autodiff(Forward, scaled, Duplicated(1.5, 1.0), Const(d)) == (2.0,)


@njit
def _inserts_into_argument(x, d):
    d["c"] = x * x
    return d["c"]


@njit
def _inserts_in_a_loop(x, d):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
        d[i] = s * 2.0
    return s


@njit
def _energy(x):
    d = {0: x[0] * x[1]}
    d[1] = np.sin(x[2])
    return d[0] * d[1]


@njit
def _energy_of_empty(x):
    d = Dict.empty(key_type=types.int64, value_type=types.float64)
    d[0] = x[0] * x[1]
    return d[0] * np.sin(x[2])


@njit
def _returns_dictionary(x):
    return {0: x}


@njit
def varying_keys_read_by_items(x):
    d = {}
    for i in range(x.shape[0]):
        d[x[i]] = 2.0 * x[i]
    s = 0.0
    for k, v in d.items():
        s += k * v
    return s


@njit
def varying_keys_read_by_keys(x):
    d = {}
    for i in range(x.shape[0]):
        d[x[i] * x[i]] = i
    s = 0.0
    for k in d.keys():
        s += k
    return s


@njit
def varying_key_popped(x):
    d = {x[0] * 3.0: 1}
    k, v = d.popitem()
    return k


@pytest.mark.parametrize("f", [varying_keys_read_by_items, varying_keys_read_by_keys,
                               varying_key_popped])
@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_keys_carrying_a_derivative_are_refused(f, mode):
    # keys have no shadow: read back, they came without their derivative (the gradient
    # of sum(k * v) was half of it, that of sum(keys) zero); the refusal names the line
    # inserting the key (in a loop, not the loop's line)
    source, first = inspect.getsourcelines(f.py_func)
    line = first + next(i for i, text in enumerate(source) if "d[" in text or "{x" in text)
    with pytest.raises(UnsupportedError, match=rf"numba.typed.Dict at test_typeddict.py:{line}: "
                                               r"a dictionary key that may carry a derivative"):
        autodiff(mode, f, Duplicated(X.copy(), np.zeros_like(X)))


def test_refusals_name_the_dictionary():
    d = Dict.empty(key_type=types.unicode_type, value_type=types.float64)
    with pytest.raises(UnsupportedError, match="numba.typed.Dict at test_typeddict.py:.*"
                                               "keeps no shadow"):
        autodiff(Reverse, _inserts_into_argument, Active(1.5), Const(d))
    counts = Dict.empty(key_type=types.int64, value_type=types.float64)
    write = _inserts_in_a_loop.py_func.__code__.co_firstlineno + 5     # (d[i] = ...)
    with pytest.raises(UnsupportedError, match=f"numba.typed.Dict at test_typeddict.py:{write}: "
                                               "a value .* keeps no shadow"):
        autodiff(Reverse, _inserts_in_a_loop, Duplicated(X.copy(), np.zeros_like(X)),
                 Const(counts))
    made = _energy.py_func.__code__.co_firstlineno + 2      # (d = {0: ...})
    with pytest.raises(UnsupportedError, match="second-order derivatives through a dictionary "
                                               rf"are not supported \(the dictionary made at "
                                               rf"test_typeddict.py:{made}\)"):
        enzpy.hvp(_energy, X[:3].copy(), np.ones(3))
    made = _energy_of_empty.py_func.__code__.co_firstlineno + 2
    with pytest.raises(UnsupportedError, match=rf"\(the dictionary made at "
                                               rf"test_typeddict.py:{made}\)"):
        enzpy.hvp(_energy_of_empty, X[:3].copy(), np.ones(3))
    with pytest.raises(TypeError, match="numba.typed.Dict"):
        autodiff(Reverse, _inserts_into_argument, Active(1.5), Duplicated(d, d.copy()))
    with pytest.raises(UnsupportedError, match="returns Dict"):
        enzpy.vjp(_returns_dictionary, 1.5)


@njit
def _scratch_in_dictionary(x, d):
    buf = d["buf"]
    for i in range(x.shape[0]):
        buf[i] = 2.0 * x[i]
    return np.sum(buf ** 2)


@njit
def scaled_by_buffer(x, d):
    return x * d["buf"].sum()


def test_writing_derivatives_into_an_array_of_a_const_dictionary_raises():
    # The array a Const dictionary holds has no shadow: the derivative of what
    # is written into it would be lost (it was: a zero gradient). The write is
    # detected when it runs, and the call raises before the reverse sweep
    # touches the shadows.
    d = Dict.empty(key_type=types.unicode_type, value_type=types.float64[:])
    d["buf"] = np.zeros(3)
    x = np.array([0.5, -1.0, 2.0])
    dx = np.full(3, 7.0)
    with pytest.raises(UnsupportedError, match="no derivative at run time in function "
                                               "'_scratch_in_dictionary'"):
        autodiff(Reverse, _scratch_in_dictionary, Duplicated(x, dx), Const(d))
    np.testing.assert_array_equal(dx, 7.0)
    with pytest.raises(UnsupportedError, match="no derivative at run time"):
        autodiff(Forward, _scratch_in_dictionary, Duplicated(x, np.ones(3)), Const(d))
    # reading it stays fine (the primal ran: the buffer holds 2 x)
    np.testing.assert_array_equal(d["buf"], 2.0 * x)
    assert autodiff(Reverse, scaled_by_buffer, Active(1.5), Const(d)) == ((3.0, None),)
