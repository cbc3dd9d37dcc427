"""Sinusoidal tables as functions: `sinusoidal_table`, `positional_encoding`.

Vaswani et al., "Attention Is All You Need" (2017), section 3.5,
https://arxiv.org/abs/1706.03762: ``PE(p, 2i) = sin(p * w_i)``,
``PE(p, 2i + 1) = cos(p * w_i)``, ``w_i = max_wavelength ** (-2i / depth)``.
The values come from the exact engine (`_exact/engine.py`): within 2e-7 of the
exact ones at every position in ``[-2**31, 2**31)``.
"""

from typing import Any

from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import options as _options
from keras_posenc._checks import positions as _positions
from keras_posenc._exact.phase_constants import radians_of, sinusoidal_turns
from keras_posenc._exact.rows import sinusoidal_rows


def _checked_options(depth, max_wavelength, layout, dtype):
    return (
        _arguments.check_depth(depth),
        _arguments.check_wavelength(max_wavelength),
        _arguments.check_choice("layout", layout, _options.LAYOUTS),
        _arguments.check_floating_dtype(dtype),
    )


def frequencies(depth: int, max_wavelength: float = 10000.0) -> Any:
    """The angular frequencies ``w_i = max_wavelength ** (-2i / depth)``.

    One per sine/cosine pair (Vaswani et al., 2017, section 3.5,
    https://arxiv.org/abs/1706.03762), computed in decimal arithmetic with
    as many digits as the base needs and rounded once to float64.

    Args:
        depth: int. Width of the encoding, in `[1, 65536]`.
        max_wavelength: float. The base `b`: any finite `b > 0`. Defaults
            to `10000.0`.

    Returns:
        float64 numpy array of shape `[(depth + 1) // 2]`, in radians per
        position.

    Example:

    >>> keras_posenc.frequencies(4)
    array([1.  , 0.01])
    """
    depth, max_wavelength = (
        _arguments.check_depth(depth),
        _arguments.check_wavelength(max_wavelength),
    )
    return radians_of(sinusoidal_turns(depth, max_wavelength))


