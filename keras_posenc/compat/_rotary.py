"""keras-hub's `RotaryEmbedding`, computed exactly."""

import math
import sys

import keras

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, ROTARY_DEFAULTS, HubLayer, sequence_axis
from keras_posenc.compat._calls import exact_call

ROPE_TYPES = ("linear", "dynamic", "yarn")
_YARN_ONLY = ("beta_fast", "beta_slow", "original_max_position_embeddings", "truncate")
# keras-hub widens a YaRN ramp narrower than this; transformers (and
# `keras_posenc.RotaryEmbedding`) only an empty one.
_YARN_MIN_RAMP = 0.001
# Two logarithms whose difference is at least this relative to their size
# keep its sign through the ramp's few float64 roundings (about 1e-16 each).
_RAMP_MARGIN = 1e-9


def linear(factor):
    """Hugging Face's linear scaling by `factor` (`None` for 1)."""
    return None if factor == 1 else {"rope_type": "linear", "factor": float(factor)}


class Rotary(HubLayer):
    """keras-hub's rotary call: `(inputs, start_index=0, positions=None)`.

    Subclasses define `rotary_options(dim, *key)`: the
    `keras_posenc.RotaryEmbedding` arguments for rotary dimension `dim`.
    """

    def exact_layer(self, dim, *key):
        if dim % 2:
            expected = "an even feature dimension"
            raise _arguments.invalid("inputs", expected, f"<features={dim}>")
        return keras_posenc.RotaryEmbedding(
            sequence_axis=self.sequence_axis,
            feature_axis=self.feature_axis,
            dtype=self.dtype_policy,
            **self.rotary_options(dim, *key),
        )

    def call(self, inputs, start_index=0, positions=None):
        width = inputs.shape[sequence_axis(inputs, self.feature_axis, "feature_axis")]
        seq = sequence_axis(inputs, self.sequence_axis)
        if width == 0:
            # keras-hub's GPT-NeoX rotates `int(head_size * rotary_percentage)`
            # features, which may be none: a rotation of nothing is the identity.
            return inputs
        exact = self._exact_layers(width)
        return exact_call(exact, inputs, start_index, positions, seq)


def _turns(options, key):
    """keras-hub's `original_max_position_embeddings / (key * 2 pi)`, whose
    logarithm places an end of the YaRN ramp: a finite number > 0, else a
    ValueError naming what made it otherwise (checked at construction)."""
    orig, rotations = options["original_max_position_embeddings"], options[key]
    try:
        turns = orig / (rotations * 2 * math.pi)
    except OverflowError:  # an int past float64
        raise _arguments.invalid(
            "original_max_position_embeddings",
            f"a positive integer below {sys.float_info.max:.4g} with rope_type='yarn'",
            orig,
        ) from None
    if not 0 < turns < math.inf:
        expected = (
            f"a value for which original_max_position_embeddings / ({key} * 2 pi) "
            f"is a finite number > 0 in float64 (the YaRN ramp is its logarithm); "
            f"it is {turns}"
        )
        raise _arguments.invalid(key, expected, rotations)
    return turns


def _attention_factor(scaling_factor):
    """keras-hub's YaRN attention factor, ``0.1 ln(scaling_factor) + 1``."""
    return 0.1 * math.log(scaling_factor) + 1.0


def _check_yarn(options):
    """What YaRN needs whatever the rotary dimension (known at the first
    call): a base other than 1, ramp ends whose logarithms exist, a ramp
    that does not end before it starts at every dimension, and a positive
    attention factor. What depends on the dimension is checked then."""
    if options["rope_type"] != "yarn":
        return
    base = options["max_wavelength"]
    if base == 1:
        expected = "a base other than 1 with rope_type='yarn'"
        raise _arguments.invalid("max_wavelength", expected, base)
    fast, slow = (math.log(_turns(options, key)) for key in ("beta_fast", "beta_slow"))
    _check_ramp_order(options, fast, slow)
    attention = _attention_factor(options["scaling_factor"])
    if not attention > 0:
        expected = (
            "a factor above e**-10 (about 4.54e-05) with rope_type='yarn': "
            "keras-hub's attention factor 0.1 ln(scaling_factor) + 1 is "
            f"{attention:.6g}"
        )
        raise _arguments.invalid("scaling_factor", expected, options["scaling_factor"])


