"""Grid tables: one exact 1-D table per axis, broadcast and joined.

MAE's ``get_2d_sincos_pos_embed`` (He et al., 2021,
https://arxiv.org/abs/2111.06377), shared by DiT, PixArt and SD3 through
diffusers, and CogVideoX's ``get_3d_sincos_pos_embed``: each axis of the
grid gets the 1-D sinusoid ``[sin(p w) | cos(p w)]``,
``w_k = 10000 ** (-2k / width)``, of its own positions ``p``, and a cell's
row joins its axes' rows. The feature blocks, in order: 1-D ``[axis 0]``;
2-D ``[width axis D/2 | height axis D/2]`` (MAE's meshgrid puts the width
coordinate first); 3-D ``[time D/4 | width 3D/8 | height 3D/8]``.

Positions: index ``i`` of an axis whose table has ``G`` rows (the grid, or
the `max_grid_shape` it is cropped from) is ``i * base_size / (G * scale)``
(``i / scale`` without `base_size`). ``"exact"`` takes that rational
number as it is: the ratio is folded into the frequencies on the host
(`decimal`), and the integer index goes through the exact engine.
``"float32"`` rounds it as diffusers does (float32 ``arange(G) / (G /
base_size) / scale``, on the host) and takes the exact sinusoid of the
rounded positions (`_exact.fractional`).
"""

import weakref
from typing import Any

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._exact import engine as _engine
from keras_posenc._exact import kept
from keras_posenc._exact.fractional import FractionalEncoder
from keras_posenc._exact.phase_constants import (
    FINE_ROWS,
    phase_constants,
    sinusoidal_turns,
)

_WAVELENGTH = 10000.0
# A lookup axis table above this many bytes is built in chunks of at most
# this size (issue 47 item 4b): the engine's temporaries (its products and
# sum, three times the rows computed at once) stay those of one chunk, so
# on top of the axes already built a build peaks near its table on torch
# (chunks written in place) and twice it elsewhere (chunks joined), not
# three times.
TABLE_CHUNK_BYTES = 2**22


