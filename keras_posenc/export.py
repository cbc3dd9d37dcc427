"""Atomic SavedModel export, and the standalone encoder module.

A SavedModel written here holds only TensorFlow ops: it loads with
`tf.saved_model.load`, `keras.layers.TFSMLayer` or TF Serving where
keras_posenc is not installed.
"""

import contextlib
import os
import shutil
import tempfile

import tensorflow as tf

from keras_posenc import _checks
from keras_posenc._keras import LEGACY, keras
from keras_posenc.layer import SinusoidalPositionEncoding


@contextlib.contextmanager
def _atomic_directory(path, overwrite):
    """Yields a temporary sibling of `path`, renamed into place on success.

    An existing `path` is left untouched when anything fails, and is only
    replaced with `overwrite=True`.
    """
    path = os.path.abspath(os.fspath(path))
    _checks.refuse_to_replace(path, overwrite)
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
    try:
        yield staging
        if os.path.lexists(path):
            backup = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
            os.rename(path, os.path.join(backup, name))
            os.rename(staging, path)
            shutil.rmtree(backup)
        else:
            os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _as_model(model_or_layer):
    if isinstance(model_or_layer, keras.Model):
        return model_or_layer
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise TypeError(
            "Received an invalid value for `model_or_layer`, expected a Keras "
            f"Model or Layer. Received: model_or_layer={model_or_layer!r}"
        )
    layer = model_or_layer
    shape = getattr(layer, "_posenc_input_shape", None)
    if not layer.built or shape is None:
        raise ValueError(
            "Received an invalid value for `model_or_layer`, expected a built "
            "layer (call it once, or export a Model). Received: an unbuilt "
            f"{type(layer).__name__}"
        )
    dtype = layer.compute_dtype if len(shape) == 3 else "int32"
    inputs = keras.Input(shape=(None,) + tuple(shape[2:]), dtype=dtype)
    return keras.Model(inputs, layer(inputs))


def export_saved_model(model_or_layer, path, *, overwrite=False):
    """Exports a model (or a built layer) as a SavedModel, atomically.

    The SavedModel is written into a temporary sibling directory and renamed
    into place at the end, so a failure midway leaves no partial export and
    an existing `path` untouched. Its `serving_default` signature takes any
    batch size and sequence length. With Keras 3 this is `model.export`
    (reload with `tf.saved_model.load` or `keras.layers.TFSMLayer`); with
    tf-keras (`TF_USE_LEGACY_KERAS=1`) it is `model.save(path)`, which
    `tf_keras.models.load_model` restores with the real layer classes.

    The encoding is the one of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Args:
        model_or_layer: a Keras `Model`, or a built layer (wrapped in a
            one-layer functional model with its input shape, batch and
            length left dynamic).
        path: directory to create.
        overwrite: bool. Replace an existing `path`. Defaults to `False`.

    Returns:
        The absolute path written.

    Example:

    >>> inputs = keras.Input(shape=(None, 16))
    >>> model = keras.Model(inputs, SinusoidalPositionEncoding()(inputs))
    >>> keras_posenc.export_saved_model(model, "/tmp/pe_model")  # doctest: +SKIP
    """
    if not isinstance(overwrite, bool):
        raise _checks.invalid("overwrite", "a bool", overwrite)
    model = _as_model(model_or_layer)
    with _atomic_directory(path, overwrite) as staging:
        if LEGACY:
            model.save(staging, save_format="tf")
        else:
            model.export(staging, format="tf_saved_model", verbose=False)
    return os.path.abspath(os.fspath(path))


class _EncoderModule(tf.Module):
    """A standalone encoding SavedModel: positions or a length in, encoding out.

    Signatures (all int32 in, float32 out under the key `"encoding"`):

    - `serving_default(positions)`: `positions [batch, length]` to
      `[batch, length, depth]`.
    - `table(length, start_index)`: scalars to `[length, depth]`, the rows
      for positions `start_index + [0, length)`.

    Vaswani et al. (2017), section 3.5, https://arxiv.org/abs/1706.03762.

    Args:
        depth: int. Width of the encoding.
        **layer_options: `mode`, `max_length`, `layout`, `max_wavelength`,
            `out_of_range` of `SinusoidalPositionEncoding`.

    Example:

    >>> module = _EncoderModule(8)
    >>> module.table(tf.constant(4), tf.constant(0))["encoding"].shape
    TensorShape([4, 8])
    """

    def __init__(self, depth, **layer_options):
        super().__init__(name="sinusoidal_encoder")
        self.layer = SinusoidalPositionEncoding(merge=None, depth=depth, **layer_options)
        self.layer.build((None, None))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="positions")])
    def encode(self, positions):
        return {"encoding": self.layer(positions, positions=positions)}

    @tf.function(
        input_signature=[
            tf.TensorSpec([], tf.int32, name="length"),
            tf.TensorSpec([], tf.int32, name="start_index"),
        ]
    )
    def table(self, length, start_index):
        rows = self.layer(tf.zeros(tf.stack([1, length]), tf.int32), start_index=start_index)
        return {"encoding": rows[0]}


def _export_encoder(path, depth, *, overwrite=False, **layer_options):
    """Writes an `_EncoderModule` SavedModel atomically; returns its path.

    Args:
        path: directory to create.
        depth: int. Width of the encoding.
        overwrite: bool. Replace an existing `path`. Defaults to `False`.
        **layer_options: as for `_EncoderModule`.
    """
    module = _EncoderModule(depth, **layer_options)
    signatures = {"serving_default": module.encode, "table": module.table}
    with _atomic_directory(path, overwrite) as staging:
        tf.saved_model.save(module, staging, signatures=signatures)
    return os.path.abspath(os.fspath(path))
