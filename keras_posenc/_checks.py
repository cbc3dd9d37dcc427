"""Argument validation for every entry point, with Keras-style messages.

Every check raises as early as it can (constructor, then `build`, then
call) with ``Received an invalid value for `name`, expected ... Received:
name=value``. Integer arguments are checked against the int32 range before
any cast, so no value ever wraps into a plausible wrong position.
"""

import numpy as np
from keras import backend, ops

from keras_posenc import _backend
from keras_posenc._arguments import (
    POSITION_LIMIT,
    POSITION_MIN,
    check_depth,
    invalid,
    is_int,
)


def _echo(value):
    """The value to show in a message: numbers when known, else the spec."""
    static = _backend.static_value(value)
    if static is None:
        return f"<tensor dtype={_backend.dtype_name(value)} shape={tuple(value.shape)}>"
    static = np.asarray(static)
    if static.size > 16:
        return f"<array dtype={static.dtype} shape={static.shape}>"
    return static.tolist() if static.ndim else static.item()


def positions(name, value, *, low, ranks, expected=None):
    """Integer positions in ``[low, 2**31)`` as int32, checked before the cast.

    Args:
        name: the argument's name, for messages.
        value: Python int(s), numpy array or integer tensor.
        low: smallest position allowed (0, or -2**31 in compute mode).
        ranks: allowed ranks.
        expected: what the messages say is allowed, when the values are not
            positions (a length, a batch size).

    Returns:
        ``(int32 tensor, ok)``: `ok` is `None` when every value was checked
        now, else a boolean tensor (same shape) that is False where a value
        cannot be encoded; inside a TF graph a failing value also trips an
        assertion. Under XLA or `jax.jit`, callers turn those rows into NaN.
    """
    kind = expected or f"integer positions in [{low}, 2**31)"
    in_range = expected or f"positions in [{low}, 2**31) (int32)"
    if value is None or isinstance(value, (bool, float, str)):
        raise invalid(name, kind, value)
    static = _backend.static_value(value)
    if static is not None:
        array = np.asarray(static)
        if array.size == 0:
            array = array.astype(np.int32)  # `positions=[]` for an empty sequence
        is_integer = np.issubdtype(array.dtype, np.integer)
        if array.dtype == object:
            is_integer = all(is_int(v) for v in array.ravel())
        if not is_integer:
            raise invalid(name, kind, _echo(value))
        if array.ndim not in ranks:
            raise invalid(name, _ranks(ranks), _echo(value))
        bad = [int(v) for v in array.ravel() if not low <= int(v) < POSITION_LIMIT]
        if bad:
            raise invalid(name, in_range, bad[0])
        return ops.convert_to_tensor(array.astype(np.int32), "int32"), None
    dtype = _backend.dtype_name(value)
    if "int" not in dtype:
        raise invalid(name, kind, _echo(value))
    if len(value.shape) not in ranks:
        raise invalid(name, _ranks(ranks), _echo(value))
    if dtype == "int32" and low == POSITION_MIN:
        return value, None
    as_int32 = ops.cast(value, "int32")
    ok = ops.greater_equal(as_int32, low)
    if dtype not in ("int32", "int16", "int8", "uint16", "uint8"):
        # The cast wraps modulo 2**32. Casts are the only ops applied to the
        # wide value (Keras compares uint64 after a lossy promotion): the
        # cast kept the value iff both round to the same float32, since a
        # wrapped value is at least 2**32 away on the other side of zero.
        kept = ops.equal(ops.cast(value, "float32"), ops.cast(as_int32, "float32"))
        ok = ops.logical_and(ok, kept)
    message = (
        f"expected {expected}" if expected else f"positions must be in [{low}, 2**31)"
    )
    _assert(ok, name, message)
    return as_int32, ok


def _ranks(ranks):
    return f"a tensor of rank {' or '.join(map(str, ranks))}"


def length_of(value, name="length"):
    """A sequence length: Python int `>= 0`, or an int scalar tensor."""
    return length_and_ok(value, name)[0]


