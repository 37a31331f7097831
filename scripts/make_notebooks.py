"""Write the gallery notebooks of ``examples/`` from the cell texts below (no outputs).

    python scripts/make_notebooks.py [--only NAME]      # then:
    python scripts/refresh_notebooks.py [--only NAME]   # execute them in place, with outputs

Edit a notebook here (or in Jupyter, then keep this file in step) and re-run both.
``seeds.ipynb`` is not generated here.
"""
from __future__ import annotations

import argparse
import os

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}


def notebook(name):
    def register(fn):
        NOTEBOOKS[name] = fn()
        return fn
    return register


def md(text):
    return ("md", text.strip("\n"))


def code(text):
    return ("code", text.strip("\n"))


# ---------------------------------------------------------------------------------------------
@notebook("getting_started")
def _getting_started():
    return [
        md('''
# Getting started with enzpy

You write a function with NumPy and `@njit` as usual; enzpy gives you its **exact derivatives**
(not finite differences: the derivative of the compiled code itself, to rounding error), as
fast compiled code. It works on the LLVM IR Numba produces, so loops, branches, calls and
in-place array updates are all fine.

This notebook covers the whole basic API:

1. `autodiff(Reverse, ...)`: the gradient of a scalar function, with the arguments annotated
   `Active` (a float whose derivative you want), `Duplicated` (an array plus a *shadow* array
   that receives its derivative) and `Const` (not differentiated);
2. `autodiff(Forward, ...)`: a directional derivative in one sweep;
3. the helpers `gradient` and `check_gradient`;
4. what enzpy says when it cannot differentiate something (`UnsupportedError`), and
   `build_report`, which tells you what the first call spent its time on.

Every derivative below is printed next to an analytic value or a finite difference.
'''),
        code('''
import math
import time

import numpy as np
import matplotlib.pyplot as plt
import numba
from numba import njit

import enzpy
from enzpy import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                   ReverseWithPrimal, autodiff)

%matplotlib inline
print(f"enzpy {enzpy.__version__}, Numba {numba.__version__}, NumPy {np.__version__}")
'''),
        md('''
## 1. Reverse mode on a scalar function: `Active` and `Const`

`f(x, n)` below has a loop whose trip count is an argument and a branch inside the loop.
`x` is `Active`: reverse mode returns its derivative. `n` is an integer, so it is `Const`
(an unannotated argument is `Const` too). The result is a tuple of derivatives, one per
argument, `None` for the non-`Active` ones, wrapped in one more tuple:
`((dx, dn),) = autodiff(Reverse, ...)`. `ReverseWithPrimal` also returns `f`'s value.

The first call *builds* the derivative (a fraction of a second after Numba's compile);
later calls with the same argument types reuse it.
'''),
        code('''
@njit
def f(x, n):
    s = 0.0
    for i in range(n):
        if i % 3:
            s += math.sin(x * i)
        else:
            s -= x / (i + 1.0)
    return s

def df_exact(x, n):                    # by hand, for comparison
    return sum(i * math.cos(x * i) if i % 3 else -1.0 / (i + 1.0) for i in range(n))

t = time.perf_counter()
((dx, dn),) = autodiff(Reverse, f, Active(0.4), Const(100))
print(f"first call (builds the derivative): {time.perf_counter() - t:.2f} s")
t = time.perf_counter()
(dx, dn), y = autodiff(ReverseWithPrimal, f, Active(0.4), Const(100))
print(f"a later call:                       {(time.perf_counter() - t) * 1e6:.0f} us")
print(f"f(0.4, 100) = {y:.12f}   (direct call: {f(0.4, 100):.12f})")
print(f"df/dx       = {dx:.12f}   (by hand:     {df_exact(0.4, 100):.12f})   dn = {dn}")
print(f"error: {abs(dx - df_exact(0.4, 100)):.1e}")
'''),
        md('''
Because the derivative is a compiled function, evaluating it over a grid is cheap. The plot
shows `f(x, 30)` and its derivative next to the hand-written one (the two curves coincide).
'''),
        code('''
xs = np.linspace(-1.0, 1.0, 400)
ys = np.array([f(x, 30) for x in xs])
dys = np.array([autodiff(Reverse, f, Active(x), Const(30))[0][0] for x in xs])
exact = np.array([df_exact(x, 30) for x in xs])
print(f"largest error over the grid: {np.max(np.abs(dys - exact)):.1e}")

fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
ax[0].plot(xs, ys)
ax[0].set_title("f(x, 30)")
ax[1].plot(xs, dys, lw=3, alpha=0.5, label="enzpy (reverse mode)")
ax[1].plot(xs, exact, "k--", lw=1, label="by hand")
ax[1].set_title("df/dx")
ax[1].legend(loc="lower left", fontsize=8)
for a in ax:
    a.set_xlabel("x")
    a.grid(alpha=0.3)
plt.tight_layout()
plt.show()
'''),
        md('''
## 2. Arrays: `Duplicated(x, dx)`

An array argument is passed with a **shadow** of the same shape. Reverse mode *adds* the
derivative into it (`dx += d result / dx`, as in Enzyme), so start from zeros.

Many Numba functions write their result into an output array instead of returning it. Then
the output is `Duplicated` too, and its shadow is the *seed*: with `dout = [1.0]` you get
the derivative of `out[0]`.
'''),
        code('''
@njit
def model(X, out):                      # writes its result, returns nothing
    out[0] = (np.sin(X) ** 2).sum()

rng = np.random.default_rng(0)
X = rng.random(100)
dX = np.zeros_like(X)
out, dout = np.zeros(1), np.ones(1)
autodiff(Reverse, model, Duplicated(X, dX), Duplicated(out, dout))
print("out[0] =", out[0])
print("error against d/dX sum(sin(X)^2) = 2 sin(X) cos(X):",
      np.max(np.abs(dX - 2 * np.sin(X) * np.cos(X))))

# the shadow accumulates: a second call adds the same gradient again
autodiff(Reverse, model, Duplicated(X, dX), Duplicated(out, np.ones(1)))
print("after a second call, dX / (2 sin cos) =", np.unique(np.round(dX / (2 * np.sin(X) * np.cos(X)), 12)))
'''),
        md('''
## 3. Forward mode: one directional derivative per sweep

Reverse mode gives the whole gradient at about the cost of a few function evaluations,
whatever the number of inputs. Forward mode gives the derivative **along one direction** `v`
(`grad f . v` for a scalar function, `J v` for a function returning an array). In forward
mode every differentiated argument is `Duplicated`: `Duplicated(x, v)` with `v` the
direction (a float for a float `x`). `Forward` returns `(tangent,)`; `ForwardWithPrimal`
returns `(tangent, value)`.
'''),
        code('''
@njit
def energy(x):
    s = 0.0
    for i in range(x.size - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s

x = np.array([-1.2, 1.0, 0.5, 0.8])
v = np.array([1.0, -0.5, 0.25, 0.0])
(tangent,) = autodiff(Forward, energy, Duplicated(x, v))
tangent2, value = autodiff(ForwardWithPrimal, energy, Duplicated(x, v))
g = np.zeros_like(x)
autodiff(Reverse, energy, Duplicated(x, g))
h = 1e-6
fd = (energy(x + h * v) - energy(x - h * v)) / (2 * h)
print(f"forward tangent  {tangent:.10f}  (value {value:.6f})")
print(f"gradient . v     {g @ v:.10f}")
print(f"finite diff.     {fd:.10f}   relative error {abs(tangent - fd) / abs(fd):.1e}")

(tx,) = autodiff(Forward, f, Duplicated(0.4, 1.0), Const(100))   # scalars: the tangent is a float
print(f"forward df/dx of f: {tx:.12f}  (reverse: {dx:.12f}, by hand: {df_exact(0.4, 100):.12f})")

@njit
def field(x):
    return np.sin(x) * x[0]           # returns an array: the tangent is an array (J v)

(Jv,) = autodiff(Forward, field, Duplicated(x, v))
fd = (field(x + h * v) - field(x - h * v)) / (2 * h)
print("J v:", Jv, " error against finite differences:", np.max(np.abs(Jv - fd)))
'''),
        md('''
## 4. `gradient` and `check_gradient`

`enzpy.gradient(f, x, *args)` is the short form for the common case: the gradient of a
scalar function with respect to its first argument (a float or an array), the other
arguments `Const`. `enzpy.check_gradient(f, *annotated_args)` compares enzpy's derivatives
with central finite differences entry by entry and reports the worst relative error. Use it
when you write a new model: a small error (1e-6 or less, limited by the finite differences)
says the derivative is right.
'''),
        code('''
@njit
def logistic_loss(w, A, labels):
    z = A @ w
    return np.sum(np.log1p(np.exp(-labels * z))) + 0.5 * (w @ w)

A = rng.standard_normal((50, 5))
labels = np.sign(rng.standard_normal(50))
w = rng.standard_normal(5) * 0.1

grad = enzpy.gradient(logistic_loss, w, A, labels)
sig = 1.0 / (1.0 + np.exp(labels * (A @ w)))
by_hand = -A.T @ (labels * sig) + w
print("gradient:", grad)
print("error against the analytic gradient:", np.max(np.abs(grad - by_hand)))

check = enzpy.check_gradient(logistic_loss, Duplicated(w, np.zeros(5)), Const(A), Const(labels))
print("check_gradient:", check)
'''),
        md('''
## 5. When enzpy cannot differentiate something: `UnsupportedError`

Not everything Numba compiles can be differentiated: enzpy refuses, instead of returning a
wrong number, with an `enzpy.UnsupportedError` that names the function, the construct and,
when it can, what to use instead. Here a `dict` stores a differentiable value (Numba's
typed dict is implemented in C, which enzpy cannot read):
'''),
        code('''
@njit
def with_dict(x):
    d = {}
    d[0] = x
    return d[0] * 2.0

print("the function itself runs:", with_dict(1.5))
try:
    autodiff(Reverse, with_dict, Active(1.5))
except enzpy.UnsupportedError as exc:
    print(f"{type(exc).__name__}: {exc}")
'''),
        md('''
Other mistakes are ordinary Python errors raised before anything runs, e.g. a shadow whose
shape does not fit its array (`ValueError`), or `Active` on an array (`TypeError`):
'''),
        code('''
for call in (lambda: autodiff(Reverse, energy, Duplicated(x, np.zeros(3))),
             lambda: autodiff(Reverse, energy, Active(x))):
    try:
        call()
    except (TypeError, ValueError) as exc:
        print(f"{type(exc).__name__}: {exc}")
'''),
        md('''
## 6. Reading `build_report`

`enzpy.build_report(f)` lists one report per derivative built for `f` (one per argument types
and annotations). Its `timings` are the stages of the build, in seconds: `numba_compile` is
Numba's own compile of your function (typing, lowering, LLVM: the `numba` field splits it),
`cache_lookup`/`cache_store` the persistent cache, then enzpy's stages: capturing and cleaning up the IR, reading it, the `reverse`
transformation, LLVM `optimize` and `codegen` of the derivative, the Python `wrap`per.
`total` sums enzpy's stages (without Numba's compile). `peak_tape_bytes` is the largest
*tape* (the values the forward sweep records for the reverse sweep) of any call so far.
`cache` says whether the derivative was `stored` in, or `loaded` from, enzpy's persistent
cache on disk (a later process loads it instead of building it).
'''),
        code('''
report = enzpy.build_report(logistic_loss)[-1]
print(report, "\\n")
print(f"signature:           {report.signature}")
print(f"enzpy's build total: {report.total:.3f} s")
for stage, seconds in report.timings.items():
    print(f"    {stage:<14} {seconds * 1e3:8.1f} ms")
print(f"primal IR instructions: {report.primal_instructions}, "
      f"derivative functions: {report.derivative_functions}, "
      f"peak tape: {report.peak_tape_bytes} bytes, cache: {report.cache}")

# after the build, a call costs about as much as a few evaluations of the function
n = 2000
t = time.perf_counter()
for _ in range(n):
    logistic_loss(w, A, labels)
primal = (time.perf_counter() - t) / n
t = time.perf_counter()
for _ in range(n):
    enzpy.gradient(logistic_loss, w, A, labels)
gradient_time = (time.perf_counter() - t) / n
print(f"primal call {primal * 1e6:.1f} us, gradient call {gradient_time * 1e6:.1f} us "
      f"(including Python overhead of a few us per call)")
'''),
        md('''
## Where next

- `numpy_models.ipynb`: fitting a Gaussian mixture, a small neural network and a Gaussian
  process with `scipy.optimize` and enzpy gradients;
- `second_order.ipynb`: Hessians, Newton's method, Jacobians of an ODE solver, `autodiff`
  called inside `@njit` code;
- `custom_rules.ipynb`: your own derivative rules (stable formulas, implicit differentiation,
  C functions).
'''),
    ]


