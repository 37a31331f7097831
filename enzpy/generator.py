"""What the reverse and forward generators share: activity, refusals, callees.

A generator writes the derivative of one (function, activity) pair; both modes
refuse the same constructs (a differentiable value escaping into unknown code,
float data stored where no shadow follows it) with the same messages, and call
a callee's derivative when a call carries derivatives.
"""
from __future__ import annotations

import re
from functools import cached_property

from . import blas, rules
from .analysis import Activity, ControlFlow, numba_convention, pointee_kinds, pointer_roots
from .errors import UnsupportedError
from .frontend import PARALLEL_LOOP_BODY, demangle
from .ir import contains_float, is_float_type
from .memory import PYTHON_OBJECT_CALL, explain
from .runtime import VARSIZE_FREE

# Numba's helper for Python's % and // on floats writes the remainder through a
# pointer and returns the floored quotient directly: piecewise constant, so its
# derivative is zero. Other functions returning a float directly are refused.
FLOOR_QUOTIENT = re.compile(r"numba6python3remE")
# Numba boxing a value into a Python object, and the calls of Python's C API
# that only read an object: print's str() and the releases.
_BOXING = re.compile(r"NRT_adapt_ndarray_to_python|PyFloat_FromDouble$|PyComplex_FromDoubles$")
_READS_OBJECT = frozenset({"PyObject_Str", "PyObject_Repr", "Py_DecRef"})
# Numba's name of an argument's LLVM parameter: arg.x, or arg.a.4 for a field of array a
# (arg.t.0.4: of the array in a tuple t)
_NUMBA_ARGUMENT = re.compile(r"^arg\.(\w+?)(?:\.\d+)*$")
# In ``ModuleBuilder.user_args``: an argument of the differentiated function itself
USER_FUNCTION = "the differentiated function's own"


# Integer instructions through which the bits of a float can be computed on.
_INTEGER_ARITHMETIC = frozenset(("add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl",
                                 "lshr", "ashr", "and", "or", "xor", "trunc", "zext", "sext",
                                 "phi", "select", "freeze"))


# (marking inactive a function whose result depends on its inputs drops that derivative)
_INACTIVE_ONLY_IF = " if its result does not depend on the differentiated inputs"


def bit_views(fn, varies) -> dict:
    """``integers_made_from`` the bitcasts of the floats ``varies(value)`` accepts:
    integers holding a float's bits (``np.float64(x).view(np.int64)``)."""
    return integers_made_from(fn, lambda ins: ins.opcode == "bitcast" and is_float_type(
        ins.operands[0].type) and varies(ins.operands[0]))


def integers_made_from(fn, is_source, ends=lambda ins, found: False) -> dict:
    """Integer value name -> whether integer arithmetic made it (else it is the
    source or moved only: picked by a phi or select), for the integers of ``fn``
    that the instructions ``is_source(ins)`` accepts make, and those made of them
    (but by the instructions ``ends(ins, found so far)`` accepts)."""
    bits, changed = {}, True
    while changed:
        changed = False
        for b in fn.blocks:
            for ins in b.instructions:
                op = ins.opcode
                if is_source(ins):
                    computed = False
                elif ends(ins, bits) or op == "trunc" and _one_bit(fn, ins):
                    continue        # (a boolean holds no float: a sign test)
                elif op in _INTEGER_ARITHMETIC or (
                        op == "call" and (ins.callee or "").startswith("llvm.")
                        and ins.type.startswith("i")):
                    ops = [o for o, _ in ins.incoming] if op == "phi" else ins.args
                    found = [bits[o.name] for o in ops if o.name in bits and o.kind == "inst"]
                    computed = (op not in ("phi", "select", "freeze") or any(found)) \
                        if found else None
                else:
                    continue
                if computed is not None and bits.get(ins.name) not in (True, computed):
                    bits[ins.name] = computed
                    changed = True
    return bits


