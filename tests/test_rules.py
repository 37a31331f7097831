"""Custom derivative rules (defvjp / defjvp / inactive) written as @njit functions."""
import collections
import ctypes
import ctypes.util
import enum
import math

import numba
import numpy as np
import pytest
from numba import njit
from numba.experimental import jitclass

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, Reverse, UnsupportedError, autodiff,
                   check_rule, clear_rules, defjvp, defvjp, inactive)
from enzpy.errors import RuleError


def fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# -- a rule that is observably used: straight-through rounding -------------------------------
@njit
def round_ste(x):
    return np.round(x)


@njit
def _round_fwd(x):
    return np.round(x), 0.0


@njit
def _round_bwd(res, g):
    return (g,)                     # straight through: as if round were the identity


@njit
def _round_jvp(primals, tangents):
    return np.round(primals[0]), tangents[0]


defvjp(round_ste, _round_fwd, _round_bwd)
defjvp(round_ste, _round_jvp)


@njit
def quantized_loss(x):
    return round_ste(x * 3.0) ** 2


def test_straight_through_estimator_is_used():
    (dx,), = autodiff(Reverse, quantized_loss, Active(0.4))
    assert dx == pytest.approx(2 * round(1.2) * 3.0)          # the true derivative is 0
    (t,) = autodiff(Forward, quantized_loss, Duplicated(0.4, 1.0))
    assert t == pytest.approx(6.0)
    (d,), = autodiff(Reverse, round_ste, Active(2.6))          # at the top level too
    assert d == 1.0


# -- a numerically stable rule: log(1 + exp(x)) at +-800 ---------------------------------------
@njit
def log1pexp(x):
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@njit
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


@njit
def _log1pexp_fwd(x):
    return log1pexp(x), x


@njit
def _log1pexp_bwd(x, g):
    return (g * _sigmoid(x),)


@njit
def _log1pexp_jvp(primals, tangents):
    return log1pexp(primals[0]), tangents[0] * _sigmoid(primals[0])


@njit
def softplus_sum(x, w):
    s = 0.0
    for i in range(w.size):
        s += log1pexp(x * w[i])
    return s


def test_stable_rule_at_plus_and_minus_800():
    defvjp(log1pexp, _log1pexp_fwd, _log1pexp_bwd)
    defjvp(log1pexp, _log1pexp_jvp)
    try:
        w = np.array([800.0, -800.0, 1.0])
        (dx, _), = autodiff(Reverse, softplus_sum, Active(1.0), Const(w))
        expected = 800.0 * 1.0 + (-800.0) * 0.0 + _sigmoid(1.0)
        assert math.isfinite(dx) and dx == pytest.approx(expected)
        (t,) = autodiff(Forward, softplus_sum, Duplicated(1.0, 1.0), Const(w))
        assert t == pytest.approx(expected)
        hv = enzpy.hvp(softplus_sum, 0.3, 1.0, np.array([1.0, -2.0]))
        s1, s2 = _sigmoid(0.3), _sigmoid(-0.6)
        assert hv == pytest.approx(s1 * (1 - s1) + 4 * s2 * (1 - s2))
        assert check_rule(log1pexp, 0.7).worst_relative_error < 1e-6
    finally:
        clear_rules(log1pexp)


# -- implicit differentiation of a Newton solve ------------------------------------------------
@njit
def _residual(x, a):
    return x ** 3 + a * x - 1.0


@njit
def newton_root(a):
    x = 1.0
    for _ in range(50):
        x -= _residual(x, a) / (3.0 * x ** 2 + a)
    return x


@njit
def _root_fwd(a):
    x = newton_root(a)
    return x, (x, a)


@njit
def _root_bwd(res, g):
    x, a = res
    # F(x(a), a) = 0: dx/da = -F_a / F_x, one "linear solve" with F_x
    return (-g * x / (3.0 * x ** 2 + a),)


@njit
def root_squared(a):
    return newton_root(a) ** 2


def test_implicit_differentiation_of_a_newton_solve():
    a = 1.7
    (unrolled,), = autodiff(Reverse, root_squared, Active(a))     # through the iterations
    defvjp(newton_root, _root_fwd, _root_bwd)
    try:
        (implicit,), = autodiff(Reverse, root_squared, Active(a))
    finally:
        clear_rules(newton_root)
    assert implicit == pytest.approx(unrolled, rel=1e-9)
    assert implicit == pytest.approx(fd(root_squared, a), rel=1e-6)


# -- a C function through ctypes: lgamma with a digamma rule, in a loop ------------------------
_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_c_lgamma = _libm.lgamma
_c_lgamma.restype = ctypes.c_double
_c_lgamma.argtypes = [ctypes.c_double]


@njit
def lgamma(x):
    return _c_lgamma(x)


@njit
def _digamma(x):
    result = 0.0
    while x < 6.0:
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    return result + math.log(x) - 0.5 / x - f * (1.0 / 12 - f * (1.0 / 120 - f / 252))


@njit
def _lgamma_fwd(x):
    return lgamma(x), x


@njit
def _lgamma_bwd(x, g):
    return (g * _digamma(x),)


@njit
def _lgamma_jvp(primals, tangents):
    return lgamma(primals[0]), tangents[0] * _digamma(primals[0])


@njit
def log_likelihood(alpha, data):
    s = 0.0
    for i in range(data.size):
        s += lgamma(alpha * data[i]) - alpha * data[i]
    return s


def test_ctypes_function_without_a_rule_points_to_defvjp():
    clear_rules(lgamma)
    with pytest.raises(UnsupportedError, match="defvjp"):
        autodiff(Reverse, log_likelihood, Active(1.5), Const(np.array([1.0, 2.0])))


def test_ctypes_function_with_a_rule_in_a_loop():
    defvjp(lgamma, _lgamma_fwd, _lgamma_bwd)
    defjvp(lgamma, _lgamma_jvp)
    try:
        data = np.array([1.0, 2.5, 0.7])
        (da, _), = autodiff(Reverse, log_likelihood, Active(1.5), Const(data))
        assert da == pytest.approx(fd(lambda a: log_likelihood(a, data), 1.5), rel=1e-6)
        (t,) = autodiff(Forward, log_likelihood, Duplicated(1.5, 1.0), Const(data))
        assert t == pytest.approx(da, rel=1e-12)
        assert check_rule(lgamma, 3.3).worst_relative_error < 1e-6
    finally:
        clear_rules(lgamma)


# -- array arguments, tuple residuals, array results ---------------------------------------------
@njit
def scaled_softmax(x, t):
    z = np.exp((x - x.max()) / t)
    return z / z.sum()


@njit
def _softmax_fwd(x, t):
    y = scaled_softmax(x, t)
    return y, (y, t)


@njit
def _softmax_bwd(res, g):
    y, t = res
    gz = y * (g - (g * y).sum())                 # through the normalization
    return gz / t, -(gz * np.log(y)).sum() / t


@njit
def _softmax_jvp(primals, tangents):
    x, t = primals
    dx, dt = tangents
    y = scaled_softmax(x, t)
    s = dx / t - dt * np.log(y) / t
    return y, y * (s - (y * s).sum())


@njit
def weighted_softmax(x, t, w):
    return (scaled_softmax(x, t) * w).sum() + (x * x).sum()


