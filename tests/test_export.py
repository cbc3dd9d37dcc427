"""Saving, exporting and compiling: every path a user ships a model through.

`.keras` files on every backend and across backends, SavedModels from
`model.export` and `export_saved_model` (TensorFlow, JAX, tf-keras) and their
reload without keras_posenc, the committed v0.1.0 export, the standalone
encoder of `export_encoder`, and the compilers and engines a model meets on
the way (XLA, tf.distribute, LiteRT, JAX data parallelism). What an export
may do to a user's files is tested in test_files.py. Subprocesses are used
only where a fresh interpreter is the point (another backend, no package,
device counts).
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LAYOUTS,
    LEGACY,
    ROOT,
    TOL,
    encode_positions,
    keras,
    keras3_only,
    max_diff,
    on_host_only,
    only_tensorflow,
    random_inputs,
    reference,
    reference_mp,
    serve,
    subprocess_env,
    to_numpy,
)
from keras import ops

from keras_posenc import SinusoidalPositionEncoding, export_encoder, export_saved_model
from keras_posenc.export import EXPORT_BACKENDS

V010 = os.path.join(ROOT, "saved_models", "v0.1.0")
# Backends (and tf-keras) that write SavedModels.
CAN_EXPORT = LEGACY or BACKEND in EXPORT_BACKENDS
exporting = pytest.mark.skipif(
    not CAN_EXPORT, reason=f"{BACKEND} writes no SavedModels (tested below)"
)
# Deciding equality across processes, writers and compilers: float32 outputs
# of a Dense head on the encoding may differ by a few ulps, never more.
SAME = 1e-6
LOOKUP_ROWS = 64
OPTIONS = [
    pytest.param(
        {"mode": mode, "merge": merge, "layout": layout},
        id=f"{mode}-{merge}-{layout}",
    )
    for mode in ("compute", "lookup")
    for merge in ("add", "concat", None)
    for layout in LAYOUTS
]
# The published conventions (fairseq's frequencies, MusicGen's layout, a
# padding row, XGLM's offset), saved and served like the paper's table.
CONVENTIONS = {
    "frequency_rule": "tensor2tensor",
    "layout": "cos_sin",
    "odd_depth": "zero",
    "padding_id": 3,
    "position_offset": 2,
}
OPTIONS += [
    pytest.param(
        {"mode": mode, "merge": merge, **CONVENTIONS},
        id=f"{mode}-{merge}-conventions",
    )
    for mode in ("compute", "lookup")
    for merge in ("add", None)
]
BOTH_MODES = pytest.mark.parametrize("mode", ["compute", "lookup"])
# The SavedModel tests: both modes, and compute mode with `CONVENTIONS`.
SAVED_MODES = pytest.mark.parametrize("mode", ["compute", "lookup", "conventions"])


def _layer(mode="compute", **options):
    if mode == "conventions":
        mode, options = "compute", CONVENTIONS | options
    if mode == "lookup":
        options.setdefault("max_length", LOOKUP_ROWS)
    if options.get("merge") == "concat":
        options.setdefault("depth", 6)
    return SinusoidalPositionEncoding(mode=mode, **options)


def _model(mode="compute", seed=0, **options):
    """features [batch, length, 8] -> encoding -> Dense(4), seeded weights."""
    # A seeded initializer, not keras.utils.set_random_seed (which imports TF).
    initializer = keras.initializers.RandomNormal(seed=seed)
    head = keras.layers.Dense(4, kernel_initializer=initializer, name="head")
    inputs = keras.Input(shape=(None, 8))
    return keras.Model(inputs, head(_layer(mode, **options)(inputs)))


def _encoding_layer(model):
    (layer,) = [x for x in model.layers if isinstance(x, SinusoidalPositionEncoding)]
    return layer


def _tf():
    import tensorflow as tf

    return tf


def _python(script, *args, env, cwd):
    """Starts `python -c script args...`; `_finish` waits for it.

    Output goes to temporary files, not pipes: a child that fills a pipe
    nobody reads yet would block.
    """
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        env=env,
        cwd=cwd,
        stdout=out,
        stderr=err,
    )
    process.output_files = out, err
    return process


def _finish(process, timeout=300):
    """Waits for `process`; its stdout, or a failure showing its stderr."""
    try:
        process.wait(timeout=timeout)
    finally:
        process.kill()  # a no-op unless the wait timed out
    texts = []
    for file in process.output_files:
        file.seek(0)
        texts.append(file.read())
        file.close()
    out, err = texts
    assert process.returncode == 0, err[-4000:]
    return out


# -- .keras files ---------------------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS)
def test_keras_file_round_trip(tmp_path, options):
    # Every mode x merge x layout reloads in safe mode without custom_objects
    # (the layer is registered) as the same class, config and outputs.
    model = _model(**options)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path, safe_mode=True)
    layer = _encoding_layer(restored)
    assert type(layer) is SinusoidalPositionEncoding
    assert layer.get_config() == _encoding_layer(model).get_config()
    x = random_inputs(2, 11)
    np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))


def test_keras_file_round_trip_of_positions_from_ids(tmp_path):
    # Token ids in, fairseq's positions (padding row zero) out: the layer
    # of `from_hf_config` reloads as the same class, config and outputs.
    inputs = keras.Input(shape=(None,), dtype="int32")
    layer = SinusoidalPositionEncoding.from_hf_config(
        {"model_type": "m2m_100", "d_model": 9, "vocab_size": 64}
    )
    model = keras.Model(inputs, keras.layers.Dense(3)(layer(inputs)))
    path = str(tmp_path / "ids.keras")
    model.save(path)
    restored = keras.models.load_model(path, safe_mode=True)
    assert _encoding_layer(restored).get_config() == layer.get_config()
    ids = np.array([[1, 1, 5, 6], [4, 5, 6, 7]], "int32")
    np.testing.assert_array_equal(to_numpy(restored(ids)), to_numpy(model(ids)))


# One interpreter per backend saves a `.keras` file per mode (with inputs,
# outputs and the layer config), waits until every backend has saved, then
# loads every file and records how far its outputs are from the saver's.
# Saving and loading in one process halves the interpreter starts.
_PORTABLE = textwrap.dedent(
    """
    import glob, json, os, sys, time
    import numpy as np
    import keras, keras_posenc

    BACKEND = keras.backend.backend()

    def save(folder):
        for seed, mode in enumerate(["compute", "lookup", "conventions"]):
            options = {"mode": mode, "max_length": 64} if mode == "lookup" else {}
            if mode == "conventions":  # the published options of CONVENTIONS
                options = {"frequency_rule": "tensor2tensor", "layout": "cos_sin",
                           "odd_depth": "zero", "padding_id": 3, "position_offset": 2}
            layer = keras_posenc.SinusoidalPositionEncoding(**options)
            inputs = keras.Input(shape=(None, 8))
            # A seeded initializer: keras.utils.set_random_seed imports TF.
            seeded = keras.initializers.RandomNormal(seed=seed)
            head = keras.layers.Dense(4, kernel_initializer=seeded)
            model = keras.Model(inputs, head(layer(inputs)))
            x = np.random.default_rng(seed).normal(size=(3, 17, 8)).astype("float32")
            stem = os.path.join(folder, f"{BACKEND}-{mode}")
            model.save(stem + ".keras")
            np.save(stem + "-x.npy", x)
            np.save(stem + "-y.npy", keras.ops.convert_to_numpy(model(x)))
            with open(stem + "-config.json", "w") as f:
                json.dump(layer.get_config(), f)
        open(os.path.join(folder, f"saved-on-{BACKEND}"), "w").close()

    def wait_for_savers(folder, backends, alive):
        deadline = time.monotonic() + 240
        markers = [os.path.join(folder, f"saved-on-{b}") for b in backends]
        while not all(map(os.path.exists, markers)):
            if not alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{BACKEND}: a saver died or timed out")
            time.sleep(0.05)

    def load(folder):
        found = {}
        for path in sorted(glob.glob(os.path.join(folder, "*.keras"))):
            stem = path[: -len(".keras")]
            model = keras.models.load_model(path)
            (layer,) = [
                l for l in model.layers
                if isinstance(l, keras_posenc.SinusoidalPositionEncoding)
            ]
            with open(stem + "-config.json") as f:
                same_config = json.load(f) == json.loads(json.dumps(layer.get_config()))
            y = keras.ops.convert_to_numpy(model(np.load(stem + "-x.npy")))
            found[os.path.basename(stem)] = {
                "difference": float(np.abs(y - np.load(stem + "-y.npy")).max()),
                "same_config": same_config,
            }
        with open(os.path.join(folder, f"loaded-on-{BACKEND}.json"), "w") as f:
            json.dump(found, f)

    if __name__ == "__main__":
        folder, backends = sys.argv[1], sys.argv[2:]
        parent = os.getppid()
        save(folder)
        wait_for_savers(folder, backends, alive=lambda: os.getppid() == parent)
        load(folder)
    """
)

PORTABLE_BACKENDS = ("tensorflow", "jax", "torch")


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "tensorflow" or LEGACY,
    reason="runs once, in the Keras 3 TensorFlow pass (it starts every backend)",
)
def test_keras_file_saved_on_any_backend_loads_on_every_backend(
    tmp_path, record_property
):
    # The 3x3 matrix in both modes and with the published conventions: JAX
    # and torch in subprocesses, TensorFlow
    # here, all at once; each loads only after all three have saved.
    portable = {"__name__": "portable"}
    exec(_PORTABLE, portable)
    running = [
        _python(
            _PORTABLE, tmp_path, *PORTABLE_BACKENDS, env=subprocess_env(b), cwd=tmp_path
        )
        for b in PORTABLE_BACKENDS
        if b != "tensorflow"
    ]
    try:
        portable["save"](str(tmp_path))
        portable["wait_for_savers"](
            str(tmp_path),
            PORTABLE_BACKENDS,
            alive=lambda: all(p.poll() in (None, 0) for p in running),
        )
        portable["load"](str(tmp_path))
    except Exception:
        failed = [p for p in running if p.poll() not in (None, 0)]
        for process in running:
            process.kill()
            process.wait()
        for process in failed:
            _finish(process)  # fails showing the child's stderr
        raise
    for process in running:
        _finish(process)
    cells = {}
    for loader in PORTABLE_BACKENDS:
        with open(tmp_path / f"loaded-on-{loader}.json") as f:
            for saved, found in json.load(f).items():
                cells[f"{saved} on {loader}"] = found
    assert len(cells) == 3 * 3 * 3, sorted(cells)  # savers, loaders, modes
    assert all(cell["same_config"] for cell in cells.values()), cells
    worst = max(cell["difference"] for cell in cells.values())
    record_property("max_difference", worst)
    assert worst <= SAME, cells


# -- SavedModels -------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Per mode: the model and its SavedModels from each writer on this backend."""
    if not CAN_EXPORT:
        pytest.skip(f"{BACKEND} writes no SavedModels")
    folder = tmp_path_factory.mktemp("saved_models")
    found = {}
    for seed, mode in enumerate(["compute", "lookup", "conventions"]):
        model = _model(mode, seed=seed)
        paths = {"export_saved_model": export_saved_model(model, folder / mode)}
        if not LEGACY:
            paths["model.export"] = str(folder / f"{mode}-keras")
            model.export(paths["model.export"], format="tf_saved_model", verbose=False)
        found[mode] = (model, paths)
    return found


