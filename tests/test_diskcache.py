"""The persistent derivative cache: a later process loads what an earlier one
built, and anything the derivative depends on changing means a rebuild.

Loading runs in fresh subprocesses (a process loads a key's machine code
once); each works in its own cache folder and on a user module written to a
temporary folder, so the tests can edit its source.
"""
import json
import math
import os
import stat
import subprocess
import sys
import textwrap
import time
import types
import warnings

import numpy as np
import pytest
from numba import njit

import enzpy
from enzpy import Active, Const, Duplicated, Reverse, autodiff, diskcache, fingerprint
from enzpy.pipeline import typed_signature

MODEL = '''
import math
import numpy as np
from numba import njit
from helper import scale

SHIFT = {shift}


@njit
def inner(v):
    return math.sin(v) * v + SHIFT


@njit
def f(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        s += inner(x[i]) * scale(a)
    return s
'''

# ``scale`` is an @overload: Numba reaches its implementation, but no name in
# the model's code does; the build records helper.py's contents instead.
HELPER = '''
from numba.extending import overload


def scale(a):
    return a


@overload(scale)
def _scale(a):
    def impl(a):
        return {scale_body}
    return impl
'''

RUN = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import enzpy
from enzpy import Active, Duplicated, Forward, Reverse, autodiff
import model

x = np.linspace(0.1, 1.0, 5)
dx = np.zeros(5)
(grads,) = autodiff(Reverse, model.f, Duplicated(x, dx), Active(2.0))
report = enzpy.build_report(model.f)[-1]
(tangent,) = autodiff(Forward, model.f, Duplicated(x, np.ones(5)), 2.0)
forward = enzpy.build_report(model.f)[-1]
print(json.dumps({"dx": dx.tolist(), "da": grads[1], "cache": report.cache,
                  "stages": sorted(report.timings), "tangent": tangent,
                  "forward_cache": forward.cache, "info": {
                      k: v for k, v in enzpy.cache_info().items() if k in ("loaded", "saved")}}))
'''


def _write(folder, shift="0.5", scale_body="2.0 * a"):
    (folder / "model.py").write_text(MODEL.format(shift=shift))
    (folder / "helper.py").write_text(HELPER.format(scale_body=scale_body))


@pytest.fixture
def project(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    _write(code)
    (tmp_path / "run.py").write_text(RUN)
    return tmp_path


def _script_result(script, argument, cache, **env):
    """The JSON ``script`` prints last, run with ``argument`` in a new interpreter
    caching in ``cache``."""
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", ENZPY_CACHE_DIR=str(cache),
                       **env)
    done = subprocess.run([sys.executable, str(script), str(argument)],
                          capture_output=True, text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run(project, cache=None, **env):
    return _script_result(project / "run.py", project / "code", cache or project / "cache",
                          **env)


def _expected(shift=0.5, factor=2.0, a=2.0):
    x = np.linspace(0.1, 1.0, 5)
    dx = (np.cos(x) * x + np.sin(x)) * factor * a
    da = float(np.sum(np.sin(x) * x + shift) * factor)
    return dx, da


def _check(result, shift=0.5, factor=2.0):
    dx, da = _expected(shift, factor)
    np.testing.assert_allclose(result["dx"], dx, rtol=1e-12)
    assert result["da"] == pytest.approx(da, rel=1e-12)
    assert result["tangent"] == pytest.approx(float(np.sum(dx)), rel=1e-12)


def _entries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".enzpy"))


def test_a_later_process_loads_instead_of_building(project):
    first = _run(project)
    _check(first)
    assert first["cache"] == "stored" and first["forward_cache"] == "stored"
    assert "numba_compile" in first["stages"]
    second = _run(project)
    _check(second)
    assert second["cache"] == "loaded" and second["forward_cache"] == "loaded"
    # the model reaches an @overload, which the key does not cover: the code Numba
    # compiles is lowered to compare with the entry's; no transformation, no LLVM
    assert second["stages"] == ["cache_lookup", "capture", "numba_compile", "wrap"]
    assert second["info"] == {"loaded": 2, "saved": 0}
    folder = project / "cache"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert len(_entries(folder)) == 2
    for name in _entries(folder):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600


LINALG_RUN = '''
import json, sys
import numpy as np
from numba import njit
import enzpy
from enzpy import Duplicated, Forward, Reverse, autodiff, userrules


@njit
def f(a, b):
    return np.linalg.solve(a, b).sum()


a = np.array([[3.0, 1.0, 0.5], [0.2, 2.0, 0.1], [0.4, 0.3, 4.0]])
b = np.array([1.0, -2.0, 0.5])
da, db = np.zeros_like(a), np.zeros_like(b)
autodiff(Reverse, f, Duplicated(a, da), Duplicated(b, db))
reverse = enzpy.build_report(f)[-1]
(tangent,) = autodiff(Forward, f, Duplicated(a, np.ones_like(a)), Duplicated(b, np.ones(3)))
forward = enzpy.build_report(f)[-1]
glue = [c.dispatcher for g in userrules._builtin_glue.values() for c in (g.aug, g.rev, g.fwd)
        if c is not None]
print(json.dumps({"da": da.tolist(), "db": db.tolist(), "tangent": tangent,
                  "cache": [reverse.cache, forward.cache],
                  "stages": sorted(reverse.timings),
                  "published": sorted(c.stable for g in userrules._builtin_glue.values()
                                      for c in (g.aug, g.rev, g.fwd) if c is not None),
                  "glue_hits": sum(sum(d.stats.cache_hits.values()) for d in glue),
                  "glue_misses": sum(sum(d.stats.cache_misses.values()) for d in glue)}))
