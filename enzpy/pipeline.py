"""The build pipeline: from an ``@njit`` function and annotated argument types
to a callable derivative, in named, timed stages.

Every mode runs the same stages, each one line in ``Build.run``:

1. ``lower``: Numba types and lowers the function; enzpy captures the raw IR
   of it and of every Numba function it reaches, links and cleans it up, and
   reads it into its IR model (stages ``numba_compile``, ``capture``,
   ``cleanup``, ``read_ir``);
2. ``transform``: the derivative module: reverse mode's augmented forward and
   reverse functions, forward mode's tangent functions, or, for ``hvp``,
   reverse mode over the tangent IR (stages ``reverse``, ``forward``,
   ``read_tangent_ir``);
3. ``compile``: enzpy's optimizer and machine code (``parse``, ``optimize``,
   ``codegen``);
4. ``wrap``: an ``@njit`` entry point calling the machine code.

A stage failing with anything but ``UnsupportedError`` (or, while Numba
lowers the user's code, Numba's own errors) is a bug in enzpy, reported as an
``InternalError``.
"""
from __future__ import annotations

import gc
import itertools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field

import numba
from numba import types
from numba.core.caching import NullCache
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from . import (arguments, backend, custom, diskcache, fingerprint, frontend, refcounts,
               typeddict, userrules)
from .augment import INLINE_LIMIT
from .cache import (STATS, ModuleBuilder, entry_function, forward_entry_function,
                    tangent_function)
from .errors import InternalError, RuleError, UnsupportedError
from .irtext import read_module_text, type_text

log = logging.getLogger("enzpy")

# Argument types holding no pointer a derivative could store a shadow through.
_FLAT = (types.Array, types.Float, types.Complex)


# -- build reports -------------------------------------------------------------
@dataclass
class BuildReport:
    function: str
    signature: str
    timings: dict = field(default_factory=dict)   # stage -> seconds
    primal_instructions: int = 0
    # Numba's increfs and decrefs of borrowed arrays the derivative leaves out
    refcounts_dropped: int = 0
    peak_tape_bytes: int = 0          # the largest tape of any call so far
    derivative_functions: int = 0
    module_bytes: int = 0
    cache: str = ""                   # the persistent cache: loaded, stored, not cached: why
    # Numba's part of numba_compile: typing, lowering, optimize_codegen (seconds)
    numba: dict = field(default_factory=dict)
    # the derivative functions given LLVM's fast code generation (backend.FAST_CODEGEN_INSTRUCTIONS)
    fast_codegen: list = field(default_factory=list)

    @property
    def total(self):
        return sum(v for k, v in self.timings.items() if k != "numba_compile")

    def __str__(self):
        stages = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items())
        if self.numba:
            stages += " (Numba: " + ", ".join(f"{k} {v * 1e3:.1f} ms"
                                              for k, v in self.numba.items()) + ")"
        cache = f"; cache: {self.cache}" if self.cache else ""
        return (f"{self.function}{self.signature}: {stages}; "
                f"{self.primal_instructions} primal instructions, "
                f"{self.derivative_functions} derivative functions{cache}")


class _Stage:
    def __init__(self, report, name, user_code):
        self.report, self.name, self.user_code = report, name, user_code

    def __enter__(self):
        # Python's cyclic collector is off during enzpy's own stages: they
        # allocate millions of small objects that live until the stage ends, and
        # every full collection walks all of them (and Numba's), which made the
        # stages grow faster than the IR (2+2 fuse-2 evaluator: read_ir 0.32 ->
        # 0.14 s, reverse 0.52 -> 0.31 s). Numba's compile of the user's code
        # keeps it (it can run for minutes). A caller's own gc.disable() is kept.
        self.paused_gc = not self.user_code and gc.isenabled()
        if self.paused_gc:
            gc.disable()
        self.t = time.perf_counter()

    def __exit__(self, kind, exc, tb):
        timings = self.report.timings
        timings[self.name] = timings.get(self.name, 0.0) + time.perf_counter() - self.t
        if self.paused_gc:
            gc.enable()
        if exc is None or self.user_code or isinstance(exc, (UnsupportedError, InternalError,
                                                             RuleError)):
            return False
        raise InternalError(
            f"enzpy failed while building the derivative of '{self.report.function}' "
            f"{self.report.signature} (stage '{self.name}'): {type(exc).__name__}: {exc}. "
            f"This is a bug in enzpy; please report it with the function and its argument "
            f"types.") from exc


# -- the entry cache -------------------------------------------------------------
class Entry:
    """A built derivative: its ``@njit`` entry point and how to call it."""
    __slots__ = ("call", "active_positions", "adjoint_counts", "shadow_positions", "report",
                 "alias_checks", "written_shadowed", "library", "returns_tangent")

    def __init__(self, call, active_positions, shadow_positions, report, alias_checks,
                 written_shadowed, library, returns_tangent=False, adjoint_counts=None):
        self.call = call
        self.library = library            # the machine code ``call`` jumps to
        self.active_positions = active_positions
        # adjoints returned per Active argument (a tuple of floats has several)
        self.adjoint_counts = adjoint_counts or [1] * len(active_positions)
        self.shadow_positions = shadow_positions
        self.report = report
        # (written, other) argument pairs that must not share memory
        self.alias_checks = alias_checks
        # written Duplicated arrays: sharing memory only as their shadows do
        self.written_shadowed = written_shadowed
        self.returns_tangent = returns_tangent    # forward mode: the call returns a tangent


