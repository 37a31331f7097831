"""Custom derivative rules written as ``@njit`` functions (JAX's shapes).

    enzpy.defvjp(f, fwd, bwd)   # fwd(*args) -> (out, residuals); bwd(residuals, g) -> cotangents
    enzpy.defjvp(f, jvp)        # jvp(primals, tangents) -> (out, tangent_out)
    enzpy.inactive(f)           # calls of f carry no derivative
    enzpy.clear_rules(f)

A rule is used wherever ``f`` is called: the call goes through the one door
of function-level rules (``custom.py``) to small ``@njit`` glue functions
generated per rule and argument types, which Numba compiles and enzpy links
into the primal module like any callee:

* reverse mode: the augmented forward calls ``aug(*args) -> (out, box[, shadow])``
  (``box`` a structref holding the residuals, ``out`` and, for an array
  ``out``, its zero shadow; the box goes on the tape); the reverse calls
  ``rev(box, g, shadows..., flags...) -> float cotangents``, which adds array
  cotangents into the arguments' shadows in place;
* forward mode: ``fwd(*args, tangents..., flags...) -> (out, tangent_out)``.

The glue is ordinary Numba code, so second order (reverse over forward)
differentiates it, and through it the rule's own functions. Rules also serve
enzpy's derivatives of NumPy's linear algebra (``linalg.py``), registered on
Numba's implementation functions.
"""
from __future__ import annotations

import hashlib
import inspect
import itertools
import linecache
import os
import sys
import threading
import warnings
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import binding as llvm
from numba import types
from numba.core.caching import NullCache
from numba.core.registry import cpu_target
from numba.experimental import structref

from . import custom, diskcache, fingerprint, frontend
from .arguments import may_share_memory_nopython, positional_parameters
from .errors import RuleError, RuleShapeError, UnsupportedError
from .ir import Function, fields_of, local, tangent_name
from .irtext import type_text
from .tape import POP, PUSH, RAISE


@dataclass
class RuleSpec:
    name: str                 # for messages
    fwd: object = None        # defvjp
    bwd: object = None
    jvp: object = None        # defjvp
    inactive: bool = False
    builtin: tuple = None     # (module, qualified name) of the Numba implementation covered


_lock = threading.RLock()
_rules: dict = {}             # the user's function (py_func) -> RuleSpec
_builtin: dict = {}           # (module, qualified name) of a Numba implementation -> RuleSpec
_builtin_variants: dict = {}  # (module, qualified name) -> py_func -> suffix of its rule's name


def _function(f):
    if isinstance(f, numba.core.dispatcher.Dispatcher):
        return f.py_func
    if callable(f):
        return f
    raise RuleError(f"expected an @njit function, got {type(f).__name__}")


def _njit(g, what, rule):
    if isinstance(g, numba.core.dispatcher.Dispatcher):
        return g
    if callable(g):
        return numba.njit(g)
    raise RuleError(f"{rule}: {what} must be an @njit function, got {type(g).__name__}")


def _check_arity(g, what, rule, count, takes):
    """``g`` (a rule's fwd, bwd or jvp) must accept ``count`` positional arguments."""
    try:
        signature = inspect.signature(g.py_func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(count))
    except TypeError:
        raise RuleError(f"{rule}: {what}{signature} must take {takes}") from None


def _rule_name(f) -> str:
    return f"the rule of '{_function(f).__qualname__}'"


def _spec(f) -> RuleSpec:
    fn = _function(f)
    inline = getattr(f, "targetoptions", {}).get("inline", "never")
    if inline != "never":
        # Numba inlines such a function into its callers' Numba IR: no call of it is
        # left in the code enzpy differentiates, so the rule would never be used.
        raise UnsupportedError(
            f"{_rule_name(f)}: the function is @njit(inline={inline!r}); Numba "
            f"copies its body into every caller, so enzpy sees no call to apply a rule "
            f"to: register the rule on a function compiled without inline=")
    spec = _rules.get(fn)
    if spec is None:
        spec = _rules[fn] = RuleSpec(_rule_name(f))
    return spec


def defvjp(f, fwd, bwd):
    """Reverse-mode rule of ``f``: ``fwd(*args) -> (out, residuals)`` and
    ``bwd(residuals, g) -> tuple`` with one cotangent per argument of ``f``
    (a float for a float argument, an array shaped like an array argument,
    None for an argument carrying no derivative); ``g`` is the cotangent of
    ``out``. enzpy adds the cotangents into the adjoints and shadows."""
    name = _rule_name(f)
    fwd, bwd = _njit(fwd, "fwd", name), _njit(bwd, "bwd", name)
    params = positional_parameters(_function(f))
    _check_arity(fwd, "fwd", name, len(params), f"the arguments of the function ({len(params)})")
    _check_arity(bwd, "bwd", name, 2, "2 arguments: the residuals and the cotangent")
    with _lock:
        spec = _spec(f)
        spec.fwd, spec.bwd = fwd, bwd
        spec.inactive = False
        _changed()
    return f


def defjvp(f, jvp):
    """Forward-mode rule of ``f``: ``jvp(primals, tangents) -> (out,
    tangent_out)``, ``primals`` and ``tangents`` tuples with one entry per
    argument (the tangent of an integer argument is the argument itself)."""
    name = _rule_name(f)
    jvp = _njit(jvp, "jvp", name)
    _check_arity(jvp, "jvp", name, 2, "2 arguments: the primals and the tangents")
    with _lock:
        spec = _spec(f)
        spec.jvp = jvp
        spec.inactive = False
        _changed()
    return f


def inactive(f):
    """Calls of ``f`` carry no derivative: the result is a constant, and what
    ``f`` writes into memory is not differentiated."""
    with _lock:
        spec = _spec(f)
        spec.fwd = spec.bwd = spec.jvp = None
        spec.inactive = True
        _changed()
    return f


def clear_rules(f):
    """Remove the rules registered for ``f``: it is differentiated through its
    own code again."""
    with _lock:
        _rules.pop(_function(f), None)
        _changed()


def builtin_vjp(module, qualname, fwd, bwd, jvp=None):
    """A rule for Numba's implementation ``module.qualname`` (NumPy's linear
    algebra: see linalg.py). Its functions are cached on disk by Numba: compiling
    them (NumPy's linear algebra, in Numba) takes seconds per rule."""
    def njit(g):
        return numba.njit(cache=True)(g) if g is not None else None
    _builtin[(module, qualname)] = RuleSpec(f"enzpy's rule for {qualname.split('.')[0]}",
                                            njit(fwd), njit(bwd), njit(jvp),
                                            builtin=(module, qualname))


def builtin_variants(module, qualname, choose):
    """Rules for a Numba implementation generated several times under one name
    (``np.logaddexp`` and ``np.logaddexp2``): ``choose(py_func)`` says which,
    as a suffix of the qualified names their rules are registered under."""
    _builtin_variants[(module, qualname)] = choose


