"""Fingerprints: what a derivative depends on, as a hash a later process recomputes.

A derivative depends on the code of the function and of everything it calls,
on the values Numba froze into that code (globals, closure variables, default
arguments), on the argument types, activities and mode, on the custom rules
registered, and on the versions of enzpy, Numba, llvmlite and NumPy and the
CPU. ``derivative_key`` walks the function's code objects and, through the
names they use, its globals and closures, recursively (other ``@njit``
functions, plain functions, user modules' attributes, jitclasses); code that
lives in an installed library (NumPy, Numba, the standard library) is named,
not walked: the versions cover it.

Some callees are not reachable by name (an ``@overload`` implementation, an
installed package's helper, a function passed through a container): a
derivative whose build lowered any (``keyed_by_code``) is keyed by the
code Numba compiled (``primal_digest`` of the linked IR: the code, the values
frozen into it, whichever implementation Numba chose), which a later process
lowers again to compare. A value enzpy cannot fingerprint (an object whose
``repr`` is its address) makes the derivative uncacheable (``NotCacheable``),
never wrongly cached.
"""
from __future__ import annotations

import builtins
import enum
import hashlib
import os
import re
import sys
import sysconfig
import types as pytypes

import llvmlite
import numba
import numpy as np
from numba import types
from numba.core import imputils
from numba.core.datamodel import default_manager
from numba.core.typing import templates as typing_templates
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target

from . import remat

FORMAT = 2          # (2: entries reaching uncovered callees keyed by their code)


class NotCacheable(Exception):
    """The derivative depends on something enzpy cannot fingerprint."""


def _real(path) -> str:
    return os.path.realpath(path)


_ENZPY_DIR = os.path.dirname(_real(__file__))
# code whose every change comes with a new version in the key: Numba, NumPy, llvmlite,
# enzpy and Python's standard library (not the packages installed beside it)
_VERSIONED_PACKAGES = tuple(os.path.dirname(_real(m.__file__)) + os.sep
                            for m in (numba, np, llvmlite)) + (_ENZPY_DIR + os.sep,)
_STDLIB = _real(sysconfig.get_paths()["stdlib"]) + os.sep
_SITE_DIRS = tuple({_real(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})


def _versioned(path) -> bool:
    real = _real(path)
    return real.startswith(_VERSIONED_PACKAGES) or (
        real.startswith(_STDLIB) and not real.startswith(_SITE_DIRS))


_LIBRARY_DIRS = tuple(sorted({_real(p) + os.sep for p in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"], os.path.dirname(os.path.dirname(numba.__file__)),
    os.path.dirname(os.path.dirname(np.__file__)), _ENZPY_DIR)}))
_library_files: dict = {}


def is_library_file(filename: str) -> bool:
    """Code enzpy names instead of walking: installed libraries and enzpy itself."""
    found = _library_files.get(filename)
    if found is None:
        found = os.path.isabs(filename) and _real(filename).startswith(_LIBRARY_DIRS)
        _library_files[filename] = found
    return found


def generated_by_enzpy(fn):
    """Mark a function enzpy generates from what the key covers (the glue of a
    custom rule): a build lowering it needs no source file for it."""
    fn._enzpy_generated = True
    return fn


