"""saddle: the saddle point of ``f(p1, p2) = |p1|^2 - |p2|^2`` by nested optimization:
``p1* = argmin_p1 max_p2 f(p1, p2)`` (the inner max by gradient ascent, differentiated
through by the outer derivative), then ``p2* = argmax_p2 f(p1*, p2)``, all by the suite's
gradient-descent rule from ``start``. ``rr``, ``ff``, ``fr``, ``rf`` name the (outer,
inner) modes.

The inner gradient d f / d p2 is ``autodiff`` inside ``@njit`` (``grad_r``: one reverse pass;
``grad_f``: one forward pass per coordinate), called in every step of the inner ascent; the
outer derivative is ``autodiff`` of ``inner_max`` with respect to p1. As in particle, enzpy
refuses to differentiate through the inner ``autodiff`` (nested AD), so all four modes use the
``rules`` workaround of ``_nested`` (its docstring says what it costs): the inner gradient
carries defvjp/defjvp rules whose Hessian-vector products come from ``enzpy.hvp``. The
``plain`` form is tried once and used as soon as enzpy accepts it.
"""
import numpy as np
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Forward, Reverse, autodiff

from . import _nested
from ._common import array, tolist
from ._gd import multivariate_argmax, multivariate_argmin

FUNCTIONS = ("rr", "ff", "fr", "rf")


@njit
def f(p1, p2):
    return np.sum(p1 ** 2) - np.sum(p2 ** 2)


@njit
def f_packed(z):                               # z = (p1, p2)
    return f(z[:2], z[2:])


_hvp = _nested.make_hvp("saddle", f_packed)


def _make_gradients():
    """d f / d p2 by the inner mode."""
    @njit
    def grad_r(p1, p2):
        dp2 = np.zeros_like(p2)
        autodiff(Reverse, f, Const(p1), Duplicated(p2, dp2))
        return dp2

    @njit
    def grad_f(p1, p2):
        g = np.empty_like(p2)
        dp2 = np.zeros_like(p2)
        for i in range(p2.shape[0]):
            dp2[:] = 0.0
            dp2[i] = 1.0
            (t,) = autodiff(Forward, f, Const(p1), Duplicated(p2, dp2))
            g[i] = t
        return g
    return {"r": grad_r, "f": grad_f}


def _rules_grad(grad):
    """The inner gradient behind a scalar signature with defvjp/defjvp rules; the VJP and
    JVP of (p1, p2) -> d f / d p2 are products with the Hessian of f in (p1, p2)
    (symmetric), by enzpy.hvp. Scalars: see _nested."""
    @njit
    def inner(a0, a1, b0, b1):
        g = grad(np.array([a0, a1]), np.array([b0, b1]))
        return g[0], g[1]

    @njit
    def fwd(a0, a1, b0, b1):
        return inner(a0, a1, b0, b1), (a0, a1, b0, b1)

    @njit
    def bwd(res, g):
        hv = _hvp(np.array([res[0], res[1], res[2], res[3]]), np.array([0.0, 0.0, g[0], g[1]]))
        return hv[0], hv[1], hv[2], hv[3]

    @njit
    def jvp(primals, tangents):
        z = np.array([primals[0], primals[1], primals[2], primals[3]])
        hv = _hvp(z, np.array([tangents[0], tangents[1], tangents[2], tangents[3]]))
        return inner(primals[0], primals[1], primals[2], primals[3]), (hv[2], hv[3])

    enzpy.defvjp(inner, fwd, bwd)
    enzpy.defjvp(inner, jvp)

    @njit
    def wrapped(p1, p2):
        g0, g1 = inner(p1[0], p1[1], p2[0], p2[1])
        return np.array([g0, g1])
    return wrapped


def _make_max(grad):
    """max over p2 of f(p1, p2) by gradient ascent from ``start`` (gd.hpp's rule on -f)."""
    @njit
    def inner_max(p1, start):
        p2 = start.copy()
        fx = -f(p1, p2)
        gx = -grad(p1, p2)
        i = 0
        eta = 1e-5
        while True:
            if np.sqrt(np.sum(gx * gx)) <= 1e-5:
                break
            if i == 10:
                eta *= 2.0
                i = 0
                continue
            p2_prime = p2 - eta * gx
            if np.sqrt(np.sum((p2 - p2_prime) ** 2)) <= 1e-5:
                break
            fx_prime = -f(p1, p2_prime)
            if fx_prime < fx:
                p2 = p2_prime
                fx = fx_prime
                gx = -grad(p1, p2)
                i += 1
            else:
                eta /= 2.0
                i = 0
        return f(p1, p2)
    return inner_max


def _forms():
    plain = _make_gradients()
    rules = {m: _rules_grad(g) for m, g in _make_gradients().items()}
    return {name: {m: (g, _make_max(g)) for m, g in grads.items()}
            for name, grads in (("plain", plain), ("rules", rules))}


FORMS = _forms()


def outer_gradient(inner_max, outer, start):
    if outer == "r":
        def g(p1):
            dp1 = np.zeros_like(p1)
            autodiff(Reverse, inner_max, Duplicated(p1, dp1), Const(start))
            return dp1
    else:
        def g(p1):
            out = np.empty_like(p1)
            for i in range(p1.shape[0]):
                e = np.zeros_like(p1)
                e[i] = 1.0
                (out[i],) = autodiff(Forward, inner_max, Duplicated(p1, e), Const(start))
            return out
    return g


def run(mode, start, form=None):
    form = form or _nested.choose_form(
        "saddle", lambda: [run(m, start, "plain") for m in FUNCTIONS])
    grad, inner_max = FORMS[form][mode[1]]
    p1 = multivariate_argmin(lambda v: inner_max(v, start),
                             outer_gradient(inner_max, mode[0], start), start)
    p2 = multivariate_argmax(lambda v: f(p1, v), lambda v: grad(p1, v), start)
    return np.concatenate((p1, p2))


def prepare(function, inp):
    start = array(inp, "start", (2,))
    return (lambda: run(function, start)), tolist


WARMUP = [(fn, {"start": [1.0, 1.0]}) for fn in FUNCTIONS]
