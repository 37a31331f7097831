"""Make ``import enzpy`` (repo root) and ``import helpers`` (this folder) work."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
for _p in (_ROOT, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# Numba's own optimization of the programs under test takes more of the suite's time than
# anything else, and says nothing of their derivatives: enzpy differentiates the IR Numba
# lowers before its optimizer runs (frontend.py), so the level changes only how fast the
# primals the finite differences call run. The examples (test_examples.py) run at
# Numba's default level, as users run them.
if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_OPT", "1")

# With the tbb package installed (a test dependency) Numba would run every parallel loop
# under TBB; the suite keeps Numba's usual layer (OpenMP, else its workqueue), and
# test_parallel.py runs the loops TBB schedules differently under TBB in a process of
# their own.
if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_THREADING_LAYER_PRIORITY", "omp workqueue tbb")

# Each test session starts from an empty persistent derivative cache of its own
# (subprocesses the tests start inherit it): the suite exercises saving and
# loading without reading or filling the user's cache.
if "ENZPY_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["ENZPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="enzpy-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ENZPY_CACHE_DIR"], ignore_errors=True)


def _perturb_fresh_memory():
    """Have malloc hand out non-zero bytes (glibc's M_PERTURB): a derivative
    that reads shadow memory it never zeroed then fails every time, instead of
    only when the allocator happens to return zeroed pages."""
    import ctypes
    try:
        ctypes.CDLL(None).mallopt(-6, 0xA5)   # M_PERTURB
    except (OSError, AttributeError):         # not glibc
        pass


_perturb_fresh_memory()
