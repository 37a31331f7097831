"""Function-level derivative rules: the one door for derivatives not derived
from a function's own IR.

A rule covers some functions (by symbol) and writes, for one (function,
activity), the augmented forward and reverse functions (reverse mode) or the
tangent function (forward mode), in the calling convention of the generated
derivatives (the function's arguments, the shadows of its 'dup' ones, the
tape). Calls to a covered function go through its rule wherever they are:
at any depth of the call graph, in loops, in recursion.

Built in: BLAS products (``blas.py``) and Numba's ``int_power`` helper.
Users' rules (``defvjp``/``defjvp``/``inactive``, ``userrules.py``) and the
rules for NumPy's linear algebra, written the same way, register here too.
"""
from __future__ import annotations

from . import blas
from .ir import Function, local, tangent_name


class FunctionRule:
    """A derivative for the functions it covers."""

    # Whether the reverse reads operands again that the call site proves
    # unchanged (``FunctionDerivative.stable``) instead of recording them: the
    # derivative is then written per set of such operands.
    rereads_operands = False
    # Whether the reverse may run on several threads at once (in a parallel loop's
    # body): it adds into shadow memory atomically, or writes none. A BLAS call's
    # reverse adds into its operands' shadows with plain loads and stores.
    thread_safe_reverse = False

    def signature(self, name, module):
        """A signature-only Function model if this rule covers ``name``, else None."""
        raise NotImplementedError

    def reverse(self, deriv, builder) -> str:
        """The IR of ``deriv.aug_name`` and ``deriv.rev_name`` (``builder``, the
        ModuleBuilder, gives the derivatives of other functions)."""
        raise NotImplementedError

    def forward(self, deriv, builder) -> str:
        """The IR of ``deriv.name``, the tangent function."""
        raise NotImplementedError

    def declarations(self) -> dict:
        """Functions the rule's IR calls, by name, as IR declarations."""
        return {}

    def selector_params(self, name) -> frozenset:
        """Indices of the pointer parameters of ``name`` whose memory the rule
        only reads to select (a dictionary's key): a call passing memory that
        holds no value depending on the inputs passes them as 'const'."""
        return frozenset()

    def covers(self, name) -> bool:
        """Whether this rule covers ``name``, whatever its IR (its calls must
        stay calls)."""
        return self.signature(name, None) is not None


class BlasRule(FunctionRule):
    rereads_operands = True
    _RULES = {"numba_xxdot": (blas.dot_reverse, blas.dot_forward),
              "numba_xxgemv": (blas.gemv_reverse, blas.gemv_forward),
              "numba_xxgemm": (blas.gemm_reverse, blas.gemm_forward)}

    def signature(self, name, module):
        return blas.signature(name)

    def reverse(self, deriv, builder):
        return self._RULES[deriv.fn.name][0](deriv)

    def forward(self, deriv, builder):
        return self._RULES[deriv.fn.name][1](deriv)

    def declarations(self):
        return blas.BLAS_DECLARATIONS


class IntPowerRule(FunctionRule):
    """Numba's ``int_power(a, n)`` helper (``x ** n`` with an integer n): its
    loop of squarings is replaced by d(a^n)/da = n a^(n-1)."""
    thread_safe_reverse = True          # (scalars only)

    def covers(self, name):
        return "int_power_impl" in name

    def signature(self, name, module):
        if "int_power_impl" in name and module is not None and name in module.functions:
            fn = module.functions[name]
            if len(fn.args) == 4 and fn.args[2].type in ("double", "float") and \
                    fn.args[3].type.startswith("i"):
                return Function(name, "i32", fn.args, [])
        return None

    @staticmethod
    def _derivative(a, n, ty):
        sfx = "f64" if ty == "double" else "f32"
        # (0 for n = 0, with a finite value in the unchosen operand: a second
        # derivative multiplies that operand's partials by 0)
        return f"""  %n_is_zero = icmp eq {n.type} {n.ref}, 0
  %nf.any = sitofp {n.type} {n.ref} to {ty}
  %nf = select i1 %n_is_zero, {ty} 1.0, {ty} %nf.any
  %nm1 = fsub {ty} %nf, 1.0
  %p = call {ty} @llvm.pow.{sfx}({ty} {a.ref}, {ty} %nm1)
  %d = fmul {ty} %nf, %p
  %d0 = select i1 %n_is_zero, {ty} 0.0, {ty} %d
"""

    def reverse(self, deriv, builder):
        retptr, excinfo, a, n = deriv.fn.args
        ty = a.type
        params = ", ".join(deriv.params)
        args = f"ptr {retptr.ref}, ptr {excinfo.ref}, {ty} {a.ref}, {n.type} {n.ref}"
        aug = f"""
define internal i32 @"{deriv.aug_name}"({params}) {{
  %status = call i32 @"{deriv.fn.name}"({args})
  ret i32 %status
}}
"""
        active = deriv.activity[2] == "active"
        dup_ret = deriv.activity[0] == "dup"
        shadow = f'%"~s.{retptr.name}"'
        if not active:
            return aug + f"""
define internal void @"{deriv.rev_name}"({params}) {{
  {f'store {ty} 0.0, ptr {shadow}' if dup_ret else ""}
  ret void
}}
"""
        seed = (f"%adj = load {ty}, ptr {shadow}\n  store {ty} 0.0, ptr {shadow}" if dup_ret
                else f"%adj = fadd {ty} 0.0, 0.0")
        return aug + f"""
define internal {{ {ty} }} @"{deriv.rev_name}"({params}) {{
  {seed}
{self._derivative(a, n, ty)}  %g = fmul {ty} %adj, %d0
  %r = insertvalue {{ {ty} }} undef, {ty} %g, 0
  ret {{ {ty} }} %r
}}
"""

    def forward(self, deriv, builder):
        retptr, excinfo, a, n = deriv.fn.args
        ty = a.type
        args = f"ptr {retptr.ref}, ptr {excinfo.ref}, {ty} {a.ref}, {n.type} {n.ref}"
        body = ""
        if deriv.activity[0] == "dup":
            tangent = local(tangent_name(a.name)) if deriv.activity[2] == "active" else "0.0"
            body = (self._derivative(a, n, ty) + f"  %t = fmul {ty} %d0, {tangent}\n"
                    f"  store {ty} %t, ptr {local(tangent_name(retptr.name))}\n")
        return f"""
define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{
  %status = call i32 @"{deriv.fn.name}"({args})
{body}  ret i32 %status
}}
"""


# Most recently registered first: a user's rule replaces a built-in one.
RULES: list = [BlasRule(), IntPowerRule()]


def register(rule: FunctionRule):
    RULES.insert(0, rule)


def unregister(rule: FunctionRule):
    RULES.remove(rule)


def covered(name) -> bool:
    """Whether a rule covers the function ``name``."""
    return any(rule.covers(name) for rule in RULES)


def rule_for(name, module=None):
    """(rule, signature model) of the rule covering ``name``, or (None, None)."""
    for rule in RULES:
        fn = rule.signature(name, module)
        if fn is not None:
            return rule, fn
    return None, None


