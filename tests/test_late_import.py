"""Import order does not matter: the corpus differentiates the same when NumPy
code (allocation, reductions, sorting, a jitclass, lists), and the programs
themselves, were compiled before ``import enzpy``."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "late_import_runner.py")


def test_late_import_gives_the_same_derivatives():
    # both processes at once: they compile independently
    runs = {mode: subprocess.Popen([sys.executable, RUNNER, mode], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            for mode in ("first", "late")}
    results = {}
    for mode, proc in runs.items():
        out, err = proc.communicate(timeout=1200)
        assert proc.returncode == 0, err[-3000:]
        results[mode] = json.loads(out.strip().splitlines()[-1])
    first, late = results["first"], results["late"]
    assert first.keys() == late.keys()
    differentiated = [name for name, r in first.items() if "gradients" in r]
    assert len(differentiated) >= 0.6 * len(first), first
    for name in first:
        a, b = first[name], late[name]
        assert ("gradients" in a) == ("gradients" in b), (name, a, b)
        if "gradients" in a:
            for ga, gb in zip(a["gradients"], b["gradients"]):
                np.testing.assert_allclose(gb, ga, rtol=1e-12, atol=1e-14, err_msg=name)
        else:
            assert a["error"] == b["error"], (name, a, b)


FROZEN_MODULE = '''
import numpy as np
from numba import njit

K = 1.0


def make(k):
    @njit
    def scaled(x):
        return k * x * x
    return scaled


@njit
def f(x):
    return K * x * x


W = np.array([2.0, 1.0])
TABLE = np.linspace(0.0, 1.0, 50)


@njit
def weighted(x):
    return W[0] * x * x


def make_array_closure(a):
    @njit
    def scaled(x):
        return a[0] * x * x
    return scaled


V = np.array([1.0, 2.0, 3.0])


@njit
def indexed(x, k):          # reads V's data at run time: the code keeps it as a constant
    return V[k] * x * x


@njit
def dotted(x):              # V's data handed to BLAS
    return np.dot(V, V) * x * x


U = np.array([1.0, 2.0, 3.0])
U2 = np.array([1.0, 2.0, 3.0])


@njit
def summed(x):              # an array expression over a global array, unchanged
    return (x * U).sum()


@njit
def summed_changed(x):
    return (x * U2).sum()


W3 = np.array([1.0, 2.0])


@njit
def scaled_by_w3(x):        # compiled by a fastmath caller: Numba gives it the caller's flags
    return np.exp(x) * W3[1]


@njit(fastmath=True)
def fast_caller(x):
    return scaled_by_w3(x) + x


@njit
def looked_up(x):           # reads an array Numba cannot fold away, unchanged
    s = 0.0
    for t in TABLE:
        s += t * x * x
    return s
'''

FROZEN_RUN = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import frozen
f, g = frozen.f, frozen.make(2.0)
a = frozen.np.array([2.0])
h = frozen.make_array_closure(a)
for fn in (f, g, frozen.weighted, h, frozen.looked_up, frozen.dotted):
    fn(0.5)                         # compiled with K = 1, k = 2, W[0] = 2, a[0] = 2
frozen.indexed(0.5, 1)
frozen.fast_caller(0.3)
frozen.summed(frozen.np.ones(3))
frozen.summed_changed(frozen.np.ones(3))
frozen.K = 4.0
g.py_func.__closure__[0].cell_contents = 5.0
frozen.W[0] = 5.0                   # changed in place: Numba still runs W[0] = 2
a[0] = 5.0
frozen.V[1] = 10.0                  # read at run time (V[k], BLAS): Numba still reads 2
frozen.U2[0] = 10.0
import enzpy
from enzpy import Active, Const, Duplicated, Reverse, autodiff
refusals = []
for fn, extra in ((f, ()), (g, ()), (frozen.weighted, ()), (h, ()),
                  (frozen.indexed, (Const(1),)), (frozen.dotted, ())):
    try:
        autodiff(Reverse, fn, Active(0.7), *extra)
    except enzpy.UnsupportedError as error:
        refusals.append(str(error))
try:
    autodiff(Reverse, frozen.summed_changed, Duplicated(a.repeat(3), a.repeat(3) * 0))
except enzpy.UnsupportedError as error:
    refusals.append(str(error))
f.recompile()                       # takes K = 4, as Numba documents
(df,), = autodiff(Reverse, f, Active(0.7))
frozen.weighted.recompile()
(dw,), = autodiff(Reverse, frozen.weighted, Active(0.7))
(dl,), = autodiff(Reverse, frozen.looked_up, Active(0.7))
(dfast,), = autodiff(Reverse, frozen.fast_caller, Active(0.4))
ds = frozen.np.zeros(3)
autodiff(Reverse, frozen.summed, Duplicated(frozen.np.full(3, 0.7), ds))
print(json.dumps({"refusals": refusals, "after_recompile": [f(0.7), df, dw],
                  "unchanged_array": dl, "unchanged_array_expression": list(ds), "fast_caller": dfast}))
'''


def test_values_changed_since_numba_compiled_before_import_are_refused(tmp_path):
    """Lowered again when enzpy is imported after Numba compiled it, the code
    reads today's globals and closure variables: its derivative was that of
    other code than Numba runs (5.6 where f(x) = x**2 has 1.4 at 0.7)."""
    (tmp_path / "frozen.py").write_text(FROZEN_MODULE)
    (tmp_path / "run.py").write_text(FROZEN_RUN)
    env = dict(os.environ, ENZPY_CACHE="0", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    global_refusal, closure_refusal, array_refusal, closure_array_refusal, \
        indexed_refusal, dotted_refusal, expression_refusal = out["refusals"]
    assert "global 'K' was 1.0; it is now 4.0" in global_refusal
    assert "f.recompile()" in global_refusal
    assert "closure variable 'k' was 2.0; it is now 5.0" in closure_refusal
    # an array changed in place: the object is the same, the code Numba froze is not
    # (before, the derivative read W[0] = 5 while Numba runs W[0] = 2: 7.0 for 2.8)
    assert "global 'W' held other values" in array_refusal
    assert "weighted.recompile()" in array_refusal
    assert "closure variable 'a' held other values" in closure_array_refusal
    # (before, V[k] and np.dot(V, V) went unnoticed: 2 * 0.7 * 10 where Numba runs 2 * 0.7 * 2)
    assert "'indexed'" in indexed_refusal and "global 'V' held other values" in indexed_refusal
    assert "'dotted'" in dotted_refusal and "global 'V' held other values" in dotted_refusal
    value, slope, weighted_slope = out["after_recompile"]
    assert abs(value - 4.0 * 0.49) < 1e-12 and abs(slope - 5.6) < 1e-12
    assert abs(weighted_slope - 7.0) < 1e-12
    assert abs(out["unchanged_array"] - 2 * 0.7 * np.linspace(0.0, 1.0, 50).sum()) < 1e-9
    # (an array expression raises a broadcasting error whose message names another source
    # line when compiled again: the unchanged U was refused as changed)
    assert "'summed_changed'" in expression_refusal and "'U2' held other" in expression_refusal
    assert out["unchanged_array_expression"] == [1.0, 2.0, 3.0]
    # (refused as if W3 had changed: Numba compiled the callee with its caller's fast-math
    # flags, lowered again it has none)
    assert abs(out["fast_caller"] - (2.0 * np.exp(0.4) + 1.0)) < 1e-12


RECOMPILED_CALLEE = '''
import gc
import json
import math
import sys
import types

from numba import float64, njit
from numba.experimental import jitclass

K = 2.0


@njit
def g(x):
    return K * math.sin(x)


@njit
def f(x):
    return g(x) * x


config = types.ModuleType("config")
sys.modules["config"] = config
exec("import math\\nfrom numba import njit\\n@njit\\ndef h(x):\\n    return math.sin(x)\\n",
     config.__dict__)


@njit
def through_module(x):
    return config.h(x) * 2.0


@jitclass([("w", float64)])
class Model:
    def __init__(self, w):
        self.w = w

    def energy(self, x):
        return K * self.w * x * x


@njit
def use_model(x):
    return Model(1.0).energy(x)


f(0.5)
through_module(0.5)
use_model(0.5)
K = 5.0                          # a later cell
exec("import math\\nfrom numba import njit\\n@njit\\ndef h(x):\\n    return math.exp(x)\\n",
     config.__dict__)            # the module reloaded: the h Numba linked is freed
gc.collect()

import enzpy                     # noqa: E402
from enzpy import Active, Reverse, UnsupportedError, autodiff   # noqa: E402


def attempt(fn):
    try:
        return autodiff(Reverse, fn, Active(0.5))[0][0]
    except UnsupportedError as error:
        return str(error)


out = {"first": attempt(f)}      # refused: g froze K = 2
g.recompile()                    # as the refusal advises
out["after_g"] = attempt(f)      # f still runs the g it linked (K = 2)
f.recompile()
out["after_f"] = attempt(f)
out["freed"] = attempt(through_module)
out["method_first"] = attempt(use_model)
Model.class_type.jit_methods["energy"].recompile()       # as that refusal advises
out["method_after_method"] = attempt(use_model)
use_model.recompile()
out["method_after_caller"] = attempt(use_model)
print(json.dumps(out))
'''


def test_callers_of_callees_compiled_again_are_refused(tmp_path):
    """A caller Numba compiled before ``import enzpy`` keeps the code its callees
    had then: after ``g.recompile()`` (which the refusal of g's changed global
    advises) enzpy differentiated today's g, 4.59 where the f Numba runs has 1.84;
    a callee replaced and freed since (a module reloaded) crashed with
    ReferenceError. Both are refused, advising ``f.recompile()``; so is a caller of a
    jitclass method recompiled (found by review: differentiated as today's method)."""
    (tmp_path / "run.py").write_text(RECOMPILED_CALLEE)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, ENZPY_CACHE="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "global 'K' was 2.0; it is now 5.0" in out["first"], out
    assert "calling 'g', which has been compiled again since" in out["after_g"], out
    assert "f.recompile()" in out["after_g"], out
    x = 0.5
    assert out["after_f"] == pytest.approx(5.0 * (math.sin(x) + x * math.cos(x)), rel=1e-12)
    assert "calling a function that has since been replaced and freed" in out["freed"], out
    assert "through_module.recompile()" in out["freed"], out
    # a jitclass method: the advice names it as users reach it, and its recompilation
    # is seen (enzpy differentiated today's method: 25 * 0.5 where Numba runs 2 * 0.5)
    assert "Model.class_type.jit_methods['energy'].recompile()" in out["method_first"], out
    assert "calling 'Model.energy', which has been compiled again" in \
        out["method_after_method"], out
    assert out["method_after_caller"] == pytest.approx(5.0 * 2 * x, rel=1e-12)


CACHED_PAIR = '''
import math
import os
from numba import njit

K = float(os.environ["K"])


@njit(cache=True)
def g(x):
    return K * math.sin(x)


@njit(cache=True)
def f(x):
    return g(x) * x
'''

CACHED_PAIR_RUN = '''
import json
import sys

import enzpy
from enzpy import Active, Reverse, autodiff

sys.path.insert(0, sys.argv[1])
import cached_pair        # noqa: E402

cached_pair.f(0.5)        # Numba loads f (and the g it linked) from its cache
if sys.argv[2:] == ["fill"]:
    sys.exit()
cached_pair.g.recompile()
try:
    print(json.dumps(autodiff(Reverse, cached_pair.f, Active(0.5))[0][0]))
except enzpy.UnsupportedError as error:
    print(json.dumps(str(error)))
'''


def test_a_numba_cached_caller_of_a_callee_compiled_again_is_refused(tmp_path):
    """``f`` loaded from Numba's cache runs the ``g`` it was saved with (K = 2);
    after ``g.recompile()`` (K = 5 in this process) enzpy differentiated today's."""
    (tmp_path / "cached_pair.py").write_text(CACHED_PAIR)
    (tmp_path / "run.py").write_text(CACHED_PAIR_RUN)
    for k, step in (("2.0", "fill"), ("5.0", "differentiate")):
        done = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path), step],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, K=k, ENZPY_CACHE="0",
                                       NUMBA_CACHE_DIR=str(tmp_path / "numba")))
        assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "calling 'g', which has been compiled again since" in answer, answer


