"""The RoPE configuration: `_rope_config.RopeConfig` and `_rope_types`' registry.

Keys, frequencies and attention factors per `rope_type`, and every error of
`RopeConfig.build` (the layer's own arguments are tested in test_rotary.py).
"""

import json
import math
import os
import sys
import time

import numpy as np
import pytest
from _helpers import LLAMA3, MROPE, exact

import keras_posenc
from keras_posenc._rope.config import MAX_ROTARY_DIM, RopeConfig
from keras_posenc._rope.scalings import KEYS, REGISTRY

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "rope")
with open(os.path.join(GOLDEN, "cases.json")) as _f:
    CASES = json.load(_f)
with open(os.path.join(GOLDEN, "extra_cases.json")) as _f:
    EXTRA_CASES = json.load(_f)

LINEAR = {"rope_type": "linear", "factor": 4.0}
DYNAMIC = {
    "rope_type": "dynamic",
    "factor": 2.0,
    "original_max_position_embeddings": 64,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0, 1.5],
    "long_factor": [2.0, 4.0],
    "original_max_position_embeddings": 64,
    "factor": 2.0,
}
# A hostile list: two million elements (a 1 KiB config can hold it zipped).
HUGE = [1.0] * 2_000_000
PROPORTIONAL = {"rope_type": "proportional", "partial_rotary_factor": 0.25}
ONE_OF_EACH = [None, LINEAR, DYNAMIC, YARN, LLAMA3, LONGROPE, PROPORTIONAL, MROPE]
ONE_OF_EACH_IDS = ["none", "linear", "dynamic", "yarn", "llama3", "longrope"]
ONE_OF_EACH_IDS += ["proportional", "mrope"]


def _as_rope_scaling(case):
    """Our `rope_scaling` for a case's standardized transformers parameters.

    `rope_theta` and `partial_rotary_factor` are arguments here; what
    transformers reads outside `rope_parameters` comes in as keys: the
    model's length for dynamic, the serving length `seq_len`, and
    longrope's default factor.
    """
    params = dict(case["rope_parameters"])
    params.pop("rope_theta")
    params.pop("partial_rotary_factor", None)
    config = case["hf_config"]
    if params["rope_type"] == "dynamic":
        params["original_max_position_embeddings"] = config["max_position_embeddings"]
    if params["rope_type"] == "longrope":
        params["factor"] = (
            config["max_position_embeddings"]
            / config["original_max_position_embeddings"]
        )
    if params["rope_type"] in ("dynamic", "longrope"):
        params["seq_len"] = case["seq_len"]
    return params


# -- the object ------------------------------------------------------------------


def test_equal_arguments_give_one_hashable_config():
    # Equal values (4 and 4.0) are one configuration, one cache entry.
    first = RopeConfig.build(rope_scaling={"rope_type": "linear", "factor": 4})
    second = RopeConfig.build(rope_scaling=dict(LINEAR))
    assert first == second and hash(first) == hash(second)
    assert len({first, second, RopeConfig.build()}) == 2


def test_config_is_frozen():
    config = RopeConfig.build()
    with pytest.raises(AttributeError):
        config.max_wavelength = 1.0


@pytest.mark.parametrize("scaling", ONE_OF_EACH, ids=ONE_OF_EACH_IDS)
def test_rope_scaling_rebuilds_the_same_config(scaling):
    # get_config's plain JSON gives back an equal configuration.
    config = RopeConfig.build(500000.0, scaling)
    plain = json.loads(json.dumps(config.rope_scaling))
    assert RopeConfig.build(500000.0, plain) == config


def test_default_rope_type_is_no_scaling():
    assert RopeConfig.build(rope_scaling={"rope_type": "default"}).rope_scaling is None


def test_every_key_is_listed_with_none_where_absent():
    # Absent optional keys read None (transformers' default), truncate True.
    scaling = RopeConfig.build(rope_scaling=YARN).rope_scaling
    assert scaling == dict(
        YARN,
        attention_factor=None,
        beta_fast=None,
        beta_slow=None,
        mscale=None,
        mscale_all_dim=None,
        truncate=True,
    )


