"""Hand-written aug/rev pairs for runtime functions that have no IR to differentiate.

Numba sends ``np.dot`` of two 1-D float arrays to BLAS through ``numba_xxdot``;
its derivative is written here directly in IR, in the calling convention of the
generated derivatives (primal arguments, shadows of the 'dup' ones, the tape).
"""
from __future__ import annotations

from .ir import Function, Value, local, tangent_name
from .tape import POP, PUSH

# numba_xxdot(kind, conjugate, n, a, b, out) -> status; kind is 'd' (100) or 's' (115).
_XXDOT_PARAMS = [("i8", "kind"), ("i8", "conj"), ("i64", "n"),
                 ("ptr", "a"), ("ptr", "b"), ("ptr", "out")]
BLAS_UNSUPPORTED = ("numba_xxgemm", "numba_xxgemv", "numba_xxger", "numba_xxgesv")


def custom_function(name: str, module=None):
    """A signature-only Function model for a function with a hand-written derivative."""
    if name == "numba_xxdot":
        args = [Value(local(n), t, "arg", n) for t, n in _XXDOT_PARAMS]
        return Function(name, "i32", args, [])
    if "int_power_impl" in name and module is not None and name in module.functions:
        fn = module.functions[name]
        if len(fn.args) == 4 and fn.args[2].type in ("double", "float") and \
                fn.args[3].type.startswith("i"):
            return Function(name, "i32", fn.args, [])
    return None


def custom_derivative(deriv) -> str:
    if deriv.fn.name == "numba_xxdot":
        return xxdot_derivative(deriv)
    return int_power_derivative(deriv)


def int_power_derivative(deriv) -> str:
    """Numba's ``int_power(a, n)`` helper (``x ** n`` with an integer n): its
    loop of squarings is replaced by the rule d(a^n)/da = n a^(n-1)."""
    retptr, excinfo, a, n = deriv.fn.args
    ty = a.type
    sfx = "f64" if ty == "double" else "f32"
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
    if not active:
        return aug + f"""
define internal void @"{deriv.rev_name}"({params}) {{
  {f'store {ty} 0.0, ptr %"~s.{retptr.name}"' if dup_ret else ""}
  ret void
}}
"""
    if dup_ret:
        shadow = f'%"~s.{retptr.name}"'
        seed = f"%adj = load {ty}, ptr {shadow}\n  store {ty} 0.0, ptr {shadow}"
    else:
        seed = f"%adj = fadd {ty} 0.0, 0.0"
    return aug + f"""
define internal {{ {ty} }} @"{deriv.rev_name}"({params}) {{
  {seed}
  %nf = sitofp {n.type} {n.ref} to {ty}
  %nm1 = fsub {ty} %nf, 1.0
  %p = call {ty} @llvm.pow.{sfx}({ty} {a.ref}, {ty} %nm1)
  %d = fmul {ty} %nf, %p
  %n_is_zero = icmp eq {n.type} {n.ref}, 0
  %d0 = select i1 %n_is_zero, {ty} 0.0, {ty} %d
  %g = fmul {ty} %adj, %d0
  %r = insertvalue {{ {ty} }} undef, {ty} %g, 0
  ret {{ {ty} }} %r
}}
"""


