"""Custom derivative rules with enzpy: defvjp / defjvp / inactive / check_rule.

Three uses, each checked against finite differences:

1. a numerically stable derivative: softplus(x) = log(1 + exp(x)) at x = +-800,
   where the automatic derivative of the naive formula overflows;
2. implicit differentiation: a root found by Newton iterations, differentiated
   with one "linear solve" (the implicit function theorem) instead of through
   every iteration;
3. a C function reached through ctypes (libm's lgamma), which enzpy cannot read,
   made differentiable by a rule on the @njit function wrapping it (digamma).

Run: python examples/custom_rules.py
"""
import ctypes
import ctypes.util
import math

import numpy as np
from numba import njit

import enzpy
from enzpy import Active, Const, Forward, Duplicated, Reverse, autodiff


# -- 1. a stable rule ---------------------------------------------------------------------
@njit
def softplus(x):
    return math.log(1.0 + math.exp(x))          # exp(800) overflows: softplus(800) = inf


@njit
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


@njit
def _softplus_fwd(x):
    stable = x + math.log1p(math.exp(-x)) if x > 0.0 else math.log1p(math.exp(x))
    return stable, x


@njit
def _softplus_bwd(x, g):
    return (g * _sigmoid(x),)


@njit
def _softplus_jvp(primals, tangents):
    x, = primals
    return _softplus_fwd(x)[0], tangents[0] * _sigmoid(x)


@njit
def total_softplus(w, x):
    s = 0.0
    for i in range(w.size):
        s += softplus(w[i] * x)
    return s


def stable_rule():
    w = np.array([800.0, -800.0, 0.5])
    (_, naive), = autodiff(Reverse, total_softplus, Const(w), Active(1.0))
    enzpy.defvjp(softplus, _softplus_fwd, _softplus_bwd)
    enzpy.defjvp(softplus, _softplus_jvp)
    (_, dx), = autodiff(Reverse, total_softplus, Const(w), Active(1.0))
    (tangent,) = autodiff(Forward, total_softplus, Const(w), Duplicated(1.0, 1.0))
    expected = 800.0 + 0.5 * _sigmoid(0.5)
    print(f"1. softplus at +-800: automatic derivative {naive!r}, with the rule {dx!r} "
          f"(forward {tangent!r}, exact {expected!r})")
    assert abs(dx - expected) < 1e-9 and abs(tangent - expected) < 1e-9
    check = enzpy.check_rule(softplus, 0.3)
    print(f"   check_rule: {check}")
    assert check.worst_relative_error < 1e-6


# -- 2. implicit differentiation ----------------------------------------------------------------
@njit
def cube_root_of(a):
    """The root of x^3 + a x - 1 = 0, by Newton's method."""
    x = 1.0
    for _ in range(60):
        x -= (x ** 3 + a * x - 1.0) / (3.0 * x ** 2 + a)
    return x


@njit
def _root_fwd(a):
    x = cube_root_of(a)
    return x, (x, a)


@njit
def _root_bwd(res, g):
    x, a = res
    # F(x, a) = x^3 + a x - 1 = 0  =>  dx/da = -F_a / F_x = -x / (3 x^2 + a)
    return (-g * x / (3.0 * x ** 2 + a),)


@njit
def objective(a):
    return cube_root_of(a) ** 2 + a


def implicit_differentiation():
    a = 1.7
    (unrolled,), = autodiff(Reverse, objective, Active(a))
    enzpy.defvjp(cube_root_of, _root_fwd, _root_bwd)
    (implicit,), = autodiff(Reverse, objective, Active(a))
    h = 1e-6
    fd = (objective(a + h) - objective(a - h)) / (2 * h)
    print(f"2. Newton root: through 60 iterations {unrolled!r}, implicit {implicit!r}, "
          f"finite differences {fd!r}")
    assert abs(implicit - fd) < 1e-7 and abs(implicit - unrolled) < 1e-9


# -- 3. a C function through ctypes ----------------------------------------------------------------
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
def gamma_log_likelihood(shape, data):
    """Log-likelihood of a Gamma(shape, 1) sample."""
    s = 0.0
    for i in range(data.size):
        s += (shape - 1.0) * math.log(data[i]) - data[i] - lgamma(shape)
    return s


def c_function():
    data = np.array([0.7, 1.9, 3.2, 0.4])
    try:
        autodiff(Reverse, gamma_log_likelihood, Active(2.0), Const(data))
    except enzpy.UnsupportedError as exc:
        print(f"3. without a rule: {str(exc)[:110]}...")
    enzpy.defvjp(lgamma, _lgamma_fwd, _lgamma_bwd)
    (d, _), = autodiff(Reverse, gamma_log_likelihood, Active(2.0), Const(data))
    h = 1e-6
    fd = (gamma_log_likelihood(2.0 + h, data) - gamma_log_likelihood(2.0 - h, data)) / (2 * h)
    print(f"   with a digamma rule: {d!r} (finite differences {fd!r})")
    assert abs(d - fd) < 1e-6


if __name__ == "__main__":
    stable_rule()
    implicit_differentiation()
    c_function()
