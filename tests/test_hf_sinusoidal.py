"""`SinusoidalPositionEncoding.from_hf_config`: published 1-D sinusoidal
tables read from their `config.json` (`keras_posenc/_hf/sinusoidal.py`).

Two references, independent of keras_posenc: transformers' own float32
position modules at small positions (`tests/golden/sine/golden.npz`, made
by `make_golden.py` beside it: a layout guard, within their float32
error), and a float64 transcription of each module's formula
(`_helpers.tensor2tensor_table`, `paper_table`) at positions in the
thousands, up to the end of each model's table, within 2e-7.
"""

import json
import os
import shutil

import numpy as np
import pytest
from _helpers import (
    ROOT,
    TOL,
    fairseq_positions,
    paper_table,
    tensor2tensor_table,
    to_numpy,
)

from keras_posenc import SinusoidalPositionEncoding

HERE = os.path.join(ROOT, "tests", "golden", "sine")
GOLDEN = np.load(os.path.join(HERE, "golden.npz"))
with open(os.path.join(HERE, "golden.json")) as _file:
    TYPES = json.load(_file)["configs"]
CACHE = int(GOLDEN["cache"])
# transformers' modules compute their angles in float32 (Whisper, fairseq,
# MusicGen, CTRL, PEGASUS-X) or round a float64 table once (Marian,
# DistilBERT, XLM): below position 64 they are within 1e-5 of the exact
# values. A wrong layout, frequency, offset or padding row is off by ~1.
MODULE_TOL = 1e-5
# Each model type's formula (its module, read in transformers 5.24), and
# where its config keeps the width and padding id (the tests' own table).
FORMULA = {
    "m2m_100": "fairseq",
    "nllb-moe": "fairseq",
    "speech_to_text": "fairseq",
    "trocr": "fairseq",
    "kosmos-2": "fairseq",
    "seamless_m4t": "fairseq",
    "seamless_m4t_v2": "fairseq",
    "xglm": "xglm",
    "musicgen": "musicgen",
    "musicgen_decoder": "musicgen",
    "musicgen_melody": "musicgen",
    "whisper": "tensor2tensor",
    "pegasus_x": "tensor2tensor",
    "marian": "paper",
    "pegasus": "paper",
    "ctrl": "paper",
    "time_series_transformer": "paper",
    "informer": "paper",
    "autoformer": "paper",
    "distilbert": "interleaved",
    "xlm": "interleaved",
    "flaubert": "interleaved",
}
WIDTH = {"ctrl": "n_embd", "distilbert": "dim", "xlm": "emb_dim", "flaubert": "emb_dim"}
PART = {"kosmos-2": "text_config", "musicgen": "decoder", "musicgen_melody": "decoder"}
LENGTHS = ("max_position_embeddings", "max_source_positions", "n_positions")


def _path(name):
    return os.path.join(HERE, "configs", f"{name}.json")


def _raw(name):
    with open(_path(name)) as file:
        return json.load(file)


def _part(name):
    config = _raw(name)
    return config.get(PART.get(config["model_type"]), config)


def _width(name):
    part = _part(name)
    for key in (WIDTH.get(_raw(name)["model_type"]), "embed_dim", "d_model"):
        if key in part:
            return part[key]
    return part["hidden_size"]


def _pad(name):
    part = _part(name)
    return part.get("pad_token_id", part.get("pad_index"))


def _formula(name, positions):
    """float64 rows of `positions` (table positions) for config `name`."""
    formula, width = FORMULA[TYPES[name]], _width(name)
    if formula == "fairseq":
        return tensor2tensor_table(positions, width, _pad(name))
    if formula == "xglm":
        return tensor2tensor_table(positions + 2, width, _pad(name))
    if formula == "musicgen":
        return tensor2tensor_table(positions, width, cos_first=True)
    if formula == "tensor2tensor":
        return tensor2tensor_table(positions, width)
    return paper_table(positions, width, interleaved=formula == "interleaved")


def _positions(name, ids, start):
    if FORMULA[TYPES[name]] == "fairseq":
        return fairseq_positions(ids, _pad(name), start)
    return np.broadcast_to(start + np.arange(ids.shape[1]), ids.shape)