SHAPES = [(1, 3), (5, 40)]
WRITERS = pytest.mark.parametrize(
    "writer",
    [
        "export_saved_model",
        pytest.param("model.export", marks=keras3_only),
    ],
)


@exporting
@WRITERS
@SAVED_MODES
def test_saved_model_serves_any_batch_and_length(saved_models, mode, writer):
    # tf.saved_model.load: one signature serves every (batch, length).
    model, paths = saved_models[mode]
    loaded = _tf().saved_model.load(paths[writer])
    for batch, length in SHAPES:
        x = random_inputs(batch, length, seed=length)
        assert max_diff(serve(loaded, x), to_numpy(model(x))) <= SAME


@only_tensorflow
@keras3_only
@WRITERS
@SAVED_MODES
def test_tfsm_layer_serves_the_saved_model(saved_models, mode, writer):
    # keras.layers.TFSMLayer (Keras 3, TensorFlow backend) on both writers' output.
    model, paths = saved_models[mode]
    layer = keras.layers.TFSMLayer(paths[writer], call_endpoint="serve")
    for batch, length in SHAPES:
        x = random_inputs(batch, length, seed=length)
        assert max_diff(to_numpy(layer(x)), to_numpy(model(x))) <= SAME


@pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason="jax2tf shape polymorphism assumes every dimension >= 1",
)
@BOTH_MODES
def test_saved_model_serves_an_empty_sequence(saved_models, mode):
    # A length-0 request gets a length-0 answer, as the eager model gives.
    model, paths = saved_models[mode]
    x = np.zeros((2, 0, 8), "float32")
    assert serve(paths["export_saved_model"], x).shape == (2, 0, 4)