def test_keys_are_transformers_rope_parameters():
    # Each type's keys in transformers 5.23's standardized rope_parameters
    # (its `_validate_*_rope_parameters` and init functions), rope_theta and
    # partial_rotary_factor aside; plus what it reads elsewhere: the model's
    # length (dynamic) and the serving length `seq_len` (dynamic, longrope).
    orig = "original_max_position_embeddings"
    assert KEYS == {
        "default": ((), ()),
        "linear": (("factor",), ()),
        "dynamic": (("factor", orig), ("seq_len",)),
        "yarn": (
            ("factor", orig),
            (
                "attention_factor",
                "beta_fast",
                "beta_slow",
                "mscale",
                "mscale_all_dim",
                "truncate",
            ),
        ),
        "llama3": (("factor", "low_freq_factor", "high_freq_factor", orig), ()),
        "longrope": (
            ("short_factor", "long_factor", orig),
            ("factor", "attention_factor", "seq_len"),
        ),
        "proportional": ((), ("factor", "partial_rotary_factor")),
    }
    assert set(REGISTRY) == set(KEYS)


# -- frequencies and attention factors ---------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_standardized_rope_parameters_give_hf_frequencies(case):
    # transformers' own standardized dict is accepted as is, and gives its
    # formula in float64 (not its float32 rounding) and its attention factor.
    theta = case["rope_parameters"]["rope_theta"]
    config = RopeConfig.build(theta, _as_rope_scaling(case))
    golden = np.load(os.path.join(GOLDEN, f"{case['name']}.inv_freq64.npy"))
    np.testing.assert_allclose(config.frequencies(case["dim"]), golden, rtol=1e-12)
    assert config.attention_factor == case["attention_factor"]


@pytest.mark.parametrize("case", EXTRA_CASES, ids=[c["name"] for c in EXTRA_CASES])
def test_extra_goldens_give_hf_frequencies(case):
    # Multimodal (default frequencies), proportional, yarn with truncate None.
    arguments = {k: v for k, v in case["arguments"].items() if k != "layout"}
    config = RopeConfig.build(**arguments)
    golden = np.load(os.path.join(GOLDEN, f"{case['name']}.inv_freq64.npy"))
    frequencies = config.frequencies(case["rotary_dim"])
    np.testing.assert_allclose(frequencies, golden, rtol=1e-12, atol=0)
    assert config.attention_factor == case["attention_factor"]


def test_default_frequencies_are_the_formula_rounded_once():
    # rope_theta ** (-2i / dim) with 40 digits, rounded to float64.
    import mpmath

    mpmath.mp.dps = 40
    want = [float(mpmath.mpf(500000) ** (mpmath.mpf(-2 * i) / 128)) for i in range(64)]
    np.testing.assert_array_equal(RopeConfig.build(500000.0).frequencies(128), want)


def test_tiny_base_frequencies_are_exact():
    # max_wavelength=1e-300: frequencies up to 1e295, each rounded once.
    import mpmath

    mpmath.mp.dps = 40
    base = mpmath.mpf(1e-300)
    want = [float(base ** (mpmath.mpf(-2 * i) / 64)) for i in range(32)]
    np.testing.assert_array_equal(RopeConfig.build(1e-300).frequencies(64), want)


def test_yarn_truncate_none_does_not_truncate():
    # transformers tests `if truncate:`: None is False, absent is True.
    none = RopeConfig.build(rope_scaling=dict(YARN, truncate=None))
    false = RopeConfig.build(rope_scaling=dict(YARN, truncate=False))
    absent = RopeConfig.build(rope_scaling=YARN)
    assert none == false and none.frequencies(64) == false.frequencies(64)
    assert none.frequencies(64) != absent.frequencies(64)


