"""The demo job: train a model that needs positions, export it, reload it apart.

Task: each sequence holds one token 1 and one token 2 among noise tokens;
the label says whether the 1 comes first. The model (embedding, the
encoding of Vaswani et al. (2017), section 3.5,
https://arxiv.org/abs/1706.03762, one self-attention block, average
pooling) is blind to order without the encoding: it can do no better than
chance (50%).

Every backend: the model trains with the configured Keras backend and is
saved as `model.keras` (which loads on every backend). The SavedModel is
written by `export_saved_model` on TensorFlow and JAX (and tf-keras). torch
cannot write SavedModels, so there `model.keras` is reloaded in a
subprocess with `KERAS_BACKEND=tensorflow` and exported from there; the
reload check then compares the torch model with that export. Without
TensorFlow installed (a JAX-only or torch-only install) no SavedModel can
be written: the demo says so, and the reload check loads `model.keras` in
a fresh process on the same backend instead. The output
directory is written atomically (`_files.atomic.atomic_directory`, marked by its
`report.json`), and its location is claimed before training starts, so an
unwritable `out_dir` fails at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from keras_posenc import _tensorflow
from keras_posenc._checks import arguments as _arguments
from keras_posenc._files import atomic as _files

if TYPE_CHECKING:
    import numpy as np

SEQ_LEN = 16
VOCAB = 10
# Training: Adam at 1e-2 on batches of 128 reaches 95% validation accuracy
# in 48 to 128 steps on every backend (measured over 14 seeds); the budget
# leaves a wide margin, and a run that misses the target fails loudly.
BATCH_SIZE = 128
LEARNING_RATE = 1e-2
STEPS_PER_EPOCH = 32
MAX_STEPS = 480
TARGET_ACCURACY = 0.95
VALIDATION_SIZE = 512
# The file that marks a demo output directory (replaceable with overwrite).
MARKER = "report.json"
# Why the library exists, in one line: RoPE's cos and sin at 64 positions
# from 2**20, head dimension 128 (Llama's), against float64.
FAR_POSITION = 2**20
FAR_WINDOW = 64
FAR_DIM = 128


def backend_name() -> str:
    """The Keras that trains: `"tf-keras"` or the Keras 3 backend name."""
    from keras import backend

    from keras_posenc._keras import LEGACY

    return "tf-keras" if LEGACY else backend.backend()


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of tokens and labels for the order task.

    Args:
        n: int. Number of sequences.
        seed: int. Seed of the numpy generator.

    Returns:
        `(tokens, labels)`: int32 `[n, SEQ_LEN]` and float32 `[n]` (1.0 when
        the 1 comes before the 2).

    Example:

    >>> from keras_posenc import demo
    >>> tokens, labels = demo.make_data(2, seed=0)
    >>> tokens.shape, labels.shape
    ((2, 16), (2,))
    """
    import numpy as np  # here: the command line reads this module's constants

    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, VOCAB, size=(n, SEQ_LEN))
    first = np.argsort(rng.random((n, SEQ_LEN)), axis=1)[:, :2]
    rows = np.arange(n)
    tokens[rows, first[:, 0]] = 1
    tokens[rows, first[:, 1]] = 2
    labels = (first[:, 0] < first[:, 1]).astype("float32")
    return tokens.astype("int32"), labels


def build_model(use_encoding: bool = True, width: int = 32) -> Any:
    """The order classifier, with or without `SinusoidalPositionEncoding`.

    Args:
        use_encoding: bool. Add the encoding after the embedding. Defaults
            to `True`.
        width: int. Embedding width. Defaults to `32`.

    Returns:
        A Keras `Model` from int32 tokens `[batch, length]` (any length) to
        a probability `[batch, 1]`.

    Example:

    >>> from keras_posenc import demo
    >>> demo.build_model().output_shape
    (None, 1)
    """
    from keras_posenc import SinusoidalPositionEncoding
    from keras_posenc._keras import keras

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


def _fit_verbosity(verbose: int) -> int:
    """Keras's progress bar (`verbose=1`) on a terminal; one line per epoch
    (`verbose=2`) where stdout is a file or a pipe. Keras draws the bar with
    ANSI escapes and carriage returns whenever Python runs on POSIX (its
    `Progbar` checks `"posix" in sys.modules`, not only `isatty`), which a
    redirected log keeps as noise."""
    stdout = sys.stdout
    terminal = hasattr(stdout, "isatty") and stdout.isatty()
    return 2 if verbose == 1 and not terminal else verbose


