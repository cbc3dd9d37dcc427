"""The 2-D sines of DETR and RT-DETR, from the exact engine.

DETR's `DetrSinePositionEmbedding` (Carion et al., 2020,
https://arxiv.org/abs/2005.12872) and its family give the cell at
cumulative mask count ``c`` of a line of ``N`` valid cells the angles

    ((c - offset) / (N + eps) * scale) / temperature ** (k / n),   k < n

(``c`` alone without `normalize`), and RT-DETR's
`build_2d_sinusoidal_position_embedding` (Zhao et al., 2023,
https://arxiv.org/abs/2304.08069) ``i * temperature ** (-k / n)`` at
index ``i``; ``n = D/4`` frequencies per axis either way. No angle is
formed in floating point: each is an integer numerator ``m`` (``c``,
``2c - 1`` with Deformable DETR's half-pixel offset, or ``i``) times
turns per unit that depend on ``N`` only,

    f_k(N) = scale / ((N + eps) * (2 if offset else 1) * 2 pi)
             * temperature ** (-k / n),

computed on the host in `decimal` from `scale`, `eps` and `temperature` as
the exact float64 numbers they are in the models' code, and split for the
engine's int32 phase arithmetic (`_exact.phase_constants`). Without a
mask ``N`` is the feature map's height or width: one row of turns per
axis. With a pixel mask every line has its own ``N`` (0 to the map's
size), so the turns of every ``N`` are tabulated and gathered per cell:
the phase ``m * f_k(N) mod 1`` is exact in int32, and sin and cos come
from `_exact.engine.sincos_of_phase`, within 3.3e-8 of the exact values.
"""

import dataclasses
import decimal
import functools

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.sine_options import EPS
from keras_posenc._exact import engine as _engine
from keras_posenc._exact import kept
from keras_posenc._exact.phase_constants import PI, phase_constants

# Compiled eager JAX functions a `SineRows` keeps (one per feature-map size),
# and device constants (one set per axis and table).
_COMPILED = 8
# A masked axis's table covers every line length up to a power of two (at
# least this): one table serves every smaller feature map (host work, about
# 10 ms a row, once per bucket).
_MIN_BUCKET = 64
# The largest side of a masked feature map: its table's rows (line lengths
# up to 8192) take seconds of host work once (about 1.6 ms a row at 256
# channels); a larger map would take minutes before any check of bytes
# (DETR's maps are tens to hundreds of cells a side).
MAX_MASKED_SIDE = 8192
# Digits of the host arithmetic: the largest turns (a line with no valid
# cell, ``N = 0``: ``scale / (2 pi eps)``, about 1e6) keep more than 60
# correct digits below the point.
_DIGITS = 90


def axis_turns(count, temperature, factor):
    """``factor / (2 pi) * temperature ** (-k / count)``, ``k < count``.

    Args:
        count: int. Frequencies of the axis.
        temperature: float, taken as the exact binary number it is.
        factor: `decimal.Decimal`, exact: the turns of frequency 0 times
            ``2 pi``.

    Returns:
        A tuple of `count` `decimal.Decimal` values.
    """
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        ratio = (-decimal.Decimal(temperature).ln() / count).exp()
        turns = [factor / (2 * PI)]
        for _ in range(count - 1):
            turns.append(turns[-1] * ratio)
        return tuple(turns)


def line_factor(size, scale, half_offset):
    """``scale / ((size + eps) * (2 if half_offset else 1))``, exact."""
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        denominator = decimal.Decimal(size) + decimal.Decimal(EPS)
        return decimal.Decimal(scale) / (denominator * (2 if half_offset else 1))


@dataclasses.dataclass(frozen=True, eq=False)
class AxisTables:
    """The engine constants of one axis, one row per line length ``N``.

    `chunk_turns` int32 ``[S, 3, 2, n]`` and `chunk_rests` float32
    ``[S, 3, 1, n]`` are `PhaseConstants.chunk_turns` / `chunk_rests` of
    each row's turns; `base` the `PhaseConstants` of the first row (its
    turn tables serve every row).
    """

    chunk_turns: np.ndarray
    chunk_rests: np.ndarray
    base: object

    @property
    def nbytes(self):
        return self.chunk_turns.nbytes + self.chunk_rests.nbytes + 64 * 1024


