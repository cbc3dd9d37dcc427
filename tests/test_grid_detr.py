"""The detection models' 2-D sines of `keras_posenc.grid` (`sine="detr"`,
`sine="rt_detr"`) and `GridPositionEncoding.from_hf_config`.

Values are checked against float64 transcriptions of DETR's
`DetrSinePositionEmbedding` and RT-DETR's
`build_2d_sinusoidal_position_embedding` written here (never keras_posenc
code), with each model type's conventions as this file states them
(`CONVENTIONS`), and against transformers 5.24's own modules in float32
(`golden/detr_sine/golden.npz`, made by `golden/detr_sine/make_golden.py`
from the configs in `golden/detr_sine/configs/`). Runs on every backend.
"""

import json
import math
import os
import re

import numpy as np
import pytest
from _helpers import TOL, exact, invalid_value, max_diff, only_tensorflow, to_numpy
from keras.backend import standardize_dtype

from keras_posenc import GridPositionEncoding, grid_sincos_table

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_DIR = os.path.join(HERE, "golden", "detr_sine")
GOLDEN = np.load(os.path.join(GOLDEN_DIR, "golden.npz"))
CONFIGS = sorted(name[:-5] for name in os.listdir(os.path.join(GOLDEN_DIR, "configs")))
# transformers' float32 modules: an angle below 2 pi rounded to float32 and
# divided in float32, then its sine (measured: at most 8.2e-7 at valid cells).
FLOAT32_TOL = 1e-5


# -- float64 transcriptions ------------------------------------------------------


def detr_sine(mask, dim, temperature=(1e4, 1e4), offset=0.0, normalize=True):
    """`DetrSinePositionEmbedding.build_sine_position_embedding` in float64,
    channels last: ``[batch, H, W, dim]``."""
    mask = np.asarray(mask, np.float64)
    y_embed, x_embed = mask.cumsum(1), mask.cumsum(2)
    scale, eps = 2 * math.pi, 1e-6
    if normalize:
        y_embed = (y_embed - offset) / (y_embed[:, -1:, :] + eps) * scale
        x_embed = (x_embed - offset) / (x_embed[:, :, -1:] + eps) * scale
    features = dim // 2
    out = []
    for embed, t in ((y_embed, temperature[0]), (x_embed, temperature[1])):
        dim_t = t ** (2 * np.floor(np.arange(features) / 2) / features)
        pos = embed[..., None] / dim_t
        pair = np.stack([np.sin(pos[..., 0::2]), np.cos(pos[..., 1::2])], axis=4)
        out.append(pair.reshape(*pos.shape[:3], features))
    return np.concatenate(out, axis=-1)


def rt_detr_sine(height, width, dim, temperature=1e4):
    """`build_2d_sinusoidal_position_embedding` in float64: ``[H, W, dim]``."""
    pos_dim = dim // 4
    omega = 1.0 / temperature ** (np.arange(pos_dim) / pos_dim)
    grid_h, grid_w = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    emb_h = np.outer(grid_h.ravel(), omega)
    emb_w = np.outer(grid_w.ravel(), omega)
    rows = [np.sin(emb_h), np.cos(emb_h), np.sin(emb_w), np.cos(emb_w)]
    return np.concatenate(rows, axis=1).reshape(height, width, dim)


# Each model type's conventions, as its transformers 5.24 modeling file fixes
# them (and its configuration class's defaults).
DETR = {"sine": "detr"}
CONVENTIONS = {
    "detr": DETR,
    "conditional_detr": DETR,
    "deformable_detr": {"sine": "detr", "offset": 0.5},
    "table_transformer": DETR,
    "dab_detr": {"sine": "detr", "temperature": (20.0, 20.0)},
    "grounding_dino": {"sine": "detr", "temperature": (20.0, 20.0)},
    "mm_grounding_dino": {"sine": "detr", "temperature": (20.0, 20.0)},
    "maskformer": DETR,
    "mask2former": DETR,
    "oneformer": DETR,
    "sam2": DETR,
    "edgetam": DETR,
    "sam3": DETR,
    "rt_detr": {"sine": "rt_detr"},
    "rt_detr_v2": {"sine": "rt_detr"},
    "d_fine": {"sine": "rt_detr"},
    "deimv2": {"sine": "rt_detr"},
    "pp_doclayout_v3": {"sine": "rt_detr"},
}