@_backend.not_autograph
@_backend.on_keras_device
def sinusoidal_table(
    length: Any,
    depth: int,
    *,
    max_wavelength: float = 10000.0,
    start_index: Any = 0,
    layout: str = "interleaved",
    dtype: str = "float32",
    frequency_rule: str = "paper",
    odd_depth: str = "sine",
    padding_id: int | None = None,
) -> Any:
    """The sinusoidal table for positions ``start_index + [0, length)``.

    Vaswani et al., "Attention Is All You Need" (2017), section 3.5,
    https://arxiv.org/abs/1706.03762. Row `p` holds `sin(p * w_i)` and
    `cos(p * w_i)` with `w_i = max_wavelength ** (-2i / depth)`, within 2e-7
    of the exact values at every position in `[-2**31, 2**31)` and for
    every finite `max_wavelength > 0`, computed with int32 and float32 ops
    only; 16-bit dtypes are rounded from that once. On TensorFlow the table
    is built by a `tf.function` traced once per option set, whatever the
    length; on JAX by `jax.jit`.

    No argument is ever wrapped into a plausible wrong position: an integer
    outside the int32 range (Python, numpy or an int64/uint tensor) raises
    a `ValueError` naming it. A tensor whose value is only known when the
    graph runs is checked by a graph assertion (`InvalidArgumentError`);
    under XLA (`jit_compile=True`) or `jax.jit`, where assertions cannot
    run, the rows come out NaN instead.

    Args:
        length: int, or an int scalar tensor (on TensorFlow also a symbolic
            one; under `jax.jit` it must be static). Rows, in
            `[0, 2**31)`.
        depth: int. Columns, in `[1, 65536]`; odd depths end with a sine.
        max_wavelength: float. The base `b` of the wavelengths, which run
            from `2 pi` to `2 pi b`: any finite `b > 0`, from the smallest
            subnormal float to the largest float (the host constants take
            as many decimal digits as `b` needs). Defaults to `10000.0`.
        start_index: int or int scalar tensor. Position of the first row,
            in `[-2**31, 2**31 - length]`. Defaults to `0`.
        layout: `"interleaved"` (the paper's: sine on even columns, cosine
            on odd), `"concatenated"` (`[sin | cos]`, the layout of
            tensor2tensor, fairseq, Whisper, Marian) or `"cos_sin"` (`[cos
            | sin]`, MusicGen). The models using each are listed in
            `SinusoidalPositionEncoding`. Defaults to `"interleaved"`.
        dtype: floating dtype of the result. Defaults to `"float32"`.
        frequency_rule: `"paper"` (`b ** (-2i / depth)`) or
            `"tensor2tensor"` (`b ** (-i / (depth // 2 - 1))`, fairseq's
            and Whisper's frequencies, `depth >= 4`). Defaults to
            `"paper"`.
        odd_depth: an odd `depth` holds one more column of the first
            block (`"sine"`: one more sine, or with `layout="cos_sin"` one
            more cosine, which no published model uses), the even table
            and a zero column (`"zero"`, fairseq, MusicGen), or is refused
            (`"error"`, Whisper). Defaults to `"sine"`.
        padding_id: int or `None`. The position whose row is zero
            (fairseq's padding row). Defaults to `None`.

    Returns:
        A tensor of the Keras backend (`tf.Tensor`, `jax.Array` or
        `torch.Tensor`) of shape `[length, depth]`.

    Example (needs only `import keras_posenc`; runs on any device):

    >>> table = keras_posenc.sinusoidal_table(4, 6)
    >>> [round(float(value), 4) for value in table[1]]
    [0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0]

    M2M100's and NLLB's table (fairseq's: padding row 1, positions from 2):

    >>> m2m = keras_posenc.sinusoidal_table(
    ...     4, 8, layout="concatenated", frequency_rule="tensor2tensor",
    ...     odd_depth="zero", padding_id=1)
    >>> [round(float(value), 4) for value in m2m[2]]
    [0.9093, 0.0927, 0.0043, 0.0002, -0.4161, 0.9957, 1.0, 1.0]
    """
    depth, max_wavelength, layout, dtype = _checked_options(
        depth, max_wavelength, layout, dtype
    )
    options = _options.SinusoidalOptions(
        max_wavelength=max_wavelength,
        merge=None,
        depth=depth,
        layout=layout,
        frequency_rule=frequency_rule,
        odd_depth=odd_depth,
        padding_id=padding_id,
    )
    length, length_checks = _positions.size("length", length, low=0)
    positions = _positions.span(
        start_index,
        length,
        low=_arguments.POSITION_MIN,
        ranks=(0,),
        length_checks=length_checks,
    )
    rows = sinusoidal_rows(options, depth, pinned=True)
    rows = rows(positions, alone=dtype == "float32")
    return ops.cast(rows, dtype)


@_backend.not_autograph
@_backend.on_keras_device
def positional_encoding(
    batch_size: Any, length: Any, depth: int, **options: Any
) -> Any:
    """The batch-tiled encoding ``[batch_size, length, depth]``.

    The classic pattern (Vaswani et al., 2017, section 3.5;
    https://arxiv.org/abs/1706.03762): a lookup table of `length` rows read
    with a gather over positions tiled across the batch. Use it when you
    need the encoding itself as a batch tensor; to add it to embeddings,
    `SinusoidalPositionEncoding` broadcasts instead and never materialises
    this tensor.

    Args:
        batch_size: int (or an int scalar tensor, static under `jax.jit`),
            in `[1, 2**31)`.
        length, depth: as in `sinusoidal_table`.
        **options: `sinusoidal_table`'s keyword arguments (`max_wavelength`,
            `start_index`, `layout`, `dtype` and the published conventions),
            with its defaults.

    Returns:
        A backend tensor of shape `[batch_size, length, depth]`, every batch
        row equal to `sinusoidal_table(length, depth, ...)`.

    Example:

    >>> pe = keras_posenc.positional_encoding(2, 3, 4)
    >>> tuple(pe.shape)
    (2, 3, 4)
    """
    batch_size, checks = _positions.size("batch_size", batch_size, low=1)
    table = sinusoidal_table(length, depth, **options)
    rows = ops.arange(ops.shape(table)[0], dtype="int32")
    tiled = ops.tile(rows[None, :], (batch_size, 1))
    return _backend.guard(ops.take(table, tiled, axis=0), checks)


__all__ = ["frequencies", "positional_encoding", "sinusoidal_table"]
