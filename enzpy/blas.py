"""Derivatives of the BLAS calls Numba makes, as IR in the calling convention of
the generated derivatives: ``np.dot`` of vectors (``numba_xxdot``), matrix-vector
products (``numba_xxgemv``) and matrix products (``numba_xxgemm``), whatever
NumPy spelling reached them (``np.dot``, ``@``, ``np.matmul``, ``np.outer``...).

The reverse of a product is products again (the reverse of a ``gemm`` is two
``gemm``s), so a derivative costs a small multiple of the primal and stays
O(n^3). The augmented forward records a copy of an operand on the tape only
where the reverse reads it (another operand has a shadow) and the call site
cannot prove that nothing writes it before the reverse sweep runs
(``ModuleBuilder.stable_operands``): ``A @ x`` of a user's input copies nothing.
BLAS works on column-major blocks ``(data, leading dimension)``; Numba passes
row-major arrays as their transposes, which the rules follow without knowing it.

The element type is fixed per call site (Numba passes it as a constant
``kind``: 'd' or 's'); the transposition flags are branched on at run time.

A product whose result block shares memory with an operand (``np.dot(b, a, a)``,
or the same array reached through a list) reads the operand while BLAS
overwrites it: Numba's result is undefined, and so would the derivative be. The
call site refuses it where it passes one pointer twice (``check_result_apart``);
otherwise the derivative's products count it at run time (``PRODUCT_OVERLAPS``)
and the entry point raises ``UnsupportedError`` (``backend.numba_entry``) before
the reverse sweep writes any shadow.
"""
from __future__ import annotations

import ctypes

from llvmlite import binding as llvm

from .errors import UnsupportedError
from .analysis import pointer_roots
from .ir import Function, Value, local, tangent_name
from .runtime import counted_loop
from .tape import POP, PUSH

KINDS = {100: ("double", 8), 115: ("float", 4)}        # 'd', 's'
_N, _T = 110, 116                                        # 'n', 't'

GEMM_PARAMS = [("i8", "kind"), ("i8", "transa"), ("i8", "transb"), ("i64", "m"), ("i64", "n"),
               ("i64", "k"), ("ptr", "alpha"), ("ptr", "a"), ("i64", "lda"), ("ptr", "b"),
               ("i64", "ldb"), ("ptr", "beta"), ("ptr", "c"), ("i64", "ldc")]
GEMV_PARAMS = [("i8", "kind"), ("i8", "trans"), ("i64", "m"), ("i64", "n"), ("ptr", "alpha"),
               ("ptr", "a"), ("i64", "lda"), ("ptr", "x"), ("ptr", "beta"), ("ptr", "y")]
DOT_PARAMS = [("i8", "kind"), ("i8", "conj"), ("i64", "n"), ("ptr", "a"), ("ptr", "b"),
              ("ptr", "out")]
PARAMS = {"numba_xxgemm": GEMM_PARAMS, "numba_xxgemv": GEMV_PARAMS, "numba_xxdot": DOT_PARAMS}
PRODUCT_OVERLAPS = "enzpy_product_overlaps"
_product_overlaps = ctypes.c_int64(0)
llvm.add_symbol(PRODUCT_OVERLAPS, ctypes.addressof(_product_overlaps))
OVERLAP_MESSAGE = ("a matrix product (np.dot(a, b, out), @) wrote its result into memory it "
                   "reads as an operand (out shares memory with a or b, e.g. the same array "
                   "reached through a list): BLAS reads the operand while overwriting it, so "
                   "Numba's result and its derivative are undefined; pass an out array of "
                   "its own")


# (indices of the operands read, index of the operand written)
OPERANDS = {"numba_xxgemm": ((7, 9), 12), "numba_xxgemv": ((5, 7), 9), "numba_xxdot": ((3, 4), 5)}


def signature(name: str):
    """A signature-only Function model of a BLAS entry point with a rule."""
    params = PARAMS.get(name)
    if params is None:
        return None
    return Function(name, "i32", [Value(local(n), t, "arg", n) for t, n in params], [])


