"""Forward mode: one tangent function per (function, activity).

For a Numba function ``F(retptr, excinfo, args...) -> i32`` and an activity key
(one of 'active' / 'dup' / 'const' per argument) this writes ``fwd``: F's own
body where, after each instruction whose value carries a derivative, the
derivative is computed. A derivative has the type of its value: the tangent of
a float, the shadow of a pointer (the same address computation on the shadow
memory, whose floats are tangents), and for an aggregate both at once, field
by field. ``fwd`` takes F's arguments, then the tangent of each 'active' and
the shadow of each 'dup' argument, in argument order. The return's tangent is
stored through the shadow of ``retptr``, like any store to shadowed memory.

The code written is plain IR of the same kinds as Numba's (loads, stores,
loops over memory, calls to other ``fwd`` functions), with no tape: reverse
mode can differentiate it again, which is how second derivatives are built.
"""
from __future__ import annotations

from . import rules
from .analysis import ALLOCATORS, DERIVED_POINTERS, RESIZERS
from .emitter import Emitter
from .errors import UnsupportedError
from .generator import DerivativeGenerator
from .ir import Value, contains_float, contains_pointer, is_float_type, local, tangent_name
from .memory import FREES, ShadowMemory, strip_metadata, zero_allocation
from .runtime import (FREE_SHADOW, FREE_SHADOW_FUNCTION, RESIZE_SHADOW, VARSIZE_FREE,
                      counted_loop, free_shadow, resize_shadow)

SINK_READ = "enzpy.fwd.zeros"
SINK_WRITE = "enzpy.fwd.trash"


class ForwardDerivative:
    """Name and signature of one (function, activity) tangent function."""

    def __init__(self, fn, activity, index):
        self.fn = fn
        self.activity = tuple(activity)
        self.name = f"enzpy.f{index}.{fn.name}.fwd"
        self.names = (self.name,)
        params = [f"{a.type} {local(a.name)}" for a in fn.args]
        params += [f"{a.type} {local(tangent_name(a.name))}"
                   for a, act in zip(fn.args, activity) if act != "const"]
        self.params = params

    def param_types(self):
        return [p.rsplit(" ", 1)[0] for p in self.params]

    def declarations(self) -> list:
        return [f'declare {self.fn.return_type} @"{self.name}"({", ".join(self.param_types())})']


def zero_derivative(v: Value) -> Value:
    """The derivative of a value that carries none: integers are their own
    (so shadow aggregates keep their sizes and indices), the rest is zero."""
    ty = v.type
    if is_float_type(ty):
        return Value("0.0", ty, "const")
    if ty == "ptr":
        return Value("null", ty, "const")
    if not (contains_float(ty) or contains_pointer(ty)):
        return v
    return Value("zeroinitializer", ty, "const")


