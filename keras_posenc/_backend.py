"""The little that differs between Keras backends: compiling, static values.

Everything numerical is written once with `keras.ops`; this module only
decides how an engine function is compiled for eager callers and how a
caller can see a tensor's value before running anything.
"""

import contextlib
import functools
import math

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

        # TF counts traces per code object, so the functions of one closure
        # for several layouts (each traced once) would look like one function
        # retracing ("triggered tf.function retracing" warnings); a partial
        # is counted on its own.
        compiled = tf.function(
            functools.partial(fn), autograph=False, reduce_retracing=True
        )

        def call(*args):
            if not tf.executing_eagerly():
                return fn(*args)
            converted = [
                tf.constant(a, tf.int32) if i in static_argnums else a
                for i, a in enumerate(args)
            ]
            return compiled(*converted)

        return call
    if NAME == "jax":
        import jax

        return jax.jit(fn, static_argnums=static_argnums)
    return fn


def jit_on_jax(fn):
    """`fn` under `jax.jit` on JAX (one dispatch for many small ops); else `fn`."""
    if NAME == "jax":
        import jax

        return jax.jit(fn)
    return fn


def eager_scope():
    """A context where ops run now, even inside a trace (to build constants).

    On torch it also leaves inference mode and disables autograd: what is
    built there (kept rows, a lookup table) is an ordinary tensor, usable
    by later calls with or without autograd, whatever mode built it.
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.init_scope()
    if NAME == "jax":
        import jax

        return jax.ensure_compile_time_eval()
    import torch

    scope = contextlib.ExitStack()
    scope.enter_context(torch.inference_mode(False))
    scope.enter_context(torch.no_grad())
    return scope


def tracing():
    """Whether ops are being staged into a program: nothing may be kept then.

    A `tf.function` graph, `jax.jit` (or any other JAX transformation),
    `torch.compile` or `torch.export`. Rows kept from a trace would become
    constants of each compiled program (one copy per new shape).
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    if NAME == "jax":
        return not _jax_trace_state_clean()
    import torch

    return torch.compiler.is_compiling()


def embeds_constants():
    """Whether a concrete array used now would be embedded in a program.

    `jax.jit` lowers a closed-over array as a dense constant of each
    compiled program (one copy per input shape); TF captures an eager
    tensor as an input of its graph, and torch has no program to embed in.
    """
    return NAME == "jax" and tracing()


def _jax_trace_state_clean():
    """Whether JAX evaluates ops now (no trace is active), in about 0.3 us.

    JAX has no public test for this; without its internal one, an array
    made now is a tracer inside a trace (about 150 us).
    """
    try:
        from jax._src.core import trace_state_clean
    except ImportError:  # pragma: no cover (a JAX without this internal)
        import jax
        import jax.numpy as jnp

        return not isinstance(jnp.zeros((), "int32"), jax.core.Tracer)
    return trace_state_clean()


def owned(x):
    """`x`, sharing memory with nothing the package keeps.

    torch results can be views a caller edits in place, and a JAX array can
    be deleted or donated (`donate_argnums`): both get a copy. So do TF
    tensors: immutable to TF, but a kept row (an `unstack`ed step) or an
    aligned slice of a kept block shares its buffer, and a zero-copy DLPack
    view of it (`tf.experimental.dlpack.to_dlpack`) is writable. Inside a
    TF graph nothing is kept (rows are kept by eager calls only), so a
    traced result is the graph's own: no copy op, which TFLite's builtins
    would not convert.
    """
    if NAME == "torch":
        return x.clone()
    if NAME == "jax":
        import jax.numpy as jnp

        return jnp.array(x, copy=True)
    import tensorflow as tf

    if not tf.executing_eagerly():
        return x
    return tf.raw_ops.DeepCopy(x=x)


_SHARED_DTYPES = (np.dtype("int32"), np.dtype("float32"), np.dtype("bool"))


