"""Fixtures shared by every test module (helpers live in `_helpers.py`)."""

import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _helpers import keras_file_round_trip, max_diff  # noqa: E402

from keras_posenc._keras import keras  # noqa: E402

# Packages a test may import that a machine can lack (TensorFlow's wheel
# cannot be carried to the lent GPU machine): where one is not installed, a
# test that needs it skips, saying which. Where it is installed, nothing
# changes. (The package's doctests skip by themselves: this file's hooks
# serve the tests below it.)
_ABSENT = {
    name
    for name in ("tensorflow", "tf_keras", "ai_edge_litert")
    if importlib.util.find_spec(name) is None
}


def _skip_if_absent(error):
    package = (error.name or "").split(".")[0]
    if package in _ABSENT:
        pytest.skip(f"needs {package}, not installed here")


def _skipping_if_absent():
    """A hook wrapper: the phase's ModuleNotFoundError of an absent package
    becomes a skip."""
    try:
        return (yield)
    except ModuleNotFoundError as error:
        _skip_if_absent(error)
        raise


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_skipping_if_absent)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_skipping_if_absent)


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends under the float32 policy."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def exact_and_saved(tmp_path):
    """`check(model, x, before, name)`, called after `compat.use_exact(model)`
    replaced keras-hub's layers of a model whose outputs on `x` were
    `before`: each output moves by less than 1e-5, a second `use_exact`
    replaces nothing, and the model saved as `.keras` (file `name`) loads
    with the same outputs (`atol=1e-6`). Returns the loaded model, for the
    caller to check its layers."""
    from keras_posenc import compat

    def check(model, x, before, name):
        after = model.predict_on_batch(x)
        for key in before:
            assert max_diff(after[key], before[key]) < 1e-5
        assert compat.use_exact(model) == 0
        loaded = keras_file_round_trip(model, tmp_path / name)
        again = loaded.predict_on_batch(x)
        for key in after:
            np.testing.assert_allclose(again[key], after[key], atol=1e-6)
        return loaded

    return check