NAMES = sorted(TYPES)


@pytest.mark.parametrize("name", NAMES)
def test_full_call_matches_transformers_module(name):
    # A left-padded batch of ids at cache length 0: the module's own output.
    layer = SinusoidalPositionEncoding.from_hf_config(_path(name))
    out = to_numpy(layer(GOLDEN[f"{name}/ids"]))
    np.testing.assert_allclose(out, GOLDEN[f"{name}/full"], rtol=0, atol=MODULE_TOL)


@pytest.mark.parametrize("name", NAMES)
def test_decoding_step_matches_transformers_module(name):
    # The last column at cache length CACHE: `start_index` is the module's
    # `cache_length`.
    layer = SinusoidalPositionEncoding.from_hf_config(_path(name))
    out = to_numpy(layer(GOLDEN[f"{name}/ids"][:, -1:], start_index=CACHE))
    np.testing.assert_allclose(out, GOLDEN[f"{name}/step"], rtol=0, atol=MODULE_TOL)


@pytest.mark.parametrize("name", NAMES)
def test_matches_float64_formula_up_to_the_end_of_the_table(name):
    # The last 64 positions of the model's table (or from 4000 where the
    # table grows as needed), left-padded rows too: within 2e-7 of the
    # float64 transcription of the model's formula.
    ids = np.full((2, 64), 7, np.int32)
    pad = _pad(name)
    if pad is not None:
        ids[1, :5] = pad
    part = _part(name)
    end = max([part[k] for k in LENGTHS if k in part] + [4064])
    start = end - 64 - (pad or 0) - 1
    layer = SinusoidalPositionEncoding.from_hf_config(_path(name))
    out = to_numpy(layer(ids, start_index=start))
    expected = _formula(name, _positions(name, ids, start))
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


def test_padding_tokens_read_the_zero_row():
    # M2M100's left padding: zeros, whatever the cache length.
    layer = SinusoidalPositionEncoding.from_hf_config(_path("m2m100_418M"))
    ids = GOLDEN["m2m100_418M/ids"]
    out = to_numpy(layer(ids, start_index=np.array([0, 5, 900])))
    assert not out[1, :3].any() and not out[2, :6].any()
    assert np.abs(out[0]).max() > 0.5


def test_reads_a_directory_holding_config_json(tmp_path):
    # A checkpoint folder, as RotaryEmbedding.from_hf_config reads it.
    shutil.copy(_path("whisper-tiny"), tmp_path / "config.json")
    layer = SinusoidalPositionEncoding.from_hf_config(str(tmp_path))
    assert (layer.depth, layer.frequency_rule, layer.odd_depth) == (
        384,
        "tensor2tensor",
        "error",
    )


def test_reads_the_text_config_of_kosmos_2():
    layer = SinusoidalPositionEncoding.from_hf_config(_raw("kosmos-2-patch14-224"))
    assert (layer.depth, layer.padding_id, layer.positions_from_ids) == (2048, 1, True)


def test_reads_the_decoder_of_musicgen():
    layer = SinusoidalPositionEncoding.from_hf_config(_raw("musicgen-small"))
    assert (layer.depth, layer.layout, layer.padding_id) == (1024, "cos_sin", None)


def test_defaults_are_the_configuration_class_defaults():
    # An m2m_100 config with no keys: d_model 1024, pad_token_id 1.
    layer = SinusoidalPositionEncoding.from_hf_config({"model_type": "m2m_100"})
    assert (layer.depth, layer.padding_id) == (1024, 1)


def test_other_constructor_arguments_pass_through():
    layer = SinusoidalPositionEncoding.from_hf_config(
        _raw("opus-mt-en-de"), merge="add", name="pe"
    )
    assert (layer.merge, layer.name, layer.depth) == ("add", "pe", 512)


