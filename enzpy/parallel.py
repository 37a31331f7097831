"""Parallel loops: ``prange`` and parallel array expressions (``parallel=True``).

Numba lowers a parallel loop to a *gufunc* ``G(args, dims, steps, data)`` that
runs a range of schedule entries, started on every thread by
``numba_parallel_for(G, args, dims, steps, data, ndim, count, threads)`` (each
thread gets its slice of the entries: ``args`` advanced by ``steps``, ``dims[0]``
the number of entries). enzpy treats each such call as a call of its own
function ``numba_parallel_for[G]`` (see ``name_parallel_loops``) with a rule:

* reverse mode: the augmented forward runs ``G``'s augmented forward in
  parallel, one schedule entry at a time, each entry recording on a tape of its
  own; the reverse runs ``G``'s reverse in parallel, each entry popping its own
  tape. ``G``'s reverse (and its callees') accumulates into shadow memory with
  atomic additions: entries run at once and may read the same memory (a
  scalar every iteration uses, an array read by several iterations);
* forward mode: ``G``'s tangent function runs in parallel, its shadow arguments
  advanced like the arguments.

The schedule entries are independent (``prange``'s contract), so their reverse
sweeps may run in any order and on any thread; but for one thing: a reduction
(and a user's ``get_thread_id()`` buffer) keeps its running value in a slot of
the thread. With more entries than threads (``numba.set_parallel_chunksize``),
or under TBB's threading layer (whose work stealing may run several entries on one
thread whatever their number), one thread's entries chain through its slot,
which a multiplication or a max makes order-dependent: such a loop runs its
entries on the calling thread, in order in the forward sweep and in reverse
order in the reverse one. So does a
loop reaching a function rule whose reverse adds into shadows with plain loads
and stores (BLAS, LAPACK, users' rules: ``FunctionRule.thread_safe_reverse``):
iterations sharing an operand would lose each other's additions.
"""
from __future__ import annotations

import ctypes

from llvmlite import binding as llvm

from .analysis import numba_convention
from .custom import FunctionRule, register, rule_for
from .errors import UnsupportedError
from .ir import Block, Function, Instruction, Value, local, size_and_alignment
from .memory import static_exception
from .runtime import counted_loop
from .tape import HEADER, POP, PUSH, TAPE_TYPE

PARALLEL_FOR = "numba_parallel_for"
PREFIX = PARALLEL_FOR + "["
_PARAMS = [("ptr", "fn"), ("ptr", "args"), ("ptr", "dims"), ("ptr", "steps"), ("ptr", "data"),
           ("i64", "ndim"), ("i64", "count"), ("i64", "threads")]
_TAPE_BYTES = size_and_alignment(TAPE_TYPE)[0]
# base args, base shadow args, tapes, count, ndim, the flag an entry that raises sets
_CONTEXT = "{ ptr, ptr, ptr, i64, i64, ptr }"
# Whether Numba's threading layer may run several schedule entries of a loop on one
# thread with no more entries than threads (TBB; OpenMP and the workqueue give each
# thread one): set once the layer is started, read by the derivatives as they run (so
# a derivative saved to the persistent cache fits any layer).
SHARED_THREADS = "enzpy_entries_may_share_threads"
_shared_threads = ctypes.c_uint8(0)
llvm.add_symbol(SHARED_THREADS, ctypes.addressof(_shared_threads))


def launch_threads():
    """Start Numba's threading layer, as its first parallel loop would, and
    note whether it may put several entries of a loop on one thread."""
    from numba.np.ufunc import parallel as numba_parallel
    numba_parallel._launch_threads()
    _shared_threads.value = numba_parallel.threading_layer() == "tbb"


def name_parallel_loops(module):
    """Give each ``numba_parallel_for(@G, ...)`` call the callee
    ``numba_parallel_for[G]``: one derivative per parallel loop body."""
    for fn in module.functions.values():
        for block in fn.blocks:
            for ins in block.instructions:
                if ins.opcode == "call" and ins.callee == PARALLEL_FOR and \
                        ins.args and ins.args[0].kind == "global":
                    ins.callee = f"{PREFIX}{ins.args[0].name}]"


