"""Where a layer's rows come from: computed per call, or a lookup table.

A row source is called with one `_checks.positions.Positions` and returns the
float32 rows: ``[length, C]`` for a shared span, ``[B, length, C]`` for one
start per example, ``values.shape + [C]`` for explicit positions. Both
sources give the same bits (the table is built by the same engine), and
both end with `Positions.guard`, the one failure policy for run-time
checks.
"""

import dataclasses

from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._exact import engine as _engine
from keras_posenc._exact.phase_constants import FINE_ROWS


def decoding_range(positions, encoder):
    """``(first, end)`` of an eager span of at most 64 known positions, or `None`.

    Such a call (a decoding step) reads rows from the encoder's kept block
    (`_exact.engine.Encoder.block`) instead of running the engine.
    """
    known_range = positions.known_range
    if known_range and 0 < known_range[1] - known_range[0] <= FINE_ROWS:
        if not _backend.tracing() and encoder.keeps(*known_range):
            return known_range
    return None


def kept_range(positions, encoder):
    """``(first, end)`` of an eager span of known positions whose rows
    `encoder` keeps (`_exact.engine.Encoder.keeps`: a decoding step, or a prompt
    that every layer asks for in turn), or `None`."""
    known_range = positions.known_range
    if known_range and not _backend.tracing() and encoder.keeps(*known_range):
        return known_range
    return None


class ComputedRows:
    """Rows computed at every call by the exact engine: no length limit.

    Args:
        encoder: an `_exact.engine.Encoder`.
        pinned: bool. For function calls: not a user of the encoder's rows
            (a layer's row source is, and the rows it keeps go with the last
            one), and what it keeps stays when no layer uses them (within
            the budget).
    """

    def __init__(self, encoder, pinned=False):
        self.encoder, self.pinned = encoder, pinned
        if not pinned:
            encoder.slot.add_user(self)

    def __call__(self, positions, alone=False):
        """The rows of `positions`; with `alone` (they leave the package as
        they are) never a view of kept rows."""
        kept = kept_range(positions, self.encoder)
        if kept is not None:  # checked: no guard
            rows = self.encoder.recent_rows(*kept, pinned=self.pinned)
            return _backend.owned(rows) if alone else rows
        return positions.guard(self.rows_of(self.encoder, positions))

    @staticmethod
    def rows_of(encoder, positions):
        """The engine's rows of `positions`, computed now (no guard)."""
        if positions.is_span and not positions.batched_span:
            return encoder.rows(positions.start, positions.length)
        return encoder.at(positions.as_values())


