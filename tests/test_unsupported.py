"""A corpus of programs enzpy must refuse, with the error they raise.

Each program is differentiated with ``autodiff``; the test checks the type of
the error and its message: it names the Python function that was
differentiated (or the user's function where the construct is) and the
construct (the callee without a derivative, "indirect", "BLAS", the returned
type, "generator", ...).

Sections:

* ``CORPUS``: user-level constructs refused with ``UnsupportedError``.
* ``NUMBA_IMPLEMENTATIONS``: NumPy functions whose Numba implementation calls
  LAPACK/BLAS or runtime helpers enzpy has no derivative for; the message
  names the user's function ("differentiating 'f': ...") and the helper.
* The same corpus in forward mode.
* Numba's own ``TypingError`` for code Numba cannot compile passes through
  enzpy unchanged (it already names the function, the line and the reason).
* Candidates from the same list that enzpy does differentiate (strings,
  ``try``/``except``, complex arithmetic, ``np.random``, ``np.sort``,
  ``cache=True``...), checked against finite differences, so that they are not
  mistaken for refusals later.
"""
from __future__ import annotations

import cmath
import ctypes
import ctypes.util
import importlib
import math
import re
import sys

import numba
import numpy as np
import pytest
from numba import cfunc, njit, types
from numba.core.errors import TypingError
from numba.experimental import jitclass

import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, UnsupportedError, autodiff


def _matrix(n=3):
    return np.eye(n) + 0.1 * np.arange(n * n, dtype=np.float64).reshape(n, n)


def _dup(x):
    return Duplicated(x, np.zeros_like(x))


# -- programs ------------------------------------------------------------------------
@njit
def once_unsup_gamma(x):
    return math.gamma(x) * 2.0


@njit
def once_unsup_lgamma(x):
    return math.lgamma(x) + x


@njit
def unsup_frexp(x):
    m, e = math.frexp(x)
    return m * x


@njit
def unsup_frexp_f32(x):
    return math.frexp(x)[0]


@njit
def unsup_frexp_of_array(a):
    s = 0.0
    for i in range(a.size):
        s += math.frexp(a[i])[0]
    return s


@njit
def unsup_frexp_callee(x):
    return math.frexp(x)[0] + x


@njit
def unsup_frexp_caller(x):
    return unsup_frexp_callee(x * 0.5) * x


@njit
def once_unsup_nextafter(x):
    return np.nextafter(x, 2.0) * x


@njit
def unsup_complex_power(x):
    z = complex(x, 0.3)
    return (z ** 3).real


@njit
def unsup_returns_tuple(x):
    return x, x * 2.0


@njit
def unsup_returns_array(x):
    a = np.zeros(3)
    a[0] = x
    return a


@njit
def unsup_returns_complex(x):
    return complex(x, x)


@njit
def unsup_generator(x):
    for i in range(3):
        yield x * i


@njit
def unsup_store_to_const(x, out):
    out[0] = x * x
    return out[0]


@njit
def unsup_rhs_into(y, k, out):
    out[0] = -k[0] * y[0]
    out[1] = k[0] * y[0] - k[1] * y[1]


@njit
def unsup_scratch_through_callee(y0, k, work):
    y = y0.copy()
    for _ in range(3):
        unsup_rhs_into(y, k, work)
        y += 0.05 * work
    return y[1]


@njit
def unsup_store_to_const_list(x, outs):
    outs[0][0] = x * x
    return outs[0][0]


@njit
def unsup_store_to_const_tuple(x, outs):
    outs[1][0] = x * x
    return outs[1][0]


@jitclass([("out", numba.float64[:])])
class _Buffer:
    def __init__(self, out):
        self.out = out


@njit
def unsup_store_to_const_object(x, buffer):
    buffer.out[0] = x * x
    return buffer.out[0]


@njit
def unsup_copy_to_const(a, out):
    for i in range(a.size):
        out[i] = a[i] * 2.0
    return out.sum()


@njit
def unsup_reshape(A):
    B = A.reshape(3, 2)
    return B[2, 1] * 2.0


@cfunc(types.float64(types.float64))
def _c_square(x):
    return x * x


@njit
def unsup_cfunc_call(x):
    return _c_square(x) + x


def _c_function(library, name, restype, argtypes):
    """A C function of the system's ``library`` ("m", "c") through ctypes."""
    fn = getattr(ctypes.CDLL(ctypes.util.find_library(library) or f"lib{library}.so.6"), name)
    fn.restype, fn.argtypes = restype, argtypes
    return fn


_c_cbrt = _c_function("m", "cbrt", ctypes.c_double, [ctypes.c_double])


@njit
def unsup_ctypes_call(x):
    return _c_cbrt(x) + x


@njit
def unsup_function_argument(fn, x):
    return fn(x) + x


@njit
def once_unsup_functions_of_constants(fn, x, c):
    # (the cfunc, the first-class function and the C function see constants only)
    s = 0.0
    for i in range(x.size):
        s += x[i] * fn(c[i]) + _c_cbrt(c[i]) * x[i] ** 2
    return s


@njit
def unsup_complex_power_of_an_array(x):
    z = np.arange(1.0, 4.0) * x
    return np.sum(z ** (1 + 1j)).real


@njit(types.float64(types.float64))
def _typed_square(x):
    return x * x


@njit
def unsup_function_list(fns, x):
    s = 0.0
    for i in range(len(fns)):
        s += fns[i](x)
    return s


def _function_list():
    fns = numba.typed.List.empty_list(types.FunctionType(types.float64(types.float64)))
    fns.append(_typed_square)
    return fns


@njit
def unsup_objmode(x):
    with numba.objmode(y="float64"):
        y = x * 2.0
    return y * x


@njit
def unsup_objmode_array(x):
    with numba.objmode():
        print(x)
    return np.sum(x * x)


@njit
def _unsup_gen(x):
    for i in range(3):
        yield x * i


@njit
def unsup_generator_consumer(x):
    s = 0.0
    for v in _unsup_gen(x):
        s += v
    return s


@njit
def unsup_set_of_floats(x):
    s = set()
    for i in range(x.shape[0]):
        s.add(x[i] * x[i])
    t = 0.0
    for v in s:
        t += math.sin(v)
    return t