def length_and_ok(value, name="length"):
    """A sequence length and its validity (`None`, or a boolean scalar tensor).

    A Python int must be in ``[0, 2**31)``. A tensor is checked now when its
    value is known; inside a TF graph it is checked by an assertion and
    `ok` marks it for callers that fill NaN where assertions cannot run
    (XLA). JAX shapes are static: a traced length under `jax.jit` is an
    error.
    """
    expected = "an integer in [0, 2**31)"
    if is_int(value):
        if not 0 <= value < POSITION_LIMIT:
            raise invalid(name, expected, value)
        return int(value), None
    _static_under_jax(name, value, expected)
    tensor, ok = positions(name, value, low=0, ranks=(0,), expected=expected)
    static = _backend.static_value(tensor)
    if static is not None:
        return int(static), None
    return ops.maximum(tensor, 0), ok


def _static_under_jax(name, value, expected):
    """JAX and torch shapes are Python ints: a traced size cannot be one."""
    if (
        _backend.NAME != "tensorflow"
        and _backend.is_tensor(value)
        and _backend.static_value(value) is None
    ):
        raise invalid(
            name,
            f"{expected}, known when traced (under `jax.jit`, pass it as a "
            "static argument)",
            _echo(value),
        )


def end_ok(start, length):
    """Whether ``start + length <= 2**31`` without overflowing int32.

    Python ints give a Python bool; tensors give a boolean tensor.
    """
    if is_int(length) and length == 0:
        return True
    if is_int(start) and is_int(length):
        return start + length <= POSITION_LIMIT
    if is_int(length):
        # start <= 2**31 - length, written so that no term leaves int32.
        return ops.less_equal(start, (POSITION_LIMIT - 1) - (length - 1))
    # A tensor, or a symbolic dimension (jax2tf) made into one; at least 1 in
    # the subtraction, so that a zero length cannot overflow it either.
    length = ops.convert_to_tensor(length, "int32")
    last = (POSITION_LIMIT - 1) - (ops.maximum(length, 1) - 1)
    return ops.logical_or(ops.equal(length, 0), ops.less_equal(start, last))


def range_start(start_index, length, *, low, ranks=(0, 1)):
    """Checks `start_index` (scalar or ``[B]``) for rows ``start + [0, length)``.

    Returns:
        ``(int32 start, ok)`` as `positions` does; `ok` also covers the end.
    """
    start, ok = positions("start_index", start_index, low=low, ranks=ranks)
    static_start, static_length = _backend.static_value(start), length
    if static_start is not None and is_int(static_length):
        last = int(np.max(static_start, initial=low)) + static_length
        if static_length and last > POSITION_LIMIT:
            raise invalid(
                "start_index",
                f"start_index + length <= 2**31 (positions are int32); "
                f"length={static_length}",
                _echo(start_index),
            )
        return start, ok
    end = end_ok(start, length)
    _assert(end, "start_index", "start_index + length must be <= 2**31")
    return start, end if ok is None else ops.logical_and(ok, end)


def _assert(ok, name, message):
    if _backend.in_graph():
        _backend.graph_assert(
            ops.all(ok), f"Received an invalid value for `{name}`: {message}"
        )


def batch_size(value):
    """`batch_size` of `positional_encoding`: ``(size, ok)`` as `length_and_ok`."""
    expected = "an integer in [1, 2**31)"
    if is_int(value):
        if not 1 <= value < POSITION_LIMIT:
            raise invalid("batch_size", expected, value)
        return int(value), None
    _static_under_jax("batch_size", value, expected)
    tensor, ok = positions("batch_size", value, low=1, ranks=(0,), expected=expected)
    static = _backend.static_value(tensor)
    if static is not None:
        return int(static), None
    return ops.maximum(tensor, 1), ok