def test_rule_with_array_arguments_and_results():
    x = np.array([0.3, -1.2, 2.0, 0.5])
    w = np.array([1.0, -2.0, 0.5, 3.0])
    unrolled = np.zeros_like(x)
    ((_, dt_unrolled, _),) = autodiff(Reverse, weighted_softmax, Duplicated(x, unrolled),
                                      Active(1.3), Const(w))
    defvjp(scaled_softmax, _softmax_fwd, _softmax_bwd)
    defjvp(scaled_softmax, _softmax_jvp)
    try:
        dx = np.zeros_like(x)
        ((_, dt, _),) = autodiff(Reverse, weighted_softmax, Duplicated(x, dx), Active(1.3),
                                 Const(w))
        np.testing.assert_allclose(dx, unrolled, rtol=1e-10)
        assert dt == pytest.approx(dt_unrolled, rel=1e-10)
        direction = np.array([1.0, 0.5, -0.25, 2.0])
        (tangent,) = autodiff(Forward, weighted_softmax, Duplicated(x, direction.copy()),
                              Duplicated(1.3, 0.0), Const(w))
        assert tangent == pytest.approx(dx @ direction, rel=1e-10)
        hv = enzpy.hvp(weighted_softmax, x, direction, 1.3, w)
        eps = 1e-6
        ref = (enzpy.gradient(weighted_softmax, x + eps * direction, 1.3, w)
               - enzpy.gradient(weighted_softmax, x - eps * direction, 1.3, w)) / (2 * eps)
        np.testing.assert_allclose(hv, ref, rtol=1e-5, atol=1e-7)
        assert check_rule(scaled_softmax, x, 1.3).worst_relative_error < 1e-5
    finally:
        clear_rules(scaled_softmax)


# -- a rule returning an array, called in a loop ---------------------------------------------
@njit
def half_square(x):
    return 0.5 * x * x


@njit
def _half_square_fwd(x):
    return 0.5 * x * x, x.copy()


@njit
def _half_square_bwd(x, g):
    return (x * g,)


@njit
def _half_square_pair(x):
    return half_square(x), np.sum(x)


@njit
def _half_square_pair_fwd(x):
    return (0.5 * x * x, np.sum(x)), x.copy()


@njit
def _half_square_pair_bwd(x, g):
    return (x * g[0] + g[1],)


@njit
def iterate_rule(w, n):
    x = np.array([1.0, 2.0]) * w
    for _ in range(n):
        x = half_square(x)          # the result replaces the loop variable
    return x[0] + x[1]


@njit
def accumulate_rule(w, n):
    x = np.array([1.0, 2.0]) * w
    s = 0.0
    for i in range(n):
        s += np.sum(half_square(x * (i + 1.0)))
    return s


@njit
def accumulate_pair_rule(w, n):
    x = np.array([1.0, 2.0]) * w
    s = 0.0
    for i in range(n):
        a, b = _half_square_pair(x * (i + 1.0))
        s += np.sum(a) * b
    return s


def test_rule_returning_an_array_in_a_loop():
    # Each call's reverse must use that call's own result shadow: the caller's
    # slot for it is overwritten by the next iteration (this once read the last
    # call's freed shadow: a wrong derivative or a corrupted heap).
    defvjp(half_square, _half_square_fwd, _half_square_bwd)
    defvjp(_half_square_pair, _half_square_pair_fwd, _half_square_pair_bwd)
    try:
        for f in (iterate_rule, accumulate_rule, accumulate_pair_rule):
            for n in (0, 1, 3):
                ((dw, _),) = autodiff(Reverse, f, Active(0.9), Const(n))
                want = fd(lambda w: f.py_func(w, n), 0.9)
                assert dw == pytest.approx(want, rel=1e-6, abs=1e-9), (f.__name__, n)
    finally:
        clear_rules(half_square)
        clear_rules(_half_square_pair)


# -- a rule on a recursive function ------------------------------------------------------------
@njit
def power_tower(x, n):
    if n == 0:
        return x
    return x * power_tower(x, n - 1)


@njit
def _tower_fwd(x, n):
    return power_tower(x, n), (x, n)


@njit
def _tower_bwd(res, g):
    x, n = res
    return g * (n + 1) * x ** n * 10.0, None          # deliberately 10x: observable


def test_rule_on_a_recursive_function():
    (d, _), = autodiff(Reverse, power_tower, Active(1.1), Const(3))
    assert d == pytest.approx(4 * 1.1 ** 3)
    defvjp(power_tower, _tower_fwd, _tower_bwd)
    try:
        (d, _), = autodiff(Reverse, power_tower, Active(1.1), Const(3))   # rebuilt with the rule
        assert d == pytest.approx(40 * 1.1 ** 3)
    finally:
        clear_rules(power_tower)
    (d, _), = autodiff(Reverse, power_tower, Active(1.1), Const(3))
    assert d == pytest.approx(4 * 1.1 ** 3)


# -- inactive functions --------------------------------------------------------------------------
@njit
def noisy_scale(x):
    return x * 2.0


@njit
def with_inactive(x):
    return noisy_scale(x) * x


def test_inactive_function_carries_no_derivative():
    inactive(noisy_scale)
    try:
        (d,), = autodiff(Reverse, with_inactive, Active(1.5))
        assert d == pytest.approx(3.0)                    # only the second factor
        (t,) = autodiff(Forward, with_inactive, Duplicated(1.5, 1.0))
        assert t == pytest.approx(3.0)
    finally:
        clear_rules(noisy_scale)
    (d,), = autodiff(Reverse, with_inactive, Active(1.5))
    assert d == pytest.approx(6.0)


# -- inside @njit code, gradient, check_gradient -------------------------------------------------
@njit
def _double_bwd(res, g):
    return (2.0 * g,)


@njit
def _id_fwd(x):
    return x * 1.0, 0.0


@njit
def identity_doubled(x):
    return x * 1.0


@njit
def newton_like(x):
    (d,), = autodiff(Reverse, identity_doubled, Active(x))
    return d


def test_rule_used_inside_njit_and_by_helpers():
    defvjp(identity_doubled, _id_fwd, _double_bwd)
    try:
        assert newton_like(0.5) == 2.0
        assert enzpy.gradient(identity_doubled, 0.5) == 2.0
    finally:
        clear_rules(identity_doubled)


# -- errors ----------------------------------------------------------------------------------------
@njit
def two_args(x, y):
    return x * y


@njit
def _bad_count_bwd(res, g):
    return (g,)


@njit
def _two_fwd(x, y):
    return x * y, (x, y)


@njit
def _bad_type_bwd(res, g):
    return np.ones(2), g


@njit
def _wrong_out_fwd(x, y):
    return np.ones(2), 0.0


def test_rule_errors_are_clear_type_errors():
    try:
        defvjp(two_args, _two_fwd, _bad_count_bwd)
        with pytest.raises(RuleError, match="2 cotangents"):
            autodiff(Reverse, two_args, Active(1.0), Active(2.0))
        defvjp(two_args, _two_fwd, _bad_type_bwd)
        with pytest.raises(TypeError, match="argument 0.*must be a float"):
            autodiff(Reverse, two_args, Active(1.0), Active(2.0))
        defvjp(two_args, _wrong_out_fwd, _bad_count_bwd)
        with pytest.raises(TypeError, match="fwd returns out"):
            autodiff(Reverse, two_args, Active(1.0), Active(2.0))
        with pytest.raises(TypeError, match="@njit function"):
            defvjp(two_args, 3.0, _bad_count_bwd)
    finally:
        clear_rules(two_args)


