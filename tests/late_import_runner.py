"""Differentiate the NumPy corpus's ``late_import`` programs in a fresh process.

    python tests/late_import_runner.py first   # import enzpy before anything is compiled
    python tests/late_import_runner.py late    # compile and run NumPy code first

In ``late`` mode, jitted code that allocates, reduces, sorts and uses a
jitclass and a list runs before ``import enzpy``, and so does every corpus
program (compiling it): Numba then holds compiled helpers and functions whose
raw IR enzpy never saw. Prints one JSON object: program name -> gradients
(lists of floats, one per differentiated argument) or the error's type and
message. ``tests/test_late_import.py`` compares the two modes.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def warm_up():
    from numba import float64, njit
    from numba.experimental import jitclass

    @jitclass([("a", float64[:]), ("c", float64)])
    class Warm:
        def __init__(self, a, c):
            self.a = a
            self.c = c

    @njit
    def numpy_code(x):
        y = np.empty_like(x)
        y[:] = x * 2.0
        z = np.sort(x)
        w = Warm(np.zeros(3), 1.0)
        parts = [x[:2], x[2:]]
        return (y.mean() + z[0] + np.max(x) + np.zeros(3).sum() + w.a.sum() + w.c
                + np.cumsum(x)[-1] + x.reshape(2, -1).sum() + parts[1].sum() + np.median(x))

    numpy_code(np.linspace(0.0, 1.0, 6))


def programs():
    """The corpus's late_import programs; without ENZPY_SLOW, every third one (the
    warm-up above compiles the helpers they share either way)."""
    import numpy_corpus
    chosen = [p for p in numpy_corpus.PROGRAMS if "late_import" in p.tags and p.returns == "scalar"]
    return chosen if os.environ.get("ENZPY_SLOW") else chosen[::3]


def main(mode):
    if mode == "late":
        warm_up()
        for p in programs():
            p.fn(*p.make_args())
    import enzpy
    from enzpy import Active, Const, Duplicated, Reverse, autodiff

    results = {}
    for p in programs():
        args = p.make_args()
        annotated, shadows = [], {}
        for i, v in enumerate(args):
            if i not in p.wrt:
                annotated.append(Const(v))
            elif isinstance(v, np.ndarray):
                shadows[i] = np.zeros_like(v)
                annotated.append(Duplicated(v, shadows[i]))
            else:
                annotated.append(Active(v))
        try:
            (grads,) = autodiff(Reverse, p.fn, *annotated)
            results[p.name] = {"gradients": [
                np.asarray(shadows[i] if i in shadows else grads[i], dtype=float).ravel().tolist()
                for i in p.wrt]}
        except Exception as exc:   # noqa: BLE001 - the error itself is the result
            results[p.name] = {"error": type(exc).__name__, "message": str(exc)[:300]}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