def test_proportional_rotates_a_fraction_at_head_dim_exponents():
    # int(0.25 * 64 // 2) = 8 frequencies base ** (-2i / 64) / factor, then 0.
    config = RopeConfig.build(rope_scaling=dict(PROPORTIONAL, factor=2.0))
    want = np.concatenate([10000.0 ** -(np.arange(0, 16, 2) / 64) / 2, np.zeros(24)])
    np.testing.assert_allclose(config.frequencies(64), want, rtol=1e-15, atol=0)


def test_proportional_zero_fraction_rotates_nothing():
    config = RopeConfig.build(rope_scaling=dict(PROPORTIONAL, partial_rotary_factor=0))
    assert config.frequencies(8) == (0.0,) * 4


def test_longrope_picks_long_factors_past_the_original_length():
    # seq_len > original_max_position_embeddings: long factors.
    short = RopeConfig.build(rope_scaling=dict(LONGROPE, seq_len=64))
    long = RopeConfig.build(rope_scaling=dict(LONGROPE, seq_len=65))
    np.testing.assert_allclose(short.frequencies(4), [1.0, 0.01 / 1.5], rtol=1e-15)
    np.testing.assert_allclose(long.frequencies(4), [0.5, 0.01 / 4.0], rtol=1e-15)


def test_given_frequencies_are_used_as_given():
    # float32 values stay exact; rope_scaling only sets the attention factor.
    given = np.array([1.0, 0.1, 0.01], np.float32)
    config = RopeConfig.build(rope_scaling=YARN, inverse_frequencies=given)
    assert config.frequencies(6) == tuple(float(w) for w in given)
    assert config.attention_factor == 0.1 * math.log(4.0) + 1.0


# -- multimodal sections -------------------------------------------------------------


def test_contiguous_sections_take_rows_in_turn():
    # Qwen2-VL: sections of 1, 2, 1, 2 frequencies read rows 0, 1, 2, 0.
    config = RopeConfig.build(rope_scaling={**MROPE, "mrope_section": [1, 2, 1, 2]})
    assert config.channel_rows(12) == (0, 1, 1, 2, 0, 0)


def test_interleaved_sections_take_every_third_frequency():
    # Qwen3-VL: height at 1, 4, ..., width at 2, 5, ..., temporal elsewhere.
    scaling = {**MROPE, "mrope_section": [4, 2, 2], "mrope_interleaved": True}
    config = RopeConfig.build(rope_scaling=scaling)
    assert config.channel_rows(16) == (0, 1, 2, 0, 1, 2, 0, 0)


