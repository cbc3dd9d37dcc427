"""The positions of one call, parsed once at the boundary into `Positions`.

Every entry point (a layer call, the table functions, `rotary_cos_sin`, the
exported signatures) turns what it was given (a `start_index`, explicit
`positions`, a length) into one immutable `Positions`; the row sources and
the engine read it and never inspect the raw arguments again.

Integers are checked against the int32 range **before** any cast, so no
value ever wraps into a plausible position. A value known now (Python,
numpy, an eager tensor, a TF constant) that cannot be encoded raises a
`ValueError` naming the argument. A value only known at run time yields a
`Check` (a boolean tensor and a message); `Positions.guard` hands the
checks to `_backend.guard`, which applies the one failure policy.
"""

import dataclasses
from typing import Any, NamedTuple

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks.arguments import (
    MAX_LENGTH,
    POSITION_LIMIT,
    POSITION_MIN,
    invalid,
    is_int,
)
from keras_posenc._checks.echo import shortened

_END_MESSAGE = (
    "Received an invalid value for `start_index`: start_index + length must be <= 2**31"
)
# Dtypes whose cast to int32 cannot wrap.
_NARROW_INTS = ("int32", "int16", "int8", "uint16", "uint8")


class Check(NamedTuple):
    """A run-time condition: `ok` (boolean tensor) must hold, else `message`."""

    ok: Any
    message: str


@dataclasses.dataclass(frozen=True)
class Positions:
    """Positions to encode: a span ``start + [0, length)`` or explicit values.

    Attributes:
        start: the first position, scalar or ``[B]`` (a span); `None` for
            explicit positions.
        length: the span's length: an int when known now, else an int32
            scalar tensor (or a symbolic dimension under jax2tf).
        values: explicit positions; `None` for a span.
        known: `start` (span) or `values` when known now: a Python int for
            one position given as one (no numpy: `torch.compile` would trace
            it as a tensor), else a numpy int32 array; `start` or `values`
            is then that value, not a tensor.
        checks: run-time `Check`s (empty when every value was checked now).
    """

    start: Any = None
    length: Any = None
    values: Any = None
    known: Any = None
    checks: tuple = ()

    @property
    def is_span(self):
        return self.values is None

    @property
    def batched_span(self):
        """A span with one start per example: rows ``[B, length, C]``."""
        return self.is_span and len(getattr(self.start, "shape", ())) == 1

    @property
    def known_range(self):
        """``(first, end)`` of a shared span known now, else `None`."""
        if self.is_span and self.known is not None and _is_int(self.length):
            if _is_int(self.known) or self.known.ndim == 0:
                return int(self.known), int(self.known) + self.length
        return None

    def known_values(self):
        """`as_values()` as a numpy array when known now, else `None`."""
        if self.known is None:
            return None
        known = np.asarray(self.known)
        if not self.is_span:
            return known
        if not _is_int(self.length):
            return None
        steps = np.arange(self.length, dtype=np.int64)
        return known[..., None] + steps if known.ndim else known + steps

    def as_values(self):
        """The positions as an int32 tensor (a span expanded, per example)."""
        known = self.known_values()
        if known is not None:
            return ops.convert_to_tensor(known.astype(np.int32), "int32")
        if not self.is_span:
            return self.values
        start, steps = self.start, ops.arange(self.length, dtype="int32")
        if self.batched_span:
            return start[:, None] + steps[None, :]
        return start + steps

    def guard(self, rows):
        """`rows` under the failure policy of this call's run-time checks."""
        return _backend.guard(rows, self.checks)


def _is_int(value):
    """`arguments.is_int`, without a call for a plain Python int (the common
    case: a start, a length from a shape), so a parse stays in this module."""
    return type(value) is int or is_int(value)


def known(name, value):
    """`_backend.static_value(value)`, refusing a ragged list by `name`
    (numpy's own message names nothing)."""
    try:
        return _backend.static_value(value)
    except ValueError:  # an inhomogeneous list or tuple
        expected = "a rectangular array (every row of one length), not ragged lists"
        raise invalid(name, expected, shortened(value)) from None


