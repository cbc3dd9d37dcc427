"""`RotaryEmbedding.from_hf_config`: a raw `config.json` read as transformers
reads it for its `model_type`, verified against every model type's own
transformers rotary module (the survey), and every other key refused."""

import json
import math
import os
import re
import time
import warnings

import numpy as np
import pytest
from _helpers import LLAMA3, to_numpy

from keras_posenc._hf import architectures as _hf_architectures
from keras_posenc._hf import config as _hf_config
from keras_posenc._hf import layers as _hf_layers
from keras_posenc._hf import model_types_page as _hf_model_types_page
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


def _assert_long_cos_sin(layer, positions, freqs64, factor):
    """The layer's cos and sin at `positions` are the float64 cos(p w) and
    sin(p w) of the float64 frequencies `freqs64`, in its layout, times
    `factor`, within `LONG_TOL` (scaled by the factor above 1)."""
    cos, sin = rotary_cos_sin(
        positions,
        layer.rotary_dim,
        max_wavelength=layer.max_wavelength,
        rope_scaling=layer.rope_scaling,
        layout=layer.layout,
    )
    angles = positions[:, None] * freqs64
    tol = LONG_TOL * max(1.0, factor)
    want_cos = _layout_order(np.cos(angles), layer.layout) * factor
    want_sin = _layout_order(np.sin(angles), layer.layout) * factor
    np.testing.assert_allclose(to_numpy(cos), want_cos, rtol=0, atol=tol)
    np.testing.assert_allclose(to_numpy(sin), want_sin, rtol=0, atol=tol)


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
    _assert_long_cos_sin(
        _layer(case),
        LONG_POSITIONS,
        _golden(case, "inv_freq64"),
        case["attention_scaling"],
    )


# -- every model type with a rotary module, against that module (the survey) -------

with open(os.path.join(GOLDEN, "survey.json")) as _f:
    SURVEY = json.load(_f)
SURVEY_FREQS = np.load(os.path.join(GOLDEN, "survey.npz"))
BY_TYPE: dict = {}
for _case in SURVEY["cases"]:
    BY_TYPE.setdefault(_case["model_type"], []).append(_case)
SURVEYED = sorted(set(BY_TYPE) | set(SURVEY["failed"]))
SUPPORTED = sorted(_hf_architectures.ARCHITECTURES)
# The module's float64 frequencies against the exact ones: a few float64 ulps
# (torch's float64 pow; the YaRN ramp and Llama 3 smoothing in float64).
FREQ_RTOL = 1e-12


def _read(case):
    """The layer `from_hf_config` makes of a survey case, or None if refused."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 'finetuned' is one case's point
            return RotaryEmbedding.from_hf_config(
                case["config"], seq_len=case["seq_len"], layer_type=case["layer_type"]
            )
    except ValueError:
        return None


def _disagreement(case, layer, arrays=SURVEY_FREQS):
    """What differs between `layer` and the module's facts (None: nothing)."""
    if "error" in case:
        return f"read, where transformers fails: {case['error']}"
    want = case["transformers"]
    dim = layer.rotary_dim
    got = {
        "rotary_dim": dim,
        "layout": layer.layout,
        "sign": 1,  # RotaryEmbedding turns by plus the angle
        "rows": layer.rope_config.channel_rows(dim),
    }
    for key, value in got.items():
        expected = want.get(key)
        if expected is not None and list(np.ravel(value)) != list(np.ravel(expected)):
            return f"{key}: {value}, transformers {expected}"
    factor = layer.attention_factor
    if not math.isclose(factor, want["attention_factor"], rel_tol=1e-12):
        return f"attention factor {factor}, transformers {want['attention_factor']}"
    freqs = np.array(layer.rope_config.frequencies(dim))
    hf = arrays[want["inv_freq"]]
    if not np.allclose(freqs, hf, rtol=FREQ_RTOL, atol=0):
        return f"frequencies off by {np.max(np.abs(freqs / np.where(hf, hf, 1) - 1))}"
    return None