def library_path(v):
    """The file of the installed library that defines and names ``v``, or None."""
    module = sys.modules.get(getattr(v, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if path and is_library_file(path) and (getattr(v, "__qualname__", None) or
                                           getattr(v, "__name__", None)):
        return path
    return None


_ADDRESS = re.compile(r"(?: at )?0x[0-9a-fA-F]+|#[0-9a-fA-F]{6,}")


class Fingerprint:
    """A running hash of what a derivative depends on; ``codes`` holds the
    code objects walked, by id (equal code of two files is two). The callees it
    covers are the functions walked (``functions``, by id: equal code says
    nothing of a function's file, globals or closure, a factory's functions
    share one code object) and those made from code nested in theirs
    (``nested``, code objects by id: an inner function Numba makes while it
    compiles the walked one)."""

    def __init__(self):
        self._hash = hashlib.sha256()
        self.codes: dict = {}                 # id(code) -> code
        self.functions: set = set()
        self.nested: set = set()              # (``codes`` keeps them: the ids stay unique)
        self._seen: dict = {}             # id(object) -> its place in the walk
        # the dispatchers met, in walk order (the same in every process for one
        # key): a derivative holding a dispatcher's address is relocated by it
        self.dispatchers: list = []
        self._dispatcher_places: dict = {}    # id(dispatcher) -> its place in that list
        self._module_names: dict = {}     # id(module) -> the attribute names hashed
        self._open_containers: set = set()    # ids of the lists and tuples being hashed
        self.compiled_ufuncs = False      # the code calls ufuncs Numba compiled already
        self.ufunc_kernels: list = []     # the dispatchers of those ufuncs' kernels
        # the code names a package whose version the key lacks (named, not walked)
        self.unversioned = False
        # it reaches a register_jitable helper or an intrinsic: Numba compiles (types)
        # those once per process, with the values their globals had then, which may be
        # before today's the walk sees
        self.compiled_once = False

    @property
    def key(self) -> str:
        return self._hash.hexdigest()

    def add(self, *parts):
        for part in parts:
            self._hash.update(repr(part).encode())
            self._hash.update(b"\0")

    def _once(self, obj) -> bool:
        """True the first time ``obj`` is met. A later meeting adds a back reference
        by the place of the first in the walk: names do not tell objects apart (every
        lambda of a module is ``<lambda>``, a factory's closures share theirs)."""
        place = self._seen.get(id(obj))
        if place is not None:
            self.add("seen", place)
            return False
        self._seen[id(obj)] = len(self._seen)
        return True

    # -- code ---------------------------------------------------------------------
    def function(self, fn):
        code = fn.__code__
        if is_library_file(code.co_filename):
            self.add("library function", fn.__module__, fn.__qualname__)
            self.unversioned |= not _versioned(code.co_filename)
            return
        if not self._once(fn):
            return
        self.functions.add(id(fn))
        self.compiled_once |= _has_overload(fn)
        self.add("function", fn.__qualname__)
        names = self._code(code)
        for value in fn.__defaults__ or ():
            self.value(value, names)
        for name, value in sorted((fn.__kwdefaults__ or {}).items()):
            self.add(name)
            self.value(value, names)
        for cell in fn.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:
                self.add("empty cell")
                continue
            self.value(contents, names)
        for name in sorted(names):
            if name in fn.__globals__:
                self.add("global", name)
                self.value(fn.__globals__[name], names, name)
            elif hasattr(builtins, name):
                self.add("builtin", name)

    def _code(self, code) -> set:
        """Hash a code object and those nested in it; returns every name they use."""
        self.codes[id(code)] = code
        # (the name of generated code, "<string>", "<evaluator 3>", says nothing of it;
        # a notebook cell's file is named by its content in a folder named by the kernel)
        filename = "<generated>" if code.co_filename.startswith("<") else \
            _KERNEL_FOLDER.sub("ipykernel", code.co_filename)
        self.add(code.co_code, code.co_names, code.co_varnames, code.co_freevars,
                 code.co_cellvars, filename, code.co_firstlineno, code.co_argcount,
                 code.co_kwonlyargcount, code.co_flags, code.co_linetable)
        names = set(code.co_names)
        for const in code.co_consts:
            if isinstance(const, pytypes.CodeType):
                self.nested.add(id(const))
                names |= self._code(const)
            elif isinstance(const, frozenset):       # set order varies between processes
                self.add(sorted(map(repr, const)))
            else:
                self.add(const)
                if isinstance(const, str) and const.isidentifier():
                    names.add(const)            # (``getattr(module, "K")``)
        return names

    # -- values Numba freezes into code ----------------------------------------------
    def value(self, v, names=frozenset(), label="value"):
        """Hash a global, closure variable or default value of user code;
        ``names`` are the names that code uses (for a module's attributes)."""
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            self.add(type(v).__name__, v)
        elif isinstance(v, np.ndarray) and v.dtype.hasobject:
            # (no nopython code reads one: such a global is merely named like an
            # attribute the code uses, ``x.T``)
            self.add("object array", v.shape)
        elif isinstance(v, np.ndarray):
            data = np.ascontiguousarray(v)
            self.add("array", v.dtype.str, v.dtype.descr, v.shape,
                     hashlib.sha256(data.view(np.uint8).reshape(-1)).hexdigest())
        elif isinstance(v, np.generic):
            # (a record's ``str`` is its size only: ``descr`` names its fields)
            self.add("scalar", v.dtype.str, v.dtype.descr, v.item())
        elif isinstance(v, (tuple, list)):
            if id(v) in self._open_containers:      # (a list holding itself)
                self.add("cycle")
                return
            self._open_containers.add(id(v))
            self.add(type(v).__qualname__, len(v), getattr(type(v), "_fields", None))
            for item in v:
                self.value(item, names, label)
            self._open_containers.discard(id(v))
        elif isinstance(v, Dispatcher):
            self.dispatcher(v)
        elif callable(getattr(getattr(v, "_dispatcher", None), "py_func", None)):
            # @vectorize, @guvectorize: compiled loops may predate today's values
            loops = list(getattr(v, "types", ()))
            self.compiled_ufuncs |= bool(loops)
            self.ufunc_kernels.append(v._dispatcher)
            self.add("ufunc", type(v).__qualname__, loops,
                     sorted(map(repr, v._dispatcher.targetoptions.items())))
            self.function(v._dispatcher.py_func)
        elif isinstance(v, pytypes.FunctionType):
            self.function(v)
        elif isinstance(v, pytypes.ModuleType):
            self._module(v, names)
        elif isinstance(v, enum.Enum):
            self.add("enum", type(v).__qualname__, v.name, v.value)
        elif isinstance(v, types.Type):
            self.numba_type(v)
        elif isinstance(v, type):
            self._class(v)
        elif hasattr(v, "_defn") and isinstance(getattr(v, "_defn"), pytypes.FunctionType):
            self.add("intrinsic")                      # numba.extending.intrinsic
            self.compiled_once = True
            self.function(v._defn)
        elif (path := library_path(v)) is not None:    # np.linalg.norm, np.sin, ...
            self.add("library object", type(v).__qualname__, v.__module__,
                     getattr(v, "__qualname__", None) or v.__name__)
            self.unversioned |= not _versioned(path)
        else:
            text = repr(v)
            if _ADDRESS.search(text):
                raise NotCacheable(f"{label} is a {type(v).__name__} enzpy cannot "
                                   f"fingerprint ({text[:60]})")
            self.add(type(v).__module__, type(v).__qualname__, text)

    def dispatcher(self, disp):
        place = self._dispatcher_places.get(id(disp))
        if place is not None:      # (two dispatchers of one function are two places)
            self.add("seen dispatcher", place)
            return
        self._dispatcher_places[id(disp)] = len(self.dispatchers)
        self.dispatchers.append(disp)
        self.add("dispatcher", type(disp).__name__, sorted(map(repr, disp.targetoptions.items())),
                 sorted(map(repr, (disp.locals or {}).items())))
        self.function(disp.py_func)

    def _module(self, module, names):
        """A module's attributes the code names (``np.pi``, ``mymodel.helper``):
        each the first time any code names it (code met later may name others)."""
        self.add("module", module.__name__)
        hashed = self._module_names.setdefault(id(module), set())
        for name in sorted(set(names) - hashed):
            hashed.add(name)
            if hasattr(module, name):
                self.add("attribute", name)
                self.value(getattr(module, name), names, f"{module.__name__}.{name}")

    def _class(self, cls):
        self.add("class", getattr(cls, "__module__", ""), cls.__qualname__)
        path = library_path(cls)
        self.unversioned |= path is not None and not _versioned(path)
        if path is None:
            if issubclass(cls, enum.Enum):
                # (Numba freezes them; iterating an enum skips its aliases)
                self.add("members", [(name, m.value) for name, m in cls.__members__.items()])
            if issubclass(cls, tuple) and hasattr(cls, "_fields"):     # a named tuple
                self.add("fields", cls._fields)
                self.value(tuple(getattr(cls, "_field_defaults", {}).items()))
        class_type = getattr(cls, "class_type", None)
        if isinstance(class_type, types.ClassType):    # a jitclass
            self.jitclass(class_type)

    def jitclass(self, class_type):
        if not self._once(class_type):
            return
        self.add(sorted((k, _field_type_text(v)) for k, v in class_type.struct.items()))
        for _, field in sorted(class_type.struct.items()):
            self.numba_type(field)             # (a field's own jitclass, its methods)
        for name, method in sorted(class_type.jit_methods.items()):
            self.add("method", name)
            self.value(method)
        for name, method in sorted(getattr(class_type, "jit_static_methods", {}).items()):
            self.add("static method", name)
            self.value(method)
        for name, prop in sorted(class_type.jit_props.items()):
            self.add("property", name, sorted(prop))
            for part in sorted(prop):
                self.value(prop[part])

    def numba_type(self, ty):
        """An argument's Numba type: its text, and the code of the functions
        and jitclasses it carries."""
        if isinstance(ty, types.Dispatcher):
            self.dispatcher(ty.dispatcher)
        elif isinstance(ty, types.ClassInstanceType):
            self.jitclass(ty.class_type)
        elif isinstance(ty, types.BaseTuple):
            for item in ty:
                self.numba_type(item)
        elif isinstance(ty, (types.List, types.ListType)):
            self.numba_type(ty.dtype)
        elif isinstance(ty, types.DictType):
            self.numba_type(ty.key_type)
            self.numba_type(ty.value_type)
        if isinstance(ty, types.BaseNamedTuple):      # (its text names no field)
            self.add("fields", ty.fields)
        if library_path(type(ty)) is None:            # a type a user's extension defines
            self._data_model(ty)
        self.add(_ADDRESS.sub("", str(ty)))

    def _data_model(self, ty):
        """The layout Numba's data model gives a type an extension defines (its text
        names none of it): derivatives read and write its members by place."""
        try:
            model = default_manager.lookup(ty)
        except KeyError:          # (no model: Numba refuses the type anyway)
            return
        self.add("model", type(model).__module__, type(model).__qualname__,
                 getattr(model, "_fields", None), str(model.get_value_type()),
                 str(model.get_data_type()))


# -- the key ---------------------------------------------------------------------------
_enzpy_digest = None


def _enzpy_source_digest() -> str:
    global _enzpy_digest
    if _enzpy_digest is None:
        h = hashlib.sha256()
        for folder, dirs, files in os.walk(_ENZPY_DIR):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), "rb") as fh:
                        h.update(name.encode() + b"\0" + fh.read())
        _enzpy_digest = h.hexdigest()
    return _enzpy_digest