# Runs SavedModels in an interpreter where importing keras_posenc fails, as
# on a serving host. argv[1]: a JSON list of [SavedModel, [[inputs.npy,
# outputs.npy], ...]]; each SavedModel is loaded once.
_NO_PACKAGE = textwrap.dedent(
    """
    import json, sys
    sys.modules["keras_posenc"] = None  # any import of it now fails
    import numpy as np
    import tensorflow as tf

    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for path, runs in jobs:
        serve = tf.saved_model.load(path).signatures["serving_default"]
        (arg,) = serve.structured_input_signature[1]
        for inputs, outputs in runs:
            (y,) = serve(**{arg: tf.constant(np.load(inputs))}).values()
            np.save(outputs, y.numpy())
    assert sys.modules["keras_posenc"] is None
    """
)


@exporting
@pytest.mark.slow
def test_saved_models_load_where_keras_posenc_is_missing(
    saved_models, tmp_path, record_property
):
    # Both modes, every writer, two shapes, in one fresh TF-only interpreter.
    jobs, expected = [], {}
    for mode, (model, paths) in saved_models.items():
        for writer, path in paths.items():
            runs = []
            for batch, length in SHAPES:
                name = str(tmp_path / f"{mode}-{writer}-{batch}x{length}")
                x = random_inputs(batch, length, seed=batch)
                np.save(f"{name}-x.npy", x)
                runs.append([f"{name}-x.npy", f"{name}-y.npy"])
                expected[f"{name}-y.npy"] = to_numpy(model(x))
            jobs.append([path, runs])
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    _finish(
        _python(_NO_PACKAGE, tmp_path / "jobs.json", env=subprocess_env(), cwd=tmp_path)
    )
    worst = max(max_diff(np.load(out), want) for out, want in expected.items())
    record_property("max_difference", worst)
    assert worst <= SAME


