"""The tape: a LIFO byte stack passed as a hidden pointer to derivative functions.

Layout ``{ ptr data, i64 top, i64 capacity, i64 peak }``. The augmented forward
reserves a block of slots per basic-block execution and stores into them; the
reverse sweep releases the same block in reverse order. Growth (``realloc``) is
the rare, out-of-line branch.
"""

TAPE_TYPE = "{ ptr, i64, i64, i64 }"
SLOT = 8          # every recorded scalar takes one 8-byte slot
PUSH = "enzpy.tape.reserve"
POP = "enzpy.tape.release"
FREE = "enzpy.tape.free"

RUNTIME = f"""
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare ptr @calloc(i64, i64)

define internal void @enzpy.tape.grow(ptr %t, i64 %need) noinline {{
  %capp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 2
  %cap = load i64, ptr %capp
  %dbl = shl i64 %cap, 1
  %c1 = icmp ugt i64 %dbl, %need
  %n1 = select i1 %c1, i64 %dbl, i64 %need
  %c2 = icmp ugt i64 %n1, 4096
  %n2 = select i1 %c2, i64 %n1, i64 4096
  %data = load ptr, ptr %t
  %new = call ptr @realloc(ptr %data, i64 %n2)
  store ptr %new, ptr %t
  store i64 %n2, ptr %capp
  ret void
}}

define internal ptr @{PUSH}(ptr %t, i64 %n) alwaysinline {{
entry:
  %topp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 1
  %capp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 2
  %peakp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 3
  %top = load i64, ptr %topp
  %cap = load i64, ptr %capp
  %new = add i64 %top, %n
  %full = icmp ugt i64 %new, %cap
  br i1 %full, label %grow, label %ok, !prof !{{!"branch_weights", i32 1, i32 2000}}
grow:
  call void @enzpy.tape.grow(ptr %t, i64 %new)
  br label %ok
ok:
  store i64 %new, ptr %topp
  %peak = load i64, ptr %peakp
  %higher = icmp ugt i64 %new, %peak
  %np = select i1 %higher, i64 %new, i64 %peak
  store i64 %np, ptr %peakp
  %data = load ptr, ptr %t
  %slot = getelementptr inbounds i8, ptr %data, i64 %top
  ret ptr %slot
}}

define internal ptr @{POP}(ptr %t, i64 %n) alwaysinline {{
  %topp = getelementptr inbounds {TAPE_TYPE}, ptr %t, i32 0, i32 1
  %top = load i64, ptr %topp
  %new = sub i64 %top, %n
  store i64 %new, ptr %topp
  %data = load ptr, ptr %t
  %slot = getelementptr inbounds i8, ptr %data, i64 %new
  ret ptr %slot
}}

define internal void @{FREE}(ptr %t) {{
  %data = load ptr, ptr %t
  call void @free(ptr %data)
  ret void
}}
"""


def slot_bytes(ty: str) -> int:
    """Bytes a value of type ``ty`` takes on the tape (8 per scalar leaf)."""
    if ty.startswith("{") or ty.startswith("<{"):
        inner = ty.strip("<>{} ")
        return sum(slot_bytes(t) for t in _split_fields(inner))
    if ty.startswith("["):
        count, elt = ty[1:-1].split(" x ", 1)
        return int(count) * slot_bytes(elt.strip())
    if ty.startswith("<"):
        count, _ = ty[1:-1].split(" x ", 1)
        return int(count) * SLOT
    return SLOT


def _split_fields(body: str):
    depth, start, out = 0, 0, []
    for i, ch in enumerate(body):
        if ch in "{[<":
            depth += 1
        elif ch in "}]>":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(body[start:i].strip())
            start = i + 1
    if body[start:].strip():
        out.append(body[start:].strip())
    return out