def environment() -> tuple:
    """What the machine code depends on beside the program: versions, the CPU and
    the rematerialization setting."""
    return (FORMAT, _enzpy_source_digest(), numba.__version__, llvmlite.__version__,
            np.__version__, sys.version, cpu_target.target_context.codegen().magic_tuple(),
            repr(numba.config.OPT), numba.config.BOUNDSCHECK, remat.greedy())


def _field_type_text(ty) -> str:
    """A jitclass field's type, without the per-process ids of deferred types
    (a linked node's ``optional(deferred_type())``), which are named by the
    type they were defined as."""
    deferred = ty.type if isinstance(ty, types.Optional) else ty
    text = _ADDRESS.sub("", str(ty))
    if isinstance(deferred, types.DeferredType):
        try:
            text += " = " + _ADDRESS.sub("", str(deferred.get()))
        except RuntimeError:         # (not defined yet: Numba says so when typing)
            pass
    return text


# What differs between processes in Numba's IR of the same code: the counters
# in its mangled names ("B2v13") and the addresses of its dynamic globals.
_PROCESS_BOUND = re.compile(r"B\d+v\d+|numba\.dynamic\.globals\.[0-9a-f]+|"
                            r"inttoptr \(i64 \d+ to ptr\)|"
                            # (an exception's pickled message, named by its SHA-1, may
                            # name a deferred type by its id: the message itself is kept)
                            r"(?<=\.const\.pickledata\.)[0-9a-f]{40}|"
                            r"(?<=\.const\.picklebuf\.)[0-9a-f]{40}|"
                            r"(?<=\.sha1 = internal constant )\[20 x i8\] c\"[^\"]*\"")