def test_survey_covers_the_table_and_names_its_transformers():
    # Every surveyed type is supported or refused, nothing else is in the
    # table, and the reader states the release the survey ran.
    assert sorted(set(SUPPORTED) | set(_hf_architectures.REFUSED)) == SURVEYED
    assert not set(SUPPORTED) & set(_hf_architectures.REFUSED)
    assert _hf_architectures.TRANSFORMERS_VERSION == SURVEY["transformers"]


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_supported_type_reads_its_defaults_as_its_own_module(model_type):
    # The bare {"model_type": ...} (per layer type): rotary dimension,
    # pairing, sign, attention factor and float64 frequencies of its own
    # transformers rotary module.
    first = [c for c in BY_TYPE[model_type] if c["variant"] == "defaults"]
    assert first
    if not _hf_architectures.ARCHITECTURES[model_type].bare:
        # A wrapper whose bare config transformers fills with its own text
        # defaults (Mistral 3): refused without `text_config`, read with one.
        assert _read(first[0]) is None
        first = [c for c in BY_TYPE[model_type] if c["variant"] == "theta"]
    for case in first:
        layer = _read(case)
        assert layer is not None, case["name"]
        assert _disagreement(case, layer) is None, case["name"]


@pytest.mark.parametrize("model_type", SURVEYED)
def test_no_surveyed_config_is_read_wrongly(model_type):
    # Every case of the survey (defaults, sizes, rope_theta, partial rotary,
    # each rope_type as rope_scaling and rope_parameters, per layer type, the
    # model's own keys) is read exactly as its module computes it, or refused
    # with a ValueError: never a plausible wrong layer.
    wrong = {}
    for case in BY_TYPE.get(model_type, []):
        layer = _read(case)
        if layer is not None:
            why = _disagreement(case, layer)
            if why is not None:
                wrong[case["name"]] = why
    assert not wrong


@pytest.mark.parametrize("model_type", sorted(_hf_architectures.REFUSED))
def test_refused_type_is_refused_by_name_with_the_evidence(model_type):
    why = _hf_architectures.REFUSED[model_type]
    config = {"model_type": model_type, "head_dim": 64}
    with pytest.raises(
        ValueError,
        match=r"`model_type`, expected a model type whose RoPE is verified against "
        rf"transformers {re.escape(SURVEY['transformers'])}.*"
        rf"{re.escape(repr(model_type))}: {re.escape(why)}",
    ):
        RotaryEmbedding.from_hf_config(config)


def _long_cases():
    """One case read exactly per rope_type, pairing and attention factor
    (the others differ from one of these only in frequencies and width,
    each checked to 1e-12 above)."""
    seen, found = set(), []
    for model_type in SUPPORTED:
        for case in BY_TYPE.get(model_type, []):
            want = case.get("transformers")
            layer = None if want is None else _read(case)
            if layer is None:
                continue
            rope_type = (layer.rope_scaling or {}).get("rope_type", "default")
            key = (rope_type, want["layout"], want["attention_factor"])
            if key not in seen:
                seen.add(key)
                found.append(pytest.param(case, id=case["name"]))
    return found


@pytest.mark.parametrize("case", _long_cases())
def test_cos_sin_within_2_5e7_of_the_module_at_long_positions(case):
    # 0..4095, 131072 +- 64 and 10**6 +- 64: the module's float64 cos and
    # sin are cos(p w) and sin(p w) of its float64 frequencies w, times its
    # attention factor (the survey checked it); the layer's are within 2.5e-7.
    layer, want = _read(case), case["transformers"]
    positions = np.concatenate(
        [
            np.arange(4096),
            np.arange(131072 - 64, 131072 + 65),
            np.arange(10**6 - 64, 10**6 + 65),
        ]
    )
    _assert_long_cos_sin(
        layer, positions, SURVEY_FREQS[want["inv_freq"]], want["attention_factor"]
    )


# -- RoPE split by layer type, with scalings (make_layers.py) --------------------------

with open(os.path.join(GOLDEN, "layers.json")) as _f:
    LAYERS = json.load(_f)
LAYER_FREQS = np.load(os.path.join(GOLDEN, "layers.npz"))
LAYER_TYPES = sorted({case["model_type"] for case in LAYERS["cases"]})


def _nested_default(arch):
    return any(isinstance(v, dict) for v in (arch.rope_parameters or {}).values())


def test_layer_cases_cover_every_type_whose_rope_is_split_by_layer_type():
    # Every supported type whose defaults nest RoPE by layer type, and every
    # wrapper of one, has its scaled cases; the survey named the same release.
    arches = _hf_architectures.ARCHITECTURES
    split = {t for t, a in arches.items() if _nested_default(a)}
    split |= {t for t, a in arches.items() if a.text in split}
    assert split <= set(LAYER_TYPES)
    assert {"olmo3", "gemma3_text", "modernbert", "dory"} <= split
    assert LAYERS["transformers"] == SURVEY["transformers"]