entries: dict = {}
# (function, mode) -> generated cache-hit paths of autodiff (fastpath.py), dropped with entries
fast_paths: dict = {}
reports: dict = {}
lock = threading.RLock()


# Called with a dispatcher being recompiled: drop what enzpy compiled around it.
RECOMPILE_HOOKS: list = [frontend.forget, userrules.forget]


def _forget_recompiled():
    """``f.recompile()`` (Numba's way to take changed globals) makes the
    derivatives built for ``f`` here those of code it no longer runs: they go
    (a caller compiled before keeps calling the old code, and its derivative)."""
    recompile = numba.core.dispatcher.Dispatcher.recompile
    if getattr(recompile, "_enzpy_hook", False):
        return

    def recompile_forgetting(self):
        with lock:
            for table in (entries, fast_paths):
                for key in [k for k in table if any(part is self for part in k)]:
                    del table[key]
            # (its new overloads read today's values: not those the key vouched for)
            _vouched.pop(id(self), None)
            # (functions enzpy compiled around it still call its old code)
            for forget in RECOMPILE_HOOKS:
                forget(self)
        return recompile(self)

    recompile_forgetting._enzpy_hook = True
    numba.core.dispatcher.Dispatcher.recompile = recompile_forgetting


_forget_recompiled()


# id(dispatcher) -> [(weak reference, argument types, entry key, derivative_key's
# arguments, the key)]: derivatives loaded from the persistent cache while Numba
# had not compiled the function, under a key covering the values its globals had
rather_than_numba: dict = {}


def _watch_numba_compiles():
    """A derivative loaded before Numba compiled its function holds the values
    the globals had at the load; Numba freezes those it finds when it compiles
    (or the ones in its own cache, ``cache=True``). When it does, the entry is
    kept only if the key still reads the same, else dropped (the next call
    builds from the code Numba runs, or refuses)."""
    add_overload = numba.core.dispatcher.Dispatcher.add_overload
    if getattr(add_overload, "_enzpy_hook", False):
        return

    def add_overload_watched(self, cres):
        add_overload(self, cres)
        if id(self) in rather_than_numba:
            _check_loaded(self, cres)

    add_overload_watched._enzpy_hook = True
    numba.core.dispatcher.Dispatcher.add_overload = add_overload_watched


def _check_loaded(disp, cres):
    argtypes = tuple(cres.signature.args)
    with lock:
        waiting = rather_than_numba.pop(id(disp), [])
        for loaded in list(waiting):
            ref, loaded_types, key, key_args, digest = loaded
            if ref() is not disp or loaded_types != argtypes:
                continue
            waiting.remove(loaded)
            try:
                walk = fingerprint.derivative_key(disp, *key_args)
            except fingerprint.NotCacheable:
                walk = None
            # (code Numba loaded from its cache holds another process's values)
            same = walk is not None and walk.key == digest and not any(
                getattr(d, "_cache_hits", None) for d in walk.dispatchers)
            if not same:
                entries.pop(key, None)
                for paths in [k for k in fast_paths if k[0] is disp]:
                    del fast_paths[paths]
        live = [loaded for loaded in waiting if loaded[0]() is disp]
        if live:
            rather_than_numba[id(disp)] = live


_watch_numba_compiles()


# Numba passes an array as (meminfo, parent, nitems, itemsize, data, shape..., strides...):
# the meminfo and the data pointer get shadows.
ARRAY_SHADOWED_FIELDS = (0, 4)
ARRAY_DATA_FIELD = 4


@dataclass
class _Primal:
    """A function lowered by Numba, read into enzpy's IR model."""
    low: frontend.Lowered
    model: object
    lowered: dict
    blocks: dict


