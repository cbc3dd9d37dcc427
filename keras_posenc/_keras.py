"""The Keras that `tf.keras` means: Keras 3, or tf-keras under TF_USE_LEGACY_KERAS.

The layer is written once against the API common to both; the test suite
runs twice, once per Keras.
"""

import os

LEGACY = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")

if LEGACY:
    import tf_keras as keras
else:
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ImportError(
            "keras_posenc builds its tables with TensorFlow ops and needs the "
            "TensorFlow backend of Keras 3. Received: "
            f"KERAS_BACKEND={keras.backend.backend()!r}. Set KERAS_BACKEND=tensorflow."
        )


def output_shape(dims):
    """`compute_output_shape` returns a tuple in Keras 3, a TensorShape in tf-keras."""
    if LEGACY:
        import tensorflow as tf

        return tf.TensorShape(dims)
    return tuple(dims)


__all__ = ["LEGACY", "keras", "output_shape"]