@njit
def unsup_complex_inverse(a):
    m = np.array([[a + 1j, 0.5 + 0j], [0.3 + 0j, 2.0 - 0.5j]])
    g = np.linalg.inv(m)
    return g[0, 0].real + 2.0 * g[0, 0].imag


@njit
def unsup_float_bits_written(x):
    x.view(np.int64)[0] = 4607182418800017408      # the bits of 1.0
    return x[0] * 3.0 + x[1]


@njit
def _copy_bits(x):
    bits = x.view(np.uint64)
    bits[0] = bits[1]
    return x[0]


@njit
def unsup_float_bits_in_callee(x):
    return _copy_bits(x) * x[1]


@njit
def unsup_frombuffer_as_float32(x):
    return np.frombuffer(x, np.float32)[0] * x[1]


@njit
def unsup_fast_inverse_sqrt(x):
    # (found by review: the seed computed from x's bits was taken as a constant,
    # -0.156 where the derivative is -0.145)
    i = np.float64(x).view(np.int64)
    i = 0x5FE6EB50C7B537A9 - (i >> 1)
    y = np.int64(i).view(np.float64)
    return y * (1.5 - 0.5 * x * y * y)


@njit
def unsup_float_bits_as_a_number(x):
    return float(np.float64(x).view(np.int64)) * 1e-18 + x


@njit
def unsup_product_into_its_operand(A, B):
    # (silently wrong before: BLAS overwrote A while reading it, and the
    # derivative read the overwritten A and scaled its own additions away)
    np.dot(B, A, A)
    return A.sum()


@njit
def unsup_matvec_into_its_operand(A, x):
    np.dot(A, x, x)
    return x.sum()


@njit
def _product_into(A, B, out):
    np.dot(A, B, out)


@njit
def unsup_product_into_its_operand_in_a_callee(A, B):
    _product_into(B, A, A)
    return A.sum()


@njit
def product_into_an_array_of_its_own(A, B):
    C = np.empty((2, 2))
    np.dot(B, A, C)
    return (C * A).sum()


def test_a_product_into_an_out_array_of_its_own_is_differentiated():
    A, B = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0], [2.0, 0.3]])
    check = enzpy.check_gradient(product_into_an_array_of_its_own, _dup(A), _dup(B))
    assert check.worst_relative_error < 1e-7, check


@njit
def _product_into_second(B, arrays):
    np.dot(B, arrays[0], arrays[1])
    return (arrays[1] ** 2).sum()


@njit
def _recurrence_in_one_buffer(W, H):
    for t in range(1, H.shape[0]):
        np.dot(W, H[t - 1], H[t])          # rows of one buffer: apart
    return (H[-1] ** 2).sum()


@njit
def _product_over_a_list_item(x, alias):
    A = x.reshape(3, 3).copy()
    arrays = [A, np.empty((3, 3))]
    if alias:
        arrays[1] = A
    np.dot(A.T, arrays[0], arrays[1])
    return (arrays[1] ** 2).sum()


@njit
def _gradients_of_product_over_a_list_item(x, alias):
    dx = np.zeros_like(x)
    autodiff(Reverse, _product_over_a_list_item, Duplicated(x, dx), Const(alias))
    return dx


_OVERLAP = "wrote its result into memory it reads as an operand"


def test_a_product_over_its_operand_through_a_list_is_refused_when_it_runs():
    # (silently wrong before: the call site saw two different list items)
    B, A = _matrix()[:2, :2].copy(), _matrix()[1:, 1:].copy()
    arrays, shadow = [A, A], np.zeros_like(A)
    with pytest.raises(UnsupportedError, match=_OVERLAP):
        autodiff(Reverse, _product_into_second, Const(B), Duplicated(arrays, [shadow, shadow]))
    assert not shadow.any()                    # refused before the reverse sweep
    with pytest.raises(UnsupportedError, match=_OVERLAP):
        autodiff(Forward, _product_into_second, Const(B), Duplicated(arrays, [shadow, shadow]))
    x = np.linspace(-1.0, 1.0, 9)
    with pytest.raises(UnsupportedError, match=_OVERLAP):
        enzpy.hvp(njit(lambda x: _product_over_a_list_item(x, True)), x, np.ones(9))
    with pytest.raises(UnsupportedError, match=_OVERLAP):
        _gradients_of_product_over_a_list_item(x, True)
    # the same code with arrays apart, in every mode
    out_shadow = np.zeros_like(A)
    autodiff(Reverse, _product_into_second, Const(B),
             Duplicated([A, A.copy()], [shadow, out_shadow]))
    E = np.zeros_like(A)
    E[0, 1] = 1.0
    assert shadow[0, 1] == pytest.approx(
        _fd(lambda h: _product_into_second(B, [A + h * E, A.copy()])))
    (t,) = autodiff(Forward, _product_into_second, Duplicated(B, np.ones_like(B)),
                    Duplicated([A, A.copy()], [np.zeros_like(A), np.zeros_like(A)]))
    assert t == pytest.approx(_fd(lambda h: _product_into_second(B + h, [A, A.copy()])))
    v = np.cos(np.arange(9.0))
    expected = _fd(lambda h: _product_over_a_list_item.py_func(x + h * v, False))
    assert _gradients_of_product_over_a_list_item(x, False) @ v == pytest.approx(expected)


def _fd(f, eps=1e-6):
    return (f(eps) - f(-eps)) / (2 * eps)


def test_products_into_rows_of_one_buffer_are_differentiated():
    # (refused before: the call site compared only where the pointers come from)
    W = _matrix()[:3, :3].copy() * 0.5
    H = np.zeros((4, 3))
    H[0] = [0.3, -1.2, 0.7]
    check = enzpy.check_gradient(_recurrence_in_one_buffer, _dup(W), _dup(H))
    assert check.worst_relative_error < 1e-6, check


_SIGN_BIT = np.int64(-9223372036854775808)


@njit
def unsup_sign_flip_of_element_bits(x):
    # (found by review: Numba's load of x[0] and its view folded into an integer
    # load from float memory, whose derivative was dropped: 0 for -3)
    i = np.float64(x[0]).view(np.int64) ^ _SIGN_BIT
    return np.int64(i).view(np.float64) * 3.0 + x[1]


@njit
def unsup_element_bits_kept_in_an_int_array(x):
    buf = np.empty(1, np.int64)
    buf[0] = np.float64(x[0]).view(np.int64)
    return np.int64(buf[0]).view(np.float64) ** 2


