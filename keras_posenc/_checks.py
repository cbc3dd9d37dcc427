"""Argument validation for every entry point, with Keras-style messages.

Every check raises as early as it can (constructor, then `build`, then
call) with ``Received an invalid value for `name`, expected ... Received:
name=value``. Integer arguments are checked against the int32 range before
any cast, so no value ever wraps into a plausible wrong position.
"""

import math
import numbers
import os

import numpy as np
from keras import backend, ops

from keras_posenc import _backend

LAYOUTS = ("interleaved", "concatenated")
MODES = ("compute", "lookup")
MERGES = ("add", "concat", None)
OUT_OF_RANGE = ("error", "extend")

# Positions are int32 end to end.
POSITION_MIN = -(2**31)
POSITION_LIMIT = 2**31
# Widest encoding accepted: bounds the host-side constant work (~1 s).
MAX_DEPTH = 2**16
# Largest lookup table built without asking; raise it with this variable.
TABLE_BYTES_VARIABLE = "KERAS_POSENC_MAX_TABLE_BYTES"
DEFAULT_MAX_TABLE_BYTES = 2**30


def invalid(name, expected, value):
    return ValueError(
        f"Received an invalid value for `{name}`, expected {expected}. "
        f"Received: {name}={value!r}"
    )


def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name, value, limit=None):
    if not is_int(value) or value <= 0 or (limit is not None and value > limit):
        bound = "" if limit is None else f" <= {limit}"
        raise invalid(name, f"a positive integer{bound}", value)
    return int(value)


def non_negative_int(name, value):
    if not is_int(value) or value < 0:
        raise invalid(name, "a non-negative integer", value)
    return int(value)


def depth(value, name="depth"):
    return positive_int(name, value, MAX_DEPTH)


def wavelength(value, name="max_wavelength"):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        number = float(value) if ok else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number <= 0:
        raise invalid(name, "a finite number > 0", value)
    return number


def choice(name, value, allowed):
    # `in` would compare arrays elementwise: match strings and None only.
    if not any(value is a or (isinstance(value, str) and value == a) for a in allowed):
        raise invalid(name, f"one of {allowed}", value)
    return value


def boolean(name, value):
    if not isinstance(value, bool):
        raise invalid(name, "a bool", value)
    return value


def floating_dtype(value, name="dtype"):
    try:
        dtype = backend.standardize_dtype(value)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or not backend.is_float_dtype(dtype):
        raise invalid(name, "a floating dtype such as 'float32'", value)
    return dtype


def table_bytes(max_length, width, name="max_length"):
    """Refuses a lookup table larger than the configured byte limit."""
    limit = int(os.environ.get(TABLE_BYTES_VARIABLE, DEFAULT_MAX_TABLE_BYTES))
    needed = (max_length + 1) * width * 4
    if needed > limit:
        raise invalid(
            name,
            f"a table of at most {limit} bytes (set {TABLE_BYTES_VARIABLE} to "
            f"allow more); this one needs {needed} bytes at depth {width}",
            max_length,
        )


def _echo(value):
    """The value to show in a message: numbers when known, else the spec."""
    static = _backend.static_value(value)
    if static is not None:
        return static.tolist() if np.ndim(static) else static.item()
    return f"<tensor dtype={_backend.dtype_name(value)} shape={tuple(value.shape)}>"


def positions(name, value, *, low, ranks):
    """Integer positions in ``[low, 2**31)`` as int32, checked before the cast.

    Args:
        name: the argument's name, for messages.
        value: Python int(s), numpy array or integer tensor.
        low: smallest position allowed (0, or -2**31 in compute mode).
        ranks: allowed ranks.

    Returns:
        ``(int32 tensor, ok)``: `ok` is `None` when every value was checked
        now, else a boolean tensor (same shape) that is False where a value
        cannot be encoded; inside a TF graph a failing value also trips an
        assertion. Under XLA or `jax.jit`, callers turn those rows into NaN.
    """
    if value is None or isinstance(value, (bool, float, str)):
        raise invalid(name, f"integer positions in [{low}, 2**31)", value)
    static = _backend.static_value(value)
    if static is not None:
        array = np.asarray(static)
        if array.size == 0:
            array = array.astype(np.int32)  # `positions=[]` for an empty sequence
        is_integer = array.dtype == object or np.issubdtype(array.dtype, np.integer)
        if array.dtype == object:
            is_integer = all(is_int(v) for v in array.ravel())
        if not is_integer:
            raise invalid(name, f"integer positions in [{low}, 2**31)", _echo(value))
        if array.ndim not in ranks:
            raise invalid(
                name,
                f"a tensor of rank {' or '.join(map(str, ranks))}",
                f"<shape={array.shape}>",
            )
        bad = [int(v) for v in array.ravel() if not low <= int(v) < POSITION_LIMIT]
        if bad:
            raise invalid(name, f"positions in [{low}, 2**31) (int32)", bad[0])
        return ops.convert_to_tensor(array.astype(np.int32), "int32"), None
    dtype = _backend.dtype_name(value)
    if "int" not in dtype:
        raise invalid(name, f"integer positions in [{low}, 2**31)", _echo(value))
    if len(value.shape) not in ranks:
        raise invalid(
            name, f"a tensor of rank {' or '.join(map(str, ranks))}", _echo(value)
        )
    if dtype == "int32" and low == POSITION_MIN:
        return value, None
    ok = ops.greater_equal(
        value, ops.convert_to_tensor(max(low, 0) if "uint" in dtype else low, dtype)
    )
    if dtype not in ("int32", "int16", "int8", "uint8", "uint16"):
        ok = ops.logical_and(
            ok, ops.less(value, ops.convert_to_tensor(2**31 - 1, dtype) + 1)
        )
    _assert(ok, name, f"positions must be in [{low}, 2**31)")
    return ops.cast(value, "int32"), ok


