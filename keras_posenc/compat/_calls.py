"""keras-hub's call arguments as the exact layers take them.

keras-hub passes `start_index` and `positions` as integers or as floats
(its own positions are float32). A float that holds a whole number is that
integer; any other is refused by name when its value is known, and under
the package's one failure policy (`_backend.guard`: a TF graph assertion,
NaN rows) when it is only known at run time. Nothing is rounded.
"""

import numpy as np
from keras import backend, ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions

FRACTIONAL = "integral positions (a fractional position is never rounded)"


def _known_integral(name, known):
    """A known float value as integers, or the error naming it."""
    if not np.all(np.isfinite(known)) or np.any(known != np.floor(known)):
        echo = known.tolist()
        if known.size > 16:
            echo = f"<array dtype={known.dtype} shape={known.shape}>"
        raise _arguments.invalid(name, FRACTIONAL, echo)
    if np.any(np.abs(known) >= 2.0**63):
        return known  # the exact layer names it as outside the int32 range
    return known.astype(np.int64) if known.ndim else int(known)


def integral(name, value):
    """`value` (positions or a start) as integers, never rounded.

    Returns:
        ``(value, ok)``: `ok` is `None`, or for a traced float value the
        boolean tensor (shaped as the value) of the entries that are whole
        numbers in the int32 range; the others are replaced by 0.
    """
    if value is None or isinstance(value, (bool, str)):
        raise _arguments.invalid(name, "integral positions", value)
    known = _positions.known(name, value)
    if known is not None:
        known = np.asarray(known)
        if known.dtype == object or not np.issubdtype(known.dtype, np.floating):
            return value, None
        return _known_integral(name, known), None
    if not backend.is_float_dtype(_backend.dtype_name(value)):
        return value, None
    limit = float(_arguments.POSITION_LIMIT)
    ok = ops.logical_and(
        ops.equal(value, ops.floor(value)),
        ops.logical_and(ops.greater_equal(value, -limit), ops.less(value, limit)),
    )
    safe = ops.where(ok, value, ops.zeros_like(value))
    return ops.cast(safe, "int32"), ok


def _shared(positions, ok, batch):
    """keras-hub broadcasts `[1, L]` positions over the batch: so do we."""
    if len(positions.shape) != 2:
        return positions, ok
    if positions.shape[0] == 1:
        return positions[0], None if ok is None else ok[0]
    if positions.shape[0] is None and batch is not None:
        shape = (batch, ops.shape(positions)[1])
        positions = ops.broadcast_to(positions, shape)
        ok = None if ok is None else ops.broadcast_to(ok, shape)
    return positions, ok


def _guarded(out, ok, seq, name):
    """`out` under the failure policy for the traced positions `ok`."""
    if ok is None:
        return out
    message = f"Received an invalid value for `{name}`: {FRACTIONAL} in int32"
    if name == "start_index":  # scalar, or one per example
        return _backend.guard(out, [(ops.reshape(ok, (-1,)), message)])
    if len(ok.shape) == 1:
        ok = ops.expand_dims(ok, 0)
    # The guard takes conditions on leading axes: positions on (batch, seq).
    moved = _backend.guard(ops.moveaxis(out, seq, 1), [(ok, message)])
    return ops.moveaxis(moved, 1, seq)


def exact_call(exact, inputs, start_index, positions, seq):
    """``exact(inputs, ...)`` with keras-hub's `start_index` or `positions`.

    `seq` is the sequence axis of `inputs` (a non-negative int).
    """
    if positions is None:
        start, ok = integral("start_index", start_index)
        return _guarded(exact(inputs, start_index=start), ok, seq, "start_index")
    positions, ok = integral("positions", positions)
    if not hasattr(positions, "shape"):
        positions = np.asarray(positions)
    batch = inputs.shape[0]
    batch = ops.shape(inputs)[0] if batch is None else batch
    positions, ok = _shared(positions, ok, batch)
    return _guarded(exact(inputs, positions=positions), ok, seq, "positions")
