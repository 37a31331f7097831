"""The memoized derivative cache and the assembly of one derivative module.

Within a build every (function symbol, argument activity) gets exactly one
aug/rev pair: the entry is made *before* its body is written, so a recursive
call (self or mutual) finds it and calls it. Bodies are written from a work
list, so deep call graphs never recurse in Python.
"""
from __future__ import annotations

import itertools
import re
import threading
from functools import cached_property

import networkx as nx
from numba.core.registry import cpu_target

from . import rules
from .errors import UnsupportedError
from .frontend import (PARALLEL_LOOP_BODY, array_meminfo_params, data_pointer_types,
                       demangle, signature_of)
from .ir import local, tangent_name
from .analysis import (RESIZERS, ReadOnlyMemory, pointer_roots, split_loop_exits,
                       pin_sign_identities, split_mixed_stores,
                       untie_carried_selects)
from .custom import rule_for
from .parallel import DISCARD, name_parallel_loops, report_failed_loops
from .typeddict import name_dict_calls
from .blas import BLAS_RUNTIME, PRODUCT_OVERLAPS
from .forward import FORWARD_RUNTIME, ForwardDerivative, ForwardGenerator
from .generator import USER_FUNCTION
from .irtext import definitions
from .reverse import FunctionDerivative, ReverseGenerator
from .runtime import FREE_SHADOW_FUNCTION, MEMORY_RUNTIME, RESIZE_SHADOW_FUNCTION
from .special import SPECIAL_RUNTIME
from .tape import (ACQUIRE, ARENA_ALLOWED_FIELD, EXCINFO_FIELD, FREE, PEAK_FIELD, RUNTIME,
                   SINK_WRITE, STATUS_FIELD, TAPE_TYPE)

_BLOCK_LABEL = re.compile(r"^B(\d+)")
# The kernel Numba compiles for an array expression (``a * b + c`` on arrays).
_ARRAY_EXPRESSION = re.compile(r"__numba_array_expr_")
_TANGENT_NAME = re.compile(r"^enzpy\.f\d+\.(.*)\.fwd$")


class Stats:
    """Process-wide counters, shown by ``enzpy.cache_info()``."""

    def __init__(self):
        self.lock = threading.RLock()
        self.derivative_functions = 0
        self.keys = set()
        self.hits = 0
        self.misses = 0
        self.loaded = 0         # from the persistent cache
        self.saved = 0          # to the persistent cache
        # derivatives written again: by a build saved to the persistent cache
        # rather than call a copy that was not saved (a later process loads it
        # alone), or after the custom rules changed (clear_rules)
        self.rewritten = 0
        self.builds = []


STATS = Stats()


class Library:
    """The code library a build's derivatives end up in, once compiled."""

    def __init__(self):
        self.library = None


# (mode, symbol, activity) -> (derivative, Library, owner): derivatives compiled
# by earlier builds, which later builds call instead of writing them again;
# ``owner`` is the persistent-cache key of the build that wrote them (or None).
SHARED: dict = {}
_NAMES = itertools.count()


