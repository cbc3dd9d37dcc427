"""SavedModel exports: a model (or layer), or a standalone encoder module.

A SavedModel written here holds TensorFlow ops only (on JAX, the jax2tf
lowering of the same engine): it loads with `tf.saved_model.load`,
`keras.layers.TFSMLayer` or TF Serving where keras_posenc is not installed.
Both writers are atomic (`_files.atomic.atomic_directory`): the export is staged
in a sibling directory and published with one rename, an existing path is
replaced only with `overwrite=True` and only if it is a SavedModel.
"""

import contextlib
import logging
import os

from keras_posenc import _backend, _tensorflow
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._checks.options import SinusoidalOptions
from keras_posenc._exact.rows import sinusoidal_rows
from keras_posenc._files import atomic as _files
from keras_posenc._keras import LEGACY, keras

# Keras 3 writes a SavedModel from these backends (`model.export`).
EXPORT_BACKENDS = ("tensorflow", "jax")


def _warnings_and_above(record):
    return record.levelno >= logging.WARNING


@contextlib.contextmanager
def _staged_export(path, overwrite):
    """`_files.atomic.atomic_directory`, with TensorFlow's INFO log lines held back.

    In an interactive session (a notebook) TensorFlow logs at INFO, and a
    SavedModel write logs "Assets written to: <the hidden staging
    directory>/assets", a path renamed away as soon as the export is done.
    """
    logger = logging.getLogger("tensorflow")
    logger.addFilter(_warnings_and_above)
    try:
        with _files.atomic_directory(path, overwrite=overwrite) as staging:
            yield staging
    finally:
        logger.removeFilter(_warnings_and_above)


def _require_export_backend(what):
    _tensorflow.require(what)
    if not LEGACY and _backend.NAME not in EXPORT_BACKENDS:
        raise ValueError(
            f"{what} needs a Keras backend that writes SavedModels, one of "
            f"{EXPORT_BACKENDS}. Received: KERAS_BACKEND={_backend.NAME!r}. "
            "Save a `.keras` file instead (it loads on every backend), or "
            "export from TensorFlow or JAX."
        )


def _as_model(model_or_layer):
    if isinstance(model_or_layer, keras.Model):
        return model_or_layer
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise TypeError(
            "Received an invalid value for `model_or_layer`, expected a Keras "
            f"Model or Layer. Received: model_or_layer={model_or_layer!r}"
        )
    layer = model_or_layer
    build_config = layer.get_build_config() if layer.built else None
    if not build_config or build_config.get("input_shape") is None:
        raise ValueError(
            "Received an invalid value for `model_or_layer`, expected a built "
            "layer (call it once, or export a Model). Received: an unbuilt "
            f"{type(layer).__name__}"
        )
    shape = list(build_config["input_shape"])
    # Batch and length stay dynamic, wherever the layer's sequence axis is
    # (`sequence_axis=-2` on [batch, heads, length, dim]); the other
    # dimensions are the built ones. Rank-2 inputs are token ids.
    axis = getattr(layer, "sequence_axis", 1)
    feature_rank = len(shape) + 1 if len(shape) == 2 else len(shape)
    axis = axis + feature_rank if axis < 0 else axis
    if 0 < axis < len(shape):
        shape[axis] = None
    dtype = layer.compute_dtype if len(shape) >= 3 else "int32"
    inputs = keras.Input(shape=tuple(shape[1:]), dtype=dtype)
    return keras.Model(inputs, layer(inputs))


def export_saved_model(model_or_layer, path, *, overwrite=False):
    """Exports a model (or a built layer) as a SavedModel, atomically.

    The SavedModel is staged in a sibling directory and published with one
    rename, so a failure or a kill midway leaves no partial export and an
    existing `path` untouched. Its `serve` signature takes any batch size
    and sequence length. With Keras 3 (TensorFlow or JAX backend) this is
    `model.export(format="tf_saved_model")`, reloaded with
    `tf.saved_model.load` or `keras.layers.TFSMLayer`; with tf-keras
    (`TF_USE_LEGACY_KERAS=1`) it is `model.save(path)`, which
    `tf_keras.models.load_model` restores with the real layer classes. The
    torch backend cannot write SavedModels: save a `.keras` file instead.

    The encoding is the one of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Args:
        model_or_layer: a Keras `Model`, or a built layer (wrapped in a
            one-layer functional model with its input shape, batch and
            length left dynamic).
        path: str or path-like. The directory to create.
        overwrite: bool. Replace an existing SavedModel at `path` (never
            another directory). Defaults to `False`.

    Returns:
        The absolute path written.

    Example (TensorFlow or JAX backend; the example sees `keras` and
    `keras_posenc` and writes `pe_model` in the current directory):

    >>> import pytest
    >>> if keras.backend.backend() == "torch":  # no SavedModels from torch
    ...     pytest.skip("torch: save a .keras file instead")
    >>> tf = pytest.importorskip("tensorflow")  # a SavedModel needs it
    >>> inputs = keras.Input(shape=(None, 16))
    >>> layer = keras_posenc.SinusoidalPositionEncoding()
    >>> model = keras.Model(inputs, layer(inputs))
    >>> path = keras_posenc.export_saved_model(model, "pe_model")
    >>> serve = tf.saved_model.load(path).signatures["serving_default"]
    >>> [y.shape for y in serve(tf.zeros((2, 5, 16))).values()]
    [TensorShape([2, 5, 16])]
    """
    path = _files.check_path(path)
    _arguments.check_bool("overwrite", overwrite)
    _require_export_backend("export_saved_model")
    model = _as_model(model_or_layer)
    _files.refuse_to_replace(path, overwrite)
    with _staged_export(path, overwrite) as staging:
        if LEGACY:
            model.save(staging, save_format="tf")
        else:
            model.export(staging, format="tf_saved_model", verbose=False)
    return path


