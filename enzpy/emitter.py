"""Writes LLVM IR text for generated functions, one instruction at a time.

Derivative rules and the transformations speak to an ``Emitter``: each method
appends one instruction and returns the resulting ``Value``.
"""
from __future__ import annotations

import itertools
import math
import struct

from .ir import Value, local

# llvm.* intrinsics available for both float types; the rest come from libm.
_INTRINSICS = {"sin", "cos", "exp", "exp2", "log", "log2", "log10", "sqrt", "pow",
               "fabs", "copysign", "floor", "trunc"}
_SUFFIX = {"double": "f64", "float": "f32"}
_LIBM_SUFFIX = {"double": "", "float": "f"}


def float_literal(x: float, ty: str) -> str:
    if ty == "float":
        x = struct.unpack("f", struct.pack("f", x))[0]
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


class Emitter:
    def __init__(self, prefix: str = "t"):
        self.lines = []
        self.declarations = {}      # name -> 'declare ...' text
        # shadow address -> the i1 saying its shadow is null (the test of the
        # pointer it was computed from: see memory.ShadowMemory.shadow_value)
        self.null_tests = {}
        self._ids = itertools.count()
        self._prefix = prefix

    # -- plumbing ---------------------------------------------------------
    def fresh(self, hint: str = "") -> str:
        return f"{self._prefix}.{hint}{next(self._ids)}"

    def emit(self, line: str):
        self.lines.append("  " + line)

    def label(self, name: str):
        self.lines.append(f"{_label(name)}:")

    def define(self, ty: str, rhs: str, hint: str = "") -> Value:
        name = self.fresh(hint)
        self.emit(f"{local(name)} = {rhs}")
        return Value(local(name), ty, "inst", name)

    def declare(self, name: str, ret: str, params):
        self.declarations.setdefault(
            name, f"declare {ret} @\"{name}\"({', '.join(params)})")

    # -- constants --------------------------------------------------------
    def const(self, x: float, ty: str) -> Value:
        return Value(float_literal(x, ty), ty, "const")

    def zero(self, ty: str) -> Value:
        if ty in ("double", "float", "half"):
            return self.const(0.0, ty)
        if ty == "ptr":
            return Value("null", ty, "const")
        if ty.startswith("i"):
            return Value("0", ty, "const")
        return Value("zeroinitializer", ty, "const")

    # -- arithmetic -------------------------------------------------------
    def binop(self, op: str, a: Value, b: Value) -> Value:
        return self.define(a.type, f"{op} {a.type} {a.ref}, {b.ref}")

    def fadd(self, a, b): return self.binop("fadd", a, b)
    def fsub(self, a, b): return self.binop("fsub", a, b)
    def fmul(self, a, b): return self.binop("fmul", a, b)
    def fdiv(self, a, b): return self.binop("fdiv", a, b)

    def fneg(self, a: Value) -> Value:
        return self.define(a.type, f"fneg {a.type} {a.ref}")

    def square(self, a: Value) -> Value:
        return self.fmul(a, a)

    def recip(self, a: Value) -> Value:
        return self.fdiv(self.const(1.0, a.type), a)

    def scale(self, a: Value, c: float) -> Value:
        return self.fmul(a, self.const(c, a.type))

    def fcmp(self, pred: str, a: Value, b: Value) -> Value:
        return self.define("i1", f"fcmp {pred} {a.type} {a.ref}, {b.ref}")

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.define(a.type, f"select i1 {cond.ref}, {a.type} {a.ref}, {b.type} {b.ref}")

    def cast(self, op: str, a: Value, ty: str) -> Value:
        return self.define(ty, f"{op} {a.type} {a.ref} to {ty}")

    def indicator(self, cond: Value, ty: str) -> Value:
        """1.0 where ``cond`` holds, else 0.0."""
        return self.cast("uitofp", cond, ty)

    def extract(self, agg: Value, idx, ty: str) -> Value:
        return self.define(ty, f"extractvalue {agg.type} {agg.ref}, {idx}")

    def insert(self, agg: Value, elt: Value, idx) -> Value:
        return self.define(agg.type, f"insertvalue {agg.type} {agg.ref}, {elt.type} {elt.ref}, {idx}")

    # -- calls ------------------------------------------------------------
    def call(self, name: str, ret: str, args, params=None) -> Value:
        params = params or [a.type for a in args]
        self.declare(name, ret, params)
        argtext = ", ".join(a.typed() for a in args)
        if ret == "void":
            self.emit(f'call void @"{name}"({argtext})')
            return None
        return self.define(ret, f'call {ret} @"{name}"({argtext})')

    def math(self, fn: str, *args: Value) -> Value:
        """A math function at the type of its first argument."""
        ty = args[0].type
        if fn in _INTRINSICS:
            name = f"llvm.{fn}.{_SUFFIX[ty]}"
        else:
            name = fn + _LIBM_SUFFIX[ty]
        return self.call(name, ty, list(args))

    def __getattr__(self, fn):
        # e.sin(x), e.cosh(x), e.pow(x, y): math functions by name.
        if fn.startswith("_"):
            raise AttributeError(fn)
        return lambda *args: self.math(fn, *args)


def _label(name: str) -> str:
    return local(name)[1:]


LN2 = math.log(2.0)
LN10 = math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