# The types whose module takes a pixel mask (RT-DETR's family takes none).
MASKED = [name for name in CONFIGS if CONVENTIONS[name]["sine"] == "detr"]


def reference(name, mask):
    """The float64 encoding of `name`'s module, ``[batch, H, W, 256]``."""
    conventions = dict(CONVENTIONS[name])
    if conventions.pop("sine") == "rt_detr":
        _, height, width = mask.shape
        return rt_detr_sine(height, width, 256)[None]
    return detr_sine(mask, 256, **conventions)


def _layer(name):
    return GridPositionEncoding.from_hf_config(
        os.path.join(GOLDEN_DIR, "configs", f"{name}.json")
    )


def _features(shape):
    return np.zeros(shape, "float32")


# -- values ----------------------------------------------------------------------


def test_every_golden_config_has_its_conventions_here():
    assert sorted(CONVENTIONS) == CONFIGS


@pytest.mark.parametrize("case", ["small", "tall"])
@pytest.mark.parametrize("name", CONFIGS)
def test_layer_equals_the_transformers_module(name, case):
    # A layout guard: transformers' own float32 output, channels last.
    want = GOLDEN[f"{name}/{case}"]
    got = to_numpy(_layer(name)(_features(want.shape)))
    assert max_diff(got, want) <= FLOAT32_TOL


@pytest.mark.parametrize("case", ["small", "tall"])
@pytest.mark.parametrize("name", MASKED)
def test_padded_images_equal_the_transformers_module(name, case):
    want, mask = GOLDEN[f"{name}/{case}/padded"], GOLDEN[f"{name}/{case}/mask"]
    got = to_numpy(_layer(name)(_features(want.shape), pixel_mask=mask))
    # At valid cells: on lines with no valid cell Deformable DETR's float32
    # angle is -0.5 / 1e-6 * 2 pi (ulp 0.25 rad in float32); those are
    # checked against float64 below.
    assert max_diff(got[mask], want[mask]) <= FLOAT32_TOL


@pytest.mark.parametrize("name", MASKED)
def test_padded_images_equal_the_float64_formula_everywhere(name):
    mask = GOLDEN[f"{name}/small/mask"]
    got = to_numpy(_layer(name)(_features((*mask.shape, 256)), pixel_mask=mask))
    assert max_diff(got, reference(name, mask)) <= TOL


# One model type per distinct convention (the others read the same options).
DISTINCT = ["detr", "deformable_detr", "dab_detr", "rt_detr"]


@pytest.mark.parametrize("name", DISTINCT)
def test_large_feature_map_within_the_bound(name):
    # 200 x 300: normalized positions at 1/200 and 1/300 of 2 pi.
    mask = np.ones((1, 200, 300), bool)
    got = to_numpy(_layer(name)(_features((1, 200, 300, 256))))
    assert max_diff(got, reference(name, mask)) <= TOL


@pytest.mark.parametrize("offset", [0.0, 0.5])
def test_irregular_masks_within_the_bound(offset):
    # Any mask, not only padding: each line normalized by its own count.
    mask = np.random.default_rng(0).random((2, 40, 60)) < 0.7
    mask[1, :, 7] = False  # a line with no valid cell
    got = grid_sincos_table((40, 60), 64, sine="detr", offset=offset, pixel_mask=mask)
    want = detr_sine(mask, 64, offset=offset).reshape(2, 40 * 60, 64)
    assert max_diff(to_numpy(got), want) <= TOL


def test_a_full_mask_gives_the_unmasked_bits():
    layer = GridPositionEncoding(sine="detr", merge=None)
    x = _features((2, 6, 9, 32))
    full = to_numpy(layer(x, pixel_mask=np.ones((2, 6, 9), bool)))
    np.testing.assert_array_equal(full, to_numpy(layer(x)))


def test_unnormalized_positions_are_the_counts():
    # SAM 3's decoder: normalize=False.
    mask = np.ones((1, 7, 5), bool)
    got = grid_sincos_table((7, 5), 32, sine="detr", normalize=False)
    want = detr_sine(mask, 32, normalize=False).reshape(35, 32)
    assert max_diff(to_numpy(got), want) <= TOL


