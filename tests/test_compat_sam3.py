"""keras-hub's SAM 3 drop-in (`compat/_sam3.py`) and `use_exact`.

The references are float64 transcriptions of keras-hub's
`sam3_layers.SAM3SinePositionEmbedding`: `call` (DETR's normalized sine
over the feature map), `encode_1d_positions` and `encode_boxes`, at the
float32 positions exactly as given.
"""

import math

import numpy as np
import pytest
from _helpers import LEGACY, TOL, assert_layer_round_trips, keras, max_diff, to_numpy

keras_hub = pytest.importorskip("keras_hub")

from keras_posenc import compat  # noqa: E402

pytestmark = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")

Ours = compat.SAM3SinePositionEmbedding
EPS = 1e-6  # keras-hub's, DETR's


def sines64(values, num_pos_feats, scale=2 * math.pi, temperature=10000.0):
    """keras-hub's interleaved sine of ``values * scale`` in float64."""
    angle = np.asarray(values, np.float64)[..., None] * scale
    dim_t = temperature ** (2 * (np.arange(num_pos_feats) // 2) / num_pos_feats)
    angle = angle / dim_t
    return np.where(np.arange(num_pos_feats) % 2 == 0, np.sin(angle), np.cos(angle))


def feature_sine64(height, width, num_pos_feats, normalize, scale=2 * math.pi):
    """keras-hub's `call` in float64: ``[1, height, width, 2 * num_pos_feats]``."""
    y, x = np.meshgrid(
        np.arange(1, height + 1, dtype=np.float64),
        np.arange(1, width + 1, dtype=np.float64),
        indexing="ij",
    )
    if normalize:
        y, x = y / (height + EPS) * scale, x / (width + EPS) * scale
    pos = np.concatenate(
        [sines64(y, num_pos_feats, 1.0), sines64(x, num_pos_feats, 1.0)], -1
    )
    return pos[None]


def _hub_layer(*args, **kwargs):
    from keras_hub.src.models.sam3.sam3_layers import SAM3SinePositionEmbedding

    return SAM3SinePositionEmbedding(*args, **kwargs)


def _positions(rng, *shape):
    return rng.uniform(0.0, 1.0, size=shape).astype("float32")


@pytest.mark.parametrize("normalize", [True, False])
def test_call_is_exact_where_keras_hub_is_off(normalize):
    want = feature_sine64(64, 96, 16, normalize)
    inputs = np.zeros((2, 1), "float32")
    ours = to_numpy(Ours(16, normalize=normalize)(inputs, height=64, width=96))
    assert ours.shape == (2, 64, 96, 32)
    assert max_diff(ours[1:], want) < TOL
    theirs = to_numpy(_hub_layer(16, normalize=normalize)(inputs, height=64, width=96))
    # A layout guard (float32 noise), and keras-hub's float32 angles.
    assert max_diff(theirs[1:], want) < 1e-5
    assert max_diff(theirs[1:], want) > 2 * TOL


def test_call_with_a_scale_and_temperature():
    want = feature_sine64(5, 7, 8, True, scale=3.5)
    # temperature 20 (Grounding DINO's) in the reference too.
    y, x = np.meshgrid(np.arange(1, 6.0), np.arange(1, 8.0), indexing="ij")
    want = np.concatenate(
        [
            sines64(y / (5 + EPS), 8, 3.5, 20.0),
            sines64(x / (7 + EPS), 8, 3.5, 20.0),
        ],
        -1,
    )[None]
    layer = Ours(8, temperature=20, normalize=True, scale=3.5)
    assert max_diff(to_numpy(layer(np.zeros((1, 1)), height=5, width=7)), want) < TOL


def test_encode_1d_positions_is_exact(rng):
    x, y = _positions(rng, 1000), _positions(rng, 1000)
    ours = [to_numpy(v) for v in Ours(16).encode_1d_positions(x, y)]
    theirs = [to_numpy(v) for v in _hub_layer(16).encode_1d_positions(x, y)]
    for out, hub, values in zip(ours, theirs, (x, y), strict=True):
        assert out.shape == hub.shape == (1000, 16)
        assert max_diff(out, sines64(values, 16)) < TOL
        assert TOL < max_diff(hub, sines64(values, 16)) < 1e-5


def test_encode_boxes_is_exact(rng):
    boxes = _positions(rng, 2, 500, 4)
    want = np.concatenate([sines64(boxes[..., i], 8) for i in (1, 0, 2, 3)], -1)
    ours = to_numpy(Ours(8).encode_boxes(boxes))
    theirs = to_numpy(_hub_layer(8).encode_boxes(boxes))
    assert ours.shape == theirs.shape == (2, 500, 32)
    assert max_diff(ours, want) < TOL
    assert TOL < max_diff(theirs, want) < 1e-5


def test_dtypes_are_keras_hub_s(rng):
    layer = Ours(8, normalize=True, dtype="mixed_bfloat16")
    out = layer(np.zeros((1, 1), "float32"), height=4, width=4)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    want = feature_sine64(4, 4, 8, True)
    assert max_diff(to_numpy(keras.ops.cast(out, "float32")), want) <= 2.0**-9 + TOL
    # The encodings come in the positions' dtype, as keras-hub's do.
    x = keras.ops.cast(_positions(rng, 3), "float16")
    pos_x, _ = layer.encode_1d_positions(x, x)
    assert keras.backend.standardize_dtype(pos_x.dtype) == "float16"


def test_symbolic_call_shape():
    out = Ours(8, normalize=True)(keras.Input((4,)), height=3, width=5)
    assert tuple(out.shape) == (None, 3, 5, 16)


def test_refusals():
    with pytest.raises(ValueError, match="`num_pos_feats`, expected an even number"):
        Ours(7)
    with pytest.raises(ValueError, match="`temperature`, expected a number > 1"):
        Ours(8, temperature=0.5)
    with pytest.raises(ValueError, match="`scale`, expected None unless normalize"):
        Ours(8, scale=1.0)
    with pytest.raises(ValueError, match="`scale`, expected a finite number > 0"):
        Ours(8, normalize=True, scale=-1.0)
    with pytest.raises(ValueError, match="`height`, expected a positive integer"):
        Ours(8)(np.zeros((1, 1)), height=0, width=4)
    with pytest.raises(ValueError, match=r"`boxes`, expected a tensor \[batch, N, 4\]"):
        Ours(8).encode_boxes(np.zeros((5, 4), "float32"))


@pytest.mark.parametrize("normalize", [True, False])
def test_keras_hub_config_and_keras_file_round_trip(tmp_path, normalize):
    # keras-hub's config holds scale=2 pi without `normalize` too.
    hub_config = _hub_layer(8, normalize=normalize, name="pe").get_config()
    layer = Ours.from_config(hub_config)
    assert layer.get_config() == {**hub_config, **layer.get_config()}
    inputs = keras.Input((2,))
    model = keras.Model(inputs, layer(inputs, height=3, width=4))
    assert_layer_round_trips(model, layer, np.zeros((2, 2), "float32"), tmp_path)


def test_use_exact_on_a_geometry_encoder(rng):
    from keras_hub.src.models.sam3.sam3_geometry_encoder import SAM3GeometryEncoder

    encoder = SAM3GeometryEncoder(
        num_layers=1, hidden_dim=8, intermediate_dim=16, num_heads=2, roi_size=2
    )
    layer = encoder.position_encoding
    assert compat.use_exact(encoder) == 1
    assert encoder.position_encoding is layer and isinstance(layer, Ours)
    assert (layer.num_pos_feats, layer.normalize) == (4, True)
    x = _positions(rng, 10)
    pos_x, _ = layer.encode_1d_positions(x, x)
    assert max_diff(to_numpy(pos_x), sines64(x, 4)) < TOL
    assert compat.use_exact(encoder) == 0