def constant(array):
    """numpy `array`, a constant made once and never edited, as a tensor on
    Keras's device (torch; call in `eager_scope`).

    On the CPU the tensor shares the array's memory: Keras's
    `convert_to_tensor` copies an array first, so an engine kept its host
    constants twice (issue 47: memory per configuration). Elsewhere, or for
    an array torch cannot share (read-only, negative strides) or Keras would
    convert (a dtype but the engine's int32, float32 and bool), a copy.
    """
    if (
        NAME == "torch"
        and isinstance(array, np.ndarray)
        and array.dtype in _SHARED_DTYPES
        and _keras_torch_device().type == "cpu"
        and array.flags.writeable
        and array.flags.c_contiguous
    ):
        import torch

        return torch.from_numpy(array)
    return ops.convert_to_tensor(array)


# Bytes a kept array costs beyond its values (the array object, its
# buffer's bookkeeping), measured per `[1, 16]` float32 row split from a
# block: about 740 (TensorFlow), 1600 (JAX), 490 (torch); rounded up.
ARRAY_OVERHEAD = {"tensorflow": 1024, "jax": 2048, "torch": 512}.get(NAME, 2048)


def device_key():
    """Where new tensors go now: Keras's torch device (`keras.device` scope
    included); `None` elsewhere (TF and JAX constants are numpy, placed by
    the compiler)."""
    if NAME != "torch":
        return None
    from keras.src.backend.torch.core import get_device

    return get_device()


