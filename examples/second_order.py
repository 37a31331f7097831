"""Forward mode, second derivatives and derivatives inside ``@njit`` code.

1. Forward mode: the directional derivative of the Rosenbrock function, next to
   the gradient from reverse mode.
2. ``hvp``/``hessian`` (reverse mode over forward mode) against the analytic
   Hessian, and a few Newton steps on Rosenbrock with the exact Hessian.
3. A jitted gradient-descent loop calling ``autodiff`` itself: no Python in the loop.

Run ``python examples/second_order.py``.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

import enzpy
from enzpy import Const, Duplicated, Forward, Reverse, autodiff


@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_hessian(x):
    n = x.size
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        h[i, i + 1] -= 400.0 * x[i]
        h[i + 1, i] -= 400.0 * x[i]
        h[i + 1, i + 1] += 200.0
    return h


@njit
def fit_line(w, X, y, steps, rate):
    """Least squares by gradient descent; ``autodiff`` is called from jitted code."""
    g = np.zeros_like(w)
    for _ in range(steps):
        g[:] = 0.0
        autodiff(Reverse, squared_error, Duplicated(w, g), Const(X), Const(y))
        w -= rate * g / X.shape[0]
    return w


@njit
def squared_error(w, X, y):
    s = 0.0
    for i in range(X.shape[0]):
        r = w[0] * X[i] + w[1] - y[i]
        s += r * r
    return s


def main():
    x = np.array([-1.2, 1.0, 0.5, 0.8])
    v = np.array([1.0, -0.5, 0.25, 0.0])

    # 1. forward mode: df/dx . v in one sweep
    (tangent,) = autodiff(Forward, rosenbrock, Duplicated(x, v.copy()))
    dx = np.zeros_like(x)
    autodiff(Reverse, rosenbrock, Duplicated(x, dx))
    print(f"forward tangent {tangent:.12g}, gradient . v {dx @ v:.12g}")

    # 2. second order
    t = time.perf_counter()
    hv = enzpy.hvp(rosenbrock, x, v)
    build = time.perf_counter() - t
    print(f"hvp (built in {build:.2f} s):", hv)
    print("analytic H v:        ", rosenbrock_hessian(x) @ v)
    assert np.allclose(hv, rosenbrock_hessian(x) @ v, rtol=1e-12)
    assert np.allclose(enzpy.hessian(rosenbrock, x), rosenbrock_hessian(x), rtol=1e-12)

    z = np.array([-1.2, 1.0])
    for step in range(8):
        grad = enzpy.gradient(rosenbrock, z)
        z = z - np.linalg.solve(enzpy.hessian(rosenbrock, z), grad)
        print(f"Newton step {step + 1}: x = {z}, f = {rosenbrock(z):.3e}")
    print("Jacobian of x -> sin(x) * x[0]:\n", enzpy.jacobian(sin_scaled, x[:3]))

    # 3. autodiff inside @njit
    X = np.linspace(0.0, 1.0, 50)
    w = fit_line(np.zeros(2), X, 3.0 * X - 0.5, 3000, 0.5)
    print("fitted line inside @njit: slope %.6f, intercept %.6f" % tuple(w))


@njit
def sin_scaled(x):
    return np.sin(x) * x[0]


if __name__ == "__main__":
    main()
