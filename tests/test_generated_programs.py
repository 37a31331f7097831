"""Randomly generated scalar programs, differentiated by enzpy and checked
against central finite differences.

Each program is Python source over 1-3 float inputs: a small expression DAG
(+ - * / and safe unary functions), optionally if/else or a ternary on a
comparison of intermediate values, optionally a short ``for`` loop (trip count
a literal or a ``Const`` int argument). The same program is also rendered with
instrumentation (``_cmp``/``_den``/``_v`` wrappers) and run in pure Python at
the point and at the finite-difference points, so that examples near a branch
flip, with a tiny denominator or with huge values are discarded: there the
finite difference means nothing.
"""
from __future__ import annotations

import itertools
import linecache
import math
import os

import numba
from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

from enzpy import Active, Const
from helpers import check_reverse

# No database (nothing is written into the repo). Every example is a fresh Numba
# compile, so shrinking a failure (and the "explain" phase) can take minutes:
# programs are kept small enough to read unshrunk, and shrinking is opt-in with
# ENZPY_HYPOTHESIS_SHRINK=1.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
if os.environ.get("ENZPY_HYPOTHESIS_SHRINK"):
    _PHASES.append(Phase.shrink)
SETTINGS = settings(max_examples=40, deadline=None, database=None, phases=_PHASES,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])

_counter = itertools.count()

# unary templates: (plain, instrumented); {a} is the operand
UNARY = [
    "math.sin({a})",
    "math.cos({a})",
    "math.tanh({a})",
    "math.exp(math.sin({a}))",
    "math.exp(-0.5 * ({a}) * ({a}))",
    "math.sqrt(1.0 + ({a}) * ({a}))",
    "math.log(1.0 + ({a}) * ({a}))",
    "math.atan({a})",
    "(-({a}))",
    "(({a}) * ({a}))",
]
BINARY = ["+", "-", "*", "/"]
COMPARE = [">", "<"]


class Program:
    def __init__(self, n_inputs, has_n, body_plain, body_instr):
        self.n_inputs = n_inputs
        self.has_n = has_n
        params = [f"x{i}" for i in range(n_inputs)] + (["n"] if has_n else [])
        self.params = params
        head = f"def f({', '.join(params)}):\n"
        self.source = head + "".join("    " + ln + "\n" for ln in body_plain)
        self.instrumented = head + "".join("    " + ln + "\n" for ln in body_instr)

    def __repr__(self):
        return "Program(\n" + self.source + ")"


class _Gen:
    def __init__(self, draw, n_inputs):
        self.draw = draw
        self.vars = [f"x{i}" for i in range(n_inputs)]
        self.k = 0
        self.plain, self.instr = [], []

    def fresh(self):
        self.k += 1
        return f"v{self.k}"

    def const(self):
        c = self.draw(st.sampled_from([0.5, 1.5, 2.0, 0.25, 3.0, -1.25, 0.75]))
        return repr(c)

    def operand(self, extra=()):
        pool = self.vars + list(extra)
        return self.draw(st.sampled_from(pool))

    def expr(self, depth, extra=()):
        """An expression: (plain text, instrumented text)."""
        kind = self.draw(st.sampled_from(["leaf", "unary", "binary", "binary"]
                                         if depth > 0 else ["leaf"]))
        if kind == "leaf":
            if self.draw(st.integers(0, 5)) == 0:
                c = self.const()
                return c, c
            v = self.operand(extra)
            return v, v
        if kind == "unary":
            p, i = self.expr(depth - 1, extra)
            t = self.draw(st.sampled_from(UNARY))
            return t.format(a=p), t.format(a=i)
        op = self.draw(st.sampled_from(BINARY))
        lp, li = self.expr(depth - 1, extra)
        if self.draw(st.booleans()):
            rp, ri = self.const(), None
            ri = rp
        else:
            rp, ri = self.expr(depth - 1, extra)
        if op == "/":
            return f"({lp} / {rp})", f"({li} / _den({ri}))"
        return f"({lp} {op} {rp})", f"({li} {op} {ri})"

    def emit(self, plain, instr=None):
        self.plain.append(plain)
        self.instr.append(plain if instr is None else instr)

    # -- statements -------------------------------------------------------------
    def assign(self):
        v = self.fresh()
        p, i = self.expr(2)
        self.emit(f"{v} = {p}", f"{v} = _v({i})")
        self.vars.append(v)

    def if_else(self):
        v = self.fresh()
        ap, ai = self.expr(1)
        bp, bi = self.expr(1)
        cmp = self.draw(st.sampled_from(COMPARE))
        tp, ti = self.expr(2)
        ep, ei = self.expr(2)
        self.emit(f"if {ap} {cmp} {bp}:", f"if _cmp({ai}, '{cmp}', {bi}):")
        self.emit(f"    {v} = {tp}", f"    {v} = _v({ti})")
        self.emit("else:")
        self.emit(f"    {v} = {ep}", f"    {v} = _v({ei})")
        self.vars.append(v)

    def ternary(self):
        v = self.fresh()
        ap, ai = self.expr(1)
        bp, bi = self.expr(1)
        cmp = self.draw(st.sampled_from(COMPARE))
        tp, ti = self.expr(1)
        ep, ei = self.expr(1)
        self.emit(f"{v} = {tp} if {ap} {cmp} {bp} else {ep}",
                  f"{v} = _v({ti} if _cmp({ai}, '{cmp}', {bi}) else {ei})")
        self.vars.append(v)

    def loop(self, has_n):
        acc = self.fresh()
        init = self.operand()
        trip = "n" if has_n else str(self.draw(st.integers(0, 4)))
        self.emit(f"{acc} = {init}")
        self.emit(f"for i in range({trip}):")
        # contractive update keeps values bounded
        t = self.draw(st.sampled_from(["math.sin", "math.cos", "math.tanh", "math.atan"]))
        other = self.operand()
        op = self.draw(st.sampled_from(["+", "*", "-"]))
        upd = f"0.5 * {acc} + {t}({acc} {op} {other} * float(i))"
        if self.draw(st.booleans()):
            ep, ei = self.expr(1, extra=[acc])
            self.emit(f"    if {acc} > {other}:", f"    if _cmp({acc}, '>', {other}):")
            self.emit(f"        {acc} = {upd}", f"        {acc} = _v({upd})")
            self.emit("    else:")
            self.emit(f"        {acc} = 0.5 * {ep}", f"        {acc} = _v(0.5 * {ei})")
        else:
            self.emit(f"    {acc} = {upd}", f"    {acc} = _v({upd})")
        self.vars.append(acc)

    def ret(self):
        last = self.vars[-1]
        if self.draw(st.booleans()) and len(self.vars) > 1:
            other = self.operand()
            self.emit(f"return {last} * {other} + {last}", f"return _v({last} * {other} + {last})")
        else:
            self.emit(f"return {last}", f"return _v({last})")


