"""particle (Siskind & Pearlmutter): a charged particle falls in the field of two charges,
one of them placed by w; Euler steps with the acceleration -grad p(x) (inner derivative);
gradient descent on w of the squared x-coordinate where it hits the ground (outer
derivative). ``rr``, ``ff``, ``fr``, ``rf`` name the (outer, inner) modes.

The inner gradient is ``autodiff`` inside ``@njit`` (``grad_r``: one reverse pass; ``grad_f``:
one forward pass per coordinate); the outer derivative is ``autodiff`` of ``naive_euler``.
enzpy refuses to differentiate through the inner ``autodiff`` (nested AD), so all four modes
use the ``rules`` workaround of ``_nested`` (its docstring says what it costs): the inner
gradient carries defvjp/defjvp rules whose Hessian-vector products come from ``enzpy.hvp``.
The ``plain`` form is tried once and used as soon as enzpy accepts it.
"""
import numpy as np
from numba import njit

import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff

from . import _nested
from ._common import number, tofloat
from ._gd import multivariate_argmin

FUNCTIONS = ("rr", "ff", "fr", "rf")
# A charge that holds the particle up (w = 10) keeps it from ever landing: the
# simulation gives up (the tool answers, unsuccessfully) instead of looping forever.
MAX_STEPS = 100_000
_NO_LANDING = f"the particle does not reach the ground within {MAX_STEPS} steps"


@njit
def potential(x, w):
    charges = np.array([[10.0, 10.0 - w], [10.0, 0.0]])
    p = 0.0
    for c in range(charges.shape[0]):
        p += 1.0 / np.linalg.norm(x - charges[c])
    return p


@njit
def potential_packed(z):                       # z = (x0, x1, w)
    return potential(z[:2], z[2])


_hvp = _nested.make_hvp("particle", potential_packed)


def _make_gradients():
    @njit
    def grad_r(x, w):
        dx = np.zeros_like(x)
        autodiff(Reverse, potential, Duplicated(x, dx), Const(w))
        return dx

    @njit
    def grad_f(x, w):
        g = np.empty_like(x)
        dx = np.zeros_like(x)
        for i in range(x.shape[0]):
            dx[:] = 0.0
            dx[i] = 1.0
            (t,) = autodiff(Forward, potential, Duplicated(x, dx), Const(w))
            g[i] = t
        return g
    return {"r": grad_r, "f": grad_f}


def _plain_accel(grad):
    @njit
    def accel(x, w):
        return -grad(x, w)
    return accel


def _rules_accel(grad):
    """The inner gradient behind a scalar signature with defvjp/defjvp rules; the VJP and
    JVP of x -> grad_x p(x, w) are products with the Hessian of p in (x0, x1, w) (symmetric),
    by enzpy.hvp. Scalars: see _nested."""
    @njit
    def inner(x0, x1, w):
        g = grad(np.array([x0, x1]), w)
        return g[0], g[1]

    @njit
    def fwd(x0, x1, w):
        return inner(x0, x1, w), (x0, x1, w)

    @njit
    def bwd(res, g):
        hv = _hvp(np.array([res[0], res[1], res[2]]), np.array([g[0], g[1], 0.0]))
        return hv[0], hv[1], hv[2]

    @njit
    def jvp(primals, tangents):
        x0, x1, w = primals
        hv = _hvp(np.array([x0, x1, w]), np.array([tangents[0], tangents[1], tangents[2]]))
        return inner(x0, x1, w), (hv[0], hv[1])

    enzpy.defvjp(inner, fwd, bwd)
    enzpy.defjvp(inner, jvp)

    @njit
    def accel(x, w):
        g0, g1 = inner(x[0], x[1], w)
        return -np.array([g0, g1])
    return accel


def _make_euler(accel):
    @njit
    def naive_euler(w):
        x = np.array([0.0, 8.0])
        xdot = np.array([0.75, 0.0])
        dt = 0.1
        for _ in range(MAX_STEPS):
            xddot = accel(x, w)
            x_new = x + dt * xdot
            if x_new[1] > 0.0:
                x = x_new
                xdot = xdot + dt * xddot
            else:
                dt_f = -x_new[1] / xdot[1]
                x_f = x_new + dt_f * xdot
                return x_f[0] * x_f[0]
        raise ValueError(_NO_LANDING)
    return naive_euler


FORMS = {"plain": {m: _make_euler(_plain_accel(g)) for m, g in _make_gradients().items()},
         "rules": {m: _make_euler(_rules_accel(g)) for m, g in _make_gradients().items()}}


def outer_derivative(naive_euler, outer):
    if outer == "r":
        def g(w):
            (dw,), = autodiff(Reverse, naive_euler, Active(float(w[0])))
            return np.array([dw])
    else:
        def g(w):
            (t,) = autodiff(Forward, naive_euler, Duplicated(float(w[0]), 1.0))
            return np.array([t])
    return g


def run(mode, w0, form=None):
    form = form or _nested.choose_form(
        "particle", lambda: [run(m, w0, "plain") for m in FUNCTIONS])
    naive_euler = FORMS[form][mode[1]]
    w = multivariate_argmin(lambda v: naive_euler(float(v[0])),
                            outer_derivative(naive_euler, mode[0]), [w0])
    return float(w[0])


def prepare(function, inp):
    w0 = number(inp, "w")
    return (lambda: run(function, w0)), tofloat


WARMUP = [(f, {"w": 0.0, "min_runs": 1}) for f in FUNCTIONS]
