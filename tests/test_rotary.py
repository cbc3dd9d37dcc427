"""`RotaryEmbedding`, `rotary_cos_sin`: HF goldens, exactness, decoding, export."""

import json
import os
import re

import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, TOL, keras, only_tensorflow, to_numpy
from keras import backend as keras_backend
from keras import ops

from keras_posenc import _rope_scaling
from keras_posenc.rotary import RotaryEmbedding, rotary_cos_sin

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
    freqs = _rope_scaling.frequencies(
        layer.rope_scaling, layer.rotary_dim, layer.max_wavelength
    )
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


# -- Hugging Face configs --------------------------------------------------------

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def test_from_hf_config_old_and_new_keys_agree():
    # transformers < 5 (rope_scaling + rope_theta) and 5 (rope_parameters) configs.
    base = {
        "hidden_size": 256,
        "num_attention_heads": 2,
        "max_position_embeddings": 131072,
    }
    old = RotaryEmbedding.from_hf_config(
        dict(base, rope_theta=500000.0, rope_scaling=LLAMA3)
    )
    new = RotaryEmbedding.from_hf_config(
        dict(base, rope_parameters=dict(LLAMA3, rope_theta=500000.0))
    )
    legacy = {"type": "llama3", **{k: v for k, v in LLAMA3.items() if k != "rope_type"}}
    oldest = RotaryEmbedding.from_hf_config(
        dict(base, rope_theta=500000.0, rope_scaling=legacy)
    )
    configs = [
        {k: v for k, v in r.get_config().items() if k != "name"}
        for r in (old, new, oldest)
    ]
    assert configs[0] == configs[1] == configs[2]
    assert old.max_wavelength == 500000.0 and old.rotary_dim == 128
    assert old.rope_scaling == LLAMA3


def test_from_hf_config_partial_rotary_factor():
    # Top level (Phi, GPT-NeoX) or in rope_parameters: rotary_dim = head_dim * factor.
    base = {"head_dim": 64, "hidden_size": 512, "num_attention_heads": 4}
    top = RotaryEmbedding.from_hf_config(dict(base, partial_rotary_factor=0.25))
    inside = RotaryEmbedding.from_hf_config(
        dict(
            base,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.25,
            },
        )
    )
    assert top.rotary_dim == inside.rotary_dim == 16
    assert top.rope_scaling is None and top.max_wavelength == 10000.0


def test_from_hf_config_fills_lengths_as_transformers_does():
    # dynamic: max_position_embeddings is the trained length; Phi-3's top-level
    # original_max_position_embeddings wins; longrope/yarn factor defaults to the ratio.
    dynamic = RotaryEmbedding.from_hf_config(
        {
            "head_dim": 64,
            "max_position_embeddings": 2048,
            "rope_scaling": {"type": "dynamic", "factor": 2.0},
        },
        seq_len=8192,
    )
    assert dynamic.rope_scaling == {
        "rope_type": "dynamic",
        "factor": 2.0,
        "original_max_position_embeddings": 2048,
        "seq_len": 8192,
    }
    phi3 = next(c for c in CASES if c["name"] == "longrope_short")["hf_config"]
    scaling = RotaryEmbedding.from_hf_config(
        dict(phi3, original_max_position_embeddings=2048)
    ).rope_scaling
    assert (
        scaling["original_max_position_embeddings"] == 2048
        and scaling["factor"] == 64.0
    )
    yarn = {
        "rope_type": "yarn",
        "original_max_position_embeddings": 4096,
        "attention_factor": None,
    }
    scaling = RotaryEmbedding.from_hf_config(
        {"head_dim": 64, "max_position_embeddings": 16384, "rope_parameters": yarn}
    ).rope_scaling
    assert scaling["factor"] == 4.0 and scaling["attention_factor"] is None


def test_from_hf_config_nested_per_layer_type():
    # Gemma-3 style rope_parameters keyed by layer type.
    nested = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    config = {"head_dim": 32, "rope_parameters": nested}
    full = RotaryEmbedding.from_hf_config(config, layer_type="full_attention")
    assert (
        full.rope_scaling == {"rope_type": "linear", "factor": 8.0}
        and full.max_wavelength == 1e6
    )
    assert (
        RotaryEmbedding.from_hf_config(
            config, layer_type="sliding_attention"
        ).rope_scaling
        is None
    )


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


