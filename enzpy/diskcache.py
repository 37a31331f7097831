"""The persistent derivative cache: built derivatives as object code, across processes.

The second half of this module keeps the machine code of derivatives built
or loaded in this process by key (``find``, ``register``, ``save``): a key's
code is loaded once per process; a derivative calling another build's
derivatives lists them (``depends``) and is loaded after them; the addresses
of dispatchers Numba puts in code (a function passed as a value) are
recorded by position in the fingerprint's walk and written again on load.

One file per derivative, ``<key>.enzpy`` in the cache directory
(``ENZPY_CACHE_DIR``, by default the user's cache folder; ``ENZPY_CACHE=0``
turns it off). A file holds a header line, the SHA-256 of the rest, and the
pickled index (how to call the machine code, the source files it depends on)
with the object code itself. It is written to a temporary file and renamed
into place, so readers see a whole entry or none, and concurrent writers of
one key leave one valid entry. A truncated or corrupted file fails its hash
and is rebuilt, never loaded.

Loading an entry runs its machine code, so the cache is private: the folder
is created readable and writable by its owner only, and a folder or entry
owned by another user or writable by others is ignored. A folder that cannot
be created or written disables caching, with one warning.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib
import logging
import os
import pickle
import re
import shutil
import stat
import sys
import tempfile
import warnings
from dataclasses import dataclass

from numba.core.environment import Environment, lookup_environment
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

from . import backend, fingerprint
from .cache import STATS

log = logging.getLogger("enzpy")

_MAGIC = b"enzpy derivative cache 1\n"
_SUFFIX = ".enzpy"
_warned: set = set()


class CacheWarning(UserWarning):
    """The persistent derivative cache is off or ignored an entry."""


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, CacheWarning, stacklevel=4)


def default_directory() -> str:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~")
        return os.path.join(base, "enzpy", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/enzpy")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "enzpy")


def enabled() -> bool:
    return os.environ.get("ENZPY_CACHE", "1").strip().lower() not in ("0", "false", "no",
                                                                        "off")


def _private(info) -> bool:
    """Owned by this user and writable by nobody else."""
    owner = getattr(os, "getuid", None)
    if owner is not None and info.st_uid != owner():
        return False
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def configured_directory() -> str:
    return os.path.abspath(os.environ.get("ENZPY_CACHE_DIR") or default_directory())


def directory():
    """The cache folder, created if needed, or None when caching is off or the
    folder is unusable (with one warning)."""
    if not enabled():
        return None
    path = configured_directory()
    try:
        if not os.path.isdir(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        _warn_once(path, f"enzpy: the derivative cache folder {path} cannot be created "
                         f"({exc}); derivatives are not cached")
        return None
    if not _private(info):
        _warn_once(path, f"enzpy: the derivative cache folder {path} is owned by another "
                         f"user or writable by others; it is ignored and derivatives are "
                         f"not cached")
        return None
    return path


_GLUE_FOLDER = "glue"
# (the module name Python's warnings give a glue file: its path without ".py")
GLUE_MODULE = r".*[\\/]" + _GLUE_FOLDER + r"[\\/]glue_[0-9a-f]{32}$"


def source_file(source: str):
    """The path of a Python file holding ``source`` in the cache folder (written
    once; its name covers the source and enzpy's own), so Numba can cache what
    it compiles from it; None when caching is off or the folder is unusable."""
    folder = directory()
    if folder is None:
        return None
    digest = hashlib.sha256(f"{fingerprint.environment()}\0{source}".encode()).hexdigest()
    path = os.path.join(folder, _GLUE_FOLDER, f"glue_{digest[:32]}.py")
    if not os.path.exists(path):
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), suffix=".tmp",
                                             delete=False) as fh:
                fh.write(source)
            os.replace(fh.name, path)
        except OSError:
            return None
    return path


def _path(folder, key) -> str:
    return os.path.join(folder, key + _SUFFIX)


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)      # (Windows has no FIFOs, nor the flag)


def read(key):
    """The (index, payload) stored under ``key``, or None (missing, stale,
    corrupted or not private)."""
    folder = directory()
    if folder is None:
        return None
    path = _path(folder, key)
    try:
        # (non-blocking: opening a FIFO put in the entry's place must not wait for a writer)
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _warn_once(path, f"enzpy: ignoring cache entry {path}: not a regular file")
            return None
        if not _private(info):
            _warn_once(path, f"enzpy: ignoring cache entry {path}: owned by another user or "
                             f"writable by others")
            return None
        if _NONBLOCK:
            os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    header = len(_MAGIC) + 65
    body = data[header:]
    if not data.startswith(_MAGIC) or \
            data[len(_MAGIC):header] != hashlib.sha256(body).hexdigest().encode() + b"\n":
        log.warning("enzpy: cache entry %s is truncated or corrupted; rebuilding it", path)
        return None
    try:
        stored = pickle.loads(body)
    except Exception as exc:      # noqa: BLE001 (an unreadable entry is a miss)
        log.warning("enzpy: cache entry %s cannot be read (%s); rebuilding it", path, exc)
        return None
    if stored.get("key") != key:
        return None
    return stored["index"], stored["payload"]


def write(key, index, payload) -> bool:
    """Write the entry atomically; False (with one warning) if the folder is not writable."""
    folder = directory()
    if folder is None:
        return False
    body = pickle.dumps({"key": key, "index": index, "payload": payload},
                        protocol=pickle.HIGHEST_PROTOCOL)
    data = _MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        _warn_once(folder, f"enzpy: the derivative cache folder {folder} is not writable "
                           f"({exc}); derivatives are not cached")
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, _path(folder, key))
    except OSError as exc:
        _warn_once(folder, f"enzpy: writing to the derivative cache folder {folder} failed "
                           f"({exc}); derivatives are not cached")
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def clear() -> int:
    """Remove every entry of the cache folder (even with ``ENZPY_CACHE=0``);
    returns how many were removed."""
    folder = configured_directory()
    if not os.path.isdir(folder):
        return 0
    removed = 0
    for name in os.listdir(folder):
        if name.endswith(_SUFFIX) or (name.startswith(".") and name.endswith(".tmp")):
            try:
                os.unlink(os.path.join(folder, name))
                removed += name.endswith(_SUFFIX)
            except OSError:
                pass
    shutil.rmtree(os.path.join(folder, _GLUE_FOLDER), ignore_errors=True)
    return removed


# -- machine code in this process ---------------------------------------------------------
@dataclass
class Machine:
    """A derivative's machine code in this process, under its fingerprint."""
    index: dict               # what the cache stores beside the object code
    library: object           # Numba's code library holding it
    address: int              # of the entry point
    call: object = None       # its ``@njit`` entry point called by symbol, once made


loaded: dict = {}             # fingerprint -> Machine: each key's code is loaded once
# fingerprints whose machine code is saved: later builds may call their
# derivatives (a later process loads them first)
durable: set = set()
unloadable: set = set()       # entries that failed to load: their keys are not used again

# what ties machine code to this process: addresses of Python objects, Numba's
# per-function environments left under their Numba names (see ``own_environments``;
# Numba declares environments its code never uses: this is checked on the optimized
# module)
_PROCESS_BOUND = re.compile(r'inttoptr \(i64 -?[1-9]|@"?_ZN08NumbaEnv')
# Numba's constant for a dispatcher passed as a value: its address, in a global
# (LLVM renames a second copy ``.1`` when modules are linked)
_DISPATCHER_GLOBAL = re.compile(r'^@"?(numba\.dynamic\.globals\.[0-9a-f]+(?:\.\d+)?)"? = .*'
                                r'inttoptr \(i64 (\d+) to ptr\)', re.M)


def own_environments(module, key) -> list:
    """Rename each Numba environment the optimized derivative ``module`` still
    refers to (code raising an exception with runtime values reads it) to a
    name of the entry ``key``'s own: Numba's names carry counters of this
    process, so another process may give one to another function. Returns
    [(name, its module's name, its pickled constants, the environment)] for
    those a later process can rebuild; the others keep their Numba names, which
    tie the code to this process (``relocations`` reports them)."""
    found = []
    for gv in module.global_variables:
        if not gv.name.startswith("_ZN08NumbaEnv") or not gv.is_declaration:
            continue
        env = lookup_environment(gv.name)
        if env is None or not env.can_cache():
            continue
        try:
            consts = pickle.dumps(list(env.consts), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:     # noqa: BLE001 (a constant that does not pickle: not cached)
            continue
        gv.name = f"enzpy.env.{key[:40]}.{len(found)}"
        found.append((gv.name, env.globals["__name__"], consts, env))
    return found


def _rebuilt_environment(name, module_name, consts):
    env = Environment(importlib.import_module(module_name).__dict__)
    env.consts[:] = pickle.loads(consts)
    env.env_name = name
    return env


def relocations(text, fp):
    """({global: walk position of the dispatcher whose address it holds},
    the first line tying the code to this process otherwise, or '')."""
    position = {id(d): i for i, d in enumerate(fp.dispatchers)}
    found = {}
    for m in _DISPATCHER_GLOBAL.finditer(text):
        if int(m.group(2)) not in position:
            return {}, m.group(0)
        found[m.group(1)] = position[int(m.group(2))]
    rest = _DISPATCHER_GLOBAL.sub("", text) if found else text
    bound = _PROCESS_BOUND.search(rest)
    if bound is None:
        return found, ""
    start = rest.rfind("\n", 0, bound.start()) + 1
    end = rest.find("\n", bound.end())
    return found, rest[start:end if end >= 0 else len(rest)].strip()


def register(key, index, library, address) -> Machine:
    """A derivative just built under ``key``."""
    loaded[key] = Machine(index, library, address)
    return loaded[key]


def find(fp, codegen, accept=lambda index: True):
    """(Machine, 'reused' or 'loaded') for the fingerprint, or (None, ''): only
    an entry whose index ``accept`` takes."""
    machine = loaded.get(fp.key)
    if machine is not None:
        return (machine, "reused") if accept(machine.index) else (None, "")
    machine = _load(fp.key, codegen, accept=accept)
    if machine is None:
        return None, ""
    engine = machine.library.codegen._engine
    if any(position >= len(fp.dispatchers) for position in machine.index["relocations"].values()):
        # (an entry from an enzpy whose keys could not tell such walks apart)
        log.warning("enzpy: cache entry %s names dispatchers this program does not have; "
                    "rebuilding it", fp.key)
        return None, ""
    for symbol, position in machine.index["relocations"].items():
        if not engine.is_symbol_defined(symbol):
            raise RuntimeError(f"the cached derivative {fp.key} lacks its global {symbol}")
        address = engine._ee.get_global_value_address(symbol)
        ctypes.c_void_p.from_address(address).value = id(fp.dispatchers[position])
    return machine, "loaded"


def save(key, machine, depends) -> bool:
    """Write a derivative built in this process (its index complete but for
    what this adds: object digest, dependencies)."""
    payload = machine.library.serialize_using_object_code()
    index = machine.index
    index["object_digest"] = _object_digest(payload)
    index["depends"] = {dep: loaded[dep].index["object_digest"] for dep in depends}
    if not write(key, index, payload):
        return False
    if not index["relocations"]:       # (only a loader knowing its dispatchers relocates it)
        durable.add(key)
    return True


def _object_digest(payload) -> str:
    return hashlib.sha256(payload[2][0]).hexdigest()


# Symbols of Numba's parallel runtime, defined when it starts its threads.
_PARALLEL_RUNTIME = (b"numba_parallel_for", b"allocate_sched", b"do_scheduling")


def _load(key, codegen, depth=0, accept=lambda index: True):
    """The Machine of a saved derivative, loaded after the saved derivatives
    it calls; None if any is missing, stale or unloadable."""
    stored = read(key)
    if stored is None or depth > 50:
        return None
    index, payload = stored
    if not accept(index):
        return None
    if _object_digest(payload) != index["object_digest"]:
        return None
    if depth and index["relocations"]:
        return None          # (relocated by the build that needs it, not as a dependency)
    for dep, digest in index["depends"].items():
        found = loaded.get(dep) or _load(dep, codegen, depth + 1)
        if found is None or found.index["object_digest"] != digest:
            return None
    from .userrules import require
    if not all(require(*glue) for glue in index.get("glue", ())):
        return None          # (the machine code calls rule glue this process lacks)
    # Numba compiles its runtime (NRT_decref, ...) before its first compile;
    # a process that has compiled nothing yet needs it now
    rtsys.initialize(cpu_target.target_context)
    if any(name in payload[2][0] for name in _PARALLEL_RUNTIME):
        # (and its parallel runtime before its first parallel function: loading
        # code that calls it first would abort the process)
        from .parallel import launch_threads
        launch_threads()
    try:
        for name, module_name, consts in index.get("environments", ()):
            backend.define_environment(codegen, name,
                                       _rebuilt_environment(name, module_name, consts))
        library = codegen.unserialize_library(payload)
        address = library.get_pointer_to_function(index["entry_name"])
    except Exception as exc:      # noqa: BLE001 (an entry that does not load is rebuilt)
        log.warning("enzpy: cache entry %s cannot be loaded (%s); rebuilding it", key, exc)
        unloadable.add(key)
        return None
    if not address:
        unloadable.add(key)
        return None
    loaded[key] = Machine(index, library, address)
    if not index["relocations"]:
        durable.add(key)
    STATS.loaded += 1
    return loaded[key]