@pytest.mark.skipif(not LEGACY, reason="tf-keras (TF_USE_LEGACY_KERAS=1) only")
@SAVED_MODES
def test_tf_keras_saved_model_restores_the_real_layer(tmp_path, mode):
    # tf-keras model.save(dir) -> tf_keras.models.load_model gives back the
    # registered class, an equal config and equal outputs.
    import tf_keras

    model = _model(mode)
    model.save(str(tmp_path / "sm"))
    restored = tf_keras.models.load_model(str(tmp_path / "sm"))
    layer = _encoding_layer(restored)
    assert type(layer) is SinusoidalPositionEncoding
    assert layer.get_config() == _encoding_layer(model).get_config()
    for batch, length in SHAPES:
        x = random_inputs(batch, length)
        np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))


@pytest.mark.skipif(not LEGACY, reason="tf-keras (TF_USE_LEGACY_KERAS=1) only")
@SAVED_MODES
def test_tf_keras_export_saved_model_restores_the_real_layer(saved_models, mode):
    # Under tf-keras, export_saved_model is model.save(dir): load_model restores.
    import tf_keras

    model, paths = saved_models[mode]
    restored = tf_keras.models.load_model(paths["export_saved_model"])
    assert type(_encoding_layer(restored)) is SinusoidalPositionEncoding
    x = random_inputs(2, 9)
    np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))


@exporting
def test_export_logs_no_hidden_staging_path(tmp_path, caplog):
    # TensorFlow logs at INFO in notebooks, and a SavedModel write logs
    # "Assets written to: <staging>/assets": the export holds its INFO lines
    # back (a notebook showed the hidden `.NAME~....partial` path twice),
    # and leaves TensorFlow's logger as it found it.
    import logging

    logger = logging.getLogger("tensorflow")
    filters = list(logger.filters)
    caplog.set_level(logging.INFO, logger="tensorflow")
    export_saved_model(_model(), tmp_path / "model")
    if BACKEND == "tensorflow" and not LEGACY:
        export_encoder(tmp_path / "encoder", 8)
    assert [
        r.getMessage() for r in caplog.records if ".partial" in r.getMessage()
    ] == []
    assert logger.filters == filters