class Build:
    """One derivative: ``Build(disp, signature, mode, key).run()`` -> ``Entry``.

    ``signature`` lists (annotation class name, Numba type, Numba type of the
    shadow or None) per argument; ``mode`` is 'reverse', 'forward' or 'hvp'.
    """

    def __init__(self, disp, signature, mode, key, by_address=False):
        self.disp, self.signature, self.mode, self.key = disp, signature, mode, key
        self.by_address = by_address
        self.fingerprint = self.machine = self.captured = self.digest = None
        self.compiled_digest = None
        self.compiled_before = False
        self.environments = []    # Numba environments renamed for the cache (own_environments)
        self.ctx = cpu_target.target_context
        self.argtypes = tuple(ty for _, ty, _ in signature)
        label = f"hvp{self.argtypes}" if mode == "hvp" else str(self.argtypes)
        self.report = BuildReport(disp.py_func.__qualname__, label)

    def stage(self, name, user_code=False):
        return _Stage(self.report, name, user_code)

    def run(self) -> Entry:
        # (Numba's lock first: code typing an @njit caller of autodiff holds it)
        with global_compiler_lock, lock:
            if self.key in entries:          # another thread built it meanwhile
                STATS.hits += 1
                return entries[self.key]
            STATS.misses += 1
            entry = self.load()
            if entry is not None and self.disp.overloads.get(self.argtypes) is None:
                rather_than_numba.setdefault(id(self.disp), []).append((
                    weakref.ref(self.disp), self.argtypes, self.key, self.key_args,
                    self.values_key))
            if entry is None:
                self.lower()
                self.transform()
                self.compile()
                entry = self.wrap()
                self.store(entry)
            entries[self.key] = entry
            reports.setdefault(self.disp.py_func, []).append(self.report)
            log.info("built %s", self.report)
            return entry

    # -- stages ------------------------------------------------------------------
    def capture(self):
        """Numba's IR of the function and of all it calls, linked (once per build)."""
        if self.captured is not None:
            return self.captured
        with self.stage("numba_compile", user_code=True), frontend.numba_timings() as split:
            low = frontend.lower(self._root(), self.argtypes)
            frontend.refuse_stale_numba_cache(self.disp)
            # (callees Numba compiled already are only looked up here)
            lowered = frontend.collect_module(low)
        self.report.numba = split
        with self.stage("capture"):
            module, blocks = frontend.link_module(low, lowered, self.mode)
        self.captured = low, lowered, module, blocks
        return self.captured

    def _root(self):
        # a function with a custom rule is differentiated through a call of it
        return userrules.trampoline(self.disp) if userrules.has_rule(self.disp) else self.disp

    def _user_digest(self) -> str:
        """The digest of the linked IR of the program without the glue of
        enzpy's own rules (enzpy's code, keyed by its version): of what Numba
        compiled of the user's code, all a cache entry's ``primal_digest`` covers."""
        if self.mode != "hvp":       # (no other mode links that glue)
            module = self.capture()[2]
        else:
            with self.stage("numba_compile", user_code=True):
                low = frontend.lower(self._root(), self.argtypes)
                lowered = frontend.collect_module(low)
            with self.stage("capture"):
                module = frontend.link_module(low, lowered, self.mode, builtin_glue=False)[0]
        with self.stage("cache_lookup"):
            return fingerprint.primal_digest(str(module))

    def _compiled_digest(self):
        """The digest of the code Numba compiled for the function (its optimized
        IR, callees linked in): cheap where ``_user_digest`` lowers the code once
        more. None where Numba keeps no IR (a function it loaded from its cache)."""
        overload = self._root().overloads.get(self.argtypes)
        if overload is None or getattr(overload.library, "_disable_inspection", False):
            return None
        return fingerprint.primal_digest(overload.library.get_llvm_str())

    def lower(self):
        low, lowered, module, blocks = self.capture()
        if self.fingerprint is not None and self.digest is None:
            self.digest = self._user_digest()       # (what the cache entry is built from)
        self.captured = None                 # (cleanup changes the module)
        with self.stage("cleanup"):
            frontend.mark_small_helpers(module, lambda name: name == low.symbol or
                                        custom.covered(name) or _user_code(lowered.get(name)),
                                        custom.covered)
            frontend.cleanup(module)
        with self.stage("read_ir"):
            model = read_module_text(frontend.plain_bit_views(str(module)))
            self.report.refcounts_dropped = refcounts.drop_borrowed_refcounts(model)
        self.report.primal_instructions = _size(model)
        self.dump("primal", model.text)
        self.primal = _Primal(low, model, lowered, blocks)
        # (what the key must cover: every function linked, not only those called by name)
        self.linked_functions = [frontend.owner(name) for name in model.functions]
        self.restype = low.restype
        if self.mode != "hvp":             # hvp checks for a float return itself
            _check_return(low, self.mode)

    def transform(self):
        low = self.primal.low
        restype = low.restype
        if self.mode == "hvp":
            self._transform_hvp()
            return
        layouts = self.layouts(self.signature, self.mode == "reverse")
        activity = self.activity(layouts, self.returns_derivative)
        if self.mode == "reverse":
            self.builder, self.entry_name, self.text = self._reverse_module(
                self.primal, low.symbol, activity, layouts, restype)
        else:
            with self.stage("forward"):
                self.builder = ModuleBuilder(self.primal.model, self.primal.lowered,
                                             self.primal.blocks, mode="forward",
                                             **self._sharing())
                root = _generate(self.builder, low.symbol, activity, low.name)
                self.entry_name = self._entry_name(low.symbol)
                self.text = self.builder.module_text(forward_entry_function(
                    self.entry_name, root, _return_slot_type(self.ctx, restype),
                    self.returns_derivative, *self._tangent_params(layouts)))
        with self.stage("alias_checks"):
            self.alias_checks, self.written_shadowed = _alias_checks(
                self.ctx, self.builder.readonly, low.symbol, self.signature)
        self.dump("derivative", self.text)
        self.report.derivative_functions = len(self.builder.derivatives)
        self.report.module_bytes = len(self.text)

    def compile(self):
        with self.stage("parse"):
            big = [name for name, fn in self.model_compiled.functions.items()
                   if sum(len(b.instructions) for b in fn.blocks) > INLINE_LIMIT]
            module = backend.prepare_module(self.text, self.entry_name, self.builder.exported,
                                            big)
        codegen = self.ctx.codegen()
        with self.stage("optimize"):
            backend.optimize(module, codegen)
            self.report.fast_codegen = backend.fast_codegen_for_huge_blocks(module)
            if self.fingerprint is not None:
                self.environments = diskcache.own_environments(module, self.fingerprint.key)
                self.relocations, self.process_bound = diskcache.relocations(
                    str(module), self.fingerprint)
        with self.stage("codegen"):
            for name, _, _, env in self.environments:
                backend.define_environment(codegen, name, env)
            self.library, self.address = backend.compile_module(
                module, self.entry_name, codegen, keep_object=self.fingerprint is not None)
        if self.fingerprint is not None:
            self._register()
        self.builder.publish(self.library)

    def wrap(self) -> Entry:
        """The entry point, from what a cached derivative stores too: the
        machine code, the return type and the alias checks."""
        if self.mode == "hvp":
            return self._wrap_hvp()
        reverse = self.mode == "reverse"
        layouts = self.layouts(self.signature, reverse)
        shadow_types = [shadow for kind, _, shadow in self.signature if kind == "Duplicated"]
        adjoint_types = [t for (kind, _, _), lay in zip(self.signature, layouts)
                         if kind == "Active" for t in lay.adjoint_types]
        tangent = not reverse and self.returns_derivative
        with self.stage("wrap"):
            call = self._entry_call(self.argtypes + tuple(shadow_types), adjoint_types,
                                    tangent)
        actives = [i for i, (kind, _, _) in enumerate(self.signature) if kind == "Active"]
        shadows = [i for i, (kind, _, _) in enumerate(self.signature) if kind == "Duplicated"]
        return Entry(call, actives, shadows, self.report, self.alias_checks,
                     self.written_shadowed, self.library, returns_tangent=tangent,
                     adjoint_counts=[len(layouts[i].adjoint_types) for i in actives])

    @property
    def returns_derivative(self) -> bool:
        return isinstance(self.restype, types.Float) or _tangent_result(self.restype)

    # -- the persistent cache --------------------------------------------------------
    def load(self):
        """The derivative from the persistent cache (or built earlier in this
        process under the same fingerprint), or None."""
        self.fingerprint = None
        if not diskcache.enabled():
            self.report.cache = "off"
            return None
        with self.stage("cache_lookup"):
            self.key_args = (self.signature, self.mode, userrules.registered())
            try:
                self.fingerprint = fingerprint.derivative_key(self.disp, *self.key_args)
            except fingerprint.NotCacheable as exc:
                self.report.cache = f"not cached: {exc}"
                return None
            # (the key of today's values, before code compiled earlier is added to it)
            self.values_key = self.fingerprint.key
        if self.disp.overloads.get(self.argtypes) is None and (self.by_address or any(
                _numba_caches(d) for d in self.fingerprint.dispatchers)):
            # The first call would load this code from Numba's cache, with the values
            # (and callees) it was compiled with then: the derivative must be of that.
            # (An @njit caller keeps the derivative it calls: no later check can drop it.)
            with self.stage("numba_compile", user_code=True):
                frontend.lower(self.disp, self.argtypes)
        with self.stage("cache_lookup"):
            compiled = self.compiled_before = self.fingerprint.compiled_ufuncs or \
                _compiled_before(self.fingerprint.dispatchers)
        # Numba compiled some of this code already, freezing the values its
        # globals had then, which the walk (today's values) does not see: an
        # entry is used only if built from the same compiled code, and one built
        # from code compiled before the call has a key covering that code. The
        # code is known by the digest of Numba's optimized IR (cheap), else (a
        # function Numba loaded from its cache) of its IR lowered once more.
        codegen = self.ctx.codegen()
        with self.stage("cache_lookup"):
            if compiled:
                frontend.refuse_stale_numba_cache(self.disp)
                self.compiled_digest = self._compiled_digest()
            if self.fingerprint.key in diskcache.unloadable:
                # its names may be half defined in this process: build it unnamed
                self.fingerprint = None
                self.report.cache = "not cached: its cache entry did not load"
                return None
            keyed_by_code = []

            def built_from_covered_code(index):
                # (an entry whose build reached code the key does not cover, or any entry
                # in a process where user code extends Numba, is used only if built from
                # the code Numba compiles today: see fingerprint.keyed_by_code)
                by_code = index["keyed_by_code"] or fingerprint.extended_by_user()
                keyed_by_code.append(by_code)
                return not by_code
            if not compiled:
                self.machine, self.report.cache = diskcache.find(
                    self.fingerprint, codegen, accept=built_from_covered_code)
            elif self.compiled_digest is not None:
                self._find_compiled("compiled_digest", self.compiled_digest, codegen)
        if (compiled and self.compiled_digest is None) or any(keyed_by_code):
            self.digest = self._user_digest()
            with self.stage("cache_lookup"):
                self._find_compiled("primal_digest", self.digest, codegen)
        if self.machine is None:
            self.report.cache = ""
            return None
        index = self.machine.index
        self.library, self.address = self.machine.library, self.machine.address
        self.restype, self.alias_checks = index["restype"], index["alias_checks"]
        self.written_shadowed = index["written_shadowed"]
        for name, value in index["report"].items():
            setattr(self.report, name, value)
        return self.wrap()

    def _find_compiled(self, field, digest, codegen):
        """The entry of the key built from the code of that ``digest`` (its
        index's ``field``), else the one whose key covers the digest (under
        which a build then stores)."""
        self.machine, self.report.cache = diskcache.find(
            self.fingerprint, codegen, accept=lambda index: index.get(field) == digest)
        if self.machine is None:
            self.fingerprint.add("compiled", digest)
            self.machine, self.report.cache = diskcache.find(self.fingerprint, codegen)

    def _entry_call(self, argtypes, adjoint_types, tangent):
        """The ``@njit`` entry point: by address for code that stays in this
        process (``by_address``: inside a caller Numba may try to cache), else
        by symbol, saved with the derivative and loaded without compiling."""
        machine = self.machine
        if self.by_address or machine is None:
            return backend.numba_entry(self.address, argtypes, adjoint_types, self.restype,
                                       tangent)
        if machine.call is None:
            name = f"entry_{self.fingerprint.key[:16]}"
            state = machine.index.get("wrapper")
            machine.call = backend.loaded_entry(state, name) if state is not None else \
                backend.numba_entry(machine.index["entry_name"], argtypes, adjoint_types,
                                    self.restype, tangent, name=name)
        return machine.call

    def _sharing(self) -> dict:
        """How this build's derivatives are named and shared (see ModuleBuilder)."""
        if self.fingerprint is None:
            return {}
        return {"owner": self.fingerprint.key, "reusable": frozenset(diskcache.durable)}

    def _register(self):
        """A build under a fingerprint: its machine code is this key's in this process."""
        index = {"entry_name": self.entry_name, "restype": self.restype,
                 "alias_checks": self.alias_checks, "written_shadowed": self.written_shadowed,
                 "primal_digest": self.digest,
                 "keyed_by_code": fingerprint.keyed_by_code(self.fingerprint,
                                                            self.linked_functions),
                 "report": {"primal_instructions": self.report.primal_instructions,
                            "derivative_functions": self.report.derivative_functions,
                            "module_bytes": self.report.module_bytes}}
        self.machine = diskcache.register(self.fingerprint.key, index, self.library,
                                          self.address)

    def store(self, entry):
        """Save the derivative's machine code and index (not one that depends
        on this process: dynamic addresses, Numba environments)."""
        if self.fingerprint is None:
            return
        if not self.compiled_before:
            _vouch(self.fingerprint.dispatchers)
        key, index = self.fingerprint.key, self.machine.index
        with self.stage("cache_store"):
            if self.process_bound:
                self.report.cache = ("not cached: the derivative refers to objects of this "
                                     "process (dynamic addresses or Numba environments): "
                                     + self.process_bound[:300])
                return
            index["relocations"] = self.relocations
            index["compiled_digest"] = self.compiled_digest or self._compiled_digest()
            index["environments"] = [found[:3] for found in self.environments]
            index["glue"] = sorted(self.builder.requires.values(), key=str)
            if self.machine.call is not None:
                index["wrapper"] = backend.saved_entry(self.machine.call)
            if not diskcache.save(key, self.machine, self.builder.depends):
                self.report.cache = "not cached: the cache folder cannot be used"
                return
            STATS.saved += 1
            self.report.cache = "stored"

    def _entry_name(self, symbol) -> str:
        # a cached entry keeps its name in every process that loads it
        if self.fingerprint is not None:
            return f"enzpy.entry.{self.fingerprint.key[:40]}"
        return f"enzpy.entry.{next(backend._ids)}.{symbol}"

    # -- reverse and forward modules ----------------------------------------------
    @property
    def model_compiled(self):
        """The IR model the derivative module was written from."""
        return getattr(self, "tangent_model", None) or self.primal.model

    def _reverse_module(self, primal, symbol, activity, layouts, restype, name=None):
        """(builder, entry name, module text) of the reverse derivative of ``symbol``."""
        with self.stage("reverse"):
            builder = ModuleBuilder(primal.model, primal.lowered, primal.blocks,
                                    **self._sharing())
            builder.readonly.trust_only(symbol, self._array_params(layouts))
            root = _generate(builder, symbol, activity, name or primal.low.name,
                             self._nonnull_data(layouts, activity))
            entry_name = self._entry_name(symbol)
            shadows = [(self._flat_types(shadow), lay.shadow_fields,
                        (ARRAY_DATA_FIELD,) if isinstance(shadow, types.Array) else ())
                       for (kind, _, shadow), lay in zip(self.signature, layouts)
                       if kind == "Duplicated"]
            # A shadow can outlive the call only through a container the caller
            # passes with its shadow: without one, shadows may live in the arena.
            arena = all(kind != "Duplicated" or isinstance(ty, _FLAT)
                        for kind, ty, _ in self.signature)
            text = builder.module_text(entry_function(
                entry_name, root, _return_slot_type(self.ctx, restype), activity[0] == "dup",
                shadows, arena))
        return builder, entry_name, text

    def _array_params(self, layouts) -> frozenset:
        """Indices of the root's parameters that belong to array arguments."""
        found, start = set(), 2
        for (_, ty, _), lay in zip(self.signature, layouts):
            if isinstance(ty, types.Array):
                found.update(range(start, start + len(lay.activity)))
            start += len(lay.activity)
        return frozenset(found)

    def _nonnull_data(self, layouts, activity) -> frozenset:
        """Indices of the root's parameters receiving the data pointers of
        ``Duplicated`` arrays' shadows, which ``entry_function`` passes non-null."""
        found, start = set(), 2
        for (kind, _, shadow), lay in zip(self.signature, layouts):
            data = start + ARRAY_DATA_FIELD
            if kind == "Duplicated" and isinstance(shadow, types.Array) and \
                    activity[data] == "dup":
                found.add(data)
            start += len(lay.activity)
        return frozenset(found)

    def _tangent_params(self, layouts):
        """The extra parameters of a forward entry, as (LLVM type, name), and the
        names of those passed on as the root's tangents and shadows, in order."""
        params, passed = [], []
        for j, ((kind, ty, shadow), lay) in enumerate(zip(self.signature, layouts)):
            if kind != "Duplicated":
                continue
            fields = self._flat_types(shadow)
            params += [(t, f"t{j}.{k}") for k, t in enumerate(fields)]
            passed += [f"t{j}.{k}" for k in lay.shadow_fields]
        return params, passed

    def _flat_types(self, numba_type) -> list:
        """LLVM parameter types of a value of ``numba_type``."""
        return [type_text(t) for t in self.ctx.get_arg_packer([numba_type]).argument_types]

    def layouts(self, signature, reverse):
        return [arguments.layout(self.ctx, kind, ty, shadow, reverse)
                for kind, ty, shadow in signature]

    @staticmethod
    def activity(layouts, return_active) -> list:
        """Activity of each LLVM parameter of the root function."""
        return ["dup" if return_active else "const", "const"] + [
            a for lay in layouts for a in lay.activity]

    # -- hvp: reverse over forward ---------------------------------------------------
    def _transform_hvp(self):
        """Reverse mode over the tangent function that forward mode writes (its
        IR is read back and differentiated like any Numba function's).

        The entry takes ``(x, *consts, v[, hv, scratch])``: an array x's
        product is accumulated into ``hv`` (``scratch``, like x, receives the
        gradient w.r.t. v, unused); a scalar x's is returned as the adjoint."""
        low = self.primal.low
        if not isinstance(low.restype, types.Float):
            raise TypeError(f"hvp: '{low.name}' returns {low.restype}; it needs a function "
                            f"returning a float scalar")
        tx = self.argtypes[0]
        scalar = isinstance(tx, types.Float)
        consts = [("Const", ty, None) for ty in self.argtypes[1:]]
        first = self.layouts([("Duplicated", tx, tx)] + consts, False)
        v_fields = self._flat_types(tx)
        v_params = [(t, f"v.{k}") for k, t in enumerate(v_fields)]
        v_passed = ["v.0"] if scalar else [f"v.{k}" for k in ARRAY_SHADOWED_FIELDS]
        with self.stage("forward"):
            tangents = ModuleBuilder(self.primal.model, self.primal.lowered,
                                     self.primal.blocks, mode="forward", share=False)
            root = _generate(tangents, low.symbol, self.activity(first, True), low.name)
            name = f"enzpy.tangent.{next(backend._ids)}.{low.symbol}"
            text = tangents.module_text(tangent_function(
                name, root, _return_slot_type(self.ctx, low.restype), v_params, v_passed))
        self.dump("tangent", text)
        with self.stage("read_tangent_ir"):
            self.tangent_model = read_module_text(text)
        # v is Duplicated too (with a scratch shadow): the tangent function
        # writes tangents into it where f writes into x.
        self.signature = ([("Active", tx, None) if scalar else ("Duplicated", tx, tx)]
                          + consts + [("Const", tx, None) if scalar else ("Duplicated", tx, tx)])
        layouts = self.layouts(self.signature, True)
        try:
            self.builder, self.entry_name, self.text = self._reverse_module(
                _Primal(low, self.tangent_model, self.primal.lowered, self.primal.blocks), name,
                self.activity(layouts, True), layouts, low.restype, name=low.name)
        except UnsupportedError as exc:
            raise _dictionaries_named(exc, self.primal.lowered) from None
        self.dump("hvp", self.text)
        self.report.derivative_functions = len(self.builder.derivatives) + len(
            tangents.derivatives)
        self.report.module_bytes = len(self.text)
        with self.stage("alias_checks"):
            self.alias_checks, self.written_shadowed = _alias_checks(
                self.ctx, self.builder.readonly, name, self.signature)

    def _wrap_hvp(self) -> Entry:
        tx = self.argtypes[0]
        scalar = isinstance(tx, types.Float)
        shadow_types = [] if scalar else [tx, tx]
        with self.stage("wrap"):
            call = self._entry_call(self.argtypes + (tx,) + tuple(shadow_types),
                                    [tx] if scalar else [], False)
        shadows = [] if scalar else [0, len(self.argtypes)]
        return Entry(call, [0] if scalar else [], shadows, self.report, self.alias_checks,
                     self.written_shadowed, self.library)

    def dump(self, stage, text):
        """With ENZPY_DUMP=<folder>, write each stage's IR there (``f.primal.ll``, ...)."""
        folder = os.environ.get("ENZPY_DUMP")
        if folder:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{self.disp.py_func.__name__}.{stage}.ll")
            with open(path, "w") as fh:
                fh.write(text)


