"""keras-hub's model-specific rotary layers (Llama 3, ESM), computed exactly."""

import warnings

import keras

from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, fixed, unused
from keras_posenc.compat._rotary import Rotary, linear

_LLAMA3 = (
    "frequency_adjustment_factor",
    "low_freq_factor",
    "high_freq_factor",
    "pretraining_sequence_length",
)


def _llama3(values):
    """The four Llama 3 arguments, checked: all set, or all `None`."""
    grouped = dict(zip(_LLAMA3, values, strict=True))
    unset = [name for name, value in grouped.items() if value is None]
    if len(unset) == len(grouped):
        return grouped
    if unset:
        expected = f"a value, as the other Llama 3 arguments are set ({unset} are not)"
        raise _arguments.invalid(unset[0], expected, None)
    for name in _LLAMA3[:3]:
        grouped[name] = _arguments.check_wavelength(grouped[name], name)
    grouped[_LLAMA3[3]] = _arguments.check_positive_int(_LLAMA3[3], grouped[_LLAMA3[3]])
    low, high = grouped["low_freq_factor"], grouped["high_freq_factor"]
    if high <= low:
        expected = f"a value > low_freq_factor={low}"
        raise _arguments.invalid("high_freq_factor", expected, high)
    return grouped


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubLlamaRotaryEmbedding"
)
class LlamaRotaryEmbedding(Rotary):
    """keras-hub's Llama rotary layer (Llama 3.1+ scaling), exact.

    keras-hub's `LlamaRotaryEmbedding` (RoPE of Su et al., 2021,
    https://arxiv.org/abs/2104.09864, with Llama 3.1's frequency scaling)
    is Hugging Face's `"llama3"` `rope_type`: computed by
    `keras_posenc.RotaryEmbedding` with ``{"rope_type": "llama3", "factor":
    frequency_adjustment_factor, "low_freq_factor": low_freq_factor,
    "high_freq_factor": high_freq_factor, "original_max_position_embeddings":
    pretraining_sequence_length}``, or unscaled when those four are `None`.
    keras-hub ignores `position_scaling_factor` (its values are unscaled,
    whatever the factor): so does this drop-in, with a warning when it is
    not `1.0`.

    Args:
        max_wavelength: float. The base (`rope_theta`). Defaults to `10000`.
        position_scaling_factor: float > 0. Ignored, as keras-hub ignores
            it (a warning when not `1.0`). Defaults to `1.0`.
        sequence_axis: int. Axis of positions. Defaults to `1`.
        feature_axis: int. Axis of features. Defaults to `-1`.
        frequency_adjustment_factor: float. Llama 3's `factor`.
        low_freq_factor: float. Llama 3's `low_freq_factor`.
        high_freq_factor: float. Llama 3's `high_freq_factor`.
        pretraining_sequence_length: int. Llama 3's
            `original_max_position_embeddings`. These four are all set or
            all `None` (the default).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        As `compat.RotaryEmbedding`.

    Example:

    >>> from keras_posenc import compat
    >>> rope = compat.LlamaRotaryEmbedding(
    ...     max_wavelength=500000, frequency_adjustment_factor=8.0,
    ...     low_freq_factor=1.0, high_freq_factor=4.0,
    ...     pretraining_sequence_length=8192)
    >>> tuple(rope(np.ones((1, 5, 2, 64), "float32"), start_index=10**6).shape)
    (1, 5, 2, 64)

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Llama 3 herd of models, 2024](https://arxiv.org/abs/2407.21783)
    """

    def __init__(
        self,
        max_wavelength=10000,
        position_scaling_factor=1.0,
        sequence_axis=1,
        feature_axis=-1,
        frequency_adjustment_factor=None,
        low_freq_factor=None,
        high_freq_factor=None,
        pretraining_sequence_length=None,
        **kwargs,
    ):
        position_scaling_factor = _arguments.check_wavelength(
            position_scaling_factor, "position_scaling_factor"
        )
        if position_scaling_factor != 1.0:
            warnings.warn(
                "keras-hub's LlamaRotaryEmbedding ignores `position_scaling_factor` "
                f"(here {position_scaling_factor!r}: its values are unscaled), and "
                "so does this drop-in.",
                stacklevel=2,
            )
        values = (
            frequency_adjustment_factor,
            low_freq_factor,
            high_freq_factor,
            pretraining_sequence_length,
        )
        options = {
            "max_wavelength": _arguments.check_wavelength(max_wavelength),
            "position_scaling_factor": position_scaling_factor,
            "sequence_axis": _arguments.check_int("sequence_axis", sequence_axis),
            "feature_axis": _arguments.check_int("feature_axis", feature_axis),
            **_llama3(values),
        }
        super().__init__(options, **kwargs)

    @classmethod
    def translate(cls, config):
        # keras-hub's config repeats `position_scaling_factor` as the base
        # class's `scaling_factor`, and names the pretraining length
        # `original_max_embeddings` (which keras-hub itself cannot reload).
        config = dict(config)
        if config.get("scaling_factor") == config.get("position_scaling_factor", 1.0):
            config.pop("scaling_factor")
        length = config.pop("original_max_embeddings", None)
        if length is not None:
            given = config.setdefault("pretraining_sequence_length", length)
            if given != length:
                expected = f"the value of original_max_embeddings={length}"
                raise _arguments.invalid("pretraining_sequence_length", expected, given)
        return unused("LlamaRotaryEmbedding", config)

    def rotary_options(self, dim):
        scaling = None
        if self.pretraining_sequence_length is not None:
            scaling = {
                "rope_type": "llama3",
                "factor": self.frequency_adjustment_factor,
                "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position_embeddings": self.pretraining_sequence_length,
            }
        return {"max_wavelength": self.max_wavelength, "rope_scaling": scaling}


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubESMRotaryEmbedding"
)
class ESMRotaryEmbedding(Rotary):
    """keras-hub's ESM rotary layer, exact: rotates queries and keys.

    keras-hub's `ESMRotaryEmbedding` (RoPE of Su et al., 2021,
    https://arxiv.org/abs/2104.09864, as ESM-2 uses it) turns `q` and `k`
    of shape `[batch, length, heads, dim]` by the angles of positions
    ``0 .. length - 1`` with frequencies ``scaling_factor * b**(-2i/dim)``:
    Hugging Face's ``{"rope_type": "linear", "factor": 1 / scaling_factor}``,
    computed in float32 whatever the compute dtype (keras-hub's are in the
    compute dtype).

    Args:
        max_wavelength: float. The base. Defaults to `10000`.
        scaling_factor: float. Multiplies the frequencies. Defaults to `1.0`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        q: floating tensor `[batch, length, heads, dim]`.
        k: floating tensor of the same layout.
        position: int. The sequence axis; keras-hub's layer supports `1`
            only. Defaults to `1`.

    Example:

    >>> from keras_posenc import compat
    >>> q = k = np.ones((1, 3, 2, 4), "float32")
    >>> [tuple(t.shape) for t in compat.ESMRotaryEmbedding()(q, k)]
    [(1, 3, 2, 4), (1, 3, 2, 4)]

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
    """

    sequence_axis, feature_axis = 1, -1

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, **kwargs):
        options = {
            "max_wavelength": _arguments.check_wavelength(max_wavelength),
            "scaling_factor": _arguments.check_wavelength(
                scaling_factor, "scaling_factor"
            ),
        }
        super().__init__(options, **kwargs)

    @classmethod
    def translate(cls, config):
        config = unused("ESMRotaryEmbedding", config, used=("scaling_factor",))
        config = fixed(
            "ESMRotaryEmbedding", config, {"sequence_axis": 1, "feature_axis": -1}
        )
        config.setdefault("scaling_factor", 1.0)
        return config

    def rotary_options(self, dim):
        factor = 1 / self.scaling_factor
        return {"max_wavelength": self.max_wavelength, "rope_scaling": linear(factor)}

    # keras-hub's ESM layer rotates q and k in one call: its signature, not ours.
    def call(self, q, k, position=1):  # type: ignore[override]
        if position != 1:
            expected = "1: keras-hub's ESMRotaryEmbedding supports no other axis"
            raise _arguments.invalid("position", expected, position)
        exact = self._exact_layers(q.shape[-1])
        return exact(q), exact(k)

    def compute_output_shape(self, q_shape, k_shape):  # type: ignore[override]
        return q_shape, k_shape