@pytest.mark.parametrize("model_type", LAYER_TYPES)
def test_no_layer_type_is_read_from_another_layer(model_type):
    # A rope_scaling beside layer_types, a top-level or own base, YaRN nested
    # on one layer type, a flat rope_parameters: each layer type is read as
    # transformers' own module computes it for that layer type, or refused.
    cases = [c for c in LAYERS["cases"] if c["model_type"] == model_type]
    wrong, exact = {}, 0
    for case in cases:
        layer = _read(case)
        if layer is not None:
            why = _disagreement(case, layer, LAYER_FREQS)
            if why is not None:
                wrong[case["name"]] = why
            exact += why is None
    assert not wrong
    assert exact  # the cases are not all refused


def test_olmo3_sliding_layers_keep_the_default_rope():
    # Issue 37: OLMo-3's YaRN x8 (`rope_scaling`) is its full-attention
    # layers' only; its sliding layers rotate by the plain base 500000.
    layers = {}
    for case in LAYERS["cases"]:
        if case["name"].startswith("olmo3.published."):
            layers[case["layer_type"]] = layer = _read(case)
            assert _disagreement(case, layer, LAYER_FREQS) is None
    sliding, full = layers["sliding_attention"], layers["full_attention"]
    assert sliding.rope_scaling is None and sliding.max_wavelength == 500000
    assert full.rope_scaling["rope_type"] == "yarn"
    assert full.attention_factor == pytest.approx(1.2079441541679836, rel=1e-15)


# -- layers without RoPE: the plan of a model (make_plans.py) --------------------------

with open(os.path.join(GOLDEN, "plans.json")) as _f:
    PLAN_CASES = [c for c in json.load(_f)["cases"] if "layers" in c]
PLANNED = dict(_hf_layers.PLANS)


def _plan(config):
    try:
        return RotaryEmbedding.layer_plan(config)
    except ValueError:
        return None


def _same_layer(layer, want):
    """Whether a planned entry is transformers' layer: None for None, else
    its frequencies (each feature's angle at position 1, float32) and
    attention factor within 1e-6."""
    if layer is None or want is None:
        return layer is None and want is None
    freqs = np.array(layer.rope_config.frequencies(layer.rotary_dim))
    if len(want["inv_freq"]) == 2 * len(freqs):
        freqs = np.repeat(freqs, 2)
    return (
        len(freqs) == len(want["inv_freq"])
        and np.allclose(np.sort(freqs), want["inv_freq"], rtol=0, atol=1e-6)
        and abs(layer.attention_factor - want["factor"]) < 1e-6
    )


@pytest.mark.parametrize("case", PLAN_CASES, ids=[c["name"] for c in PLAN_CASES])
def test_layer_plan_is_what_transformers_attention_does(case):
    # Per layer of a tiny model run by transformers: no RoPE where its
    # attention applies none, else the RoPE it applies; or refused.
    plan = _plan(case["config"])
    if case["model_type"] not in PLANNED:
        assert plan is None
        return
    if plan is not None:
        assert len(plan) == case["config"]["num_hidden_layers"]
        assert all(map(_same_layer, plan, case["layers"]))


def test_every_planned_type_has_a_case_planned_exactly():
    planned = {c["model_type"] for c in PLAN_CASES if _plan(c["config"]) is not None}
    assert planned == set(PLANNED)
    assert {"exaone4", "smollm3", "cohere2", "qwen3_next", "olmo3"} <= planned


def test_exaone4_global_layers_have_no_rope_with_a_sliding_window():
    # Issue 37: EXAONE-4 with `sliding_window` rotates its sliding layers
    # only; each entry is from_hf_config's layer of that layer type, one
    # per layer type.
    config = {
        "model_type": "exaone4",
        "hidden_size": 512,
        "num_attention_heads": 4,
        "num_hidden_layers": 8,
        "sliding_window": 4096,
        "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 2,
    }
    plan = RotaryEmbedding.layer_plan(config, name="rope")
    assert [layer is None for layer in plan] == [False, False, False, True] * 2
    assert all(layer is plan[0] for layer in plan if layer is not None)
    alone = RotaryEmbedding.from_hf_config(
        config, layer_type="sliding_attention", name="rope"
    )
    assert plan[0].get_config() == alone.get_config()
    config["sliding_window"] = None
    assert None not in RotaryEmbedding.layer_plan(config)