def _body(name):
    return name[len(PREFIX):-1]


# -- a schedule entry that raised --------------------------------------------------------
# Numba's loop body ``G`` reports an exception on the thread that ran it, where
# CPython may drop it, and stops that thread's entries; the function goes on as
# if the loop had finished. A derivative cannot go on: the entry's tape stops
# half-way (its reverse would read garbage). So ``G`` marks a flag (its unused
# ``data`` argument) when an entry raises, and the function calling the loop's
# launcher fails right after it with an exception of its own.
LOOP_FAILED = ("an exception was raised inside a parallel loop (prange, parallel=True): "
               "Numba reports it from its worker threads only sometimes; enzpy computed "
               "no derivative. Run the loop with range to see the exception")


def report_failed_loops(module) -> dict:
    """Make the derivative of a function fail where a parallel loop it runs
    raised (see above): ``G`` sets its flag, the launcher passes it on, the
    caller tests it. Returns the IR definitions the checks need."""
    launchers, flagged = set(), set()
    for fn in module.functions.values():
        for ins in _calls(fn):
            if not ins.callee.startswith(PREFIX):
                continue
            body = module.functions.get(_body(ins.callee))
            if body is not None and body.name not in flagged:
                flagged.add(body.name)
                _flag_failures(body)
            data = ins.args[4]
            if fn.return_type == "void" and len(fn.args) == 4 and data.kind == "arg" and \
                    data.name == fn.args[3].name:
                launchers.add(fn.name)
    definitions = {}
    for fn in module.functions.values():
        sites = [ins for ins in _calls(fn) if ins.callee in launchers
                 and ins.args[3].ref == "null" and ins.text.rstrip().endswith("ptr null)")]
        if sites and numba_convention(fn):
            exc, definitions[exc] = static_exception(RuntimeError, LOOP_FAILED)
            definitions.update(PENDING_DEFINITIONS)
            _fail_after(fn, sites, exc)
    return definitions


def _calls(fn):
    return [ins for b in fn.blocks for ins in b.instructions if ins.opcode == "call"]


def _ins(name, opcode, ty, text, *operands, callee="", targets=()):
    return Instruction(name, opcode, ty, list(operands), text, callee=callee,
                       targets=list(targets))


def _flag_failures(body: Function):
    """Before ``G`` reports an exception (it takes the GIL: nothing else in
    it does), it stores 1 into its ``data`` argument, when that is not null."""
    if len(body.args) != 4 or body.args[3].type != "ptr" or body.users.get(body.args[3].name):
        return
    data = body.args[3]
    scratch = _ins("enzpy.failed.scratch", "alloca", "ptr",
                   f'{local("enzpy.failed.scratch")} = alloca i8', Value("1", "i32", "const"))
    scratch.source_type = "i8"
    null = _ins("enzpy.failed.null", "icmp", "i1",
                f'{local("enzpy.failed.null")} = icmp eq ptr {data.ref}, null',
                data, Value("null", "ptr", "const"))
    null.predicate = "eq"
    target = _ins("enzpy.failed.to", "select", "ptr",
                  f'{local("enzpy.failed.to")} = select i1 {null.value.ref}, ptr '
                  f'{scratch.value.ref}, ptr {data.ref}', null.value, scratch.value, data)
    marked = False
    for block in body.blocks:
        out = []
        for ins in block.instructions:
            if ins.opcode == "call" and ins.callee == "numba_gil_ensure":
                out.append(_ins("", "store", "void", f"store i8 1, ptr {target.value.ref}",
                                Value("1", "i8", "const"), target.value))
                marked = True
            out.append(ins)
        block.instructions = out
    if marked:
        body.entry.instructions[:0] = [scratch, null, target]
        _renumbered(body)


