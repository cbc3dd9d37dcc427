"""`from_diffusers_config`: the timestep, grid and RoPE layers of diffusers
transformers, read from their `transformer/config.json`.

Each config in `golden/diffusers/configs/` (modelled on a published
pipeline's) builds our layers, which are held against the outputs of
diffusers' own position modules built from the same config
(`golden/diffusers/golden.npz`, made by `golden/diffusers/make_golden.py`).
Tolerances: 2e-7 (our bound) plus diffusers' own float32 error where its
module computes in float32 (its timestep angles, CogVideoX's RoPE angles,
its float32 tables and rotations). Runs on every backend.
"""

import json
import os
import shutil

import numpy as np
import pytest
from _helpers import TOL, exact, invalid_value, max_diff, to_numpy

from keras_posenc import GridPositionEncoding, RotaryEmbedding, TimestepEmbedding

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "diffusers")
CONFIGS = os.path.join(HERE, "configs")
GOLDEN = np.load(os.path.join(HERE, "golden.npz"))
CASES = sorted(name[:-5] for name in os.listdir(CONFIGS))
# float32's unit roundoff: diffusers' float32 angles are off by a few of it
# times the angle; a float32 table or rotation by one of it.
EPS32 = 2.0**-24
SCALES = {"flux1_dev": 1000.0, "flux1_kontext_dev": 1000.0, "flux1_schnell": 1000.0}


def config_of(case):
    with open(os.path.join(CONFIGS, f"{case}.json")) as file:
        return json.load(file)


def path_of(case):
    return os.path.join(CONFIGS, f"{case}.json")


def fields(case, prefix):
    return sorted(
        key[len(case) + 1 :]
        for key in GOLDEN.files
        if key.startswith(f"{case}.{prefix}") and not key.endswith(".step")
    )


GRIDS = [(case, field) for case in CASES for field in fields(case, "grid.")]
ROPES = [case for case in CASES if f"{case}.q" in GOLDEN.files]


def message(name, expected, value):
    return exact(invalid_value(name, expected, value))


# -- against diffusers' own modules ----------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_timestep_embedding_matches_the_models_timesteps(case):
    # diffusers' float32 angles are off by a few roundoffs of the angle
    # (the largest, t * scale, at frequency 1).
    layer = TimestepEmbedding.from_diffusers_config(path_of(case))
    t, golden = GOLDEN[f"{case}.t"], GOLDEN[f"{case}.timestep"]
    ours = to_numpy(layer(t))
    tol = TOL + 4 * EPS32 * np.abs(t * SCALES.get(case, 1.0))[:, None]
    assert np.all(np.abs(ours.astype(np.float64) - golden) <= tol)


@pytest.mark.parametrize("case, field", GRIDS)
def test_grid_matches_the_models_patch_embedding(case, field):
    # The table diffusers adds to the patches (every `step`-th row kept);
    # its float32 tables are rounded once more.
    layer = GridPositionEncoding.from_diffusers_config(path_of(case))
    golden = GOLDEN[f"{case}.{field}"]
    step = (
        int(GOLDEN[f"{case}.{field}.step"]) if f"{case}.{field}.step" in GOLDEN else 1
    )
    grid = tuple(int(n) for n in field.split(".")[1].split("x"))
    dim = golden.shape[-1]
    if len(grid) == 2:
        table = layer(np.zeros((1, *grid, dim), "float32"))
    else:  # CogVideoX: text tokens first, then the video's
        tokens = np.zeros((1, layer.extra_tokens + int(np.prod(grid)), dim), "float32")
        call = {} if grid == tuple(layer.grid_shape) else {"grid_shape": grid}
        table = layer(tokens, **call)
    ours = to_numpy(table).reshape(-1, dim)[::step]
    tol = TOL + (EPS32 if golden.dtype == np.float32 else 0.0)
    assert max_diff(ours, golden) <= tol


@pytest.mark.parametrize("case", ROPES)
def test_rope_matches_the_models_rotary_embedding(case):
    # diffusers rotates in float32; CogVideoX's angles are float32 too
    # (FLUX's and Wan's are float64), off by a few roundoffs of the largest.
    layer = RotaryEmbedding.from_diffusers_config(path_of(case))
    ids, q = GOLDEN[f"{case}.ids"], GOLDEN[f"{case}.q"]
    golden = GOLDEN[f"{case}.q_rotated"]
    float64 = case.startswith(("flux", "wan"))
    angles = 0.0 if float64 else 4 * EPS32 * float(np.abs(ids).max())
    tol = (2 * TOL + 4 * EPS32 + angles) * float(np.abs(q).max())
    assert max_diff(to_numpy(layer(q, positions=ids)), golden) <= tol


