"""Layer configs carry the version that wrote them, and are read as it meant them.

`tests/golden/keras_files/v*/` holds `.keras` files written by every
released keras_posenc (0.1.0, a pre-release of 0.2.0, 0.2.0, 0.3.0, 0.3.1,
0.4.0) with the outputs that version gave; `make_keras_files.py` beside them
wrote them from each version's source. Each must load to those outputs.
"""

import glob
import json
import os
import re
import zipfile

import numpy as np
import pytest
from _helpers import ROOT, keras, keras3_only, max_diff, to_numpy

import keras_posenc
from keras_posenc import (
    AlibiBias,
    GridPositionEncoding,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
    TimestepEmbedding,
)
from keras_posenc._files.versions import order

FILES = os.path.join(ROOT, "tests", "golden", "keras_files")
KERAS_FILES = sorted(glob.glob(os.path.join(FILES, "v*", "*.keras")))
KEY = "keras_posenc_version"
# Every writer computed its outputs with the exact engine on TensorFlow;
# today's may differ from it by float32 rounding, never more.
SAME = 1e-6
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}


def _name(path):
    return os.path.relpath(path, FILES)


def _layer_config(path):
    """The config of the one keras_posenc layer in a `.keras` file, as stored."""
    with zipfile.ZipFile(path) as archive:
        model = json.loads(archive.read("config.json"))
    (layer,) = [
        layer
        for layer in model["config"]["layers"]
        if layer["class_name"] != "InputLayer"
    ]
    return layer["config"]


def _compat(name, **kwargs):
    return lambda: getattr(keras_posenc.compat, name)(**kwargs)


# Every layer class with a config (the compat drop-ins are Keras 3 only).
LAYERS = [
    pytest.param(SinusoidalPositionEncoding, id="sinusoidal"),
    pytest.param(lambda: RotaryEmbedding(rope_scaling=dict(YARN)), id="rotary"),
    pytest.param(lambda: TimestepEmbedding(8), id="timestep"),
    pytest.param(GridPositionEncoding, id="grid"),
    pytest.param(AlibiBias, id="alibi"),
    *(
        pytest.param(_compat(name), id=f"compat-{name}", marks=keras3_only)
        for name in (
            "SinePositionEncoding",
            "RotaryEmbedding",
            "AlibiBias",
            "FluxTimestepEmbedding",
        )
    ),
    pytest.param(
        _compat("SD3TimestepEmbedding", embedding_dim=8),
        id="compat-SD3TimestepEmbedding",
        marks=keras3_only,
    ),
]


def test_files_of_every_released_version_are_kept():
    # 0.1.0 to 0.5.2 and the pre-release that wrote YaRN's default as null.
    versions = {os.path.basename(os.path.dirname(path)) for path in KERAS_FILES}
    assert versions == {
        *(
            "v0.1.0",
            "v0.2.0.dev",
            "v0.2.0",
            "v0.3.0",
            "v0.3.1",
            "v0.4.0",
            "v0.5.0",
            "v0.5.1",
            "v0.5.2",
        )
    }


@keras3_only
@pytest.mark.parametrize("path", KERAS_FILES, ids=_name)
def test_file_of_every_version_loads_to_its_outputs(path):
    if "compat_" in path:
        import keras_posenc.compat  # noqa: F401  (its layers register on import)
    model = keras.saving.load_model(path)
    data = np.load(path[: -len(".keras")] + ".npz")
    assert max_diff(to_numpy(model(data["inputs"])), data["outputs"]) <= SAME


@keras3_only
@pytest.mark.parametrize("version", ["v0.2.0.dev", "v0.2.0"])
def test_yarn_null_truncate_of_0_2_reads_as_truncating(version):
    # 0.2 wrote `"truncate": null` for YaRN's default, which truncates.
    config = _layer_config(os.path.join(FILES, version, "rotary_yarn.keras"))
    assert KEY not in config and config["rope_scaling"]["truncate"] is None
    layer = RotaryEmbedding.from_config(config)
    assert layer.rope_scaling["truncate"] is True


@keras3_only
@pytest.mark.parametrize("version", ["v0.3.0", "v0.3.1", "v0.4.0"])
def test_explicit_null_truncate_of_0_3_on_is_written_as_false(version):
    # From 0.3.0 a null reads as transformers reads it (no truncation) and is
    # written as the value read: only 0.2 wrote null.
    path = os.path.join(FILES, version, "rotary_yarn_truncate_none.keras")
    config = _layer_config(path)
    assert KEY not in config and config["rope_scaling"]["truncate"] is False
    assert RotaryEmbedding.from_config(config).rope_scaling["truncate"] is False


