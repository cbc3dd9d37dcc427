"""The RoPE of vision towers read from Hugging Face configs (issue 49).

Goldens: `tests/golden/hf/make_vision.py` runs each read type's own
transformers vision rotary module and its own rotation on patch ids made
by transformers' `get_vision_position_ids` (`vision.json`, `vision.npz`).
Exactness: a float64 transcription of each rule's formula (below), at
patch ids in the thousands (DINOv3: also at float32 coordinates in
[-1, 1], the ones it rotates by).
"""

import json
import os

import numpy as np
import pytest
from _helpers import keras3_only, to_numpy

import keras_posenc
from keras_posenc._hf import vision_types
from keras_posenc.rotary import RotaryEmbedding

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "hf")
with open(os.path.join(GOLDEN, "vision.json")) as _f:
    VISION = json.load(_f)
ARRAYS = np.load(os.path.join(GOLDEN, "vision.npz"))
CASES = VISION["cases"]
DEFAULTS = [c for c in CASES if c["name"].endswith(".default")]


def _per_axis(ids, d, theta):
    """Qwen2-VL's `Qwen2VLVisionRotaryEmbedding`: each axis its own
    theta ** (-2k / (d/2)), angles [h | w], twice (rotate_half)."""
    half = d // 2
    w = theta ** (-np.arange(0, half, 2, dtype=np.float64) / half)
    angles = np.concatenate([ids[..., a, None] * w for a in range(2)], -1)
    return np.concatenate([angles, angles], -1)


def _strided(ids, d, theta):
    """Pixtral's `PixtralVisionRotaryEmbedding`: theta ** (-2k / d), even k
    for the row, odd k for the column, [h | w], twice (rotate_half)."""
    w = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.concatenate([ids[..., a, None] * w[a::2] for a in range(2)], -1)
    return np.concatenate([angles, angles], -1)