@exporting
def test_export_a_built_layer_keeps_batch_and_length_dynamic(tmp_path):
    # A bare layer is wrapped with its built shape; batch and the layer's
    # sequence axis (here -2 of [batch, heads, length, dim]) stay dynamic.
    layer = _layer("lookup", sequence_axis=-2)
    layer(np.zeros((1, 2, 4, 6), "float32"))
    path = export_saved_model(layer, tmp_path / "layer")
    for shape in [(1, 2, 3, 6), (3, 2, 50, 6)]:
        x = np.random.default_rng(0).normal(size=shape).astype("float32")
        assert max_diff(serve(path, x), to_numpy(layer(x))) <= SAME


@exporting
def test_export_refuses_what_is_not_a_built_layer(tmp_path):
    # An unbuilt layer or a non-layer is refused before anything is written.
    with pytest.raises(ValueError, match=r"`model_or_layer`, expected a built layer"):
        export_saved_model(_layer(), tmp_path / "a")
    with pytest.raises(TypeError, match=r"`model_or_layer`, expected a Keras Model"):
        export_saved_model("model", tmp_path / "b")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(CAN_EXPORT, reason="only where no SavedModel can be written")
def test_export_saved_model_names_the_backends_that_can(tmp_path):
    # torch: a ValueError naming TensorFlow and JAX and the `.keras` way out.
    with pytest.raises(
        ValueError,
        match=r"one of \('tensorflow', 'jax'\)\. Received: KERAS_BACKEND='torch'\. "
        r"Save a `\.keras` file instead",
    ):
        export_saved_model(_model(), tmp_path / "export")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(BACKEND != "torch", reason="torch.export: torch backend only")
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_torch_exported_program_equals_eager(tmp_path, mode):
    # What torch can deploy: model.export(format="torch") (torch.export), a
    # static-shape program reloaded with torch.export.load.
    import torch

    model = _model(mode)
    path = str(tmp_path / "model.pt2")
    spec = keras.InputSpec(shape=(2, 12, 8))
    model.export(path, format="torch", verbose=False, input_signature=[spec])
    program = torch.export.load(path).module()
    x = random_inputs(2, 12)
    # On the device Keras exported on (CUDA on a GPU machine), not the CPU.
    got = to_numpy(program(ops.convert_to_tensor(x)).detach())
    assert max_diff(got, to_numpy(model(x))) <= SAME


# -- the committed v0.1.0 export ----------------------------------------------------


