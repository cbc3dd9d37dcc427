"""Argument validation shared by the table functions and the layer.

Every check raises as early as possible with the Keras-style message
``Received an invalid value for `name`, expected ... Received: name=value``.
"""

import math
import numbers
import os

import tensorflow as tf

LAYOUTS = ("interleaved", "concatenated")
MODES = ("compute", "lookup")
MERGES = ("add", "concat", None)
OUT_OF_RANGE = ("error", "extend")

# Positions are int32 end to end; the last supported position is 2**31 - 1.
POSITION_LIMIT = 2**31


def invalid(name, expected, value):
    return ValueError(
        f"Received an invalid value for `{name}`, expected {expected}. "
        f"Received: {name}={value!r}"
    )


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name, value):
    if not _is_int(value) or value <= 0:
        raise invalid(name, "a positive integer", value)
    return int(value)


def non_negative_int(name, value):
    if not _is_int(value) or value < 0:
        raise invalid(name, "a non-negative integer", value)
    return int(value)


def wavelength(value):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise invalid("max_wavelength", "a finite number > 0", value)
    return float(value)


def choice(name, value, allowed):
    if value not in allowed:
        raise invalid(name, f"one of {allowed}", value)
    return value


def floating_dtype(value):
    try:
        dtype = tf.as_dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or not dtype.is_floating:
        raise invalid("dtype", "a floating dtype such as 'float32'", value)
    return dtype


def refuse_to_replace(path, overwrite):
    """Raises `FileExistsError` if `path` exists and `overwrite` is false."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(
            f"Refusing to replace the existing path {os.path.abspath(path)!r}. "
            "Pass overwrite=True (or --overwrite) to replace it."
        )


def position_range(start, length):
    """Checks Python-int `start_index` and `length` against the int32 limit."""
    if start + length > POSITION_LIMIT:
        raise invalid(
            "start_index",
            f"start_index + length <= 2**31 (positions are int32); length={length}",
            start,
        )
