"""Lowering: Numba compiles the function; enzpy captures its raw LLVM IR.

Numba hands every freshly lowered IR module to ``CodeLibrary.add_ir_module``
before its own optimizer runs; a hook installed when enzpy is imported records
that text per defined symbol, and another where each dispatcher a compilation
calls lives. A function compiled before the hooks existed (or loaded from
Numba's on-disk cache) is lowered once more, with its own options; Numba's
cache of internal helpers is emptied at import, so helpers compiled before are
lowered (and recorded) again when next used. The captured modules of a function and
of every Numba function it calls are linked into one module and cleaned up with
a light pipeline (SROA, instcombine, CFG simplification, GVN; never unrolling or
vectorizing), so enzpy differentiates small, clean IR.
"""
from __future__ import annotations

import functools
import itertools
import numbers
import operator
import os
import re
import threading
import time
import warnings
import weakref
from contextlib import contextmanager

import numba
import numpy as np
from llvmlite import binding as llvm
from numba.core import codegen, compiler, lowering, transforms, typed_passes, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target
from numba.np.ufunc.ufuncbuilder import UFuncDispatcher
from numba.core import cgutils
from numba.core import ir as numba_ir

from . import backend, diskcache, fingerprint
from .analysis import ARRAY_ALLOCATORS
from .arguments import arrays_in
from .errors import InternalError, UnsupportedError
from .ir import is_float_type
from .fingerprint import NotCacheable, value_digest
from .irtext import definitions, unquote

_lock = threading.RLock()
_raw_ir: dict = {}            # mangled symbol -> IR text of the module defining it
# symbol -> (dispatcher, what Numba compiled, today's function descriptor) of the
# functions lowered again by enzpy (``_check_linked_callees``)
_lowered_again: dict = {}
# the library of each compilation a ``recompile()`` replaced -> its dispatcher; how
# many times each dispatcher was recompiled since enzpy was imported
_replaced_libraries = weakref.WeakKeyDictionary()
_recompilations = weakref.WeakKeyDictionary()
# mangled symbol -> (dispatcher, argument types): how to lower a Numba function
# again, for every dispatcher a compilation has called since enzpy was imported
_dispatchers: dict = {}
# mangled symbol -> the Python function Numba compiled under it. A symbol's uid
# is unique in the process that compiled it only: code Numba loads from its disk
# cache (cache=True) keeps the uid it had there, which a function compiled here
# may have too (closures made by one factory, a module reloaded). Symbols two
# functions claim: enzpy cannot tell their code apart (see ``_refuse_ambiguous``).
_owners: dict = {}
_ambiguous: set = set()
_WRAPPER_PREFIXES = ("cpython.", "cfunc.")


def _own(symbol, func):
    if func is None:
        return
    with _lock:
        owner = _owners.setdefault(symbol, func)
        if owner is not func and not _same_code(owner, func):
            _ambiguous.add(symbol)


def owner(symbol):
    """The Python function Numba lowered ``symbol`` from, or None."""
    with _lock:
        return _owners.get(symbol)


def _same_code(a, b) -> bool:
    """Two function objects of one code and closure values (what Numba's cache
    tells its entries apart by: a cell run again in a notebook, a factory called
    twice with one value, a module reloaded unchanged, the glue of one of
    enzpy's rules compiled again)."""
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is None or code_a != code_b or code_a.co_filename != code_b.co_filename:
        return False
    try:
        return [value_digest(c.cell_contents) for c in a.__closure__ or ()] == \
            [value_digest(c.cell_contents) for c in b.__closure__ or ()]
    except (NotCacheable, ValueError):
        return False


def _refuse_ambiguous(symbol):
    if symbol in _ambiguous:
        name = getattr(_owners[symbol], "__qualname__", symbol)
        raise UnsupportedError(
            f"'{name}': Numba compiled two different functions of this name under one "
            f"symbol (one loaded from its disk cache, cache=True, keeps the number it was "
            f"saved with: functions made by one factory with other values, a module "
            f"edited and reloaded); enzpy cannot tell which code a call runs. Compile them "
            f"without cache=True, or restart Python")


def _record(ir_module):
    defined = [fn.name for fn in ir_module.functions if not fn.is_declaration]
    defined = [n for n in defined if not n.startswith(_WRAPPER_PREFIXES)]
    if defined:
        text = str(ir_module)
        with _lock:
            for name in defined:
                _raw_ir[name] = text


def _index_dispatcher(dispatcher, args):
    cres = dispatcher.overloads.get(tuple(args))
    if cres is not None and cres.fndesc is not None:
        _own(cres.fndesc.mangled_name, dispatcher.py_func)
        with _lock:
            _dispatchers.setdefault(cres.fndesc.mangled_name, (dispatcher, tuple(args)))


def _install_hooks():
    """Record the raw IR of every module Numba lowers from now on, and where
    every dispatcher Numba calls lives. Numba's cache of internal helpers
    compiled before (``compile_internal``) is emptied, so those helpers are
    lowered again, and recorded, the next time code uses them: what ran
    before ``import enzpy`` never decides what enzpy can see."""
    original = codegen.CPUCodeLibrary.add_ir_module
    if getattr(original, "_enzpy_hook", False):
        return

    def add_ir_module(self, ir_module):
        _record(ir_module)
        return original(self, ir_module)

    add_ir_module._enzpy_hook = True
    codegen.CPUCodeLibrary.add_ir_module = add_ir_module

    template = Dispatcher.get_call_template

    def get_call_template(self, args, kws):
        found = template(self, args, kws)
        _index_dispatcher(self, found[2])
        return found

    Dispatcher.get_call_template = get_call_template

    recompile = Dispatcher.recompile

    def recompile_noted(self):
        with _lock:
            _recompilations[self] = _recompilations.get(self, 0) + 1
            for cres in list(self.overloads.values()):
                library = getattr(cres, "library", None)
                if library is not None:
                    _replaced_libraries[library] = self
        return recompile(self)

    Dispatcher.recompile = recompile_noted

    lower_init = lowering.BaseLower.__init__

    def owning_lower_init(self, context, library, fndesc, func_ir, *args, **kwargs):
        _own(fndesc.mangled_name, getattr(func_ir.func_id, "func", None))
        lower_init(self, context, library, fndesc, func_ir, *args, **kwargs)

    lowering.BaseLower.__init__ = owning_lower_init

    lifting = transforms.with_lifting

    def with_lifting(func_ir, typingctx, targetctx, flags, locals):
        # Lowering code again for its IR only (``_flags``), Numba still compiles
        # the blocks it lifts out (``with objmode()``) as functions of their own,
        # which the code calls: those need machine code.
        if flags.no_compile:
            flags = flags.copy()
            flags.no_compile = False
        return lifting(func_ir, typingctx, targetctx, flags, locals)

    transforms.with_lifting = with_lifting
    with global_compiler_lock:
        cpu_target.target_context.cached_internal_func = {}


_install_hooks()


# -- where Numba's time goes -------------------------------------------------------------
_timing = threading.local()


