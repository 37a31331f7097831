"""The tape: a LIFO byte stack passed as a hidden pointer to derivative functions.

Layout ``{ ptr data, i64 top, i64 capacity, i64 peak, i32 status, ptr excinfo }``;
``peak`` is the largest ``top`` of the call, which ``autodiff`` reports (the entry
point sets it between the sweeps: the forward sweep only pushes, the reverse only pops);
``status``/``excinfo`` hold the first exception raised during the reverse sweep
(by a user's derivative rule), which the entry point raises after it. The augmented forward
reserves a block of slots per basic-block execution and stores into them; the
reverse sweep releases the same block in reverse order. Growth (``realloc``) is
the rare, out-of-line branch.
"""

from .ir import Value, fields_of

TAPE_TYPE = "{ ptr, i64, i64, i64, i32, ptr }"
SLOT = 8          # every recorded scalar takes one 8-byte slot
PUSH = "enzpy.tape.reserve"
POP = "enzpy.tape.release"
FREE = "enzpy.tape.free"
ACQUIRE = "enzpy.tape.acquire"
SINK_READ = "enzpy.zeros"       # reads through a null shadow land here (never written)
SINK_WRITE = "enzpy.trash"      # writes through a null shadow land here
HEADER = 16                    # bytes before the data: the capacity, for reuse
KEEP_LIMIT = 64 << 20          # a tape up to this size is kept for the next call
PEAK_FIELD = 3
STATUS_FIELD = 4
EXCINFO_FIELD = 5
RAISE = "enzpy.tape.raise"

# ``grow`` never sees the tape struct: with the struct only reached through
# the (noalias) tape argument, LLVM keeps ``top``/``capacity`` in registers
# across a loop and the common case of a push is an add, a compare and a store.
RUNTIME = f"""
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare ptr @calloc(i64, i64)

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

; Keep the buffer for the next call (up to {KEEP_LIMIT} bytes); free the rest.
define internal void @{FREE}(ptr %t) {{
entry:
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


_TAPE_ARG = Value('%"enzpy.tape"', "ptr", "arg")


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
        block = e.call(PUSH, "ptr", [_TAPE_ARG, Value(str(self.size), "i64", "const")])
        for ty, value, offset in zip(self.types, values, self.offsets):
            e.emit(f"store {ty} {value}, ptr {slot_at(e, block, offset)}, align 8")
        if self.tagged:
            e.emit(f"store i32 {tag}, ptr {slot_at(e, block, self.tag_offset)}, align 8")

    def pop(self, e, names, tag: str | None = None):
        """Release the record, loading its values into the IR names ``names``
        and its tag into ``tag``."""
        block = e.call(POP, "ptr", [_TAPE_ARG, Value(str(self.size), "i64", "const")])
        for ty, name, offset in zip(self.types, names, self.offsets):
            e.emit(f"{name} = load {ty}, ptr {slot_at(e, block, offset)}, align 8")
        if self.tagged:
            e.emit(f"{tag} = load i32, ptr {slot_at(e, block, self.tag_offset)}, align 8")