def test_rt_detr_table_with_its_temperature():
    got = grid_sincos_table((6, 11), 48, sine="rt_detr", temperature=100.0)
    want = rt_detr_sine(6, 11, 48, 100.0).reshape(66, 48)
    assert max_diff(to_numpy(got), want) <= TOL


def test_merge_add_adds_the_encoding():
    x = np.random.default_rng(1).normal(size=(2, 4, 5, 16)).astype("float32")
    got = GridPositionEncoding(sine="detr")(x)
    want = x + detr_sine(np.ones((2, 4, 5), bool), 16)
    assert max_diff(to_numpy(got), want) <= 1e-6


def test_mixed_precision_output_is_the_float32_table_cast_once():
    layer = GridPositionEncoding(sine="detr", merge=None, dtype="mixed_float16")
    got = layer(_features((1, 5, 6, 16)))
    assert standardize_dtype(got.dtype) == "float16"
    want = detr_sine(np.ones((1, 5, 6), bool), 16)
    assert max_diff(to_numpy(got), want) <= 2.0**-11  # float16's half ulp at 1


# -- the config reader -----------------------------------------------------------


def test_config_path_directory_and_dict_read_alike(tmp_path):
    config = {"model_type": "deformable_detr", "d_model": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    layers = [
        GridPositionEncoding.from_hf_config(c)
        for c in (config, tmp_path, tmp_path / "config.json")
    ]
    configs = [{**layer.get_config(), "name": None} for layer in layers]
    assert configs[0] == configs[1] == configs[2]


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"model_type": "detr"}, {"sine": "detr", "dim": 256, "offset": None}),
        ({"model_type": "deformable_detr"}, {"offset": 0.5}),
        ({"model_type": "detr", "hidden_size": 64}, {"dim": 64}),
        ({"model_type": "grounding-dino"}, {"temperature": 20.0}),
        (
            {"model_type": "grounding-dino", "positional_embedding_temperature": 30},
            {"temperature": 30.0},
        ),
        (
            {"model_type": "dab-detr", "temperature_height": 10, "hidden_size": 64},
            {"temperature": [10.0, 20.0], "dim": 64},
        ),
        (
            {"model_type": "dab-detr", "sine_position_embedding_scale": 3.0},
            {"scale": 3.0},
        ),
        ({"model_type": "maskformer"}, {"dim": 256}),
        (
            {"model_type": "maskformer", "decoder_config": {"d_model": 128}},
            {"dim": 128},
        ),
        ({"model_type": "sam2", "vision_config": {"fpn_hidden_size": 64}}, {"dim": 64}),
        ({"model_type": "sam3_vision_model", "fpn_hidden_size": 32}, {"dim": 32}),
        (
            {"model_type": "rt_detr", "positional_encoding_temperature": 500},
            {"sine": "rt_detr", "temperature": 500.0},
        ),
        ({"model_type": "pp_doclayout_v4", "encoder_hidden_dim": 384}, {"dim": 384}),
    ],
)
def test_config_keys_are_applied(config, expected):
    layer_config = GridPositionEncoding.from_hf_config(config).get_config()
    assert {k: layer_config[k] for k in expected} == expected
    assert layer_config["merge"] is None


def test_a_checkpoint_width_is_held_at_build():
    # Added to a map (merge="add"), the map must have the checkpoint's
    # width; returned alone, it has it whatever the map's width.
    added = GridPositionEncoding(sine="detr", dim=64)
    message = (
        "Received an invalid value for `inputs`, expected 64 features (dim=64). "
        "Received: inputs=32"
    )
    with pytest.raises(ValueError, match=exact(message)):
        added(_features((1, 4, 4, 32)))
    alone = GridPositionEncoding.from_hf_config({"model_type": "detr", "d_model": 64})
    assert tuple(alone(_features((1, 4, 4, 32))).shape) == (1, 4, 4, 64)