def xxdot_derivative(deriv) -> str:
    """The aug/rev pair of ``numba_xxdot`` for the activity of ``deriv``."""
    shadows = {name: (f'%"~s.{name}"' if act == "dup" else "null")
               for (_, name), act in zip(_XXDOT_PARAMS, deriv.activity)}
    params = ", ".join(deriv.params)
    sizes = """  %is_double = icmp eq i8 %kind, 100
  %size = select i1 %is_double, i64 8, i64 4
  %bytes = mul i64 %n, %size
  %twice = shl i64 %bytes, 1
  %padded = add i64 %twice, 7
  %total = and i64 %padded, -8"""
    aug = f"""
define internal i32 @"{deriv.aug_name}"({params}) {{
entry:
  %status = call i32 @numba_xxdot(i8 %kind, i8 %conj, i64 %n, ptr %a, ptr %b, ptr %out)
{sizes}
  %slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 %total)
  call void @llvm.memcpy.p0.p0.i64(ptr %slot, ptr %a, i64 %bytes, i1 false)
  %bcopy = getelementptr i8, ptr %slot, i64 %bytes
  call void @llvm.memcpy.p0.p0.i64(ptr %bcopy, ptr %b, i64 %bytes, i1 false)
  ret i32 %status
}}
"""
    dout = shadows["out"]
    # One branch per BLAS kind: out' is the incoming adjoint; a' += g b, b' += g a.
    branches = "".join(f"""{ty}:
  %g.{ty} = load {ty}, ptr {dout}
  store {ty} 0.0, ptr {dout}
  call void @enzpy.axpy.{ty}(i64 %n, {ty} %g.{ty}, ptr %bcopy, ptr {shadows["a"]})
  call void @enzpy.axpy.{ty}(i64 %n, {ty} %g.{ty}, ptr %slot, ptr {shadows["b"]})
  br label %done
""" for ty in ("double", "float"))
    rev = f"""
define internal void @"{deriv.rev_name}"({params}) {{
entry:
{sizes}
  %slot = call ptr @{POP}(ptr %"enzpy.tape", i64 %total)
  %bcopy = getelementptr i8, ptr %slot, i64 %bytes
  %no_out = icmp eq ptr {dout}, null
  br i1 %no_out, label %done, label %has_out
has_out:
  br i1 %is_double, label %double, label %float
{branches}done:
  ret void
}}
"""
    return aug + rev


def custom_forward(deriv) -> str:
    """The tangent function of a function with a hand-written derivative."""
    if deriv.fn.name == "numba_xxdot":
        return xxdot_forward(deriv)
    return int_power_forward(deriv)


def _shadow_ref(arg) -> str:
    return local(tangent_name(arg.name))


def int_power_forward(deriv) -> str:
    """``int_power(a, n)``: the tangent is n a^(n-1) a'."""
    retptr, excinfo, a, n = deriv.fn.args
    ty = a.type
    sfx = "f64" if ty == "double" else "f32"
    args = f"ptr {retptr.ref}, ptr {excinfo.ref}, {ty} {a.ref}, {n.type} {n.ref}"
    body = ""
    if deriv.activity[0] == "dup":
        tangent = _shadow_ref(a) if deriv.activity[2] == "active" else "0.0"
        body = f"""  %nf = sitofp {n.type} {n.ref} to {ty}
  %nm1 = fsub {ty} %nf, 1.0
  %p = call {ty} @llvm.pow.{sfx}({ty} {a.ref}, {ty} %nm1)
  %d = fmul {ty} %nf, %p
  %n_is_zero = icmp eq {n.type} {n.ref}, 0
  %d0 = select i1 %n_is_zero, {ty} 0.0, {ty} %d
  %t = fmul {ty} %d0, {tangent}
  store {ty} %t, ptr {_shadow_ref(retptr)}
"""
    return f"""
define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{
  %status = call i32 @"{deriv.fn.name}"({args})
{body}  ret i32 %status
}}
"""


def xxdot_forward(deriv) -> str:
    """``numba_xxdot``: out' = dot(a', b) + dot(a, b')."""
    shadows = {name: (local(tangent_name(name)) if act == "dup" else "null")
               for (_, name), act in zip(_XXDOT_PARAMS, deriv.activity)}
    dout = shadows["out"]
    branches = "".join(f"""{ty}:
  store {ty} 0.0, ptr {dout}
  call void @enzpy.fwd.dot.{ty}(ptr {dout}, i64 %n, ptr {shadows["a"]}, ptr %b)
  call void @enzpy.fwd.dot.{ty}(ptr {dout}, i64 %n, ptr {shadows["b"]}, ptr %a)
  br label %done
""" for ty in ("double", "float"))
    return f"""
define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{
entry:
  %status = call i32 @numba_xxdot(i8 %kind, i8 %conj, i64 %n, ptr %a, ptr %b, ptr %out)
  %no_out = icmp eq ptr {dout}, null
  br i1 %no_out, label %done, label %has_out
has_out:
  %is_double = icmp eq i8 %kind, 100
  br i1 %is_double, label %double, label %float
{branches}done:
  ret i32 %status
}}
"""
