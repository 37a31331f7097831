"""The tape: a LIFO byte stack passed as a hidden pointer to derivative functions.

Layout ``{ ptr data, i64 top, i64 capacity, i64 peak, i32 status, ptr excinfo,
ptr arena, i64 arena_allowed, ptr arena_spare }``;
``peak`` is the largest ``top`` of the call, which ``autodiff`` reports (the entry
point sets it between the sweeps: the forward sweep only pushes, the reverse only pops);
``status``/``excinfo`` hold the first exception raised during the reverse sweep
(by a user's derivative rule), which the entry point raises after it. The augmented forward
reserves a block of slots per basic-block execution and stores into them; the
reverse sweep releases the same block in reverse order. Growth (``realloc``) is
the rare, out-of-line branch.

The shadows of the arrays a call allocates live until the reverse sweep is done
with them, which for a loop allocating an array per step means every step's
shadow at once. When the entry point allows it (no argument through which a
shadow could outlive the call: only arrays and scalars are Duplicated), they
are carved from the call's *arena*, chunks freed together at the call's end,
instead of one Numba allocation each (a malloc, a free and a cache-missing
reference count per shadow). An arena shadow is a meminfo like any other,
whose count starts so high that no decref brings it to zero. The chunks of a
call are kept for the next one (up to ``ARENA_KEEP_LIMIT`` bytes), as the tape is:
memory the process already touched costs no page faults.
"""

from .ir import Value, fields_of

TAPE_TYPE = "{ ptr, i64, i64, i64, i32, ptr, ptr, i64, ptr }"
SLOT = 8          # every recorded scalar takes one 8-byte slot
PUSH = "enzpy.tape.reserve"
POP = "enzpy.tape.release"
FREE = "enzpy.tape.free"
ACQUIRE = "enzpy.tape.acquire"
SINK_READ = "enzpy.zeros"       # reads through a null shadow land here (never written)
SINK_WRITE = "enzpy.trash"      # writes through a null shadow land here
HEADER = 16                    # bytes before the data: the capacity, for reuse
KEEP_LIMIT = 64 << 20          # a tape up to this size is kept for the next call
ARENA_KEEP_LIMIT = 16 << 20    # and an arena up to this size
PEAK_FIELD = 3
STATUS_FIELD = 4
EXCINFO_FIELD = 5
ARENA_FIELD = 6
ARENA_ALLOWED_FIELD = 7
ARENA_SPARE_FIELD = 8          # chunks of an earlier call, not yet carved from
RAISE = "enzpy.tape.raise"
SHADOW_ARRAY = "enzpy.arena.array"
SHADOW_HOLD = "enzpy.arena.hold"        # the reverse sweep's reference to a shadow array
SHADOW_DROP = "enzpy.arena.drop"
_ARENA_CHUNK = 32 << 10        # the first chunk; each next one doubles, up to 1 MiB
_NEVER_FREED = 1 << 60         # an arena meminfo's reference count


def _counted_unless_arena(name: str, refcount: str) -> str:
    """IR of ``name(tape, meminfo)``: ``refcount(meminfo)`` unless the call's
    shadow arrays come from its arena."""
    return f"""define internal void @{name}(ptr %t, ptr %mi) alwaysinline {{
entry:
  %allowedp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_ALLOWED_FIELD}
  %allowed = load i64, ptr %allowedp
  %numba = icmp eq i64 %allowed, 0
  br i1 %numba, label %count, label %done
count:
  call void @{refcount}(ptr %mi)
  br label %done
done:
  ret void
}}"""


