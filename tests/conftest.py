"""Shared fixtures and the independent references.

The references live here only: a float64 numpy formula written straight
from the paper (exact to ~1e-9 below 2**24), and an mpmath one for
positions up to 2**31 where float64 angles are no longer exact.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_posenc._keras import LEGACY, keras  # noqa: E402

LAYOUTS = ("interleaved", "concatenated")


def reference(positions, depth, max_wavelength=10000.0, layout="interleaved"):
    """float64 PE straight from the paper: `positions.shape + (depth,)`."""
    positions = np.asarray(positions, np.float64)
    i = np.arange((depth + 1) // 2)
    omega = max_wavelength ** (-2.0 * i / depth)
    angle = positions[..., None] * omega
    sin, cos = np.sin(angle), np.cos(angle)[..., : depth // 2]
    if layout == "concatenated":
        return np.concatenate([sin, cos], axis=-1)
    out = np.empty(positions.shape + (depth,))
    out[..., 0::2] = sin
    out[..., 1::2] = cos
    return out


def reference_mp(positions, depth, max_wavelength=10000.0, layout="interleaved"):
    """The same with 40-digit mpmath arithmetic (slow: use few positions)."""
    import mpmath

    mpmath.mp.dps = 40
    rows = []
    for p in np.ravel(positions):
        sin, cos = [], []
        for i in range((depth + 1) // 2):
            angle = int(p) * mpmath.power(max_wavelength, mpmath.mpf(-2 * i) / depth)
            sin.append(float(mpmath.sin(angle)))
            cos.append(float(mpmath.cos(angle)))
        cos = cos[: depth // 2]
        if layout == "concatenated":
            rows.append(sin + cos)
        else:
            row = [0.0] * depth
            row[0::2], row[1::2] = sin, cos
            rows.append(row)
    return np.array(rows).reshape(np.shape(positions) + (depth,))


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends under the float32 policy."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


__all__ = ["LAYOUTS", "LEGACY", "keras", "reference", "reference_mp", "tf"]
