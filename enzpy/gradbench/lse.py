"""lse: log-sum-exp from max and sum, ``a + log(sum(exp(x - a)))`` with ``a = max(x)``; its
gradient (the softmax) by enzpy's reverse mode."""
import numpy as np
from numba import njit

import enzpy

from ._common import InputError, array, tofloat, tolist

FUNCTIONS = ("primal", "gradient")


@njit
def logsumexp(x):
    a = np.max(x)
    return a + np.log(np.sum(np.exp(x - a)))


def prepare(function, inp):
    x = array(inp, "x", (None,))
    if x.size == 0:
        raise InputError("'x' must not be empty")
    if function == "primal":
        return (lambda: logsumexp(x)), tofloat
    return (lambda: enzpy.gradient(logsumexp, x)), tolist


WARMUP = [("primal", {"x": [0.1, 0.5, 0.2]}), ("gradient", {"x": [0.1, 0.5, 0.2]})]
