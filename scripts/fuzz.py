"""Fuzz enzpy: random programs, differentiated by enzpy and checked against
central finite differences.

    python scripts/fuzz.py --programs 2000 --seed 0 [--time-limit SECONDS]
    python scripts/fuzz.py --seed 0 --only 17          # re-run (and print) program 17
    python scripts/fuzz.py --programs 50 --show        # print every program
    python scripts/fuzz.py --programs 500 --numpy-only # programs with NumPy statements
    python scripts/fuzz.py --programs 100 --parallel-only  # programs with prange loops
    python scripts/fuzz.py --programs 200 --hvp        # second order too (enzpy.hvp)

Each program is Python source: a main function ``f`` over Active float scalars,
optionally a Duplicated float array ``a`` (read, sometimes updated in place), a
Duplicated output array ``out``, Const arrays ``w`` (floats) and ``idx``
(integers), a Const float ``c0`` and Const integers ``n`` (a trip count) and
``d`` (a recursion depth), plus generated ``@njit`` helpers (some recursive, some returning a pair of floats).
Bodies are expression DAGs over the math enzpy supports, nested if/elif/else,
``for`` loops with Const trip counts (0, 1, several, ``n``, an array size),
``while`` loops with data-dependent trip counts bounded by a counter,
``break``/``continue``, calls, temporary arrays (``np.zeros/empty/ones``,
``.copy()``, array expressions) written then read, in-place updates and
stencils, slices, ``.sum()`` and ``np.dot``, and containers holding floats and
arrays (list literals, lists built by ``append`` and read by index or
iteration, lists grown, drained by ``pop``/``pop(0)`` and grown again (``append``,
``insert``, ``del``), lists of ``(array, float)`` tuples, tuples, a ``@jitclass`` object
with an array and a float field, a structured array whose records hold a float, a float
subarray, an integer and a nested record) written and read back.

With the ``numpy`` feature, programs may also take a Duplicated matrix ``A``
and draw idiomatic NumPy: vectors and matrices built from floats
(``np.array([...])``, nested lists, ``np.outer``); reductions of 1-D and 2-D
arrays (``np.sum``/``np.max``/``np.min``/``np.mean``/``np.prod``, the methods
``.sum() .max() .min() .mean()``, ``np.sum(M, axis=k)``, ``np.linalg.norm``,
``np.dot``/``@`` of vectors), logsumexp (``m = np.max(v); np.log(np.sum(np.exp(v
- m))) + m``), ``.reshape``/``np.reshape``/``.ravel()``/``.T`` and
``np.swapaxes``/``np.moveaxis``/``np.rot90`` (views, C and F layouts), ``np.cumsum``, ``np.diff``, ``np.where``, ``np.clip`` (scalar or array bounds),
``np.maximum/minimum``, ``np.abs``, smooth ufuncs, a vector broadcast over a
matrix's rows, softmax, matrix products (``@`` and ``np.dot``: matrix-matrix,
matrix-vector, vector-matrix, with transposes; ``np.outer``), and ``@njit``
helpers returning arrays. Fresh 1-D results may then be updated in place, and
fresh matrices and ``A`` through their 1-D views (``.reshape(-1)``, ``.ravel()``). With
``linalg`` too: a well-conditioned matrix built from the arrays in scope
(diagonally dominant ``np.tanh(S) + (n + 1) * np.eye(n)`` or SPD ``S @ S.T +
np.diag(np.linspace(1, 2, n))``) goes to ``np.linalg.solve`` (vector and matrix right-hand sides),
``inv``, ``det``, ``slogdet`` and (SPD) ``cholesky`` and sorted ``eigvals``. With
``raises``: checks that raise an exception whose message holds a value (never
raised at the points tried). With ``parallel``: ``prange`` loops in ``f`` (then
compiled with ``parallel=True``, which also runs its array expressions in parallel), a
reduction into a float, each iteration writing its element of a fresh array, or (with
``linalg``) a reduction of ``np.linalg.norm`` of a matrix's rows, views made in the loop
(left out of ``--hvp`` runs: second order through a parallel loop is refused).
``--exclude numpy,linalg,raises,parallel`` draws exactly the programs drawn before
these features existed.

``f`` is jitted with ``numba.njit`` and checked with ``enzpy.check_gradient``
at a few random points, and the primal enzpy computes (``ReverseWithPrimal``)
is compared with the plain call; forward mode's tangent along a random
direction is compared with the gradient dotted with it. A point is *rejected*
(not counted as a test) where the finite difference means nothing: an
instrumented pure-Python copy of the program (made from the same source with
``ast``: every comparison, ``abs``,
``max``/``min``, divisor and assigned value goes through a recorder, and so do
NumPy's kinks: the element ``np.max``/``np.min``/``.max()``/``.min()`` select,
the side each element of ``np.maximum``/``np.minimum``/``np.clip``/``np.abs``/``np.sign``
and of an array comparison (``np.where``) takes, one distance per element) is
run at the point and at every finite-difference point; the point is rejected
when a comparison is within 1e-4 of flipping, the branch trace changes under the
finite-difference step, a divisor is small, a norm is near 0, or a value (an
assigned value or the argument of a math function) is huge or not finite. When
enzpy and the finite difference disagree, steps 1e-7 and 1e-5 are tried too; the program
fails only if none agrees with enzpy while the estimates at 1e-6 and 1e-7
agree with each other (otherwise the point is rejected: no convergence).
Programs with two Duplicated arrays of one shape are also run with one buffer
passed as both, with one shadow and with two (``_check_aliasing``): the
derivatives must be those of the function of the buffer, or enzpy must refuse
the arguments sharing memory.

By default programs run in a worker subprocess, so a crash (segfault, abort)
or a hang is recorded as a failure of that program and the worker restarts
(``--no-isolate`` runs them in this process).

The generator is importable without importing numba or enzpy:
``generate_program(rng, features=...) -> Program`` (``.source``, ``.params``,
``.points``, ``.arg_spec(point)``) and ``run_program(program) -> dict``.
"""
from __future__ import annotations

import argparse
import ast
import itertools
import linecache
import math
import os
import pickle
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

import numpy as np

FEATURES = ("branches", "for", "while", "helpers", "recursion", "arrays", "temp_arrays",
            "inplace", "outputs", "array_exprs", "const_args", "layouts", "nested_while",
            "containers", "numpy", "linalg", "raises", "parallel")
# Features that hit a known, not yet fixed enzpy bug (left out by
# --skip-known-bugs and by tests/test_fuzz.py). ``nested_while`` (a while loop
# inside another loop) was here until 6da8ef7 fixed split_loop_exits.
KNOWN_BUG_FEATURES: tuple = ()

# Known, not yet fixed enzpy bugs: (name, regular expression matched against a
# failed program's detail); the summary and tests/test_fuzz.py report matching
# failures separately. Until 6da8ef7:
#   ("split_loop_exits KeyError '~exit...' (nested loops, dead loops)",
#    r"KeyError: '~exit\."),
KNOWN_BUGS: list = []


def known_bug(result):
    """The name of the known bug a failed result shows, or None."""
    for name, pattern in KNOWN_BUGS:
        if result.get("status") == "failed" and re.search(pattern, result.get("detail", "")):
            return name
    return None


def failure_signature(result):
    """A short description of a failure, for grouping: its first error line with
    block names and numbers left out."""
    for line in result.get("detail", "").splitlines():
        if line.startswith(("ERROR", "WRONG", "CRASH", "HANG", "STRIDED", "adjoint",
                            "fuzzer error", "Numba cannot")):
            line = re.sub(r"'~exit[^']*'", "'~exit...'", line)
            line = re.sub(r"[-+]?\d+\.?\d*(e[-+]?\d+)?", "N", line)
            return line[:120]
    return result.get("status", "?")


# The jitclass containers put an array and a float into (decorators are
# stripped in the instrumented Python copy).
BOX_SOURCE = """@jitclass([("a", float64[:]), ("c", float64)])
class Box:
    def __init__(self, a, c):
        self.a = a
        self.c = c"""

# The structured-array containers: a float, a float subarray, an integer and a
# nested record of floats per element.
REC_SOURCE = """REC = np.dtype([("x", np.float64), ("v", np.float64, (2,)), ("k", np.int64),
                ("n", np.dtype([("p", np.float64), ("q", np.float64)]))])"""

CONSTS = ["0.5", "1.5", "2.0", "0.25", "3.0", "-1.25", "0.75", "-0.5", "1.0", "0.1"]
NONZERO_DIVISORS = ["2.0", "1.5", "-3.0", "0.75", "4.0"]
UNARY = [
    "math.sin({})", "math.cos({})", "math.tanh({})", "math.atan({})",
    "math.exp(math.sin({}))", "math.exp(-0.5 * ({}) ** 2)", "math.exp(math.tanh({}))",
    "math.log(1.0 + ({}) ** 2)", "math.sqrt(1.0 + ({}) ** 2)",
    "({}) ** 2", "({}) ** 3", "abs({})", "max({}, {c})", "min({}, {c})", "(-({}))",
    "np.cos({})", "np.arctan({})", "math.erf({})", "math.hypot({}, {c})",
    "np.nextafter({}, {c})", "math.lgamma(1.5 + ({}) ** 2)", "math.gamma(1.0 + math.sin({}))",
    # (a float's bits viewed straight back: the float)
    "np.int64(np.float64({}).view(np.int64)).view(np.float64)",
]
BOUNDED = ["math.sin({})", "math.tanh({})", "math.atan({})", "math.cos({})"]
COMPARE = ["<", ">", "<=", ">="]


# -- programs ----------------------------------------------------------------------
class Program:
    """A generated program: source text and the arguments to call ``f`` with.

    ``params``: list of (name, kind) with kind one of ``active`` (float),
    ``dup`` (float array, with a seed in ``seeds``), ``const`` (anything);
    ``points``: list of {name: value}; ``bare_const``: pass Const arguments
    unannotated.
    """

    def __init__(self, source, params, points, seeds, bare_const=False, layout_check=False,
                 tag="fuzz", uses_numpy=False, parallel=False):
        self.source = source
        self.params = params
        self.points = points
        self.seeds = seeds
        self.bare_const = bare_const
        self.layout_check = layout_check
        self.tag = tag
        self.uses_numpy = uses_numpy     # the program has a NumPy statement (``st_numpy``)
        self.parallel = parallel         # ``f`` has a ``prange`` loop (``st_prange``)

    def to_dict(self):
        return dict(source=self.source, params=self.params, points=self.points,
                    seeds=self.seeds, bare_const=self.bare_const,
                    layout_check=self.layout_check, tag=self.tag, uses_numpy=self.uses_numpy,
                    parallel=self.parallel)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    def values(self, point):
        """Plain values (arrays copied) in parameter order."""
        return [_copy(point[name]) for name, _ in self.params]

    def arg_spec(self, point):
        """Annotated arguments for ``autodiff``/``check_gradient`` (fresh copies)."""
        import enzpy
        args = []
        for name, kind in self.params:
            v = _copy(point[name])
            if kind == "active":
                args.append(enzpy.Active(v))
            elif kind == "dup":
                args.append(enzpy.Duplicated(v, self.seeds[name].copy()))
            else:
                args.append(v if self.bare_const else enzpy.Const(v))
        return args

    def describe_point(self, point):
        parts = []
        for name, kind in self.params:
            v = point[name]
            text = np.array2string(v, precision=17, separator=", ") if isinstance(
                v, np.ndarray) else repr(v)
            ann = {"active": "Active", "dup": "Duplicated", "const": "Const"}[kind]
            if kind == "dup":
                seed = np.array2string(self.seeds[name], precision=17, separator=", ")
                parts.append(f"  {name} = Duplicated(np.array({text}), np.array({seed}))")
            else:
                parts.append(f"  {name} = {ann}({text})")
        return "\n".join(parts)