# ``grow`` never sees the tape struct: with the struct only reached through
# the (noalias) tape argument, LLVM keeps ``top``/``capacity`` in registers
# across a loop and the common case of a push is an add, a compare and a store.
RUNTIME = f"""
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare ptr @calloc(i64, i64)
declare ptr @malloc(i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.trap()
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare ptr @NRT_MemInfo_data_fast(ptr)

define internal {{ ptr, i64 }} @enzpy.tape.grow(ptr %data, i64 %cap, i64 %need) noinline {{
  %dbl = shl i64 %cap, 1
  %c1 = icmp ugt i64 %dbl, %need
  %n1 = select i1 %c1, i64 %dbl, i64 %need
  %c2 = icmp ugt i64 %n1, 4096
  %n2 = select i1 %c2, i64 %n1, i64 4096
  %isnull = icmp eq ptr %data, null
  %base = getelementptr i8, ptr %data, i64 -{HEADER}
  %old = select i1 %isnull, ptr null, ptr %base
  %bytes = add i64 %n2, {HEADER}
  %new = call ptr @realloc(ptr %old, i64 %bytes)
  %newdata = getelementptr inbounds i8, ptr %new, i64 {HEADER}
  %r0 = insertvalue {{ ptr, i64 }} undef, ptr %newdata, 0
  %r1 = insertvalue {{ ptr, i64 }} %r0, i64 %n2, 1
  ret {{ ptr, i64 }} %r1
}}

define internal ptr @{PUSH}(ptr noalias %t, i64 %n) alwaysinline {{
entry:
  %topp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 1
  %capp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 2
  %top = load i64, ptr %topp
  %cap = load i64, ptr %capp
  %new = add i64 %top, %n
  %full = icmp ugt i64 %new, %cap
  br i1 %full, label %grow, label %ok, !prof !{{!"branch_weights", i32 1, i32 2000}}
grow:
  %old = load ptr, ptr %t
  %grown = call {{ ptr, i64 }} @enzpy.tape.grow(ptr %old, i64 %cap, i64 %new)
  %gdata = extractvalue {{ ptr, i64 }} %grown, 0
  %gcap = extractvalue {{ ptr, i64 }} %grown, 1
  store ptr %gdata, ptr %t
  store i64 %gcap, ptr %capp
  br label %ok
ok:
  store i64 %new, ptr %topp
  %data = load ptr, ptr %t
  %slot = getelementptr inbounds i8, ptr %data, i64 %top
  ret ptr %slot
}}

define internal ptr @{POP}(ptr noalias %t, i64 %n) alwaysinline {{
  %topp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 1
  %top = load i64, ptr %topp
  %new = sub i64 %top, %n
  store i64 %new, ptr %topp
  %data = load ptr, ptr %t
  %slot = getelementptr inbounds i8, ptr %data, i64 %new
  ret ptr %slot
}}

@enzpy.tape.spare = internal global ptr null
@{SINK_READ} = internal constant [1024 x i8] zeroinitializer, align 64
@{SINK_WRITE} = internal global [1024 x i8] zeroinitializer, align 64

; Keep the first exception (status, excinfo) raised during the reverse sweep.
define internal void @{RAISE}(ptr %t, i32 %status, ptr %excinfo) {{
entry:
  %ok = icmp eq i32 %status, 0
  %none = icmp eq i32 %status, -2
  %fine = or i1 %ok, %none
  %statusp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {STATUS_FIELD}
  %old = load i32, ptr %statusp
  %first = icmp eq i32 %old, 0
  br i1 %fine, label %done, label %error
error:
  br i1 %first, label %record, label %done
record:
  store i32 %status, ptr %statusp
  %excp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {EXCINFO_FIELD}
  store ptr %excinfo, ptr %excp
  br label %done
done:
  ret void
}}

; Start a call's tape on the buffer the previous call left, if any.
define internal void @{ACQUIRE}(ptr %t) {{
entry:
  %chunks = atomicrmw xchg ptr @enzpy.arena.spare, ptr null acq_rel
  %chunksp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_SPARE_FIELD}
  store ptr %chunks, ptr %chunksp
  %spare = atomicrmw xchg ptr @enzpy.tape.spare, ptr null acq_rel
  %has = icmp ne ptr %spare, null
  br i1 %has, label %reuse, label %fresh
reuse:
  %cap = load i64, ptr %spare
  %data = getelementptr inbounds i8, ptr %spare, i64 {HEADER}
  store ptr %data, ptr %t
  %capp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 2
  store i64 %cap, ptr %capp
  ret void
fresh:
  ret void
}}

; A zeroed array of size bytes for a shadow: a meminfo (48 bytes) and the data
; carved from the arena, 16-byte aligned, or Numba's allocation when the arena
; is not allowed. Chunk layout: {{ ptr next, i64 used, i64 capacity }}, 32 bytes,
; then the carved pieces.
define internal ptr @{SHADOW_ARRAY}(ptr %t, i64 %size, i32 %align) {{
entry:
  %allowedp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_ALLOWED_FIELD}
  %allowed = load i64, ptr %allowedp
  %use = icmp ne i64 %allowed, 0
  br i1 %use, label %arena, label %numba
numba:
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align)
  %mdata = call ptr @NRT_MemInfo_data_fast(ptr %mi)
  call void @llvm.memset.p0.i64(ptr %mdata, i8 0, i64 %size, i1 false)
  ret ptr %mi
arena:
  %ap = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_FIELD}
  %chunk = load ptr, ptr %ap
  %padded = add i64 %size, 63
  %need = and i64 %padded, -16
  %none = icmp eq ptr %chunk, null
  br i1 %none, label %grow, label %check
check:
  %usedp = getelementptr inbounds i8, ptr %chunk, i64 8
  %used = load i64, ptr %usedp
  %capp = getelementptr inbounds i8, ptr %chunk, i64 16
  %cap = load i64, ptr %capp
  %end = add i64 %used, %need
  %fits = icmp ule i64 %end, %cap
  br i1 %fits, label %carve, label %grow
grow:
  %last = phi i64 [ {_ARENA_CHUNK // 2}, %arena ], [ %cap, %check ]
  %double = shl i64 %last, 1
  %capped = call i64 @llvm.umin.i64(i64 %double, i64 {1 << 20})
  %fit = add i64 %need, 32
  %want = call i64 @llvm.umax.i64(i64 %capped, i64 %fit)
  %sparep = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_SPARE_FIELD}
  %spare = load ptr, ptr %sparep
  %has = icmp ne ptr %spare, null
  br i1 %has, label %try, label %fresh
try:
  %scapp = getelementptr inbounds i8, ptr %spare, i64 16
  %scap = load i64, ptr %scapp
  %roomy = icmp uge i64 %scap, %fit
  br i1 %roomy, label %reuse, label %fresh
reuse:
  %rest = load ptr, ptr %spare
  store ptr %rest, ptr %sparep
  br label %link
fresh:
  %allocated = call ptr @malloc(i64 %want)
  %failed = icmp eq ptr %allocated, null
  br i1 %failed, label %oom, label %sized
oom:
  call void @llvm.trap()
  unreachable
sized:
  %ncapp = getelementptr inbounds i8, ptr %allocated, i64 16
  store i64 %want, ptr %ncapp
  br label %link
link:
  %new = phi ptr [ %spare, %reuse ], [ %allocated, %sized ]
  store ptr %chunk, ptr %new
  store ptr %new, ptr %ap
  br label %carve
carve:
  %c = phi ptr [ %chunk, %check ], [ %new, %link ]
  %u = phi i64 [ %used, %check ], [ 32, %link ]
  %cusedp = getelementptr inbounds i8, ptr %c, i64 8
  %next = add i64 %u, %need
  store i64 %next, ptr %cusedp
  %piece = getelementptr inbounds i8, ptr %c, i64 %u
  call void @llvm.memset.p0.i64(ptr %piece, i8 0, i64 %need, i1 false)
  store i64 {_NEVER_FREED}, ptr %piece
  %datap = getelementptr inbounds i8, ptr %piece, i64 24
  %data = getelementptr inbounds i8, ptr %piece, i64 48
  store ptr %data, ptr %datap
  %sizep = getelementptr inbounds i8, ptr %piece, i64 32
  store i64 %size, ptr %sizep
  ret ptr %piece
}}

; The reverse sweep's reference to a shadow array from enzpy.arena.array (an
; arena's needs none: not touching it spares a cache miss per shadow).
{_counted_unless_arena(SHADOW_HOLD, "NRT_incref")}
{_counted_unless_arena(SHADOW_DROP, "NRT_decref")}
declare void @NRT_incref(ptr)
declare void @NRT_decref(ptr)
declare i64 @llvm.umin.i64(i64, i64)
declare i64 @llvm.umax.i64(i64, i64)

@enzpy.arena.spare = internal global ptr null

; The call's arena chunks (carved from, and spare) go back to enzpy.arena.spare
; for the next call, up to {ARENA_KEEP_LIMIT} bytes; the rest, and chunks another call
; left there meanwhile, are freed.
define internal void @enzpy.arena.free(ptr %t) {{
entry:
  %ap = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_FIELD}
  %sparep = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 {ARENA_SPARE_FIELD}
  %used = load ptr, ptr %ap
  %spare = load ptr, ptr %sparep
  store ptr null, ptr %ap
  store ptr null, ptr %sparep
  br label %move
move:                                   ; the carved chunks onto the spare ones
  %c = phi ptr [ %used, %entry ], [ %after, %moved ]
  %kept = phi ptr [ %spare, %entry ], [ %c, %moved ]
  %all = icmp eq ptr %c, null
  br i1 %all, label %measure, label %moved
moved:
  %after = load ptr, ptr %c
  store ptr %kept, ptr %c
  br label %move
measure:
  br label %count
count:
  %m = phi ptr [ %kept, %measure ], [ %mnext, %counted ]
  %total = phi i64 [ 0, %measure ], [ %sum, %counted ]
  %end = icmp eq ptr %m, null
  br i1 %end, label %decide, label %counted
counted:
  %mcapp = getelementptr inbounds i8, ptr %m, i64 16
  %mcap = load i64, ptr %mcapp
  %sum = add i64 %total, %mcap
  %mnext = load ptr, ptr %m
  br label %count
decide:
  %small = icmp ule i64 %total, {ARENA_KEEP_LIMIT}
  br i1 %small, label %keep, label %drop
keep:
  %old = atomicrmw xchg ptr @enzpy.arena.spare, ptr %kept acq_rel
  br label %free
drop:
  br label %free
free:
  %first = phi ptr [ %old, %keep ], [ %kept, %drop ]
  br label %loop
loop:
  %f = phi ptr [ %first, %free ], [ %fnext, %body ]
  %done = icmp eq ptr %f, null
  br i1 %done, label %exit, label %body
body:
  %fnext = load ptr, ptr %f
  call void @free(ptr %f)
  br label %loop
exit:
  ret void
}}

; Keep the buffer for the next call (up to {KEEP_LIMIT} bytes); free the rest,
; and the arena.
define internal void @{FREE}(ptr %t) {{
entry:
  call void @enzpy.arena.free(ptr %t)
  %data = load ptr, ptr %t
  %isnull = icmp eq ptr %data, null
  br i1 %isnull, label %done, label %release
release:
  %base = getelementptr i8, ptr %data, i64 -{HEADER}
  %capp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 2
  %cap = load i64, ptr %capp
  %small = icmp ule i64 %cap, {KEEP_LIMIT}
  br i1 %small, label %keep, label %drop
keep:
  store i64 %cap, ptr %base
  %old = atomicrmw xchg ptr @enzpy.tape.spare, ptr %base acq_rel
  call void @free(ptr %old)
  br label %done
drop:
  call void @free(ptr %base)
  br label %done
done:
  ret void
}}
"""