def _llama4(ids, d, theta):
    """Llama 4's `Llama4VisionRotaryEmbedding`: per axis theta ** (-2k /
    (d/2)), one angle per complex pair (2k, 2k+1), [x | y]."""
    return _per_axis(ids, d, theta)[..., : d // 2]


def _gemma4(ids, d, theta):
    """Gemma 4's `Gemma4VisionRotaryEmbedding`: each axis theta ** (-2k /
    (d/2)), each axis twice in its own half of the head, [h, h, w, w]."""
    angles = _per_axis(ids, d, theta)[..., : d // 2]
    h, w = angles[..., : d // 4], angles[..., d // 4 :]
    return np.concatenate([h, h, w, w], -1)


def _dinov3(coords, d, theta):
    """DINOv3's `DINOv3ViTRopePositionEmbedding`: periods theta ** (2k /
    (d/2)) per axis, angles 2 pi x / period, [y | x], twice (rotate_half)."""
    return 2 * np.pi * _per_axis(coords, d, theta)


RULES = {
    "per_axis": _per_axis,
    "strided": _strided,
    "per_axis_interleaved": _llama4,
    "per_axis_turns": _dinov3,
    "per_axis_blocks": _gemma4,
}
# The rotation's blocks (rotate_half within each): Gemma 4's one per axis.
BLOCKS = {"per_axis_blocks": 2}


def _rotate64(q, angles, blocks=1):
    """float64 rotation of q [..., N, heads, d]: rotate_half (within each
    of `blocks` equal parts) for angles of the whole head, complex pairs
    (2k, 2k+1) for one angle per pair."""
    q = q.astype(np.float64)
    cos, sin = np.cos(angles)[..., None, :], np.sin(angles)[..., None, :]
    if angles.shape[-1] * 2 == q.shape[-1]:
        a, b = q[..., 0::2], q[..., 1::2]
        out = np.empty_like(q)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
        return out
    rotated = []
    for part in np.split(q, blocks, axis=-1):
        half = part.shape[-1] // 2
        rotated.append(np.concatenate([-part[..., half:], part[..., :half]], -1))
    return q * cos + np.concatenate(rotated, -1) * sin


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vision_part_rotates_as_its_transformers_module(case):
    # Layout guard: the model's own float32 module and rotation at a small
    # grid; its float32 angles are off by up to ulp(id) / 2 each, which
    # bounds the difference (ids < 8 for Qwen's, < 34 for Llama 4's).
    layer = RotaryEmbedding.from_hf_config(case["config"], part=case["part"])
    arrays = case.get("arrays", case["name"])  # a wrapper: its part's
    q, ids = ARRAYS[f"{arrays}.q"], ARRAYS[f"{arrays}.ids"]
    got = to_numpy(layer(q[None], positions=ids[None]))[0]
    bound = 1e-6 + 4 * 2.0**-24 * (int(np.max(ids)) + 1)
    np.testing.assert_allclose(got, ARRAYS[f"{arrays}.rotated"], atol=bound)


@pytest.mark.parametrize("case", DEFAULTS, ids=[c["name"] for c in DEFAULTS])
def test_vision_part_within_4e7_of_float64_at_ids_in_the_thousands(case):
    layer = RotaryEmbedding.from_hf_config(case["config"], part=case["part"])
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 4096, size=(2, 48, 2)).astype(np.int32)
    q = rng.uniform(-1, 1, (2, 48, 2, case["head_dim"])).astype(np.float32)
    angles = RULES[case["rule"]](ids, case["head_dim"], case["rope_theta"])
    want = _rotate64(q, angles, BLOCKS.get(case["rule"], 1))
    got = to_numpy(layer(q, positions=ids)).astype(np.float64)
    assert np.max(np.abs(got - want)) < 4e-7


def test_every_read_type_has_goldens_and_a_rule():
    named = {c["model_type"] for c in CASES}
    assert set(vision_types.READ) <= named
    assert {"qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "pixtral"} <= (
        set(vision_types.READ)
    )
    assert {r["rule"] for r in vision_types.READ.values()} == set(RULES)
    assert vision_types.READ["llama4_vision_model"]["rule"] == "per_axis_interleaved"


@pytest.mark.parametrize(
    "case", VISION["position_ids"], ids=lambda c: str(c["grid_thw"])
)
def test_vision_position_ids_equal_transformers(case):
    ids = keras_posenc.vision_position_ids(
        case["grid_thw"],
        spatial_merge_size=case["spatial_merge_size"],
        include_temporal=case["include_temporal"],
    )
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, np.array(case["ids"]))


def test_vision_position_ids_without_merge_are_pixtrals_row_major_grid():
    ids = keras_posenc.vision_position_ids([(1, 3, 4)])
    np.testing.assert_array_equal(ids, keras_posenc.grid_position_ids((3, 4)))


def test_composite_and_vision_config_alone_give_the_same_layer():
    composite = {"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 1280}}
    alone = {"model_type": "qwen2_5_vl_vision", "hidden_size": 1280}
    a = RotaryEmbedding.from_hf_config(composite, part="vision", name="v")
    b = RotaryEmbedding.from_hf_config(alone, part="vision", name="v")
    assert a.get_config() == b.get_config()
    assert a.axes_dim == (40, 40) and a.layout == "half"


def test_llava_holding_a_pixtral_tower_reads_pixtral():
    # Pixtral-12B: a Llava config whose vision_config is Pixtral's.
    config = {"model_type": "llava", "vision_config": {"model_type": "pixtral"}}
    layer = RotaryEmbedding.from_hf_config(config, part="vision")
    assert layer.axes_frequencies == "strided" and layer.axes_dim == (32, 32)


def test_qwen2_vl_reads_embed_dim_not_hidden_size():
    # Qwen2-VL's vision hidden_size is the merger's output; heads split embed_dim.
    config = {
        "model_type": "qwen2_vl",
        "vision_config": {"embed_dim": 1280, "hidden_size": 3584, "num_heads": 16},
    }
    layer = RotaryEmbedding.from_hf_config(config, part="vision")
    assert layer.axes_dim == (40, 40)


def test_top_level_rope_theta_of_a_vision_config_is_read():
    config = {"model_type": "pixtral", "rope_theta": 1000000.0}
    assert RotaryEmbedding.from_hf_config(config, part="vision").max_wavelength == 1e6


def test_a_wrapper_without_its_part_reads_its_own_default_part():
    # Mistral Large 4 builds a larger Pixtral than Pixtral's defaults.
    own = RotaryEmbedding.from_hf_config(
        {"model_type": "mistral_large4"}, part="vision"
    )
    given = {"model_type": "mistral_large4", "vision_config": {}}
    assert own.axes_dim == (64, 64)
    assert RotaryEmbedding.from_hf_config(given, part="vision").axes_dim == (32, 32)


def test_llama4_ids_rotate_as_its_fixed_table():
    # Llama 4's ids: (column + 1, row + 1) row-major, the class token at
    # (0, 0) last; interleaved pairs.
    config = {"model_type": "llama4", "vision_config": {}}
    layer = RotaryEmbedding.from_hf_config(config, part="vision")
    assert layer.layout == "interleaved" and layer.axes_dim == (24, 24)
    n = 448 // 14
    ids = keras_posenc.grid_position_ids((n, n))[:, ::-1] + 1
    ids = np.concatenate([ids, [[0, 0]]]).astype(np.int32)
    want = ARRAYS["llama4_vision_model.default.ids"]
    np.testing.assert_array_equal(ids[np.r_[0:40, len(ids) - 1]], want)


def test_llama4_head_dim_key_is_refused():
    config = {"model_type": "llama4_vision_model", "head_dim": 64}
    with pytest.raises(ValueError, match=r"`head_dim`, expected no 'head_dim' key"):
        RotaryEmbedding.from_hf_config(config, part="vision")


def test_vision_layer_plan_is_one_layer_per_block():
    config = {"model_type": "qwen2_5_vl", "vision_config": {"depth": 3}}
    plan = RotaryEmbedding.layer_plan(config, part="vision")
    assert len(plan) == 3 and plan[0] is plan[2]


@pytest.mark.parametrize("model_type", ["pixtral", "dinov3_vit", "gemma4_vision"])
def test_vision_layer_round_trips_its_config(model_type):
    layer = RotaryEmbedding.from_hf_config({"model_type": model_type}, part="vision")
    clone = RotaryEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_every_surveyed_part_is_read_or_refused_by_name():
    from keras_posenc._hf.model_types import SUPPORTED as TEXT_SUPPORTED

    for model_type, parts in vision_types.PARTS.items():
        for part, (_, part_type, _) in parts.items():
            config = {"model_type": model_type}
            if part_type in vision_types.READ and model_type not in (
                vision_types.REFUSED
            ):
                assert RotaryEmbedding.from_hf_config(config, part=part).axes_dim
                continue
            if part_type in TEXT_SUPPORTED:  # a 1-D tower: its text reader's
                layer = RotaryEmbedding.from_hf_config(config, part=part)
                assert layer.axes_dim is None
                continue
            with pytest.raises(ValueError, match=r"`part`"):
                RotaryEmbedding.from_hf_config(config, part=part)


@pytest.mark.parametrize(
    ("config", "kwargs", "match"),
    [
        (
            {"model_type": "llava"},
            {"part": "vision"},
            r"`part`, expected a part of model_type 'llava' whose attention "
            r"rotates patch ids as read here; its vision part is not: "
            r"'clip_vision_model' has no rotary module .*CLIP or SigLIP",
        ),
        (
            {"model_type": "gemma3"},
            {"part": "vision"},
            r"'siglip_vision_model' has no rotary module",
        ),
        (
            {"model_type": "llama"},
            {"part": "vision"},
            r"`part`, expected a model type with a vision part .* 'llama' has no "
            r"vision part. Received: part='vision'",
        ),
        (
            {"model_type": "sam2_video"},
            {"part": "vision"},
            r"`part`.*memory attention",
        ),
        ({"model_type": "qwen2_vl"}, {"part": "image"}, r"`part`.*'image'"),
        (
            {"model_type": "qwen2_vl"},
            {"part": "vision", "seq_len": 8},
            r"`seq_len`, expected None with part='vision'",
        ),
        (
            {"model_type": "qwen2_5_vl_vision", "hidden_size": 1224, "num_heads": 12},
            {"part": "vision"},
            r"`head_dim`, expected a positive multiple of 4 .*Received: head_dim=102",
        ),
        (
            {"model_type": "pixtral", "rope_parameters": {"rope_type": "yarn"}},
            {"part": "vision"},
            r"`rope_parameters`, expected a dict of 'rope_type' \('axial'\) and "
            r"'rope_theta' only",
        ),
        (
            {
                "model_type": "pixtral",
                "rope_theta": 10.0,
                "rope_parameters": {"rope_theta": 20.0},
            },
            {"part": "vision"},
            r"`rope_theta`, expected one base",
        ),
        (
            {"model_type": "pixtral"},
            {"part": "vision", "max_wavelength": 5.0},
            r"`max_wavelength`, expected no `max_wavelength` argument to "
            r"from_hf_config: it is read from `config` \(here 10000.0\)",
        ),
        (
            {"model_type": "qwen2_5_vl", "vision_config": 3},
            {"part": "vision"},
            r"`vision_config`, expected None or a dict",
        ),
    ],
)
def test_vision_configs_refused_by_name(config, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, **kwargs)


def test_ids_of_the_wrong_rank_are_refused_naming_positions():
    layer = RotaryEmbedding.from_hf_config({"model_type": "pixtral"}, part="vision")
    q = np.ones((1, 4, 2, 64), "float32")
    with pytest.raises(ValueError, match=r"`positions`.*holds the 2 axes"):
        layer(q, positions=np.zeros((1, 4, 3), "int32"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"axes_frequencies": "strided"},
            r"`axes_frequencies`, expected 'per_axis' without `axes_dim`",
        ),
        (
            {"axes_dim": (16, 32), "axes_frequencies": "strided"},
            r"`axes_dim`, expected equal axes with axes_frequencies='strided'",
        ),
        ({"axes_dim": (16, 16), "axes_frequencies": "odd"}, r"`axes_frequencies`"),
    ],
)
def test_bad_axes_frequencies_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(**kwargs)