def _copy(v):
    return v.copy() if isinstance(v, np.ndarray) else v


class _Scope:
    def __init__(self, floats=(), arrays=None, writable=None, loops=(), loop_kind=None,
                 wellcond=None):
        self.floats = list(floats)
        self.arrays = dict(arrays or {})        # readable float arrays: name -> shape
        self.writable = dict(writable or {})    # writable float arrays: name -> shape
        self.loops = list(loops)                # for-loop indices in scope
        self.loop_kind = loop_kind              # the innermost loop: None, "for", "while"
        # well-conditioned square matrices (for solve/inv/det): name -> "spd" or "dominant"
        self.wellcond = dict(wellcond or {})

    @property
    def in_loop(self):
        return self.loop_kind is not None

    def child(self, loop_index=None, loop_kind=None):
        loops = self.loops + ([loop_index] if loop_index else [])
        return _Scope(self.floats, self.arrays, self.writable, loops,
                      loop_kind or self.loop_kind, self.wellcond)


def _indent(lines, n=1):
    return ["    " * n + ln for ln in lines]


class _Gen:
    def __init__(self, rng, features, max_statements):
        self.rng = rng
        self.features = set(features)
        self.budget = max_statements
        self.counter = itertools.count(1)
        self.helpers = []            # (name, kind, n_float_params) of generated helpers
        self.helper_src = []
        self.helper_level = 0
        self.params = {}             # name -> shape (or count), decided up front
        self.uses_box = False        # the program uses the ``Box`` jitclass
        self.uses_record = False     # the program uses the ``REC`` record dtype
        # numpy: the memory layout of arrays that are not C-contiguous ("F" for
        # ``.T``, "A" for a strided view); ``a`` is C here but strided in the layout
        # check, so ``a_needs_c`` turns that check off once ``a`` is reshaped or diffed
        self.layouts = {}
        self.a_needs_c = False
        self.owned = set()           # 2-D arrays a write may go to (fresh ones, the input A)
        self.np_helpers = []         # names of generated array helpers
        self.uses_numpy = False
        self.parallel = False        # ``f`` has a ``prange`` loop

    # -- randomness ---------------------------------------------------------------
    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p):
        return bool(self.rng.random() < p)

    def has(self, feature):
        return feature in self.features

    def fresh(self, prefix):
        return f"{prefix}{next(self.counter)}"

    # -- expressions --------------------------------------------------------------
    def leaf(self, sc):
        r = self.rng.random()
        if r < 0.12:
            return self.choice(CONSTS)
        if r < 0.30 and sc.arrays:
            return self.array_leaf(sc)
        if r < 0.36 and sc.loops:
            return f"(0.1 * {self.choice(sc.loops)})"
        return self.choice(sc.floats)

    def index(self, sc, size):
        """An index expression valid for an axis of length ``size`` (an int, or
        an expression such as ``arr.size`` when the length is not known)."""
        if sc.loops and self.chance(0.6):
            return f"{self.choice(sc.loops)} % {size}"
        if "idx" in self.params and self.chance(0.25):
            k = int(self.rng.integers(self.params["idx"]))
            return f"idx[{k}] % {size}"
        if isinstance(size, str):
            return "0"
        return str(int(self.rng.integers(size)))

    def element(self, sc, name, shape):
        return f"{name}[{', '.join(self.index(sc, s) for s in shape)}]"

    def array_leaf(self, sc):
        name = self.choice(sorted(sc.arrays))
        shape = sc.arrays[name]
        r = self.rng.random()
        if r < 0.6 or not self.has("array_exprs"):
            return self.element(sc, name, shape)
        if r < 0.72:
            return f"{name}.sum()"
        if len(shape) == 1:
            others = [o for o in sorted(sc.arrays) if sc.arrays[o] == shape]
            if r < 0.82:
                return f"np.dot({name}, {self.choice(others)})"
            if r < 0.9:
                return f"{name}[1:].sum()"
            return f"{name}[::2].sum()"
        return f"({name} * {name}).sum()"

    def expr(self, sc, depth):
        if depth <= 0 or self.chance(0.25):
            return self.leaf(sc)
        r = self.rng.random()
        if r < 0.4:
            t = self.choice(UNARY)
            a = self.expr(sc, depth - 1)
            c = self.choice([k for k in CONSTS if k != a])
            return t.format(a, c=c)
        if r < 0.92:
            a = self.expr(sc, depth - 1)
            b = self.expr(sc, depth - 1)
            op = self.choice(["+", "-", "*", "*", "/"])
            if op != "/":
                return f"({a} {op} {b})"
            form = self.rng.random()
            if form < 0.4:
                return f"({a} / (1.5 + math.sin({b})))"
            if form < 0.75:
                return f"({a} / (1.0 + ({b}) ** 2))"
            if form < 0.9:
                return f"({a} / {self.choice(NONZERO_DIVISORS)})"
            return f"({a} / {b})"            # the instrumented copy rejects small divisors
        if not self.has("branches"):
            return self.leaf(sc)
        return (f"({self.expr(sc, depth - 1)} if {self.cond(sc, 1)} "
                f"else {self.expr(sc, depth - 1)})")

    def bounded(self, e):
        return self.choice(BOUNDED).format(e)

    def cond(self, sc, depth=1):
        lhs = self.expr(sc, depth)
        for _ in range(5):          # `v < v` never flips, but its margin is 0
            rhs = self.choice(CONSTS) if self.chance(0.4) else self.expr(sc, depth)
            if rhs != lhs:
                break
        return f"{lhs} {self.choice(COMPARE)} {rhs}"

    # -- statements ---------------------------------------------------------------
    def block(self, sc, n, depth):
        lines = []
        for _ in range(n):
            lines += self.statement(sc, depth)
        return lines

    def statement(self, sc, depth):
        self.budget -= 1
        kinds = [("assign", 4), ("update", 1.5)]
        if self.budget > 0 and depth < 3:
            if self.has("branches"):
                kinds.append(("if", 2.5))
            if self.has("for"):
                kinds.append(("for", 2.5))
            if self.has("while") and (not sc.in_loop or self.has("nested_while")):
                kinds.append(("while", 1.2))
            if self.has("helpers") and self.helper_level < 2:
                kinds.append(("call", 1.5))
            if self.has("recursion") and self.helper_level == 0:
                kinds.append(("recursion", 0.8))
        if self.has("temp_arrays") and depth < 2:
            kinds.append(("temp", 1.2))
        if self.has("containers") and depth < 2:
            kinds.append(("container", 1.2))
        if self.has("inplace") and sc.writable:
            kinds.append(("inplace", 1.5))
        if self.has("numpy") and depth < 3:
            kinds.append(("numpy", 3.0))
        if self.has("raises") and depth < 2:
            kinds.append(("guard", 0.3))
        if self.has("parallel") and depth == 0 and self.helper_level == 0:
            kinds.append(("prange", 1.5))
        names, weights = zip(*kinds)
        p = np.array(weights) / sum(weights)
        kind = names[int(self.rng.choice(len(names), p=p))]
        return getattr(self, "st_" + kind)(sc, depth)

    def st_assign(self, sc, depth):
        v = self.fresh("v")
        line = f"{v} = {self.expr(sc, 3)}"
        sc.floats.append(v)
        return [line]

    def st_guard(self, sc, depth):
        """A check that never fails here, raising an exception whose message
        holds a value (Numba builds its arguments in a function stored into the
        exception's record: not a write of the call)."""
        v = self.choice(sc.floats)
        return [f"if abs({v}) > 1e300:", f'    raise ValueError("out of range:", {v})']

    def st_update(self, sc, depth):
        u = self.choice(sc.floats)
        if self.chance(0.5):
            return [f"{u} = 0.5 * {u} + 0.5 * {self.bounded(self.expr(sc, 2))}"]
        return [f"{u} += 0.25 * {self.bounded(self.expr(sc, 2))}"]

    def st_if(self, sc, depth):
        v = self.fresh("v")
        arms = 2 if self.chance(0.7) else (1 if self.chance(0.5) else 3)
        lines = []
        if arms == 1:
            lines.append(f"{v} = {self.expr(sc, 2)}")
        for k in range(arms):
            head = "if" if k == 0 else ("else" if k == arms - 1 else "elif")
            lines.append(f"{head} {self.cond(sc)}:" if head != "else" else "else:")
            inner = sc.child()
            body = self.block(inner, int(self.rng.integers(0, 3)), depth + 1)
            if sc.in_loop and self.chance(0.1):
                # ``continue`` would skip a while loop's counter
                body.append(self.choice(["break", "continue"]) if sc.loop_kind == "for"
                            else "break")
            else:
                body.append(f"{v} = {self.expr(inner, 2)}")
            lines += _indent(body)
        if arms > 1 and any(ln.strip() in ("break", "continue") for ln in lines):
            lines.insert(0, f"{v} = {self.expr(sc, 1)}")
        sc.floats.append(v)
        return lines

    def trip_count(self, sc):
        options = ["0", "1", "2", "3", "5"]
        if "n" in self.params:
            options += ["n", "n"]
        if sc.arrays:
            name = self.choice(sorted(sc.arrays))
            if len(sc.arrays[name]) == 1:
                options.append(f"{name}.size")
        return self.choice(options)

    def st_for(self, sc, depth):
        acc, i = self.fresh("s"), self.fresh("i")
        lines = [f"{acc} = {self.expr(sc, 1)}", f"for {i} in range({self.trip_count(sc)}):"]
        inner = sc.child(i, "for")
        inner.floats.append(acc)
        body = []
        if self.chance(0.1):
            body += [f"if {self.cond(inner)}:", "    continue"]
        body += self.block(inner, int(self.rng.integers(0, 3)), depth + 1)
        if self.chance(0.5):
            body.append(f"{acc} = 0.5 * {acc} + {self.bounded(self.expr(inner, 2))}")
        else:
            body.append(f"{acc} += 0.3 * {self.bounded(self.expr(inner, 2))}")
        if self.chance(0.15):
            body += [f"if {acc} {self.choice(COMPARE)} {self.choice(CONSTS)}:", "    break"]
        lines += _indent(body)
        sc.floats.append(acc)
        return lines

    def st_while(self, sc, depth):
        t, k = self.fresh("t"), self.fresh("k")
        limit = self.choice(["1.0", "2.0", "2.5", "4.0"])
        lines = [f"{t} = {self.bounded(self.expr(sc, 2))}", f"{k} = 0",
                 f"while {t} < {limit} and {k} < {self.choice(['6', '10', '20'])}:"]
        inner = sc.child(loop_kind="while")
        inner.floats.append(t)
        body = self.block(inner, int(self.rng.integers(0, 2)), depth + 1)
        body.append(f"{t} = {t} + 0.3 + 0.2 * math.sin({self.expr(inner, 2)})")
        body.append(f"{k} += 1")
        if self.chance(0.1):
            body += [f"if {t} > {self.choice(['0.5', '1.5'])}:", "    break"]
        lines += _indent(body)
        sc.floats.append(t)
        return lines

    # -- helpers and recursion ----------------------------------------------------
    def st_call(self, sc, depth):
        readable = [a for a in sorted(sc.arrays) if len(sc.arrays[a]) == 1]
        writable = [a for a in sorted(sc.writable) if len(sc.writable[a]) == 1]
        kinds = ["pure", "pure", "pair"] + (["reads"] if readable else []) + \
                (["writes"] if writable and self.has("inplace") else [])
        kind = self.choice(kinds)
        reuse = [h for h in self.helpers if h[1] == kind]
        if reuse and self.chance(0.4):
            name, _, nf = self.choice(reuse)
        else:
            name, nf = self.make_helper(kind)
        args = [self.expr(sc, 2) for _ in range(nf)]
        if kind == "reads":
            args.append(self.choice(readable))
        elif kind == "writes":
            args.append(self.choice(writable))
        v = self.fresh("v")
        sc.floats.append(v)
        if kind == "pair":              # a tuple of floats, through Numba's result slot
            w = self.fresh("v")
            sc.floats.append(w)
            return [f"{v}, {w} = {name}({', '.join(args)})"]
        return [f"{v} = {name}({', '.join(args)})"]

    def make_helper(self, kind):
        name = self.fresh("h")
        nf = int(self.rng.integers(1, 3))
        params = [f"p{k}" for k in range(nf)]
        arrays, writable = {}, {}
        if kind in ("reads", "writes"):
            params.append("arr")
            # the length is unknown inside the helper: index modulo arr.size
            arrays["arr"] = ("arr.size",)
            if kind == "writes":
                writable["arr"] = ("arr.size",)
        saved = self.params, self.budget
        self.params = {}
        self.budget = 3
        self.helper_level += 1
        sc = _Scope(params[:nf], arrays, writable)
        body = self.block(sc, int(self.rng.integers(1, 4)), 1)
        if kind == "writes":
            body.append(f"arr[{self.index(sc, 'arr.size')}] = "
                        f"0.5 * arr[{self.index(sc, 'arr.size')}] + {self.expr(sc, 2)}")
        second = (lambda: f", {self.expr(sc, 2)}") if kind == "pair" else (lambda: "")
        if self.chance(0.2):
            body += [f"if {self.cond(sc)}:", f"    return {self.expr(sc, 2)}{second()}"]
        body.append(f"return {self.ret_expr(sc)}{second()}")
        self.helper_level -= 1
        self.params, self.budget = saved
        self.helper_src.append("\n".join(["@njit", f"def {name}({', '.join(params)}):"]
                                         + _indent(body)))
        self.helpers.append((name, kind, nf))
        return name, nf

    def st_recursion(self, sc, depth):
        name = self.fresh("rec")
        xsc = _Scope(["x"])
        base = self.expr(xsc, 2)
        step = self.bounded(self.expr(xsc, 1))
        here = self.expr(xsc, 2)
        shape = self.choice(["linear", "linear", "tree", "mutual"])
        if shape == "linear":
            rec = f"0.5 * {name}({step}, d - 1) + {here}"
        elif shape == "tree":
            rec = (f"0.5 * {name}({step}, d - 1) + 0.25 * {name}(0.7 * x + 0.1, d - 1) "
                   f"+ {here}")
        else:
            other = self.fresh("rec")
            rec = f"0.5 * {other}({step}, d - 1) + {here}"
            self.helper_src.append("\n".join([
                "@njit", f"def {other}(x, d):", "    if d <= 0:",
                f"        return {self.expr(xsc, 1)}",
                f"    return 0.8 * {name}({self.bounded('x + 0.3')}, d - 1) * "
                f"{self.bounded('x')}"]))
        self.helper_src.append("\n".join([
            "@njit", f"def {name}(x, d):", "    if d <= 0:", f"        return {base}",
            f"    return {rec}"]))
        depth_arg = "d" if "d" in self.params and self.chance(0.7) else \
            str(int(self.rng.integers(0, 5 if shape != "tree" else 4)))
        v = self.fresh("v")
        line = f"{v} = {name}({self.expr(sc, 2)}, {depth_arg})"
        sc.floats.append(v)
        return [line]

    # -- arrays -------------------------------------------------------------------
    def st_temp(self, sc, depth):
        t = self.fresh("tmp")
        ones_d = [a for a in sorted(sc.arrays) if len(sc.arrays[a]) == 1 and a != "arr"]
        r = self.rng.random()
        if ones_d and r < 0.35 and self.has("array_exprs"):
            src = self.choice(ones_d)
            x = self.choice(sc.floats)
            form = self.choice([f"{src}.copy()", f"np.sin({src}) * {x}",
                                f"{src} * {x} + {src} * {src}", f"np.exp(-{src} * {src})",
                                f"np.tanh({src} - {x})"])
            lines = [f"{t} = {form}"]
            shape = sc.arrays[src]
        else:
            m = self.choice([1, 2, 3, 4])
            alloc = self.choice(["np.zeros", "np.empty", "np.ones"])
            i = self.fresh("i")
            inner = sc.child(i, "for")
            lines = [f"{t} = {alloc}({m})", f"for {i} in range({m}):"]
            if alloc == "np.ones" and self.chance(0.5):
                lines.append(f"    {t}[{i}] *= {self.expr(inner, 2)}")
            else:
                lines.append(f"    {t}[{i}] = {self.expr(inner, 2)}")
            shape = (m,)
        sc.arrays[t] = shape
        sc.writable[t] = shape
        return lines

    def st_prange(self, sc, depth):
        """A parallel loop of ``f``: a reduction into a fresh float, or each
        iteration writing its own element of a fresh array."""
        self.parallel = True
        i = self.fresh("i")
        inner = sc.child(i, "for")
        sized = [a for a in sorted(sc.arrays) if len(sc.arrays[a]) == 1]
        matrices = [a for a in sorted(sc.arrays) if len(sc.arrays[a]) == 2]
        if matrices and self.has("linalg") and self.chance(0.3):
            # a rule applied to a view made in the loop's body (its meminfo has no
            # shadow), or to an operand every iteration shares (the first row)
            acc, mat = self.fresh("s"), self.choice(matrices)
            rule = self.choice([f"np.linalg.norm({mat}[{i}])", f"({mat}[{i}] @ {mat}[0])"])
            lines = [f"{acc} = {self.expr(sc, 1)}", f"for {i} in prange({mat}.shape[0]):",
                     f"    {acc} += {rule} * {self.bounded(self.expr(inner, 2))}"]
            sc.floats.append(acc)
            return lines
        if self.chance(0.5):
            acc = self.fresh("s")
            trip = self.trip_count(sc)
            lines = [f"{acc} = {self.expr(sc, 1)}", f"for {i} in prange({trip}):",
                     f"    {acc} += {self.bounded(self.expr(inner, 2))}"]
            sc.floats.append(acc)
            return lines
        t = self.fresh("tmp")
        if sized and self.chance(0.6):
            src = self.choice(sized)
            m, shape = f"{src}.size", sc.arrays[src]
        else:
            m = self.choice([1, 2, 5])
            shape = (m,)
        lines = [f"{t} = np.empty({m})", f"for {i} in prange({m}):",
                 f"    {t}[{i}] = {self.expr(inner, 2)}"]
        sc.arrays[t] = shape
        sc.writable[t] = shape
        return lines

    def st_container(self, sc, depth):
        """Floats and arrays put into a container, then read back into a float."""
        v = self.fresh("v")
        ones_d = [a for a in sorted(sc.arrays) if len(sc.arrays[a]) == 1]
        forms = ["floats", "floats_loop", "drained", "dict_floats", "dict_loop"] + (
            ["arrays", "appended", "tuple", "pairs", "box", "dict_arrays", "records"]
            if ones_d else [])
        form = self.choice(forms)
        e = lambda: self.expr(sc, 2)  # noqa: E731
        if form in ("floats", "floats_loop"):
            c = self.fresh("L")
            lines = [f"{c} = [{e()}, {e()}, {e()}]"]
            if self.chance(0.4):
                lines.append(f"{c}[{int(self.rng.integers(3))}] = {e()}")
            if form == "floats":
                lines.append(f"{v} = {c}[{int(self.rng.integers(3))}] * "
                             f"{self.bounded(f'{c}[{int(self.rng.integers(3))}]')}")
            else:
                item = self.fresh("item")
                lines += [f"{v} = 0.0", f"for {item} in {c}:",
                          f"    {v} += {self.bounded(item + ' * ' + self.choice(sc.floats))}"]
            sc.floats.append(v)
            return lines
        if form == "drained":
            # grown past its first capacities, popped (the block shrinks), grown again
            c, i = self.fresh("L"), self.fresh("i")
            # (pop(0), insert and del move the items left over with memmove)
            grown, kept = self.choice([0, 1, 6, 20]), self.choice([0, 1, 3])
            popped = f"{c}.pop({self.choice(['', '', '0'])})"
            lines = [f"{c} = [{e()}]", f"for {i} in range({grown}):",
                     f"    {c}.append({e()} * ({i} + 1.0))",
                     f"{v} = 0.0", f"while len({c}) > {kept}:",
                     f"    {v} += {self.bounded(f'{popped} * {self.choice(sc.floats)}')}"]
            if self.chance(0.5):
                lines += [self.choice([f"{c}.append({e()})", f"{c}.insert(0, {e()})"]),
                          f"{v} += {c}[len({c}) - 1] * {c}[0]"]
                if self.chance(0.5):
                    item = self.fresh("item")
                    lines += [f"del {c}[0]", f"for {item} in {c}:",
                              f"    {v} += {self.bounded(f'{item} * {item}')}"]
            sc.floats.append(v)
            return lines
        if form in ("dict_floats", "dict_loop"):
            c = self.fresh("D")
            lines = [f"{c} = {{0: {e()}, 1: {e()}}}"]
            if self.chance(0.5):
                key = int(self.rng.integers(3))       # 2: a new key, else overwritten
                lines.append(f"{c}[{key}] = {c}.get({key}, {e()}) * {self.bounded(e())}")
            if form == "dict_floats":
                lines.append(f"{v} = {c}[{int(self.rng.integers(2))}] * "
                             f"{self.bounded(f'{c}.get({int(self.rng.integers(3))}, {e()})')}")
            else:
                key, item = self.fresh("key"), self.fresh("item")
                lines += [f"{v} = 0.0", f"for {key}, {item} in {c}.items():",
                          f"    {v} += {self.bounded(item + ' * ' + self.choice(sc.floats))}"]
            sc.floats.append(v)
            return lines
        arr, other = self.choice(ones_d), self.choice(ones_d)
        if form == "records":
            return self.records(sc, arr, v)
        k = self.index(sc, sc.arrays[arr][0])
        c = self.fresh("C")
        if form == "arrays":
            lines = [f"{c} = [{arr}, {other}]",
                     f"{v} = {c}[0][{k}] * {self.bounded(f'{c}[1].sum()')}"]
        elif form == "appended":
            lines = [f"{c} = []", f"{c}.append({arr})", f"{c}.append({other} * {e()})"]
            item = self.fresh("item")
            lines += [f"{v} = 0.0", f"for {item} in {c}:",
                      f"    {v} += {self.bounded(f'{item}.sum()')}"]
        elif form == "tuple":
            lines = [f"{c} = ({arr}, {e()})", f"{v} = {c}[0][{k}] * {c}[1]"]
        elif form == "dict_arrays":
            total = c + "['b'].sum()"
            lines = [f"{c} = {{'a': {arr}, 'b': {other} * {e()}}}",
                     f"{v} = {c}['a'][{k}] * {self.bounded(total)}"]
        elif form == "pairs":
            a, b = self.fresh("pa"), self.fresh("pb")
            lines = [f"{c} = [({arr}, {e()}), ({other}, {e()})]", f"{v} = 0.0",
                     f"for {a}, {b} in {c}:", f"    {v} += {self.bounded(f'{a}.sum()')} * {b}"]
        else:
            self.uses_box = True
            lines = [f"{c} = Box({arr}, {e()})"]
            if self.chance(0.5):
                lines.append(f"{c}.c = {c}.c * {self.bounded(e())}")
            lines.append(f"{v} = {c}.a[{k}] * {c}.c")
        sc.floats.append(v)
        return lines

    def records(self, sc, arr, v):
        """A structured array (``REC``) with one element per entry of ``arr``:
        its float, subarray and nested-record fields written from expressions
        (sometimes updated in place), then read back into a float."""
        self.uses_record = True
        (m,) = sc.arrays[arr]
        r, i = self.fresh("R"), self.fresh("i")
        inner = sc.child(i, "for")
        e = lambda: self.expr(inner, 2)  # noqa: E731
        fill = [f"{r}[{i}]['x'] = {arr}[{i}] * {e()}", f"{r}[{i}]['v'][0] = {e()}",
                f"{r}[{i}]['v'][1] = {self.bounded(e())}", f"{r}[{i}]['k'] = {i} + 1"]
        if self.chance(0.6):
            fill.append(f"{r}[{i}]['n']['p'] = {e()}")
        lines = [f"{r} = np.zeros({m}, dtype=REC)", f"for {i} in range({m}):"] + _indent(fill)
        if self.chance(0.4):
            j = self.index(sc, m)
            field = self.choice(["['x']", "['v'][1]", "['n']['p']"])
            lines.append(f"{r}[{j}]{field} = {r}[{j}]{field} * {self.bounded(self.expr(sc, 2))}")
        read = f"{r}[{i}]['x'] * {r}[{i}]['v'][1] + {r}[{i}]['v'][0] * {r}[{i}]['k']"
        lines += [f"{v} = 0.0", f"for {i} in range({m}):",
                  f"    {v} += {self.bounded(read)} + {r}[{i}]['n']['p'] * {r}[{i}]['n']['q']"]
        sc.floats.append(v)
        return lines

    def st_inplace(self, sc, depth):
        name = self.choice(sorted(sc.writable))
        (size,) = sc.writable[name]
        r = self.rng.random()
        if r < 0.3:
            i = self.fresh("i")
            return [f"for {i} in range(1, {size}):",
                    f"    {name}[{i}] = {name}[{i}] + 0.5 * "
                    f"{self.bounded(f'{name}[{i} - 1] * {self.choice(sc.floats)}')}"]
        if r < 0.55:
            k = self.index(sc, size)
            return [f"{name}[{k}] = 0.5 * {name}[{k}] + {self.bounded(self.expr(sc, 2))}"]
        if r < 0.75:
            return [f"{name}[{self.index(sc, size)}] += {self.expr(sc, 2)}"]
        if r < 0.88:
            i = self.fresh("i")
            return [f"for {i} in range({size}):",
                    f"    {name}[{i}] = {self.bounded(f'{name}[{i}] * {self.choice(sc.floats)}')}"]
        return [f"{name} *= {self.choice(['0.5', '-1.5', '2.0'])}"]

    # -- numpy: array calls and array expressions ------------------------------------
    def np_arrays(self, sc):
        """The arrays of known shape in scope (not a helper's ``arr``): name -> shape."""
        return {n: s for n, s in sorted(sc.arrays.items())
                if all(isinstance(k, int) for k in s)}

    def c_layout(self, name):
        return self.layouts.get(name, "C") == "C"

    def np_scalar(self, sc):
        """A float to scale or shift arrays with."""
        return self.choice(sc.floats) if self.chance(0.7) else self.expr(sc, 1)

    def np_register(self, sc, name, shape, layout="C", fresh=True):
        """A new array in scope; fresh 1-D ones (not views of another array) may be
        updated in place later, fresh 2-D ones through 1-D views."""
        sc.arrays[name] = shape
        if layout != "C":
            self.layouts[name] = layout
        if fresh and len(shape) == 2:
            self.owned.add(name)
        if fresh and len(shape) == 1 and self.has("inplace"):
            sc.writable[name] = shape

    def np_pick(self, arrs, ndim=None, contiguous=False):
        names = [n for n, s in arrs.items() if (ndim is None or len(s) == ndim)
                 and (not contiguous or self.c_layout(n))]
        return self.choice(names) if names else None

    def st_numpy(self, sc, depth):
        """NumPy calls on arrays in scope: a reduction to a float, a logsumexp, or a
        new array (reshaping, cumsum/diff, axis sums, where/clip/maximum and other
        array expressions, matrix products, linear algebra with a well-conditioned
        matrix, an array helper) that is often reduced to a float right away."""
        self.uses_numpy = True
        arrs = self.np_arrays(sc)
        forms = [("build", 1.0)]
        if arrs:
            forms += [("reduce", 2.0), ("logsumexp", 0.8), ("shape", 1.5), ("scan", 1.0),
                      ("elementwise", 2.0), ("product", 2.5), ("helper", 0.7)]
            if self.has("linalg"):
                forms.append(("linalg", 1.5))
        names, weights = zip(*forms)
        p = np.array(weights) / sum(weights)
        form = names[int(self.rng.choice(len(names), p=p))]
        if form == "reduce":
            v = self.fresh("v")
            name = self.choice(sorted(arrs))
            red = self.np_reduction(sc, name, arrs[name], arrs)
            r = self.rng.random()
            lines = [f"{v} = {red}" if r < 0.5 else (
                f"{v} = {red} * {self.np_scalar(sc)}" if r < 0.75 else
                f"{v} = {self.bounded(red)}")]
        elif form == "logsumexp":
            lines, v = self.np_logsumexp(sc, arrs)
        else:
            made = getattr(self, "np_" + form)(sc, arrs)
            if made is None:             # nothing fits: build a vector from floats instead
                made = self.np_build(sc, arrs)
            lines, name = made
            if name is None or self.chance(0.25):
                return lines
            v = self.fresh("v")
            lines.append(f"{v} = {self.np_reduction(sc, name, sc.arrays[name], sc.arrays)}")
        if self.chance(0.6):
            # fold the result into a float already in use, so that it reaches the result
            lines.append(f"{self.choice(sc.floats)} += 0.25 * {self.bounded(v)}")
        sc.floats.append(v)
        return lines

    def np_reduction(self, sc, name, shape, arrs):
        """A float reduction of array ``name``."""
        size = int(np.prod(shape))
        forms = [f"np.sum({name})", f"{name}.sum()", f"np.max({name})", f"{name}.max()",
                 f"{name}.min()", f"np.min({name})", f"np.mean({name})", f"{name}.mean()",
                 f"np.linalg.norm({name})",
                 f"np.prod({name})" if size <= 4 else f"np.prod(1.0 + 0.1 * {name})"]
        if len(shape) == 1:
            same = [o for o in sorted(arrs) if arrs[o] == shape]
            other = self.choice(same)
            forms += [f"np.dot({name}, {other})", f"{name} @ {other}"]
        else:
            forms += [f"np.sum({name}, axis={self.choice([0, 1])}).max()",
                      f"({name} * {name}).sum()"]
        if name in sc.wellcond:
            forms += [f"np.linalg.det({name})"] * 2
        return self.choice(forms)

    def np_logsumexp(self, sc, arrs):
        name = self.choice(sorted(arrs))
        src = name if self.chance(0.6) else f"({name} * {self.np_scalar(sc)})"
        m, v = self.fresh("mx"), self.fresh("v")
        head = f"{m} = {name}.max()" if src == name and self.chance(0.4) else \
            f"{m} = np.max({src})"
        return [head, f"{v} = np.log(np.sum(np.exp({src} - {m}))) + {m}"], v

    def np_build(self, sc, arrs):
        """An array built from floats: ``np.array`` of a list (1-D or nested), or an
        outer product of two such vectors."""
        k = int(self.rng.integers(2, 5))
        items = lambda m: ", ".join(self.expr(sc, 1) for _ in range(m))  # noqa: E731
        r = self.rng.random()
        if r < 0.6:
            t, shape, rhs = self.fresh("u"), (k,), f"np.array([{items(k)}])"
        elif r < 0.8:
            j = int(self.rng.integers(2, 4))
            t, shape = self.fresh("M"), (k, j)
            rhs = f"np.outer(np.array([{items(k)}]), np.array([{items(j)}]))"
        else:
            t, shape = self.fresh("M"), (2, 2)
            rhs = f"np.array([[{items(2)}], [{items(2)}]])"
        self.np_register(sc, t, shape)
        return [f"{t} = {rhs}"], t

    def np_shape(self, sc, arrs):
        """Reshaping: ``.reshape``, ``.ravel()``, ``np.ravel``, ``.T``, ``np.swapaxes``,
        ``np.moveaxis``, ``np.rot90`` (views)."""
        name = self.choice(sorted(arrs))
        shape = arrs[name]
        size = int(np.prod(shape))
        c = self.c_layout(name)
        if len(shape) == 2:
            options = [("ravel", 1.0), ("T", 2.0), ("axes", 1.0)] + \
                ([("flat", 1.0), ("swap", 1.5)] if c else [])
        else:
            factors = [(p, size // p) for p in range(1, size + 1) if size % p == 0]
            if not c or size < 2:
                return None
            options = [("matrix", 1.0)]
        kinds, weights = zip(*options)
        kind = kinds[int(self.rng.choice(len(kinds), p=np.array(weights) / sum(weights)))]
        if kind == "ravel":
            rhs, new, layout = self.choice([f"{name}.ravel()", f"np.ravel({name})"]), (size,), "C"
        elif kind == "flat":
            rhs, new, layout = f"{name}.reshape(-1)", (size,), "C"
        elif kind == "T":
            rhs, new = f"{name}.T", (shape[1], shape[0])
            layout = {"C": "F", "F": "C"}.get(self.layouts.get(name, "C"), "A")
        elif kind == "axes":        # (Numba's implementations build lists of axes)
            rhs = self.choice([f"np.swapaxes({name}, 0, 1)", f"np.moveaxis({name}, 0, 1)",
                               f"np.rot90({name})"])
            new, layout = (shape[1], shape[0]), "A"
        elif kind == "swap":
            new = (shape[1], shape[0])
            rhs, layout = self.choice([f"{name}.reshape(({new[0]}, {new[1]}))",
                                       f"{name}.reshape({new[0]}, {new[1]})",
                                       f"np.reshape({name}, ({new[0]}, {new[1]}))"]), "C"
        else:
            nontrivial = [f for f in factors if 1 < f[0] < size]
            new = self.choice(nontrivial) if nontrivial and self.chance(0.8) else \
                self.choice(factors)
            rhs, layout = f"{name}.reshape(({new[0]}, {new[1]}))", "C"
        if name == "a" and kind in ("flat", "swap", "matrix"):
            self.a_needs_c = True
        t = self.fresh("M" if len(new) == 2 else "u")
        self.np_register(sc, t, new, layout, fresh=False)
        if kind in ("flat", "ravel") and c and (name in self.owned or name == "A") and \
                self.has("inplace"):
            # a 1-D view: writes through it are writes of ``name``
            sc.writable[t] = new
            if self.chance(0.5):
                k = self.index(sc, size)
                return [f"{t} = {rhs}", f"{t}[{k}] = 0.5 * {t}[{k}] + "
                        f"{self.bounded(self.expr(sc, 2))}"], t
        return [f"{t} = {rhs}"], t

    def np_scan(self, sc, arrs):
        """``np.cumsum`` (flattening), ``np.diff`` (along the last axis) and sums
        along an axis."""
        name = self.choice(sorted(arrs))
        shape = arrs[name]
        size = int(np.prod(shape))
        diffable = self.c_layout(name) and shape[-1] >= 2
        kind = self.choice(["cumsum"] + (["diff", "diff"] if diffable else [])
                           + (["axis", "axis"] if len(shape) == 2 else []))
        if kind == "cumsum":
            rhs = self.choice([f"np.cumsum({name})", f"{name}.cumsum()"])
            new = (size,)
        elif kind == "diff":
            rhs = f"np.diff({name})"
            new = shape[:-1] + (shape[-1] - 1,)
            if name == "a":
                self.a_needs_c = True
        else:
            axis = self.choice([0, 1])
            rhs = self.choice([f"np.sum({name}, axis={axis})", f"{name}.sum(axis={axis})"])
            new = (shape[1 - axis],)
        t = self.fresh("M" if len(new) == 2 else "u")
        self.np_register(sc, t, new)
        return [f"{t} = {rhs}"], t

    def np_elementwise(self, sc, arrs):
        """Array expressions of one shape: ``np.where``, ``np.clip``,
        ``np.maximum/minimum``, ``np.abs``, smooth ufuncs, broadcasting a vector
        over the rows of a matrix, and a softmax."""
        name = self.choice(sorted(arrs))
        shape = arrs[name]
        same = [o for o in sorted(arrs) if arrs[o] == shape and o != name]
        other = self.choice(same) if same else None
        rows = [o for o in sorted(arrs) if len(shape) == 2 and arrs[o] == (shape[1],)]
        s = lambda: self.np_scalar(sc)  # noqa: E731
        c = lambda: self.choice(CONSTS)  # noqa: E731
        kind = self.choice(["where", "where", "clip", "maximum", "minimum", "abs", "smooth",
                            "smooth", "softmax"] + (["rows"] * 2 if rows else []))
        lines = []
        if kind == "where":
            cond = self.choice([f"{name} > {c()}", f"{name} * {s()} < {c()}"]
                               + ([f"{name} < {other}"] if other else []))
            alt = self.choice([c(), f"{name} * {s()}", f"-{name}", f"np.tanh({name})"]
                              + ([other] if other else []))
            rhs = f"np.where({cond}, {name}, {alt})"
        elif kind == "clip":
            lo, hi = self.choice([("-0.5", "0.5"), ("-1.0", "0.25"), ("0.0", "1.0"),
                                  ("-0.25", "1.5")])
            if other and self.chance(0.4):      # array bounds, differentiated too
                lo, hi = f"{other} - 0.5", f"{other} + 0.5"
            src = name if self.chance(0.6) else f"{name} * {s()}"
            rhs = f"np.clip({src}, {lo}, {hi})"
        elif kind in ("maximum", "minimum"):
            rhs = f"np.{kind}({name}, {self.choice([c(), s()] + ([other] if other else []))})"
        elif kind == "abs":
            shifted = f"({name} - {self.choice([c(), s()])})"
            rhs = self.choice([f"np.abs{shifted}", f"np.sign{shifted} * {shifted}"])
        elif kind == "smooth":
            rhs = self.choice([f"np.tanh({name}) * {s()}", f"{name} * {s()} + {name} * {name}",
                               f"np.exp(-{name} * {name})", f"np.sin({name}) + {other or s()}",
                               f"({name} - {s()}) ** 2"])
        elif kind == "rows":
            vec = self.choice(rows)
            rhs = self.choice([f"np.tanh({name} - {vec})", f"{name} * {vec}",
                               f"{name} + {vec} * {s()}"])
            other = vec
        else:
            e = self.fresh("e")
            lines.append(f"{e} = np.exp({name} - np.max({name}))")
            rhs = f"{e} / np.sum({e})"
        layout = "C" if self.c_layout(name) and (other is None or self.c_layout(other)) \
            else "A"
        t = self.fresh("M" if len(shape) == 2 else "u")
        self.np_register(sc, t, shape, layout)
        return lines + [f"{t} = {rhs}"], t

    def np_product(self, sc, arrs):
        """Matrix products: ``@`` and ``np.dot`` (matrix-matrix, matrix-vector,
        vector-matrix, with transposes), ``np.outer``, and a matrix-vector
        recurrence writing each step into the next row of one buffer."""
        name = self.choice(sorted(arrs))
        shape = arrs[name]
        options = []
        if len(shape) == 2:
            r, c = shape
            options += [(f"{name} @ {name}.T", (r, r)), (f"{name}.T @ {name}", (c, c)),
                        (f"np.dot({name}, {name}.T)", (r, r))]
            for o, s in arrs.items():
                if len(s) == 2 and s[0] == c:
                    options += [(f"{name} @ {o}", (r, s[1])), (f"np.dot({name}, {o})", (r, s[1]))]
                if len(s) == 2 and s[1] == c and o != name:
                    options.append((f"{name} @ {o}.T", (r, s[0])))
                if s == (c,):
                    options += [(f"{name} @ {o}", (r,)), (f"np.dot({name}, {o})", (r,))]
                if s == (r,):
                    options += [(f"{o} @ {name}", (c,)), (f"{name}.T @ {o}", (c,))]
        else:
            (n,) = shape
            options.append((f"np.outer({name}, {name})", (n, n)))
            for o, s in arrs.items():
                if len(s) == 1 and o != name:
                    options.append((f"np.outer({name}, {o})", (n, s[0])))
                if len(s) == 2 and s[0] == n:
                    options += [(f"{name} @ {o}", (s[1],)), (f"np.dot({name}, {o})", (s[1],))]
                if len(s) == 2 and s[1] == n:
                    options.append((f"{o} @ {name}", (s[0],)))
        if len(shape) == 2 and shape[0] == shape[1] and self.c_layout(name):
            # a recurrence written into the rows of one buffer (np.dot's out)
            for o, s in arrs.items():
                if s == (shape[0],):
                    options.append(((name, o), (3, shape[0])))
        rhs, new = self.choice(options)
        t = self.fresh("M" if len(new) == 2 else "u")
        self.np_register(sc, t, new)
        if isinstance(rhs, tuple):
            step = self.fresh("k")
            return [f"{t} = np.empty({new})", f"{t}[0] = {rhs[1]}",
                    f"for {step} in range(1, 3):",
                    f"    np.dot({rhs[0]}, {t}[{step} - 1], {t}[{step}])"], t
        return [f"{t} = {rhs}"], t

    def np_linalg(self, sc, arrs):
        """A well-conditioned matrix built from the arrays in scope (a diagonally
        dominant ``np.tanh(S) + (n + 1) * np.eye(n)`` or an SPD ``S @ S.T +
        np.diag(np.linspace(1, 2, n))``), then ``np.linalg.solve`` / ``inv`` / ``cholesky`` / ``det`` /
        ``slogdet`` / ``eigvals``."""
        def spread(n):
            # distinct diagonal entries keep the eigenvalues apart: a repeated one has no
            # derivative, and LAPACK's nonsymmetric eigvals may split it into a complex pair
            # (not np.linspace(1, 2, n): with parallel=True, Numba's linspace of one point
            # is [nan], where NumPy's is [1.0])
            return f"np.diag(1.0 + np.arange({n}) / {n})"

        lines = []
        if sc.wellcond and self.chance(0.5):
            mat = self.choice(sorted(sc.wellcond))
        else:
            name = self.choice(sorted(arrs))
            shape = arrs[name]
            mat = self.fresh("M")
            if len(shape) == 2 and shape[0] == shape[1] and self.chance(0.6):
                n, kind = shape[0], "dominant"
                rhs = f"np.tanh({name}) + {n + 1}.0 * np.eye({n})"
            elif len(shape) == 2:
                if self.chance(0.5):
                    n, rhs = shape[0], f"{name} @ {name}.T + {spread(shape[0])}"
                else:
                    n, rhs = shape[1], f"{name}.T @ {name} + {spread(shape[1])}"
                kind = "spd"
            else:
                n, kind = shape[0], "spd"
                rhs = f"np.outer({name}, {name}) + {spread(n)}"
            lines.append(f"{mat} = {rhs}")
            self.np_register(sc, mat, (n, n))
            sc.wellcond[mat] = kind
        n = sc.arrays[mat][0]
        ops = ["solve", "solve", "inv", "det", "slogdet"] + (["cholesky", "eigvals"]
                                                             if sc.wellcond[mat] == "spd" else [])
        op = self.choice(ops)
        if op in ("det", "slogdet", "eigvals"):
            v = self.fresh("v")
            # (eigenvalues of a symmetric matrix are real; sorted, their order is stable)
            lines.append({"det": f"{v} = np.linalg.det({mat})",
                          "slogdet": f"{v} = np.linalg.slogdet({mat})[1]",
                          "eigvals": f"{v} = (np.sort(np.linalg.eigvals({mat})) * "
                                     f"np.linspace(0.5, 1.5, {n})).sum()"}[op])
            sc.floats.append(v)
            return lines, None
        if op == "solve":
            rhss = [o for o, s in sorted(sc.arrays.items())
                    if s and isinstance(s[0], int) and s[0] == n and o != mat]
            b = self.choice(rhss) if rhss and self.chance(0.8) else \
                f"np.ones({n}) * {self.np_scalar(sc)}"
            new = sc.arrays.get(b, (n,))
            rhs, layout = f"np.linalg.solve({mat}, {b})", ("C" if len(new) == 1 else "A")
        else:
            rhs, new, layout = f"np.linalg.{op}({mat})", (n, n), "A"
        t = self.fresh("M" if len(new) == 2 else "u")
        self.np_register(sc, t, new, layout)
        return lines + [f"{t} = {rhs}"], t

    def np_helper(self, sc, arrs):
        """A call to an ``@njit`` helper that returns an array shaped like its array
        argument."""
        name = self.choice(sorted(arrs))
        if self.np_helpers and self.chance(0.4):
            helper = self.choice(self.np_helpers)
        else:
            helper = self.fresh("h")
            body = self.choice([
                ["return np.tanh(X) * p0 + X"],
                ["e = np.exp(X - np.max(X))", "return e / np.sum(e) * p0"],
                ["return np.maximum(X, p0) * X"],
                ["return (X - X.mean()) * p0"],
                ["return np.where(X > p0, X * X, X)"],
                ["Y = np.cumsum(X.ravel()).reshape(X.shape)", "return Y * p0"],
            ])
            self.helper_src.append("\n".join(["@njit", f"def {helper}(X, p0):"]
                                             + _indent(body)))
            self.np_helpers.append(helper)
        t = self.fresh("M" if len(arrs[name]) == 2 else "u")
        self.np_register(sc, t, arrs[name], "C" if self.c_layout(name) else "A")
        return [f"{t} = {helper}({name}, {self.np_scalar(sc)})"], t

    def ret_expr(self, sc):
        picks = list(dict.fromkeys(
            [sc.floats[-1]] + [self.choice(sc.floats) for _ in range(int(self.rng.integers(0, 3)))]))
        terms = [picks[0]]
        for v in picks[1:]:
            terms.append(self.choice([f"0.5 * {v}", f"math.sin({v})", f"{v} * {picks[0]}", v]))
        if self.chance(0.3):
            terms.append(self.expr(sc, 2))
        return " + ".join(terms)


def generate_program(rng, features=FEATURES, max_statements=7, n_points=2):
    """A random program: ``Program`` with ``.source`` (defining ``f`` and its
    ``@njit`` helpers), ``.params`` and ``.points`` (argument values)."""
    g = _Gen(rng, features, max_statements)
    n_active = int(rng.integers(1, 4))
    params = [(f"x{k}", "active") for k in range(n_active)]
    arrays, writable = {}, {}
    if g.has("arrays") and g.chance(0.6):
        shape = (int(rng.integers(1, 6)),) if g.chance(0.85) else (2, 3)
        g.params["a"] = shape
        params.append(("a", "dup"))
        arrays["a"] = shape
        if len(shape) == 1 and g.has("inplace") and g.chance(0.25):
            writable["a"] = shape
    if g.has("numpy") and g.chance(0.5):
        # a matrix for the NumPy statements
        shape = (int(rng.integers(2, 5)), int(rng.integers(2, 5)))
        g.params["A"] = shape
        params.append(("A", "dup"))
        arrays["A"] = shape
    if g.has("outputs") and g.chance(0.3):
        shape = (int(rng.integers(1, 4)),)
        if len(arrays.get("a", ())) == 1 and g.chance(0.5):
            shape = arrays["a"]     # (then also passed one buffer: _check_aliasing)
        g.params["out"] = shape
        params.append(("out", "dup"))
        arrays["out"] = shape
        writable["out"] = shape
    if g.has("const_args"):
        if g.has("arrays") and g.chance(0.25):
            shape = (int(rng.integers(1, 5)),)
            g.params["w"] = shape
            params.append(("w", "const"))
            arrays["w"] = shape
        if g.has("arrays") and g.chance(0.2):
            g.params["idx"] = int(rng.integers(1, 4))
            params.append(("idx", "const"))
        if g.chance(0.2):
            g.params["c0"] = ()
            params.append(("c0", "const"))
        if g.chance(0.4):
            g.params["n"] = ()
            params.append(("n", "const"))
        if g.has("recursion") and g.chance(0.4):
            g.params["d"] = ()
            params.append(("d", "const"))
    floats = [p for p, k in params if k == "active"] + (["c0"] if "c0" in g.params else [])
    sc = _Scope(floats, arrays, writable)
    body = g.block(sc, int(rng.integers(2, max_statements + 1)), 0)
    if "out" in g.params and not any("out[" in ln or "out *=" in ln for ln in body):
        body.append(f"out[{g.index(sc, g.params['out'][0])}] = {g.expr(sc, 2)}")
    if "out" in g.params and g.chance(0.2):
        body.append("return")
    else:
        body.append(f"return {g.ret_expr(sc)}")
    if g.chance(0.2):
        perm = rng.permutation(len(params))
        params = [params[i] for i in perm]
    if g.uses_box:
        g.helper_src.insert(0, BOX_SOURCE)
    if g.uses_record:
        g.helper_src.insert(0, REC_SOURCE)
    source = "\n\n".join(g.helper_src + [
        "\n".join([f"def f({', '.join(p for p, _ in params)}):"] + _indent(body))]) + "\n"
    # argument values
    points = []
    idx_values = None
    if "idx" in g.params:
        idx_values = rng.integers(0, 64, g.params["idx"]).astype(np.int64)
    for _ in range(n_points):
        pt = {}
        for name, kind in params:
            if kind == "active":
                pt[name] = float(rng.uniform(-2.0, 2.0))
            elif name in ("a", "A"):
                pt[name] = rng.uniform(-1.5, 1.5, g.params[name])
            elif name == "out":
                pt[name] = rng.uniform(-1.0, 1.0, g.params["out"])
            elif name == "w":
                pt[name] = rng.uniform(-1.0, 1.0, g.params["w"])
            elif name == "idx":
                pt[name] = idx_values.copy()
            elif name == "c0":
                pt[name] = float(rng.uniform(-1.0, 1.0))
            elif name == "n":
                pt[name] = int(rng.choice([0, 1, 2, 3, 4, 6]))
            elif name == "d":
                pt[name] = int(rng.integers(0, 5))
        points.append(pt)
    seeds = {name: rng.normal(0.0, 1.0, g.params[name]) for name, kind in params
             if kind == "dup"}
    layout = g.has("layouts") and "a" in g.params and len(g.params["a"]) == 1 and \
        not g.a_needs_c and g.chance(0.15)
    return Program(source, params, points, seeds, bare_const=g.chance(0.3), layout_check=layout,
                   uses_numpy=g.uses_numpy, parallel=g.parallel)


# -- the instrumented pure-Python copy -------------------------------------------------
class _Reject(Exception):
    pass


class _Monitor:
    LIMIT = 1e4

    def __init__(self):
        self.trace = []
        self.diffs = []              # per comparison: its distance from flipping
        self.scale = 0.0

    def _branch(self, diff, outcome):
        d = np.abs(np.asarray(diff, dtype=float))
        if d.ndim and d.size:
            self.diffs.extend(d.ravel().tolist())    # each element may be tied, or not
        else:
            self.diffs.append(float(d.min()) if d.size else math.inf)
        self.trace.append(outcome.tobytes() if isinstance(outcome, np.ndarray) else bool(outcome))

    def cmp(self, a, op, b):
        r = {"<": lambda: a < b, ">": lambda: a > b, "<=": lambda: a <= b,
             ">=": lambda: a >= b, "==": lambda: a == b, "!=": lambda: a != b}[op]()
        if not (isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))):
            self._branch(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), np.asarray(r))
        return r

    def den(self, b):
        if np.any(np.abs(np.asarray(b, dtype=float)) < 0.2):
            raise _Reject("small divisor")
        return b

    def v(self, x):
        if isinstance(x, (list, tuple)):
            for item in x:
                self.v(item)
            return x
        if not isinstance(x, (int, float, np.ndarray, np.number)):
            return x                     # an object (a container of checked values)
        if isinstance(x, np.ndarray) and x.dtype.names:
            return x                     # a structured array (its fields are checked)
        arr = np.asarray(x, dtype=float)
        if not np.all(np.isfinite(arr)):
            raise _Reject("not finite")
        m = float(np.max(np.abs(arr))) if arr.size else 0.0
        if m > self.LIMIT:
            raise _Reject("huge value")
        self.scale = max(self.scale, m)
        return x

    def abs(self, x):
        self._branch(x, np.asarray(x >= 0))
        return abs(x)

    def np_sign(self, x):
        self._branch(x, np.asarray(x >= 0))
        return np.sign(x)

    def max(self, a, b):
        self._branch(a - b, np.asarray(a > b))
        return max(a, b)

    def min(self, a, b):
        self._branch(a - b, np.asarray(a < b))
        return min(a, b)

    # NumPy's kinks: which element a reduction selects, which side of
    # ``maximum``/``minimum``/``clip`` each element takes; a norm near 0
    def np_max(self, x):
        arr = np.asarray(x, dtype=float).ravel()
        k = int(np.argmax(arr))
        self._branch(np.delete(arr, k) - arr[k] if arr.size > 1 else math.inf, np.asarray(k))
        return np.max(x)

    def np_min(self, x):
        arr = np.asarray(x, dtype=float).ravel()
        k = int(np.argmin(arr))
        self._branch(np.delete(arr, k) - arr[k] if arr.size > 1 else math.inf, np.asarray(k))
        return np.min(x)

    def np_maximum(self, a, b):
        self._branch(np.asarray(a) - np.asarray(b), np.asarray(a > b))
        return np.maximum(a, b)

    def np_minimum(self, a, b):
        self._branch(np.asarray(a) - np.asarray(b), np.asarray(a < b))
        return np.minimum(a, b)

    def np_clip(self, x, lo, hi):
        x = np.asarray(x)
        self._branch(np.concatenate([(x - lo).ravel(), (x - hi).ravel()]),
                     np.concatenate([(x < lo).ravel(), (x > hi).ravel()]))
        return np.clip(x, lo, hi)

    def np_norm(self, x, *args):
        value = np.linalg.norm(x, *args)
        if value < 1e-3:
            raise _Reject("norm near 0")
        return value


