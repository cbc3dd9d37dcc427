"""keras_posenc.compat: keras-hub's layers, arguments and models, made exact.

Every value is checked twice, independently: against the installed
keras-hub layer (same arguments, short positions, where its float32 angles
are still right) and against a float64 numpy formula written here from the
papers. The first group reproduces keras-hub 0.32's own tests of
`RotaryEmbedding` and `SinePositionEncoding` with keras-hub's own arguments.
"""

import math
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, keras, keras_file_round_trip, reference, to_numpy
from keras import ops

keras_hub = pytest.importorskip("keras_hub")

from keras_posenc import compat  # noqa: E402

keras3 = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")
# Float32 noise of one rotation or encoding (values of size ~1).
NOISE = 2e-6
# keras-hub's float32 angles are off by p * 2**-24: keep to short positions.
SHORT = 16


def _x(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype("float32")


def _rope64(x, positions, inv_freq, attention=1.0):
    """RoPE in float64, rotate-half layout: x [B, L, ..., D], positions [L]/[B, L]."""
    x = np.asarray(x, np.float64)
    angle = np.asarray(positions, np.float64)[..., None] * np.asarray(inv_freq)
    angle = np.broadcast_to(angle, (x.shape[0], *angle.shape[-2:]))
    angle = angle.reshape(angle.shape[:2] + (1,) * (x.ndim - 3) + angle.shape[-1:])
    cos = np.concatenate([np.cos(angle)] * 2, -1) * attention
    sin = np.concatenate([np.sin(angle)] * 2, -1) * attention
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + turned * sin


def _inv_freq(dim, base=10000.0):
    return base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def _both(layer_kwargs, x, **call):
    """(keras-hub's output, ours) for the same arguments and call."""
    theirs = keras_hub.layers.RotaryEmbedding(**layer_kwargs)(x, **call)
    ours = compat.RotaryEmbedding(**layer_kwargs)(x, **call)
    return to_numpy(theirs), to_numpy(ours)


# --- keras-hub's RotaryEmbedding tests, with its arguments ------------------


@keras3
@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (
            {"max_wavelength": 1000, "scaling_factor": 2.0, "sequence_axis": 1},
            (2, 4, 6),
        ),
        ({"max_wavelength": 1000}, (2, 8, 4, 6)),
    ],
    ids=["3d", "4d"],
)
def test_rotary_layer_behaviours(kwargs, shape):
    # keras-hub's `test_layer_behaviors`: config round trip, the same output
    # after it, keras-hub's values, and float64 ones.
    x = _x(shape)
    layer = compat.RotaryEmbedding(**kwargs)
    clone = compat.RotaryEmbedding.from_config(layer.get_config())
    out = to_numpy(layer(x))
    np.testing.assert_array_equal(to_numpy(clone(x)), out)
    theirs, _ = _both(kwargs, x)
    np.testing.assert_allclose(out, theirs, atol=NOISE)
    scale = kwargs.get("scaling_factor", 1.0)
    freqs = _inv_freq(6, kwargs["max_wavelength"]) / scale
    np.testing.assert_allclose(out, _rope64(x, np.arange(shape[1]), freqs), atol=NOISE)


@keras3
@pytest.mark.parametrize(
    "layer, shape",
    [
        ("RotaryEmbedding", (None, 32)),
        ("RotaryEmbedding", (None, 100, 32)),
        ("SinePositionEncoding", (100, 32)),
        ("SinePositionEncoding", (None, 32)),
        ("SinePositionEncoding", (None, 100, 32)),
    ],
    ids=[
        "rotary-dynamic",
        "rotary-multi_dimension",
        "sine-static",
        "sine-dynamic",
        "sine-multi_dimension",
    ],
)
def test_symbolic_output_shape(layer, shape):
    # keras-hub's static (sine), dynamic and multi-dimension output shape
    # tests of its RotaryEmbedding and SinePositionEncoding.
    outputs = getattr(compat, layer)()(keras.Input(shape=shape))
    assert tuple(outputs.shape) == (None, *shape)


@keras3
def test_rotary_output_correct_values():
    # keras-hub's `test_output_correct_values`: ones [1, 4, 6] in a Sequential.
    model = keras.Sequential([keras.Input(shape=(4, 6)), compat.RotaryEmbedding()])
    x = np.ones((1, 4, 6), "float32")
    out = to_numpy(model(x))
    np.testing.assert_allclose(out, _both({}, x)[0], atol=NOISE)
    np.testing.assert_allclose(out, _rope64(x, np.arange(4), _inv_freq(6)), atol=NOISE)


@keras3
def test_rotary_start_index_steps_equal_the_full_call():
    # keras-hub's `test_start_index` (max_wavelength = seq_length = 3).
    layer, x = compat.RotaryEmbedding(3), _x((2, 3, 4))
    steps = [to_numpy(layer(x[:, i : i + 1], start_index=i)) for i in range(3)]
    np.testing.assert_array_equal(np.concatenate(steps, 1), to_numpy(layer(x)))


@keras3
def test_rotary_permuted_axes():
    # keras-hub's `test_permuted_axes`: sequence_axis=-1, feature_axis=-2.
    x = _x((2, 3, 4))
    permuted = compat.RotaryEmbedding(3, sequence_axis=-1, feature_axis=-2)
    out = to_numpy(permuted(np.transpose(x, (0, 2, 1))))
    theirs = keras_hub.layers.RotaryEmbedding(3, sequence_axis=-1, feature_axis=-2)
    np.testing.assert_allclose(
        out, to_numpy(theirs(np.transpose(x, (0, 2, 1)))), atol=NOISE
    )
    expected = _rope64(x, np.arange(3), _inv_freq(4, 3.0))
    np.testing.assert_allclose(np.transpose(out, (0, 2, 1)), expected, atol=NOISE)