def check_call(ins, where, function):
    """Refuse BLAS calls on complex numbers (kind 'c' or 'z'). Numba passes the
    kind as a constant; enzpy's own tangent functions of BLAS calls (read back
    for second order) pass on their caller's, checked there."""
    kind = ins.args[0]
    if kind.kind != "const" and function.startswith("enzpy."):
        return
    if kind.kind != "const" or int(kind.ref) not in KINDS:
        raise UnsupportedError(f"a matrix product of complex arrays{where}: enzpy "
                               f"differentiates BLAS products of float32 and float64 arrays "
                               f"only; write the complex product as a loop or a broadcast sum "
                               f"(`(E * x).sum(axis=1)` for `E @ x`), which are differentiated")


def result_written_over(functions, name, memo) -> frozenset:
    """Pairs (read, written) of the parameters of the function ``name`` (a BLAS
    entry point, or a function calling one at any depth) whose memory a product
    reads as an operand and writes its result into: passed the same memory
    (``np.dot(b, a, a)``), the product overwrites the operand it reads. ``memo``:
    the pairs found so far, by function name."""
    if name in OPERANDS:
        read, written = OPERANDS[name]
        return frozenset((k, written) for k in read)
    if name in memo:
        return memo[name]
    memo[name] = frozenset()        # (a recursive call adds nothing of its own)
    fn = functions.get(name)
    pairs = set()
    for ins in (ins for b in (fn.blocks if fn is not None else ()) for ins in b.instructions):
        if ins.opcode != "call" or not ins.callee:
            continue
        for k, w in result_written_over(functions, ins.callee, memo):
            pairs |= {(i, j) for kind, i in pointer_roots(fn, ins.args[k]) if kind == "arg"
                      for kind_w, j in pointer_roots(fn, ins.args[w]) if kind_w == "arg"
                      and i != j}
    memo[name] = frozenset(pairs)
    return memo[name]


def check_result_apart(fn, ins, pairs, where):
    """Refuse a call of ``fn`` passing one pointer as an operand of a BLAS product
    and as its result (``pairs``: ``result_written_over`` of the callee): BLAS
    would read the operand while overwriting it (NumPy copies it first). Memory
    shared any other way (the same array through a list, rows of one buffer that
    may meet) is checked when the product runs (``PRODUCT_OVERLAPS``)."""
    if any(_uncast(fn, ins.args[k]) == _uncast(fn, ins.args[w]) for k, w in pairs):
        raise UnsupportedError(f"a product writes its result into the memory of one of its "
                               f"operands (np.dot(a, b, out) with out sharing memory with a or "
                               f"b){where}: BLAS would read the operand while overwriting it; "
                               f"pass an out array of its own")


def _uncast(fn, value) -> str:
    """The pointer ``value`` is, through casts."""
    while value.kind == "inst" and fn.defs[value.name].opcode in ("bitcast", "addrspacecast",
                                                                  "freeze"):
        value = fn.defs[value.name].operands[0]
    return value.ref


def unshadowed_result(ins, shadowed):
    """The pointer a product of memory carrying derivatives writes to without a
    shadow of its own (its derivative would be lost), or None."""
    read, written = OPERANDS[ins.callee]
    out = ins.args[written]
    if not shadowed(out) and any(shadowed(ins.args[k]) for k in read):
        return out
    return None


def _shadows(deriv, prefix):
    return {n: (local(prefix + n) if act == "dup" else "null")
            for (_, n), act in zip(PARAMS[deriv.fn.name], deriv.activity)}


def _recorded(deriv, needs) -> dict:
    """Operand -> whether the augmented forward copies it to the tape.
    ``needs`` maps each operand to the operands whose shadow update reads it;
    an operand is copied when one of those has a shadow and the caller cannot
    prove its memory unchanged until the reverse sweep (``deriv.stable``)."""
    index = {n: k for k, (_, n) in enumerate(PARAMS[deriv.fn.name])}
    dup = {n for (_, n), act in zip(PARAMS[deriv.fn.name], deriv.activity) if act == "dup"}
    return {op: bool(dup & set(users)) and index[op] not in deriv.stable
            for op, users in needs.items()}


def _taped_bytes(recorded) -> str:
    """``%<op>_taped``: the bytes of each operand on the tape (0 when not recorded)."""
    return "".join(f"  %{op}_taped = mul i64 %{op}_bytes, {int(rec)}\n"
                   for op, rec in recorded.items())