'''


def test_a_linear_algebra_derivative_is_loaded_with_its_rule_glue_from_numbas_cache(tmp_path):
    """First-order derivatives call the glue of enzpy's linear-algebra rules by a
    name of their own (not linking its IR): a later process compiles that glue
    from Numba's cache (kept beside the derivatives) before loading the
    derivative, and gets the same derivative."""
    (tmp_path / "run.py").write_text(LINALG_RUN)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True,
                              text=True, timeout=600, env=dict(
                                  os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["cache"] == ["stored", "stored"] and first["glue_misses"] > 0
    assert second["cache"] == ["loaded", "loaded"]
    assert second["stages"] == ["cache_lookup", "wrap"]      # no lowering: all in the key
    assert second["glue_hits"] == first["glue_misses"] and second["glue_misses"] == 0
    assert second["published"] == first["published"] and len(first["published"]) == 3
    a = np.array([[3.0, 1.0, 0.5], [0.2, 2.0, 0.1], [0.4, 0.3, 4.0]])
    x = np.linalg.solve(a, np.array([1.0, -2.0, 0.5]))
    db = np.linalg.solve(a.T, np.ones(3))
    for run in runs:
        np.testing.assert_allclose(run["db"], db, rtol=1e-12)
        np.testing.assert_allclose(run["da"], -np.outer(db, x), rtol=1e-12)
        # d/dt sum(solve(a + t E, b + t e)) = db . (e - E x)
        assert run["tangent"] == pytest.approx(db @ (np.ones(3) - np.ones((3, 3)) @ x))
    assert list((tmp_path / "cache" / "glue").glob("glue_*.py"))


FACTORY = """
from numba import njit


def make(c):
    @njit(cache=True)
    def scaled_square(x):
        return c * x * x
    return scaled_square
"""

FACTORY_RUN = """
import sys
import enzpy
from numba import njit
from enzpy import Active, Reverse, autodiff
import factory

if sys.argv[1] == "save":
    factory.make(2.0)(1.0)          # (saved in Numba's cache, numbered in this process)
    raise SystemExit
g4 = factory.make(4.0)
g4(1.0)                             # compiled here: numbered as the saved one was
g2 = factory.make(2.0)
g2(1.0)                             # loaded from Numba's cache: the same symbol


@njit
def f4(x):
    return g4(x)


@njit
def f2(x):
    return g2(x)


for f in (f4, f2):
    try:
        print(autodiff(Reverse, f, Active(1.5))[0][0])
    except enzpy.UnsupportedError as error:
        print("refused:", error)
factory.make(3.0)(1.0)              # (compiled and saved here; then loaded: one symbol for
g3 = factory.make(3.0)              # two functions of one code and value, not refused)
g3(1.0)


@njit
def f3(x):
    return g3(x)


print(autodiff(Reverse, f3, Active(1.5))[0][0])
"""


def test_two_functions_numba_compiled_under_one_symbol_are_refused(tmp_path):
    # Found by review: a closure loaded from Numba's cache kept the symbol its
    # saving process gave it, which another closure compiled here had too: enzpy
    # took one's derivative for the other's (12 for 6), and saved it.
    (tmp_path / "factory.py").write_text(FACTORY)
    (tmp_path / "run.py").write_text(FACTORY_RUN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               ENZPY_CACHE_DIR=str(tmp_path / "cache"))
    outputs = []
    for step in ("save", "run"):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), step],
                              capture_output=True, text=True, timeout=600, env=env,
                              cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
    (f4, f2, f3) = outputs[1].splitlines()       # (f2's call made the clash known)
    assert f4 == "12.0" and f3 == "9.0"
    assert f2.startswith("refused: 'make.<locals>.scaled_square': Numba compiled two "
                         "different functions"), f2


def test_an_unreadable_numba_cache_of_the_rule_glue_is_compiled_again(tmp_path):
    """A truncated Numba cache file of the glue (in enzpy's folder) made every
    later build through the rule fail with ``InternalError``, even after the
    derivatives' entries were deleted."""
    (tmp_path / "run.py").write_text(LINALG_RUN)

    def run():
        done = subprocess.run([sys.executable, "-W", "always", str(tmp_path / "run.py")],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr

    first, _ = run()
    for data in (tmp_path / "cache" / "glue").rglob("*.nbc"):
        data.write_bytes(data.read_bytes()[:100])
    for entry in (tmp_path / "cache").glob("*.enzpy"):     # (so the build needs the glue)
        entry.unlink()
    again, warned = run()
    assert "could not be read" in warned and again["cache"] == ["stored", "stored"]
    np.testing.assert_allclose(again["da"], first["da"], rtol=1e-12)
    assert run()[0]["glue_misses"] == 0          # the glue was cached anew


def test_editing_the_function_or_a_callee_rebuilds(project):
    _check(_run(project))
    _write(project / "code", shift="1.5")                 # the model's own file
    changed = _run(project)
    assert changed["cache"] == "stored"
    _check(changed, shift=1.5)
    _write(project / "code", shift="1.5", scale_body="3.0 * a")   # a callee in another file
    changed = _run(project)
    assert changed["cache"] == "stored"
    _check(changed, shift=1.5, factor=3.0)
    again = _run(project)
    assert again["cache"] == "loaded"
    _check(again, shift=1.5, factor=3.0)


def test_a_constant_an_overload_reads_from_another_module_keys_the_entry(project):
    """helper.py's hash covers the @overload's code, not constants.py, whose value
    Numba freezes into it (the derivative of FACTOR = 2 was loaded for FACTOR = 3)."""
    code = project / "code"
    (code / "helper.py").write_text("import constants\n" +
                                    HELPER.format(scale_body="constants.FACTOR * a"))
    (code / "constants.py").write_text("FACTOR = 2.0\n")
    first = _run(project)
    assert first["cache"] == "stored"
    _check(first)
    assert _run(project)["cache"] == "loaded"
    (code / "constants.py").write_text("FACTOR = 3.0\n")
    changed = _run(project)
    assert changed["cache"] == "stored"
    _check(changed, factor=3.0)
    assert _run(project)["cache"] == "loaded"


def test_corrupted_or_truncated_entries_are_rebuilt_never_loaded(project):
    _run(project)
    folder = project / "cache"
    names = _entries(folder)
    data = (folder / names[0]).read_bytes()
    (folder / names[0]).write_bytes(data[:len(data) // 2])             # truncated
    flipped = bytearray((folder / names[1]).read_bytes())
    flipped[-100] ^= 0xFF                                              # corrupted
    (folder / names[1]).write_bytes(bytes(flipped))
    result = _run(project)
    _check(result)
    assert result["cache"] == "stored" and result["forward_cache"] == "stored"
    assert _run(project)["cache"] == "loaded"


def test_concurrent_writers_leave_one_valid_entry(project):
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                       ENZPY_CACHE_DIR=str(project / "cache"))
    runs = [subprocess.Popen([sys.executable, str(project / "run.py"), str(project / "code")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=environment) for _ in range(4)]
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-3000:]
        _check(json.loads(out.strip().splitlines()[-1]))
    folder = project / "cache"
    assert len(_entries(folder)) == 2
    assert sorted(os.listdir(folder)) == _entries(folder)          # no temporary files left
    result = _run(project)
    assert result["cache"] == "loaded"
    _check(result)


def test_disabled_cache_writes_nothing(project):
    result = _run(project, ENZPY_CACHE="0")
    _check(result)
    assert result["cache"] == "off"
    assert not (project / "cache").exists()


def test_a_folder_that_cannot_be_created_only_disables_caching(project, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                       ENZPY_CACHE_DIR=str(blocker / "cache"), PYTHONWARNINGS="always")
    done = subprocess.run([sys.executable, str(project / "run.py"), str(project / "code")],
                          capture_output=True, text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _check(json.loads(done.stdout.strip().splitlines()[-1]))
    assert done.stderr.count("CacheWarning") == 1, done.stderr


def test_entries_and_folders_others_could_write_are_ignored(project):
    _run(project)
    folder = project / "cache"
    for name in _entries(folder):
        os.chmod(folder / name, 0o666)
    result = _run(project)
    assert result["cache"] == "stored"          # rebuilt, and written back privately
    _check(result)
    for name in _entries(folder):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    os.chmod(folder, 0o777)
    try:
        result = _run(project)
    finally:
        os.chmod(folder, 0o700)
    assert result["cache"] == "not cached: the cache folder cannot be used"
    _check(result)


# -- in-process checks ---------------------------------------------------------------
@njit
def _square_sum(x):
    return np.sum(x * x)


def test_read_only_folder_warns_once_and_still_differentiates(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path / "ro"))
    monkeypatch.setattr(diskcache, "_warned", set())

    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(diskcache.tempfile, "mkstemp", refuse)

    @njit
    def g(x):
        return np.sum(np.sin(x))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 4):                          # two builds: one warning
            x = np.linspace(0, 1, n).reshape(n, 1) if n == 4 else np.linspace(0, 1, n)
            dx = np.zeros_like(x)
            autodiff(Reverse, g, Duplicated(x, dx))
            np.testing.assert_allclose(dx, np.cos(x))
    assert [type(w.message) for w in caught].count(diskcache.CacheWarning) == 1


def test_an_entry_owned_by_another_user_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path))
    diskcache.write("k" * 64, {"x": 1}, b"payload")
    assert diskcache.read("k" * 64) == ({"x": 1}, b"payload")
    if hasattr(os, "getuid"):
        uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)
        monkeypatch.setattr(diskcache, "_warned", set())
        with pytest.warns(diskcache.CacheWarning, match="another user"):
            assert diskcache.read("k" * 64) is None


def test_cache_clear_removes_every_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path))
    for key in ("a" * 64, "b" * 64):
        diskcache.write(key, {}, b"")
    assert enzpy.cache_clear() == 2
    assert _entries(tmp_path) == []
    assert diskcache.read("a" * 64) is None


def _key(f, *annotated, mode="reverse"):
    return fingerprint.derivative_key(f, typed_signature(list(annotated)), mode,
                                      enzpy.userrules.registered()).key


def test_the_key_covers_types_activity_mode_and_environment(monkeypatch):
    x = np.ones(3)
    base = _key(_square_sum, Duplicated(x, x))
    assert base == _key(_square_sum, Duplicated(x, x))
    assert base != _key(_square_sum, Duplicated(x.astype(np.float32), x.astype(np.float32)))
    assert base != _key(_square_sum, Const(x))
    assert base != _key(_square_sum, Duplicated(x, x), mode="forward")
    assert base != _key(_square_sum, Duplicated(x[::2], x[::2].copy()))
    environment = fingerprint.environment()
    monkeypatch.setattr(fingerprint, "environment", lambda: environment + ("numba 99",))
    assert base != _key(_square_sum, Duplicated(x, x))


def test_the_key_covers_frozen_globals_closures_and_rules():
    def make(c):
        @njit
        def h(v):
            return v * c
        return h

    assert _key(make(2.0), Active(1.0)) != _key(make(3.0), Active(1.0))
    assert _key(make(2.0), Active(1.0)) == _key(make(2.0), Active(1.0))

    @njit
    def target(v):
        return v * v

    before = _key(target, Active(1.0))
    enzpy.defvjp(target, njit(lambda v: (v * v, v)), njit(lambda r, g: (2.0 * r * g,)))
    try:
        assert _key(target, Active(1.0)) != before
    finally:
        enzpy.clear_rules(target)
    assert _key(target, Active(1.0)) == before


def _scaler_class(k):
    from numba import float64
    from numba.experimental import jitclass

    @jitclass([("w", float64)])
    class Scaler:
        def __init__(self, w):
            self.w = w

        def apply(self, x):
            return k * self.w * x * x

        @staticmethod
        def twice(x):
            return 2.0 * k * x
    return Scaler


@njit
def _apply_first(models, x):
    return models[0].apply(x)


def _models(k):
    from numba import int64, typed
    scaler = _scaler_class(k)
    models = typed.Dict.empty(int64, scaler.class_type.instance_type)
    models[0] = scaler(1.0)
    return models


def test_the_key_covers_code_reached_through_dicts_and_jitclass_fields():
    # (found by review: a jitclass reached only as a typed.Dict's values was not
    # walked, and its method's code, equal to another factory class's, passed
    # for covered: a later process loaded the derivative of k = 3 for k = 5)
    assert _key(_apply_first, Const(_models(3.0)), Active(1.5)) != \
        _key(_apply_first, Const(_models(5.0)), Active(1.5))
    from numba.experimental import jitclass
    holders = [jitclass([("s", _scaler_class(k).class_type.instance_type)])(
        type("Holder", (), {"__init__": lambda self, s: setattr(self, "s", s)}))
        for k in (3.0, 5.0)]
    fingerprints = []
    for holder in holders:
        fp = fingerprint.Fingerprint()
        fp.jitclass(holder.class_type)
        fingerprints.append(fp.key)
    assert fingerprints[0] != fingerprints[1]


def test_code_equal_to_covered_code_is_not_covered():
    # a factory's functions share one code object; the walk covers the function it
    # met, with its closure, not every function of that code
    def make(k):
        def scaled(x):
            return k * x
        return scaled
    walked, other = make(2.0), make(3.0)
    fp = fingerprint.Fingerprint()
    fp.function(walked)
    assert walked.__code__ == other.__code__
    assert not fingerprint._reaches_uncovered(fp, [walked])
    assert fingerprint._reaches_uncovered(fp, [other])
    # a function made from code nested in a walked one's (Numba makes an inner
    # function passed to another @njit function while it compiles the outer one)
    fp.function(make)
    assert not fingerprint._reaches_uncovered(fp, [make(4.0)])


def test_globals_merely_named_like_attributes_the_code_uses_are_hashed():
    """Found by review: the walk hashes the globals named as any name the code uses,
    attributes included: an object array named ``T`` (``x.T``) raised TypeError and a
    list holding itself named ``shape`` RecursionError, with the cache on or off."""
    shape = []
    shape.append(shape)
    namespace = {"njit": njit, "np": np, "T": np.array(["kelvin", 300.0], dtype=object),
                 "shape": shape}
    exec("@njit\ndef f(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n"
         "        s += (x.T * x.T)[i]\n    return s\n", namespace)
    f = namespace["f"]
    assert fingerprint.program_key(f) == fingerprint.program_key(f)
    x = np.array([1.0, 2.0])
    dx = np.zeros_like(x)
    autodiff(Reverse, f, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * x)


def test_what_cannot_be_fingerprinted_is_built_and_not_cached(tmp_path, monkeypatch):
    class Opaque:
        pass

    with pytest.raises(fingerprint.NotCacheable, match="Opaque"):
        fingerprint.Fingerprint().value(Opaque())
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path))

    def refuse(*args):
        raise fingerprint.NotCacheable("a global is an Opaque")

    monkeypatch.setattr(fingerprint, "derivative_key", refuse)

    @njit
    def g(x):
        return np.sum(x ** 3)

    x = np.linspace(0, 1, 4)
    dx = np.zeros_like(x)
    autodiff(Reverse, g, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 3 * x ** 2)
    assert enzpy.build_report(g)[-1].cache == "not cached: a global is an Opaque"
    assert _entries(tmp_path) == []


def test_a_derivative_reusing_an_earlier_one_loads_after_it(tmp_path):
    """``second``'s build calls ``first``'s derivative of ``leaf``: a later
    process loads ``first``'s machine code before ``second``'s."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "pair.py").write_text(textwrap.dedent('''
        import math
        from numba import njit

        @njit
        def leaf(v):
            return math.exp(v) * v

        @njit
        def first(v):
            return leaf(v) + 1.0

        @njit
        def second(v):
            return 2.0 * leaf(v)
    '''))
    script = tmp_path / "pair_run.py"
    script.write_text(textwrap.dedent('''
        import json, sys
        sys.path.insert(0, sys.argv[1])
        import enzpy, pair
        from enzpy import Active, Reverse, autodiff
        if sys.argv[2] == "both":
            autodiff(Reverse, pair.first, Active(0.3))
        ((d,),) = autodiff(Reverse, pair.second, Active(0.3))
        print(json.dumps({"d": d, "cache": enzpy.build_report(pair.second)[-1].cache,
                          "loaded": enzpy.cache_info()["loaded"]}))
    '''))
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                       ENZPY_CACHE_DIR=str(tmp_path / "cache"))

    def run(which):
        done = subprocess.run([sys.executable, str(script), str(code), which],
                              capture_output=True, text=True, env=environment, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    want = 2.0 * (np.exp(0.3) * 0.3 + np.exp(0.3))
    built = run("both")
    assert built["d"] == pytest.approx(want, rel=1e-12) and built["cache"] == "stored"
    loaded = run("second")
    assert loaded["d"] == pytest.approx(want, rel=1e-12)
    assert loaded["cache"] == "loaded" and loaded["loaded"] == 2       # first's, then second's
    for name in _entries(tmp_path / "cache"):              # without first's entry: rebuilt
        os.unlink(tmp_path / "cache" / name)
        break
    again = run("second")
    assert again["d"] == pytest.approx(want, rel=1e-12)


RELOCATED = '''
import ctypes, json, sys
import numpy as np
from numba import njit
import enzpy
from enzpy import Duplicated, Reverse, autodiff, diskcache