def test_exaone4_pattern_without_layer_types_is_read_as_transformers_derives():
    # Issue 49 item 4: EXAONE-4.0-32B's shape, a numeric
    # `sliding_window_pattern` and no `layer_types`. Exaone4Config derives
    # layer i global where (i + 1) % pattern == 0; those are NoPE.
    config = _config("exaone4")
    plan = RotaryEmbedding.layer_plan(config)
    pattern = config["sliding_window_pattern"]
    want = [(i + 1) % pattern == 0 for i in range(config["num_hidden_layers"])]
    assert [layer is None for layer in plan] == want
    alone = RotaryEmbedding.from_hf_config(config, layer_type="sliding_attention")
    assert _arguments(plan[0]) == _arguments(alone)
    assert alone.rope_scaling["rope_type"] == "llama3"


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"sliding_window": None},
            r"`sliding_window`, expected an integer, or a 'layer_types' list:"
            r" transformers' exaone4 derives the layer types from"
            r" 'sliding_window_pattern' and fails without a window",
        ),
        (
            {"sliding_window_pattern": "LLLG"},
            r"`sliding_window_pattern`, expected a positive integer without"
            r" 'layer_types'.*Received: sliding_window_pattern='LLLG'",
        ),
        (
            {"sliding_window_pattern": 0},
            r"`sliding_window_pattern`, expected a positive integer.*"
            r"Received: sliding_window_pattern=0",
        ),
    ],
)
def test_exaone4_pattern_transformers_cannot_derive_is_refused(changes, match):
    # transformers fails on these (ZeroDivisionError, TypeError).
    config = {**_config("exaone4"), **changes}
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.layer_plan(config)
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, layer_type="sliding_attention")


def test_olmo3_plan_gives_sliding_and_full_layers_their_own_rope():
    case = next(c for c in PLAN_CASES if c["name"] == "olmo3.published")
    plan = RotaryEmbedding.layer_plan(case["config"])
    assert plan[3].rope_scaling["rope_type"] == "yarn"
    assert plan[0].rope_scaling is None and plan[0] is plan[4]


