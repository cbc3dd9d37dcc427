"""The sinusoidal table, exact to float32 rounding, built with TF ops.

Vaswani et al., "Attention Is All You Need" (2017), section 3.5:
``PE(p, 2i) = sin(p * w_i)``, ``PE(p, 2i + 1) = cos(p * w_i)`` with
``w_i = max_wavelength ** (-2i / depth)``.

The usual float32 code forms ``p * w_i`` in float32 and loses about
``p * 2**-24`` radians (0.06 at position 2**20). Here no angle is ever
rounded to float32:

1. Per frequency, the host computes ``f_i = w_i / (2 pi)`` (turns per
   position) with 50 decimal digits, and splits ``frac(2**(12k) f_i)`` for
   k = 0, 1, 2 into a 12-bit integer, a 24-bit integer and a float32 rest.
2. In the graph, a position ``p < 2**31`` is split into three 12-bit
   chunks; integer products of chunks and constant parts give the phase
   ``p * f_i mod 1`` exactly, in units of 2**-24 turns (int32 only).
3. The phase is rounded to the nearest 1/256 turn ``j``; sin and cos of
   ``2 pi j / 256`` come from a hi+lo float32 table, and the small rest
   (below 0.015 rad) enters through short Taylor series. Result: within
   3.3e-8 of the exact value (half a float32 ulp is 3.0e-8).
4. Contiguous positions ``s + h*K + l`` (``K = 64``) use that for the
   coarse rows ``s + h*K`` only, and combine them with a constant table of
   ``l * w_i`` through the angle-addition identities: three float32
   operations per output value, within 1.5e-7 of exact.

The graph uses int32 and float32 only (no float64), so it runs unchanged
on CPU, GPU, TPU, under XLA and in TFLite.
"""

import dataclasses
import decimal
import functools

import numpy as np
import tensorflow as tf

from keras_posenc import _checks

# Rows of the constant fine table used by the contiguous fast path.
FINE_ROWS = 64

_PI = decimal.Decimal(
    "3.141592653589793238462643383279502884197169399375105820974944592307816"
)
_TWO_PI_F32 = np.float32(2.0 * np.pi)


@dataclasses.dataclass(frozen=True)
class _Constants:
    """Host-side constants for one (depth, max_wavelength, layout)."""

    omega: np.ndarray  # float64 [n]: angular frequencies
    turn_hi: np.ndarray  # int32 [3, n]: frac(2**(12k) f) in units of 2**-12
    turn_mid: np.ndarray  # int32 [3, n]: next bits, units of 2**-24, signed
    turn_lo: np.ndarray  # float32 [3, n]: the rest, in turns (|x| <= 2**-25)
    column_freq: np.ndarray  # int32 [depth]: frequency index of each column
    column_is_sin: np.ndarray  # bool [depth]
    fine_u: np.ndarray  # float32 [K, depth]: PE(l) for l < K
    fine_v: np.ndarray  # float32 [K, depth]: d PE(l) / d(angle)
    column_turns: tuple  # (hi, mid, lo) of each column's frequency, [3, depth] each