def _fail_after(fn: Function, sites, exc):
    """After each launcher call of ``sites`` (passed a flag instead of null):
    if the flag is set, return the exception ``exc``."""
    fail = "enzpy.loop.failed"
    for n, call in enumerate(sites):
        flag = f"enzpy.loop.flag.{n}"
        flag_value = Value(local(flag), "ptr", "inst", flag)
        alloca = _ins(flag, "alloca", "ptr", f"{local(flag)} = alloca i8",
                      Value("1", "i32", "const"))
        alloca.source_type = "i8"
        fn.entry.instructions.insert(0, alloca)
        block = call.block
        at = block.instructions.index(call)
        call.operands[3] = flag_value
        call.text = call.text.rstrip()[:-len("ptr null)")] + f"ptr {flag_value.ref})"
        loaded = _ins(f"{flag}.value", "load", "i8",
                      f"{local(flag + '.value')} = load i8, ptr {flag_value.ref}", flag_value)
        loaded.source_type = "i8"
        failed = _ins(f"{flag}.set", "icmp", "i1",
                      f"{local(flag + '.set')} = icmp ne i8 {loaded.value.ref}, 0",
                      loaded.value, Value("0", "i8", "const"))
        failed.predicate = "ne"
        rest = f"enzpy.loop.after.{n}"
        branch = _ins("", "br", "void", f"br i1 {failed.value.ref}, label {local(fail)}, "
                      f"label {local(rest)}", failed.value,
                      Value(local(rest), "label", "block", rest),
                      Value(local(fail), "label", "block", fail), targets=(fail, rest))
        after = Block(rest, block.instructions[at + 1:])
        for moved in after.instructions:        # (a later site may be among them)
            moved.block = after
        block.instructions[at:] = [
            _ins("", "store", "void", f"store i8 0, ptr {flag_value.ref}",
                 Value("0", "i8", "const"), flag_value), call, loaded, failed, branch]
        fn.blocks.insert(fn.blocks.index(block) + 1, after)
        for successor in after.terminator.targets:
            for phi in fn.block_map[successor].instructions:
                if phi.opcode == "phi":
                    phi.set_incoming((v, rest if b == block.name else b)
                                     for v, b in phi.incoming)
    # (the exception itself when Numba left it on this thread: status -1 says so)
    pending, own = f"{fail}.pending", f"{fail}.own"
    test = _ins(f"{fail}.set", "call", "i1", f"{local(fail + '.set')} = call i1 @{PENDING}()",
                Value(f"@{PENDING}", "ptr", "global", PENDING), callee=PENDING)
    excinfo = fn.args[1]
    fn.blocks += [
        Block(fail, [test, _ins("", "br", "void", f"br i1 {test.value.ref}, label "
                                f"{local(pending)}, label {local(own)}", test.value,
                                Value(local(own), "label", "block", own),
                                Value(local(pending), "label", "block", pending),
                                targets=(pending, own))]),
        Block(pending, [_ins("", "ret", "void", "ret i32 -1", Value("-1", "i32", "const"))]),
        Block(own, [_ins("", "store", "void", f"store ptr @{exc}, ptr {excinfo.ref}",
                         Value(f"@{exc}", "ptr", "global", exc), excinfo),
                    _ins("", "ret", "void", "ret i32 1", Value("1", "i32", "const"))])]
    _renumbered(fn)


PENDING = "enzpy.loop.pending"
# Whether a Python exception is set on this thread.
PENDING_DEFINITIONS = {
    PENDING: f"""define internal i1 @{PENDING}() {{
entry:
  %gil = call i32 @PyGILState_Ensure()
  %error = call ptr @PyErr_Occurred()
  call void @PyGILState_Release(i32 %gil)
  %pending = icmp ne ptr %error, null
  ret i1 %pending
}}""",
    "PyErr_Occurred": "declare ptr @PyErr_Occurred()",
    "PyGILState_Ensure": "declare i32 @PyGILState_Ensure()",
    "PyGILState_Release": "declare void @PyGILState_Release(i32)"}