class _Instrument(ast.NodeTransformer):
    _OPS = {ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!="}

    @staticmethod
    def _call(name, *args):
        return ast.Call(ast.Name(name, ast.Load()), list(args), [])

    def visit_FunctionDef(self, node):
        node.decorator_list = []
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node):
        node.decorator_list = []
        self.generic_visit(node)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1:
            raise ValueError("chained comparison")
        return self._call("_cmp", node.left, ast.Constant(self._OPS[type(node.ops[0])]),
                          node.comparators[0])

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            node.right = self._call("_den", node.right)
        return node

    _SCALAR_FUNCS = {"sin", "cos", "tan", "tanh", "atan", "arctan", "exp", "log", "sqrt",
                     "erf", "hypot"}

    _NP_KINKS = {"max": "_np_max", "amax": "_np_max", "min": "_np_min", "amin": "_np_min",
                 "maximum": "_np_maximum", "minimum": "_np_minimum", "clip": "_np_clip",
                 "abs": "_abs", "absolute": "_abs", "sign": "_np_sign"}

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("abs", "max", "min"):
            node.func = ast.Name("_" + func.id, ast.Load())
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id == "np" and func.attr in self._NP_KINKS:
            node.func = ast.Name(self._NP_KINKS[func.attr], ast.Load())
        elif isinstance(func, ast.Attribute) and func.attr == "norm" and \
                isinstance(func.value, ast.Attribute) and func.value.attr == "linalg":
            node.func = ast.Name("_np_norm", ast.Load())
        elif isinstance(func, ast.Attribute) and func.attr in ("max", "min") and \
                not node.args and not node.keywords and not (
                    isinstance(func.value, ast.Name) and func.value.id in ("np", "math")):
            node.args = [func.value]         # x.max() -> _np_max(x)
            node.func = ast.Name(f"_np_{func.attr}", ast.Load())
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id in ("math", "np") and func.attr in self._SCALAR_FUNCS:
            # a huge argument (cos(s ** 6)) makes finite differences meaningless
            node.args = [self._call("_v", arg) for arg in node.args]
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        node.value = self._call("_v", node.value)
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        node.value = self._call("_v", node.value)
        return node

    def visit_Return(self, node):
        self.generic_visit(node)
        if node.value is not None:
            node.value = self._call("_v", node.value)
        return node