def build(disp, signature, mode, key, by_address=False) -> Entry:
    """The derivative of ``disp`` for ``signature`` in ``mode`` (cached under
    ``key``); ``by_address``: its entry point is called from ``@njit`` code."""
    return Build(disp, signature, mode, key, by_address).run()


def _user_code(low) -> bool:
    """A function of the user's (not Numba's or NumPy's): it keeps its own
    derivative, and messages about it name it."""
    if low is None:
        return False
    code = getattr(low.dispatcher.py_func, "__code__", None)
    return code is not None and not fingerprint.is_library_file(code.co_filename)


def _size(model) -> int:
    return sum(len(b.instructions) for fn in model.functions.values() for b in fn.blocks)


def _tangent_result(ty) -> bool:
    """Results forward mode gives a tangent of: float arrays and tuples of
    floats, arrays and integers (with at least one float or array), or such a
    result or a float that may be None (``np.linalg.matrix_power``'s)."""
    if isinstance(ty, types.Optional):
        return isinstance(ty.type, types.Float) or _tangent_result(ty.type)
    if isinstance(ty, types.Array):
        return isinstance(ty.dtype, types.Float)
    if isinstance(ty, types.BaseTuple):
        return all(isinstance(t, (types.Float, types.Integer, types.Boolean)) or
                   _tangent_result(t) for t in ty) and any(
            isinstance(t, types.Float) or _tangent_result(t) for t in ty)
    return False


