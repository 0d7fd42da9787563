"""The notebooks in ``notebooks/`` run top to bottom, and are stored without outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
# Notebooks whose own code calls optax, which mixes dtypes: they run under JAX's standard dtype
# promotion, the others under the strict one the test suite sets (see conftest.py).
CALL_OPTAX = {"04_functional_jax"}


def test_the_seven_notebooks_are_there():
    assert [path.stem for path in NOTEBOOKS] == [
        "01_quickstart",
        "02_digits_convnet",
        "03_sequences",
        "04_functional_jax",
        "05_research_gradients",
        "06_mixed_precision",
        "07_checkpoint_export",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    executed = [
        i
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert executed == [], f"{path.name}: clear the outputs of cells {executed} before committing"
    assert "widgets" not in notebook.metadata, f"{path.name}: stored widget state"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no display needed
    if path.stem in CALL_OPTAX:
        monkeypatch.setenv("JAX_NUMPY_DTYPE_PROMOTION", "standard")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK_DIR}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if one fails