@pytest.mark.parametrize(
    "case, expected",
    [
        ("dit_xl_2_256", (True, 1.0, 1.0)),
        ("pixart_alpha_1024", (True, 0.0, 1.0)),
        ("flux1_schnell", (True, 0.0, 1000.0)),
    ],
)
def test_timestep_conventions_are_the_models(case, expected):
    # diffusers' DiT shifts by 1 (the DiT repository by 0); FLUX scales by 1000.
    options = TimestepEmbedding.from_diffusers_config(path_of(case)).options
    assert (
        options.flip_sin_to_cos,
        options.downscale_freq_shift,
        options.scale,
    ) == expected


def test_cogvideox_grid_is_its_sample_video_after_its_text():
    layer = GridPositionEncoding.from_diffusers_config(path_of("cogvideox_2b"))
    assert (tuple(layer.grid_shape), layer.extra_tokens) == ((13, 30, 45), 226)


# -- where the config comes from ----------------------------------------------------


def test_a_pipeline_root_is_read_at_its_transformer(tmp_path):
    # A pipeline's root holds model_index.json and transformer/config.json.
    (tmp_path / "transformer").mkdir()
    shutil.copy(path_of("sd3_medium"), tmp_path / "transformer" / "config.json")
    (tmp_path / "model_index.json").write_text("{}")
    expected = GridPositionEncoding.from_diffusers_config(config_of("sd3_medium"))
    for source in (tmp_path, tmp_path / "transformer", str(tmp_path / "transformer")):
        layer = GridPositionEncoding.from_diffusers_config(source)
        assert layer.get_config() | {"name": None} == expected.get_config() | {
            "name": None
        }


def test_a_directory_without_a_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^Received an invalid value for `config`"):
        TimestepEmbedding.from_diffusers_config(tmp_path)


def test_layer_arguments_pass_through():
    rope = RotaryEmbedding.from_diffusers_config(
        config_of("flux1_dev"), name="flux_rope", sequence_axis=2
    )
    assert (rope.name, rope.sequence_axis) == ("flux_rope", 2)


def test_a_layer_read_from_a_config_round_trips():
    layer = GridPositionEncoding.from_diffusers_config(config_of("pixart_alpha_512"))
    again = GridPositionEncoding.from_config(layer.get_config())
    assert again.get_config() == layer.get_config()


# -- refusals ----------------------------------------------------------------------


def test_an_argument_read_from_the_config_may_not_be_given():
    expected = (
        "no `scale` argument to from_diffusers_config: it is read from `config` "
        "(here 1000.0); build the layer directly to set it"
    )
    with pytest.raises(ValueError, match=message("scale", expected, "1.0")):
        TimestepEmbedding.from_diffusers_config(config_of("flux1_dev"), scale=1.0)


def test_a_key_the_class_does_not_take_is_refused():
    config = {**config_of("flux1_dev"), "rope_theta": 500}
    expected = (
        "no 'rope_theta' key: diffusers 0.42.1's FluxTransformer2DModel does not "
        "take it"
    )
    with pytest.raises(ValueError, match=message("rope_theta", expected, "500")):
        RotaryEmbedding.from_diffusers_config(config)


@pytest.mark.parametrize(
    "config, name, expected, value",
    [
        pytest.param(
            {"_class_name": "UNet2DConditionModel", "sample_size": 64},
            "_class_name",
            "a diffusers transformer whose position code keras_posenc reads, one "
            "of ['CogVideoXTransformer3DModel', 'DiTTransformer2DModel', "
            "'FluxTransformer2DModel', 'HunyuanVideoTransformer3DModel', "
            "'PixArtTransformer2DModel', "
            "'SD3Transformer2DModel', 'SanaTransformer2DModel', "
            "'WanTransformer3DModel'] (or a legacy "
            "['Transformer2DModel'])",
            "'UNet2DConditionModel'",
            id="a-class-not-read",
        ),
        pytest.param(
            {"_class_name": "Transformer2DModel", "norm_type": "layer_norm"},
            "norm_type",
            "one of ['ada_norm_single', 'ada_norm_zero'] (diffusers loads a "
            "Transformer2DModel with it as DiTTransformer2DModel or "
            "PixArtTransformer2DModel, read here; no other Transformer2DModel is)",
            "'layer_norm'",
            id="a-legacy-class-of-another-norm-type",
        ),
    ],
)
def test_a_class_not_read_is_refused_by_name(config, name, expected, value):
    with pytest.raises(ValueError, match=message(name, expected, value)):
        TimestepEmbedding.from_diffusers_config(config)


def test_a_transformers_config_points_to_from_hf_config():
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    expected = (
        "a diffusers config.json, which names its class in '_class_name' (this "
        "is a transformers config, with a 'model_type': read it with "
        "`RotaryEmbedding.from_hf_config`)"
    )
    value = "['hidden_size', 'model_type', 'num_attention_heads']"
    with pytest.raises(ValueError, match=message("config", expected, value)):
        RotaryEmbedding.from_diffusers_config(config)


def test_from_hf_config_points_a_diffusers_config_to_its_reader():
    expected = (
        "a transformers config.json (a diffusers config, with '_class_name', is "
        "read by `from_diffusers_config`)"
    )
    with pytest.raises(
        ValueError, match=message("config", expected, "'FluxTransformer2DModel'")
    ):
        RotaryEmbedding.from_hf_config(config_of("flux1_dev"))