def _changed():
    """A registration changes derivatives already built: they are dropped
    (derivatives inside @njit callers compiled earlier keep the old rule)."""
    from . import cache, pipeline
    _glue.clear()
    _spec_of.clear()
    with cache.STATS.lock:
        cache.SHARED.clear()
    _trampolines.clear()
    pipeline.entries.clear()
    pipeline.fast_paths.clear()
    if "enzpy.jitted" in sys.modules:
        sys.modules["enzpy.jitted"].forget_typed_calls()


# -- which calls have a rule -----------------------------------------------------------
_spec_of: dict = {}           # symbol -> (RuleSpec, dispatcher, argtypes) or None


def rule_of(symbol):
    """(spec, dispatcher, argument types) of the rule for a Numba function, or None."""
    if symbol in _spec_of:
        return _spec_of[symbol]
    found = None
    located = frontend.dispatcher_of(symbol)
    if located is not None:
        disp, argtypes = located
        fn = disp.py_func
        key = (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""))
        spec = _rules.get(fn) or _builtin.get(key)
        if spec is None and key in _builtin_variants:
            spec = _builtin.get((key[0], key[1] + _builtin_variants[key](fn)))
        if spec is not None and spec.builtin and any(map(_complex_array, argtypes)):
            spec = None     # (enzpy's rules are real: LAPACK's complex calls are refused)
        if spec is not None:
            found = (spec, disp, argtypes)
    _spec_of[symbol] = found
    return found


def _complex_array(ty) -> bool:
    if isinstance(ty, types.BaseTuple):
        return any(map(_complex_array, ty))
    return isinstance(ty, types.Array) and isinstance(ty.dtype, types.Complex)


def registered() -> dict:
    """The user's function -> its RuleSpec, for every rule registered."""
    with _lock:
        return dict(_rules)


def has_rule(disp) -> bool:
    return _function(disp) in _rules


_trampolines: dict = {}


def forget(disp):
    """Drop the trampoline calling ``disp`` (it was recompiled: the trampoline calls its
    old code)."""
    _trampolines.pop(disp, None)


def trampoline(disp):
    """An @njit function calling ``disp``: differentiating it applies ``disp``'s
    rule at the top level too."""
    if disp not in _trampolines:
        n = disp.py_func.__code__.co_argcount
        names = ", ".join(f"a{i}" for i in range(n))
        namespace = {"f": disp}
        exec(compile(f"def call({names}):\n    return f({names})\n", "<enzpy trampoline>",
                     "exec"), namespace)
        call = fingerprint.generated_by_enzpy(namespace["call"])
        call.__qualname__ = disp.py_func.__qualname__
        _trampolines[disp] = numba.njit(call)
    return _trampolines[disp]


def glue_dispatchers(symbol, modes, builtin=True):
    """None if no rule covers the Numba function ``symbol``; else the glue of its
    rule whose IR a derivative links, as (dispatcher, argument types, glue mode),
    for each of ``modes``: "reverse" (aug and rev), "forward" (fwd) and "hvp"
    (fwd, which ``hvp`` differentiates in reverse mode). Of enzpy's own rules,
    only the glue ``hvp`` differentiates, and only if ``builtin``: derivatives
    call the rest by name (``_call_glue``)."""
    found_rule = rule_of(symbol)
    if found_rule is None:
        return None
    if found_rule[0].builtin is not None:
        modes = ("hvp",) if builtin and "hvp" in modes else ()
    found = []
    for mode in modes:
        glue_mode = "forward" if mode == "hvp" else mode
        found += [(g.dispatcher, g.argtypes, mode) for g in glue_for(symbol, glue_mode)
                  .functions(glue_mode) if g is not None]
    return found


frontend.EXTRA_CALLEES.append(glue_dispatchers)