def _renumbered(fn: Function):
    fn.__post_init__()
    fn.__dict__.pop("users", None)


class ParallelForRule(FunctionRule):
    thread_safe_reverse = True      # (its body's reverse adds atomically)

    def signature(self, name, module):
        if not name.startswith(PREFIX) or module is None or _body(name) not in module.functions:
            return None
        return Function(name, "void", [Value(local(n), t, "arg", n) for t, n in _PARAMS], [])

    @staticmethod
    def _first_order(deriv):
        """Refuse a parallel loop of enzpy's own (second order): its tapes and
        contexts are memory no derivative follows."""
        if _body(deriv.fn.name).startswith("enzpy."):
            raise UnsupportedError("second-order derivatives through a parallel loop (prange, "
                                   "parallel=True) are not supported; write the loop with "
                                   "range for enzpy.hvp and enzpy.hessian")

    @staticmethod
    def _body_activity(deriv):
        return ("dup" if deriv.activity[1] == "dup" else "const", "const", "const", "const")

    def reverse(self, deriv, builder):
        self._first_order(deriv)
        body = builder.derivative(_body(deriv.fn.name), self._body_activity(deriv), atomic=True)
        shadow_args = local("~s.args") if deriv.activity[1] == "dup" else "null"
        params = ", ".join(deriv.params)
        wrap_aug, wrap_rev = f"{deriv.aug_name}.entries", f"{deriv.rev_name}.entries"
        # (see the module's docstring)
        body_name = _body(deriv.fn.name)
        if _calls_unsafe_rules(builder.module, body_name):
            chained = "  %chained = add i1 1, 0"
        elif _reads_thread_id(builder.module, body_name):
            launch_threads()
            chained = f"""  %more.entries = icmp ugt i64 %n, %threads
  %layer.shares = load i8, ptr @{SHARED_THREADS}
  %shares = icmp ne i8 %layer.shares, 0
  %chained = or i1 %more.entries, %shares"""
        else:
            chained = "  %chained = add i1 0, 0"
        aug = f"""
define internal void @"{deriv.aug_name}"({params}) {{
entry:
  %n = load i64, ptr %dims
  %tapes = call ptr @calloc(i64 %n, i64 {_TAPE_BYTES})
{_context(shadow_args, "%tapes")}
{_launch(chained, wrap_aug, "%args", "%dims", "%steps", "%ndim", "%count")}
  %no.flag = icmp eq ptr %data, null
  br i1 %no.flag, label %done, label %test
test:
  %flag = load i8, ptr %data
  %raised = icmp ne i8 %flag, 0
  br i1 %raised, label %drop, label %done
drop:
{counted_loop("free", "%n", _DISCARD_ENTRY, "dropped")}dropped:
  call void @free(ptr %tapes)
  br label %done
done:
  ; (an entry raised: no tapes, no reverse sweep; the caller fails)
  %kept = phi ptr [ %tapes, %ran ], [ %tapes, %test ], [ null, %dropped ]
  %kept.n = phi i64 [ %n, %ran ], [ %n, %test ], [ 0, %dropped ]
  %slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 16)
  store ptr %kept, ptr %slot
  %nslot = getelementptr i8, ptr %slot, i64 8
  store i64 %kept.n, ptr %nslot
  ret void
}}
"""
        # The reverse runs the entries' reverses in parallel over the table of
        # their tapes (the arguments' memory, on the caller's stack during the
        # forward sweep, is gone; the body's reverse reads it from its tape).
        rev = f"""
define internal void @"{deriv.rev_name}"({params}) {{
entry:
  %slot = call ptr @{POP}(ptr %"enzpy.tape", i64 16)
  %tapes = load ptr, ptr %slot
  %nslot = getelementptr i8, ptr %slot, i64 8
  %n = load i64, ptr %nslot
  %none = icmp eq i64 %n, 0
  br i1 %none, label %exit, label %run
run:
{_context(shadow_args, "%tapes")}
  %table = alloca ptr
  store ptr %tapes, ptr %table
  %table.dims = alloca i64
  store i64 %n, ptr %table.dims
  %table.steps = alloca i64
  store i64 {_TAPE_BYTES}, ptr %table.steps
  ; (the GIL released as Numba's launcher does around the forward sweep's loop: a body
  ; calling into Python, as BLAS does the first time it is used, would wait for it)
  %gil = call i32 @PyGILState_Ensure()
  %thread = call ptr @PyEval_SaveThread()
{_launch(chained, wrap_rev, "%table", "%table.dims", "%table.steps", "0", "1")}
  call void @PyEval_RestoreThread(ptr %thread)
  call void @PyGILState_Release(i32 %gil)
{counted_loop("free", "%n", _DISCARD_ENTRY, "exit")}exit:
  call void @free(ptr %tapes)
  ret void
}}
"""
        return aug + rev + _augmented_entries(wrap_aug, body) + _reversed_entries(wrap_rev, body)

    def forward(self, deriv, builder):
        self._first_order(deriv)
        body = builder.derivative(_body(deriv.fn.name), self._body_activity(deriv))
        tangent_args = local("~t.args") if deriv.activity[1] == "dup" else "null"
        wrap = f"{deriv.name}.entries"
        return f"""
define internal void @"{deriv.name}"({", ".join(deriv.params)}) {{
entry:
{_context(tangent_args, "null")}
  call void @{PARALLEL_FOR}(ptr @"{wrap}", ptr %args, ptr %dims, ptr %steps, ptr %ctx, i64 %ndim, i64 %count, i64 %threads)
  ret void
}}
""" + _tangent_entries(wrap, body)

    def declarations(self):
        return {PARALLEL_FOR: f"declare void @{PARALLEL_FOR}(ptr, ptr, ptr, ptr, ptr, i64, "
                              f"i64, i64)",
                SHARED_THREADS: f"@{SHARED_THREADS} = external global i8",
                "PyGILState_Ensure": "declare i32 @PyGILState_Ensure()",
                "PyEval_SaveThread": "declare ptr @PyEval_SaveThread()",
                "PyEval_RestoreThread": "declare void @PyEval_RestoreThread(ptr)",
                "PyGILState_Release": "declare void @PyGILState_Release(i32)"}


