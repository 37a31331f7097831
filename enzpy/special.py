"""IR of the special functions derivative rules need: digamma and trigamma.

``math.lgamma`` differentiates to digamma, ``math.gamma`` to gamma times digamma,
and digamma (met again by second order) to trigamma. Neither is in libm, so
they are written here, in double precision (a float argument is widened): for
x < 0 the reflection formulas, with the period of the trigonometric factor
taken out first (x - round(x)) so that large |x| keeps its precision; then the
recurrences psi(x) = psi(x + 1) - 1/x and psi1(x) = psi1(x + 1) + 1/x^2 up to
x >= 10; then the asymptotic series, whose first omitted term is below 1e-14
relative there. At the poles (0 and the negative integers) the result is
infinite or huge, as the derivative of lgamma is.
"""

DIGAMMA = "enzpy.digamma"
TRIGAMMA = "enzpy.trigamma"

_PI = "0x400921FB54442D18"
_PI_SQUARED = "0x4023BD3CC9BE45DE"


def _special(name, reflection, step, series, combine) -> str:
    """``double name(double)``: for x < 0, ``reflection`` (IR defining
    %refl.term from %sin = sin(pi r), %pi_r = pi r, r = x - round(x)) and the
    argument 1 - x; then, from %z, %acc (0 at first), ``step`` (IR defining
    %acc.next) while z < 10, and ``series`` (IR defining %s, the function at the
    argument, from %z, %w = 1/z, %w2 = w^2, %acc); last ``combine`` (IR
    defining %value from %s, %term and %negative)."""
    return f"""
define internal double @"{name}"(double %x) {{
entry:
  %negative = fcmp olt double %x, 0.0
  br i1 %negative, label %reflect, label %recur
reflect:
  %nearest = call double @llvm.roundeven.f64(double %x)
  %r = fsub double %x, %nearest
  %pi_r = fmul double %r, {_PI}
  %sin = call double @llvm.sin.f64(double %pi_r)
{reflection}
  %refl.y = fsub double 1.0, %x
  br label %recur
recur:
  %z0 = phi double [ %x, %entry ], [ %refl.y, %reflect ]
  %term = phi double [ 0.0, %entry ], [ %refl.term, %reflect ]
  br label %loop
loop:
  %z = phi double [ %z0, %recur ], [ %z.next, %step ]
  %acc = phi double [ 0.0, %recur ], [ %acc.next, %step ]
  %small = fcmp olt double %z, 10.0
  br i1 %small, label %step, label %tail
step:
{step}
  %z.next = fadd double %z, 1.0
  br label %loop
tail:
  %w = fdiv double 1.0, %z
  %w2 = fmul double %w, %w
{series}
{combine}
  ret double %value
}}
"""


def _horner(var, coefficients, out) -> str:
    """IR computing ``out = c0 + var*(c1 + var*(c2 + ...))``."""
    lines, acc = [], repr(float(coefficients[-1]))
    for k, c in enumerate(reversed(coefficients[:-1])):
        lines.append(f"  %{out}.m{k} = fmul double %{var}, {acc}")
        lines.append(f"  %{out}.a{k} = fadd double %{out}.m{k}, {float(c)!r}")
        acc = f"%{out}.a{k}"
    lines.append(f"  %{out} = fadd double {acc}, 0.0")
    return "\n".join(lines)


# psi(x) ~ log x - w/2 - sum B_2k / (2k x^2k):  w2 * (1/12 - w2/120 + w2^2/252 - ...)
_DIGAMMA_SERIES = [1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12]
# psi1(x) ~ w + w2/2 + sum B_2k w^(2k+1):  w * w2 * (1/6 - w2/30 + w2^2/42 - ...)
_TRIGAMMA_SERIES = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6]

SPECIAL_RUNTIME = """
declare double @llvm.roundeven.f64(double)
declare double @llvm.sin.f64(double)
declare double @llvm.cos.f64(double)
declare double @llvm.log.f64(double)
""" + _special(
    DIGAMMA,
    # psi(x) = psi(1 - x) - pi cot(pi x)
    reflection=f"""  %cos = call double @llvm.cos.f64(double %pi_r)
  %cot = fdiv double %cos, %sin
  %pi_cot = fmul double %cot, {_PI}
  %refl.term = fneg double %pi_cot""",
    step="""  %inv = fdiv double 1.0, %z
  %acc.next = fsub double %acc, %inv""",
    series=_horner("w2", _DIGAMMA_SERIES, "poly") + """
  %tail.sum = fmul double %w2, %poly
  %log = call double @llvm.log.f64(double %z)
  %half_w = fmul double %w, 0.5
  %v1 = fsub double %log, %half_w
  %v2 = fsub double %v1, %tail.sum
  %s = fadd double %acc, %v2""",
    combine="  %value = fadd double %term, %s",
) + _special(
    TRIGAMMA,
    # psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)
    reflection=f"""  %sin2 = fmul double %sin, %sin
  %refl.term = fdiv double {_PI_SQUARED}, %sin2""",
    step="""  %z2 = fmul double %z, %z
  %inv2 = fdiv double 1.0, %z2
  %acc.next = fadd double %acc, %inv2""",
    series=_horner("w2", _TRIGAMMA_SERIES, "poly") + """
  %w3 = fmul double %w2, %w
  %odd = fmul double %w3, %poly
  %half_w2 = fmul double %w2, 0.5
  %v1 = fadd double %w, %half_w2
  %v2 = fadd double %v1, %odd
  %s = fadd double %acc, %v2""",
    combine="""  %reflected = fsub double %term, %s
  %value = select i1 %negative, double %reflected, double %s""",
)
