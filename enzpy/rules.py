"""The registry of derivative rules: one entry per opcode, intrinsic or libm function.

Keys are normalised names: ``sin`` covers ``llvm.sin.f64``, ``llvm.sin.f32``,
``sin`` and ``sinf``. An entry lists one *partial derivative* per operand, each
a small function of ``(e, *operands, result)`` that emits IR through the
``Emitter`` ``e`` and returns the partial, ``ONE``/``MINUS_ONE`` for the
constants, or ``None`` when the operand carries no derivative (integers, or a
zero derivative almost everywhere). Reverse mode multiplies each partial by the
incoming adjoint; forward mode would sum partials times tangents: one table
serves both.
"""
from __future__ import annotations

import re

from .emitter import LN2, LN10, TWO_OVER_SQRT_PI
from .errors import UnsupportedError
from .special import DIGAMMA, TRIGAMMA

ONE = "one"
MINUS_ONE = "minus_one"


def strong_product(e, adj, partial):
    """adj * partial, but 0 where adj is 0 and the partial is nan: an entry
    ``np.nansum`` skips (a nan that went through arithmetic) gets a zero
    adjoint, a tangent that is 0 (an exponent made of constants, ``x **
    n.astype(float)`` at x < 0) a zero term. 0 * inf stays nan: a derivative
    that is 0 because something overflowed must not turn an infinite derivative
    into a silent 0. (Reverse mode uses a plain product in recursive functions,
    whose reverse recurses as deep as the primal: there the lean frame wins.)"""
    product = e.fmul(adj, partial)
    if partial.kind == "const":           # a finite constant
        return product
    skipped = e.define("i1", f"and i1 {e.fcmp('oeq', adj, e.zero(adj.type)).ref}, "
                             f"{e.fcmp('uno', partial, partial).ref}")
    return e.select(skipped, e.zero(adj.type), product)


class Rule:
    def __init__(self, *partials):
        self.partials = partials


RULES: dict = {}


def rule(name, *partials):
    RULES[name] = Rule(*partials)


def zero_derivative(*names, arity=1):
    for name in names:
        RULES[name] = Rule(*([None] * arity))


def _one_over_sqrt(e, x):
    return e.recip(e.sqrt(x))


# -- arithmetic opcodes ----------------------------------------------------
rule("fadd", lambda e, a, b, r: ONE, lambda e, a, b, r: ONE)
rule("fsub", lambda e, a, b, r: ONE, lambda e, a, b, r: MINUS_ONE)
rule("fneg", lambda e, a, r: MINUS_ONE)
# (a float viewed as an integer and straight back: frontend.plain_bit_views)
rule("freeze", lambda e, a, r: ONE)
rule("fmul", lambda e, a, b, r: b, lambda e, a, b, r: a)
rule("fdiv", lambda e, a, b, r: e.recip(b), lambda e, a, b, r: e.fneg(e.fdiv(r, b)))
# frem is C's fmod: a - b * trunc(a / b).
rule("frem", lambda e, a, b, r: ONE, lambda e, a, b, r: e.fneg(e.trunc(e.fdiv(a, b))))

# -- elementary functions --------------------------------------------------
rule("sin", lambda e, x, r: e.cos(x))
rule("cos", lambda e, x, r: e.fneg(e.sin(x)))
rule("tan", lambda e, x, r: e.fadd(e.const(1.0, x.type), e.square(r)))
rule("asin", lambda e, x, r: _one_over_sqrt(e, e.fsub(e.const(1.0, x.type), e.square(x))))
rule("acos", lambda e, x, r: e.fneg(_one_over_sqrt(e, e.fsub(e.const(1.0, x.type), e.square(x)))))
rule("atan", lambda e, x, r: e.recip(e.fadd(e.const(1.0, x.type), e.square(x))))
rule("atan2",
     lambda e, y, x, r: e.fdiv(x, e.fadd(e.square(x), e.square(y))),
     lambda e, y, x, r: e.fneg(e.fdiv(y, e.fadd(e.square(x), e.square(y)))))