def _copies(recorded) -> str:
    """The augmented forward's copies of the recorded operands to the tape."""
    return "".join(f"  call void @llvm.memcpy.p0.p0.i64(ptr %{op}_read, ptr %{op}, "
                   f"i64 %{op}_bytes, i1 false)\n" for op, rec in recorded.items() if rec)


def _operand_sources(recorded, offsets) -> str:
    """``%<op>_read``: where the reverse reads each operand: its copy on the tape
    (at ``offsets[op]`` in ``%slot``) or, not recorded, its own memory."""
    return "".join(f"  %{op}_read = getelementptr i8, ptr %slot, i64 {offsets[op]}\n" if rec
                   else f"  %{op}_read = getelementptr i8, ptr %{op}, i64 0\n"
                   for op, rec in recorded.items())


def _kind_branches(body):
    """IR running ``body(ty, size)`` for the element type of the call."""
    return "".join(f"{ty}:\n{body(ty, size)}  br label %done\n"
                   for ty, size in KINDS.values())


_KIND_SWITCH = ("  switch i8 %kind, label %double [ i8 100, label %double "
                "i8 115, label %float ]\n")


# -- gemm: C = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n ----------------------
_GEMM_CALL = ("call i32 @numba_xxgemm(i8 %kind, i8 {ta}, i8 {tb}, i64 {m}, i64 {n}, i64 {k}, "
              "ptr {alpha}, ptr {a}, i64 {lda}, ptr {b}, i64 {ldb}, ptr {beta}, ptr {c}, "
              "i64 {ldc})")

# Extents (rows, columns) of the stored A, B and C, and their bytes.
_GEMM_EXTENTS = """  %a_n = icmp eq i8 %transa, 110
  %b_n = icmp eq i8 %transb, 110
  %a_rows = select i1 %a_n, i64 %m, i64 %k
  %a_cols = select i1 %a_n, i64 %k, i64 %m
  %b_rows = select i1 %b_n, i64 %k, i64 %n
  %b_cols = select i1 %b_n, i64 %n, i64 %k
  %a_count = call i64 @enzpy.block.count(i64 %a_rows, i64 %a_cols, i64 %lda)
  %b_count = call i64 @enzpy.block.count(i64 %b_rows, i64 %b_cols, i64 %ldb)
  %c_count = call i64 @enzpy.block.count(i64 %m, i64 %n, i64 %ldc)
  %is_float = icmp eq i8 %kind, 115
  %size = select i1 %is_float, i64 4, i64 8
  %a_bytes = mul i64 %a_count, %size
  %b_bytes = mul i64 %b_count, %size
  %c_bytes = mul i64 %c_count, %size
"""
_GEMM_APART = ("  call void @enzpy.product.apart(ptr %c, i64 %c_bytes, ptr %a, i64 %a_bytes, "
               "ptr %b, i64 %b_bytes)\n")
_GEMM_SIZES = _GEMM_EXTENTS + """{taped}  %ab_bytes = add i64 %a_taped, %b_taped
  %scalars = add i64 %ab_bytes, 16
  %padded = add i64 %scalars, 7
  %total = and i64 %padded, -8
"""


