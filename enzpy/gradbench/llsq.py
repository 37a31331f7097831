"""llsq (cmpad llsq_obj): ``0.5 * sum_i (s_i - sum_j x_j t_i^j)^2`` with ``t_i = -1 +
2i/(n-1)`` and ``s_i = sign(t_i)``, as a matrix-vector product with the powers of ``t``; the
gradient by enzpy's reverse mode (through the product)."""
import numpy as np
from numba import njit

import enzpy

from ._common import InputError, array, integer, tofloat, tolist

FUNCTIONS = ("primal", "gradient")


@njit
def llsq_objective(x, n):
    m = x.shape[0]
    t = -1.0 + 2.0 * np.arange(n) / (n - 1)
    s = np.sign(t)
    powers = np.empty((m, n))            # powers[j, i] = t_i ** j
    powers[0] = 1.0
    for j in range(1, m):
        powers[j] = powers[j - 1] * t
    r = s - x @ powers
    return 0.5 * (r @ r)


def prepare(function, inp):
    x = array(inp, "x", (None,))
    if x.size == 0:
        raise InputError("'x' must hold at least one coefficient")
    n = integer(inp, "n", minimum=2)
    if function == "primal":
        return (lambda: llsq_objective(x, n)), tofloat
    return (lambda: enzpy.gradient(llsq_objective, x, n)), tolist


WARMUP = [(f, {"x": [0.1, 0.2, 0.3], "n": 4}) for f in FUNCTIONS]
