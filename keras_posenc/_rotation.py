"""The RoPE rotation: cos/sin tables from the engine's rows, and one rotation.

The engine (`_engine.rotary_encoder`) gives rows ``[sin | cos]`` of the
angles ``p * w_i``; this module lays them out (`"half"`: ``[c | c]``,
`"interleaved"`: ``[c0, c0, c1, c1, ...]``), folds in the attention factor
and the rotation's sign, and rotates ``x * cos + swap(x) * sin`` (Su et
al., "RoFormer", 2021, https://arxiv.org/abs/2104.09864). A full call and
a decoding step run the same element-wise ops on the same table values, so
they give the same bits.
"""

import functools
from typing import Any

import numpy as np
from keras import ops

from keras_posenc import _backend, _engine
from keras_posenc._rows import ComputedRows


@functools.lru_cache(maxsize=64)
def row_source(config, dim):
    """The engine's rows ``[sin | cos]`` for one `RopeConfig` and dimension."""
    return ComputedRows(_engine.rotary_encoder(config.frequencies(dim)))


def cos_sin(rows, dim, attention, layout, signed):
    """cos and (with `signed`, the rotation's sign folded in) sin, ``[..., dim]``."""
    n = dim // 2
    sin, cos = rows[..., :n], rows[..., n:]
    if attention != 1.0:
        sin, cos = sin * attention, cos * attention
    first = -sin if signed else sin
    if layout == "half":
        return ops.concatenate([cos, cos], -1), ops.concatenate([first, sin], -1)
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


def _swap(x, dim, layout):
    """Halves, or (2i, 2i+1) pairs, swapped: data movement only.

    One reverse of a size-2 axis: one pass in TF graphs (two slices and a
    concatenation cost 1.5x the whole floor's time there), fused by XLA,
    a TFLite builtin, unlike `tf.roll`.
    """
    n = dim // 2
    shape = ops.shape(x)
    if layout == "half":
        pairs = _backend.reshape(x, (*shape[:-1], 2, n))
        return _backend.reshape(ops.flip(pairs, axis=-2), shape)
    pairs = _backend.reshape(x, (*shape[:-1], n, 2))
    return _backend.reshape(ops.flip(pairs, axis=-1), shape)


def rotate(x, cos, sin, layout, dim, features):
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
    out = rotated * cos + _swap(rotated, dim, layout) * sin
    if dtype != work:
        out = ops.cast(out, dtype)
    if dim < features:
        out = ops.concatenate([out, x[..., dim:]], axis=-1)
    return out


@functools.lru_cache(maxsize=64)
def rotation(attention, layout, seq, rank, dim, features, batched):
    """`rotate` with the rows of the call's positions, compiled once.

    The tables are built once per call and broadcast over every other axis.
    """

    def rotate_rows(x, rows):
        # Tables written once: XLA would otherwise rebuild them per head.
        cos, sin = _backend.materialized(cos_sin, rows, dim, attention, layout, True)
        shape = [1] * rank
        shape[seq], shape[-1] = ops.shape(cos)[-2], dim
        if batched:
            shape[0] = ops.shape(cos)[0]
        cos, sin = (_backend.reshape(t, shape) for t in (cos, sin))
        return rotate(x, cos, sin, layout, dim, features)

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


@functools.lru_cache(maxsize=64)
def step_rotation(layout, dim, features):
    """`rotate` for decoding steps, whose tables come from `StepTables`.

    Compiled on JAX (one dispatch instead of eight, with XLA's rounding as
    in a full call); element-wise ops elsewhere, as in a full call there.
    """
    return _backend.jit_on_jax(
        functools.partial(rotate, layout=layout, dim=dim, features=features)
    )


class StepTables:
    """cos and signed sin of the current decoding block, for decoding steps.

    A decoding step (eager, at most 64 known positions) reads slices of
    tables kept in the rotation's broadcast shape ``[rows, 1, ..., dim]``
    (`trailing` ones, for the axes between the sequence and the features):
    two slices per call instead of building tables. The values are those
    `cos_sin` gives for the same rows, so the bits are the full call's. The
    rows are a fresh `Encoder.step_block`, not the prompt the encoder may
    keep: one shape per encoder, compiled once on eager JAX.
    """

    def __init__(self, encoder, dim, attention, layout, trailing):
        self.encoder = encoder
        self.dim, self.attention, self.layout = dim, attention, layout
        self.trailing = trailing
        self._cached: tuple[int, Any, Any, list] | None = None  # base, cos, sin, steps

    def __call__(self, first, end):
        cached = self._cached
        if cached is None or not cached[0] <= first < end <= cached[0] + len(cached[3]):
            self._cached = cached = self._keep(first)
        base, cos, sin, steps = cached
        if end - first == 1:
            return steps[first - base]
        return cos[first - base : end - base], sin[first - base : end - base]

    def _keep(self, first):
        """``(base, cos, sin, steps)`` of the encoder's decoding block for `first`."""
        base, rows = self.encoder.step_block(first)
        with _backend.eager_scope():  # concrete under `jax.jit` too
            tables = cos_sin(rows, self.dim, self.attention, self.layout, True)
            shape = (self.encoder.step_rows, *([1] * self.trailing), self.dim)
            cos, sin = (ops.reshape(t, shape) for t in tables)
            # One position per step: split once, read without an op.
            split = [_backend.unstack(t[:, None]) for t in (cos, sin)]
        return base, cos, sin, list(zip(*split, strict=True))


@functools.lru_cache(maxsize=64)
def step_tables(config, dim, layout, trailing):
    """The shared `StepTables` of one configuration and input layout."""
    encoder = row_source(config, dim).encoder
    return StepTables(encoder, dim, config.attention_factor, layout, trailing)


def pair_signs(dim, layout):
    """-1 on the first feature of each rotated pair, +1 on the second."""
    index = np.arange(dim)
    first = index < dim // 2 if layout == "half" else index % 2 == 0
    return np.where(first, -1.0, 1.0)
