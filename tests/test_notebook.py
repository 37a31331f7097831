"""Execute the example notebooks of ``examples/`` end to end; any failing cell fails the test.

Each notebook runs with its own folder (``examples/``) as the working directory,
as a user opening it in Jupyter would. ``seeds.ipynb`` compiles the 2+2-operator
evaluator (Numba, ~15-25 s) and builds four derivatives: about a minute in all
(run with ``ENZPY_SLOW=1``);
the gallery notebooks (``getting_started``, ``numpy_models``, ``second_order``,
``custom_rules``) use small sizes (``numpy_models`` still builds about a minute of
derivatives and runs with ``ENZPY_SLOW=1``). Every committed notebook must also carry its
outputs (``python scripts/refresh_notebooks.py`` re-executes them in place).
Needs ``nbclient``, ``nbformat``, ``ipykernel`` (the ``test`` extra) and matplotlib.
"""
import glob
import os

import nbclient
import nbformat
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")
NOTEBOOK = os.path.join(EXAMPLES, "seeds.ipynb")
GALLERY = ["getting_started.ipynb", "numpy_models.ipynb", "second_order.ipynb",
           "custom_rules.ipynb"]
SLOW = bool(os.environ.get("ENZPY_SLOW"))
COMMITTED = sorted(os.path.basename(p) for p in glob.glob(os.path.join(EXAMPLES, "*.ipynb")))


def execute_notebook(path):
    """Run every cell of the notebook at ``path`` in a fresh ``python3`` kernel
    (cwd ``examples/``); fails the test at the first failing cell. Returns the
    executed notebook (the file is not modified)."""
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": EXAMPLES}})
    try:
        client.execute()        # raises CellExecutionError at the first failing cell
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"a cell of {os.path.basename(path)} failed:\n{exc}")
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors, errors
    return nb


@pytest.mark.skipif(not SLOW,
                    reason="about a minute; the seed workloads are tested in test_seeds.py; "
                           "set ENZPY_SLOW=1")
def test_seeds_notebook_executes():
    execute_notebook(NOTEBOOK)


# numpy_models builds a minute of derivatives; its models run in test_numpy's composites
_SLOW_GALLERY = pytest.mark.skipif(not SLOW,
                                   reason="about a minute; set ENZPY_SLOW=1")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_SLOW_GALLERY)
                                  if n == "numpy_models.ipynb" else n for n in GALLERY])
def test_gallery_notebook_executes(name):
    nb = execute_notebook(os.path.join(EXAMPLES, name))
    images = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
    assert images, f"{name} drew no plot"


def test_gallery_notebooks_exist():
    assert set(GALLERY) <= set(COMMITTED), sorted(set(GALLERY) - set(COMMITTED))


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_notebook_has_outputs(name):
    """No notebook is committed blank: its code cells were run top to bottom in one
    kernel (execution counts 1, 2, ...) and saved with their outputs, none an error.
    Every code cell of a gallery notebook shows an output; ``seeds.ipynb``'s first
    cell (imports only) prints nothing, so there only executed-in-order is required."""
    nb = nbformat.read(os.path.join(EXAMPLES, name), as_version=4)
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and cell.source.strip()]
    assert code, f"{name} has no code cells"
    hint = f"; run python scripts/refresh_notebooks.py --only {name}"
    counts = [nb.cells[i].get("execution_count") for i in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{name}: execution counts {counts}: not executed top to bottom{hint}"
    errors = [i for i in code for out in nb.cells[i].get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors, f"{name}: code cells {errors} end in an error{hint}"
    blank = [i for i in code if not nb.cells[i].get("outputs")]
    assert len(blank) < len(code), f"{name}: no code cell has outputs{hint}"
    if name in GALLERY:
        assert not blank, f"{name}: code cells {blank} have no outputs{hint}"