@pytest.mark.parametrize(
    ("grid_thw", "kwargs", "match"),
    [
        ([(1, 3, 4)], {"spatial_merge_size": 2}, r"`grid_thw`, expected heights"),
        ([(1, 0, 4)], {}, r"`grid_thw`, expected a non-empty list of \(t, h, w\)"),
        ([], {}, r"`grid_thw`"),
        ([(1, 2, 2)], {"spatial_merge_size": 0}, r"`spatial_merge_size`"),
        ([(1, 2, 2)], {"include_temporal": 1}, r"`include_temporal`, expected a bool"),
        ([(1, 2, 2)], {"coordinates": "centers"}, r"`coordinates`, expected one of"),
        (
            [(1, 2, 2)],
            {"coordinates": "normalized_centers", "include_temporal": True},
            r"`include_temporal`, expected False with coordinates='normalized_cent",
        ),
    ],
)
def test_bad_grids_are_refused(grid_thw, kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_posenc.vision_position_ids(grid_thw, **kwargs)


def test_strided_cos_sin_is_pixtrals_float64_formula():
    ids = np.array([[4095, 17], [3, 4000]], np.int32)
    cos, sin = keras_posenc.rotary_cos_sin(
        ids, 64, axes_dim=(32, 32), axes_frequencies="strided"
    )
    angles = _strided(ids, 64, 10000.0)
    assert np.max(np.abs(to_numpy(cos) - np.cos(angles))) < 2e-7
    assert np.max(np.abs(to_numpy(sin) - np.sin(angles))) < 2e-7


@keras3_only
def test_vision_layer_keras_file_round_trip(tmp_path):
    # Pixtral's layer (axes_frequencies="strided") in a model with ids as an
    # input: reloaded in safe mode as the same config and the same outputs.
    import keras

    layer = RotaryEmbedding.from_hf_config({"model_type": "pixtral"}, part="vision")
    q_in = keras.Input((6, 2, 64))
    ids_in = keras.Input((6, 2), dtype="int32")
    model = keras.Model([q_in, ids_in], layer(q_in, positions=ids_in))
    path = str(tmp_path / "pixtral.keras")
    model.save(path)
    restored = keras.models.load_model(path, safe_mode=True)
    assert restored.layers[-1].get_config() == layer.get_config()
    q = np.random.default_rng(3).uniform(-1, 1, (1, 6, 2, 64)).astype("float32")
    ids = keras_posenc.vision_position_ids([(1, 2, 3)])[None]
    np.testing.assert_array_equal(
        to_numpy(restored([q, ids])), to_numpy(model([q, ids]))
    )


DINOV3 = {"model_type": "dinov3_vit", "hidden_size": 384, "num_attention_heads": 6}
COORDINATE_GRIDS = sorted(k for k in ARRAYS.files if k.startswith("coordinates."))


@pytest.mark.parametrize("key", COORDINATE_GRIDS)
def test_dinov3_coordinates_are_transformers_float32_bit_for_bit(key):
    # transformers' get_patches_center_coordinates(h, w, float32), the
    # values its module rotates by at inference.
    h, w = (int(n) for n in key.split(".")[1].split("x"))
    coords = keras_posenc.vision_position_ids(
        [(1, h, w)], coordinates="normalized_centers"
    )
    assert coords.dtype == np.float32
    np.testing.assert_array_equal(coords, ARRAYS[key])


def test_dinov3_reads_its_config_as_per_axis_frequencies_in_turns():
    layer = RotaryEmbedding.from_hf_config(DINOV3, part="vision")
    assert layer.axes_dim == (32, 32) and layer.layout == "half"
    assert layer.axes_frequencies == "per_axis" and layer.frequency_unit == "turns"
    assert layer.max_wavelength == 100.0


def test_dinov3_within_4e7_of_float64_at_its_coordinates():
    # Coordinates of 64 x 48 and 37 x 23 grids and random float32 values in
    # [-1, 1]: the float64 angles 2 pi x / period of the same float32 x.
    layer = RotaryEmbedding.from_hf_config(
        {**DINOV3, "rope_theta": 100.0}, part="vision"
    )
    rng = np.random.default_rng(11)
    grids = keras_posenc.vision_position_ids(
        [(1, 64, 48), (1, 37, 23)], coordinates="normalized_centers"
    )
    uniform = rng.uniform(-1, 1, (1024, 2)).astype(np.float32)
    coords = np.concatenate([grids, uniform])[None]
    q = rng.uniform(-1, 1, (1, len(coords[0]), 2, 64)).astype(np.float32)
    want = _rotate64(q, _dinov3(coords.astype(np.float64), 64, 100.0))
    got = to_numpy(layer(q, positions=coords)).astype(np.float64)
    assert np.max(np.abs(got - want)) < 4e-7


def test_dinov3_class_and_register_tokens_at_zero_pass_through_bit_for_bit():
    # DINOv3 rotates only its patch tokens: ids (0, 0) give the angle 0
    # exactly, so its prefix tokens (class, registers) come out as they are.
    case = next(c for c in CASES if c["name"] == "dinov3_vit.variant")
    layer = RotaryEmbedding.from_hf_config(case["config"], part="vision")
    q, ids = ARRAYS["dinov3_vit.variant.q"], ARRAYS["dinov3_vit.variant.ids"]
    prefix = case["prefix_tokens"]
    assert prefix == 3 and not np.any(ids[:prefix])
    got = to_numpy(layer(q[None], positions=ids[None]))[0]
    np.testing.assert_array_equal(got[:prefix], q[:prefix])


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {**DINOV3, "rope_parameters": {"rope_type": "default", "rope_theta": 5.0}},
            r"`rope_parameters`, expected no 'rope_parameters' key: transformers' "
            r"dinov3_vit rotary module reads 'rope_theta' only",
        ),
        (
            {**DINOV3, "head_dim": 32},
            r"`head_dim`, expected no 'head_dim' key",
        ),
        (
            {**DINOV3, "num_attention_heads": 7},
            r"`head_dim`, expected a positive multiple of 4 .*Received: head_dim=54",
        ),
    ],
)
def test_dinov3_keys_its_module_does_not_read_are_refused(config, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding.from_hf_config(config, part="vision")


def test_dinov3_text_part_is_refused_pointing_at_part_vision():
    with pytest.raises(ValueError, match=r"read with part='vision'"):
        RotaryEmbedding.from_hf_config(DINOV3)


def test_turns_cos_sin_is_2_pi_times_the_radians_angles_in_float64():
    coords = np.array([[0.999999, -1.0], [1e-7, 0.3333333], [-0.5, 0.75]], np.float32)
    cos, sin = keras_posenc.rotary_cos_sin(
        coords, 64, axes_dim=(32, 32), max_wavelength=100.0, frequency_unit="turns"
    )
    angles = _dinov3(coords.astype(np.float64), 64, 100.0)
    assert np.max(np.abs(to_numpy(cos) - np.cos(angles))) < 2e-7
    assert np.max(np.abs(to_numpy(sin) - np.sin(angles))) < 2e-7


# The N-axis options (DINOv3's turns, Gemma 4's per-axis halves) outside
# N-axis RoPE, or with axes they do not fit.
NAXIS_OPTION_ERRORS = [
    (
        {"frequency_unit": "turns"},
        r"`frequency_unit`, expected 'radians' without `axes_dim`.*"
        r"Received: frequency_unit='turns'",
    ),
    (
        {"axes_dim": (16, 16), "frequency_unit": "degrees"},
        r"`frequency_unit`, expected one of \('radians', 'turns'\)",
    ),
    (
        {"layout": "half_per_axis"},
        r"`layout`, expected 'half' or 'interleaved' without `axes_dim` "
        r"\(one axis\). Received: layout='half_per_axis'",
    ),
    (
        {"axes_dim": (16, 32), "layout": "half_per_axis"},
        r"`axes_dim`, expected equal axes with layout='half_per_axis'",
    ),
]


@pytest.mark.parametrize(("kwargs", "match"), NAXIS_OPTION_ERRORS)
def test_bad_n_axis_options_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"frequency_unit": "turns"}, r"`frequency_unit`, expected 'radians'"),
        ({"layout": "half_per_axis"}, r"`layout`, expected 'half' or 'interl"),
    ],
)
def test_rotary_cos_sin_refuses_n_axis_options_without_axes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_posenc.rotary_cos_sin(np.arange(4), 8, **kwargs)