def gemm_reverse(deriv) -> str:
    """Aug/rev pair of ``numba_xxgemm``: dA += alpha dC op(B)^T (as A is
    stored), dB += alpha op(A)^T dC, dC *= beta."""
    s = _shadows(deriv, "~s.")
    params = ", ".join(deriv.params)
    call = _GEMM_CALL.format(ta="%transa", tb="%transb", m="%m", n="%n", k="%k",
                             alpha="%alpha", a="%a", lda="%lda", b="%b", ldb="%ldb",
                             beta="%beta", c="%c", ldc="%ldc")
    recorded = _recorded(deriv, {"a": ("b",), "b": ("a",)})
    sizes = _GEMM_SIZES.format(taped=_taped_bytes(recorded))
    operands = _operand_sources(recorded, {"a": "0", "b": "%a_taped"})
    aug = f"""
define internal i32 @"{deriv.aug_name}"({params}) {{
entry:
{sizes}  %slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 %total)
{operands}{_copies(recorded)}  %scalar_slot = getelementptr i8, ptr %slot, i64 %ab_bytes
  call void @llvm.memcpy.p0.p0.i64(ptr %scalar_slot, ptr %alpha, i64 %size, i1 false)
  %beta_slot = getelementptr i8, ptr %scalar_slot, i64 8
  call void @llvm.memcpy.p0.p0.i64(ptr %beta_slot, ptr %beta, i64 %size, i1 false)
{_GEMM_APART}  %status = {call}
  ret i32 %status
}}
"""

    def body(ty, size):
        return f"""  %one.{ty} = alloca {ty}
  store {ty} 1.0, ptr %one.{ty}
  br i1 %no_a, label %db.{ty}, label %da.{ty}
da.{ty}:
  ; transa 'n': dA(m x k) += alpha dC op(B)^T; 't': dA(k x m) += alpha op(B) dC^T
  %flip_b.{ty} = select i1 %b_n, i8 116, i8 110
  %ta1.{ty} = select i1 %a_n, i8 110, i8 %transb
  %tb1.{ty} = select i1 %a_n, i8 %flip_b.{ty}, i8 116
  %m1.{ty} = select i1 %a_n, i64 %m, i64 %k
  %n1.{ty} = select i1 %a_n, i64 %k, i64 %m
  %p1.{ty} = select i1 %a_n, ptr {s["c"]}, ptr %b_read
  %l1.{ty} = select i1 %a_n, i64 %ldc, i64 %ldb
  %q1.{ty} = select i1 %a_n, ptr %b_read, ptr {s["c"]}
  %r1.{ty} = select i1 %a_n, i64 %ldb, i64 %ldc
  %s1.{ty} = {_GEMM_CALL.format(ta=f"%ta1.{ty}", tb=f"%tb1.{ty}", m=f"%m1.{ty}",
                                  n=f"%n1.{ty}", k="%n", alpha="%alpha_copy",
                                  a=f"%p1.{ty}", lda=f"%l1.{ty}", b=f"%q1.{ty}",
                                  ldb=f"%r1.{ty}", beta=f"%one.{ty}", c=s["a"], ldc="%lda")}
  br label %db.{ty}
db.{ty}:
  br i1 %no_b, label %dc.{ty}, label %db_do.{ty}
db_do.{ty}:
  ; transb 'n': dB(k x n) += alpha op(A)^T dC; 't': dB(n x k) += alpha dC^T op(A)
  %flip_a.{ty} = select i1 %a_n, i8 116, i8 110
  %ta2.{ty} = select i1 %b_n, i8 %flip_a.{ty}, i8 116
  %tb2.{ty} = select i1 %b_n, i8 110, i8 %transa
  %m2.{ty} = select i1 %b_n, i64 %k, i64 %n
  %n2.{ty} = select i1 %b_n, i64 %n, i64 %k
  %p2.{ty} = select i1 %b_n, ptr %a_read, ptr {s["c"]}
  %l2.{ty} = select i1 %b_n, i64 %lda, i64 %ldc
  %q2.{ty} = select i1 %b_n, ptr {s["c"]}, ptr %a_read
  %r2.{ty} = select i1 %b_n, i64 %ldc, i64 %lda
  %s2.{ty} = {_GEMM_CALL.format(ta=f"%ta2.{ty}", tb=f"%tb2.{ty}", m=f"%m2.{ty}",
                                  n=f"%n2.{ty}", k="%m", alpha="%alpha_copy",
                                  a=f"%p2.{ty}", lda=f"%l2.{ty}", b=f"%q2.{ty}",
                                  ldb=f"%r2.{ty}", beta=f"%one.{ty}", c=s["b"], ldc="%ldb")}
  br label %dc.{ty}
dc.{ty}:
  %beta.{ty} = load {ty}, ptr %beta_copy
  call void @enzpy.block.scale.{ty}(ptr {s["c"]}, i64 %m, i64 %n, i64 %ldc, {ty} %beta.{ty})
"""
    rev = f"""
define internal void @"{deriv.rev_name}"({params}) {{
entry:
{sizes}  %slot = call ptr @{POP}(ptr %"enzpy.tape", i64 %total)
{operands}  %alpha_copy = getelementptr i8, ptr %slot, i64 %ab_bytes
  %beta_copy = getelementptr i8, ptr %alpha_copy, i64 8
  %no_c = icmp eq ptr {s["c"]}, null
  %no_a = icmp eq ptr {s["a"]}, null
  %no_b = icmp eq ptr {s["b"]}, null
  br i1 %no_c, label %done, label %kinds
kinds:
{_KIND_SWITCH}{_kind_branches(body)}done:
  ret void
}}
"""
    return aug + rev


