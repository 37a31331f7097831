"""enzpy quickstart: reverse-mode derivatives of Numba code, checked by finite differences."""
import math

import numpy as np
from numba import njit

import enzpy
from enzpy import Active, Const, Reverse, ReverseWithPrimal, autodiff


@njit
def f(x, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i) if i % 3 else -x / (i + 1.0)
    return s


@njit
def softplus_sum(a, b):
    # a call to another jitted function, a branch and Numba's own helpers
    out = 0.0
    for k in range(1, 6):
        z = a * k - b
        out += math.log1p(math.exp(z)) if z < 30.0 else z
    return out + max(a, b) + a ** 3 + math.hypot(a, b)


def central_difference(fn, args, i, h=1e-6):
    up, down = list(args), list(args)
    up[i] += h
    down[i] -= h
    return (fn(*up) - fn(*down)) / (2 * h)


def main():
    (dx, dn), = autodiff(Reverse, f, Active(0.4), Const(100))
    print(f"f(x, n):          df/dx = {dx:.12f}   finite difference = "
          f"{central_difference(f, [0.4, 100], 0):.12f}   (dn is {dn})")

    (da, db), y = autodiff(ReverseWithPrimal, softplus_sum, Active(0.7), Active(0.2))
    print(f"softplus_sum:     value = {y:.6f}")
    print(f"                  d/da  = {da:.12f}   finite difference = "
          f"{central_difference(softplus_sum, [0.7, 0.2], 0):.12f}")
    print(f"                  d/db  = {db:.12f}   finite difference = "
          f"{central_difference(softplus_sum, [0.7, 0.2], 1):.12f}")

    (g32, _), = autodiff(Reverse, f, Active(np.float32(0.4)), Const(10))
    print(f"float32 input:    df/dx = {g32!r} ({type(g32).__name__})")

    for report in enzpy.build_report(f) + enzpy.build_report(softplus_sum):
        print("build:", report)
    print("cache:", enzpy.cache_info())


if __name__ == "__main__":
    main()
