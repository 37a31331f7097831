"""The suite's gradient-descent rule (cpp/gradbench/gd.hpp) for particle and saddle: start with
eta = 1e-5; stop when |grad| <= 1e-5 or the step is <= 1e-5; take the step only if it lowers
f (then count it, doubling eta after 10 accepted steps), otherwise halve eta."""
import numpy as np


def multivariate_argmin(f, g, x):
    x = np.array(x, dtype=np.float64)
    fx = f(x)
    gx = g(x)
    i = 0
    eta = 1e-5
    while True:
        if np.sqrt(np.sum(gx * gx)) <= 1e-5:
            return x
        if i == 10:
            eta *= 2.0
            i = 0
            continue
        x_prime = x - eta * gx
        if np.sqrt(np.sum((x - x_prime) ** 2)) <= 1e-5:
            return x
        fx_prime = f(x_prime)
        if fx_prime < fx:
            x, fx, gx = x_prime, fx_prime, g(x_prime)
            i += 1
        else:
            eta /= 2.0
            i = 0


def multivariate_argmax(f, g, x):
    return multivariate_argmin(lambda v: -f(v), lambda v: -g(v), x)