def gemm_forward(deriv) -> str:
    """Tangent of ``numba_xxgemm``: dC = beta dC + alpha (op(dA) op(B) + op(A) op(dB))."""
    t = _shadows(deriv, "~t.")
    call = _GEMM_CALL.format(ta="%transa", tb="%transb", m="%m", n="%n", k="%k",
                             alpha="%alpha", a="%a", lda="%lda", b="%b", ldb="%ldb",
                             beta="%beta", c="%c", ldc="%ldc")

    def body(ty, size):
        product = (lambda a, b, lab: f"""  %skip.{lab}.{ty} = icmp eq ptr {a if a != "%a" else b}, null
  br i1 %skip.{lab}.{ty}, label %after.{lab}.{ty}, label %do.{lab}.{ty}
do.{lab}.{ty}:
  %r.{lab}.{ty} = {_GEMM_CALL.format(ta="%transa", tb="%transb", m="%m", n="%n", k="%k",
                                       alpha="%alpha", a=a, lda="%lda", b=b, ldb="%ldb",
                                       beta=f"%one.{ty}", c=t["c"], ldc="%ldc")}
  br label %after.{lab}.{ty}
after.{lab}.{ty}:
""")
        return (f"""  %one.{ty} = alloca {ty}
  store {ty} 1.0, ptr %one.{ty}
  %beta.{ty} = load {ty}, ptr %beta
  call void @enzpy.block.scale.{ty}(ptr {t["c"]}, i64 %m, i64 %n, i64 %ldc, {ty} %beta.{ty})
""" + product(t["a"], "%b", "a") + product("%a", t["b"], "b"))
    return f"""
define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{
entry:
{_GEMM_EXTENTS}{_GEMM_APART}  %status = {call}
  %no_c = icmp eq ptr {t["c"]}, null
  br i1 %no_c, label %done, label %kinds
kinds:
{_KIND_SWITCH}{_kind_branches(body)}done:
  ret i32 %status
}}
"""


# -- gemv: y = alpha op(A) x + beta y, A m x n ------------------------------------------
_GEMV_CALL = ("call i32 @numba_xxgemv(i8 %kind, i8 {trans}, i64 %m, i64 %n, ptr {alpha}, "
              "ptr {a}, i64 %lda, ptr {x}, ptr {beta}, ptr {y})")
_GEMV_EXTENTS = """  %t_n = icmp eq i8 %trans, 110
  %x_len = select i1 %t_n, i64 %n, i64 %m
  %y_len = select i1 %t_n, i64 %m, i64 %n
  %a_count = call i64 @enzpy.block.count(i64 %m, i64 %n, i64 %lda)
  %is_float = icmp eq i8 %kind, 115
  %size = select i1 %is_float, i64 4, i64 8
  %a_bytes = mul i64 %a_count, %size
  %x_bytes = mul i64 %x_len, %size
  %y_bytes = mul i64 %y_len, %size
"""
_GEMV_APART = ("  call void @enzpy.product.apart(ptr %y, i64 %y_bytes, ptr %a, i64 %a_bytes, "
               "ptr %x, i64 %x_bytes)\n")
_GEMV_SIZES = _GEMV_EXTENTS + """{taped}  %ax_bytes = add i64 %a_taped, %x_taped
  %scalars = add i64 %ax_bytes, 16
  %padded = add i64 %scalars, 7
  %total = and i64 %padded, -8
"""


