"""`RotaryEmbedding.from_hf_config`: a raw `config.json` of every RoPE
architecture read as transformers 5.23 reads it; every other key refused."""

import json
import math
import os

import numpy as np
import pytest
from _helpers import LLAMA3, to_numpy

from keras_posenc.rotary import RotaryEmbedding, rotary_cos_sin

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "hf")
with open(os.path.join(GOLDEN, "cases.json")) as _f:
    HEADER = json.load(_f)
CASES = HEADER["cases"]
IDS = [case["name"] for case in CASES]
ARRAYS = np.load(os.path.join(GOLDEN, "golden.npz"))
POSITIONS = ARRAYS["positions"]
LONG_POSITIONS = np.concatenate(
    [np.arange(4096), np.arange(131000, 131072), [10**6]]
).astype(np.int64)
# The tested bound of cos and sin (times the attention factor) against float64.
LONG_TOL = 2.5e-7
# transformers' float32 angles p * w at p <= 1000 are off by up to ~1000 * 2**-24
# radians, its float32 frequencies by a few ulps (more angle at p = 1000):
# together under 1000 * 2**-21 radians on every feature, times |q| and the factor.
HF_ANGLE_TOL = 1000 * 2.0**-21


def _golden(case, field):
    return ARRAYS[f"{case['name']}.{field}"]


def _layer(case, **kwargs):
    return RotaryEmbedding.from_hf_config(
        case["config"], layer_type=case["layer_type"], **kwargs
    )


def _layout_order(values, layout):
    """Columns ``[c0, c1, ...]`` per layout: ``[c | c]`` or ``[c0, c0, c1, ...]``."""
    return (
        np.concatenate([values, values], -1)
        if layout == "half"
        else (np.repeat(values, 2, axis=-1))
    )