@njit
def _bits_of(a):
    return np.float64(a).view(np.int64)


@njit
def unsup_bits_returned_by_a_callee(a):
    return np.int64(_bits_of(a)).view(np.float64) ** 2


@njit
def unsup_bits_kept_in_a_dict(a):
    d = {0: np.float64(a).view(np.int64)}
    return np.int64(d[0]).view(np.float64) ** 2


@njit
def unsup_bits_from_one_callee_viewed_back_by_another(x):
    # (found by review: 0 for 2.6, the callee making the bits was not differentiated)
    return _float_of(_bits_of(x)) ** 2


@njit
def _float_of(i):
    return np.int64(i).view(np.float64)


@njit
def _is_negative(x):
    return np.float64(x).view(np.int64) < 0


@njit
def sign_test_of_bits_in_a_callee(x):
    return -x if _is_negative(x) else x * x


_c_labs = _c_function("c", "labs", ctypes.c_long, [ctypes.c_long])
_c_memchr = _c_function("c", "memchr", ctypes.c_void_p,
                        [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t])


_c_memcpy = _c_function("c", "memcpy", ctypes.c_size_t, [ctypes.c_size_t] * 3)


@njit
def _copy_at(destination, source, n):
    _c_memcpy(destination, source, n)


@njit
def unsup_address_through_a_helper_to_a_c_function(x):
    # (found by review: [0, 0, 0] for 2x, the helper taking integers)
    y = np.empty_like(x)
    _copy_at(y.ctypes.data, x.ctypes.data, x.size * 8)
    return np.sum(y ** 2)


@njit
def unsup_array_to_a_c_function(x):
    _c_memchr(x.ctypes, 0, 8)
    return x[0] * 2.0


@njit
def unsup_address_to_a_c_function(x):
    # (found by review: a C function reading x through its address gave [1, 0, 0])
    return _c_labs(x.ctypes.data) * 0.0 + x[0]


@njit
def unsup_address_less_an_offset_to_a_c_function(x, offset):
    # (a difference was taken for a size whatever it subtracted: found rereading)
    return _c_labs(x.ctypes.data - offset) * 0.0 + x[0]


@njit
def unsup_bits_kept_as_bytes(x):
    # (a byte of the bits was taken for a boolean: 0 for 2.6, found rereading the change)
    i = np.float64(x).view(np.uint64)
    buf = np.empty(8, np.uint8)
    for k in range(8):
        buf[k] = np.uint8((i >> np.uint64(8 * k)) & np.uint64(0xff))
    j = np.uint64(0)
    for k in range(8):
        j |= np.uint64(buf[k]) << np.uint64(8 * k)
    return np.uint64(j).view(np.float64) ** 2


@njit
def bits_viewed_straight_back(x):
    s = 0.0
    for k in range(x.size):
        s += np.int64(np.float64(x[k]).view(np.int64)).view(np.float64) ** 2
        if np.float64(x[k]).view(np.int64) < 0:          # a sign test reads the bits only
            s -= x[k]
    return s


@pytest.mark.parametrize("x", [1.3, -0.7])
def test_a_sign_test_of_bits_in_a_callee_keeps_the_derivative(x):
    expected = -1.0 if x < 0 else 2.0 * x
    assert autodiff(Reverse, sign_test_of_bits_in_a_callee, Active(x))[0][0] == expected
    assert autodiff(enzpy.Forward, sign_test_of_bits_in_a_callee, Duplicated(x, 1.0))[0] == \
        expected


bits_viewed_straight_back_with_debug_info = njit(debug=True)(bits_viewed_straight_back.py_func)


def test_a_float_viewed_as_bits_in_code_with_debug_info():
    # (the views carry debug locations there: they were left as calls enzpy refused)
    x = np.array([1.1, -0.4, 0.8])
    dx = np.zeros(3)
    autodiff(Reverse, bits_viewed_straight_back_with_debug_info, Duplicated(x.copy(), dx))
    np.testing.assert_allclose(dx, 2.0 * x - (x < 0), rtol=1e-12)


def test_a_float_viewed_as_bits_and_straight_back_keeps_its_derivative():
    x = np.array([1.1, -0.4, 0.8])
    expected = 2.0 * x - (x < 0)
    dx = np.zeros(3)
    autodiff(Reverse, bits_viewed_straight_back, Duplicated(x.copy(), dx))
    np.testing.assert_allclose(dx, expected, rtol=1e-12)
    v = np.array([0.5, -1.0, 2.0])
    (tangent,) = autodiff(enzpy.Forward, bits_viewed_straight_back, Duplicated(x.copy(), v))
    assert tangent == pytest.approx(expected @ v, rel=1e-12)
    np.testing.assert_allclose(enzpy.hvp(bits_viewed_straight_back, x, v), 2.0 * v, rtol=1e-12)
    for n in (0, 1):
        dx = np.zeros(n)
        autodiff(Reverse, bits_viewed_straight_back, Duplicated(x[:n].copy(), dx))
        np.testing.assert_allclose(dx, expected[:n])


def _line_of(f, text):
    """The source line of ``f`` holding ``text``."""
    lines, first = __import__("inspect").getsourcelines(f.py_func)
    return first + next(i for i, line in enumerate(lines) if text in line)


