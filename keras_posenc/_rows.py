"""Where a layer's rows come from: computed per call, or a lookup table.

Both sources answer the same two questions, `rows(start, length, ok)` for
contiguous positions and `at(positions, ok)` for explicit ones, with the
same bits (the table is built by the same engine). `ok` is the validity
mask from `_checks` (`None` when every position was checked eagerly).
"""

from keras import ops

from keras_posenc import _arguments, _backend
from keras_posenc._engine import nan_where_invalid


def _tiled(start, length):
    """Per-example offsets ``[B]`` as batch-tiled positions ``[B, length]``."""
    return start[:, None] + ops.arange(length, dtype="int32")[None, :]


class ComputedRows:
    """Rows computed at every call by the exact engine: no length limit.

    Args:
        encoder: an `_engine.Encoder`.
    """

    def __init__(self, encoder):
        self.encoder = encoder

    def rows(self, start, length, ok=None):
        """``[length, C]`` for a scalar `start`, ``[B, length, C]`` for ``[B]``."""
        if len(start.shape) == 1:
            return self.at(_tiled(start, length), None if ok is None else ok[:, None])
        return nan_where_invalid(self.encoder.rows(start, length), ok)

    def at(self, positions, ok=None):
        """``positions.shape + [C]`` for int32 `positions`."""
        return nan_where_invalid(self.encoder.at(positions), ok)


class LookupTable(ComputedRows):
    """`max_length` rows built once, read by slicing or gathering.

    A position outside ``[0, max_length)`` is never a silently wrong row:
    with ``out_of_range="error"`` it raises (eagerly, at trace time when
    static, as a TF graph assertion otherwise) and, where assertions cannot
    run (XLA, `jax.jit`), reads an extra NaN row; with ``"extend"`` the
    exact rows are computed instead.

    Args:
        encoder: an `_engine.Encoder`.
        max_length: int. Rows of the table.
        out_of_range: `"error"` or `"extend"`.
    """

    def __init__(self, encoder, max_length, out_of_range):
        super().__init__(encoder)
        self.max_length = max_length
        self.out_of_range = out_of_range
        _arguments.check_table_bytes(max_length, encoder.width)
        with _backend.eager_scope():
            rows = encoder.rows(0, max_length)
            nan_row = ops.full((1, encoder.width), float("nan"), "float32")
            self.table = ops.concatenate([rows, nan_row], axis=0)

    def message(self, position):
        return (
            f"Position {position} is out of range for the lookup table of "
            f"`max_length`={self.max_length} rows (positions must be in "
            "[0, max_length)). Raise `max_length`, use out_of_range='extend', "
            "or mode='compute'."
        )

    def rows(self, start, length, ok=None):
        start_value = _backend.static_value(start)
        if start_value is None or not _arguments.is_int(length) or start_value.ndim:
            positions = (
                _tiled(start, length)
                if len(start.shape) == 1
                else start + ops.arange(length, dtype="int32")
            )
            return self.at(
                positions, ok if ok is None or len(start.shape) == 0 else ok[:, None]
            )
        first, end = int(start_value), int(start_value) + length
        if length and (first < 0 or end > self.max_length):
            bad = first if first < 0 else end - 1
            return self._outside(bad, lambda: self.encoder.rows(start, length))
        return ops.slice(self.table, (first, 0), (length, self.encoder.width))

    def at(self, positions, ok=None):
        value = _backend.static_value(positions)
        if value is not None:
            outside = value[(value < 0) | (value >= self.max_length)]
            if outside.size:
                return self._outside(
                    int(outside.flat[0]), lambda: self.encoder.at(positions)
                )
            return ops.take(self.table, positions, axis=0)
        inside = ops.logical_and(
            ops.greater_equal(positions, 0), ops.less(positions, self.max_length)
        )
        if self.out_of_range == "extend":
            rows = ops.cond(
                ops.all(inside),
                lambda: ops.take(self.table, positions, axis=0),
                lambda: self.encoder.at(positions),
            )
            return nan_where_invalid(rows, ok)
        if _backend.in_graph():
            _backend.graph_assert(
                ops.all(inside),
                self.message("<runtime>"),
                "largest position:",
                ops.max(positions),
            )
        valid = inside if ok is None else ops.logical_and(inside, ok)
        safe = ops.where(valid, positions, self.max_length)
        return ops.take(self.table, safe, axis=0)

    def _outside(self, position, compute):
        if self.out_of_range == "error":
            raise ValueError(self.message(position))
        return compute()


__all__ = ["ComputedRows", "LookupTable"]
