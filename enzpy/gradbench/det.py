"""det (cmpad det_by_minor): the determinant by recursive expansion by minors along the
first remaining row (O(ell!) work, no LU); its gradient by enzpy's reverse mode through the
recursion."""
import numpy as np
from numba import njit

import enzpy

from ._common import InputError, array, integer, tofloat, tolist

FUNCTIONS = ("primal", "gradient")


@njit
def det_of_minor(A, row, used):
    """The determinant of the minor of ``A`` made of rows ``row..`` and the columns not
    ``used``, expanded along its first row."""
    n = A.shape[0]
    if row == n - 1:
        for j in range(n):
            if not used[j]:
                return A[row, j]
    total = 0.0
    sign = 1.0
    for j in range(n):
        if not used[j]:
            used[j] = True
            total += sign * A[row, j] * det_of_minor(A, row + 1, used)
            used[j] = False
            sign = -sign
    return total


@njit
def det_by_minor(a, ell):
    return det_of_minor(a.reshape((ell, ell)), 0, np.zeros(ell, dtype=np.bool_))


def prepare(function, inp):
    ell = integer(inp, "ell", minimum=1)
    a = array(inp, "A", (None,))
    if a.size != ell * ell:
        raise InputError(f"'A' must hold ell*ell = {ell * ell} numbers, got {a.size}")
    if function == "primal":
        return (lambda: det_by_minor(a, ell)), tofloat
    return (lambda: enzpy.gradient(det_by_minor, a, ell)), tolist


WARMUP = [(f, {"A": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0], "ell": 3})
          for f in FUNCTIONS]