def input_layout(shape, *, merge, depth_arg, axis):
    """Resolves the encoding width and the sequence axis from an input shape.

    Args:
        shape: the input shape (tuple, `None` for unknown dimensions).
        merge: the layer's `merge`.
        depth_arg: the layer's `depth` argument (`None` to infer).
        axis: the layer's `sequence_axis`.

    Returns:
        ``(depth, axis)`` with `axis` normalised to a non-negative int.
    """
    if shape is None:
        raise invalid("inputs", "a known rank", shape)
    # Symbolic dimensions (jax2tf export) count as unknown.
    shape = tuple(int(d) if is_int(d) else None for d in shape)
    rank = len(shape)
    id_input = merge is None and rank == 2
    if rank < 3 and not id_input:
        expected = (
            "rank >= 3 (batch, ..., features), or rank 2 (batch, length) token "
            "ids with merge=None"
        )
        raise invalid("inputs", expected, f"<shape={tuple(shape)}>")
    feature_rank = rank + 1 if id_input else rank
    normal = axis + feature_rank if axis < 0 else axis
    if not 1 <= normal <= feature_rank - 2:
        raise invalid(
            "sequence_axis",
            f"an axis between the batch axis (0) and the feature axis "
            f"({feature_rank - 1}) of inputs of shape {tuple(shape)}",
            axis,
        )
    last = None if id_input else shape[-1]
    if merge == "add" and depth_arg is not None and last not in (None, depth_arg):
        raise invalid(
            "depth",
            f"the last dimension of `inputs` ({last}) with merge='add'",
            depth_arg,
        )
    width = (
        depth_arg if depth_arg is not None else (None if merge == "concat" else last)
    )
    if width is None:
        raise invalid(
            "depth",
            "a positive integer: it cannot be inferred from inputs whose "
            f"feature axis is unknown or absent (shape {tuple(shape)})",
            None,
        )
    return check_depth(width), normal


def floating_inputs(inputs, merge):
    dtype = _backend.dtype_name(inputs)
    if merge is not None and not backend.is_float_dtype(dtype):
        raise invalid(
            "inputs",
            f"a floating tensor with merge={merge!r}",
            f"<tensor dtype={dtype}>",
        )


def _same_size(name, tensor, axis, inputs, input_axis, expected):
    """Whether ``tensor.shape[axis]`` equals ``inputs.shape[input_axis]``.

    Raises now when both sizes are static; otherwise returns a boolean
    tensor of `tensor`'s shape (with a TF graph assertion), so that a size-1
    argument is never silently broadcast over the inputs: the rows come out
    NaN where the assertion cannot run (XLA).
    """
    size, given = inputs.shape[input_axis], tensor.shape[axis]
    if size is not None and given is not None:
        if size != given:
            raise invalid(name, expected, f"<shape={tuple(tensor.shape)}>")
        return None
    same = ops.equal(ops.shape(tensor)[axis], ops.shape(inputs)[input_axis])
    _assert(same, name, f"expected {expected}")
    return ops.broadcast_to(same, ops.shape(tensor))


def both(ok, other):
    """Conjunction of two validity flags (`None` means "checked, valid")."""
    if ok is None or other is None:
        return other if ok is None else ok
    return ops.logical_and(ok, other)


def call_start(start_index, inputs, length, low):
    """`start_index` of a layer call: ``(int32 start, ok)``."""
    start, ok = range_start(start_index, length, low=low)
    if len(start.shape) == 1:
        same = _same_size(
            "start_index", start, 0, inputs, 0, _one_row_per_example(inputs)
        )
        ok = both(ok, same)
    return start, ok


def call_positions(value, inputs, axis, low):
    """`positions` of a layer call: ``(int32 positions, ok)``."""
    positions_, ok = positions("positions", value, low=low, ranks=(1, 2))
    length = inputs.shape[axis]
    per_sequence = (
        f"{length} positions per sequence, the length of `inputs`"
        if length is not None
        else "one position per step of the sequence axis of `inputs`"
    )
    ok = both(ok, _same_size("positions", positions_, -1, inputs, axis, per_sequence))
    if len(positions_.shape) == 2:
        same = _same_size(
            "positions", positions_, 0, inputs, 0, _one_row_per_example(inputs)
        )
        ok = both(ok, same)
    return positions_, ok


def _one_row_per_example(inputs):
    batch = inputs.shape[0]
    if batch is None:
        return "one row per example of `inputs`"
    return f"one row per example: batch {batch} of `inputs`"