# (id, function, arguments, error type, name the message must contain,
#  substrings naming the construct)
CORPUS = [
    ("frexp", unsup_frexp, lambda: [Active(0.7)], UnsupportedError, "unsup_frexp",
     ["numba_frexp", f"near line {_line_of(unsup_frexp, 'math.frexp')})",
      # (found by review: the advice to mark it inactive alone would drop the derivative)
      "this is math.frexp", "if its result does not depend on the differentiated inputs"]),
    ("frexp_float32", unsup_frexp_f32, lambda: [Active(np.float32(2.5))], UnsupportedError,
     "unsup_frexp_f32", ["numba_frexpf"]),
    ("frexp_of_array_elements", unsup_frexp_of_array,
     lambda: [_dup(np.array([1.5, 2.5, 3.5]))], UnsupportedError, "unsup_frexp_of_array",
     ["numba_frexp", f"near line {_line_of(unsup_frexp_of_array, 'math.frexp')})"]),
    ("frexp_in_callee", unsup_frexp_caller, lambda: [Active(2.5)], UnsupportedError,
     "unsup_frexp_callee", ["numba_frexp"]),
    ("complex_power", unsup_complex_power, lambda: [Active(0.7)], UnsupportedError,
     "unsup_complex_power", ["numba_cpow", f"near line {_line_of(unsup_complex_power, '**')})",
                             "complex power", "np.exp(p * np.log(z))"]),
    # (the error named Numba's '<dynamic>.__numba_array_expr_0x7f...' kernel)
    ("complex_power_in_an_array_expression", unsup_complex_power_of_an_array,
     lambda: [Active(0.7)], UnsupportedError, "unsup_complex_power_of_an_array",
     ["the array expression at test_unsupported.py:"
      f"{_line_of(unsup_complex_power_of_an_array, '**')}: call to 'numba_cpow'",
      "np.exp(p * np.log(z))"]),
    ("returns_tuple", unsup_returns_tuple, lambda: [Active(1.5)], UnsupportedError,
     "unsup_returns_tuple", ["returns UniTuple(float64 x 2)", "scalar or None"]),
    ("returns_array", unsup_returns_array, lambda: [Active(1.5)], UnsupportedError,
     "unsup_returns_array", ["returns array(float64, 1d, C)", "scalar or None"]),
    ("returns_complex", unsup_returns_complex, lambda: [Active(1.5)], UnsupportedError,
     "unsup_returns_complex", ["returns complex128"]),
    ("generator_function", unsup_generator, lambda: [Active(1.5)], UnsupportedError,
     "unsup_generator", ["generator"]),
    ("active_value_into_const_array", unsup_store_to_const,
     lambda: [Active(1.5), Const(np.zeros(2))], UnsupportedError, "unsup_store_to_const",
     ["without a shadow", "pass 'out' as Duplicated",
      f"near line {_line_of(unsup_store_to_const, 'out[0] =')})"]),
    # (the advice named the callee's parameter 'out', which the user cannot pass)
    ("active_value_into_const_scratch_of_a_callee", unsup_scratch_through_callee,
     lambda: [_dup(np.array([1.2, 0.5])), Const(np.array([1.0, 0.5])), Const(np.zeros(2))],
     UnsupportedError, "unsup_rhs_into", ["without a shadow", "pass 'work' as Duplicated"]),
    # (the advice to pass it as Duplicated reached arrays passed themselves only)
    ("active_value_into_const_list", unsup_store_to_const_list,
     lambda: [Active(1.5), Const([np.zeros(2)])], UnsupportedError,
     "unsup_store_to_const_list", ["without a shadow", "pass 'outs' as Duplicated"]),
    ("active_value_into_const_tuple", unsup_store_to_const_tuple,
     lambda: [Active(1.5), Const((1.0, np.zeros(2)))], UnsupportedError,
     "unsup_store_to_const_tuple", ["without a shadow", "pass 'outs' as Duplicated"]),
    ("active_value_into_const_jitclass", unsup_store_to_const_object,
     lambda: [Active(1.5), Const(_Buffer(np.zeros(2)))], UnsupportedError,
     "unsup_store_to_const_object", ["without a shadow", "pass 'buffer' as Duplicated"]),
    ("duplicated_copied_into_const_array", unsup_copy_to_const,
     lambda: [_dup(np.ones(3)), Const(np.zeros(3))], UnsupportedError, "unsup_copy_to_const",
     ["without a shadow", "pass 'out' as Duplicated",
      f"near line {_line_of(unsup_copy_to_const, 'out[i] =')})"]),
    # (the callee and its line are named: before, "an indirect call" near the
    # decorator's line)
    ("cfunc_call", unsup_cfunc_call, lambda: [Active(1.5)], UnsupportedError,
     "unsup_cfunc_call", ["'_c_square', called through its address (a cfunc",
                          f"near line {_line_of(unsup_cfunc_call, 'return')})"]),
    ("ctypes_call", unsup_ctypes_call, lambda: [Active(1.5)], UnsupportedError,
     "unsup_ctypes_call", ["the C function '_c_cbrt' (ctypes or cffi)",
                           f"near line {_line_of(unsup_ctypes_call, 'return')})"]),
    ("first_class_function_argument", unsup_function_argument,
     lambda: [Const(_c_square), Active(1.5)], UnsupportedError, "unsup_function_argument",
     ["'fn', called through its address",
      f"near line {_line_of(unsup_function_argument, 'return')})"]),
    ("typed_list_of_functions", unsup_function_list,
     lambda: [Const(_function_list()), Active(1.5)], UnsupportedError, "unsup_function_list",
     ["'fns[...]', called through its address",
      f"near line {_line_of(unsup_function_list, 's +=')})"]),
    # the block's result is boxed for the interpreter: before 6da8ef7 its
    # derivative was silently dropped (2x instead of 4x)
    ("objmode_block", unsup_objmode, lambda: [Active(1.5)], UnsupportedError, "unsup_objmode",
     ["PyFloat_FromDouble", "near line", "turns the value into a Python object"]),
    # (named only Numba's boxing helper before)
    ("objmode_array", unsup_objmode_array, lambda: [_dup(np.ones(3))], UnsupportedError,
     "unsup_objmode_array", ["NRT_adapt_ndarray_to_python", "turns the value into a Python "
                             "object for Python code (objmode", "print() of a float or an array is fine"]),
    # named only by Numba's free of its table before
    ("set_of_floats", unsup_set_of_floats, lambda: [_dup(np.array([0.3, 0.5, 0.7]))],
     UnsupportedError, "unsup_set_of_floats",
     [f"this is the set made at line {_line_of(unsup_set_of_floats, 'set()')}",
      "use a list or an array"]),
    # forward mode went through the real rule: a wrong tangent; reverse an internal error
    ("complex_inverse", unsup_complex_inverse, lambda: [Active(0.7)], UnsupportedError,
     "unsup_complex_inverse", [f"np.linalg.inv at test_unsupported.py:"
                               f"{_line_of(unsup_complex_inverse, 'inv(m)')}",
                               "complex ones are not differentiated"]),
    # a float array's memory written as integers: the integers were copied into the
    # shadow (derivatives [4, 1] and [8, 0] for [0, 1] and [0, 3]), in forward mode too
    ("float_array_viewed_as_int64", unsup_float_bits_written,
     lambda: [_dup(np.array([2.0, 5.0]))], UnsupportedError, "unsup_float_bits_written",
     ["views an array of float64 as int64", "ndarray.view at test_unsupported.py:"
      f"{_line_of(unsup_float_bits_written, 'x.view')}", "astype"]),
    ("float_array_viewed_as_uint64_in_callee", unsup_float_bits_in_callee,
     lambda: [_dup(np.array([2.0, 5.0]))], UnsupportedError, "_copy_bits",
     ["views an array of float64 as uint64", f"{_line_of(_copy_bits, 'x.view')}"]),
    ("float64_memory_read_as_float32", unsup_frombuffer_as_float32,
     lambda: [_dup(np.array([2.0, 5.0]))], UnsupportedError, "unsup_frombuffer_as_float32",
     ["views an array of float64 as float32", "np.frombuffer at test_unsupported.py:"]),
    ("float_bits_computed_on", unsup_fast_inverse_sqrt, lambda: [Active(2.3)],
     UnsupportedError, "unsup_fast_inverse_sqrt",
     ["the bits of a value that depends on the differentiated inputs", "integer arithmetic"]),
    ("float_bits_as_a_number", unsup_float_bits_as_a_number, lambda: [Active(2.3)],
     UnsupportedError, "unsup_float_bits_as_a_number",
     ["the bits of a value that depends on the differentiated inputs"]),
    ("product_into_its_operand", unsup_product_into_its_operand,
     lambda: [_dup(_matrix()[:2, :2].copy()), _dup(_matrix()[1:, 1:].copy())], UnsupportedError,
     "unsup_product_into_its_operand",
     ["writes its result into the memory of one of its operands",
      f"near line {_line_of(unsup_product_into_its_operand, 'np.dot')})"]),
    ("matvec_into_its_operand", unsup_matvec_into_its_operand,
     lambda: [Const(_matrix()[:2, :2].copy()), _dup(np.array([1.0, 2.0]))], UnsupportedError,
     "unsup_matvec_into_its_operand", ["writes its result into the memory of one of its"]),
    ("product_into_its_operand_in_a_callee", unsup_product_into_its_operand_in_a_callee,
     lambda: [_dup(_matrix()[:2, :2].copy()), _dup(_matrix()[1:, 1:].copy())], UnsupportedError,
     "unsup_product_into_its_operand_in_a_callee",
     ["writes its result into the memory of one of its operands",
      f"near line {_line_of(unsup_product_into_its_operand_in_a_callee, '_product_into(')})"]),
    # (found by review, the four below: silently zero derivatives)
    ("array_element_bits_computed_on", unsup_sign_flip_of_element_bits,
     lambda: [_dup(np.array([1.1, -0.4]))], UnsupportedError, "unsup_sign_flip_of_element_bits",
     ["the bits of a value", "computed on by integer arithmetic and read back as a float"]),
    ("float_bits_stored", unsup_element_bits_kept_in_an_int_array,
     lambda: [_dup(np.array([1.1, -0.4]))], UnsupportedError,
     "unsup_element_bits_kept_in_an_int_array", ["the bits of a value", "stored to memory"]),
    ("float_bits_returned_by_a_callee", unsup_bits_returned_by_a_callee, lambda: [Active(1.5)],
     UnsupportedError, "unsup_bits_returned_by_a_callee",
     ["are made by 'test_unsupported._bits_of' and returned or stored by it"]),
    ("float_bits_from_one_callee_to_another", unsup_bits_from_one_callee_viewed_back_by_another,
     lambda: [Active(1.3)], UnsupportedError,
     "unsup_bits_from_one_callee_viewed_back_by_another",
     ["are made by 'test_unsupported._bits_of' and returned or stored by it"]),
    ("address_to_a_c_function", unsup_address_to_a_c_function,
     lambda: [_dup(np.array([0.3, -0.4]))], UnsupportedError, "unsup_address_to_a_c_function",
     ["the address of memory holding values that depend on the differentiated inputs",
      "passed to the C function '_c_labs' (ctypes or cffi) as an integer",
      f"near line {_line_of(unsup_address_to_a_c_function, '_c_labs(')})"]),
    ("address_less_an_offset_to_a_c_function", unsup_address_less_an_offset_to_a_c_function,
     lambda: [_dup(np.array([0.3, -0.4])), Const(8)], UnsupportedError,
     "unsup_address_less_an_offset_to_a_c_function",
     ["passed to the C function '_c_labs' (ctypes or cffi) as an integer"]),
    ("address_through_a_helper_to_a_c_function", unsup_address_through_a_helper_to_a_c_function,
     lambda: [_dup(np.array([1.6, -0.8, 1.0]))], UnsupportedError,
     "unsup_address_through_a_helper_to_a_c_function",
     ["(x.ctypes.data) is passed to 'test_unsupported._copy_at' as an integer"]),
    # (the message said "call to 'an indirect function'")
    ("array_to_a_c_function", unsup_array_to_a_c_function,
     lambda: [_dup(np.array([0.3, -0.4]))], UnsupportedError, "unsup_array_to_a_c_function",
     ["call to the C function '_c_memchr' (ctypes or cffi) with differentiable memory",
      f"near line {_line_of(unsup_array_to_a_c_function, '_c_memchr(')})"]),
    ("float_bits_kept_as_bytes", unsup_bits_kept_as_bytes, lambda: [Active(1.3)],
     UnsupportedError, "unsup_bits_kept_as_bytes",
     ["the bits of a value", "computed on by integer arithmetic and stored to memory"]),
    ("float_bits_in_a_dict", unsup_bits_kept_in_a_dict, lambda: [Active(1.5)],
     UnsupportedError, "unsup_bits_kept_in_a_dict", ["the bits of a value", "passed to a call"]),
    ("generator_consumer", unsup_generator_consumer, lambda: [Active(1.5)], UnsupportedError,
     "unsup_generator_consumer", ["uses a generator", "at test_unsupported.py:"]),
]