# -- the glue ----------------------------------------------------------------------------
@structref.register
class _BoxType(types.StructRef):
    """What the reverse sweep keeps of one rule call: the residuals, the
    primal result and its shadow."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(ty)) for name, ty in fields)


structref.define_attributes(_BoxType)


@dataclass
class _Compiled:
    dispatcher: object
    argtypes: tuple
    restype: object
    stable: str = None        # the name first-order derivatives call it by (see _publish)

    @property
    def symbol(self):
        return self.dispatcher.overloads[self.argtypes].fndesc.mangled_name

    def _publish(self, spec, role):
        """Give the glue of a built-in rule a name of its own in the JIT's symbol
        table, the same in every process: first-order derivatives call it there
        instead of linking its IR (with the IR of NumPy's linear algebra it calls,
        lowered again when Numba loaded the rule from its cache), and a derivative
        saved on disk is loaded once its glue is compiled again (``require``)."""
        module, qualname = spec.builtin
        digest = hashlib.sha256(f"{module}\0{qualname}\0{self.argtypes}\0{role}".encode())
        self.stable = f"enzpy.glue.{digest.hexdigest()[:24]}"
        cres = self.dispatcher.overloads[self.argtypes]
        llvm.add_symbol(self.stable, cres.library.get_pointer_to_function(
            cres.fndesc.llvm_func_name))


@dataclass
class _Glue:
    spec: RuleSpec
    argtypes: tuple
    restype: object
    kinds: list               # per argument: 'float', 'array' or 'other'
    aug: _Compiled = None
    rev: _Compiled = None
    fwd: _Compiled = None
    reverse_error: Exception = None     # why the vjp rule does not fit (raised if used)
    forward_error: Exception = None
    _compiled: set = None               # the modes whose glue was compiled
    _compiling: set = None              # the modes whose glue is being compiled

    def compile_for(self, mode):
        """Compile the glue ``mode`` needs ('reverse': aug and rev; 'forward':
        fwd), once; a rule that does not fit keeps its error for its use."""
        with _lock:
            if self._compiled is None:
                self._compiled, self._compiling = set(), set()
            if mode in self._compiling:
                # (the rule's own code calls enzpy.autodiff on a function whose
                # derivative uses the rule: that derivative would need itself)
                raise UnsupportedError(
                    f"{self.spec.name} ({mode} mode) is needed while its glue compiles: "
                    f"its code differentiates (enzpy.autodiff) a function whose derivative "
                    f"uses this rule itself")
            if mode in self._compiled:
                return self
            self._compiling.add(mode)
            try:
                if mode == "reverse" and self.spec.fwd is not None:
                    self.aug, self.rev = _reverse_glue(self)
                elif mode == "forward" and self.spec.jvp is not None:
                    self.fwd = _forward_glue(self)
                if self.spec.builtin is not None:
                    for role in ("aug", "rev") if mode == "reverse" else ("fwd",):
                        if getattr(self, role) is not None:
                            getattr(self, role)._publish(self.spec, role)
            except RuleError as exc:
                if mode == "reverse":
                    self.reverse_error = exc
                else:
                    self.forward_error = exc
            finally:
                self._compiling.discard(mode)
            self._compiled.add(mode)
        return self

    def functions(self, mode):
        """The glue functions a derivative in ``mode`` calls."""
        self.compile_for(mode)
        return [self.aug, self.rev] if mode == "reverse" else [self.fwd]


_glue: dict = {}
_ids = itertools.count()


def _kind(ty):
    if isinstance(ty, types.Float):
        return "float"
    if isinstance(ty, types.Array) and isinstance(ty.dtype, types.Float):
        return "array"
    return "other"


def _may_hold_floats(ty, seen=None) -> bool:
    """Whether a value of Numba type ``ty`` may hold floats (or complex numbers):
    as itself, as array elements or record fields, in a container or an object's
    fields, at any depth."""
    seen = set() if seen is None else seen
    if isinstance(ty, (types.Float, types.Complex)):
        return True
    if isinstance(ty, types.DeferredType):          # (a linked node's own class)
        ty = ty.get()
    if id(ty) in seen:
        return False
    seen.add(id(ty))
    if isinstance(ty, types.RawPointer):            # (void*: memory of any type)
        return True
    if isinstance(ty, (types.Buffer, types.NestedArray, types.CPointer, types.MemInfoPointer)):
        return _may_hold_floats(ty.dtype, seen)
    if isinstance(ty, types.IteratorType):
        return _may_hold_floats(ty.yield_type, seen)
    if isinstance(ty, types.Record):
        return any(_may_hold_floats(t, seen) for _, t in ty.members)
    if isinstance(ty, types.BaseTuple):
        return any(_may_hold_floats(t, seen) for t in ty)
    if isinstance(ty, (types.List, types.ListType, types.Set)):
        return _may_hold_floats(ty.dtype, seen)
    if isinstance(ty, types.DictType):
        return _may_hold_floats(ty.key_type, seen) or _may_hold_floats(ty.value_type, seen)
    if isinstance(ty, types.Optional):
        return _may_hold_floats(ty.type, seen)
    if isinstance(ty, types.ClassInstanceType):
        return any(_may_hold_floats(t, seen) for t in ty.struct.values())
    if isinstance(ty, types.StructRef):
        return any(_may_hold_floats(t, seen) for t in ty.field_dict.values())
    return False


def _check_arguments(spec, argtypes):
    """A rule's glue passes floats and float arrays with their shadows or
    tangents, and anything else as it is (strings, enums, integer tuples...): a
    container holding floats would lose their derivatives."""
    for i, ty in enumerate(argtypes):
        if _kind(ty) == "other" and _may_hold_floats(ty):
            raise UnsupportedError(
                f"{spec.name}: argument {i} is of type {ty}; a custom rule's arguments carry "
                f"derivatives only as floats and float arrays (tuples, lists, objects and "
                f"complex values would lose theirs): pass the arrays and floats of a container "
                f"as arguments of their own")


# (values that cannot change after the call: kept as they are)
_IMMUTABLE = (types.Number, types.Boolean, types.NoneType, types.UnicodeType, types.Literal,
              types.EnumMember, types.NPDatetime, types.NPTimedelta, types.CharSeq,
              types.UnicodeCharSeq, types.SliceType, types.RangeType, types.DType,
              types.NumberClass)


def _ownable(ty) -> bool:
    """Residuals ``_owned`` can make the rule's own: its arrays, in tuples and
    lists, are copied; immutable values (numbers, strings) need no copy. Any
    other object (a jitclass, a typed list or dict, a record, even of integers:
    indices) could change before the reverse sweep reads it."""
    if isinstance(ty, (types.Array,) + _IMMUTABLE):
        return True
    if isinstance(ty, types.BaseTuple):
        return all(map(_ownable, ty))
    if isinstance(ty, types.List):
        return _ownable(ty.dtype)
    if isinstance(ty, types.Optional):
        return isinstance(ty.type, _IMMUTABLE)
    return False


def _compile(source, namespace, name, argtypes, spec):
    """Compile the glue function ``name`` of ``source``. The glue of a built-in
    rule lives in a file of the cache folder, so Numba caches its machine code
    (the file's name covers the rule, the source and enzpy's own)."""
    filename = diskcache.source_file(f"# glue of {spec.builtin}\n{source}") \
        if spec.builtin is not None else None
    if filename is None:
        filename = f"<enzpy rule glue {next(_ids)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # (the module Numba's cache imports again for the function's environment)
    namespace.setdefault("__name__", __name__)
    # (one line ahead: the file starts with the header line above the source)
    exec(compile("\n" + source, filename, "exec"), namespace)
    function = namespace[name]
    if not filename.startswith("<"):
        # (a name of its own: Numba's cache keeps the symbol numbered in the process
        # that saved it, which another rule's glue of the same name may have here)
        function.__qualname__ = f"{name}_{os.path.splitext(os.path.basename(filename))[0]}"
    disp = numba.njit(fingerprint.generated_by_enzpy(function),
                      cache=not filename.startswith("<"))
    try:
        with frontend.enzpy_hints_hidden():
            _compile_through_cache(disp, tuple(argtypes))
    except numba.core.errors.TypingError as exc:
        raise RuleError(f"{spec.name}: Numba cannot compile it for {argtypes}: {exc}") from None
    return _Compiled(disp, tuple(argtypes), disp.overloads[tuple(argtypes)].signature.return_type)


def _compile_through_cache(disp, argtypes):
    """``disp.compile(argtypes)``, from Numba's cache where it has the glue; a
    cache file it cannot read (truncated, overwritten) is dropped and the glue
    compiled afresh, as enzpy's own entries are."""
    try:
        disp.compile(argtypes)
    except numba.core.errors.NumbaError:
        raise
    except Exception as exc:        # (what reading a broken pickle raises varies)
        if isinstance(disp._cache, NullCache):
            raise
        warnings.warn(f"Numba's cache of enzpy's rule glue could not be read ({exc!r}): "
                      f"compiling it again", diskcache.CacheWarning, stacklevel=2)
        disp._cache.flush()
        disp.compile(argtypes)


def glue_for(symbol, mode) -> _Glue:
    """The glue of the rule of ``symbol``, compiled for ``mode``."""
    with _lock:
        glue = _glue.get(symbol)
        if glue is None:
            spec, disp, argtypes = rule_of(symbol)
            _check_arguments(spec, argtypes)
            restype = disp.overloads[tuple(argtypes)].signature.return_type
            glue = _glue[symbol] = _new_glue(spec, tuple(argtypes), restype)
        return glue.compile_for(mode)


_builtin_glue: dict = {}      # (module, qualified name, argument types) -> _Glue