class ModuleBuilder:
    """Writes every derivative one root derivative needs, into one module:
    aug/rev pairs (``mode='reverse'``) or tangent functions (``'forward'``).

    With ``share=False`` nothing is taken from or given to other builds: every
    derivative is written here (a module another transformation will read).
    A build saved to the persistent cache has an ``owner`` (its key): its
    derivatives' names carry it, unique across processes, and it only calls
    derivatives of earlier builds whose owner is in ``reusable`` (saved too,
    so a later process can load them first); ``depends`` lists those owners.
    """

    def __init__(self, module, lowered, original_blocks=None, mode="reverse", share=True,
                 owner=None, reusable=frozenset()):
        self.module = module
        self.mode = mode
        self.share = share
        self.owner = owner
        self.reusable = reusable
        self.depends = set()
        self.original_blocks = original_blocks or {}
        self.lowered = lowered            # symbol -> frontend.Lowered
        self.derivatives = {}             # (symbol, activity) -> FunctionDerivative
        self.reused = {}                  # the subset compiled by earlier builds
        self.rewritten = set()            # keys an earlier, unsaved build wrote too
        self.library = Library()          # where this build's derivatives will live
        # glue of built-in rules called by name: its name -> what compiles it again
        # in a process loading the derivative (userrules.require)
        self.requires = {}
        # The memory runtime zeroes shadows with memset.
        self.declarations = {
            "llvm.memset.p0.i64": "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
            "llvm.memcpy.p0.p0.i64": "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
            "llvm.pow.f64": "declare double @llvm.pow.f64(double, double)",
            "llvm.pow.f32": "declare float @llvm.pow.f32(float, float)",
            "llvm.assume": "declare void @llvm.assume(i1)"}
        self.texts = []
        self._pending = []
        self._generating = []       # derivatives being written, outermost first
        self._caller = {}           # symbol -> the symbol whose derivative first called it
        self.products_written_over = {}     # see blas.result_written_over
        self.bits_emitted = {}              # see generator.emits_float_bits
        name_parallel_loops(module)
        self.declarations.update(report_failed_loops(module))
        name_dict_calls(module)
        self._lines = {}
        self._elements = {}
        # symbol -> {parameter receiving memory of the differentiated function's
        # arguments: the name of that argument (USER_FUNCTION: its own; None: unknown)}
        self.user_args = {}

    # -- queries from the generators ------------------------------------------
    @cached_property
    def readonly(self) -> ReadOnlyMemory:
        return ReadOnlyMemory(self.module)

    def _memory_facts(self, symbol):
        """What a reverse derivative of ``symbol`` takes from this build's
        analysis of the whole call graph: which of its memory nothing writes
        during the call (re-read by the reverse sweep instead of recorded). A
        parameter is read-only only if every caller passes read-only memory, so
        the same function may differ between builds: a derivative written for
        another build is reused only where these agree."""
        if self.mode == "forward":
            return ()
        ro = self.readonly
        return ro.unknown_write, frozenset(ro.readonly.get(symbol, ()))

    @cached_property
    def recursive(self) -> set:
        """Functions in a cycle of calls (self or mutual recursion)."""
        graph = nx.DiGraph()
        for name, fn in self.module.functions.items():
            graph.add_node(name)
            for b in fn.blocks:
                for ins in b.instructions:
                    if ins.opcode == "call" and ins.callee in self.module.functions:
                        graph.add_edge(name, ins.callee)
        return {n for scc in nx.strongly_connected_components(graph) for n in scc
                if len(scc) > 1 or graph.has_edge(n, n)}

    def differentiable_callee(self, name) -> bool:
        """Calls to this function are differentiated through its own aug/rev pair.
        (Freeing a first-order shadow list, in hvp, is a runtime call: forward mode
        frees its tangent beside it.)"""
        if name == FREE_SHADOW_FUNCTION or rules.has_rule(name):
            return False        # (enzpy's special functions, read back for second order)
        return name in self.module.functions or rule_for(name, self.module)[0] is not None

    def data_pointer_type(self, symbol, index):
        """The float element type of parameter ``index`` of ``symbol``, if an array's data."""
        tangent = _TANGENT_NAME.match(symbol)
        if tangent and tangent.group(1) in self.module.functions:
            # A tangent function: its parameters (and the tangents of them) are the primal's.
            name = self.module.functions[symbol].args[index].name
            prefix = tangent_name("")
            name = name[len(prefix):] if name.startswith(prefix) else name
            symbol = tangent.group(1)
            index = [a.name for a in self.module.functions[symbol].args].index(name)
        if symbol not in self._elements:
            signature = self._numba_signature(symbol)
            self._elements[symbol] = {} if signature is None else \
                data_pointer_types(cpu_target.target_context, *signature)
        return self._elements[symbol].get(index)

    def array_meminfo_param(self, symbol, index):
        """Whether parameter ``index`` of ``symbol`` is the meminfo of an array
        argument (None: the Numba signature is unknown)."""
        signature = self._numba_signature(symbol)
        if signature is None:
            return None
        return index in array_meminfo_params(cpu_target.target_context, signature[0])

    def _numba_signature(self, symbol):
        """(argument types, return type) of the Numba function ``symbol``, or None."""
        low = self.lowered.get(symbol)
        return (low.argtypes, low.restype) if low is not None else signature_of(symbol)

    def stable_operands(self, fn, ins) -> frozenset:
        """Indices of the pointer arguments of call ``ins`` in ``fn`` that a rule
        covering the callee may read again in the reverse sweep instead of
        recording them: memory nothing writes during the differentiated call
        (kept alive until the reverse sweep: see ``ShadowMemory.freed_by_primal``),
        and not a stack slot (gone when the reverse sweep runs). Empty unless
        the rule asks (``FunctionRule.rereads_operands``)."""
        rule = rule_for(ins.callee, self.module)[0]
        if self.mode == "forward" or rule is None or not rule.rereads_operands:
            return frozenset()
        stack = {name for name, d in fn.defs.items() if d.opcode == "alloca"}
        return frozenset(k for k, a in enumerate(ins.args) if a.type == "ptr"
                         and self.readonly.is_readonly(fn, a)
                         and not any(name in stack for _, name in pointer_roots(fn, a)))

    def selector_params(self, callee) -> frozenset:
        rule = rule_for(callee, self.module)[0]
        return rule.selector_params(callee) if rule is not None else frozenset()

    def call_propagates(self, ins) -> bool:
        """Whether a call's float result depends on its float arguments."""
        if rules.INACTIVE_CALLS.match(ins.callee):
            return False
        return True

    def derivative(self, symbol, activity, atomic=False, stable=frozenset(),
                   nonnull=frozenset(), failures_propagate=True):
        """The derivative of ``symbol`` for ``activity``; ``atomic``: its
        reverse accumulates into shadow memory atomically (it runs on several
        threads at once: the body of a parallel loop, and its callees);
        ``stable``: the indices of pointer arguments whose memory nothing writes
        during the call (``stable_operands``), which a rule's reverse may read
        again instead of recording; ``nonnull``: the indices of 'dup' parameters
        whose shadows are never null (the root's array data, which the entry
        passes; see ``root_nonnull``); ``failures_propagate``: whether the caller
        fails whenever the call does (``ControlFlow.failing_edges``; the entry
        does)."""
        key = (self.mode, symbol, tuple(activity), atomic, self._memory_facts(symbol), stable,
               nonnull, failures_propagate)
        if self._generating:
            self._caller.setdefault(symbol, self._generating[-1].fn.name)
        found = self.derivatives.get(key)
        if found is None and self.share and key in SHARED:
            shared, _, owner = SHARED[key]
            if self.owner is None or owner in self.reusable:
                found = self.derivatives[key] = self.reused[key] = shared
                if owner is not None:
                    self.depends.add(owner)
            else:
                self.rewritten.add(key)
        if found is None:
            fn = rule_for(symbol, self.module)[1] or self.module.functions.get(symbol)
            if fn is None:
                raise UnsupportedError(f"the IR of called function '{symbol}' is not available")
            index = next(_NAMES) if self.owner is None else \
                f"{self.owner[:16]}.{len(self.derivatives)}"
            pin_sign_identities(fn)
            if self.mode == "forward":
                found = ForwardDerivative(fn, activity, index)
            else:
                split_loop_exits(fn)
                untie_carried_selects(fn)
                split_mixed_stores(fn)
                found = FunctionDerivative(fn, activity, index, atomic, stable, nonnull,
                                           failures_propagate)
            self.derivatives[key] = found
            self._pending.append(found)
        return found

    @property
    def exported(self) -> set:
        """Names of the derivatives this build writes (kept visible to later builds)."""
        if not self.share:
            return set()
        return {name for key, d in self.derivatives.items() if key not in self.reused
                for name in d.names}

    def publish(self, library):
        """After a successful compile: later builds may call these derivatives."""
        self.library.library = library
        if not self.share:
            return
        with STATS.lock:
            for key, d in self.derivatives.items():
                if key in self.reused:
                    STATS.keys.add(key)
                    continue
                STATS.derivative_functions += 1
                if key in STATS.keys:
                    STATS.rewritten += 1
                STATS.keys.add(key)
                if key in self.rewritten:
                    # later saved builds can call this copy once it is saved
                    SHARED[key] = (d, self.library, self.owner)
                else:
                    SHARED.setdefault(key, (d, self.library, self.owner))

    def _numba_block(self, symbol, ins) -> str:
        """The Numba block label (``B<n>...``) ``ins`` was lowered from: its block's, or
        for the blocks Numba adds while lowering a statement (``for.end``: the loops of
        an array expression), the last Numba block laid out before it."""
        block = self.original_blocks.get(symbol, {}).get(ins.name) or (
            ins.block.name if ins.block else "")
        if _BLOCK_LABEL.match(block) or ins.block is None:
            return block
        fn = self.module.functions.get(symbol)
        names = [b.name for b in fn.blocks] if fn is not None else []
        earlier = names[:names.index(ins.block.name)] if ins.block.name in names else []
        return next((b for b in reversed(earlier) if _BLOCK_LABEL.match(b)), block)

    def describe(self, symbol, ins, written=None) -> str:
        """' in function 'f' (near line N)' for messages about ``ins`` (which
        writes into the array named ``written``, if given)."""
        block = self._numba_block(symbol, ins)
        tangent = _TANGENT_NAME.match(symbol)
        if tangent:                 # a tangent function, differentiated again
            symbol = tangent.group(1)
        low = self.lowered.get(symbol)
        name = low.name if low is not None else demangle(symbol)
        if symbol in _RUNTIME_PURPOSE:      # enzpy's own helper, in code differentiated again
            return f" in {_RUNTIME_PURPOSE[symbol]} (second order through it is not supported)"
        if low is None and _ARRAY_EXPRESSION.search(symbol):
            return " in an array expression"        # (at_user_call names its line)
        text = f" in {name}" if PARALLEL_LOOP_BODY.search(symbol) and low is None \
            else f" in function '{name}'"
        line = self._line(symbol, low, block, ins, written) if low is not None else None
        if line is not None:
            text += f" (near line {line})"
        return text

    def _line(self, symbol, low, block, ins, written):
        """The source line of ``ins``: that of the one call or write it comes from
        where the function has one, else the first line of its Numba block."""
        self._source_lines(symbol, low)
        if block == "entry":        # (Numba's entry block falls through to B0)
            block = "B0"
        if ins.opcode == "call" and ins.callee:
            callee = demangle(ins.callee)
            for labels in ([block], self._lines[symbol]):
                lines = {line for label in labels for line, name in low.calls(label)
                         if name and _short(name) in callee}
                if len(lines) == 1:
                    return lines.pop()
            named = callee.split(".")
            lines = {line for line, name in low.function_calls(block) if name in named}
            if len(lines) == 1:
                return lines.pop()
        if ins.opcode == "call" and not ins.callee:
            lines = {line for line, _ in self._indirect_calls(symbol, low, block)}
            if len(lines) == 1:
                return lines.pop()
        lines = low.lines_writing(written) if written else ()
        if len(lines) == 1:
            return next(iter(lines))
        m = _BLOCK_LABEL.match(block or "")
        return self._lines[symbol].get(f"B{m.group(1)}") if m else None

    def indirect_callee(self, symbol, ins) -> str:
        """What the indirect call ``ins`` of ``symbol`` calls, as the user wrote it
        (``the C function 'c_sin' (ctypes or cffi)``), or 'an indirect call'."""
        low = self.lowered.get(symbol)
        callees = {what for _, what in self._indirect_calls(
            symbol, low, self._numba_block(symbol, ins))} if low is not None else ()
        return callees.pop() if len(callees) == 1 else "an indirect call"

    def _indirect_calls(self, symbol, low, block) -> list:
        """``low.indirect_calls`` of Numba block ``block``, or of the whole function
        when that block has none (a call Numba lowered in a block of its own)."""
        return low.indirect_calls(block) or [
            call for label in self._source_lines(symbol, low)
            for call in low.indirect_calls(label)]

    def _source_lines(self, symbol, low) -> dict:
        """``low.source_lines()``, once per function."""
        if symbol not in self._lines:
            self._lines[symbol] = low.source_lines()
        return self._lines[symbol]

    def at_user_call(self, symbol, exc: UnsupportedError) -> UnsupportedError:
        """``exc``, raised in the derivative of ``symbol``, prefixed with the NumPy call
        in the user's code that led there (``np.nextafter at model.py:12: ...``) when
        ``symbol`` is Numba's implementation of it (or a helper of that), not the user's."""
        chain = [symbol]
        while chain[-1] not in self.lowered or self.lowered[chain[-1]].is_library_code:
            caller = self._caller.get(chain[-1])
            if caller is None or caller in chain:
                return exc
            chain.append(caller)
        if len(chain) == 1 or getattr(exc, "located", False):
            return exc
        user, callee = self.lowered[chain[-1]], chain[-2]
        fn = self.module.functions.get(user.symbol)
        calls = [ins for b in (fn.blocks if fn is not None else ())
                 for ins in b.instructions if ins.opcode == "call" and ins.callee == callee]
        if not calls:
            return exc
        if _ARRAY_EXPRESSION.search(callee):
            line = user.array_expression_line(callee)
            if line is None:
                return exc
            located = UnsupportedError(f"the array expression at {user.source_file}:{line}: {exc}")
            located.located = True
            return located
        block = self._numba_block(user.symbol, calls[0])
        found = user.calls(block)
        construct = getattr(exc, "construct", None)      # (not a NumPy call: a container)
        if construct:
            line = next((line for line, name in found if name == construct), None)
            if line is None and construct == "numba.typed.Dict":
                line = next(iter(user.dictionary_lines(block)), None)
            if line is None and _BLOCK_LABEL.match(block):
                line = user.source_lines().get(_BLOCK_LABEL.match(block).group(0))
            if line is not None:
                located = UnsupportedError(f"{construct} at {user.source_file}:{line}: {exc}")
                located.located = True
                return located
        # The NumPy calls of that block named in the implementation's chain (np.split ->
        # np_split) or by a function the message quotes (np.nextafter -> 'numba_nextafter';
        # not its prose: "complex ones" is no np.ones), else its only call.
        text = " ".join([demangle(s) for s in chain[:-1]] + re.findall(r"'([^'\s]+)'", str(exc)))
        named = [(line, n) for line, n in found if n and _short(n) in text] or (
            found if len(found) == 1 else [])
        if not named:
            return exc
        names = " or ".join(dict.fromkeys(n for _, n in named if n))
        where = f"{user.source_file}:{named[0][0]}"
        located = UnsupportedError(f"{names} at {where}: {exc}" if names else
                                   f"the call at {where}: {exc}")
        located.located = True
        return located

    # -- building -------------------------------------------------------------
    def build(self, symbol, activity, nonnull=frozenset()) -> FunctionDerivative:
        self.user_args[symbol] = dict.fromkeys(range(len(activity)), USER_FUNCTION)
        root = self.derivative(symbol, activity, nonnull=self.root_nonnull(symbol, nonnull))
        while self._pending:
            self._generate(self._pending.pop())
        return root

    def root_nonnull(self, symbol, nonnull) -> frozenset:
        """``nonnull`` (parameters the entry passes non-null shadows), unless the
        module calls ``symbol`` itself: its call sites may pass null shadows,
        and one derivative serves them and the entry (no second variant)."""
        if not nonnull or any(ins.opcode in ("call", "invoke") and ins.callee == symbol
                              for fn in self.module.functions.values()
                              for b in fn.blocks for ins in b.instructions):
            return frozenset()
        return nonnull

    def _generate(self, deriv):
        self._generating.append(deriv)
        try:
            self._write(deriv)
        except UnsupportedError as exc:
            raise self.at_user_call(deriv.fn.name, exc) from None
        finally:
            self._generating.pop()

    def _write(self, deriv):
        forward = self.mode == "forward"
        if deriv.fn.blocks:
            generator = ForwardGenerator if forward else ReverseGenerator
            self.texts.append(generator(self, deriv, self.describe).generate())
        else:
            rule = rule_for(deriv.fn.name, self.module)[0]
            self.declarations.update(rule.declarations())
            self.texts.append(rule.forward(deriv, self) if forward else
                              rule.reverse(deriv, self))

    def reverse_reads(self, deriv):
        """The parameters ``deriv``'s reverse function reads (None: unknown, take
        all): a caller records only those for the call's reverse. A derivative
        not written yet is written now, callee before caller, unless it is being
        written (a recursive call) or the chain of calls is deep."""
        if deriv.reverse_reads is None and deriv in self._pending and \
                deriv not in self._generating and len(self._generating) < _MAX_NESTED_WRITES:
            self._pending.remove(deriv)
            self._generate(deriv)
        return deriv.reverse_reads

    def module_text(self, entry: str) -> str:
        """The primal module plus the generated functions, as one IR text."""
        primal = self.module.text
        # Numba fills each function's environment pointer at run time; refer to
        # the one it set instead of defining a fresh, empty one.
        primal = re.sub(r"^(@\S+) = common global ptr null", r"\1 = external global ptr",
                        primal, flags=re.M)
        existing = set(self.module.functions) | set(self.module.declarations)
        for d in self.derivatives.values():
            existing |= set(d.names)
        runtime = _FORWARD_RUNTIME if self.mode == "forward" else _REVERSE_RUNTIME
        # (a tangent module read back for second order already holds forward
        # mode's helpers and globals: each is defined once)
        helpers = [text for name, text in runtime.items()
                   if name not in existing and f"@{name} = " not in primal]
        # (a global definition, e.g. an exception record, may be in the primal
        # already: a tangent module read back defines the tangent functions' own)
        decls = [text for name, text in self.declarations.items()
                 if name not in existing and name not in runtime
                 and not (text.startswith("@") and f"@{name} = " in primal)]
        for d in self.reused.values():
            decls += d.declarations()
        return "\n".join([primal, *helpers, *decls, *self.texts, entry])