rule("sinh", lambda e, x, r: e.cosh(x))
rule("cosh", lambda e, x, r: e.sinh(x))
rule("tanh", lambda e, x, r: e.fsub(e.const(1.0, x.type), e.square(r)))
rule("asinh", lambda e, x, r: _one_over_sqrt(e, e.fadd(e.square(x), e.const(1.0, x.type))))
rule("acosh", lambda e, x, r: _one_over_sqrt(e, e.fsub(e.square(x), e.const(1.0, x.type))))
rule("atanh", lambda e, x, r: e.recip(e.fsub(e.const(1.0, x.type), e.square(x))))
rule("exp", lambda e, x, r: r)
rule("exp2", lambda e, x, r: e.scale(r, LN2))
rule("expm1", lambda e, x, r: e.fadd(r, e.const(1.0, x.type)))
rule("log", lambda e, x, r: e.recip(x))
rule("log2", lambda e, x, r: e.recip(e.scale(x, LN2)))
rule("log10", lambda e, x, r: e.recip(e.scale(x, LN10)))
rule("log1p", lambda e, x, r: e.recip(e.fadd(x, e.const(1.0, x.type))))
rule("sqrt", lambda e, x, r: e.fdiv(e.const(0.5, x.type), r))
rule("cbrt", lambda e, x, r: e.fdiv(r, e.scale(x, 3.0)))


def _pow_exponent_partial(e, x, y, r):
    # x**y * log(x), with log(1) at x = 0: 0**y is constant (0) for y > 0, so
    # the partial is 0 there, not 0 * -inf = nan (JAX and PyTorch agree)
    base = e.select(e.fcmp("oeq", x, e.zero(x.type)), e.const(1.0, x.type), x)
    return e.fmul(r, e.log(base))


def _power_partial(e, x, y):
    # y * x**(y - 1), but 0 at x = y = 0 (x**0 is 1 everywhere), not 0 * 0**-1 = nan, so
    # that the second derivative of x**1 at 0 is 0 too. The exponent is 1 there as well:
    # a second derivative multiplies the unchosen value's own partials by 0, which must
    # be finite.
    zero = e.zero(y.type)
    origin = e.binop("and", e.fcmp("oeq", x, zero), e.fcmp("oeq", y, zero))
    y = e.select(origin, e.const(1.0, y.type), y)
    partial = e.fmul(y, e.pow(x, e.fsub(y, e.const(1.0, y.type))))
    return e.select(origin, zero, partial)


rule("pow", lambda e, x, y, r: _power_partial(e, x, y), _pow_exponent_partial)
rule("powi", lambda e, x, n, r: _power_partial(e, x, e.cast("sitofp", n, x.type)), None)
def _over_hypot(e, v, r):
    # v / r, and 0 at the origin (its kink: the subgradient 0, as for np.linalg.norm),
    # dividing by 1 there so that a second derivative stays finite
    zero = e.zero(r.type)
    at_origin = e.fcmp("oeq", r, zero)
    return e.select(at_origin, zero, e.fdiv(v, e.select(at_origin, e.const(1.0, r.type), r)))


rule("hypot", lambda e, x, y, r: _over_hypot(e, x, r), lambda e, x, y, r: _over_hypot(e, y, r))
rule("erf", lambda e, x, r: e.scale(e.exp(e.fneg(e.square(x))), TWO_OVER_SQRT_PI))
rule("erfc", lambda e, x, r: e.scale(e.exp(e.fneg(e.square(x))), -TWO_OVER_SQRT_PI))


def _special(e, name, x):
    """enzpy's double-precision special function ``name`` at ``x`` (see special.py)."""
    if x.type == "double":
        return e.call(name, "double", [x])
    return e.cast("fptrunc", e.call(name, "double", [e.cast("fpext", x, "double")]), x.type)