@njit
def _jvp_array_tangent(primals, tangents):      # the tangent of a float output as an array
    return two_args(primals[0], primals[1]), np.ones(2)


@njit
def _jvp_without_tangent(primals, tangents):
    return two_args(primals[0], primals[1])


def test_a_jvp_rule_with_the_wrong_result_is_named_as_such():
    try:
        for rule, returned in ((_jvp_array_tangent, "array"), (_jvp_without_tangent, "float64")):
            defjvp(two_args, rule)
            with pytest.raises(RuleError, match=f"jvp must return \\(out, tangent_out\\).*"
                                                f"returns .*{returned}"):
                autodiff(Forward, two_args, Duplicated(1.0, 1.0), Const(2.0))
    finally:
        clear_rules(two_args)


@njit
def guarded_inverse_trace(a):
    return np.trace(np.linalg.inv(a))


@njit
def _guarded_inverse(a):
    try:
        return np.linalg.inv(a)
    except Exception:                   # singular: no inverse, no derivative
        return np.zeros_like(a)


@njit
def _guarded_fwd(a):
    inv = _guarded_inverse(a)
    return np.trace(inv), inv


@njit
def _guarded_bwd(inv, g):
    return (-g * (inv @ inv).T,)


@njit
def _guarded_jvp(primals, tangents):
    inv = _guarded_inverse(primals[0])
    return np.trace(inv), -np.trace(inv @ tangents[0] @ inv)


@njit
def guarded_loss(a):
    return 2.0 * guarded_inverse_trace(a)


def test_a_rule_catching_an_exception_runs_as_written_and_is_refused_when_differentiated():
    # Reverse mode runs a rule's fwd as it is: its try/except works. Second order
    # differentiates the rule's own code, where a caught exception segfaulted.
    defvjp(guarded_inverse_trace, _guarded_fwd, _guarded_bwd)
    defjvp(guarded_inverse_trace, _guarded_jvp)
    try:
        singular = np.array([[1.0, 2.0], [2.0, 4.0]])
        da = np.zeros_like(singular)
        autodiff(Reverse, guarded_loss, Duplicated(singular, da))
        assert np.all(da == 0.0)
        regular = np.array([[2.0, 1.0], [0.5, 3.0]])
        da = np.zeros_like(regular)
        autodiff(Reverse, guarded_loss, Duplicated(regular, da))
        inv = np.linalg.inv(regular)
        np.testing.assert_allclose(da, -2.0 * (inv @ inv).T, rtol=1e-12)
        with pytest.raises(UnsupportedError, match="try block of '_guarded_inverse'.*caught"):
            enzpy.hvp(guarded_loss, singular, np.ones_like(singular))
    finally:
        clear_rules(guarded_inverse_trace)


@njit
def _product_or_zero(a):
    try:
        v = _guarded_inverse(a)[0, 0]
    except Exception:
        v = 0.0
    return v


@njit
def _one_call_deeper(a):
    return _product_or_zero(a)


@njit
def _two_calls_deeper(a):
    return _one_call_deeper(a)


@njit
def _tripled(x):
    return 3.0 * x + 0.0 * _product_or_zero(np.eye(2))


@njit
def _tripled_fwd(x):
    return 3.0 * x, None


@njit
def _tripled_bwd(res, g):
    return (3.0 * g,)


@njit
def _guarded_plus_tripled(a, x):
    return _two_calls_deeper(a) + _tripled(x)


def test_a_try_block_the_body_of_a_covered_function_reaches_first_is_differentiated():
    # (_tripled's body, which its rule covers, reaches _product_or_zero in fewer
    # calls than the differentiated path: it was refused as called by both)
    defvjp(_tripled, _tripled_fwd, _tripled_bwd)
    try:
        a = np.array([[2.0, 1.0], [0.5, 3.0]])
        da = np.zeros_like(a)
        autodiff(Reverse, _guarded_plus_tripled, Duplicated(a, da), Active(1.0))
        inv = np.linalg.inv(a)
        np.testing.assert_allclose(da, -np.outer(inv[:, 0], inv[0, :]).T, rtol=1e-12)
    finally:
        clear_rules(_tripled)


@njit
def _wrong_shape_bwd(res, g):
    return (np.ones(3) * g,)


@njit
def _array_fwd(x):
    return (x * x).sum(), x


@njit
def array_sum_sq(x):
    return (x * x).sum()


def test_cotangent_of_the_wrong_shape_raises_after_the_call():
    defvjp(array_sum_sq, _array_fwd, _wrong_shape_bwd)
    try:
        # (a misfit of a rule is a TypeError; a shape mismatch a ValueError: it is both)
        for error in (TypeError, ValueError):
            with pytest.raises(error, match="shape of the argument"):
                autodiff(Reverse, array_sum_sq, Duplicated(np.ones(2), np.zeros(2)))
    finally:
        clear_rules(array_sum_sq)


@njit
def _weighted(a, b):
    return (a * b).sum()


@njit
def _weighted_fwd(a, b):
    return (a * b).sum(), (a, b)


@njit
def _second_cut_bwd(res, g):
    return res[1] * g, res[0][:1] * g        # the cotangent of b has one entry


@njit
def _calls_weighted(a, b):
    return _weighted(a, b)


def test_a_rule_with_one_cotangent_of_the_wrong_shape_writes_none_of_them():
    defvjp(_weighted, _weighted_fwd, _second_cut_bwd)
    try:
        a, b, da, db = np.ones(3), np.full(3, 2.0), np.zeros(3), np.zeros(3)
        with pytest.raises(TypeError, match="argument 1 does not have the shape"):
            autodiff(Reverse, _calls_weighted, Duplicated(a, da), Duplicated(b, db))
        assert not da.any() and not db.any()
    finally:
        clear_rules(_weighted)


@njit
def _scale(a, s):
    return a * s


@njit
def _cut_tangent_jvp(primals, tangents):
    return primals[0] * primals[1], tangents[0][:1] * primals[1]


@njit
def _scaled_pair_jvp(primals, tangents):
    a, s = primals
    return (a * s, s), (tangents[0][:2] * s, tangents[1])


@njit
def _scaled_pair(a, s):
    return a * s, s


@njit
def _reads_three_entries(a, s):
    y = _scale(a, s)
    return y[0] + y[1] + y[2]


@njit
def _sums_the_pair(a, s):
    y, z = _scaled_pair(a, s)
    return y.sum() * z


def test_a_tangent_of_the_wrong_shape_raises_instead_of_being_read_past_its_end():
    # (forward mode read y[1] and y[2] of a one-entry tangent: 2.0 where it is 6.0)
    a, t = np.array([1.0, 2.0, 3.0]), np.ones(3)
    defjvp(_scale, _cut_tangent_jvp)
    defjvp(_scaled_pair, _scaled_pair_jvp)
    try:
        with pytest.raises(TypeError, match="'_scale': jvp's tangent does not have the shape"):
            autodiff(Forward, _reads_three_entries, Duplicated(a, t), 2.0)
        with pytest.raises(ValueError, match=r"'_scaled_pair': jvp's tangent .* \(item \[0\]\)"):
            autodiff(Forward, _sums_the_pair, Duplicated(a, t), 2.0)
    finally:
        clear_rules(_scale)
        clear_rules(_scaled_pair)