def _one_bit(fn, trunc) -> bool:
    """Whether the integer ``trunc`` keeps one bit at most: a boolean, or a sign bit
    or lowest bit (``x >> 63``, ``x & 1``: what a sign test of a float's bits
    becomes) made narrower. A byte of a float's bits, stored and put back
    together, would still be the float."""
    if trunc.type == "i1":
        return True
    source = trunc.operands[0]
    ins = fn.defs.get(source.name) if source.kind == "inst" else None
    if ins is None or ins.opcode not in ("lshr", "and") or ins.operands[1].kind != "const" \
            or not re.fullmatch(r"i\d+", source.type) or not ins.operands[1].ref.isdigit():
        return False
    amount = int(ins.operands[1].ref)
    return amount == 1 if ins.opcode == "and" else amount == int(source.type[1:]) - 1


def _not_an_address(ins, addresses) -> bool:
    """Whether ``ins`` makes a size or a count of addresses: the difference of two
    (an address minus an offset is an address still), a quotient, a remainder."""
    if ins.opcode == "sub":
        return all(o.kind == "inst" and o.name in addresses for o in ins.operands)
    return ins.opcode in ("udiv", "sdiv", "urem", "srem", "lshr", "ashr")


def _bits_sink(ins):
    """(what happens, operands) where ``ins`` reads an integer back as a float or
    takes it where enzpy does not follow a float's bits; None elsewhere."""
    op = ins.opcode
    if op == "bitcast" and is_float_type(ins.type):
        return "read back as a float", ins.operands[:1]
    if op in ("sitofp", "uitofp"):
        return "converted to a float as a number", ins.operands[:1]
    if op == "store":
        return "stored to memory", ins.operands[:1]
    if op in ("call", "invoke") and not (ins.callee or "").startswith("llvm."):
        return "passed to a call", ins.args
    if op in ("ret", "insertvalue"):
        return "returned or put into an aggregate", ins.operands
    return None


def emits_float_bits(functions, name, memo) -> bool:
    """Whether the function ``name`` (or a function it calls) stores, returns or
    passes on the bits of a float viewed as an integer: called with a varying
    float and not differentiated (its result an integer), its caller would get
    the bits without their derivative. ``memo``: the answers so far, by name."""
    if name not in memo:
        memo[name] = False          # (a recursive call adds nothing of its own)
        fn = functions.get(name)
        bits = bit_views(fn, lambda value: True) if fn is not None else {}
        memo[name] = fn is not None and any(
            (sink := _bits_sink(ins)) is not None and ins.opcode not in (
                "bitcast", "sitofp", "uitofp")
            and any(o.kind == "inst" and o.name in bits for o in sink[1])
            or ins.opcode == "call" and ins.callee and emits_float_bits(functions, ins.callee, memo)
            for b in fn.blocks for ins in b.instructions)
    return memo[name]


