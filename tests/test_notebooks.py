"""Every notebook runs top to bottom on this pass's backend and shows its plots.

Each `notebooks/*.ipynb` is picked up by the glob and executed in every
Keras 3 pass (TensorFlow, JAX, PyTorch: the kernel inherits
`KERAS_BACKEND`); under tf-keras only the static checks run. Each notebook
asserts the point it makes in its own cells (accuracy with and without
the encoding, round-trip differences, precision figures), so a notebook
that stops making its point fails here.
"""

import configparser
import glob
import importlib.metadata
import importlib.util
import os
import re
import sys

import pytest
from _helpers import BACKEND, LEGACY, needs_tensorflow
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    "05_diffusion_and_vision.ipynb": (2, "max |error|, keras_posenc:"),
}
# Executed ones: notebook 02 exports a SavedModel, which needs TensorFlow
# whatever the backend (skipped where it is not installed).
EXECUTED = [
    pytest.param(path, marks=needs_tensorflow)
    if os.path.basename(path) == "02_train_and_export.ipynb"
    else path
    for path in NOTEBOOKS
]
# Per cell. Each notebook takes well under a minute on a free 2-core CPU
# (see `--durations`); the limit only stops a hung kernel.
CELL_TIMEOUT = 300

keras3_pass = pytest.mark.skipif(
    LEGACY, reason="notebooks use Keras 3 (`import keras`), not tf-keras"
)


def _notebook_kernel():
    """`docs/_notebook_kernel.py`: the quiet kernel the site build uses too."""
    path = os.path.join(ROOT, "docs", "_notebook_kernel.py")
    spec = importlib.util.spec_from_file_location("_notebook_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(path, workdir):
    """Runs the notebook at `path` with the site's quiet kernel, in `workdir`."""
    book = nbformat.read(path, as_version=4)
    ipython = workdir / ".ipython"
    ipython.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        # Anything a notebook writes (tempfile included) lands in workdir.
        patch.setenv("TMPDIR", str(workdir))
        for name, value in _notebook_kernel().environment(str(ipython)).items():
            patch.setenv(name, value)
        client = nbclient.NotebookClient(
            book,
            timeout=CELL_TIMEOUT,
            kernel_name="python3",
            resources={"metadata": {"path": str(workdir)}},
        )
        client.execute()
    return book


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """`run(path)`: `(book, workdir)`, each notebook run once per test pass."""
    done = {}

    def run(path):
        if path not in done:
            workdir = tmp_path_factory.mktemp(os.path.basename(path)[:2])
            try:
                done[path] = (_run(path, workdir), workdir)
            except CellExecutionError as error:
                done[path] = error
        if isinstance(done[path], CellExecutionError):
            pytest.fail(f"{os.path.basename(path)} on {BACKEND}: {done[path]}"[-3000:])
        return done[path]

    return run


def _outputs(book):
    return [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]


def _each_executed_notebook(test):
    """`test(path, executed)` run on each executed notebook: slow, and
    Keras 3 only (as every test that runs them)."""
    test = pytest.mark.parametrize("path", EXECUTED, ids=os.path.basename)(test)
    return pytest.mark.slow(keras3_pass(test))


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_markdown_writes_powers_as_code_or_maths(path):
    # `2**30 + 7 against 2**30` in prose renders as a bold "30 + 7 against 2":
    # powers go in backticks or $...$.
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            prose = re.sub(r"`[^`]*`|\$[^$]*\$", "", cell.source)
            assert not re.search(r"\w\*\*\w", prose), cell.source


def _imported_modules(path):
    """The top-level modules a notebook's code cells import."""
    source = "\n".join(
        cell.source
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code"
    )
    found = re.findall(r"^\s*(?:import|from)\s+(\w+)", source, re.MULTILINE)
    return set(found) - set(sys.stdlib_module_names) - {"keras_posenc"}


def _installed_with(requirements):
    """Distributions `requirements` install, with theirs (as installed here)."""
    wanted = [Requirement(r) for r in requirements]
    seen = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            required = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in required:
            nested = Requirement(line)
            if nested.marker is None or nested.marker.evaluate({"extra": ""}):
                wanted.append(nested)
    return seen


def test_notebook_extra_brings_every_module_the_notebooks_import():
    # `pip install ".[notebook]"` (the README's command) is enough to run
    # every notebook: each module they import comes with the package or the
    # extra (notebook 04's keras_hub was missing), and Jupyter to open them.
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    extra = config["options.extras_require"]["notebook"].split()
    brought = _installed_with(config["options"]["install_requires"].split() + extra)
    assert "jupyterlab" in brought
    providers = importlib.metadata.packages_distributions()
    for path in NOTEBOOKS:
        for module in sorted(_imported_modules(path)):
            names = {canonicalize_name(d) for d in providers.get(module, [module])}
            assert names & brought, f"{os.path.basename(path)} imports {module}"


@_each_executed_notebook
def test_notebook_runs_and_shows_its_results(path, executed):
    # Top to bottom on this backend without an error (its own asserts
    # included), with its pictures and its key printed result; anything it
    # writes goes to a temporary directory.
    book, _ = executed(path)
    outputs = _outputs(book)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    min_images, printed = EXPECTED.get(os.path.basename(path), (0, None))
    assert len(images) >= min_images, f"showed {len(images)} pictures"
    if printed is not None:
        assert printed in text
        assert f"Keras backend: {BACKEND}" in text


@_each_executed_notebook
def test_notebook_shows_no_warnings_logs_or_temporary_paths(path, executed):
    # What the site shows of it, as the site build runs it: nothing on
    # stderr (notebook 04 showed tqdm's ipywidgets warning; TensorFlow's
    # start-up lines), no path of a temporary file (notebook 02 showed
    # TensorFlow's "Assets written to: <hidden staging directory>").
    book, workdir = executed(path)
    outputs = _outputs(book)
    stderr = [
        o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"
    ]
    assert stderr == []
    shown = "".join(o.get("text", "") + str(o.get("data", "")) for o in outputs)
    assert str(workdir) not in shown