_EXAONE = {
    "model_type": "exaone4",
    "head_dim": 64,
    "num_hidden_layers": 2,
    "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"],
}


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"model_type": "cohere2_moe", "head_dim": 64},
            r"`model_type`, expected a model type whose layers without RoPE are"
            r" verified against transformers .*'cohere2_moe' is not one of"
            r" them. Read each layer with from_hf_config\(config,"
            r" layer_type=\.\.\.\)",
        ),
        (
            {k: v for k, v in _EXAONE.items() if k != "num_hidden_layers"},
            r"`num_hidden_layers`, expected a positive integer <= 65536."
            r" Received: num_hidden_layers=None",
        ),
        (
            {**_EXAONE, "layer_types": ["sliding_attention"]},
            r"`layer_types`, expected a list of num_hidden_layers=2 layer type names",
        ),
        (
            {k: v for k, v in _EXAONE.items() if k != "sliding_window"},
            r"`config`, expected a 'sliding_window' key \(null or an integer",
        ),
        (
            {**_EXAONE, "layer_types": ["sliding_attention", "mamba"]},
            r"`layer_types`, expected layer types among \['full_attention',"
            r" 'sliding_attention'\]. Received: layer_types='mamba'",
        ),
        (
            {
                "model_type": "cohere2",
                **{k: v for k, v in _EXAONE.items() if k != "model_type"},
                "sliding_window": None,
            },
            r"`sliding_window`, expected an integer \(Cohere 2 rotates its sliding"
            r" layers only\)",
        ),
        (
            {
                "model_type": "smollm3",
                "head_dim": 64,
                "num_hidden_layers": 2,
                "layer_types": ["full_attention"] * 2,
            },
            r"`no_rope_layers`, expected a list of 2 flags \(1: the layer uses"
            r" RoPE, 0: it does not\), one per layer. Received: no_rope_layers=None",
        ),
        (
            {
                "model_type": "smollm3",
                "head_dim": 64,
                "num_hidden_layers": 2,
                "layer_types": ["full_attention"] * 2,
                "no_rope_layers": [1, 2],
            },
            r"`no_rope_layers`, expected flags 0 or 1",
        ),
    ],
)
def test_layer_plan_refuses_what_it_cannot_plan(config, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.layer_plan(config)


def test_docs_page_is_generated_from_the_table():
    path = os.path.join(os.path.dirname(GOLDEN), "..", "..", "docs")
    with open(os.path.join(path, "hf-model-types.md")) as f:
        assert f.read() == _hf_model_types_page.model_types_page()


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


def test_a_model_type_outside_the_table_is_refused_by_name():
    # No model type reaches the Llama reading without evidence: one that was
    # not surveyed is refused, saying what to do.
    config = dict(_config("qwen3"), model_type="my_new_model")
    with pytest.raises(
        ValueError,
        match=r"`model_type`, expected a model type whose RoPE is verified against "
        r"transformers .* 'my_new_model': it is not one of them. Drop `model_type` "
        r"to read the standard Llama keys if its RoPE is Llama's, or build "
        r"RotaryEmbedding\(max_wavelength=\.\.\., rope_scaling=\.\.\., "
        r"rotary_dim=\.\.\., layout=\.\.\.\) directly. "
        r"Received: model_type='my_new_model'",
    ):
        RotaryEmbedding.from_hf_config(config)


@pytest.mark.parametrize("model_type", ["gpt2", "bert", "gpt_bigcode", "t5"])
def test_a_model_without_rope_is_refused_saying_so(model_type):
    with pytest.raises(
        ValueError,
        match=rf"`model_type`, expected a model type with RoPE; in `config`,"
        rf" '{model_type}' has no RoPE: it adds learned",
    ):
        RotaryEmbedding.from_hf_config({"model_type": model_type, "head_dim": 64})


@pytest.mark.parametrize("model_type", ["bloom", "mpt", "jais"])
def test_an_alibi_model_is_refused_pointing_to_the_alibi_bias(model_type):
    with pytest.raises(
        ValueError,
        match=rf"'{model_type}' has no RoPE: it biases attention scores with ALiBi"
        r" instead: build that bias with"
        r" keras_posenc.AlibiBias.from_hf_config\(config\)",
    ):
        RotaryEmbedding.from_hf_config({"model_type": model_type, "head_dim": 64})


def test_no_rope_types_are_outside_the_verified_table():
    no_rope = set(_hf_architectures.NO_ROPE)
    assert not no_rope & set(_hf_architectures.ARCHITECTURES)
    assert not no_rope & set(_hf_architectures.REFUSED)


def test_legacy_mrope_type_beside_default_rope_type_is_read():
    # Issue 37: some Qwen2.5-VL files hold {"type": "mrope", "rope_type":
    # "default"}; transformers reads the default RoPE with its sections (the
    # survey's qwen2_5_vl.legacy_mrope case holds it to the module).
    case = next(c for c in BY_TYPE["qwen2_5_vl"] if c["variant"] == "legacy_mrope")
    layer = _read(case)
    assert layer is not None and _disagreement(case, layer) is None
    assert layer.rope_scaling["mrope_section"] == [16, 24, 24]


@pytest.mark.parametrize(
    ("model_type", "text_type"), [("llava", "llama"), ("mistral3", "mistral")]
)
def test_a_wrapper_reads_its_text_model_from_text_config(model_type, text_type):
    # Issue 37: wrappers of a supported text model (their survey cases hold
    # them to the text model's own module) read `text_config` as that model.
    text = {"hidden_size": 5120, "num_attention_heads": 32, "head_dim": 128}
    text["rope_theta"] = 1e9
    wrapped = {"model_type": model_type, "text_config": text}
    direct = {"model_type": text_type, **text}
    assert _arguments(RotaryEmbedding.from_hf_config(wrapped)) == _arguments(
        RotaryEmbedding.from_hf_config(direct)
    )
    assert _hf_architectures.ARCHITECTURES[model_type].text == text_type


def test_without_model_type_the_standard_keys_are_read_as_llama_reads_them():
    # The documented generic path: the same keys, the same layer as Llama's.
    config = {k: v for k, v in _config("llama").items() if k != "model_type"}
    assert _arguments(RotaryEmbedding.from_hf_config(config)) == _arguments(
        RotaryEmbedding.from_hf_config(_config("llama"))
    )


# -- refused, by name ------------------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


def _with(base, **keys):
    return {**base, **keys}


BAD = [
    # Odd JSON types in a RoPE dict: a ValueError naming the key and value.
    (
        "rope-type-list",
        _with(LLAMA, rope_scaling={"rope_type": ["yarn"], "factor": 2.0}),
        {},
        r"`rope_scaling`, expected 'rope_type' to be a string \(a rope_type name\). "
        r"Received: rope_scaling=\{'rope_type': \['yarn'\]\}",
    ),
    (
        "legacy-type-list",
        _with(LLAMA, rope_scaling={"type": ["yarn"], "factor": 2.0}),
        {},
        r"`rope_scaling`, expected 'type' to be a string \(a rope_type name\). "
        r"Received: rope_scaling=\{'type': \['yarn'\]\}",
    ),
    (
        "rope-type-dict",
        _with(LLAMA, rope_parameters={"rope_type": {"x": 1}}),
        {},
        r"`rope_parameters`, expected 'rope_type' to be a plain JSON value, not a "
        r"dict \(a dict of dicts, every value one, is a RoPE per layer type\). "
        r"Received: rope_parameters=\{'rope_type': \{'x': 1\}\}",
    ),
    (
        "factor-dict",
        _with(LLAMA, rope_parameters={**YARN, "factor": {"x": 1}}),
        {},
        r"`rope_parameters`, expected 'factor' to be a plain JSON value, not a dict",
    ),
    (
        "hidden-size-past-float64",
        _with(LLAMA, hidden_size=10**400),
        {},
        r"`hidden_size`, expected a head dimension of at most 65536 \(the widest "
        r"rotary dimension\). Received: hidden_size=1000",
    ),
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
        r"`rope_parameters`, expected a rope_type transformers' llama reads as"
        r" verified, one of \('default', 'linear', 'dynamic', 'yarn', 'llama3',"
        r" 'longrope'\). Received: rope_parameters=\{'rope_type': 'ntk'\}",
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
        r"`rotary_dim`, expected a positive integer \(the features it rotates\)",
    ),
    (
        "falcon-alibi",
        {"model_type": "falcon", "alibi": True},
        {},
        r"`alibi`, expected false or null \(with ALiBi, Falcon uses no RoPE:"
        r" build its bias with keras_posenc.AlibiBias.from_hf_config\(config\)\)."
        r" Received: alibi=True",
    ),
    (
        "falcon-alibi-int",
        {"model_type": "falcon", "alibi": 1},
        {},
        r"`alibi`, expected false or null .* Received: alibi=1",
    ),
    (
        "falcon-alibi-str",
        {"model_type": "falcon", "alibi": "true"},
        {},
        r"`alibi`, expected false or null .* Received: alibi='true'",
    ),
    (
        "granite-hybrid-nope",
        {"model_type": "granitemoehybrid", "position_embedding_type": "nope"},
        {},
        r"`position_embedding_type`, expected 'rope' \(Granite 4 hybrid models use"
        r" RoPE only then; 'nope' and its default, null, mean none\)."
        r" Received: position_embedding_type='nope'",
    ),
    (
        "esm-absolute",
        {"model_type": "esm", "position_embedding_type": "absolute"},
        {},
        r"`position_embedding_type`, expected 'rotary' \(ESM uses RoPE only then;"
        r" its default, 'absolute', adds learned absolute position embeddings: no"
        r" RoPE\). Received: position_embedding_type='absolute'",
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
        "gemma3-key-beside-text-config",
        {"model_type": "gemma3", "hidden_size": 256},
        {},
        r"`hidden_size`, expected no 'hidden_size' key beside `text_config`:"
        r" transformers' gemma3 reads its text model's from `text_config`",
    ),
    (
        "text-config-str",
        {"model_type": "gemma3", "text_config": "gemma3_text"},
        {},
        r"`text_config`, expected None or a dict \(the text model of model_type"
        r" 'gemma3'\)",
    ),
    (
        "gemma3-flat-rope-parameters",
        {
            "model_type": "gemma3_text",
            "rope_parameters": {"rope_type": "linear", "factor": 8.0},
        },
        {"layer_type": "full_attention"},
        r"`rope_parameters`, expected a dict per layer type \('full_attention',"
        r" 'sliding_attention'\): transformers' gemma3_text rotary module reads"
        r" only those",
    ),
    (
        "llama-4-scaling-beta",
        _with(
            LLAMA,
            max_position_embeddings=16384,
            rope_scaling=_with(YARN, llama_4_scaling_beta=0.1),
        ),
        {},
        r"`rope_scaling`, expected no 'llama_4_scaling_beta' key: Ministral 3 and"
        r" Llama 4 scale the queries by 1 \+ beta \* log\(1 \+ floor\(position /"
        r" original_max_position_embeddings\)\) after RoPE, which a RoPE layer"
        r" cannot express \(scale them in the attention\)",
    ),
    (
        "mistral3-without-text-config",
        {"model_type": "mistral3"},
        {},
        r"`text_config`, expected a dict \(the text model of model_type"
        r" 'mistral3'; without one, transformers builds mistral3's own text"
        r" defaults, not read here\). Received: text_config=None",
    ),
    (
        "dory-flat-scaling",
        {"model_type": "dory", "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        {"layer_type": "full_attention"},
        r"`rope_scaling`, expected a dict per layer type in 'rope_parameters'"
        r" \(\['full_attention', 'sliding_attention'\]\): transformers' dory reads"
        r" its RoPE per layer type",
    ),
    (
        "gemma3-scaling-without-full-dict",
        {
            "model_type": "gemma3_text",
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "rope_parameters": {"sliding_attention": {"rope_type": "default"}},
        },
        {"layer_type": "full_attention"},
        r"`rope_scaling`, expected None, or a dict that updates"
        r" rope_parameters\['full_attention'\]",
    ),
    (
        "both-rope-dicts",
        _with(
            LLAMA,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
            rope_parameters={"rope_type": "linear", "factor": 4.0},
        ),
        {},
        r"`rope_parameters`, expected no 'rope_parameters' beside a different"
        r" 'rope_scaling' \(transformers reads 'rope_scaling' and drops it\)",
    ),
    (
        "max-positions-huge",
        _with(LLAMA, max_position_embeddings=10**400),
        {},
        r"`max_position_embeddings`, expected a positive integer <= 9007199254740992",
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


# -- issue 30: model types read as their own modules read them -------------------------


def test_nanochat_is_refused_for_rotating_by_minus_the_angle():
    # Its rotate_half is cat(x2, -x1): no layout of RotaryEmbedding turns that way.
    with pytest.raises(ValueError, match=r"'nanochat': its attention rotates by minus"):
        RotaryEmbedding.from_hf_config({"model_type": "nanochat"})


def test_gpt_neox_japanese_reads_rotary_pct_and_rotary_emb_base():
    config = {
        "model_type": "gpt_neox_japanese",
        "hidden_size": 512,
        "num_attention_heads": 8,
        "rotary_pct": 0.5,
        "rotary_emb_base": 20000,
    }
    layer = RotaryEmbedding.from_hf_config(config)
    assert (layer.rotary_dim, layer.max_wavelength) == (32, 20000.0)


@pytest.mark.parametrize(
    "model_type",
    [
        "vaultgemma",
        "glm4_moe",
        "smollm3",
        "apertus",
        "seed_oss",
        "nemotron",
        "persimmon",
        "minimax",
        "qwen3_vl_text",
        "qwen3_vl",
    ],
)
def test_types_transformers_reads_as_llama_are_read(model_type):
    # The ten of issue 30, each verified by its survey cases.
    assert model_type in _hf_architectures.ARCHITECTURES


@pytest.mark.parametrize(
    "layer_type, base", [("sliding_attention", 1e4), ("full_attention", 1e7)]
)
def test_dory_without_rope_parameters_reads_its_per_layer_bases(layer_type, base):
    # transformers fills sliding 1e4 and full 1e7 when rope_parameters is absent.
    config = {"model_type": "dory", "head_dim": 64}
    layer = RotaryEmbedding.from_hf_config(config, layer_type=layer_type)
    assert (layer.max_wavelength, layer.rope_scaling) == (base, None)


def test_gemma3_rope_scaling_updates_the_full_attention_dict_of_nested_parameters():
    # transformers: rope_parameters['full_attention'].update(rope_scaling); the
    # sliding dict stays as given.
    config = {
        "model_type": "gemma3_text",
        "head_dim": 64,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 3e4},
        },
    }
    full = RotaryEmbedding.from_hf_config(config, layer_type="full_attention")
    sliding = RotaryEmbedding.from_hf_config(config, layer_type="sliding_attention")
    assert (full.max_wavelength, full.rope_scaling) == (
        1e6,
        {"rope_type": "linear", "factor": 8.0},
    )
    assert (sliding.max_wavelength, sliding.rope_scaling) == (3e4, None)


def test_phi3_su_is_longrope_with_the_top_level_length():
    # transformers renames "su" to "longrope", then completes the length
    # again: the top-level original_max_position_embeddings wins (4096, its
    # default), so the factor is 4096 / 4096 and the attention factor 1.
    factors = {"short_factor": [1.0] * 48, "long_factor": [2.0] * 48}
    scaling = {"type": "su", **factors, "original_max_position_embeddings": 2048}
    layer = RotaryEmbedding.from_hf_config(
        {"model_type": "phi3", "rope_scaling": scaling}
    )
    assert layer.rope_scaling["rope_type"] == "longrope"
    assert layer.rope_scaling["original_max_position_embeddings"] == 4096
    assert layer.attention_factor == 1.0


def test_phi3_su_without_a_length_is_refused_as_transformers_fails():
    scaling = {"type": "su", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}
    with pytest.raises(ValueError, match=r"a 'original_max_position_embeddings' key"):
        RotaryEmbedding.from_hf_config({"model_type": "phi3", "rope_scaling": scaling})


def test_qwen3_5_reads_its_text_config():
    # The composite file: the text model under text_config, as Gemma 3's.
    rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
    text = {"head_dim": 256, "rope_parameters": rope}
    layer = RotaryEmbedding.from_hf_config(
        {"model_type": "qwen3_5", "text_config": text}
    )
    alone = RotaryEmbedding.from_hf_config({"model_type": "qwen3_5_text", **text})
    assert _arguments(layer) == _arguments(alone)
    assert layer.max_wavelength == 1e7


def test_finetuned_in_rope_scaling_is_ignored_with_a_warning_naming_it():
    # Yarn-Llama-2: transformers warns about 'finetuned' and ignores it.
    yarn = {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}
    config = {**LLAMA, "max_position_embeddings": 65536}
    with pytest.warns(UserWarning, match=r"`rope_scaling` holds 'finetuned': True,"):
        read = RotaryEmbedding.from_hf_config(
            {**config, "rope_scaling": {**yarn, "finetuned": True}}
        )
    plain = RotaryEmbedding.from_hf_config({**config, "rope_scaling": yarn})
    assert _arguments(read) == _arguments(plain)


# -- issue 29: bad input refused early, by name ----------------------------------------


def _refused_quickly(config, match, **kwargs):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, **kwargs)
    assert time.perf_counter() - start < 0.5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    _refused_quickly(
        tmp_path, r"`config`, expected .* \(.*config.json' is not a regular"
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_config_json_linked_to_dev_zero_is_refused_unread(tmp_path):
    os.symlink("/dev/zero", tmp_path / "config.json")
    _refused_quickly(tmp_path, r"`config`, expected .* is not a regular file")


def test_a_file_past_the_size_cap_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(" " * (4 << 20) + "{}")
    _refused_quickly(tmp_path, r"\(a file of at most 4194304 bytes\)")


@pytest.mark.parametrize("depth", [17, 100_000], ids=["past-the-cap", "past-recursion"])
def test_deeply_nested_json_is_refused(tmp_path, depth):
    (tmp_path / "config.json").write_text('{"a":' * depth + "1" + "}" * depth)
    _refused_quickly(tmp_path, r"\(nested at most 16 levels deep\)")


def test_a_dict_with_keys_that_are_not_strings_is_refused():
    config = {**LLAMA, 3: "x"}
    _refused_quickly(
        config, r"`config`, expected .* \(string keys, as JSON has, not 3\)"
    )


@pytest.mark.parametrize("seq_len", [-5, 0, 2.5, 2**31 + 1])
def test_bad_seq_len_is_refused(seq_len):
    _refused_quickly(LLAMA, r"`seq_len`, expected a positive integer", seq_len=seq_len)


def test_an_argument_read_from_the_config_cannot_be_given_again():
    # from_hf_config(config, rotary_dim=...) would pass rotary_dim twice.
    with pytest.raises(
        ValueError,
        match=r"`rotary_dim`, expected no `rotary_dim` argument to from_hf_config: "
        r"it is read from `config` \(here 64\); build the layer directly to set it. "
        r"Received: rotary_dim=32",
    ):
        _hf_config.layer_arguments(LLAMA, overrides={"rotary_dim": 32})
    with pytest.raises(ValueError, match=r"expected no `rotary_dim` argument"):
        RotaryEmbedding.from_hf_config(LLAMA, rotary_dim=32)


@pytest.mark.parametrize(
    "count, match",
    [
        (2_000_000, r"`config`, expected .* \(at most 262144 values in all\)"),
        (
            40_000,
            r"'short_factor' to be a non-empty list of at most 32768 finite numbers",
        ),
    ],
    ids=["past-the-config-cap", "past-the-key-cap"],
)
def test_long_lists_are_refused_by_length_first_and_echoed_short(count, match):
    # Lengths are checked before values: fast, and the message is one line.
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0] * count,
        "long_factor": [1.0] * count,
        "original_max_position_embeddings": 4096,
    }
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match) as raised:
        RotaryEmbedding.from_hf_config({**LLAMA, "rope_scaling": scaling})
    assert time.perf_counter() - start < 0.5
    assert len(str(raised.value)) < 1000