def _timed(category, method):
    """``method`` charging its own time (not that of timed calls nested in it,
    e.g. a callee's compile inside type inference) to ``category``, while a
    ``numba_timings`` block measures this thread."""
    @functools.wraps(method)
    def timed(*args, **kwargs):
        stack = getattr(_timing, "stack", None)
        if stack is None:
            return method(*args, **kwargs)
        start = time.perf_counter()
        stack.append(0.0)
        try:
            return method(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            nested = stack.pop()
            _timing.totals[category] += elapsed - nested
            if stack:
                stack[-1] += elapsed
    timed._enzpy_timed = True
    return timed


def _install_timers():
    if getattr(codegen.CPUCodeLibrary.finalize, "_enzpy_timed", False):
        return
    codegen.CPUCodeLibrary.finalize = _timed("optimize_codegen",
                                             codegen.CPUCodeLibrary.finalize)
    typed_passes.NativeLowering.run_pass = _timed("lowering",
                                                  typed_passes.NativeLowering.run_pass)


_install_timers()


@contextmanager
def numba_timings():
    """Seconds Numba spends in this block, split into ``typing`` (bytecode
    analysis and type inference), ``lowering`` (to LLVM IR) and
    ``optimize_codegen`` (its LLVM optimization and machine code)."""
    totals = {"typing": 0.0, "lowering": 0.0, "optimize_codegen": 0.0}
    _timing.stack, _timing.totals = [], totals
    start = time.perf_counter()
    try:
        yield totals
    finally:
        _timing.stack = None
        totals["typing"] = max(0.0, time.perf_counter() - start - totals["lowering"]
                               - totals["optimize_codegen"])


def _flags(dispatcher, compile_to_code: bool):
    """Numba's compiler flags of ``dispatcher`` (its own options), without the
    Python and C wrappers."""
    flags = compiler.Flags()
    dispatcher.targetdescr.options.parse_as_flags(flags, dispatcher.targetoptions)
    if isinstance(dispatcher, UFuncDispatcher):     # (as UFuncDispatcher.compile sets them)
        flags.error_model = "numpy"
        flags.enable_looplift = False
    else:
        flags = dispatcher._compiler._customize_flags(flags)
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = True
    flags.no_compile = not compile_to_code
    return flags


def _compile_py_func(dispatcher, argtypes, compile_to_code=False):
    flags = _flags(dispatcher, compile_to_code)
    if isinstance(dispatcher, UFuncDispatcher):     # a @vectorize/@guvectorize kernel
        with global_compiler_lock:
            return compiler.compile_extra(dispatcher.targetdescr.typing_context,
                                          _target_context(dispatcher), dispatcher.py_func,
                                          tuple(argtypes), None, flags, dispatcher.locals)
    impl = dispatcher._compiler._get_implementation(tuple(argtypes), {})
    with global_compiler_lock:
        return compiler.compile_extra(dispatcher.typingctx, dispatcher.targetctx, impl,
                                      tuple(argtypes), None, flags, dispatcher.locals,
                                      pipeline_class=dispatcher._compiler.pipeline_class)


def _target_context(dispatcher):
    if isinstance(dispatcher, UFuncDispatcher):
        return dispatcher.targetdescr.target_context
    return dispatcher.targetctx


def _overload_key(dispatcher, argtypes):
    """The key of ``dispatcher.overloads`` (and of Numba's cache index) for
    ``argtypes``: a function's are argument types, a ufunc kernel's signatures."""
    return next((key for key in dispatcher.overloads
                 if tuple(getattr(key, "args", key)) == tuple(argtypes)), tuple(argtypes))


def _overload(dispatcher, argtypes):
    """What Numba compiled of ``dispatcher`` for ``argtypes``, or None."""
    return dispatcher.overloads.get(_overload_key(dispatcher, argtypes))


@contextmanager
def enzpy_hints_hidden():
    """Numba's performance hints about enzpy's own rules and their glue (a
    product with a strided tangent, say) hidden: nothing a user can act on. (A
    filter set once at import would not last: pytest and notebooks reset them.)"""
    with warnings.catch_warnings():
        for module in (re.escape(_LIBRARY_DIRS[1]), diskcache.GLUE_MODULE):
            warnings.filterwarnings("ignore", category=numba.NumbaPerformanceWarning,
                                    module=module)
        yield


def _compile_again(dispatcher, argtypes, symbol):
    """Lower ``dispatcher.py_func`` once more, with the dispatcher's own
    options (``fastmath``, ``error_model``, ``parallel``, ...), to capture its
    raw IR (the helpers it calls were recorded when lowered: see
    ``_install_hooks``). Not to machine code (the dispatcher has that): only
    its environment (``NumbaEnv...``), which its IR refers to, is defined."""
    with enzpy_hints_hidden():
        cres = _compile_py_func(dispatcher, argtypes)
    _check_frozen_values(dispatcher, argtypes, cres)
    compiled = _overload(dispatcher, argtypes)
    if compiled is not None:
        checked = (dispatcher, compiled, cres.fndesc)
        _check_linked_callees(*checked)
    _define_environment(_target_context(dispatcher), cres)
    new = cres.fndesc.mangled_name
    with _lock:
        text = _raw_ir[new]
        # Keep the symbol the rest of the program (and recursion) refers to;
        # a recursive call already named it, so drop that declaration.
        text = re.sub(r'^declare [^\n]*@"?' + re.escape(symbol) + r'"?\(.*$\n?', "",
                      text, flags=re.M)
        _raw_ir[symbol] = text.replace(new, symbol)
        if compiled is not None:
            _lowered_again[symbol] = checked
        return _raw_ir[symbol], cres.fndesc


def _known_raw_ir(symbol):
    """The raw IR recorded, or lowered again, for ``symbol``, or None; a
    function lowered again is checked, every time it is used, against callees
    compiled again since (``_check_linked_callees``)."""
    with _lock:
        text = _raw_ir.get(symbol)
        again = _lowered_again.get(symbol)
    if text is not None and again is not None:
        _check_linked_callees(*again)
    return text


def _frozen_values(cres, parallel_loops=True) -> dict:
    """The globals and closure variables Numba froze into a compiled function,
    by name (empty for one it loaded from its cache: it keeps no IR);
    ``parallel_loops``: those its parallel loops' bodies read included."""
    annotation = cres.type_annotation
    if not hasattr(annotation, "blocks"):      # (None, or text for a cached function)
        return {}
    return {(type(stmt.value).__name__, stmt.value.name): stmt.value.value
            for stmt in _statements(annotation.blocks.values(), parallel_loops)
            if isinstance(stmt, numba_ir.Assign)
            and isinstance(stmt.value, (numba_ir.Global, numba_ir.FreeVar))}


def _statements(blocks, parallel_loops=True):
    """The statements of Numba IR ``blocks`` (with ``parallel_loops``, those of
    the parallel loops among them: a ``Parfor``'s body and its init block)."""
    for block in blocks:
        for stmt in block.body:
            yield stmt
            loop_body = getattr(stmt, "loop_body", None)
            if parallel_loops and isinstance(loop_body, dict):
                yield from _statements([stmt.init_block, *loop_body.values()])


def _same_value(a, b) -> bool:
    if a is b:
        return True
    try:
        return value_digest(a) == value_digest(b)
    except NotCacheable:
        return False


_NUMBA_UID = re.compile(r"B\d+v\d+")       # (the unique-id tag in Numba's mangled names)


# Numba's pickled exceptions (class and message), named by their digest: the
# message of one raised in an array expression names a source location that
# differs between compilations of the same code.
_PICKLED_EXCEPTION = re.compile(r"@\.const\.pickle(buf|data)\.[\w.]+")


# Fast-math flags: Numba compiles a callee with its first caller's (``fastmath``
# is inherited), lowered again it gets its own; they say nothing of the data.
_FAST_MATH_FLAGS = re.compile(r"( (?:fadd|fsub|fmul|fdiv|frem|fneg|fcmp|call|select|phi))"
                              r"(?: (?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc))+\b")


def _optimized_body(cres) -> str:
    """The optimized IR of the function ``cres`` compiled and of the functions it
    calls that Numba linked in (a parallel loop's kernel), with the constants
    they read (a global array's data: ``W[k]`` reads it at run time), their
    Numba names made comparable across compilations (the exceptions they raise
    are left out: no derivative depends on their messages)."""
    text = cres.library.get_llvm_str()
    name = cres.fndesc.mangled_name
    found = definitions(text)
    bodies, pending, seen = [], [name], set()
    while pending:
        symbol = pending.pop(0)
        if symbol in seen or not found.get(symbol, "").startswith("define"):
            continue
        seen.add(symbol)
        if symbol == name or symbol.startswith("_ZN"):   # (not Numba's C-level wrappers)
            bodies.append(found[symbol])
        # (in order of appearance: names holding addresses sort differently each time)
        pending += [_unquote(q) if q else plain
                    for q, plain in _GLOBAL_REF.findall(found[symbol])]
    body = _PICKLED_EXCEPTION.sub(r"@.const.pickle\1", "\n".join(bodies))
    body = _FAST_MATH_FLAGS.sub(r"\1", body)
    constants = [line for line in re.findall(r"^@.*= .*constant .*$", text, flags=re.M)
                 if _global_names(line.split(" = ", 1)[0]) & _global_names(body)]
    text = _NUMBA_UID.sub("Bv", "\n".join([body, *sorted(constants)]).replace(name, "@self"))
    # (attribute groups and metadata are numbered per module)
    text = _MODULE_NUMBERED.sub("", fingerprint.without_abi_tags(text))
    text = _LABEL_COMMENT.sub(r"\1", text)
    blocks: dict = {}     # (Numba numbers a parallel loop's blocks from a process-wide count)
    text = _BLOCK_LABEL.sub(lambda m: f"B{blocks.setdefault(m.group(0), len(blocks))}", text)
    return fingerprint.numbered_names(text)


_MODULE_NUMBERED = re.compile(r" #\d+\b|,? ![\w.]+ !\d+\b")
_LABEL_COMMENT = re.compile(r"^([-\w.$]+:) *;.*$", re.M)       # ("; preds = ...")
_BLOCK_LABEL = re.compile(r"(?<=%)B\d+\b|^B\d+(?=[.:])", re.M)


def _froze_the_same_arrays(dispatcher, argtypes, compiled) -> bool:
    """Whether compiling today gives the code Numba compiled then: it froze
    the arrays' values, which may have changed in place since."""
    return _optimized_body(compiled) == _optimized_body(
        _compile_py_func(dispatcher, argtypes, compile_to_code=True))


def _check_frozen_values(dispatcher, argtypes, cres):
    """Lowered again (compiled before enzpy was imported), the code reads
    today's globals; Numba runs the code it compiled with the values they had
    then. Differentiating other code than Numba runs is refused."""
    compiled = _overload(dispatcher, argtypes)
    if compiled is None:
        return
    if isinstance(compiled.type_annotation, str):
        return _check_cached_frozen_values(dispatcher, argtypes, compiled, cres)
    now = _frozen_values(cres)
    then = _frozen_values(compiled)
    for (kind, name), value in then.items():
        if (kind, name) in now and not _same_value(value, now[kind, name]):
            _refuse_frozen(dispatcher, kind, name,
                           f"was {_short_repr(value)}; it is now {_short_repr(now[kind, name])}")
    arrays = [(kind, name) for (kind, name), value in then.items()
              if next(arrays_in(value), None) is not None]
    if arrays and not _froze_the_same_arrays(dispatcher, argtypes, compiled):
        _refuse_frozen(dispatcher, *arrays[0], "held other values than it holds now (an "
                       "array changed in place)")


def _callee_type(typemap, expr):
    """Numba's type of what the call ``expr`` calls, or None."""
    func = expr._kws.get("func") if hasattr(expr, "_kws") else None
    return typemap.get(getattr(func, "name", ""))


def _dispatcher_calls(fndesc):
    """(Numba's type of the callee, signature) of the calls of Numba functions
    in a compilation's typing."""
    for expr, sig in fndesc.calltypes.items():
        fnty = _callee_type(fndesc.typemap, expr)
        if isinstance(fnty, types.Dispatcher):
            yield fnty, sig


def recompilations(dispatcher) -> int:
    """How many times ``dispatcher`` was ``recompile()``d since enzpy was imported."""
    with _lock:
        return _recompilations.get(dispatcher, 0)


def _linked_libraries(library):
    """The libraries Numba linked into ``library``, at any depth."""
    pending, seen = list(getattr(library, "_linking_libraries", ())), set()
    while pending:
        lib = pending.pop()
        if id(lib) not in seen:
            seen.add(id(lib))
            yield lib
            pending += getattr(lib, "_linking_libraries", ())


def _check_linked_callees(dispatcher, compiled, today):
    """Numba links into a function the code its callees had when it was
    compiled; a callee compiled again since (``g.recompile()``, which the refusals
    of changed values advise) is lowered as it is today, while Numba keeps running
    the old one. ``today``: the function descriptor of today's compilation."""
    if compiled.fndesc.calltypes is None:
        # (loaded from Numba's cache, which keeps neither typing nor what it linked:
        # a callee recompiled in this process is what can be told)
        for fnty, _ in _dispatcher_calls(today):
            try:
                callee = fnty.dispatcher
            except ReferenceError:
                continue        # (freed: not recompiled in this process)
            if recompilations(callee) and callee is not dispatcher:
                _refuse_relinked(dispatcher, callee)
        return
    # (any callee: a jitclass method too, and the callees of callees)
    for lib in _linked_libraries(compiled.library):
        with _lock:
            callee = _replaced_libraries.get(lib)
        if callee is not None and callee is not dispatcher:
            _refuse_relinked(dispatcher, callee)
    linked = compiled.library._linking_libraries
    for fnty, sig in _dispatcher_calls(compiled.fndesc):
        try:
            callee = fnty.dispatcher
        except ReferenceError:
            continue        # (refused, naming the call, when its callees are walked)
        now = _overload(callee, sig.args)
        if callee is dispatcher or now is None or any(lib is now.library for lib in linked):
            continue
        # (a library of the callee's name linked, not today's: mutual recursion links none)
        if any(lib.name == now.library.name for lib in linked):
            _refuse_relinked(dispatcher, callee)


def _refuse_relinked(dispatcher, callee):
    name = dispatcher.py_func.__qualname__
    raise UnsupportedError(
        f"Numba compiled '{name}' before enzpy saw it (before enzpy was imported, or into its "
        f"disk cache: cache=True), calling '{callee.py_func.__qualname__}', which has been "
        f"compiled again since (recompile()); Numba still runs '{name}' with the earlier "
        f"code: call {dispatcher.py_func.__name__}.recompile() too")


# A global or closure value in the text of a type annotation, and a memory
# address in one (a function's or object's repr differs between processes).
_ANNOTATED_VALUE = re.compile(r"= (global|freevar)\((\w+): (.*?)\)  :: ")
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def _annotated_values(text) -> dict:
    # (an array's text spans lines; the cached text comments every line out)
    text = " ".join(line.lstrip("# ") for line in text.splitlines())
    return {("Global" if kind == "global" else "FreeVar", name): value
            for kind, name, value in _ANNOTATED_VALUE.findall(text)}


def _check_cached_frozen_values(dispatcher, argtypes, compiled, cres):
    """``_check_frozen_values`` for a function Numba loaded from its disk cache
    (``cache=True``, which checks the source file only): it keeps no IR, only
    the text of its type annotation, which spells the values it froze (numbers
    and strings exactly), and its machine code, which holds the arrays it reads
    at run time."""
    then = _annotated_values(compiled.type_annotation)
    now = _annotated_values(str(cres.type_annotation))
    for key, text in then.items():
        # (an object's text, a module's say, names where it lives, not a value;
        # a function's names it, at an address of that process: ``ACT`` chosen at
        # import between two functions differs by name)
        if key in now and _ADDRESS.sub("0x", now[key]) != _ADDRESS.sub("0x", text) \
                and not text.startswith("<"):
            _refuse_frozen(dispatcher, *key, f"was {_short_repr(text)}; it is now "
                           f"{_short_repr(now[key])}")
    values = _frozen_values(cres)
    # (the cached text shows a parallel loop as one line: the numbers its body alone
    # reads are nowhere to compare)
    in_loops_only = values.keys() - _frozen_values(cres, parallel_loops=False).keys()
    for kind, name in sorted(in_loops_only):
        if _scalar_data(values[kind, name]):
            raise UnsupportedError(
                f"Numba loaded '{dispatcher.py_func.__qualname__}' from its disk cache "
                f"(cache=True), which keeps no text of the value of "
                f"{'global' if kind == 'Global' else 'closure variable'} '{name}' read "
                f"inside its parallel loop: enzpy cannot tell whether Numba runs today's. "
                f"Pass it as an argument (Numba moves a global the loop uses into it, even "
                f"one read into a local variable before the loop), or drop cache=True")
    arrays = [(key, a) for key, value in values.items() for a in arrays_in(value) if a.nbytes]
    if not arrays:
        return
    cached = _cached_object_code(dispatcher, argtypes)
    if cached is None:
        return
    today = _compile_py_func(dispatcher, argtypes, compile_to_code=True).library \
        .serialize_using_object_code()[2][0]
    for key, a in arrays:
        data = a.tobytes(order="A")
        # (an array the code reads only at constant indices is folded into it:
        # the annotation's text above covers those)
        if data in today and data not in cached:
            _refuse_frozen(dispatcher, *key, "held other values than it holds now")


def _scalar_data(v) -> bool:
    """Numbers, strings and tuples of them (what Numba folds into code as constants)."""
    if isinstance(v, tuple):
        return all(map(_scalar_data, v))
    return isinstance(v, (numbers.Number, np.generic, str))


def _cached_object_code(dispatcher, argtypes):
    """The machine code Numba's disk cache holds for ``dispatcher`` at
    ``argtypes`` (bytes), or None where its cache's layout is not Numba's."""
    try:
        files, (name,) = _numba_cache_files(dispatcher, [_overload_key(dispatcher, argtypes)])
        library = files._load_data(name)[0]
        return library[2][0] if library[1] == "object" else None
    except Exception:       # (Numba's cache internals moved, or the file is gone)
        return None


def _numba_cache_files(dispatcher, keys):
    """(Numba's cache files of ``dispatcher``, the names of the data files its
    index gives the overloads ``keys``); raises where an overload is not in the
    index, or where the cache's layout is not Numba's."""
    cache = getattr(dispatcher, "_cache", None) or dispatcher.cache
    files, codegen = cache._cache_file, _target_context(dispatcher).codegen()
    index = files._load_index()
    return files, [index[cache._index_key(key, codegen)] for key in keys]


def _refuse_frozen(dispatcher, kind, name, change):
    what = "global" if kind == "Global" else "closure variable"
    fn = dispatcher.py_func
    way_out = (f"call {fn.__name__}.recompile()"
               if not isinstance(dispatcher, UFuncDispatcher) else
               "define the ufunc again (and delete Numba's cache of it, if cache=True)")
    if "." in fn.__qualname__ and fn.__code__.co_varnames[:1] == ("self",):
        owner, method = fn.__qualname__.rsplit(".", 1)      # (a jitclass method)
        way_out = (f"call {owner}.class_type.jit_methods['{method}'].recompile(), then "
                   f"recompile() the functions calling it,")
    raise UnsupportedError(
        f"Numba compiled '{dispatcher.py_func.__qualname__}' before enzpy saw it (before enzpy "
        f"was imported, or into its disk cache: cache=True), when its {what} '{name}' "
        f"{change}, and Numba still runs the code it compiled then: {way_out} to take the "
        f"new value")


def _short_repr(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _define_environment(ctx, cres):
    """Define and fill the environment global of a function lowered without
    machine code, as Numba does when it compiles one (``get_executable``)."""
    backend.define_environment(ctx.codegen(), ctx.get_env_name(cres.fndesc), cres.environment)


_FLOAT_NAMES = {64: "double", 32: "float"}


def data_pointer_types(ctx, argtypes, restype) -> dict:
    """LLVM parameter index -> what the memory it points to holds: a float
    type for float arrays' data (complex arrays': their parts') and lists of
    floats, ``'int'`` for integer and boolean arrays' data, lists of them and
    strings' characters; index 0 (the
    return pointer) when the result holds arrays of one float type, or only
    integer and boolean arrays."""
    table, index = {}, 2          # after retptr and excinfo
    leaves = _array_leaves(restype)
    returned = {_FLOAT_NAMES.get(t.dtype.bitwidth) for t in leaves
                if isinstance(t.dtype, types.Float)}
    if len(returned) == 1:
        table[0] = returned.pop()
    elif leaves and all(isinstance(t.dtype, (types.Integer, types.Boolean)) for t in leaves):
        table[0] = "int"
    for ty in argtypes:
        if isinstance(ty, types.Array) and isinstance(ty.dtype, types.Float):
            table[index + 4] = _FLOAT_NAMES[ty.dtype.bitwidth]
        elif isinstance(ty, types.Array) and isinstance(ty.dtype, types.Complex):
            # (the real and imaginary parts, one after the other)
            table[index + 4] = _FLOAT_NAMES[ty.dtype.bitwidth // 2]
        elif isinstance(ty, types.Array) and isinstance(ty.dtype, (types.Integer,
                                                                   types.Boolean)):
            table[index + 4] = "int"
        elif isinstance(ty, types.UnicodeType):
            table[index] = "int"          # the characters (the model's first field)
        elif isinstance(ty, types.List) and _list_element(ty.dtype) is not None:
            # the meminfo (the model's first field) of a block of the list's size,
            # capacity and items
            table[index] = _list_element(ty.dtype)
        index += len(ctx.get_arg_packer([ty]).argument_types)
    return table


def off_stride_records(numba_types) -> list:
    """The record dtypes among ``numba_types`` (arrays of them, tuples, lists)
    holding floats not all at offsets that are multiples of their size (a
    packed dtype, NumPy's default): a bulk copy of such records is not a copy
    of an array of floats, which is how derivatives of copies move."""
    found = []

    def visit(ty):
        if isinstance(ty, (types.Array, types.NestedArray, types.List)):
            visit(ty.dtype)
        elif isinstance(ty, types.BaseTuple):
            for t in set(ty.types):
                visit(t)
        elif isinstance(ty, types.Record) and ty not in found \
                and not _on_float_stride(ty, 0, ty.size):
            found.append(ty)

    for ty in numba_types:
        visit(ty)
    return found


def _on_float_stride(ty, offset, stride) -> bool:
    """Whether every float of ``ty`` at ``offset`` (repeated every ``stride``
    bytes) sits at a multiple of its own size."""
    if isinstance(ty, types.Record):
        return all(_on_float_stride(f.type, offset + f.offset, stride)
                   for f in ty.fields.values())
    if isinstance(ty, types.NestedArray):
        size = ty.dtype.size if isinstance(ty.dtype, types.Record) else ty.dtype.bitwidth // 8
        return _on_float_stride(ty.dtype, offset, stride) and \
            (ty.nitems <= 1 or _on_float_stride(ty.dtype, offset, size))
    if isinstance(ty, (types.Float, types.Complex)):
        part = ty.bitwidth // 8 // (2 if isinstance(ty, types.Complex) else 1)
        return offset % part == 0 and stride % part == 0
    return True


def _list_element(dtype):
    """What the items of a list of ``dtype`` hold: one float type (with integers
    beside it in a tuple), ``'int'`` for integers and booleans alone, else None."""
    leaves = dtype if isinstance(dtype, types.BaseTuple) else (dtype,)
    kinds = {_FLOAT_NAMES.get(t.bitwidth) if isinstance(t, types.Float) else
             "int" if isinstance(t, (types.Integer, types.Boolean)) else None for t in leaves}
    floats = kinds - {"int"}
    if None in kinds or len(floats) > 1:
        return None
    return floats.pop() if floats else "int"


def array_meminfo_params(ctx, argtypes) -> set:
    """LLVM parameter indices holding the meminfo of an array argument (arrays
    inside tuples included)."""
    found, index = set(), 2          # after retptr and excinfo
    for ty in argtypes:
        leaves = ty if isinstance(ty, types.BaseTuple) else (ty,)
        for leaf in leaves:
            if isinstance(leaf, types.Array):
                found.add(index)
            index += len(ctx.get_arg_packer([leaf]).argument_types)
    return found


def signature_of(symbol: str):
    """(argument types, return type) of a Numba function compiled in this
    process, by symbol: a dispatcher's, or a helper compiled by Numba's
    ``compile_internal`` (which has no dispatcher). None if unknown."""
    found = dispatcher_of(symbol)
    if found is not None:
        sig = found[0].overloads[found[1]].signature
        return sig.args, sig.return_type
    for cres in list(cpu_target.target_context.cached_internal_func.values()):
        if cres.fndesc.mangled_name == symbol:
            return cres.signature.args, cres.signature.return_type
    return None


def _array_leaves(ty) -> list:
    if isinstance(ty, types.BaseTuple):
        return [leaf for t in ty for leaf in _array_leaves(t)]
    return [ty] if isinstance(ty, types.Array) else []


class Lowered:
    """A function's Numba compile result and the facts enzpy needs from it."""

    def __init__(self, dispatcher, argtypes):
        self.dispatcher = dispatcher
        self.argtypes = tuple(argtypes)
        self.cres = dispatcher.overloads[self.argtypes]
        self._typed = None
        self.symbol = self.cres.fndesc.mangled_name
        _own(self.symbol, dispatcher.py_func)
        self.restype = self.cres.signature.return_type
        self.name = getattr(dispatcher.py_func, "__qualname__", self.symbol)

    def source_lines(self):
        """Map Numba block labels (``B54`` in IR) to Python source lines."""
        blocks = getattr(self.cres.type_annotation, "blocks", None) or {}
        return {f"B{label}": blk.loc.line for label, blk in blocks.items()}

    @functools.cached_property
    def is_library_code(self) -> bool:
        """Code of Numba's (its NumPy implementation) or enzpy's, not the user's."""
        func = self.dispatcher.py_func
        code = getattr(func, "__code__", None)
        return code is None or code.co_filename.startswith(_LIBRARY_DIRS) or \
            (func.__module__ or "").startswith("enzpy.")    # (enzpy's generated code)

    @property
    def source_file(self) -> str:
        return os.path.basename(self.dispatcher.py_func.__code__.co_filename)

    def calls(self, block_label: str) -> list:
        """(line, name) of the calls in Numba block ``B<n>`` (one LLVM block's source):
        ``name`` spells a NumPy function, ufunc or array method as users write it
        (``np.linalg.eig``, ``ndarray.max``), else None. Empty when Numba kept no
        typed IR (a function loaded from Numba's cache)."""
        annotation = self.cres.type_annotation
        block = self._typed_block(block_label)
        if block is None:
            return []
        found = []
        for stmt in block.body:
            # (only assignments: other statements, such as a parallel loop's node,
            # raise KeyError for an attribute they lack)
            expr = stmt.value if isinstance(stmt, numba_ir.Assign) else None
            if isinstance(expr, numba_ir.Expr) and expr.op == "call":
                found.append((stmt.loc.line, _numpy_name(annotation.typemap.get(expr.func.name))))
            elif isinstance(expr, numba_ir.Expr) and expr.op in ("binop", "inplace_binop") \
                    and expr.fn in _OPERATOR_CALLS:
                found.append((stmt.loc.line, _OPERATOR_CALLS[expr.fn]))
            elif isinstance(expr, numba_ir.Expr) and expr.op == "arrayexpr":
                found += [(stmt.loc.line, n) for n in _ufuncs_in(expr.expr)]
        return found

    def function_calls(self, block_label: str) -> list:
        """(line, name) of the calls of ``@njit`` functions in Numba block ``B<n>``."""
        return [(stmt.loc.line, kind.dispatcher.py_func.__name__)
                for _, stmt, kind in self._typed_calls(block_label)
                if isinstance(kind, types.Dispatcher)]

    def array_expression_line(self, kernel: str):
        """The source line of the array expression (``a * b + c`` on arrays) whose
        kernel Numba named ``kernel`` (after the expression's hash), or None."""
        for block in getattr(self.cres.type_annotation, "blocks", {}).values():
            for stmt in block.body:
                expr = stmt.value if isinstance(stmt, numba_ir.Assign) else None
                if isinstance(expr, numba_ir.Expr) and expr.op == "arrayexpr" and \
                        f"__numba_array_expr_{hex(hash(expr)).replace('-', '_')}" in kernel:
                    return stmt.loc.line
        return None

    def indirect_calls(self, block_label: str) -> list:
        """(line, what) of the calls in Numba block ``B<n>`` that go through a
        function's address (a ctypes or cffi function, a cfunc, a first-class
        function), ``what`` naming the callee as the user wrote it."""
        found = []
        for block, stmt, kind in self._typed_calls(block_label):
            name = _written_name(block, stmt.value.func)
            if isinstance(kind, types.ExternalFunctionPointer):
                found.append((stmt.loc.line, f"the C function '{name}' (ctypes or cffi)"))
            elif isinstance(kind, types.FunctionType):
                found.append((stmt.loc.line, f"'{name}', called through its address "
                                             f"(a cfunc or a first-class function)"))
        return found

    def _typed_calls(self, block_label: str):
        """(block, statement, type of the callee) of the calls in Numba block ``B<n>``."""
        block = self._typed_block(block_label)
        if block is None:
            return
        typemap = self.cres.type_annotation.typemap
        for stmt in block.body:
            if isinstance(stmt, numba_ir.Assign) and isinstance(stmt.value, numba_ir.Expr) \
                    and stmt.value.op == "call":
                yield block, stmt, typemap.get(stmt.value.func.name)

    def _typed_block(self, block_label: str):
        """Numba's typed IR block ``B<n>`` names, or None (none kept: a function
        loaded from Numba's cache)."""
        m = re.match(r"^B(\d+)", block_label or "")
        return getattr(self.cres.type_annotation, "blocks", {}).get(int(m.group(1))) if m \
            else None

    def dictionary_lines(self, block_label: str) -> list:
        """The source lines, in order, of the statements of Numba block ``B<n>`` that
        make, write to, read from or call a method of a dictionary (where a refusal raised
        inside Numba's implementation of ``d[k] = v`` happened)."""
        annotation = self.cres.type_annotation
        block = self._typed_block(block_label)
        typemap = getattr(annotation, "typemap", {})
        is_dict = lambda var: isinstance(typemap.get(var.name), types.DictType)  # noqa: E731
        lines = []
        for stmt in block.body if block is not None else ():
            expr = stmt.value if isinstance(stmt, numba_ir.Assign) else None
            if isinstance(stmt, (numba_ir.SetItem, numba_ir.StaticSetItem, numba_ir.DelItem)):
                hit = is_dict(stmt.target)
            elif isinstance(expr, numba_ir.Expr) and expr.op in ("getitem", "static_getitem"):
                hit = is_dict(expr.value)
            elif isinstance(expr, numba_ir.Expr) and expr.op == "build_map":
                hit = is_dict(stmt.target)
            elif isinstance(expr, numba_ir.Expr) and expr.op == "call":
                callee = typemap.get(expr.func.name)
                hit = isinstance(getattr(callee, "this", None), types.DictType)
            else:
                hit = False
            if hit:
                lines.append(stmt.loc.line)
        return lines

    def lines_making_dicts(self) -> set:
        """The source lines that make a dictionary: ``{}``, ``{k: v}``, and calls
        whose result is one (``Dict.empty(...)``, ``dict()``, a helper making one)."""
        annotation = self.cres.type_annotation
        return {stmt.loc.line
                for block in getattr(annotation, "blocks", {}).values() for stmt in block.body
                if isinstance(stmt, numba_ir.Assign) and isinstance(stmt.value, numba_ir.Expr)
                and stmt.value.op in ("build_map", "call")
                and isinstance(annotation.typemap.get(stmt.target.name), types.DictType)}

    def lines_writing(self, variable) -> set:
        """The source lines of ``variable[...] = ...`` (of any of Numba's versions of it)."""
        return {stmt.loc.line
                for block in getattr(self.cres.type_annotation, "blocks", {}).values()
                for stmt in block.body
                if isinstance(stmt, (numba_ir.SetItem, numba_ir.StaticSetItem))
                and stmt.target.name.partition(".")[0] == variable}

    def data_pointer_types(self, ctx) -> dict:
        return data_pointer_types(ctx, self.argtypes, self.restype)

    @functools.cached_property
    def off_stride_records(self) -> list:
        """``off_stride_records`` of the types of this function's values."""
        return off_stride_records(list(self.typed_fndesc().typemap.values())
                                  + list(self.argtypes) + [self.restype])

    def typed_fndesc(self):
        """The function descriptor with Numba's typing; a function loaded from
        Numba's on-disk cache has none, so it is typed (compiled) once more."""
        if self.cres.fndesc.calltypes is not None:
            return self.cres.fndesc
        if self._typed is None:
            self._typed = _compile_again(self.dispatcher, self.argtypes, self.symbol)[1]
        return self._typed

    def set_lines(self) -> list:
        """The source lines where the function makes a set (empty when Numba
        kept no typed IR)."""
        annotation = self.cres.type_annotation
        typemap = getattr(annotation, "typemap", {})
        return sorted({stmt.loc.line for block in getattr(annotation, "blocks", {}).values()
                       for stmt in block.body if isinstance(stmt, numba_ir.Assign)
                       and isinstance(typemap.get(stmt.target.name), types.Set)
                       and not isinstance(stmt.value, numba_ir.Var) and stmt.loc is not None})

    def _assignment_line(self, variable):
        """The source line where Numba's typed IR assigns ``variable`` (None if unknown)."""
        for block in getattr(self.cres.type_annotation, "blocks", {}).values():
            for stmt in block.body:
                target = getattr(stmt, "target", None)
                if getattr(target, "name", None) == variable and stmt.loc is not None:
                    return stmt.loc.line
        return None

    def _refuse_reinterpreted_floats(self, fnty, sig, expr):
        """Refuse ``a.view(dtype)`` (or ``np.frombuffer(a, dtype)``) that reads
        floats' memory as another dtype or other memory as floats: a shadow
        holds derivatives, not bits, so an integer stored through such a view
        would be copied into it (and a float written as integers would take its
        derivative nowhere), a silently wrong derivative. (Scalars' bits,
        ``np.float64(x).view(np.int64)``, are values, which a derivative follows.)"""
        if isinstance(fnty, types.BoundFunction) and fnty.typing_key == "array.view":
            call, source = "ndarray.view", fnty.this.dtype
        elif isinstance(fnty, types.Function) and fnty.typing_key is np.frombuffer:
            call, source = "np.frombuffer", getattr(sig.args[0], "dtype", None)
        else:
            return
        target = sig.return_type.dtype
        if source == target or not any(isinstance(t, (types.Float, types.Complex))
                                       for t in (source, target)):
            return
        where = self._at(getattr(getattr(expr, "loc", None), "line", None))
        error = UnsupportedError(
            f"function '{self.name}' views an array of {source} as {target} "
            f"({call}{where}): enzpy cannot follow a derivative through memory read "
            f"or written as another dtype than it holds; convert the values instead "
            f"(a.astype(...)), or compute the bits outside the differentiated function")
        error.construct = call
        raise error

    def _at(self, line) -> str:
        """`` at file:line`` for a source line of this function, or ''."""
        return f" at {self.source_file}:{line}" if line else ""

    def callees(self):
        """(dispatcher, argtypes) of the Numba functions this one calls; its
        typed IR, walked here for every function reached, also shows the
        constructs refused before any IR is read (generators, reinterpreting
        views)."""
        found = []
        fndesc = self.typed_fndesc()
        typemap = fndesc.typemap
        for name, ty in typemap.items():
            if isinstance(ty, types.Generator):
                where = self._at(self._assignment_line(name))
                raise UnsupportedError(f"function '{self.name}' uses a generator ({ty}){where}, "
                                       f"which enzpy cannot differentiate")
        for expr, sig in fndesc.calltypes.items():
            fnty = _callee_type(typemap, expr)
            self._refuse_reinterpreted_floats(fnty, sig, expr)
            if isinstance(fnty, types.Dispatcher):
                try:
                    found.append((fnty.dispatcher, sig.args))
                except ReferenceError:      # (Numba's type holds it weakly)
                    raise UnsupportedError(
                        f"Numba compiled '{self.name}' calling a function that has since been "
                        f"replaced and freed (a cell run again, a module reloaded)"
                        f"{self._at(expr.loc.line)}; Numba still runs the code it linked "
                        f"then: call {self.dispatcher.py_func.__name__}.recompile()") from None
            elif isinstance(fnty, types.RecursiveCall):
                # self recursion, possibly into another specialisation
                found.append((fnty.dispatcher_type.dispatcher, sig.args))
            elif isinstance(fnty, types.Function):
                for template in fnty.templates:
                    for disp_args in getattr(template, "_impl_cache", {}).values():
                        if isinstance(disp_args, tuple) and disp_args and \
                                hasattr(disp_args[0], "overloads"):
                            disp = disp_args[0]
                            if tuple(sig.args) in disp.overloads:
                                found.append((disp, tuple(sig.args)))
        return found


_MANGLED_PART = re.compile(r"(\d+)")
_ESCAPES = re.compile(r"(?:_[0-9a-f]{2})+")
_IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_]")


def _unescape(run: str) -> str:
    """Numba escapes each byte of a character outside [A-Za-z0-9_] as ``_xx``;
    a run that does not decode to such characters (``_call`` in
    ``_call_allocator``) is left as written."""
    try:
        text = bytes(int(run[i + 1:i + 3], 16) for i in range(0, len(run), 3)).decode()
    except UnicodeDecodeError:
        text = None
    if text and not any(_IDENTIFIER_CHAR.match(ch) for ch in text):
        return text
    head = run[:3]
    return head + _ESCAPES.sub(lambda m: _unescape(m.group(0)), run[3:]) if len(run) > 3 \
        else head


PARALLEL_LOOP_BODY = re.compile(r"__numba_parfor_gufunc_")


def demangle(symbol: str) -> str:
    """A readable name for a Numba-mangled symbol (``_ZN5numba2np...``); the body
    Numba makes of a parallel loop is named as such."""
    if PARALLEL_LOOP_BODY.search(symbol):
        return "the body of a parallel loop (prange)"
    if not symbol.startswith("_ZN"):
        return symbol
    parts, i = [], 3
    while i < len(symbol) and symbol[i].isdigit():
        m = _MANGLED_PART.match(symbol, i)
        n = int(m.group(1))
        start = m.end()
        parts.append(symbol[start:start + n])
        i = start + n
    name = ".".join(parts) or symbol
    return _ESCAPES.sub(lambda m: _unescape(m.group(0)), name)


# A twin of each dispatcher compiled eagerly (with signatures: Numba compiles
# nothing more for it), which compiles for the arguments' exact types.
_twins: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def forget(dispatcher):
    """Drop the twin of ``dispatcher`` (it was recompiled: the twin froze its old globals)."""
    _twins.pop(dispatcher, None)


def _compilable(dispatcher):
    """``dispatcher``, or for one with eager signatures a twin of the same
    function and options: the user's dispatcher keeps only its signatures, and
    the derivative is of the same code, typed for the arguments given."""
    if dispatcher._can_compile:
        return dispatcher
    twin = _twins.get(dispatcher)
    if twin is None:
        options = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}
        twin = _twins[dispatcher] = numba.njit(**options)(dispatcher.py_func)
    return twin


def lower(dispatcher, argtypes) -> Lowered:
    argtypes = tuple(argtypes)
    if argtypes not in dispatcher.overloads:
        dispatcher = _compilable(dispatcher)
    if argtypes not in dispatcher.overloads:
        try:
            with enzpy_hints_hidden():
                dispatcher.compile(argtypes)
        except numba.core.errors.ForceLiteralArg as exc:
            names = list(dispatcher.py_func.__code__.co_varnames)
            asked = ", ".join(names[i] if i < len(names) else str(i)
                              for i in sorted(exc.requested_args))
            raise UnsupportedError(
                f"{dispatcher.py_func.__qualname__}: numba.literally (or an overload asking "
                f"for literal arguments) on {asked}: enzpy differentiates the code compiled "
                f"for the arguments' types, not for their values") from None
    return Lowered(dispatcher, argtypes)


def refuse_stale_numba_cache(dispatcher):
    """Refuse where Numba loaded a function ``dispatcher`` reaches (itself
    included) from its disk cache (``cache=True``), saved before the source
    file of a function that function calls changed: Numba compares the cached
    function's own file only and keeps running the callee's old code, while
    enzpy would differentiate today's."""
    reached = _walk(dispatcher)
    for disp in reached.dispatchers if reached is not None else ():
        saved = _numba_cache_saved(disp)
        walk = _walk(disp) if saved is not None else None
        if walk is None:
            continue
        own = disp.py_func.__code__.co_filename        # (Numba checks that one)
        for code in walk.codes.values():
            if code.co_filename == own:
                continue
            try:
                changed = os.path.getmtime(code.co_filename) > saved
            except OSError:
                continue
            if changed:
                name = disp.py_func.__qualname__
                raise UnsupportedError(
                    f"Numba loaded '{name}' from its disk cache (cache=True), saved before "
                    f"{os.path.basename(code.co_filename)} (of '{code.co_name}', which it "
                    f"calls) changed; Numba checks the cached function's own file only, so it "
                    f"may still run the old code: call {disp.py_func.__name__}.recompile() "
                    f"(or delete Numba's cache of it) before differentiating")


def _walk(dispatcher):
    """The code and dispatchers ``dispatcher`` reaches (a ``Fingerprint``), or
    None where a value on the way cannot be walked."""
    walk = fingerprint.Fingerprint()
    try:
        walk.dispatcher(dispatcher)
    except NotCacheable:
        return None
    return walk


def _numba_cache_saved(dispatcher):
    """When Numba saved the oldest of the overloads of ``dispatcher`` it loaded
    from its disk cache in this process (a timestamp), or None."""
    hits = [sig for sig, count in getattr(dispatcher, "_cache_hits", {}).items() if count]
    cache = getattr(dispatcher, "_cache", None)
    if not hits or cache is None:
        return None
    try:
        files, names = _numba_cache_files(dispatcher, hits)
        return min(os.path.getmtime(os.path.join(files._cache_path, n)) for n in names)
    except Exception:           # (Numba's cache internals moved): its index, saved last
        try:
            return os.path.getmtime(cache._cache_file._index_path)
        except (AttributeError, OSError):
            return None


def dispatcher_of(symbol: str):
    """(dispatcher, argument types) of a compiled Numba function, or None."""
    with _lock:
        found = _dispatchers.get(symbol)
    if found is None or found[1] not in found[0].overloads:
        return None
    return found


# Callables (symbol, modes, builtin) -> None for a function no derivative rule
# covers (its body is differentiated), else [(dispatcher, argument types,
# glue mode)]: the glue of its rule in ``modes`` to link beside it (of enzpy's
# own rules too if ``builtin``); that of glue mode "hvp" is differentiated.
EXTRA_CALLEES: list = []


def _raw_text(lowered: Lowered) -> str:
    text = _known_raw_ir(lowered.symbol)
    if text is None:
        text = _compile_again(lowered.dispatcher, lowered.argtypes, lowered.symbol)[0]
    return text


# Numba's getitem of a heterogeneous tuple by a run-time index (``for a in
# args`` over ``*args``, ``literal_unroll``) stores the item into a stack slot
# it allocates where the getitem runs, and loads it back at the switch's end
# (numba/cpython/tupleobj.py, getitem_typed): the slot lives within one
# getitem, so one slot in the entry block per getitem serves every iteration.
_TUPLE_ITEM_SLOT = re.compile(r'^\s+%"?TYPED_VALUE_SLOT\d+(\.\d+)?"? = alloca [^%]+$')


# Numba compiling with debug info (NUMBA_DEBUGINFO, NUMBA_ENABLE_PROFILING) marks
# every function noinline, which contradicts the alwaysinline of small helpers
# (LLVM then rejects the module and aborts the process).
_NOINLINE = re.compile(r"(?m)^(define [^\n]*\)[^\n{]*?) noinline\b")


def _inlinable(text: str) -> str:
    return _NOINLINE.sub(r"\1", text) if "noinline" in text else text


def _hoist_tuple_item_slots(text: str) -> str:
    """Move the stack slots of tuple getitems into their function's entry
    block, where the cleanup's SROA removes them and reverse mode gives a slot
    that stays in a loop a shadow."""
    if "TYPED_VALUE_SLOT" not in text:
        return text
    lines, out, entry, hoisted, header = text.splitlines(), [], None, [], False
    for line in lines + ["}"]:
        if line.startswith("}") and entry is not None:
            out[entry:entry] = hoisted
            entry, hoisted = None, []
        if _TUPLE_ITEM_SLOT.match(line):
            hoisted.append(line)
            continue
        out.append(line)
        if line.startswith("define "):
            header = True
        if header and line.rstrip().endswith("{"):
            header, entry = False, len(out) + 1       # after the entry block's label
    return "\n".join(out[:-1]) + "\n"


# Numba's propagation of a callee's exception (callconv.return_status_propagate): the
# callee's excinfo is stored and, when the try depth read at run time is positive, the
# code goes on towards the handler instead of returning. Every function propagating an
# exception reads the try depth; only one holding a try block raises it.
_TRY_ENTERED = re.compile(r'store i64 %\S+, (?:i64\*|ptr) %"try_state"')
_PROPAGATE_IN_TRY = re.compile(
    r'(?P<a>%\S+) = load i64, (?:i64\*|ptr) %"try_state"\n'
    r'(?P<i1>\s*)(?P<b>%\S+) = icmp ugt i64 (?P=a), 0\n'
    r'\s*%\S+ = load [^\n]*%"excinfo"\n'
    r'(?P<i2>\s*)store (?P<ty>[^\n]*?) (?P<v>%\S+), (?P<slot>[^\n]*%"excinfo")\n'
    r'\s*(?P<d>%\S+) = xor i1 (?P=b), -1\n'
    r'(?P<i3>\s*)br i1 (?P=d), label (?P<ret>%\S+), label %\S+')
_CALL_WITH_EXCINFO = re.compile(r'call i32 @[^\n]*%"excinfo\.\d+"')
_BLOCK_LABELS = re.compile(r'^"?([-\w.$]+)"?:', re.M)
# The symbol a function's text (starting at its ``define``) defines.
_DEFINED = re.compile(r'define [^@]*@"?([^"(]+)"?\(')


def _prepared(text: str, lowered, differentiated) -> tuple:
    """Numba's raw IR ``text`` made ready to link into the module differentiated:
    ``_hoist_tuple_item_slots``, ``_inlinable``, ``_opaque_bit_views``,
    ``_refuse_caught_exceptions``."""
    _refuse_record_copies(text, lowered, differentiated)
    return _refuse_caught_exceptions(_opaque_bit_views(_inlinable(_hoist_tuple_item_slots(
        text))), lowered, differentiated)


# A float's bits viewed as an integer or back (``np.float64(x).view(np.int64)``).
# (metadata, such as a debug location, is kept)
_BIT_VIEW = re.compile(r"^(\s*%\S+ = )bitcast (double|float|i64|i32) ([^\s,]+) to "
                       r"(double|float|i64|i32)((?:, ![-\w.]+ !\d+)*)$", re.M)
_VIEW_FUNCTION = "enzpy.view"
# A view kept as a call by _opaque_bit_views, after cleanup.
_VIEW_CALL = re.compile(r'^(\s*%\S+ = )(?:tail |notail )?call (\w+) @"?enzpy\.view\.[\w.]+"?'
                        r'\((\w+)(?: noundef)? ([^)]+)\)(?: #\d+)?((?:, ![-\w.]+ !\d+)*)$', re.M)
_VIEW_DECLARATION = re.compile(r'^declare \w+ @"?enzpy\.view\.[\w.]+"?\(.*\n', re.M)


def _opaque_bit_views(text: str) -> str:
    """Views of a float's bits as an integer (and back) turned into calls of a
    function cleanup cannot see into: instcombine would fold the view of a
    loaded float into an integer load from float memory (and the view back of
    a loaded integer into a float load from integer memory), where no
    derivative follows; kept in SSA, the generators see where the bits go
    (``plain_bit_views`` turns them back into bitcasts after cleanup)."""
    views = set()

    def call(m):
        prefix, source, value, target, metadata = m.groups()
        if is_float_type(source) == is_float_type(target):
            return m.group(0)
        name = f"{_VIEW_FUNCTION}.{source}.{target}"
        views.add(f'declare {target} @"{name}"({source}) nounwind willreturn memory(none)')
        return f'{prefix}call {target} @"{name}"({source} {value}){metadata}'

    text = _BIT_VIEW.sub(call, text)
    return text + "\n" + "\n".join(sorted(views)) + "\n" if views else text


def plain_bit_views(text: str) -> str:
    """The cleaned module's text with ``_opaque_bit_views``' calls bitcasts again;
    a float viewed as an integer and straight back is the float (a ``freeze`` of
    it, which the generators pass the derivative through: they do not follow one
    through an integer)."""
    if _VIEW_FUNCTION not in text:
        return text
    lines, views = text.split("\n"), {}
    for k, line in enumerate(lines):
        if line.startswith("define"):
            views = {}              # (value names are the function's own)
        m = _VIEW_CALL.match(line)
        if m is None:
            continue
        prefix, target, source, value, metadata = m.groups()
        name = prefix.strip().rstrip(" =")
        if is_float_type(source):
            views[name] = (source, value)
        if not is_float_type(source) and views.get(value, (None,))[0] == target:
            lines[k] = f"{prefix}freeze {target} {views[value][1]}{metadata}"
        else:
            lines[k] = f"{prefix}bitcast {source} {value} to {target}{metadata}"
    text = _VIEW_DECLARATION.sub("", "\n".join(lines))
    if f"@{_VIEW_FUNCTION}." in text or f'@"{_VIEW_FUNCTION}.' in text:
        raise InternalError(f"a view of a float's bits was not turned back into a bitcast: "
                            f"{text[text.index(_VIEW_FUNCTION) - 80:][:200]!r}")
    return text


def _name_and_lines(symbol, lowered) -> tuple:
    """The name of the function ``symbol`` for messages, and its source line
    per Numba block (empty where unknown); ``lowered(symbol)``: its ``Lowered``
    or None."""
    low = lowered(symbol)
    if low is None and dispatcher_of(symbol) is not None:
        low = Lowered(*dispatcher_of(symbol))
    if low is None:
        return demangle(symbol), {}
    return low.name, low.source_lines()


def _near_line(part, position, lines) -> str:
    """`` (near line N)`` for the Numba block of ``part`` (one function's
    text) that ``position`` is in, or ''."""
    labels = _BLOCK_LABELS.findall(part, 0, position)
    block = re.match(r"B\d+", labels[-1]) if labels else None
    line = lines.get(block.group(0)) if block else None
    return f" (near line {line})" if line is not None else ""


# Numba's store of a whole record (a structured array's element: ``t[i] = s[j]``),
# whose data model is bytes, loaded from another record: ``[N x i8]`` values that
# a local variable holds (a tuple of int8 or of booleans) are loaded from stack
# slots or built from their items (insertvalue).
_BYTES_STORE = re.compile(r'^\s*store \[\d+ x i8\] (%"?[-\w.$]+"?), ', re.M)


def _record_copy(part: str):
    """The first whole-record store of one function's text, or None."""
    for store in _BYTES_STORE.finditer(part):
        value = store.group(1)
        loaded = re.search(r"^\s*" + re.escape(value) + r" = load \[\d+ x i8\], "
                           r'(?:\[\d+ x i8\]\*|ptr) (%"?[-\w.$]+"?)', part, re.M)
        if loaded and not re.search(r"^\s*" + re.escape(loaded.group(1)) + r" = alloca ",
                                    part, re.M):
            return store
    return None


def _refuse_record_copies(text: str, lowered, differentiated):
    """Refuse a whole record stored in the functions of ``text`` that
    ``differentiated(symbol)`` accepts: its bytes (SROA splits them into
    ``i8`` loads and stores) cannot carry the derivatives of the floats they
    hold, so the shadow would keep stale adjoints or get the primal's bytes."""
    if not _BYTES_STORE.search(text):
        return
    for part in re.split(r"(?m)^(?=define )", text):
        found = _record_copy(part) if part.startswith("define ") else None
        if found is None:
            continue
        symbol = _DEFINED.match(part).group(1)
        if not differentiated(symbol):
            continue
        name, lines = _name_and_lines(symbol, lowered)
        where = _near_line(part, found.start(), lines)
        raise UnsupportedError(
            f"function '{name}'{where} assigns a structured array's element whole (`t[i] = "
            f"s[j]`, `t[:] = s`): Numba copies it as bytes, which cannot carry the "
            f"derivatives of its float fields; assign its fields one by one (or copy the "
            f"whole array with .copy())")


def _refuse_caught_exceptions(text: str, lowered, differentiated) -> tuple:
    """Make an exception that a callee raises inside a try block of ``text``'s
    functions (those ``differentiated(symbol)`` accepts) leave the derivative
    as an UnsupportedError instead of reaching the handler. The derivative of a
    call that stopped half-way (its tape, a rule's residuals) is not there for
    the reverse sweep to undo: catching it crashed or gave garbage. A ``raise``
    in the function itself stays caught (its reverse is the path taken).
    ``lowered(symbol)`` is the function's ``Lowered`` or None. Returns the
    text and the symbols with a try block left as they were."""
    if not _TRY_ENTERED.search(text):
        return text, set()
    from .memory import static_exception
    parts = re.split(r"(?m)^(?=define )", text)
    definitions, skipped = [], set()
    for k, part in enumerate(parts):
        if not _TRY_ENTERED.search(part):
            continue
        symbol = _DEFINED.match(part).group(1)
        if not differentiated(symbol):
            skipped.add(symbol)
            continue
        name, lines = _name_and_lines(symbol, lowered)
        sites = list(_PROPAGATE_IN_TRY.finditer(part))
        if len(sites) != len(_CALL_WITH_EXCINFO.findall(part)):
            raise UnsupportedError(
                f"try/except in function '{name}': enzpy does not recognise how Numba "
                f"propagates exceptions there, so it cannot tell a caught exception apart")
        out, end = [], 0
        for n, m in enumerate(sites):
            where = _near_line(part, m.start(), lines)
            exc, definition = static_exception(UnsupportedError, (
                f"an exception raised by a call inside the try block of '{name}'{where} was "
                f"caught: enzpy differentiates runs in which no exception is caught (the "
                f"derivative of the call that raised stops half-way); test the condition "
                f"before the call instead of catching its exception"))
            definitions.append(definition)
            chosen = f'%"enzpy.caught.{n}"'
            out += [part[end:m.start("i2")],
                    f"{m['i2']}{chosen} = select i1 {m['b']}, {m['ty']} @{exc}, "
                    f"{m['ty']} {m['v']}\n{m['i2']}store {m['ty']} {chosen}, {m['slot']}\n",
                    part[m.end("slot") + 1:m.start("i3")],
                    f"{m['i3']}br label {m['ret']}"]
            end = m.end()
        parts[k] = "".join(out) + part[end:]
    return "".join(parts) + "\n" + "\n".join(dict.fromkeys(definitions)) + "\n", skipped


# Numba's package and enzpy's own
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                      for path in (numba.__file__, __file__))