def test_text_refusal_of_a_type_with_a_read_vision_tower_names_part_vision():
    # Pixtral has no text RoPE; its tower is read, and the refusal says how.
    with pytest.raises(ValueError, match=r"read with part='vision'"):
        RotaryEmbedding.from_hf_config({"model_type": "pixtral"})


MIMI = {
    "model_type": "mimi",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "head_dim": 64,
    "rope_theta": 10000.0,
    "num_hidden_layers": 3,
}


def test_audio_part_rotating_over_time_is_read_as_its_text_model():
    # Moshi's audio tower (Mimi) rotates by time with a 1-D RoPE whose model
    # type the text survey verifies: part="audio" reads it as that reader does.
    moshi = {"model_type": "moshi", "audio_encoder_config": MIMI}
    layer = RotaryEmbedding.from_hf_config(moshi, part="audio")
    alone = RotaryEmbedding.from_hf_config(MIMI)
    config, expected = layer.get_config(), alone.get_config()
    config.pop("name"), expected.pop("name")
    assert config == expected
    plan = RotaryEmbedding.layer_plan(moshi, part="audio")
    assert len(plan) == 3 and all(entry is plan[0] for entry in plan)


def test_audio_part_is_within_4e7_of_float64_at_frames_in_the_thousands():
    # rotate_half with theta ** (-2i / d), at time steps 4000 .. 4063.
    rng = np.random.default_rng(0)
    q = rng.normal(size=(1, 64, 2, 64)).astype("float32")
    positions = np.arange(4000, 4064)
    layer = RotaryEmbedding.from_hf_config(
        {"model_type": "moshi", "audio_encoder_config": MIMI}, part="audio"
    )
    got = to_numpy(layer(q, positions=positions[None]))
    w = 10000.0 ** (-np.arange(0, 64, 2, dtype=np.float64) / 64)
    angles = np.concatenate([w, w])[None] * positions[:, None]
    want = _rotate64(q, angles[None])
    assert np.max(np.abs(got - want)) <= 4e-7


