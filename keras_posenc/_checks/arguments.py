"""Checks of plain arguments (numbers, names, dtypes), with Keras-style messages.

Every check is a verb that returns the normalised value or raises
``Received an invalid value for `name`, expected ... Received: name=value``,
as Keras's own layers do, so a bad argument is refused where it is given
(constructor, then `build`), before any work. Tensors and positions are
parsed in `_checks.positions`.
"""

import math
import numbers
import os
import sys

# Positions are int32 end to end.
POSITION_MIN = -(2**31)
POSITION_LIMIT = 2**31
# Most rows in one call or table: the engine's coarse rows (multiples of 64,
# plus one block for any offset) must stay int32 positions.
MAX_LENGTH = POSITION_LIMIT - 128
# Widest encoding accepted: bounds the host-side constant work (~1 s).
MAX_DEPTH = 2**16
# Largest lookup table built without asking; raise it with this variable.
TABLE_BYTES_VARIABLE = "KERAS_POSENC_MAX_TABLE_BYTES"
DEFAULT_MAX_TABLE_BYTES = 2**30


def invalid(name, expected, value):
    """The `ValueError` for argument `name`: what was expected, what came."""
    # Without numpy imported there is no numpy scalar (and the command line
    # prints its help without importing numpy).
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        value = value.item()  # `3`, not `np.int64(3)`
    return ValueError(
        f"Received an invalid value for `{name}`, expected {expected}. "
        f"Received: {name}={value!r}"
    )


def is_int(value):
    """Whether `value` is a Python or numpy integer (not a bool, not a time)."""
    if type(value) is int:  # the common case, without the ABC check
        return True
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        return False
    # numpy makes timedelta64 a signed integer: 5 days is not position 5.
    numpy = sys.modules.get("numpy")
    return numpy is None or not isinstance(value, numpy.timedelta64)


def typed_key(value):
    """`value` as a cache key that tells types apart, tuples element by element.

    `True == 1` and `8 == 8.0`, with equal hashes: a cache of checked
    arguments keyed on the values would accept `1` after `True` where it
    refuses it fresh. Raises TypeError for unhashable values, as a cache does.
    """
    if isinstance(value, tuple):
        return tuple, tuple(typed_key(v) for v in value)
    hash(value)
    return type(value), value


def check_positive_int(name, value, limit=None):
    if not is_int(value) or value <= 0 or (limit is not None and value > limit):
        bound = "" if limit is None else f" <= {limit}"
        raise invalid(name, f"a positive integer{bound}", value)
    return int(value)


def check_non_negative_int(name, value):
    if not is_int(value) or value < 0:
        raise invalid(name, "a non-negative integer", value)
    return int(value)


def check_depth(value, name="depth"):
    return check_positive_int(name, value, MAX_DEPTH)


def check_wavelength(value, name="max_wavelength"):
    """A finite float > 0 (Python, numpy, or an int too large for a float)."""
    return check_number_above(name, value, 0.0)


def check_number_above(name, value, low, echo=None):
    """`value` as a finite float > `low` (a Python or numpy real, not a bool;
    an int too large for a float is refused like infinity); `echo`: what the
    message shows of it (the value itself by default)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        number = float(value) if ok else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number <= low:
        raise invalid(
            name, f"a finite number > {low:g}", value if echo is None else echo
        )
    return number


def check_choice(name, value, allowed):
    # `in` would compare arrays elementwise: match strings and None only.
    if not any(value is a or (isinstance(value, str) and value == a) for a in allowed):
        raise invalid(name, f"one of {allowed}", value)
    return value


def check_bool(name, value):
    if not isinstance(value, bool):
        raise invalid(name, "a bool", value)
    return value


def check_int(name, value):
    if not is_int(value):
        raise invalid(name, "an int", value)
    return int(value)


def host_array(value):
    """`value` as a numpy array on the host (a tensor on any device too,
    explicitly); a ragged sequence becomes an array holding `None`, which
    its caller refuses by name."""
    # Imported here: the command line reads this module without Keras.
    import numpy as np
    from keras import ops

    if ops.is_tensor(value):
        value = ops.convert_to_numpy(value)
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, (bool, np.bool_)) for v in value):
            # numpy reads [True, 0.1] as [1.0, 0.1]: kept as objects, which
            # the caller refuses (a bool is not a number here).
            return np.asarray(value, dtype=object)
    try:
        return np.asarray(value)
    except ValueError:  # ragged
        return np.asarray(None)


def array_echo(array):
    """How a message shows `array`: its values, or its shape when long."""
    return array.tolist() if array.size <= 16 else f"<array shape={array.shape}>"


def check_floating_dtype(value, name="dtype"):
    # Imported here: the command line reads MAX_DEPTH before importing Keras.
    from keras import backend

    try:
        dtype = backend.standardize_dtype(value)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or not backend.is_float_dtype(dtype):
        raise invalid(name, "a floating dtype such as 'float32'", value)
    return dtype


def bytes_from_environment(variable, default):
    """A number of bytes from environment `variable` (unset or empty: `default`).

    Raises a `ValueError` naming the variable unless it is a non-negative
    integer.
    """
    setting = os.environ.get(variable, "").strip()
    if not setting:
        return default
    try:
        value = int(setting)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"The environment variable {variable} must be a non-negative "
            f"number of bytes. Received: {variable}={setting!r}"
        )
    return value


def max_table_bytes():
    """The lookup-table limit: `KERAS_POSENC_MAX_TABLE_BYTES`, else 1 GiB."""
    return bytes_from_environment(TABLE_BYTES_VARIABLE, DEFAULT_MAX_TABLE_BYTES)


def check_table_bytes(max_length, width, name="max_length"):
    """Refuses a lookup table of `max_length` rows of `width` floats past the
    limit (`check_lookup_bytes`)."""
    needed = (max_length + 1) * width * 4
    check_lookup_bytes(needed, name, max_length, f"at depth {width}")


# The bytes of the lookup tables that living layers hold (owner id ->
# bytes): `max_table_bytes()` bounds them all together, so a `.keras` file
# of several lookup layers, each under it, is bounded in all as well.
_HELD_TABLES: dict = {}


def hold_table(owner, nbytes):
    """Counts `nbytes` of lookup tables against the limit while `owner` lives."""
    import weakref

    key = id(owner)
    _HELD_TABLES[key] = _HELD_TABLES.get(key, 0) + nbytes
    weakref.finalize(owner, _HELD_TABLES.pop, key, None)


def held_table_bytes():
    """The bytes of the lookup tables that living layers hold now."""
    return sum(_HELD_TABLES.values())


def check_lookup_bytes(needed, name, value, detail):
    """Refuses lookup tables of `needed` bytes that would take the tables of
    living layers past `max_table_bytes()` (before any allocation).

    Args:
        needed: int. The bytes the new tables need.
        name, value: the argument that sized them, for the message.
        detail: what they are, for the message (``"at depth 64"``).
    """
    limit = max_table_bytes()
    held = held_table_bytes()
    if held and limit - held < needed <= limit:
        import gc

        # Layers in reference cycles: gone, not yet collected (only when
        # they decide: a collection can take a second in a large process).
        gc.collect()
        held = held_table_bytes()
    if needed > limit - held:
        living = f"; the lookup tables of living layers hold {held} bytes"
        raise invalid(
            name,
            f"a table of at most {limit} bytes (set {TABLE_BYTES_VARIABLE} to "
            f"allow more); this one needs {needed} bytes {detail}"
            + (living if held else ""),
            value,
        )