def slot_bytes(ty: str) -> int:
    """Bytes a value of type ``ty`` takes on the tape (8 per scalar leaf)."""
    if ty.startswith("{") or ty.startswith("<{"):
        return sum(slot_bytes(t) for t in fields_of(ty))
    if ty.startswith("["):
        count, elt = ty[1:-1].split(" x ", 1)
        return int(count) * slot_bytes(elt.strip())
    if ty.startswith("<"):
        count, _ = ty[1:-1].split(" x ", 1)
        return int(count) * SLOT
    return SLOT


TAPE_ARG = Value('%"enzpy.tape"', "ptr", "arg")


def slot_at(e, base: Value, offset: int) -> str:
    """The address ``offset`` bytes into a reserved block of the tape."""
    if offset == 0:
        return base.ref
    return e.define("ptr", f"getelementptr inbounds i8, ptr {base.ref}, i64 {offset}").ref


class TapeRecord:
    """The layout of one record of the tape: values of ``types`` in 8-byte
    slots, then, when ``tagged``, an i32 saying which way control went (the edge
    a block was entered by, the exit a call left by). The augmented forward
    pushes a record and the reverse sweep pops it; both take the offsets from
    here, so the two sides cannot disagree on the layout."""

    def __init__(self, types, tagged: bool):
        self.types = list(types)
        self.tagged = tagged
        self.offsets, offset = [], 0
        for ty in self.types:
            self.offsets.append(offset)
            offset += slot_bytes(ty)
        self.tag_offset = offset
        self.size = offset + (SLOT if tagged else 0)

    def push(self, e, values, tag: str | None = None):
        """Reserve the record and store ``values`` (IR operands) and ``tag``."""
        block = e.call(PUSH, "ptr", [TAPE_ARG, Value(str(self.size), "i64", "const")])
        for ty, value, offset in zip(self.types, values, self.offsets):
            e.emit(f"store {ty} {value}, ptr {slot_at(e, block, offset)}, align 8")
        if self.tagged:
            e.emit(f"store i32 {tag}, ptr {slot_at(e, block, self.tag_offset)}, align 8")

    def pop(self, e, names, tag: str | None = None):
        """Release the record, loading its values into the IR names ``names``
        and its tag into ``tag``."""
        block = e.call(POP, "ptr", [TAPE_ARG, Value(str(self.size), "i64", "const")])
        for ty, name, offset in zip(self.types, names, self.offsets):
            e.emit(f"{name} = load {ty}, ptr {slot_at(e, block, offset)}, align 8")
        if self.tagged:
            e.emit(f"{tag} = load i32, ptr {slot_at(e, block, self.tag_offset)}, align 8")
