"""Small IR helpers the derivative code calls: adjoints of bulk memory operations.

A null shadow pointer means the memory carries no derivative: the helpers then
do nothing to it.
"""

from .analysis import RESIZERS

FLOAT_BYTES = {"double": 8, "float": 4}


def counted_loop(label: str, count: str, body: str, exit: str, index: str = "i",
                 reverse: bool = False) -> str:
    """IR text of ``for index in range(count)`` (``reversed(range(count))`` when
    ``reverse``), to be placed where the current block ends: blocks ``label``
    (the test), ``label.body`` (``body``, which may branch but must fall through
    at its end) and ``label.latch``, then control goes to ``exit``. Every loop
    of the runtime's IR is written with it (one shape, one place to get the
    phi and the bounds right)."""
    i = f"%{index}"
    if reverse:     # i.left counts the iterations still to run; i = i.left - 1
        test = (f"  {i}.left = phi i64 [ {count}, %{label}.pre ], [ {i}, %{label}.latch ]\n"
                f"  {i}.done = icmp sle i64 {i}.left, 0\n")
        first, step = f"  {i} = sub i64 {i}.left, 1\n", ""
    else:
        test = (f"  {i} = phi i64 [ 0, %{label}.pre ], [ {i}.next, %{label}.latch ]\n"
                f"  {i}.done = icmp sge i64 {i}, {count}\n")
        first, step = "", f"  {i}.next = add i64 {i}, 1\n"
    return (f"  br label %{label}.pre\n{label}.pre:\n  br label %{label}\n{label}:\n{test}"
            f"  br i1 {i}.done, label %{exit}, label %{label}.body\n{label}.body:\n{first}"
            f"{body.rstrip()}\n  br label %{label}.latch\n{label}.latch:\n{step}"
            f"  br label %{label}\n")


# Offset of ``size`` in Numba's NRT_MemInfo {refct, dtor, dtor_info, data, size, ...}.
_MEMINFO_SIZE_OFFSET = 32

RESIZE_SHADOW_FUNCTION = "enzpy.varsize.resize"


def _resize_shadow(resizer: str) -> str:
    """The shadow of a variable-size allocation resized by ``resizer`` (Numba's varsize
    realloc, which keeps the bytes, or alloc, which does not): the kept bytes stay, the
    new ones are zero; a realloc to fewer bytes leaves it as it is. Nothing when the
    shadow is null. Calls ``resizer`` directly, so that second order differentiates
    this function like the list code it mirrors."""
    keeps = "true" if resizer.endswith("realloc") else "false"
    return f"""
declare noalias ptr @{resizer}(ptr, i64)

define internal ptr @"{RESIZE_SHADOW_FUNCTION}.{resizer}"(ptr %mi, i64 %size) {{
entry:
  %null = icmp eq ptr %mi, null
  br i1 %null, label %none, label %go
none:
  ret ptr null
go:
  %sizep = getelementptr inbounds i8, ptr %mi, i64 {_MEMINFO_SIZE_OFFSET}
  %old = load i64, ptr %sizep
  %kept = select i1 {keeps}, i64 %old, i64 0
  ; A shrinking list (pop) keeps its shadow's block whole: the reverse sweep
  ; accumulates into the elements removed, through the block the shadow has then.
  %shrinks = icmp ult i64 %size, %kept
  br i1 %shrinks, label %unchanged, label %resize
unchanged:
  %same = call ptr @NRT_MemInfo_data_fast(ptr %mi)
  ret ptr %same
resize:
  %result = call ptr @{resizer}(ptr %mi, i64 %size)
  %ok = icmp ne ptr %result, null
  ; Numba declares the resizers ``noalias``: had the zeroing gone through their
  ; result, LLVM would see stores to a fresh block nobody reads and delete them.
  ; The block is read back through the MemInfo, so it is written through it. (Asked
  ; of the runtime, not loaded: differentiated again, the reverse sweep asks again
  ; and gets the block the list has then, not one a later growth freed.)
  %data = call ptr @NRT_MemInfo_data_fast(ptr %mi)
  %grew = icmp ugt i64 %size, %kept
  %zero = and i1 %grew, %ok
  br i1 %zero, label %fill, label %done
fill:
  %tail = getelementptr inbounds i8, ptr %data, i64 %kept
  %n = sub i64 %size, %kept
  call void @llvm.memset.p0.i64(ptr %tail, i8 0, i64 %n, i1 false)
  br label %done
done:
  %returned = select i1 %ok, ptr %data, ptr null
  ret ptr %returned
}}
"""