def test_forward_mode_without_a_forward_rule_says_which_rule_to_add():
    defvjp(two_args, _two_fwd, _bad_count_bwd)       # (its error is for reverse mode)
    try:
        with pytest.raises(UnsupportedError, match="defjvp"):
            autodiff(Forward, two_args, Duplicated(1.0, 1.0), Const(2.0))
    finally:
        clear_rules(two_args)


# -- residuals are kept as they were at the call ------------------------------------------------
@njit
def _det_then_overwrite(A, b):
    v = np.linalg.det(A) + np.linalg.solve(A, b).sum()
    A[0, 0] = 0.0                     # the rules' residuals held A and b themselves
    b[0] = 0.0
    return v


@njit
def _scaled_norm(x):
    return np.sqrt(np.sum(x * x))


@njit
def _scaled_norm_fwd(x):
    return np.sqrt(np.sum(x * x)), x          # the residual is the argument itself


@njit
def _scaled_norm_bwd(x, g):
    return (g * x / np.sqrt(np.sum(x * x)),)


@njit
def _norm_then_overwrite(x):
    v = _scaled_norm(x)
    x[0] = 0.0
    return v


def test_residuals_survive_later_in_place_writes():
    # Found by the fuzzer: a rule's residuals referring to its arguments saw the
    # function's later in-place writes (a wrong derivative, no error).
    rng = np.random.default_rng(0)
    A = 3.0 * np.eye(3) + rng.uniform(-1, 1, (3, 3))
    b = rng.uniform(0.2, 1.0, 3)
    dA, db = np.zeros_like(A), np.zeros_like(b)
    autodiff(Reverse, _det_then_overwrite, Duplicated(A.copy(), dA), Duplicated(b.copy(), db))
    want_A = np.linalg.det(A) * np.linalg.inv(A).T - np.outer(np.linalg.solve(A.T, np.ones(3)),
                                                             np.linalg.solve(A, b))
    np.testing.assert_allclose(dA, want_A, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, np.linalg.solve(A.T, np.ones(3)), rtol=1e-8)
    defvjp(_scaled_norm, _scaled_norm_fwd, _scaled_norm_bwd)
    try:
        x = np.array([0.6, 0.8])
        dx = np.zeros(2)
        autodiff(Reverse, _norm_then_overwrite, Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, x / np.linalg.norm(x), rtol=1e-12)
    finally:
        clear_rules(_scaled_norm)


@njit
def _scaled_norm_jvp(primals, tangents):
    x, t = primals[0], tangents[0]
    v = np.sqrt(np.sum(x * x))
    return v, np.sum(x * t) / v


@njit
def _times_norm_of_view(x, w):
    return x * np.linalg.norm(w.reshape((2, 2)))


@njit
def _times_det_of_transpose(x, w):
    return x * np.linalg.det(w.reshape((2, 2)).T)


@njit
def _times_solve_of_view(x, w):
    return x * np.linalg.solve(3.0 * np.eye(2), w.reshape((2, 2)))[0, 1]


@njit
def _times_user_rule_of_view(x, w):
    return x * _scaled_norm(w.reshape((2, 2)).T.ravel())


@pytest.mark.parametrize("f, value", [
    (_times_norm_of_view, lambda w: np.linalg.norm(w)),
    (_times_det_of_transpose, lambda w: np.linalg.det(w.reshape(2, 2))),
    (_times_solve_of_view, lambda w: w[1] / 3.0),
    (_times_user_rule_of_view, lambda w: np.linalg.norm(w)),
])
def test_rule_on_a_view_of_a_const_argument(f, value):
    # Found by the fuzzer: a rule whose array argument is a view of a Const
    # array (not provably inactive through memory) was handed the view's null
    # shadow and wrote through it (a segfault in both modes).
    defvjp(_scaled_norm, _scaled_norm_fwd, _scaled_norm_bwd)
    enzpy.defjvp(_scaled_norm, _scaled_norm_jvp)
    try:
        w = np.array([2.1, 0.4, -0.5, 1.8])
        (dx, _), = autodiff(Reverse, f, Active(0.7), Const(w.copy()))
        assert dx == pytest.approx(value(w), rel=1e-12)
        tangent, = autodiff(Forward, f, Duplicated(0.7, 1.0), Const(w.copy()))
        assert tangent == pytest.approx(value(w), rel=1e-12)
        dw = np.zeros(4)
        autodiff(Reverse, f, Active(0.7), Duplicated(w.copy(), dw))   # and with a shadow
        h = 1e-6
        fd = [(f(0.7, w + h * e) - f(0.7, w - h * e)) / (2 * h) for e in np.eye(4)]
        np.testing.assert_allclose(dw, fd, rtol=1e-6, atol=1e-8)
    finally:
        clear_rules(_scaled_norm)


@njit
def _squares_sum(x):
    return (x ** 2).sum()


def test_a_rule_taking_other_arguments_is_refused_when_registered():
    """A fwd taking two arguments for a function of one failed inside the build
    (an InternalError from Numba's dispatch)."""
    @njit
    def fwd_two(x, y):
        return _squares_sum(x), x

    @njit
    def bwd_three(x, y, g):
        return (2 * x * g,)

    @njit
    def bwd(x, g):
        return (2 * x * g,)

    @njit
    def jvp_one(primals):
        return _squares_sum(primals[0]), 0.0

    with pytest.raises(RuleError, match=r"the rule of '_squares_sum': fwd\(x, y\) must take "
                                        r"the arguments of the function \(1\)"):
        defvjp(_squares_sum, fwd_two, bwd)
    with pytest.raises(RuleError, match=r"bwd\(x, y, g\) must take 2 arguments"):
        defvjp(_squares_sum, njit(lambda x: (_squares_sum(x), x)), bwd_three)
    with pytest.raises(RuleError, match=r"jvp\(primals\) must take 2 arguments"):
        defjvp(_squares_sum, jvp_one)
    x, dx = np.array([0.5, 1.5]), np.zeros(2)
    autodiff(Reverse, _squares_sum, Duplicated(x, dx))        # no rule was registered
    np.testing.assert_allclose(dx, 2 * x)


@njit(inline="always")
def _inlined_softplus(x):
    return math.log(1.0 + math.exp(x))


@njit
def _twice_inlined_softplus(x):
    return 2.0 * _inlined_softplus(x)


def test_a_rule_on_a_function_numba_inlines_is_refused():
    """Numba copies an inline='always' body into its callers: the rule was never
    used (the naive body's NaN at x = 800 instead of the rule's 2)."""
    @njit
    def fwd(x):
        return x, x

    @njit
    def bwd(x, g):
        return (g / (1.0 + math.exp(-x)),)

    @njit
    def jvp(primals, tangents):
        return primals[0], tangents[0]

    for register in (lambda: defvjp(_inlined_softplus, fwd, bwd),
                     lambda: defjvp(_inlined_softplus, jvp),
                     lambda: enzpy.inactive(_inlined_softplus)):
        with pytest.raises(UnsupportedError, match=r"'_inlined_softplus': the function is "
                                                   r"@njit\(inline='always'\)"):
            register()
    (grad,), = autodiff(Reverse, _twice_inlined_softplus, Active(0.5))   # no rule registered
    assert grad == pytest.approx(2.0 / (1.0 + math.exp(-0.5)))


