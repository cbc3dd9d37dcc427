"""The package where TensorFlow is missing: a JAX-only or torch-only install.

TensorFlow is in the default install, so here "missing" is made by a fresh
interpreter whose `sys.modules["tensorflow"]` is None (every import of it
fails as if it were not installed, and `find_spec` says it is absent). CI
also runs the real thing: a venv with Keras and JAX only (`.ci/run`).
"""

import os
import subprocess
import sys
import textwrap

import pytest
from _helpers import BACKEND, LEGACY, needs_tensorflow

from keras_posenc import _tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Put first in a script: TensorFlow (and tf-keras) cannot be imported after.
WITHOUT_TENSORFLOW = (
    'import sys; sys.modules["tensorflow"] = sys.modules["tf_keras"] = None\n'
)


def run_without_tensorflow(script, **env):
    """Runs `script` in a fresh interpreter without TensorFlow, from the repository."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    environment.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
    )


@needs_tensorflow
def test_installed_says_whether_tensorflow_can_be_imported(monkeypatch):
    # True where it is installed; False once TensorFlow cannot be imported.
    assert _tensorflow.installed()
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert not _tensorflow.installed()


def test_require_names_what_needs_tensorflow_and_the_fix(monkeypatch):
    # The error says what writes a SavedModel, what it needs, and how to
    # get it (or what needs no TensorFlow).
    _tensorflow.require("export_saved_model")  # installed: nothing raised
    monkeypatch.setattr(_tensorflow, "installed", lambda: False)
    with pytest.raises(ImportError) as raised:
        _tensorflow.require("export_saved_model")
    assert str(raised.value) == (
        "export_saved_model writes a SavedModel, which needs TensorFlow, and "
        "TensorFlow is not installed: `pip install tensorflow`. A `.keras` file "
        "(`model.save`) needs no TensorFlow and loads on every backend."
    )


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND == "tensorflow" or LEGACY, reason="JAX and PyTorch run without TensorFlow"
)
def test_every_module_and_both_layers_work_without_tensorflow(tmp_path):
    # On this pass's backend, with TensorFlow unimportable: every module of
    # the package imports, both layers compute (both sinusoidal modes), a
    # `.keras` file round-trips, and a SavedModel export says what it needs.
    done = run_without_tensorflow(
        f"""
        import importlib, os, pkgutil
        import numpy as np
        import keras
        import keras_posenc

        found = pkgutil.walk_packages(keras_posenc.__path__, "keras_posenc.")
        names = [m.name for m in found if m.name != "keras_posenc.__main__"]
        for name in names:
            importlib.import_module(name)
        x = np.ones((2, 5, 8), "float32")
        for options in ({{}}, {{"mode": "lookup", "max_length": 16}}):
            pe = keras_posenc.SinusoidalPositionEncoding(merge=None, **options)
            row = keras.ops.convert_to_numpy(pe(x))[0, 1]
            assert abs(row[0] - np.sin(1.0)) < 2e-7, row
        q = keras_posenc.RotaryEmbedding()(np.ones((1, 4, 2, 8), "float32"))
        assert tuple(q.shape) == (1, 4, 2, 8)
        inputs = keras.Input((None, 8))
        model = keras.Model(inputs, keras_posenc.SinusoidalPositionEncoding()(inputs))
        path = os.path.join({str(tmp_path)!r}, "m.keras")
        model.save(path)
        again = keras.saving.load_model(path)
        assert np.array_equal(keras.ops.convert_to_numpy(again(x)),
                              keras.ops.convert_to_numpy(model(x)))
        try:
            keras_posenc.export_saved_model(model, path[: -len("m.keras")] + "sm")
        except ImportError as error:
            print(error)
        print(len(names), "modules on", keras.backend.backend())
        """,
        KERAS_BACKEND=BACKEND,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("export_saved_model writes a SavedModel, which needs")
    assert lines[1].endswith(f"modules on {BACKEND}")
    assert sorted(os.listdir(tmp_path)) == ["m.keras"]


@pytest.mark.skipif(
    BACKEND != "tensorflow" or LEGACY,
    reason="backend-independent subprocess test: run once, in the TensorFlow pass",
)
def test_keras_on_its_default_backend_without_tensorflow_says_what_to_set(tmp_path):
    # A JAX-only install with KERAS_BACKEND unset (and no keras.json):
    # `import keras_posenc` names the setting (was Keras's "No module named
    # 'tensorflow'", from deep inside Keras).
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW + "import keras_posenc"],
        capture_output=True,
        text=True,
        env={**env, "KERAS_HOME": str(tmp_path)},
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"ModuleNotFoundError: {_tensorflow.NOT_INSTALLED_AS_BACKEND}"
    )
