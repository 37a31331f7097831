"""The small examples run to the end (they assert their own results)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("script", ["quickstart.py", "second_order.py", "custom_rules.py"])
def test_example_runs(script):
    default_numba = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}   # (conftest)
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)],
                          capture_output=True, text=True, timeout=600, env=default_numba)
    assert done.returncode == 0, done.stdout + done.stderr