@pytest.mark.parametrize("f, make_args, exc, name, needles",
                         [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_refused(f, make_args, exc, name, needles):
    with pytest.raises(exc) as info:
        autodiff(Reverse, f, *make_args())
    assert type(info.value) is exc
    msg = str(info.value)
    assert re.search(r"['.]" + re.escape(name) + "'", msg), msg
    for needle in needles:
        assert needle in msg, msg


def _forward_args(args):
    """The same arguments for forward mode: an Active scalar becomes Duplicated(x, 1)."""
    return [Duplicated(a.val, type(a.val)(1.0)) if isinstance(a, Active) else a for a in args]


# Refused in reverse mode only (use enzpy.vjp): forward mode returns their tangents.
FORWARD_ACCEPTS = {"returns_array", "returns_tuple"}


@pytest.mark.parametrize("f, make_args, exc, name, needles",
                         [c[1:] for c in CORPUS if c[0] not in FORWARD_ACCEPTS],
                         ids=[c[0] for c in CORPUS if c[0] not in FORWARD_ACCEPTS])
def test_refused_in_forward_mode_too(f, make_args, exc, name, needles):
    with pytest.raises(exc) as info:
        autodiff(enzpy.Forward, f, *_forward_args(make_args()))
    msg = str(info.value)
    assert re.search(r"['.]" + re.escape(name) + "'", msg), msg


def test_refusal_leaves_shadows_untouched_and_later_calls_work():
    a, da = np.ones(3), np.full(3, 7.0)
    with pytest.raises(UnsupportedError):
        autodiff(Reverse, unsup_copy_to_const, Duplicated(a, da), Const(np.zeros(3)))
    assert np.all(da == 7.0) and np.all(a == 1.0)
    with pytest.raises(UnsupportedError):       # refused again, not cached as built
        autodiff(Reverse, unsup_copy_to_const, Duplicated(a, da), Const(np.zeros(3)))
    out, dout = np.zeros(3), np.zeros(3)
    autodiff(Reverse, unsup_copy_to_const, Duplicated(a, da), Duplicated(out, dout))
    assert np.allclose(da, 7.0 + 2.0)


# -- NumPy functions implemented by Numba with helpers enzpy cannot differentiate ------
@njit
def unsup_inv(A, out):
    out[0] = np.linalg.inv(A).sum()


@njit
def unsup_solve(A, b):
    return np.linalg.solve(A, b).sum()


@njit
def unsup_det(A):
    return np.linalg.det(A)


@njit
def unsup_matmul(A, B):
    return (A @ B).sum()


@njit
def unsup_matvec(A, v):
    return (A @ v).sum()


@njit
def unsup_dot_2d(A, B):
    return np.dot(A, B).sum()


@njit
def unsup_norm_2d(A):
    return np.linalg.norm(A)


@njit
def unsup_norm_1d(a):
    return np.linalg.norm(a)


@njit
def unsup_cumsum(a):
    c = np.cumsum(a)
    return (c * c).sum()


@njit
def unsup_array_max(a):
    return np.max(a) * 2.0


@njit
def once_unsup_dict(x):
    d = {1: x}
    d[2] = x * x
    return d[2] + d[1]


@njit
def unsup_dict_mixed_values(x):
    d = {0: (x, np.ones(2) * x)}
    return d[0][0] * d[0][1].sum()


@njit
def once_unsup_random_normal(x):
    np.random.seed(3)               # (the same draw at every finite-difference point)
    return x + np.random.normal(0.0, x) + np.random.standard_normal() * x * x


@njit
def unsup_diff(a):
    return (np.diff(a) ** 2).sum()


@njit(parallel=True)
def unsup_prange(a):
    s = 0.0
    for i in numba.prange(a.size):
        s += a[i] * a[i]
    return s


NUMBA_IMPLEMENTATIONS = [
    ("typed_dict_mixed_values", unsup_dict_mixed_values, lambda: [Active(1.5)],
     "unsup_dict_mixed_values", ["numba.typed.Dict at test_unsupported.py:",
                                 "both pointers and floats"]),
]

# Once refused (BLAS, LAPACK, Numba's reshape helper), now differentiated.
NOW_DIFFERENTIATED = [
    ("linalg_inv", unsup_inv, lambda: [_dup(_matrix()), Duplicated(np.zeros(1), np.ones(1))]),
    ("linalg_solve", unsup_solve, lambda: [_dup(_matrix()), Const(np.ones(3))]),
    ("linalg_det", unsup_det, lambda: [_dup(_matrix())]),
    ("matmul_2d_gemm", unsup_matmul, lambda: [_dup(_matrix()), Const(_matrix().T.copy())]),
    ("matvec_gemv", unsup_matvec, lambda: [_dup(_matrix()), Const(np.arange(1.0, 4.0))]),
    ("np_dot_2d", unsup_dot_2d, lambda: [Const(_matrix()), _dup(_matrix() * 0.5)]),
    ("linalg_norm_2d", unsup_norm_2d, lambda: [_dup(np.arange(1.0, 7.0).reshape(2, 3))]),
    ("linalg_norm_1d", unsup_norm_1d, lambda: [_dup(np.arange(1.0, 4.0))]),
    ("cumsum", unsup_cumsum, lambda: [_dup(np.array([3.0, 1.0, 2.0]))]),
    ("array_max", unsup_array_max, lambda: [_dup(np.array([3.0, 1.0, 2.0]))]),
    ("np_diff", unsup_diff, lambda: [_dup(np.array([3.0, 1.0, 2.5, -0.5]))]),
    ("prange", unsup_prange, lambda: [_dup(np.arange(4.0))]),
    ("reshape", unsup_reshape, lambda: [_dup(np.arange(6.0).reshape(2, 3))]),
    ("nextafter", once_unsup_nextafter, lambda: [Active(0.7)]),
    ("gamma", once_unsup_gamma, lambda: [Active(2.5)]),
    ("lgamma", once_unsup_lgamma, lambda: [Active(2.5)]),
    ("typed_dict", once_unsup_dict, lambda: [Active(1.5)]),
    # a call through a function's address with constant arguments writes a constant
    # into its result slot
    ("cfunc_of_constants", once_unsup_functions_of_constants,
     lambda: [Const(_c_square), _dup(np.array([0.3, 0.7, 1.1])), Const(np.array([0.5, 2.0, -1.0]))]),
    ("first_class_function_of_constants", once_unsup_functions_of_constants,
     lambda: [Const(_typed_square), _dup(np.array([0.3, -0.7])), Const(np.array([1.5, 2.0]))]),
    ("function_of_constants_no_iteration", once_unsup_functions_of_constants,
     lambda: [Const(_c_square), _dup(np.zeros(0)), Const(np.zeros(0))]),
    # the Gaussian pair Numba's sampler writes into a stack slot depends on no input
    ("random_normal_active_scale", once_unsup_random_normal, lambda: [Active(1.5)]),
]


@pytest.mark.parametrize("f, make_args", [c[1:] for c in NOW_DIFFERENTIATED],
                         ids=[c[0] for c in NOW_DIFFERENTIATED])
def test_once_refused_now_differentiated(f, make_args):
    check = enzpy.check_gradient(f, *make_args())
    assert check.worst_relative_error < 1e-6, check


@pytest.mark.parametrize("fn, g", [(_c_square, lambda c: c * c), (_typed_square, lambda c: c * c)])
def test_calls_through_an_address_on_constants_in_forward_mode(fn, g):
    x, c, v = np.array([0.3, 0.7, 1.1]), np.array([0.5, 2.0, -1.0]), np.array([1.0, -2.0, 0.5])
    expected = (g(c) + 2.0 * np.cbrt(c) * x) @ v
    (tangent,) = autodiff(enzpy.Forward, once_unsup_functions_of_constants, Const(fn),
                          Duplicated(x, v), Const(c))
    assert tangent == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("f, make_args, name, needles", [c[1:] for c in NUMBA_IMPLEMENTATIONS],
                         ids=[c[0] for c in NUMBA_IMPLEMENTATIONS])
def test_refused_in_numba_implementation(f, make_args, name, needles):
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, f, *make_args())
    msg = str(info.value)
    assert f"differentiating '{name}'" in msg, msg
    for needle in needles:
        assert needle in msg, msg


@njit
def unsup_complex_matmul(A):
    Z = A * (1.0 + 1.0j)
    B = np.sin(A)
    W = Z @ Z
    return W.real.sum() + B.sum()


@njit
def unsup_complex_dot(A):
    Z = A * (1.0 + 1.0j)
    for _ in range(2):
        Z = np.dot(Z, Z)
    return Z.real.sum()


@njit
def unsup_complex_solve_after_ones(A):
    Z = A + 1j * A.T
    b = np.ones(A.shape[0]) + 0j
    r = np.linalg.solve(Z * 2.0, b)
    return (np.abs(r) ** 2).sum()


@njit
def unsup_complex_cholesky_after_ones(A):
    b = np.ones(A.shape[0])
    Z = (A @ A.T + np.eye(A.shape[0])) + 0j
    L = np.linalg.cholesky(Z)
    return np.abs(L).sum() + b.sum()


@pytest.mark.parametrize("f, call, text", [
    (unsup_complex_matmul, "@", "W = Z @ Z"),
    (unsup_complex_dot, "np.dot", "np.dot(Z, Z)"),             # in a loop
    # (the message's "complex ones are not differentiated" named np.ones, lines earlier)
    (unsup_complex_solve_after_ones, "np.linalg.solve", "np.linalg.solve(Z"),
    # (Numba's implementation is cho_impl: the block's other calls were named instead)
    (unsup_complex_cholesky_after_ones, "np.linalg.cholesky", "np.linalg.cholesky(Z)"),
], ids=["matmul_operator", "np_dot_in_loop", "solve_after_ones", "cholesky_after_ones"])
def test_refusal_in_numba_code_names_the_numpy_call_and_line(f, call, text):
    """A refusal inside Numba's implementation of a NumPy function names the call as the
    user wrote it, with the file and line, before the implementation's details."""
    args = [_dup(_matrix())]
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, f, *args)
    where = f"'{f.__name__}': {call} at test_unsupported.py:{_line_of(f, text)}: "
    assert where in str(info.value), str(info.value)


