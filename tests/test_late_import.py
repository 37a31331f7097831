"""Import order does not matter: the corpus differentiates the same when NumPy
code (allocation, reductions, sorting, a jitclass, lists), and the programs
themselves, were compiled before ``import enzpy``."""
import json
import os
import subprocess
import sys

import numpy as np

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