class ForwardGenerator(DerivativeGenerator, ShadowMemory):
    """Writes the tangent function of one ForwardDerivative."""

    entry_allocas_only = False
    sink_read, sink_write = SINK_READ, SINK_WRITE
    lost_flag = "~lost.t"

    def generate(self) -> str:
        self._check_unsupported()
        self.derivatives = {}         # value name -> Value holding its derivative
        for a, act in zip(self.fn.args, self.d.activity):
            if act != "const":
                self.derivatives[a.name] = Value(local(tangent_name(a.name)), a.type, "arg")
        for b in self.fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "phi" and self._carries(ins.value):
                    self.derivatives[ins.name] = Value(local(tangent_name(ins.name)), ins.type,
                                                       "inst", tangent_name(ins.name))
        # Each block after its dominators: a derivative is known before its uses.
        written = {}
        self.phis = []                # (lines, index, phi): derivative phis to fill in
        for name in self.cfg.reverse_postorder:
            self.e = Emitter(f"~f.{name}")
            self.e.label(name)
            if name == self.fn.entry.name:
                self.declare_lost_flag()
            for ins in self.fn.block_map[name].instructions:
                self._instruction(ins)
            self.builder.declarations.update(self.e.declarations)
            written[name] = self.e.lines
        for lines, index, phi in self.phis:
            incoming = ", ".join(f"[ {self.derivative(v).ref}, {local(blk)} ]"
                                 for v, blk in phi.incoming)
            lines[index] = f"  {local(tangent_name(phi.name))} = phi {phi.type} {incoming}"
        lines = [line for b in self.fn.blocks for line in written[b.name]]
        return (f"define internal {self.fn.return_type} @\"{self.d.name}\""
                f"({', '.join(self.d.params)}) {{\n" + "\n".join(lines) + "\n}\n")

    # -- derivatives of values --------------------------------------------------
    def _carries(self, v: Value) -> bool:
        return v.kind in ("inst", "arg") and (v.name in self.act.active
                                              or v.name in self.act.shadowed)

    def derivative(self, v: Value) -> Value:
        if not self._carries(v):
            return zero_derivative(v)
        found = self.derivatives.get(v.name)
        if found is None:       # used before its definition: never guess a zero
            raise UnsupportedError(f"the derivative of %{v.name} is needed before its "
                                   f"definition in function '{self.fn.name}'")
        return found

    def _instruction(self, ins):
        e = self.e
        if ins.opcode == "call" and self._is_derivative_call(ins):
            self._call(ins)
            return
        if ins.opcode == "ret" and self.return_raising_if_lost(ins):
            return
        e.emit(strip_metadata(ins.text))
        if ins.opcode == "store":
            self._store(ins)
        elif ins.opcode == "call":
            self._runtime_call(ins)
        if ins.name and self._carries(ins.value):
            d = self._derive(ins)
            if ins.opcode != "phi":
                self.derivatives[ins.name] = d

    def _derive(self, ins) -> Value:
        e, op, ty = self.e, ins.opcode, ins.type
        d = self.derivative
        if op == "phi":
            # Filled in at the end: an incoming value may come round a back edge.
            self.phis.append((e.lines, len(e.lines), ins))
            e.emit("")
            return None
        if op == "select":
            c, a, b = ins.operands
            return e.define(ty, f"select i1 {c.ref}, {ty} {d(a).ref}, {ty} {d(b).ref}")
        if op == "load":
            addr = self.guard(d(ins.operands[0]))
            return e.define(ty, f"load {ty}, ptr {addr.ref}, align 1")
        if op == "extractvalue":
            agg = ins.operands[0]
            return e.extract(d(agg), ", ".join(map(str, ins.indices)), ty)
        if op == "insertvalue":
            agg, elt = ins.operands
            return e.insert(d(agg), d(elt), ", ".join(map(str, ins.indices)))
        if op in ("fpext", "fptrunc", "bitcast", "addrspacecast"):
            return e.cast(op, d(ins.operands[0]), ty)
        if op == "freeze":
            return e.define(ty, f"freeze {ty} {d(ins.operands[0]).ref}")
        if op == "getelementptr" or ins.callee in DERIVED_POINTERS:
            return self.shadow_value(e, ins, lambda v: v, d)
        if op == "alloca":
            shadow = e.define("ptr", f"alloca {ins.source_type}, align 16")
            end = e.define("ptr", f"getelementptr {ins.source_type}, ptr null, i32 1")
            size = e.define("i64", f"ptrtoint ptr {end.ref} to i64")
            e.emit(f"call void @llvm.memset.p0.i64(ptr {shadow.ref}, i8 0, i64 {size.ref}, "
                   f"i1 false)")
            return shadow
        if ins.callee in ALLOCATORS:
            shadow = e.call(ins.callee, "ptr", ins.args)
            zero_allocation(e, ins, shadow)
            return shadow
        if ins.callee in RESIZERS:
            return resize_shadow(e, ins, self.derivative(ins.args[0]))
        if op == "call" and not ins.callee:
            raise UnsupportedError(f"indirect call with active arguments `{ins.text}`"
                                   f"{self._where(ins)}")
        if op == "call" or op in rules.RULES:
            return self._tangent(ins)
        raise UnsupportedError(f"no derivative rule for instruction `{ins.text}`"
                               f"{self._where(ins)}")

    def _tangent(self, ins) -> Value:
        """The sum over operands of partial derivative times the operand's tangent."""
        e = self.e
        rule = rules.lookup(ins.callee if ins.opcode == "call" else ins.opcode,
                            lambda: self._where(ins))
        total = None
        for operand, partial in zip(ins.args, rule.partials):
            if partial is None or not self.act.is_active(operand):
                continue
            t = self.derivative(operand)
            p = partial(e, *ins.args, ins.value)
            term = t if p == rules.ONE else e.fneg(t) if p == rules.MINUS_ONE \
                else rules.strong_product(e, t, p)
            total = term if total is None else e.fadd(total, term)
        return total if total is not None else e.zero(ins.type)

    # -- memory and calls ---------------------------------------------------------
    def _store(self, ins):
        value, ptr = ins.operands
        if not self.act.is_shadowed(ptr):
            return
        # A constant stored has a zero tangent; an integer is its own derivative
        # (shadow arrays keep their sizes and strides).
        stored = self.derivative(value)
        shadow = self.derivative(ptr)
        addr = self.guard(shadow, write=True)
        self.e.emit(f"store {value.type} {stored.ref}, ptr {addr.ref}, align 1")
        if self.may_lose_derivative(ins):
            self.check_lost_derivative(shadow)

    def _runtime_call(self, ins):
        """Reference counts, frees and bulk memory operations, mirrored on shadows."""
        e, callee = self.e, ins.callee
        if callee == "NRT_incref" or callee in FREES:
            if self.act.is_shadowed(ins.args[0]):
                e.call(callee, "void", [self.derivative(ins.args[0])])
        elif callee in (VARSIZE_FREE, FREE_SHADOW_FUNCTION):    # (the latter: in hvp)
            if self.act.is_shadowed(ins.args[0]):
                free_shadow(e, self.derivative(ins.args[0]), self.derivative(ins.args[1]))
        elif callee.startswith("llvm.memset"):
            dst = ins.args[0]
            if self.act.is_shadowed(dst):
                e.call("enzpy.fwd.zero", "void", [self.derivative(dst), ins.args[2]])
        elif callee.startswith(("llvm.memcpy", "llvm.memmove")):
            dst, src = ins.args[:2]
            element = self._copied_type(ins) if (self.act.is_shadowed(dst) or
                                                 self.act.is_shadowed(src)) else None
            if element is not None:
                e.call(f"enzpy.fwd.copy.{element}", "void",
                       [self.derivative(dst), self.derivative(src), ins.args[2]])

    def _call(self, ins):
        callee = self._callee(ins)
        if ins.name and self._carries(ins.value):
            # Only a floored quotient (checked by _check_unsupported) is returned directly.
            self.derivatives[ins.name] = zero_derivative(ins.value)
        args = list(ins.args) + [self.derivative(a) for a, act in
                                 zip(ins.args, callee.activity) if act != "const"]
        call = f'call {ins.type} @"{callee.name}"({", ".join(a.typed() for a in args)})'
        self.e.emit(f"{local(ins.name)} = {call}" if ins.name else call)