def test_check_rule_names_a_cotangent_of_the_wrong_shape():
    @njit
    def fwd(x):
        return _squares_sum(x), x

    @njit
    def bwd_long(x, g):
        return (np.ones(x.size + 1) * g,)

    defvjp(_squares_sum, fwd, bwd_long)
    try:
        with pytest.raises(RuleError, match=r"bwd's cotangent 0 has shape \(5,\); argument 0 "
                                            r"has shape \(4,\)"):
            check_rule(_squares_sum, np.arange(1.0, 5.0))
    finally:
        clear_rules(_squares_sum)


@njit
def _softplus(x):
    return math.log1p(math.exp(x))


def test_check_rule_at_float32_points_measures_the_rule_not_rounding():
    # before: a right jvp measured 0.26 at np.float32(0.7), one 30% off 0.037 (the
    # finite differences moved a float32 point by 1e-6)
    @njit
    def jvp(p, t):
        return _softplus(p[0]), t[0] / (1.0 + math.exp(-p[0]))

    @njit
    def jvp_off(p, t):
        return _softplus(p[0]), 1.3 * t[0] / (1.0 + math.exp(-p[0]))

    try:
        defjvp(_softplus, jvp)
        assert check_rule(_softplus, np.float32(0.7)).worst_relative_error < 1e-6
        defjvp(_softplus, jvp_off)
        assert check_rule(_softplus, np.float32(0.7)).worst_relative_error == \
            pytest.approx(0.3, rel=1e-3)
    finally:
        clear_rules(_softplus)


@njit
def _cube(x):
    return x * x * x


@njit
def _sin_plus_cube(x, c):
    return math.sin(x * c) + _cube(x)


def test_an_njit_caller_compiled_after_a_rule_changed_uses_the_new_rule():
    """Numba kept the implementation it typed for autodiff's first @njit caller:
    a caller compiled after the rule changed got the old rule."""
    @njit
    def fwd(x):
        return _cube(x), x

    @njit
    def bwd_true(x, g):
        return (3 * x * x * g,)

    @njit
    def bwd_tenfold(x, g):
        return (30 * x * x * g,)

    @njit
    def first(x, c):
        (dx, _), = autodiff(Reverse, _sin_plus_cube, Active(x), Const(c))
        return dx

    @njit
    def second(x, c):
        (dx, _), = autodiff(Reverse, _sin_plus_cube, Active(x), Const(c))
        return dx

    try:
        defvjp(_cube, fwd, bwd_true)
        assert first(0.3, 2.0) == pytest.approx(2 * math.cos(0.6) + 3 * 0.09, rel=1e-12)
        defvjp(_cube, fwd, bwd_tenfold)
        assert second(0.3, 2.0) == pytest.approx(2 * math.cos(0.6) + 30 * 0.09, rel=1e-12)
        # (compiled before: keeps the rule it was built with, as documented)
        assert first(0.3, 2.0) == pytest.approx(2 * math.cos(0.6) + 3 * 0.09, rel=1e-12)
    finally:
        clear_rules(_cube)


# -- a rule whose result is infinite -------------------------------------------------------
@njit
def saturating(x):
    return math.inf if x > 1.0 else 2.0 * x


@njit
def _saturating_fwd(x):
    return saturating(x), 0.0


@njit
def _saturating_bwd(res, g):
    return (2.0 * g,)


defvjp(saturating, _saturating_fwd, _saturating_bwd)


@njit
def capped(x):
    return min(saturating(x), 3.0) + x


def test_a_rule_with_an_infinite_result_gets_its_cotangent():
    """The zero shadow of a rule's float result was the result times 0.0: NaN
    at an infinite (or NaN) result, which made the cotangent the rule receives,
    and so the whole gradient, NaN (np.linalg.slogdet at a singular matrix)."""
    assert autodiff(Reverse, capped, Active(2.0)) == ((1.0,),)      # the cap is taken
    assert autodiff(Reverse, capped, Active(0.5)) == ((3.0,),)
    assert saturating(2.0) == math.inf


@njit
def _pair_product(t):
    a, b = t
    return (a * b).sum()


@njit
def _pair_product_fwd(t):
    return _pair_product(t), t


@njit
def _pair_product_bwd(res, g):
    a, b = res
    return ((g * b, g * a),)


@njit
def _pair_product_jvp(primals, tangents):
    (a, b), = primals
    (ta, tb), = tangents
    return _pair_product((a, b)), (ta * b + a * tb).sum()


@njit
def _pair_product_loss(x):
    return _pair_product((x, np.sin(x)))


@njit
def _affine(p, x):
    a, b = p
    return a * x + b


@njit
def _affine_fwd(p, x):
    return _affine(p, x), (p, x)


@njit
def _affine_bwd(res, g):
    (a, b), x = res
    return ((g * x, g), g * a)


@njit
def _affine_loss(a, x):
    return _affine((a, 2.0 * a), x) ** 2


def test_a_rule_of_a_function_taking_a_container_of_floats_is_refused():
    # Found by review: the glue passed a tuple's arrays on with no shadow (reverse:
    # zero gradient; forward: the primal taken for the tangent); a tuple of floats
    # failed inside the build (KeyError).
    defvjp(_pair_product, _pair_product_fwd, _pair_product_bwd)
    defjvp(_pair_product, _pair_product_jvp)
    defvjp(_affine, _affine_fwd, _affine_bwd)
    try:
        x = np.array([0.3, 0.7, 1.1])
        message = r"the rule of '_pair_product': argument 0 is of type UniTuple\(array"
        with pytest.raises(UnsupportedError, match=message):
            autodiff(Reverse, _pair_product_loss, Duplicated(x.copy(), np.zeros(3)))
        with pytest.raises(UnsupportedError, match=message):
            autodiff(Forward, _pair_product_loss, Duplicated(x.copy(), np.ones(3)))
        with pytest.raises(UnsupportedError, match=r"'_affine': argument 0 is of type "
                                                   r"UniTuple\(float64 x 2\)"):
            autodiff(Reverse, _affine_loss, Active(1.3), Active(0.7))
        with pytest.raises(TypeError, match=r"check_rule: argument 0 \(tuple\) holds floats"):
            enzpy.check_rule(_pair_product, (x, np.sin(x)))
    finally:
        clear_rules(_pair_product)
        clear_rules(_affine)
    (da, dx), = autodiff(Reverse, _affine_loss, Active(1.3), Active(0.7))  # differentiated
    assert da == pytest.approx(2 * _affine_loss.py_func(1.3, 0.7) ** 0.5 * 2.7, rel=1e-12)


@numba.extending.intrinsic
def _data_pointer(typingctx, arr):
    """The address of an array's data, typed as a pointer to its elements (what
    carray/cffi code hands around)."""
    def codegen(context, builder, sig, args):
        return context.make_array(sig.args[0])(context, builder, args[0]).data
    return numba.core.types.CPointer(arr.dtype)(arr), codegen


@njit
def _pointed_sum(p, n):
    return numba.carray(p, n).sum()


@njit
def _pointed_sum_fwd(p, n):
    return _pointed_sum(p, n), None


@njit
def _pointed_sum_bwd(res, g):
    return (None, None)


@njit
def _pointed_sum_loss(x):
    return _pointed_sum(_data_pointer(x), x.size) * x[0]