# The operators whose implementation is a call of its own: (a @ b, z ** 3)
_OPERATOR_CALLS = {operator.matmul: "@", operator.pow: "**", operator.ipow: "**"}


@functools.cache
def _numpy_names() -> dict:
    """id(object) -> how users spell it, for NumPy's public functions and ufuncs,
    the math and cmath modules' functions (and enzpy's autodiff, which @njit
    code may call)."""
    import cmath
    import math

    from . import api
    names = {id(api.autodiff): "enzpy.autodiff"}
    for prefix, module in (("math.", math), ("cmath.", cmath),
                           ("np.random.", np.random), ("np.linalg.", np.linalg),
                           ("np.fft.", np.fft), ("np.lib.stride_tricks.", np.lib.stride_tricks),
                           ("np.", np)):
        for attr, obj in vars(module).items():
            if callable(obj) and not attr.startswith("_"):
                names[id(obj)] = prefix + attr
    return names


def _numpy_name(fnty):
    """``np.<name>`` or ``ndarray.<method>`` for a callee's Numba type, else None."""
    if isinstance(fnty, types.BoundFunction) and isinstance(fnty.typing_key, tuple) \
            and fnty.typing_key[0] is types.Array:
        return "ndarray." + fnty.typing_key[1]
    if isinstance(fnty, types.Function):
        return _numpy_names().get(id(fnty.typing_key))
    return None


