"""The one choice that depends on the platform: how XLA computes a table once.

The exact engine (Vaswani et al., 2017, section 3.5,
https://arxiv.org/abs/1706.03762; RoPE's cos/sin) builds small tables
(coarse rows, cos/sin of a span) that every batch row and head reads.
Under XLA (`jax.jit`, TensorFlow's `jit_compile=True`) they must be
written once, not fused into the loop that writes the output, where XLA
would redo the engine for every element read (14x slower on JAX's CPU).
How to keep them out depends on the platform:

* **CPU**: XLA's CPU compiler strips optimization barriers, but never fuses
  across a conditional: the table is computed inside one
  (`_conditional`). Its predicate is data, which costs nothing there.
* **GPU and TPU**: a conditional's predicate is copied to the host and
  waited for in every call of every layer (a device stall), while an
  optimization barrier is honoured: the table goes through one.

A RoPE lookup table's cos and sin halves (`written_once_on_cpu`) go
through the CPU's conditional only: XLA's CPU compiler reads slices of
one dynamic slice slowly when it fuses them; accelerators fuse them.

JAX makes the choice when it lowers for a platform
(`jax.lax.platform_dependent`: `jax.export` for `"cuda"` on a CPU machine
gets the barrier); TensorFlow when it traces, from the device the graph is
placed on (an explicit device scope, else a GPU or TPU if TensorFlow sees
one). Nothing else in the package depends on the platform.
"""

import numpy as np
from keras import backend, ops

from keras_posenc import _backend

# What `device_kind` returns: the platforms XLA compiles for, as JAX names them.
CPU, ACCELERATOR = "cpu", "accelerator"


def computed_once(fn, x):
    """``fn(x)`` (a tuple of tensors), computed once per call under XLA too.

    Args:
        fn: a function of one tensor returning a tuple of tensors.
        x: the tensor the table is computed from (its first value also
            decides the conditional's branch on a CPU, see `_conditional`).
    """
    return _per_platform(fn, x, accelerator=_barrier)


def written_once_on_cpu(fn, x):
    """``fn(x)`` (a tuple of tensors), written once on a CPU under XLA only.

    For tables that are cheap to read but that XLA's CPU compiler reads
    slowly when fused: slices of one dynamic slice (a RoPE lookup table's
    ``[cos | sin]`` rows at a run-time start) made the fused rotation
    1.6-2.1x slower than reading two tables (measured under `jax.jit`;
    written once, as `_conditional` does, it costs the floor's time).
    Elsewhere, and on GPU and TPU, ``fn(x)`` is left to XLA's fusion.

    Args:
        fn: a function of one tensor returning a tuple of tensors.
        x: the tensor they are made from (see `_conditional`).
    """
    return _per_platform(fn, x, accelerator=lambda fn, x: tuple(fn(x)))


def _per_platform(fn, x, accelerator):
    """``fn(x)``: plain outside XLA, in a conditional on a CPU, else
    ``accelerator(fn, x)`` (chosen when JAX lowers, or when TF traces)."""
    if not _backend.in_xla():
        return tuple(fn(x))
    if _backend.NAME == "jax":
        import jax

        return jax.lax.platform_dependent(
            x,
            cpu=lambda x: _conditional(fn, x),
            default=lambda x: accelerator(fn, x),
        )
    if tensorflow_device_kind(x) == CPU:
        return _conditional(fn, x)
    return accelerator(fn, x)


def tensorflow_device_kind(x):
    """`CPU` or `ACCELERATOR`: where TensorFlow runs the graph that holds `x`.

    The device of an explicit `tf.device` scope, else a GPU or TPU whenever
    TensorFlow sees one (its placement prefers them).
    """
    import tensorflow as tf

    device = (getattr(x, "device", "") or "").upper()
    if "CPU" in device:
        return CPU
    if "GPU" in device or "TPU" in device:
        return ACCELERATOR
    visible = tf.config.list_logical_devices
    return ACCELERATOR if visible("GPU") or visible("TPU") else CPU


def _barrier(fn, x):
    """`fn(x)` through an optimization barrier: written once, never fused."""
    outputs = tuple(fn(x))
    if _backend.NAME == "jax":
        import jax

        return tuple(jax.lax.optimization_barrier(outputs))
    from tensorflow.compiler.tf2xla.python import xla

    return tuple(xla.optimization_barrier(*outputs))


def _conditional(fn, x):
    """`fn(x)` inside a conditional, whose results XLA writes once.

    That branch runs when the first value of `x` is ordinary: a number (not
    a NaN row from a failed guard), an int above -2**31. The other branch
    gives the same values through `_scattered`; it keeps XLA from proving
    the conditional trivial (XLA turns a conditional of cheap element-wise
    branches into a select, and fuses it). A scatter alone also stops
    fusion, but loops over rows: RoPE's tables cost 4x more under
    `jax.jit`. `fn` runs inside the branch, its results written straight
    into the conditional's output (a table passed through a branch would
    be copied).
    """
    probe = ops.reshape(x, (-1,))[:1]
    if backend.is_float_dtype(_backend.dtype_name(probe)):
        ordinary = ops.equal(probe, probe)
    else:
        ordinary = ops.not_equal(probe, np.iinfo(_backend.dtype_name(probe)).min)
    return ops.cond(
        ops.all(ordinary),
        lambda: tuple(fn(x)),
        lambda: tuple(_scattered(t) for t in fn(x)),
    )


def _scattered(t):
    """`t` scattered (exactly) into a zero buffer: a copy XLA does not fuse."""
    length = t.shape[0]  # None (TF) or symbolic (jax2tf) when dynamic
    rows = t if isinstance(length, int) and length > 1 else ops.concatenate([t, t])
    count = ops.shape(rows)[0]
    index = ops.expand_dims(ops.arange(count, dtype="int32"), -1)
    out = ops.scatter_update(ops.zeros_like(rows), index, rows)
    return out if rows is t else out[: ops.shape(t)[0]]