def on_keras_device(fn):
    """`fn`, its torch tensor arguments first moved to Keras's device.

    As `keras.ops` moves them (a CPU tensor given on a machine with a GPU):
    the package's constants live on Keras's device, and its sums are
    operators, which do not move anything. A tensor already there is
    passed as it is (checked first, in about a microsecond: a decoding
    step is tens of them), and so is a CPU scalar (it joins any device's
    ops, and a start or a length is read on the host). Keras's "cuda" is
    the GPU current at the first call (the package's constants are made
    there too). Other backends: `fn` itself.
    """
    if NAME != "torch":
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        device = _keras_torch_device()
        if _any_elsewhere(args, device) or _any_elsewhere(kwargs.values(), device):
            args = tuple(_moved(a, device) for a in args)
            kwargs = {k: _moved(v, device) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return call


_TORCH_DEVICES: dict = {}  # Keras's torch device name -> its tensors' device
if NAME == "torch":
    from keras.src.backend.torch.core import get_device as _torch_get_device
    from torch import Tensor as _TorchTensor


def _keras_torch_device():
    """The `torch.device` of the tensors Keras makes now."""
    name = _torch_get_device()
    device = _TORCH_DEVICES.get(name)
    if device is None:
        import torch

        # "cuda", "mps", "xpu" have no index; their tensors have the current
        # device's, which a new empty tensor shows.
        device = torch.device(name)
        if device.index is None and device.type not in ("cpu", "meta"):
            device = torch.empty(0, device=device).device
        _TORCH_DEVICES[name] = device
    return device


def _elsewhere(value, device):
    """Whether `value` is a torch tensor off `device`, but a CPU scalar."""
    if not isinstance(value, _TorchTensor) or value.device == device:
        return False
    return value.ndim > 0 or value.device.type != "cpu"


def _any_elsewhere(values, device):
    for value in values:  # a loop: a generator costs a microsecond more
        if _elsewhere(value, device):
            return True
    return False


def _moved(value, device):
    return ops.convert_to_tensor(value) if _elsewhere(value, device) else value


def nbytes(x):
    """The bytes of a tensor's values."""
    size = 1
    for dim in x.shape:
        size *= int(dim)
    return size * np.dtype(dtype_name(x)).itemsize


def in_xla():
    """Whether ops are being compiled by XLA: `jax.jit`, or TF `jit_compile`."""
    if NAME == "jax":
        return True
    if NAME != "tensorflow" or not in_graph():
        return False
    try:
        import tensorflow as tf
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # a TF without this internal: assume no XLA
        return False
    return control_flow_util.GraphOrParentsInXlaContext(
        tf.compat.v1.get_default_graph()
    )


def host_work(fn):
    """`fn` run as plain Python outside `torch.compile` (elsewhere `fn`).

    For work done once on the host when a layer is built (exact constants
    in `decimal`, a lookup table): Dynamo cannot trace it, and a layer
    first called inside a compiled function builds there.
    """
    if NAME == "torch":
        import torch

        return torch.compiler.disable(fn)
    return fn


def not_autograph(fn):
    """Runs `fn` as plain Python inside a user's `tf.function`.

    Autograph would otherwise rewrite the caller, `_checks.positions`,
    `_exact.engine` and the Keras ops they call on the first trace
    (seconds), for no gain: no Python branch of ours depends on a tensor's
    value.
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.autograph.experimental.do_not_convert(fn)
    return fn


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
            # Subclasses include the fake tensors `torch.export` traces with;
            # under `torch.compile` a tensor's value is not known either, nor
            # on the `meta` device (shapes only).
            if (
                type(x) is not torch.Tensor
                or x.is_meta
                or torch.compiler.is_compiling()
            ):
                return None
            return x.detach().cpu().numpy()
    return ops.convert_to_numpy(x)


def is_traced(x):
    """Whether `x` is a placeholder of a trace (TF graph, `jax.jit`, torch fake)."""
    if NAME == "jax":
        import jax

        return isinstance(x, jax.core.Tracer)
    if NAME == "tensorflow":
        return in_graph()
    import torch

    return type(x) is not torch.Tensor or torch.compiler.is_compiling()


def is_tensor(x):
    """Whether `x` is a backend tensor (not a Python or symbolic dimension)."""
    return ops.is_tensor(x)


def in_graph():
    """Whether ops are being traced into a graph that can hold assertions."""
    if NAME == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    return False


def guard(x, checks):
    """`x` under the one failure policy for checks that run with the graph.

    Values known before running were checked (and raised) when parsed; what
    reaches here are conditions on traced values. In a TF graph each one is
    an assertion (`InvalidArgumentError` with its message). Where assertions
    cannot run (XLA, `jax.jit`, `torch.compile`), and as a second line in TF
    graphs, the entries of `x` where a condition fails are NaN: an invalid
    position never gives a plausible row.

    Args:
        x: float tensor.
        checks: ``(ok, message)`` pairs; `ok` a boolean tensor whose shape is
            a prefix of `x`'s (broadcast over the trailing axes).
    """
    if not checks:
        return x
    ok = checks[0][0]
    for condition, message in checks:
        if in_graph():
            import tensorflow as tf

            tf.debugging.Assert(ops.all(condition), [message])
        if condition is not ok:
            ok = ops.logical_and(ok, condition)
    extra = len(x.shape) - len(ok.shape)
    ok = ops.reshape(ok, (*ops.shape(ok), *([1] * extra)))
    return ops.where(ok, x, float("nan"))


def checks_first(checks):
    """A context whose ops run after `checks`' graph assertions (TF graphs).

    TensorFlow runs a graph's ops in any order: an op that would fail on
    values a check refuses (a slice past its table) could fail first, with
    its own message instead of the check's. Elsewhere nothing to order.

    Args:
        checks: ``(ok, message)`` pairs, as `guard` takes them.
    """
    if not (checks and in_graph()):
        return contextlib.nullcontext()
    import tensorflow as tf

    asserts = [tf.debugging.Assert(ops.all(ok), [message]) for ok, message in checks]
    return tf.control_dependencies(asserts)


def reshape(x, shape):
    """`ops.reshape`, with the tensor's own reshape for eager torch tensors.

    Keras's flattens its arguments as a pytree before dispatching: about
    33 us per call on torch, where a RoPE decoding step's whole budget is
    about 250 us; the tensor's reshape takes about 1 us. Same view, same bits.
    """
    if NAME == "torch":
        import torch

        if isinstance(x, torch.Tensor):
            return x.reshape(tuple(shape))
    return ops.reshape(x, shape)


def add(x, y):
    """``x + y`` with broadcasting, a numpy constant allowed on either side.

    Keras's `add` on TensorFlow turns ``[N, 1, C] + [2, 1]`` into a
    `BiasAdd` when ``C == 2`` (dropping the broadcast axis); `tf.add` does
    not. On torch, ``tensor + ndarray`` goes through numpy; `ops.add` does
    not.
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.add(x, y)
    return ops.add(x, y)


def add_in_slices(x, slice_of, count, nbytes):
    """``x + y``, `y` made about `nbytes` at a time.

    ``slice_of(start, stop)`` makes ``y[start:stop]``, entries of `x`'s
    axis 1 (which has `count`), broadcast over axis 0. On eager torch
    (outside `torch.compile`) each slice is added to `x` as soon as it is
    made, into one output, while it is still in the CPU's or GPU's cache:
    a `y` made whole first is written to memory and read back once per
    row of axis 0 (a precomputed one is only read). The gradient is that
    of ``x + y`` for `x` (`y` is a constant), in reverse and forward mode
    and under `torch.func.vmap`. A small `y` (`_WHOLE_SLICES` slices or
    fewer) is made whole, and so is `y` elsewhere (graphs, `torch.compile`
    and `torch.jit.trace` fuse or record it themselves).
    """
    if NAME != "torch" or is_traced(x):
        return x + slice_of(0, count)
    import torch

    entry = max(math.prod(x.shape[2:]) * x.element_size(), 1)
    # Small, `y` stays in the cache whole; `torch.jit.trace` cannot record a
    # Python function called with a Python callable.
    if entry * count <= _WHOLE_SLICES * nbytes or torch.jit.is_tracing():
        return x + slice_of(0, count)
    step = max(nbytes // entry, 1)
    return _sliced_add_function().apply(x, slice_of, count, step)


# `add_in_slices` makes a `y` of at most this many slices whole: it stays in
# the cache, where the slices' own cost showed (ALiBi on the 2-core CPU at
# `[8, 16, 512, 512]`, a 16 MiB bias: 1.11x a precomputed-bias add in 4 MiB
# slices, 1.08x whole; at `[4, 32, 1024, 1024]`, 128 MiB: 1.10x, 1.18x).
_WHOLE_SLICES = 8


@functools.cache
def _sliced_add_function():
    """The torch autograd function of `add_in_slices` (made once, on torch)."""
    import torch

    class SlicedAdd(torch.autograd.Function):
        @staticmethod
        def forward(x, slice_of, count, step):
            out = torch.empty_like(x)
            for start in range(0, count, step):
                stop = min(start + step, count)
                torch.add(
                    x[:, start:stop], slice_of(start, stop), out=out[:, start:stop]
                )
            return out

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad, None, None, None

        @staticmethod
        def jvp(ctx, x_tangent, *constants):
            return x_tangent  # forward mode (`torch.func.jvp`, `hessian`)

        @staticmethod
        def vmap(info, in_dims, x, slice_of, count, step):
            # Under `torch.func.vmap`: the plain add, the mapped axis first.
            return x.movedim(in_dims[0], 0) + slice_of(0, count), 0

    return SlicedAdd


def take_rows(table, indices):
    """``table[indices]`` (rows along axis 0) for indices known to be in range.

    Keras's `take` first maps negative indices: two more ops on TensorFlow
    (about 20 us in a graph), about 60 us more per call on eager torch.
    """
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.gather(table, indices)
    if NAME == "torch":
        import torch

        if isinstance(indices, torch.Tensor):
            # An embedding lookup, as Keras's `take` ends for a 2-D table,
            # without its checks (~60 us); indexing (`table[indices]`) is
            # about 4 times slower on CPUs (0.4 ms for 65536 rows of 3).
            if not isinstance(table, torch.Tensor):
                table = torch.as_tensor(table, device=indices.device)
            if table.ndim == 2:
                return torch.nn.functional.embedding(indices, table)
            return table[indices]
    return ops.take(table, indices, axis=0)


def has_distinct(x):
    """Whether `distinct` can run on `x`: eager TensorFlow, or a torch tensor
    with values (not traced, not on the `meta` device Keras's symbolic calls
    use)."""
    if NAME == "jax" or is_traced(x):
        return False
    return NAME == "tensorflow" or x.device.type != "meta"


def distinct(x):
    """``(values, index)`` of a 1-D tensor: its distinct values and, for each
    element, the index of its value (``values[index] == x``). TensorFlow
    (eager or a plain graph, not XLA) and torch only: the count is dynamic."""
    if NAME == "tensorflow":
        import tensorflow as tf

        return tf.unique(x, out_idx=tf.int32)
    import torch

    return torch.unique(x, return_inverse=True)


def slice_rows(table, start, length):
    """``table[start : start + length]`` for a start in range.

    `start` is a Python int or an int32 scalar tensor, `length` an int (or a
    scalar tensor in a TF graph). On torch a tensor start is a gather of
    computed indices: slicing at it would read it back to the host
    (`.item()`: a device sync per call, and a data-dependent op that
    `torch.compile` cannot trace); elsewhere a (dynamic) slice.
    """
    if NAME == "torch":
        import torch

        if isinstance(start, torch.Tensor):
            steps = torch.arange(length, device=start.device, dtype=start.dtype)
            return table[start + steps]
        return table[start : start + length]
    if isinstance(start, int) and isinstance(length, int):
        return table[start : start + length]
    begin = ops.stack([ops.cast(start, "int32"), 0])
    return ops.slice(table, begin, (length, table.shape[1]))


def rows_in_chunks(rows_of, count, step):
    """``rows_of(first, n)`` over ``[0, count)`` in chunks of `step` rows, joined.

    For rows whose computation holds temporaries several times their size
    (eager torch ops, a TF graph without XLA). On torch each chunk is
    written into the result as it is made, so a build peaks near the
    result and one chunk's temporaries; on TensorFlow (tensors are not
    written in place) the chunks are concatenated: near twice the result.
    On JAX in one piece: XLA fuses the computation into the one output,
    and chunks would double it.
    """
    if count <= step or NAME == "jax":
        return rows_of(0, count)
    chunks = ((first, min(step, count - first)) for first in range(0, count, step))
    if NAME != "torch":
        return ops.concatenate([rows_of(*chunk) for chunk in chunks], axis=0)
    first = rows_of(*next(chunks))
    out = first.new_empty((count, *first.shape[1:]))
    out[:step] = first
    del first
    for start, length in chunks:
        out[start : start + length] = rows_of(start, length)
    return out


def unstack(x):
    """`x`'s rows (axis 0) as a list of tensors (eagerly).

    On JAX, Keras's `unstack` compiles one indexing op per row the first time
    a shape is seen (5 s for 128 rows on the 2-core machine), and iterating
    the array compiles splits into up to 100 outputs (6.7 s for a decoding
    block's 512 rows, most of a process's first eager call): one compiled
    dynamic index, called once per row, compiles in milliseconds and costs
    about 10-40 us a row.
    """
    if NAME == "jax":
        row, indices = _jax_rows(x.shape[0])
        return [row(x, i) for i in indices]
    return ops.unstack(x, axis=0)


class SplitRows:
    """The rows of equally long `tables` one by one (kept rows, read by steps).

    ``split[i]`` is ``table[i:i + 1]`` of the one table, or the tuple of
    each table's. On torch a row is a view made when first read (in
    `eager_scope`, as the tables were) and kept: splitting a 512-row
    decoding block at once made 512 tensors per table for a 16-position
    prompt that read none of them, heap left free (and kept by the
    allocator) when its layer went. Elsewhere every row is made at once
    (`unstack`, one op): a TF or JAX slice per step costs more than reading
    a kept row.

    Args:
        *tables: tensors with the same first axis.
    """

    def __init__(self, *tables):
        self._tables = tables
        self._count = tables[0].shape[0]
        self._rows: dict | list = {}
        if NAME != "torch":
            split = [unstack(t[:, None]) for t in tables]
            self._rows = (
                split[0] if len(tables) == 1 else list(zip(*split, strict=True))
            )

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        if NAME != "torch":
            return self._rows[index]
        row = self._rows.get(index)  # type: ignore[union-attr]
        if row is None:
            with eager_scope():
                rows = tuple(t[index : index + 1] for t in self._tables)
            row = self._rows[index] = rows[0] if len(rows) == 1 else rows
        return row


@functools.lru_cache(maxsize=8)
def _jax_rows(count):
    """``(row, indices)``: ``row(x, i)`` is `x[i]`, compiled once per shape of
    `x`; `indices` are `0 .. count - 1` as arrays (uncommitted, so they go
    where `x` is), made once: a host integer costs a transfer per call."""
    import jax
    import jax.numpy as jnp

    row = jax.jit(lambda x, i: jax.lax.dynamic_index_in_dim(x, i, keepdims=False))
    return row, [jnp.int32(i) for i in range(count)]


def dtype_name(x):
    """The standardized dtype name of a tensor, e.g. ``"int64"``."""
    return backend.standardize_dtype(x.dtype)
