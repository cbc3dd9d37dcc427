"""The RoPE rotation: cos/sin tables from the engine's rows, and one rotation.

The engine (`_exact.engine.rotary_encoder`) gives rows ``[sin | cos]`` of the
angles ``p * w_i``; this module lays them out (`"half"`: ``[c | c]``,
`"interleaved"`: ``[c0, c0, c1, c1, ...]``, `"half_per_axis"` with `blocks`
equal axes: ``[c_0 | c_0 | c_1 | c_1 ...]``, each axis rotate_half within its
own features), folds in the attention factor
and the rotation's sign, and rotates ``x * cos + swap(x) * sin`` (Su et
al., "RoFormer", 2021, https://arxiv.org/abs/2104.09864). A full call and
a decoding step run the same element-wise ops on the same table values, so
they give the same bits.
"""

import functools
import weakref

import numpy as np
from keras import ops

from keras_posenc import _backend, _platform
from keras_posenc._exact import engine as _engine
from keras_posenc._exact import kept
from keras_posenc._exact.rows import ComputedRows, LookupTable


def _per_block(a, b, blocks):
    """``[a_0, b_0, a_1, b_1, ...]``: `a` and `b` cut into `blocks` equal
    parts, each part of `a` followed by the same part of `b`."""
    shape = ops.shape(a)
    parts = (*shape[:-1], blocks, shape[-1] // blocks)
    pair = ops.stack([_backend.reshape(a, parts), _backend.reshape(b, parts)], -2)
    return _backend.reshape(pair, (*shape[:-1], 2 * shape[-1]))


def cos_sin(rows, dim, attention, layout, signed, blocks=1):
    """cos and (with `signed`, the rotation's sign folded in) sin, ``[..., dim]``.

    `blocks`: the equal axes of `"half_per_axis"` (the rows hold each axis's
    frequencies in turn).
    """
    n = dim // 2
    sin, cos = rows[..., :n], rows[..., n:]
    if attention != 1.0:
        sin, cos = sin * attention, cos * attention
    first = -sin if signed else sin
    if layout == "half":
        return ops.concatenate([cos, cos], -1), ops.concatenate([first, sin], -1)
    if layout == "half_per_axis":
        return _per_block(cos, cos, blocks), _per_block(first, sin, blocks)
    shape = (*ops.shape(rows)[:-1], dim)
    pairs = (ops.stack([cos, cos], -1), ops.stack([first, sin], -1))
    return tuple(_backend.reshape(t, shape) for t in pairs)


def by_section(tables, channel_rows):
    """Each column from the table of its position row (multimodal sections).

    `tables` are the rows ``[sin | cos]`` of the temporal, height and width
    positions; a selection, so equal positions give plain RoPE's bits.
    """
    column_rows = np.tile(np.array(channel_rows), 2)
    out = tables[2]
    for row in (1, 0):
        out = ops.where(column_rows == row, tables[row], out)
    return out


def _swap(x, dim, layout, blocks=1):
    """Halves (of each of `blocks` equal parts with `"half_per_axis"`), or
    (2i, 2i+1) pairs, swapped: data movement only.

    One reverse of a size-2 axis: one pass in TF graphs (two slices and a
    concatenation cost 1.5x the whole floor's time there), fused by XLA,
    a TFLite builtin, unlike `tf.roll`.
    """
    n = dim // 2
    shape = ops.shape(x)
    if layout == "half":
        pairs = _backend.reshape(x, (*shape[:-1], 2, n))
        return _backend.reshape(ops.flip(pairs, axis=-2), shape)
    if layout == "half_per_axis":
        pairs = _backend.reshape(x, (*shape[:-1], blocks, 2, n // blocks))
        return _backend.reshape(ops.flip(pairs, axis=-2), shape)
    pairs = _backend.reshape(x, (*shape[:-1], n, 2))
    return _backend.reshape(ops.flip(pairs, axis=-1), shape)


def rotate(x, cos, sin, layout, dim, features, blocks=1):
    """``x * cos + swap(x) * sin`` on the first `dim` of `features` features.

    `sin` carries the rotation's sign. The one rotation of the package:
    float32 maths (float64 for float64 inputs), cast once to the input dtype.
    """
    dtype = _backend.dtype_name(x)
    work = "float64" if dtype == "float64" else "float32"
    if _backend.dtype_name(cos) != work:
        cos, sin = ops.cast(cos, work), ops.cast(sin, work)
    rotated = x[..., :dim] if dim < features else x
    if dtype != work:
        rotated = ops.cast(rotated, work)
    out = rotated * cos + _swap(rotated, dim, layout, blocks) * sin
    if dtype != work:
        out = ops.cast(out, dtype)
    if dim < features:
        out = ops.concatenate([out, x[..., dim:]], axis=-1)
    return out


def table_columns(rows, dim, attention, layout):
    """The columns a RoPE lookup table keeps: ``[cos | signed sin]``, ``2 dim``."""
    cos, sin = cos_sin(rows, dim, attention, layout, True)
    return ops.concatenate([cos, sin], axis=-1)


def _broadcast(tables, dim, seq, rank, batched):
    """cos and signed sin in the rotation's broadcast shape (sequence on `seq`)."""
    shape = [1] * rank
    shape[seq], shape[-1] = ops.shape(tables[0])[-2], dim
    if batched:
        shape[0] = ops.shape(tables[0])[0]
    return tuple(_backend.reshape(t, shape) for t in tables)


def _rotation(attention, layout, blocks, seq, rank, dim, features, batched, from_table):
    """`rotate` at the call's positions, compiled once for eager callers.

    `from_table`: the second argument is a lookup table's ``[cos | signed
    sin]`` rows (`table_columns`); else the engine's rows ``[sin | cos]``,
    whose tables are built once per call and broadcast over every other
    axis (XLA would otherwise rebuild them per head: `_platform`).
    """

    def rotate_rows(x, rows):
        if from_table:
            tables = _platform.written_once_on_cpu(
                lambda rows: (rows[..., :dim], rows[..., dim:]), rows
            )
        else:
            tables = _platform.computed_once(
                lambda rows: cos_sin(rows, dim, attention, layout, True, blocks), rows
            )
        cos, sin = _broadcast(tables, dim, seq, rank, batched)
        return rotate(x, cos, sin, layout, dim, features, blocks)

    compiled = _backend.compile_function(rotate_rows)
    if _backend.NAME != "jax":
        return compiled

    def bucketed(x, rows):
        # Eager JAX compiles per shape: pad the sequence to a length bucket
        # (padding rows rotate to zeros and are cut off; element-wise, so
        # the bits of the kept rows do not change).
        length = x.shape[seq]
        if _backend.is_traced(x) or length == _engine.length_bucket(length):
            return compiled(x, rows)
        extra = _engine.length_bucket(length) - length
        x = ops.pad(x, [(0, extra if axis == seq else 0) for axis in range(rank)])
        rows = ops.pad(rows, [(0, 0)] * (len(rows.shape) - 2) + [(0, extra), (0, 0)])
        return compiled(x, rows)[(slice(None),) * seq + (slice(0, length),)]

    bucketed.compiled = compiled  # type: ignore[attr-defined]  # compilations: `_cache_size()`
    return bucketed


class StepTables:
    """cos and signed sin of the current decoding block, for decoding steps.

    A decoding step (eager, at most 64 known positions) reads slices of
    tables kept (`kept`) in the rotation's broadcast shape ``[rows, 1, ...,
    dim]`` (`trailing` ones, for the axes between the sequence and the
    features): two slices per call instead of building tables. The values
    are those `cos_sin` gives for the same rows, so the bits are the full
    call's. The rows are a fresh `Encoder.step_block`, not the prompt the
    encoder may keep: one shape per encoder, compiled once on eager JAX.
    """

    def __init__(self, encoder, dim, attention, layout, trailing):
        self.encoder = encoder
        self.dim, self.attention, self.layout = dim, attention, layout
        self.trailing = trailing
        self.slot = kept.Slot(self)  # (base, cos, sin, steps)
        self.step_misses = 0  # requests no kept block served

    def fits(self):
        """Whether a block of these tables fits the cache's budget: cos, sin
        and their steps (copies, but views on torch), with their arrays."""
        tables = 2 * 4 * self.encoder.step_rows * self.dim
        copies = tables if _backend.NAME != "torch" else 0
        overhead = _backend.ARRAY_OVERHEAD * 2 * (1 + self.encoder.step_rows)
        return kept.fits(tables + copies + overhead)

    def __call__(self, first, end):
        def serves(block):
            return block[0] <= first < end <= block[0] + len(block[3])

        device = _backend.device_key()
        bases = self.encoder.step_bases(first)
        block = self.slot.find([(device, base) for base in bases], serves)
        if block is None:
            if _engine.computed_not_kept(self):
                return self._tables(self.encoder.rows(first, end - first))
            block = self._keep(first)
            tables = 2 * _backend.nbytes(block[1])  # cos and sin
            copies = tables if _backend.NAME != "torch" else 0
            overhead = _backend.ARRAY_OVERHEAD * 2 * (1 + len(block[3]))
            self.slot.put((device, block[0]), block, tables + copies + overhead)
        base, cos, sin, steps = block
        if end - first == 1:
            return steps[first - base]
        return cos[first - base : end - base], sin[first - base : end - base]

    def _keep(self, first):
        """``(base, cos, sin, steps)`` of the encoder's decoding block for `first`."""
        base, rows = self.encoder.step_block(first, _engine.first_block(self))
        with _backend.eager_scope():
            cos, sin = self._tables(rows)
            # One position per step: split once (on torch as read), read
            # without an op.
            split = _backend.SplitRows(cos, sin)
        return base, cos, sin, split

    def _tables(self, rows):
        """cos and signed sin of `rows`, in the rotation's broadcast shape."""
        tables = cos_sin(rows, self.dim, self.attention, self.layout, True)
        shape = (rows.shape[0], *([1] * self.trailing), self.dim)
        return tuple(ops.reshape(t, shape) for t in tables)


# (config, dim, layout, trailing) -> the `StepTables` layers hold: shared by
# the layers of one configuration while one of them lives, never kept for
# none (its rows are in `kept`, its encoder held by the layers and, from
# its second request, by `_exact.engine`'s memo).
_SHARED_STEPS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _step_tables(encoder, config, dim, layout, trailing):
    """The `StepTables` of one configuration and input layout, shared by
    layers; `encoder`: the configuration's, which the asking layer holds
    (asked for again, it would count as a second use: `kept.memoized`)."""
    key = (config, dim, layout, trailing)
    tables = _SHARED_STEPS.get(key)
    if tables is None:
        tables = StepTables(encoder, dim, config.attention_factor, layout, trailing)
        _SHARED_STEPS[key] = tables
    return tables


def function_rows(config, dim):
    """The engine's rows for `rotary_cos_sin` (kept rows pinned: no layer)."""
    # Explicit positions are never kept: `pinned` only keeps this source
    # from counting as a user of the encoder's rows.
    return ComputedRows(_engine.rotary_encoder(config.frequencies(dim)), pinned=True)


class LayerRotation:
    """What one `RotaryEmbedding` rotates with: its rows, tables and steps.

    Held by the layer, so a call reads plain attributes and dicts (no global
    cache lookup, nothing `torch.compile` has to break a graph for); made
    per rotary dimension on first use. In lookup mode the table of
    `max_length` positions is built by `build` for one dimension.

    Args:
        config: a `RopeConfig`.
        layout: `"half"`, `"interleaved"` or `"half_per_axis"` (N-axis
            RoPE only: computed tables, no lookup table nor steps).
        max_length: int or `None`. Rows of the lookup table (lookup mode).
        extend: bool. Whether positions outside the table are computed
            (else refused, as in `_exact.rows.LookupTable`).
        blocks: int. The equal axes of `"half_per_axis"`.
    """

    def __init__(self, config, layout, max_length=None, extend=False, blocks=1):
        self.config, self.layout, self.blocks = config, layout, blocks
        self.max_length, self.extend = max_length, extend
        self.table = None  # a `_exact.rows.LookupTable` of `table_columns` (lookup)
        self.table_dim = None
        self._rows = {}  # dim -> `_exact.rows.ComputedRows`
        self._steps = {}  # (dim, trailing) -> `StepTables` (shared, counted)
        self._rotations = {}  # the call's layout -> a rotation
        # Apart: eager decoding steps add to it, and a compiled call's
        # guards on `_rotations` would see a new key and recompile.
        self._step_rotations = {}  # (dim, features) -> a step's rotation

    @_backend.host_work
    def prepare(self, dim, table=False):
        """Makes the rows of `dim` (and with `table` its lookup table) now,
        on the host: a call then only reads them."""
        self.rows(dim)
        if table:
            self._build_table(dim)

    def rows(self, dim):
        """The engine's rows ``[sin | cos]`` for rotary dimension `dim`."""
        source = self._rows.get(dim)
        if source is None:
            encoder = _engine.rotary_encoder(self.config.frequencies(dim))
            source = self._rows[dim] = ComputedRows(encoder)
        return source

    def _build_table(self, dim):
        """Builds the lookup table for `dim` (lookup mode): once."""
        if self.table_dim != dim:
            attention, layout = self.config.attention_factor, self.layout

            def columns(rows):
                return table_columns(rows, dim, attention, layout)

            source = self.rows(dim)
            fallback = source if self.extend else None
            self.table = LookupTable(
                source.encoder, self.max_length, fallback, columns, 2 * dim
            )
            self.table_dim = dim
        return self.table

    def steps(self, dim, trailing):
        """The shared `StepTables` of `dim` for inputs with `trailing` axes."""
        tables = self._steps.get((dim, trailing))
        if tables is None:
            encoder = self.rows(dim).encoder
            tables = _step_tables(encoder, self.config, dim, self.layout, trailing)
            tables.slot.add_user(self)
            self._steps[dim, trailing] = tables
        return tables

    def rotation(self, seq, rank, dim, features, batched, from_table=False):
        """`rotate` for one input layout (see `_rope.rotation`)."""
        key = (seq, rank, dim, features, batched, from_table)
        if _backend.NAME == "torch":
            # A plain function there: nothing to keep, and a dict that a
            # compiled call adds to would fail its own guards next time.
            return _rotation(
                self.config.attention_factor, self.layout, self.blocks, *key
            )
        rotation = self._rotations.get(key)
        if rotation is None:
            options = (self.config.attention_factor, self.layout, self.blocks)
            rotation = self._rotations[key] = _rotation(*options, *key)
        return rotation

    def step_rotation(self, dim, features):
        """`rotate` for decoding steps, whose tables come from `StepTables`.

        Compiled on JAX (one dispatch instead of eight, with XLA's rounding
        as in a full call); element-wise ops elsewhere, as in a full call.
        """
        key = (dim, features)
        rotation = self._step_rotations.get(key)
        if rotation is None:
            rotation = self._step_rotations[key] = _backend.jit_on_jax(
                functools.partial(
                    rotate, layout=self.layout, dim=dim, features=features
                )
            )
        return rotation


def pair_signs(dim, layout):
    """-1 on the first feature of each rotated pair, +1 on the second."""
    index = np.arange(dim)
    first = index < dim // 2 if layout == "half" else index % 2 == 0
    return np.where(first, -1.0, 1.0)