def _written_name(block, var) -> str:
    """The name the user wrote for Numba's variable ``var`` of ``block``: the global,
    free variable or argument it was loaded from, else the variable's own name."""
    for stmt in reversed(block.body):
        if isinstance(stmt, numba_ir.Assign) and stmt.target.name == var.name:
            value = stmt.value
            if isinstance(value, (numba_ir.Global, numba_ir.FreeVar, numba_ir.Arg)):
                return value.name
            if isinstance(value, numba_ir.Var):
                return _written_name(block, value)
            if isinstance(value, numba_ir.Expr) and value.op in ("getitem", "static_getitem"):
                return f"{_written_name(block, value.value)}[...]"
            break
    name = var.name.partition(".")[0]
    return "a function value" if name.startswith("$") else name


def _ufuncs_in(tree) -> list:
    """The NumPy ufuncs of an array expression's tree ``(op, [operands])``."""
    if not isinstance(tree, tuple):
        return []
    op, operands = tree
    name = _numpy_names().get(id(op))
    return ([name] if name else []) + [n for t in operands for n in _ufuncs_in(t)]


_INTRINSIC_OR_RUNTIME = re.compile(r"^(llvm\.|NRT_|numba_|Py|_Py)")


def collect_module(root: Lowered) -> dict:
    """The Numba functions ``root`` reaches (itself included), lowered, by symbol."""
    lowered = {root.symbol: root}
    pending = [root]
    while pending:
        for disp, args in pending.pop().callees():
            low = lower(disp, args)
            if low.symbol not in lowered:
                lowered[low.symbol] = low
                pending.append(low)
    return lowered


