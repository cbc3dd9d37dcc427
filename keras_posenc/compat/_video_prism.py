"""keras-hub's VideoPrism `SinusoidalPositionalEmbedding`, computed exactly."""

import keras
from keras import ops

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, HubLayer


def _shift(hidden_dim):
    """`TimestepEmbedding`'s `downscale_freq_shift` for keras-hub's divisor
    ``max(hidden_dim // 2 - 1, 1)``: 1, or 0 where one frequency (``i = 0``)
    makes the divisor immaterial."""
    return 1.0 if hidden_dim // 2 > 1 else 0.0


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubVideoPrismSinusoidalPositionalEmbedding"
)
class VideoPrismSinusoidalPositionalEmbedding(HubLayer):
    """keras-hub's VideoPrism `SinusoidalPositionalEmbedding`, exact.

    The timing signal of tensor2tensor's `get_timing_signal_1d` (the
    sinusoid of Vaswani et al., 2017, https://arxiv.org/abs/1706.03762) as
    keras-hub's VideoPrism text encoder adds it to its token embeddings
    (Zhao et al., 2024, https://arxiv.org/abs/2402.13217): for positions
    ``p = 0 .. length - 1`` and ``n = hidden_dim // 2`` frequencies
    ``w_i = min_timescale * (max_timescale / min_timescale) ** (-i / max(n -
    1, 1))``, the row is ``[sin(p w) | cos(p w)]``, then a zero column when
    `hidden_dim` is odd. With ``min_timescale = 1`` this is
    `keras_posenc.sinusoidal_table(..., frequency_rule="tensor2tensor",
    layout="concatenated", odd_depth="zero", max_wavelength=max_timescale)`.
    keras-hub forms the frequencies and angles in float32 (about ``p *
    2**-24`` radians off). Here they come from the exact engine of
    `keras_posenc.TimestepEmbedding` (`max_period = max_timescale /
    min_timescale`, `scale = min_timescale`): within 2e-7 of the exact value,
    computed in float32 and cast once to the compute dtype. `use_exact`
    puts it in place of the layer keras-hub's `VideoPrismEmbedding` holds
    (`VideoPrismBackbone.text_embedding.position_embedding`).

    Args:
        hidden_dim: int. Width of the signal.
        min_timescale: float > 0. Defaults to `1.0`.
        max_timescale: float > 0. Defaults to `1.0e4`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: tensor ``[batch, length, ...]`` (token ids): only its
            length (axis 1) is read.

    Returns:
        Tensor ``[1, length, hidden_dim]`` in the compute dtype.

    Example:

    >>> from keras_posenc import compat
    >>> embed = compat.VideoPrismSinusoidalPositionalEmbedding(6)
    >>> out = embed(np.zeros((2, 5), "int32"))
    >>> tuple(out.shape)
    (1, 5, 6)
    >>> [round(float(v), 4) for v in out[0, 1]]  # sin, then cos, of 1, 0.01, 1e-4
    [0.8415, 0.01, 0.0001, 0.5403, 0.9999, 1.0]

    References:
        - [Zhao et al., 2024](https://arxiv.org/abs/2402.13217) (VideoPrism)
        - [tensor2tensor](https://github.com/tensorflow/tensor2tensor)
          (`get_timing_signal_1d`)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, hidden_dim, min_timescale=1.0, max_timescale=1.0e4, **kwargs):
        options = {
            "hidden_dim": _arguments.check_depth(hidden_dim, "hidden_dim"),
            "min_timescale": _arguments.check_wavelength(
                min_timescale, "min_timescale"
            ),
            "max_timescale": _arguments.check_wavelength(
                max_timescale, "max_timescale"
            ),
        }
        super().__init__(options, **kwargs)
        try:  # the engine's checks, under the names given here
            self._exact_layers(self.hidden_dim)
        except ValueError as error:
            expected = (
                "timescales whose frequencies min_timescale * (max_timescale / "
                "min_timescale) ** (-i / max(hidden_dim // 2 - 1, 1)) the exact "
                f"engine holds (with min_timescale={self.min_timescale!r}: {error})"
            )
            raise _arguments.invalid("max_timescale", expected, max_timescale) from None

    def exact_layer(self, hidden_dim):
        return keras_posenc.TimestepEmbedding(
            hidden_dim,
            max_period=self.max_timescale / self.min_timescale,
            downscale_freq_shift=_shift(hidden_dim),
            scale=self.min_timescale,
            dtype=self.dtype_policy,
        )

    def call(self, inputs):
        if len(inputs.shape) < 2:
            expected = "a tensor of rank 2 or more, [batch, length, ...]"
            raise _arguments.invalid("inputs", expected, f"<shape={inputs.shape}>")
        positions = ops.arange(ops.shape(inputs)[1], dtype="int32")
        rows = self._exact_layers(self.hidden_dim)(positions)
        return ops.expand_dims(rows, 0)

    def compute_output_shape(self, input_shape):
        return (1, input_shape[1], self.hidden_dim)