def _new_glue(spec, argtypes, restype) -> _Glue:
    """The glue of ``spec`` for ``argtypes``: one per process for a built-in
    rule (its published names are unique)."""
    key = (*spec.builtin, argtypes) if spec.builtin is not None else None
    glue = _builtin_glue.get(key)
    if glue is None:
        glue = _Glue(spec, argtypes, restype, [_kind(t) for t in argtypes])
        if key is not None:
            _builtin_glue[key] = glue
    return glue


def require(module, qualname, argtypes, restype, mode) -> bool:
    """Compile and publish the glue a derivative saved on disk calls (see
    ``_call_glue``); False if it cannot be had, and the derivative is rebuilt."""
    spec = _builtin.get((module, qualname))
    if spec is None:
        return False
    with _lock:
        glue = _new_glue(spec, argtypes, restype).compile_for(mode)
    return (glue.reverse_error if mode == "reverse" else glue.forward_error) is None


def _names(n, prefix):
    return [f"{prefix}{i}" for i in range(n)]


def _differentiable_result(ty) -> bool:
    """Results a rule may have: floats, float arrays, tuples of them."""
    if isinstance(ty, types.BaseTuple):
        return all(_differentiable_result(t) for t in ty)
    return _kind(ty) != "other" or isinstance(ty, types.Integer)


def _zero_shadow(x):
    """A zero shadow of a rule's result (float, array or tuple of them)."""


def _laid_out_like(ref, x):
    """``x`` (a float, an array or a tuple of them) in the memory layout of
    ``ref``: derivative code addresses a shadow with its primal's strides."""


def _owned(x):
    """``x`` (residuals: arrays, numbers, tuples of them) with every array
    copied: the residuals of a rule often hold the rule's own arguments, which
    the function may overwrite in place before the reverse sweep reads them."""


@numba.extending.overload(_owned)
def _ol_owned(x):
    if isinstance(x, types.Array) and x.layout == "F":
        return lambda x: x.T.copy().T               # a copy that stays Fortran-ordered
    if isinstance(x, types.Array):
        return lambda x: x.copy()
    if isinstance(x, types.BaseTuple):
        return _tuple_impl("_owned", len(x), "x",
                           build=x.instance_class if isinstance(x, types.BaseNamedTuple)
                           else None)
    if isinstance(x, types.List):        # (a new list: the caller may hold this one)
        return lambda x: [_owned(item) for item in x]
    return lambda x: x


def _owned_type(ty):
    """The type of ``_owned`` of a value of type ``ty``."""
    typing = cpu_target.typing_context
    typing.refresh()
    return typing.resolve_function_type(typing.resolve_value_type(_owned), (ty,), {}).return_type


def _cotangent(shadow, gs, has_g):
    """The cotangent of a rule's result: its arrays are the shadow arrays the
    call's box kept (the caller's shadow slot of the result is overwritten by
    later calls, in a loop), its floats the caller's adjoints ``gs`` (the
    box's zeros when ``has_g`` is false)."""


def _tuple_impl(name, n, *args, whole=(), build=None):
    """``name`` applied to the items of tuple arguments ``args`` (the
    arguments ``whole`` passed as they are), in a tuple (or ``build(*items)``,
    a named tuple's class)."""
    items = ", ".join(f"{name}({', '.join([f'{a}[{i}]' for a in args] + list(whole))})"
                      for i in range(n))
    namespace = {"_zero_shadow": _zero_shadow, "_laid_out_like": _laid_out_like,
                 "_cotangent": _cotangent, "_owned": _owned, "build": build}
    result = f"build({items})" if build is not None else f"({items},)" if n else "()"
    exec(compile(f"def impl({', '.join(args + whole)}):\n    return {result}\n",
                 "<enzpy tuple rule>", "exec"), namespace)
    return fingerprint.generated_by_enzpy(namespace["impl"])


@numba.extending.overload(_cotangent)
def _ol_cotangent(shadow, gs, has_g):
    if isinstance(shadow, types.Array):
        return lambda shadow, gs, has_g: shadow
    if isinstance(shadow, (types.Float, types.Integer)):
        return lambda shadow, gs, has_g: gs if has_g else shadow
    if isinstance(shadow, types.BaseTuple):
        return _tuple_impl("_cotangent", len(shadow), "shadow", "gs", whole=("has_g",))
    return None


@numba.extending.overload(_zero_shadow)
def _ol_zero_shadow(x):
    if isinstance(x, types.Array):
        return lambda x: _laid_out_like(x, np.zeros(x.shape, x.dtype))
    if isinstance(x, types.Float):
        zero = numba.np.numpy_support.as_dtype(x).type(0.0)    # (x * 0.0 is nan at inf)
        return lambda x: zero
    if isinstance(x, types.Integer):
        return lambda x: x
    if isinstance(x, types.BaseTuple):
        return _tuple_impl("_zero_shadow", len(x), "x")
    return None


