"""Both notebooks run top to bottom on a fresh install and show their plots."""

import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = ["01_explore_positional_encoding.ipynb", "02_train_and_export.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_shows_plots(name, tmp_path):
    path = os.path.join(ROOT, "notebooks", name)
    book = nbformat.read(path, as_version=4)
    # Committed without outputs, so that diffs stay readable.
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code")
    NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, f"{name} showed {len(images)} plots"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    if name.startswith("02"):
        assert "max |original - reloaded| =" in text
    else:
        assert "concatenated == interleaved[:, [0, 2, 4, 6, 1, 3, 5, 7]]: True" in text