class DerivativeGenerator:
    """Base of ``ReverseGenerator`` and ``ForwardGenerator``."""

    # Reverse mode gives the allocas a function runs once a slot each in one
    # block of shadow memory per call; forward mode an alloca beside each.
    entry_allocas_only = True

    def __init__(self, builder, deriv, describe):
        self.builder = builder
        self.d = deriv
        self.fn = deriv.fn
        self.describe = describe      # (function name, instruction) -> " in function 'f' ..."
        self.cfg = ControlFlow(self.fn, builder.module.functions,
                               getattr(deriv, "failures_propagate", False))
        self.act = Activity(self.fn, deriv.activity, builder.call_propagates,
                            builder.selector_params)
        self.calls = {}               # id(call instruction) -> callee derivative
        self._shadows_never_null = {}  # instruction name -> its shadow is never null
        self.never_null_refs = set()   # the reverse's values of such shadows
        self._lossy_stores = None      # see ShadowMemory.may_lose_derivative

    def _where(self, ins, written=None) -> str:
        return self.describe(self.fn.name, ins, written)

    @cached_property
    def _varied_bits(self) -> dict:
        """``bit_views`` of the floats that vary with the inputs."""
        return bit_views(self.fn, self.act.is_varied)

    @cached_property
    def _addresses(self) -> dict:
        """``integers_made_from`` the addresses of memory holding values that vary
        with the inputs (``x.ctypes.data``)."""
        return integers_made_from(self.fn, lambda ins: ins.opcode == "ptrtoint" and
                                  self.act.is_shadowed(ins.operands[0]) and
                                  self.act.memory_varies(ins.operands[0]), _not_an_address)

    def _check_address_handed_on(self, ins):
        """A function given an address as an integer (a C function called with
        ``x.ctypes.data``, or an @njit function handing it on to one) may read
        memory enzpy cannot follow it into."""
        if ins.opcode not in ("call", "invoke") or \
                (ins.callee or "").startswith(("llvm.", "enzpy.", "NRT_")) or \
                not any(o.kind == "inst" and o.name in self._addresses for o in ins.args):
            return
        callee = repr(demangle(ins.callee)) if ins.callee else \
            self.builder.indirect_callee(self.fn.name, ins)
        raise UnsupportedError(
            f"the address of memory holding values that depend on the differentiated inputs "
            f"(x.ctypes.data) is passed to {callee} as an integer (`{ins.text}`)"
            f"{self._where(ins)}: enzpy cannot follow the derivative into what reads it; "
            f"pass the array itself, or call C code through an @njit function given a "
            f"derivative with enzpy.defvjp")

    def _check_float_bits(self, ins):
        """An integer carries no derivative: a varying float's bits may be tested (a
        sign test), not read back as a float (viewed straight back they are the float
        itself: ``frontend.plain_bit_views``), converted as a number, or kept where
        enzpy does not follow them (memory, a call, an aggregate): the derivative
        would be silently dropped."""
        sink = _bits_sink(ins)
        if sink is None:
            return
        what, operands = sink
        carried = [self._varied_bits[o.name] for o in operands
                   if o.kind == "inst" and o.name in self._varied_bits]
        if ins.opcode == "call" and ins.callee and not self._is_derivative_call(ins) and \
                any(self.act.is_varied(a) or self.act.is_shadowed(a) and self.act.memory_varies(a)
                    for a in ins.args) and emits_float_bits(
                    self.builder.module.functions, ins.callee, self.builder.bits_emitted):
            raise UnsupportedError(
                f"the bits of a value that depends on the differentiated inputs (a float "
                f"viewed as an integer: np.float64(x).view(np.int64)) are made by "
                f"'{demangle(ins.callee)}' and returned or stored by it (`{ins.text}`)"
                f"{self._where(ins)}: an integer carries no derivative, so enzpy would drop "
                f"it; return the float itself")
        if not carried:
            return
        advice = "compute the value from floats" if any(carried) else \
            "view them back as a float where they are made, or keep the float"
        raise UnsupportedError(
            f"the bits of a value that depends on the differentiated inputs (a float viewed "
            f"as an integer: np.float64(x).view(np.int64)) are "
            f"{'computed on by integer arithmetic and ' if any(carried) else ''}{what} "
            f"(`{ins.text}`){self._where(ins)}: an integer carries no derivative, so enzpy "
            f"would drop it; {advice}")

    def _check_unsupported(self):
        for b in self.fn.blocks:
            for ins in b.instructions:
                if ins.opcode == "alloca" and ins.name in self.act.shadowed \
                        and b.name in self.cfg.loop_blocks and self.entry_allocas_only:
                    raise UnsupportedError(
                        f"alloca of float memory inside a loop{self._where(ins)}")
                if ins.opcode == "store" and self.act.is_varied(ins.operands[0]) \
                        and not self.act.is_shadowed(ins.operands[1]):
                    raise UnsupportedError(
                        f"a value that depends on the differentiated inputs is stored to "
                        f"memory without a shadow (`{ins.text}`)"
                        f"{self._where(ins, self._argument_name(ins.operands[1]))}"
                        f"{self._const_advice(ins.operands[1])}")
                self._check_shadow_kept(ins)
                self._check_float_bits(ins)
                self._check_address_handed_on(ins)
                if ins.callee == VARSIZE_FREE and self.act.is_shadowed(ins.args[0]) and \
                        self._copied_type(ins) is not None:
                    raise UnsupportedError(
                        f"data holding floats or pointers is freed before the reverse sweep "
                        f"reads it (`{ins.text}`){self._where(ins)}{self._set_advice()}")
                if ins.opcode == "call" and ins.callee in blas.PARAMS:
                    blas.check_call(ins, self._where(ins), self.fn.name)
                    out = blas.unshadowed_result(ins, self.act.is_shadowed)
                    if out is not None:
                        raise UnsupportedError(
                            f"a product of arrays that depend on the differentiated inputs is "
                            f"written to memory without a shadow (`{ins.text}`)"
                            f"{self._where(ins)}{self._const_advice(out)}")
                if ins.opcode == "call" and ins.callee:
                    pairs = blas.result_written_over(self.builder.module.functions, ins.callee,
                                                     self.builder.products_written_over)
                    if pairs:
                        blas.check_result_apart(self.fn, ins, pairs, self._where(ins))
                if ins.opcode == "call" and self._escapes(ins) and not self._printed(ins):
                    self._refuse_nested_autodiff()
                    python_object = PYTHON_OBJECT_CALL.match(ins.callee or "")
                    what = (f"'{ins.callee}', which enzpy cannot differentiate" if ins.callee
                            else self.builder.indirect_callee(self.fn.name, ins))
                    raise UnsupportedError(
                        f"a value that depends on the differentiated inputs flows into "
                        f"{what}{self._where(ins)}{explain(ins.callee)}"
                        f"{'' if python_object else self._rule_advice()}")
                if self._is_derivative_call(ins) and is_float_type(ins.type) \
                        and self.act.is_active(ins.value) \
                        and not FLOOR_QUOTIENT.search(ins.callee):
                    raise UnsupportedError(
                        f"call to '{ins.callee}', which returns a float directly instead "
                        f"of through Numba's return pointer{self._where(ins)}")
                if ins.opcode == "call" and not self._is_derivative_call(ins) \
                        and not rules.INACTIVE_CALLS.match(ins.callee) \
                        and not rules.MEMORY_CALLS.match(ins.callee) \
                        and not self.integer_memory_call(ins) and not self._printed(ins) \
                        and any(self.act.is_shadowed(a) and (
                            ins.callee or self.act.memory_varies(a)) for a in ins.args):
                    self._refuse_nested_autodiff()
                    callee = repr(ins.callee) if ins.callee else \
                        self.builder.indirect_callee(self.fn.name, ins)
                    raise UnsupportedError(
                        f"call to {callee} with differentiable memory"
                        f"{self._where(ins)}{explain(ins.callee)}")

    def _check_shadow_kept(self, ins):
        """A pointer to differentiable memory must not reach memory enzpy keeps
        no shadow for: reading it back from there would give a pointer without
        a shadow, whose loads carry no derivative (a silent zero)."""
        op = ins.opcode
        if op == "store":
            value, ptr = ins.operands
            lost = self.act.is_shadowed(value) and not self.act.is_shadowed(ptr) \
                and not self._exception_info(ptr)
        elif op == "call" and ins.callee.startswith(("llvm.memcpy", "llvm.memmove")):
            value, ptr = ins.args[1], ins.args[0]
            lost = self.act.is_shadowed(value) and not self.act.is_shadowed(ptr)
        elif op in ("atomicrmw", "cmpxchg"):
            ptr = ins.operands[0]
            lost = self.act.is_shadowed(ptr) or any(
                self.act.is_shadowed(o) or self.act.is_varied(o) for o in ins.operands[1:])
            if lost:
                raise UnsupportedError(f"an atomic operation on differentiable memory "
                                       f"(`{ins.text}`){self._where(ins)}")
            return
        elif op == "inttoptr" and self._pointer_as_integer():
            raise UnsupportedError(f"a pointer rebuilt from an integer (`{ins.text}`) in a "
                                   f"function that turns differentiable pointers into "
                                   f"integers{self._where(ins)}: its shadow would be lost")
        else:
            return
        if lost:
            raise UnsupportedError(
                f"a pointer to differentiable memory is stored where enzpy keeps no shadow "
                f"(`{ins.text}`){self._where(ins)}; {self._container(ptr)} would lose the "
                f"derivative of what it refers to{self._const_advice(ptr)}")

    def integer_memory_call(self, ins) -> bool:
        """A call enzpy cannot see into whose shadowed pointers all point into
        memory holding only integers (Numba's helper computing a reshape's
        strides reads and writes an array's shape and strides fields): it
        carries no derivative. Decided from the type of the memory."""
        return ins.opcode == "call" and not self.builder.differentiable_callee(ins.callee) \
            and not any(self.act.is_varied(a) for a in ins.args) \
            and all(pointee_kinds(self.fn, a) == {"int"} for a in ins.args
                    if self.act.is_shadowed(a))

    def _set_advice(self) -> str:
        low = self.builder.lowered.get(self.fn.name)
        lines = low.set_lines() if low is not None else []
        if not lines:
            return ""
        return (f"; this is the set made at line {lines[0]}: sets of floats are not "
                f"differentiated (a set resizes its table by freeing it), use a list or an array")

    def _refuse_nested_autodiff(self):
        """Raise where this is enzpy's entry to a built derivative
        (``backend.numba_entry``), which ``autodiff`` inside @njit calls, with
        floats or arrays depending on the differentiated inputs."""
        low = self.builder.lowered.get(self.fn.name)
        if low is None or low.dispatcher.py_func.__module__ != "enzpy.backend":
            return
        error = UnsupportedError(
            "code calling enzpy.autodiff inside @njit cannot itself be differentiated yet "
            "(nested AD: the inner derivative is machine code enzpy cannot see into); for "
            "second order use enzpy.hvp or enzpy.hessian, or give the function calling "
            "autodiff a derivative with enzpy.defvjp")
        error.construct = "enzpy.autodiff"
        raise error

    def _rule_advice(self) -> str:
        """How to differentiate through code enzpy cannot see into."""
        low = self.builder.lowered.get(self.fn.name)
        if low is None and PARALLEL_LOOP_BODY.search(self.fn.name):
            return ("; enzpy cannot see into it: call it through an @njit function given a "
                    "derivative with enzpy.defvjp (and enzpy.defjvp), or marked enzpy.inactive"
                    + _INACTIVE_ONLY_IF)
        name = low.name if low is not None else demangle(self.fn.name)
        return (f"; enzpy cannot see into it: give '{name}' a derivative with enzpy.defvjp "
                f"(and enzpy.defjvp), or mark it enzpy.inactive{_INACTIVE_ONLY_IF}")

    def _exception_info(self, ptr) -> bool:
        """Numba's ``excinfo`` parameter: it receives the data of a raised
        exception, which ends the call; no derivative flows through it."""
        return self._roots(ptr) == {("arg", 1)} and len(self.fn.args) > 1 \
            and self.fn.args[1].name == "excinfo"

    def _pointer_as_integer(self) -> bool:
        return any(ins.opcode == "ptrtoint" and self.act.is_shadowed(ins.operands[0])
                   for b in self.fn.blocks for ins in b.instructions)

    def _roots(self, ptr) -> set:
        return pointer_roots(self.fn, ptr)

    def _container(self, ptr) -> str:
        """What the memory written through ``ptr`` is, for messages."""
        for kind, name in self._roots(ptr):
            ins = self.fn.defs.get(name) if kind != "arg" else None
            if ins is not None and ins.opcode == "call":
                return f"the object allocated by '{demangle(ins.callee)}'"
            if kind == "arg":
                return "the argument it is written into"
        return "the memory it is written into"

    def _user_arguments_holding(self, ptr) -> set:
        """The positions of the user's arguments the memory at ``ptr`` belongs
        to: itself, or through pointers loaded from it (an array a list or an
        object holds)."""
        user_args = self.builder.user_args.get(self.fn.name, ())
        roots, seen, found = list(self._roots(ptr)), set(), set()
        while roots:
            kind, where = roots.pop()
            if kind == "arg" and where in user_args:
                found.add(where)
            ins = self.fn.defs.get(where) if kind == "unknown" else None
            if ins is not None and ins.opcode == "load" and where not in seen:
                seen.add(where)
                roots += self._roots(ins.operands[0])
        return found

    def _argument_name(self, ptr):
        """The name, in this function, of the argument the memory at ``ptr``
        belongs to, or None."""
        names = {self._local_name(index) for index in self._user_arguments_holding(ptr)}
        return names.pop() if len(names) == 1 else None

    def _local_name(self, index):
        m = _NUMBA_ARGUMENT.match(self.fn.args[index].name)
        return m.group(1) if m else None

    def _differentiated_argument(self, index):
        """The name of the argument of the differentiated function that this
        function's argument ``index`` comes from, or None (unknown, or several)."""
        name = self.builder.user_args.get(self.fn.name, {}).get(index)
        return self._local_name(index) if name is USER_FUNCTION else name

    def _const_advice(self, ptr) -> str:
        """Advice to pass the written argument as Duplicated, where the memory
        written belongs to an argument of the differentiated function."""
        holding = self._user_arguments_holding(ptr)
        if not holding:
            return ""
        names = {self._differentiated_argument(index) for index in holding}
        name = names.pop() if len(names) == 1 else None
        which = f"'{name}'" if name else "the argument it writes"
        return (f": pass {which} as Duplicated(value, zero shadow), not Const (hvp and hessian "
                f"take the arguments after x as constants: allocate such a buffer inside the "
                f"function there)")

    def _escapes(self, ins) -> bool:
        """A call outside enzpy's knowledge receiving a varied float (e.g. boxing
        it into a Python object in an objmode block): its derivative would be lost."""
        if self.builder.differentiable_callee(ins.callee) or rules.has_rule(ins.callee) \
                or rules.INACTIVE_CALLS.match(ins.callee) or rules.MEMORY_CALLS.match(ins.callee):
            return False
        return any(self.act.is_varied(a) and contains_float(a.type) for a in ins.args)

    def _printed(self, ins) -> bool:
        """A float or an array boxed into a Python object only to be printed:
        the object is read (``str``) and released, never handed to Python code
        (``objmode``) that could compute with it or write into the array."""
        if not _BOXING.match(ins.callee or "") or not ins.name:
            return False
        return all(user.opcode == "icmp" or (
            user.opcode == "call" and user.callee in _READS_OBJECT and len(user.args) == 1)
            for user in self.fn.users.get(ins.name, ()))

    def _is_derivative_call(self, ins) -> bool:
        """A call to a Numba function that must be differentiated itself."""
        return ins.opcode == "call" and self.builder.differentiable_callee(ins.callee) and any(
            self.act.is_shadowed(a) or self.act.is_active(a) for a in ins.args)

    def _failures_propagate(self, ins) -> bool:
        """Whether this function fails when the call ``ins`` does (always, for a
        callee without Numba's status)."""
        callee = self.builder.module.functions.get(ins.callee)
        return callee is None or not numba_convention(callee) or self.cfg.propagates_failure(ins)

    def _callee(self, ins):
        key = id(ins)
        if key not in self.calls:
            passed = self.builder.user_args.setdefault(ins.callee, {})
            for k, a in enumerate(ins.args):
                names = {self._differentiated_argument(index)
                         for index in self._user_arguments_holding(a)}
                if names:
                    name = names.pop() if len(names) == 1 else None
                    passed[k] = name if passed.get(k, name) == name else None
            self.calls[key] = self.builder.derivative(
                ins.callee, self.act.call_activity(ins), getattr(self.d, "atomic", False),
                self.builder.stable_operands(self.fn, ins),
                failures_propagate=self._failures_propagate(ins))
        return self.calls[key]
