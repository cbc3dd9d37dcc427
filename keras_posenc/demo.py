"""The demo job: train a model that needs positions, export it, reload it apart.

Task: each sequence holds one token 1 and one token 2 among noise tokens;
the label says whether the 1 comes first. The model (embedding, our
encoding, one self-attention block, average pooling) is blind to order
without the encoding: it can do no better than chance (50%).
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

SEQ_LEN = 16
VOCAB = 10


def make_data(n, seed):
    """Sequences `[n, SEQ_LEN]` of tokens and labels `[n]` (1 before 2?)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, VOCAB, size=(n, SEQ_LEN))
    first = np.argsort(rng.random((n, SEQ_LEN)), axis=1)[:, :2]
    rows = np.arange(n)
    tokens[rows, first[:, 0]] = 1
    tokens[rows, first[:, 1]] = 2
    labels = (first[:, 0] < first[:, 1]).astype("float32")
    return tokens.astype("int32"), labels


def build_model(keras, use_encoding=True, width=32):
    from keras_posenc import SinusoidalPositionEncoding

    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, width)(tokens)
    if use_encoding:
        x = SinusoidalPositionEncoding(max_wavelength=100.0)(x)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=width // 2)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(width, activation="relu")(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(tokens, outputs)


def train(keras, model, seconds, verbose=1):
    """Fits until `seconds` have passed (or 98% validation accuracy)."""
    train_x, train_y = make_data(8192, seed=0)
    val_x, val_y = make_data(1024, seed=1)

    class Budget(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            spent = time.perf_counter() - self.start
            if spent > seconds or (logs or {}).get("val_accuracy", 0) >= 0.98:
                self.model.stop_training = True

    model.compile(
        keras.optimizers.Adam(3e-3), "binary_crossentropy", metrics=["accuracy"]
    )
    history = model.fit(
        train_x,
        train_y,
        batch_size=128,
        epochs=100,
        verbose=verbose,
        validation_data=(val_x, val_y),
        callbacks=[Budget()],
    )
    return history.history


# Runs in a fresh interpreter where keras_posenc cannot be imported, as on a
# serving host: the SavedModel must need nothing but TensorFlow.
_RELOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["keras_posenc"] = None  # any import of it now fails
    import numpy as np, tensorflow as tf
    export_dir, inputs_path, outputs_path = sys.argv[1:4]
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    x = np.load(inputs_path)
    (y,) = serve(**{name: tf.constant(x)}).values()
    np.save(outputs_path, y.numpy())
    """
)


def reload_in_fresh_process(export_dir, inputs, workdir):
    """Runs the SavedModel in a new Python process; returns its outputs."""
    inputs_path = os.path.join(workdir, "check_inputs.npy")
    outputs_path = os.path.join(workdir, "check_outputs.npy")
    np.save(inputs_path, inputs)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run(
        [sys.executable, "-c", _RELOAD_SCRIPT, export_dir, inputs_path, outputs_path],
        check=True,
        env=env,
        cwd=workdir,
    )
    return np.load(outputs_path)


def _size(path):
    return sum(
        os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(path)
        for f in files
    )


def run(out_dir, seconds=6.0, overwrite=False, verbose=1):
    """Trains, exports, reloads apart, compares. Returns the report dict."""
    from keras_posenc._checks import refuse_to_replace
    from keras_posenc._keras import keras
    from keras_posenc.export import export_saved_model

    out_dir = os.path.abspath(out_dir)
    export_dir = os.path.join(out_dir, "saved_model")
    refuse_to_replace(out_dir, overwrite)
    keras.utils.set_random_seed(0)
    model = build_model(keras)
    started = time.perf_counter()
    history = train(keras, model, seconds, verbose)
    train_seconds = time.perf_counter() - started

    os.makedirs(out_dir, exist_ok=True)
    export_saved_model(model, export_dir, overwrite=overwrite)
    check_x, _ = make_data(64, seed=2)
    # Longer than the training sequences: the signature takes any length.
    long_x = np.concatenate([check_x, check_x[:, ::-1]], axis=1)
    expected = model.predict(long_x, verbose=0)
    reloaded = reload_in_fresh_process(export_dir, long_x, out_dir)
    report = {
        "epochs": len(history["loss"]),
        "train_seconds": round(train_seconds, 2),
        "val_accuracy": round(float(history["val_accuracy"][-1]), 4),
        "chance_without_encoding": 0.5,
        "export_dir": export_dir,
        "export_bytes": _size(export_dir),
        "reload_shape": list(reloaded.shape),
        "max_abs_difference": float(np.abs(reloaded - expected).max()),
    }
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    return report