CONFIG_ERRORS = [
    (
        {"model_type": "detr", "position_embedding_type": "learned"},
        "position_embedding_type",
        "\"sine\" ('learned' positions are the checkpoint's weights, not a sine; "
        "load them with the model)",
        "'learned'",
    ),
    (
        {"model_type": "detr", "position_embedding_type": "rope"},
        "position_embedding_type",
        '"sine" (transformers refuses any other than "learned")',
        "'rope'",
    ),
    (
        {"model_type": "detr", "d_model": 258},
        "d_model",
        "a positive multiple of 4 (DetrSinePositionEmbedding lays out width // 4 "
        "sin/cos pairs per axis; transformers fails or drops channels otherwise)",
        "258",
    ),
    (
        {"model_type": "rt_detr", "encoder_hidden_dim": 255},
        "encoder_hidden_dim",
        "a positive multiple of 4 (build_2d_sinusoidal_position_embedding lays out "
        "width // 4 sin/cos pairs per axis; transformers fails or drops channels "
        "otherwise)",
        "255",
    ),
    (
        {"model_type": "detr", "d_model": 256, "hidden_size": 128},
        "hidden_size",
        "the value of `d_model`=256 (they name one setting)",
        "128",
    ),
    (
        {"model_type": "mask2former", "feature_size": 128},
        "feature_size",
        "the value of `hidden_dim`=256: the model has two sines, of `feature_size` "
        "and `hidden_dim` channels; build each with "
        "GridPositionEncoding(sine='detr', merge=None) on its feature map",
        "128",
    ),
    (
        {"model_type": "grounding-dino", "positional_embedding_temperature": 1},
        "positional_embedding_temperature",
        "a finite number > 1",
        "1",
    ),
    (
        {"model_type": "dab-detr", "sine_position_embedding_scale": 0},
        "sine_position_embedding_scale",
        "a finite number > 0",
        "0",
    ),
    (
        {"model_type": "dab-detr", "sine_position_embedding_scale": 10**400},
        "sine_position_embedding_scale",
        "a finite number > 0",
        "1" + "0" * 400,
    ),
    (
        {"model_type": "sam2", "vision_config": 3},
        "vision_config",
        "a dict (a sub-config)",
        "3",
    ),
]


@pytest.mark.parametrize("config, name, expected, value", CONFIG_ERRORS)
def test_bad_config_values_are_refused_by_name(config, name, expected, value):
    message = invalid_value(name, expected, value)
    with pytest.raises(ValueError, match=exact(message)):
        GridPositionEncoding.from_hf_config(config)


@pytest.mark.parametrize(
    "model_type, why",
    [
        ("llama", None),
        ("omdet-turbo", "its build_2d_sincos_position_embedding flattens"),
        ("vit_mae", "its fixed table is MAE's"),
    ],
)
def test_other_model_types_are_refused_by_name(model_type, why):
    pattern = (
        re.escape("Received an invalid value for `model_type`, expected one of the ")
        + r"\d+ model types with a 2-D sine read in transformers 5\.24\.0"
    )
    with pytest.raises(ValueError, match=pattern) as raised:
        GridPositionEncoding.from_hf_config({"model_type": model_type})
    assert str(raised.value).endswith(f"Received: model_type={model_type!r}")
    if why is not None:
        assert f"; {model_type} is not read: {why}" in str(raised.value)


def test_read_arguments_cannot_be_overridden():
    message = (
        "Received an invalid value for `offset`, expected no `offset` argument to "
        "from_hf_config: it is read from `config` (this model leaves it at the "
        "layer's default); build the layer "
        "directly to set it. Received: offset=0.5"
    )
    with pytest.raises(ValueError, match=exact(message)):
        GridPositionEncoding.from_hf_config({"model_type": "detr"}, offset=0.5)


def test_other_layer_arguments_pass_through():
    layer = GridPositionEncoding.from_hf_config({"model_type": "detr"}, name="pos")
    assert layer.name == "pos"


# -- bad options and inputs ------------------------------------------------------

