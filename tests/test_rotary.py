"""`keras_posenc.rotary`: `RotaryEmbedding`, `rotary_cos_sin`, `apply_rotary`.

HF goldens, exactness, multimodal sections, decoding, export, and errors in
the layer's own arguments and inputs (axes, `rotary_dim` against the input
width, dtypes); the RoPE configuration's errors are in test_rope_config.py.
"""

import json
import os
import re

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    LLAMA3,
    MROPE,
    TOL,
    data_dependent_conditionals,
    exact,
    float_divisions,
    keras,
    only_tensorflow,
    to_numpy,
)
from keras import backend as keras_backend
from keras import ops

from keras_posenc._rope.config import RopeConfig
from keras_posenc.rotary import RotaryEmbedding, apply_rotary, rotary_cos_sin

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "rope")
with open(os.path.join(GOLDEN, "cases.json")) as _f:
    CASES = json.load(_f)
CASE_IDS = [case["name"] for case in CASES]
LAYOUTS = ("half", "interleaved")
# HF float32 angles p * inv_freq are off by up to ~1.2e-4 at p < 4096 (cases.json).
HF_TOL = 2e-4


def _golden(case):
    names = ("inv_freq", "inv_freq64", "positions", "cos", "sin", "q", "q_rotated")
    return {k: np.load(os.path.join(GOLDEN, f"{case['name']}.{k}.npy")) for k in names}


def _from_case(case, **kwargs):
    return RotaryEmbedding.from_hf_config(
        case["hf_config"], seq_len=case["seq_len"], **kwargs
    )


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _default_freqs(dim, theta=10000.0):
    return theta ** (-np.arange(0, dim, 2) / dim)


def _rotate64(x, angles, layout="half", factor=1.0):
    """float64 RoPE of the first `2n` features of `x [B, L, ..., D]`.

    `angles` is `[L, n]` or `[B, L, n]`; the other features pass through.
    """
    x = np.asarray(x, np.float64)
    n = angles.shape[-1]
    lead = angles.shape[:-1] if angles.ndim == 3 else (1,) + angles.shape[:-1]
    shape = lead + (1,) * (x.ndim - 3) + (n,)
    c = (np.cos(angles) * factor).reshape(shape)
    s = (np.sin(angles) * factor).reshape(shape)
    out = x.copy()
    if layout == "half":
        a, b = x[..., :n], x[..., n : 2 * n]
        out[..., :n], out[..., n : 2 * n] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0 : 2 * n : 2], x[..., 1 : 2 * n : 2]
        out[..., 0 : 2 * n : 2], out[..., 1 : 2 * n : 2] = a * c - b * s, b * c + a * s
    return out


def _fma_tol(out):
    # XLA may fuse x * cos + y * sin into an FMA: 2 ulps of the largest output.
    return 2 * float(np.spacing(np.float32(np.abs(out).max())))


def _rotation_tol(x, factor=1.0):
    # cos and sin within TOL each, plus float32 rounding of the products and sum.
    return factor * float(np.abs(x).max()) * (2 * TOL + 2.0**-23)


# -- the layer ------------------------------------------------------------------