@numba.njit
def _strided_copy(ref, x):
    """``x`` copied into fresh memory laid out with the strides of ``ref``."""
    size = ref.itemsize
    span = 1
    for n, s in zip(ref.shape, ref.strides):
        if s < 0 or s % size:
            raise ValueError("a rule's result has negative or unaligned strides")
        span += (n - 1) * (s // size) if n > 0 else 0
    out = np.lib.stride_tricks.as_strided(np.zeros(span, ref.dtype), ref.shape, ref.strides)
    out[...] = x
    return out


@numba.extending.overload(_laid_out_like)
def _ol_laid_out_like(ref, x):
    if isinstance(ref, types.Array):
        if ref.layout == "F":
            return lambda ref, x: np.asfortranarray(x)
        if ref.layout == "C":
            return lambda ref, x: np.ascontiguousarray(x)
        return lambda ref, x: _strided_copy(ref, x)
    if isinstance(ref, types.Float):
        cast = np.float64 if ref.bitwidth == 64 else np.float32
        return lambda ref, x: cast(x)
    if isinstance(ref, types.Integer):
        return lambda ref, x: x
    if isinstance(ref, types.BaseTuple):
        return _tuple_impl("_laid_out_like", len(ref), "ref", "x")
    return None


def _compile_rule_function(rule_fn, argtypes, what, spec):
    try:
        with frontend.enzpy_hints_hidden():
            rule_fn.compile(tuple(argtypes))
    except numba.core.errors.TypingError as exc:
        raise RuleError(f"{spec.name}: {what} cannot be compiled for {tuple(argtypes)}: "
                        f"{exc}") from None
    return rule_fn.overloads[tuple(argtypes)].signature.return_type


def _reverse_glue(glue):
    spec, argtypes = glue.spec, glue.argtypes
    n = len(argtypes)
    xs = ", ".join(_names(n, "x"))
    fwd_type = _compile_rule_function(spec.fwd, argtypes, "fwd", spec)
    if not (isinstance(fwd_type, types.BaseTuple) and len(fwd_type) == 2):
        raise RuleError(f"{spec.name}: fwd must return (out, residuals), returns {fwd_type}")
    out_type, res_type = fwd_type
    if not _ownable(res_type):
        raise RuleError(f"{spec.name}: fwd's residuals are of type {res_type}; they may hold "
                        f"numbers, arrays, and tuples and lists of them (enzpy keeps copies: the "
                        f"function may overwrite its arguments before the reverse sweep), and "
                        f"strings; objects (jitclasses, typed lists, records) could change "
                        f"before the reverse sweep: return their arrays and values")
    if not _differentiable_result(out_type) or types.unliteral(out_type) != glue.restype:
        raise RuleError(f"{spec.name}: fwd returns out of type {out_type}; the function "
                        f"returns {glue.restype}")
    res_type = _owned_type(res_type)        # (what the box keeps: copies, C-ordered)
    box_type = _BoxType([("res", res_type), ("out", out_type), ("shadow", out_type)])
    namespace = {"fwd": spec.fwd, "bwd": spec.bwd, "np": np, "new": structref.new,
                 "RuleShapeError": RuleShapeError, "Box": box_type, **_VIEW_CHECK,
                 "_zero_shadow": _zero_shadow, "_cotangent": _cotangent, "_owned": _owned}
    arrays = [i for i, k in enumerate(glue.kinds) if k == "array"]
    aug_source = (f"def aug({xs}):\n"
                  f"    out, res = fwd({xs})\n"
                  + _refuse_views_of_arguments(spec, out_type, arrays) +
                  "    box = new(Box)\n    box.res = _owned(res)\n    box.out = out\n"
                  "    box.shadow = _zero_shadow(out)\n"
                  "    return out, box, box.shadow\n")
    aug = _compile(aug_source, dict(namespace), "aug", argtypes, spec)

    cts = _compile_rule_function(spec.bwd, (res_type, out_type), "bwd (residuals, g)", spec)
    if not isinstance(cts, types.BaseTuple) or len(cts) != n:
        raise RuleError(f"{spec.name}: bwd must return a tuple of {n} cotangents (one per "
                        f"argument), returns {cts}")
    floats = [i for i, k in enumerate(glue.kinds) if k == "float"]
    lines = [f"def rev(box, gs, has_g{''.join(f', s{i}' for i in arrays)}"
             f"{''.join(f', h{i}' for i in arrays)}):",
             "    g = _cotangent(box.shadow, gs, has_g)",
             "    cts = bwd(box.res, g)"]
    writes = []          # (after every shape is checked: none of the rule's is half done)
    for i in range(n):
        ct = cts[i]
        if glue.kinds[i] == "array":
            if isinstance(ct, types.NoneType):
                continue
            if not (isinstance(ct, types.Array) and ct.ndim == argtypes[i].ndim):
                raise RuleError(f"{spec.name}: the cotangent of argument {i} ({argtypes[i]}) "
                                f"must be an array of {argtypes[i].ndim} dimensions, bwd "
                                f"returns {ct}")
            message = (f"{spec.name}: the cotangent of argument {i} does not have the shape "
                       f"of the argument")
            lines += [f"    if h{i} and cts[{i}].shape != s{i}.shape:",
                      f"        raise RuleShapeError({message!r})"]
            writes += [f"    if h{i}:", f"        s{i} += cts[{i}]"]
        elif glue.kinds[i] == "float" and not isinstance(ct, (types.Number, types.NoneType)):
            raise RuleError(f"{spec.name}: the cotangent of argument {i} ({argtypes[i]}) must "
                            f"be a float, bwd returns {ct}")
    lines += writes
    returns = [f"{argtypes[i]}({'0.0' if isinstance(cts[i], types.NoneType) else f'cts[{i}]'})"
               for i in floats]
    lines.append(f"    return ({', '.join(returns)}{',' if returns else ''})")
    # (a shadow is written: writable even where its array is read-only, a global's)
    rev_types = (box_type, out_type, types.int64) + \
        tuple(argtypes[i].copy(readonly=False) for i in arrays) + \
        (types.int64,) * len(arrays)
    rev_namespace = dict(namespace, float64=np.float64, float32=np.float32)
    rev = _compile("\n".join(lines) + "\n", rev_namespace, "rev", rev_types, spec)
    return aug, rev


_VIEW_CHECK = {"_may_share": may_share_memory_nopython, "UnsupportedError": UnsupportedError}


def _refuse_views_of_arguments(spec, out_type, arrays) -> str:
    """Glue source raising when an array of the rule's result ``out`` shares memory
    with an array argument (a view of it) or with another of its arrays: each
    gets a shadow (tangent) of its own, so what the caller writes through one
    would not reach the other's derivative."""
    paths, lines = list(_array_paths(out_type)), []
    advice = ("enzpy gives the result of a function with a rule a derivative of its own, so "
              "writes through one would not reach the other: return a copy, or drop the rule")
    for k, path in enumerate(paths):
        shared = [(f"x{i}", f"argument {i}") for i in arrays] + \
            [(f"out{other}", f"item {other}") for other in paths[k + 1:]]
        for value, what in shared:
            message = (f"{spec.name}: the result{f' (item {path})' if path else ''} shares "
                       f"memory with {what}; {advice}")
            lines += [f"    if _may_share(out{path}, {value}):",
                      f"        raise UnsupportedError({message!r})"]
    return "".join(line + "\n" for line in lines)


def _forward_glue(glue):
    spec, argtypes = glue.spec, glue.argtypes
    n = len(argtypes)
    xs, ts = _names(n, "x"), _names(n, "t")
    arrays = [i for i, k in enumerate(glue.kinds) if k == "array"]
    lines = [f"def fwd({', '.join(xs + ts)}{''.join(f', h{i}' for i in arrays)}):"]
    tangents = []
    for i in range(n):
        if i in arrays:
            lines.append(f"    u{i} = t{i} if h{i} else np.zeros_like(x{i})")
            tangents.append(f"u{i}")
        else:
            tangents.append(f"t{i}")
    lines.append(f"    out, tangent = jvp(({', '.join(xs)},), ({', '.join(tangents)},))")
    lines.append(_refuse_views_of_arguments(spec, glue.restype, arrays).rstrip("\n"))
    # (laying out a tangent of another shape would read past its end)
    message = f"{spec.name}: jvp's tangent does not have the shape of the result"
    for path in _array_paths(glue.restype):
        which = f"{message} (item {path})" if path else message
        lines += [f"    if tangent{path}.shape != out{path}.shape:",
                  f"        raise RuleShapeError({which!r})"]
    lines.append("    return out, _laid_out_like(out, tangent)")
    fwd_types = tuple(argtypes) * 2 + (types.int64,) * len(arrays)
    namespace = {"jvp": spec.jvp, "np": np, "_laid_out_like": _laid_out_like,
                 "RuleShapeError": RuleShapeError, **_VIEW_CHECK}
    try:
        compiled = _compile("\n".join(lines) + "\n", namespace, "fwd", fwd_types, spec)
    except RuleError:
        # (a wrong result is named as such, rather than as a failure inside the glue)
        primals = types.Tuple(tuple(getattr(t, "value_type", t) for t in argtypes))  # Omitted
        _check_jvp_result(_compile_rule_function(spec.jvp, (primals, primals),
                                                 "jvp(primals, tangents)", spec), glue)
        raise
    _check_jvp_result(compiled.restype, glue)
    return compiled


def _array_paths(ty, path=""):
    """The indexing suffixes (``""``, ``"[1]"``, ``"[0][2]"``) that reach the
    arrays of a value of type ``ty``, through tuples."""
    if isinstance(ty, types.Array):
        yield path
    elif isinstance(ty, types.BaseTuple):
        for i, item in enumerate(ty):
            yield from _array_paths(item, f"{path}[{i}]")


def _tangent_fits(tangent, out) -> bool:
    """Arrays of the result's dtypes and dimensions (the glue passes the
    tangent on as it is: a float64 array for a float32 result would be read
    as float32s)."""
    if isinstance(out, types.Array):
        return isinstance(tangent, types.Array) and (tangent.dtype, tangent.ndim) == \
            (out.dtype, out.ndim)
    if isinstance(out, types.BaseTuple):
        return isinstance(tangent, types.BaseTuple) and len(tangent) == len(out) and \
            all(map(_tangent_fits, tangent, out))
    return True                 # (scalars: their models differ)


def _check_jvp_result(out, glue):
    if not (isinstance(out, types.BaseTuple) and len(out) == 2) \
            or types.unliteral(out[0]) != glue.restype \
            or _model_type(out[1]) != _model_type(out[0]) \
            or not _tangent_fits(types.unliteral(out[1]), types.unliteral(out[0])):
        raise RuleError(f"{glue.spec.name}: jvp must return (out, tangent_out), out of the "
                        f"function's return type {glue.restype} and tangent_out like it; "
                        f"returns {out}")


# -- the rule: IR calling the glue ---------------------------------------------------------
def _model_type(ty) -> str:
    return type_text(cpu_target.target_context.data_model_manager[ty].get_value_type())


def _arg_fields(fn, argtypes):
    """The Function's parameters (after retptr and excinfo) per Numba argument."""
    ctx = cpu_target.target_context
    fields, start = [], 2
    for ty in argtypes:
        width = len(ctx.get_arg_packer([ty]).argument_types)
        fields.append(fn.args[start:start + width])
        start += width
    return fields


def _shadow_array_fields(fields, activity, has, shadow_of) -> list:
    """The typed arguments passing the shadow of the array whose parameters are
    ``fields``: its meminfo and data are the shadow's (``shadow_of(name)``),
    when ``has``; a meminfo without a shadow (a view made in a parallel loop's
    body) is null: the glue only borrows the shadow."""
    def field(k, a):
        if not has or k not in (0, 4):
            return a.ref
        if k == 0 and activity[a.name] == "const":
            return "null"
        return local(shadow_of(a.name))
    return [f"{a.type} {field(k, a)}" for k, a in enumerate(fields)]


def _leaves(ty, path=()):
    """(path, Numba type) of the floats and arrays in a rule's result type."""
    if isinstance(ty, types.BaseTuple):
        return [leaf for k, t in enumerate(ty) for leaf in _leaves(t, path + (k,))]
    return [(path, ty)]


class _Text:
    """IR lines with fresh names."""

    def __init__(self):
        self.lines, self.ids = [], itertools.count()

    def __call__(self, line):
        self.lines.append("  " + line)

    def fresh(self):
        return f"%v{next(self.ids)}"

    def flatten(self, ref, ty):
        """Numba's argument flattening of an aggregate value: its scalar leaves."""
        fields = fields_of(ty)
        if not fields:
            return [f"{ty} {ref}"]
        out = []
        for k, field in enumerate(fields):
            name = self.fresh()
            self(f"{name} = extractvalue {ty} {ref}, {k}")
            out += self.flatten(name, field)
        return out

    def shadow_flag(self, has, data):
        """The glue's flag that an array argument has a shadow: statically
        active, and its shadow's data pointer not null (an array the analysis
        could not prove inactive, such as a view of a Const argument reached
        through memory, carries a null shadow at run time)."""
        if not has:
            return "i64 0"
        nonnull, flag = self.fresh(), self.fresh()
        self(f"{nonnull} = icmp ne ptr {data}, null")
        self(f"{flag} = zext i1 {nonnull} to i64")
        return f"i64 {flag}"

    def drop(self, ref, ty, numba_type):
        """Release the references a rule result ``ref`` holds (its arrays')."""
        for path, leaf in _leaves(numba_type):
            if isinstance(leaf, types.Array):
                meminfo = self.fresh()
                self(f"{meminfo} = extractvalue {ty} {ref}, {', '.join(map(str, path + (0,)))}")
                self(f"call void @NRT_decref(ptr {meminfo})")


def _call_glue(builder, glue, role, typed_args) -> str:
    """The call of the glue function ``role`` with ``typed_args`` ("type ref"). It
    is called by its Numba symbol when its IR is linked into the module (second
    order differentiates it), else by its published name (``_Compiled._publish``),
    declared, and required of a process loading the derivative from disk."""
    compiled = getattr(glue, role)
    name = compiled.symbol
    defined = builder.module.functions.get(name)
    if compiled.stable is not None and (defined is None or not defined.blocks):
        name = compiled.stable
        params = ", ".join(a.rsplit(" ", 1)[0] for a in typed_args)
        builder.declarations[name] = f'declare i32 @"{name}"({params})'
        builder.requires[name] = (*glue.spec.builtin, glue.argtypes, glue.restype,
                                  "forward" if role == "fwd" else "reverse")
    return f'call i32 @"{name}"({", ".join(typed_args)})'


class UserRule(custom.FunctionRule):
    """The door's entry for rules written as @njit functions."""

    def covers(self, name):
        return rule_of(name) is not None

    def signature(self, name, module):
        if module is None or name not in module.functions or rule_of(name) is None:
            return None
        return Function(name, "i32", module.functions[name].args, [])

    # -- reverse mode ----------------------------------------------------------------
    def reverse(self, deriv, builder):
        spec = rule_of(deriv.fn.name)[0]
        if spec.inactive:
            return self._inactive(deriv, deriv.aug_name, deriv.activity[0] == "dup", "~s.") + (
                f'define internal {deriv.rev_type} @"{deriv.rev_name}"('
                f'{", ".join(deriv.params)}) {{\n'
                f'  ret {"void" if not deriv.adjoint_args else deriv.rev_type + " zeroinitializer"}'
                f"\n}}\n")
        if spec.fwd is None:
            raise UnsupportedError(f"{spec.name} has no reverse rule: register one with "
                                   f"enzpy.defvjp")
        glue = glue_for(deriv.fn.name, "reverse")
        if glue.reverse_error is not None:
            raise glue.reverse_error
        return self._augmented(deriv, glue, builder) + self._reverse_sweep(deriv, glue, builder)

    def _augmented(self, deriv, glue, builder):
        fn, t = deriv.fn, _Text()
        ret_type, out_type = _model_type(glue.aug.restype), _model_type(glue.restype)
        t(f"%ret = alloca {ret_type}")
        t("%status = " + _call_glue(builder, glue, "aug", ["ptr %ret", f"ptr {fn.args[1].ref}"]
                                    + [f"{a.type} {a.ref}" for a in fn.args[2:]]))
        t("%ok = icmp eq i32 %status, 0")
        t("br i1 %ok, label %store, label %failed")
        t.lines += ["failed:", "  ret i32 %status", "store:"]
        t(f"%r = load {ret_type}, ptr %ret")
        t(f"%out = extractvalue {ret_type} %r, 0")
        t(f"store {out_type} %out, ptr {fn.args[0].ref}")
        t(f"%box = extractvalue {ret_type} %r, 1, 0")
        t(f'%slot = call ptr @{PUSH}(ptr %"enzpy.tape", i64 8)')
        t("store ptr %box, ptr %slot")
        t(f"%shadow = extractvalue {ret_type} %r, 2")
        if deriv.activity[0] == "dup":      # the caller's shadow of the result
            t(f'store {out_type} %shadow, ptr {local("~s." + fn.args[0].name)}')
        else:                               # the box keeps its own references
            t.drop("%shadow", out_type, glue.restype)
        t("ret i32 0")
        return (f'define internal i32 @"{deriv.aug_name}"({", ".join(deriv.params)}) {{\n'
                "entry:\n" + "\n".join(t.lines) + "\n}\n")

    def _reverse_sweep(self, deriv, glue, builder):
        fn, t = deriv.fn, _Text()
        fields = _arg_fields(fn, glue.argtypes)
        activity = dict(zip((a.name for a in fn.args), deriv.activity))
        rev_ret, out_type = _model_type(glue.rev.restype), _model_type(glue.restype)
        t(f'%slot = call ptr @{POP}(ptr %"enzpy.tape", i64 8)')
        t("%box = load ptr, ptr %slot")
        t(f"%ret = alloca {rev_ret}")
        t("%exc = alloca ptr")
        t("store ptr null, ptr %exc")
        has_g = deriv.activity[0] == "dup"
        if has_g:
            shadow_ret = local("~s." + fn.args[0].name)
            t(f"%gs = load {out_type}, ptr {shadow_ret}")
            for path, leaf in _leaves(glue.restype):    # consumed: float adjoints reset
                if isinstance(leaf, types.Float):
                    where = shadow_ret
                    if path:
                        where = t.fresh()
                        t(f"{where} = getelementptr {out_type}, ptr {shadow_ret}, i32 0, "
                          + ", ".join(f"i32 {k}" for k in path))
                    t(f"store {_model_type(leaf)} 0.0, ptr {where}")
        args = ["ptr %box"] + t.flatten("%gs" if has_g else "zeroinitializer", out_type) + \
            [f"i64 {int(has_g)}"]
        flags = []
        for i, kind in enumerate(glue.kinds):
            if kind != "array":
                continue
            has = activity[fields[i][4].name] == "dup"
            args += _shadow_array_fields(fields[i], activity, has, lambda n: "~s." + n)
            flags.append(t.shadow_flag(has, local("~s." + fields[i][4].name)))
        t("%status = " + _call_glue(builder, glue, "rev", ["ptr %ret", "ptr %exc"] + args + flags))
        t("%e = load ptr, ptr %exc")
        t(f'call void @{RAISE}(ptr %"enzpy.tape", i32 %status, ptr %e)')
        t("call void @NRT_decref(ptr %box)")
        if deriv.adjoint_args:
            floats = [i for i, k in enumerate(glue.kinds) if k == "float"]
            position = {fields[i][0].name: k for k, i in enumerate(floats)}
            t(f"%cts = load {rev_ret}, ptr %ret")
            t("%failed = icmp ne i32 %status, 0")
            agg = "undef"
            for j, a in enumerate(deriv.adjoint_args):
                t(f"%ct{j}.raw = extractvalue {rev_ret} %cts, {position[a.name]}")
                t(f"%ct{j} = select i1 %failed, {a.type} 0.0, {a.type} %ct{j}.raw")
                t(f"%adj{j} = insertvalue {deriv.rev_type} {agg}, {a.type} %ct{j}, {j}")
                agg = f"%adj{j}"
            t(f"ret {deriv.rev_type} {agg}")
        else:
            t("ret void")
        return (f'define internal {deriv.rev_type} @"{deriv.rev_name}"'
                f'({", ".join(deriv.params)}) {{\nentry:\n' + "\n".join(t.lines) + "\n}\n")

    @staticmethod
    def _inactive(deriv, name, clear_result, prefix):
        """Call the function itself; the result's derivative is zero."""
        fn = deriv.fn
        args = ", ".join(f"{a.type} {a.ref}" for a in fn.args)
        clear = ""
        if clear_result:
            spec, disp, argtypes = rule_of(fn.name)
            ty = _model_type(disp.overloads[tuple(argtypes)].signature.return_type)
            clear = f"  store {ty} zeroinitializer, ptr {local(prefix + fn.args[0].name)}\n"
        return (f'define internal i32 @"{name}"({", ".join(deriv.params)}) {{\n'
                f'  %status = call i32 @"{fn.name}"({args})\n{clear}  ret i32 %status\n}}\n')

    # -- forward mode ----------------------------------------------------------------
    def forward(self, deriv, builder):
        spec = rule_of(deriv.fn.name)[0]
        fn = deriv.fn
        activity = dict(zip((a.name for a in fn.args), deriv.activity))
        tangent_ret = activity[fn.args[0].name] != "const"
        if spec.inactive:
            return self._inactive(deriv, deriv.name, tangent_ret, tangent_name(""))
        if spec.jvp is None:
            raise UnsupportedError(f"{spec.name} has no forward rule: register one with "
                                   f"enzpy.defjvp (forward mode and second derivatives need it)")
        glue = glue_for(fn.name, "forward")
        if glue.forward_error is not None:
            raise glue.forward_error
        fields = _arg_fields(fn, glue.argtypes)
        args = [f"{a.type} {a.ref}" for a in fn.args[2:]]
        flags, t = [], _Text()
        for i, kind in enumerate(glue.kinds):
            has = any(activity[a.name] != "const" for a in fields[i])
            if kind == "array":
                args += _shadow_array_fields(fields[i], activity, has, tangent_name)
                flags.append(t.shadow_flag(has, local(tangent_name(fields[i][4].name))))
            elif kind == "float":
                a = fields[i][0]
                args.append(f"{a.type} {local(tangent_name(a.name)) if has else '0.0'}")
            else:
                args += [f"{a.type} {a.ref}" for a in fields[i]]
        ret_type, out_type = _model_type(glue.fwd.restype), _model_type(glue.restype)
        t(f"%ret = alloca {ret_type}")
        t("%status = " + _call_glue(builder, glue, "fwd",
                                    ["ptr %ret", f"ptr {fn.args[1].ref}"] + args + flags))
        t("%ok = icmp eq i32 %status, 0")
        t("br i1 %ok, label %store, label %done")
        t.lines.append("store:")
        t(f"%r = load {ret_type}, ptr %ret")
        t(f"%out = extractvalue {ret_type} %r, 0")
        t(f"store {out_type} %out, ptr {fn.args[0].ref}")
        t(f"%tout = extractvalue {ret_type} %r, 1")
        if tangent_ret:
            t(f"store {out_type} %tout, ptr {local(tangent_name(fn.args[0].name))}")
        else:
            t.drop("%tout", out_type, glue.restype)
        t("br label %done")
        t.lines += ["done:", "  ret i32 %status"]
        return (f'define internal i32 @"{deriv.name}"({", ".join(deriv.params)}) {{\n'
                "entry:\n" + "\n".join(t.lines) + "\n}\n")

    def declarations(self):
        return {"NRT_decref": "declare void @NRT_decref(ptr)"}


custom.register(UserRule())


# -- checking a rule -------------------------------------------------------------------------
@dataclass
class RuleCheck:
    """A registered rule against central finite differences of the function."""
    worst_relative_error: float
    errors: dict            # 'vjp argument i', 'jvp', 'fwd out', 'jvp out' -> relative error

    def __str__(self):
        parts = ", ".join(f"{k} {v:.2g}" for k, v in self.errors.items())
        return f"worst relative error {self.worst_relative_error:.3g} ({parts})"


def _leaves_of(value):
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves_of(v)]
    return [np.asarray(value, dtype=np.float64)]