# -- refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_type, instead",
    [
        ("bart", "learned position embeddings"),
        ("llama", r"RoPE: keras_posenc.RotaryEmbedding.from_hf_config"),
        ("bloom", r"ALiBi: keras_posenc.AlibiBias.from_hf_config"),
        ("detr", r"a 2-D sine over the image: keras_posenc.GridPositionEncoding"),
        ("fsmt", "fairseq.s table with the cache length added after the padding"),
        ("speecht5", "a table scaled by a learned alpha"),
        ("roformer", r"RoPE \(its sinusoids"),
        (None, "learned position embeddings"),
    ],
)
def test_other_model_types_are_refused_saying_what_they_use(model_type, instead):
    with pytest.raises(ValueError, match=rf"`model_type`, expected .*uses {instead}"):
        SinusoidalPositionEncoding.from_hf_config({"model_type": model_type})


def test_learned_distilbert_is_refused_by_its_switch():
    with pytest.raises(ValueError, match=r"`sinusoidal_pos_embds`, expected True"):
        SinusoidalPositionEncoding.from_hf_config(_path("distilbert-base-uncased"))


def test_trocr_with_learned_positions_is_refused():
    with pytest.raises(
        ValueError, match=r"`use_learned_position_embeddings`, expected False"
    ):
        SinusoidalPositionEncoding.from_hf_config({"model_type": "trocr"})


def test_odd_whisper_width_is_refused():
    with pytest.raises(ValueError, match=r"`d_model`, expected an even width"):
        SinusoidalPositionEncoding.from_hf_config(
            {"model_type": "whisper", "d_model": 385}
        )


def test_tensor2tensor_width_below_four_is_refused():
    with pytest.raises(ValueError, match=r"`d_model`, expected at least 4.*d_model=2"):
        SinusoidalPositionEncoding.from_hf_config(
            {"model_type": "m2m_100", "d_model": 2}
        )


@pytest.mark.parametrize(
    "config, match",
    [
        ({"pad_token_id": 128112}, r"`pad_token_id`, expected an id inside the vocab"),
        ({"pad_token_id": -1}, r"`pad_token_id`, expected a non-negative integer"),
        ({"pad_token_id": None}, r"`pad_token_id`, expected a non-negative integer"),
        ({"vocab_size": 0}, r"`vocab_size`, expected a positive integer"),
        ({"d_model": "wide"}, r"`d_model`, expected a positive integer"),
        ({"d_model": 8, "hidden_size": 16}, r"`hidden_size`, expected the value of"),
    ],
)
def test_bad_values_are_refused_by_name(config, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding.from_hf_config({"model_type": "m2m_100"} | config)


def test_sub_config_of_another_type_is_refused():
    config = {"model_type": "kosmos-2", "text_config": {"model_type": "opt"}}
    with pytest.raises(ValueError, match=r"`text_config.model_type`, expected"):
        SinusoidalPositionEncoding.from_hf_config(config)


def test_sub_config_that_is_not_a_dict_is_refused():
    with pytest.raises(ValueError, match=r"`decoder`, expected a dict"):
        SinusoidalPositionEncoding.from_hf_config(
            {"model_type": "musicgen", "decoder": [1]}
        )


@pytest.mark.parametrize("key", ["depth", "padding_id", "layout", "frequency_rule"])
def test_arguments_read_from_the_config_are_refused(key):
    message = rf"expected no `{key}` argument to from_hf_config: it is read from"
    with pytest.raises(ValueError, match=message + rf".*Received: {key}=1$"):
        SinusoidalPositionEncoding.from_hf_config({"model_type": "xglm"}, **{key: 1})


def test_a_path_that_is_not_a_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`config`, expected a dict, or the path"):
        SinusoidalPositionEncoding.from_hf_config(str(tmp_path / "missing.json"))


def test_every_read_model_type_is_held_against_its_module():
    # Each row of the reader's table has a golden config (itself, or the
    # wrapper whose part it is), and the survey lists it as read.
    from keras_posenc._hf import sinusoidal as _hf_sinusoidal

    covered = set(TYPES.values())
    for model_type in TYPES.values():
        part = _hf_sinusoidal.CONVENTIONS[model_type].part
        covered |= {part[1]} if part else set()
    assert set(_hf_sinusoidal.CONVENTIONS) == covered
    with open(os.path.join(HERE, "survey.json")) as file:
        survey = json.load(file)["types"]
    assert {t for t, row in survey.items() if row["status"] == "read"} == covered
