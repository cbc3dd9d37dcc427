"""Fixtures shared by every test module (helpers live in `_helpers.py`)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from keras_posenc._keras import keras  # noqa: E402


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends under the float32 policy."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
