"""Execute ``examples/seeds.ipynb`` end to end; any failing cell fails the test.

The notebook runs with its own folder (``examples/``) as the working directory,
as a user opening it in Jupyter would. It compiles the 2+2-operator evaluator
(Numba, ~15-25 s) and builds four derivatives: about a minute in all.
Needs ``nbclient``, ``nbformat`` and ``ipykernel`` (the ``test`` extra).
"""
import os

import nbclient
import nbformat
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")
NOTEBOOK = os.path.join(EXAMPLES, "seeds.ipynb")


def test_seeds_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": EXAMPLES}})
    try:
        client.execute()        # raises CellExecutionError at the first failing cell
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"a cell of {os.path.basename(NOTEBOOK)} failed:\n{exc}")
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors, errors