@keras3
def test_rotary_float16_output():
    # keras-hub's `test_float16_dtype`, with values: float32 maths, one cast.
    x = _x((1, 100, 32))
    out = compat.RotaryEmbedding(dtype="float16")(x.astype("float16"))
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    expected = _rope64(x.astype("float16"), np.arange(100), _inv_freq(32))
    np.testing.assert_allclose(to_numpy(out).astype(np.float64), expected, atol=2e-3)


@keras3
@pytest.mark.parametrize(
    "positions, shape",
    [([0, 0], (1, 2, 1, 16)), ([[0, 0], [0, 1]], (2, 2, 1, 16))],
    ids=["1d", "2d"],
)
def test_rotary_float_positions(positions, shape):
    # keras-hub's `test_positions_1d_array` / `_2d_array`: float32 positions.
    x = np.random.default_rng(0).standard_normal(size=shape).astype("float32")
    floats = ops.cast(positions, "float32")
    theirs, ours = _both({}, x, positions=floats)
    np.testing.assert_allclose(ours, theirs, atol=NOISE)
    np.testing.assert_allclose(ours, _rope64(x, positions, _inv_freq(16)), atol=NOISE)


@keras3
@pytest.mark.parametrize(
    "factor, start, length", [(2.0, 0, 3), (5.0, 12, 1)], ids=["scaling", "kv_cache"]
)
def test_rotary_scaling_factor(factor, start, length):
    # keras-hub's `test_rope_scaling` and `..._with_kv_cache` (Hugging Face's
    # linear scaling): ones [1, L, 2, 4], scaling_factor 2 and 5.
    x = np.ones((1, length, 2, 4), "float32")
    theirs, ours = _both({"scaling_factor": factor}, x, start_index=start)
    np.testing.assert_allclose(ours, theirs, atol=NOISE)
    expected = _rope64(x, np.arange(start, start + length), _inv_freq(4) / factor)
    np.testing.assert_allclose(ours, expected, atol=NOISE)


# --- keras-hub's scalings and arguments beyond its tests --------------------


def _dynamic_freqs(dim, factor):
    return _inv_freq(dim) / factor ** (dim / (dim - 2))


def _yarn_freqs(dim, factor, orig, truncate, base=10000.0):
    def correction(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(32.0), correction(1.0)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / max(high - low, 0.001), 0, 1)
    inv = _inv_freq(dim, base)
    return inv / factor * ramp + inv * (1 - ramp)