def _echo(value, static):
    """The value to show in a message: numbers when known (`static`, its
    value already read), else the tensor's spec."""
    if static is None:
        return f"<tensor dtype={_backend.dtype_name(value)} shape={tuple(value.shape)}>"
    static = np.asarray(static)
    if static.dtype.kind in "mM":  # a time: show it as one, not as its count
        return repr(value)
    if static.size > 16:
        return f"<array dtype={static.dtype} shape={static.shape}>"
    return static.tolist() if static.ndim else static.item()


def _ranks(ranks):
    return f"a tensor of rank {' or '.join(map(str, ranks))}"


def integers(name, value, *, low, ranks, expected=None, high=POSITION_LIMIT - 1):
    """Integers in ``[low, 2**31)`` as int32, checked before the cast.

    Args:
        name: the argument's name, for messages.
        value: Python int(s), numpy array or integer tensor.
        low: smallest value allowed.
        ranks: allowed ranks.
        expected: what messages say is allowed, when the values are not
            positions (a length, a batch size).

    Returns:
        ``(values, known, checks)``: when the values are known now, `values`
        and `known` are the same Python int (one given as a Python or numpy
        int) or numpy int32 array (every value checked, `checks` empty);
        otherwise `values` is an int32 tensor, `known` is
        `None` and `checks` hold the run-time conditions.
    """
    kind = expected or f"integer positions in [{low}, 2**31)"
    outside = expected or f"positions in [{low}, 2**31) (int32)"
    if type(value) is int and 0 in ranks:  # the common case, kept cheap
        if not low <= value <= high:
            raise invalid(name, outside, value)
        return value, value, ()
    if value is None or isinstance(value, (bool, float, str)):
        raise invalid(name, kind, value)
    # One read of the value (a numpy int too); everything after is numpy.
    static = known(name, value)
    if static is not None:
        array = _known_integers(name, static, value, kind, ranks)
        bad = _first_outside(array, low, high)
        if bad is not None:
            raise invalid(name, outside, bad)
        if array.ndim == 0:  # one position, as a Python int (see `Positions`)
            return int(array), int(array), ()
        array = array.astype(np.int32)
        return array, array, ()
    return _traced_integers(
        name, value, low=low, high=high, ranks=ranks, kind=kind, expected=expected
    )


def _traced_integers(name, value, *, low, high, ranks, kind, expected):
    """`integers` of a tensor whose value is only known at run time."""
    dtype = _backend.dtype_name(value)
    if "int" not in dtype:
        raise invalid(name, kind, _echo(value, None))
    if len(value.shape) not in ranks:
        raise invalid(name, _ranks(ranks), _echo(value, None))
    if dtype == "int32" and low == POSITION_MIN:
        return value, None, ()
    as_int32 = ops.cast(value, "int32")
    ok = ops.greater_equal(as_int32, low)
    if high < POSITION_LIMIT - 1:
        ok = ops.logical_and(ok, ops.less_equal(as_int32, high))
    if dtype not in _NARROW_INTS:
        # The cast wraps modulo 2**32. Casts are the only ops applied to the
        # wide value (Keras compares uint64 after a lossy promotion): the
        # cast kept the value iff both round to the same float32, since a
        # wrapped value is at least 2**32 away on the other side of zero.
        kept = ops.equal(ops.cast(value, "float32"), ops.cast(as_int32, "float32"))
        ok = ops.logical_and(ok, kept)
    message = (
        f"expected {expected}" if expected else f"positions must be in [{low}, 2**31)"
    )
    return (
        as_int32,
        None,
        (Check(ok, f"Received an invalid value for `{name}`: {message}"),),
    )


def _known_integers(name, static, value, kind, ranks):
    """A known value as a numpy integer (or object) array of an allowed rank."""
    array = np.asarray(static)
    if array.size == 0:
        array = array.astype(np.int32)  # `positions=[]` for an empty sequence
    if array.dtype == object:
        integral = all(_is_int(v) for v in array.ravel())
    else:
        integral = array.dtype.kind in "iu"  # not timedelta64 ("m")
    if not integral:
        raise invalid(name, kind, _echo(value, static))
    if array.ndim not in ranks:
        raise invalid(name, _ranks(ranks), _echo(value, static))
    return array