def gemv_reverse(deriv) -> str:
    """Aug/rev pair of ``numba_xxgemv``: dx += alpha op(A)^T dy, dA += alpha
    dy x^T (trans 'n') or alpha x dy^T ('t'), dy *= beta."""
    s = _shadows(deriv, "~s.")
    params = ", ".join(deriv.params)
    recorded = _recorded(deriv, {"a": ("x",), "x": ("a",)})
    sizes = _GEMV_SIZES.format(taped=_taped_bytes(recorded))
    operands = _operand_sources(recorded, {"a": "0", "x": "%a_taped"})
    aug = f"""
define internal i32 @"{deriv.aug_name}"({params}) {{
entry:
{sizes}  %slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 %total)
{operands}{_copies(recorded)}  %alpha_copy = getelementptr i8, ptr %slot, i64 %ax_bytes
  call void @llvm.memcpy.p0.p0.i64(ptr %alpha_copy, ptr %alpha, i64 %size, i1 false)
  %beta_copy = getelementptr i8, ptr %alpha_copy, i64 8
  call void @llvm.memcpy.p0.p0.i64(ptr %beta_copy, ptr %beta, i64 %size, i1 false)
{_GEMV_APART}  %status = {_GEMV_CALL.format(trans="%trans", alpha="%alpha", a="%a", x="%x",
                                             beta="%beta", y="%y")}
  ret i32 %status
}}
"""

    def body(ty, size):
        return f"""  %one.{ty} = alloca {ty}
  store {ty} 1.0, ptr %one.{ty}
  br i1 %no_x, label %da.{ty}, label %dx.{ty}
dx.{ty}:
  %flip.{ty} = select i1 %t_n, i8 116, i8 110
  %s1.{ty} = {_GEMV_CALL.format(trans=f"%flip.{ty}", alpha="%alpha_copy", a="%a_read",
                                  x=s["y"], beta=f"%one.{ty}", y=s["x"])}
  br label %da.{ty}
da.{ty}:
  br i1 %no_a, label %dy.{ty}, label %da_do.{ty}
da_do.{ty}:
  ; dA(m x n) += alpha p q^T, (p, q) = (dy, x) for 'n', (x, dy) for 't'
  %p.{ty} = select i1 %t_n, ptr {s["y"]}, ptr %x_read
  %q.{ty} = select i1 %t_n, ptr %x_read, ptr {s["y"]}
  %alpha.{ty} = load {ty}, ptr %alpha_copy
  call void @enzpy.block.rank1.{ty}(ptr {s["a"]}, i64 %m, i64 %n, i64 %lda, {ty} %alpha.{ty}, ptr %p.{ty}, ptr %q.{ty})
  br label %dy.{ty}
dy.{ty}:
  %beta.{ty} = load {ty}, ptr %beta_copy
  call void @enzpy.block.scale.{ty}(ptr {s["y"]}, i64 %y_len, i64 1, i64 %y_len, {ty} %beta.{ty})
"""
    rev = f"""
define internal void @"{deriv.rev_name}"({params}) {{
entry:
{sizes}  %slot = call ptr @{POP}(ptr %"enzpy.tape", i64 %total)
{operands}  %alpha_copy = getelementptr i8, ptr %slot, i64 %ax_bytes
  %beta_copy = getelementptr i8, ptr %alpha_copy, i64 8
  %no_y = icmp eq ptr {s["y"]}, null
  %no_a = icmp eq ptr {s["a"]}, null
  %no_x = icmp eq ptr {s["x"]}, null
  br i1 %no_y, label %done, label %kinds
kinds:
{_KIND_SWITCH}{_kind_branches(body)}done:
  ret void
}}
"""
    return aug + rev


def gemv_forward(deriv) -> str:
    """Tangent of ``numba_xxgemv``: dy = beta dy + alpha (op(dA) x + op(A) dx)."""
    t = _shadows(deriv, "~t.")

    def body(ty, size):
        product = (lambda a, x, lab, skip: f"""  %skip.{lab}.{ty} = icmp eq ptr {skip}, null
  br i1 %skip.{lab}.{ty}, label %after.{lab}.{ty}, label %do.{lab}.{ty}
do.{lab}.{ty}:
  %r.{lab}.{ty} = {_GEMV_CALL.format(trans="%trans", alpha="%alpha", a=a, x=x,
                                       beta=f"%one.{ty}", y=t["y"])}
  br label %after.{lab}.{ty}
after.{lab}.{ty}:
""")
        return (f"""  %one.{ty} = alloca {ty}
  store {ty} 1.0, ptr %one.{ty}
  %beta.{ty} = load {ty}, ptr %beta
  call void @enzpy.block.scale.{ty}(ptr {t["y"]}, i64 %y_len, i64 1, i64 %y_len, {ty} %beta.{ty})
""" + product(t["a"], "%x", "a", t["a"]) + product("%a", t["x"], "x", t["x"]))
    call = _GEMV_CALL.format(trans="%trans", alpha="%alpha", a="%a", x="%x", beta="%beta",
                             y="%y")
    return f"""
define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{
entry:
{_GEMV_EXTENTS}{_GEMV_APART}  %status = {call}
  %no_y = icmp eq ptr {t["y"]}, null
  br i1 %no_y, label %done, label %kinds
kinds:
{_KIND_SWITCH}{_kind_branches(body)}done:
  ret i32 %status
}}
"""