def _check_return(low, mode):
    restype = low.restype
    if isinstance(restype, (types.Float, types.Integer, types.Boolean)) or \
            restype == types.none:
        return
    if mode == "forward" and _tangent_result(restype):
        return
    if mode == "forward":
        raise UnsupportedError(f"function '{low.name}' returns {restype}; forward mode "
                               f"differentiates functions returning floats, float arrays or "
                               f"tuples of them, or None")
    raise UnsupportedError(f"function '{low.name}' returns {restype}; reverse mode "
                           f"differentiates functions returning a scalar or None: use "
                           f"enzpy.vjp(f, *args) for array and tuple results, or write the "
                           f"result into an output argument passed as Duplicated")


def _generate(builder, symbol, activity, name, nonnull=frozenset()):
    try:
        return builder.build(symbol, activity, nonnull)
    except UnsupportedError as exc:
        if f"'{name}'" in str(exc):
            raise
        raise UnsupportedError(f"differentiating '{name}': {exc}") from None


# id(dispatcher) -> (weak reference, number of compiled overloads, program key): all
# its overloads were compiled while its code read the values the key covers
_vouched: dict = {}


def _numba_caches(dispatcher) -> bool:
    """Whether Numba keeps ``dispatcher``'s machine code in its disk cache
    (``cache=True``)."""
    return not isinstance(getattr(dispatcher, "_cache", None), (NullCache, type(None)))