OPTION_ERRORS = [
    ({"sine": "vit"}, "sine", "one of ('mae', 'detr', 'rt_detr')", "'vit'"),
    (
        {"temperature": 20.0},
        "temperature",
        "None with sine='mae' (a DETR or RT-DETR convention)",
        "20.0",
    ),
    (
        {"sine": "rt_detr", "offset": 0.5},
        "offset",
        "None with sine='rt_detr' (a DETR convention)",
        "0.5",
    ),
    (
        {"sine": "rt_detr", "temperature": (10.0, 20.0)},
        "temperature",
        "one number with sine='rt_detr' (one for both axes)",
        "(10.0, 20.0)",
    ),
    (
        {"sine": "detr", "temperature": (10.0, 20.0, 30.0)},
        "temperature",
        "a number > 1, or a (height, width) pair",
        "(10.0, 20.0, 30.0)",
    ),
    ({"sine": "detr", "temperature": 0.5}, "temperature", "a finite number > 1", "0.5"),
    ({"sine": "detr", "offset": 0.25}, "offset", "one of (0.0, 0.5)", "0.25"),
    ({"sine": "detr", "scale": -1.0}, "scale", "a finite number > 0", "-1.0"),
    # Too large for a float: refused like infinity, not a raw OverflowError.
    (
        {"sine": "detr", "scale": 10**400},
        "scale",
        "a finite number > 0",
        "1" + "0" * 400,
    ),
    (
        {"sine": "rt_detr", "temperature": 10**400},
        "temperature",
        "a finite number > 1",
        "1" + "0" * 400,
    ),
    ({"sine": "detr", "normalize": 1}, "normalize", "a bool", "1"),
    (
        {"sine": "detr", "normalize": False, "scale": 1.0},
        "scale",
        "None with normalize=False (it applies when normalizing)",
        "1.0",
    ),
    (
        {"sine": "detr", "base_size": 16},
        "base_size",
        "None with sine='detr' (an MAE grid option)",
        "16",
    ),
    (
        {"sine": "rt_detr", "interpolation_scale": 2.0},
        "interpolation_scale",
        "1.0 with sine='rt_detr' (an MAE grid option)",
        "2.0",
    ),
    (
        {"sine": "detr", "dim": 6},
        "dim",
        "a positive multiple of 4 with sine='detr' (two axes of sin/cos pairs)",
        "6",
    ),
    ({"merge": "concat"}, "merge", "one of ('add', None)", "'concat'"),
]


@pytest.mark.parametrize("kwargs, name, expected, value", OPTION_ERRORS)
def test_bad_options_raise_naming_them(kwargs, name, expected, value):
    message = invalid_value(name, expected, value)
    with pytest.raises(ValueError, match=exact(message)):
        GridPositionEncoding(**kwargs)


MASK = np.ones((2, 4, 5), bool)
INPUT_ERRORS = [
    (
        {"sine": "detr"},
        (2, 4, 5, 16),
        MASK[:, :3],
        "pixel_mask",
        "the feature map's [batch, H, W] = [2, 4, 5]",
        "'<shape=(2, 3, 5)>'",
    ),
    (
        {"sine": "detr"},
        (2, 4, 5, 16),
        MASK.astype("int32"),
        "pixel_mask",
        "a bool tensor [batch, H, W] (True at valid pixels)",
        "'<dtype=int32>'",
    ),
    (
        {"sine": "rt_detr"},
        (2, 4, 5, 16),
        MASK,
        "pixel_mask",
        "None with sine='rt_detr' (only DETR's sine takes a mask)",
        "'<shape=(2, 4, 5)>'",
    ),
    (
        {},
        (2, 4, 5, 16),
        MASK,
        "pixel_mask",
        "None with sine='mae' (only DETR's sine takes a mask)",
        "'<shape=(2, 4, 5)>'",
    ),
    (  # host work bounded before it starts (a table row per line length)
        {"sine": "detr"},
        (1, 2, 8193, 4),
        np.ones((1, 2, 8193), bool),
        "pixel_mask",
        "a mask of a feature map of at most 8192 rows and columns (the normalized "
        "DETR sine keeps a table row per valid line length)",
        "'<shape=(1, 2, 8193)>'",
    ),
    (
        {"sine": "detr"},
        (2, 20, 16),
        None,
        "inputs",
        "a feature map [batch, H, W, C] with sine='detr'",
        "'<shape=(2, 20, 16)>'",
    ),
    (
        {"sine": "detr"},
        (2, 4, 5, 18),
        None,
        "inputs",
        "a positive multiple of 4 with sine='detr' (two axes of sin/cos pairs)",
        "18",
    ),
]


