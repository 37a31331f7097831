"""Re-execute the example notebooks in place so their committed outputs are current.

    python scripts/refresh_notebooks.py                 # every examples/*.ipynb
    python scripts/refresh_notebooks.py --only seeds    # one notebook (name with or without .ipynb)

Each notebook runs in a fresh ``python3`` kernel with ``examples/`` as its working
directory (as a reader opening it in Jupyter would) and is written back with its
outputs and plots. A failing cell stops that notebook, leaves its file untouched and
makes the script exit with status 1. Needs ``nbclient``, ``nbformat`` and ``ipykernel``
(the ``test`` extra) and matplotlib for the plots.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import nbclient
import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def notebooks(only=None) -> list[str]:
    paths = sorted(glob.glob(os.path.join(EXAMPLES, "*.ipynb")))
    if only:
        wanted = {name if name.endswith(".ipynb") else name + ".ipynb" for name in only}
        unknown = wanted - {os.path.basename(p) for p in paths}
        if unknown:
            raise SystemExit(f"no such notebook in examples/: {', '.join(sorted(unknown))}")
        paths = [p for p in paths if os.path.basename(p) in wanted]
    return paths


def execute(path: str, timeout: int = 600) -> float:
    """Execute the notebook at ``path`` in place; returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": EXAMPLES}})
    t = time.perf_counter()
    client.execute()            # raises CellExecutionError at the first failing cell
    seconds = time.perf_counter() - t
    nbformat.write(nb, path)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="refresh only this notebook (repeatable)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    failed = []
    for path in notebooks(args.only):
        name = os.path.basename(path)
        try:
            seconds = execute(path, args.timeout)
        except nbclient.exceptions.CellExecutionError as exc:
            print(f"{name}: FAILED\n{exc}", file=sys.stderr)
            failed.append(name)
        else:
            print(f"{name}: executed in {seconds:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