# -- dot: out = sum a b ---------------------------------------------------------------------
def dot_reverse(deriv) -> str:
    """Aug/rev pair of ``numba_xxdot``: a' += g b, b' += g a."""
    s = _shadows(deriv, "~s.")
    params = ", ".join(deriv.params)
    recorded = _recorded(deriv, {"a": ("b",), "b": ("a",)})

    def tape_slot(take):
        return f"""  %is_double = icmp eq i8 %kind, 100
  %size = select i1 %is_double, i64 8, i64 4
  %a_bytes = mul i64 %n, %size
  %b_bytes = mul i64 %n, %size
{_taped_bytes(recorded)}  %ab_bytes = add i64 %a_taped, %b_taped
  %padded = add i64 %ab_bytes, 7
  %total = and i64 %padded, -8
  %slot = call ptr @{take}(ptr %"enzpy.tape", i64 %total)
{_operand_sources(recorded, {"a": "0", "b": "%a_taped"})}"""
    aug = f"""
define internal i32 @"{deriv.aug_name}"({params}) {{
entry:
  %status = call i32 @numba_xxdot(i8 %kind, i8 %conj, i64 %n, ptr %a, ptr %b, ptr %out)
{tape_slot(PUSH)}{_copies(recorded)}  ret i32 %status
}}
"""
    branches = "".join(f"""{ty}:
  %g.{ty} = load {ty}, ptr {s["out"]}
  store {ty} 0.0, ptr {s["out"]}
  call void @enzpy.axpy.{ty}(i64 %n, {ty} %g.{ty}, ptr %b_read, ptr {s["a"]})
  call void @enzpy.axpy.{ty}(i64 %n, {ty} %g.{ty}, ptr %a_read, ptr {s["b"]})
  br label %done
""" for ty in ("double", "float"))
    rev = f"""
define internal void @"{deriv.rev_name}"({params}) {{
entry:
{tape_slot(POP)}  %no_out = icmp eq ptr {s["out"]}, null
  br i1 %no_out, label %done, label %has_out
has_out:
  br i1 %is_double, label %double, label %float
{branches}done:
  ret void
}}
"""
    return aug + rev


