"""ode (cmpad an_ode): ``y'_0 = x_0``, ``y'_i = x_i y_{i-1}``, ``y(0) = 0``, integrated to
t = 2 by ``s`` classic Runge-Kutta steps; the gradient of the last component by enzpy's
reverse mode."""
import numpy as np
from numba import njit

import enzpy

from ._common import InputError, array, integer, tolist

FUNCTIONS = ("primal", "gradient")


@njit
def rhs(x, y):
    dy = np.empty_like(y)
    dy[0] = x[0]
    dy[1:] = x[1:] * y[:-1]
    return dy


@njit
def solve(x, s):
    y = np.zeros_like(x)
    h = 2.0 / s
    for _ in range(s):
        k1 = rhs(x, y)
        k2 = rhs(x, y + (h / 2) * k1)
        k3 = rhs(x, y + (h / 2) * k2)
        k4 = rhs(x, y + h * k3)
        y = y + (h / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


@njit
def last(x, s):
    return solve(x, s)[-1]


def prepare(function, inp):
    x = array(inp, "x", (None,))
    s = integer(inp, "s", minimum=1)
    if x.size == 0:
        raise InputError("'x' must not be empty")
    if function == "primal":
        return (lambda: solve(x, s)), tolist
    return (lambda: enzpy.gradient(last, x, s)), tolist


WARMUP = [(f, {"x": [0.1, 0.2, 0.3], "s": 2}) for f in FUNCTIONS]