@st.composite
def programs(draw, branching=True, loops=True):
    n_inputs = draw(st.integers(1, 3))
    g = _Gen(draw, n_inputs)
    kinds = ["assign", "assign"]
    if branching:
        kinds += ["if_else", "ternary"]
    has_n = False
    n_stmts = draw(st.integers(1, 4))
    loop_at = draw(st.integers(0, n_stmts)) if loops and draw(st.booleans()) else None
    if loop_at is not None:
        has_n = draw(st.booleans())
    for k in range(n_stmts + 1):
        if k == loop_at:
            g.loop(has_n)
        if k < n_stmts:
            getattr(g, draw(st.sampled_from(kinds)))()
    g.ret()
    return Program(n_inputs, has_n, g.plain, g.instr)


# -- running programs -------------------------------------------------------------------
class _Reject(Exception):
    pass


class _Monitor:
    def __init__(self):
        self.trace = []
        self.min_margin = math.inf
        self.min_den = math.inf
        self.max_abs = 0.0

    def cmp(self, a, op, b):
        self.min_margin = min(self.min_margin, abs(a - b))
        r = a > b if op == ">" else a < b
        self.trace.append(r)
        return r

    def den(self, b):
        self.min_den = min(self.min_den, abs(b))
        if b == 0.0:
            raise _Reject
        return b

    def v(self, x):
        if not math.isfinite(x):
            raise _Reject
        self.max_abs = max(self.max_abs, abs(x))
        return x


def _compile(src, namespace, tag):
    filename = f"<enzpy-generated-{tag}-{next(_counter)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), namespace)
    return namespace["f"]


def _run_instrumented(prog, values):
    mon = _Monitor()
    ns = {"math": math, "_cmp": mon.cmp, "_den": mon.den, "_v": mon.v}
    f = _compile(prog.instrumented, ns, "instr")
    try:
        y = f(*values)
    except (_Reject, ArithmeticError, ValueError):
        return None
    return mon, y


def _fd_is_reliable(prog, values, n_active):
    base = _run_instrumented(prog, values)
    if base is None:
        return False
    mon, _ = base
    if mon.min_margin < 1e-4 or mon.min_den < 0.1 or mon.max_abs > 1e3:
        return False
    for i in range(n_active):
        h = 1e-6 * max(1.0, abs(values[i]))
        for s in (-1, 1):
            vals = list(values)
            vals[i] = values[i] + s * h
            other = _run_instrumented(prog, vals)
            if other is None or other[0].trace != mon.trace:
                return False
    return True


def _check_program(prog, xs, n_trip):
    xs = xs[:prog.n_inputs]
    values = list(xs) + ([n_trip] if prog.has_n else [])
    note(prog.source)
    note(f"values = {values!r}")
    assume(_fd_is_reliable(prog, values, prog.n_inputs))
    f = numba.njit(_compile(prog.source, {"math": math}, "src"))
    args = [Active(x) for x in xs] + ([Const(n_trip)] if prog.has_n else [])
    check_reverse(f, args, rtol=1e-4, atol=1e-6)


floats = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(prog=programs(branching=False, loops=False), xs=st.lists(floats, min_size=3, max_size=3))
def test_generated_straight_line(prog, xs):
    _check_program(prog, xs, 0)


@SETTINGS
@given(prog=programs(branching=True, loops=True), xs=st.lists(floats, min_size=3, max_size=3),
       n_trip=st.integers(0, 5))
def test_generated_branching(prog, xs, n_trip):
    _check_program(prog, xs, n_trip)


def test_program_generator_renders_valid_python():
    """A quick self-check of the generator (no enzpy involved)."""
    @settings(max_examples=25, deadline=None, database=None)
    @given(prog=programs())
    def inner(prog):
        compile(prog.source, "<p>", "exec")
        compile(prog.instrumented, "<p>", "exec")
    inner()