@kept.memoized(lambda tables: tables.nbytes)
def axis_tables(count, temperature, scale, half_offset, lengths):
    """`AxisTables` of the lengths ``N`` in `lengths` (a tuple of ints), or of
    unnormalized positions (``lengths=None``: one row, factor 1)."""
    if lengths is None:
        factors = [decimal.Decimal(1)]
    else:
        factors = [line_factor(n, scale, half_offset) for n in lengths]
    # The first length's constants are kept whole (`AxisTables.base`); the
    # others' chunk arrays are copied into the stacks below.
    consts = [
        phase_constants(
            axis_turns(count, temperature, f), 2 * count, "concatenated", kept=i == 0
        )
        for i, f in enumerate(factors)
    ]
    return AxisTables(
        np.ascontiguousarray(np.stack([c.chunk_turns for c in consts])),
        np.ascontiguousarray(np.stack([c.chunk_rests for c in consts])),
        consts[0],
    )


def _on_device(tables, cache):
    """``(base EngineConstants, chunk_turns, chunk_rests)`` for the backend:
    tensors on the device Keras uses now (torch), numpy elsewhere."""
    key = _backend.device_key() if _backend.NAME == "torch" else None
    made = cache.get(key)
    if made is None:
        base = _engine.EngineConstants.of(tables.base)
        arrays = (tables.chunk_turns, tables.chunk_rests)
        if _backend.NAME == "torch":
            with _backend.eager_scope():
                arrays = tuple(_backend.constant(a) for a in arrays)
        made = cache[key] = (base, *arrays)
    return made


def pairs(m, index, device_tables):
    """sin and cos of ``m * f_k(N)``: float32 ``[E, 2, n]``.

    Args:
        m: int32 ``[E]``: the numerators.
        index: int32 ``[E]``: each numerator's row of the tables, or `None`
            (row 0 for every cell).
        device_tables: `_on_device`'s triple.
    """
    base, chunk_turns, chunk_rests = device_tables
    if index is None:
        chunk_turns, chunk_rests = chunk_turns[0], chunk_rests[0]
    else:
        chunk_turns = _backend.take_rows(chunk_turns, index)
        chunk_rests = _backend.take_rows(chunk_rests, index)
    consts = dataclasses.replace(base, chunk_turns=chunk_turns, chunk_rests=chunk_rests)
    chunks = _engine.chunks_of(m, consts)
    phase = _engine.turns_of_chunks(chunks, consts)
    rest = _engine.rest_of_chunks(chunks, consts)
    return _engine.sincos_of_phase(phase, rest, consts)


def _laid_out(pair, interleaved):
    """``[..., 2, n]`` (sin, cos) as ``[..., 2n]`` channels: DETR's
    interleaved pairs, or RT-DETR's ``[sin | cos]``."""
    shape = ops.shape(pair)[:-2]
    width = 2 * pair.shape[-1]
    if interleaved:
        pair = ops.swapaxes(pair, -1, -2)
    return ops.reshape(pair, (*shape, width))