@njit
def sq(v):
    return v * v


@njit
def cube(v):
    return v * v * v


# recursive: its reverse hands ``op`` on to itself, so the dispatcher's address
# stays in the derivative's code (a reverse that never reads ``op`` drops it)
@njit
def apply(op, v, n):
    if n == 0:
        return 0.0
    return op(v) / n + apply(op, v, n - 1)


@njit
def pick(k, v, n):
    if k == 0:
        return apply(sq, v, n)
    return apply(cube, v, n)


@njit
def f(x, k):
    s = 0.0
    for i in range(x.shape[0]):
        s += pick(k, x[i], 3)
        if k == 2:                  # never taken: f refers to sq itself too
            s += apply(sq, x[i], 1)
    return s


x = np.linspace(0.1, 1.0, 4)
grads = []
for k in (0, 1):
    dx = np.zeros(4)
    autodiff(Reverse, f, Duplicated(x, dx), k)
    grads.append(dx.tolist())
(machine,) = diskcache.loaded.values()
engine = machine.library.codegen._engine
held = sorted(ctypes.c_void_p.from_address(engine._ee.get_global_value_address(s)).value
              for s in machine.index["relocations"])
print(json.dumps({"grads": grads, "cache": enzpy.build_report(f)[-1].cache,
                  "relocations": len(machine.index["relocations"]),
                  "held_ours": held == sorted([id(sq), id(cube)])}))