def link_module(root: Lowered, lowered: dict, mode="reverse", builtin_glue=True):
    """Link the raw IR of ``root`` and of every Numba function it reaches
    (``lowered`` gains the glue of the rules the derivative in ``mode`` links:
    see ``_glue_to_link``; that of enzpy's own rules only if ``builtin_glue``).
    Returns the module and the ``OriginalBlocks`` of its functions.

    The functions differentiated are linked first, until none is missing; only
    then what runs as it is (the bodies of functions a rule covers, the glue
    derivatives call, what only they reach), which cannot make another function
    differentiated: each function is judged (``_prepared``) by the final set."""
    def lowered_of(symbol):
        return root if symbol == root.symbol else lowered.get(symbol)

    _refuse_ambiguous(root.symbol)
    text, as_primal = _prepared(_raw_text(root), lowered_of, lambda symbol: True)
    module = llvm.parse_assembly(cgutils.normalize_ir_text(text))
    linked, references = {root.symbol}, _references_by_function(text)
    texts = dict.fromkeys(references, text)
    defined = {fn.name for fn in module.functions if not fn.is_declaration}
    covered = {}        # a function a rule covers -> the glue differentiated in its place
    kernels = None
    run_as_is = set()   # the functions linked as code that is not differentiated
    while True:
        functions = {fn.name: fn for fn in module.functions}
        missing = [name for name, fn in functions.items()
                   if fn.is_declaration and name not in linked
                   and not _INTRINSIC_OR_RUNTIME.match(name)]
        missing += _glue_to_link(functions, root.symbol, references, covered, lowered, mode,
                                 builtin_glue)
        differentiated = _differentiated(functions, root.symbol, references, covered)
        missing += [g.name[len(_UNRESOLVED):] for g in module.global_variables
                    if g.name.startswith(_UNRESOLVED)
                    and g.name[len(_UNRESOLVED):] not in linked]
        missing = [name for name in missing if name not in linked]
        if not missing:
            break
        for name in [name for name in missing if name in differentiated] or missing:
            if name in linked:      # named twice: called directly and through a pointer
                continue
            linked.add(name)
            _refuse_ambiguous(name)
            text = _known_raw_ir(name)
            if text is None and name in lowered:
                text = _raw_text(lowered[name])
            if text is None and name in _dispatchers:
                text = _compile_again(*_dispatchers[name], name)[0]
            if text is None and name.startswith("_ZN"):
                kernels = _ufunc_kernels(root) if kernels is None else kernels
                if name in kernels:
                    text = _compile_again(*kernels[name], name)[0]
            if text is None:
                continue     # an external symbol: rules decide about it later
            # (what runs as it is keeps its try blocks)
            judged = _differentiated_in(text, differentiated, covered)
            text, skipped = _prepared(text, lowered_of, judged)
            as_primal |= skipped
            other = llvm.parse_assembly(cgutils.normalize_ir_text(text))
            for fn_name, names in _references_by_function(text).items():
                references.setdefault(fn_name, names)   # (the definition kept)
                texts.setdefault(fn_name, text)
                if not judged(fn_name):
                    run_as_is.add(fn_name)
            for fn in other.functions:
                if not fn.is_declaration:
                    linked.add(fn.name)
            _drop_duplicate_definitions(other, module, defined)
            defined.update(fn.name for fn in other.functions if not fn.is_declaration)
            module.link_in(other)
    # (a helper another function's text defines, judged before a later caller was seen)
    functions = {fn.name: fn for fn in module.functions}
    late = run_as_is & _differentiated(functions, root.symbol, references, covered)
    for name in late:
        _refuse_record_copies(texts[name], lowered_of, late.__contains__)
    both = as_primal & late
    if both:
        raise UnsupportedError(f"try/except in function '{demangle(min(both))}', which both "
                               f"differentiated code and code a derivative rule runs call")
    return _resolve_mutual_recursion(module), OriginalBlocks(texts)