def test_no_sections_no_rows():
    assert RopeConfig.build().channel_rows(8) is None


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scaling, match",
    [
        (
            {"rope_type": "linear"},
            exact(
                "Received an invalid value for `rope_scaling`, expected a 'factor' "
                "key for rope_type='linear'. Received: rope_scaling="
                "{'rope_type': 'linear'}"
            ),
        ),
        ({**LLAMA3, "low_freq_factor": None}, r"a 'low_freq_factor' key for rope_type"),
        ({"rope_type": "dynamic", "factor": 2.0}, r"a 'original_max_position_emb"),
        ({"rope_type": "yarn", "factor": 4.0}, r"a 'original_max_position_emb"),
    ],
    ids=["linear-factor", "llama3-none", "dynamic-length", "yarn-length"],
)
def test_missing_required_keys_are_refused(scaling, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize(
    "scaling, match",
    [
        ({**LINEAR, "scale": 1}, r"not \['scale'\] for rope_type='linear'"),
        ({**YARN, "beta_fst": 32}, r"not \['beta_fst'\] for rope_type='yarn'"),
        (
            {**LINEAR, "rope_theta": 1e4},
            r"not \['rope_theta'\] \('rope_theta' is the `max_wavelength` argument\)",
        ),
        (
            {**LINEAR, "partial_rotary_factor": 0.5},
            r"\('partial_rotary_factor' is the `rotary_dim` argument\)",
        ),
        ({**LINEAR, "mrope": [1]}, r"not \['mrope'\]"),
        ({"rope_type": "ntk", "factor": 2.0}, r"a 'rope_type' key, one of \('default'"),
        ({"rope_type": "mrope"}, r"a 'rope_type' key, one of"),
        ({"type": "linear", "factor": 2.0}, r"a 'rope_type' key, one of"),
    ],
    ids=[
        "linear",
        "misspelt",
        "theta",
        "partial",
        "mrope",
        "ntk",
        "mrope-type",
        "type",
    ],
)
def test_unknown_keys_and_types_are_refused_by_name(scaling, match):
    # Nothing is ignored: a key the rope_type does not read is an error.
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize("scaling", ["linear", ["linear"], 4.0])
def test_rope_scaling_must_be_a_dict(scaling):
    with pytest.raises(ValueError, match=r"`rope_scaling`, expected None or a dict"):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize(
    "scaling, match",
    [
        ({**LINEAR, "factor": -2.0}, r"'factor' to be a finite number > 0"),
        ({**LINEAR, "factor": True}, r"'factor' to be a finite number > 0"),
        ({**LINEAR, "factor": "4"}, r"'factor' to be a finite number > 0"),
        ({**LINEAR, "factor": float("nan")}, r"'factor' to be a finite number > 0"),
        ({**LINEAR, "factor": 10**400}, r"'factor' to be a finite number > 0"),
        ({**YARN, "mscale": float("inf")}, r"'mscale' to be a finite number for"),
        ({**YARN, "attention_factor": 0.0}, r"'attention_factor' to be a finite numb"),
        ({**YARN, "beta_fast": 0}, r"'beta_fast' to be a finite number > 0"),
        ({**YARN, "truncate": 1}, r"'truncate' to be a bool or None"),
        (
            {**DYNAMIC, "original_max_position_embeddings": 2048.5},
            r"'original_max_position_embeddings' to be a positive integer",
        ),
        ({**DYNAMIC, "seq_len": 0}, r"'seq_len' to be a positive integer"),
        (
            {**LONGROPE, "short_factor": []},
            r"'short_factor' to be a non-empty list of at most 32768 finite numbers"
            r" > 0",
        ),
        ({**LONGROPE, "long_factor": [[1.0, 2.0]]}, r"'long_factor' to be a non-em"),
        ({**LONGROPE, "long_factor": "1.0"}, r"'long_factor' to be a non-empty list"),
        ({**PROPORTIONAL, "partial_rotary_factor": 1.5}, r"to be a number in \[0, 1\]"),
    ],
    ids=[
        "negative",
        "bool",
        "string",
        "nan",
        "10**400",
        "inf",
        "zero-attention",
        "zero-beta",
        "truncate-int",
        "float-length",
        "zero-seq-len",
        "empty-list",
        "nested-list",
        "string-list",
        "fraction",
    ],
)
def test_bad_values_are_refused_by_key(scaling, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize(
    "scaling, match",
    [
        ({**MROPE, "mrope_section": []}, r"'mrope_section' to be a non-empty list"),
        ({**MROPE, "mrope_section": [1.0, 1, 2]}, r"'mrope_section' to be a non-em"),
        ({**MROPE, "mrope_section": [0, 0, 0]}, r"integers >= 0, not all 0"),
        ({**MROPE, "mrope_section": [2, -1, 3]}, r"'mrope_section' to be a non-em"),
        ({**MROPE, "mrope_section": 4}, r"'mrope_section' to be a non-empty list"),
        ({**MROPE, "mrope_interleaved": "yes"}, r"'mrope_interleaved' to be a bool"),
        (
            {"rope_type": "default", "mrope_interleaved": True},
            r"an 'mrope_section' of 3 values with 'mrope_interleaved'",
        ),
        (
            {**MROPE, "mrope_section": [1, 1, 1, 1], "mrope_interleaved": True},
            r"an 'mrope_section' of 3 values with 'mrope_interleaved'",
        ),
    ],
    ids=["empty", "float", "zeros", "negative", "int", "flag", "alone", "four"],
)
def test_malformed_sections_are_refused(scaling, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize(
    "scaling, dim, match",
    [
        (MROPE, 10, r"'mrope_section' summing to rotary_dim / 2 = 5 for rope_type"),
        (
            {**MROPE, "mrope_section": [0, 3, 1], "mrope_interleaved": True},
            8,
            r"an interleaved 'mrope_section' whose height and width frequencies",
        ),
        (
            {**LONGROPE, "long_factor": [1.0, 2.0, 3.0]},
            4,
            r"'long_factor' with rotary_dim / 2 = 2 values for rope_type='longrope'",
        ),
        (DYNAMIC, 2, r"`rotary_dim`, expected an even integer > 2 with dynamic"),
    ],
    ids=["section-sum", "interleaved-fit", "unused-long-factor", "dynamic-2"],
)
def test_rules_of_the_rotary_dimension(scaling, dim, match):
    # Checked at construction when rotary_dim is given (else at build).
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling, rotary_dim=dim)


@pytest.mark.parametrize(
    "scaling, match",
    [
        (
            {**LLAMA3, "high_freq_factor": 0.5},
            r"'high_freq_factor' >= 'low_freq_factor'",
        ),
        (
            {key: v for key, v in LONGROPE.items() if key != "factor"},
            r"a 'factor' key \(or an explicit 'attention_factor'\) "
            r"for rope_type='longrope'",
        ),
    ],
    ids=["llama3", "longrope"],
)
def test_cross_key_rules(scaling, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rope_scaling=scaling)


def test_llama3_equal_freq_factors_give_transformers_frequencies():
    # low == high leaves no smoothed band: each frequency is kept, or divided
    # by `factor` past the wavelength orig / low (transformers' torch.where,
    # in float64 here: its float32 values are within a few ulps of these).
    scaling = {**LLAMA3, "low_freq_factor": 2.0, "high_freq_factor": 2.0}
    config = RopeConfig.build(500000.0, scaling)
    base = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    wavelength = 2 * np.pi / base
    want = np.where(wavelength > 8192 / 2.0, base / 8.0, base)
    got = np.array(config.frequencies(128))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize(
    "keys",
    [
        {"beta_fast": 5e-324},
        {"beta_fast": 1e308, "beta_slow": 1e308},
        {"original_max_position_embeddings": 10**400},
    ],
    ids=["beta-fast-tiny", "betas-huge", "length-past-float64"],
)
def test_yarn_range_past_float64_is_refused_at_construction(keys):
    # transformers' math.log(orig / (2 pi beta)) would raise OverflowError or
    # "math domain error" at the first call: refused here, by key.
    with pytest.raises(
        ValueError,
        match=r"`rope_scaling`, expected '(beta_fast|beta_slow)' and "
        r"'original_max_position_embeddings' whose ratio float64 holds",
    ):
        RopeConfig.build(rope_scaling={**YARN, **keys})


@pytest.mark.parametrize("key", ["short_factor", "long_factor"])
def test_long_factor_lists_are_refused_by_length_first(key):
    # 2 million factors: refused on their count, fast, with a short message.
    scaling = {**LONGROPE, key: [1.0] * 2_000_000}
    start = time.perf_counter()
    with pytest.raises(ValueError) as raised:
        RopeConfig.build(rope_scaling=scaling)
    assert time.perf_counter() - start < 0.5
    message = str(raised.value)
    assert f"'{key}' to be a non-empty list of at most 32768 finite numbers" in message
    assert f"'{key}': '<list of 2000000 values: 1.0, 1.0, 1.0, ...>'" in message
    assert len(message) < 1000


def _calls_made_by(fn):
    """How many Python and builtin calls `fn()` makes (it must raise ValueError)."""
    calls = [0]

    def count(frame, event, arg):
        calls[0] += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        with pytest.raises(ValueError) as raised:
            fn()
    finally:
        sys.setprofile(None)
    return calls[0], str(raised.value)


@pytest.mark.parametrize(
    "arguments",
    [
        ("short_factor", {"rope_scaling": {**LONGROPE, "short_factor": HUGE}}),
        ("long_factor", ((10000.0, {**LONGROPE, "long_factor": HUGE}), {})),
        ("mrope_section", {"rope_scaling": {**MROPE, "mrope_section": HUGE}}),
        ("inverse_frequencies", {"inverse_frequencies": HUGE}),
        ("inverse_frequencies", ((10000.0, None, None, "half", HUGE), {})),
    ],
    ids=["short", "long-positional", "mrope", "frequencies", "frequencies-positional"],
)
def test_a_layer_refuses_huge_lists_before_reading_their_elements(arguments):
    # Keras walks every constructor argument before `__init__` (2.4 s of CPU
    # for two lists of 2 million factors): the lengths are checked first, so
    # the refusal makes a few thousand calls, none per element.
    key, given = arguments
    args, kwargs = given if isinstance(given, tuple) else ((), given)
    calls, message = _calls_made_by(
        lambda: keras_posenc.RotaryEmbedding(*args, **kwargs)
    )
    assert calls < 20_000, calls
    assert key in message and len(message) < 1000
    if key == "inverse_frequencies":
        expected = "at most 32768 values (rotary_dim <= 65536). Received: "
        assert expected + "inverse_frequencies='<2000000 values>'" in message


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 2.0, **{f"k{i}": i for i in range(10**5)}},
        {"rope_type": "x" * 10**6},
    ],
    ids=["many-unknown-keys", "huge-rope-type"],
)
def test_huge_values_are_echoed_in_one_short_line(scaling):
    with pytest.raises(ValueError, match=r"Received: rope_scaling=") as raised:
        RopeConfig.build(rope_scaling=scaling)
    message = str(raised.value)
    assert len(message) < 1000 and "\n" not in message
    assert "<100002 keys>" in message or "<str of 1000000 characters" in message