def _v010_generator():
    spec = importlib.util.spec_from_file_location(
        "generate", os.path.join(ROOT, "saved_models", "generate.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_v0_1_0_export_reproduces_its_stored_outputs():
    # saved_models/v0.1.0 (written by 0.1.0, saved_models/generate.py) still
    # loads with tf.saved_model.load and gives the outputs stored beside it.
    x = np.load(os.path.join(V010, "inputs.npy"))
    expected = np.load(os.path.join(V010, "expected.npy"))
    got = serve(os.path.join(V010, "saved_model"), x)
    assert max_diff(got, expected) <= 1e-6


def test_committed_v0_1_0_outputs_are_the_encoding():
    # What it stores is the paper's encoding: columns 8: are the lookup PE
    # alone (depth 5, concatenated), columns :8 are inputs + PE(depth 8),
    # off by at most TOL plus the rounding of the float32 sum.
    x = np.load(os.path.join(V010, "inputs.npy"))
    expected = np.load(os.path.join(V010, "expected.npy"))
    positions = np.arange(x.shape[1])
    pe5 = reference(positions, 5, layout="concatenated")
    assert max_diff(expected[..., 8:], np.broadcast_to(pe5, x.shape[:2] + (5,))) <= TOL
    exact = x.astype(np.float64) + reference(positions, 8)
    bound = TOL + np.spacing(np.abs(expected[..., :8])) / 2
    assert np.all(np.abs(expected[..., :8] - exact) <= bound)


def test_this_version_reproduces_the_v0_1_0_export():
    # Today's layers, on this backend, rebuild the v0.1.0 model (generate.py)
    # and give the outputs that version exported.
    model = _v010_generator().build_model()
    x = np.load(os.path.join(V010, "inputs.npy"))
    expected = np.load(os.path.join(V010, "expected.npy"))
    assert max_diff(to_numpy(model(x)), expected) <= 1e-6


# -- export_encoder ------------------------------------------------------------------

ENCODERS = {
    "compute": {"depth": 7, "layout": "interleaved"},
    "lookup": {
        "depth": 6,
        "layout": "concatenated",
        "mode": "lookup",
        "max_length": 50,
    },
    "extend": {
        "depth": 6,
        "mode": "lookup",
        "max_length": 8,
        "out_of_range": "extend",
    },
}


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """The standalone encoder SavedModels, loaded: name -> (module, options)."""
    if BACKEND != "tensorflow":
        pytest.skip("export_encoder builds TensorFlow ops (tested below)")
    folder = tmp_path_factory.mktemp("encoders")
    found = {}
    for name, options in ENCODERS.items():
        options = dict(options)
        depth = options.pop("depth")
        path = export_encoder(folder / name, depth, **options)
        found[name] = (_tf().saved_model.load(path), ENCODERS[name])
    return found


def _table(loaded, length, start_index):
    tf = _tf()
    signature = loaded.signatures["table"]
    result = signature(length=tf.constant(length), start_index=tf.constant(start_index))
    return result["encoding"].numpy()


def _expected(options, positions):
    layout = options.get("layout", "interleaved")
    return reference(positions, options["depth"], layout=layout)


@only_tensorflow
def test_encoder_signatures_are_int32_in_float32_out(encoders):
    # serving_default(positions [B, L]) and table(length, start_index): int32
    # in, float32 "encoding" out, with the documented shapes.
    tf = _tf()
    loaded, options = encoders["compute"]
    serve = loaded.signatures["serving_default"]
    assert serve.structured_input_signature[1] == {
        "positions": tf.TensorSpec([None, None], tf.int32, name="positions")
    }
    table = loaded.signatures["table"]
    assert table.structured_input_signature[1] == {
        "length": tf.TensorSpec([], tf.int32, name="length"),
        "start_index": tf.TensorSpec([], tf.int32, name="start_index"),
    }
    assert encode_positions(loaded, [[0, 1, 2]]).shape == (1, 3, options["depth"])
    assert encode_positions(loaded, [[0, 1, 2]]).dtype == np.float32
    assert _table(loaded, 4, 0).shape == (4, options["depth"])


@only_tensorflow
@pytest.mark.parametrize("name", ["compute", "lookup"])
def test_encoder_serving_default_is_the_reference(encoders, name):
    # Rows of explicit positions (two examples) within TOL of float64.
    loaded, options = encoders[name]
    positions = np.array([[0, 1, 2, 3], [7, 8, 31, 49]])
    assert (
        max_diff(encode_positions(loaded, positions), _expected(options, positions))
        <= TOL
    )


@only_tensorflow
@pytest.mark.parametrize("name", ["compute", "lookup"])
def test_encoder_table_is_the_reference(encoders, name):
    # table(length, start_index): rows start_index + [0, length).
    loaded, options = encoders[name]
    for length, start in [(5, 10), (1, 49), (50, 0)]:
        positions = start + np.arange(length)
        got = _table(loaded, length, start)
        assert max_diff(got, _expected(options, positions)) <= TOL


@only_tensorflow
def test_compute_encoder_is_exact_at_negative_and_extreme_positions(encoders):
    # -2**31, 2**31 - 1 and negative starts, against 40-digit mpmath.
    loaded, options = encoders["compute"]
    positions = np.array([[-(2**31), -5, 100_000, 2**31 - 1]])
    expected = reference_mp(positions, options["depth"])
    assert max_diff(encode_positions(loaded, positions), expected) <= TOL
    rows = _table(loaded, 3, -1)
    assert max_diff(rows, reference(np.array([-1, 0, 1]), options["depth"])) <= TOL


@only_tensorflow
def test_lookup_encoder_raises_out_of_range_at_runtime(encoders):
    # A position outside [0, max_length) is an InvalidArgumentError from the
    # SavedModel itself, through both signatures, never a wrong row.
    tf = _tf()
    loaded, _ = encoders["lookup"]
    outside = r"out of range for the lookup table of `max_length`=50 rows"
    with pytest.raises(tf.errors.InvalidArgumentError, match=outside):
        encode_positions(loaded, [[0, 50]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=outside):
        _table(loaded, 4, 47)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"value for `positions`"):
        encode_positions(loaded, [[-1, 3]])


@only_tensorflow
def test_extend_encoder_computes_rows_past_the_table(encoders):
    # out_of_range="extend": positions past max_length=8 get the exact rows.
    loaded, options = encoders["extend"]
    positions = np.array([[0, 7, 8, 1000]])
    assert (
        max_diff(encode_positions(loaded, positions), _expected(options, positions))
        <= TOL
    )
    assert max_diff(_table(loaded, 4, 6), _expected(options, 6 + np.arange(4))) <= TOL


@only_tensorflow
def test_encoder_table_of_length_zero_is_empty(encoders):
    # table(0, start_index) is an empty [0, depth] table, even at the table's end.
    loaded, options = encoders["lookup"]
    assert _table(loaded, 0, 50).shape == (0, options["depth"])


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"depth": 0}, r"`depth`, expected a positive integer <= 65536"),
        ({"mode": "table"}, r"`mode`, expected one of \('compute', 'lookup'\)"),
        ({"mode": "lookup"}, r"`max_length`, expected a positive integer with mode="),
        ({"max_length": 10}, r"`max_length`, expected None with mode='compute'"),
        ({"layout": "split"}, r"`layout`, expected one of"),
        ({"max_wavelength": 0.0}, r"`max_wavelength`, expected a finite number > 0"),
        ({"overwrite": "yes"}, r"`overwrite`, expected a bool\. Received: overwrite="),
    ],
    ids=[
        "depth",
        "mode",
        "lookup-without-max_length",
        "compute-with-max_length",
        "layout",
        "max_wavelength",
        "overwrite",
    ],
)
def test_export_encoder_checks_arguments_first(tmp_path, arguments, message):
    # Every argument is checked, on every backend, before anything is written.
    arguments = {"depth": 8, **arguments}
    depth = arguments.pop("depth")
    with pytest.raises(ValueError, match=message):
        export_encoder(tmp_path / "encoder", depth, **arguments)
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the TensorFlow backend exports")
def test_export_encoder_names_the_backend_it_needs(tmp_path):
    # JAX, torch: a ValueError saying KERAS_BACKEND='tensorflow' is needed.
    with pytest.raises(
        ValueError,
        match=r"needs KERAS_BACKEND='tensorflow'\. "
        rf"Received: KERAS_BACKEND='{BACKEND}'",
    ):
        export_encoder(tmp_path / "encoder", 8)
    assert os.listdir(tmp_path) == []