def _differentiated(functions, root, references, covered) -> set:
    """The functions whose bodies a derivative of ``root`` differentiates."""
    return _reached(functions, root, references, covered) - covered.keys()


def _differentiated_in(text, differentiated, covered):
    """Whether a function ``text`` defines is differentiated: in
    ``differentiated``, or reached from one there through the text's own
    functions (Numba's helpers lowered into their caller's module)."""
    local = _references_by_function(text)
    seen = {name for name in local if name in differentiated}
    todo = list(seen)
    while todo:
        name = todo.pop()
        if name in covered:
            continue
        for other in local[name]:
            other = _pointed_at(other)
            if other in local and other not in seen:
                seen.add(other)
                todo.append(other)
    return lambda symbol: symbol in seen or symbol in differentiated


def _pointed_at(name: str) -> str:
    """The function a name refers to: a mutually recursive call goes through
    Numba's pointer ``.numba.unresolved$<function>``."""
    return name[len(_UNRESOLVED):] if name.startswith(_UNRESOLVED) else name


def _glue_to_link(functions, root, references, covered, lowered, mode, builtin_glue) -> list:
    """The symbols of the glue of rules to link for the functions reached so
    far (``covered`` and ``lowered`` gain them). First-order derivatives call
    the glue of the rules of the functions ``root`` reaches (not in the bodies
    of those a rule covers: those run as they are). ``hvp``, reverse mode over
    forward mode, differentiates the forward-mode glue of those ``root``
    reaches and calls the reverse-mode glue of those it reaches through it."""
    first = _reached(functions, root, references, covered, through_glue=False)
    everything = _reached(functions, root, references, covered) if mode == "hvp" else first
    found = []
    for name in [name for name in functions if name in everything - {root}]:
        modes = (mode,) if mode != "hvp" else ("hvp", "reverse") if name in first else \
            ("reverse",)
        for extra in EXTRA_CALLEES:
            glue = extra(name, modes, builtin_glue)
            if glue is None:
                continue
            followed = covered.setdefault(name, set())
            for disp, args, glue_mode in glue:
                low = lower(disp, args)
                lowered.setdefault(low.symbol, low)
                found.append(low.symbol)
                if glue_mode == "hvp":
                    followed.add(low.symbol)
    return found