def instrumented_source(source):
    tree = _Instrument().visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree))


_files = itertools.count()


def _exec(source, namespace, tag):
    filename = f"<{tag}-{next(_files)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def _run_instrumented(code, values):
    """(monitor, result), or (None, why) when the run is rejected."""
    mon = _Monitor()
    ns = {"math": math, "np": np, "prange": range, "_cmp": mon.cmp, "_den": mon.den, "_v": mon.v,
          "_abs": mon.abs, "_max": mon.max, "_min": mon.min, "_np_max": mon.np_max,
          "_np_min": mon.np_min, "_np_maximum": mon.np_maximum, "_np_minimum": mon.np_minimum,
          "_np_clip": mon.np_clip, "_np_norm": mon.np_norm, "_np_sign": mon.np_sign}
    exec(code, ns)
    try:
        with np.errstate(all="raise"):
            y = ns["f"](*values)
            if y is not None:
                mon.v(y)
            for v in values:
                if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                    mon.v(v)
    except (_Reject, ArithmeticError, FloatingPointError, ValueError, IndexError) as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return mon, y


def fd_rejection(prog, point, code=None, step=1e-6, min_margin=1e-4):
    """Why central differences at ``point`` are unreliable, or None."""
    if code is None:
        code = compile(instrumented_source(prog.source), "<instrumented>", "exec")
    values = prog.values(point)
    mon, why = _run_instrumented(code, values)
    if mon is None:
        return f"the instrumented run stops ({why})"
    # a comparison that is exactly tied at the point and at every
    # finite-difference point (``max(x, c) < c`` with x < c, ``v < v``) does not
    # depend on the inputs there: it cannot flip
    tied = [d == 0.0 for d in mon.diffs]
    for pos, (name, kind) in enumerate(prog.params):
        if kind == "const":
            continue
        cells = [None] if kind == "active" else list(np.ndindex(*point[name].shape))
        for idx in cells:
            for sign in (1, -1):
                trial = prog.values(point)
                if idx is None:
                    trial[pos] = trial[pos] + sign * step * max(1.0, abs(trial[pos]))
                else:
                    trial[pos][idx] += sign * step * max(1.0, abs(trial[pos][idx]))
                other, why = _run_instrumented(code, trial)
                if other is None:
                    return f"the instrumented run stops at a finite-difference point ({why})"
                if other.trace != mon.trace:
                    return f"the branches taken change under a step of {name}"
                tied = [t and d == 0.0 for t, d in zip(tied, other.diffs)]
    margin = min([d for d, t in zip(mon.diffs, tied) if not t], default=math.inf)
    if margin < min_margin:
        return f"a comparison is within {margin:.2g} of flipping"
    return None


