"""The scalar corpus: every function is differentiated with enzpy and checked
against central finite differences and, where simple, the analytic derivative.

Each case is ``C(id, f, args, expected)``: ``args`` are annotated arguments and
``expected(*values)`` (optional) returns the analytic adjoint of every argument
(``None`` for non-Active ones).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from enzpy import Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff
from helpers import check_reverse

A, K = Active, Const
f32 = np.float32


class C:
    def __init__(self, id, f, args, expected=None, rtol=1e-5, atol=1e-7):
        self.id, self.f, self.args, self.expected = id, f, list(args), expected
        self.rtol, self.atol = rtol, atol


CASES: list[C] = []


def case(id, f, args, expected=None, **kw):
    CASES.append(C(id, f, args, expected, **kw))


# =============================================================================
# arithmetic
# =============================================================================
@njit
def add(x, y):
    return x + y


@njit
def add_const(x):
    return x + 3.25


@njit
def sub(x, y):
    return x - y


@njit
def rsub(x):
    return 2.0 - x


@njit
def mul(x, y):
    return x * y


@njit
def square_mul(x):
    return x * x


@njit
def div(x, y):
    return x / y


@njit
def recip(x):
    return 1.0 / x


@njit
def neg(x):
    return -x


@njit
def neg_expr(x, y):
    return -(x * y) + x - (-y)


@njit
def poly(x):
    return 3.0 * x * x * x - 2.0 * x * x + x - 7.0


@njit
def rational(x, y):
    return (x * x + y) / (1.0 + x * y * y)


@njit
def fmod_op(x, y):
    return x % y


@njit
def fmod_const(x):
    return x % 1.5


@njit
def fmod_expr(x):
    return (x * x) % 2.0 * x


@njit
def mixed_int_float(x, n):
    return x * n + n / 4 + (x + 1) * 3 - n // 3


@njit
def int_to_float(x, n):
    return float(n) * x + float(n * n) / x


@njit
def int_literal_mix(x):
    return (x + 1) * 3 - 2 * x * x + 5 // 2 * x


@njit
def float_to_int(x):
    k = int(x)          # truncation: a step function, derivative 0
    return k * x + x


@njit
def int_div_by_float(n, x):
    return n / x


@njit
def inplace_ops(x, y):
    z = x
    z += y
    z *= x
    z -= 2.0 * y
    z /= (1.0 + y * y)
    return z


@njit
def f32_poly(x):
    return x * x * f32(3.0) + x / f32(2.0) - f32(1.0)


@njit
def f32_mixed(x, y):
    return x * y - y / x


@njit
def f32_math(x):
    return math.sin(x) * math.exp(x) + math.sqrt(x)


@njit
def f32_promote(x):
    return x * 2.5 + x * x  # float32 * float64 literal -> float64


@njit
def f32_loop(x, n):
    s = f32(0.0)
    for i in range(n):
        s = s * x + f32(1.0)
    return s


@njit
def f32_fmod(x, y):
    return x % y + -x


@njit
def f32_branch(x):
    if x > f32(1.0):
        return x * x
    return math.exp(x) - x


@njit
def f32_pow(x):
    return x ** f32(2.5) + np.exp2(x)


@njit
def f32_f64_mix(x, y):
    return x * y + math.sin(x) / y     # float32 and float64 Active together


@njit
def np_fmod(x, y):
    return np.fmod(x, y)   # C fmod (truncated), unlike Python %


@njit
def floordiv_float(x, y):
    return x * (x // y) + y


@njit
def pow_float_literal(x):
    return x ** 2.0 + x ** 3.0


case("add", add, [A(1.3), A(-0.7)], lambda x, y: (1.0, 1.0))
case("add_active_const", add, [A(1.3), K(-0.7)], lambda x, y: (1.0, None))
case("add_const_literal", add_const, [A(0.1)], lambda x: (1.0,))
case("sub", sub, [A(1.3), A(-0.7)], lambda x, y: (1.0, -1.0))
case("rsub", rsub, [A(0.4)], lambda x: (-1.0,))
case("mul", mul, [A(1.5), A(-2.5)], lambda x, y: (y, x))
case("mul_const_y", mul, [K(1.5), A(-2.5)], lambda x, y: (None, x))
case("square_mul", square_mul, [A(-1.7)], lambda x: (2 * x,))
case("div", div, [A(1.5), A(-2.5)], lambda x, y: (1 / y, -x / y ** 2))
case("recip", recip, [A(0.3)], lambda x: (-1 / x ** 2,))
case("neg", neg, [A(0.3)], lambda x: (-1.0,))
case("neg_expr", neg_expr, [A(0.3), A(2.0)], lambda x, y: (1 - y, 1 - x))
case("poly", poly, [A(1.1)], lambda x: (9 * x * x - 4 * x + 1,))
case("rational", rational, [A(0.8), A(1.2)],
     lambda x, y: ((2 * x * (1 + x * y * y) - (x * x + y) * y * y) / (1 + x * y * y) ** 2,
                   (1 * (1 + x * y * y) - (x * x + y) * 2 * x * y) / (1 + x * y * y) ** 2))
case("fmod_pos_pos", fmod_op, [A(5.3), A(2.0)], lambda x, y: (1.0, -math.floor(x / y)))
case("fmod_neg_pos", fmod_op, [A(-5.3), A(2.0)], lambda x, y: (1.0, -math.floor(x / y)))
case("fmod_pos_neg", fmod_op, [A(5.3), A(-2.0)], lambda x, y: (1.0, -math.floor(x / y)))
case("fmod_neg_neg", fmod_op, [A(-5.3), A(-2.0)], lambda x, y: (1.0, -math.floor(x / y)))
case("fmod_small", fmod_op, [A(0.7), A(2.0)], lambda x, y: (1.0, 0.0))
case("fmod_const_pos", fmod_const, [A(4.0)], lambda x: (1.0,))
case("fmod_const_neg", fmod_const, [A(-4.0)], lambda x: (1.0,))
case("fmod_expr", fmod_expr, [A(1.7)], lambda x: (2 * x * x + (x * x) % 2.0,))
case("mixed_int_float", mixed_int_float, [A(0.6), K(7)], lambda x, n: (n + 3.0, None))
case("int_to_float", int_to_float, [A(0.6), K(7)], lambda x, n: (n - n * n / x ** 2, None))
case("int_literal_mix", int_literal_mix, [A(0.6)], lambda x: (3 - 4 * x + 2,))
case("float_to_int", float_to_int, [A(2.6)], lambda x: (int(x) + 1.0,))
case("float_to_int_neg", float_to_int, [A(-2.6)], lambda x: (int(x) + 1.0,))
case("int_div_by_float", int_div_by_float, [K(7), A(0.6)], lambda n, x: (None, -n / x ** 2))
case("inplace_ops", inplace_ops, [A(0.6), A(-1.1)])
case("f32_poly", f32_poly, [A(f32(0.75))], lambda x: (6 * x + 0.5,))
case("f32_mixed", f32_mixed, [A(f32(0.75)), A(f32(1.5))],
     lambda x, y: (y + y / x ** 2, x - 1 / x))
case("f32_mixed_const", f32_mixed, [A(f32(0.75)), K(f32(1.5))],
     lambda x, y: (y + y / x ** 2, None))
case("f32_math", f32_math, [A(f32(0.6))],
     lambda x: (math.cos(x) * math.exp(x) + math.sin(x) * math.exp(x) + 0.5 / math.sqrt(x),))
case("f32_promote", f32_promote, [A(f32(0.6))], lambda x: (2.5 + 2 * x,))
case("f32_loop", f32_loop, [A(f32(0.6)), K(6)], lambda x, n: (sum(k * x ** (k - 1) for k in range(1, n)), None))

case("f32_fmod", f32_fmod, [A(f32(5.25)), A(f32(2.0))], lambda x, y: (0.0, -2.0))
case("f32_branch_hi", f32_branch, [A(f32(1.5))], lambda x: (2 * x,))
case("f32_branch_lo", f32_branch, [A(f32(0.5))], lambda x: (math.exp(x) - 1,))
case("f32_pow", f32_pow, [A(f32(1.5))], lambda x: (2.5 * x ** 1.5 + 2 ** x * math.log(2),))
case("f32_f64_mix", f32_f64_mix, [A(f32(0.5)), A(1.25)],
     lambda x, y: (y + math.cos(x) / y, x - math.sin(x) / y ** 2))
case("np_float64_active", mul, [A(np.float64(1.5)), A(np.float64(-0.5))], lambda x, y: (y, x))
case("np_fmod_pos", np_fmod, [A(5.3), A(2.0)], lambda x, y: (1.0, -2.0))
case("np_fmod_neg", np_fmod, [A(-5.3), A(2.0)], lambda x, y: (1.0, 2.0))
case("floordiv_float", floordiv_float, [A(5.3), A(2.0)], lambda x, y: (2.0, 1.0))
case("pow_float_literal", pow_float_literal, [A(-1.5)], lambda x: (2 * x + 3 * x * x,))


# =============================================================================
# powers
# =============================================================================
@njit
def pow_2(x):
    return x ** 2


@njit
def pow_3(x):
    return x ** 3


@njit
def pow_m2(x):
    return x ** -2


@njit
def pow_n(x, n):
    return x ** n


@njit
def pow_half(x):
    return x ** 0.5


@njit
def pow_xy(x, y):
    return x ** y


@njit
def pow_base(x):
    return 2.0 ** x


@njit
def math_pow(x, y):
    return math.pow(x, y)


@njit
def math_pow_3(x):
    return math.pow(x, 3.0)


@njit
def pow_f32_int(x):
    return x ** 3


case("pow_2", pow_2, [A(-1.3)], lambda x: (2 * x,))
case("pow_3", pow_3, [A(-1.3)], lambda x: (3 * x * x,))
case("pow_m2", pow_m2, [A(1.3)], lambda x: (-2 * x ** -3,))
case("pow_m2_neg", pow_m2, [A(-0.7)], lambda x: (-2 * x ** -3,))
case("pow_n_5", pow_n, [A(1.1), K(5)], lambda x, n: (n * x ** (n - 1), None))
case("pow_n_0", pow_n, [A(1.1), K(0)], lambda x, n: (0.0, None))
case("pow_n_1", pow_n, [A(1.1), K(1)], lambda x, n: (1.0, None))
case("pow_n_m3", pow_n, [A(1.1), K(-3)], lambda x, n: (n * x ** (n - 1), None))
case("pow_n_neg_base", pow_n, [A(-0.9), K(4)], lambda x, n: (n * x ** (n - 1), None))
case("pow_half", pow_half, [A(2.3)], lambda x: (0.5 / math.sqrt(x),))
case("pow_xy", pow_xy, [A(1.7), A(2.3)], lambda x, y: (y * x ** (y - 1), x ** y * math.log(x)))
case("pow_x_const_y", pow_xy, [A(1.7), K(2.3)], lambda x, y: (y * x ** (y - 1), None))
case("pow_base", pow_base, [A(0.7)], lambda x: (2 ** x * math.log(2),))
case("math_pow", math_pow, [A(1.7), A(-0.4)], lambda x, y: (y * x ** (y - 1), x ** y * math.log(x)))
case("math_pow_3", math_pow_3, [A(-1.2)], lambda x: (3 * x * x,))
case("pow_f32_int", pow_f32_int, [A(f32(1.25))], lambda x: (3 * x * x,))
# 0 ** y is 0 for every y > 0: d/dy is 0, not 0 * log(0) = nan
case("pow_zero_base", pow_xy, [K(0.0), A(0.5)], lambda x, y: (None, 0.0))
case("math_pow_zero_base", math_pow, [K(0.0), A(2.5)], lambda x, y: (None, 0.0))
case("pow_zero_base_f32", pow_xy, [K(f32(0.0)), A(f32(1.5))], lambda x, y: (None, 0.0))


# =============================================================================
# branches
# =============================================================================
@njit
def branch_ifelse(x):
    if x > 0.0:
        return x * x
    else:
        return -3.0 * x


@njit
def branch_ternary(x, y):
    return x * 2.0 if x < y else y * y * 3.0


@njit
def branch_nested(x):
    if x < 1.0:
        if x < -1.0:
            r = x * x * x
        else:
            r = math.sin(x)
    else:
        if x > 3.0:
            r = 1.0 / x
        else:
            r = x * math.log(x)
    return r


@njit
def branch_early_return(x, y):
    if x * y > 1.0:
        return x + y
    z = x * x
    if z > 0.5:
        return z * y
    return z - y


@njit
def branch_and(x, y):
    if x > 0.0 and y > 0.0:
        return x * y
    return x + y


@njit
def branch_or(x, y):
    if x > 1.0 or y < -1.0:
        return x * x * y
    return x - y * y


@njit
def branch_on_intermediate(x):
    t = math.sin(x) * 3.0
    if t > 1.0:
        u = t * x
    else:
        u = t - x
    return u * u


@njit
def branch_const_cond(x, flag):
    if flag:
        return math.exp(x)
    return math.cos(x)


@njit
def branch_phi(x):
    y = x
    if x > 2.0:
        y = x * 0.5
    elif x > 0.0:
        y = x * x
    return y + x


@njit
def max_const(x):
    return max(x, 1.0) * x


@njit
def min_const(x):
    return min(x, 1.0) * x


@njit
def max_two(x, y):
    return max(x, y)


@njit
def min_two(x, y):
    return min(x, y) * 2.0


@njit
def max_three(x, y, z):
    return max(x, y, z)


@njit
def clamp(x):
    return min(max(x, -1.0), 1.0) * 3.0


@njit
def abs_branch(x):
    return abs(x) * x


case("ifelse_pos", branch_ifelse, [A(0.7)], lambda x: (2 * x,))
case("ifelse_neg", branch_ifelse, [A(-0.7)], lambda x: (-3.0,))
case("ternary_lt", branch_ternary, [A(0.3), A(0.9)], lambda x, y: (2.0, 0.0))
case("ternary_ge", branch_ternary, [A(1.3), A(0.9)], lambda x, y: (0.0, 6 * y))
case("nested_lt_m1", branch_nested, [A(-1.5)], lambda x: (3 * x * x,))
case("nested_mid", branch_nested, [A(0.5)], lambda x: (math.cos(x),))
case("nested_gt_3", branch_nested, [A(3.5)], lambda x: (-1 / x ** 2,))
case("nested_1_to_3", branch_nested, [A(2.0)], lambda x: (math.log(x) + 1,))
case("early_return_first", branch_early_return, [A(1.5), A(1.0)], lambda x, y: (1.0, 1.0))
case("early_return_second", branch_early_return, [A(0.8), A(0.5)], lambda x, y: (2 * x * y, x * x))
case("early_return_third", branch_early_return, [A(0.5), A(0.5)], lambda x, y: (2 * x, -1.0))
case("and_true", branch_and, [A(0.5), A(0.7)], lambda x, y: (y, x))
case("and_false_first", branch_and, [A(-0.5), A(0.7)], lambda x, y: (1.0, 1.0))
case("and_false_second", branch_and, [A(0.5), A(-0.7)], lambda x, y: (1.0, 1.0))
case("or_first", branch_or, [A(1.5), A(0.7)], lambda x, y: (2 * x * y, x * x))
case("or_second", branch_or, [A(0.5), A(-1.7)], lambda x, y: (2 * x * y, x * x))
case("or_false", branch_or, [A(0.5), A(0.7)], lambda x, y: (1.0, -2 * y))
case("intermediate_true", branch_on_intermediate, [A(0.8)])
case("intermediate_false", branch_on_intermediate, [A(0.2)])
case("const_cond_true", branch_const_cond, [A(0.3), K(True)], lambda x, f: (math.exp(x), None))
case("const_cond_false", branch_const_cond, [A(0.3), K(False)], lambda x, f: (-math.sin(x), None))
case("phi_gt2", branch_phi, [A(2.5)], lambda x: (1.5,))
case("phi_mid", branch_phi, [A(1.5)], lambda x: (2 * x + 1,))
case("phi_neg", branch_phi, [A(-1.5)], lambda x: (2.0,))
case("max_const_above", max_const, [A(1.5)], lambda x: (2 * x,))
case("max_const_below", max_const, [A(0.5)], lambda x: (1.0,))
case("min_const_above", min_const, [A(1.5)], lambda x: (1.0,))
case("min_const_below", min_const, [A(0.5)], lambda x: (2 * x,))
case("max_two_x", max_two, [A(1.5), A(0.5)], lambda x, y: (1.0, 0.0))
case("max_two_y", max_two, [A(0.5), A(1.5)], lambda x, y: (0.0, 1.0))
case("min_two_x", min_two, [A(0.5), A(1.5)], lambda x, y: (2.0, 0.0))
case("min_two_y", min_two, [A(1.5), A(0.5)], lambda x, y: (0.0, 2.0))
case("max_three_z", max_three, [A(0.1), A(0.5), A(0.9)], lambda x, y, z: (0.0, 0.0, 1.0))
case("max_three_x", max_three, [A(1.1), A(0.5), A(0.9)], lambda x, y, z: (1.0, 0.0, 0.0))
case("clamp_low", clamp, [A(-1.5)], lambda x: (0.0,))
case("clamp_mid", clamp, [A(0.5)], lambda x: (3.0,))
case("clamp_high", clamp, [A(1.5)], lambda x: (0.0,))
case("abs_branch_pos", abs_branch, [A(0.8)], lambda x: (2 * abs(x),))
case("abs_branch_neg", abs_branch, [A(-0.8)], lambda x: (2 * abs(x),))


# =============================================================================
# shapes found by the generated-program tests (branches joined by a phi)
# =============================================================================
@njit
def div_branch_const_else(x):
    if x < 0.5:
        v = 1.0 / (x + 1.0)
    else:
        v = 0.0
    return v


@njit
def div_branch_default(x):
    v = 0.0
    if x < 0.5:
        v = x / math.exp(2.0 * x)
    return x + v


@njit
def div_branch_dead(x):
    if 0.5 > x:
        v = x / math.exp(math.sin(x))  # noqa: F841 (dead, but may raise)
    return x * 3.0


@njit
def neg_branch(x):
    if x < 0.5:
        v = 0.125
    else:
        v = -x
    return v * x


@njit
def neg_ternary(x, y):
    v = 0.125 if y < 0.5 else -x
    return v * x + y


case("div_branch_const_else_taken", div_branch_const_else, [A(0.3)], lambda x: (-1 / (x + 1) ** 2,))
case("div_branch_const_else_not", div_branch_const_else, [A(0.7)], lambda x: (0.0,))
case("div_branch_default_taken", div_branch_default, [A(0.3)],
     lambda x: (1 + (1 - 2 * x) * math.exp(-2 * x),))
case("div_branch_default_not", div_branch_default, [A(0.7)], lambda x: (1.0,))
case("div_branch_dead_taken", div_branch_dead, [A(0.3)], lambda x: (3.0,))
case("div_branch_dead_not", div_branch_dead, [A(0.7)], lambda x: (3.0,))
case("neg_branch_const", neg_branch, [A(0.3)], lambda x: (0.125,))
case("neg_branch_neg", neg_branch, [A(0.7)], lambda x: (-2 * x,))
case("neg_ternary_const", neg_ternary, [A(0.3), A(0.1)], lambda x, y: (0.125, 1.0))
case("neg_ternary_neg", neg_ternary, [A(0.3), A(0.7)], lambda x, y: (-2 * x, 1.0))


# =============================================================================
# loops
# =============================================================================
@njit
def loop_sum(x, n):
    s = 0.0
    for i in range(n):
        s += x * i + math.sin(x)
    return s


@njit
def loop_product(x, n):
    p = 1.0
    for i in range(n):
        p *= x
    return p


@njit
def loop_horner(x, n):
    s = 0.0
    for i in range(n):
        s = s * x + (i + 1.0)
    return s


@njit
def loop_sin_sum(x, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i)
    return s


@njit
def loop_two_carried(x, y, n):
    a, b = x, y
    for i in range(n):
        a, b = 0.5 * (a + b), math.sqrt(a * b)   # arithmetic-geometric mean
    return a + b


@njit
def while_halving(x, eps):
    while x > eps:
        x *= 0.5
    return x


@njit
def while_count(x):
    n = 0
    y = x
    while y > 0.1:
        y = y * 0.7 + 0.01
        n += 1
    return y * n


@njit
def newton_sqrt(a):
    y = a
    while abs(y * y - a) > 1e-13 * a:
        y = 0.5 * (y + a / y)
    return y


@njit
def while_reciprocal(x):
    # data-dependent trip count with a division in the body
    y = x
    while y > 1.0:
        y = 0.5 / y + y * 0.25
    return y


@njit
def fixed_point_cos(x):
    # y = x * cos(y) iterated to convergence
    y = 0.0
    for _ in range(200):
        y_new = x * math.cos(y)
        if abs(y_new - y) < 1e-15:
            break
        y = y_new
    return y


@njit
def loop_nested(x, n):
    s = 0.0
    for i in range(n):
        for j in range(i):
            s += x ** 2 * j - x * i
    return s


@njit
def loop_nested_product(x, y, n, m):
    s = 0.0
    for i in range(n):
        t = 1.0
        for j in range(m):
            t *= x + j * y
        s += t
    return s


@njit
def loop_break(x, n):
    s = 0.0
    for i in range(n):
        s += x * x * i
        if s > 10.0:
            break
    return s


@njit
def loop_continue(x, n):
    s = 0.0
    for i in range(n):
        if i % 3 == 0:
            continue
        s += math.cos(x * i)
    return s


@njit
def loop_conditional_update(x, n):
    s = x
    for i in range(n):
        if s > 1.0:
            s = s * 0.5
        else:
            s = s * s + 0.3
    return s


@njit
def loop_trip_from_x(x):
    n = int(x * 10.0)
    s = 0.0
    for i in range(n):
        s += x / (i + 1.0)
    return s


@njit
def loop_reverse_range(x, n):
    s = 1.0
    for i in range(n, 0, -1):
        s = s * x / i + 1.0
    return s


@njit
def loop_exp_series(x):
    term = 1.0
    s = 1.0
    for k in range(1, 30):
        term *= x / k
        s += term
    return s


case("loop_sum_0", loop_sum, [A(0.4), K(0)], lambda x, n: (0.0, None))
case("loop_sum_1", loop_sum, [A(0.4), K(1)], lambda x, n: (math.cos(x), None))
case("loop_sum_50", loop_sum, [A(0.4), K(50)],
     lambda x, n: (sum(i for i in range(n)) + n * math.cos(x), None))
case("loop_product_0", loop_product, [A(1.1), K(0)], lambda x, n: (0.0, None))
case("loop_product_1", loop_product, [A(1.1), K(1)], lambda x, n: (1.0, None))
case("loop_product_50", loop_product, [A(1.01), K(50)], lambda x, n: (n * x ** (n - 1), None))
case("loop_horner_8", loop_horner, [A(0.9), K(8)],
     lambda x, n: (sum((i + 1.0) * (n - 1 - i) * x ** (n - 2 - i) for i in range(n - 1)), None))
case("loop_sin_sum_100", loop_sin_sum, [A(0.4), K(100)],
     lambda x, n: (sum(i * math.cos(x * i) for i in range(n)), None))
case("loop_agm", loop_two_carried, [A(1.0), A(2.0), K(6)])
case("while_halving", while_halving, [A(3.0), K(0.01)], lambda x, e: (0.5 ** 9, None))
case("while_halving_none", while_halving, [A(0.001), K(0.01)], lambda x, e: (1.0, None))
case("while_count", while_count, [A(2.3)])
case("newton_sqrt", newton_sqrt, [A(2.0)], lambda a: (0.5 / math.sqrt(a),), rtol=1e-7)
case("newton_sqrt_big", newton_sqrt, [A(150.0)], lambda a: (0.5 / math.sqrt(a),), rtol=1e-7)
case("while_reciprocal", while_reciprocal, [A(3.0)])
case("while_reciprocal_none", while_reciprocal, [A(0.5)], lambda x: (1.0,))
case("fixed_point_cos", fixed_point_cos, [A(0.5)])
case("loop_nested_6", loop_nested, [A(0.7), K(6)])
case("loop_nested_0", loop_nested, [A(0.7), K(0)], lambda x, n: (0.0, None))
case("loop_nested_product", loop_nested_product, [A(0.7), A(0.2), K(4), K(3)])
case("loop_break_early", loop_break, [A(2.0), K(50)])
case("loop_break_never", loop_break, [A(0.05), K(50)],
     lambda x, n: (2 * x * sum(range(n)), None))
case("loop_continue", loop_continue, [A(0.3), K(20)],
     lambda x, n: (sum(-i * math.sin(x * i) for i in range(n) if i % 3), None))
case("loop_conditional_update", loop_conditional_update, [A(0.9), K(12)])
case("loop_trip_from_x", loop_trip_from_x, [A(1.23)],
     lambda x: (sum(1 / (i + 1.0) for i in range(int(10 * x))),))
case("loop_reverse_range", loop_reverse_range, [A(0.8), K(7)])
case("loop_exp_series", loop_exp_series, [A(0.9)], lambda x: (math.exp(x),), rtol=1e-9)


# =============================================================================
# math functions (math module)
# =============================================================================
# (id, njit function, point, derivative)
MATH_UNARY = [
    ("sin", njit(lambda x: math.sin(x)), 0.7, lambda x: math.cos(x)),
    ("cos", njit(lambda x: math.cos(x)), 0.7, lambda x: -math.sin(x)),
    ("tan", njit(lambda x: math.tan(x)), 0.7, lambda x: 1 / math.cos(x) ** 2),
    ("asin", njit(lambda x: math.asin(x)), 0.3, lambda x: 1 / math.sqrt(1 - x * x)),
    ("acos", njit(lambda x: math.acos(x)), 0.3, lambda x: -1 / math.sqrt(1 - x * x)),
    ("atan", njit(lambda x: math.atan(x)), 1.7, lambda x: 1 / (1 + x * x)),
    ("sinh", njit(lambda x: math.sinh(x)), 0.7, lambda x: math.cosh(x)),
    ("cosh", njit(lambda x: math.cosh(x)), -0.7, lambda x: math.sinh(x)),
    ("tanh", njit(lambda x: math.tanh(x)), 0.7, lambda x: 1 - math.tanh(x) ** 2),
    ("asinh", njit(lambda x: math.asinh(x)), -1.7, lambda x: 1 / math.sqrt(x * x + 1)),
    ("acosh", njit(lambda x: math.acosh(x)), 1.7, lambda x: 1 / math.sqrt(x * x - 1)),
    ("atanh", njit(lambda x: math.atanh(x)), 0.4, lambda x: 1 / (1 - x * x)),
    ("exp", njit(lambda x: math.exp(x)), 0.7, lambda x: math.exp(x)),
    ("expm1", njit(lambda x: math.expm1(x)), 1e-3, lambda x: math.exp(x)),
    ("log", njit(lambda x: math.log(x)), 0.7, lambda x: 1 / x),
    ("log2", njit(lambda x: math.log2(x)), 0.7, lambda x: 1 / (x * math.log(2))),
    ("log10", njit(lambda x: math.log10(x)), 7.0, lambda x: 1 / (x * math.log(10))),
    ("log1p", njit(lambda x: math.log1p(x)), 1e-3, lambda x: 1 / (1 + x)),
    ("sqrt", njit(lambda x: math.sqrt(x)), 0.7, lambda x: 0.5 / math.sqrt(x)),
    ("fabs_pos", njit(lambda x: math.fabs(x)), 0.7, lambda x: 1.0),
    ("fabs_neg", njit(lambda x: math.fabs(x) * 2.0), -0.7, lambda x: -2.0),
    ("abs_builtin_neg", njit(lambda x: abs(x)), -0.7, lambda x: -1.0),
    ("erf", njit(lambda x: math.erf(x)), 0.4, lambda x: 2 / math.sqrt(math.pi) * math.exp(-x * x)),
    ("erfc", njit(lambda x: math.erfc(x)), 0.4, lambda x: -2 / math.sqrt(math.pi) * math.exp(-x * x)),
    ("exp_neg_sq", njit(lambda x: math.exp(-x * x)), 0.6, lambda x: -2 * x * math.exp(-x * x)),
    ("log_of_sin", njit(lambda x: math.log(math.sin(x))), 0.6, lambda x: math.cos(x) / math.sin(x)),
    ("sqrt_of_poly", njit(lambda x: math.sqrt(1.0 + x * x)), -0.6, lambda x: x / math.sqrt(1 + x * x)),
    ("sin_of_exp", njit(lambda x: math.sin(math.exp(x))), 0.6, lambda x: math.cos(math.exp(x)) * math.exp(x)),
    # integer-valued functions: zero derivative, checked through the product rule
    ("x_floor", njit(lambda x: x * math.floor(x)), 2.6, lambda x: math.floor(x)),
    ("x_ceil", njit(lambda x: x * math.ceil(x)), 2.6, lambda x: math.ceil(x)),
    ("x_trunc", njit(lambda x: x * math.trunc(x)), -2.6, lambda x: math.trunc(x)),
    ("x_round", njit(lambda x: x * round(x)), 2.7, lambda x: round(x)),
    ("x_round_neg", njit(lambda x: x * round(x)), -2.3, lambda x: round(x)),
    ("floor_expr", njit(lambda x: math.sin(x) * math.floor(3.0 * x) + math.ceil(x)), 1.3,
     lambda x: math.cos(x) * math.floor(3 * x)),
]

for _id, _f, _x, _d in MATH_UNARY:
    case(f"math_{_id}", _f, [A(_x)], (lambda d: (lambda x: (d(x),)))(_d))


@njit
def atan2_fn(y, x):
    return math.atan2(y, x)


@njit
def hypot_fn(x, y):
    return math.hypot(x, y)


@njit
def copysign_fn(x, y):
    return math.copysign(x, y)


case("atan2_q1", atan2_fn, [A(0.5), A(1.5)], lambda y, x: (x / (x * x + y * y), -y / (x * x + y * y)))
case("atan2_q3", atan2_fn, [A(-0.5), A(-1.5)], lambda y, x: (x / (x * x + y * y), -y / (x * x + y * y)))
case("hypot", hypot_fn, [A(3.0), A(-4.0)], lambda x, y: (x / 5.0, y / 5.0))
case("copysign_same", copysign_fn, [A(1.5), A(2.0)], lambda x, y: (1.0, 0.0))
case("copysign_flip", copysign_fn, [A(1.5), A(-2.0)], lambda x, y: (-1.0, 0.0))
case("copysign_neg_x", copysign_fn, [A(-1.5), A(2.0)], lambda x, y: (-1.0, 0.0))


@njit
def ldexp_fn(x, n):
    return math.ldexp(x, n) * x


case("ldexp", ldexp_fn, [A(0.7), K(3)], lambda x, n: (2.0 * 8.0 * x, None))
case("ldexp_negative_exponent", ldexp_fn, [A(-1.3), K(-2)], lambda x, n: (2.0 * x / 4.0, None))
case("ldexp_f32", ldexp_fn, [A(f32(0.7)), K(3)], lambda x, n: (2.0 * 8.0 * x, None))

# =============================================================================
# numpy scalar functions
# =============================================================================
NP_UNARY = [
    ("np_sin", njit(lambda x: np.sin(x)), 0.7, lambda x: math.cos(x)),
    ("np_cos", njit(lambda x: np.cos(x)), 0.7, lambda x: -math.sin(x)),
    ("np_tan", njit(lambda x: np.tan(x)), 0.7, lambda x: 1 / math.cos(x) ** 2),
    ("np_arcsin", njit(lambda x: np.arcsin(x)), 0.3, lambda x: 1 / math.sqrt(1 - x * x)),
    ("np_arccos", njit(lambda x: np.arccos(x)), 0.3, lambda x: -1 / math.sqrt(1 - x * x)),
    ("np_arctan", njit(lambda x: np.arctan(x)), 0.3, lambda x: 1 / (1 + x * x)),
    ("np_sinh", njit(lambda x: np.sinh(x)), 0.3, lambda x: math.cosh(x)),
    ("np_cosh", njit(lambda x: np.cosh(x)), 0.3, lambda x: math.sinh(x)),
    ("np_tanh", njit(lambda x: np.tanh(x)), 0.3, lambda x: 1 - math.tanh(x) ** 2),
    ("np_exp", njit(lambda x: np.exp(x)), 0.7, lambda x: math.exp(x)),
    ("np_exp2", njit(lambda x: np.exp2(x)), 0.7, lambda x: 2 ** x * math.log(2)),
    ("np_expm1", njit(lambda x: np.expm1(x)), 0.7, lambda x: math.exp(x)),
    ("np_log", njit(lambda x: np.log(x)), 0.7, lambda x: 1 / x),
    ("np_log2", njit(lambda x: np.log2(x)), 0.7, lambda x: 1 / (x * math.log(2))),
    ("np_log10", njit(lambda x: np.log10(x)), 0.7, lambda x: 1 / (x * math.log(10))),
    ("np_log1p", njit(lambda x: np.log1p(x)), 0.7, lambda x: 1 / (1 + x)),
    ("np_sqrt", njit(lambda x: np.sqrt(x)), 0.7, lambda x: 0.5 / math.sqrt(x)),
    ("np_cbrt", njit(lambda x: np.cbrt(x)), 0.7, lambda x: x ** (-2 / 3) / 3),
    ("np_abs", njit(lambda x: np.abs(x)), -0.7, lambda x: -1.0),
    ("np_square", njit(lambda x: np.square(x)), -0.7, lambda x: 2 * x),
    ("np_power", njit(lambda x: np.power(x, 2.5)), 0.7, lambda x: 2.5 * x ** 1.5),
    ("np_x_floor", njit(lambda x: x * np.floor(x)), 1.7, lambda x: math.floor(x)),
    ("np_x_ceil", njit(lambda x: x * np.ceil(x)), 1.7, lambda x: math.ceil(x)),
    ("np_x_trunc", njit(lambda x: x * np.trunc(x)), -1.7, lambda x: math.trunc(x)),
    ("np_x_rint", njit(lambda x: x * np.rint(x)), 1.7, lambda x: 2.0),
]

for _id, _f, _x, _d in NP_UNARY:
    case(_id, _f, [A(_x)], (lambda d: (lambda x: (d(x),)))(_d))


@njit
def np_arctan2(y, x):
    return np.arctan2(y, x)


@njit
def np_hypot(x, y):
    return np.hypot(x, y)


@njit
def np_maximum(x, y):
    return np.maximum(x, y) + np.minimum(x, y) * 2.0


@njit
def np_power2(x, y):
    return np.power(x, y)


case("np_arctan2", np_arctan2, [A(-0.5), A(1.5)], lambda y, x: (x / (x * x + y * y), -y / (x * x + y * y)))
case("np_hypot", np_hypot, [A(0.5), A(1.5)], lambda x, y: (x / math.hypot(x, y), y / math.hypot(x, y)))
case("np_maximum_x", np_maximum, [A(1.5), A(0.5)], lambda x, y: (1.0, 2.0))
case("np_maximum_y", np_maximum, [A(0.5), A(1.5)], lambda x, y: (2.0, 1.0))
case("np_power_xy", np_power2, [A(1.5), A(0.5)], lambda x, y: (y * x ** (y - 1), x ** y * math.log(x)))


# =============================================================================
# calls between @njit functions
# =============================================================================
@njit
def h_sq(x):
    return x * x


@njit
def h_smooth(x, y):
    return math.sin(x) * y + math.exp(-y * x)


@njit
def h_branch(x):
    if x > 0.0:
        return x * 2.0
    return -x * x


@njit
def call_once(x):
    return h_sq(x) + 1.0


@njit
def call_several(x, y):
    return h_smooth(x, y) * h_smooth(y, x) + h_sq(h_smooth(x, 0.5))


@njit
def call_in_loop(x, n):
    s = 0.0
    for i in range(n):
        s += h_smooth(x, i * 0.1) + h_sq(s * 0.1)
    return s


@njit
def call_nested(x):
    return h_sq(h_sq(h_sq(x))) + call_once(x)


@njit
def call_branchy(x, y):
    return h_branch(x) * h_branch(y) + h_branch(x - y)


@njit
def h_int_arg(x, k):
    return x ** k + k


@njit
def call_with_int(x, n):
    s = 0.0
    for k in range(n):
        s += h_int_arg(x, k)
    return s


@njit
def h_returns_int(x):
    return int(x * 3.0)


@njit
def call_int_helper(x):
    return h_returns_int(x) * x


@njit
def h_tuple(x, y):
    return x * y, x + y


@njit
def call_tuple_helper(x, y):
    a, b = h_tuple(x, y)
    return a * b


@njit
def h_fact(x, n):
    if n <= 0:
        return 1.0
    return x * h_fact(x, n - 1)


@njit
def call_recursive(x, n):
    return h_fact(x, n) + h_fact(x + 1.0, n - 3)


@njit
def call_recursive_literal(x):
    # the literal 2 makes Numba compile h_fact for (float64, Literal[int](2))
    return h_fact(x, 2)


case("call_once", call_once, [A(0.7)], lambda x: (2 * x,))
case("call_several", call_several, [A(0.7), A(1.3)])
case("call_several_const_y", call_several, [A(0.7), K(1.3)])
case("call_in_loop", call_in_loop, [A(0.7), K(10)])
case("call_nested", call_nested, [A(0.9)], lambda x: (8 * x ** 7 + 2 * x,))
case("call_branchy_pp", call_branchy, [A(0.9), A(0.4)])
case("call_branchy_pn", call_branchy, [A(0.9), A(-0.4)])
case("call_branchy_np", call_branchy, [A(-0.9), A(0.4)])
case("call_with_int", call_with_int, [A(0.9), K(5)],
     lambda x, n: (sum(k * x ** (k - 1) for k in range(1, n)), None))
case("call_int_helper", call_int_helper, [A(0.9)], lambda x: (int(3 * x),))
case("call_tuple_helper", call_tuple_helper, [A(0.9), A(0.4)],
     lambda x, y: (y * (x + y) + x * y, x * (x + y) + x * y))
case("call_recursive", call_recursive, [A(0.9), K(5)],
     lambda x, n: (n * x ** (n - 1) + 2 * (x + 1), None))
case("call_recursive_literal", call_recursive_literal, [A(0.9)], lambda x: (2 * x,))


# =============================================================================
# several Active arguments; Active/Const mixes
# =============================================================================
@njit
def four_args(a, b, c, d):
    return a * b * c * d + math.sin(a - d) * c / b


@njit
def mix_args(a, k, b, s, n):
    r = 0.0
    for i in range(n):
        r += a * k + b * s * i
    return r * b


def plain_python_fn(x, y, z):
    # not decorated: autodiff jits it on the fly
    return math.exp(x * 0.5) * y - z * z * x + math.atan2(y, z)


case("four_actives", four_args, [A(0.3), A(1.2), A(-0.4), A(0.8)])
case("four_two_active", four_args, [K(0.3), A(1.2), K(-0.4), A(0.8)])
case("four_none_active_but_last", four_args, [K(0.3), K(1.2), K(-0.4), A(0.8)],
     lambda a, b, c, d: (None, None, None, a * b * c - math.cos(a - d) * c / b))
case("mix_args", mix_args, [A(0.5), K(2.0), A(-1.5), K(0.25), K(4)],
     lambda a, k, b, s, n: (n * k * b, None, n * a * k + 2 * b * s * sum(range(n)), None, None))
case("mix_args_unannotated", mix_args, [A(0.5), 2.0, A(-1.5), 0.25, 4],
     lambda a, k, b, s, n: (n * k * b, None, n * a * k + 2 * b * s * sum(range(n)), None, None))
case("plain_python_fn", plain_python_fn, [A(0.3), A(1.2), A(-0.4)])
case("plain_python_lambda", lambda x, y: x * y * y - 1.0 / x, [A(0.3), A(1.2)],
     lambda x, y: (y * y + 1 / x ** 2, 2 * x * y))


# =============================================================================
# results independent of the Active inputs; int and bool results
# =============================================================================
@njit
def const_result(x):
    return 3.0


@njit
def ignores_x(x, y):
    return y * 2.0


@njit
def cancels(x):
    return x - x + 1.5


@njit
def times_zero(x, y):
    return x * 0.0 + y


@njit
def returns_int(x):
    return int(x * 10.0)


@njit
def returns_int_loop(x, n):
    k = 0
    for i in range(n):
        if x * i > 1.0:
            k += i
    return k


@njit
def returns_bool(x, y):
    return x * x > y


@njit
def returns_bool_expr(x):
    return math.sin(x) > 0.5 and x < 2.0


case("const_result", const_result, [A(0.3)], lambda x: (0.0,))
case("ignores_x", ignores_x, [A(0.3), K(1.5)], lambda x, y: (0.0, None))
case("ignores_x_both_active", ignores_x, [A(0.3), A(1.5)], lambda x, y: (0.0, 2.0))
case("cancels", cancels, [A(0.3)], lambda x: (0.0,))
case("times_zero", times_zero, [A(0.3), A(0.2)], lambda x, y: (0.0, 1.0))
case("returns_int", returns_int, [A(0.37)], lambda x: (0.0,))
case("returns_int_loop", returns_int_loop, [A(0.37), K(10)], lambda x, n: (0.0, None))
case("returns_bool_true", returns_bool, [A(0.9), A(0.5)], lambda x, y: (0.0, 0.0))
case("returns_bool_false", returns_bool, [A(0.5), A(0.9)], lambda x, y: (0.0, 0.0))
case("returns_bool_expr", returns_bool_expr, [A(0.9)], lambda x: (0.0,))


# =============================================================================
# the test
# =============================================================================
_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), "duplicate case ids"


@pytest.mark.parametrize("c", CASES, ids=_ids)
def test_scalar_corpus(c):
    check_reverse(c.f, c.args, rtol=c.rtol, atol=c.atol, expected=c.expected)


def test_corpus_size():
    distinct = {id(c.f) for c in CASES}
    assert len(distinct) >= 70, len(distinct)


def test_reverse_mode_returns_one_tuple():
    out = autodiff(Reverse, mul, Active(1.5), Const(2.0))
    assert isinstance(out, tuple) and len(out) == 1
    (dx, dy), = out
    assert dx == 2.0 and dy is None


@njit
def weighted_powers(x, w):
    s = 0.0
    for i in range(w.size):
        s += w[i] ** x
    return s


def test_zero_base_power_in_forward_mode_and_second_order():
    """Weights that are 0 contribute nothing to d/dx sum(w ** x), in every mode."""
    import enzpy
    x, w = 0.5, np.array([0.0, 0.5, 2.0])
    live = w[1:]
    (t,) = autodiff(Forward, weighted_powers, Duplicated(x, 1.0), Const(w))
    assert t == pytest.approx((live ** x * np.log(live)).sum(), rel=1e-12)
    h = enzpy.hvp(weighted_powers, x, 1.0, w)
    assert float(h) == pytest.approx((live ** x * np.log(live) ** 2).sum(), rel=1e-12)


@njit
def poly_float_exponents(x, c):
    s = 0.0
    for k in range(c.size):
        s += c[k] * x ** float(k)
    return s


@njit
def poly_int_exponents(x, c):
    s = 0.0
    for k in range(c.size):
        s += c[k] * x ** k
    return s


@pytest.mark.parametrize("p", [poly_float_exponents, poly_int_exponents])
@pytest.mark.parametrize("x", [0.0, 0.5])
def test_polynomial_derivatives_at_zero(p, x):
    """x ** 0 is 1 everywhere and x ** 1 is x: at x = 0 their derivatives are
    0 and 1 and their second derivatives 0, not nan from 0 * 0 ** -1."""
    import enzpy
    c = np.array([1.0, 2.0, 3.0, 4.0])
    d1 = 2 + 6 * x + 12 * x ** 2
    d2 = 6 + 24 * x
    (g, _), = autodiff(Reverse, p, Active(x), Const(c))
    (t,) = autodiff(Forward, p, Duplicated(x, 1.0), Const(c))
    assert g == pytest.approx(d1, rel=1e-12) and t == pytest.approx(d1, rel=1e-12)
    assert float(enzpy.hvp(p, x, 1.0, c)) == pytest.approx(d2, rel=1e-12)


@njit
def hypot_squared(x, y):
    return math.hypot(x, y) ** 2


def test_hypot_at_the_origin_takes_the_zero_subgradient():
    """hypot's kink at (0, 0): its gradient there is 0 (not 0/0 = nan), so
    hypot(x, y)**2 has its true gradient (0, 0) in both modes."""
    (gx, gy), = autodiff(Reverse, hypot_squared, Active(0.0), Active(0.0))
    (t,) = autodiff(Forward, hypot_squared, Duplicated(0.0, 1.0), Duplicated(0.0, 2.0))
    assert (gx, gy, t) == (0.0, 0.0, 0.0)
    (gx, gy), = autodiff(Reverse, hypot_squared, Active(0.3), Active(-0.4))
    assert (gx, gy) == (pytest.approx(0.6), pytest.approx(-0.8))


def test_float32_primal_and_adjoint():
    (dx,), y = autodiff(ReverseWithPrimal, f32_poly, Active(f32(0.75)))
    assert y == float(f32_poly(f32(0.75)))
    assert abs(float(dx) - (6 * 0.75 + 0.5)) < 1e-5