def _compiled_before(dispatchers) -> bool:
    """Whether Numba may have compiled any of ``dispatchers`` with values of its
    globals other than today's: it has overloads, not all compiled by a build
    of enzpy while the values were those it reads now (``_vouch``)."""
    for d in dispatchers:
        if d.overloads:
            known = _vouched.get(id(d))
            if known is None or known[0]() is not d or known[1] != len(d.overloads) or \
                    known[2] != fingerprint.program_key(d):
                return True
    return False


def _vouch(dispatchers):
    """After a build under a key read while none of ``dispatchers`` had
    overloads but those vouched for: all were compiled with the values the key
    read."""
    for d in dispatchers:
        _vouched[id(d)] = (weakref.ref(d), len(d.overloads), fingerprint.program_key(d))


def _alias_checks(ctx, readonly, symbol, signature):
    """(pairs (written argument, argument holding arrays) that must not share
    memory, positions of the written Duplicated arrays), checked per call.

    The derivative takes a write to one argument for no change of another: the
    reverse sweep rereads the other's values, a tangent function reads its own
    shadow, and reads of a Const array (or of one a Const container holds)
    carry no derivative. Two written Duplicated
    arrays may share memory only as their shadows do (``conflicting_shadows``),
    else one element's derivative is split between two shadows. Where writes are
    not known, every argument counts as written (a reverse sweep then records
    every read it needs)."""
    kinds = [kind for kind, _, _ in signature]
    arrays = {pos for pos, (_, ty, _) in enumerate(signature) if isinstance(ty, types.Array)}
    # (an array held in a Const list, tuple or object is read as a constant too)
    holders = {pos for pos, (_, ty, _) in enumerate(signature) if _may_hold_arrays(ty)}
    if readonly.unknown_write:
        written = set(range(len(signature)))
    else:
        owner, index = {}, 2
        for pos, (_, ty, _) in enumerate(signature):
            width = len(ctx.get_arg_packer([ty]).argument_types)
            owner.update({index + k: pos for k in range(width)})
            index += width
        # (a written tuple, list or object is checked array by array; only arrays
        # passed themselves are re-read: ReadOnlyMemory.trust_only)
        written = {owner[i] for kind, i in readonly.written[symbol]
                   if kind == "arg" and i in owner}
    written_arrays = sorted(written & arrays)
    apart = [(w, r) for w in sorted(written) for r in sorted(holders - written)]
    apart += [(w, r) for w, r in itertools.combinations(sorted(written & holders), 2)
              if not kinds[w] == kinds[r] == "Duplicated"]
    return apart, [p for p in written_arrays if kinds[p] == "Duplicated"]


