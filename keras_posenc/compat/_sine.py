"""keras-hub's `SinePositionEncoding`, computed exactly."""

import keras

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, HubLayer
from keras_posenc.compat._calls import exact_call


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubSinePositionEncoding"
)
class SinePositionEncoding(HubLayer):
    """keras-hub's `SinePositionEncoding`, exact to float32 rounding.

    The encoding of Vaswani et al., "Attention Is All You Need" (2017),
    section 3.5, as keras-hub lays it out: the encoding alone (not added to
    the inputs), broadcast to the shape of `inputs`, sequence on axis -2
    (on 4-D inputs too), sine on even and cosine on odd features. Computed
    by `keras_posenc.SinusoidalPositionEncoding` in float32 and cast once
    to the compute dtype: within 2e-7 of the exact value at every int32
    position, where keras-hub's float32 angles lose ``p * 2**-24`` radians
    (and its bfloat16 ones hold no position above 256 exactly).

    Args:
        max_wavelength: float. The longest wavelength, as in keras-hub.
            Defaults to `10000`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: floating tensor `[..., length, features]` (rank 3 or more).
        start_index: int, or float with an integral value, scalar or
            tensor. Position of the first token. Defaults to `0`.
        positions: `[length]` or `[batch, length]` positions, integers or
            floats with integral values (a fractional one is refused, and
            gives NaN rows when traced); overrides `start_index`.

    Example:

    >>> from keras_posenc import compat
    >>> pe = compat.SinePositionEncoding()(np.zeros((1, 4, 6), "float32"))
    >>> np.round(keras.ops.convert_to_numpy(pe[0, 3]), 4)
    array([ 0.1411, -0.99  ,  0.1388,  0.9903,  0.0065,  1.    ],
          dtype=float32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        options = {"max_wavelength": _arguments.check_wavelength(max_wavelength)}
        super().__init__(options, **kwargs)

    def exact_layer(self, width):
        return keras_posenc.SinusoidalPositionEncoding(
            max_wavelength=self.max_wavelength,
            merge=None,
            sequence_axis=-2,
            dtype=self.dtype_policy,
        )

    def call(self, inputs, start_index=0, positions=None):
        if len(inputs.shape) < 3:
            expected = "a tensor of rank 3 or more, [..., length, features]"
            shape = f"<shape={tuple(inputs.shape)}>"
            raise _arguments.invalid("inputs", expected, shape)
        exact = self._exact_layers(inputs.shape[-1])
        seq = len(inputs.shape) - 2
        return exact_call(exact, inputs, start_index, positions, seq)