# -- code Numba cannot compile: Numba's TypingError passes through unchanged ------------
@njit
def unsup_untypable(x):
    return x + "a"


def unsup_untypable_plain(x):
    return x + "a"


@njit
def unsup_except_specific(x):
    try:
        y = x * x
    except ValueError:
        y = 0.0
    return y


@pytest.mark.parametrize("f, name", [(unsup_untypable, "unsup_untypable"),
                                     (unsup_untypable_plain, "unsup_untypable_plain"),
                                     (unsup_except_specific, "unsup_except_specific")],
                         ids=["njit", "plain_function", "except_specific_class"])
def test_numba_typing_error_passes_through(f, name):
    with pytest.raises(TypingError) as info:
        autodiff(Reverse, f, Active(1.5))
    assert name in str(info.value)


# -- candidates enzpy does differentiate -------------------------------------------------
@njit
def ok_string_const(x, s):
    if s == "double":
        return 2.0 * x * x
    return x


@njit
def ok_try_except(x):
    try:
        if x > 1.0:
            raise ValueError("big")
        y = x * x
    except Exception:
        y = 3.0 * math.sin(x)
    return y


@njit
def ok_complex(x, y):
    z = complex(x, y)
    w = (1.0 + 2j) / z + cmath.sqrt(z) * cmath.exp(z)
    return w.real + 2.0 * w.imag + abs(z)


