"""Host constants of the exact engine (`keras_posenc._exact.phase_constants`).

The constants keep enough digits for any `max_wavelength` the checks allow
(rows within TOL of 40-digit mpmath), and the widest ones are built at once.
"""

import time

import numpy as np
import pytest
from _helpers import TOL, reference_mp, to_numpy

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding
from keras_posenc._checks import arguments as _arguments
from keras_posenc._exact import phase_constants as _phase_constants

WAVELENGTHS = [1e-10, 1e-30, 1e-45, 1e-60, 1e-100, 1e-300, 5e-324, 1e30, 1e300]


@pytest.mark.parametrize("max_wavelength", WAVELENGTHS)
def test_extreme_max_wavelength_rows_are_exact(max_wavelength):
    # Frequencies up to 1e323 rad per position: the constants keep enough
    # digits, so contiguous rows at both int32 ends stay within TOL.
    depth = 64
    for start in (2**31 - 8, -(2**31), 12345):
        table = keras_posenc.sinusoidal_table(
            8, depth, start_index=start, max_wavelength=max_wavelength
        )
        want = reference_mp(start + np.arange(8), depth, max_wavelength)
        np.testing.assert_allclose(to_numpy(table), want, rtol=0, atol=TOL)


@pytest.mark.parametrize("max_wavelength", WAVELENGTHS)
def test_extreme_max_wavelength_explicit_positions_are_exact(max_wavelength):
    # The same through explicit positions (coarse + fine rows per position).
    depth = 64
    positions = np.array([[0, 1, 63, 64, 4097, 2**24 + 1, 2**31 - 1, -(2**31), -7]])
    layer = SinusoidalPositionEncoding(
        max_wavelength=max_wavelength, merge=None, depth=depth
    )
    got = layer(np.zeros((1, positions.shape[1], 1), "float32"), positions=positions)
    want = reference_mp(positions[0], depth, max_wavelength)
    np.testing.assert_allclose(to_numpy(got)[0], want, rtol=0, atol=TOL)


def test_widest_host_constants_are_computed_quickly():
    # The worst case the checks allow (depth 65536, the smallest base) took
    # 60 s with per-frequency decimal powers; bounded loosely (~2 s here).
    start = time.perf_counter()
    constants = _phase_constants.phase_constants(
        _phase_constants.sinusoidal_turns(_arguments.MAX_DEPTH, 1e-300),
        _arguments.MAX_DEPTH,
        "interleaved",
    )
    assert constants.width == _arguments.MAX_DEPTH
    assert time.perf_counter() - start < 20.0


@pytest.mark.parametrize("max_wavelength", [100.0, 1e-30, 1e30])
def test_frequencies_in_turns_are_the_ladder_itself(max_wavelength):
    # in_turns (DINOv3's periods): b ** (-2i / depth) turns per position,
    # with no 1 / (2 pi), to 40 digits below 2**24 f (mpmath, 80 digits).
    import mpmath

    mpmath.mp.dps = 80
    turns = _phase_constants.sinusoidal_turns(32, max_wavelength, in_turns=True)
    base = mpmath.mpf(max_wavelength)
    for i, got in enumerate(turns):
        want = base ** (mpmath.mpf(-2 * i) / 32)
        assert abs(mpmath.mpf(str(got)) - want) * 2**24 < mpmath.mpf(10) ** -38