# -- running a program ------------------------------------------------------------------
def _close(got, want, rtol, atol):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if got.shape != want.shape or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= rtol * np.maximum(np.abs(got), np.abs(want)) + atol))


def _fd_agree(a, b, atol, rtol=1e-3):
    return all(_close(a.finite_differences[i], b.finite_differences[i], rtol, atol)
               for i in a.finite_differences)


def _gradient_mismatch(check, atol, rtol):
    for i, got in check.enzpy.items():
        if not _close(got, check.finite_differences[i], rtol, atol):
            return i
    return None


def run_program(prog, rtol=1e-4, verbose=False, hvp=False):
    """Check one program. Returns a dict: ``status`` (``passed``, ``rejected``,
    ``failed`` or ``invalid`` when Numba cannot compile it: a generator bug),
    ``detail`` (text) and per-point information. ``hvp``: check second order too
    (``_check_hvp``)."""
    import numba
    import enzpy

    warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
    if isinstance(prog, dict):
        prog = Program.from_dict(prog)
    from numba.experimental import jitclass
    ns = _exec(prog.source, {"math": math, "np": np, "njit": numba.njit, "jitclass": jitclass,
                             "float64": numba.float64, "prange": numba.prange}, prog.tag)
    f = numba.njit(parallel=prog.parallel)(ns["f"])
    code = compile(instrumented_source(prog.source), "<instrumented>", "exec")
    statuses, details = [], []
    for p, point in enumerate(prog.points):
        where = f"point {p}:\n{prog.describe_point(point)}"
        try:
            plain_values = prog.values(point)
            primal = f(*plain_values)
        except numba.core.errors.TypingError as exc:
            return {"status": "invalid", "detail": f"Numba cannot compile it: {exc}"}
        except Exception as exc:     # noqa: BLE001 - e.g. ZeroDivisionError at this point
            statuses.append("rejected")
            details.append(f"{where}\nrejected: the primal raises {type(exc).__name__}")
            continue
        reason = fd_rejection(prog, point, code)
        if reason is None:
            mon, ipy = _run_instrumented(code, prog.values(point))
            if primal is not None and not _close(primal, ipy, 1e-8, 1e-10):
                reason = f"Numba ({primal!r}) and Python ({ipy!r}) disagree"
        if reason is not None:
            statuses.append("rejected")
            details.append(f"{where}\nrejected: {reason}")
            continue
        atol = 1e-6 * max(1.0, mon.scale)
        try:
            check = enzpy.check_gradient(f, *prog.arg_spec(point))
            bad = _gradient_mismatch(check, atol, rtol)
            if bad is not None:
                # confirm with other steps before calling it a failure
                others = {}
                for step in (1e-7, 1e-5):
                    others[step] = enzpy.check_gradient(f, *prog.arg_spec(point), step=step)
                    if _gradient_mismatch(others[step], atol, rtol) is None:
                        bad = None
                        break
            if bad is not None and not _fd_agree(check, others[1e-7], atol):
                # the estimates at steps 1e-6 and 1e-7 disagree with each other
                # (e.g. cos(s ** 6) oscillates faster than the step resolves)
                statuses.append("rejected")
                details.append(f"{where}\nrejected: the finite differences do not converge "
                               f"(step 1e-6: {check.finite_differences[bad]!r}, 1e-7: "
                               f"{others[1e-7].finite_differences[bad]!r}; enzpy "
                               f"{check.enzpy[bad]!r})")
                continue
            if bad is not None:
                name = prog.params[bad][0]
                statuses.append("failed")
                details.append(f"{where}\nWRONG DERIVATIVE for {name}: enzpy "
                               f"{check.enzpy[bad]!r}, finite differences "
                               f"{check.finite_differences[bad]!r} (step 1e-6), "
                               f"{others[1e-7].finite_differences[bad]!r} (1e-7), "
                               f"{others[1e-5].finite_differences[bad]!r} (1e-5) ({check})")
                continue
            problem = _check_primal(enzpy, f, prog, point)
            if problem is None:
                problem = _check_forward(enzpy, f, prog, point, check)
            if problem is None and prog.layout_check:
                problem = _check_layout(enzpy, f, prog, point, check)
            if problem is None:
                problem = _check_aliasing(enzpy, f, prog, point, atol, rtol)
            if problem is None and hvp:
                problem = _check_hvp(enzpy, f, prog, point, atol, rtol)
            if problem is not None:
                statuses.append("failed")
                details.append(f"{where}\n{problem}")
                continue
        except Exception as exc:     # noqa: BLE001 - any error from enzpy is a failure
            statuses.append("failed")
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
            details.append(f"{where}\nERROR {type(exc).__name__}: {exc}\n{tb}")
            continue
        statuses.append("passed")
        if verbose:
            details.append(f"{where}\npassed ({check})")
    if "failed" in statuses:
        status = "failed"
    elif "passed" in statuses:
        status = "passed"
    else:
        status = "rejected"
    return {"status": status, "detail": "\n".join(details)}