def _launch(chained, entries, args, dims, steps, ndim, count) -> str:
    """Run ``entries`` over the schedule: on the calling thread, in order, where
    ``chained`` (instructions computing ``%chained``, an i1) holds, else on
    Numba's threads; ends in block ``ran``."""
    return f"""{chained}
  br i1 %chained, label %in.order, label %parallel
in.order:
  call void @"{entries}"(ptr {args}, ptr {dims}, ptr {steps}, ptr %ctx)
  br label %ran
parallel:
  call void @{PARALLEL_FOR}(ptr @"{entries}", ptr {args}, ptr {dims}, ptr {steps}, ptr %ctx, i64 {ndim}, i64 {count}, i64 %threads)
  br label %ran
ran:"""


def _reads_thread_id(module, name) -> bool:
    """Whether function ``name`` or a function it calls (in ``module``) asks for
    the thread's id (Numba's ``get_thread_id``: a reduction's slot)."""
    return any(callee == "get_thread_id" for callee in _reached_calls(module, name))


def _calls_unsafe_rules(module, name) -> bool:
    """Whether function ``name`` or a function it calls reaches a function rule
    whose reverse must not run on several threads at once (a BLAS or LAPACK
    rule adding into an operand's shadow, which iterations may share)."""
    for callee in _reached_calls(module, name):
        rule = rule_for(callee, module)[0]
        if rule is not None and not rule.thread_safe_reverse:
            return True
    return False