_UNRESOLVED = ".numba.unresolved$"


_GLOBAL_REF = re.compile(r'@(?:"((?:[^"\\]|\\[0-9A-Fa-f]{2})*)"|([-a-zA-Z$._][-a-zA-Z$._0-9]*))')


def _ufunc_kernels(root: Lowered) -> dict:
    """symbol -> (dispatcher, argument types) of the kernels of the
    ``@vectorize``/``@guvectorize`` ufuncs the code of ``root`` reaches: those
    Numba compiled before ``import enzpy`` (eagerly, with signatures) or loaded
    from its cache were never lowered where enzpy could see them."""
    walk = _walk(root.dispatcher)
    return {cres.fndesc.mangled_name: (kernel, tuple(sig.args))
            for kernel in (walk.ufunc_kernels if walk is not None else ())
            for sig, cres in list(kernel.overloads.items())}


def _referenced(fn) -> set:
    """The global names ``fn``'s body refers to, read from its text (one call into
    LLVM; walking its operands through the binding costs one per operand)."""
    return _global_names(str(fn))


_DEFINE_NAME = re.compile(r'^define [^@]*' + _GLOBAL_REF.pattern + r'\(', re.M)


def _references_by_function(text: str) -> dict:
    """{function: global names its body refers to} for the functions an IR text
    defines (printing one function of a large module from LLVM costs as much
    as printing the module)."""
    found = {}
    for m in _DEFINE_NAME.finditer(text):
        end = text.find("\n}", m.end())
        name = _unquote(m.group(1)) if m.group(1) is not None else m.group(2)
        found[name] = _global_names(text[m.start():end if end >= 0 else len(text)])
    return found


