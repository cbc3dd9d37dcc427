"""Every notebook runs top to bottom on this pass's backend and shows its plots.

Each `notebooks/*.ipynb` is picked up by the glob and executed in every
Keras 3 pass (TensorFlow, JAX, PyTorch: the kernel inherits
`KERAS_BACKEND`); under tf-keras only the static checks run. Each notebook
asserts the point it makes in its own cells (accuracy with and without
the encoding, round-trip differences, precision figures), so a notebook
that stops making its point fails here.
"""

import glob
import os

import pytest
from _helpers import BACKEND, LEGACY

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from nbclient.exceptions import CellExecutionError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
# What some notebooks must print and how many pictures they must show.
EXPECTED = {
    "01_explore_positional_encoding.ipynb": (
        5,
        "concatenated == interleaved[:, [0, 2, 4, 6, 1, 3, 5, 7]]: True",
    ),
    "02_train_and_export.ipynb": (2, "max |original - reloaded SavedModel| ="),
    "03_rotary_embeddings.ipynb": (
        3,
        "from_config(get_config()) gives the same outputs: True",
    ),
    "04_keras_hub_models.ipynb": (1, "use_exact replaced 2 layers"),
}
# Per cell. Each notebook takes well under a minute on a free 2-core CPU
# (see `--durations`); the limit only stops a hung kernel.
CELL_TIMEOUT = 300

keras3_pass = pytest.mark.skipif(
    LEGACY, reason="notebooks use Keras 3 (`import keras`), not tf-keras"
)


def _run(path, tmp_path, monkeypatch):
    book = nbformat.read(path, as_version=4)
    # Anything a notebook writes (tempfile included) lands in tmp_path.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    client = nbclient.NotebookClient(
        book,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return book


def _outputs(book):
    return [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_committed_without_outputs(path):
    # Outputs are not committed, so that diffs stay readable.
    book = nbformat.read(path, as_version=4)
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    assert code
    assert not [cell for cell in code if cell.get("outputs")]
    assert not [cell for cell in code if cell.get("execution_count") is not None]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_needs_no_path_tricks_and_no_downloads(path):
    # It imports the installed package, and fetches nothing.
    source = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    for banned in ("sys.path", "urlopen", "requests.", "wget", "get_file(", "!pip"):
        assert banned not in source, banned


@pytest.mark.slow
@keras3_pass
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_and_shows_its_results(path, tmp_path, monkeypatch):
    # Top to bottom on this backend without an error (its own asserts
    # included), with its pictures and its key printed result; anything it
    # writes goes to tmp_path.
    try:
        book = _run(path, tmp_path, monkeypatch)
    except CellExecutionError as error:
        pytest.fail(f"{os.path.basename(path)} on {BACKEND}: {error}"[-3000:])
    outputs = _outputs(book)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    min_images, printed = EXPECTED.get(os.path.basename(path), (0, None))
    assert len(images) >= min_images, f"showed {len(images)} pictures"
    if printed is not None:
        assert printed in text
        assert f"Keras backend: {BACKEND}" in text