def test_layer_behaviours():
    # Config round trip, symbolic call, eager call against float64, one training step.
    layer = RotaryEmbedding(max_wavelength=500000.0, rotary_dim=8)
    clone = RotaryEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    inputs = keras.Input(shape=(None, 2, 16))
    outputs = keras.layers.Dense(3)(layer(inputs))
    model = keras.Model(inputs, outputs)
    assert tuple(layer.compute_output_shape((None, None, 2, 16))) == (None, None, 2, 16)
    assert model.count_params() == 16 * 3 + 3  # the layer has no weights
    x = _x((2, 10, 2, 16))
    angles = np.arange(10)[:, None] * _default_freqs(8, 500000.0)
    np.testing.assert_allclose(
        to_numpy(layer(x)), _rotate64(x, angles), rtol=0, atol=_rotation_tol(x)
    )
    model.compile("sgd", "mse")
    history = model.fit(x, np.zeros((2, 10, 2, 3), "float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(2, 7, 3, 16), (2, 7, 16)], ids=["BLHD", "BLD"])
def test_layouts_match_float64_rotation(layout, shape):
    # Half (rotate_half) and interleaved (pairs 2i, 2i+1), on rank 4 and rank 3.
    x = _x(shape)
    out = to_numpy(RotaryEmbedding(layout=layout)(x, start_index=5))
    angles = (5 + np.arange(7))[:, None] * _default_freqs(16)
    want = _rotate64(x, angles, layout)
    np.testing.assert_allclose(out, want, rtol=0, atol=_rotation_tol(x))


def test_partial_rotary_passes_the_rest_through():
    # The first rotary_dim features rotate; the others are returned bit for bit.
    x = _x((1, 9, 2, 12))
    out = to_numpy(RotaryEmbedding(rotary_dim=4)(x))
    np.testing.assert_array_equal(out[..., 4:], x[..., 4:])
    angles = np.arange(9)[:, None] * _default_freqs(4)
    np.testing.assert_allclose(out, _rotate64(x, angles), atol=_rotation_tol(x))


def test_other_sequence_and_feature_axes():
    # [batch, heads, length, dim] and [batch, dim, length]: the same rotation.
    x = _x((2, 5, 3, 8))
    want = to_numpy(RotaryEmbedding()(x))
    heads_first = np.transpose(x, (0, 2, 1, 3))
    out = to_numpy(RotaryEmbedding(sequence_axis=2)(heads_first))
    np.testing.assert_array_equal(np.transpose(out, (0, 2, 1, 3)), want)
    channels_first = np.transpose(x[:, :, 0], (0, 2, 1))
    out = to_numpy(RotaryEmbedding(sequence_axis=-1, feature_axis=1)(channels_first))
    np.testing.assert_array_equal(np.transpose(out, (0, 2, 1)), want[:, :, 0])


def test_per_example_start_index_and_positions():
    # Left padding: per-example offsets [B] and positions [B, L], negatives too.
    x = _x((3, 6, 2, 8))
    layer = RotaryEmbedding()
    starts = np.array([0, 7, 2**20])  # float64 angles stay exact to 1e-10 here
    out = to_numpy(layer(x, start_index=ops.convert_to_tensor(starts, "int32")))
    angles = (starts[:, None] + np.arange(6))[..., None] * _default_freqs(8)
    np.testing.assert_allclose(out, _rotate64(x, angles), atol=_rotation_tol(x))
    positions = np.array(
        [[0, 0, 0, 1, 2, 3], [-3, -2, -1, 0, 1, 2], [5, 4, 3, 2, 1, 0]]
    )
    out = to_numpy(layer(x, positions=ops.convert_to_tensor(positions, "int32")))
    angles = positions[..., None] * _default_freqs(8)
    np.testing.assert_allclose(out, _rotate64(x, angles), atol=_rotation_tol(x))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_step_by_step_decoding_is_bit_identical_to_the_full_call(layout):
    # Cached decoding (start_index=t, one token) gives the full call's bits,
    # across a 64-position block boundary of the engine.
    x = _x((2, 20, 2, 8))
    layer = RotaryEmbedding(layout=layout)
    offset = 2**28 + 50
    full = to_numpy(layer(x, start_index=offset))
    steps = [
        to_numpy(layer(x[:, t : t + 1], start_index=offset + t)) for t in range(20)
    ]
    np.testing.assert_array_equal(np.concatenate(steps, axis=1), full)
    starts = ops.convert_to_tensor([offset, 3], "int32")
    per_example = to_numpy(layer(x[:, 10:], start_index=starts + 10))
    np.testing.assert_array_equal(per_example[0], full[0, 10:])
    positions = ops.convert_to_tensor([[offset + 19], [offset + 19]], "int32")
    np.testing.assert_array_equal(
        to_numpy(layer(x[:, 19:], positions=positions)), full[:, 19:]
    )


def test_relative_property():
    # <R_p q, R_k k> depends on p - k only, even far out (2**30 + 5 vs 5).
    q, k = _x((1, 1, 1, 64), 1), _x((1, 1, 1, 64), 2)
    layer = RotaryEmbedding()

    def score(p, j):
        rq = to_numpy(layer(q, start_index=p)).astype(np.float64)
        rk = to_numpy(layer(k, start_index=j)).astype(np.float64)
        return float(np.sum(rq * rk))

    near, far = score(5, 0), score(2**30 + 5, 2**30)
    tol = 64 * 4 * TOL * float(np.abs(q).max() * np.abs(k).max())
    assert abs(near - far) <= tol
    assert abs(score(2**30, 2**30) - float(np.sum(q * k))) <= tol


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_rounds_the_float32_result_once(policy):
    # 16-bit in, 16-bit out, equal to the float32 rotation rounded once.
    keras.mixed_precision.set_global_policy(policy)
    dtype = policy.split("_")[1]
    x16 = ops.cast(_x((2, 50, 2, 16)), dtype)
    out = RotaryEmbedding()(x16, start_index=4000)
    assert keras_backend.standardize_dtype(out.dtype) == dtype
    exact = RotaryEmbedding(dtype="float32")(ops.cast(x16, "float32"), start_index=4000)
    np.testing.assert_array_equal(
        to_numpy(ops.cast(out, "float32")),
        to_numpy(ops.cast(ops.cast(exact, dtype), "float32")),
    )


def test_keras_hub_agrees_at_small_positions():
    # Where keras-hub's float32 angles are still accurate, the layers agree.
    keras_hub = pytest.importorskip("keras_hub")
    if LEGACY:
        pytest.skip("keras-hub layers are Keras 3 layers")
    inputs = keras.Input(shape=(32, 2, 16))
    linear = {"rope_type": "linear", "factor": 4.0}
    outputs = [
        RotaryEmbedding()(inputs),
        keras_hub.layers.RotaryEmbedding()(inputs),
        RotaryEmbedding(rope_scaling=linear)(inputs),
        keras_hub.layers.RotaryEmbedding(scaling_factor=4.0)(inputs),
    ]
    # One compiled call for all four layers (eager keras-hub is slow on JAX).
    ours, hub, ours_linear, hub_linear = keras.Model(inputs, outputs).predict_on_batch(
        _x((2, 32, 2, 16))
    )
    np.testing.assert_allclose(ours, hub, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours_linear, hub_linear, rtol=0, atol=1e-5)


# -- Hugging Face goldens -----------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_frequencies_and_attention_factor_match_hf(case):
    # Our frequencies are HF's formula in float64 (not HF's float32 rounding).
    layer = _from_case(case)
    assert layer.rotary_dim == case["dim"]
    freqs = layer.rope_config.frequencies(layer.rotary_dim)
    want = _golden(case)["inv_freq64"]
    np.testing.assert_allclose(freqs, want, rtol=1e-12, atol=0)
    assert layer.attention_factor == case["attention_factor"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_cos_sin_exact_for_hf_inv_freq(case):
    # With HF's float32 inv_freq taken as exact, cos and sin are within 2e-7.
    g, factor = _golden(case), case["attention_factor"]
    layer = _from_case(case)
    cos, sin = rotary_cos_sin(
        g["positions"],
        case["dim"],
        rope_scaling=layer.rope_scaling,
        inverse_frequencies=g["inv_freq"],
    )
    angles = g["positions"][:, None] * g["inv_freq"].astype(np.float64)
    angles = np.concatenate([angles, angles], axis=-1)
    np.testing.assert_allclose(
        to_numpy(cos), np.cos(angles) * factor, rtol=0, atol=TOL * factor
    )
    np.testing.assert_allclose(
        to_numpy(sin), np.sin(angles) * factor, rtol=0, atol=TOL * factor
    )


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_hf_float32_angles_are_the_larger_error(case):
    # HF's own cos error (as cases.json records it) is over 50x our bound.
    g, factor = _golden(case), case["attention_factor"]
    angles = g["positions"][:, None] * g["inv_freq"].astype(np.float64)
    err = np.abs(g["cos"] - np.cos(np.concatenate([angles, angles], -1)) * factor).max()
    assert err == pytest.approx(case["max_abs_err_vs_float64_at_4095"], rel=1e-9)
    assert err > 50 * TOL


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_q_rotated_matches_hf(case):
    # HF's apply_rotary_pos_emb within its float32 error; float64 within ours.
    g, factor = _golden(case), case["attention_factor"]
    layer = _from_case(case, inverse_frequencies=g["inv_freq"])
    out = to_numpy(layer(g["q"], positions=g["positions"]))
    np.testing.assert_allclose(out, g["q_rotated"], rtol=0, atol=HF_TOL)
    angles = g["positions"][:, None] * g["inv_freq"].astype(np.float64)
    want = _rotate64(g["q"], angles, factor=factor)
    np.testing.assert_allclose(out, want, rtol=0, atol=_rotation_tol(g["q"], factor))


# -- precision to 2**31 ----------------------------------------------------------------


def _mp_cos_sin(positions, freqs):
    import mpmath

    mpmath.mp.dps = 40
    angles = [[int(p) * mpmath.mpf(float(w)) for w in freqs] for p in positions]
    cos = np.array([[float(mpmath.cos(a)) for a in row] for row in angles])
    sin = np.array([[float(mpmath.sin(a)) for a in row] for row in angles])
    return cos, sin


LONG_POSITIONS = np.array(
    [2**20, 2**24, 2**28, 2**31 - 8, 2**31 - 1, -(2**31), 123456789]
)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cos_sin_within_2e7_up_to_2_31(layout):
    # Against 40-digit mpmath, the float64 frequencies taken as exact.
    freqs = np.array(RopeConfig.build().frequencies(32))
    cos, sin = rotary_cos_sin(LONG_POSITIONS, 32, layout=layout)
    want_cos, want_sin = _mp_cos_sin(LONG_POSITIONS, freqs)
    index = (
        np.tile(np.arange(16), 2) if layout == "half" else np.repeat(np.arange(16), 2)
    )
    np.testing.assert_allclose(to_numpy(cos), want_cos[:, index], rtol=0, atol=TOL)
    np.testing.assert_allclose(to_numpy(sin), want_sin[:, index], rtol=0, atol=TOL)


def test_checkpoint_frequencies_exact_up_to_2_31():
    # A checkpoint's float32 inv_freq (HF's YaRN) is used exactly, factor applied.
    case = next(c for c in CASES if c["name"] == "yarn")
    g, factor = _golden(case), case["attention_factor"]
    layer = _from_case(case, inverse_frequencies=g["inv_freq"])
    x = _x((1, len(LONG_POSITIONS), 1, case["dim"]))
    out = to_numpy(layer(x, positions=LONG_POSITIONS))
    cos, sin = _mp_cos_sin(LONG_POSITIONS, g["inv_freq"])
    angles = np.arctan2(sin, cos)  # exact angles mod 2 pi, in float64
    want = _rotate64(x, angles, factor=factor)
    np.testing.assert_allclose(out, want, rtol=0, atol=_rotation_tol(x, factor))


def test_rotary_cos_sin_shapes_and_layouts():
    # positions.shape + [dim]; interleaved = half with columns paired.
    positions = np.arange(12).reshape(3, 4)
    half = [to_numpy(t) for t in rotary_cos_sin(positions, 8)]
    pairs = [to_numpy(t) for t in rotary_cos_sin(positions, 8, layout="interleaved")]
    assert half[0].shape == pairs[1].shape == (3, 4, 8)
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    np.testing.assert_array_equal(pairs[0], half[0][..., order])
    np.testing.assert_array_equal(pairs[1], half[1][..., order])
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    scaled = to_numpy(rotary_cos_sin(5, 8, rope_scaling=yarn)[0])
    factor = 0.1 * np.log(4.0) + 1.0  # YaRN's attention factor
    freqs = np.array(RopeConfig.build(rope_scaling=yarn).frequencies(8))
    want = np.tile(np.cos(5 * freqs), 2) * factor
    np.testing.assert_allclose(scaled, want, rtol=0, atol=TOL * factor)


# -- apply_rotary ---------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_rotary_matches_float64_rotation(layout):
    # rotary_cos_sin's tables broadcast over heads: the float64 rotation.
    x = _x((7, 3, 16))
    positions = 1000 + np.arange(7)
    cos, sin = rotary_cos_sin(positions, 12, layout=layout)
    cos, sin = ops.expand_dims(cos, 1), ops.expand_dims(sin, 1)
    out = to_numpy(apply_rotary(x, cos, sin, layout))
    want = _rotate64(x[None], positions[:, None] * _default_freqs(12), layout)[0]
    np.testing.assert_allclose(out, want, rtol=0, atol=_rotation_tol(x))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_rotary_is_the_layer_rotation(layout):
    # The layer rotates with the same function: its bits (XLA may fuse an FMA).
    x = _x((2, 9, 2, 16))
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    layer = RotaryEmbedding(rope_scaling=yarn, rotary_dim=8, layout=layout)
    cos, sin = rotary_cos_sin(70 + np.arange(9), 8, rope_scaling=yarn, layout=layout)
    out = to_numpy(
        apply_rotary(x, ops.expand_dims(cos, 1), ops.expand_dims(sin, 1), layout)
    )
    want = to_numpy(layer(x, start_index=70))
    atol = _fma_tol(want) if BACKEND == "jax" else 0
    np.testing.assert_allclose(out, want, rtol=0, atol=atol)


def test_apply_rotary_keeps_the_dtype_and_passes_the_rest_through():
    x = ops.cast(_x((5, 2, 12)), "float16")
    cos, sin = rotary_cos_sin(np.arange(5), 4)
    out = apply_rotary(x, ops.expand_dims(cos, 1), ops.expand_dims(sin, 1))
    assert keras_backend.standardize_dtype(out.dtype) == "float16"
    np.testing.assert_array_equal(to_numpy(out)[..., 4:], to_numpy(x)[..., 4:])


_EVEN_WIDTH = r"`cos`, expected a positive even last dimension, at most 8"


@pytest.mark.parametrize(
    "dtype, table, other, match",
    [
        ("int32", 8, 8, r"`x`, expected a floating tensor with a known last dimension"),
        (
            "float32",
            8,
            4,
            r"`sin`, expected the shape of `cos` \(5, 8\). "
            r"Received: sin='<shape=\(5, 4\)>'",
        ),
        ("float32", 3, 3, _EVEN_WIDTH),
        ("float32", 10, 10, _EVEN_WIDTH),
    ],
    ids=["integer-x", "shapes", "odd", "too-wide"],
)
def test_apply_rotary_bad_arguments(dtype, table, other, match):
    # x is [5, 8] of `dtype`; cos [5, table] and sin [5, other].
    x = np.zeros((5, 8), dtype)
    with pytest.raises(ValueError, match=match):
        apply_rotary(x, np.ones((5, table), "float32"), np.zeros((5, other), "float32"))


def test_apply_rotary_bad_layout():
    with pytest.raises(ValueError, match=r"`layout`, expected one of"):
        apply_rotary(np.zeros((2, 4), "float32"), np.ones((2, 4)), np.ones((2, 4)), "x")


# -- multimodal sections, proportional (goldens of make_golden_extra.py) -------------

with open(os.path.join(GOLDEN, "extra_cases.json")) as _f:
    EXTRA = json.load(_f)
EXTRA_IDS = [case["name"] for case in EXTRA]
MULTIMODAL = [case for case in EXTRA if case["multimodal"]]
# HF's float32 angles at positions up to 4095 (times |q| <= 3.9): its error.
EXTRA_HF_TOL = 1e-3


def _golden_extra(case):
    names = ("inv_freq", "inv_freq64", "positions", "cos", "sin", "q", "q_rotated")
    return {k: np.load(os.path.join(GOLDEN, f"{case['name']}.{k}.npy")) for k in names}


def _section_angles(positions, freqs, scaling):
    """float64 angles ``[B, L, n]`` of ``[3, B, L]`` positions: transformers'
    recomposition (its `recomposition_frequencies`) written in numpy."""
    angles = positions[..., None].astype(np.float64) * freqs
    section = scaling["mrope_section"]
    if not scaling.get("mrope_interleaved"):
        ends = np.cumsum([0, *section])
        parts = [angles[i % 3, ..., ends[i] : ends[i + 1]] for i in range(len(section))]
        return np.concatenate(parts, axis=-1)
    out = angles[0].copy()
    for row in (1, 2):
        out[..., row : 3 * section[row] : 3] = angles[
            row, ..., row : 3 * section[row] : 3
        ]
    return out


def _extra_angles(case, positions, freqs):
    scaling = case["arguments"]["rope_scaling"]
    if "mrope_section" not in scaling:
        return positions[..., None] * freqs
    return _section_angles(positions, freqs, scaling)


@pytest.mark.parametrize("case", EXTRA, ids=EXTRA_IDS)
def test_extra_goldens_q_rotated_match_hf(case):
    # With HF's inv_freq: its rotation within its float32 angle error.
    g = _golden_extra(case)
    layer = RotaryEmbedding(**case["arguments"], inverse_frequencies=g["inv_freq"])
    out = to_numpy(layer(g["q"], positions=g["positions"]))
    np.testing.assert_allclose(out, g["q_rotated"], rtol=0, atol=EXTRA_HF_TOL)


@pytest.mark.parametrize("case", EXTRA, ids=EXTRA_IDS)
def test_extra_goldens_match_float64(case):
    # Our own frequencies: the float64 rotation of the float64 formula.
    g, factor = _golden_extra(case), case["attention_factor"]
    out = to_numpy(
        RotaryEmbedding(**case["arguments"])(g["q"], positions=g["positions"])
    )
    angles = _extra_angles(case, g["positions"], g["inv_freq64"])
    layout = case["arguments"].get("layout", "half")
    want = _rotate64(g["q"], angles, layout, factor)
    np.testing.assert_allclose(out, want, rtol=0, atol=_rotation_tol(g["q"], factor))


@pytest.mark.parametrize("case", MULTIMODAL, ids=[c["name"] for c in MULTIMODAL])
def test_multimodal_cos_sin_within_2e7(case):
    # rotary_cos_sin of [3, batch, length] positions: HF's inv_freq taken as
    # exact, within 2e-7 of float64, and HF's own tables within its error.
    g = _golden_extra(case)
    arguments = {k: v for k, v in case["arguments"].items() if k != "rotary_dim"}
    cos, sin = rotary_cos_sin(
        g["positions"],
        case["rotary_dim"],
        inverse_frequencies=g["inv_freq"],
        **arguments,
    )
    angles = _section_angles(
        g["positions"], g["inv_freq"].astype(np.float64), arguments["rope_scaling"]
    )
    n = angles.shape[-1]
    half = arguments.get("layout", "half") == "half"
    columns = np.tile(np.arange(n), 2) if half else np.repeat(np.arange(n), 2)
    np.testing.assert_allclose(to_numpy(cos), np.cos(angles)[..., columns], atol=TOL)
    np.testing.assert_allclose(to_numpy(sin), np.sin(angles)[..., columns], atol=TOL)
    np.testing.assert_allclose(to_numpy(cos), g["cos"], rtol=0, atol=HF_TOL * 2)


SECTIONS = [
    {"rope_type": "default", "mrope_section": [2, 3, 3]},
    {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
]


@pytest.mark.parametrize("scaling", SECTIONS, ids=["contiguous", "interleaved"])
def test_text_only_multimodal_positions_are_plain_rope_bit_for_bit(scaling):
    # Three equal position rows give the bits of plain RoPE, per call and
    # in rotary_cos_sin.
    x = _x((2, 70, 2, 16))
    text = 2**20 + np.arange(140).reshape(2, 70)
    three = np.stack([text, text, text])
    out = RotaryEmbedding(rope_scaling=scaling)(x, positions=three)
    plain = RotaryEmbedding()(x, positions=text)
    assert np.array_equal(to_numpy(out), to_numpy(plain))
    tables = rotary_cos_sin(three, 16, rope_scaling=scaling)
    plain_tables = rotary_cos_sin(text, 16)
    for got, want in zip(tables, plain_tables, strict=True):
        assert np.array_equal(to_numpy(got), to_numpy(want))


def test_multimodal_layer_without_grid_positions_is_plain_rope():
    # start_index and [batch, length] positions are text: plain RoPE's bits.
    x = _x((2, 9, 2, 16))
    layer, plain = RotaryEmbedding(rope_scaling=SECTIONS[0]), RotaryEmbedding()
    assert np.array_equal(
        to_numpy(layer(x, start_index=5)), to_numpy(plain(x, start_index=5))
    )
    positions = np.arange(18).reshape(2, 9)
    assert np.array_equal(
        to_numpy(layer(x, positions=positions)), to_numpy(plain(x, positions=positions))
    )


def test_multimodal_decoding_step_is_bit_identical_to_the_full_call():
    g = _golden_extra(MULTIMODAL[0])
    layer = RotaryEmbedding(**MULTIMODAL[0]["arguments"])
    full = to_numpy(layer(g["q"], positions=g["positions"]))
    steps = [
        to_numpy(layer(g["q"][:, t : t + 1], positions=g["positions"][..., t : t + 1]))
        for t in range(g["q"].shape[1])
    ]
    np.testing.assert_array_equal(np.concatenate(steps, axis=1), full)


@pytest.mark.parametrize("case", EXTRA, ids=EXTRA_IDS)
def test_extra_configs_round_trip(case):
    # get_config is plain JSON and gives the same layer.
    layer = RotaryEmbedding(**case["arguments"])
    config = json.loads(json.dumps(layer.get_config()))
    clone = RotaryEmbedding.from_config(config)
    assert clone.rope_config == layer.rope_config
    assert clone.get_config() == layer.get_config()


# -- bounded work, clear errors ------------------------------------------------------


def test_wide_feature_axis_is_refused_when_the_model_is_built():
    # 2**20 features to rotate: refused by name and bound, before any work.
    inputs = keras.Input(shape=(None, 1, 2**20))
    with pytest.raises(
        ValueError,
        match=r"`inputs`, expected between 2 and 65536 features to rotate \(or a "
        r"`rotary_dim` in that range\). Received: inputs='<shape=\(None, None, 1, "
        r"1048576\)>'",
    ):
        RotaryEmbedding()(inputs)


def test_wide_input_with_a_small_rotary_dim_is_accepted():
    # Only the rotated features count: the rest pass through.
    inputs = keras.Input(shape=(None, 1, 2**20))
    outputs = RotaryEmbedding(rotary_dim=8)(inputs)
    assert tuple(outputs.shape) == (None, None, 1, 2**20)


def test_keras_file_with_a_wide_input_fails_on_load(tmp_path):
    # A small .keras file declaring 2**20 features is refused when loaded.
    import zipfile

    inputs = keras.Input(shape=(None, 1, 16))
    path, hostile = str(tmp_path / "rope.keras"), str(tmp_path / "wide.keras")
    keras.Model(inputs, RotaryEmbedding()(inputs)).save(path)
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(hostile, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                data = data.replace(b", 16]", b", 1048576]")
            target.writestr(item, data)
    with pytest.raises(ValueError, match=r"expected between 2 and 65536 features"):
        keras.models.load_model(hostile)


def test_zero_features_are_refused():
    # head_dim 0: one error on every backend (was empty, ZeroDivisionError or
    # RuntimeError).
    with pytest.raises(
        ValueError, match=r"`inputs`, expected between 2 and 65536 features to rotate"
    ):
        RotaryEmbedding()(np.zeros((1, 5, 2, 0), "float32"))


def test_rotary_cos_sin_dim_is_bounded():
    with pytest.raises(
        ValueError,
        match=exact(
            "Received an invalid value for `dim`, expected a positive even integer "
            "<= 65536. Received: dim=131072"
        ),
    ):
        rotary_cos_sin(np.arange(2), 2**17)


# -- configs, files -----------------------------------------------------------------


def test_get_config_is_plain_json_and_exact():
    # JSON round trip keeps every float32 inverse frequency bit for bit.
    inv = (np.float32(10000.0) ** -(np.arange(8, dtype=np.float32) / 8)).astype(
        np.float32
    )
    layer = RotaryEmbedding(
        rope_scaling={
            "rope_type": "yarn",
            "factor": 4,
            "original_max_position_embeddings": 4096,
            "mscale": 1.0,
        },
        inverse_frequencies=inv,
        layout="interleaved",
    )
    config = json.loads(json.dumps(layer.get_config()))
    np.testing.assert_array_equal(
        np.array(config["inverse_frequencies"], np.float32), inv
    )
    clone = RotaryEmbedding.from_config(config)
    assert clone.get_config() == layer.get_config()
    x = _x((1, 4, 16))
    np.testing.assert_array_equal(to_numpy(clone(x)), to_numpy(layer(x)))


def test_keras_file_round_trip(tmp_path):
    # .keras save/load (registered class, no custom_objects): same config, same outputs.
    inputs = keras.Input(shape=(None, 2, 16))
    rope = RotaryEmbedding(max_wavelength=500000.0, rope_scaling=LLAMA3, rotary_dim=12)
    model = keras.Model(inputs, rope(inputs))
    path = str(tmp_path / "rope.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    layer = next(lay for lay in restored.layers if isinstance(lay, RotaryEmbedding))
    assert layer.get_config() == model.layers[-1].get_config()
    x = _x((2, 9, 2, 16))
    np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))


# -- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"layout": "pairs"},
            r"`layout`, expected one of \('half', 'interleaved', 'half_per_axis'\). "
            r"Received: layout='pairs'",
        ),
        ({"sequence_axis": "1"}, r"`sequence_axis`, expected an int"),
        ({"feature_axis": 1.0}, r"`feature_axis`, expected an int"),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype"),
        # The RoPE configuration's own errors (tests/test_rope_config.py)
        # come from the constructor too, before any work.
        (
            {"rope_scaling": {"rope_type": "linear"}},
            r"`rope_scaling`, expected a 'factor' key for rope_type='linear'",
        ),
        ({"rotary_dim": 2**17}, r"`rotary_dim`, expected a positive even integer <="),
        ({"max_wavelength": 5e-324}, r"`max_wavelength`, expected a base whose"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(**kwargs)


@pytest.mark.parametrize(
    "kwargs, shape, call, match",
    [
        (
            {"rotary_dim": 32},
            (1, 5, 16),
            {},
            r"`rotary_dim`, expected at most 16 features. Received: rotary_dim=32",
        ),
        ({}, (1, 5, 15), {}, r"`inputs`, expected a known, even feature dimension"),
        (
            {"inverse_frequencies": [1.0, 0.1]},
            (1, 5, 16),
            {},
            r"rotary_dim / 2 = 8 values",
        ),
        (
            {"sequence_axis": 0},
            (1, 5, 16),
            {},
            r"`sequence_axis`, expected a distinct non-batch axis",
        ),
        (
            {"feature_axis": 1},
            (1, 5, 16),
            {},
            r"`feature_axis`, expected a distinct non-batch axis",
        ),
        (
            {"sequence_axis": 3},
            (1, 5, 16),
            {},
            r"`sequence_axis`.*Received: sequence_axis=3",
        ),
        (
            {},
            (1, 5, 16),
            {"positions": np.arange(4)},
            r"`positions`, expected 5 positions per sequence",
        ),
        (
            {},
            (1, 5, 16),
            {"start_index": 1.5},
            r"`start_index`, expected integer positions",
        ),
        (
            {},
            (1, 5, 16),
            {"start_index": 2**31 - 2},
            r"start_index \+ length <= 2\*\*31",
        ),
        (
            {},
            (2, 5, 16),
            {"start_index": np.array([1, 2, 3])},
            r"`start_index`, expected one row per example",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "dynamic",
                    "factor": 2.0,
                    "original_max_position_embeddings": 64,
                }
            },
            (1, 5, 2),
            {},
            r"`rotary_dim`, expected an even integer > 2 with dynamic",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0],
                    "long_factor": [1.0],
                    "original_max_position_embeddings": 64,
                    "factor": 2.0,
                }
            },
            (1, 5, 16),
            {},
            r"'short_factor' with rotary_dim / 2 = 8 values",
        ),
        (
            {"rope_scaling": MROPE},
            (1, 5, 16),
            {},
            r"'mrope_section' summing to rotary_dim / 2 = 8",
        ),
        (
            {"rope_scaling": MROPE},
            (2, 5, 8),
            {"positions": np.zeros((2, 2, 5), "int32")},
            r"`positions`, expected \[3, batch, length\] positions \(temporal, "
            r"height, width\) with an 'mrope_section', or text positions \[length\] "
            r"or \[batch, length\]. Received: positions='<shape=\(2, 2, 5\)>'",
        ),
        (
            {"rope_scaling": MROPE},
            (2, 5, 8),
            {"positions": np.zeros((3, 1, 2, 5), "int32")},
            r"`positions`, expected \[3, batch, length\] positions",
        ),
        (
            {"rope_scaling": MROPE},
            (2, 5, 8),
            {"positions": np.zeros((3, 2, 4), "int32")},
            r"`positions`, expected 5 positions per sequence",
        ),
        (
            {},
            (2, 5, 8),
            {"positions": np.zeros((3, 2, 5), "int32")},
            r"`positions`, expected a tensor of rank 1 or 2",
        ),
    ],
    ids=[
        "rotary-dim-features",
        "odd-features",
        "frequency-count",
        "batch-axis",
        "feature-axis-1",
        "sequence-axis-3",
        "positions-length",
        "float-start",
        "start-end",
        "start-rows",
        "dynamic-2",
        "longrope-length",
        "section-sum",
        "sections-leading-2",
        "sections-rank-4",
        "sections-length",
        "rank-3-without-sections",
    ],
)
def test_bad_inputs_and_call_arguments(kwargs, shape, call, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(**kwargs)(np.zeros(shape, "float32"), **call)


def test_integer_inputs_are_refused():
    with pytest.raises(
        ValueError,
        match=r"`inputs`, expected a floating tensor. Received: inputs='<dtype=int32>'",
    ):
        RotaryEmbedding()(ops.zeros((1, 2, 4), "int32"))


def test_rotary_cos_sin_bad_dim():
    with pytest.raises(
        ValueError, match=r"`dim`, expected a positive even integer. Received: dim=3"
    ):
        rotary_cos_sin(np.arange(3), 3)


# -- compiled and exported ------------------------------------------------------------


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
def test_jax_jit_equals_eager():
    import jax

    layer = RotaryEmbedding(layout="interleaved")
    x = _x((2, 33, 2, 8))
    compiled = jax.jit(lambda x, s: layer(x, start_index=s))
    eager = to_numpy(layer(x, start_index=2**30))
    np.testing.assert_allclose(
        to_numpy(compiled(x, 2**30)), eager, rtol=0, atol=_fma_tol(eager)
    )


@only_tensorflow
def test_tf_function_dynamic_length_and_xla():
    # Unknown batch and length, scalar and [B] offsets; jit_compile=True too.
    import tensorflow as tf

    layer = RotaryEmbedding()
    spec = [tf.TensorSpec([None, None, 2, 8]), tf.TensorSpec([None], tf.int32)]
    for jit in (False, True):
        run = tf.function(
            lambda x, s: (layer(x, start_index=s[0]), layer(x, start_index=s)),
            input_signature=spec,
            jit_compile=jit,
        )
        for batch, length in [(2, 5), (3, 70)]:
            x, starts = (
                _x((batch, length, 2, 8)),
                np.arange(batch, dtype=np.int32) * 1000 + 7,
            )
            shared, per_example = run(x, starts)
            want = (
                to_numpy(layer(x, start_index=7)),
                to_numpy(layer(x, start_index=starts)),
            )
            atol = _fma_tol(want[0]) if jit else 0  # plain graphs: the eager bits
            np.testing.assert_allclose(shared.numpy(), want[0], rtol=0, atol=atol)
            np.testing.assert_allclose(per_example.numpy(), want[1], rtol=0, atol=atol)


@only_tensorflow
def test_saved_model_export_reloads_in_tensorflow(tmp_path):
    # keras_posenc.export_saved_model, then tf.saved_model.load: same outputs.
    import tensorflow as tf

    import keras_posenc

    inputs = keras.Input(shape=(None, 2, 16))
    model = keras.Model(
        inputs,
        RotaryEmbedding(rope_scaling=dict(LLAMA3, original_max_position_embeddings=64))(
            inputs
        ),
    )
    path = keras_posenc.export_saved_model(model, str(tmp_path / "rope"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    for length in (3, 130):
        x = _x((2, length, 2, 16))
        (out,) = serve(**{name: tf.constant(x)}).values()
        np.testing.assert_array_equal(out.numpy(), to_numpy(model(x)))


@only_tensorflow
def test_tflite_builtins_dynamic_length():
    # TFLITE_BUILTINS only, run in LiteRT with a resized length: within 1e-6.
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    layer = RotaryEmbedding(rotary_dim=12)
    fn = tf.function(
        lambda x: layer(x, start_index=2**20),
        input_signature=[tf.TensorSpec([1, None, 2, 16])],
    )
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [fn.get_concrete_function()], layer
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    for length in (5, 77):
        interpreter.resize_tensor_input(inp["index"], [1, length, 2, 16])
        interpreter.allocate_tensors()
        x = _x((1, length, 2, 16))
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        got = interpreter.get_tensor(out["index"])
        np.testing.assert_allclose(
            got, to_numpy(layer(x, start_index=2**20)), rtol=0, atol=1e-6
        )


@pytest.mark.skipif(BACKEND != "jax", reason="JAX compiles per shape")
def test_eager_jax_rotation_compilations_level_off_for_new_lengths():
    # Eager JAX compiles the rotation once per input shape; sequence lengths
    # are padded to powers of two, so after lengths up to 300, new lengths
    # compile nothing more, and the rows are those of the unpadded call.
    layer = RotaryEmbedding()
    layer(_x((1, 64, 8)))
    rotation = layer._rotation.rotation(1, 3, 8, 8, False)

    def call_lengths(lengths):
        for length in lengths:
            x = _x((1, length, 8))
            out = to_numpy(layer(x, start_index=70))
            angles = (70 + np.arange(length))[:, None] * _default_freqs(8)
            np.testing.assert_allclose(out, _rotate64(x, angles), atol=_rotation_tol(x))
        return rotation.compiled._cache_size()

    seen = call_lengths([65, 128, 129, 256, 257, 300])
    assert call_lengths(range(66, 300, 23)) == seen


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.function retracing")
def test_eager_calls_at_many_layouts_print_no_retracing_warning(caplog):
    # Each input layout has its own compiled rotation, traced once; TF used to
    # count them as one function retracing and print a warning per call.
    layer = RotaryEmbedding()
    with caplog.at_level("WARNING", logger="tensorflow"):
        for i, length in enumerate(range(100, 1000, 97)):
            batch = 1 + i % 3
            starts = np.arange(batch) * 7 if i % 2 else length
            layer(_x((batch, length, 1 + i % 4, 16)), start_index=starts)
            layer(_x((1, length, 16)), positions=np.arange(length))
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]


# -- lookup mode: cos/sin of [0, max_length) built once, read at the start ------

LOOKUP = {"mode": "lookup", "max_length": 256}


def _lookup_and_compute(**options):
    return (
        RotaryEmbedding(**LOOKUP, **options),
        RotaryEmbedding(**options),
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "kwargs",
    [
        {"start_index": 0},
        {"start_index": 200},
        {"start_index": np.array([0, 150])},
        {"positions": np.array([[5, 0, 255, 7, 100, 3, 9, 1]] * 2)},
    ],
    ids=["start", "late-start", "per-example", "positions"],
)
def test_lookup_mode_gives_the_bits_of_compute_mode(layout, kwargs):
    # The table holds the rows compute mode would compute, laid out as the
    # rotation reads them: the same bits, and within float32 rounding of
    # the float64 rotation.
    lookup, compute = _lookup_and_compute(layout=layout, rope_scaling=LLAMA3)
    x = _x((2, 8, 3, 32))
    got, want = to_numpy(lookup(x, **kwargs)), to_numpy(compute(x, **kwargs))
    assert got.tobytes() == want.tobytes()
    if "positions" in kwargs:
        positions = kwargs["positions"]
    else:
        start = np.asarray(kwargs["start_index"])
        positions = np.reshape(start, (-1, 1)) + np.arange(8)
    freqs = np.array(lookup.rope_config.frequencies(32))
    expected = _rotate64(x, positions[..., None] * freqs, layout)
    np.testing.assert_allclose(got, expected, atol=_rotation_tol(x))


def test_lookup_mode_decoding_steps_give_the_full_call_bits():
    lookup = RotaryEmbedding(**LOOKUP)
    x = _x((1, 200, 2, 16))
    full = to_numpy(lookup(x))
    for t in (0, 63, 64, 130, 199):
        step = to_numpy(lookup(x[:, t : t + 1], start_index=t))
        assert step.tobytes() == full[:, t : t + 1].tobytes()


@pytest.mark.parametrize(
    "kwargs, position",
    [
        ({"start_index": 250}, 257),
        ({"positions": np.array([3, 300, 1, 2, 4, 5, 6, 7])}, 300),
    ],
    ids=["past-the-end", "positions"],
)
def test_lookup_mode_refuses_positions_outside_the_table(kwargs, position):
    message = (
        f"Position {position} is out of range for the lookup table of "
        "`max_length`=256 rows (positions must be in [0, max_length)). Raise "
        "`max_length`, use out_of_range='extend', or mode='compute'."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        RotaryEmbedding(**LOOKUP)(_x((1, 8, 16)), **kwargs)


def test_lookup_mode_refuses_negative_positions_as_the_sinusoidal_layer_does():
    message = (
        "Received an invalid value for `start_index`, expected positions in "
        "[0, 2**31) (int32). Received: start_index=-1"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        RotaryEmbedding(**LOOKUP)(_x((1, 8, 16)), start_index=-1)


def test_lookup_mode_extends_with_the_exact_rotation():
    # out_of_range="extend": positions past the table (or negative) are
    # computed, with compute mode's bits; a decoding step past it too.
    extend = RotaryEmbedding(**LOOKUP, out_of_range="extend")
    compute = RotaryEmbedding()
    x = _x((1, 8, 2, 16))
    for kwargs in ({"start_index": 252}, {"start_index": -3}, {"start_index": 10**6}):
        assert to_numpy(extend(x, **kwargs)).tobytes() == (
            to_numpy(compute(x, **kwargs)).tobytes()
        )
    step = to_numpy(extend(x[:, :1], start_index=4000))
    assert step.tobytes() == to_numpy(compute(x[:, :1], start_index=4000)).tobytes()


@pytest.mark.skipif(BACKEND == "torch", reason="traced start: tf.function or jax.jit")
def test_lookup_mode_at_a_traced_start_reads_the_table_or_fails_the_guard():
    # Inside the table: the eager bits. Past it: a graph assertion on TF,
    # NaN under jax.jit (never a clamped, plausible rotation).
    from _helpers import traced

    layer = RotaryEmbedding(**LOOKUP)
    x = _x((1, 8, 2, 16))
    call = traced(lambda s: layer(x, start_index=s))
    inside = to_numpy(call(ops.convert_to_tensor(100, "int32")))
    eager = to_numpy(layer(x, start_index=100))
    if BACKEND == "jax":  # XLA's CPU contracts x cos + y sin per fusion
        np.testing.assert_allclose(inside, eager, rtol=0, atol=_fma_tol(eager))
    else:
        assert inside.tobytes() == eager.tobytes()
    past = ops.convert_to_tensor(250, "int32")
    if BACKEND == "jax":
        assert np.isnan(to_numpy(call(past))).all()
    else:
        import tensorflow as tf

        with pytest.raises(tf.errors.InvalidArgumentError, match="max_length"):
            call(past)


@pytest.mark.skipif(BACKEND != "jax", reason="XLA's program")
def test_lookup_mode_reads_a_run_time_start_with_one_dynamic_slice():
    # The cheapest read: a dynamic slice of the table (no gather, no engine).
    import jax

    # On a CPU the cos and sin halves are written once, divided by ones
    # (XLA's CPU compiler reads slices of one dynamic slice slowly when it
    # fuses them into the rotation); what a GPU runs fuses them.
    from jax import export

    layer = RotaryEmbedding(mode="lookup", max_length=4096)
    x = np.ones((2, 512, 4, 64), "float32")
    layer(x)
    call = jax.jit(lambda x, s: layer(x, start_index=s))
    for platform, divisions in (("cpu", 2), ("cuda", 0)):
        text = export.export(call, platforms=[platform])(x, np.int32(0)).mlir_module()
        assert "dynamic_slice" in text
        assert "gather" not in text and "sine" not in text
        assert data_dependent_conditionals(text) == [], platform
        assert len(float_divisions(text)) == divisions, platform


def test_lookup_mode_round_trips_its_config_and_a_keras_file(tmp_path):
    layer = RotaryEmbedding(mode="lookup", max_length=64, out_of_range="extend")
    config = layer.get_config()
    assert (config["mode"], config["max_length"], config["out_of_range"]) == (
        "lookup",
        64,
        "extend",
    )
    inputs = keras.Input((8, 2, 16))
    model = keras.Model(inputs, RotaryEmbedding.from_config(config)(inputs))
    path = str(tmp_path / "rope.keras")
    model.save(path)
    x = _x((1, 8, 2, 16))
    loaded = keras.saving.load_model(path)
    assert to_numpy(loaded(x)).tobytes() == to_numpy(model(x)).tobytes()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"mode": "lookup"},
            "Received an invalid value for `max_length`, expected a positive "
            "integer with mode='lookup'. Received: max_length=None",
        ),
        (
            {"max_length": 64},
            "Received an invalid value for `max_length`, expected None with "
            "mode='compute' (it has no length limit; use mode='lookup' for a "
            "table of max_length rows). Received: max_length=64",
        ),
        (
            {"mode": "table", "max_length": 64},
            "Received an invalid value for `mode`, expected one of ('compute', "
            "'lookup'). Received: mode='table'",
        ),
        (
            {"mode": "lookup", "max_length": 64, "out_of_range": "clamp"},
            "Received an invalid value for `out_of_range`, expected one of "
            "('error', 'extend'). Received: out_of_range='clamp'",
        ),
    ],
)
def test_lookup_mode_options_are_checked_when_the_layer_is_made(kwargs, message):
    with pytest.raises(ValueError, match=exact(message)):
        RotaryEmbedding(**kwargs)