def _check_hvp(enzpy, f, prog, point, atol, rtol):
    """Second order: ``enzpy.hvp`` with respect to the first parameter along a random
    direction against central differences of enzpy's reverse-mode gradient (checked
    against finite differences just before), the other parameters constant. Nothing
    to check when the first parameter is not differentiated, ``f`` returns None, or
    enzpy refuses the constants (a differentiated value written into an array that is
    now constant); when the differences do not converge, no verdict either."""
    name, kind = prog.params[0]
    if kind not in ("active", "dup") or f(*prog.values(point)) is None:
        return None
    x = point[name]
    rest = [point[n] for n, _ in prog.params[1:]]
    rng = np.random.default_rng(len(prog.source) + 1)
    v = rng.standard_normal(x.shape) if kind == "dup" else float(rng.standard_normal())

    def gradient(at):
        consts = [enzpy.Const(_copy(c)) for c in rest]
        if kind == "active":
            return enzpy.autodiff(enzpy.Reverse, f, enzpy.Active(at), *consts)[0][0]
        g = np.zeros_like(at)
        enzpy.autodiff(enzpy.Reverse, f, enzpy.Duplicated(at.copy(), g), *consts)
        return g

    try:
        got = enzpy.hvp(f, _copy(x), v, *[_copy(c) for c in rest])
    except enzpy.UnsupportedError:
        return None
    estimates = []
    for step in (1e-6, 1e-7, 1e-5):
        fd = (np.asarray(gradient(x + step * v)) - np.asarray(gradient(x - step * v))) / (
            2 * step)
        if _close(got, fd, rtol, atol):
            return None
        estimates.append(fd)
    if not _close(estimates[0], estimates[1], 1e-3, atol):
        return None          # the differences of gradients do not converge
    return (f"WRONG HVP with respect to {name} along {v!r}: enzpy {got!r}, differences of "
            f"gradients {estimates[0]!r} (step 1e-6), {estimates[1]!r} (1e-7)")