# NumPy calls whose implementation in Numba is not named after the function
_IMPLEMENTATION_NAMES = {"@": "dot", "**": "pow", "np.linalg.cholesky": "cho_impl"}


def _short(numpy_name) -> str:
    """What Numba's implementation of a NumPy call is named after (np.linalg.eig -> eig)."""
    return _IMPLEMENTATION_NAMES.get(numpy_name) or numpy_name.rpartition(".")[2]


# Callees written ahead of their callers (see reverse_reads) nest Python calls.
_MAX_NESTED_WRITES = 40

# What enzpy's runtime helpers do, for messages about code that reaches them.
_RUNTIME_PURPOSE = {
    **{f"{RESIZE_SHADOW_FUNCTION}.{resizer}": "the first-order derivative's resizing of a "
       "list's shadow (the list grows: append, np.split)" for resizer in RESIZERS},
    FREE_SHADOW_FUNCTION: "the first-order derivative's freeing of a list's shadow"}

# The helpers derivative code calls, by name.
_REVERSE_RUNTIME = {**definitions(RUNTIME), **definitions(MEMORY_RUNTIME),
                    **definitions(BLAS_RUNTIME), **definitions(DISCARD),
                    **definitions(SPECIAL_RUNTIME)}
_FORWARD_RUNTIME = {**definitions(FORWARD_RUNTIME), **definitions(BLAS_RUNTIME),
                    **definitions(SPECIAL_RUNTIME)}