@pytest.mark.parametrize("theta", [10**400, [1.0], True])
def test_a_vision_rope_theta_of_the_wrong_type_is_refused_by_name(theta):
    # float() first gave a raw OverflowError or TypeError.
    config = {"model_type": "qwen2_vl", "vision_config": {"rope_theta": theta}}
    with pytest.raises(ValueError, match=r"`rope_theta`, expected a finite number"):
        RotaryEmbedding.from_hf_config(config, part="vision")


@pytest.mark.parametrize("model_type", ["gemma4", "diffusion_gemma"])
def test_gemma4_vision_reads_half_per_axis(model_type):
    # Gemma 4 (and DiffusionGemma, its tower): theta 100, head_dim 64,
    # cos [h, h, w, w] with rotate_half within each axis's half.
    layer = RotaryEmbedding.from_hf_config({"model_type": model_type}, part="vision")
    assert layer.layout == "half_per_axis" and layer.axes_dim == (32, 32)
    assert layer.axes_frequencies == "per_axis" and layer.max_wavelength == 100.0


def test_gemma4_ids_are_its_processors_column_row_grid():
    # Gemma 4's image processor: (column, row) pairs, row-major.
    ids = keras_posenc.vision_position_ids([(1, 4, 6)])[:, ::-1]
    np.testing.assert_array_equal(ids, ARRAYS["gemma4_vision.default.ids"])


