"""keras-hub's `AlibiBias`, computed exactly."""

import keras
from keras import ops

from keras_posenc import _backend
from keras_posenc._alibi import bias as _bias
from keras_posenc._alibi import slopes as _slopes
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, HubLayer


@keras.saving.register_keras_serializable(package=PACKAGE, name="KerasHubAlibiBias")
class AlibiBias(HubLayer):
    """keras-hub's `AlibiBias`, exact to float32 rounding.

    The linear biases of Press et al., 2021
    (https://arxiv.org/abs/2108.12409) as keras-hub adds them: head `h` of
    scores `[batch, heads, query, key]` gets ``slope_h * (j - (key - 1))``
    for key `j`, the same for every query (softmax ignores the constant
    per row that separates it from ``slope_h * (j - i)``), with keras-hub's
    slopes (the paper's rule, `alibi_bias_max`). keras-hub casts the
    distances to the compute dtype first (under `mixed_bfloat16` a distance
    of 1000 becomes a multiple of 4; under `mixed_float16` one past 65504
    becomes inf); here the int32 distance is never rounded, the bias is
    within 0.6 float32 ulp of the exact product
    (`keras_posenc.alibi_bias`), cast once to the dtype of the scores, and
    saturates at +-65504 in float16.

    Args:
        alibi_bias_max: int. The `m` of the slopes ``2**(-m (h + 1) /
            heads)``, from 1 to 64. Defaults to `8`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        attention_scores: floating tensor `[batch, heads, query, key]`.

    Example:

    >>> from keras_posenc import compat
    >>> out = compat.AlibiBias()(np.zeros((1, 2, 1, 3), "float32"))
    >>> keras.ops.convert_to_numpy(out)[0, :, 0]
    array([[-0.125     , -0.0625    ,  0.        ],
           [-0.0078125 , -0.00390625,  0.        ]], dtype=float32)

    References:
        - [Press et al., 2021](https://arxiv.org/abs/2108.12409)
    """

    def __init__(self, alibi_bias_max=8, **kwargs):
        options = {"alibi_bias_max": _slopes.check_bias_max(alibi_bias_max)}
        super().__init__(options, **kwargs)

    def exact_layer(self, heads):
        """The float32 slope pairs of `heads` heads (made once, on the host)."""

        def make():
            pair = _slopes.split(_slopes.slopes(heads, self.alibi_bias_max))
            return _bias.slope_constants(pair)

        return _backend.host_work(make)()

    @_backend.on_keras_device
    def call(self, attention_scores):
        shape = tuple(attention_scores.shape)
        if len(shape) != 4:
            expected = "a tensor [batch, heads, query, key]"
            raise _arguments.invalid("attention_scores", expected, f"<shape={shape}>")
        high, low = self._exact_layers(shape[1])
        key_length = shape[3]
        if key_length is None:
            key_length = ops.shape(attention_scores)[3]
        last = ops.reshape(ops.maximum(key_length - 1, 0), (1,))
        dtype = _backend.dtype_name(attention_scores)
        bias = _bias.bias(
            last, key_length, high, low, symmetric=False, dtype=dtype, one_row=True
        )
        return attention_scores + bias