def test_a_rule_of_a_function_taking_a_pointer_to_floats_is_refused():
    # Found by review: a raw pointer was taken for a value without floats (the
    # glue would pass it without a shadow: a silently zero gradient).
    defvjp(_pointed_sum, _pointed_sum_fwd, _pointed_sum_bwd)
    try:
        with pytest.raises(UnsupportedError, match=r"'_pointed_sum': argument 0 is of type "
                                                   r"float64\*"):
            autodiff(Reverse, _pointed_sum_loss, Duplicated(np.ones(3), np.zeros(3)))
    finally:
        clear_rules(_pointed_sum)
    from enzpy.userrules import _may_hold_floats
    types = numba.core.types
    assert _may_hold_floats(types.voidptr)
    assert _may_hold_floats(types.CPointer(types.float32))
    assert not _may_hold_floats(types.CPointer(types.intp))
    assert _may_hold_floats(types.Bytes(types.float64, 1, "C"))
    assert _may_hold_floats(types.ArrayIterator(types.float64[:]))
    assert not _may_hold_floats(types.ArrayIterator(types.int64[:]))


@njit
def _scaled_sum(x, n):
    return x.sum() * n[0]


@njit
def _scaled_sum_fwd(x, n):
    return _scaled_sum(x, n), n


@njit
def _scaled_sum_bwd(n, g):
    return (np.full(3, g * n[0]), None)


@njit
def _scaled_sum_loss(x):
    return _scaled_sum(x, (2, 3)) + _scaled_sum(x, np.array([4]))


def test_a_rule_taking_containers_of_integers_works():
    defvjp(_scaled_sum, _scaled_sum_fwd, _scaled_sum_bwd)
    try:
        dx = np.zeros(3)
        autodiff(Reverse, _scaled_sum_loss, Duplicated(np.ones(3), dx))
        np.testing.assert_allclose(dx, [6.0, 6.0, 6.0])
    finally:
        clear_rules(_scaled_sum)


@njit
def _dot(a, b):
    return (a * b).sum()


@njit
def _dot_fwd_list(a, b):
    return _dot(a, b), [a, b]


@njit
def _dot_bwd(res, g):
    return g * res[1], g * res[0]


@njit
def _dot_then_overwrite(x):
    y = np.sin(x)
    s = _dot(x, y)
    x[:] = x * 3.0
    y[:] = 0.0
    return s + x.sum()


def test_residuals_in_a_list_survive_later_in_place_writes():
    # Found by review: residuals held in a list (not a tuple) were not copied.
    defvjp(_dot, _dot_fwd_list, _dot_bwd)
    try:
        x = np.array([0.3, 0.7, 1.1])
        dx = np.zeros(3)
        autodiff(Reverse, _dot_then_overwrite, Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, np.sin(x) + x * np.cos(x) + 3.0, rtol=1e-12)
    finally:
        clear_rules(_dot)


def test_check_rule_without_a_float_argument_says_so():
    @njit
    def count(n):
        return n * 2.0

    defvjp(count, njit(lambda n: (count(n), n)), njit(lambda n, g: (None,)))
    try:
        with pytest.raises(TypeError, match="no float scalar or float array"):
            enzpy.check_rule(count, 3)
    finally:
        clear_rules(count)


_READ_ONLY_W = np.array([0.6, 0.8])      # (a global: read-only in Numba)


@njit
def _norm_of_a_global_plus(x):
    return _scaled_norm(_READ_ONLY_W) * x + _scaled_norm(np.full(2, x))


def test_a_rule_called_with_a_read_only_array():
    # Found by review: the glue typed the shadow read-only like the array (an
    # InternalError at capture).
    defvjp(_scaled_norm, _scaled_norm_fwd, _scaled_norm_bwd)
    try:
        (dx,), = autodiff(Reverse, _norm_of_a_global_plus, Active(0.5))
        assert dx == pytest.approx(1.0 + np.sqrt(2.0), rel=1e-12)
    finally:
        clear_rules(_scaled_norm)


class _Activation(enum.IntEnum):
    RELU = 1
    TANH = 2


@jitclass([("n", numba.int64)])
class _Counts:
    def __init__(self, n):
        self.n = n


@njit
def _scaled(x, how):
    return 3.0 * x


@njit
def _scaled_fwd(x, how):
    return 3.0 * x, 0.0


@njit
def _scaled_bwd(res, g):
    return (3.0 * g, None)


@njit
def _scaled_jvp(primals, tangents):
    return 3.0 * primals[0], 3.0 * tangents[0]


@pytest.mark.parametrize("how", ["relu", _Activation.TANH, (1, (2, 3)), np.arange(3),
                                 _Counts(2), None, True],
                         ids=["str", "int-enum", "int-tuple", "int-array", "jitclass-of-ints",
                              "none", "bool"])
def test_rules_pass_arguments_without_floats_as_they_are(how):
    # Found by review: an allow-list of such types refused strings, enums, jitclasses
    # of integers... that the rule's glue passes on as it always did.
    defvjp(_scaled, _scaled_fwd, _scaled_bwd)
    defjvp(_scaled, _scaled_jvp)
    try:
        (dx, _), = autodiff(Reverse, _scaled, Active(0.7), Const(how))
        assert dx == 3.0
        tangent, = autodiff(Forward, _scaled, Duplicated(0.7, 1.0), Const(how))
        assert tangent == 3.0
        assert enzpy.check_rule(_scaled, 0.7, how).worst_relative_error < 1e-6
    finally:
        clear_rules(_scaled)


_RESIDUAL_NT = collections.namedtuple("_RESIDUAL_NT", ["x", "k"])
_GLOBAL_W = np.array([1.0, 2.0])


@njit
def _even_squares(x):
    return (x[::2] ** 2).sum() + (_GLOBAL_W * x[:2]).sum()


@njit
def _even_squares_fwd_list(x):
    return _even_squares(x), [x[::2], _GLOBAL_W]        # a strided view, a read-only array


@njit
def _even_squares_fwd_named(x):
    return _even_squares(x), _RESIDUAL_NT(x[::2], 2.0)


@njit
def _even_squares_bwd_list(res, g):
    evens, w = res
    ct = np.zeros(2 * evens.size)
    ct[::2] = 2.0 * g * evens
    ct[:2] += g * w
    return (ct,)


@njit
def _even_squares_bwd_named(res, g):
    ct = np.zeros(2 * res.x.size)
    ct[::2] = res.k * g * res.x
    ct[:2] += g * _GLOBAL_W
    return (ct,)


@njit
def _even_squares_then_overwrite(x):
    y = x * 1.0
    s = _even_squares(y)
    y[:] = 0.0
    return s


@pytest.mark.parametrize("fwd, bwd", [(_even_squares_fwd_list, _even_squares_bwd_list),
                                      (_even_squares_fwd_named, _even_squares_bwd_named)],
                         ids=["list", "named-tuple"])
def test_residuals_of_strided_and_read_only_arrays_in_lists_and_named_tuples(fwd, bwd):
    # Found by review: copying a list's strided or read-only arrays changed the
    # list's type (an InternalError), and named tuples could not be copied at all.
    defvjp(_even_squares, fwd, bwd)
    try:
        x = np.array([0.3, 0.7, 1.1, 0.2])
        dx = np.zeros(4)
        autodiff(Reverse, _even_squares_then_overwrite, Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, [0.6 + 1.0, 2.0, 2.2, 0.0], rtol=1e-12)
    finally:
        clear_rules(_even_squares)