class LookupTable:
    """`max_length` rows built once, read by slicing or gathering.

    A shared span is a slice (a dynamic slice when its start is only known
    at run time), anything else a gather. A position outside
    ``[0, max_length)`` is never a silently wrong row: with a `fallback`
    source its rows are computed there (exact); without one it raises
    (eagerly, or at trace time when known) or fails the run-time guard (a
    graph assertion; NaN rows under XLA and `jax.jit`).

    Args:
        encoder: an `_exact.engine.Encoder` (builds the table).
        max_length: int. Rows of the table.
        fallback: a row source for positions outside the table, or `None`.
        columns: what the table keeps of the engine's rows (a function of
            them, applied to the fallback's rows too), or `None` for the
            rows themselves.
        width: int. Columns of the table (defaults to the encoder's).
    """

    def __init__(self, encoder, max_length, fallback=None, columns=None, width=None):
        self.width = width or encoder.width
        _arguments.check_table_bytes(max_length, self.width)
        self.encoder, self.max_length = encoder, max_length
        self.fallback, self.columns = fallback, columns
        encoder.slot.add_user(self)
        with _backend.eager_scope():
            rows = encoder.rows(0, max_length)
            self.table = rows if columns is None else columns(rows)
        _arguments.hold_table(self, _backend.nbytes(self.table))

    def message(self, position):
        return (
            f"Position {position} is out of range for the lookup table of "
            f"`max_length`={self.max_length} rows (positions must be in "
            "[0, max_length)). Raise `max_length`, use out_of_range='extend', "
            "or mode='compute'."
        )

    def __call__(self, positions, alone=False):
        """The rows of `positions`; with `alone` never a view of the table."""
        known_range = positions.known_range
        if known_range is not None:
            first, end = known_range
            if first < end and (first < 0 or end > self.max_length):
                return self._outside(first if first < 0 else end - 1, positions, alone)
            step = None if self.columns else decoding_range(positions, self.encoder)
            if step is not None:  # the encoder's kept block: the table's bits
                rows = self.encoder.recent_rows(*step)
            elif _backend.embeds_constants():
                rows = self._computed(positions)
            else:
                rows = positions.guard(self.table[first:end])
            return _backend.owned(rows) if alone else rows
        known = positions.known_values()
        if known is not None:
            outside = known[(known < 0) | (known >= self.max_length)]
            if outside.size:
                return self._outside(int(outside.flat[0]), positions, alone)
            if _backend.embeds_constants():
                return self._computed(positions)
            values = positions.as_values()
            return positions.guard(ops.take(self.table, values, axis=0))  # a copy
        return self._at_runtime(positions)

    def _computed(self, positions):
        """The rows of positions known when traced, computed in the program.

        Under `jax.jit` the table would be embedded in every compiled
        program (a copy per input shape: 100 MiB per new length at
        (4500, 2048) under Keras's `predict`); the engine computes the same
        rows there instead. A run-time start still reads the table.
        """
        rows = ComputedRows.rows_of(self.encoder, positions)
        return rows if self.columns is None else self.columns(rows)

    def _at_runtime(self, positions):
        """Rows of positions known when the graph runs, under the guard."""
        sliced = (
            positions.is_span
            and not positions.batched_span
            and _arguments.is_int(positions.length)
            and positions.length <= self.max_length
        )
        if sliced:
            start, length = positions.start, positions.length
            inside = ops.logical_and(
                ops.greater_equal(start, 0),
                ops.less_equal(start, self.max_length - length),
            )
            # Clamped into the table (as XLA would); rows outside it fail the guard.
            first = ops.cast(ops.clip(start, 0, self.max_length - length), "int32")
            read = _backend.slice_rows(self.table, first, length)
            inside_rows = ops.broadcast_to(inside, (length,))
        else:
            values = positions.as_values()
            inside_rows = ops.logical_and(
                ops.greater_equal(values, 0), ops.less(values, self.max_length)
            )
            inside = ops.all(inside_rows)
            read = ops.take(self.table, ops.where(inside_rows, values, 0), axis=0)
        if self.fallback is not None:
            unchecked = dataclasses.replace(positions, checks=())
            if _backend.NAME == "torch":
                # Keras's torch `cond` is a Python `if` on a tensor: a graph
                # break under torch.compile (traced positions are torch's
                # only run-time ones). Both are computed, one selected.
                rows = ops.where(inside, read, self._fallback(unchecked))
            else:
                rows = ops.cond(inside, lambda: read, lambda: self._fallback(unchecked))
            return positions.guard(rows)
        # The call's own checks first: their message names the argument.
        rows = positions.guard(read)
        return _backend.guard(rows, [(inside_rows, self.message("<runtime>"))])

    def _fallback(self, positions, alone=False):
        rows = self.fallback(positions, alone)
        return rows if self.columns is None else self.columns(rows)

    def _outside(self, position, positions, alone=False):
        if self.fallback is None:
            raise ValueError(self.message(position))
        return self._fallback(positions, alone)


class ConventionRows:
    """A row source with a published model's padding row and odd column.

    fairseq's tables (M2M100, NLLB, XGLM, Speech2Text, ...) hold zeros in
    the row of the padding id and, for an odd width, in a last column
    appended to the even table: both are placed here as masks and
    concatenations of the engine's rows (no new sin or cos).

    Args:
        source: the row source of the engine's columns.
        padding_id: int or `None`. The position whose row is zero.
        zero_column: bool. Append a zero column.
    """

    def __init__(self, source, padding_id, zero_column):
        self.source, self.padding_id = source, padding_id
        self.zero_column = zero_column
        self.encoder = source.encoder

    @property
    def width(self):
        return self.encoder.width + int(self.zero_column)

    def __call__(self, positions, alone=False):
        rows = self.source(positions, alone)
        if self.padding_id is not None:
            padding = ops.equal(positions.as_values(), self.padding_id)
            rows = ops.where(padding[..., None], ops.zeros_like(rows), rows)
        if self.zero_column:
            zeros = ops.zeros_like(rows[..., :1])
            rows = ops.concatenate([rows, zeros], axis=-1)
        return rows


@_backend.host_work
def sinusoidal_rows(options, width, pinned=False):
    """The row source of a sinusoidal encoding of `width` columns.

    Args:
        options: a `SinusoidalOptions`.
        width: int. The encoding's width (`options.depth`, or the inputs').
        pinned: bool. For function calls (see `ComputedRows`).
    """
    columns = options.encoder_width(width)
    encoder = _engine.sinusoidal_encoder(
        columns, options.max_wavelength, options.layout, options.frequency_rule
    )
    source: ComputedRows | LookupTable
    if options.mode == "compute":
        source = ComputedRows(encoder, pinned=pinned)
    else:
        extend = ComputedRows(encoder) if options.out_of_range == "extend" else None
        source = LookupTable(encoder, options.max_length, extend)
    if options.padding_id is None and columns == width:
        return source
    return ConventionRows(source, options.padding_id, columns != width)


__all__ = [
    "ComputedRows",
    "ConventionRows",
    "LookupTable",
    "decoding_range",
    "kept_range",
    "sinusoidal_rows",
]