# -- compilers and engines ------------------------------------------------------------

jit_backends = pytest.mark.skipif(
    BACKEND == "torch",
    reason="torch.compile of a fit step takes minutes on CPU (measured 156 s)",
)


@jit_backends
@BOTH_MODES
def test_jit_compiled_predict_equals_eager(mode):
    # XLA (TF, tf-keras) or jax.jit predictions equal the eager call.
    model = _model(mode)
    model.compile(jit_compile=True)
    x = random_inputs(4, 12)
    assert max_diff(model.predict(x, verbose=0), to_numpy(model(x))) <= SAME


@jit_backends
@BOTH_MODES
def test_jit_compiled_fit_step_equals_eager(mode):
    # One SGD step compiled with XLA / jax.jit gives the eager step's weights.
    x = random_inputs(4, 12)
    y = random_inputs(4, 12, depth=4, seed=1)
    eager, compiled = _model(mode), _model(mode)
    compiled.set_weights(eager.get_weights())
    eager.compile(keras.optimizers.SGD(0.1), "mse", run_eagerly=True)
    compiled.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
    eager.train_on_batch(x, y)
    compiled.train_on_batch(x, y)
    for a, b in zip(eager.get_weights(), compiled.get_weights(), strict=True):
        assert max_diff(a, b) <= SAME