def dot_forward(deriv) -> str:
    """Tangent of ``numba_xxdot``: out' = dot(a', b) + dot(a, b')."""
    t = {name: (local(tangent_name(name)) if act == "dup" else "null")
         for (_, name), act in zip(DOT_PARAMS, deriv.activity)}
    dout = t["out"]
    branches = "".join(f"""{ty}:
  store {ty} 0.0, ptr {dout}
  call void @enzpy.fwd.dot.{ty}(ptr {dout}, i64 %n, ptr {t["a"]}, ptr %b)
  call void @enzpy.fwd.dot.{ty}(ptr {dout}, i64 %n, ptr {t["b"]}, ptr %a)
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


def _block_scale(ty: str) -> str:
    row = f"""  %p = getelementptr {ty}, ptr %base, i64 %i
  %v = load {ty}, ptr %p
  %scaled = fmul {ty} %v, %s
  %zero = fcmp oeq {ty} %s, 0.0
  %w = select i1 %zero, {ty} 0.0, {ty} %scaled
  store {ty} %w, ptr %p"""
    column = f"""  %offset = mul i64 %j, %ld
  %base = getelementptr {ty}, ptr %a, i64 %offset
{counted_loop("rows.loop", "%rows", row, "column.end")}column.end:"""
    return f"""
; A (rows x cols, leading dimension ld, column-major) *= s; zeroed when s is 0
; (BLAS leaves beta * C unread when beta is 0). Nothing when A is null.
define internal void @enzpy.block.scale.{ty}(ptr %a, i64 %rows, i64 %cols, i64 %ld, {ty} %s) {{
entry:
  %null = icmp eq ptr %a, null
  br i1 %null, label %exit, label %go
go:
{counted_loop("columns.loop", "%cols", column, "exit", index="j")}exit:
  ret void
}}
"""


def _block_rank1(ty: str) -> str:
    row = f"""  %pp = getelementptr {ty}, ptr %p, i64 %i
  %pi = load {ty}, ptr %pp
  %ap = getelementptr {ty}, ptr %base, i64 %i
  %av = load {ty}, ptr %ap
  %term = fmul {ty} %pi, %sq
  %sum = fadd {ty} %av, %term
  store {ty} %sum, ptr %ap"""
    column = f"""  %qp = getelementptr {ty}, ptr %q, i64 %j
  %qj = load {ty}, ptr %qp
  %sq = fmul {ty} %alpha, %qj
  %offset = mul i64 %j, %ld
  %base = getelementptr {ty}, ptr %a, i64 %offset
{counted_loop("rows.loop", "%rows", row, "column.end")}column.end:"""
    return f"""
; A (rows x cols, leading dimension ld, column-major) += alpha p q^T. A loop, not
; BLAS: the library's ger (and gemm with k = 1) runs 2-3x slower than this loop,
; which the vectoriser turns into one streaming pass over A.
define internal void @enzpy.block.rank1.{ty}(ptr %a, i64 %rows, i64 %cols, i64 %ld, {ty} %alpha, ptr %p, ptr %q) {{
entry:
{counted_loop("columns.loop", "%cols", column, "exit", index="j")}exit:
  ret void
}}
"""


# The helpers both modes' BLAS rules call.
BLAS_RUNTIME = (_block_scale("double") + _block_scale("float") + _block_rank1("double")
                + _block_rank1("float") + f"""
@{PRODUCT_OVERLAPS} = external global i64

; Count a product whose result bytes [c, c + c_bytes) meet an operand's.
define internal void @enzpy.product.apart(ptr %c, i64 %c_bytes, ptr %a, i64 %a_bytes, ptr %b, i64 %b_bytes) {{
entry:
  %c0 = ptrtoint ptr %c to i64
  %c1 = add i64 %c0, %c_bytes
  %a0 = ptrtoint ptr %a to i64
  %a1 = add i64 %a0, %a_bytes
  %b0 = ptrtoint ptr %b to i64
  %b1 = add i64 %b0, %b_bytes
  %ca = icmp ult i64 %c0, %a1
  %ac = icmp ult i64 %a0, %c1
  %meets_a = and i1 %ca, %ac
  %cb = icmp ult i64 %c0, %b1
  %bc = icmp ult i64 %b0, %c1
  %meets_b = and i1 %cb, %bc
  %meets_ab = or i1 %meets_a, %meets_b
  %c_some = icmp ne i64 %c_bytes, 0
  %a_some = icmp ne i64 %a_bytes, 0
  %b_some = icmp ne i64 %b_bytes, 0
  %ab_some = and i1 %a_some, %b_some
  %some = and i1 %c_some, %ab_some
  %meets = and i1 %meets_ab, %some
  br i1 %meets, label %count, label %done
count:
  %old = atomicrmw add ptr @{PRODUCT_OVERLAPS}, i64 1 monotonic
  br label %done
done:
  ret void
}}
""" + """
; Elements spanned by a column-major block: (cols - 1) * ld + rows, 0 if empty.
define internal i64 @enzpy.block.count(i64 %rows, i64 %cols, i64 %ld) {
entry:
  %empty_r = icmp sle i64 %rows, 0
  %empty_c = icmp sle i64 %cols, 0
  %empty = or i1 %empty_r, %empty_c
  %c1 = sub i64 %cols, 1
  %lead = mul i64 %c1, %ld
  %count = add i64 %lead, %rows
  %r = select i1 %empty, i64 0, i64 %count
  ret i64 %r
}
""")
BLAS_DECLARATIONS = {
    "numba_xxgemm": "declare i32 @numba_xxgemm(i8, i8, i8, i64, i64, i64, ptr, ptr, i64, ptr, "
                    "i64, ptr, ptr, i64)",
    "numba_xxgemv": "declare i32 @numba_xxgemv(i8, i8, i64, i64, ptr, ptr, i64, ptr, ptr, ptr)",
}