'''


def test_dispatcher_addresses_in_a_derivative_are_relocated_when_loaded(tmp_path):
    """A function passed as a value is an address in Numba's code: the entry
    records which function each such address is, and the loading process
    writes its own."""
    script = tmp_path / "relocated.py"
    script.write_text(RELOCATED)
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                       ENZPY_CACHE_DIR=str(tmp_path / "cache"))
    x = np.linspace(0.1, 1.0, 4)
    want = [(2 * x * (1 + 1 / 2 + 1 / 3)).tolist(), (3 * x ** 2 * (1 + 1 / 2 + 1 / 3)).tolist()]
    for expected_cache in ("stored", "loaded"):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=environment, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["cache"] == expected_cache
        assert result["relocations"] == 2 and result["held_ours"]
        np.testing.assert_allclose(result["grads"], want, rtol=1e-13)


def test_generated_functions_differing_only_in_code_get_their_own_derivatives():
    """Functions made by exec with look-alike names (``<enzpy-...>`` files, one
    qualified name) are told apart by their code, never by their names."""
    made = []
    for constant in (2.0, 3.0):
        namespace = {}
        exec(compile(f"def f(x):\n    return {constant} * x * x\n", "<enzpy-generated-1>",
                     "exec"), namespace)
        made.append(njit(namespace["f"]))
    assert _key(made[0], Active(1.0)) != _key(made[1], Active(1.0))
    for constant, f in zip((2.0, 3.0), made):
        ((d,),) = autodiff(Reverse, f, Active(0.5))
        assert d == pytest.approx(2 * constant * 0.5)


def test_a_saved_build_writes_again_what_an_unsaved_build_wrote(tmp_path, monkeypatch):
    """A saved derivative must load alone in a later process: it does not call
    the copy of a callee's derivative that an unsaved build wrote, it writes
    its own (counted in ``rewritten``), and is saved."""
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path))

    @njit
    def leaf(v):
        return np.sin(v) * v

    @njit
    def first(x):
        return leaf(x) + 1.0

    @njit
    def second(x):
        return 2.0 * leaf(x)

    monkeypatch.setenv("ENZPY_CACHE", "0")
    assert autodiff(Reverse, first, Active(0.4))[0][0] == pytest.approx(
        np.cos(0.4) * 0.4 + np.sin(0.4))
    monkeypatch.setenv("ENZPY_CACHE", "1")
    before = enzpy.cache_info()
    assert autodiff(Reverse, second, Active(0.4))[0][0] == pytest.approx(
        2 * (np.cos(0.4) * 0.4 + np.sin(0.4)))
    after = enzpy.cache_info()
    assert enzpy.build_report(second)[-1].cache == "stored"
    assert after["rewritten"] == before["rewritten"] + 1
    assert after["distinct_keys"] == before["distinct_keys"] + 1     # only second's own
    assert after["derivative_functions"] == before["derivative_functions"] + 2

    @njit
    def third(x):
        return leaf(x) - x

    autodiff(Reverse, third, Active(0.4))             # calls second's saved copy
    assert enzpy.cache_info()["rewritten"] == after["rewritten"]
    assert enzpy.build_report(third)[-1].derivative_functions == 2   # its own, leaf's reused


def test_a_notebook_cell_keys_the_same_in_every_kernel():
    """Jupyter compiles a cell into a file named by its content, in a folder
    named by the kernel's process: a later kernel must find the derivative."""
    made = []
    for kernel in (1111, 2222):
        namespace = {}
        exec(compile("def cell(x):\n    return 3.0 * x * x\n",
                     f"/tmp/ipykernel_{kernel}/2954937112.py", "exec"), namespace)
        made.append(njit(namespace["cell"]))
    assert _key(made[0], Active(1.0)) == _key(made[1], Active(1.0))


# -- a parallel loop, loaded by a process that has run no parallel code yet ---------------
_PARALLEL_RUN = '''
import json
import numpy as np
from numba import njit, prange
import enzpy
from enzpy import Duplicated, Forward, Reverse, autodiff


@njit(parallel=True)
def cubes(x):
    s = 0.0
    for i in prange(x.size):
        s += x[i] ** 3 + x[i]
    return s


x = np.linspace(0.1, 1.0, 5)
dx = np.zeros(5)
autodiff(Reverse, cubes, Duplicated(x, dx))
(t,) = autodiff(Forward, cubes, Duplicated(x, np.ones(5)))
print(json.dumps({"dx": dx.tolist(), "t": t, "info": {
    k: v for k, v in enzpy.cache_info().items() if k in ("loaded", "saved")}}))
'''


def test_a_parallel_loop_loads_in_a_process_that_ran_no_parallel_code(tmp_path):
    """Numba defines its parallel runtime's symbols when it first runs parallel code:
    a derivative calling them is loaded after enzpy starts that runtime (loading it
    first aborted the process)."""
    (tmp_path / "run.py").write_text(_PARALLEL_RUN)
    environment = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                       ENZPY_CACHE_DIR=str(tmp_path / "cache"))
    x = np.linspace(0.1, 1.0, 5)
    for run, info in enumerate(({"loaded": 0, "saved": 2}, {"loaded": 2, "saved": 0})):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True,
                              text=True, env=environment, timeout=600)
        assert done.returncode == 0, f"run {run}: {done.stderr[-3000:]}"
        result = json.loads(done.stdout.strip().splitlines()[-1])
        np.testing.assert_allclose(result["dx"], 3 * x ** 2 + 1, rtol=1e-12)
        assert result["t"] == pytest.approx(float(np.sum(3 * x ** 2 + 1)), rel=1e-12)
        assert result["info"] == info


STALE_RUN = '''
import enum, json, sys
sys.path.insert(0, sys.argv[1])
from numba import njit
import enzpy, cfg
from enzpy import Active, Reverse, autodiff

C = {c_then}


class Scale(enum.IntEnum):
    LOW = 1
    HIGH = {high}


@njit
def g(x):
    return cfg.B * x * x


@njit
def f(x):
    return C * x * x + cfg.A * x + g(x) + (Scale.HIGH + 0) * x


if {compile_first}:
    f(1.0)               # Numba freezes C = {c_then}
C = {c_now}              # (a later notebook cell)
(dx,), = autodiff(Reverse, f, Active(1.5))
first = dx, enzpy.build_report(f)[-1].cache
exec(compile(open(__file__).read().split("# cell")[-1], "cell", "exec"))
(dx,), = autodiff(Reverse, f, Active(1.5))     # f redefined: compiled with C = {c_now}
print(json.dumps({{"first": first, "second": [dx, enzpy.build_report(f)[-1].cache]}}))
# cell
@njit
def f(x):
    return C * x * x + cfg.A * x + g(x) + (Scale.HIGH + 0) * x
