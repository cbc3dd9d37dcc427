"""The float64 numpy formula, for plots, benchmarks and figures.

The one statement of the textbook formula outside the tests (which keep
their own, independent one). It forms ``p * w`` in float64, so it is a
good reference below about 2**24 and a poor one far beyond.
"""

import numpy as np

from keras_posenc._exact.phase_constants import radians_of, sinusoidal_turns


def frequencies(depth, max_wavelength):
    """float64 ``w_i``, rounded once from the exact turns (as `tables.frequencies`)."""
    return radians_of(sinusoidal_turns(depth, max_wavelength))


def sinusoidal_float64(positions, depth, max_wavelength=10000.0, layout="interleaved"):
    """``PE(p)`` in float64 for every position: ``positions.shape + [depth]``."""
    positions = np.asarray(positions, np.float64)
    angle = positions[..., None] * frequencies(depth, max_wavelength)
    sin, cos = np.sin(angle), np.cos(angle)[..., : depth // 2]
    if layout == "concatenated":
        return np.concatenate([sin, cos], axis=-1)
    out = np.empty(positions.shape + (depth,))
    out[..., 0::2] = sin
    out[..., 1::2] = cos
    return out


def naive_float32(positions, depth, max_wavelength=10000.0, dtype=np.float32):
    """The usual code: angles formed in `dtype` (float32, or a 16-bit type)."""
    p = np.asarray(positions).astype(dtype)[..., None]
    angle = p * frequencies(depth, max_wavelength).astype(dtype)
    out = np.empty(angle.shape[:-1] + (depth,), dtype)
    out[..., 0::2] = np.sin(angle.astype(np.float32)).astype(dtype)
    out[..., 1::2] = np.cos(angle.astype(np.float32)).astype(dtype)[..., : depth // 2]
    return out
