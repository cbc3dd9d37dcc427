"""Sinusoidal tables as functions: `sinusoidal_table`, `positional_encoding`.

Vaswani et al., "Attention Is All You Need" (2017), section 3.5,
https://arxiv.org/abs/1706.03762: ``PE(p, 2i) = sin(p * w_i)``,
``PE(p, 2i + 1) = cos(p * w_i)``, ``w_i = max_wavelength ** (-2i / depth)``.
The values come from the exact engine (`_engine.py`): within 2e-7 of the
exact ones at every position in ``[-2**31, 2**31)``.
"""

from keras import ops

from keras_posenc import _checks, _engine
from keras_posenc._phase_constants import radians_of, sinusoidal_turns


def _options(depth, max_wavelength, layout, dtype):
    return (
        _checks.depth(depth),
        _checks.wavelength(max_wavelength),
        _checks.choice("layout", layout, _checks.LAYOUTS),
        _checks.floating_dtype(dtype),
    )


def frequencies(depth, max_wavelength=10000.0):
    """The angular frequencies ``w_i = max_wavelength ** (-2i / depth)``.

    One per sine/cosine pair (Vaswani et al., 2017, section 3.5,
    https://arxiv.org/abs/1706.03762), computed with 50 significant digits
    and rounded once to float64.

    Args:
        depth: int. Width of the encoding, `>= 1`.
        max_wavelength: float. The base `b`. Defaults to `10000.0`.

    Returns:
        float64 numpy array of shape `[(depth + 1) // 2]`, in radians per
        position.

    Example:

    >>> keras_posenc.frequencies(4)
    array([1.  , 0.01])
    """
    depth, max_wavelength = _checks.depth(depth), _checks.wavelength(max_wavelength)
    return radians_of(sinusoidal_turns(depth, max_wavelength))


def sinusoidal_table(
    length,
    depth,
    *,
    max_wavelength=10000.0,
    start_index=0,
    layout="interleaved",
    dtype="float32",
):
    """The sinusoidal table for positions ``start_index + [0, length)``.

    Vaswani et al., "Attention Is All You Need" (2017), section 3.5,
    https://arxiv.org/abs/1706.03762. Row `p` holds `sin(p * w_i)` and
    `cos(p * w_i)` with `w_i = max_wavelength ** (-2i / depth)`, within 2e-7
    of the exact values at every position in `[-2**31, 2**31)`, computed
    with int32 and float32 ops only; 16-bit dtypes are rounded from that
    once. On TensorFlow the table is built by a `tf.function` traced once
    per option set, whatever the length; on JAX by `jax.jit`.

    Args:
        length: int (or an int scalar tensor on TensorFlow). Rows, `>= 0`.
        depth: int. Columns, in `[1, 65536]`; odd depths end with a sine.
        max_wavelength: float. The base `b` of the wavelengths, which run
            from `2 pi` to `2 pi b`. Any finite `b > 0`. Defaults to
            `10000.0`.
        start_index: int or int scalar tensor. Position of the first row,
            in `[-2**31, 2**31 - length]`. Defaults to `0`.
        layout: `"interleaved"` (the paper's: sine on even columns, cosine
            on odd) or `"concatenated"` (`[sin | cos]`, as in tensor2tensor,
            fairseq and Hugging Face). Defaults to `"interleaved"`.
        dtype: floating dtype of the result. Defaults to `"float32"`.

    Returns:
        A tensor of the Keras backend (`tf.Tensor`, `jax.Array` or
        `torch.Tensor`) of shape `[length, depth]`.

    Example:

    >>> table = keras_posenc.sinusoidal_table(4, 6)
    >>> keras.ops.convert_to_numpy(table[0])
    array([0., 1., 0., 1., 0., 1.], dtype=float32)
    """
    depth, max_wavelength, layout, dtype = _options(
        depth, max_wavelength, layout, dtype
    )
    length = _checks.length_of(length)
    start, ok = _checks.range_start(start_index, length, low=_checks.POSITION_MIN)
    rows = _engine.sinusoidal_encoder(depth, max_wavelength, layout).rows(start, length)
    return ops.cast(_engine.nan_where_invalid(rows, ok), dtype)


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
    https://arxiv.org/abs/1706.03762): a lookup table of `length` rows read
    with a gather over positions tiled across the batch. Use it when you
    need the encoding itself as a batch tensor; to add it to embeddings,
    `SinusoidalPositionEncoding` broadcasts instead and never materialises
    this tensor.

    Args:
        batch_size: int (or an int scalar tensor on TensorFlow), `>= 1`.
        length, depth, max_wavelength, start_index, layout, dtype: as in
            `sinusoidal_table`.

    Returns:
        A backend tensor of shape `[batch_size, length, depth]`, every batch
        row equal to `sinusoidal_table(length, depth, ...)`.

    Example:

    >>> pe = keras_posenc.positional_encoding(2, 3, 4)
    >>> tuple(pe.shape)
    (2, 3, 4)
    """
    batch_size = _checks.batch_size(batch_size)
    table = sinusoidal_table(
        length,
        depth,
        max_wavelength=max_wavelength,
        start_index=start_index,
        layout=layout,
        dtype=dtype,
    )
    rows = ops.arange(ops.shape(table)[0], dtype="int32")
    tiled = ops.tile(rows[None, :], (batch_size, 1))
    return ops.take(table, tiled, axis=0)


__all__ = ["frequencies", "positional_encoding", "sinusoidal_table"]