def _frequencies_in_turns(depth, max_wavelength):
    """``w_i / (2 pi)`` for every sine channel, as 50-digit Decimals."""
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        log_base = decimal.Decimal(max_wavelength).ln()
        return [
            (-(decimal.Decimal(2 * i) / depth) * log_base).exp() / (2 * _PI)
            for i in range((depth + 1) // 2)
        ]


def _split_turns(freqs):
    """Splits ``frac(2**(12k) f)`` into hi (12 bits), mid (12 bits), lo."""
    n = len(freqs)
    hi = np.zeros((3, n), np.int32)
    mid = np.zeros((3, n), np.int32)
    lo = np.zeros((3, n), np.float32)
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        for k in range(3):
            scale = decimal.Decimal(2) ** (12 * k)
            for i, f in enumerate(freqs):
                t = (f * scale) % 1
                h = int((t * 4096).to_integral_value())
                rest = t - decimal.Decimal(h) / 4096
                m = int((rest * 2**24).to_integral_value())
                hi[k, i] = h % 4096
                mid[k, i] = m
                lo[k, i] = float(rest - decimal.Decimal(m) / 2**24)
    return hi, mid, lo


def _columns(depth, layout):
    """Frequency index and sin/cos role of every output column."""
    n_sin, n_cos = (depth + 1) // 2, depth // 2
    if layout == "interleaved":
        cols = np.arange(depth)
        return (cols // 2).astype(np.int32), cols % 2 == 0
    freq = np.concatenate([np.arange(n_sin), np.arange(n_cos)]).astype(np.int32)
    return freq, np.arange(depth) < n_sin


@functools.lru_cache(maxsize=64)
def _constants(depth, max_wavelength, layout):
    freqs = _frequencies_in_turns(depth, max_wavelength)
    omega = np.array([float(f * 2 * _PI) for f in freqs], np.float64)
    hi, mid, lo = _split_turns(freqs)
    column_freq, column_is_sin = _columns(depth, layout)
    # l * w is exact enough in float64 for l < 64: the tables are correctly
    # rounded to float32.
    angle = np.arange(FINE_ROWS)[:, None] * omega[column_freq][None, :]
    fine_u = np.where(column_is_sin, np.sin(angle), np.cos(angle))
    fine_v = np.where(column_is_sin, np.cos(angle), -np.sin(angle))
    return _Constants(
        omega=omega,
        turn_hi=hi,
        turn_mid=mid,
        turn_lo=lo,
        column_freq=column_freq,
        column_is_sin=column_is_sin,
        fine_u=fine_u.astype(np.float32),
        fine_v=fine_v.astype(np.float32),
        column_turns=tuple(t[:, column_freq] for t in (hi, mid, lo)),
    )


def _quarter_table():
    """sin and cos of ``2 pi j / 256`` for j = 0..256, each as hi + lo."""
    angle = 2.0 * np.pi * np.arange(257) / 256.0
    cols = []
    for exact in (np.sin(angle), np.cos(angle)):
        hi = exact.astype(np.float32)
        cols += [hi, (exact - hi).astype(np.float32)]
    return np.stack(cols, axis=-1)


_TURN_TABLE = _quarter_table()  # float32 [257, 4]: sin hi, sin lo, cos hi, cos lo


def _sincos(positions, turn_hi, turn_mid, turn_lo):
    """sin and cos of ``positions * w`` for a vector of frequencies ``w``.

    Args:
        positions: int32 tensor of any shape.
        turn_hi, turn_mid, turn_lo: the `_Constants` splits of ``w`` (or a
            selection of their columns), shape ``[3, m]``.

    Returns:
        Two float32 tensors of shape ``positions.shape + [m]``.
    """
    p = positions[..., None, None]
    # 12-bit chunks of the position, stacked on an axis of 3: [..., 3, 1].
    chunks = tf.concat(
        [
            tf.math.floormod(p, 4096),
            tf.math.floormod(tf.math.floordiv(p, 4096), 4096),
            tf.math.floordiv(p, 4096 * 4096),
        ],
        axis=-2,
    )
    # Integer phase in units of 2**-24 turns: every product is below 2**24.
    hi = tf.reduce_sum(chunks * turn_hi, axis=-2)
    mid = tf.reduce_sum(chunks * turn_mid, axis=-2)
    phase = tf.math.floormod(tf.math.floormod(hi, 4096) * 4096 + mid, 2**24)
    step = tf.math.floordiv(phase + 2**15, 2**16)  # nearest 1/256 turn
    rest_int = phase - step * 2**16  # [-2**15, 2**15)
    rest = tf.reduce_sum(tf.cast(chunks, tf.float32) * turn_lo, axis=-2)
    theta = (tf.cast(rest_int, tf.float32) * 2.0**-24 + rest) * _TWO_PI_F32
    theta2 = theta * theta
    sin_t = theta - theta * theta2 * (1.0 / 6.0)
    versine = theta2 * (0.5 - theta2 * (1.0 / 24.0))  # 1 - cos(theta)
    sin_hi, sin_lo, cos_hi, cos_lo = tf.unstack(
        tf.gather(_TURN_TABLE, step), num=4, axis=-1
    )
    sin = sin_hi + (sin_lo + (cos_hi * sin_t - sin_hi * versine))
    cos = cos_hi + (cos_lo - (sin_hi * sin_t + cos_hi * versine))
    return sin, cos


def _encode_positions(positions, depth, max_wavelength, layout):
    """Encodings of arbitrary int32 positions: ``positions.shape + [depth]``."""
    consts = _constants(depth, max_wavelength, layout)
    sin, cos = _sincos(positions, consts.turn_hi, consts.turn_mid, consts.turn_lo)
    both = tf.concat([sin, cos], axis=-1)
    # Column c reads sin (index f) or cos (index n + f) of its frequency f.
    n = (depth + 1) // 2
    index = np.where(consts.column_is_sin, consts.column_freq, n + consts.column_freq)
    return tf.gather(both, index.astype(np.int32), axis=-1)


def _encode_range(start, length, depth, max_wavelength, layout):
    """Encodings of positions ``start + [0, length)``.

    Args:
        start: int32 scalar, or int32 ``[B]`` for per-example offsets.
        length: int32 scalar.

    Returns:
        float32 ``[length, depth]``, or ``[B, length, depth]``.
    """
    consts = _constants(depth, max_wavelength, layout)
    coarse_rows = tf.math.floordiv(length + FINE_ROWS - 1, FINE_ROWS)
    coarse = start[..., None] + FINE_ROWS * tf.range(coarse_rows)
    # sin/cos of each column's frequency at the coarse positions.
    sin, cos = _sincos(coarse, *consts.column_turns)
    sin, cos = sin[..., None, :], cos[..., None, :]
    # Angle addition: f(q + l) = f(l) cos(q w) + f'(l) sin(q w).
    table = consts.fine_u * cos + consts.fine_v * sin
    leading = tf.shape(start)
    table = tf.reshape(table, tf.concat([leading, [coarse_rows * FINE_ROWS, depth]], 0))
    # tf.slice, not [..., :length]: TFLite has no builtin for ellipsis slices.
    size = tf.concat([leading, [length, depth]], 0)
    return tf.slice(table, tf.zeros_like(size), size)


@functools.lru_cache(maxsize=64)
def _table_function(depth, max_wavelength, layout, dtype):
    """One `tf.function` per option set, traced once for every length."""
    scalar = tf.TensorSpec([], tf.int32)

    @tf.function(input_signature=[scalar, scalar], autograph=False)
    def table(length, start_index):
        return tf.cast(
            _encode_range(start_index, length, depth, max_wavelength, layout), dtype
        )

    return table


@functools.lru_cache(maxsize=64)
def _compiled(depth, max_wavelength, layout):
    """Graph versions of the encoders, for eager callers.

    An eager caller runs the whole encoder as one function call instead of
    some fifty eager ops; traced once per input rank, not per length.
    """
    options = dict(depth=depth, max_wavelength=max_wavelength, layout=layout)
    return (
        tf.function(
            functools.partial(_encode_range, **options),
            reduce_retracing=True,
            autograph=False,
        ),
        tf.function(
            functools.partial(_encode_positions, **options),
            reduce_retracing=True,
            autograph=False,
        ),
    )


def _scalar_int(name, value):
    """A non-negative int32 scalar from a Python int or an integer tensor."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return tf.constant(_checks.non_negative_int(name, int(value)), tf.int32)
    value = tf.convert_to_tensor(value)
    if not value.dtype.is_integer or value.shape.rank != 0:
        raise _checks.invalid(name, "a non-negative integer or an int scalar", value)
    static = tf.get_static_value(value)
    if static is not None:
        _checks.non_negative_int(name, int(static))
    return tf.cast(value, tf.int32)


def _check_options(depth, max_wavelength, layout, dtype):
    return (
        _checks.positive_int("depth", depth),
        _checks.wavelength(max_wavelength),
        _checks.choice("layout", layout, _checks.LAYOUTS),
        _checks.floating_dtype(dtype),
    )


def sinusoidal_table(
    length,
    depth,
    *,
    max_wavelength=10000.0,
    start_index=0,
    layout="interleaved",
    dtype="float32",
):
    """The sinusoidal position-encoding table for positions ``start_index + [0, length)``.

    Vaswani et al., "Attention Is All You Need" (2017), section 3.5,
    https://arxiv.org/abs/1706.03762. Row ``p`` holds ``sin(p * w_i)`` and
    ``cos(p * w_i)`` with ``w_i = max_wavelength ** (-2i / depth)``. Values
    are within 1.5e-7 of the exact ones for every position below 2**31
    (float32 arithmetic only; see the module docstring for how), and 16-bit
    dtypes are rounded from that once, at the end.

    The table is built by a `tf.function` traced once per option set
    (depth, max_wavelength, layout, dtype), whatever the length.

    Args:
        length: int or int scalar tensor. Number of rows, `>= 0`.
        depth: int. Number of columns, `>= 1`; odd depths end with a sine.
        max_wavelength: float. The base `b` of the geometric progression of
            wavelengths (from `2 pi` to `2 pi b`). Defaults to `10000.0`.
        start_index: int or int scalar tensor. Position of the first row,
            `>= 0`. Defaults to `0`.
        layout: `"interleaved"` (the paper's: sine on even columns, cosine on
            odd) or `"concatenated"` (`[sin | cos]`, as in tensor2tensor,
            fairseq and Hugging Face, with the paper's frequencies). Defaults
            to `"interleaved"`.
        dtype: floating dtype of the result. Defaults to `"float32"`.

    Returns:
        A tensor of shape `[length, depth]`.

    Example:

    >>> table = keras_posenc.sinusoidal_table(4, 6)
    >>> table[0].numpy()
    array([0., 1., 0., 1., 0., 1.], dtype=float32)
    """
    depth, max_wavelength, layout, dtype = _check_options(
        depth, max_wavelength, layout, dtype
    )
    length = _scalar_int("length", length)
    start_index = _scalar_int("start_index", start_index)
    _check_position_limit(start_index, length)
    fn = _table_function(depth, max_wavelength, layout, dtype)
    return fn(length, start_index)


def _check_position_limit(start, length):
    """Last position must fit int32: eagerly when known, else a graph assert."""
    start_value, length_value = tf.get_static_value(start), tf.get_static_value(length)
    if start_value is not None and length_value is not None:
        _checks.position_range(int(start_value), int(length_value))
        return
    end = tf.cast(start, tf.int64) + tf.cast(length, tf.int64)
    tf.debugging.assert_less_equal(
        end,
        tf.constant(_checks.POSITION_LIMIT, tf.int64),
        message="start_index + length must be <= 2**31 (positions are int32)",
    )


def positional_encoding(
    batch_size,
    length,
    depth,
    *,
    max_wavelength=10000.0,
    start_index=0,
    layout="interleaved",
    dtype="float32",
):
    """The batch-tiled encoding ``[batch_size, length, depth]``.

    The classic pattern (Vaswani et al., 2017, section 3.5;
    https://arxiv.org/abs/1706.03762): a lookup table of `length` rows is
    read with `tf.nn.embedding_lookup` over positions tiled across the
    batch. Use it when you need the encoding itself as a batch tensor; to
    add it to embeddings, `SinusoidalPositionEncoding` broadcasts instead
    and never materialises this tensor.

    Args:
        batch_size: int or int scalar tensor, `>= 1`.
        length, depth, max_wavelength, start_index, layout, dtype: as in
            `sinusoidal_table`.

    Returns:
        A tensor of shape `[batch_size, length, depth]`, every batch row
        equal to `sinusoidal_table(length, depth, ...)`.

    Example:

    >>> pe = keras_posenc.positional_encoding(2, 3, 4)
    >>> pe.shape
    TensorShape([2, 3, 4])
    """
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool):
        _checks.positive_int("batch_size", int(batch_size))
    table = sinusoidal_table(
        length,
        depth,
        max_wavelength=max_wavelength,
        start_index=start_index,
        layout=layout,
        dtype=dtype,
    )
    rows = tf.range(tf.shape(table)[0])
    positions = tf.tile(rows[None, :], tf.stack([tf.cast(batch_size, tf.int32), 1]))
    return tf.nn.embedding_lookup(table, positions)
