"""Scalar argument checks (`keras_posenc._checks.arguments`): bounds and settings.

`MAX_DEPTH` refuses huge depths before any work, and the lookup-table byte
limit (`check_table_bytes`) follows KERAS_POSENC_MAX_TABLE_BYTES.
"""

import time

import numpy as np
import pytest
from _helpers import FAST, TABLE_MESSAGE, TOL, reference_mp, to_numpy

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding
from keras_posenc._checks import arguments as _arguments


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: keras_posenc.sinusoidal_table(4, 10**9), id="table"),
        pytest.param(lambda: keras_posenc.frequencies(10**9), id="frequencies"),
        pytest.param(lambda: SinusoidalPositionEncoding(depth=10**9), id="layer"),
    ],
)
def test_huge_depth_is_refused_at_once(build):
    # depth=10**9 is refused before any host work (MAX_DEPTH).
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"`depth`.*<= 65536. Received: depth=10{9}"):
        build()
    assert time.perf_counter() - start < FAST


def _held():
    """Bytes of lookup tables alive now, after collecting what is gone."""
    import gc

    gc.collect()
    return _arguments.held_table_bytes()


def test_table_byte_limit_is_set_by_the_environment(monkeypatch):
    # KERAS_POSENC_MAX_TABLE_BYTES moves the limit: (max_length + 1) rows of
    # `depth` float32 values (the extra row is the NaN row).
    held = _held()  # tables of other tests' layers still alive
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, str(held + 65 * 8 * 4))
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)
    assert layer.max_length == 64
    with pytest.raises(ValueError, match=TABLE_MESSAGE):
        SinusoidalPositionEncoding(mode="lookup", max_length=65, depth=8)
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, str(held + 66 * 8 * 4))
    del layer  # its table counts while it lives
    layer = SinusoidalPositionEncoding(
        mode="lookup", max_length=65, depth=8, merge=None
    )
    got = layer(np.zeros((1, 65, 1), "float32"))
    want = reference_mp(np.arange(60, 65), 8)
    np.testing.assert_allclose(to_numpy(got)[0, 60:], want, rtol=0, atol=TOL)


@pytest.mark.parametrize("setting", ["1GB", "-1", "-4096"])
def test_bad_table_byte_limit_setting_is_a_clear_error(monkeypatch, setting):
    # A value that is not a byte count (a negative one would refuse every
    # table) names the variable and echoes the setting.
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, setting)
    with pytest.raises(
        ValueError, match=rf"KERAS_POSENC_MAX_TABLE_BYTES must be.*='{setting}'"
    ):
        SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)


def test_the_table_limit_is_on_the_tables_of_all_living_layers(monkeypatch):
    # Several lookup layers each under the limit (a `.keras` file of them)
    # are bounded in all: a table that would take the living layers' tables
    # past the limit is refused, and one that goes frees its bytes.
    import gc

    from keras_posenc import GridPositionEncoding, RotaryEmbedding

    before = _held()  # tables of other tests' layers still alive
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, str(before + 5000))
    first = SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)
    first(np.zeros((1, 4, 8), "float32"))  # 64 rows of 8 floats: 2048 bytes
    grid = GridPositionEncoding(mode="lookup", max_grid_shape=(32, 32))
    grid(np.zeros((1, 4, 4, 16), "float32"))  # 2 x 32 rows of 8: 2048 bytes
    held = f"the lookup tables of living layers hold {before + 4096} bytes"
    with pytest.raises(ValueError, match=TABLE_MESSAGE + ".*" + held):
        SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)
    with pytest.raises(ValueError, match="`max_length`.*" + held):
        RotaryEmbedding(mode="lookup", max_length=16, rotary_dim=8)
    del first
    gc.collect()
    second = SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)
    assert tuple(second(np.zeros((1, 4, 8), "float32")).shape) == (1, 4, 8)