def _check_primal(enzpy, f, prog, point):
    """ReverseWithPrimal's primal and the arrays it leaves vs a plain call."""
    plain_values = prog.values(point)
    want = f(*plain_values)
    args = prog.arg_spec(point)
    grads, got = enzpy.autodiff(enzpy.ReverseWithPrimal, f, *args)
    for (name, kind), g in zip(prog.params, grads):
        if (kind == "active") != (g is not None):
            return f"adjoint of {name} ({kind}) is {g!r}"
    if (want is None) != (got is None) or (
            want is not None and not _close(got, want, 1e-9, 1e-12)):
        return f"WRONG PRIMAL: ReverseWithPrimal gives {got!r}, f gives {want!r}"
    for (name, kind), arg, plain in zip(prog.params, args, plain_values):
        if kind == "dup" and not _close(arg.val, plain, 1e-9, 1e-12):
            return (f"WRONG ARRAY AFTER THE CALL: {name} is {arg.val!r} after autodiff, "
                    f"{plain!r} after f")
    return None


def _check_forward(enzpy, f, prog, point, check):
    """Forward mode along a random direction against the reverse-mode gradient:
    the tangent of the objective (the return plus seed . array after the call)
    must equal the gradient dotted with the direction."""
    rng = np.random.default_rng(len(prog.source))
    args, expected, terms = [], 0.0, 0.0
    for pos, ((name, kind), arg) in enumerate(zip(prog.params, prog.arg_spec(point))):
        if kind == "active":
            direction = float(rng.standard_normal())
            args.append(enzpy.Duplicated(arg.val, direction))
        elif kind == "dup":
            direction = rng.standard_normal(arg.val.shape)
            args.append(enzpy.Duplicated(arg.val, direction.copy()))
        else:
            args.append(arg)
            continue
        product = np.sum(np.asarray(check.enzpy[pos]) * direction)
        expected += product
        terms += float(np.sum(np.abs(np.asarray(check.enzpy[pos]) * direction)))
    (tangent,) = enzpy.autodiff(enzpy.Forward, f, *args)
    got = 0.0 if tangent is None else tangent
    for (name, kind), arg in zip(prog.params, args):
        if kind == "dup":
            got += float(np.sum(prog.seeds[name] * arg.dval))
    if not abs(got - expected) <= 1e-7 * max(1.0, terms):
        return f"WRONG FORWARD MODE: tangent {got!r}, gradient . direction {expected!r}"
    return None