'''


def test_values_numba_froze_before_a_change_key_the_derivative(tmp_path):
    """The derivative must be the one of the code Numba runs: a global changed
    after Numba compiled the function (a notebook's later cell), a module's
    constant read by a callee only, an enum member's value, in one process
    and across processes."""
    def run(c_then, c_now, b=2.0, high=2, compile_first=True):
        (tmp_path / "cfg.py").write_text(f"A = 1.0\nB = {b}\n")
        (tmp_path / "run.py").write_text(STALE_RUN.format(
            c_then=c_then, c_now=c_now, high=high, compile_first=compile_first))
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)],
                              capture_output=True, text=True, timeout=600, env=dict(
                                  os.environ, PYTHONDONTWRITEBYTECODE="1",
                                  ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])

        def slope(c):
            return 2 * c * 1.5 + 1.0 + 2 * b * 1.5 + high
        assert out["first"][0] == pytest.approx(slope(c_then if compile_first else c_now))
        assert out["second"][0] == pytest.approx(slope(c_now))
        return out["first"][1], out["second"][1]

    assert run(2.0, 3.0) == ("stored", "stored")
    # compiled with C = 3 from the start: not the entry of the code compiled with C = 2 (the
    # key of code compiled before the call covers that code, so it is another entry)
    assert run(3.0, 3.0) == ("stored", "loaded")
    assert run(2.0, 3.0) == ("loaded", "loaded")
    run(3.0, 3.0, b=5.0)                               # cfg.B, read by g only, edited
    run(3.0, 3.0, high=4)                              # an enum member's value edited
    run(3.0, 3.0, compile_first=False)
    assert run(3.0, 3.0, compile_first=False) == ("loaded", "loaded")


def _ufunc_caller(c, p):
    from numba import float64, vectorize

    @vectorize([float64(float64)])
    def kernel(v):
        return c * v ** p

    @njit
    def f(v):
        return kernel(v).sum()
    return f


def _named_tuple_caller(fields):
    import collections
    Pair = collections.namedtuple("Pair", fields)

    @njit
    def f(v):
        p = Pair(v, 2.0 * v)
        return p[0] - 3.0 * p[1]
    return f


def test_the_key_covers_ufuncs_and_named_tuple_fields():
    x = np.ones(2)
    keys = {_key(_ufunc_caller(c, p), Duplicated(x, x.copy())) for c, p in
            ((2.0, 2), (5.0, 2), (2.0, 3))}
    assert len(keys) == 3
    assert _key(_named_tuple_caller("a b"), Active(1.0)) != \
        _key(_named_tuple_caller("b a"), Active(1.0))
    assert fingerprint.derivative_key(_ufunc_caller(2.0, 2), typed_signature(
        [Duplicated(x, x.copy())]), "reverse", {}).compiled_ufuncs     # eagerly compiled


def _caller_of(first, second, chosen):
    @njit
    def f(v):
        return first(v) + second(v) + chosen(v)
    return f


def _enum_caller(default):
    import enum

    class Scale(enum.IntEnum):
        LOW = 1
        HIGH = 3
        DEFAULT = default          # (an alias of LOW or HIGH: iterating Scale skips it)

    @njit
    def f(v):
        return Scale.DEFAULT.value * v
    return f


def _extension_type(members):
    """A Python class, and a Numba type of it named "Interval" whose data model
    has ``members`` (Numba's tutorial extension, as users write one)."""
    from numba import types
    from numba.extending import make_attribute_wrapper, models, register_model, typeof_impl

    class Interval:
        def __init__(self, lo, hi):
            self.lo, self.hi = lo, hi

    class IntervalType(types.Type):
        def __init__(self):
            super().__init__(name="Interval")

    interval_type = IntervalType()
    typeof_impl.register(Interval)(lambda val, c: interval_type)

    @register_model(IntervalType)
    class IntervalModel(models.StructModel):
        def __init__(self, dmm, fe_type):
            super().__init__(dmm, fe_type, [(name, types.float64) for name in members])
    make_attribute_wrapper(IntervalType, "lo", "lo")
    make_attribute_wrapper(IntervalType, "hi", "hi")
    return Interval


@njit
def _upper_times_square(interval, v):
    return interval.hi * v * v


def test_the_key_tells_apart_what_names_do_not():
    """Functions of one name (a module's lambdas, a factory's closures), two
    dispatchers of one function, an enum's aliases, the member order of an
    extension type's data model: each keys its own entry (one entry served both,
    a wrong derivative or a crash, in a later process)."""
    square, cube = njit(lambda v: v * v), njit(lambda v: v * v * v)
    assert _key(_caller_of(cube, square, square), Active(1.0)) != \
        _key(_caller_of(cube, square, cube), Active(1.0))
    plain = cube.py_func
    assert _key(_caller_of(square, cube, cube), Active(1.0)) != \
        _key(_caller_of(square, cube, njit(plain)), Active(1.0))
    assert _key(_enum_caller(1), Active(1.0)) != _key(_enum_caller(3), Active(1.0))
    keys = {_key(_upper_times_square, Const(_extension_type(order)(1.0, 5.0)), Active(1.0))
            for order in (("lo", "hi"), ("hi", "lo"))}
    assert len(keys) == 2


HELPER_GLOBAL = """
import os
from numba import njit, types
from numba.extending import intrinsic, register_jitable

G = float(os.environ["G"])


@register_jitable
def helper(x):
    return G * x * x


@intrinsic
def scale(typingctx, x):
    k = G                           # (read when Numba first types a call)

    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], context.get_constant(types.float64, k))
    return types.float64(x), codegen


@njit
def warm(x):
    return helper(x) + scale(x)


@njit
def through_helper(x):
    return helper(x) + x


@njit
def through_intrinsic(x):
    return scale(x * x) + x
"""

HELPER_GLOBAL_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import enzpy
import helpers_with_globals as m

if sys.argv[2] == "changed":
    m.warm(0.1)         # Numba compiles helper and types scale with G of then
    m.G = 3.0           # (a later notebook cell)
out = {}
for f in (m.through_helper, m.through_intrinsic):
    (dx,), = enzpy.autodiff(enzpy.Reverse, f, enzpy.Active(0.7))
    out[f.__name__] = [dx, (f(0.7 + 1e-6) - f(0.7 - 1e-6)) / 2e-6,
                       enzpy.build_report(f)[-1].cache]
print(json.dumps(out))
"""


def test_helpers_numba_compiled_with_earlier_values_save_nothing_a_later_process_loads(
        tmp_path):
    """Numba compiles a register_jitable helper (types an intrinsic) once per
    process: a process that changed its global afterwards differentiates the old
    values, as Numba runs them, and a clean process with the new values must not
    load that derivative."""
    (tmp_path / "helpers_with_globals.py").write_text(HELPER_GLOBAL)
    (tmp_path / "run.py").write_text(HELPER_GLOBAL_RUN)

    def run(g, how):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path), how],
                              capture_output=True, text=True, timeout=600, env=dict(
                                  os.environ, G=g, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    changed = run("2.0", "changed")
    for name in changed:       # the old values, as Numba's own f runs them
        assert changed[name][0] == pytest.approx(2 * 2.0 * 0.7 + 1)
        assert changed[name][0] == pytest.approx(changed[name][1], rel=1e-6)
    for cache in ("stored", "loaded"):
        clean = run("3.0", "clean")
        for name in clean:
            assert clean[name][0] == pytest.approx(2 * 3.0 * 0.7 + 1)
            assert clean[name][2] == cache


def test_literally_is_refused_by_name():
    from numba import literally

    @njit
    def power(v, n):
        return v ** literally(n)

    power(1.5, 3)
    with pytest.raises(enzpy.UnsupportedError, match="literally.*on n"):
        autodiff(Reverse, power, Active(1.5), Const(3))


COMPILED_FIRST_RUN = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "early":
    import enzpy
import compiled_first as m

x = np.linspace(0.1, 1.0, 4)
functions = (m.ufunc_call, m.array_expression, m.listed, m.parallel_cubes, m.scaled_median,
             m.linked, m.soft_plus)
for f in functions:
    f(x)                          # compiled by Numba before enzpy sees it
import enzpy
from enzpy import Duplicated, Reverse, autodiff

runs = []
for f in functions[:-1]:
    dx = np.zeros(4)
    autodiff(Reverse, f, Duplicated(x, dx))
    runs.append((enzpy.build_report(f)[-1], dx.tolist()))
hv = enzpy.hvp(m.soft_plus, x, np.ones(4))      # links the glue of enzpy's rule for logaddexp
runs.append((enzpy.build_report(m.soft_plus)[-1], hv.tolist()))
print(json.dumps([(report.cache, sorted(report.timings), d) for report, d in runs]))
'''

COMPILED_FIRST = '''
import math
import numpy as np
from numba import deferred_type, float64, njit, optional, prange
from numba.experimental import jitclass


@njit(cache=True)
def cached_helper(v):
    if v.shape[0] > 100:
        raise ValueError("too long")
    return (v * v).sum()


@njit
def ufunc_call(x):
    return np.sin(x).sum()


@njit
def array_expression(x):
    return (x * x[0] + 1.0).sum() + cached_helper(x)


@njit
def listed(x):
    return sum([x[i] * x[i] for i in range(x.shape[0])])


@njit
def soft_plus(x):
    return np.logaddexp(x, 0.0).sum()


@njit(parallel=True)
def parallel_cubes(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] ** 3
    return s


@jitclass([("scale", float64)])
class Scaler:
    def __init__(self, scale):
        self.scale = scale

    def energy(self, x):
        return (self.scale * x * x).sum()


@njit
def scaled_median(x):
    return Scaler(2.0).energy(x) + np.percentile(x, 50.0)


node_type = deferred_type()


@jitclass([("weight", float64), ("child", optional(node_type))])
class Node:
    def __init__(self, weight):
        self.weight = weight
        self.child = None


node_type.define(Node.class_type.instance_type)


@njit
def chain_value(node, v):
    if node.child is None:
        return node.weight * v
    return node.weight * math.sin(chain_value(node.child, v))


@njit
def linked(x):
    root = Node(1.5)
    root.child = Node(0.5)
    return sum([chain_value(root, x[i]) for i in range(x.shape[0])])
'''


def test_code_numba_compiled_before_the_call_is_loaded_by_a_later_process(tmp_path):
    """Numba's IR of code it compiled before ``autodiff`` (and ``hvp``) names array
    expressions, parallel loops' kernels, jitclasses and functions passed as values
    (percentile's validity check) by an address, byte strings by a salted
    hash, inlined list
    comprehensions by a counter, and a function loaded from Numba's own cache
    by other flags than one compiled fresh: none of that may key the entry."""
    (tmp_path / "compiled_first.py").write_text(COMPILED_FIRST)
    (tmp_path / "run.py").write_text(COMPILED_FIRST_RUN)
    runs = []
    # enzpy imported before Numba compiles (it records Numba's IR) or after (a notebook
    # importing it in a later cell: the IR is lowered once more to build, not to load);
    # the runs after the first load the cache=True function from Numba's cache
    for imported in ("early", "early", "late"):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path),
                               imported], capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [cache for cache, _, _ in runs[0]] == ["stored"] * 7
    for run in runs[1:]:
        assert [cache for cache, _, _ in run] == ["loaded"] * 7
        # known by the digest of the code Numba compiled: no lowering, no Numba
        assert all(stages == ["cache_lookup", "wrap"] for _, stages, _ in run), run
    x = np.linspace(0.1, 1.0, 4)
    first = np.full(4, x[0]) + 2 * x
    first[0] += x.sum()
    for run in runs:
        (_, _, ufunc), (_, _, expression), (_, _, listed), (_, _, cubes), (_, _, scaled), \
            (_, _, chained), (_, _, hv) = run
        np.testing.assert_allclose(chained, 1.5 * np.cos(0.5 * x) * 0.5, rtol=1e-12)
        np.testing.assert_allclose(cubes, 3 * x ** 2, rtol=1e-12)
        np.testing.assert_allclose(scaled, 4 * x + [0, 0.5, 0.5, 0], rtol=1e-12)
        np.testing.assert_allclose(ufunc, np.cos(x), rtol=1e-12)
        np.testing.assert_allclose(expression, first, rtol=1e-12)
        np.testing.assert_allclose(listed, 2 * x, rtol=1e-12)
        sigmoid = 1 / (1 + np.exp(-x))
        np.testing.assert_allclose(hv, sigmoid * (1 - sigmoid), rtol=1e-12)
    assert len(list((tmp_path / "cache").glob("*.enzpy"))) == 7