CACHED_CALLEE = '''
import math
from numba import njit
@njit(cache=True)
def g(x):
    return math.sin(x)
'''

CACHED_CALLER = '''
from numba import njit
from cached_callee import g
@njit(cache=True)
def f(x):
    return g(x) * x
'''

CACHED_DRIVE = '''
import json, sys
sys.path.insert(0, sys.argv[1])
from cached_caller import f
if sys.argv[2] == "prime":
    f(0.7)
    sys.exit()
if sys.argv[2] == "recompile":
    f(0.7)
    f.recompile()
import enzpy
try:
    (d,), = enzpy.autodiff(enzpy.Reverse, f, enzpy.Active(0.7))
    print(json.dumps({"derivative": d, "primal": f(0.7)}))
except enzpy.UnsupportedError as error:
    print(json.dumps({"refused": str(error)}))
'''


def test_a_numba_cached_function_whose_callee_file_changed_is_refused(tmp_path):
    """Numba's cache of f checks f's file only: after g's file changed, Numba
    still runs the old g (sin) while enzpy lowered today's (cos), so the
    derivative was that of code Numba does not run (0.31 where f' is 1.18)."""
    for name, text in (("cached_callee.py", CACHED_CALLEE), ("cached_caller.py", CACHED_CALLER),
                       ("drive.py", CACHED_DRIVE)):
        (tmp_path / name).write_text(text)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"),
               ENZPY_CACHE_DIR=str(tmp_path / "enzpy_cache"), PYTHONDONTWRITEBYTECODE="1")

    def run(step):
        done = subprocess.run([sys.executable, str(tmp_path / "drive.py"), str(tmp_path), step],
                              capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1]) if step != "prime" else None

    run("prime")
    assert abs(run("differentiate")["derivative"] - (np.cos(0.7) * 0.7 + np.sin(0.7))) < 1e-12
    for folder, _, files in os.walk(tmp_path / "numba_cache"):   # (saved a while ago: coarse clocks)
        for name in files:
            earlier = os.path.getmtime(os.path.join(folder, name)) - 10.0
            os.utime(os.path.join(folder, name), (earlier, earlier))
    (tmp_path / "cached_callee.py").write_text(CACHED_CALLEE.replace("math.sin", "math.cos"))
    refused = run("differentiate")["refused"]
    assert "Numba loaded 'f' from its disk cache" in refused
    assert "cached_callee.py" in refused and "f.recompile()" in refused
    after = run("recompile")             # as the message says: today's g, in Numba and enzpy
    assert abs(after["primal"] - np.cos(0.7) * 0.7) < 1e-12
    assert abs(after["derivative"] - (np.cos(0.7) - 0.7 * np.sin(0.7))) < 1e-12