@njit
def ok_seeded_random(x):
    np.random.seed(1)
    return x * np.random.random() + np.random.uniform(0.0, x)


@njit
def ok_gaussian_noise(x):
    np.random.seed(2)
    noise = np.random.normal(0.0, 1.0, x.size) + np.random.randn(x.size)
    return np.sum((x + 0.1 * noise) ** 2) * (1.0 + 0.1 * np.random.standard_normal())


@njit
def _ok_square(x):
    return x * x


@njit
def ok_dispatcher_argument(fn, x):
    return fn(x) + x


@njit
def ok_sort(a):
    b = np.sort(a)
    return b[0] * 2.0 + b[-1]


@njit
def ok_argsort(a):
    idx = np.argsort(a)
    return a[idx[0]] * 2.0 + a[idx[-1]]


@njit
def ok_sort_of_const(w, a):
    return np.sort(w)[0] * a[0]


@njit
def ok_list_of_active(x):
    values = [x, 2.0 * x]
    values.append(x * x)
    return values[2] + values[1]


@jitclass([("v", types.float64)])
class OkBox:
    def __init__(self, v):
        self.v = v


@njit
def ok_jitclass(x):
    b = OkBox(x)
    return b.v * b.v


@pytest.mark.parametrize("f, make_args", [
    (ok_list_of_active, lambda: [Active(1.5)]),
    (ok_jitclass, lambda: [Active(1.5)]),
    (ok_string_const, lambda: [Active(0.7), Const("double")]),
    (ok_try_except, lambda: [Active(0.7)]),
    (ok_try_except, lambda: [Active(1.7)]),
    (ok_complex, lambda: [Active(0.7), Active(-0.4)]),
    (ok_seeded_random, lambda: [Active(0.7)]),
    (ok_gaussian_noise, lambda: [_dup(np.array([0.3, -0.2, 0.9]))]),
    (ok_dispatcher_argument, lambda: [Const(_ok_square), Active(0.7)]),
    (ok_sort, lambda: [_dup(np.array([3.0, 1.0, 2.5, -0.5]))]),
    (ok_argsort, lambda: [_dup(np.array([3.0, 1.0, 2.5, -0.5]))]),
    (ok_sort_of_const, lambda: [Const(np.array([3.0, 1.0, 2.0])), _dup(np.array([0.5, 2.0]))]),
], ids=["list_holding_active_value", "jitclass_float_field", "string_const",
        "try_except_not_raised", "try_except_raised", "complex_arithmetic",
        "seeded_np_random", "gaussian_noise", "dispatcher_argument", "np_sort", "np_argsort",
        "np_sort_of_const_array"])