# -- every architecture, against its own transformers rotary module -----------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rotary_dim_layout_and_attention_factor_match_transformers(case):
    # What the model rotates, how it pairs features, and its factor on cos/sin.
    layer = _layer(case)
    assert (layer.rotary_dim, layer.layout) == (case["rotary_dim"], case["layout"])
    assert layer.attention_factor == case["attention_scaling"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_frequencies_are_the_float64_formula_of_transformers(case):
    # The float64 frequencies of transformers' standardized parameters, and
    # within 4 float32 ulps of its own (its float32 pow, llama3's smoothing).
    layer = _layer(case)
    freqs = np.array(layer.rope_config.frequencies(layer.rotary_dim))
    np.testing.assert_allclose(freqs, _golden(case, "inv_freq64"), rtol=1e-12, atol=0)
    hf = _golden(case, "inv_freq").astype(np.float64)
    np.testing.assert_allclose(freqs, hf, rtol=4 * 2.0**-23, atol=0)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rotated_query_matches_transformers(case):
    # The model's own apply_rotary_pos_emb (GPT-J's table, DeepSeek-V2's complex
    # product), pass-through features included, within transformers' float32
    # angle error. DeepSeek-V3 lists the rotated even features, then the odd.
    q, want = _golden(case, "q"), _golden(case, "q_rotated")
    out = to_numpy(_layer(case)(q, positions=POSITIONS))
    if case["deinterleaved"]:
        dim = case["rotary_dim"]
        order = np.concatenate([np.arange(0, dim, 2), np.arange(1, dim, 2)])
        out = np.concatenate([out[..., order], out[..., dim:]], -1)
    tol = case["attention_scaling"] * float(np.abs(q).max()) * HF_ANGLE_TOL
    np.testing.assert_allclose(out, want, rtol=0, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cos_sin_within_2_5e7_of_float64_at_long_positions(case):
    # 0..4095, 131000..131071 and 10**6: float64 angles of the float64
    # frequencies, in the model's layout, times its attention factor.
    layer = _layer(case)
    dim, factor = layer.rotary_dim, case["attention_scaling"]
    cos, sin = rotary_cos_sin(
        LONG_POSITIONS,
        dim,
        max_wavelength=layer.max_wavelength,
        rope_scaling=layer.rope_scaling,
        layout=layer.layout,
    )
    angles = LONG_POSITIONS[:, None] * _golden(case, "inv_freq64")
    tol = LONG_TOL * max(1.0, factor)
    want_cos = _layout_order(np.cos(angles), layer.layout) * factor
    want_sin = _layout_order(np.sin(angles), layer.layout) * factor
    np.testing.assert_allclose(to_numpy(cos), want_cos, rtol=0, atol=tol)
    np.testing.assert_allclose(to_numpy(sin), want_sin, rtol=0, atol=tol)


# -- the reading itself ----------------------------------------------------------------


def _config(model_type):
    with open(os.path.join(GOLDEN, "configs", f"{model_type}.json")) as f:
        return json.load(f)


def _arguments(layer):
    return {k: v for k, v in layer.get_config().items() if k != "name"}


def test_constructor_and_from_hf_config_agree_on_yarn_truncate_none():
    # The same dict gives the same layer (transformers: `if truncate:`).
    yarn = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "truncate": None,
    }
    config = {
        "model_type": "llama",
        "head_dim": 64,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "max_position_embeddings": 16384,
        "rope_parameters": dict(yarn, rope_theta=10000.0),
    }
    read = RotaryEmbedding.from_hf_config(config)
    built = RotaryEmbedding(10000.0, rope_scaling=yarn, rotary_dim=64)
    assert _arguments(read) == _arguments(built)
    assert read.rope_config.frequencies(64) == built.rope_config.frequencies(64)


def test_path_to_config_json_and_to_its_directory(tmp_path):
    # The file as published, by its path or its directory's, equals the dict.
    config = _config("deepseek_v3")
    (tmp_path / "config.json").write_text(json.dumps(config))
    layers = [
        RotaryEmbedding.from_hf_config(source)
        for source in (config, tmp_path / "config.json", str(tmp_path))
    ]
    assert _arguments(layers[0]) == _arguments(layers[1]) == _arguments(layers[2])
    assert layers[0].layout == "interleaved" and layers[0].rotary_dim == 64


def test_old_and_new_keys_agree():
    # transformers < 5 (rope_scaling + rope_theta, legacy `type`) and 5
    # (rope_parameters holding rope_theta) configs give the same layer.
    base = {
        "hidden_size": 256,
        "num_attention_heads": 2,
        "max_position_embeddings": 131072,
    }
    legacy = {"type": "llama3", **{k: v for k, v in LLAMA3.items() if k != "rope_type"}}
    layers = [
        RotaryEmbedding.from_hf_config(dict(base, rope_theta=5e5, rope_scaling=LLAMA3)),
        RotaryEmbedding.from_hf_config(
            dict(base, rope_parameters=dict(LLAMA3, rope_theta=5e5))
        ),
        RotaryEmbedding.from_hf_config(dict(base, rope_theta=5e5, rope_scaling=legacy)),
    ]
    assert _arguments(layers[0]) == _arguments(layers[1]) == _arguments(layers[2])
    assert layers[0].max_wavelength == 5e5 and layers[0].rotary_dim == 128
    assert layers[0].rope_scaling == LLAMA3


def test_partial_rotary_factor_at_top_level_or_in_rope_parameters():
    # rotary_dim = head_dim * factor, read where transformers reads it.
    base = {"head_dim": 64, "hidden_size": 512, "num_attention_heads": 4}
    top = RotaryEmbedding.from_hf_config(dict(base, partial_rotary_factor=0.25))
    inside = RotaryEmbedding.from_hf_config(
        dict(base, rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": 0.25})
    )
    assert top.rotary_dim == inside.rotary_dim == 16
    assert top.rope_scaling is None and top.max_wavelength == 10000.0


def test_lengths_filled_as_transformers_fills_them():
    # dynamic: max_position_embeddings is the trained length; Phi-3's top-level
    # original_max_position_embeddings wins; yarn's factor defaults to the ratio.
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
    phi3 = dict(_config("phi3"), original_max_position_embeddings=2048)
    scaling = RotaryEmbedding.from_hf_config(phi3).rope_scaling
    assert scaling["original_max_position_embeddings"] == 2048
    assert scaling["factor"] == 64.0
    yarn = {"rope_type": "yarn", "original_max_position_embeddings": 4096}
    scaling = RotaryEmbedding.from_hf_config(
        {"head_dim": 64, "max_position_embeddings": 16384, "rope_parameters": yarn}
    ).rope_scaling
    assert scaling["factor"] == 4.0


def test_longrope_seq_len_picks_the_long_factors():
    # Past the pretraining length, transformers switches to `long_factor`.
    config = _config("phi3")
    short = RotaryEmbedding.from_hf_config(config, seq_len=4096)
    long = RotaryEmbedding.from_hf_config(config, seq_len=4097)
    factors = config["rope_scaling"]["long_factor"]
    ratio = np.array(short.rope_config.frequencies(64)) / np.array(
        long.rope_config.frequencies(64)
    )
    short_factors = np.array(config["rope_scaling"]["short_factor"])
    np.testing.assert_allclose(ratio, np.array(factors) / short_factors, rtol=1e-12)


def test_nested_rope_parameters_per_layer_type():
    # transformers 5 Gemma 3 style: one dict per layer type.
    nested = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
    }
    config = {"head_dim": 32, "rope_parameters": nested}
    full = RotaryEmbedding.from_hf_config(config, layer_type="full_attention")
    sliding = RotaryEmbedding.from_hf_config(config, layer_type="sliding_attention")
    assert full.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert full.max_wavelength == 1e6
    assert sliding.rope_scaling is None and sliding.max_wavelength == 1e4


def test_flat_config_takes_a_declared_layer_type():
    # gpt-oss: one RoPE for both layer types it declares.
    config = _config("gpt_oss")
    both = [
        _arguments(RotaryEmbedding.from_hf_config(config, layer_type=t))
        for t in (None, "sliding_attention", "full_attention")
    ]
    assert both[0] == both[1] == both[2]


def test_unknown_model_type_reads_standard_keys():
    # An architecture outside the table: Llama's standard keys.
    config = dict(_config("qwen3"), model_type="my_new_model")
    assert _arguments(RotaryEmbedding.from_hf_config(config)) == _arguments(
        RotaryEmbedding.from_hf_config(_config("qwen3"))
    )


# -- refused, by name ------------------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


def _with(base, **keys):
    return {**base, **keys}


BAD = [
    (
        "head-dim-str",
        _with(LLAMA, head_dim="64"),
        {},
        r"`head_dim`, expected a positive integer. Received: head_dim='64'",
    ),
    (
        "head-dim-nan",
        _with(LLAMA, head_dim=math.nan),
        {},
        r"`head_dim`, expected a positive integer. Received: head_dim=nan",
    ),
    (
        "head-dim-inf",
        _with(LLAMA, head_dim=math.inf),
        {},
        r"`head_dim`, expected a positive integer. Received: head_dim=inf",
    ),
    (
        "hidden-size-float",
        _with(LLAMA, hidden_size=256.0),
        {},
        r"`hidden_size`, expected a positive integer",
    ),
    (
        "heads-zero",
        _with(LLAMA, num_attention_heads=0),
        {},
        r"`num_attention_heads`, expected a positive integer",
    ),
    (
        "no-head-dim",
        {"rope_theta": 1e4},
        {},
        r"`config`, expected a 'head_dim', or 'hidden_size' and"
        r" 'num_attention_heads' key",
    ),
    (
        "partial-none",
        _with(LLAMA, partial_rotary_factor=None),
        {},
        r"`partial_rotary_factor`, expected a number in \(0, 1\]."
        r" Received: partial_rotary_factor=None",
    ),
    (
        "partial-str",
        _with(LLAMA, partial_rotary_factor="0.5"),
        {},
        r"`partial_rotary_factor`, expected a number in \(0, 1\]."
        r" Received: partial_rotary_factor='0.5'",
    ),
    (
        "partial-inside-none",
        _with(LLAMA, rope_parameters={"partial_rotary_factor": None}),
        {},
        r"`partial_rotary_factor`, expected a number in \(0, 1\]",
    ),
    (
        "partial-not-read",
        _with(LLAMA, partial_rotary_factor=0.5),
        {},
        r"`partial_rotary_factor`, expected 1 for model_type 'llama'"
        r" \(its rotary embedding rotates the whole head\)",
    ),
    (
        "rotary-pct",
        {
            "model_type": "gpt_neox",
            "hidden_size": 512,
            "num_attention_heads": 8,
            "rotary_pct": 2,
        },
        {},
        r"`rotary_pct`, expected a number in \(0, 1\]. Received: rotary_pct=2",
    ),
    (
        "rope-scaling-str",
        _with(LLAMA, rope_scaling="linear"),
        {},
        r"`rope_scaling`, expected None or a dict of RoPE parameters."
        r" Received: rope_scaling='linear'",
    ),
    (
        "rope-scaling-list",
        _with(LLAMA, rope_scaling=["linear", 2.0]),
        {},
        r"`rope_scaling`, expected None or a dict of RoPE parameters."
        r" Received: rope_scaling=\['linear', 2.0\]",
    ),
    (
        "rope-parameters-str",
        _with(LLAMA, rope_parameters="yarn"),
        {},
        r"`rope_parameters`, expected None or a dict",
    ),
    (
        "factor-overflow",
        _with(LLAMA, rope_scaling={"rope_type": "linear", "factor": 10**400}),
        {},
        r"'factor' to be a finite number > 0 for rope_type='linear'",
    ),
    (
        "misspelt-key",
        _with(
            LLAMA, max_position_embeddings=16384, rope_scaling=_with(YARN, beta_fst=32)
        ),
        {},
        r"not \['beta_fst'\] for rope_type='yarn'",
    ),
    (
        "unknown-type",
        _with(LLAMA, rope_parameters={"rope_type": "ntk"}),
        {},
        r"'rope_type' key, one of",
    ),
    (
        "types-disagree",
        _with(
            LLAMA,
            rope_scaling={"rope_type": "linear", "type": "dynamic", "factor": 2.0},
        ),
        {},
        r"`rope_scaling`, expected 'rope_type' and 'type' to agree",
    ),
    (
        "seq-len-key",
        _with(
            LLAMA, rope_scaling={"rope_type": "dynamic", "factor": 2.0, "seq_len": 9}
        ),
        {},
        r"no 'seq_len' key \(the serving length is the `seq_len` argument\)",
    ),
    (
        "dynamic-length",
        _with(
            LLAMA,
            max_position_embeddings=2048,
            rope_scaling={
                "rope_type": "dynamic",
                "factor": 2.0,
                "original_max_position_embeddings": 4096,
            },
        ),
        {},
        r"no 'original_max_position_embeddings' key with 'dynamic'"
        r" \(transformers reads max_position_embeddings=2048\)",
    ),
    (
        "mrope-not-read",
        _with(
            LLAMA, rope_scaling={"rope_type": "default", "mrope_section": [16, 8, 8]}
        ),
        {},
        r"no 'mrope_section' key: transformers' llama does not read it",
    ),
    (
        "theta-nan",
        _with(LLAMA, rope_theta=math.nan),
        {},
        r"`rope_theta`, expected a finite number > 0. Received: rope_theta=nan",
    ),
    (
        "theta-inside-str",
        _with(LLAMA, rope_parameters={"rope_theta": "1e4"}),
        {},
        r"`rope_theta`, expected a finite number > 0",
    ),
    (
        "neox-theta-not-read",
        {
            "model_type": "gpt_neox",
            "hidden_size": 512,
            "num_attention_heads": 8,
            "rope_theta": 5e5,
        },
        {},
        r"`rope_theta`, expected 10000.0 or no 'rope_theta' key:"
        r" transformers' gpt_neox does not read it",
    ),
    (
        "gptj-scaling-not-read",
        {"model_type": "gptj", "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        {},
        r"`rope_scaling`, expected None or no 'rope_scaling' key:"
        r" transformers' gptj does not read it",
    ),
    (
        "gptj-no-rotary-dim",
        {"model_type": "gptj", "rotary_dim": None},
        {},
        r"`rotary_dim`, expected an integer \(GPT-J rotates rotary_dim\)",
    ),
    (
        "falcon-alibi",
        {"model_type": "falcon", "alibi": True},
        {},
        r"`alibi`, expected false \(with ALiBi, Falcon uses no RoPE\)",
    ),
    (
        "falcon-n-head",
        {"model_type": "falcon", "n_head": 8},
        {},
        r"`n_head`, expected 71 or no 'n_head' key: transformers'"
        r" falcon does not read it",
    ),
    (
        "interleave-str",
        {"model_type": "deepseek_v3", "rope_interleave": "yes"},
        {},
        r"`rope_interleave`, expected a bool. Received: rope_interleave='yes'",
    ),
    (
        "gemma3-no-text-config",
        {"model_type": "gemma3", "hidden_size": 256},
        {},
        r"`text_config`, expected a 'text_config' dict for model_type 'gemma3'",
    ),
    (
        "unmapped-architecture",
        {"model_type": "glm", "hidden_size": 256, "num_attention_heads": 4},
        {},
        r"`model_type`, expected a model_type whose RoPE this reader maps "
        r"\(transformers reads this one differently from Llama",
    ),
    (
        "model-type-int",
        {"model_type": 3, "head_dim": 8},
        {},
        r"`model_type`, expected a string. Received: model_type=3",
    ),
    (
        "layer-type-missing",
        {"head_dim": 8, "rope_parameters": {"a": {"rope_type": "default"}}},
        {},
        r"`layer_type`, expected one of \['a'\]. Received: layer_type=None",
    ),
    (
        "layer-type-undeclared",
        LLAMA,
        {"layer_type": "sliding_attention"},
        r"`layer_type`, expected None or one of \[\]. Received:"
        r" layer_type='sliding_attention'",
    ),
    (
        "gemma3-layer-type",
        _config("gemma3_text"),
        {},
        r"`layer_type`, expected one of \['full_attention',"
        r" 'sliding_attention'\]. Received: layer_type=None",
    ),
    (
        "not-a-config",
        "llama",
        {},
        r"`config`, expected a dict, or the path of a config.json"
        r" file or of a directory holding one",
    ),
    ("not-a-path", 3, {}, r"`config`, expected a dict, or the path of a config.json"),
]


@pytest.mark.parametrize(
    "config, kwargs, match", [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_configs_are_refused_by_name(config, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, **kwargs)


def test_a_json_file_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"\(a JSON object\). Received: config="):
        RotaryEmbedding.from_hf_config(tmp_path)