def test_long_mrope_section_is_refused_by_length_first():
    scaling = {**MROPE, "mrope_section": [1] * 40_000}
    with pytest.raises(ValueError) as raised:
        RopeConfig.build(rope_scaling=scaling)
    message = str(raised.value)
    assert "'mrope_section' to be a non-empty list of at most 32768 integers" in message
    assert len(message) < 1000


def test_yarn_mscale_all_dim_zero_denominator_is_refused():
    # 0.1 * -10 * log(e) + 1 == 0: transformers divides by zero.
    scaling = {**YARN, "factor": math.e, "mscale": 1.0, "mscale_all_dim": -10}
    with pytest.raises(ValueError, match=r"'mscale_all_dim' that leaves the attenti"):
        RopeConfig.build(rope_scaling=scaling)


def test_yarn_negative_attention_factor_is_refused():
    # mscale_all_dim=-1 at factor 1e6: 2.38 / -0.38, a negative factor.
    scaling = {**YARN, "factor": 1e6, "mscale": 1.0, "mscale_all_dim": -1}
    with pytest.raises(
        ValueError,
        match=r"an attention factor \(from \('attention_factor', 'factor', 'mscale', "
        r"'mscale_all_dim'\)\) that float32 holds.*they give -6.24",
    ):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize("factor", [1e39, 1e-50])