def blocks(rank, dim):
    """``(grid axis, width)`` of each feature block, in column order."""
    if rank == 1:
        return ((0, dim),)
    if rank == 2:
        return ((1, dim // 2), (0, dim // 2))
    spatial = 3 * dim // 8
    return ((0, dim // 4), (2, spatial), (1, spatial))


@kept.memoized(lambda encoder: encoder.nbytes)
def _exact_encoder(width, ratio):
    """The engine for ``[sin | cos]`` of index ``i`` at position ``i * ratio``."""
    turns = sinusoidal_turns(width, _WAVELENGTH, ratio)
    return _engine.Encoder(phase_constants(turns, width, "concatenated"))


@kept.memoized(lambda encoder: encoder.nbytes)
def _float32_encoder(width):
    """The engine at the float32 positions diffusers rounds to."""
    return FractionalEncoder(sinusoidal_turns(width, _WAVELENGTH))


def float32_positions(first, count, size, base_size, scale):
    """diffusers' float32 positions of indices ``first + [0, count)`` (numpy).

    ``arange(size) / (size / base_size) / scale`` as numpy and torch compute
    it in float32 (``size / base_size`` rounded from float64, each division
    rounded to float32).
    """
    index = np.arange(first, first + count, dtype=np.float32)
    # A scale that rounds to a float32 zero or infinity gives NaN or
    # infinite positions, which `axis_rows` refuses: no warning first.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if base_size is not None:
            index = index / np.float32(size / base_size)
        return index / np.float32(scale)


def axis_engine(axes, axis, width, size):
    """The engine of an axis's rows: an `_exact.engine.Encoder` of the exact
    ratio, or a `FractionalEncoder` (float32 positions). Host work."""
    if axes.options.positions == "exact":
        return _exact_encoder(width, axes.ratio(axis, size))
    return _float32_encoder(width)


def axis_rows(engine, axes, axis, size, first, count):
    """float32 ``[count, width]``: ``[sin | cos]`` of indices ``first + [0, count)``.

    Args:
        engine: the axis's `axis_engine`.
        axes: the `GridAxes`.
        axis: int. The grid axis (its scale).
        size: int. Rows of the axis's table (`G`: positions scale with it).
        first: int, or an int32 scalar tensor (``"exact"`` only).
        count: int, or an int32 scalar tensor in a TF graph (``"exact"`` only).
    """
    if axes.options.positions == "exact":
        return engine.rows(first, count)
    positions = float32_positions(
        first, count, size, axes.options.base_size, axes.scales[axis]
    )
    if not (np.abs(positions) < _arguments.POSITION_LIMIT).all():  # NaN too
        raise _arguments.invalid(
            "interpolation_scale",
            "a scale that keeps float32 positions below 2**31",
            axes.options.interpolation_scale,
        )
    if _backend.NAME == "jax" and not _backend.tracing():
        # Eager JAX compiles once per size: pad to a power of two.
        padded = np.zeros(_engine.length_bucket(count), np.float32)
        padded[:count] = positions
        positions = padded
    sin, cos = engine.sincos(ops.convert_to_tensor(positions))
    return ops.concatenate([sin[:count], cos[:count]], axis=-1)


def joined(parts, axes, sizes, dim):
    """The grid table ``[*sizes, dim]`` from the blocks' axis rows."""
    if axes.rank == 1:
        return parts[0]
    columns = []
    for (axis, width), rows in zip(blocks(axes.rank, dim), parts, strict=True):
        shape = [1] * axes.rank
        shape[axis] = -1
        rows = ops.reshape(rows, (*shape, width))
        columns.append(ops.broadcast_to(rows, (*sizes, width)))
    return ops.concatenate(columns, axis=-1)


class GridRows:
    """The rows of a grid encoding of `dim` features: computed, or looked up.

    In lookup mode the axis tables of `max_grid_shape` are built once (a
    few kilobytes: one 1-D table per axis, never the grid's full table)
    and each call slices them at its crop; a call's rows are the same bits
    in both modes.

    A layer's rows (`keeps`) are, in eager calls, read from rows kept
    within the one cache budget (the same bits): at exact positions the
    axis engine's blocks (`_exact.engine.Encoder.block`), at diffusers'
    float32 ones the layer's own. A model's next calls at the same grid
    run no engine op (on an eager GPU, each op is a kernel launch).

    Args:
        axes: the `GridAxes`.
        dim: int. Features (checked by the caller).
        keeps: bool. A layer's rows: kept between calls, released with the
            last layer using them.
    """

    def __init__(self, axes, dim, keeps=False):
        self.axes, self.dim, self.keeps = axes, dim, keeps
        # A layer's rows at diffusers' float32 positions (their engine keeps
        # none).
        self._slot = kept.Slot(self)
        self.blocks = blocks(axes.rank, dim)
        self.tables: Any = None  # lookup mode: the axis tables of max_grid_shape
        # (axis, width, table size) -> engine: a plain dict, which
        # `torch.compile` reads as it is (a cache wrapper it would trace).
        self._engines = {}
        # The engines whose kept rows count this object as a user (weakly:
        # an engine of one grid size goes with the budget's entry).
        self.served: Any = weakref.WeakSet()
        maximum = axes.options.max_grid_shape
        if axes.options.mode == "lookup":
            # The limit is on what the layer keeps: its axis tables together.
            needed = sum(4 * maximum[axis] * width for axis, width in self.blocks)
            widths = tuple(width for _, width in self.blocks)
            _arguments.check_lookup_bytes(
                needed, "max_grid_shape", maximum, f"(axis tables of widths {widths})"
            )
            with _backend.eager_scope():
                self.tables = _backend.host_work(self._tables)()
            _arguments.hold_table(self, needed)
        elif maximum is not None or axes.options.base_size is None:
            # Engines that serve every grid size, made now (outside a trace).
            for axis, width in self.blocks:
                self._engine(axis, width, 1 if maximum is None else maximum[axis])

    def _tables(self):
        """The axis tables (computed: a lookup table is no view of kept rows),
        the largest built first: a build's peak is the tables already built
        and the one being built (twice itself where chunks are joined)."""
        maximum = self.axes.options.max_grid_shape
        tables: list = [None] * len(self.blocks)
        by_size = sorted(
            range(len(self.blocks)),
            key=lambda k: -maximum[self.blocks[k][0]] * self.blocks[k][1],
        )
        for k in by_size:
            axis, width = self.blocks[k]
            tables[k] = self._table(axis, width, maximum[axis])
        return tables

    def _table(self, axis, width, size):
        """The lookup table of one axis: `size` rows, built in chunks of at
        most `TABLE_CHUNK_BYTES` (whole 64-row blocks; a row's bits do not
        depend on the span it is computed in)."""
        engine = self._engine(axis, width, size)
        # A power of two: eager JAX pads a span to one (`_engine.length_bucket`).
        step = max(FINE_ROWS, 1 << (TABLE_CHUNK_BYTES // (4 * width)).bit_length() - 1)
        return _backend.rows_in_chunks(
            lambda first, count: axis_rows(engine, self.axes, axis, size, first, count),
            size,
            step,
        )

    def _rows(self, axis, width, size, first, count):
        """`axis_rows` with the axis's engine; kept rows in a layer's eager
        calls (an axis asks for the same span at every call)."""
        engine = self._engine(axis, width, size)
        eager = isinstance(first, int) and isinstance(count, int)
        if self.keeps and eager and not _backend.tracing():
            if not isinstance(engine, _engine.Encoder):
                return self._kept_rows(engine, axis, width, size, first, count)
            if engine.keeps(first, first + count, steps=False):
                return engine.recent_rows(first, first + count, steps=False)
        return axis_rows(engine, self.axes, axis, size, first, count)

    def _kept_rows(self, engine, axis, width, size, first, count):
        """`axis_rows` at float32 positions, kept in the layer's slot (in the
        one budget, released with the layer)."""
        key = (_backend.device_key(), axis, width, size, first, count)
        rows = self._slot.find([key], lambda rows: True)
        if rows is None:
            rows = axis_rows(engine, self.axes, axis, size, first, count)
            nbytes = _backend.nbytes(rows) + _backend.ARRAY_OVERHEAD
            self._slot.put(key, rows, nbytes)
        return rows

    def _engine(self, axis, width, size):
        """The axis's engine, made once (on the host, outside a trace)."""
        options = self.axes.options
        # Only exact positions with a base size depend on the table's size.
        by_size = options.positions == "exact" and options.base_size is not None
        if by_size and options.max_grid_shape is None:
            # One per grid size the layer meets: held by the one budget
            # only (counted there, freed by `clear_cache`), never by the layer.
            return _backend.host_work(_engine_of)(self, axis, width, size)
        key = (axis, width, size if by_size else None)
        engine = self._engines.get(key)
        if engine is None:
            engine = _backend.host_work(_engine_of)(self, axis, width, size)
            self._engines[key] = engine
        return engine

    def _computed(self):
        """Whether this call computes its rows (no table, or under `jax.jit`,
        where a table would be a constant of every compiled program)."""
        return self.tables is None or _backend.embeds_constants()

    def _placed_by_size(self):
        """Whether positions depend on the call's grid size or crop."""
        options = self.axes.options
        return options.positions == "float32" or (
            options.base_size is not None and options.max_grid_shape is None
        )

    def _checks(self, sizes, name):
        """Raises for a grid past `max_grid_shape` now, or returns the
        run-time checks of sizes known only when the graph runs."""
        maximum = self.axes.options.max_grid_shape
        if self._computed() and self._placed_by_size():
            if not all(isinstance(s, int) for s in sizes):
                raise _arguments.invalid(
                    name,
                    "grid sizes known when traced (base_size without "
                    "max_grid_shape and positions='float32' place positions by "
                    "the grid's size; use max_grid_shape or static shapes)",
                    tuple(sizes),
                )
        if maximum is None:
            return []
        if any(
            isinstance(s, int) and s > m for s, m in zip(sizes, maximum, strict=True)
        ):
            raise _arguments.invalid(
                name, f"a grid within max_grid_shape={maximum}", tuple(sizes)
            )
        message = f"A grid axis is larger than max_grid_shape={maximum}."
        return [
            (size <= limit, message)
            for size, limit in zip(sizes, maximum, strict=True)
            if not isinstance(size, int)
        ]

    def __call__(self, sizes, name="grid_shape"):
        """float32 ``[*sizes, dim]``; `sizes` are ints or int32 scalar tensors."""
        checks = self._checks(sizes, name)
        with _backend.checks_first(checks):  # before a crop past a table
            parts = [
                self._axis(axis, width, sizes[axis]) for axis, width in self.blocks
            ]
        return _backend.guard(joined(parts, self.axes, sizes, self.dim), checks)

    def _axis(self, axis, width, size):
        """One axis's rows: the crop of its table (SD3: ``(max - size) // 2``)."""
        options = self.axes.options
        if options.max_grid_shape is None:
            table_size, first = size, 0
        else:
            table_size = options.max_grid_shape[axis]
            first = 0 if options.crop == "top_left" else (table_size - size) // 2
        if self._computed():
            return self._rows(axis, width, table_size, first, size)
        table = self.tables[self.blocks.index((axis, width))]
        if not _backend.is_tensor(size):  # checked now: within the table
            return _backend.slice_rows(table, first, size)
        # Known when a TF graph runs: indices clamped into the table, so that
        # no op fails before the check (XLA runs none: the rows are NaN).
        steps = ops.arange(size, dtype="int32")
        return _backend.take_rows(table, ops.clip(first + steps, 0, table_size - 1))


def _engine_of(rows, axis, width, size):
    """`axis_engine` for a `GridRows`, counting it as a user of the rows the
    engine keeps when it keeps them, once per engine (host work: the
    store's lock and finalizers stay out of `torch.compile`'s graphs)."""
    engine = axis_engine(rows.axes, axis, width, size)
    if rows.keeps and isinstance(engine, _engine.Encoder):
        if engine not in rows.served:
            engine.slot.add_user(rows)
            rows.served.add(engine)
    return engine


__all__ = [
    "GridRows",
    "axis_engine",
    "axis_rows",
    "blocks",
    "float32_positions",
    "joined",
]