# Names that differ between processes without a difference in the code (array
# expressions, the kernels of parallel loops, jitclasses and functions passed as
# values carry the address of an object, byte strings Python's salted hash of
# their contents, the variables of inlined closures and functions a counter:
# ``impl_v19_a``) are numbered in order of appearance; byte strings' lengths go
# (their contents stay), as do Numba's ABI
# tags (``B42c8t...``, its compile flags), which differ between a function it
# compiled in this process and one it loaded from its cache, which enzpy lowers
# again with other flags (the code's own flags show in its instructions).
_PROCESS_NAMED = re.compile(r"(__numba_array_expr_)0x[0-9a-f]+|(@\.bytes\.)-?\d+|"
                            r"(\.kernel\.)\d+|"
                            r"(_listcomp__v)\d+__|(?<=\w)(_v)\d+(?=_)|"
                            r"(__numba_parfor_gufunc_)0x[0-9a-f]+|"
                            r"(_20at_200x)[0-9a-f]+|(_23|#)[0-9a-f]{8,}(?=_3c|<)|"
                            r"(DeferredType(?:_23|#)|%deferred\.)\d+")
_BYTE_STRING_LENGTH = re.compile(r"\[\d+ x i8\] c\"")
_ABI_TAG = re.compile(r"B(\d+)(?=c8t)")