def _copy(ty: str, size: int) -> str:
    up = f"""  %ps = getelementptr {ty}, ptr %src, i64 %i
  %v = load {ty}, ptr %ps
  %pd = getelementptr {ty}, ptr %dst, i64 %i
  store {ty} %v, ptr %pd"""
    down = f"""  %qs = getelementptr {ty}, ptr %src, i64 %j
  %w = load {ty}, ptr %qs
  %qd = getelementptr {ty}, ptr %dst, i64 %j
  store {ty} %w, ptr %qd"""
    return f"""
; dst' = src' over n bytes of {ty}s (zeros when src' is null, nothing when dst' is).
define internal void @enzpy.fwd.copy.{ty}(ptr %dst, ptr %src, i64 %n) {{
entry:
  %count = udiv i64 %n, {size}
  %dst_null = icmp eq ptr %dst, null
  br i1 %dst_null, label %exit, label %check
check:
  %src_null = icmp eq ptr %src, null
  %backward = icmp ugt ptr %dst, %src
  br i1 %src_null, label %zero, label %direction
zero:
  call void @enzpy.fwd.zero(ptr %dst, i64 %n)
  br label %exit
direction:
  br i1 %backward, label %down.start, label %up.start
up.start:
{counted_loop("up", "%count", up, "exit")}down.start:
{counted_loop("down", "%count", down, "exit", index="j", reverse=True)}exit:
  ret void
}}

"""


def _dot(ty: str) -> str:
    body = f"""  %px = getelementptr {ty}, ptr %x, i64 %i
  %py = getelementptr {ty}, ptr %y, i64 %i
  %vx = load {ty}, ptr %px
  %vy = load {ty}, ptr %py
  %m = fmul {ty} %vx, %vy
  %acc = load {ty}, ptr %out
  %sum = fadd {ty} %acc, %m
  store {ty} %sum, ptr %out"""
    return f"""
; out += sum x[i] * y[i] over n {ty}s; nothing when x is null (no tangent). The
; result goes through memory, like Numba's returns, so reverse mode follows it.
define internal void @enzpy.fwd.dot.{ty}(ptr %out, i64 %n, ptr %x, ptr %y) {{
entry:
  %null = icmp eq ptr %x, null
  br i1 %null, label %exit, label %go
go:
{counted_loop("loop", "%n", body, "exit")}exit:
  ret void
}}
"""


_ZERO = """
; dst' = 0 over n bytes (nothing when dst' is null).
define internal void @enzpy.fwd.zero(ptr %dst, i64 %n) {
entry:
  %null = icmp eq ptr %dst, null
  br i1 %null, label %exit, label %zero
zero:
  call void @llvm.memset.p0.i64(ptr %dst, i8 0, i64 %n, i1 false)
  br label %exit
exit:
  ret void
}
"""

FORWARD_RUNTIME = (
    f"@{SINK_READ} = internal constant [1024 x i8] zeroinitializer, align 64\n"
    f"@{SINK_WRITE} = internal global [1024 x i8] zeroinitializer, align 64\n"
    + _ZERO + _copy("double", 8) + _copy("float", 4) + _copy("ptr", 8) + _dot("double") + _dot("float")
    + RESIZE_SHADOW + FREE_SHADOW)