def test_a_lookup_table_too_large_is_refused_at_construction(monkeypatch):
    monkeypatch.setenv("KERAS_POSENC_MAX_TABLE_BYTES", "1000")
    with pytest.raises(ValueError, match="`max_length`, expected a table of at most"):
        RotaryEmbedding(mode="lookup", max_length=64, rotary_dim=16)


def test_a_lookup_layer_refuses_inputs_of_another_width():
    layer = RotaryEmbedding(**LOOKUP)
    layer(_x((1, 8, 16)))
    message = (
        "Received an invalid value for `inputs`, expected 16 features to rotate "
        "(the lookup table was built for them; make a new layer for another "
        "width). Received: inputs='<shape=(1, 8, 32)>'"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        layer(_x((1, 8, 32)))


def test_lookup_mode_computes_multimodal_positions():
    scaling = {"rope_type": "default", "mrope_section": [2, 3, 3]}
    lookup, compute = _lookup_and_compute(rope_scaling=scaling)
    x = _x((1, 8, 2, 16))
    positions = np.stack([np.arange(8), np.arange(8) // 2, np.arange(8) % 3])[:, None]
    got = to_numpy(lookup(x, positions=positions))
    assert got.tobytes() == to_numpy(compute(x, positions=positions)).tobytes()


def test_bools_in_inverse_frequencies_are_refused():
    # numpy reads [True, 0.1] as [1.0, 0.1]: a bool is not a frequency.
    message = (
        "Received an invalid value for `inverse_frequencies`, expected a 1-D array "
        "of finite inverse frequencies >= 0. Received: inverse_frequencies=[True, 0.1]"
    )
    with pytest.raises(ValueError, match=exact(message)):
        RotaryEmbedding(inverse_frequencies=[True, 0.1])
