"""The Keras the layers subclass: Keras 3 (any backend), or tf-keras.

The maths always use Keras 3's `keras.ops`. Under `TF_USE_LEGACY_KERAS=1`
the layers subclass tf-keras instead, which needs Keras 3's TensorFlow
backend so that `keras.ops` produce TF tensors.
"""

import os

import keras as keras3

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


def output_shape(dims):
    """`compute_output_shape` returns a tuple in Keras 3, a TensorShape in tf-keras."""
    if LEGACY:
        import tensorflow as tf

        return tf.TensorShape(dims)
    return tuple(dims)


__all__ = ["LEGACY", "keras", "output_shape"]
