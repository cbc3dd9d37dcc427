"""The little that differs between Keras backends: compiling, static values.

Everything numerical is written once with `keras.ops`; this module only
decides how an engine function is compiled for eager callers and how a
caller can see a tensor's value before running anything.
"""

import contextlib

import numpy as np
from keras import backend, ops

NAME = backend.backend()
BACKENDS = ("tensorflow", "jax", "torch")


def compile_function(fn, static_argnums=()):
    """`fn` compiled for eager callers, inlined inside an outer trace.

    TensorFlow: a `tf.function` traced once per input rank (static
    arguments are passed as tensors when eager, so one trace serves every
    length). JAX: `jax.jit` with `static_argnums`. torch: `fn` itself.
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(fn, autograph=False, reduce_retracing=True)

        def call(*args):
            if not tf.executing_eagerly():
                return fn(*args)
            args = [
                tf.constant(a, tf.int32) if i in static_argnums else a
                for i, a in enumerate(args)
            ]
            return compiled(*args)

        return call
    if NAME == "jax":
        import jax

        return jax.jit(fn, static_argnums=static_argnums)
    return fn


def eager_scope():
    """A context where ops run now, even inside a trace (to build constants)."""
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.init_scope()
    if NAME == "jax":
        import jax

        return jax.ensure_compile_time_eval()
    return contextlib.nullcontext()


def static_value(x):
    """`x` as a numpy array when its value is known now, else `None`.

    Known: Python and numpy values, eager tensors, TF graph constants.
    Unknown: symbolic tensors inside a `tf.function` or under `jax.jit`.
    """
    if isinstance(x, (int, float, bool, np.ndarray, np.generic, list, tuple)):
        return np.asarray(x)
    if NAME == "tensorflow":
        import tensorflow as tf

        if isinstance(x, (tf.Tensor, tf.Variable)):
            return tf.get_static_value(x)
    if NAME == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
    if NAME == "torch":
        import torch

        if isinstance(x, torch.Tensor):
            # Subclasses include the fake tensors `torch.export` traces with.
            return x.detach().cpu().numpy() if type(x) is torch.Tensor else None
    return ops.convert_to_numpy(x)


def is_tensor(x):
    """Whether `x` is a backend tensor (not a Python or symbolic dimension)."""
    return ops.is_tensor(x)


def in_graph():
    """Whether ops are being traced into a graph that can hold assertions."""
    if NAME == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    return False


def graph_assert(condition, message, *data):
    """A TF graph assertion (compiled out under XLA, hence the NaN rows)."""
    import tensorflow as tf

    tf.debugging.Assert(condition, [message, *data])


def dtype_name(x):
    """The standardized dtype name of a tensor, e.g. ``"int64"``."""
    return backend.standardize_dtype(x.dtype)