def test_attention_factor_outside_float32_is_refused(factor):
    # float32 would make it inf (every output inf or NaN) or 0.
    with pytest.raises(ValueError, match=r"an attention factor .* that float32 holds"):
        RopeConfig.build(rope_scaling={**YARN, "attention_factor": factor})


def test_longrope_length_one_is_refused():
    # sqrt(1 + log(factor) / log(1)): transformers divides by zero.
    scaling = {**LONGROPE, "original_max_position_embeddings": 1}
    with pytest.raises(
        ValueError, match=r"'original_max_position_embeddings' > 1 when 'factor' > 1"
    ):
        RopeConfig.build(rope_scaling=scaling)


@pytest.mark.parametrize("base", [5e-324, 1e-310])
def test_base_past_float64_frequencies_is_refused(base):
    # 1 / base overflows float64: refused at construction, not at first call.
    with pytest.raises(
        ValueError,
        match=r"`max_wavelength`, expected a base whose inverse frequencies fit in "
        r"float64",
    ):
        RopeConfig.build(base)


def test_tiny_base_and_factor_past_float64_are_refused():
    # 1 / (1e-300 * 1e-300) = 1e600 rad per position.
    with pytest.raises(ValueError, match=r"'factor' large enough that the inverse"):
        RopeConfig.build(1e-300, {**LINEAR, "factor": 1e-300})