VARSIZE_FREE = "NRT_MemInfo_varsize_free"
FREE_SHADOW_FUNCTION = "enzpy.varsize.free"
# Both modes resize (see analysis.RESIZERS) and free a shadow list's data with the
# primal's (see memory.varsize_free_type).
RESIZE_SHADOW = "\ndeclare ptr @NRT_MemInfo_data_fast(ptr)\n" + \
    "".join(_resize_shadow(resizer) for resizer in RESIZERS)
FREE_SHADOW = f"""
declare void @{VARSIZE_FREE}(ptr, ptr)

define internal void @{FREE_SHADOW_FUNCTION}(ptr %mi, ptr %data) {{
entry:
  %null = icmp eq ptr %mi, null
  br i1 %null, label %done, label %go
go:
  call void @{VARSIZE_FREE}(ptr %mi, ptr %data)
  br label %done
done:
  ret void
}}
"""


def free_shadow(e, shadow_meminfo, shadow_data):
    """Emit the shadow's free beside a call to ``VARSIZE_FREE``."""
    e.call(FREE_SHADOW_FUNCTION, "void", [shadow_meminfo, shadow_data])


def resize_shadow(e, ins, shadow_meminfo):
    """Emit the shadow's resize beside ``ins``, a call to one of ``RESIZERS``."""
    return e.call(f"{RESIZE_SHADOW_FUNCTION}.{ins.callee}", "ptr", [shadow_meminfo, ins.args[1]])


def _memcpy_adjoint(ty: str) -> str:
    size = FLOAT_BYTES[ty]

    def body(i, tag):
        return f"""  %pd.{tag} = getelementptr {ty}, ptr %dst, i64 {i}
  %d.{tag} = load {ty}, ptr %pd.{tag}
  store {ty} 0.0, ptr %pd.{tag}
  br i1 %src_null, label %next.{tag}, label %accumulate.{tag}
accumulate.{tag}:
  %ps.{tag} = getelementptr {ty}, ptr %src, i64 {i}
  %s.{tag} = load {ty}, ptr %ps.{tag}
  %t.{tag} = fadd {ty} %s.{tag}, %d.{tag}
  store {ty} %t.{tag}, ptr %ps.{tag}
  br label %next.{tag}
next.{tag}:"""
    return f"""
; The reverse of memcpy(dst, src, n) on {ty} data: src' += dst'; dst' = 0. For a
; memmove whose ranges overlap, each dst' element is read before the loop writes
; it: from the end down when dst lies below src, from the start up otherwise.
define internal void @enzpy.memcpy.adjoint.{ty}(ptr %dst, ptr %src, i64 %n) {{
entry:
  %count = udiv i64 %n, {size}
  %dst_null = icmp eq ptr %dst, null
  br i1 %dst_null, label %exit, label %check_src
check_src:
  %src_null = icmp eq ptr %src, null
  %below = icmp ult ptr %dst, %src
  br i1 %below, label %down.start, label %up.start
up.start:
{counted_loop("up", "%count", body("%i", "up"), "exit")}down.start:
{counted_loop("down", "%count", body("%j", "down"), "exit", index="j", reverse=True)}exit:
  ret void
}}
"""


MEMORY_RUNTIME = _memcpy_adjoint("double") + _memcpy_adjoint("float") + RESIZE_SHADOW + \
    FREE_SHADOW + """
; The reverse of memset(dst, _, n): the overwritten bytes carry no adjoint.
define internal void @enzpy.memzero(ptr %dst, i64 %n) {
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





def _axpy(ty: str) -> str:
    body = f"""  %px = getelementptr {ty}, ptr %x, i64 %i
  %py = getelementptr {ty}, ptr %y, i64 %i
  %vx = load {ty}, ptr %px
  %vy = load {ty}, ptr %py
  %m = fmul {ty} %alpha, %vx
  %s = fadd {ty} %vy, %m
  store {ty} %s, ptr %py"""
    return f"""
; y += alpha * x over n {ty}s; nothing when y is null (no shadow).
define internal void @enzpy.axpy.{ty}(i64 %n, {ty} %alpha, ptr %x, ptr %y) {{
entry:
  %null = icmp eq ptr %y, null
  br i1 %null, label %exit, label %go
go:
{counted_loop("loop", "%n", body, "exit")}exit:
  ret void
}}
"""


MEMORY_RUNTIME += _axpy("double") + _axpy("float")