def _first_outside(array, low, high):
    """The first value outside ``[low, high]`` as a Python int, else `None`."""
    if array.dtype == object:  # Python ints, possibly beyond 64 bits
        return next((int(v) for v in array.ravel() if not low <= v <= high), None)
    outside = array[(array < low) | (array > high)]
    return int(outside.flat[0]) if outside.size else None


def size(name, value, *, low):
    """A size (a length, a batch size): an int, or a scalar tensor and checks.

    A Python int must be in ``[low, MAX_LENGTH]``. A tensor is checked now
    when its value is known; otherwise (TF graphs only: JAX and torch sizes
    are static) it is returned with its run-time checks.
    """
    expected = f"an integer in [{low}, {MAX_LENGTH}]"
    if _is_int(value):
        if not low <= value <= MAX_LENGTH:
            raise invalid(name, expected, value)
        return int(value), ()
    if (
        _backend.NAME != "tensorflow"
        and _backend.is_tensor(value)
        and _backend.static_value(value) is None
    ):
        raise invalid(
            name,
            f"{expected}, known when traced (under `jax.jit`, pass it as a "
            "static argument)",
            _echo(value, None),
        )
    tensor, known, checks = integers(
        name, value, low=low, ranks=(0,), expected=expected
    )
    if known is not None:
        return int(known), ()
    return ops.maximum(tensor, low), checks


def span(start_index, length, *, low, ranks=(0, 1), length_checks=()):
    """`Positions` for ``start_index + [0, length)``.

    Args:
        start_index: the first position, a scalar or one per example.
        length: an int, or an int32 scalar tensor (or symbolic dimension)
            known to be a valid length.
        low: smallest position allowed.
        ranks: allowed ranks of `start_index`.
        length_checks: run-time checks that came with `length`.
    """
    start, known, checks = integers("start_index", start_index, low=low, ranks=ranks)
    checks += tuple(length_checks)
    if known is None or _is_int(known):
        largest = known
    else:
        largest = int(known.max()) if known.size else low
    if largest is not None and _is_int(length):
        if length and largest + length > POSITION_LIMIT:
            raise invalid(
                "start_index",
                f"start_index + length <= 2**31 (positions are int32); length={length}",
                _echo(start_index, known),
            )
    elif largest is None or largest > 1:
        checks += (_end_check(start, length),)
    return Positions(start=start, length=length, known=known, checks=checks)


def _end_check(start, length):
    """``start + length <= 2**31``, written so that no term leaves int32."""
    if _is_int(length):
        ok = ops.less_equal(start, (POSITION_LIMIT - 1) - max(length - 1, 0))
    else:
        # A tensor, or a symbolic dimension (jax2tf) made into one.
        length = ops.convert_to_tensor(length, "int32")
        last = (POSITION_LIMIT - 1) - (ops.maximum(length, 1) - 1)
        ok = ops.logical_or(ops.equal(length, 0), ops.less_equal(start, last))
    return Check(ok, _END_MESSAGE)


def explicit(name, values, *, low, ranks):
    """`Positions` for explicit integer positions."""
    values, known, checks = integers(name, values, low=low, ranks=ranks)
    return Positions(values=values, known=known, checks=checks)