@njit
def _gather_squares(x, idx):
    return (x[idx[0]] ** 2).sum()


@njit
def _gather_squares_fwd(x, idx):
    return _gather_squares(x, idx), (x[idx[0]].copy(), idx)


@njit
def _gather_squares_bwd(res, g):
    values, idx = res
    ct = np.zeros(3)
    for k in range(idx[0].size):
        ct[idx[0][k]] += 2.0 * g * values[k]
    return (ct, None)


@njit
def _gather_then_replace(x):
    idx = [np.array([0, 2])]
    s = _gather_squares(x, idx)
    idx[0] = np.array([1, 1])
    return s


@njit
def _gather_then_mutate(x):
    idx = [np.array([0, 2])]
    s = _gather_squares(x, idx)
    idx[0][0] = 1
    return s


@njit
def _gather_then_alias(x):
    a = np.array([0, 2])
    idx = [a]
    s = _gather_squares(x, idx)
    a[0] = 1
    return s + (x[idx[0]] ** 3).sum()


@pytest.mark.parametrize("caller", [_gather_then_replace, _gather_then_mutate, _gather_then_alias])
def test_a_list_residual_the_caller_holds_is_copied_not_changed(caller):
    # Found by review: list residuals copied in place shared (and changed) the
    # caller's list: its later writes reached the residuals.
    defvjp(_gather_squares, _gather_squares_fwd, _gather_squares_bwd)
    try:
        x = np.array([0.5, 1.5, -0.7])
        dx = np.zeros(3)
        autodiff(Reverse, caller, Duplicated(x.copy(), dx))
        h = 1e-6
        fd = [(caller(x + h * e) - caller(x - h * e)) / (2 * h) for e in np.eye(3)]
        np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)
        a = np.array([0, 2])
        held = [a]
        autodiff(Reverse, _gather_squares, Duplicated(x.copy(), np.zeros(3)), Const(held))
        assert held[0] is a
    finally:
        clear_rules(_gather_squares)


@jitclass([("idx", numba.int64[:])])
class _IndexHolder:
    def __init__(self, idx):
        self.idx = idx


@jitclass([("values", numba.float64[:])])
class _ValueHolder:
    def __init__(self, values):
        self.values = values


@njit
def _pick(x, idx):
    return (x[idx] ** 2).sum()


@njit
def _pick_bwd(res, g):
    x, idx = res
    ct = np.zeros_like(x)
    for k in idx:
        ct[k] += 2.0 * g * x[k]
    return (ct, None)


_PICK_RESIDUALS = {
    "jitclass-of-indices": (lambda x, idx: (_pick(x, idx), (x, _IndexHolder(idx))),
                            lambda res, g: _pick_bwd((res[0], res[1].idx), g)),
    "jitclass-of-floats": (lambda x, idx: (_pick(x, idx), (_ValueHolder(x), idx)),
                           lambda res, g: _pick_bwd((res[0].values, res[1]), g)),
    "typed-list-of-indices": (lambda x, idx: (_pick(x, idx),
                                              (x, numba.typed.List([idx]))),
                              lambda res, g: _pick_bwd((res[0], res[1][0]), g)),
    "optional-indices": (lambda x, idx: (_pick(x, idx), (x, idx if x[0] > -1e300 else None)),
                         lambda res, g: _pick_bwd((res[0], res[1]), g)),
}


@njit
def _pick_then_move(x):
    idx = np.array([0, 2])
    s = _pick(x, idx)
    idx[0] = 1                              # (a residual held by reference would see this)
    return s


@pytest.mark.parametrize("kind", list(_PICK_RESIDUALS))
def test_residuals_in_objects_that_may_change_are_refused(kind):
    # Found by review: an object of integers (indices in a jitclass, a typed list)
    # was kept by reference as a residual; a write after the call changed the
    # derivative.
    fwd, bwd = _PICK_RESIDUALS[kind]
    defvjp(_pick, njit(fwd), njit(bwd))
    try:
        with pytest.raises(RuleError, match=r"'_pick': fwd's residuals are of type .*objects "
                                            r"\(jitclasses, typed lists, records\) could change"):
            autodiff(Reverse, _pick_then_move, Duplicated(np.ones(3), np.zeros(3)))
    finally:
        clear_rules(_pick)


def test_residuals_that_cannot_change_are_kept():
    extra = ("note", _Activation.RELU, None, True, (1, (2, "a")), 7)
    defvjp(_pick, njit(lambda x, idx: (_pick(x, idx), (x, idx, extra, slice(0, 2), range(3)))),
           njit(lambda res, g: _pick_bwd((res[0], res[1]), g)))
    try:
        x = np.array([0.5, 1.5, -0.7])
        dx = np.zeros(3)
        autodiff(Reverse, _pick_then_move, Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, [1.0, 0.0, -1.4], rtol=1e-12)
    finally:
        clear_rules(_pick)


_RESIDUAL_PAIR = collections.namedtuple("_RESIDUAL_PAIR", ["a", "b"])


@njit
def _odd_even(x):
    return (x[::2] * x[1::2]).sum()


@njit
def _odd_even_fwd_named_uni(x):
    return _odd_even(x), _RESIDUAL_PAIR(x[::2], x[1::2])


@njit
def _odd_even_fwd_list_of_named(x):
    return _odd_even(x), [_RESIDUAL_PAIR(x[::2], x[1::2])]


@njit
def _odd_even_bwd_named(res, g):
    ct = np.zeros(2 * res.a.size)
    ct[::2] = g * res.b
    ct[1::2] = g * res.a
    return (ct,)


@njit
def _odd_even_bwd_list(res, g):
    return _odd_even_bwd_named(res[0], g)


@njit
def _odd_even_then_overwrite(x):
    y = x * 1.0
    s = _odd_even(y)
    y[:] = 0.0
    return s


@pytest.mark.parametrize("fwd, bwd", [(_odd_even_fwd_named_uni, _odd_even_bwd_named),
                                      (_odd_even_fwd_list_of_named, _odd_even_bwd_list)],
                         ids=["named-uni-tuple", "list-of-named-tuples"])
def test_residuals_in_named_tuples_of_one_type_and_lists_of_them(fwd, bwd):
    # Found by review: a NamedUniTuple lost its names (a RuleError), a list of named
    # tuples failed to compile (an InternalError).
    defvjp(_odd_even, fwd, bwd)
    try:
        x = np.array([0.3, 0.7, 1.1, 0.2])
        dx = np.zeros(4)
        autodiff(Reverse, _odd_even_then_overwrite, Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, [0.7, 0.3, 0.2, 1.1], rtol=1e-12)
    finally:
        clear_rules(_odd_even)


def test_a_rule_without_residuals():
    # Found by review: an empty tuple of residuals generated invalid glue.
    @njit
    def double(x):
        return 2.0 * x

    defvjp(double, njit(lambda x: (double(x), ())), njit(lambda res, g: (2.0 * g,)))
    try:
        (dx,), = autodiff(Reverse, njit(lambda x: double(x) * x), Active(1.5))
        assert dx == 6.0
    finally:
        clear_rules(double)


# -- whose glue a derivative needs ---------------------------------------------------------
@njit
def _cubed(x):
    return x * x * x