def _encoder_module(options):
    """A `tf.Module` with the two encoder signatures (TensorFlow backend)."""
    import tensorflow as tf

    low = options.lowest_position
    rows = sinusoidal_rows(options, options.depth)

    # autograph=False: plain Python control flow only; autograph would
    # re-read (and could mis-convert) the source of every helper called.
    class EncoderModule(tf.Module):
        @tf.function(
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="positions")],
            autograph=False,
        )
        def encode(self, positions):
            parsed = _positions.explicit("positions", positions, low=low, ranks=(2,))
            return {"encoding": rows(parsed)}

        @tf.function(
            input_signature=[
                tf.TensorSpec([], tf.int32, name="length"),
                tf.TensorSpec([], tf.int32, name="start_index"),
            ],
            autograph=False,
        )
        def table(self, length, start_index):
            length, checks = _positions.size("length", length, low=0)
            parsed = _positions.span(
                start_index, length, low=low, ranks=(0,), length_checks=checks
            )
            return {"encoding": rows(parsed)}

    return EncoderModule(name="sinusoidal_encoder")


def export_encoder(
    path,
    depth,
    *,
    mode="compute",
    max_length=None,
    layout="interleaved",
    max_wavelength=10000.0,
    out_of_range="error",
    overwrite=False,
):
    """Writes a standalone encoding SavedModel: positions in, encoding out.

    Signatures (int32 in, float32 out under the key `"encoding"`):
    `serving_default(positions)` maps `positions [batch, length]` to
    `[batch, length, depth]`; `table(length, start_index)` gives the rows
    `[length, depth]` for positions `start_index + [0, length)`. The
    encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762, exact to float32 rounding. The
    signatures hold TensorFlow ops only, so the SavedModel loads where
    keras_posenc is not installed. Needs `KERAS_BACKEND="tensorflow"`
    (the `keras-posenc export` command re-runs itself under it); written
    atomically like `export_saved_model`.

    Args:
        path: str or path-like. The directory to create.
        depth: int. Width of the encoding.
        mode, max_length, layout, max_wavelength, out_of_range: as in
            `SinusoidalPositionEncoding`.
        overwrite: bool. Replace an existing SavedModel at `path`. Defaults
            to `False`.

    Returns:
        The absolute path written.

    Example (TensorFlow backend; the example sees `keras`, `keras_posenc`
    and `np` and writes `pe_encoder` in the current directory):

    >>> if keras.backend.backend() != "tensorflow":
    ...     import pytest; pytest.skip("export_encoder builds TensorFlow ops")
    >>> import tensorflow as tf
    >>> path = keras_posenc.export_encoder("pe_encoder", 64)
    >>> table = tf.saved_model.load(path).signatures["table"]
    >>> rows = table(length=tf.constant(3), start_index=tf.constant(0))["encoding"]
    >>> rows.shape
    TensorShape([3, 64])
    >>> np.round(rows.numpy()[1, :4], 4)  # sin(1), cos(1), sin(w1), cos(w1)
    array([0.8415, 0.5403, 0.6816, 0.7318], dtype=float32)
    """
    path = _files.check_path(path)
    _arguments.check_bool("overwrite", overwrite)
    options = SinusoidalOptions(
        max_wavelength=max_wavelength,
        mode=mode,
        max_length=max_length,
        merge=None,
        depth=_arguments.check_depth(depth),
        layout=layout,
        out_of_range=out_of_range,
    )
    _tensorflow.require("export_encoder")
    if _backend.NAME != "tensorflow":
        raise ValueError(
            "export_encoder builds TensorFlow ops and needs "
            f"KERAS_BACKEND='tensorflow'. Received: KERAS_BACKEND={_backend.NAME!r}. "
            "Run it with KERAS_BACKEND=tensorflow (or `keras-posenc export`)."
        )
    _files.refuse_to_replace(path, overwrite)
    import tensorflow as tf

    module = _encoder_module(options)
    signatures = {"serving_default": module.encode, "table": module.table}
    with _staged_export(path, overwrite) as staging:
        tf.saved_model.save(module, staging, signatures=signatures)
    return os.fspath(path)