def length_of(value, name="length"):
    """A sequence length: Python int `>= 0`, or an int scalar tensor."""
    if is_int(value):
        if not 0 <= value < POSITION_LIMIT:
            raise invalid(name, "an integer in [0, 2**31)", value)
        return int(value)
    tensor, ok = positions(name, value, low=0, ranks=(0,))
    static = _backend.static_value(tensor)
    return int(static) if static is not None else tensor


def end_ok(start, length):
    """Whether ``start + length <= 2**31`` without overflowing int32.

    Python ints give a Python bool; tensors give a boolean tensor.
    """
    if is_int(length) and length == 0:
        return True
    if is_int(start) and is_int(length):
        return start + length <= POSITION_LIMIT
    if not is_int(length):
        # A tensor, or a symbolic dimension (jax2tf) made into one.
        length = ops.convert_to_tensor(length, "int32")
    # start <= 2**31 - length, written so that no term leaves int32.
    return ops.less_equal(start, (POSITION_LIMIT - 1) - (length - 1))


def range_start(start_index, length, *, low):
    """Checks `start_index` (scalar or ``[B]``) for rows ``start + [0, length)``.

    Returns:
        ``(int32 start, ok)`` as `positions` does; `ok` also covers the end.
    """
    start, ok = positions("start_index", start_index, low=low, ranks=(0, 1))
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
    """`batch_size` of `positional_encoding`: a positive int, static or not."""
    if is_int(value):
        return positive_int("batch_size", value)
    if value is None or isinstance(value, (bool, float, str)):
        raise invalid("batch_size", "a positive integer", value)
    tensor, _ = positions("batch_size", value, low=1, ranks=(0,))
    static = _backend.static_value(tensor)
    if static is None and "int" in _backend.dtype_name(value):
        return tensor
    return positive_int("batch_size", int(static))


def sequence_axis(value):
    if not is_int(value):
        raise invalid("sequence_axis", "an int", value)
    return int(value)


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
    return depth(width), normal


def floating_inputs(inputs, merge):
    dtype = _backend.dtype_name(inputs)
    if merge is not None and not backend.is_float_dtype(dtype):
        raise invalid(
            "inputs",
            f"a floating tensor with merge={merge!r}",
            f"<tensor dtype={dtype}>",
        )


def _same_batch(name, tensor, inputs):
    batch, given = inputs.shape[0], tensor.shape[0]
    if batch is not None and given is not None and batch != given:
        raise invalid(
            name,
            f"one row per example: batch {batch} of `inputs`",
            f"<shape={tuple(tensor.shape)}>",
        )


def call_start(start_index, inputs, length, low):
    """`start_index` of a layer call: ``(int32 start, ok)``."""
    start, ok = range_start(start_index, length, low=low)
    if len(start.shape) == 1:
        _same_batch("start_index", start, inputs)
    return start, ok


def call_positions(value, inputs, axis, low):
    """`positions` of a layer call: ``(int32 positions, ok)``."""
    positions_, ok = positions("positions", value, low=low, ranks=(1, 2))
    length, given = inputs.shape[axis], positions_.shape[-1]
    if length is not None and given is not None and length != given:
        raise invalid(
            "positions",
            f"{length} positions per sequence, the length of `inputs`",
            f"<shape={tuple(positions_.shape)}>",
        )
    if len(positions_.shape) == 2:
        _same_batch("positions", positions_, inputs)
    return positions_, ok
