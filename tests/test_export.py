"""Saving, exporting and compiling: every path a user ships through."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from conftest import LEGACY, keras, reference

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding, cli, demo, export_saved_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONS = [
    pytest.param(dict(mode=m, merge=g, layout=lay, **({"max_length": 64} if m == "lookup" else {})),
                 id=f"{m}-{g}-{lay}")
    for m in ("compute", "lookup")
    for g in ("add", "concat", None)
    for lay in ("interleaved", "concatenated")
]


def _model(**options):
    if options.get("merge") == "concat":
        options.setdefault("depth", 6)
    inputs = keras.Input(shape=(None, 8))
    x = SinusoidalPositionEncoding(**options)(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, name="head")(x))


def _x(batch, length, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, length, 8)).astype("float32")


@pytest.mark.parametrize("options", OPTIONS)
def test_keras_format_round_trip(tmp_path, options):
    # `.keras` reloads in safe mode without custom_objects: the layer is registered.
    model = _model(**options)
    path = str(tmp_path / "m.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    layer = next(l for l in restored.layers if isinstance(l, SinusoidalPositionEncoding))
    assert layer.get_config() == next(
        l for l in model.layers if isinstance(l, SinusoidalPositionEncoding)).get_config()
    x = _x(2, 11)
    np.testing.assert_allclose(restored(x).numpy(), model(x).numpy(), rtol=0, atol=0)


def _serve(loaded, x):
    serve = loaded.signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    (out,) = serve(**{name: tf.constant(x)}).values()
    return out.numpy()


@pytest.mark.skipif(LEGACY, reason="Keras 3 export paths")
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_saved_model_paths_keras3(tmp_path, mode):
    # model.export and tf.saved_model.save; reloaded with tf.saved_model.load
    # and TFSMLayer, at two (batch, length) shapes.
    model = _model(mode=mode, **({"max_length": 64} if mode == "lookup" else {}))
    exported = str(tmp_path / "export")
    model.export(exported, format="tf_saved_model", verbose=False)
    saved = str(tmp_path / "saved")
    tf.saved_model.save(model, saved)
    for batch, length in [(1, 3), (5, 40)]:
        x = _x(batch, length)
        expected = model(x).numpy()
        np.testing.assert_allclose(_serve(tf.saved_model.load(exported), x), expected, atol=0)
        np.testing.assert_allclose(_serve(tf.saved_model.load(saved), x), expected, atol=0)
        tfsm = keras.layers.TFSMLayer(exported, call_endpoint="serve")
        np.testing.assert_allclose(tfsm(x).numpy(), expected, atol=0)


@pytest.mark.skipif(not LEGACY, reason="tf-keras SavedModel format")
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_tf_keras_saved_model_restores_the_real_layer(tmp_path, mode):
    model = _model(mode=mode, **({"max_length": 64} if mode == "lookup" else {}))
    model.save(str(tmp_path / "sm"))
    restored = keras.models.load_model(str(tmp_path / "sm"))
    layer = restored.layers[1]
    assert type(layer) is SinusoidalPositionEncoding
    assert layer.get_config() == model.layers[1].get_config()
    for batch, length in [(1, 3), (4, 30)]:
        x = _x(batch, length)
        np.testing.assert_allclose(restored(x).numpy(), model(x).numpy(), atol=0)


@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_saved_model_loads_where_keras_posenc_is_missing(tmp_path, mode):
    model = _model(mode=mode, **({"max_length": 64} if mode == "lookup" else {}))
    path = export_saved_model(model, tmp_path / "export")
    x = _x(3, 17)
    # The demo's reload: a fresh process where importing keras_posenc fails.
    reloaded = demo.reload_in_fresh_process(path, x, str(tmp_path))
    np.testing.assert_allclose(reloaded, model(x).numpy(), atol=0)


def test_committed_reference_export_still_loads():
    # saved_models/v0.1.0 was exported by version 0.1.0 (saved_models/generate.py).
    folder = os.path.join(ROOT, "saved_models", "v0.1.0")
    loaded = tf.saved_model.load(os.path.join(folder, "saved_model"))
    x = np.load(os.path.join(folder, "inputs.npy"))
    expected = np.load(os.path.join(folder, "expected.npy"))
    np.testing.assert_allclose(_serve(loaded, x), expected, rtol=0, atol=1e-6)
    # ...and what it stores is the encoding itself: the lookup part is PE alone.
    np.testing.assert_allclose(
        expected[0, :, 8:], reference(np.arange(40), 5, layout="concatenated"), atol=2e-7
    )


def test_export_saved_model_is_atomic_and_never_overwrites_unasked(tmp_path, monkeypatch):
    model = _model()
    path = tmp_path / "export"
    export_saved_model(model, path)
    before = sorted(os.listdir(path))
    with pytest.raises(FileExistsError, match=r"Refusing to replace .* overwrite=True"):
        export_saved_model(model, path)

    # A write that fails midway leaves the old export as it was, and no debris.
    def failing(self, *args, **kwargs):
        target = args[0]
        with open(os.path.join(target, "saved_model.pb"), "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(type(model), "save" if LEGACY else "export", failing)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(model, path, overwrite=True)
    monkeypatch.undo()
    assert sorted(os.listdir(path)) == before
    assert sorted(os.listdir(tmp_path)) == ["export"]
    x = _x(1, 5)
    np.testing.assert_allclose(_serve(tf.saved_model.load(str(path)), x), model(x).numpy(), atol=0)

    other = _model(mode="lookup", max_length=8)
    export_saved_model(other, path, overwrite=True)
    np.testing.assert_allclose(_serve(tf.saved_model.load(str(path)), x), other(x).numpy(), atol=0)
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_export_a_bare_layer_and_bad_arguments(tmp_path):
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=32)
    with pytest.raises(ValueError, match=r"`model_or_layer`, expected a built layer"):
        export_saved_model(layer, tmp_path / "a")
    layer(tf.zeros((1, 4, 6)))
    path = export_saved_model(layer, tmp_path / "a")
    x = np.zeros((2, 9, 6), "float32")
    np.testing.assert_allclose(_serve(tf.saved_model.load(path), x), layer(x).numpy(), atol=0)
    with pytest.raises(TypeError, match=r"`model_or_layer`, expected a Keras Model or Layer"):
        export_saved_model("model", tmp_path / "b")
    with pytest.raises(ValueError, match=r"`overwrite`, expected a bool"):
        export_saved_model(layer, tmp_path / "c", overwrite="yes")


# -- command line -----------------------------------------------------------------

def test_cli_export_writes_a_standalone_encoder(tmp_path, capsys):
    out = str(tmp_path / "enc")
    assert cli.main(["export", out, "--depth", "6", "--mode", "lookup", "--max-length", "50",
                     "--layout", "concatenated"]) == 0
    loaded = tf.saved_model.load(out)
    positions = np.array([[0, 1, 2], [7, 8, 49]], "int32")
    enc = loaded.signatures["serving_default"](positions=tf.constant(positions))["encoding"]
    np.testing.assert_allclose(enc.numpy(), reference(positions, 6, layout="concatenated"), atol=2e-7)
    rows = loaded.signatures["table"](length=tf.constant(4), start_index=tf.constant(10))["encoding"]
    np.testing.assert_allclose(rows.numpy(), reference(10 + np.arange(4), 6, layout="concatenated"), atol=2e-7)

    # An existing OUT is refused with one line naming --overwrite; exit status 1.
    assert cli.main(["export", out, "--depth", "6"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite" in err[0] and "Refusing to replace" in err[0]
    assert cli.main(["export", out, "--depth", "6", "--overwrite"]) == 0


def test_cli_errors_are_one_line(capsys):
    assert cli.main(["export", "/tmp/never-written", "--depth", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["keras-posenc export: error: Received an invalid value for `depth`, "
                   "expected a positive integer. Received: depth=0"]
    assert not os.path.exists("/tmp/never-written")


def test_cli_help_and_console_script():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for command in ([sys.executable, "-m", "keras_posenc", "--help"],
                    [os.path.join(os.path.dirname(sys.executable), "keras-posenc"), "export", "--help"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        assert "usage: keras-posenc" in done.stdout


@pytest.mark.slow
def test_cli_demo(tmp_path, capsys):
    # The README's main job: train, export, reload in a fresh process, compare.
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--seconds", "2"]) == 0
    assert "reloaded in a fresh process without keras_posenc" in capsys.readouterr().out
    import json

    report = json.loads((out / "report.json").read_text())
    assert report["max_abs_difference"] <= 1e-6
    assert report["reload_shape"] == [64, 1]
    assert os.path.exists(out / "saved_model" / "saved_model.pb")
    assert cli.main(["demo", "--out", str(out)]) == 1  # never overwritten unasked


# -- compilers and engines -----------------------------------------------------------

@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_jit_compiled_forward_and_fit_step_equal_eager(mode):
    options = {"max_length": 64} if mode == "lookup" else {}
    x, y = _x(4, 12), np.random.default_rng(1).normal(size=(4, 12, 4)).astype("float32")
    eager_model = _model(mode=mode, **options)
    xla_model = _model(mode=mode, **options)
    xla_model.set_weights(eager_model.get_weights())
    forward = tf.function(xla_model, jit_compile=True)
    np.testing.assert_allclose(forward(x).numpy(), eager_model(x).numpy(), atol=1e-6)
    eager_model.compile(keras.optimizers.SGD(0.1), "mse", run_eagerly=True)
    xla_model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
    eager_model.train_on_batch(x, y)
    xla_model.train_on_batch(x, y)
    for a, b in zip(eager_model.get_weights(), xla_model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


_MIRRORED = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np
    import keras_posenc
    from keras_posenc._keras import keras
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        inputs = keras.Input(shape=(None, 8))
        x = keras_posenc.SinusoidalPositionEncoding(mode=sys.argv[2], **({"max_length": 32} if sys.argv[2] == "lookup" else {}))(inputs)
        model = keras.Model(inputs, keras.layers.Dense(1)(x))
        model.compile("adam", "mse")
    x = np.random.rand(16, 10, 8).astype("float32")
    history = model.fit(x, np.zeros((16, 10, 1)), batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    path = keras_posenc.export_saved_model(model, sys.argv[1])
    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    (y,) = serve(**{name: tf.constant(x)}).values()
    print("max difference", float(np.abs(y.numpy() - model.predict(x, verbose=0)).max()))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_mirrored_strategy_fit_then_export(tmp_path, mode):
    done = subprocess.run(
        [sys.executable, "-c", _MIRRORED, str(tmp_path / "export"), mode],
        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.split("max difference")[1]) <= 1e-6


@pytest.mark.parametrize("mode", ["compute", "lookup"])
@pytest.mark.parametrize("length", [12, None], ids=["fixed", "dynamic"])
def test_tflite_builtins_only(mode, length):
    # No Flex ops; run in the LiteRT interpreter; equal to TF within 2e-7.
    from ai_edge_litert.interpreter import Interpreter

    # merge=None: compare the encoding itself, not float32 sums with inputs.
    layer = SinusoidalPositionEncoding(merge=None, mode=mode, **({"max_length": 256} if mode == "lookup" else {}))
    fn = tf.function(lambda x: layer(x, start_index=100), input_signature=[tf.TensorSpec([2, length, 8])])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], layer)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    for n in ([12] if length else [5, 77]):
        if length is None:
            interpreter.resize_tensor_input(inp["index"], [2, n, 8])
        interpreter.allocate_tensors()
        x = _x(2, n)
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        got = interpreter.get_tensor(out["index"])
        np.testing.assert_allclose(got, layer(x, start_index=100).numpy(), rtol=0, atol=2e-7)
        np.testing.assert_allclose(got, reference(100 + np.arange(n), 8)[None].repeat(2, 0), atol=2e-7)


def test_version_is_single_sourced():
    import configparser

    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    assert parser["metadata"]["version"] == "attr: keras_posenc.__version__"
    assert keras_posenc.__version__ == "0.1.0"