# ---------------------------------------------------------------------------------------------
@notebook("numpy_models")
def _numpy_models():
    return [
        md('''
# Fitting NumPy models written for Numba

Three models written the way Numba users write them (NumPy inside `@njit`, a flat parameter
vector, loops where they are clearer), fitted with enzpy gradients:

1. a **Gaussian mixture** log-likelihood, with a max-based `logsumexp`;
2. a small **neural network** (two `tanh` layers and `@`);
3. a **Gaussian process** marginal likelihood through `np.linalg.cholesky`.

Each gradient is checked against finite differences with `enzpy.check_gradient` before it is
used, and `scipy.optimize.minimize(method="L-BFGS-B", jac=...)` does the fitting. At the end,
the cost of a gradient next to the cost of the function itself.
'''),
        code('''
import math
import time

import numpy as np
import matplotlib.pyplot as plt
import numba
from numba import njit
from scipy.optimize import minimize

import enzpy
from enzpy import Const, Duplicated

%matplotlib inline
print(f"enzpy {enzpy.__version__}, Numba {numba.__version__}, NumPy {np.__version__}")
rng = np.random.default_rng(42)

def fit(loss, theta0, *args, maxiter=500):
    """L-BFGS-B with enzpy's gradient; returns the result and the loss after each iteration."""
    history = [loss(theta0, *args)]
    result = minimize(loss, theta0, args=args, method="L-BFGS-B",
                      jac=lambda th, *a: enzpy.gradient(loss, th, *a),
                      callback=lambda th: history.append(loss(th, *args)),
                      options={"maxiter": maxiter})
    return result, history
'''),
        md('''
## 1. A Gaussian mixture

`theta` packs the mixture's `K` logits, means and log standard deviations. The negative
log-likelihood of each point is a `logsumexp` over the components, computed the stable way
(subtract the row's maximum). The maximum is not differentiable where two components tie,
but it cancels out of the result, and enzpy differentiates the code as written: the
gradient is exact.
'''),
        code('''
@njit
def gmm_nll(theta, x):
    K = theta.size // 3
    logits, mu, log_sigma = theta[:K], theta[K:2 * K], theta[2 * K:]
    log_w = logits - logits.max()
    log_w = log_w - np.log(np.exp(log_w).sum())          # log of the softmax weights
    sigma = np.exp(log_sigma)
    nll = 0.0
    for i in range(x.size):
        z = (x[i] - mu) / sigma
        logp = log_w - log_sigma - 0.5 * z * z - 0.5 * math.log(2 * math.pi)
        m = logp.max()
        nll -= m + math.log(np.exp(logp - m).sum())        # logsumexp
    return nll / x.size

true_w, true_mu, true_sigma = np.array([0.5, 0.3, 0.2]), np.array([-2.0, 1.0, 4.0]), np.array([0.6, 0.8, 0.5])
comp = rng.choice(3, size=800, p=true_w)
data = rng.normal(true_mu[comp], true_sigma[comp])

theta0 = np.concatenate([np.zeros(3), [-1.0, 0.0, 1.0], np.zeros(3)])
check = enzpy.check_gradient(gmm_nll, Duplicated(theta0, np.zeros(9)), Const(data))
print("gradient check at the starting point:", check)
assert check.worst_relative_error < 1e-5

result, gmm_history = fit(gmm_nll, theta0, data)
th = result.x
w_fit = np.exp(th[:3] - th[:3].max()); w_fit /= w_fit.sum()
order = np.argsort(th[3:6])
print(f"{result.nit} iterations, loss {result.fun:.5f}")
print("weights", np.round(w_fit[order], 3), "means", np.round(th[3:6][order], 3),
      "sigmas", np.round(np.exp(th[6:])[order], 3))
print("largest gradient entry at the optimum:", np.max(np.abs(enzpy.gradient(gmm_nll, th, data))))
'''),
        code('''
def mixture_pdf(t, w, mu, sigma):
    return (w / (sigma * np.sqrt(2 * np.pi)) * np.exp(-0.5 * ((t[:, None] - mu) / sigma) ** 2)).sum(axis=1)

grid = np.linspace(data.min() - 1, data.max() + 1, 400)
fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
ax[0].hist(data, bins=60, density=True, alpha=0.4, label="data")
ax[0].plot(grid, mixture_pdf(grid, w_fit, th[3:6], np.exp(th[6:])), lw=2, label="fitted mixture")
ax[0].plot(grid, mixture_pdf(grid, true_w, true_mu, true_sigma), "k--", lw=1, label="true density")
ax[0].legend(); ax[0].set_title("Gaussian mixture fit")
ax[1].plot(gmm_history, "o-", ms=3)
ax[1].set_xlabel("L-BFGS-B iteration"); ax[1].set_ylabel("negative log-likelihood / n")
ax[1].set_title("loss"); ax[1].grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
        md('''
## 2. A small neural network

A 1-16-16-1 network with `tanh` activations fitted to noisy samples of a curve. The
weights are slices of one flat vector, reshaped into matrices, and the layers are `@`
products: enzpy differentiates the BLAS calls Numba makes with more BLAS calls.
'''),
        code('''
H = 16
shapes = [(1, H), (H,), (H, H), (H,), (H, 1), (1,)]
sizes = [int(np.prod(s)) for s in shapes]
n_params = sum(sizes)

@njit
def mlp(theta, X):
    W1 = theta[0:H].reshape((1, H)); b1 = theta[H:2 * H]
    o = 2 * H
    W2 = theta[o:o + H * H].reshape((H, H)); b2 = theta[o + H * H:o + H * H + H]
    o += H * H + H
    W3 = theta[o:o + H].reshape((H, 1)); b3 = theta[o + H]
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    return (h2 @ W3)[:, 0] + b3

@njit
def mlp_loss(theta, X, y):
    r = mlp(theta, X) - y
    return (r * r).mean() + 1e-5 * (theta * theta).sum()

X_train = np.sort(rng.uniform(-3, 3, 120)).reshape(-1, 1)
y_train = np.sin(1.5 * X_train[:, 0]) + 0.3 * np.cos(4 * X_train[:, 0]) + 0.1 * rng.standard_normal(120)
theta0 = rng.standard_normal(n_params) * 0.5

check = enzpy.check_gradient(mlp_loss, Duplicated(theta0, np.zeros(n_params)), Const(X_train), Const(y_train))
print(f"{n_params} parameters; gradient check:", check)
assert check.worst_relative_error < 1e-5

t = time.perf_counter()
result, mlp_history = fit(mlp_loss, theta0, X_train, y_train, maxiter=400)
print(f"{result.nit} iterations in {time.perf_counter() - t:.2f} s, training loss {result.fun:.4f}")
'''),
        code('''
X_grid = np.linspace(-3.2, 3.2, 300).reshape(-1, 1)
fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
ax[0].plot(X_train[:, 0], y_train, ".", alpha=0.6, label="data")
ax[0].plot(X_grid[:, 0], mlp(result.x, X_grid), lw=2, label="network")
ax[0].plot(X_grid[:, 0], np.sin(1.5 * X_grid[:, 0]) + 0.3 * np.cos(4 * X_grid[:, 0]), "k--", lw=1, label="true curve")
ax[0].legend(); ax[0].set_title("1-16-16-1 tanh network")
ax[1].semilogy(mlp_history)
ax[1].set_xlabel("L-BFGS-B iteration"); ax[1].set_ylabel("mean squared error")
ax[1].set_title("loss"); ax[1].grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
        md('''
## 3. A Gaussian process: marginal likelihood through Cholesky

The hyperparameters (log length scale, log signal amplitude, log noise) of a squared
exponential kernel are fitted by maximizing the marginal likelihood
`-log p(y) = 1/2 y^T K^-1 y + sum(log diag L) + n/2 log 2 pi` with `K = L L^T`. enzpy
differentiates `np.linalg.cholesky` and `np.linalg.solve` with matrix-level rules.
'''),
        code('''
@njit
def gp_nll(log_params, x, y):
    ell, amp, noise = np.exp(log_params)
    n = x.size
    K = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            d = (x[i] - x[j]) / ell
            K[i, j] = amp * amp * np.exp(-0.5 * d * d)
        K[i, i] += noise * noise + 1e-8
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L, y)                 # L alpha = y, so y^T K^-1 y = alpha . alpha
    return 0.5 * (alpha @ alpha) + np.log(np.diag(L)).sum() + 0.5 * n * math.log(2 * math.pi)

x_gp = np.sort(rng.uniform(0, 10, 40))
y_gp = np.sin(x_gp) + 0.5 * np.sin(2.3 * x_gp) + 0.2 * rng.standard_normal(40)
p0 = np.log(np.array([3.0, 1.0, 0.5]))

t = time.perf_counter()
enzpy.gradient(gp_nll, p0, x_gp, y_gp)
report = enzpy.build_report(gp_nll)[-1]
print(f"first gradient call: {time.perf_counter() - t:.1f} s (enzpy build {report.total:.1f} s, "
      f"of which capturing Numba's IR {report.timings['capture']:.1f} s; cache: {report.cache.split(':')[0]})")
check = enzpy.check_gradient(gp_nll, Duplicated(p0, np.zeros(3)), Const(x_gp), Const(y_gp))
print("gradient check:", check)
assert check.worst_relative_error < 1e-5
result, gp_history = fit(gp_nll, p0, x_gp, y_gp)
ell, amp, noise = np.exp(result.x)
print(f"{result.nit} iterations: length scale {ell:.3f}, amplitude {amp:.3f}, noise {noise:.3f} "
      f"(data noise 0.2), -log p(y) = {result.fun:.4f}")
print("gradient at the optimum:", enzpy.gradient(gp_nll, result.x, x_gp, y_gp))
'''),
        code('''
def rbf(a, b):
    return amp ** 2 * np.exp(-0.5 * ((a[:, None] - b[None, :]) / ell) ** 2)

xs = np.linspace(0, 10, 300)
K = rbf(x_gp, x_gp) + (noise ** 2 + 1e-8) * np.eye(x_gp.size)
Ks = rbf(xs, x_gp)
mean = Ks @ np.linalg.solve(K, y_gp)
std = np.sqrt(np.maximum(amp ** 2 - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T)), 0))

fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
ax[0].fill_between(xs, mean - 2 * std, mean + 2 * std, alpha=0.25, label="posterior +- 2 sd")
ax[0].plot(xs, mean, lw=2, label="posterior mean")
ax[0].plot(x_gp, y_gp, "k.", label="data")
ax[0].legend(fontsize=8); ax[0].set_title("Gaussian process, fitted hyperparameters")
ax[1].plot(gp_history, "o-", ms=3)
ax[1].set_xlabel("L-BFGS-B iteration"); ax[1].set_ylabel("-log p(y)")
ax[1].set_title("loss"); ax[1].grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
        md('''
## What a gradient costs

Reverse mode computes the whole gradient in one forward sweep (which records what the
reverse sweep needs) and one reverse sweep: its cost is a multiple of the function's that
does not grow with the number of parameters (finite differences would need one or two
evaluations *per parameter*). The multiple depends on the code: the network is mostly BLAS
products, cheap to reverse; the mixture allocates small arrays for every data point (each
gets a shadow array in the gradient) and the GP's reverse sweep goes through the matrix
rules of `cholesky` and `solve`, so theirs are larger. Times below are the best of several runs, after the first (building) call,
and include a few microseconds of Python overhead per call.
'''),
        code('''
def best_time(fn, repeat=7, number=20):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return min(times)

cases = {
    f"mixture ({data.size} points, 9 params)": (gmm_nll, th, (data,)),
    f"network ({X_train.shape[0]} points, {n_params} params)": (mlp_loss, theta0, (X_train, y_train)),
    f"GP ({x_gp.size} points, 3 params)": (gp_nll, p0, (x_gp, y_gp)),
}
rows = []
for name, (fn, point, args) in cases.items():
    primal = best_time(lambda: fn(point, *args))
    grad = best_time(lambda: enzpy.gradient(fn, point, *args))
    rows.append((name, primal, grad))
    print(f"{name:<34} primal {primal * 1e6:8.1f} us   gradient {grad * 1e6:8.1f} us   ratio {grad / primal:5.1f}")

fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh([r[0] for r in rows], [r[2] / r[1] for r in rows])
ax.set_xlabel("gradient time / primal time"); ax.grid(axis="x", alpha=0.3)
plt.tight_layout(); plt.show()
'''),
    ]


# ---------------------------------------------------------------------------------------------
@notebook("second_order")
def _second_order():
    return [
        md('''
# Second derivatives, Jacobians and derivatives inside `@njit`

1. **Newton's method** with the exact Hessian (`enzpy.hessian`), and Newton-CG with
   Hessian-vector products (`enzpy.hvp`) on a 100-dimensional problem;
2. the **Jacobian of an ODE integrator** (RK4 written in `@njit`): how the trajectory of a
   predator-prey model depends on its four parameters;
3. an **optimizer loop compiled with Numba** that calls `autodiff` itself: fitting the ODE's
   parameters with no Python in the loop.

`hvp` is reverse mode applied to the forward-mode derivative (enzpy differentiates its own
output); `hessian` calls it once per input, so it is for small inputs.
'''),
        code('''
import math
import time

import numpy as np
import matplotlib.pyplot as plt
import numba
from numba import njit
from scipy.optimize import minimize

import enzpy
from enzpy import Const, Duplicated, Reverse, ReverseWithPrimal, autodiff

%matplotlib inline
print(f"enzpy {enzpy.__version__}, Numba {numba.__version__}, NumPy {np.__version__}")
'''),
        md('''
## 1. Newton's method on the Rosenbrock function

First the Hessian against the one written by hand, then Newton steps
`x <- x - H(x)^-1 grad f(x)` from the classic start `(-1.2, 1)`, with a backtracking line
search so that each step decreases `f`.
'''),
        code('''
@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.size - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s

def rosenbrock_hessian(x):                          # by hand, for the check
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        H[i, i + 1] -= 400.0 * x[i]
        H[i + 1, i] -= 400.0 * x[i]
        H[i + 1, i + 1] += 200.0
    return H

x = np.array([-1.2, 1.0, 0.5, 0.8])
t = time.perf_counter()
H = enzpy.hessian(rosenbrock, x)
print(f"hessian (first call, builds the derivative): {time.perf_counter() - t:.2f} s")
print(H)
print("largest error against the analytic Hessian:", np.max(np.abs(H - rosenbrock_hessian(x))))

z = np.array([-1.2, 1.0])
path = [z.copy()]
for step in range(30):
    g = enzpy.gradient(rosenbrock, z)
    if np.linalg.norm(g) < 1e-10:
        break
    p = -np.linalg.solve(enzpy.hessian(rosenbrock, z), g)
    a = 1.0
    while rosenbrock(z + a * p) > rosenbrock(z) and a > 1e-8:
        a *= 0.5
    z = z + a * p
    path.append(z.copy())
path = np.array(path)
print(f"Newton: {len(path) - 1} steps to x = {z}, f = {rosenbrock(z):.2e}")
'''),
        code('''
u, w = np.meshgrid(np.linspace(-1.6, 1.4, 300), np.linspace(-0.6, 1.6, 300))
F = 100 * (w - u ** 2) ** 2 + (1 - u) ** 2
fig, ax = plt.subplots(figsize=(6, 4))
ax.contour(u, w, np.log10(F + 1e-3), levels=20, cmap="viridis")
ax.plot(path[:, 0], path[:, 1], "ro-", ms=4, label="Newton iterates")
ax.plot(1, 1, "k*", ms=12, label="minimum (1, 1)")
ax.set_title("Newton's method with enzpy's Hessian"); ax.legend()
plt.show()
'''),
        md('''
For more variables, forming the Hessian is wasteful: Newton-CG only needs products `H v`,
each one `hvp` call (about the cost of a few gradients). Here SciPy's Newton-CG minimizes
the 100-dimensional Rosenbrock function with `jac=` and `hessp=` from enzpy. The `hvp` is
checked first against a finite difference of gradients.
'''),
        code('''
n = 100
x0 = np.tile([-1.2, 1.0], n // 2)
v = np.random.default_rng(0).standard_normal(n)
hv = enzpy.hvp(rosenbrock, x0, v)
eps = 1e-6
fd = (enzpy.gradient(rosenbrock, x0 + eps * v) - enzpy.gradient(rosenbrock, x0 - eps * v)) / (2 * eps)
print("hvp against a central difference of gradients: relative error",
      np.max(np.abs(hv - fd)) / np.max(np.abs(fd)))
print("hvp against the analytic Hessian times v:      ",
      np.max(np.abs(hv - rosenbrock_hessian(x0) @ v)))

t = time.perf_counter()
res = minimize(rosenbrock, x0, method="Newton-CG",
               jac=lambda x: enzpy.gradient(rosenbrock, x),
               hessp=lambda x, p: enzpy.hvp(rosenbrock, x, p), options={"xtol": 1e-12})
print(f"Newton-CG: {res.nit} iterations, {res.nhev} Hessian-vector products, "
      f"{time.perf_counter() - t:.2f} s; f = {res.fun:.2e}, max |x - 1| = {np.max(np.abs(res.x - 1)):.1e}")
'''),
        md('''
## 2. The Jacobian of an ODE integrator

The Lotka-Volterra predator-prey model `u' = a u - b u v`, `v' = -c v + d u v`, integrated
with a fixed-step RK4 loop in `@njit`. `trajectory(p, y0, ...)` returns every state, shape
`(steps + 1, 2)`; `enzpy.jacobian` gives its derivative with respect to the four
parameters, shape `(steps + 1, 2, 4)`: the *sensitivities* of the solution, by forward mode
(one sweep per parameter). They are checked against finite differences.
'''),
        code('''
@njit
def rhs(y, p):
    u, v = y[0], y[1]
    out = np.empty(2)
    out[0] = p[0] * u - p[1] * u * v
    out[1] = -p[2] * v + p[3] * u * v
    return out

@njit
def trajectory(p, y0, dt, steps):
    ys = np.empty((steps + 1, 2))
    y = y0.copy()
    ys[0] = y
    for k in range(steps):
        k1 = rhs(y, p)
        k2 = rhs(y + 0.5 * dt * k1, p)
        k3 = rhs(y + 0.5 * dt * k2, p)
        k4 = rhs(y + dt * k3, p)
        y = y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        ys[k + 1] = y
    return ys

p_true = np.array([1.0, 0.4, 0.8, 0.2])
y0, dt, steps = np.array([3.0, 1.5]), 0.05, 300
ts = dt * np.arange(steps + 1)
ys = trajectory(p_true, y0, dt, steps)

t = time.perf_counter()
J = enzpy.jacobian(trajectory, p_true, y0, dt, steps)
print(f"Jacobian shape {J.shape} in {time.perf_counter() - t:.2f} s (first call: builds)")
h = 1e-6
J_fd = np.stack([(trajectory(p_true + h * e, y0, dt, steps) - trajectory(p_true - h * e, y0, dt, steps)) / (2 * h)
                 for e in np.eye(4)], axis=-1)
print("relative error against finite differences:", np.max(np.abs(J - J_fd)) / np.max(np.abs(J_fd)))
'''),
        code('''
fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
ax[0].plot(ts, ys[:, 0], label="prey u"); ax[0].plot(ts, ys[:, 1], label="predator v")
ax[0].set_xlabel("t"); ax[0].legend(); ax[0].set_title("RK4 trajectory")
for j, name in enumerate("abcd"):
    ax[1].plot(ts, J[:, 0, j], label=f"du/d{name}")
ax[1].set_xlabel("t"); ax[1].legend(ncol=2, fontsize=8)
ax[1].set_title("sensitivity of the prey to each parameter (enzpy.jacobian)")
for a in ax:
    a.grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
        md('''
## 3. `autodiff` inside `@njit`: an optimizer with no Python in it

`autodiff` can be called from jitted code, with the same annotations and results. Below,
`adam_fit` is an `@njit` function: it recovers the ODE's parameters from noisy observations
of the trajectory with the Adam optimizer, calling `autodiff(Reverse, ...)` on the loss
(which runs the whole RK4 integration) at every step. The derivative is built when
`adam_fit` is compiled; the loop runs as machine code.
'''),
        code('''
@njit
def ode_loss(p, y0, dt, steps, observed):
    r = trajectory(p, y0, dt, steps) - observed
    return (r * r).mean()

@njit
def adam_fit(p, y0, dt, steps, observed, iterations, rate):
    m = np.zeros_like(p); s = np.zeros_like(p); g = np.zeros_like(p)
    losses = np.empty(iterations)
    for k in range(iterations):
        g[:] = 0.0
        _, loss = autodiff(ReverseWithPrimal, ode_loss, Duplicated(p, g), Const(y0), Const(dt),
                           Const(steps), Const(observed))
        losses[k] = loss
        m = 0.9 * m + 0.1 * g
        s = 0.999 * s + 0.001 * g * g
        mhat = m / (1 - 0.9 ** (k + 1)); shat = s / (1 - 0.999 ** (k + 1))
        p = p - rate * mhat / (np.sqrt(shat) + 1e-12)
    return p, losses

rng = np.random.default_rng(3)
observed = ys + 0.1 * rng.standard_normal(ys.shape)
p_start = np.array([0.8, 0.5, 0.9, 0.25])

# the gradient the loop uses, checked first (from Python: the same derivative)
check = enzpy.check_gradient(ode_loss, Duplicated(p_start, np.zeros(4)), Const(y0), Const(dt),
                             Const(steps), Const(observed))
print("gradient of the ODE loss:", check)
assert check.worst_relative_error < 1e-5

t = time.perf_counter()
adam_fit(p_start, y0, dt, steps, observed, 1, 1e-3)          # compiles adam_fit
print(f"Numba compile of adam_fit (with the derivative inside): {time.perf_counter() - t:.1f} s")
t = time.perf_counter()
p_fit, losses = adam_fit(p_start, y0, dt, steps, observed, 1500, 0.01)
print(f"1500 Adam steps in {time.perf_counter() - t:.2f} s: p = {np.round(p_fit, 4)} (true {p_true})")
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (noise variance 0.01)")
'''),
        code('''
fit_ys = trajectory(p_fit, y0, dt, steps)
fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
ax[0].plot(ts, observed[:, 0], ".", ms=3, alpha=0.5, label="observed prey")
ax[0].plot(ts, observed[:, 1], ".", ms=3, alpha=0.5, label="observed predator")
ax[0].plot(ts, fit_ys[:, 0], "C0", lw=2, label="fitted")
ax[0].plot(ts, fit_ys[:, 1], "C1", lw=2)
ax[0].plot(ts, trajectory(p_start, y0, dt, steps)[:, 0], "C0:", label="start")
ax[0].legend(fontsize=8); ax[0].set_xlabel("t"); ax[0].set_title("fit inside @njit")
ax[1].semilogy(losses); ax[1].set_xlabel("Adam step"); ax[1].set_ylabel("mean squared error")
ax[1].set_title("loss"); ax[1].grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
    ]


# ---------------------------------------------------------------------------------------------
@notebook("custom_rules")
def _custom_rules():
    return [
        md('''
# Custom derivative rules

enzpy differentiates the code Numba compiles. Sometimes you know a better derivative than
the one the code implies, or there is no code to read:

1. **a numerically stable rule**: `softplus(x) = log(1 + exp(x))` overflows for large `x`;
   a rule gives the exact derivative at `x = +-800` (`defvjp` for reverse mode, `defjvp` for
   forward mode);
2. **implicit differentiation**: Kepler's equation solved by Newton's method, differentiated
   with the implicit function theorem instead of through the iterations;
3. **a C function through `ctypes`** (libm's `erf`): enzpy cannot read it, and says so;
   a rule makes it differentiable;
4. **`inactive`**: calls that carry no derivative (a stop-gradient).

Rules are `@njit` functions with JAX's shapes: `fwd(*args) -> (out, residuals)`,
`bwd(residuals, g) -> (one cotangent per argument,)`, `jvp(primals, tangents) -> (out, tangent)`.
`enzpy.check_rule` tests a rule against finite differences of the function.
'''),
        code('''
import ctypes
import ctypes.util
import math

import numpy as np
import matplotlib.pyplot as plt
import numba
from numba import njit

import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff

%matplotlib inline
print(f"enzpy {enzpy.__version__}, Numba {numba.__version__}, NumPy {np.__version__}")
'''),
        md('''
## 1. A numerically stable rule

`softplus_naive` is the textbook formula; `softplus` is the same formula with rules
attached. The derivative of softplus is the logistic sigmoid, which the rules compute
stably. The automatic derivative of the naive formula is `exp(x) / (1 + exp(x))`:
`inf / inf = nan` once `exp(x)` overflows (`x > 709`).
'''),
        code('''
@njit
def softplus_naive(x):
    return math.log(1.0 + math.exp(x))

@njit
def softplus(x):
    return math.log(1.0 + math.exp(x))

@njit
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)

@njit
def stable_softplus(x):
    return x + math.log1p(math.exp(-x)) if x > 0.0 else math.log1p(math.exp(x))

@njit
def softplus_fwd(x):                      # -> (output, residuals kept for bwd)
    return stable_softplus(x), x

@njit
def softplus_bwd(x, g):                   # residuals, output cotangent -> input cotangents
    return (g * sigmoid(x),)

@njit
def softplus_jvp(primals, tangents):      # -> (output, output tangent)
    return stable_softplus(primals[0]), tangents[0] * sigmoid(primals[0])

enzpy.defvjp(softplus, softplus_fwd, softplus_bwd)
enzpy.defjvp(softplus, softplus_jvp)
print("check_rule(softplus, 0.3): ", enzpy.check_rule(softplus, 0.3))
print("check_rule(softplus, -4.0):", enzpy.check_rule(softplus, -4.0))
'''),
        code('''
def exact(x):                              # the sigmoid, in Python, for the check
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))

print(f"{'x':>7} {'naive (reverse)':>16} {'rule (reverse)':>16} {'rule (forward)':>16} {'exact':>10}")
worst = 0.0
for x in (-800.0, -30.0, 0.5, 30.0, 800.0):
    (naive,), = autodiff(Reverse, softplus_naive, Active(x))
    (rule,), = autodiff(Reverse, softplus, Active(x))
    (tangent,) = autodiff(Forward, softplus, Duplicated(x, 1.0))
    worst = max(worst, abs(rule - exact(x)), abs(tangent - exact(x)))
    print(f"{x:7.1f} {naive:16.10g} {rule:16.10g} {tangent:16.10g} {exact(x):10.6g}")
print("largest error of the rule:", worst)

xs = np.linspace(-800, 800, 1601)
naive = np.array([autodiff(Reverse, softplus_naive, Active(x))[0][0] for x in xs])
rule = np.array([autodiff(Reverse, softplus, Active(x))[0][0] for x in xs])
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(xs, rule, lw=3, alpha=0.5, label="with the rule")
ax.plot(xs, naive, "k--", lw=1, label="automatic derivative of the naive formula")
bad = np.isnan(naive)
ax.plot(xs[bad], np.full(bad.sum(), 0.5), "rx", ms=4, label="naive derivative is nan (exp(x) overflows)")
ax.set_xlabel("x"); ax.set_title("d softplus / dx"); ax.legend(loc="center left", fontsize=8)
plt.tight_layout(); plt.show()
print(f"naive derivative is nan for {np.isnan(naive).sum()} of {xs.size} points (all above x = 709)")
'''),
        md('''
## 2. Implicit differentiation of a Newton solver

Kepler's equation `E - e sin(E) = M` gives the eccentric anomaly `E` of an orbit from the
mean anomaly `M` and the eccentricity `e`; there is no closed form, so it is solved by
Newton's method. enzpy can differentiate through the iterations, but the implicit function
theorem gives the derivative directly from the solution: with `F(E, M, e) = E - e sin E - M = 0`,
`dE/dM = 1 / (1 - e cos E)` and `dE/de = sin E / (1 - e cos E)`. The rule's `bwd` returns
one cotangent per argument, `(g dE/dM, g dE/de)`.
'''),
        code('''
@njit
def kepler(M, e):
    E = M if e < 0.8 else math.pi
    for _ in range(50):
        step = (E - e * math.sin(E) - M) / (1.0 - e * math.cos(E))
        E -= step
        if abs(step) < 1e-15:
            break
    return E

@njit
def kepler_unrolled(M, e):                  # the same solver, without a rule
    E = M if e < 0.8 else math.pi
    for _ in range(50):
        step = (E - e * math.sin(E) - M) / (1.0 - e * math.cos(E))
        E -= step
        if abs(step) < 1e-15:
            break
    return E

@njit
def kepler_fwd(M, e):
    E = kepler(M, e)
    return E, (E, e)

@njit
def kepler_bwd(res, g):
    E, e = res
    d = 1.0 - e * math.cos(E)
    return (g / d, g * math.sin(E) / d)

enzpy.defvjp(kepler, kepler_fwd, kepler_bwd)
print("check_rule(kepler, 1.0, 0.6):", enzpy.check_rule(kepler, 1.0, 0.6))

@njit
def orbit_x(M, e):                          # x coordinate of the body on a unit-semi-major-axis orbit
    return math.cos(kepler(M, e)) - e

@njit
def orbit_x_unrolled(M, e):
    return math.cos(kepler_unrolled(M, e)) - e

M, e, h = 2.0, 0.6, 1e-6
(dM, de), = autodiff(Reverse, orbit_x, Active(M), Active(e))
(uM, ue), = autodiff(Reverse, orbit_x_unrolled, Active(M), Active(e))
E = kepler(M, e)
exact_M = -math.sin(E) / (1 - e * math.cos(E))
exact_e = -math.sin(E) * math.sin(E) / (1 - e * math.cos(E)) - 1.0
fd_M = (orbit_x(M + h, e) - orbit_x(M - h, e)) / (2 * h)
fd_e = (orbit_x(M, e + h) - orbit_x(M, e - h)) / (2 * h)
print(f"d x / dM: implicit rule {dM:.12f}, through the iterations {uM:.12f}, analytic {exact_M:.12f}, fd {fd_M:.12f}")
print(f"d x / de: implicit rule {de:.12f}, through the iterations {ue:.12f}, analytic {exact_e:.12f}, fd {fd_e:.12f}")
print("errors against the analytic values:", abs(dM - exact_M), abs(de - exact_e))
'''),
        code('''
Ms = np.linspace(0, 2 * np.pi, 300)
fig, ax = plt.subplots(1, 2, figsize=(11, 3.3))
for e_ in (0.0, 0.5, 0.9):
    Es = np.array([kepler(m, e_) for m in Ms])
    dE = np.array([autodiff(Reverse, kepler, Active(m), Const(e_))[0][0] for m in Ms])
    ax[0].plot(Ms, Es, label=f"e = {e_}")
    ax[1].plot(Ms, dE, lw=3, alpha=0.5, label=f"e = {e_} (rule)")
    ax[1].plot(Ms, 1 / (1 - e_ * np.cos(Es)), "k--", lw=0.8)
    print(f"e = {e_}: largest error of dE/dM against 1 / (1 - e cos E): {np.max(np.abs(dE - 1 / (1 - e_ * np.cos(Es)))):.1e}")
ax[0].set_title("E(M)"); ax[1].set_title("dE/dM: rule (thick) and 1 / (1 - e cos E) (dashed)")
ax[1].set_yscale("log")
for a in ax:
    a.set_xlabel("M"); a.legend(fontsize=8); a.grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
        md('''
## 3. A C function through `ctypes`

Numba can call C functions from a shared library through `ctypes`. enzpy sees only an
opaque call, and refuses with an error naming it and pointing to `enzpy.defvjp`. Here is
libm's `erf`, wrapped in an `@njit` function, inside the log-likelihood of a probit model
`P(y = 1 | t) = Phi(a t + b)`:
'''),
        code('''
libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
c_erf = libm.erf
c_erf.restype = ctypes.c_double
c_erf.argtypes = [ctypes.c_double]

@njit
def erf(x):
    return c_erf(x)

@njit
def probit_loglik(a, b, t, y):
    s = 0.0
    for i in range(t.size):
        p = 0.5 * (1.0 + erf((a * t[i] + b) / math.sqrt(2.0)))
        s += y[i] * math.log(p) + (1.0 - y[i]) * math.log(1.0 - p)
    return s

rng = np.random.default_rng(1)
t = rng.uniform(-3, 3, 200)
y = (rng.uniform(size=200) < 0.5 * (1 + np.vectorize(math.erf)((1.3 * t - 0.4) / math.sqrt(2)))).astype(np.float64)
print("erf(0.5) through ctypes:", erf(0.5), " math.erf:", math.erf(0.5))
try:
    autodiff(Reverse, probit_loglik, Active(1.0), Active(0.0), Const(t), Const(y))
except enzpy.UnsupportedError as exc:
    print(f"\\n{type(exc).__name__}: {exc}")
'''),
        md('''
The rule: `d erf(x)/dx = 2 / sqrt(pi) exp(-x^2)`. With a `defvjp` rule (reverse mode) and a
`defjvp` rule (forward mode), `erf` is differentiable wherever it is called.
'''),
        code('''
@njit
def erf_fwd(x):
    return erf(x), x

@njit
def erf_bwd(x, g):
    return (g * 2.0 / math.sqrt(math.pi) * math.exp(-x * x),)

@njit
def erf_jvp(primals, tangents):
    x = primals[0]
    return erf(x), tangents[0] * 2.0 / math.sqrt(math.pi) * math.exp(-x * x)

enzpy.defvjp(erf, erf_fwd, erf_bwd)
enzpy.defjvp(erf, erf_jvp)
print("check_rule(erf, 0.7):", enzpy.check_rule(erf, 0.7))

(da, db, _, _), = autodiff(Reverse, probit_loglik, Active(1.0), Active(0.0), Const(t), Const(y))
(ta,) = autodiff(Forward, probit_loglik, Duplicated(1.0, 1.0), Const(0.0), Const(t), Const(y))
h = 1e-6
fd_a = (probit_loglik(1.0 + h, 0.0, t, y) - probit_loglik(1.0 - h, 0.0, t, y)) / (2 * h)
fd_b = (probit_loglik(1.0, h, t, y) - probit_loglik(1.0, -h, t, y)) / (2 * h)
print(f"d/da: reverse {da:.10f}, forward {ta:.10f}, finite differences {fd_a:.10f}")
print(f"d/db: reverse {db:.10f}, finite differences {fd_b:.10f}")
print("relative errors:", abs(da - fd_a) / abs(fd_a), abs(ta - fd_a) / abs(fd_a), abs(db - fd_b) / abs(fd_b))

# a few steps of gradient ascent on (a, b): the maximum-likelihood probit fit
a, b = 1.0, 0.0
for _ in range(200):
    (ga, gb, _, _), = autodiff(Reverse, probit_loglik, Active(a), Active(b), Const(t), Const(y))
    a, b = a + 0.01 * ga, b + 0.01 * gb
print(f"fitted a = {a:.3f}, b = {b:.3f} (data drawn with a = 1.3, b = -0.4); gradient now ({ga:.1e}, {gb:.1e})")
'''),
        code('''
ts = np.linspace(-3, 3, 200)
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(t, y + rng.uniform(-0.03, 0.03, t.size), ".", alpha=0.4, label="data (jittered)")
ax.plot(ts, [0.5 * (1 + erf((a * s + b) / math.sqrt(2))) for s in ts], lw=2, label="fitted probit")
ax.set_xlabel("t"); ax.set_ylabel("P(y = 1)"); ax.legend(); ax.grid(alpha=0.3)
ax.set_title("probit fit through a C erf with a custom rule")
plt.tight_layout(); plt.show()
'''),
        md('''
## 4. `inactive`: calls without a derivative

`enzpy.inactive(f)` declares that calls of `f` carry no derivative: logging, random numbers,
or a stop-gradient, as below. With `stop_gradient` inactive, `d/dx [x * stop_gradient(x)]`
is `x` (the second factor is treated as a constant), not `2x`. `enzpy.clear_rules(f)`
removes any rule or declaration.
'''),
        code('''
@njit
def stop_gradient(x):
    return x

@njit
def product(x):
    return x * stop_gradient(x)

x = 3.0
(before,), = autodiff(Reverse, product, Active(x))
enzpy.inactive(stop_gradient)
(after,), = autodiff(Reverse, product, Active(x))
(forward,) = autodiff(Forward, product, Duplicated(x, 1.0))
print(f"d/dx x*x at x = 3 without the declaration: {before} (expected 2x = {2 * x})")
print(f"with stop_gradient inactive: reverse {after}, forward {forward} (expected x = {x})")
enzpy.clear_rules(stop_gradient)
(cleared,), = autodiff(Reverse, product, Active(x))
print(f"after clear_rules: {cleared}")
'''),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="NAME")
    args = parser.parse_args(argv)
    for name, cells in NOTEBOOKS.items():
        if args.only and name not in args.only:
            continue
        nb = new_notebook(cells=[new_markdown_cell(text) if kind == "md" else new_code_cell(text)
                                 for kind, text in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        path = os.path.join(EXAMPLES, name + ".ipynb")
        nbformat.validate(nb)
        nbformat.write(nb, path)
        print(f"wrote {os.path.relpath(path, ROOT)}: {len(cells)} cells")


if __name__ == "__main__":
    main()
