"""Where a layer's rows come from: computed per call, or a lookup table.

A row source is called with one `_positions.Positions` and returns the
float32 rows: ``[length, C]`` for a shared span, ``[B, length, C]`` for one
start per example, ``values.shape + [C]`` for explicit positions. Both
sources give the same bits (the table is built by the same engine), and
both end with `Positions.guard`, the one failure policy for run-time
checks.
"""

import dataclasses

from keras import ops

from keras_posenc import _arguments, _backend, _engine
from keras_posenc._phase_constants import FINE_ROWS


def decoding_range(positions):
    """``(first, end)`` of an eager span of at most 64 known positions, or `None`.

    Such a call (a decoding step) reads rows from the encoder's cached block
    (`_engine.Encoder.block`) instead of running the engine.
    """
    known_range = positions.known_range
    if known_range and 0 < known_range[1] - known_range[0] <= FINE_ROWS:
        if _backend.executing_eagerly():
            return known_range
    return None


def kept_range(positions, encoder):
    """``(first, end)`` of an eager span of known positions whose rows
    `encoder` keeps (`_engine.Encoder.keeps`: a decoding step, or a prompt
    that every layer asks for in turn), or `None`."""
    known_range = positions.known_range
    if known_range and encoder.keeps(*known_range) and _backend.executing_eagerly():
        return known_range
    return None


class ComputedRows:
    """Rows computed at every call by the exact engine: no length limit.

    Args:
        encoder: an `_engine.Encoder`.
    """

    def __init__(self, encoder):
        self.encoder = encoder

    def __call__(self, positions):
        kept = kept_range(positions, self.encoder)
        if kept is not None:
            return self.encoder.recent_rows(*kept)  # checked: no guard
        if positions.is_span and not positions.batched_span:
            rows = self.encoder.rows(positions.start, positions.length)
        else:
            rows = self.encoder.at(positions.as_values())
        return positions.guard(rows)


class LookupTable:
    """`max_length` rows built once, read by slicing or gathering.

    A position outside ``[0, max_length)`` is never a silently wrong row:
    with a `fallback` source its rows are computed there (exact); without
    one it raises (eagerly, or at trace time when known) or fails the
    run-time guard (a graph assertion; NaN rows under XLA and `jax.jit`).

    Args:
        encoder: an `_engine.Encoder` (builds the table).
        max_length: int. Rows of the table.
        fallback: a row source for positions outside the table, or `None`.
    """

    def __init__(self, encoder, max_length, fallback=None):
        _arguments.check_table_bytes(max_length, encoder.width)
        self.encoder, self.max_length, self.fallback = encoder, max_length, fallback
        with _backend.eager_scope():
            self.table = encoder.rows(ops.convert_to_tensor(0, "int32"), max_length)

    def message(self, position):
        return (
            f"Position {position} is out of range for the lookup table of "
            f"`max_length`={self.max_length} rows (positions must be in "
            "[0, max_length)). Raise `max_length`, use out_of_range='extend', "
            "or mode='compute'."
        )

    def __call__(self, positions):
        known_range = positions.known_range
        if known_range is not None:
            first, end = known_range
            if first < end and (first < 0 or end > self.max_length):
                return self._outside(first if first < 0 else end - 1, positions)
            step = decoding_range(positions)
            if step is not None:  # the encoder's kept block: the table's bits
                return self.encoder.recent_rows(*step)
            return positions.guard(self.table[first:end])
        values = positions.as_values()
        known = positions.known_values()
        if known is not None:
            outside = known[(known < 0) | (known >= self.max_length)]
            if outside.size:
                return self._outside(int(outside.flat[0]), positions)
            return positions.guard(ops.take(self.table, values, axis=0))
        inside = ops.logical_and(
            ops.greater_equal(values, 0), ops.less(values, self.max_length)
        )
        if self.fallback is not None:
            rows = ops.cond(
                ops.all(inside),
                lambda: ops.take(self.table, values, axis=0),
                lambda: self.fallback(dataclasses.replace(positions, checks=())),
            )
            return positions.guard(rows)
        # The call's own checks first: their message names the argument.
        rows = positions.guard(
            ops.take(self.table, ops.where(inside, values, 0), axis=0)
        )
        return _backend.guard(rows, [(inside, self.message("<runtime>"))])

    def _outside(self, position, positions):
        if self.fallback is None:
            raise ValueError(self.message(position))
        return self.fallback(positions)


def sinusoidal_rows(options, width):
    """The row source of a sinusoidal encoding of `width` columns.

    Args:
        options: a `SinusoidalOptions`.
        width: int. The encoding's width (`options.depth`, or the inputs').
    """
    encoder = _engine.sinusoidal_encoder(width, options.max_wavelength, options.layout)
    if options.mode == "compute":
        return ComputedRows(encoder)
    extend = ComputedRows(encoder) if options.out_of_range == "extend" else None
    return LookupTable(encoder, options.max_length, extend)


__all__ = [
    "ComputedRows",
    "LookupTable",
    "decoding_range",
    "kept_range",
    "sinusoidal_rows",
]