@njit
def _cubed_fwd(x):
    return x * x * x, x


@njit
def _cubed_bwd(x, g):
    return (3.0 * x * x * g,)


@njit
def _cubed_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return x * x * x, 3.0 * x * x * t


@njit
def cube_plus_one(x):
    return _cubed(x) + 1.0


@njit
def _cube_plus_one_fwd(x):
    return _cubed(x) + 1.0, x


@njit
def _cube_plus_one_bwd(x, g):
    return (3.0 * x * x * g,)


@njit
def _cube_plus_one_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _cubed(x) + 1.0, 3.0 * x * x * t


@njit
def squared_cube_plus_one(x):
    return cube_plus_one(x) ** 2


def _glue_compiled(f) -> set:
    """The modes for which the glue of ``f``'s rule was compiled."""
    spec = enzpy.userrules.registered()[f.py_func]
    return {mode for glue in enzpy.userrules._glue.values() if glue.spec is spec
            for mode in glue._compiled or ()}


def test_a_rule_inside_the_code_of_a_covered_function_is_not_compiled_and_second_order_uses_it():
    # cube_plus_one's rules cover its body, which calls _cubed: no derivative
    # runs that body, so none compiles _cubed's glue, except hvp, which
    # differentiates cube_plus_one's jvp rule (calling _cubed) with _cubed's vjp rule.
    defvjp(_cubed, _cubed_fwd, _cubed_bwd)
    defjvp(_cubed, _cubed_jvp)
    defvjp(cube_plus_one, _cube_plus_one_fwd, _cube_plus_one_bwd)
    defjvp(cube_plus_one, _cube_plus_one_jvp)
    try:
        points = (0.0, 0.7, -1.3)
        for x in points:
            (dx,), = autodiff(Reverse, squared_cube_plus_one, Active(x))
            assert dx == pytest.approx(6.0 * x * x * (x ** 3 + 1.0))
            (t,) = autodiff(Forward, squared_cube_plus_one, Duplicated(x, 1.0))
            assert t == pytest.approx(dx)
        assert _glue_compiled(_cubed) == set()
        for x in points:
            hv = enzpy.hvp(squared_cube_plus_one, x, 0.5)
            assert hv == pytest.approx(0.5 * (30.0 * x ** 4 + 12.0 * x), abs=1e-12)
        assert _glue_compiled(_cubed) == {"reverse"}
    finally:
        clear_rules(cube_plus_one)
        clear_rules(_cubed)


@njit
def _sine(x):
    return math.sin(x)


@njit
def _sine_fwd(x):
    return _sine(x), x


@njit
def _sine_bwd(x, g):
    (dx, _), = autodiff(Reverse, _uses_sine, Active(x), Const(0))
    return (g * dx,)


@njit
def _uses_sine(x, depth):
    return _sine(x) * 2.0 if depth > 0 else math.sin(x)


def test_a_rule_whose_code_differentiates_a_function_using_the_rule_is_refused():
    # its glue, compiling, needed the derivative being built, which needed the glue:
    # an InternalError ('NoneType' object has no attribute 'restype') on every call
    defvjp(_sine, _sine_fwd, _sine_bwd)
    try:
        for _ in range(2):
            with pytest.raises(UnsupportedError, match="rule of '_sine'.*needed while its "
                                                       "glue compiles"):
                autodiff(Reverse, _uses_sine, Active(0.6), Const(1))
    finally:
        clear_rules(_sine)
    assert autodiff(Reverse, _uses_sine, Active(0.6), Const(1)) == \
        ((pytest.approx(2 * math.cos(0.6)), None),)


@njit
def _view_of(x):
    return x[:]


@njit
def _view_of_fwd(x):
    return x[:], None


@njit
def _view_of_bwd(res, g):
    return (g.copy(),)


@njit
def _view_of_jvp(primals, tangents):
    return primals[0][:], tangents[0].copy()


@njit
def write_through_the_view(x):
    y = _view_of(x)
    y[0] = y[1] * 3.0           # x[0] = 3 x[1]
    return np.sum(x * x)


@njit
def _copy_of(x):
    return x.copy()


@njit
def _copy_of_fwd(x):
    return x.copy(), None


@njit
def _copy_of_jvp(primals, tangents):
    return primals[0].copy(), tangents[0].copy()


@njit
def write_into_the_copy(x):
    y = _copy_of(x)
    y[0] = y[1] * 3.0
    return np.sum(x * y)


@njit
def _twice(x):
    y = x * 2.0
    return y, y


@njit
def _twice_fwd(x):
    y = x * 2.0
    return (y, y), None


@njit
def _twice_bwd(res, g):
    return (2.0 * (g[0] + g[1]),)


@njit
def _twice_jvp(primals, tangents):
    y = primals[0] * 2.0
    return (y, y), (tangents[0] * 2.0, tangents[0] * 2.0)


@njit
def write_through_one_item(x):
    a, b = _twice(x)
    a[0] = x[1] * 7.0           # b[0] too
    return np.sum(b * b)


def test_a_rule_whose_result_items_share_memory_is_refused_when_it_runs():
    # (found by review: [-11.2, -3.2, 4, 7.2] for [0, -42.4, 4, 7.2])
    enzpy.defvjp(_twice, _twice_fwd, _twice_bwd)
    enzpy.defjvp(_twice, _twice_jvp)
    try:
        x = np.array([0.3, -0.4, 0.5, 0.9])
        for mode, shadow in ((Reverse, np.zeros(4)), (Forward, np.ones(4))):
            with pytest.raises(UnsupportedError, match=r"result \(item \[0\]\) shares memory "
                                                        r"with item \[1\]"):
                autodiff(mode, write_through_one_item, Duplicated(x.copy(), shadow))
    finally:
        enzpy.clear_rules(_twice)


def test_a_rule_whose_result_is_a_view_of_an_argument_is_refused_when_it_runs():
    # (found by review: the result got a derivative of its own, [-2.4, -0.8, 1] for
    # [0, -8, 1]; in forward mode -0.8 for -8)
    enzpy.defvjp(_view_of, _view_of_fwd, _view_of_bwd)
    enzpy.defjvp(_view_of, _view_of_jvp)
    enzpy.defvjp(_copy_of, _copy_of_fwd, _view_of_bwd)
    enzpy.defjvp(_copy_of, _copy_of_jvp)
    try:
        x = np.array([0.3, -0.4, 0.5])
        with pytest.raises(UnsupportedError, match="the result shares memory with argument 0"):
            autodiff(Reverse, write_through_the_view, Duplicated(x.copy(), np.zeros(3)))
        with pytest.raises(UnsupportedError, match="return a copy, or drop the rule"):
            autodiff(Forward, write_through_the_view, Duplicated(x.copy(), np.ones(3)))
        # a rule returning new memory is used as before
        check = enzpy.check_gradient(write_into_the_copy, Duplicated(x.copy(), np.zeros(3)))
        assert check.worst_relative_error < 1e-7, check
        expected = np.array([3.0 * x[1], 3.0 * x[0] + 2.0 * x[1], 2.0 * x[2]])
        (tangent,) = autodiff(Forward, write_into_the_copy, Duplicated(x.copy(), np.ones(3)))
        assert tangent == pytest.approx(expected.sum(), rel=1e-12)
    finally:
        for f in (_view_of, _copy_of):
            enzpy.clear_rules(f)