def test_half_per_axis_cos_sin_is_h_h_w_w_of_float64():
    ids = np.array([[4095, 17], [-3, 4000], [0, 1]], np.int32)
    cos, sin = keras_posenc.rotary_cos_sin(
        ids, 64, axes_dim=(32, 32), max_wavelength=100.0, layout="half_per_axis"
    )
    angles = _gemma4(ids, 64, 100.0)
    assert np.max(np.abs(to_numpy(cos) - np.cos(angles))) < 2e-7
    assert np.max(np.abs(to_numpy(sin) - np.sin(angles))) < 2e-7


def test_half_per_axis_rotates_three_axes_each_within_its_block():
    # Three equal axes: rotate_half within each third of the head.
    rng = np.random.default_rng(5)
    ids = rng.integers(-2000, 2000, (1, 12, 3)).astype(np.int32)
    q = rng.uniform(-1, 1, (1, 12, 2, 48)).astype(np.float32)
    layer = RotaryEmbedding(axes_dim=(16, 16, 16), layout="half_per_axis")
    w = 10000.0 ** (-np.arange(0, 16, 2, dtype=np.float64) / 16)
    angles = np.concatenate([ids[..., a, None] * w for a in range(3) for _ in "xx"], -1)
    want = _rotate64(q, angles, blocks=3)
    assert np.max(np.abs(to_numpy(layer(q, positions=ids)) - want)) < 4e-7


