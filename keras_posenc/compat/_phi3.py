"""keras-hub's Phi-3 "su" rotary layer (LongRoPE), computed exactly."""

import keras
import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, sequence_axis, unused
from keras_posenc.compat._calls import exact_call, integral
from keras_posenc.compat._rotary import Rotary

_FACTORS = ("inverese_freq_short_factor", "inverese_freq_long_factor")


def _factors(name, value):
    values = list(np.ravel(value)) if isinstance(value, (list, tuple)) else []
    if not values:
        raise _arguments.invalid(name, "a non-empty list of finite numbers > 0", value)
    return [_arguments.check_wavelength(v, name) for v in values]


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubPhi3SuScaledRotaryEmbedding"
)
class Phi3SuScaledRotaryEmbedding(Rotary):
    """keras-hub's Phi-3 "su" rotary layer (LongRoPE), exact.

    keras-hub's `Phi3SuScaledRotaryEmbedding` is Hugging Face's `"longrope"`
    `rope_type` ([Ding et al., 2024](https://arxiv.org/abs/2402.13753)) on
    RoPE (Su et al., 2021, https://arxiv.org/abs/2104.09864), with the
    factors chosen per call as keras-hub does: the long ones when
    ``start_index + length > pretraining_sequence_length``, else the short
    ones (with `positions` too). cos and sin carry the attention factor
    ``sqrt(1 + ln(s) / ln(pretraining_sequence_length))``,
    ``s = max_sequence_length / pretraining_sequence_length`` (1 when
    ``s <= 1``). Each factor set is one `keras_posenc.RotaryEmbedding`.

    Args:
        inverese_freq_short_factor: list of floats (keras-hub's spelling):
            `rotary_dim / 2` factors for short sequences.
        inverese_freq_long_factor: list of floats: the same for long ones.
        max_sequence_length: int. Defaults to `4096`.
        pretraining_sequence_length: int. Defaults to `4096`.
        max_wavelength: float. The base (`rope_theta`). Defaults to `10000`.
        sequence_axis: int. Axis of positions. Defaults to `1`.
        feature_axis: int. Axis of features. Defaults to `-1`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        As `compat.RotaryEmbedding`; `start_index` is a scalar (one factor
        set per call).

    Example:

    >>> from keras_posenc import compat
    >>> rope = compat.Phi3SuScaledRotaryEmbedding(
    ...     [1.0, 1.5], [2.0, 4.0], max_sequence_length=64,
    ...     pretraining_sequence_length=16)
    >>> tuple(rope(np.ones((1, 20, 2, 4), "float32")).shape)
    (1, 20, 2, 4)

    References:
        - [Ding et al., 2024 (LongRoPE)](https://arxiv.org/abs/2402.13753)
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
    """

    def __init__(
        self,
        inverese_freq_short_factor,
        inverese_freq_long_factor,
        max_sequence_length=4096,
        pretraining_sequence_length=4096,
        max_wavelength=10000,
        sequence_axis=1,
        feature_axis=-1,
        **kwargs,
    ):
        positive_int = _arguments.check_positive_int
        options = {
            _FACTORS[0]: _factors(_FACTORS[0], inverese_freq_short_factor),
            _FACTORS[1]: _factors(_FACTORS[1], inverese_freq_long_factor),
            "max_sequence_length": positive_int(
                "max_sequence_length", max_sequence_length
            ),
            "pretraining_sequence_length": positive_int(
                "pretraining_sequence_length", pretraining_sequence_length
            ),
            "max_wavelength": _arguments.check_wavelength(max_wavelength),
            "sequence_axis": _arguments.check_int("sequence_axis", sequence_axis),
            "feature_axis": _arguments.check_int("feature_axis", feature_axis),
        }
        super().__init__(options, **kwargs)

    @classmethod
    def translate(cls, config):
        return unused("Phi3SuScaledRotaryEmbedding", config)

    def rotary_options(self, dim, long):
        name = _FACTORS[1] if long else _FACTORS[0]
        if len(getattr(self, name)) != dim // 2:
            expected = f"rotary_dim / 2 = {dim // 2} factors"
            raise _arguments.invalid(name, expected, getattr(self, name))
        orig = self.pretraining_sequence_length
        scaling = {
            "rope_type": "longrope",
            "short_factor": getattr(self, _FACTORS[0]),
            "long_factor": getattr(self, _FACTORS[1]),
            "original_max_position_embeddings": orig,
            "factor": self.max_sequence_length / orig,
            # The long factors are used past the pretraining length.
            "seq_len": orig + 1 if long else None,
        }
        return {"max_wavelength": self.max_wavelength, "rope_scaling": scaling}

    @_backend.on_keras_device
    def call(self, inputs, start_index=0, positions=None):
        dim = inputs.shape[sequence_axis(inputs, self.feature_axis, "feature_axis")]
        seq = sequence_axis(inputs, self.sequence_axis)
        if dim == 0:
            return inputs  # a rotation of nothing, as `Rotary.call`
        start, _ = integral("start_index", start_index)
        if (len(start.shape) if hasattr(start, "shape") else np.ndim(start)) != 0:
            expected = "a scalar (one factor set per call)"
            raise _arguments.invalid("start_index", expected, start)
        length = inputs.shape[seq]
        last = start + (ops.shape(inputs)[seq] if length is None else length)

        def rotate(long):
            exact = self._exact_layers(dim, long)
            return exact_call(exact, inputs, start_index, positions, seq)

        known = _backend.static_value(last)
        if known is not None:
            return rotate(bool(known > self.pretraining_sequence_length))
        return ops.cond(
            ops.greater(last, self.pretraining_sequence_length),
            lambda: rotate(True),
            lambda: rotate(False),
        )