def test_default_frequencies_are_the_formula_rounded_once():
    # rope_theta ** (-2i / dim) with 40 digits, rounded to float64.
    import mpmath

    mpmath.mp.dps = 40
    want = [float(mpmath.mpf(500000) ** (mpmath.mpf(-2 * i) / 128)) for i in range(64)]
    np.testing.assert_array_equal(_rope_scaling.frequencies(None, 128, 500000.0), want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cos_sin_within_2e7_up_to_2_31(layout):
    # Against 40-digit mpmath, the float64 frequencies taken as exact.
    freqs = _rope_scaling.frequencies(None, 32, 10000.0)
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
    want = np.tile(np.cos(5 * _rope_scaling.frequencies(yarn, 8, 10000.0)), 2) * factor
    np.testing.assert_allclose(scaled, want, rtol=0, atol=TOL * factor)


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


def _exact(message):
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"rope_scaling": {"rope_type": "linear"}},
            _exact(
                "Received an invalid value for `rope_scaling`, expected a 'factor' "
                "key for "
                "rope_type='linear'. Received: rope_scaling={'rope_type': 'linear'}"
            ),
        ),
        (
            {"rope_scaling": {"rope_type": "ntk", "factor": 2.0}},
            r"expected a 'rope_type' key, one of \('default'",
        ),
        ({"rope_scaling": "linear"}, r"`rope_scaling`, expected None or a dict"),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "scale": 1}},
            r"not \['scale'\] for rope_type='linear'",
        ),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": -2.0}},
            r"'factor' to be a finite number > 0",
        ),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": True}},
            r"'factor' to be a finite number > 0",
        ),
        (
            {"rope_scaling": {**LLAMA3, "low_freq_factor": None}},
            r"a 'low_freq_factor' key for rope_type='llama3'",
        ),
        (
            {"rope_scaling": {**LLAMA3, "high_freq_factor": 1.0}},
            r"'high_freq_factor' > 'low_freq_factor'",
        ),
        (
            {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
            r"a 'original_max_position_embeddings' key",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "dynamic",
                    "factor": 2.0,
                    "original_max_position_embeddings": 2048.5,
                }
            },
            r"'original_max_position_embeddings' to be a positive integer",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 2.0,
                    "original_max_position_embeddings": 64,
                    "truncate": 1,
                }
            },
            r"'truncate' to be a bool",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [],
                    "long_factor": [1.0],
                    "original_max_position_embeddings": 64,
                }
            },
            r"'short_factor' to be a non-empty list of finite numbers > 0",
        ),
        (
            {
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0],
                    "long_factor": [1.0],
                    "original_max_position_embeddings": 64,
                }
            },
            r"a 'factor' key \(or an explicit 'attention_factor'\) "
            r"for rope_type='longrope'",
        ),
        (
            {"rotary_dim": 63},
            _exact(
                "Received an invalid value for `rotary_dim`, expected a positive "
                "even integer. Received: rotary_dim=63"
            ),
        ),
        ({"rotary_dim": 0}, r"`rotary_dim`, expected a positive even integer"),
        (
            {"layout": "pairs"},
            r"`layout`, expected one of \('half', 'interleaved'\). "
            r"Received: layout='pairs'",
        ),
        (
            {"inverse_frequencies": [1.0, float("nan")]},
            r"`inverse_frequencies`, expected a 1-D array of finite inverse "
            r"frequencies >= 0",
        ),
        (
            {"inverse_frequencies": [1.0, -0.5]},
            r"Received: inverse_frequencies=\[1.0, -0.5\]",
        ),
        (
            {"inverse_frequencies": [[1.0]]},
            r"`inverse_frequencies`, expected a 1-D array",
        ),
        (
            {"inverse_frequencies": [1.0, 0.1, 0.01], "rotary_dim": 4},
            r"expected rotary_dim / 2 = 2 values. "
            r"Received: inverse_frequencies='<3 values>'",
        ),
        ({"max_wavelength": 0.0}, r"`max_wavelength`, expected a finite number > 0"),
        ({"sequence_axis": "1"}, r"`sequence_axis`, expected an int"),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype"),
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


@pytest.mark.parametrize(
    "config, kwargs, match",
    [
        (
            {"rope_theta": 1e4},
            {},
            r"`config`, expected a 'head_dim', or 'hidden_size' and "
            r"'num_attention_heads' key",
        ),
        (
            {"head_dim": 8, "rope_parameters": {"a": {"rope_type": "default"}}},
            {},
            r"`layer_type`, expected one of \['a'\]. Received: layer_type=None",
        ),
        (
            {"head_dim": 8, "rope_parameters": {"rope_type": "proportional"}},
            {},
            r"'rope_type' key, one of",
        ),
        ("llama", {}, r"`config`, expected a dict"),
    ],
)
def test_bad_hf_configs(config, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, **kwargs)


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