def _reached_calls(module, name):
    """The callees of the calls in function ``name`` and in the functions of
    ``module`` it reaches."""
    seen, todo = {name}, [name]
    while todo:
        fn = module.functions.get(todo.pop())
        for ins in _calls(fn) if fn is not None else ():
            yield ins.callee
            if ins.callee not in seen:
                seen.add(ins.callee)
                todo.append(ins.callee)


def _context(shadow_args, tapes):
    return f"""  %ctx = alloca {_CONTEXT}
  store {_CONTEXT} zeroinitializer, ptr %ctx
  store ptr %args, ptr %ctx
  %ctx.1 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 1
  store ptr {shadow_args}, ptr %ctx.1
  %ctx.2 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 2
  store ptr {tapes}, ptr %ctx.2
  %ctx.3 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 3
  store i64 %count, ptr %ctx.3
  %ctx.4 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 4
  store i64 %ndim, ptr %ctx.4
  %ctx.5 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 5
  store ptr %data, ptr %ctx.5"""


_UNPACK = f"""  %base = load ptr, ptr %ctx
  %ctx.1 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 1
  %shadow.base = load ptr, ptr %ctx.1
  %ctx.2 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 2
  %tapes = load ptr, ptr %ctx.2
  %ctx.3 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 3
  %count = load i64, ptr %ctx.3
  %ctx.4 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 4
  %ndim = load i64, ptr %ctx.4
  %ctx.5 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 5
  %flag = load ptr, ptr %ctx.5
  %loopcount = load i64, ptr %dims
  %args.j = alloca ptr, i64 %count
  %shadows.j = alloca ptr, i64 %count"""


_DISCARD_ENTRY = f"""  %offset = mul i64 %i, {_TAPE_BYTES}
  %t = getelementptr i8, ptr %tapes, i64 %offset
  call void @enzpy.tape.discard(ptr %t)"""

# Entry j's arguments (and shadows, when there are any) are the first entry's
# advanced j steps: args.j[k] = args[k] + j * steps[k].
_SHIFT_ARGS = """  %pa = getelementptr ptr, ptr %args, i64 %k
  %a = load ptr, ptr %pa
  %ps = getelementptr i64, ptr %steps, i64 %k
  %step = load i64, ptr %ps
  %by = mul i64 %step, %j
  %aj = getelementptr i8, ptr %a, i64 %by
  %qa = getelementptr ptr, ptr %args.j, i64 %k
  store ptr %aj, ptr %qa
{shift}"""


def _augmented_entries(name, body):
    """Run by ``numba_parallel_for`` on each thread: the body's augmented
    forward on each of the thread's schedule entries, one at a time, with
    arguments and shadows advanced to the entry and the entry's own tape
    (entry i's is ``tapes + i * _TAPE_BYTES``)."""
    shift = counted_loop("args.loop", "%count", _SHIFT_ARGS.format(shift=_shadow_shift("%by")),
                         "call", index="k")
    entry = f"""{shift}call:
  %index = add i64 %first, %j
  %tape.offset = mul i64 %index, {_TAPE_BYTES}
  %tape = getelementptr i8, ptr %tapes, i64 %tape.offset
  call void @"{body.aug_name}"(ptr %args.j, ptr %dims.j, ptr %steps, ptr %flag, ptr %shadows.j, ptr %tape)"""
    return f"""
define internal void @"{name}"(ptr %args, ptr %dims, ptr %steps, ptr %ctx) {{
setup:
{_UNPACK}
  %entry0 = load ptr, ptr %args
  %base0 = load ptr, ptr %base
  %step0 = load i64, ptr %steps
  %a0 = ptrtoint ptr %entry0 to i64
  %b0 = ptrtoint ptr %base0 to i64
  %delta0 = sub i64 %a0, %b0
  %first = sdiv i64 %delta0, %step0
  %ndim1 = add i64 %ndim, 1
  %dims.j = alloca i64, i64 %ndim1
  %dims.bytes = shl i64 %ndim1, 3
  call void @llvm.memcpy.p0.p0.i64(ptr %dims.j, ptr %dims, i64 %dims.bytes, i1 false)
  store i64 1, ptr %dims.j
{counted_loop("loop", "%loopcount", entry, "exit", index="j")}exit:
  ret void
}}
"""