def _check_ramp_order(options, fast, slow):
    """Without truncation, the ramp from ``d ln(fast) / (2 ln b)`` to
    ``d ln(slow) / (2 ln b)`` (logarithms `fast`, `slow`) has the sign of
    ``(slow - fast) / ln b`` at every rotary dimension ``d``: a negative
    one is refused at the first call whatever ``d``, so it is here."""
    log_base = math.log(options["max_wavelength"])
    margin = _RAMP_MARGIN * max(abs(fast), abs(slow))
    if options["truncate"] or (slow - fast) * math.copysign(1, log_base) >= -margin:
        return
    if log_base > 0:
        name, expected = "beta_fast", f"a value above beta_slow={options['beta_slow']}"
    else:
        name = "max_wavelength"
        expected = f"a base above 1 with beta_fast > beta_slow={options['beta_slow']}"
    expected += (
        " with rope_type='yarn' and truncate=False: the YaRN ramp ends before "
        "it starts at every rotary dimension"
    )
    raise _arguments.invalid(name, expected, options[name])


def _check_yarn_only(options):
    """keras-hub reads the YaRN arguments only with `rope_type="yarn"`."""
    if options["rope_type"] == "yarn":
        return
    for key in _YARN_ONLY:
        if options[key] != ROTARY_DEFAULTS[key]:
            expected = (
                f"{ROTARY_DEFAULTS[key]!r}: keras-hub uses it only with "
                f"rope_type='yarn', not {options['rope_type']!r}"
            )
            raise _arguments.invalid(key, expected, options[key])


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubRotaryEmbedding"
)
class RotaryEmbedding(Rotary):
    """keras-hub's `RotaryEmbedding`, exact to float32 rounding.

    The rotation of [RoFormer](https://arxiv.org/abs/2104.09864) (Su et al.,
    2021) with keras-hub's arguments, defaults and "rotate half" layout,
    computed by `keras_posenc.RotaryEmbedding`: within 2e-7 of the exact
    cos and sin at every int32 position, where keras-hub's float32 angles
    are off by 0.06 at position 10**6. keras-hub's scalings map exactly to
    Hugging Face ones: `"linear"` is ``{"rope_type": "linear", "factor":
    scaling_factor}``, `"dynamic"` divides the frequencies by
    ``scaling_factor ** (d / (d - 2))`` (`d` the rotary dimension), `"yarn"`
    is Hugging Face's YaRN with keras-hub's attention factor
    ``0.1 ln(scaling_factor) + 1``. An argument keras-hub would ignore (a
    YaRN one with another `rope_type`) is refused by name.

    Args:
        max_wavelength: float. The base (`rope_theta`). Defaults to `10000`.
        scaling_factor: float. Defaults to `1.0`.
        rope_type: `"linear"`, `"dynamic"` or `"yarn"`. Defaults to
            `"linear"`.
        beta_fast: float. YaRN only. Defaults to `32.0`.
        beta_slow: float. YaRN only. Defaults to `1.0`.
        original_max_position_embeddings: int. YaRN only. Defaults to
            `4096`.
        truncate: bool. YaRN only: round the correction range to whole
            dimensions. Defaults to `True`.
        sequence_axis: int. Axis of positions. Defaults to `1`.
        feature_axis: int. Axis of features. Defaults to `-1`.
        denominator_dim: int. The `d'` of the frequencies ``b**(-2i/d')``
            when it is not the rotary dimension (Gemma 4), at most 65536.
            Defaults to `None`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: floating tensor, e.g. `[batch, length, heads, dim]`.
        start_index: int, or float with an integral value, scalar or
            tensor. Position of the first token. Defaults to `0`.
        positions: `[length]` or `[batch, length]` positions (`[1, length]`
            is shared by the batch), integers or floats with integral
            values (a fractional one is refused, and gives NaN rows when
            traced); overrides `start_index`.

    Example:

    >>> from keras_posenc import compat
    >>> q = np.ones((1, 3, 2, 4), "float32")  # [batch, length, heads, dim]
    >>> out = compat.RotaryEmbedding(scaling_factor=2.0)(q)
    >>> np.round(keras.ops.convert_to_numpy(out[0, 1, 0]), 4)
    array([0.3982, 0.995 , 1.357 , 1.005 ], dtype=float32)

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Peng et al., 2023 (YaRN)](https://arxiv.org/abs/2309.00071)
    """

    def __init__(
        self,
        max_wavelength=10000,
        scaling_factor=1.0,
        rope_type="linear",
        beta_fast=32.0,
        beta_slow=1.0,
        original_max_position_embeddings=4096,
        truncate=True,
        sequence_axis=1,
        feature_axis=-1,
        denominator_dim=None,
        **kwargs,
    ):
        if denominator_dim is not None:
            # It sets d' / 2 frequencies: bounded as a depth is.
            denominator_dim = _arguments.check_positive_int(
                "denominator_dim", denominator_dim, _arguments.MAX_DEPTH
            )
        wavelength = _arguments.check_wavelength
        options = {
            "max_wavelength": wavelength(max_wavelength),
            "scaling_factor": wavelength(scaling_factor, "scaling_factor"),
            "rope_type": _arguments.check_choice("rope_type", rope_type, ROPE_TYPES),
            "beta_fast": wavelength(beta_fast, "beta_fast"),
            "beta_slow": wavelength(beta_slow, "beta_slow"),
            "original_max_position_embeddings": _arguments.check_positive_int(
                "original_max_position_embeddings", original_max_position_embeddings
            ),
            "truncate": _arguments.check_bool("truncate", truncate),
            "sequence_axis": _arguments.check_int("sequence_axis", sequence_axis),
            "feature_axis": _arguments.check_int("feature_axis", feature_axis),
            "denominator_dim": denominator_dim,
        }
        _check_yarn_only(options)
        _check_yarn(options)
        super().__init__(options, **kwargs)

    def rotary_options(self, dim):
        base, scale = self.max_wavelength, self.scaling_factor
        if self.rope_type == "yarn":
            return {"max_wavelength": base, "rope_scaling": self._yarn(dim)}
        if self.rope_type == "dynamic":
            scale = scale ** (dim / max(1, dim - 2))
        denominator = self.denominator_dim
        if denominator is None or denominator == dim:
            return {"max_wavelength": base, "rope_scaling": linear(scale)}
        if dim > denominator:
            expected = f"at most denominator_dim={denominator} features"
            raise _arguments.invalid("inputs", expected, f"<features={dim}>")
        # b**(-2i/d') for d' != dim: the exact values, then one division.
        inverse = keras_posenc.frequencies(denominator, base)[: dim // 2] / scale
        return {"max_wavelength": base, "inverse_frequencies": inverse}

    def _yarn(self, dim):
        """Hugging Face's YaRN, once keras-hub's ramp is known to be the same."""
        base, orig = self.max_wavelength, self.original_max_position_embeddings
        options = {name: getattr(self, name) for name in self._option_names}

        def correction(key):
            return dim * math.log(_turns(options, key)) / (2 * math.log(base))

        low, high = correction("beta_fast"), correction("beta_slow")
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        width = min(high, dim - 1) - max(low, 0)
        if width != 0 and width < _YARN_MIN_RAMP:
            expected = (
                f"a YaRN ramp of 0 or at least {_YARN_MIN_RAMP} dimensions "
                f"(keras-hub widens a narrower one, transformers does not); "
                f"with beta_slow={self.beta_slow} at rotary dim {dim} it is {width}"
            )
            raise _arguments.invalid("beta_fast", expected, self.beta_fast)
        return {
            "rope_type": "yarn",
            "factor": self.scaling_factor,
            "original_max_position_embeddings": orig,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "truncate": self.truncate,
            # keras-hub's, also below factor 1 (where transformers uses 1).
            "attention_factor": _attention_factor(self.scaling_factor),
        }