@pytest.mark.parametrize(
    "case, layer, name, expected, value",
    [
        (
            "flux1_dev",
            GridPositionEncoding,
            "_class_name",
            "the config of a diffusers model with a sin-cos grid; "
            "FluxTransformer2DModel's positions are RoPE: "
            "`RotaryEmbedding.from_diffusers_config`",
            "'FluxTransformer2DModel'",
        ),
        (
            "sd3_medium",
            RotaryEmbedding,
            "_class_name",
            "the config of a diffusers model with RoPE; SD3Transformer2DModel's "
            "positions are a sin-cos grid: "
            "`GridPositionEncoding.from_diffusers_config`",
            "'SD3Transformer2DModel'",
        ),
        (
            "cogvideox_5b",
            GridPositionEncoding,
            "use_rotary_positional_embeddings",
            "False for a sin-cos grid; with True, CogVideoXTransformer3DModel's "
            "positions are RoPE: `RotaryEmbedding.from_diffusers_config`",
            "True",
        ),
        (
            "cogvideox_2b",
            RotaryEmbedding,
            "use_rotary_positional_embeddings",
            "True for RoPE; with False, CogVideoXTransformer3DModel's positions are "
            "a 3-D sin-cos grid: `GridPositionEncoding.from_diffusers_config`",
            "False",
        ),
        (
            "sana_1600m_1024",
            GridPositionEncoding,
            "interpolation_scale",
            "a number for a sin-cos grid (SanaTransformer2DModel with None adds no "
            "position encoding: `PatchEmbed(pos_embed_type=None)`)",
            "None",
        ),
    ],
)
def test_a_model_without_the_layers_positions_is_refused(
    case, layer, name, expected, value
):
    with pytest.raises(ValueError, match=message(name, expected, value)):
        layer.from_diffusers_config(config_of(case))


@pytest.mark.parametrize(
    "case, layer, change, name, expected, value",
    [
        (
            "sd3_medium",
            GridPositionEncoding,
            {"sample_size": 0},
            "sample_size",
            "a positive integer",
            "0",
        ),
        (
            "sd3_medium",
            GridPositionEncoding,
            {"patch_size": "2"},
            "patch_size",
            "a positive integer",
            "'2'",
        ),
        (
            "sd3_medium",
            GridPositionEncoding,
            {"sample_size": 1},
            "sample_size",
            "at least patch_size=2",
            "1",
        ),
        (
            "sd3_medium",
            GridPositionEncoding,
            {"pos_embed_max_size": 1.5},
            "pos_embed_max_size",
            "None or a positive integer",
            "1.5",
        ),
        (
            "pixart_sigma_1024",
            GridPositionEncoding,
            {"interpolation_scale": -1},
            "interpolation_scale",
            "None or a finite number > 0",
            "-1",
        ),
        (
            None,  # the class's defaults
            TimestepEmbedding,
            {"_class_name": "DiTTransformer2DModel", "norm_type": "ada_norm"},
            "norm_type",
            "'ada_norm_zero' (the only one DiTTransformer2DModel implements)",
            "'ada_norm'",
        ),
        (
            "flux1_dev",
            RotaryEmbedding,
            {"axes_dims_rope": [16, 56, 55]},
            "axes_dims_rope",
            "a list of positive even integers (the features of each axis)",
            "[16, 56, 55]",
        ),
        (
            "flux1_dev",
            RotaryEmbedding,
            {"axes_dims_rope": [16, 56, 64]},
            "axes_dims_rope",
            "axes of even features summing to attention_head_dim=128 "
            "(here [16, 56, 64])",
            "[16, 56, 64]",
        ),
        (
            "cogvideox_5b",
            RotaryEmbedding,
            {"attention_head_dim": 40},
            "attention_head_dim",
            "axes of even features summing to attention_head_dim=40 "
            "(here [10, 15, 15])",
            "40",
        ),
        (
            "cogvideox_2b",
            TimestepEmbedding,
            {"flip_sin_to_cos": "yes"},
            "flip_sin_to_cos",
            "a bool",
            "'yes'",
        ),
        (
            "cogvideox_2b",
            GridPositionEncoding,
            {"use_learned_positional_embeddings": True},
            "use_learned_positional_embeddings",
            "False for a sin-cos grid (CogVideoXTransformer3DModel's positional "
            "embedding is then a learned weight, loaded from the checkpoint)",
            "True",
        ),
        (
            "cogvideox_2b",
            GridPositionEncoding,
            {"patch_size_t": 2},
            "patch_size_t",
            "None with the sin-cos grid (its table counts frames, not temporal "
            "patches; CogVideoX 1.5 uses RoPE)",
            "2",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(
    case, layer, change, name, expected, value
):
    with pytest.raises(ValueError, match=message(name, expected, value)):
        layer.from_diffusers_config({**(config_of(case) if case else {}), **change})