class SineRows:
    """The 2-D sine of a `SineOptions` family ("detr" or "rt_detr"), `dim`
    channels, channels last.

    Args:
        options: the `SineOptions`.
        dim: int. Channels, a multiple of 4 (checked by the caller).
    """

    def __init__(self, options, dim):
        self.options, self.dim, self.count = options, dim, dim // 4
        self._device = {}  # (axis, lengths) -> {device: constants}
        # (sizes, masked) -> one compiled eager JAX function (JAX would
        # otherwise compile each of some fifty ops per shape).
        self._compiled = {}

    def _tables(self, axis, lengths):
        options = self.options
        tables = axis_tables(
            self.count,
            options.temperatures[axis],
            options.scale_value,
            options.half_offset,
            lengths,
        )
        if (axis, lengths) not in self._device and len(self._device) >= _COMPILED:
            self._device.clear()
        cache = self._device.setdefault((axis, lengths), {})
        return _backend.host_work(_on_device)(tables, cache)

    def _static(self, sizes, name):
        if not all(isinstance(s, int) for s in sizes):
            expected = (
                "a feature map whose height and width are known when traced "
                "(DETR's sine divides by them)"
            )
            raise _arguments.invalid(name, expected, tuple(sizes))
        return sizes

    def _numerators(self, counts):
        """DETR's numerators of cumulative counts: ``c``, or ``2c - 1``."""
        return counts * 2 - 1 if self.options.half_offset else counts

    def _axis(self, axis, positions, lengths, index):
        """``[*positions.shape, D/2]`` channels of one axis."""
        shape = ops.shape(positions)
        flat = ops.reshape(positions, (-1,))
        if index is not None:
            index = ops.reshape(index, (-1,))
        pair = pairs(flat, index, self._tables(axis, lengths))
        pair = ops.reshape(pair, (*shape, 2, self.count))
        return _laid_out(pair, self.options.sine == "detr")

    def __call__(self, sizes, pixel_mask=None, name="inputs"):
        """float32 ``[H, W, D]``, or ``[batch, H, W, D]`` with `pixel_mask`."""
        sizes = tuple(sizes)
        eager_jax = _backend.NAME == "jax" and not _backend.tracing()
        if not eager_jax or not all(isinstance(s, int) for s in sizes):
            return self._computed(sizes, pixel_mask, name)
        key = (sizes, pixel_mask is None)
        compiled = self._compiled.get(key)
        if compiled is None:
            if len(self._compiled) >= _COMPILED:
                self._compiled.clear()
            compiled = _backend.jit_on_jax(
                functools.partial(self._computed, sizes, name=name)
            )
            self._compiled[key] = compiled
        return compiled(pixel_mask)

    def _computed(self, sizes, pixel_mask, name="inputs"):
        if pixel_mask is not None:
            return self._masked(self._static(sizes, name), pixel_mask)
        options = self.options
        if options.sine == "rt_detr":
            lines = [ops.arange(0, size, dtype="int32") for size in sizes]
            rows = [self._axis(a, lines[a], None, None) for a in (0, 1)]
        else:
            sizes = self._static(sizes, name)
            rows = []
            for axis, size in enumerate(sizes):
                counts = ops.arange(1, size + 1, dtype="int32")
                lengths = (size,) if options.normalizes else None
                rows.append(self._axis(axis, self._numerators(counts), lengths, None))
        height, width = sizes
        half = self.dim // 2
        y = ops.broadcast_to(ops.reshape(rows[0], (-1, 1, half)), (height, width, half))
        x = ops.broadcast_to(ops.reshape(rows[1], (1, -1, half)), (height, width, half))
        return ops.concatenate([y, x], axis=-1)

    def _masked(self, sizes, pixel_mask):
        """DETR with a pixel mask: cumulative counts per line, each line
        divided by its own valid length."""
        mask = ops.cast(pixel_mask, "int32")
        channels = []
        for axis, size in enumerate(sizes):
            counts = ops.cumsum(mask, axis=axis + 1)
            if self.options.normalizes:
                if size > MAX_MASKED_SIDE:
                    expected = (
                        f"a mask of a feature map of at most {MAX_MASKED_SIDE} rows "
                        "and columns (the normalized DETR sine keeps a table row "
                        "per valid line length)"
                    )
                    raise _arguments.invalid(
                        "pixel_mask", expected, f"<shape={tuple(pixel_mask.shape)}>"
                    )
                bucket = 1 << max(_MIN_BUCKET.bit_length() - 1, (size - 1).bit_length())
                _arguments.check_table_bytes(bucket + 1, 9 * self.count, "pixel_mask")
                last = counts[:, -1:, :] if axis == 0 else counts[:, :, -1:]
                index = ops.broadcast_to(last, ops.shape(counts))
                lengths = tuple(range(bucket + 1))
            else:
                index = lengths = None
            numerators = self._numerators(counts)
            channels.append(self._axis(axis, numerators, lengths, index))
        return ops.concatenate(channels, axis=-1)


__all__ = [
    "MAX_MASKED_SIDE",
    "SineRows",
    "axis_tables",
    "axis_turns",
    "line_factor",
    "pairs",
]