_ANY_RANK = tuple(range(9))
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def reals(name, value):
    """Real positions (timesteps, float ids) of any rank, parsed once.

    Integers go through `integers` (int32, checked before the cast). Floats
    become float32: 16-bit ones exactly, float64 ones (numpy's default)
    rounded once; known values must be finite and below 2**31 in magnitude
    (a `ValueError` naming `name`), traced ones get a `Check` (NaN under
    XLA, as the fractional engine also gives).

    Returns:
        ``(values, checks)``: an int32 or float32 tensor, and run-time checks.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        raise invalid(name, "real numbers (int or float)", value)
    if ops.is_tensor(value) and _backend.dtype_name(value) in _FLOATS[:2]:
        value = ops.cast(value, "float32")  # exact; torch has no bf16 numpy
    static = known(name, value)
    if static is not None:
        array = np.asarray(static)
        if array.dtype.kind in "iuO" or isinstance(value, int):
            values, _, _ = integers(name, value, low=POSITION_MIN, ranks=_ANY_RANK)
            return ops.convert_to_tensor(np.asarray(values, np.int32)), ()
        if array.dtype.kind != "f" and array.dtype.name not in _FLOATS:
            raise invalid(name, "real numbers (int or float)", _echo(value, static))
        array = array.astype(np.float32)
        bad = array[~(np.abs(array) < 2.0**31)]
        if bad.size:
            raise invalid(name, "finite numbers below 2**31 in magnitude", bad.flat[0])
        if ops.is_tensor(value):  # stays on its device
            return ops.cast(value, "float32"), ()
        return ops.convert_to_tensor(array), ()
    dtype = _backend.dtype_name(value)
    if dtype not in _FLOATS:
        values, _, checks = integers(name, value, low=POSITION_MIN, ranks=_ANY_RANK)
        return values, checks
    values = ops.cast(value, "float32")
    ok = ops.less(ops.abs(values), 2.0**31)  # False for NaN
    expected = "expected finite numbers below 2**31"
    return values, (Check(ok, f"Received an invalid value for `{name}`: {expected}"),)


def in_call(inputs, axis, start_index, positions, *, low, position_ranks=(1, 2)):
    """`Positions` of a layer call on `inputs`, whose sequence axis is `axis`.

    Explicit `positions` (``[length]`` or ``[batch, length]``) override
    `start_index` (a scalar or ``[batch]``); both must fit `inputs`: one
    position per step of the sequence axis, one row per example. A size-1
    argument is never silently broadcast over the inputs.
    """
    if positions is not None:
        parsed = explicit("positions", positions, low=low, ranks=position_ranks)
        values = parsed.values
        per_step = fits(values, -1, inputs, axis, "positions", _per_step(inputs, axis))
        per_example = ()
        if len(values.shape) == 2:
            per_example = fits(values, 0, inputs, 0, "positions", _per_example(inputs))
        return dataclasses.replace(
            parsed, checks=parsed.checks + per_step + per_example
        )
    length = inputs.shape[axis]
    if length is None:
        length = ops.shape(inputs)[axis]  # known when the graph runs
    parsed = span(start_index, length, low=low)
    if not parsed.batched_span:
        return parsed
    per_example = fits(parsed.start, 0, inputs, 0, "start_index", _per_example(inputs))
    return dataclasses.replace(parsed, checks=parsed.checks + per_example)


def shifted(name, value, offset):
    """`start_index` or `positions` moved by a model's `position_offset`
    (XGLM's 2), before they are parsed, never wrapped: ``(value, checks)``.

    A plain int stays one; numpy integers are shifted exactly (a value past
    the int32 range stays past it, and is refused when parsed); a tensor of
    8 or 16 bits is widened to int32 first, a wider one gets a run-time
    `Check` that the shifted value is still an int32 position.
    """
    if not offset or value is None:
        return value, ()
    if _is_int(value):
        return int(value) + offset, ()
    if isinstance(value, (bool, float, str)):
        return value, ()  # refused by name when parsed
    if ops.is_tensor(value) or _backend.is_tensor(value):
        dtype = _backend.dtype_name(value) or ""
        if dtype in ("int8", "int16", "uint8", "uint16"):
            return ops.cast(value, "int32") + offset, ()
        if dtype[:3] not in ("int", "uin"):
            return value, ()  # refused by name when parsed
        if offset < 0 and dtype[0] == "u":
            # Wraps past the int32 range, where the parse refuses it.
            return value + ops.cast(offset, dtype), ()
        if offset > 0:
            bound = POSITION_LIMIT - 1 - offset
            fits = ops.less_equal(value, ops.cast(bound, dtype))
            what = f"at most {bound}"
        else:
            bound = -POSITION_LIMIT - offset
            fits = ops.greater_equal(value, ops.cast(bound, dtype))
            what = f"at least {bound}"
        message = (
            f"Received an invalid value for `{name}`: expected positions of "
            f"{what}, which position_offset={offset} keeps in int32"
        )
        shifted_value = ops.where(fits, value + ops.cast(offset, dtype), value)
        return shifted_value, (Check(ops.all(fits), message),)
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        return value, ()
    wide = array.astype(object) + offset  # Python ints: exact, never wrapped
    return np.asarray(wide, np.int64) if array.size and all(
        -(2**63) <= int(v) < 2**63 for v in wide.ravel()
    ) else array, ()


def from_token_ids(ids, padding_id, start_index):
    """fairseq's positions of token ids ``[batch, length]`` (`make_positions`).

    ``(cumsum(ids != padding_id, axis=1) + start_index) * (ids !=
    padding_id) + padding_id``: each row counts its own tokens from
    ``padding_id + 1`` (a left-padded row starts later), padding tokens
    get ``padding_id`` (the table's zero row), and `start_index` (a cache
    length, scalar or ``[batch]``) continues the count.

    Returns:
        The `Positions` (explicit values ``[batch, length]``, int32).
    """
    dtype = _backend.dtype_name(ids)
    if len(ids.shape) != 2 or dtype is None or dtype[:3] not in ("int", "uin"):
        shape = f"<shape={tuple(ids.shape)} dtype={dtype}>"
        raise invalid(
            "inputs",
            "integer token ids [batch, length] with positions_from_ids=True",
            shape,
        )
    # The last position, start + length + padding_id, must stay in int32.
    length = ids.shape[1]
    high = POSITION_LIMIT - 1 - padding_id - (length or 0)
    expected = (
        f"a cache length in [0, {high}] (start_index + length + padding_id < 2**31)"
    )
    start, _, checks = integers(
        "start_index", start_index, low=0, ranks=(0, 1), high=high, expected=expected
    )
    start = ops.convert_to_tensor(start, "int32")
    if length is None:  # known when the graph runs
        room = POSITION_LIMIT - 1 - padding_id - ops.shape(ids)[1]
        ok = ops.all(ops.less_equal(start, room))
        message = (
            "Received an invalid value for `start_index`: start_index + length "
            f"+ padding_id ({padding_id}) must be < 2**31"
        )
        checks += (Check(ok, message),)
    if len(start.shape) == 1:
        checks += fits(start, 0, ids, 0, "start_index", _per_example(ids))
        start = start[:, None]
    tokens = ops.cast(ops.not_equal(ids, padding_id), "int32")
    counts = ops.cumsum(tokens, axis=1) + start
    return Positions(values=counts * tokens + padding_id, checks=checks)


def fits(tensor, axis, inputs, input_axis, name, expected):
    """Whether ``tensor.shape[axis]`` equals ``inputs.shape[input_axis]``.

    Raises now when both sizes are known; otherwise returns a run-time
    `Check` of `tensor`'s shape (a size-1 argument must not broadcast).
    """
    size, given = inputs.shape[input_axis], tensor.shape[axis]
    if size is not None and given is not None:
        if size != given:
            raise invalid(name, expected, f"<shape={tuple(tensor.shape)}>")
        return ()
    same = ops.equal(ops.shape(tensor)[axis], ops.shape(inputs)[input_axis])
    message = f"Received an invalid value for `{name}`: expected {expected}"
    return (Check(ops.broadcast_to(same, ops.shape(tensor)), message),)


def _per_step(inputs, axis):
    length = inputs.shape[axis]
    if length is None:
        return "one position per step of the sequence axis of `inputs`"
    return f"{length} positions per sequence, the length of `inputs`"


def _per_example(inputs):
    batch = inputs.shape[0]
    if batch is None:
        return "one row per example of `inputs`"
    return f"one row per example: batch {batch} of `inputs`"
