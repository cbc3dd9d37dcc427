"""keras-hub's VideoPrism drop-in (`compat/_video_prism.py`) and `use_exact`.

The reference is a float64 transcription of keras-hub's
`video_prism_layers.SinusoidalPositionalEmbedding.call` (tensor2tensor's
`get_timing_signal_1d`).
"""

import numpy as np
import pytest
from _helpers import LEGACY, TOL, assert_layer_round_trips, keras, max_diff, to_numpy

keras_hub = pytest.importorskip("keras_hub")

import keras_posenc  # noqa: E402
from keras_posenc import compat  # noqa: E402

pytestmark = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")

Ours = compat.VideoPrismSinusoidalPositionalEmbedding
# (hidden_dim, min_timescale, max_timescale): keras-hub's defaults, an odd
# width (zero column), other timescales, growing frequencies (max < min).
CASES = [(8, 1.0, 1.0e4), (7, 1.0, 1.0e4), (16, 0.5, 300.0), (16, 2.0, 0.5)]


def timing_signal64(length, hidden_dim, min_timescale=1.0, max_timescale=1.0e4):
    """keras-hub's VideoPrism signal in float64: ``[1, length, hidden_dim]``."""
    n = hidden_dim // 2
    increment = np.log(float(max_timescale) / float(min_timescale)) / max(n - 1, 1)
    inverse = min_timescale * np.exp(np.arange(n, dtype=np.float64) * -increment)
    angles = np.arange(length, dtype=np.float64)[:, None] * inverse[None]
    signal = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
    if hidden_dim % 2:
        signal = np.pad(signal, [[0, 0], [0, 1]])
    return signal[None]


def _hub_layer(*args, **kwargs):
    from keras_hub.src.models.video_prism.video_prism_layers import (
        SinusoidalPositionalEmbedding,
    )

    return SinusoidalPositionalEmbedding(*args, **kwargs)


def _ids(length):
    return np.zeros((2, length), "int32")


@pytest.mark.parametrize("case", CASES)
def test_equals_keras_hub_at_short_positions(case):
    # A layout guard: keras-hub's float32 angles are close at positions < 16
    # (1.5e-5 off for growing frequencies under JAX on an H200: XLA's own
    # float32 exp and sin there; a wrong layout is off by about 1).
    ours, theirs = (
        to_numpy(Ours(*case)(_ids(16))),
        to_numpy(_hub_layer(*case)(_ids(16))),
    )
    assert ours.shape == theirs.shape == (1, 16, case[0])
    assert max_diff(ours, theirs) < 5e-5


@pytest.mark.parametrize("case", CASES)
def test_is_exact_where_keras_hub_is_off(case):
    want = timing_signal64(4096, *case)
    assert max_diff(to_numpy(Ours(*case)(_ids(4096))), want) < TOL
    # keras-hub's float32 frequencies and angles.
    theirs = to_numpy(_hub_layer(*case)(_ids(4096)))
    assert max_diff(theirs, want) > 5 * TOL


@pytest.mark.parametrize("hidden_dim", [1, 2, 3])
def test_one_frequency_or_none(hidden_dim):
    # keras-hub divides by max(n - 1, 1): with one frequency it is
    # min_timescale; width 1 is one zero column.
    want = timing_signal64(100, hidden_dim, 0.5)
    assert max_diff(to_numpy(Ours(hidden_dim, 0.5)(_ids(100))), want) < TOL


@pytest.mark.parametrize("hidden_dim", [12, 13])
def test_is_the_tensor2tensor_table_at_min_timescale_1(hidden_dim):
    table = keras_posenc.sinusoidal_table(
        300,
        hidden_dim,
        max_wavelength=500.0,
        layout="concatenated",
        frequency_rule="tensor2tensor",
        odd_depth="zero",
    )
    ours = to_numpy(Ours(hidden_dim, max_timescale=500.0)(_ids(300)))[0]
    assert max_diff(ours, to_numpy(table)) < 2 * TOL


def test_mixed_bfloat16_is_the_exact_signal_rounded_once():
    out = Ours(8, dtype="mixed_bfloat16")(_ids(64))
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    ours = to_numpy(keras.ops.cast(out, "float32"))
    assert max_diff(ours, timing_signal64(64, 8)) <= 2.0**-9 + TOL


def test_symbolic_call_shape():
    out = Ours(8)(keras.Input((None,), dtype="int32"))
    assert tuple(out.shape) == (1, None, 8)


def test_refusals():
    with pytest.raises(ValueError, match="`hidden_dim`, expected a positive"):
        Ours(0)
    with pytest.raises(ValueError, match="`min_timescale`, expected a finite number"):
        Ours(8, min_timescale=0.0)
    with pytest.raises(ValueError, match="`max_timescale`, expected a finite number"):
        Ours(8, max_timescale=-1.0)
    # 1e5 rad per position: past what the exact engine holds.
    with pytest.raises(ValueError, match="`max_timescale`, expected timescales whose"):
        Ours(8, min_timescale=1.0e5, max_timescale=1.0e6)
    with pytest.raises(ValueError, match="`inputs`, expected a tensor of rank 2"):
        Ours(8)(np.zeros((5,), "int32"))


def test_keras_hub_config_and_keras_file_round_trip(tmp_path):
    hub_config = _hub_layer(7, 0.5, 300.0, name="pe").get_config()
    layer = Ours.from_config(hub_config)
    assert layer.get_config() == {**hub_config, **layer.get_config()}
    ids = keras.Input((None,), dtype="int32")
    model = keras.Model(ids, layer(ids))
    assert_layer_round_trips(model, layer, _ids(9), tmp_path)


def _backbone():
    return keras_hub.models.VideoPrismBackbone(
        num_frames=2,
        patch_size=4,
        hidden_dim=8,
        intermediate_dim=16,
        num_heads=2,
        num_spatial_layers=1,
        num_temporal_layers=1,
        num_auxiliary_layers=1,
        vocabulary_size=50,
        num_text_layers=1,
        image_shape=(8, 8, 3),
    )


def test_use_exact_on_a_video_prism_backbone(rng, exact_and_saved):
    # The smallest VideoPrism with a text encoder, compiled
    # (`predict_on_batch`); at 5 tokens keras-hub's signal is within float32
    # noise of the exact one, and so are the outputs.
    backbone = _backbone()
    x = {
        "pixel_values": rng.normal(size=(2, 2, 8, 8, 3)).astype("float32"),
        "token_ids": rng.integers(0, 50, size=(2, 5)).astype("int32"),
        "padding_mask": np.ones((2, 5), "int32"),
    }
    layer = backbone.text_embedding.position_embedding
    before = backbone.predict_on_batch(x)
    assert compat.use_exact(backbone) == 1
    assert backbone.text_embedding.position_embedding is layer
    assert isinstance(layer, Ours)
    loaded = exact_and_saved(backbone, x, before, "backbone.keras")
    assert isinstance(loaded.text_embedding.position_embedding, Ours)