rule("lgamma", lambda e, x, r: _special(e, DIGAMMA, x))
rule("numba_gamma", lambda e, x, r: e.fmul(r, _special(e, DIGAMMA, x)))   # math.gamma
rule(DIGAMMA, lambda e, x, r: _special(e, TRIGAMMA, x))    # (second order of lgamma)
rule("fabs", lambda e, x, r: e.copysign(e.const(1.0, x.type), x))
rule("copysign",
     lambda e, x, y, r: e.fmul(e.copysign(e.const(1.0, x.type), x),
                               e.copysign(e.const(1.0, x.type), y)),
     None)
rule("fma", lambda e, a, b, c, r: b, lambda e, a, b, c, r: a, lambda e, a, b, c, r: ONE)
RULES["fmuladd"] = RULES["fma"]
# Numba's helper behind np.ldexp / math.ldexp: x * 2**n, n an integer.
rule("numba_ldexp",
     lambda e, x, n, r: e.call("numba_ldexpf" if x.type == "float" else "numba_ldexp", x.type,
                               [e.const(1.0, x.type), n]),
     None)

# Numba's helper behind np.nextafter (and np.spacing, nextafter(x, inf) - x): x moved by
# one ulp toward y. Exactly it is a staircase of one-ulp steps; the derivative every
# difference quotient above an ulp sees, and that keeps np.spacing's at 0, is 1 in x.
rule("numba_nextafter", lambda e, x, y, r: ONE, None)
RULES["nextafter"] = RULES["numba_nextafter"]      # math.nextafter: libm's


def _first_chosen(e, a, b, r):
    return e.indicator(e.fcmp("oeq", r, a), a.type)


def _second_chosen(e, a, b, r):
    return e.indicator(e.fcmp("une", r, a), a.type)


for _name in ("minnum", "maxnum", "minimum", "maximum", "fmin", "fmax"):
    rule(_name, _first_chosen, _second_chosen)

zero_derivative("floor", "ceil", "trunc", "round", "rint", "nearbyint", "roundeven")

# Calls that move no derivative: runtime bookkeeping, GIL, hints to the optimizer.
INACTIVE_CALLS = re.compile(
    r"^(NRT_(incref|decref|MemInfo_call_dtor)|numba_gil_(ensure|release)|"
    r"numba_dict_(length|iter_sizeof)$|"
    r"llvm\.(lifetime|assume|dbg|expect|invariant|sideeffect|experimental\.noalias)\b)")

# Runtime calls on memory whose shadows the transformation itself maintains
# (see reverse.py): reference counts, allocation data pointers, bulk copies.
MEMORY_CALLS = re.compile(
    r"^(NRT_(incref|decref|Free|MemInfo_data_fast|MemInfo_data|MemInfo_alloc\w*|Allocate\w*|"
    r"MemInfo_new_varsize\w*|MemInfo_varsize_(alloc|realloc|free))|"
    r"llvm\.(memset|memcpy|memmove)\.|"
    r"enzpy\.varsize\.free$)")       # (a first-order derivative's, in hvp)

_INTRINSIC_NAME = re.compile(r"^llvm\.([a-z0-9_]+?)(\.[a-z]\w*)*$")


def normalize(callee: str) -> str:
    """``llvm.sin.f64`` / ``sinf`` / ``sin`` -> ``sin``."""
    m = _INTRINSIC_NAME.match(callee)
    if m:
        return m.group(1)
    if callee not in RULES and callee.endswith("f") and callee[:-1] in RULES:
        return callee[:-1]
    return callee


def lookup(name: str, where=lambda: "") -> Rule:
    """The rule for an opcode or callee; ``UnsupportedError`` when there is none
    (``where()`` locates the call for the message: only then is it worked out)."""
    found = RULES.get(normalize(name))
    if found is None:
        raise UnsupportedError(f"no derivative rule for '{name}'{where()}; give the @njit "
                               f"function calling it a derivative with enzpy.defvjp (and "
                               f"enzpy.defjvp)")
    return found


def has_rule(name: str) -> bool:
    return normalize(name) in RULES