def _unquote(quoted: str) -> str:
    """A quoted LLVM name's text (``\\xx`` escapes decoded)."""
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), quoted)


def _global_names(text: str) -> set:
    names = set()
    for quoted, plain in _GLOBAL_REF.findall(text):
        name = _unquote(quoted) if quoted else plain
        if name.startswith(_UNRESOLVED):          # mutual recursion's pointer
            name = name[len(_UNRESOLVED):]
        names.add(name)
    return names


def _reached(defined, root, references: dict, covered: dict, through_glue=True) -> set:
    """The functions ``root`` calls or refers to, directly or not (``defined``:
    the module's functions by name), and those a rule covers, whose bodies are
    not followed (they run as they are): the glue differentiated in their place
    (``covered``) is, if ``through_glue``. ``references`` keeps each function's
    names between calls."""
    seen, todo = {root}, [root]
    while todo:
        name = todo.pop()
        if name in covered:
            names = covered[name] if through_glue else ()
        else:
            fn = defined.get(name)
            if fn is None or fn.is_declaration:
                continue
            if name not in references:
                references[name] = _referenced(fn)
            names = [_pointed_at(other) for other in references[name]
                     if other in defined or other.startswith(_UNRESOLVED)]
        for other in names:
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def _resolve_mutual_recursion(module):
    """Numba calls a mutually recursive function through a pointer it fills in
    at load time (``@".numba.unresolved$f"``); point it at the linked ``f`` so
    the cleanup turns those indirect calls into direct ones. (A small module
    defining the pointers is linked in: printing and parsing the whole module
    again cost as much as linking it.)"""
    defined = {fn.name: fn for fn in module.functions if not fn.is_declaration}
    targets = [g.name for g in module.global_variables if g.name.startswith(_UNRESOLVED)
               and g.is_declaration and g.name[len(_UNRESOLVED):] in defined]
    if not targets:
        return module
    lines = []
    for name in targets:
        fn = defined[name[len(_UNRESOLVED):]]
        ret, _, params = str(fn.global_value_type).partition(" (")
        lines += [f'declare {ret} @"{fn.name}"({params}',
                  f'@"{name}" = constant ptr @"{fn.name}"']
    module.link_in(llvm.parse_assembly("\n".join(lines)))
    for name in targets:
        module.get_global_variable(name).linkage = llvm.Linkage.internal
    return module


_LABEL = re.compile(r'^"?([^":]+)"?:')
_ASSIGN = re.compile(r'^\s+%"?([^"\s]+)"? = ')


class OriginalBlocks:
    """{function: {instruction name: block label}} before cleanup merges blocks,
    read on demand from the raw IR text each function was linked from (only
    messages need it, for the few functions they name).

    Numba names blocks after bytecode offsets (``B54``), which map to source
    lines; instruction names survive the cleanup passes, block names do not.
    """

    def __init__(self, texts: dict):
        self._texts = texts         # function -> raw IR text of the module defining it
        self._table = {}

    def get(self, symbol, default=None):
        if symbol not in self._table:
            text = self._texts.get(symbol)
            self._table[symbol] = _instruction_blocks(text, symbol) if text else {}
        return self._table[symbol] or default


def _instruction_blocks(text: str, symbol: str) -> dict:
    """{instruction name: block label} of ``symbol``'s definition in ``text``."""
    start = re.search(r'^define [^@]*@"?' + re.escape(symbol) + r'"?\(', text, re.M)
    if start is None:
        return {}
    end = text.find("\n}", start.end())
    table, label = {}, ""
    for line in text[start.end():end if end >= 0 else len(text)].splitlines()[1:]:
        m = _LABEL.match(line)
        if m:
            label = m.group(1)
            continue
        m = _ASSIGN.match(line)
        if m:
            table[m.group(1)] = label
    return table


_copies = itertools.count()
_MERGEABLE = {llvm.Linkage.linkonce_any, llvm.Linkage.linkonce_odr, llvm.Linkage.weak_any,
              llvm.Linkage.weak_odr}


# Helpers Numba defines in each module that needs them, each referring to that
# module's own environment or types: destructors, unpacking exception arguments.
_PER_MODULE = ("_Dtor.", ".dtor.", "__excinfo_unwrap_args")


def _drop_duplicate_definitions(other, module, defined: set):
    """Two modules may both define a helper Numba emits per module: LLVM's
    linker keeps one ``linkonce_odr`` copy; a per-module helper (or another
    identical definition) stays a private copy in each. Different definitions
    of one symbol are a bug. (``defined``: the names ``module`` defines.)"""
    for fn in other.functions:
        if fn.is_declaration or fn.name not in defined or fn.linkage in _MERGEABLE:
            continue
        if not fn.name.startswith(_PER_MODULE) and \
                str(fn) != str(module.get_function(fn.name)):
            raise InternalError(f"symbol {fn.name} is defined twice in the linked IR")
        fn.name = f"{fn.name}.{next(_copies)}"
        fn.linkage = llvm.Linkage.internal


def _target_machine():
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(opt=2, reloc="default", codemodel="jitdefault")


_tm = None


# Instructions of a helper small enough to be differentiated inside its callers,
# counting those of the helpers inlined into it.
HELPER_INLINE_LIMIT = 100
# Runtime calls the derivative handles where they are (an array's allocation and
# its shadow's, reference counts, a data pointer): a helper calling them inlines
# like one doing arithmetic, so the chain of Numba's allocation helpers behind
# ``np.empty`` costs no derivative calls and records nothing of its own.
_RUNTIME_LEAVES = frozenset(ARRAY_ALLOCATORS + ("NRT_incref", "NRT_decref",
                                                "NRT_MemInfo_data_fast"))


def mark_small_helpers(module, keep, rule_covered=lambda name: False) -> int:
    """Mark small helpers ``alwaysinline`` (cleanup inlines them), except the
    functions ``keep(name)`` names; returns how many. A helper qualifies when it
    calls only intrinsics, functions with a derivative rule (``rule_covered``:
    they stay calls) and qualifying helpers, and stays within
    ``HELPER_INLINE_LIMIT`` instructions with those inlined. A call per element
    of an array expression (Numba's ``__numba_array_expr`` kernels, which call
    ``int_power`` for ``x ** 2``) would otherwise record its arguments, give its
    stack slots heap shadows and run a derivative call per element: inlined,
    the caller's derivative sees the arithmetic and records nothing."""
    functions = {fn.name: fn for fn in module.functions}
    # (read from the module's text: walking instructions through llvmlite costs
    # a foreign call per operand and opcode, most of this pass's time)
    bodies = {name: body for name, body in definitions(str(module)).items()
              if body.startswith("define")}
    sizes = {}                      # name -> size with its helpers inlined; None: kept

    def inlined_size(name, open_calls):
        if name in sizes:
            return sizes[name]
        body = bodies.get(name)
        if body is None or keep(name) or name in open_calls:
            return None             # (recursion: a helper on the call path is kept)
        open_calls.add(name)
        size = 0
        for instruction in _instructions(body):
            size += 1
            call = _CALL.match(instruction)
            if call is None:
                continue
            sigil, callee = call.group(1)[0], unquote(call.group(1)[1:])
            if sigil == "@" and (callee.startswith(("llvm.", _VIEW_FUNCTION)) or
                                 callee in _RUNTIME_LEAVES or rule_covered(callee)):
                continue
            inner = inlined_size(callee, open_calls) if sigil == "@" else None
            if inner is None:
                size = None
                break
            size += inner
        open_calls.discard(name)
        sizes[name] = size if size is not None and size <= HELPER_INLINE_LIMIT else None
        return sizes[name]

    marked = 0
    for name, fn in functions.items():
        if inlined_size(name, set()) is not None:
            fn.add_function_attribute("alwaysinline")
            marked += 1
    return marked


# A call instruction's callee: ``@name``, or ``%value`` (through a pointer).
_CALL = re.compile(r'(?:%[-\w.$"]+ = )?(?:(?:tail|musttail|notail) )?call [^@%]*?'
                   r'([@%](?:"[^"]*"|[-\w.$]+))\(')


def _instructions(body: str):
    """The instructions of a function's text (its indented lines but debug records)."""
    for line in body.splitlines():
        if line.startswith("  ") and not line.lstrip().startswith("#dbg_"):
            yield line.lstrip()


def cleanup(module):
    """The light pre-AD pipeline: small, clean, never unrolled IR."""
    global _tm
    if _tm is None:
        _tm = _target_machine()
    pto = llvm.PipelineTuningOptions(speed_level=1)
    pto.loop_unrolling = False
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    pb = llvm.create_pass_builder(_tm, pto)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.add_sroa_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.add_sroa_pass()
    mpm.add_new_gvn_pass()
    mpm.add_sccp_pass()
    # An inlined helper's exit tests again what its caller just tested (a null
    # allocation, a status code): threaded away, the reverse sweep needs neither
    # the edge nor the value behind the second test.
    mpm.add_jump_threading_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.add_dead_code_elimination_pass()
    # Each loop entered by one edge (a preheader): its trip count is then
    # recorded once, not the edge taken at every iteration.
    mpm.add_loop_simplify_pass()
    mpm.add_instruction_namer_pass()
    mpm.run(module, pb)
    return module