def test_candidate_is_differentiated(f, make_args):
    check = enzpy.check_gradient(f, *make_args())
    assert check.worst_relative_error < 1e-6, check


def test_hvp_through_gaussian_noise():
    """The pair of Gaussian draws goes through a stack slot whose tangent slot is
    passed along with it: neither depends on x (hvp refused the function)."""
    x, v = np.array([0.3, -0.2, 0.9]), np.array([0.5, 1.0, -0.3])

    def gradient(at):
        dx = np.zeros_like(at)
        autodiff(Reverse, ok_gaussian_noise, Duplicated(at.copy(), dx))
        return dx
    h = 1e-6
    expected = (gradient(x + h * v) - gradient(x - h * v)) / (2 * h)
    np.testing.assert_allclose(enzpy.hvp(ok_gaussian_noise, x, v), expected, rtol=1e-6)


# -- functions compiled eagerly, with a signature ------------------------------------------
@njit("float64(float64[:], float64)")
def eager_weighted_squares(x, k):
    return (x * x).sum() * k


@njit("float64(float64)")
def eager_cube(x):
    return x * x * x


def test_a_function_compiled_with_a_signature_is_differentiated():
    """Numba compiles nothing more for it (``RuntimeError: compilation disabled`` leaked from
    enzpy); the derivative is of the same code, typed for the arguments given, and the
    function keeps only its own signatures."""
    x = np.array([0.3, 0.6, 0.9])
    dx = np.zeros(3)
    autodiff(Reverse, eager_weighted_squares, Duplicated(x, dx), Const(2.0))
    np.testing.assert_allclose(dx, 4 * x, rtol=1e-12)
    (t,) = autodiff(enzpy.Forward, eager_weighted_squares, Duplicated(x, np.ones(3)), Const(2.0))
    assert t == pytest.approx(4 * x.sum(), rel=1e-12)
    (d,), = autodiff(Reverse, eager_cube, Active(np.float32(2.0)))
    assert d == pytest.approx(12.0, rel=1e-6)
    assert len(eager_weighted_squares.signatures) == 1 and len(eager_cube.signatures) == 1


# -- an exception a call raises inside a try block -----------------------------------------
@njit
def _checked_sqrt(x):
    if x < 0.0:
        raise ValueError("negative")
    return math.sqrt(x)


@njit
def try_around_lapack(a):
    s = a.sum()
    try:
        inv = np.linalg.inv(a)
    except Exception:
        inv = np.zeros_like(a)
    return s * np.sum(inv * a) + s * s


@njit
def try_around_user_call(x):
    try:
        y = _checked_sqrt(x[0]) * x[1]
    except Exception:
        y = x[1] * x[1]
    return y + x[0]


_SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])


@pytest.mark.parametrize("f, x, line", [
    (try_around_lapack, _SINGULAR, "inv = np.linalg.inv(a)"),
    (try_around_user_call, np.array([-1.0, 3.0]), "y = _checked_sqrt(x[0]) * x[1]"),
], ids=["lapack_singular", "user_function"])
@pytest.mark.parametrize("mode", ["reverse", "forward", "hvp"])
def test_an_exception_caught_from_a_call_is_refused_when_it_happens(f, x, line, mode):
    """The derivative of a call that stops half-way is not there for the reverse sweep
    to undo: catching its exception crashed reverse mode (segfault) and gave garbage."""
    where = f"try block of '{f.py_func.__name__}' (near line {_line_of(f, line)}) was caught"
    with pytest.raises(UnsupportedError, match=re.escape(where)):
        if mode == "reverse":
            autodiff(Reverse, f, Duplicated(x.copy(), np.zeros_like(x)))
        elif mode == "forward":
            autodiff(enzpy.Forward, f, Duplicated(x.copy(), np.ones_like(x)))
        else:
            enzpy.hvp(f, x.copy(), np.ones_like(x))


@pytest.mark.parametrize("f, x", [
    (try_around_lapack, np.array([[2.0, 1.0], [0.5, 3.0]])),
    (try_around_user_call, np.array([2.0, 3.0])),
], ids=["lapack_regular", "user_function"])
def test_a_try_block_whose_calls_do_not_raise_is_differentiated(f, x):
    check = enzpy.check_gradient(f, _dup(x))
    assert check.worst_relative_error < 1e-6, check
    v = np.array([0.3, -0.7, 0.2, 0.5])[:x.size].reshape(x.shape)
    (tangent,) = autodiff(enzpy.Forward, f, Duplicated(x.copy(), v))
    h = 1e-6
    assert tangent == pytest.approx((f(x + h * v) - f(x - h * v)) / (2 * h), rel=1e-6)


# -- @njit(cache=True): loaded from Numba's disk cache, compiled again by enzpy ------------
_CACHED_MODULE = '''
import math
from numba import njit


@njit(cache=True)
def cached_f(x):
    return math.sin(x) * x
'''


def test_njit_cache_true(tmp_path, monkeypatch):
    (tmp_path / "enzpy_cached_module.py").write_text(_CACHED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("enzpy_cached_module", None)
    mod = importlib.import_module("enzpy_cached_module")
    (dx,), = autodiff(Reverse, mod.cached_f, Active(0.7))
    assert dx == pytest.approx(math.cos(0.7) * 0.7 + math.sin(0.7))