# Fits under MirroredStrategy on two logical CPUs (set before TF starts) a
# model holding both modes, exports it, reloads it; prints the largest
# reload difference and the replica count as JSON.
_MIRRORED = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import numpy as np
    import keras_posenc
    from keras_posenc._keras import keras

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = np.random.default_rng(0).normal(size=(16, 10, 8)).astype("float32")
    with strategy.scope():
        inputs = keras.Input(shape=(None, 8))
        h = keras_posenc.SinusoidalPositionEncoding(mode="compute")(inputs)
        h = keras.layers.Dense(8)(h)
        h = keras_posenc.SinusoidalPositionEncoding(mode="lookup", max_length=32)(h)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile("adam", "mse")
    history = model.fit(x, x[..., :1] ** 2, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    path = keras_posenc.export_saved_model(model, f"{sys.argv[1]}/export")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    (arg,) = serve.structured_input_signature[1]
    (y,) = serve(**{arg: tf.constant(x)}).values()
    print(json.dumps({
        "replicas": strategy.num_replicas_in_sync,
        "difference": float(np.abs(y.numpy() - model.predict(x, verbose=0)).max()),
    }))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute: TensorFlow only")
def test_mirrored_strategy_fit_then_export(tmp_path, record_property):
    # Two replicas fit a model with both modes, export it, and the reload
    # matches predict within 1e-6.
    process = _python(
        _MIRRORED, tmp_path, env=subprocess_env(legacy=LEGACY), cwd=tmp_path
    )
    found = json.loads(_finish(process).strip().splitlines()[-1])
    record_property("found", found)
    assert found["replicas"] == 2, found
    assert found["difference"] <= 1e-6, found


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TFLite converts TF graphs")
@BOTH_MODES
@pytest.mark.parametrize("length", [12, None], ids=["fixed", "dynamic"])
def test_tflite_builtins_only(mode, length):
    # TFLITE_BUILTINS only (no Flex ops), run in ai_edge_litert, resized for a
    # dynamic length: within 2e-7 of TF and of the float64 reference.
    tf = _tf()
    from ai_edge_litert.interpreter import Interpreter

    # merge=None: the encoding itself, not float32 sums with the inputs.
    rows = {"max_length": 256} if mode == "lookup" else {}
    layer = _layer(mode, merge=None, **rows)
    spec = tf.TensorSpec([2, length, 8])
    fn = tf.function(lambda x: layer(x, start_index=100), input_signature=[spec])
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [fn.get_concrete_function()], layer
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    for n in [12] if length else [5, 77]:
        if length is None:
            interpreter.resize_tensor_input(inp["index"], [2, n, 8])
        interpreter.allocate_tensors()
        x = random_inputs(2, n)
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        got = interpreter.get_tensor(out["index"])
        assert max_diff(got, to_numpy(layer(x, start_index=100))) <= 2e-7
        expected = np.broadcast_to(reference(100 + np.arange(n), 8), got.shape)
        assert max_diff(got, expected) <= TOL


# Fits and predicts a model holding both modes under
# keras.distribution.DataParallel on two host devices and on one, from the
# same weights; prints the differences as JSON.
_DATA_PARALLEL = textwrap.dedent(
    """
    import json
    import numpy as np
    import keras, keras_posenc

    devices = keras.distribution.list_devices("cpu")
    assert len(devices) == 2, devices
    x = np.random.default_rng(0).normal(size=(16, 10, 8)).astype("float32")
    y = x[..., :1] ** 2

    def build():
        inputs = keras.Input(shape=(None, 8))
        h = keras_posenc.SinusoidalPositionEncoding(mode="compute")(inputs)
        h = keras.layers.Dense(8)(h)
        h = keras_posenc.SinusoidalPositionEncoding(mode="lookup", max_length=32)(h)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile(keras.optimizers.SGD(0.05), "mse")
        return model

    single = build()
    with keras.distribution.DataParallel(devices=devices).scope():
        parallel = build()
        parallel.set_weights(single.get_weights())
        parallel.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        predicted = parallel.predict(x, batch_size=8, verbose=0)
        used = len(parallel.layers[-1].kernel.value.sharding.device_set)
    single.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    print(json.dumps({
        "devices": used,
        # Relative to the outputs' scale (up to about 10): the all-reduce
        # sums gradients in another order, and a weight 1 ulp apart moves
        # an output by a few of its ulps.
        "predict": float(
            np.abs(predicted - single.predict(x, verbose=0)).max()
            / np.abs(predicted).max()
        ),
        "weights": max(
            float(np.abs(a - b).max())
            for a, b in zip(parallel.get_weights(), single.get_weights())
        ),
    }))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "jax", reason="keras.distribution: JAX pass only")
def test_jax_data_parallel_fit_and_predict_equal_one_device(tmp_path, record_property):
    # Two host devices (XLA_FLAGS before JAX starts): fit then predict give
    # the one-device weights within 1e-6 and outputs within 1e-6 of their
    # scale.
    env = on_host_only(
        subprocess_env("jax", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    )
    found = json.loads(
        _finish(_python(_DATA_PARALLEL, env=env, cwd=tmp_path)).strip().splitlines()[-1]
    )
    record_property("found", found)
    assert found["devices"] == 2, found
    assert found["predict"] <= 1e-6, found
    assert found["weights"] <= 1e-6, found