@keras3
@pytest.mark.parametrize(
    "kwargs, freqs, attention",
    [
        ({"rope_type": "dynamic", "scaling_factor": 4.0}, _dynamic_freqs(16, 4.0), 1),
        (
            {
                "rope_type": "yarn",
                "scaling_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            _yarn_freqs(16, 4.0, 64, True),
            0.1 * math.log(4.0) + 1,
        ),
        (
            {
                "rope_type": "yarn",
                "scaling_factor": 4.0,
                "original_max_position_embeddings": 64,
                "truncate": False,
            },
            _yarn_freqs(16, 4.0, 64, False),
            0.1 * math.log(4.0) + 1,
        ),
        ({"denominator_dim": 32, "scaling_factor": 2.0}, _inv_freq(32)[:8] / 2, 1),
    ],
    ids=["dynamic", "yarn", "yarn_untruncated", "denominator_dim"],
)
def test_rotary_scalings_match_keras_hub_and_float64(kwargs, freqs, attention):
    # keras-hub's "dynamic" (one division of every frequency), YaRN (its
    # attention factor 0.1 ln s + 1) and Gemma 4's denominator_dim.
    x = _x((2, 8, 3, 16))
    theirs, ours = _both(kwargs, x, start_index=5)
    np.testing.assert_allclose(ours, theirs, atol=NOISE)
    expected = _rope64(x, np.arange(5, 13), freqs, attention)
    np.testing.assert_allclose(ours, expected, atol=NOISE)


@keras3
def test_rotary_shared_positions_broadcast_over_the_batch():
    # keras-hub treats [1, L] positions as shared by every example.
    x = _x((3, 5, 2, 8))
    positions = np.array([[4.0, 5.0, 6.0, 7.0, 8.0]], "float32")
    theirs, ours = _both({}, x, positions=positions)
    np.testing.assert_allclose(ours, theirs, atol=NOISE)
    np.testing.assert_allclose(ours, _rope64(x, positions[0], _inv_freq(8)), atol=NOISE)


@keras3
def test_rotary_exact_at_long_positions():
    # Where keras-hub's float32 angles are off by ~0.06, ours are float32
    # rounding away from float64.
    x, start = _x((1, 8, 2, 64)), 10**6
    out = to_numpy(compat.RotaryEmbedding(500000)(x, start_index=start))
    expected = _rope64(x, np.arange(start, start + 8), _inv_freq(64, 500000.0))
    np.testing.assert_allclose(out, expected, atol=NOISE)


# --- keras-hub's SinePositionEncoding tests, with its arguments ------------


@keras3
@pytest.mark.parametrize("shape", [(2, 4, 6), (1, 2, 4, 6)], ids=["3d", "4d"])
def test_sine_layer_behaviours(shape):
    # keras-hub's `test_layer_behaviors`: config round trip, keras-hub's
    # values (sequence on axis -2, also on 4-D inputs) and float64 ones.
    x = _x(shape)
    layer = compat.SinePositionEncoding(max_wavelength=10000)
    clone = compat.SinePositionEncoding.from_config(layer.get_config())
    out = to_numpy(layer(x))
    np.testing.assert_array_equal(to_numpy(clone(x)), out)
    theirs = to_numpy(keras_hub.layers.SinePositionEncoding(max_wavelength=10000)(x))
    np.testing.assert_allclose(out, theirs, atol=NOISE)
    expected = np.broadcast_to(reference(np.arange(4), 6), shape)
    np.testing.assert_allclose(out, expected, atol=NOISE)


@keras3
def test_sine_output_correct_values():
    # keras-hub's `test_output_correct_values`, in a Sequential.
    model = keras.Sequential([keras.Input(shape=(4, 6)), compat.SinePositionEncoding()])
    out = to_numpy(model(_x((1, 4, 6))))
    np.testing.assert_allclose(out[0], reference(np.arange(4), 6), atol=NOISE)


@keras3
def test_sine_start_index_steps_equal_the_full_call():
    # keras-hub's `test_start_index`.
    layer, x = compat.SinePositionEncoding(), _x((2, 3, 4))
    steps = [to_numpy(layer(x[:, i : i + 1], start_index=i)) for i in range(3)]
    np.testing.assert_array_equal(np.concatenate(steps, 1), to_numpy(layer(x)))


@keras3
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_sine_positions(dtype):
    # keras-hub's `test_positions` ([[0, 1], [1, 0]]), as ints and as floats.
    positions = np.array([[0, 1], [1, 0]], dtype)
    x = _x((2, 2, 4))
    out = to_numpy(compat.SinePositionEncoding()(x, positions=positions))
    theirs = keras_hub.layers.SinePositionEncoding()(x, positions=positions)
    np.testing.assert_allclose(out, to_numpy(theirs), atol=NOISE)
    np.testing.assert_allclose(out, reference(positions, 4), atol=NOISE)


@keras3
def test_sine_exact_at_long_positions():
    # keras-hub's float32 angles are off by ~0.06 at 10**6; ours are not.
    out = compat.SinePositionEncoding()(_x((1, 4, 64)), start_index=10**6)
    expected = reference(np.arange(10**6, 10**6 + 4), 64)
    np.testing.assert_allclose(to_numpy(out)[0], expected, atol=NOISE)


# --- arguments refused by name ---------------------------------------------


@keras3
@pytest.mark.parametrize(
    "layer, call",
    [
        (compat.RotaryEmbedding, {"positions": np.array([0.0, 1.5])}),
        (compat.RotaryEmbedding, {"start_index": 2.5}),
        (compat.SinePositionEncoding, {"positions": np.array([[0.0, 0.25]])}),
    ],
    ids=["rotary_positions", "rotary_start", "sine_positions"],
)
def test_fractional_float_positions_are_refused(layer, call):
    # keras-hub would rotate by a fractional position; we never round one.
    name = next(iter(call))
    with pytest.raises(ValueError, match=f"`{name}`, expected integral positions"):
        layer()(_x((1, 2, 4)), **call)


@keras3
def test_traced_fractional_positions_never_give_a_plausible_row():
    # Inside a compiled predict the value is not known when traced: a TF
    # graph assertion fails, JAX gives NaN rows; torch runs eagerly (raises).
    tokens = keras.Input(shape=(2, 4))
    positions = keras.Input(shape=(2,))
    out = compat.RotaryEmbedding()(tokens, positions=positions)
    model = keras.Model([tokens, positions], out)
    bad = [_x((1, 2, 4)), np.array([[0.0, 0.5]], "float32")]
    if BACKEND == "jax":
        rows = model.predict(bad, verbose=0)
        assert np.isnan(rows[0, 1]).all() and np.isfinite(rows[0, 0]).all()
        return
    with pytest.raises(Exception, match="`positions`.*integral positions"):
        model.predict(bad, verbose=0)


def _refusals():
    x = _x((1, 2, 4))
    phi3 = {"inverese_freq_short_factor": [1.0], "inverese_freq_long_factor": [1.0]}
    return [
        (lambda: compat.RotaryEmbedding(rope_type="ntk"), "rope_type", "one of"),
        (lambda: compat.RotaryEmbedding(scaling_factor=0), "scaling_factor", "> 0"),
        (
            lambda: compat.RotaryEmbedding(beta_fast=8.0),
            "beta_fast",
            "rope_type='yarn'",
        ),
        (lambda: compat.RotaryEmbedding(truncate=1), "truncate", "a bool"),
        (
            lambda: compat.RotaryEmbedding(denominator_dim=0),
            "denominator_dim",
            "positive integer",
        ),
        (
            lambda: compat.RotaryEmbedding()(x, start_index=True),
            "start_index",
            "integral positions",
        ),
        (lambda: compat.RotaryEmbedding()(_x((1, 2, 5))), "inputs", "even feature"),
        (lambda: compat.RotaryEmbedding(sequence_axis=5)(x), "sequence_axis", "rank 3"),
        (
            lambda: compat.RotaryEmbedding(denominator_dim=2)(x),
            "inputs",
            "denominator_dim=2",
        ),
        (
            lambda: compat.RotaryEmbedding(rope_type="yarn", max_wavelength=1)(x),
            "max_wavelength",
            "other than 1",
        ),
        (
            lambda: compat.RotaryEmbedding(
                rope_type="yarn", beta_fast=1.0, beta_slow=1.0005, truncate=False
            )(x),
            "beta_fast",
            "YaRN ramp",
        ),
        (
            lambda: compat.SinePositionEncoding(max_wavelength=-1),
            "max_wavelength",
            "> 0",
        ),
        (lambda: compat.SinePositionEncoding()(np.zeros((2, 4))), "inputs", "rank 3"),
        (
            lambda: compat.RotaryEmbedding(denominator_dim=10**9),
            "denominator_dim",
            "a positive integer <= 65536",
        ),
        (
            lambda: compat.LlamaRotaryEmbedding(position_scaling_factor="4"),
            "position_scaling_factor",
            "a finite number > 0",
        ),
        (
            lambda: compat.LlamaRotaryEmbedding(low_freq_factor=1.0),
            "frequency_adjustment_factor",
            "other Llama 3",
        ),
        (
            lambda: compat.LlamaRotaryEmbedding(
                frequency_adjustment_factor=8.0,
                low_freq_factor=4.0,
                high_freq_factor=1.0,
                pretraining_sequence_length=64,
            ),
            "high_freq_factor",
            "> low_freq_factor",
        ),
        (
            lambda: compat.LlamaRotaryEmbedding.from_config(
                {"original_max_embeddings": 64, "pretraining_sequence_length": 32}
            ),
            "pretraining_sequence_length",
            "original_max_embeddings=64",
        ),
        (
            lambda: compat.ESMRotaryEmbedding.from_config({"sequence_axis": 2}),
            "sequence_axis",
            "ESMRotaryEmbedding ignores",
        ),
        (
            lambda: compat.ESMRotaryEmbedding()(x, x, position=2),
            "position",
            "no other axis",
        ),
        (
            lambda: compat.Phi3SuScaledRotaryEmbedding([], [1.0]),
            "inverese_freq_short_factor",
            "non-empty",
        ),
        (
            lambda: compat.Phi3SuScaledRotaryEmbedding(**phi3)(x),
            "inverese_freq_short_factor",
            "2 factors",
        ),
        (
            lambda: compat.Phi3SuScaledRotaryEmbedding(**phi3)(x, start_index=[0]),
            "start_index",
            "scalar",
        ),
        (
            lambda: compat.Phi3SuScaledRotaryEmbedding.from_config(
                {**phi3, "scaling_factor": 2.0}
            ),
            "scaling_factor",
            "Phi3SuScaledRotaryEmbedding ignores",
        ),
    ]


@keras3
@pytest.mark.parametrize("make, name, detail", _refusals())
def test_bad_arguments_are_refused_by_name(make, name, detail):
    # Every argument keras-hub would ignore or compute differently is an
    # error naming it, never a plausible layer.
    pattern = f"invalid value for `{name}`.*{re.escape(detail)}.*Received: {name}="
    with pytest.raises(ValueError, match=pattern):
        make()


@keras3
@pytest.mark.skipif(BACKEND != "tensorflow", reason="a TF graph of unknown width")
def test_a_layer_of_unknown_width_is_refused():
    # Its exact layer is made for a known feature dimension.
    import tensorflow as tf

    layer = compat.RotaryEmbedding()
    traced = tf.function(layer, input_signature=[tf.TensorSpec((1, 4, None))])
    with pytest.raises(ValueError, match="`inputs`, expected a known feature"):
        traced.get_concrete_function()


@pytest.mark.skipif(not LEGACY, reason="tf-keras pass only")
def test_under_tf_keras_it_imports_and_its_layers_refuse_to_be_made():
    # keras-hub has no tf-keras version: one clear error, not a broken layer.
    with pytest.raises(RuntimeError, match="Keras 3 only.*TF_USE_LEGACY_KERAS"):
        compat.RotaryEmbedding()


# --- use_exact on tiny random-weight keras-hub models -----------------------

_DECODER = {
    "vocabulary_size": 64,
    "num_layers": 1,
    "num_query_heads": 2,
    "num_key_value_heads": 1,
    "hidden_dim": 32,
    "intermediate_dim": 64,
}
_ENCODER = {
    "vocabulary_size": 64,
    "num_layers": 1,
    "num_heads": 2,
    "hidden_dim": 32,
    "intermediate_dim": 64,
}
_LLAMA3 = {
    "rope_max_wavelength": 500000.0,
    "rope_frequency_adjustment_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_pretraining_sequence_length": 32,
}
_PHI3_SU = {
    "max_sequence_length": 64,
    "pretraining_sequence_length": 16,
    "rope_scaling_type": "su",
    "rope_scaling_short_factor": [1.0 + i / 8 for i in range(8)],
    "rope_scaling_long_factor": [2.0 + i for i in range(8)],
}
_MOE = {"moe_intermediate_dim": 16, "num_experts": 2, "top_k": 1}
# family: (backbone class name, arguments, position layers it holds)
FAMILIES = {
    "llama3": ("LlamaBackbone", {**_DECODER, **_LLAMA3}, 1),
    "mistral": ("MistralBackbone", {**_DECODER, "rope_scaling_factor": 2.0}, 1),
    "mixtral": ("MixtralBackbone", {**_DECODER, "num_experts": 2}, 1),
    "gemma": ("GemmaBackbone", {**_DECODER, "head_dim": 16}, 1),
    "gemma3": (
        "Gemma3Backbone",
        {
            **_DECODER,
            "head_dim": 16,
            "image_size": 16,
            "global_rope_scaling_factor": 8.0,
        },
        1,
    ),
    "gemma4_partial": (
        "Gemma4Backbone",
        {
            **_DECODER,
            "head_dim": 16,
            "image_size": 16,
            "sliding_window_pattern": 2,
            "global_rope_partial_rotary_factor": 0.5,
        },
        1,
    ),
    "phi3_su": ("Phi3Backbone", {**_DECODER, **_PHI3_SU}, 1),
    "qwen": ("QwenBackbone", _DECODER, 1),
    "qwen3": ("Qwen3Backbone", {**_DECODER, "head_dim": 16}, 1),
    "qwen_moe": (
        "QwenMoeBackbone",
        {**_DECODER, **_MOE, "shared_expert_intermediate_dim": 16},
        1,
    ),
    "qwen3_moe": ("Qwen3MoeBackbone", {**_DECODER, **_MOE, "head_dim": 16}, 1),
    "qwen3_5": (
        "Qwen3_5Backbone",
        {
            **_DECODER,
            "head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 2,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "layer_types": ["full_attention"],
        },
        1,
    ),
    "gpt_neox": ("GPTNeoXBackbone", _ENCODER, 1),
    # keras-hub's own test config: int(16 * 0.05) == 0 features rotate.
    "gpt_neox_no_rotation": (
        "GPTNeoXBackbone",
        {**_ENCODER, "rotary_percentage": 0.05},
        1,
    ),
    # keras-hub ignores this factor: its values are those of 1.0.
    "llama_position_scaling": (
        "LlamaBackbone",
        {**_DECODER, "rope_position_scaling_factor": 4.0},
        1,
    ),
    "gpt_oss": (
        "GptOssBackbone",
        {**_DECODER, "num_experts": 2, "rope_scaling_factor": 4.0},
        1,
    ),
    "esm": ("ESMBackbone", {**_ENCODER, "dropout": 0.0}, 1),
}


def _backbone(family):
    name, arguments, _ = FAMILIES[family]
    return getattr(keras_hub.models, name)(**arguments)


def _inputs(family, length=12, start=1):
    ids = (np.arange(length)[None] % 60 + start).astype("int32")
    if family == "esm":
        return {"token_ids": ids}
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    if family.startswith("gemma4"):
        x["position_ids"] = np.arange(length, dtype="int32")[None]
    return x


def _outputs(model, x):
    return [to_numpy(t) for t in keras.tree.flatten(model(x))]


def _assert_close(after, before):
    for a, b in zip(after, before, strict=True):
        np.testing.assert_allclose(a, b, atol=NOISE * max(1.0, np.abs(b).max()))


@keras3
@pytest.mark.parametrize(
    "family",
    # Qwen 3.5's layers take ~50 s eagerly on JAX.
    [
        f if f != "qwen3_5" else pytest.param(f, marks=pytest.mark.slow)
        for f in FAMILIES
    ],
)
@pytest.mark.filterwarnings("ignore:keras-hub's LlamaRotaryEmbedding ignores")
def test_use_exact_keeps_a_model_s_outputs_at_short_positions(family):
    # Every keras-hub family that uses these layers: each one replaced,
    # outputs within float32 noise of keras-hub's.
    backbone, x = _backbone(family), _inputs(family)
    before = _outputs(backbone, x)
    assert compat.use_exact(backbone) == FAMILIES[family][2]
    _assert_close(_outputs(backbone, x), before)


@keras3
def test_a_zero_width_rotation_is_the_identity():
    # GPT-NeoX slices int(head_size * rotary_percentage) == 0 features: the
    # drop-in returns them as they are, as keras-hub's layer does.
    x = _x((2, 5, 3, 0))
    out = compat.RotaryEmbedding()(x, start_index=7)
    assert tuple(out.shape) == (2, 5, 3, 0)


@keras3
def test_llama_position_scaling_factor_is_ignored_with_a_warning():
    # keras-hub's layer gives the same values at 4.0 and 1.0: so does the
    # drop-in, and it says so.
    x = _x((1, 6, 2, 8))
    warning = r"ignores `position_scaling_factor` \(here 4.0"
    with pytest.warns(UserWarning, match=warning):
        scaled = compat.LlamaRotaryEmbedding(position_scaling_factor=4.0)
    plain = compat.LlamaRotaryEmbedding()
    np.testing.assert_array_equal(to_numpy(scaled(x)), to_numpy(plain(x)))
    assert scaled.get_config()["position_scaling_factor"] == 4.0


@keras3
def test_use_exact_twice_replaces_nothing_more():
    # A model already exact is left as it is.
    backbone = _backbone("llama3")
    assert compat.use_exact(backbone) == 1
    assert compat.use_exact(backbone) == 0


@keras3
@pytest.mark.parametrize(
    "family, task, length",
    [
        ("llama3", "LlamaCausalLM", 8),
        ("phi3_su", "Phi3CausalLM", 8),
        ("gemma", "GemmaCausalLM", 8),
        # Longer than a decoding step: the eager steps (torch) read the rows
        # the padded prompt kept.
        ("llama3", "LlamaCausalLM", 80),
    ],
)
def test_generate_after_use_exact(family, task, length):
    # keras-hub's cached decoding (start_index per step) on the exact layers
    # gives the greedy tokens it gave before (random weights, short prompt).
    lm = getattr(keras_hub.models, task)(backbone=_backbone(family), preprocessor=None)
    lm.compile(sampler="greedy")
    known = np.arange(length) < 3
    prompt = {
        "token_ids": np.where(known, np.arange(5, 5 + length), 0)[None].astype("int32"),
        "padding_mask": known[None].astype("int32"),
    }
    before = lm.generate(prompt, stop_token_ids=None)
    assert compat.use_exact(lm) == 1
    after = lm.generate(prompt, stop_token_ids=None)
    np.testing.assert_array_equal(after["token_ids"], before["token_ids"])


@keras3
@pytest.mark.parametrize("family", ["llama3", "phi3_su", "esm"])
def test_saved_after_use_exact_loads_exact_with_the_same_outputs(family, tmp_path):
    # The .keras file rebuilds keras-hub's model, then its exact layers.
    backbone, x = _backbone(family), _inputs(family)
    compat.use_exact(backbone)
    loaded = keras_file_round_trip(backbone, tmp_path / "model.keras")
    kinds = {type(layer).__module__ for layer in _position_layers(loaded)}
    assert kinds and all(k.startswith("keras_posenc.compat") for k in kinds)
    _assert_close(_outputs(loaded, x), _outputs(backbone, x))


@keras3
def test_pickled_after_use_exact_loads_exact_with_the_same_outputs():
    # multiprocessing, joblib and Ray pickle models: the class use_exact
    # makes at run time pickles as the model's .keras file.
    backbone, x = _backbone("llama3"), _inputs("llama3")
    compat.use_exact(backbone)
    loaded = pickle.loads(pickle.dumps(backbone))
    kinds = {type(layer).__module__ for layer in _position_layers(loaded)}
    assert kinds and all(k.startswith("keras_posenc.compat") for k in kinds)
    _assert_close(_outputs(loaded, x), _outputs(backbone, x))


# A fresh interpreter that imports keras_posenc only, loads a `.keras` file,
# and prints what it got: its class, what it imported, its largest error.
_LOAD_AFTER_IMPORT = """
import sys, numpy as np, keras, keras_posenc
from keras import ops
imported = ["keras_hub" in sys.modules, "keras_posenc.compat" in sys.modules]
model = keras.saving.load_model(sys.argv[1])
x = dict(np.load(sys.argv[2]))
out = keras.tree.flatten(model(x if len(x) > 1 else x["x"]))[0]
error = float(np.abs(ops.convert_to_numpy(out) - np.load(sys.argv[3])).max())
print(f"{type(model).__module__}.{type(model).__name__}", *imported, error)
"""


def _load_fresh(tmp_path, model, x):
    path = str(tmp_path / "model.keras")
    model.save(path)
    np.savez(tmp_path / "x.npz", **(x if isinstance(x, dict) else {"x": x}))
    want = keras.tree.flatten(model(x))[0]
    np.save(tmp_path / "want.npy", to_numpy(want))
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AFTER_IMPORT, path]
        + [str(tmp_path / "x.npz"), str(tmp_path / "want.npy")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kind, hub_at_import, compat_at_import, error = done.stdout.split()[-4:]
    # `import keras_posenc` imports neither: the file's load does.
    assert (hub_at_import, compat_at_import) == ("False", "False")
    return kind, float(error)


@keras3
def test_saved_after_use_exact_loads_in_a_fresh_process_after_import_keras_posenc(
    tmp_path,
):
    # It failed there with "Could not locate class 'LlamaBackbone'" until
    # keras_hub and keras_posenc.compat were imported by hand.
    backbone, x = _backbone("llama3"), _inputs("llama3")
    compat.use_exact(backbone)
    kind, error = _load_fresh(tmp_path, backbone, x)
    assert kind == "keras_posenc.compat._swap.LlamaBackbone"  # made exact again
    assert error <= NOISE


@keras3
def test_a_compat_layer_file_loads_in_a_fresh_process_after_import_keras_posenc(
    tmp_path,
):
    inputs = keras.Input((None, 2, 16))
    model = keras.Model(inputs, compat.RotaryEmbedding(scaling_factor=2.0)(inputs))
    _, error = _load_fresh(tmp_path, model, _x((1, 6, 2, 16)))
    assert error == 0.0


@keras3
def test_import_stands_in_for_every_name_compat_registers():
    from keras_posenc._files import registered

    names = {
        key.split(">", 1)[1]
        for key in keras.saving.get_custom_objects()
        if key.startswith("keras_posenc>KerasHub")
    }
    assert names == set(registered.COMPAT_NAMES)


@keras3
def test_pickled_after_use_exact_loads_in_a_fresh_process(tmp_path):
    # A fresh interpreter (as a spawned worker) imports what the pickle names.
    backbone, x = _backbone("llama3"), _inputs("llama3")
    compat.use_exact(backbone)
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(backbone))
    np.save(tmp_path / "want.npy", _outputs(backbone, x)[0])
    script = (
        "import pickle, sys, numpy as np\n"
        "from keras import ops\n"
        f"model = pickle.loads(open({str(tmp_path / 'model.pkl')!r}, 'rb').read())\n"
        "ids = (np.arange(12)[None] % 60 + 1).astype('int32')\n"
        "out = model({'token_ids': ids, 'padding_mask': np.ones_like(ids)})\n"
        f"want = np.load({str(tmp_path / 'want.npy')!r})\n"
        "print(type(model).__mro__[1].__module__,"
        " float(np.abs(ops.convert_to_numpy(out) - want).max()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    module, error = done.stdout.split()[-2:]
    assert module == "keras_posenc.compat._swap"
    assert float(error) <= NOISE


def _position_layers(model):
    found = []
    for layer in model._flatten_layers(include_self=False):
        if "Rotary" in type(layer).__name__ or "Sine" in type(layer).__name__:
            found.append(layer)
    return found


class _Holder(keras.layers.Layer if not LEGACY else object):
    """A layer holding other layers, as attention layers hold theirs."""

    def __init__(self, *layers):
        super().__init__()
        self.held = list(layers)


@keras3
def test_moonshine_rotary_layer_is_refused_and_nothing_changes():
    # It returns angles, not rotated inputs: no exact drop-in exists.
    from keras_hub.src.models.moonshine.moonshine_layers import (
        MoonshineRotaryEmbedding,
    )

    plain = keras_hub.layers.RotaryEmbedding()
    holder = _Holder(plain, MoonshineRotaryEmbedding(head_dim=16))
    with pytest.raises(ValueError, match="MoonshineRotaryEmbedding.*returns float32"):
        compat.use_exact(holder)
    assert type(plain) is keras_hub.layers.RotaryEmbedding


@keras3
def test_an_unknown_subclass_is_refused_by_name():
    # What a subclass computes is not known: never swapped for the base.
    class ScaledRope(keras_hub.layers.RotaryEmbedding):
        pass

    with pytest.raises(ValueError, match="ScaledRope.*does not know what it computes"):
        compat.use_exact(_Holder(ScaledRope()))


@keras3
def test_multimodal_qwen3_5_rotation_is_refused():
    # Its owner rotates by sections from the layer's float32 frequencies.
    name, arguments, _ = FAMILIES["qwen3_5"]
    backbone = keras_hub.models.Qwen3_5Backbone(**arguments, mrope_section=[2, 1, 1])
    with pytest.raises(ValueError, match="mrope_section=\\[2, 1, 1\\]"):
        compat.use_exact(backbone)


@keras3
def test_other_rotary_code_is_left_with_a_warning():
    # RoFormer's own rotary layer is no keras-hub position layer: named.
    from keras_hub.src.models.roformer_v2.roformer_v2_attention import (
        RoformrPositionalEmbedding,
    )

    holder = _Holder(RoformrPositionalEmbedding(output_dim=8, max_wavelength=100))
    with pytest.warns(UserWarning, match="RoformrPositionalEmbedding"):
        assert compat.use_exact(holder) == 0


# --- keras-hub's AlibiBias tests, on the drop-in ----------------------------------

# keras-hub 0.32's alibi_bias_test.py expected values (1 query, 3 keys).
_HUB_ALIBI_CASES = {
    (8, 8): [2.0**-k for k in range(0, 8)],
    (8, 14): [2.0**-k for k in range(0, 8)] + [2**0.5 * 2.0**-k for k in range(6)],
    (12, 2): [0.03125, 0.00048828],
    (6, 3): [0.25, 0.03125, 0.70710677],
}


@keras3
@pytest.mark.parametrize("bias_max, heads", list(_HUB_ALIBI_CASES))
def test_alibi_keras_hub_correct_outputs(bias_max, heads):
    # keras-hub's test_correct_output* cases: rows [-2s, -s, 0] per head.
    out = compat.AlibiBias(alibi_bias_max=bias_max)(ops.zeros((1, heads, 1, 3)))
    scale = np.array(_HUB_ALIBI_CASES[bias_max, heads])[:, None] / 2
    want = scale * np.array([-2.0, -1.0, 0.0])
    np.testing.assert_allclose(to_numpy(out)[0, :, 0], want, rtol=1e-5)


@keras3
def test_alibi_keras_hub_layer_behaviours_and_shapes():
    # keras-hub's layer-behaviour, dynamic-shape, float16 and rank tests.
    layer = compat.AlibiBias(alibi_bias_max=8)
    again = compat.AlibiBias.from_config(layer.get_config())
    assert again.get_config() == layer.get_config()
    symbolic = compat.AlibiBias()(keras.Input(shape=(4, 10, 10)))
    assert tuple(symbolic.shape) == (None, 4, 10, 10)
    half = compat.AlibiBias(dtype="float16")(keras.Input(shape=(8, 5, 10)))
    assert half.dtype == "float16"
    assert tuple(compat.AlibiBias()(_x((1, 12, 12, 12))).shape) == (1, 12, 12, 12)
    with pytest.raises(ValueError, match="`attention_scores`, expected a tensor"):
        compat.AlibiBias()(_x((12, 12)))


@keras3
def test_alibi_equals_keras_hub_and_keeps_long_distances_exact():
    # Same values as keras-hub's float32 layer where its distances are exact;
    # under mixed_bfloat16 keras-hub rounds distance 1001 to 1000, this not.
    scores = _x((2, 6, 3, 50))
    theirs = keras_hub.layers.AlibiBias()(scores)
    np.testing.assert_allclose(
        to_numpy(compat.AlibiBias()(scores)), to_numpy(theirs), atol=1e-6
    )
    layer = compat.AlibiBias(alibi_bias_max=1, dtype="mixed_bfloat16")
    out = to_numpy(ops.cast(layer(np.zeros((1, 1, 1, 1002), "float32")), "float32"))
    want = to_numpy(ops.cast(-0.5 * np.arange(1001.0, -1, -1), "bfloat16"))
    np.testing.assert_array_equal(out[0, 0, 0], want.astype("float32"))


@keras3
def test_use_exact_swaps_bloom_alibi_and_warns_for_falcon():
    bloom = keras_hub.models.BloomBackbone(
        vocabulary_size=50,
        num_layers=1,
        num_heads=6,
        hidden_dim=24,
        intermediate_dim=32,
    )
    x = {"token_ids": np.array([[1, 2, 3, 4]]), "padding_mask": np.ones((1, 4))}
    before = to_numpy(bloom(x))
    assert compat.use_exact(bloom) == 1
    np.testing.assert_allclose(to_numpy(bloom(x)), before, atol=1e-6)
    # Falcon's decoder builds its ALiBi in a method: no layer to replace.
    from keras_hub.src.models.falcon.falcon_transformer_decoder import (
        FalconTransformerDecoder,
    )

    falcon = _Holder(FalconTransformerDecoder(2, 8))
    with pytest.warns(UserWarning, match="ALiBi bias of keras-hub's Falcon"):
        assert compat.use_exact(falcon) == 0


@keras3
@pytest.mark.parametrize(
    "kwargs, name, detail",
    [
        (
            {"beta_slow": 1e308},
            "beta_slow",
            "original_max_position_embeddings / (beta_slow * 2 pi) is a finite "
            "number > 0 in float64 (the YaRN ramp is its logarithm); it is 0.0",
        ),
        (
            {"beta_fast": 5e-324},
            "beta_fast",
            "original_max_position_embeddings / (beta_fast * 2 pi) is a finite "
            "number > 0 in float64 (the YaRN ramp is its logarithm); it is inf",
        ),
        (
            {"original_max_position_embeddings": 10**400},
            "original_max_position_embeddings",
            "a positive integer below 1.798e+308 with rope_type='yarn'",
        ),
        ({"max_wavelength": 1.0}, "max_wavelength", "a base other than 1"),
    ],
    ids=["beta-slow-huge", "beta-fast-tiny", "length-past-float64", "base-1"],
)
def test_out_of_range_yarn_arguments_are_refused_at_construction(kwargs, name, detail):
    # keras-hub's ramp takes logarithms of these: found at construction,
    # not as a math domain error or OverflowError at the first call.
    pattern = f"invalid value for `{name}`.*{re.escape(detail)}.*Received: {name}="
    with pytest.raises(ValueError, match=pattern):
        compat.RotaryEmbedding(rope_type="yarn", scaling_factor=4.0, **kwargs)


@keras3
@pytest.mark.parametrize(
    "kwargs, name, detail",
    [
        (
            {"scaling_factor": 4e-5},
            "scaling_factor",
            "a factor above e**-10 (about 4.54e-05) with rope_type='yarn': "
            "keras-hub's attention factor 0.1 ln(scaling_factor) + 1 is -0.0126",
        ),
        (
            {"beta_fast": 1.0, "beta_slow": 2.0, "truncate": False},
            "beta_fast",
            "a value above beta_slow=2.0 with rope_type='yarn' and truncate=False: "
            "the YaRN ramp ends before it starts at every rotary dimension",
        ),
        (
            {"max_wavelength": 0.5, "truncate": False},
            "max_wavelength",
            "a base above 1 with beta_fast > beta_slow=1.0 with rope_type='yarn' "
            "and truncate=False: the YaRN ramp ends before it starts",
        ),
    ],
    ids=["attention-factor-negative", "betas-swapped", "base-below-1"],
)
def test_yarn_arguments_refused_at_every_width_are_refused_at_construction(
    kwargs, name, detail
):
    # None of these depends on the rotary dimension (unknown until the first
    # call): the first call refused each of them at every width, naming
    # `rope_scaling` (an argument the caller never gave) or `beta_fast`.
    pattern = f"invalid value for `{name}`.*{re.escape(detail)}.*Received: {name}="
    with pytest.raises(ValueError, match=pattern):
        compat.RotaryEmbedding(rope_type="yarn", **kwargs)


@keras3
def test_a_yarn_ramp_too_narrow_at_one_width_is_refused_at_its_first_call():
    # A ramp of d ln(1.0005) / (2 ln 10000) dimensions: 1.1e-4 at rotary
    # dimension 4 (keras-hub would widen it, transformers would not), 1.7e-3
    # at 64. The layer is valid, so construction accepts it; the call at
    # width 4 is refused naming the argument, its value and the width.
    layer = compat.RotaryEmbedding(
        rope_type="yarn", beta_fast=1.0005, beta_slow=1.0, truncate=False
    )
    assert to_numpy(layer(_x((1, 2, 1, 64)))).shape == (1, 2, 1, 64)
    pattern = (
        r"invalid value for `beta_fast`, expected a YaRN ramp of 0 or at least "
        r"0.001 dimensions .* at rotary dim 4 it is 0.000108.*Received: "
        r"beta_fast=1.0005"
    )
    with pytest.raises(ValueError, match=pattern):
        layer(_x((1, 2, 1, 4)))


@keras3
@pytest.mark.parametrize("make", ["RotaryEmbedding", "LlamaRotaryEmbedding"])
def test_a_feature_axis_outside_the_inputs_is_refused_by_name(make):
    # An int64-sized axis gave IndexError ("cannot fit 'int' into an index").
    layer = getattr(compat, make)(feature_axis=2**63)
    pattern = (
        r"invalid value for `feature_axis`, expected an axis of inputs of rank 4. "
        r"Received: feature_axis=9223372036854775808"
    )
    with pytest.raises(ValueError, match=pattern):
        layer(np.ones((1, 3, 2, 8), "float32"))