OBJMODE_MODULE = '''
import json, sys
import numpy as np
from numba import njit, objmode


@njit
def logged(x):
    with objmode():                 # (logging, timing: nothing flows in or out)
        pass
    return x * x


@njit(cache=True)
def cached_logged(x, a):
    with objmode(t="float64"):
        t = 2.0
    return t * x * a.sum()


a = np.array([1.0, 2.0])
logged(0.3), cached_logged(0.3, a)              # compiled before enzpy is imported
import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff
((d1,),) = autodiff(Reverse, logged, Active(0.7))
((d2, _),) = autodiff(Reverse, cached_logged, Active(0.7), Const(a))
(t2,) = autodiff(Forward, cached_logged, Duplicated(0.7, 1.0), Const(a))
print(json.dumps([d1, d2, t2]))
'''


def test_objmode_blocks_in_code_compiled_before_import(tmp_path):
    """Lowering a function again for its IR (compiled before ``import enzpy``, or
    loaded from Numba's cache) compiled its ``with objmode()`` block without
    machine code, which Numba cannot register: an ``InternalError`` (a raw
    ``TypeError`` with ``cache=True``)."""
    (tmp_path / "logged.py").write_text(OBJMODE_MODULE)
    for _ in range(2):          # Numba compiles cached_logged, then loads it from its cache
        done = subprocess.run([sys.executable, str(tmp_path / "logged.py")], capture_output=True,
                              text=True, timeout=600,
                              env=dict(os.environ, ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        d1, d2, t2 = json.loads(done.stdout.strip().splitlines()[-1])
        assert d1 == 1.4 and d2 == 6.0 and t2 == 6.0


UFUNC_MODULE = '''
import json, math, os, sys
import numpy as np
from numba import float64, guvectorize, njit, vectorize

S = float(os.environ["S"])


@vectorize([float64(float64)])                  # compiled here, before import enzpy
def bump(a):
    return math.exp(-a * a)


@vectorize([float64(float64)], cache=True)
def scaled(a):
    return S * math.sin(a)


@guvectorize([(float64[:], float64[:], float64[:])], "(n),(n)->()", cache=True)
def weighted(a, w, out):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * a[i] * w[i]
    out[0] = acc


@njit
def scalar(x):
    return bump(x) * x + scaled(x)


@njit
def arrays(X, W):
    rows = np.empty(X.shape[0])
    weighted(X, W, rows)
    return (bump(X) * 2.0).sum() + scaled(X).sum() + rows.sum()


import enzpy
from enzpy import Active, Const, Duplicated, Forward, Reverse, autodiff
X = np.array([[0.3, 0.5], [0.1, -0.2]])
W = np.array([[1.0, 2.0], [3.0, 4.0]])
result = {}
try:
    ((d,),) = autodiff(Reverse, scalar, Active(0.7))
    (t,) = autodiff(Forward, scalar, Duplicated(0.7, 1.0))
    dX = np.zeros_like(X)
    autodiff(Reverse, arrays, Duplicated(X, dX), Const(W))
    (tX,) = autodiff(Forward, arrays, Duplicated(X, np.ones_like(X)), Const(W))
    result = {"d": d, "t": t, "dX": dX.tolist(), "tX": tX}
except enzpy.UnsupportedError as exc:
    result = {"error": str(exc)}
print(json.dumps(result))
'''


def test_ufuncs_compiled_before_import_or_loaded_from_numbas_cache(tmp_path):
    """The kernels of ``@vectorize``/``@guvectorize`` ufuncs compiled at their
    definition (signatures given) before ``import enzpy``, or loaded from
    Numba's cache, were never lowered where enzpy could see them: refused as
    calls into unknown code. They are lowered again; one whose global changed
    since Numba cached it is refused, as functions are."""
    (tmp_path / "ufuncs.py").write_text(UFUNC_MODULE)

    def run(S):
        done = subprocess.run([sys.executable, str(tmp_path / "ufuncs.py")], capture_output=True,
                              text=True, timeout=600, env=dict(
                                  os.environ, S=str(S), ENZPY_CACHE_DIR=str(tmp_path / "cache")))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    x = 0.7
    d = math.exp(-x * x) * (1 - 2 * x * x) + math.cos(x)
    X = np.array([[0.3, 0.5], [0.1, -0.2]])
    W = np.array([[1.0, 2.0], [3.0, 4.0]])
    dX = -4 * X * np.exp(-X * X) + np.cos(X) + 2 * X * W
    for _ in range(2):          # Numba compiles the cached ufuncs, then loads them
        r = run(S=1)
        assert r["d"] == pytest.approx(d, rel=1e-12) and r["t"] == pytest.approx(d, rel=1e-12)
        np.testing.assert_allclose(r["dX"], dX, rtol=1e-12)
        assert r["tX"] == pytest.approx(dX.sum(), rel=1e-12)
    changed = run(S=2)["error"]
    assert "'scaled'" in changed and "'S' was '1.0'; it is now '2.0'" in changed
    assert "define the ufunc again" in changed


PARALLEL_GLOBAL = '''
import json

import numpy as np
from numba import njit, prange

W = np.array([1.0, 2.0, 3.0, 4.0])
V = np.array([1.0, 2.0, 3.0, 4.0])


@njit(parallel=True)
def expression(a):
    return (np.sin(a) * W).sum()


@njit(parallel=True)
def loop(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += W[i] * np.sin(a[i])
    return s


@njit(parallel=True)
def changed(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += V[i] * np.sin(a[i])
    return s


a = np.array([0.1, 0.4, 0.7, 1.0])
expression(a)
loop(a)
changed(a)
V[1] = 20.0                      # in place: Numba's code keeps 2.0

import enzpy                     # noqa: E402

out = {}
for fn in (expression, loop, changed):
    try:
        out[fn.__name__] = list(enzpy.gradient(fn, a))
    except enzpy.UnsupportedError as error:
        out[fn.__name__] = str(error)
print(json.dumps(out))
'''


def test_parallel_code_reading_a_global_array_compiled_before_import(tmp_path):
    """Found by review: parallel code compiled before ``import enzpy`` that reads an
    unchanged global array was refused as if the array had changed (its loop's kernel
    is named by an address, its blocks numbered by a process-wide count); an array
    changed in place, read in the kernel only, is still refused."""
    (tmp_path / "run.py").write_text(PARALLEL_GLOBAL)
    done = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, ENZPY_CACHE="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    a = np.array([0.1, 0.4, 0.7, 1.0])
    expected = np.array([1.0, 2.0, 3.0, 4.0]) * np.cos(a)
    np.testing.assert_allclose(out["expression"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["loop"], expected, rtol=1e-12)
    assert "global 'V' held other values than it holds now" in out["changed"], out