def test_versioned_null_truncate_reads_as_its_version_meant():
    # With the key, the version decides: null is 0.2's default (truncating),
    # and transformers' no truncation from 0.3.0 on.
    config = RotaryEmbedding(rope_scaling=dict(YARN)).get_config()
    config["rope_scaling"]["truncate"] = None
    older = {**config, KEY: "0.2.0"}
    assert RotaryEmbedding.from_config(config).rope_scaling["truncate"] is False
    assert RotaryEmbedding.from_config(older).rope_scaling["truncate"] is True


@pytest.mark.parametrize(
    ("written", "truncate"),
    [("0.2.0", True), ("0.2.9.post1", True), ("0.3.0", False), ("0.3.0.post1", False)],
)
def test_null_truncate_reads_by_the_release_order(written, truncate):
    config = RotaryEmbedding(rope_scaling=dict(YARN)).get_config()
    config["rope_scaling"]["truncate"] = None
    layer = RotaryEmbedding.from_config({**config, KEY: written})
    assert layer.rope_scaling["truncate"] is truncate


@pytest.mark.parametrize("written", ["0.3.0.dev1", "0.3.0a2", "0.3.0rc1"])
def test_pre_release_of_a_changed_meaning_is_refused(written):
    # Written while 0.3.0 was in development: before or after the change?
    config = {**RotaryEmbedding(rope_scaling=dict(YARN)).get_config(), KEY: written}
    message = (
        f"written by keras_posenc {written}, a pre-release of 0.3.0, the version "
        "that changed the meaning of some of its keys"
    )
    with pytest.raises(ValueError, match=re.escape(message) + ".*" + KEY):
        RotaryEmbedding.from_config(config)


def test_a_pre_release_build_reads_its_own_configs(monkeypatch):
    # Its own configs have its meaning, even as a pre-release of a change.
    monkeypatch.setattr(keras_posenc, "__version__", "0.3.0rc1")
    config = RotaryEmbedding(rope_scaling=dict(YARN)).get_config()
    config["rope_scaling"]["truncate"] = None
    assert config[KEY] == "0.3.0rc1"
    assert RotaryEmbedding.from_config(config).rope_scaling["truncate"] is False


def test_compound_suffixes_are_ordered_as_pep_440_orders_them():
    written = [
        "0.5.0.dev1",
        "0.5.0a1",
        "0.5.0a1.post1",
        "0.5.0rc1.dev2",
        "0.5.0rc1",
        "0.5.0",
        "0.5.0.post1.dev3+gabc",
        "0.5.0.post1",
    ]
    assert sorted(reversed(written), key=order) == written
    assert order("0.5.0-1") == order("0.5.0.post1")
    assert order("0.5.0+local.7") == order("0.5.0")


def test_post_release_of_this_version_is_newer():
    written = keras_posenc.__version__ + ".post1"
    config = {**SinusoidalPositionEncoding().get_config(), KEY: written}
    with pytest.raises(ValueError, match=re.escape(f"{written}, newer than")):
        SinusoidalPositionEncoding.from_config(config)


def test_local_label_of_this_version_is_this_version():
    written = keras_posenc.__version__ + "+local.1"
    config = {**SinusoidalPositionEncoding(max_wavelength=500.0).get_config()}
    layer = SinusoidalPositionEncoding.from_config({**config, KEY: written})
    assert layer.max_wavelength == 500.0


@pytest.mark.parametrize("make", LAYERS)
def test_every_layer_config_records_its_version(make):
    layer = make()
    config = layer.get_config()
    assert config[KEY] == keras_posenc.__version__
    again = type(layer).from_config(config)
    assert again.get_config() == config


@pytest.mark.parametrize("make", LAYERS)
def test_config_of_a_newer_version_is_refused_by_name(make):
    layer = make()
    config = {**layer.get_config(), KEY: "99.0.0"}
    message = (
        f"This {type(layer).__name__} config was written by keras_posenc 99.0.0, "
        f"newer than this keras_posenc {keras_posenc.__version__}"
    )
    with pytest.raises(ValueError, match=re.escape(message) + ".*" + KEY):
        type(layer).from_config(config)


@pytest.mark.parametrize(
    "value", ["latest", 4, None, "0.4", "v0.4.0", "0.4.0xyz", "0.4.0.final"]
)
def test_version_that_is_not_a_version_is_refused(value):
    config = {**SinusoidalPositionEncoding().get_config(), KEY: value}
    if value is None:
        config[KEY] = "None"
    message = (
        f"Received an invalid value for `{KEY}`, expected the keras_posenc version "
        f"that wrote the config, such as '0.4.0'. Received: {KEY}="
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        SinusoidalPositionEncoding.from_config(config)