ENVIRONMENT_MODEL = """
import numpy as np
from numba import njit


@njit
def fill_columns(A, v):
    B = np.empty_like(A)
    for j in range(A.shape[1]):
        B[:, j] = v * A[0, j]          # Numba raises a shape mismatch with runtime values
    return (B * B).sum() + A.sum(axis=0)[1]
"""

ENVIRONMENT_RUN = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import enzpy
from enzpy import Const, Duplicated, Reverse, autodiff
from environment_model import fill_columns

A = np.arange(1.0, 13.0).reshape(4, 3) / 10
dA = np.zeros_like(A)
autodiff(Reverse, fill_columns, Duplicated(A, dA), Const(np.linspace(0.5, 1.0, 4)))
try:
    autodiff(Reverse, fill_columns, Duplicated(A, np.zeros_like(A)), Const(np.ones(5)))
    raised = None
except Exception as exc:
    raised = [type(exc).__name__, str(exc)]
print(json.dumps({"cache": enzpy.build_report(fill_columns)[-1].cache, "dA": dA.tolist(),
                  "raised": raised}))
"""


def test_code_raising_exceptions_with_runtime_values_is_cached_and_raises_when_loaded(tmp_path):
    """Numba's code for such exceptions (here: a slice assigned an array of
    another length) reads its function's environment, named with a counter of
    the process: the entry keeps its own, rebuilt by the process loading it."""
    (tmp_path / "environment_model.py").write_text(ENVIRONMENT_MODEL)
    (tmp_path / "run.py").write_text(ENVIRONMENT_RUN)
    runs = [_script_result(tmp_path / "run.py", tmp_path, tmp_path / "cache")
            for _ in range(2)]
    assert [run["cache"] for run in runs] == ["stored", "loaded"]
    A = np.arange(1.0, 13.0).reshape(4, 3) / 10
    v = np.linspace(0.5, 1.0, 4)
    expected = np.zeros_like(A)
    expected[0] = 2 * A[0] * (v * v).sum()
    expected[:, 1] += 1.0
    for run in runs:
        np.testing.assert_allclose(run["dA"], expected, rtol=1e-12)
        assert run["raised"] == ["ValueError",
                                 "cannot assign slice of shape (4,) from input of shape (5,)"]


def test_recompile_takes_the_new_globals_in_the_derivative_too():
    """``f.recompile()`` is Numba's way to take a changed global; the derivatives
    built for f in this process (and their fast paths) were kept, stale."""
    namespace = {"njit": njit, "K": 1.0}
    exec("@njit\ndef f(x):\n    return K * x * x\n", namespace)
    f = namespace["f"]
    assert autodiff(Reverse, f, Active(0.7)) == ((1.4,),)
    assert autodiff(Reverse, f, Active(0.7)) == ((1.4,),)       # (the fast path)
    assert enzpy.hvp(f, 0.7, 1.0) == pytest.approx(2.0)
    namespace["K"] = 4.0
    f.recompile()
    ((d,),) = autodiff(Reverse, f, Active(0.7))
    assert f(0.7) == pytest.approx(1.96) and d == pytest.approx(5.6, rel=1e-12)
    assert enzpy.hvp(f, 0.7, 1.0) == pytest.approx(8.0)
    # Found by review: K set back without a recompile (Numba still runs K = 4) loaded
    # the derivative saved for K = 1, vouched for before the recompile (1.4 for 5.6).
    namespace["K"] = 1.0
    ((d,),) = autodiff(Reverse, f, Active(np.float64(0.7)))
    assert f(0.7) == pytest.approx(1.96) and d == pytest.approx(5.6, rel=1e-12)


CACHED_GLOBALS = """
import json, math, os, sys
import numpy as np
from numba import njit
import enzpy
from enzpy import Active, Const, Reverse, autodiff

K = float(os.environ["K"])
SMALL = np.arange(30.0) * float(os.environ["SMALL"])
BIG = np.ones(3000)                         # (its text is summarized: its bytes are compared)
BIG[1500] = float(os.environ["BIG"])


@njit
def square(x):
    return x * x


@njit
def expo(x):
    return math.exp(x)


ACT = square if os.environ["ACT"] == "square" else expo     # (a function chosen at import)


@njit(cache=True)
def activated(x):
    return ACT(x) + 1.0


@njit(cache=True)
def scaled(x):
    return K * math.sin(x)


@njit(cache=True)
def indexed(x, i):
    return SMALL[i] * math.sin(x)


@njit(cache=True)
def folded(x):
    return SMALL[3] * math.sin(x)          # (a constant index: folded into the code)


@njit(cache=True)
def middle(x, i):
    return BIG[i] * math.sin(x)


@njit
def calls_scaled(x):
    return scaled(x) * 2.0


results = {}
for name, f, args in (("scaled", scaled, ()), ("indexed", indexed, (3,)),
                      ("folded", folded, ()), ("middle", middle, (1500,)),
                      ("calls_scaled", calls_scaled, ()), ("activated", activated, ())):
    try:
        ((d, *_),) = autodiff(Reverse, f, Active(0.7), *map(Const, args))
        results[name] = [f(0.7, *args), d]
    except enzpy.UnsupportedError as exc:
        results[name] = str(exc)
print(json.dumps(results))
"""


def test_numba_cache_compiled_with_other_global_values_is_refused(tmp_path):
    """Numba's cache (cache=True) checks the source file only: a later process
    with other values of the globals a function reads runs the code compiled
    with the old ones. enzpy differentiated today's values (silently another
    function) until the values the cached code froze were compared: numbers by
    the text of its type annotation, arrays by their bytes in its machine code."""
    (tmp_path / "model.py").write_text(CACHED_GLOBALS)

    def run(K=1, SMALL=1, BIG=1, ACT="square"):
        env = dict(os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache"), K=str(K),
                   SMALL=str(SMALL), BIG=str(BIG), ACT=ACT)
        done = subprocess.run([sys.executable, str(tmp_path / "model.py")], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    c = math.cos(0.7)
    first = run()
    assert first == pytest.approx({"scaled": [math.sin(0.7), c], "indexed": [3 * math.sin(0.7), 3 * c],
                                   "folded": [3 * math.sin(0.7), 3 * c],
                                   "middle": [math.sin(0.7), c],
                                   "calls_scaled": [2 * math.sin(0.7), 2 * c],
                                   "activated": [1.49, 1.4]}, rel=1e-12)
    assert run() == pytest.approx(first, rel=1e-12)           # the same values: loaded
    changed = run(K=3, SMALL=2, BIG=5, ACT="expo")
    for name in ("scaled", "indexed", "folded", "middle", "calls_scaled", "activated"):
        assert "recompile()" in changed[name], (name, changed[name])
    assert "'K' was '1.0'; it is now '3.0'" in changed["scaled"]
    assert "global 'BIG' held other values" in changed["middle"]
    # (before: the derivative of exp, 2.01, where f runs square)
    assert "'ACT' was 'CPUDispatcher(<function square" in changed["activated"]
    assert run() == pytest.approx(first, rel=1e-12)


LOADED_BEFORE_NUMBA = """
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import enzpy
from enzpy import Active, Reverse, ReverseWithPrimal, autodiff
import numba_cached
from numba import njit

K = 5.0


@njit
def f(x):
    return K * x * x


out = {}
out["first"] = autodiff(ReverseWithPrimal, f, Active(0.5))     # loaded: Numba has no f yet
K = 7.0
out["f"] = f(0.5)                   # Numba compiles f now, with K = 7
out["after"] = autodiff(ReverseWithPrimal, f, Active(0.5))
try:
    ((d,),) = autodiff(Reverse, numba_cached.g, Active(0.7))
    out["g"] = [d, numba_cached.g(0.7)]
except enzpy.UnsupportedError as exc:
    out["g"] = str(exc)
print(json.dumps(out))
"""


def test_a_derivative_loaded_before_numba_compiled_the_function(tmp_path):
    """A derivative loaded from the cache while Numba had not compiled ``f``:
    when Numba compiles it later with other values of its globals, the next
    call builds from those (it kept the loaded one); and code Numba would load
    from its own cache (``cache=True``), saved before a callee's file changed,
    is refused as when built (the load skipped the check)."""
    (tmp_path / "run.py").write_text(LOADED_BEFORE_NUMBA)
    (tmp_path / "callee.py").write_text("from numba import njit\n@njit(cache=True)\n"
                                        "def h(x):\n    return x * x\n")
    (tmp_path / "numba_cached.py").write_text("from numba import njit\nfrom callee import h\n"
                                              "@njit(cache=True)\ndef g(x):\n"
                                              "    return h(x) + x\n")

    def run():
        done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True,
                              text=True, timeout=600,
                              env=dict(os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    # built (Numba compiles f for the build, with K = 5), then loaded (Numba compiles f
    # at f(0.5), with K = 7): the derivative follows the f Numba runs
    for K in (5.0, 7.0):
        out = run()
        assert out["first"] == [[5.0], 1.25]
        assert out["f"] == K / 4 and out["after"] == [[K], K / 4]
        assert out["g"] == pytest.approx([2.4, 1.19], rel=1e-12)
    # h becomes x**3, then x**2 again: Numba's cache of g was saved in between
    for cube, expected in ((True, [2.47, 1.043]), (False, [2.4, 1.19])):
        time.sleep(0.01)
        (tmp_path / "callee.py").write_text("from numba import njit\n@njit(cache=True)\n"
                                            "def h(x):\n    return x * x"
                                            + (" * x\n" if cube else "\n"))
        out = run()
        assert "callee.py" in out["g"] and "recompile()" in out["g"], out["g"]
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import numba_cached; numba_cached.g.recompile()", str(tmp_path)],
                       check=True, timeout=600)
        assert run()["g"] == pytest.approx(expected, rel=1e-12)


REVIEWED_LOADS = """
import json, math, os
import numpy as np
from numba import float64, int64, njit, vectorize
import enzpy
from enzpy import Active, Const, Duplicated, Reverse, autodiff