def test_yarn_base_one_is_refused():
    with pytest.raises(ValueError, match=r"`max_wavelength`, expected a base other"):
        RopeConfig.build(1.0, YARN)


@pytest.mark.parametrize("base", [0.0, -1.0, float("inf"), "1e4", True])
def test_bad_base_is_refused(base):
    with pytest.raises(ValueError, match=r"`max_wavelength`, expected a finite numbe"):
        RopeConfig.build(base)


@pytest.mark.parametrize(
    "given, match",
    [
        (
            [1.0, float("nan")],
            r"`inverse_frequencies`, expected a 1-D array of finite inverse "
            r"frequencies >= 0",
        ),
        ([1.0, -0.5], r"Received: inverse_frequencies=\[1.0, -0.5\]"),
        ([[1.0]], r"`inverse_frequencies`, expected a 1-D array"),
        ([], r"`inverse_frequencies`, expected a 1-D array"),
        (
            np.array([1 + 1j, 0.5]),
            r"Received: inverse_frequencies=\[\(1\+1j\), \(0.5\+0j\)\]",
        ),
        ([True, False], r"`inverse_frequencies`, expected a 1-D array"),
        ([[1.0], [1.0, 2.0]], r"`inverse_frequencies`, expected a 1-D array"),
        (["1.0"], r"`inverse_frequencies`, expected a 1-D array"),
    ],
    ids=["nan", "negative", "2-D", "empty", "complex", "bool", "ragged", "string"],
)
def test_bad_given_frequencies_are_refused(given, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(inverse_frequencies=given)


def test_given_frequency_count_must_match_rotary_dim():
    with pytest.raises(
        ValueError,
        match=r"expected rotary_dim / 2 = 2 values. "
        r"Received: inverse_frequencies='<3 values>'",
    ):
        RopeConfig.build(inverse_frequencies=[1.0, 0.1, 0.01], rotary_dim=4)


@pytest.mark.parametrize(
    "dim, match",
    [
        (
            63,
            exact(
                "Received an invalid value for `rotary_dim`, expected a positive "
                "even integer. Received: rotary_dim=63"
            ),
        ),
        (0, r"`rotary_dim`, expected a positive even integer"),
        (4.0, r"`rotary_dim`, expected a positive even integer"),
        (
            MAX_ROTARY_DIM + 2,
            exact(
                "Received an invalid value for `rotary_dim`, expected a positive "
                f"even integer <= 65536. Received: rotary_dim={MAX_ROTARY_DIM + 2}"
            ),
        ),
    ],
    ids=["odd", "zero", "float", "past-bound"],
)
def test_bad_rotary_dim_is_refused(dim, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.build(rotary_dim=dim)


def test_too_many_given_frequencies_are_refused_before_any_work():
    # 2**18 values: the bound, not the values, is checked first.
    with pytest.raises(
        ValueError,
        match=r"`inverse_frequencies`, expected at most 32768 values "
        r"\(rotary_dim <= 65536\). Received: inverse_frequencies='<262144 values>'",
    ):
        RopeConfig.build(inverse_frequencies=np.ones(2**18))
