"""Shared test helpers: the independent references, tolerances, builders.

The references live here only: a float64 numpy formula written straight
from the paper (exact to ~1e-9 below 2**24), and an mpmath one for
positions up to 2**31 where float64 angles are no longer exact. Neither
uses any keras_posenc code.
"""

import numpy as np
import pytest
from keras import backend, ops

from keras_posenc._keras import LEGACY, keras

BACKEND = backend.backend()
LAYOUTS = ("interleaved", "concatenated")
# The tested precision bound of every float32 output (README "Guarantee").
TOL = 2e-7
MODES = [
    pytest.param({"mode": "compute"}, id="compute"),
    pytest.param({"mode": "lookup", "max_length": 128}, id="lookup"),
]

only_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow only")
keras3_only = pytest.mark.skipif(LEGACY, reason="Keras 3 only")


def to_numpy(x):
    return ops.convert_to_numpy(x)


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

    mpmath.mp.dps = 40 + max(0, int(-mpmath.log10(max_wavelength)))
    rows = []
    for p in np.ravel(positions):
        sin, cos = [], []
        for i in range((depth + 1) // 2):
            angle = int(p) * mpmath.power(
                mpmath.mpf(max_wavelength), mpmath.mpf(-2 * i) / depth
            )
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


def random_inputs(batch=2, length=10, depth=8, seed=0):
    """float32 numpy inputs `[batch, length, depth]`."""
    return (
        np.random.default_rng(seed)
        .normal(size=(batch, length, depth))
        .astype("float32")
    )


__all__ = [
    "BACKEND",
    "LAYOUTS",
    "LEGACY",
    "MODES",
    "TOL",
    "keras",
    "keras3_only",
    "only_tensorflow",
    "random_inputs",
    "reference",
    "reference_mp",
    "to_numpy",
]