def _may_hold_arrays(ty, _open=()) -> bool:
    """Whether a value of Numba type ``ty`` is or may hold an array: by its
    structure, False for scalars, strings, slices, dtypes and functions, True
    for any other type (``_open``: the jitclasses being looked into, for
    linked structures)."""
    if isinstance(ty, types.Array):
        return True
    if isinstance(ty, types.BaseTuple):
        return any(_may_hold_arrays(t, _open) for t in ty.types)
    if isinstance(ty, (types.List, types.ListType)):
        return _may_hold_arrays(ty.dtype, _open)
    if isinstance(ty, types.DictType):
        return _may_hold_arrays(ty.value_type, _open)
    if isinstance(ty, types.Optional):
        return _may_hold_arrays(ty.type, _open)
    if isinstance(ty, types.DeferredType):
        return _may_hold_arrays(ty.get(), _open)
    if isinstance(ty, types.ClassInstanceType):
        return ty not in _open and any(_may_hold_arrays(t, _open + (ty,))
                                       for t in ty.struct.values())
    return not isinstance(ty, (types.Number, types.Boolean, types.NoneType, types.Omitted,
                               types.UnicodeType, types.StringLiteral, types.Record,
                               types.EnumMember, types.NPDatetime, types.NPTimedelta,
                               types.Callable, types.SliceType, types.DType,
                               types.NumberClass, types.RangeType))


