"""keras-hub's D-FINE 2-D sine (`compat/_d_fine.py`) and `use_exact`.

The reference is a float64 transcription of keras-hub's
`DFineHybridEncoder.build_2d_sincos_position_embedding` (RT-DETR's).
"""

import numpy as np
import pytest
from _helpers import LEGACY, TOL, keras, max_diff, only_tensorflow, to_numpy

keras_hub = pytest.importorskip("keras_hub")

from keras_posenc import compat  # noqa: E402
from keras_posenc.compat._d_fine import ExactSincos, rt_detr_sincos  # noqa: E402

pytestmark = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")


def sincos64(width, height, dim, temperature=10000.0):
    """keras-hub's D-FINE table in float64: ``[1, width * height, dim]``."""
    grid_w, grid_h = np.meshgrid(
        np.arange(width, dtype=np.float64),
        np.arange(height, dtype=np.float64),
        indexing="ij",
    )
    pos_dim = dim // 4
    omega = 1.0 / temperature ** (np.arange(pos_dim) / pos_dim)
    out_w = grid_w.reshape(-1, 1) * omega
    out_h = grid_h.reshape(-1, 1) * omega
    blocks = [np.sin(out_w), np.cos(out_w), np.sin(out_h), np.cos(out_h)]
    return np.concatenate(blocks, axis=1)[None]


def _hub_table(*args, **kwargs):
    from keras_hub.src.models.d_fine.d_fine_hybrid_encoder import DFineHybridEncoder

    return to_numpy(
        DFineHybridEncoder.build_2d_sincos_position_embedding(*args, **kwargs)
    )


def test_equals_keras_hub_on_a_small_map():
    # A layout guard (width first, then height; not square).
    ours = to_numpy(rt_detr_sincos(5, 3, 16))
    assert ours.shape == (1, 15, 16)
    assert max_diff(ours, _hub_table(5, 3, 16)) < 1e-6


@pytest.mark.parametrize("temperature", [10000.0, 20.0])
def test_is_exact_where_keras_hub_is_off(temperature):
    want = sincos64(80, 60, 256, temperature)
    assert max_diff(to_numpy(rt_detr_sincos(80, 60, 256, temperature)), want) < TOL
    assert max_diff(_hub_table(80, 60, 256, temperature), want) > 5 * TOL


def test_dtype_is_the_one_asked():
    out = rt_detr_sincos(4, 4, 8, dtype="bfloat16")
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"


@only_tensorflow
def test_traced_sizes():
    # D-FINE's maps have traced sizes with image_shape=(None, None, 3).
    import tensorflow as tf

    spec = tf.TensorSpec([], tf.int32)

    @tf.function(input_signature=[spec, spec])
    def table(width, height):
        return rt_detr_sincos(width, height, 16)

    assert (
        max_diff(table(tf.constant(7), tf.constant(3)).numpy(), sincos64(7, 3, 16))
        < TOL
    )


def test_refuses_a_width_not_a_multiple_of_4():
    with pytest.raises(ValueError, match="`embedding_dim`, expected a multiple of 4"):
        rt_detr_sincos(4, 4, 6)


def _d_fine_backbone():
    hgnetv2 = keras_hub.models.HGNetV2Backbone(
        stem_channels=[3, 8, 8],
        stackwise_stage_filters=[[8, 8, 16, 1, 3, 3], [16, 8, 32, 1, 3, 3]],
        apply_downsample=[False, True],
        use_lightweight_conv_block=[False, False],
        depths=[1, 1],
        hidden_sizes=[16, 32],
        embedding_size=8,
        use_learnable_affine_block=True,
        hidden_act="relu",
        image_shape=(None, None, 3),
        out_features=["stage1", "stage2"],
        data_format="channels_last",
    )
    return keras_hub.models.DFineBackbone(
        backbone=hgnetv2,
        decoder_in_channels=[16, 16],
        encoder_hidden_dim=16,
        num_denoising=0,
        num_labels=4,
        hidden_dim=16,
        learn_initial_query=False,
        num_queries=5,
        anchor_image_size=(32, 32),
        feat_strides=[8, 16],
        num_feature_levels=2,
        encoder_in_channels=[16, 32],
        encode_proj_layers=[1],
        num_attention_heads=2,
        encoder_ffn_dim=16,
        num_encoder_layers=1,
        hidden_expansion=0.5,
        depth_multiplier=0.5,
        eval_idx=-1,
        num_decoder_layers=1,
        decoder_attention_heads=2,
        decoder_ffn_dim=16,
        decoder_n_points=[2, 2],
        lqe_hidden_dim=8,
        num_lqe_layers=1,
        out_features=["stage1", "stage2"],
        image_shape=(None, None, 3),
        data_format="channels_last",
        seed=0,
    )


def test_use_exact_on_a_d_fine_backbone(rng, exact_and_saved):
    # A tiny D-FINE of unknown image size, compiled (`predict_on_batch`):
    # the encoder stays the same object, weights and all, with the exact
    # sine; at these 4 x 6 maps keras-hub's is within float32 noise of it.
    backbone = _d_fine_backbone()
    images = rng.uniform(size=(2, 64, 96, 3)).astype("float32")
    encoder = backbone.encoder
    weights = [to_numpy(w) for w in encoder.weights]
    before = backbone.predict_on_batch(images)
    assert compat.use_exact(backbone) == 1
    assert backbone.encoder is encoder and isinstance(encoder, ExactSincos)
    assert type(encoder).__name__ == "DFineHybridEncoder"
    assert encoder.build_2d_sincos_position_embedding is rt_detr_sincos
    for a, b in zip(encoder.weights, weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), b)
    loaded = exact_and_saved(backbone, images, before, "d_fine.keras")
    assert isinstance(loaded.encoder, ExactSincos)