def _slot(ret_slot_type) -> str:
    """A return slot with room for a pointer: Numba stores a null pointer
    through the return pointer of a function returning None."""
    return f"{{ {ret_slot_type}, i64 }}"


def entry_function(name, root: FunctionDerivative, ret_slot_type, return_active,
                   shadows=(), arena=False) -> str:
    """``i32 name(ptr out, ptr excinfo, args..., shadows...)``: forward,
    seed, reverse, free.

    ``out`` receives ``{ adjoints..., primal, i64 peak tape bytes }``;
    ``shadows`` lists, per shadow argument, the LLVM types of its parameters,
    the positions among them of the shadows of the root's 'dup' parameters,
    in order, and the positions of array data pointers among those.

    An array's data pointer is never null (NumPy allocates even empty arrays),
    so the entry passes a pointer known not to be: inlined into the entry, the
    derivative then drops its per-element tests for null shadows and its
    loops over the array can vectorise. (An empty array, whose memory is
    never read, gets the write sink should it be null after all.)

    ``arena``: the shadows of the arrays the call allocates may come from the
    call's arena (see ``tape``): no shadow can outlive the call.
    """
    fn = root.fn
    user = fn.args[2:]
    shadow_params = [(t, f"%s{j}.{k}") for j, (types_, _, _) in enumerate(shadows)
                     for k, t in enumerate(types_)]
    data = [(f"%s{j}.{k}", f"%s{j}.{k}.nonnull") for j, (_, _, positions) in enumerate(shadows)
            for k in positions]
    params = ", ".join([f"{a.type} {local(a.name)}" for a in user]
                       + [f"{t} {ref}" for t, ref in shadow_params])
    args = ["ptr %ret", "ptr %excinfo"] + [f"{a.type} {local(a.name)}" for a in user]
    if return_active:
        args.append("ptr %shadow.ret")
    args += [f"ptr %s{j}.{k}{'.nonnull' if k in data_fields else ''}"
             for j, (_, fields, data_fields) in enumerate(shadows) for k in fields]
    args.append("ptr %tape")
    argtext = ", ".join(args)
    adj_types = [a.type for a in root.adjoint_args]
    out_type = "{ " + ", ".join(adj_types + [ret_slot_type, "i64"]) + " }"
    lines = [
        f"define i32 @\"{name}\"(ptr %out, ptr %excinfo{', ' if params else ''}{params}) {{",
        "entry:",
        f"  %tape = alloca {TAPE_TYPE}",
        f"  store {TAPE_TYPE} zeroinitializer, ptr %tape",
        f"  call void @{ACQUIRE}(ptr %tape)",
    ] + ([f"  %arena.allowed = getelementptr inbounds {TAPE_TYPE}, ptr %tape, i32 0, "
          f"i32 {ARENA_ALLOWED_FIELD}",
          "  store i64 1, ptr %arena.allowed"] if arena else []) + [
        f"  %ret = alloca {_slot(ret_slot_type)}",
        f"  store {ret_slot_type} zeroinitializer, ptr %ret",
        f"  %shadow.ret = alloca {_slot(ret_slot_type)}",
        f"  store {ret_slot_type} zeroinitializer, ptr %shadow.ret",
    ] + [line for given, nonnull in data for line in (
        f"  {nonnull}.is_null = icmp eq ptr {given}, null",
        f"  {nonnull} = select i1 {nonnull}.is_null, ptr @{SINK_WRITE}, ptr {given}")] + [
        f"  %overlaps = load atomic i64, ptr @{PRODUCT_OVERLAPS} monotonic, align 8",
        f"  %status = call i32 @\"{root.aug_name}\"({argtext})",
        "  %is_ok = icmp eq i32 %status, 0",
        "  %is_none = icmp eq i32 %status, -2",
        "  %ok = or i1 %is_ok, %is_none",
        "  br i1 %ok, label %swept, label %failed",
        "failed:",
        f"  call void @{FREE}(ptr %tape)",
        "  ret i32 %status",
        # a product wrote over its operand (blas.PRODUCT_OVERLAPS): no shadow is
        # written, and the caller (backend.numba_entry) raises
        "swept:",
        f"  %overlaps.now = load atomic i64, ptr @{PRODUCT_OVERLAPS} monotonic, align 8",
        "  %overlapped = icmp ne i64 %overlaps, %overlaps.now",
        "  br i1 %overlapped, label %failed.product, label %reverse",
        "failed.product:",
        f"  call void @{FREE}(ptr %tape)",
        "  ret i32 0",
        "reverse:",
        # the forward sweep only pushes and the reverse only pops: the tape is at
        # its peak now
        f"  %topp = getelementptr inbounds {TAPE_TYPE}, ptr %tape, i32 0, i32 1",
        "  %top = load i64, ptr %topp",
        f"  %peakp = getelementptr inbounds {TAPE_TYPE}, ptr %tape, i32 0, i32 {PEAK_FIELD}",
        "  store i64 %top, ptr %peakp",
    ]
    if return_active:
        lines.append(f"  store {ret_slot_type} 1.0, ptr %shadow.ret")
    if adj_types:
        lines.append(f"  %adj = call {root.rev_type} @\"{root.rev_name}\"({argtext})")
    else:
        lines.append(f"  call void @\"{root.rev_name}\"({argtext})")
    lines += [
        f"  %rstatusp = getelementptr inbounds {TAPE_TYPE}, ptr %tape, i32 0, i32 {STATUS_FIELD}",
        "  %rstatus = load i32, ptr %rstatusp",
        "  %rfailed = icmp ne i32 %rstatus, 0",
        "  br i1 %rfailed, label %reverse.failed, label %results",
        "reverse.failed:",
        f"  %rexcp = getelementptr inbounds {TAPE_TYPE}, ptr %tape, i32 0, i32 {EXCINFO_FIELD}",
        "  %rexc = load ptr, ptr %rexcp",
        "  store ptr %rexc, ptr %excinfo",
        f"  call void @{FREE}(ptr %tape)",
        "  ret i32 %rstatus",
        "results:"]
    lines.append(f"  %primal = load {ret_slot_type}, ptr %ret")
    lines.append("  %peak = load i64, ptr %peakp")
    agg = "undef"
    fields = [(f"%a{i}", t, f"  %a{i} = extractvalue {root.rev_type} %adj, {i}")
              for i, t in enumerate(adj_types)]
    fields += [("%primal", ret_slot_type, None), ("%peak", "i64", None)]
    for i, (ref, ty, pre) in enumerate(fields):
        if pre:
            lines.append(pre)
        lines.append(f"  %o{i} = insertvalue {out_type} {agg}, {ty} {ref}, {i}")
        agg = f"%o{i}"
    lines += [
        f"  store {out_type} {agg}, ptr %out",
        f"  call void @{FREE}(ptr %tape)",
        "  ret i32 0",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _tangent_call_args(root: ForwardDerivative, primal_slot, tangent_slot, passed) -> list:
    """Arguments of a call to ``root``: its own (the primal return in
    ``primal_slot``), then the tangents and shadows of its non-const
    arguments, the return's tangent in ``tangent_slot`` and the others from
    the parameters named ``passed``, in order."""
    args = [f"ptr {primal_slot}", "ptr %excinfo"] + [f"{a.type} {local(a.name)}"
                                                    for a in root.fn.args[2:]]
    extras = iter(local(n) for n in passed)
    for i, (a, act) in enumerate(zip(root.fn.args, root.activity)):
        if act != "const":
            args.append(f"{a.type} {tangent_slot if i == 0 else next(extras)}")
    return args


def forward_entry_function(name, root: ForwardDerivative, ret_slot_type, return_tangent,
                           shadow_params, passed) -> str:
    """``i32 name(ptr out, ptr excinfo, args..., shadows...)``: calls the root's
    tangent function; ``out`` receives ``{ tangent, primal, i64 0 }`` (no
    tangent field when the return carries none).

    ``shadow_params`` lists the (type, name) of the entry's extra parameters
    (tangent scalars, shadow arrays' fields); ``passed`` the names among them
    that are the root's tangents and shadows of its non-const arguments, in order.
    """
    params = [f"{a.type} {local(a.name)}" for a in root.fn.args[2:]]
    params += [f"{t} {local(n)}" for t, n in shadow_params]
    args = _tangent_call_args(root, "%ret", "%tangent.ret", passed)
    fields = ([ret_slot_type] if return_tangent else []) + [ret_slot_type, "i64"]
    out_type = "{ " + ", ".join(fields) + " }"
    lines = [
        f"define i32 @\"{name}\"(ptr %out, ptr %excinfo{', ' if params else ''}"
        f"{', '.join(params)}) {{",
        "entry:",
        f"  %ret = alloca {_slot(ret_slot_type)}",
        f"  store {ret_slot_type} zeroinitializer, ptr %ret",
        f"  %tangent.ret = alloca {_slot(ret_slot_type)}",
        f"  store {ret_slot_type} zeroinitializer, ptr %tangent.ret",
        f"  %status = call i32 @\"{root.name}\"({', '.join(args)})",
        "  %is_ok = icmp eq i32 %status, 0",
        "  %is_none = icmp eq i32 %status, -2",
        "  %ok = or i1 %is_ok, %is_none",
        "  br i1 %ok, label %done, label %failed",
        "failed:",
        "  ret i32 %status",
        "done:",
        f"  %primal = load {ret_slot_type}, ptr %ret",
        f"  %tangent = load {ret_slot_type}, ptr %tangent.ret",
    ]
    values = (["%tangent"] if return_tangent else []) + ["%primal", "0"]
    agg = "undef"
    for i, (ref, ty) in enumerate(zip(values, fields)):
        lines.append(f"  %o{i} = insertvalue {out_type} {agg}, {ty} {ref}, {i}")
        agg = f"%o{i}"
    # (the status says whether the result was None: -2)
    lines += [f"  store {out_type} {agg}, ptr %out", "  ret i32 %status", "}"]
    return "\n".join(lines) + "\n"


def tangent_function(name, root: ForwardDerivative, ret_slot_type, shadow_params,
                     passed) -> str:
    """A Numba-convention function ``i32 name(ptr ret, ptr excinfo, args...,
    tangents...)`` whose return value is the root's tangent (its primal is
    dropped): reverse mode differentiates it like any Numba function, which
    gives second derivatives (reverse over forward)."""
    params = ["ptr %ret", "ptr %excinfo"] + [f"{a.type} {local(a.name)}"
                                             for a in root.fn.args[2:]]
    params += [f"{t} {local(n)}" for t, n in shadow_params]
    args = _tangent_call_args(root, "%primal", "%ret", passed)
    return "\n".join([
        f"define i32 @\"{name}\"({', '.join(params)}) {{",
        "entry:",
        f"  %primal = alloca {_slot(ret_slot_type)}",
        f"  %status = call i32 @\"{root.name}\"({', '.join(args)})",
        "  ret i32 %status",
        "}"]) + "\n"