def _random_like(value, rng):
    if isinstance(value, tuple):
        return tuple(_random_like(v, rng) for v in value)
    if isinstance(value, np.ndarray):
        return rng.standard_normal(value.shape).astype(value.dtype)
    if isinstance(value, (float, np.floating)):
        return type(value)(rng.standard_normal())
    return value


def _like(value, wide):
    """``wide`` (a float64 array) as a scalar where ``value`` is one."""
    return wide if isinstance(value, np.ndarray) else float(wide)


def _inner(a, b):
    return float(sum(np.sum(x * y) for x, y in zip(_leaves_of(a), _leaves_of(b))))


def _relative(got, want):
    got, want = _leaves_of(got), _leaves_of(want)
    scale = max([1e-8] + [float(np.max(np.abs(w), initial=0.0)) for w in want])
    return max(float(np.max(np.abs(g - w), initial=0.0)) for g, w in zip(got, want)) / scale


def check_rule(f, *args, step=1e-6, seed=0) -> RuleCheck:
    """Compare the rules registered for ``f`` (``defvjp`` and/or ``defjvp``)
    with central finite differences of ``f`` at ``args``: the cotangents
    ``bwd`` gives for a random output cotangent, the tangent ``jvp`` gives along
    random input tangents, and the results ``fwd``/``jvp`` compute against
    ``f``'s. Float scalars and float arrays among ``args`` are differentiated."""
    spec = _rules.get(_function(f))
    if spec is None or (spec.fwd is None and spec.jvp is None):
        raise TypeError(f"check_rule: no defvjp or defjvp rule is registered for "
                        f"'{_function(f).__qualname__}'")
    rng = np.random.default_rng(seed)
    values = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    diff = [i for i, v in enumerate(values)
            if isinstance(v, (float, np.floating)) or
            (isinstance(v, np.ndarray) and v.dtype.kind == "f")]
    for i, v in enumerate(values):
        if i not in diff and _may_hold_floats(numba.typeof(v)):
            raise TypeError(f"check_rule: argument {i} ({type(v).__name__}) holds floats; "
                            f"check_rule differentiates float scalars and float arrays (as "
                            f"rules do): pass a container's arrays as arguments of their own")
    if not diff:
        raise TypeError("check_rule: no float scalar or float array among the arguments to "
                        "differentiate")
    out = f(*values)

    def directional(tangents, i=None):
        """d/dh f(args + h tangents) by central differences."""
        h = step * max(1.0, max(float(np.max(np.abs(values[j]), initial=0.0)) for j in diff))
        def moved(step):
            # (in float64: a float32 point moved by h is rounding noise)
            return [_like(v, np.asarray(v, dtype=np.float64) + step * np.asarray(t, np.float64))
                    if j in diff else v for j, (v, t) in enumerate(zip(values, tangents))]

        up, dn = f(*moved(h)), f(*moved(-h))
        return tuple_map(lambda a, b: (np.asarray(a) - np.asarray(b)) / (2 * h), up, dn)

    errors = {}
    if spec.fwd is not None:
        out_fwd, res = spec.fwd(*values)
        errors["fwd out"] = _relative(out_fwd, out)
        g = _random_like(out, rng)
        cts = spec.bwd(res, g)
        for i in diff:
            want = np.zeros(np.shape(values[i]))
            for idx in np.ndindex(*np.shape(values[i])):
                unit = np.zeros(np.shape(values[i]))
                unit[idx] = 1.0
                tangents = [unit if j == i else np.zeros(np.shape(v)) if j in diff else None
                            for j, v in enumerate(values)]
                want[idx] = _inner(g, directional(tangents))
            got = cts[i] if cts[i] is not None else np.zeros_like(want)
            if np.shape(got) != want.shape:
                raise RuleError(f"{spec.name}: bwd's cotangent {i} has shape {np.shape(got)}; "
                                f"argument {i} has shape {want.shape}")
            errors[f"vjp argument {i}"] = _relative(np.asarray(got, dtype=np.float64), want)
    if spec.jvp is not None:
        tangents = [_random_like(v, rng) if j in diff else v for j, v in enumerate(values)]
        out_jvp, tout = spec.jvp(tuple(values), tuple(tangents))
        errors["jvp out"] = _relative(out_jvp, out)
        zeroed = [t if j in diff else None for j, t in enumerate(tangents)]
        expected = directional(zeroed)
        if isinstance(expected, np.ndarray) and np.shape(tout) != expected.shape:
            raise RuleError(f"{spec.name}: jvp's tangent has shape {np.shape(tout)}; the "
                            f"result has shape {np.shape(expected)}")
        errors["jvp"] = _relative(tout, expected)
    return RuleCheck(max(errors.values()), errors)


def tuple_map(fn, a, b):
    if isinstance(a, tuple):
        return tuple(tuple_map(fn, x, y) for x, y in zip(a, b))
    return fn(a, b)