def _reversed_entries(name, body):
    """Run by ``numba_parallel_for`` over the table of tapes: the body's
    reverse of each of the thread's entries, last first. The body's reverse
    reads what it needs from the entry's tape; the argument pointers it is
    given are those of the forward sweep, not read again."""
    entry = f"""  %last = sub i64 %loopcount, 1
  %jr = sub i64 %last, %j
  %tape.offset = mul i64 %jr, {_TAPE_BYTES}
  %tape = getelementptr i8, ptr %tapes, i64 %tape.offset
  call {body.rev_type} @"{body.rev_name}"(ptr %base, ptr %dims, ptr %steps, ptr null, ptr %shadow.base, ptr %tape)"""
    return f"""
define internal void @"{name}"(ptr %table, ptr %dims, ptr %steps, ptr %ctx) {{
setup:
  %base = load ptr, ptr %ctx
  %ctx.1 = getelementptr {_CONTEXT}, ptr %ctx, i32 0, i32 1
  %shadow.base = load ptr, ptr %ctx.1
  %loopcount = load i64, ptr %dims
  %tapes = load ptr, ptr %table
{counted_loop("loop", "%loopcount", entry, "exit", index="j")}exit:
  ret void
}}
"""


def _tangent_entries(name, body):
    """Run by ``numba_parallel_for`` on each thread: the body's tangent
    function on the thread's schedule entries, shadows advanced like the
    arguments."""
    copy = f"""  %pa = getelementptr ptr, ptr %args, i64 %k
  %a = load ptr, ptr %pa
  %qa = getelementptr ptr, ptr %args.j, i64 %k
  store ptr %a, ptr %qa
{_shadow_shift("0")}"""
    return f"""
define internal void @"{name}"(ptr %args, ptr %dims, ptr %steps, ptr %ctx) {{
setup:
{_UNPACK}
{counted_loop("args.loop", "%count", copy, "call", index="k")}call:
  call void @"{body.name}"(ptr %args.j, ptr %dims, ptr %steps, ptr %flag, ptr %shadows.j)
  ret void
}}
"""


def _shadow_shift(by):
    """shadows.j[k] = shadow[k] + (args[k] - base[k]) + by, null staying null."""
    return f"""  %no_shadows = icmp eq ptr %shadow.base, null
  %psb = getelementptr ptr, ptr %shadow.base, i64 %k
  %psb.safe = select i1 %no_shadows, ptr %ctx, ptr %psb
  %sb.raw = load ptr, ptr %psb.safe
  %sb = select i1 %no_shadows, ptr null, ptr %sb.raw
  %pb = getelementptr ptr, ptr %base, i64 %k
  %b = load ptr, ptr %pb
  %ai = ptrtoint ptr %a to i64
  %bi = ptrtoint ptr %b to i64
  %moved = sub i64 %ai, %bi
  %offset.k = add i64 %moved, {by}
  %sj.moved = getelementptr i8, ptr %sb, i64 %offset.k
  %sb.null = icmp eq ptr %sb, null
  %sj = select i1 %sb.null, ptr null, ptr %sj.moved
  %qs = getelementptr ptr, ptr %shadows.j, i64 %k
  store ptr %sj, ptr %qs"""


register(ParallelForRule())

# A tape of one schedule entry: its data freed (no buffer is kept).
DISCARD = f"""
define internal void @enzpy.tape.discard(ptr %t) {{
entry:
  %data = load ptr, ptr %t
  %isnull = icmp eq ptr %data, null
  br i1 %isnull, label %done, label %release
release:
  %base = getelementptr i8, ptr %data, i64 -{HEADER}
  call void @free(ptr %base)
  br label %done
done:
  ret void
}}
"""