K = 5.0
BIG = np.ones(3000)
BIG[1500] = float(os.environ["BIG"])


@njit("float64(float64[:])", cache=True)        # eager: Numba compiles no other signature
def eager(x):
    return (x * x).sum()


@vectorize([float64(float64, int64)], cache=True)
def table(a, i):
    return BIG[i] * math.sin(a)                 # (a ufunc's cache index is keyed otherwise)


@njit
def through_table(x, i):
    return table(x, i)


@njit
def f(x):
    return K * x * x


@njit
def step(x):
    return autodiff(Reverse, f, Active(x))[0][0]


out = {}
dx = np.zeros(3)
autodiff(Reverse, eager, Duplicated(np.arange(3.0), dx))
out["eager"] = dx.tolist()
out["step"] = step(0.5)                         # an @njit caller keeps what it calls
K = 7.0
out["f"] = f(0.5)
out["step_after"] = step(0.5)
try:
    out["table"] = autodiff(Reverse, through_table, Active(0.7), Const(1500))[0][0]
except enzpy.UnsupportedError as exc:
    out["table"] = str(exc)
print(json.dumps(out))
"""


def test_loads_reviewed_eager_signatures_njit_callers_and_ufunc_arrays(tmp_path):
    """Found by a review of the load-time checks: compiling the function before
    a load failed for eager signatures; an @njit caller of autodiff kept a
    derivative loaded before Numba compiled the function (5.0 where f gives
    7.0); a cache=True ufunc's arrays were never compared (its cache index is
    keyed by signature)."""
    (tmp_path / "reviewed.py").write_text(REVIEWED_LOADS)

    def run(big):
        done = subprocess.run([sys.executable, str(tmp_path / "reviewed.py")],
                              capture_output=True, text=True, timeout=600, env=dict(
                                  os.environ, BIG=str(big),
                                  ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    for _ in range(2):      # built, then loaded
        out = run(1.0)
        assert out["eager"] == [0.0, 2.0, 4.0]
        assert out["step"] == out["step_after"] == 5.0 and out["f"] == 1.25
        assert out["table"] == pytest.approx(math.cos(0.7), rel=1e-12)
    assert "global 'BIG' held other values" in run(5.0)["table"]


# -- what the key and an entry's checks must tell apart (found by a review) -----------
Params = __import__("collections").namedtuple("Params", "a b")
SWAPPED = __import__("collections").namedtuple("Params", "b a")
PARAMS = Params(1.0, 2.0)


@njit
def _reads_params(v):
    return v * PARAMS.a


@njit
def _reads_argument(v, p):
    return v * p.a


def test_the_key_covers_the_field_names_of_named_tuple_values(monkeypatch):
    """A global named tuple, or one passed as Const, with the same type name and values
    but fields in another order, read ``p.a`` from another place (3 loaded for 6)."""
    before = _key(_reads_params, Active(1.0))
    before_argument = _key(_reads_argument, Active(1.0), Const(Params(1.0, 2.0)))
    monkeypatch.setitem(_reads_params.py_func.__globals__, "PARAMS", SWAPPED(1.0, 2.0))
    assert _key(_reads_params, Active(1.0)) != before
    assert _key(_reads_argument, Active(1.0), Const(SWAPPED(1.0, 2.0))) != before_argument


_RECORDS = np.array([(2.0, 5.0)], dtype=[("a", "f8"), ("b", "f8")])
_SETTINGS = types.ModuleType("_settings")
_SETTINGS.K = 2.0


@njit
def _reads_a_record_field(v):
    return _RECORDS[0]["a"] * v


@njit
def _reads_a_module_attribute_by_name(v):
    return getattr(_SETTINGS, "K") * v


def test_the_key_covers_record_fields_and_attributes_read_by_getattr(monkeypatch):
    # Found by review: a record array's dtype was keyed by its size ('|V16'): its
    # fields renamed or swapped loaded the derivative of the other field (5.2 for
    # 13); ``getattr(module, "K")`` names K as a string, which was not keyed.
    before = _key(_reads_a_record_field, Active(1.0))
    swapped = np.array([(2.0, 5.0)], dtype=[("b", "f8"), ("a", "f8")])
    assert fingerprint.value_digest(swapped[0]) != fingerprint.value_digest(_RECORDS[0])
    monkeypatch.setitem(_reads_a_record_field.py_func.__globals__, "_RECORDS", swapped)
    assert _key(_reads_a_record_field, Active(1.0)) != before
    before = _key(_reads_a_module_attribute_by_name, Active(1.0))
    monkeypatch.setattr(_SETTINGS, "K", 3.0)
    assert _key(_reads_a_module_attribute_by_name, Active(1.0)) != before


def test_an_installed_packages_closures_key_the_entry(tmp_path, monkeypatch):
    """A jitted closure an installed package makes (``model = pkg.make_model(c)``) is
    named, not walked: the entry is keyed by the code Numba compiled, closed-over values
    included (the derivative for c = 2 was loaded for c = 5)."""
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path / "cache"))
    package = tmp_path / "site"
    package.mkdir()
    (package / "fake_installed_pkg.py").write_text(textwrap.dedent('''
        from numba import njit

        def make_model(c):
            @njit
            def model(v):
                return c * v * v
            return model

        def make_inlined(c):
            @njit(inline="always")
            def scale(v):
                return c * v
            return scale
    '''))
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setattr(fingerprint, "_LIBRARY_DIRS",
                        fingerprint._LIBRARY_DIRS + (os.path.realpath(package) + os.sep,))
    monkeypatch.setattr(fingerprint, "_library_files", {})
    import fake_installed_pkg
    assert fingerprint.is_library_file(fake_installed_pkg.__file__)
    for c in (2.0, 5.0, 2.0):
        model = fake_installed_pkg.make_model(c)
        (d,), = autodiff(Reverse, model, Active(1.5))
        assert d == pytest.approx(2 * c * 1.5)
    assert [r.cache for r in enzpy.build_report(model)] == ["reused"]
    # inlined into the user's function by Numba: reached by no lowered callee
    for c in (2.0, 5.0):
        scale = fake_installed_pkg.make_inlined(c)

        @njit
        def user(v):
            return scale(v) * v
        (d,), = autodiff(Reverse, user, Active(1.5))
        assert d == pytest.approx(2 * c * 1.5)


def test_a_folder_named_like_a_library_folder_is_the_users():
    """``.../enzpy_notes/`` beside the enzpy package is not enzpy's code."""
    assert fingerprint.is_library_file(os.path.join(fingerprint._ENZPY_DIR, "api.py"))
    assert not fingerprint.is_library_file(fingerprint._ENZPY_DIR + "_notes" + os.sep + "x.py")


