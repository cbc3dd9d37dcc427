"""The one choice that depends on the platform: how XLA computes a table once.

The exact engine (Vaswani et al., 2017, section 3.5,
https://arxiv.org/abs/1706.03762; RoPE's cos/sin) builds small tables
(coarse rows, cos/sin of a span) that every batch row and head reads.
Under XLA (`jax.jit`, TensorFlow's `jit_compile=True`) they must be
written once, not fused into the loop that writes the output, where XLA
would redo the engine for every element read (14x slower on JAX's CPU).
How to keep them out depends on the platform:

* **CPU**: XLA's CPU compiler strips optimization barriers, but never fuses
  a division into a loop that reads its elements many times: the table
  is divided by ones XLA cannot prove are ones (`_divided`; exact).
* **GPU and TPU**: an optimization barrier is honoured: the table goes
  through one. (A conditional on data, which also keeps XLA from fusing,
  would copy its predicate to the host and wait for it in every call of
  every layer: a device stall.)

A RoPE lookup table's cos and sin halves (`written_once_on_cpu`) are
written once on a CPU only: XLA's CPU compiler reads slices of one
dynamic slice slowly when it fuses them; accelerators fuse them.

JAX makes the choice when it lowers for a platform
(`jax.lax.platform_dependent`: `jax.export` for `"cuda"` on a CPU machine
gets the barrier); TensorFlow when it traces, from the device the graph is
placed on (an explicit device scope, else a GPU or TPU if TensorFlow sees
one). Nothing else in the package depends on the platform.
"""

from keras import ops

from keras_posenc import _backend

# What `device_kind` returns: the platforms XLA compiles for, as JAX names them.
CPU, ACCELERATOR = "cpu", "accelerator"


def computed_once(fn, x):
    """``fn(x)`` (a tuple of tensors), computed once per call under XLA too.

    Args:
        fn: a function of one tensor returning a tuple of tensors.
        x: the tensor the table is computed from.
    """
    return _per_platform(fn, x, accelerator=_barrier)


def written_once_on_cpu(fn, x):
    """``fn(x)`` (a tuple of tensors), written once on a CPU under XLA only.

    For tables that are cheap to read but that XLA's CPU compiler reads
    slowly when fused: slices of one dynamic slice (a RoPE lookup table's
    ``[cos | sin]`` rows at a run-time start) made the fused rotation
    1.6-2.1x slower than reading two tables (measured under `jax.jit`;
    written once, it costs the floor's time).
    Elsewhere, and on GPU and TPU, ``fn(x)`` is left to XLA's fusion.

    Args:
        fn: a function of one tensor returning a tuple of tensors.
        x: the tensor they are made from.
    """
    return _per_platform(fn, x, accelerator=lambda fn, x: tuple(fn(x)))


def _per_platform(fn, x, accelerator):
    """``fn(x)``: plain outside XLA, divided by ones on a CPU, else
    ``accelerator(fn, x)`` (chosen when JAX lowers, or when TF traces)."""
    if not _backend.in_xla():
        return tuple(fn(x))
    if _backend.NAME == "jax":
        import jax

        return jax.lax.platform_dependent(
            x,
            cpu=lambda x: _divided(fn, x),
            default=lambda x: accelerator(fn, x),
        )
    if tensorflow_device_kind(x) == CPU:
        return _divided(fn, x)
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


def _divided(fn, x):
    """`fn(x)`, each (float) result divided by ones XLA cannot prove are ones.

    XLA fuses cheap element-wise producers into the loops that read them,
    even where each element is read many times; a division is one of the
    operations it counts as expensive and never fuses into such a reader
    (`InstructionFusion::IsExpensive`), so the result is written once, by
    a loop of its own, with `fn` fused into it. The divisor is computed
    from the result itself, as ``1 - 0`` (``t - t`` where `t` is finite,
    else 0): exactly 1 for every value, so the bits are those of `fn(x)`
    (NaN, infinities and signed zeros included); a divisor XLA could prove
    is 1 would be dropped, and a broadcast scalar one becomes a product,
    which it fuses. Earlier versions used a conditional on data: the same
    speed, but the engine compiled twice (once in each branch).
    """
    return tuple(_written_once(t) for t in fn(x))


def _written_once(t):
    """`t` divided by ones computed from it (see `_divided`)."""
    zero = ops.where(ops.isfinite(t), ops.subtract(t, t), ops.zeros_like(t))
    return ops.divide(t, ops.subtract(ops.ones_like(t), zero))