@pytest.mark.parametrize("kwargs, shape, mask, name, expected, value", INPUT_ERRORS)
def test_bad_inputs_raise_naming_them(kwargs, shape, mask, name, expected, value):
    # Keras 3 prefixes errors raised in `call` with the layer's name.
    message = invalid_value(name, expected, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        GridPositionEncoding(**kwargs)(_features(shape), pixel_mask=mask)


@only_tensorflow
def test_tf_graph_with_unknown_sizes():
    # RT-DETR's integer positions serve any size; DETR divides by the size,
    # which must be known when traced (a ValueError naming `inputs`).
    import tensorflow as tf

    spec = tf.TensorSpec((None, None, None, 16), tf.float32)
    layer = GridPositionEncoding(sine="rt_detr", merge=None)
    fn = tf.function(layer, input_signature=[spec], autograph=False)
    x = np.zeros((1, 3, 5, 16), "float32")
    assert max_diff(fn(x).numpy(), rt_detr_sine(3, 5, 16)[None]) <= TOL
    message = (
        "Received an invalid value for `inputs`, expected a feature map whose "
        "height and width are known when traced (DETR's sine divides by them)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        tf.function(
            GridPositionEncoding(sine="detr"), input_signature=[spec], autograph=False
        ).get_concrete_function()


def test_table_of_mae_refuses_a_mask():
    message = (
        "Received an invalid value for `pixel_mask`, expected None with "
        "sine='mae' (only DETR's sine takes a mask). Received: "
        "pixel_mask='<shape=(1, 4)>'"
    )
    with pytest.raises(ValueError, match=exact(message)):
        grid_sincos_table((4,), 8, pixel_mask=np.ones((1, 4), bool))


def test_table_of_a_3d_grid_is_refused():
    message = (
        "Received an invalid value for `grid_shape`, expected a 2-D grid (H, W) "
        "with sine='detr'. Received: grid_shape=(2, 3, 4)"
    )
    with pytest.raises(ValueError, match=exact(message)):
        grid_sincos_table((2, 3, 4), 16, sine="detr")


# -- survey and docs -------------------------------------------------------------

DOCS = os.path.join(HERE, os.pardir, "docs", "grids.md")
SECTION = "## DETR and RT-DETR sines"


def _section():
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    return text[text.index(SECTION) :]


def test_survey_lists_exactly_the_types_read_and_refused():
    from keras_posenc._hf import detection

    with open(os.path.join(GOLDEN_DIR, "survey.json"), encoding="utf-8") as f:
        survey = json.load(f)
    read = {t for t, e in survey.items() if e["status"] == "read"}
    refused = {t for t, e in survey.items() if e["status"] == "refused"}
    assert read == set(detection.MODEL_TYPES)
    assert refused == set(detection.REFUSED)


def test_docs_table_lists_every_surveyed_type():
    with open(os.path.join(GOLDEN_DIR, "survey.json"), encoding="utf-8") as f:
        survey = json.load(f)
    rows = re.findall(r"^\| `([\w-]+)` \| (read|refused) \|", _section(), re.M)
    assert dict(rows) == {t: e["status"] for t, e in survey.items()}


@pytest.mark.parametrize("block", range(len(re.findall(r"```python\n", _section()))))
def test_docs_python_block_runs_alone(block):
    source = re.findall(r"```python\n(.*?)```", _section(), re.S)[block]
    exec(compile(source, f"docs/grids.md, DETR block {block}", "exec"), {})


def test_detr_layer_takes_the_backbone_map_of_any_width():
    # DETR's module is given the backbone's map (2048 channels for a
    # ResNet-50) and returns d_model channels: the layer read from the
    # config does the same, with the values of a d_model-wide map.
    layer = GridPositionEncoding.from_hf_config({"model_type": "detr", "d_model": 256})
    wide = to_numpy(layer(np.zeros((1, 4, 5, 2048), "float32")))
    same = GridPositionEncoding.from_hf_config({"model_type": "detr", "d_model": 256})
    narrow = to_numpy(same(np.zeros((1, 4, 5, 256), "float32")))
    assert wide.shape == (1, 4, 5, 256)
    np.testing.assert_array_equal(wide, narrow)