def numbered_names(text) -> str:
    numbers: dict = {}

    def number(m):
        prefix = next(filter(None, m.groups()))
        return f"{prefix}{numbers.setdefault(m.group(0), len(numbers))}"
    return _PROCESS_NAMED.sub(number, text)


def without_abi_tags(text) -> str:
    parts, end = [], 0
    for m in _ABI_TAG.finditer(text):
        if m.start() < end:
            continue
        parts.append(text[end:m.start()])
        end = m.end() + int(m.group(1))
    return "".join(parts) + text[end:]


def primal_digest(module_text: str) -> str:
    """A hash of Numba's linked IR of a function and its callees, the same in
    every process compiling the same code with the same frozen values."""
    text = _BYTE_STRING_LENGTH.sub('c"', numbered_names(_PROCESS_BOUND.sub("", module_text)))
    return hashlib.sha256(without_abi_tags(text).encode()).hexdigest()


def program_key(disp) -> str:
    """The fingerprint of ``disp``'s code and the values it reads, alone."""
    fp = Fingerprint()
    fp.dispatcher(disp)
    return fp.key


def derivative_key(disp, signature, mode, rules) -> Fingerprint:
    """The fingerprint of ``disp``'s derivative for ``signature`` (annotation,
    type, shadow type per argument) in ``mode``; ``rules`` maps the user's
    functions to their registered rules."""
    fp = Fingerprint()
    fp.add(environment(), mode)
    fp.dispatcher(disp)
    for kind, ty, shadow in signature:
        fp.add(kind)
        fp.numba_type(ty)
        if shadow is not None:
            fp.numba_type(shadow)
    for fn, spec in sorted(rules.items(), key=lambda item: (item[0].__module__,
                                                             item[0].__qualname__)):
        fp.add("rule", spec.inactive)
        fp.function(fn)
        for rule in (spec.fwd, spec.bwd, spec.jvp):
            fp.value(rule)
    return fp


_KERNEL_FOLDER = re.compile(r"ipykernel_\d+")


# -- callees the walk did not reach ----------------------------------------------------
_user_extensions = [None, None]     # [registry sizes, found] of the last scan