def _dictionaries_named(exc: UnsupportedError, lowered: dict) -> UnsupportedError:
    """``exc``, raised differentiating the first derivative's mirror of a
    dictionary (which has no source line of its own), with where the user's
    code makes dictionaries."""
    if f"'{typeddict.MIRROR}" not in str(exc):
        return exc
    where = sorted({f"{low.source_file}:{line}" for low in lowered.values()
                    if not low.is_library_code for line in low.lines_making_dicts()})
    if not where:
        return exc
    return UnsupportedError(f"{exc} (the dictionar{'y' if len(where) == 1 else 'ies'} made at "
                            f"{', '.join(where[:3])}{', ...' if len(where) > 3 else ''})")


def _return_slot_type(ctx, restype) -> str:
    if restype == types.none:
        return "i8"
    return type_text(ctx.data_model_manager[restype].get_return_type())


def typed_signature(annotated) -> list:
    """(annotation class name, Numba type of the value, Numba type of the shadow
    or None) per argument; a float's tangent is passed at the float's type, an
    array's shadow at the array's."""
    signature = []
    for i, a in enumerate(annotated):
        kind, ty = type(a).__name__, _numba_type(a.val, f"argument {i}")
        shadow = None
        if kind == "Duplicated":
            # an array's shadow is passed laid out like it (see api._shadow_values)
            shadow = ty if isinstance(ty, types.Float) else \
                ty.copy(readonly=False) if isinstance(ty, types.Array) else \
                _numba_type(a.dval, f"argument {i}: the shadow", fits=ty)
        signature.append((kind, ty, shadow))
    return signature


def _numba_type(value, what, fits=None):
    try:
        return numba.typeof(value)
    except ValueError:
        raise TypeError(f"{what} is a {type(value).__name__}, which Numba has no type for"
                        + (f", so it does not fit {fits}" if fits is not None else "")) from None
