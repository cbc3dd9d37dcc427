"""The Keras the layers subclass: Keras 3 (any backend), or tf-keras.

The maths always use Keras 3's `keras.ops`. Under `TF_USE_LEGACY_KERAS=1`
the layers subclass tf-keras instead, which needs Keras 3's TensorFlow
backend so that `keras.ops` produce TF tensors.
"""

import os

import keras as keras3

from keras_posenc._files.versions import Versioned

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in (
    "1",
    "true",
    "yes",
)

if LEGACY:
    if keras3.backend.backend() != "tensorflow":
        raise ImportError(
            "TF_USE_LEGACY_KERAS=1 (tf-keras) needs the TensorFlow backend of Keras 3 "
            "for keras.ops. Received: "
            f"KERAS_BACKEND={keras3.backend.backend()!r}. Set KERAS_BACKEND=tensorflow."
        )
    import tf_keras as keras
else:
    keras = keras3
    # Keras keeps a tensor's padding mask on the tensor; a cast would drop it.
    from keras.src.backend import get_keras_mask, set_keras_mask

    from keras_posenc._files.registered import register_compat_names

    # `.keras` files of compat layers and swapped keras-hub models load
    # after `import keras_posenc` alone (compat is imported when one does).
    register_compat_names(keras3)


def output_shape(dims):
    """`compute_output_shape` returns a tuple in Keras 3, a TensorShape in tf-keras."""
    if LEGACY:
        import tensorflow as tf

        return tf.TensorShape(dims)
    return tuple(dims)


class NoEmptyTorchParams:
    """Keras 3 layers that skip the empty torch module Keras makes at build.

    Keras's torch backend gives every layer, when built, a
    `torch.nn.ParameterDict` of its variables (`_post_build`, Keras's
    per-backend hook): a torch module of its own, about 2.5 KiB, empty
    for a layer without variables (keras-hub's stateless layers, built in
    `__init__`, never make it). Keras makes it anyway the first time it
    is asked for (`torch_params`, `named_parameters`). Keras's layers are
    cyclic garbage, kept until a late collection: issue 47's memory per
    configuration used once.
    """

    variables: list  # a Keras layer's

    def _post_build(self):
        if self.variables:
            super()._post_build()  # type: ignore[misc]


class PositionLayer(NoEmptyTorchParams, Versioned, keras.layers.Layer):
    """A layer whose position arguments reach `call` exactly as given.

    Keras 3 converts every array argument of a call into a backend tensor
    before `call`; on JAX (32-bit by default) that turns an int64
    `start_index` of 2**32 + 3 into 3 before any check can see it. Here
    only `inputs` are converted (and autocast) as Keras would; `start_index`
    and `positions` are parsed by the layer from what the caller gave. Its
    config records the keras_posenc version that wrote it (`Versioned`).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not LEGACY:
            self._convert_input_args = False

    def __call__(self, inputs, *args, **kwargs):
        if not LEGACY:
            mask = get_keras_mask(inputs)
            inputs = self.dtype_policy.convert_input(
                inputs, self.autocast, self.input_dtype
            )
            if mask is not None:
                set_keras_mask(inputs, mask)
        return super().__call__(inputs, *args, **kwargs)


__all__ = ["LEGACY", "NoEmptyTorchParams", "PositionLayer", "keras", "output_shape"]
