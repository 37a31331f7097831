"""Numba compiling with debug info (``NUMBA_DEBUGINFO=1``, ``NUMBA_ENABLE_PROFILING=1``
for perf, ``@njit(debug=True)``) marks its functions noinline: enzpy's cleanup, which
inlines small helpers, made LLVM reject the module and abort the process."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    from numba import njit
    import enzpy
    from enzpy import Duplicated, Forward, Reverse, autodiff

    @njit(debug=True)
    def f(x):
        return np.max(x) * x.sum() + (x * x).sum()

    x = np.array([0.3, 0.5, 0.1])
    expected = x.sum() * np.array([0.0, 1.0, 0.0]) + x.max() + 2 * x
    dx = np.zeros(3)
    autodiff(Reverse, f, Duplicated(x, dx))
    assert np.allclose(dx, expected, rtol=1e-12), dx
    v = np.array([1.0, -2.0, 0.5])
    (t,) = autodiff(Forward, f, Duplicated(x, v))
    assert np.isclose(t, expected @ v, rtol=1e-12), t
    hv = enzpy.hvp(f, x, v)
    exact = v[1] * np.ones(3) + v.sum() * np.array([0.0, 1.0, 0.0]) + 2 * v
    assert np.allclose(hv, exact, rtol=1e-12), hv
    print("ok")
""")


def test_derivatives_of_code_compiled_with_debug_info():
    env = dict(os.environ, NUMBA_DEBUGINFO="1", ENZPY_CACHE="0")
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