def test_apply_rotary_refuses_half_per_axis_naming_how():
    from keras_posenc.rotary import apply_rotary

    x = np.ones((4, 8), "float32")
    with pytest.raises(ValueError, match=r"`layout`.*rotate each axis's features"):
        apply_rotary(x, x, x, layout="half_per_axis")


@pytest.mark.parametrize(
    ("row", "cells"),
    [
        (
            "gemma4",
            "| read: `gemma4_vision` (per_axis_blocks) | no RoPE: `gemma4_audio` |",
        ),
        ("moshi", "| - | read: `mimi` (1-D RoPE over time, as its text model) |"),
        ("sam2_video", "| refused: `sam2_video`: its rotary module is the memory"),
        ("llava", "| no RoPE: `clip_vision_model` | - |"),
        ("qwen2_5_vl", "| read: `qwen2_5_vl_vision` (per_axis) | - |"),
    ],
)
def test_model_types_page_lists_each_composites_parts(row, cells):
    from keras_posenc._hf.model_types_page import model_types_page

    lines = [
        line
        for line in model_types_page().splitlines()
        if line.startswith(f"| `{row}` |")
    ]
    assert any(line.startswith(f"| `{row}` {cells}") for line in lines), lines


def test_model_types_page_text_refusals_point_at_the_read_part():
    # The text table's "only rotary modules are a vision or audio part's"
    # says where the part is read now.
    from keras_posenc._hf.model_types_page import model_types_page

    page = model_types_page()
    assert (
        "| `pixtral` | its only rotary modules are a vision or audio part's; its "
        "vision tower's RoPE is read with part='vision' |"
    ) in page
    assert (
        "| `sam2_video` | its only rotary modules are a vision or audio part's |"
    ) in page