def train(
    model: Any,
    max_steps: int = MAX_STEPS,
    target: float | None = TARGET_ACCURACY,
    verbose: int = 1,
) -> dict[str, Any]:
    """Fits for at most `max_steps` steps, stopping once `target` is reached.

    Validation runs every `STEPS_PER_EPOCH` steps (one Keras "epoch"), so
    Keras's progress output shows the accuracy as it climbs. A step budget,
    unlike a time budget, trains the same amount on a fast or a slow
    machine.

    Args:
        model: a model from `build_model`.
        max_steps: int. Most training steps (batches of `BATCH_SIZE`).
            Defaults to `MAX_STEPS`.
        target: float or None. Validation accuracy at which training stops
            early; `None` trains for all `max_steps`. Defaults to
            `TARGET_ACCURACY`.
        verbose: int. Keras `fit` verbosity: `1` is the progress bar on a
            terminal and one line per epoch (`2`) when stdout is not one (a
            file, a pipe: Keras's bar would write ANSI escapes there).
            Defaults to `1`.

    Returns:
        The `History.history` dict (`loss`, `accuracy`, `val_loss`,
        `val_accuracy`, one entry per epoch) with `steps`, the number of
        steps trained.

    Example:

    >>> from keras_posenc import demo
    >>> history = demo.train(demo.build_model(), max_steps=2, verbose=0)
    >>> history["steps"], len(history["val_accuracy"])
    (2, 1)
    """
    from keras_posenc._keras import keras

    max_steps = _arguments.check_positive_int("max_steps", max_steps)
    if target is not None and not (
        isinstance(target, (int, float))
        and not isinstance(target, bool)
        and 0 < target <= 1
    ):
        raise _arguments.invalid("target", "a number in (0, 1] or None", target)
    train_x, train_y = make_data(STEPS_PER_EPOCH * BATCH_SIZE, seed=0)
    val_x, val_y = make_data(VALIDATION_SIZE, seed=1)

    class Budget(keras.callbacks.Callback):
        steps = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            Budget.steps += 1
            if Budget.steps >= max_steps:
                self.model.stop_training = True

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            accuracy = (logs or {}).get("val_accuracy", 0.0)
            if target is not None and accuracy >= target:
                self.model.stop_training = True

    model.compile(
        keras.optimizers.Adam(LEARNING_RATE),
        "binary_crossentropy",
        metrics=["accuracy"],
    )
    history = model.fit(
        train_x,
        train_y,
        batch_size=BATCH_SIZE,
        epochs=-(-max_steps // STEPS_PER_EPOCH),
        verbose=_fit_verbosity(verbose),
        validation_data=(val_x, val_y),
        callbacks=[Budget()],
    )
    return {**history.history, "steps": Budget.steps}


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

# torch cannot write SavedModels: reload the `.keras` file under TensorFlow
# (importing keras_posenc registers the layer) and export from there. Not
# compiled: a torch `.keras` names torch's optimizer class, and importing
# torch's backend beside TensorFlow aborts (two LLVMs in one process).
_EXPORT_SCRIPT = textwrap.dedent(
    """
    import sys
    import keras
    import keras_posenc
    keras_path, export_dir = sys.argv[1:3]
    model = keras.saving.load_model(keras_path, compile=False)
    keras_posenc.export_saved_model(model, export_dir)
    """
)


# Without TensorFlow: the `.keras` file, reloaded in a fresh process on the
# same backend (importing keras_posenc registers the layer it names).
_RELOAD_KERAS_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, keras, keras_posenc
    keras_path, inputs_path, outputs_path = sys.argv[1:4]
    model = keras.saving.load_model(keras_path, compile=False)
    y = model.predict(np.load(inputs_path), verbose=0)
    np.save(outputs_path, keras.ops.convert_to_numpy(y))
    """
)


def _quiet_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)


def _run_script(script: str, *args: object, env: Mapping[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(
            f"subprocess failed (exit {done.returncode}): "
            + (lines[-1] if lines else "no message")
        )


def reload_in_fresh_process(
    path: str | os.PathLike[str],
    inputs: np.ndarray,
    workdir: str | os.PathLike[str],
) -> np.ndarray:
    """Runs a SavedModel, or a `.keras` file, in a new Python process.

    A SavedModel runs where keras_posenc cannot be imported, under
    TensorFlow, as on a serving host. A `.keras` file (the check where
    TensorFlow is missing) runs on the configured backend, with keras_posenc
    imported to register its layers.

    Args:
        path: str. A SavedModel directory (its `serving_default` signature
            takes one input) or a `.keras` file of a one-input model.
        inputs: numpy array fed to it.
        workdir: str. Existing folder for the exchanged `.npy` files.

    Returns:
        The output, as a numpy array.

    Raises:
        RuntimeError: with the last line of the subprocess's stderr if it
            fails.

    Example:

    >>> from keras_posenc import demo
    >>> demo.reload_in_fresh_process("saved_model", x, ".")  # doctest: +SKIP
    """
    import numpy as np

    inputs_path = os.path.join(workdir, "check_inputs.npy")
    outputs_path = os.path.join(workdir, "check_outputs.npy")
    np.save(inputs_path, inputs)
    if os.fspath(path).endswith(".keras"):
        script, env = _RELOAD_KERAS_SCRIPT, _quiet_env()
    else:
        # TensorFlow imports Keras while loading; under KERAS_BACKEND=torch
        # that loads torch beside TensorFlow, which aborts (two LLVMs in one
        # process).
        script, env = _RELOAD_SCRIPT, _quiet_env(KERAS_BACKEND="tensorflow")
    _run_script(script, path, inputs_path, outputs_path, env=env)
    return np.load(outputs_path)


def export_from_keras_file(
    keras_path: str | os.PathLike[str], export_dir: str | os.PathLike[str]
) -> None:
    """Exports a `.keras` model as a SavedModel, in a TensorFlow subprocess.

    How the demo exports from torch, which cannot write SavedModels.

    Args:
        keras_path: str. A `.keras` file (its layers registered, as
            keras_posenc's are).
        export_dir: str. The SavedModel directory to create.

    Raises:
        RuntimeError: with the last line of the subprocess's stderr if it
            fails.

    Example:

    >>> from keras_posenc import demo
    >>> demo.export_from_keras_file("model.keras", "saved_model")  # doctest: +SKIP
    """
    env = _quiet_env(KERAS_BACKEND="tensorflow")
    env.pop("TF_USE_LEGACY_KERAS", None)
    _run_script(_EXPORT_SCRIPT, keras_path, export_dir, env=env)


def _size(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(path)
        for f in files
    )


# What the demo reports instead of a SavedModel where TensorFlow is missing.
NO_SAVED_MODEL = (
    "no SavedModel: it needs TensorFlow, which is not installed "
    "(pip install tensorflow)"
)


def _export(model: Any, keras_path: str, export_dir: str) -> str:
    """Writes the SavedModel; returns how it was done."""
    from keras_posenc.export import EXPORT_BACKENDS, export_saved_model

    name = backend_name()
    if name == "tf-keras" or name in EXPORT_BACKENDS:
        export_saved_model(model, export_dir)
        return f"export_saved_model on {name}"
    export_from_keras_file(keras_path, export_dir)
    return (
        f"{name} cannot write SavedModels: model.keras reloaded and exported "
        "under KERAS_BACKEND=tensorflow in a subprocess"
    )


def far_position_errors(
    position: int = FAR_POSITION, window: int = FAR_WINDOW, dim: int = FAR_DIM
) -> dict[str, float]:
    """RoPE's largest error far out: this library's and the usual float32 formula's.

    Both are measured now, against the float64 formula, on the cos and sin
    of the angles ``p * w_i`` of the rotary embedding of Su et al. (2021),
    https://arxiv.org/abs/2104.09864, for `window` positions from
    `position`. The usual formula (Hugging Face's and keras-hub's float32
    RoPE, the TF tutorial's table) forms ``p * w_i`` in float32, which is
    off by about ``p * 2**-24`` radians.

    Args:
        position: int. The first position. Defaults to `FAR_POSITION`.
        window: int. How many positions. Defaults to `FAR_WINDOW`.
        dim: int. The rotary dimension. Defaults to `FAR_DIM`.

    Returns:
        `{"keras_posenc": error, "float32_formula": error}`, the largest
        absolute errors of cos and sin.

    Example:

    >>> from keras_posenc import demo
    >>> errors = demo.far_position_errors()
    >>> errors["keras_posenc"] < 2e-7 < 1e-2 < errors["float32_formula"]
    True
    """
    import numpy as np
    from keras import ops  # Keras 3's, under tf-keras too

    from keras_posenc._exact import reference as _reference
    from keras_posenc.rotary import rotary_cos_sin

    positions = np.arange(position, position + window)
    cos, sin = rotary_cos_sin(positions, dim)  # layout "half": [c | c]
    half = dim // 2
    # The sinusoidal formula of depth `dim` holds RoPE's angles: sin on
    # even columns, cos on odd ones.
    exact = _reference.sinusoidal_float64(positions, dim)
    usual = _reference.naive_float32(positions, dim)
    ours = np.empty_like(exact)
    ours[:, 0::2] = ops.convert_to_numpy(sin)[:, :half]
    ours[:, 1::2] = ops.convert_to_numpy(cos)[:, :half]
    return {
        "keras_posenc": float(np.abs(ours - exact).max()),
        "float32_formula": float(np.abs(usual - exact).max()),
    }


class DidNotLearn(RuntimeError):
    """The demo model stayed below `TARGET_ACCURACY`: nothing was exported."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def run(
    out_dir: str | os.PathLike[str],
    max_steps: int = MAX_STEPS,
    overwrite: bool = False,
    verbose: int = 1,
) -> dict[str, Any]:
    """Trains, saves, exports, reloads apart, compares; returns the report.

    Writes `out_dir` atomically: `model.keras`, `saved_model/`,
    `check_inputs.npy`, `check_outputs.npy` (what the reloaded SavedModel
    answered) and `report.json`. Without TensorFlow installed there is no
    `saved_model/` (the report says why) and the check reloads
    `model.keras` in a fresh process instead. The encoding is that of
    Vaswani et al. (2017), https://arxiv.org/abs/1706.03762.

    Args:
        out_dir: str or os.PathLike. The directory to create.
        max_steps: int. Training budget in steps; training stops early at
            `TARGET_ACCURACY`. Defaults to `MAX_STEPS`.
        overwrite: bool. Replace an earlier demo output at `out_dir` (a
            directory holding `report.json`). Defaults to `False`.
        verbose: int. Keras `fit` verbosity (`1`: a progress bar on a
            terminal, one line per epoch otherwise, as in `train`).
            Defaults to `1`.

    Returns:
        The report dict (also written to `out_dir/report.json`).

    Raises:
        FileExistsError: if `out_dir` exists and `overwrite` is false.
        ValueError: for a bad argument, or an `out_dir` that may not be
            replaced; both before training.
        OSError: if `out_dir` cannot be created; before training.
        DidNotLearn: if the validation accuracy stays below
            `TARGET_ACCURACY` within `max_steps`; `out_dir` is not written.

    Example:

    >>> from keras_posenc import demo
    >>> demo.run("demo_out", verbose=0)["val_accuracy"] >= 0.95  # doctest: +SKIP
    True
    """
    import numpy as np

    from keras_posenc._keras import keras

    out_dir = _files.check_path(out_dir, "out_dir")
    max_steps = _arguments.check_positive_int("max_steps", max_steps)
    _arguments.check_bool("overwrite", overwrite)
    # Entering the context creates the staging directory: an unwritable
    # `out_dir` fails here, before any training.
    with _files.atomic_directory(out_dir, overwrite=overwrite, marker=MARKER) as stage:
        if verbose:
            print(
                f"Training a {SEQ_LEN}-token 'is 1 before 2?' classifier on "
                f"{backend_name()} until {TARGET_ACCURACY:.0%} validation accuracy, "
                f"for at most {_plural(max_steps, 'step')} "
                "(chance without the encoding: 50%)",
                flush=True,
            )
        keras.utils.set_random_seed(0)
        model = build_model()
        started = time.perf_counter()
        history = train(model, max_steps, verbose=verbose)
        train_seconds = time.perf_counter() - started
        accuracy = float(history["val_accuracy"][-1])
        if accuracy < TARGET_ACCURACY:
            raise DidNotLearn(
                f"the model did not learn: validation accuracy {accuracy:.1%} after "
                f"{_plural(history['steps'], 'training step')} (target "
                f"{TARGET_ACCURACY:.0%}, chance 50%); nothing was exported"
            )

        keras_path = os.path.join(stage, "model.keras")
        export_dir = os.path.join(stage, "saved_model")
        model.save(keras_path)
        check_x, _ = make_data(64, seed=2)
        # Longer than the training sequences: the signature takes any length.
        long_x = np.concatenate([check_x, check_x[:, ::-1]], axis=1)
        expected = np.asarray(model.predict(long_x, verbose=0))
        if _tensorflow.installed():
            route = _export(model, keras_path, export_dir)
            reloaded = reload_in_fresh_process(export_dir, long_x, stage)
            exported = {
                "export_dir": os.path.join(out_dir, "saved_model"),
                "export_bytes": _size(export_dir),
                "reloaded": "saved_model",
            }
        else:
            route = NO_SAVED_MODEL
            reloaded = reload_in_fresh_process(keras_path, long_x, stage)
            exported = {
                "export_dir": None,
                "export_bytes": 0,
                "reloaded": "model.keras",
            }
        report = {
            "backend": backend_name(),
            "steps": history["steps"],
            "epochs": len(history["loss"]),
            "train_seconds": round(train_seconds, 2),
            "val_accuracy": round(accuracy, 4),
            "chance_without_encoding": 0.5,
            "keras_file": os.path.join(out_dir, "model.keras"),
            "export_route": route,
            **exported,
            "reload_shape": list(reloaded.shape),
            "max_abs_difference": float(np.abs(reloaded - expected).max()),
            "rope_errors_far": {
                "positions": [FAR_POSITION, FAR_POSITION + FAR_WINDOW],
                "dim": FAR_DIM,
                **far_position_errors(),
            },
        }
        with open(os.path.join(stage, MARKER), "w") as f:
            json.dump(report, f, indent=2)
    return report


__all__ = [
    "NO_SAVED_MODEL",
    "DidNotLearn",
    "build_model",
    "export_from_keras_file",
    "far_position_errors",
    "make_data",
    "reload_in_fresh_process",
    "run",
    "train",
]