def test_an_overload_compiled_with_an_earlier_global_is_keyed_by_that_code(tmp_path,
                                                                          monkeypatch):
    """Numba compiled the implementation (for another function) when K was 2; K is 6 when
    the derivative is built from that code: stored under K = 6, a later process with K = 6
    loaded the derivative of K = 2. The entry is keyed by the code Numba compiled."""
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "frozen_overload_helper.py").write_text(textwrap.dedent('''
        from numba.extending import overload
        K = 2.0

        def h(x):
            return x

        @overload(h)
        def _h(x):
            def impl(x):
                return K * x * x
            return impl
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    import frozen_overload_helper as helper

    @njit
    def other(v):
        return helper.h(v) + 1.0

    @njit
    def f(v):
        return helper.h(v)

    other(1.0)
    monkeypatch.setattr(helper, "K", 6.0)
    before = set(diskcache.loaded)
    (d,), = autodiff(Reverse, f, Active(1.5))
    assert d == pytest.approx(2.0 * 2.0 * 1.5)      # the code Numba runs: K = 2
    assert enzpy.build_report(f)[-1].cache == "stored"
    built = [diskcache.loaded[key] for key in set(diskcache.loaded) - before]
    assert built and all(machine.index["keyed_by_code"] for machine in built)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_something_else_than_a_file_at_an_entrys_place_is_a_miss(tmp_path, monkeypatch, kind):
    """(a directory raised InternalError; a FIFO hung the process)"""
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(diskcache, "_warned", set())
    folder = diskcache.directory()
    os.makedirs(folder, exist_ok=True)
    key = "0" * 64
    path = diskcache._path(folder, key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkdir(path) if kind == "directory" else os.mkfifo(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert diskcache.read(key) is None
    assert any("not a regular file" in str(w.message) for w in caught)


OVERLOAD_RUN = '''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import enzpy
from enzpy import Active, Reverse, autodiff
from numba import njit
import stubs, impl                      # impl: the backend folder's, first on sys.path
if os.environ.get("EDIT_AFTER_IMPORT"):
    with open(impl.__file__, "w") as fh:
        fh.write(os.environ["EDIT_AFTER_IMPORT"])


@njit
def f(x):
    return stubs.h(x)


(d,), = autodiff(Reverse, f, Active(1.5))
print(json.dumps({"d": d, "slope": (f(1.5 + 1e-6) - f(1.5 - 1e-6)) / 2e-6,
                  "cache": enzpy.build_report(f)[-1].cache}))
'''
STUB = "def h(x):\n    return x\n"
BACKEND = '''
from numba.extending import overload
import stubs


@overload(stubs.h)
def _h(x):
    def impl(x):
        return {k} * x * x
    return impl
'''


def _run_backend(tmp_path, backend, **env):
    result = _script_result(tmp_path / "run.py", tmp_path, tmp_path / "cache",
                            PYTHONPATH=str(tmp_path / backend), **env)
    assert result["d"] == pytest.approx(result["slope"], rel=1e-6), result
    return result


def test_an_entry_is_loaded_only_with_the_modules_it_was_built_from(tmp_path):
    """Two folders each hold an ``impl`` module overloading the same stub, chosen by
    ``sys.path``: the entry built with one was loaded with the other (its file unchanged
    on disk). And a file edited after its import: the entry held the code the process ran
    under the new file's hash, and a later process running the new code loaded it. Such
    entries are keyed by the code Numba compiles, which a loading process lowers again."""
    (tmp_path / "run.py").write_text(OVERLOAD_RUN)
    (tmp_path / "stubs.py").write_text(STUB)
    for backend, k in (("a", "1.0"), ("b", "2.25")):
        (tmp_path / backend).mkdir()
        (tmp_path / backend / "impl.py").write_text(BACKEND.format(k=k))
    assert _run_backend(tmp_path, "a")["cache"] == "stored"
    assert _run_backend(tmp_path, "a")["cache"] == "loaded"
    assert _run_backend(tmp_path, "b")["cache"] == "stored"          # (was: loaded, 3.0)
    # (the process runs the code it imported: the entry of that code, whatever the file says)
    edited = _run_backend(tmp_path, "b", EDIT_AFTER_IMPORT=BACKEND.format(k="4.0"))
    assert edited["d"] == pytest.approx(2 * 2.25 * 1.5) and edited["cache"] == "loaded"
    after = _run_backend(tmp_path, "b")
    assert after["d"] == pytest.approx(2 * 4.0 * 1.5) and after["cache"] == "stored"
    assert _run_backend(tmp_path, "a")["cache"] == "loaded"


EXTENSION = '''
import operator
from numba import types
from numba.extending import overload, overload_attribute, overload_method

@overload(operator.matmul)
def _matmul(x, y):
    if isinstance(x, types.Float) and isinstance(y, types.Float):
        def impl(x, y):
            return {k} * x * y
        return impl

@overload_attribute(types.Array, "wnorm")
def _wnorm(a):
    def impl(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += {k} * a[i] * a[i]
        return s
    return impl

@overload_method(types.Array, "wsum", inline="always")
def _wsum(a):
    def impl(a):
        return {k} * (a * a).sum()
    return impl
'''

EXTENDED_RUN = '''
import json, os, sys
import numpy as np
from numba import njit
import enzpy
from enzpy import Active, Duplicated, Reverse, autodiff
sys.path.insert(0, sys.argv[1])
if os.environ.get("WITH_EXTENSION") == "1":
    import extension

@njit
def product(x, y):
    return x @ y

@njit
def attribute(a):
    return a.wnorm

@njit
def method(a):
    return a.wsum()

result = {}
try:
    (dx, dy), = autodiff(Reverse, product, Active(1.5), Active(2.0))
    a, da_attribute, da_method = np.array([1.0, 2.0]), np.zeros(2), np.zeros(2)
    autodiff(Reverse, attribute, Duplicated(a, da_attribute))
    autodiff(Reverse, method, Duplicated(a, da_method))
    result = {"d": [dx, list(da_attribute), list(da_method)],
              "cache": [enzpy.build_report(f)[-1].cache for f in (product, attribute, method)]}
except Exception as exc:
    result = {"error": type(exc).__name__}
print(json.dumps(result))
'''


def test_code_of_overloads_keys_the_entries_it_reaches(tmp_path):
    """Found by review: an ``@overload(operator.matmul)``, ``@overload_attribute`` or
    inlined ``@overload_method`` changed between processes (K = 2, then 3) got the
    derivative of K = 2 loaded, and one no longer imported (so that the function no
    longer compiles) a derivative too: Numba compiles their code into functions the
    walk does not reach, so such entries are keyed by the code Numba compiles."""
    (tmp_path / "run.py").write_text(EXTENDED_RUN)

    def run(k, extension=True):
        (tmp_path / "extension.py").write_text(EXTENSION.format(k=k))
        return _script_result(tmp_path / "run.py", tmp_path, tmp_path / "cache",
                              WITH_EXTENSION="1" if extension else "0")

    def expected(k):
        return [2 * k, [2 * k, 4 * k], [2 * k, 4 * k]]

    first = run(2.0)
    assert first == {"d": expected(2.0), "cache": ["stored"] * 3}
    assert run(3.0) == {"d": expected(3.0), "cache": ["stored"] * 3}
    assert run(3.0) == {"d": expected(3.0), "cache": ["loaded"] * 3}
    assert run(3.0, extension=False) == {"error": "TypingError"}


def test_user_lowering_keys_entries_by_their_code(tmp_path, monkeypatch):
    """``@lower_builtin`` emits IR no name the walk follows leads to: with such lowering
    registered outside the versioned libraries, entries are keyed by the code."""
    monkeypatch.setenv("ENZPY_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "user_lowering_ext.py").write_text(textwrap.dedent('''
        from numba import types
        from numba.extending import lower_builtin, type_callable

        def triple(x):
            return 3.0 * x

        @type_callable(triple)
        def _type(context):
            def typer(x):
                if isinstance(x, types.Float):
                    return x
            return typer

        @lower_builtin(triple, types.Float)
        def _lower(context, builder, sig, args):
            return builder.fmul(args[0], context.get_constant(sig.return_type, 3.0))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    import user_lowering_ext as ext
    assert fingerprint.extended_by_user()

    @njit
    def f(v):
        return ext.triple(v) * v

    before = set(diskcache.loaded)
    (d,), = autodiff(Reverse, f, Active(1.5))
    assert d == pytest.approx(6 * 1.5)
    built = [diskcache.loaded[key] for key in set(diskcache.loaded) - before]
    assert built and all(machine.index["keyed_by_code"] for machine in built)


PARALLEL_RUN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import enzpy
from enzpy import Duplicated, Reverse, autodiff
from numba import njit, prange
import stubs, impl


@njit(parallel=True)
def f(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += stubs.h(x[i])
    return s


x = np.linspace(0.1, 1.0, 8)
dx = np.zeros_like(x)
autodiff(Reverse, f, Duplicated(x, dx))
print(json.dumps({"dx": dx.tolist(), "cache": enzpy.build_report(f)[-1].cache}))
'''


def test_a_parallel_loop_keyed_by_its_code_is_loaded(tmp_path):
    """(its kernel's name carried an object's id: the digest differed in every process)"""
    (tmp_path / "run.py").write_text(PARALLEL_RUN)
    (tmp_path / "stubs.py").write_text(STUB)
    (tmp_path / "impl.py").write_text(BACKEND.format(k="2.0"))
    caches = []
    for _ in range(2):
        result = _script_result(tmp_path / "run.py", tmp_path, tmp_path / "cache")
        np.testing.assert_allclose(result["dx"], 4.0 * np.linspace(0.1, 1.0, 8), rtol=1e-12)
        caches.append(result["cache"])
    assert caches == ["stored", "loaded"]
