"""NumPy benchmark: gradient/primal time ratios of matrix products, linear algebra and
NumPy composites, next to JAX's ``jit(grad)`` when JAX is installed.

Measured in one process, single-threaded (BLAS/LAPACK, Numba, XLA), each figure the
median of interleaved repetitions (``_timing.interleaved``; a repetition loops over
enough calls to last about 2 ms):

* products and linear algebra at n = 50, 200, 500 (``--sizes``): ``(A @ B).sum()``,
  gemv ``y = A @ x; (y * y).sum()``, ``np.linalg.solve(A, b).sum()``,
  ``np.linalg.inv(A).sum()``, ``np.linalg.det``, ``np.linalg.slogdet``,
  ``np.linalg.cholesky`` (weighted sum of the factor), ``np.linalg.eigh`` (eigenvalues
  and eigenvectors) and the singular values of ``np.linalg.svd``;
* composites, the functions of ``tests/numpy_corpus.py`` at realistic sizes: a Gaussian
  mixture log-likelihood (logsumexp over the components), a 2-layer MLP with tanh and
  ``@``, softmax cross-entropy, least squares through ``np.linalg.solve`` and a
  Gaussian-process negative log marginal likelihood through ``cholesky``.

enzpy's gradient is ``autodiff(Reverse, f, Duplicated(x, zeros_like(x)), ...)`` with
fresh shadows on every call (as ``enzpy.gradient`` does), its primal the ``@njit`` call;
JAX's are ``jit(grad(f, argnums))`` and ``jit(f)`` of the same function written with
``jax.numpy`` (float64). The gradients of both are compared on each workload's first
size (column ``agree``: the largest difference relative to the largest entry).

Goals (issue 12): every enzpy ratio <= 3, and enzpy's gradient no slower than JAX's
``jit(grad)`` on the composites.

    python scripts/bench_numpy.py [--sizes 50,200,500] [--quick] [--repeat 7] [--budget 60]
                                  [--no-jax] [--out docs]

``--quick``: n = 50 (unless ``--sizes``) and small composites, 3 repetitions. ``--out DIR`` writes
``DIR/bench_numpy.csv`` and ``DIR/bench_numpy.md``.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")

import argparse                      # noqa: E402
import csv                           # noqa: E402
import sys                           # noqa: E402
import time                          # noqa: E402
import warnings                      # noqa: E402

import numpy as np                   # noqa: E402
from numba import njit               # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (HERE, ROOT):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _timing import interleaved      # noqa: E402

import enzpy                         # noqa: E402
from enzpy import Active, Const, Duplicated, Reverse, autodiff  # noqa: E402
from tests import numpy_corpus as corpus  # noqa: E402

GOAL_RATIO = 3.0
SAMPLE_SECONDS = 2e-3        # one timed repetition loops over calls for at least this long


# -- products and linear algebra (enzpy side) --------------------------------------------------
@njit
def matmul_sum(A, B):
    return (A @ B).sum()


@njit
def gemv_sq(A, x):
    y = A @ x
    return (y * y).sum()


@njit
def solve_sum(A, b):
    return np.linalg.solve(A, b).sum()


@njit
def inv_sum(A):
    return np.linalg.inv(A).sum()


@njit
def det_fn(A):
    return np.linalg.det(A)


@njit
def slogdet_fn(A):
    sign, logabs = np.linalg.slogdet(A)
    return logabs


@njit
def cholesky_weighted(S0, W):
    S = 0.5 * (S0 + S0.T)
    L = np.linalg.cholesky(S)
    return (W * L).sum()


@njit
def eigh_fn(S0, c, W):
    S = 0.5 * (S0 + S0.T)
    w, v = np.linalg.eigh(S)
    return (c * w).sum() + (W * v * v).sum()      # invariant under the eigenvectors' signs


@njit
def svd_values(A, c):
    u, s, vt = np.linalg.svd(A, full_matrices=False)
    return (c * s).sum()


# -- the same in JAX -----------------------------------------------------------------------------
def _jax_functions(jnp):
    def gmm_loglik(means, X, logw, inv_var):
        diff = X[:, None, :] - means[None, :, :]
        logp = logw[None, :] - 0.5 * inv_var * (diff * diff).sum(axis=2)
        m = logp.max(axis=1)
        return (m + jnp.log(jnp.exp(logp - m[:, None]).sum(axis=1))).sum()

    def mlp_mse(W1, b1, W2, b2, X, y):
        h = jnp.tanh(X @ W1 + b1)
        pred = h @ W2 + b2
        return jnp.mean((pred - y) ** 2)

    def softmax_xent(logits, labels):
        z = logits - logits.max(axis=1, keepdims=True)
        lse = jnp.log(jnp.exp(z).sum(axis=1))
        return (lse - jnp.take_along_axis(z, labels[:, None], axis=1)[:, 0]).sum() / z.shape[0]

    def least_squares_solve(X, y, lam):
        d = X.shape[1]
        beta = jnp.linalg.solve(X.T @ X + lam * jnp.eye(d), X.T @ y)
        r = X @ beta - y
        return r @ r

    def gp_nlml(theta, X, y):
        ell = jnp.exp(theta[0])
        sf2 = jnp.exp(2.0 * theta[1])
        sn2 = jnp.exp(2.0 * theta[2])
        n = X.shape[0]
        D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
        K = sf2 * jnp.exp(-0.5 * D / ell ** 2) + sn2 * jnp.eye(n)
        L = jnp.linalg.cholesky(K)
        a = jnp.linalg.solve(L, y)         # as the NumPy version: a general solve with L
        return 0.5 * (a @ a) + jnp.log(jnp.diag(L)).sum() + 0.5 * n * jnp.log(2.0 * jnp.pi)

    def cholesky_weighted_j(S0, W):
        L = jnp.linalg.cholesky(0.5 * (S0 + S0.T))
        return (W * L).sum()

    def eigh_j(S0, c, W):
        w, v = jnp.linalg.eigh(0.5 * (S0 + S0.T))
        return (c * w).sum() + (W * v * v).sum()

    return {
        "matmul_sum": lambda A, B: (A @ B).sum(),
        "gemv_sq": lambda A, x: ((A @ x) ** 2).sum(),
        "solve_sum": lambda A, b: jnp.linalg.solve(A, b).sum(),
        "inv_sum": lambda A: jnp.linalg.inv(A).sum(),
        "det_fn": lambda A: jnp.linalg.det(A),
        "slogdet_fn": lambda A: jnp.linalg.slogdet(A)[1],
        "cholesky_weighted": cholesky_weighted_j,
        "eigh_fn": eigh_j,
        "svd_values": lambda A, c: (c * jnp.linalg.svd(A, full_matrices=False,
                                                       compute_uv=False)).sum(),
        "gmm_loglik": gmm_loglik,
        "mlp_mse": mlp_mse,
        "softmax_xent": softmax_xent,
        "least_squares_solve": least_squares_solve,
        "gp_nlml": gp_nlml,
    }


# -- workloads -------------------------------------------------------------------------------
class Workload:
    """``args``: list of (kind, value) with kind "dup" (float array), "active" (float) or
    "const"; the gradient is taken with respect to the "dup" and "active" ones."""

    def __init__(self, name, group, size, fn, args):
        self.name, self.group, self.size, self.fn, self.args = name, group, size, fn, args

    @property
    def wrt(self):
        return tuple(i for i, (kind, _) in enumerate(self.args) if kind != "const")


def _well(rng, n):
    """Well-conditioned (condition number about 3), det of order 1."""
    return np.eye(n) + 0.5 * rng.standard_normal((n, n)) / np.sqrt(n)


def _spd(rng, n):
    R = rng.standard_normal((n, n))
    return R @ R.T / n + np.eye(n)


def linalg_workloads(n):
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    x, c = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    W = rng.uniform(0.5, 1.5, (n, n))
    S = rng.standard_normal((n, n))
    S = S + S.T                                      # distinct eigenvalues (a.s.)
    return [
        Workload("A @ B summed", "products", n, matmul_sum, [("dup", A), ("dup", B)]),
        Workload("gemv: y = A @ x, sum(y**2)", "products", n, gemv_sq,
                 [("dup", A), ("dup", x)]),
        Workload("solve(A, b).sum()", "linalg", n, solve_sum,
                 [("dup", _well(rng, n)), ("dup", x)]),
        Workload("inv(A).sum()", "linalg", n, inv_sum, [("dup", _well(rng, n))]),
        Workload("det(A)", "linalg", n, det_fn, [("dup", _well(rng, n))]),
        Workload("slogdet(A)", "linalg", n, slogdet_fn, [("dup", _well(rng, n))]),
        Workload("cholesky: sum(W * L)", "linalg", n, cholesky_weighted,
                 [("dup", _spd(rng, n)), ("const", np.tril(W))]),
        Workload("eigh: values and vectors", "linalg", n, eigh_fn,
                 [("dup", S), ("const", c), ("const", W)]),
        Workload("svd: singular values", "linalg", n, svd_values,
                 [("dup", A), ("const", c)]),
    ]


def composite_workloads(quick):
    rng = np.random.default_rng(7)
    n = 200 if quick else 1000
    k, d = 10, 5
    means, X = rng.standard_normal((k, d)) * 2.0, rng.standard_normal((n, d)) * 1.5
    logw = np.log(rng.dirichlet(np.ones(k)))
    gmm = [("dup", means), ("const", X), ("dup", logw), ("const", 0.8)]
    d_in, hidden = 32, 64
    Xm, ym = rng.standard_normal((n, d_in)), rng.standard_normal(n)
    mlp = [("dup", rng.standard_normal((d_in, hidden)) / np.sqrt(d_in)),
           ("dup", 0.1 * rng.standard_normal(hidden)),
           ("dup", rng.standard_normal(hidden) / np.sqrt(hidden)), ("active", 0.1),
           ("const", Xm), ("const", ym)]
    classes = 10
    xent = [("dup", rng.standard_normal((n, classes))),
            ("const", rng.integers(0, classes, n).astype(np.int64))]
    m, p = (200, 10) if quick else (500, 20)
    lsq = [("dup", rng.standard_normal((m, p))), ("dup", rng.standard_normal(m)),
           ("active", 0.3)]
    g = 100 if quick else 200
    gp = [("dup", np.array([0.1, 0.2, -1.0])), ("const", rng.standard_normal((g, 2))),
          ("const", rng.standard_normal(g))]
    return [
        Workload(f"GMM log-likelihood (n={n}, k={k}, d={d})", "composite", n,
                 corpus.gmm_loglik, gmm),
        Workload(f"MLP tanh, MSE (n={n}, {d_in}-{hidden}-1)", "composite", n,
                 corpus.mlp_mse, mlp),
        Workload(f"softmax cross-entropy (n={n}, {classes} classes)", "composite", n,
                 corpus.softmax_xent, xent),
        Workload(f"least squares via solve ({m}x{p})", "composite", m,
                 corpus.least_squares_solve, lsq),
        Workload(f"GP neg. log marginal likelihood (n={g})", "composite", g,
                 corpus.gp_nlml, gp),
    ]


# -- measuring -------------------------------------------------------------------------------
def _enzpy_gradient(w):
    values = [v for _, v in w.args]

    def gradient():
        annotated, shadows = [], []
        for kind, v in w.args:
            if kind == "dup":
                dv = np.zeros_like(v)
                shadows.append(dv)
                annotated.append(Duplicated(v, dv))
            elif kind == "active":
                annotated.append(Active(v))
            else:
                annotated.append(Const(v))
        (adjoints,) = autodiff(Reverse, w.fn, *annotated)
        out, it = [], iter(shadows)
        for (kind, _), adj in zip(w.args, adjoints):
            if kind == "dup":
                out.append(next(it))
            elif kind == "active":
                out.append(adj)
        return out

    return (lambda: w.fn(*values)), gradient


def _jax_pair(w, jax, jfuns):
    jf = jfuns[w.fn.py_func.__name__]
    jargs = [jax.device_put(v) if isinstance(v, np.ndarray) else v for _, v in w.args]
    primal = jax.jit(jf)
    grad = jax.jit(jax.grad(jf, argnums=w.wrt))
    return (lambda: jax.block_until_ready(primal(*jargs)),
            lambda: jax.block_until_ready(grad(*jargs)))


def _looped(fn, inner):
    if inner == 1:
        return fn

    def run():
        for _ in range(inner):
            fn()
    return run


def _inner(fn):
    """(calls per timed repetition, so that one repetition lasts SAMPLE_SECONDS; the
    time of one call)."""
    t = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t, 1e-7)
    return max(1, min(1000, int(SAMPLE_SECONDS / once))), once


def _agreement(ours, theirs):
    worst = 0.0
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        scale = max(float(np.max(np.abs(b))), 1e-300)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    return worst


def call_overhead(repeat):
    """enzpy's fixed cost of one gradient call: ``autodiff`` on a function that does
    next to nothing (annotations, checks, shadow allocation, dispatch)."""
    x = np.ones(1)
    w = Workload("overhead", "overhead", 1, _first, [("dup", x)])
    primal, gradient = _enzpy_gradient(w)
    gradient()
    inner = [_inner(f)[0] for f in (primal, gradient)]
    times = interleaved([_looped(f, k) for f, k in zip((primal, gradient), inner)],
                        max(repeat, 5))
    return [t / k for t, k in zip(times, inner)]


@njit
def _first(x):
    return x[0]


def measure(w, repeat, jax=None, jfuns=None, check=False, budget=60.0):
    primal, gradient = _enzpy_gradient(w)
    primal()
    t = time.perf_counter()
    ours = gradient()                         # builds the derivative (once per signature)
    first = time.perf_counter() - t
    fns = [primal, gradient]
    row = dict(workload=w.name, group=w.group, n=w.size, enzpy_first_call_s=first)
    if jax is not None:
        jprimal, jgrad = _jax_pair(w, jax, jfuns)
        jprimal()
        theirs = jgrad()
        fns += [jprimal, jgrad]
        if check:
            row["agree"] = _agreement(ours, theirs)
    inner, once = zip(*[_inner(f) for f in fns])
    # a slow workload gets fewer repetitions (at least 3): about ``budget`` seconds
    repeat = max(min(repeat, 3), min(repeat, int(budget / sum(k * t for k, t in
                                                             zip(inner, once)))))
    loops = [_looped(f, k) for f, k in zip(fns, inner)]
    # JAX is timed apart, alternating with the Numba primal: the threads XLA keeps
    # after a call would slow the calls timed after it (enzpy's, not its own)
    times = [t / k for t, k in zip(interleaved(loops[:2], repeat), inner)]
    row["repeat"] = repeat
    row["primal_s"], row["gradient_s"] = times[0], times[1]
    row["ratio"] = times[1] / times[0]
    if jax is not None:
        primal_s, jprimal_s, jgrad_s = [t / k for t, k in zip(
            interleaved([loops[0]] + loops[2:], repeat), [inner[0]] + list(inner[2:]))]
        row["jax_primal_s"], row["jax_gradient_s"] = jprimal_s, jgrad_s
        row["jax_ratio"] = jgrad_s / jprimal_s
        row["vs_jax"] = row["ratio"] * primal_s / jgrad_s   # (through the primal)
    return row


# -- output ----------------------------------------------------------------------------------
def _ms(s):
    return "–" if s is None else (f"{s * 1e3:.3g}" if s * 1e3 < 100 else f"{s * 1e3:.0f}")


def _x(r):
    return "–" if r is None else f"{r:.2f}"


def verdicts(rows):
    over = [r for r in rows if r["ratio"] > GOAL_RATIO]
    comps = [r for r in rows if r["group"] == "composite" and "vs_jax" in r]
    slower = [r for r in comps if r["vs_jax"] > 1.0]
    lines = [f"- every gradient/primal ratio <= {GOAL_RATIO:g}: "
             + ("**met**" if not over else
                f"**missed** on {len(over)} of {len(rows)}: "
                + "; ".join(f"{r['workload']} n={r['n']} ({r['ratio']:.2f})" for r in over))]
    if comps:
        lines.append("- composites no slower than JAX `jit(grad)`: "
                     + ("**met**" if not slower else
                        f"**missed** on {len(slower)} of {len(comps)}: "
                        + "; ".join(f"{r['workload']} ({r['vs_jax']:.2f}x JAX)"
                                    for r in slower)))
    else:
        lines.append("- composites vs JAX: not measured (JAX not importable or --no-jax)")
    return lines


def table(rows, with_jax):
    head = "| workload | n | primal ms | gradient ms | ratio |"
    rule = "|---|---|---|---|---|"
    if with_jax:
        head += " JAX primal ms | JAX gradient ms | JAX ratio | enzpy/JAX gradient | agree |"
        rule += "---|---|---|---|---|"
    out = [head, rule]
    for r in rows:
        line = (f"| {r['workload']} | {r['n']} | {_ms(r['primal_s'])} | "
                f"{_ms(r['gradient_s'])} | {_x(r['ratio'])}"
                f"{'' if r['ratio'] <= GOAL_RATIO else ' ✗'} |")
        if with_jax:
            agree = r.get("agree")
            line += (f" {_ms(r.get('jax_primal_s'))} | {_ms(r.get('jax_gradient_s'))} | "
                     f"{_x(r.get('jax_ratio'))} | {_x(r.get('vs_jax'))} | "
                     f"{'' if agree is None else f'{agree:.0e}'} |")
        out.append(line)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None,
                        help="comma-separated n for the products and linalg functions "
                             "(default 50,200,500; 50 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="n = 50, small composites, 3 repetitions")
    parser.add_argument("--repeat", type=int, default=None,
                        help="interleaved repetitions per figure (default 7, --quick 3)")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds of timing per workload and size before repetitions "
                             "are cut (to no fewer than 3)")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out")
    parser.add_argument("--out", default=None,
                        help="folder to write bench_numpy.csv and bench_numpy.md into")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("50" if args.quick else "50,200,500")).split(",")
             if s.strip()]
    repeat = args.repeat or (3 if args.quick else 7)
    warnings.simplefilter("ignore")

    jax = jfuns = None
    if not args.no_jax:
        try:
            import jax
            import jax.numpy as jnp
            jax.config.update("jax_enable_x64", True)
            jfuns = _jax_functions(jnp)
        except ImportError:
            jax = None
    t0 = time.perf_counter()
    workloads = [w for n in sizes for w in linalg_workloads(n)] + \
        composite_workloads(args.quick)
    overhead_primal, overhead = call_overhead(repeat)
    rows, checked = [], set()
    for w in workloads:
        name = w.fn.py_func.__name__
        row = measure(w, repeat, jax, jfuns, check=name not in checked, budget=args.budget)
        checked.add(name)
        rows.append(row)
        print(f"[{time.perf_counter() - t0:5.0f} s] {w.name} n={w.size}: ratio "
              f"{row['ratio']:.2f}" + (f", JAX {row['jax_ratio']:.2f}, enzpy/JAX gradient "
                                       f"{row['vs_jax']:.2f}" if jax is not None else ""),
              flush=True)

    import subprocess

    import numba
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    versions = (f"enzpy {getattr(enzpy, '__version__', '?')}{f' at {rev}' if rev else ''}, "
                f"numba {numba.__version__}, "
                f"numpy {np.__version__}"
                + (f", jax {jax.__version__}" if jax is not None else ""))
    intro = (f"Gradient/primal time ratios, single-threaded, median of {repeat} interleaved "
             f"repetitions (fewer, at least 3, where that would take over {args.budget:g} s) "
             f"({versions}; {os.cpu_count()} CPUs). `ratio`: enzpy's gradient (`autodiff(Reverse, ...)`, fresh "
             f"shadows) over the `@njit` primal")
    if jax is not None:
        intro += ("; `JAX ratio`: `jit(grad)` over `jit(f)`; `enzpy/JAX gradient`: enzpy's "
                  "gradient time over JAX's (JAX is timed apart, alternating with the "
                  "`@njit` primal, since the threads XLA keeps after a call slow the calls "
                  "timed after it; the ratio goes through the primal); `agree`: largest "
                  "difference between the two gradients relative to the largest entry "
                  "(first size of each workload)")
    intro = [intro + f". ✗: ratio above {GOAL_RATIO:g}. enzpy's fixed cost per gradient call "
             f"(`autodiff` on `x[0]`) is {overhead * 1e6:.0f} µs (its `@njit` primal: "
             f"{overhead_primal * 1e6:.1f} µs): it dominates the ratio of small problems."]
    lines = table(rows, jax is not None)
    print()
    print("\n".join(intro + [""] + lines + ["", "Goals:"] + verdicts(rows)))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        fields = ["workload", "group", "n", "primal_s", "gradient_s", "ratio", "jax_primal_s",
                  "jax_gradient_s", "jax_ratio", "vs_jax", "agree", "enzpy_first_call_s",
                  "repeat"]
        with open(os.path.join(args.out, "bench_numpy.csv"), "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        md = ["# NumPy benchmark: gradient/primal ratios", "",
              "<!-- generated by python scripts/bench_numpy.py --out DIR -->", ""] + \
            intro + [""] + lines + ["", "Goals (issue 12):", ""] + verdicts(rows) + [""]
        with open(os.path.join(args.out, "bench_numpy.md"), "w") as fh:
            fh.write("\n".join(md))
        print(f"wrote {args.out}/bench_numpy.csv and {args.out}/bench_numpy.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