def _check_layout(enzpy, f, prog, point, check):
    """The same derivative with ``a`` passed as a strided view."""
    pos = [name for name, _ in prog.params].index("a")
    args = prog.arg_spec(point)
    a = point["a"]
    base = np.zeros(2 * a.size)
    base[::2] = a
    shadow_base = np.zeros(2 * a.size)
    shadow_base[::2] = prog.seeds["a"]
    args[pos] = enzpy.Duplicated(base[::2], shadow_base[::2])
    enzpy.autodiff(enzpy.Reverse, f, *args)
    if not _close(shadow_base[::2], check.enzpy[pos], 1e-9, 1e-12):
        return (f"STRIDED LAYOUT: derivative {shadow_base[::2]!r} for a strided `a`, "
                f"{check.enzpy[pos]!r} for a contiguous one")
    if np.any(shadow_base[1::2] != 0.0):
        return "STRIDED LAYOUT: the shadow was written between its elements"
    return None


def _check_aliasing(enzpy, f, prog, point, atol, rtol):
    """Two Duplicated arrays of one shape passed one buffer (``f(a, a)``), with one
    shadow and then with two: the derivatives (Active arguments' adjoints, the
    buffer's gradient, summed over its shadows) of the function of that buffer, or
    the ValueError refusing arguments that share memory; never other numbers. The
    objective is check_gradient's: the return plus each seed dotted with its array
    after the call (the buffer's seed counted once)."""
    names = [name for name, kind in prog.params if kind == "dup"]
    pair = next(((p, q) for i, p in enumerate(names) for q in names[i + 1:]
                 if np.shape(point[p]) == np.shape(point[q])), None)
    if pair is None:
        return None
    actives = [k for k, (_, kind) in enumerate(prog.params) if kind == "active"]

    def objective(xs, buffer):
        values = prog.values(point)
        buffer = buffer.copy()
        for k, (name, _) in enumerate(prog.params):
            if name in pair:
                values[k] = buffer
        for k, x in zip(actives, xs):
            values[k] = x
        result = f(*values)
        total = 0.0 if result is None else float(result)
        for k, (name, kind) in enumerate(prog.params):
            if kind == "dup" and name != pair[1]:
                total += float(np.sum(prog.seeds[name] * values[k]))
        return total

    x0 = [point[prog.params[k][0]] for k in actives]
    b0 = point[pair[0]]
    estimates = []
    for step in (1e-6, 1e-7):
        dxs = []
        for j in range(len(x0)):
            up, down = list(x0), list(x0)
            up[j] += step
            down[j] -= step
            dxs.append((objective(up, b0) - objective(down, b0)) / (2 * step))
        db = np.empty_like(b0)
        for i in np.ndindex(b0.shape):
            e = np.zeros_like(b0)
            e[i] = step
            db[i] = (objective(x0, b0 + e) - objective(x0, b0 - e)) / (2 * step)
        estimates.append(np.concatenate([dxs, db.ravel()]))
    if not _close(estimates[0], estimates[1], 1e-3, atol):
        return None                 # the differences do not converge: no verdict
    for shadows in ("one", "two"):
        args = prog.arg_spec(point)
        buffer = b0.copy()
        first = prog.seeds[pair[0]].copy()
        second = first if shadows == "one" else np.zeros_like(first)
        for k, (name, _) in enumerate(prog.params):
            if name in pair:
                args[k] = enzpy.Duplicated(buffer, first if name == pair[0] else second)
        try:
            (adjoints,) = enzpy.autodiff(enzpy.Reverse, f, *args)
        except ValueError as exc:
            if "share memory" in str(exc):
                continue            # refused: a write through one, a read through the other
            raise
        gradient = first if shadows == "one" else first + second
        got = np.concatenate([[adjoints[k] for k in actives], gradient.ravel()])
        if not any(_close(got, fd, rtol, atol) for fd in estimates):
            return (f"ALIASED ARGUMENTS: {pair[0]} and {pair[1]} passed one buffer with "
                    f"{shadows} shadow(s): derivatives (actives, buffer) {got!r}, finite "
                    f"differences {estimates[0]!r}")
    return None


def program_rng(seed, index):
    return np.random.default_rng([seed, index])


# -- the worker subprocess ---------------------------------------------------------------
def _worker_main():
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import faulthandler
    faulthandler.enable()
    stdin = sys.stdin.buffer
    while True:
        try:
            job = pickle.load(stdin)
        except EOFError:
            return
        try:
            result = run_program(job["program"], rtol=job["rtol"], verbose=job["verbose"],
                                 hvp=job["hvp"])
        except Exception as exc:     # noqa: BLE001
            result = {"status": "failed",
                      "detail": "fuzzer error: " + "".join(traceback.format_exception(exc))}
        pickle.dump(result, proto_out)
        proto_out.flush()


class _Worker:
    def __init__(self):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err)
        self.results = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                self.results.put(pickle.load(self.proc.stdout))
            except Exception:        # noqa: BLE001 - EOF: the worker died
                self.results.put(None)
                return

    def run(self, program, rtol, verbose, timeout, hvp=False):
        self.err.seek(0)
        self.err.truncate()
        pickle.dump({"program": program.to_dict(), "rtol": rtol, "verbose": verbose,
                     "hvp": hvp}, self.proc.stdin)
        self.proc.stdin.flush()
        try:
            result = self.results.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            return {"status": "failed", "detail": f"HANG: no result after {timeout} s"}
        if result is None:
            rc = self.proc.wait()
            self.err.seek(0)
            tail = self.err.read().decode(errors="replace")[-3000:]
            return {"status": "failed", "detail": f"CRASH: the worker died (exit code {rc})"
                                                  f"\n{tail}"}
        return result

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:            # noqa: BLE001
            self.kill()


# -- the command line --------------------------------------------------------------------
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=None,
                        help="stop starting new programs after this many seconds")
    parser.add_argument("--only", type=int, default=None, help="run program INDEX only")
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--max-statements", type=int, default=7)
    parser.add_argument("--points", type=int, default=2, help="points checked per program")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--exclude", default="",
                        help="comma-separated features to leave out, of: " + ", ".join(FEATURES))
    parser.add_argument("--skip-known-bugs", action="store_true",
                        help="leave out " + ", ".join(KNOWN_BUG_FEATURES))
    parser.add_argument("--no-isolate", action="store_true",
                        help="run programs in this process (a crash ends the run)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds per program before it counts as a hang")
    parser.add_argument("--numpy-only", action="store_true",
                        help="skip the programs without a NumPy statement (their indices "
                             "still count)")
    parser.add_argument("--parallel-only", action="store_true",
                        help="skip the programs without a prange loop (their indices still "
                             "count)")
    parser.add_argument("--hvp", action="store_true",
                        help="check second order too: enzpy.hvp with respect to the first "
                             "parameter against differences of gradients")
    parser.add_argument("--show", action="store_true", help="print every program")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main()
        return 0

    excluded = {x.strip() for x in args.exclude.split(",") if x.strip()}
    unknown = excluded - set(FEATURES)
    if unknown:
        parser.error(f"unknown features {sorted(unknown)}")
    if args.skip_known_bugs:
        excluded |= set(KNOWN_BUG_FEATURES)
    if args.hvp:
        excluded.add("parallel")     # (second order through a parallel loop is refused)
    features = [x for x in FEATURES if x not in excluded]
    indices = [args.only] if args.only is not None else range(args.start,
                                                                args.start + args.programs)
    verbose = args.only is not None or args.show
    worker = None if args.no_isolate else _Worker()
    counts = dict(tried=0, rejected=0, passed=0, failed=0, invalid=0)
    failures = []
    signatures = {}
    t0 = time.time()
    try:
        for index in indices:
            if args.time_limit is not None and time.time() - t0 > args.time_limit:
                print(f"time limit reached after {counts['tried']} programs")
                break
            prog = generate_program(program_rng(args.seed, index), features,
                                    args.max_statements, args.points)
            prog.tag = f"fuzz-{args.seed}-{index}"
            if args.numpy_only and not prog.uses_numpy or \
                    args.parallel_only and not prog.parallel:
                continue
            if verbose:
                print(f"--- program {index} (seed {args.seed})\n{prog.source}")
            if worker is None:
                try:
                    result = run_program(prog, rtol=args.rtol, verbose=verbose, hvp=args.hvp)
                except Exception as exc:     # noqa: BLE001
                    result = {"status": "failed", "detail": "fuzzer error: " +
                              "".join(traceback.format_exception(exc))}
            else:
                if not worker.alive():
                    worker = _Worker()
                result = worker.run(prog, args.rtol, verbose, args.timeout, args.hvp)
            counts["tried"] += 1
            counts[result["status"]] += 1
            if verbose and result["detail"]:
                print(result["detail"])
            if result["detail"].startswith(("CRASH", "HANG")):
                result["detail"] += "\n" + "\n".join(
                    f"point {p}:\n{prog.describe_point(pt)}" for p, pt in enumerate(prog.points))
            if result["status"] in ("failed", "invalid"):
                failures.append((index, prog, result))
                sig = known_bug(result) or failure_signature(result)
                signatures.setdefault(sig, []).append(index)
                print(f"\n=== {result['status'].upper()}: program {index} (seed {args.seed})\n"
                      f"{prog.source}\narguments and error:\n{result['detail']}\n", flush=True)
            if counts["tried"] % 25 == 0 or verbose:
                print(f"[{time.time() - t0:6.0f} s] {counts['tried']} tried, "
                      f"{counts['rejected']} rejected, {counts['passed']} passed, "
                      f"{counts['failed']} failed, {counts['invalid']} invalid", flush=True)
    finally:
        if worker is not None:
            worker.close()
    elapsed = time.time() - t0
    print(f"\nseed {args.seed}: {counts['tried']} programs tried, {counts['rejected']} "
          f"rejected, {counts['passed']} passed, {counts['failed']} failed"
          + (f", {counts['invalid']} invalid (generator bugs)" if counts["invalid"] else "")
          + f" in {elapsed:.0f} s")
    for sig, where in signatures.items():
        known = " (known bug)" if any(sig == name for name, _ in KNOWN_BUGS) else ""
        print(f"  {len(where)} x {sig}{known}: programs {', '.join(map(str, where))}")
    if failures:
        print("failing programs: " + ", ".join(
            f"{i} ({r['status']})" for i, _, r in failures)
            + f"; re-run one with --seed {args.seed} --only INDEX")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