def extended_by_user() -> bool:
    """Whether code outside the versioned libraries extended Numba's typing
    (``@overload``, ``@overload_method``, ``@overload_attribute``, templates of
    its own) or lowering (``@lower_builtin``, ``@lower_getattr``, ...): Numba
    may compile code of it into a function (inlined, called by no name the walk
    follows), in this process or in the one that built an entry."""
    typing, lowering = typing_templates.builtin_registry, imputils.builtin_registry
    templates = (typing.functions, typing.attributes, typing.globals)
    tables = (lowering.functions, lowering.getattrs, lowering.setattrs, lowering.casts,
              lowering.constants)
    sizes = tuple(map(len, templates + tables))
    if _user_extensions[0] != sizes:
        typed = typing.functions + typing.attributes + \
            [t for _, fnty in typing.globals for t in getattr(fnty, "templates", ())]
        functions = [fn for t in typed for fn in _template_functions(t)] + \
            [entry[0] for table in tables for entry in table]
        _user_extensions[:] = [sizes, not all(
            _versioned_function(fn) for fn in functions if hasattr(fn, "__code__"))]
    return _user_extensions[1]


def _template_functions(template) -> list:
    """A typing template class's own functions (an ``@overload`` template's:
    the overload function)."""
    found = [getattr(template, "_overload_func", None)]
    found += [getattr(v, "__func__", v) for v in vars(template).values()]
    return [fn for fn in found if isinstance(fn, pytypes.FunctionType)]


def _versioned_function(fn) -> bool:
    """Whether ``fn`` is code of the versioned libraries, or code they generated
    (``exec``: no file of its own, the module of the code that generated it)."""
    filename = fn.__code__.co_filename
    if filename.startswith("<"):
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        filename = getattr(module, "__file__", None) or filename
    return _versioned(filename)


def keyed_by_code(fp, linked) -> bool:
    """Whether a derivative is to be keyed by the code Numba compiled (its
    ``primal_digest``), which a later process lowers again to compare: the
    build linked code the key does not cover (``_reaches_uncovered``;
    ``linked``: the Python functions Numba lowered the linked functions from),
    the code names a package the key has no version of, it reaches code Numba
    compiles once per process (``compiled_once``: today's values need not be
    those it froze), or typing or lowering registered outside the versioned
    libraries (``extended_by_user``) may have put some of it there."""
    return _reaches_uncovered(fp, linked) or fp.unversioned or fp.compiled_once or \
        extended_by_user()


_overloaded = [0, frozenset()]    # [registry size, ids of the functions] of the last scan


def _has_overload(fn) -> bool:
    """Whether Numba types calls of plain function ``fn`` through a template
    (``register_jitable``, ``@overload(fn)``)."""
    table = typing_templates.builtin_registry.globals
    if _overloaded[0] != len(table):
        _overloaded[:] = [len(table), frozenset(id(key) for key, _ in table)]
    return id(fn) in _overloaded[1]


def _reaches_uncovered(fp, linked) -> bool:
    """Whether a build linked a function lowered from Python code the
    fingerprint's walk did not cover (an ``@overload``, ``@overload_method`` or
    ``@overload_attribute`` implementation, an installed package's helper: only
    Numba's and enzpy's own come with a version in the key)."""
    for fn in linked:
        code = getattr(fn, "__code__", None)
        if code is not None and id(fn) not in fp.functions and id(code) not in fp.nested \
                and not _generated(fn) and \
                not _versioned(code.co_filename):
            return True
    return False


def _generated(fn) -> bool:
    """Code enzpy generated from what the key covers, or Numba generated from the
    code it compiles (array expressions, parallel loops' bodies: functions of no
    module, named ``__numba_...``)."""
    return getattr(fn, "_enzpy_generated", False) or \
        (fn.__module__ is None and fn.__code__.co_name.startswith("__numba_"))


def value_digest(v) -> str:
    """The fingerprint of one value alone (raises NotCacheable as ``Fingerprint.value``)."""
    fp = Fingerprint()
    fp.value(v)
    return fp.key
