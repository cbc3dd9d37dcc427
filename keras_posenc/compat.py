"""keras-hub drop-ins: its position layers' arguments and values, computed exactly.

`SinePositionEncoding` and `RotaryEmbedding` take keras-hub's constructor
arguments (with its defaults) and call arguments (`start_index`, and
`positions` as keras-hub takes them: integers, or floats with integral
values) and return keras-hub's layout, computed by the exact engine of
`keras_posenc.SinusoidalPositionEncoding` and `keras_posenc.RotaryEmbedding`:
equal to keras-hub's values within float32 noise at short positions, and
within 2e-7 of the exact values at every int32 position, where keras-hub's
float32 angles are off by ``p * 2**-24`` radians (0.06 at position 10**6).
`LlamaRotaryEmbedding`, `Phi3SuScaledRotaryEmbedding` and
`ESMRotaryEmbedding` stand in for the keras-hub subclasses of those names.

`use_exact(model)` makes every keras-hub position layer inside a keras-hub
model exact, in place, and refuses by name any layer it cannot map exactly.

keras-hub is Keras 3 only: so is this module (under `TF_USE_LEGACY_KERAS=1`
it imports, and its layers refuse to be made).
"""

import math
import numbers
import warnings

import keras
import numpy as np
from keras import ops

import keras_posenc

# keras-hub's defaults for the arguments of its base `RotaryEmbedding`.
_ROTARY_DEFAULTS = {
    "scaling_factor": 1.0,
    "rope_type": "linear",
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "original_max_position_embeddings": 4096,
    "truncate": True,
    "denominator_dim": None,
}
_YARN_ONLY = ("beta_fast", "beta_slow", "original_max_position_embeddings", "truncate")
_ROPE_TYPES = ("linear", "dynamic", "yarn")
# keras-hub separates two YaRN correction dimensions by at least this much;
# transformers (and `keras_posenc.RotaryEmbedding`) only when they are equal.
_YARN_MIN_RAMP = 0.001
_LAYER_KEYS = ("name", "trainable", "dtype")
_POSITION_LIMIT = 2**31
_PACKAGE = "keras_posenc"


def _invalid(name, expected, value):
    if isinstance(value, np.generic):
        value = value.item()
    return ValueError(
        f"Received an invalid value for `{name}`, expected {expected}. "
        f"Received: {name}={value!r}"
    )


def _require_keras3():
    if not issubclass(keras_posenc.RotaryEmbedding, keras.layers.Layer):
        raise RuntimeError(
            "keras_posenc.compat stands in for keras-hub layers, which are "
            "Keras 3 only; it is unavailable under TF_USE_LEGACY_KERAS=1 "
            "(tf-keras). Use keras_posenc.RotaryEmbedding and "
            "keras_posenc.SinusoidalPositionEncoding there."
        )


# -- arguments -----------------------------------------------------------------


def _positive(name, value):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise _invalid(name, "a finite number > 0", value)
    return value.item() if isinstance(value, np.generic) else value


def _positive_int(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise _invalid(name, "a positive integer", value)
    return int(value)


def _axis(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise _invalid(name, "an int", value)
    return int(value)


def _unused(owner, config, used=()):
    """Refuses keras-hub base-class keys that `owner` would silently ignore.

    keras-hub's subclasses accept every argument of its base
    `RotaryEmbedding` and ignore most of them: a non-default one here could
    only be a value the keras-hub layer does not apply, so it is refused
    rather than guessed at. Returns `config` without those keys.
    """
    config = dict(config)
    for key, default in _ROTARY_DEFAULTS.items():
        value = config.pop(key, default)
        if key not in used and value != default:
            expected = f"{default!r}: keras-hub's {owner} ignores `{key}`"
            raise _invalid(key, expected, value)
    return config


# -- positions as keras-hub passes them ---------------------------------------


def _known(value):
    """`value` as a numpy array when its value is known now, else `None`."""
    if isinstance(value, (numbers.Number, np.ndarray, np.generic, list, tuple)):
        return np.asarray(value)
    if isinstance(value, keras.KerasTensor):
        return None
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        if isinstance(value, tf.Tensor):
            return tf.get_static_value(value)
    if name == "jax":
        import jax

        if isinstance(value, jax.core.Tracer):
            return None
    if name == "torch":
        import torch

        if isinstance(value, torch.Tensor):
            # Subclasses are the fake tensors of torch.compile and torch.export.
            return value.detach().cpu().numpy() if type(value) is torch.Tensor else None
    return ops.convert_to_numpy(value)


def _graph_assert(ok, name):
    """A TF graph assertion (compiled out under XLA: the rows are NaN there)."""
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    if not tf.executing_eagerly():
        tf.debugging.Assert(
            ops.all(ok),
            [f"Received an invalid value for `{name}`: positions must be integral"],
        )


def _integral(name, value):
    """keras-hub's positions or start as integers, never rounded.

    Integer values pass through unchanged (the exact layer checks them).
    Floats known now must be whole numbers. Traced floats are cast, and the
    returned mask marks those that are not whole numbers in the int32
    range: their rows come out NaN (and a TF graph assertion fails), the
    package's policy for values that cannot be checked when traced.

    Returns:
        ``(value, bad)``: `bad` is `None`, or a boolean tensor shaped as the
        value.
    """
    if value is None or isinstance(value, (bool, str)):
        raise _invalid(name, "integral positions", value)
    known = _known(value)
    if known is not None:
        if known.dtype == object or not np.issubdtype(known.dtype, np.floating):
            return value, None
        if not np.all(np.isfinite(known)) or np.any(known != np.floor(known)):
            expected = "integral positions (a fractional position is never rounded)"
            if known.size > 16:
                echo = f"<array dtype={known.dtype} shape={known.shape}>"
            else:
                echo = known.tolist()
            raise _invalid(name, expected, echo)
        whole = known.astype(np.float64)
        if np.any(np.abs(whole) >= 2.0**63):
            return value, None  # the exact layer names it as out of int32 range
        return known.astype(np.int64) if known.ndim else int(known), None
    dtype = keras.backend.standardize_dtype(value.dtype)
    if not keras.backend.is_float_dtype(dtype):
        return value, None
    ok = ops.logical_and(
        ops.equal(value, ops.floor(value)),
        ops.logical_and(
            ops.greater_equal(value, -float(_POSITION_LIMIT)),
            ops.less(value, float(_POSITION_LIMIT)),
        ),
    )
    _graph_assert(ok, name)
    safe = ops.where(ok, value, ops.zeros_like(value))
    return ops.cast(safe, "int32"), ops.logical_not(ok)


def _nan_where(out, bad, axes):
    """`out` with NaN where `bad`, whose dimensions lie on `axes` of `out`."""
    if bad is None:
        return out
    shape = [1] * len(out.shape)
    for axis, size in zip(axes, ops.shape(bad), strict=True):
        shape[axis] = size
    nan = ops.cast(float("nan"), out.dtype)
    return ops.where(ops.reshape(bad, shape), nan, out)


def _shared(positions, bad, seq, batch):
    """keras-hub broadcasts `[1, L]` positions over the batch: so do we.

    Returns ``(positions, bad, axes of the output they lie on)``.
    """
    if len(positions.shape) == 1:
        return positions, bad, (seq,)
    rows = positions.shape[0]
    if rows == 1:
        return positions[0], None if bad is None else bad[0], (seq,)
    if rows is None and batch is not None:
        shape = (batch, ops.shape(positions)[1])
        positions = ops.broadcast_to(positions, shape)
        bad = None if bad is None else ops.broadcast_to(bad, shape)
    return positions, bad, (0, seq)


def _call_arguments(inputs, start_index, positions, seq):
    """keras-hub's `start_index` / `positions` as the exact layers take them.

    Returns:
        ``(kwargs, bad, axes)``: the keyword arguments of the exact call,
        the mask of traced non-integral values (or `None`) and the axes of
        the output that its dimensions lie on.
    """
    if positions is None:
        start, bad = _integral("start_index", start_index)
        axes = () if bad is None or not bad.shape else (0,)
        return {"start_index": start}, bad, axes
    positions, bad = _integral("positions", positions)
    if not hasattr(positions, "shape"):
        positions = np.asarray(positions)
    if len(positions.shape) != 2:
        return {"positions": positions}, bad, (seq,)
    batch = inputs.shape[0]
    batch = ops.shape(inputs)[0] if batch is None else batch
    positions, bad, axes = _shared(positions, bad, seq, batch)
    return {"positions": positions}, bad, axes


class _ExactLayers:
    """The exact layer for each key (a feature width, ...), made on first use.

    Not tracked by Keras (the layers hold no state), so that a layer that
    is already built can make one, even inside a trace.
    """

    def __init__(self, make):
        self._make, self._layers = make, {}

    def __call__(self, width, *key):
        if not isinstance(width, int):
            raise _invalid("inputs", "a known feature dimension", width)
        key = (width, *key)
        if key not in self._layers:
            self._layers[key] = self._make(*key)
        return self._layers[key]


def _sequence_axis(inputs, axis):
    rank = len(inputs.shape)
    if not -rank <= axis < rank:
        raise _invalid("sequence_axis", f"an axis of inputs of rank {rank}", axis)
    return axis % rank


class _KerasHubLayer(keras.layers.Layer):
    """What every drop-in shares: keras-hub's configs in, exact layers inside.

    Subclasses define `_check(**arguments) -> options` (the checked
    constructor arguments), `_exact_layer(*key)` and `call`, with exactly
    the call signature of the keras-hub layer they stand in for.
    """

    def __init__(self, options, **kwargs):
        _require_keras3()
        super().__init__(**kwargs)
        self._adopt(options)

    def _adopt(self, options):
        """Sets the checked options (from `__init__`, or `use_exact`)."""
        self._option_names = tuple(options)
        for name, value in options.items():
            setattr(self, name, value)
        self._exact_layers = _ExactLayers(self._exact_layer)
        self.built = True  # stateless, as keras-hub's layers are

    @classmethod
    def _translate(cls, config):
        """Constructor arguments from a keras-hub config dict."""
        return dict(config)

    @classmethod
    def from_config(cls, config):
        return cls(**cls._translate(config))

    @classmethod
    def _options_of(cls, layer):
        """The checked options of a keras-hub layer, for `use_exact`."""
        config = cls._translate(layer.get_config())
        for key in _LAYER_KEYS:
            config.pop(key, None)
        return cls._check(**config)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self._option_names})
        return config

    def compute_output_shape(self, input_shape):
        return input_shape


def _exact_call(exact, inputs, start_index, positions, seq):
    arguments, bad, axes = _call_arguments(inputs, start_index, positions, seq)
    return _nan_where(exact(inputs, **arguments), bad, axes)


# -- the sinusoidal layer ------------------------------------------------------


@keras.saving.register_keras_serializable(
    package=_PACKAGE, name="KerasHubSinePositionEncoding"
)
class SinePositionEncoding(_KerasHubLayer):
    """keras-hub's `SinePositionEncoding`, exact to float32 rounding.

    The encoding of Vaswani et al., "Attention Is All You Need" (2017),
    section 3.5, as keras-hub lays it out: the encoding alone (not added to
    the inputs), broadcast to the shape of `inputs`, sequence on axis -2,
    sine on even and cosine on odd features. Computed by
    `keras_posenc.SinusoidalPositionEncoding` in float32 and cast once to
    the compute dtype: within 2e-7 of the exact value at every int32
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
    >>> np.round(np.asarray(pe[0, 3]), 5)
    array([ 0.14112, -0.98999,  0.13879,  0.99032,  0.00646,  0.99998],
          dtype=float32)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(self._check(max_wavelength), **kwargs)

    @staticmethod
    def _check(max_wavelength=10000):
        return {"max_wavelength": _positive("max_wavelength", max_wavelength)}

    def _exact_layer(self, width):
        return keras_posenc.SinusoidalPositionEncoding(
            max_wavelength=float(self.max_wavelength),
            merge=None,
            sequence_axis=-2,
            dtype=self.dtype_policy,
        )

    def call(self, inputs, start_index=0, positions=None):
        exact = self._exact_layers(inputs.shape[-1])
        seq = len(inputs.shape) - 2
        return _exact_call(exact, inputs, start_index, positions, seq)


# -- rotary layers -------------------------------------------------------------


class _Rotary(_KerasHubLayer):
    """keras-hub's rotary call: `(inputs, start_index=0, positions=None)`."""

    def _rotary_options(self, dim, *key):
        """`keras_posenc.RotaryEmbedding` arguments for rotary dim `dim`."""
        raise NotImplementedError

    def _exact_layer(self, dim, *key):
        if dim % 2:
            raise _invalid("inputs", "an even feature dimension", f"<features={dim}>")
        return keras_posenc.RotaryEmbedding(
            sequence_axis=self.sequence_axis,
            feature_axis=self.feature_axis,
            dtype=self.dtype_policy,
            **self._rotary_options(dim, *key),
        )

    def call(self, inputs, start_index=0, positions=None):
        exact = self._exact_layers(inputs.shape[self.feature_axis])
        seq = _sequence_axis(inputs, self.sequence_axis)
        return _exact_call(exact, inputs, start_index, positions, seq)


def _linear(factor):
    return None if factor == 1 else {"rope_type": "linear", "factor": float(factor)}


@keras.saving.register_keras_serializable(
    package=_PACKAGE, name="KerasHubRotaryEmbedding"
)
class RotaryEmbedding(_Rotary):
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
            when it is not the rotary dimension. Defaults to `None`.
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
    >>> np.round(np.asarray(out[0, 1, 0]), 6)
    array([0.398157, 0.994987, 1.357008, 1.004987], dtype=float32)

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
        options = self._check(
            max_wavelength,
            scaling_factor,
            rope_type,
            beta_fast,
            beta_slow,
            original_max_position_embeddings,
            truncate,
            sequence_axis,
            feature_axis,
            denominator_dim,
        )
        super().__init__(options, **kwargs)

    @staticmethod
    def _check(
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
    ):
        if not isinstance(rope_type, str) or rope_type not in _ROPE_TYPES:
            raise _invalid("rope_type", f"one of {_ROPE_TYPES}", rope_type)
        if not isinstance(truncate, bool):
            raise _invalid("truncate", "a bool", truncate)
        if denominator_dim is not None:
            denominator_dim = _positive_int("denominator_dim", denominator_dim)
        options = {
            "max_wavelength": _positive("max_wavelength", max_wavelength),
            "scaling_factor": _positive("scaling_factor", scaling_factor),
            "rope_type": rope_type,
            "beta_fast": _positive("beta_fast", beta_fast),
            "beta_slow": _positive("beta_slow", beta_slow),
            "original_max_position_embeddings": _positive_int(
                "original_max_position_embeddings", original_max_position_embeddings
            ),
            "truncate": truncate,
            "sequence_axis": _axis("sequence_axis", sequence_axis),
            "feature_axis": _axis("feature_axis", feature_axis),
            "denominator_dim": denominator_dim,
        }
        if rope_type != "yarn":
            for key in _YARN_ONLY:
                if options[key] != _ROTARY_DEFAULTS[key]:
                    expected = (
                        f"{_ROTARY_DEFAULTS[key]!r}: keras-hub uses it only with "
                        f"rope_type='yarn', not {rope_type!r}"
                    )
                    raise _invalid(key, expected, options[key])
        return options

    def _rotary_options(self, dim):
        base, scale = float(self.max_wavelength), float(self.scaling_factor)
        if self.rope_type == "yarn":
            return {"max_wavelength": base, "rope_scaling": self._yarn(dim)}
        if self.rope_type == "dynamic":
            scale = scale ** (dim / max(1, dim - 2))
        denominator = self.denominator_dim
        if denominator is None or denominator == dim:
            return {"max_wavelength": base, "rope_scaling": _linear(scale)}
        if dim > denominator:
            expected = f"at most denominator_dim={denominator} features"
            raise _invalid("inputs", expected, f"<features={dim}>")
        # b**(-2i/d') for d' != dim: the exact values, then one division.
        inverse = keras_posenc.frequencies(denominator, base)[: dim // 2] / scale
        return {"max_wavelength": base, "inverse_frequencies": inverse}

    def _yarn(self, dim):
        """Hugging Face's YaRN, once keras-hub's ramp is known to be the same."""
        base, orig = float(self.max_wavelength), self.original_max_position_embeddings

        def correction(rotations):
            turns = orig / (rotations * 2 * math.pi)
            return dim * math.log(turns) / (2 * math.log(base))

        if base == 1:
            raise _invalid("max_wavelength", "a base other than 1 with yarn", base)
        low, high = correction(self.beta_fast), correction(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        width = min(high, dim - 1) - max(low, 0)
        if width != 0 and width < _YARN_MIN_RAMP:
            expected = (
                f"a YaRN ramp of 0 or at least {_YARN_MIN_RAMP} dimensions "
                f"(keras-hub widens a narrower one, transformers does not); "
                f"with beta_slow={self.beta_slow} at rotary dim {dim} it is {width}"
            )
            raise _invalid("beta_fast", expected, self.beta_fast)
        factor = float(self.scaling_factor)
        return {
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": orig,
            "beta_fast": float(self.beta_fast),
            "beta_slow": float(self.beta_slow),
            "truncate": self.truncate,
            # keras-hub's, also below factor 1 (where transformers uses 1).
            "attention_factor": 0.1 * math.log(factor) + 1.0,
        }


@keras.saving.register_keras_serializable(
    package=_PACKAGE, name="KerasHubLlamaRotaryEmbedding"
)
class LlamaRotaryEmbedding(_Rotary):
    """keras-hub's Llama rotary layer (Llama 3.1+ scaling), exact.

    keras-hub's `LlamaRotaryEmbedding` (RoPE of Su et al., 2021,
    https://arxiv.org/abs/2104.09864, with Llama 3.1's frequency scaling)
    is Hugging Face's `"llama3"` `rope_type`: computed by
    `keras_posenc.RotaryEmbedding` with ``{"rope_type": "llama3", "factor":
    frequency_adjustment_factor, "low_freq_factor": low_freq_factor,
    "high_freq_factor": high_freq_factor, "original_max_position_embeddings":
    pretraining_sequence_length}``, or unscaled when those four are `None`.
    keras-hub ignores `position_scaling_factor` (its values are unscaled),
    so any value but `1.0` is refused rather than guessed at.

    Args:
        max_wavelength: float. The base (`rope_theta`). Defaults to `10000`.
        position_scaling_factor: float. Must be `1.0`. Defaults to `1.0`.
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
        As `RotaryEmbedding`.

    Example:

    >>> from keras_posenc import compat
    >>> rope = compat.LlamaRotaryEmbedding(
    ...     max_wavelength=500000, frequency_adjustment_factor=8.0,
    ...     low_freq_factor=1.0, high_freq_factor=4.0,
    ...     pretraining_sequence_length=8192)
    >>> tuple(rope(np.ones((1, 5, 2, 64), "float32"), start_index=10**6).shape)
    (1, 5, 2, 64)
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
        options = self._check(
            max_wavelength,
            position_scaling_factor,
            sequence_axis,
            feature_axis,
            frequency_adjustment_factor,
            low_freq_factor,
            high_freq_factor,
            pretraining_sequence_length,
        )
        super().__init__(options, **kwargs)

    @staticmethod
    def _check(
        max_wavelength=10000,
        position_scaling_factor=1.0,
        sequence_axis=1,
        feature_axis=-1,
        frequency_adjustment_factor=None,
        low_freq_factor=None,
        high_freq_factor=None,
        pretraining_sequence_length=None,
    ):
        if position_scaling_factor != 1.0:
            expected = (
                "1.0: keras-hub's LlamaRotaryEmbedding ignores it (its values are "
                "unscaled), so the scaling meant is not known"
            )
            raise _invalid("position_scaling_factor", expected, position_scaling_factor)
        grouped = {
            "frequency_adjustment_factor": frequency_adjustment_factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "pretraining_sequence_length": pretraining_sequence_length,
        }
        unset = [name for name, value in grouped.items() if value is None]
        if unset and len(unset) < len(grouped):
            expected = (
                f"a value, as the other Llama 3 arguments are set ({unset} are not)"
            )
            raise _invalid(unset[0], expected, None)
        if not unset:
            for name in ("frequency_adjustment_factor", "low_freq_factor"):
                grouped[name] = _positive(name, grouped[name])
            grouped["high_freq_factor"] = _positive(
                "high_freq_factor", high_freq_factor
            )
            grouped["pretraining_sequence_length"] = _positive_int(
                "pretraining_sequence_length", pretraining_sequence_length
            )
            if high_freq_factor <= low_freq_factor:
                expected = f"a value > low_freq_factor={low_freq_factor}"
                raise _invalid("high_freq_factor", expected, high_freq_factor)
        return {
            "max_wavelength": _positive("max_wavelength", max_wavelength),
            "position_scaling_factor": position_scaling_factor,
            "sequence_axis": _axis("sequence_axis", sequence_axis),
            "feature_axis": _axis("feature_axis", feature_axis),
            **grouped,
        }

    @classmethod
    def _translate(cls, config):
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
                raise _invalid("pretraining_sequence_length", expected, given)
        return _unused("LlamaRotaryEmbedding", config)

    def _rotary_options(self, dim):
        scaling = None
        if self.pretraining_sequence_length is not None:
            scaling = {
                "rope_type": "llama3",
                "factor": float(self.frequency_adjustment_factor),
                "low_freq_factor": float(self.low_freq_factor),
                "high_freq_factor": float(self.high_freq_factor),
                "original_max_position_embeddings": self.pretraining_sequence_length,
            }
        return {"max_wavelength": float(self.max_wavelength), "rope_scaling": scaling}


@keras.saving.register_keras_serializable(
    package=_PACKAGE, name="KerasHubPhi3SuScaledRotaryEmbedding"
)
class Phi3SuScaledRotaryEmbedding(_Rotary):
    """keras-hub's Phi-3 "su" rotary layer (LongRoPE), exact.

    keras-hub's `Phi3SuScaledRotaryEmbedding` is Hugging Face's `"longrope"`
    `rope_type` ([Ding et al., 2024](https://arxiv.org/abs/2402.13753)) with
    the factors chosen per call, as transformers does: the long ones when
    ``start_index + length > pretraining_sequence_length``, else the short
    ones (with `positions` too, as keras-hub does). cos and sin carry the
    attention factor ``sqrt(1 + ln(s) / ln(pretraining_sequence_length))``,
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
        As `RotaryEmbedding`; `start_index` is a scalar (one factor set per
        call).

    Example:

    >>> from keras_posenc import compat
    >>> rope = compat.Phi3SuScaledRotaryEmbedding(
    ...     [1.0, 1.5], [2.0, 4.0], max_sequence_length=64,
    ...     pretraining_sequence_length=16)
    >>> tuple(rope(np.ones((1, 20, 2, 4), "float32")).shape)
    (1, 20, 2, 4)
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
        options = self._check(
            inverese_freq_short_factor,
            inverese_freq_long_factor,
            max_sequence_length,
            pretraining_sequence_length,
            max_wavelength,
            sequence_axis,
            feature_axis,
        )
        super().__init__(options, **kwargs)

    @staticmethod
    def _check(
        inverese_freq_short_factor,
        inverese_freq_long_factor,
        max_sequence_length=4096,
        pretraining_sequence_length=4096,
        max_wavelength=10000,
        sequence_axis=1,
        feature_axis=-1,
    ):
        factors = {}
        for name, value in (
            ("inverese_freq_short_factor", inverese_freq_short_factor),
            ("inverese_freq_long_factor", inverese_freq_long_factor),
        ):
            values = list(np.ravel(value)) if isinstance(value, (list, tuple)) else []
            if not values:
                raise _invalid(name, "a non-empty list of finite numbers > 0", value)
            factors[name] = [float(_positive(name, v)) for v in values]
        return {
            **factors,
            "max_sequence_length": _positive_int(
                "max_sequence_length", max_sequence_length
            ),
            "pretraining_sequence_length": _positive_int(
                "pretraining_sequence_length", pretraining_sequence_length
            ),
            "max_wavelength": _positive("max_wavelength", max_wavelength),
            "sequence_axis": _axis("sequence_axis", sequence_axis),
            "feature_axis": _axis("feature_axis", feature_axis),
        }

    @classmethod
    def _translate(cls, config):
        return _unused("Phi3SuScaledRotaryEmbedding", config)

    def _rotary_options(self, dim, long):
        name = "inverese_freq_long_factor" if long else "inverese_freq_short_factor"
        if len(getattr(self, name)) != dim // 2:
            expected = f"rotary_dim / 2 = {dim // 2} factors"
            raise _invalid(name, expected, getattr(self, name))
        orig = self.pretraining_sequence_length
        scaling = {
            "rope_type": "longrope",
            "short_factor": self.inverese_freq_short_factor,
            "long_factor": self.inverese_freq_long_factor,
            "original_max_position_embeddings": orig,
            "factor": self.max_sequence_length / orig,
            # The long factors are used past the pretraining length.
            "seq_len": orig + 1 if long else None,
        }
        return {"max_wavelength": float(self.max_wavelength), "rope_scaling": scaling}

    def call(self, inputs, start_index=0, positions=None):
        dim = inputs.shape[self.feature_axis]
        seq = _sequence_axis(inputs, self.sequence_axis)
        arguments, bad, axes = _call_arguments(inputs, start_index, positions, seq)
        start, _ = _integral("start_index", start_index)
        if len(getattr(start, "shape", ())):
            raise _invalid("start_index", "a scalar (one factor set per call)", start)
        length = inputs.shape[seq]
        last = start + (ops.shape(inputs)[seq] if length is None else length)

        def rotate(long):
            return self._exact_layers(dim, long)(inputs, **arguments)

        known = _known(last)
        if known is not None:
            out = rotate(bool(known > self.pretraining_sequence_length))
        else:
            out = ops.cond(
                ops.greater(last, self.pretraining_sequence_length),
                lambda: rotate(True),
                lambda: rotate(False),
            )
        return _nan_where(out, bad, axes)


@keras.saving.register_keras_serializable(
    package=_PACKAGE, name="KerasHubESMRotaryEmbedding"
)
class ESMRotaryEmbedding(_Rotary):
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
    """

    sequence_axis, feature_axis = 1, -1

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, **kwargs):
        super().__init__(self._check(max_wavelength, scaling_factor), **kwargs)

    @staticmethod
    def _check(max_wavelength=10000, scaling_factor=1.0):
        return {
            "max_wavelength": _positive("max_wavelength", max_wavelength),
            "scaling_factor": _positive("scaling_factor", scaling_factor),
        }

    @classmethod
    def _translate(cls, config):
        config = _unused("ESMRotaryEmbedding", config, used=("scaling_factor",))
        for key, default in (("sequence_axis", 1), ("feature_axis", -1)):
            value = config.pop(key, default)
            if value != default:
                expected = f"{default}: keras-hub's ESMRotaryEmbedding ignores it"
                raise _invalid(key, expected, value)
        config.setdefault("scaling_factor", 1.0)
        return config

    def _rotary_options(self, dim):
        base, scale = float(self.max_wavelength), float(self.scaling_factor)
        return {"max_wavelength": base, "rope_scaling": _linear(1 / scale)}

    def call(self, q, k, position=1):
        if position != 1:
            expected = "1: keras-hub's ESMRotaryEmbedding supports no other axis"
            raise _invalid("position", expected, position)
        exact = self._exact_layers(q.shape[-1])
        return exact(q), exact(k)

    def compute_output_shape(self, q_shape, k_shape):
        return q_shape, k_shape


# -- use_exact -----------------------------------------------------------------

_HUB_ROTARY = ("keras_hub.src.layers.modeling.rotary_embedding", "RotaryEmbedding")
_HUB_SINE = (
    "keras_hub.src.layers.modeling.sine_position_encoding",
    "SinePositionEncoding",
)
_HUB_BACKBONE = ("keras_hub.src.models.backbone", "Backbone")
# keras-hub's position layers (module, class name) and their drop-ins.
_DROP_INS = {
    _HUB_ROTARY: RotaryEmbedding,
    _HUB_SINE: SinePositionEncoding,
    (
        "keras_hub.src.models.llama.llama_rotary_embedding",
        "LlamaRotaryEmbedding",
    ): LlamaRotaryEmbedding,
    (
        "keras_hub.src.models.phi3.phi3_rotary_embedding",
        "Phi3SuScaledRotaryEmbedding",
    ): Phi3SuScaledRotaryEmbedding,
    (
        "keras_hub.src.models.esm.esm_attention",
        "ESMRotaryEmbedding",
    ): ESMRotaryEmbedding,
}
# Subclasses with no exact equivalent, and why.
_REFUSED = {
    "MoonshineRotaryEmbedding": (
        "it returns float32 angles (from a stored float32 `inv_freq` weight) "
        "that Moonshine's attention turns into cos and sin itself"
    ),
}
# keras-hub's other rotary code (own classes, inline rotations): left as is.
_LEFT_AS_IS = (
    "Gemma4VisionAttention",
    "Qwen3_5VisionRotaryEmbedding",
    "RoformrPositionalEmbedding",
    "SAM3ViTRotaryEmbedding",
    "SmolLM3RotaryEmbedding",
)
_COMPILED = ("train_function", "test_function", "predict_function", "generate_function")


def _lineage(obj):
    return {(klass.__module__, klass.__qualname__) for klass in type(obj).__mro__}


def _contained(path, value):
    """The layers held in an attribute value (a layer, list, tuple or dict)."""
    if isinstance(value, keras.layers.Layer):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _contained(f"{path}[{i}]", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _contained(f"{path}[{key!r}]", item)


def _children(layer):
    """``(path, child)`` for the layers a layer holds, named attributes first."""
    attributes = dict(vars(layer))
    attributes.update(attributes.pop("_modules", None) or {})  # torch modules
    for name in sorted(attributes, key=lambda n: (n.startswith("_"), n)):
        yield from _contained(f".{name}", attributes[name])


def _walk(root):
    """``(layer, owner, path, backbone)`` for every layer under `root`, once.

    `backbone` is the innermost keras-hub `Backbone` holding the layer: the
    object whose config rebuilds it when a saved model is loaded.
    """
    seen = {id(root)}
    backbone = root if _HUB_BACKBONE in _lineage(root) else None
    stack = [(root, "model", backbone)]
    while stack:
        owner, path, backbone = stack.pop()
        found = []
        for name, child in _children(owner):
            if id(child) in seen:
                continue
            seen.add(id(child))
            inner = child if _HUB_BACKBONE in _lineage(child) else backbone
            yield child, owner, path + name, inner
            found.append((child, path + name, inner))
        stack.extend(reversed(found))


def _drop_in(layer, owner, path):
    """The drop-in for a keras-hub position layer, `None` for other layers."""
    lineage = _lineage(layer)
    key = (type(layer).__module__, type(layer).__qualname__)
    if key in _DROP_INS:
        mrope = getattr(owner, "mrope_section", None)
        if mrope is not None:
            raise ValueError(
                f"use_exact cannot make `{path}` exact: its owner "
                f"{type(owner).__name__} (mrope_section={mrope}) computes its "
                "multimodal rotation itself from the layer's float32 "
                "frequencies. Build the model with mrope_section=None for text."
            )
        return _DROP_INS[key]
    if _HUB_ROTARY in lineage or _HUB_SINE in lineage:
        why = _REFUSED.get(
            type(layer).__name__, "use_exact does not know what it computes"
        )
        known = sorted(cls.__name__ for cls in _DROP_INS.values())
        raise ValueError(
            f"use_exact cannot make `{path}` ({type(layer).__name__}, a subclass "
            f"of a keras-hub position layer) exact: {why}. It replaces only "
            f"layers it maps exactly, the keras-hub layers named {known}; "
            "nothing was changed."
        )
    return None


class _ExactModel:
    """A model made exact by `use_exact`: saved as the model it is (its class
    and config), and made exact again when loaded (its config rebuilds
    keras-hub's layers)."""

    _original = None

    def get_config(self):
        original = self._original
        return {
            "model": {
                "module": original.__module__,
                "class_name": original.__name__,
                "config": original.get_config(self),
                "registered_name": keras.saving.get_registered_name(original),
            }
        }

    @classmethod
    def from_config(cls, config):
        model = keras.saving.deserialize_keras_object(config["model"])
        use_exact(model)
        return model


_EXACT_NAME = "KerasHubExactModel"
keras.saving.register_keras_serializable(package=_PACKAGE, name=_EXACT_NAME)(
    _ExactModel
)
_EXACT_CLASSES = {}


def _mark(model):
    """Gives `model` a subclass of its class that saves it as `_ExactModel`."""
    cls = type(model)
    if issubclass(cls, _ExactModel):
        return
    if cls not in _EXACT_CLASSES:
        namespace = {
            "_original": cls,
            "__module__": __name__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        }
        exact = type(cls.__name__, (_ExactModel, cls), namespace)
        # Every such class is saved under the one registered name, which
        # loads through `_ExactModel.from_config`.
        keras.saving.register_keras_serializable(package=_PACKAGE, name=_EXACT_NAME)(
            exact
        )
        keras.saving.get_custom_objects()[f"{_PACKAGE}>{_EXACT_NAME}"] = _ExactModel
        _EXACT_CLASSES[cls] = exact
    model.__class__ = _EXACT_CLASSES[cls]


def use_exact(model):
    """Makes every keras-hub position layer inside `model` exact, in place.

    Each keras-hub `RotaryEmbedding`, `SinePositionEncoding`,
    `LlamaRotaryEmbedding` (Llama 3 scaling), `Phi3SuScaledRotaryEmbedding`
    (LongRoPE) and `ESMRotaryEmbedding` inside a keras-hub backbone or task
    (or any Keras model or layer) becomes the drop-in of this module with
    the same configuration: the same values within float32 noise at short
    positions, and within 2e-7 of exact cos and sin (RoFormer, Su et al.,
    2021, https://arxiv.org/abs/2104.09864) at every int32 position. The
    layer objects are kept and change class, so every reference to them
    (attention layers' attributes, functional graphs) sees the exact layer;
    weights are untouched. A subclass that cannot be mapped exactly
    (Moonshine's, which returns angles; an unknown one; Qwen 3.5's
    multimodal rotation) is refused by name, and then nothing is changed.

    Compiled functions (`predict_function`, keras-hub's
    `generate_function`, ...) are reset, so `predict` and `generate` trace
    the exact layers. A saved model (`model.save("m.keras")`) loads with
    exact layers (`import keras_posenc` first). Rotary code of keras-hub
    that is not one of these layers (SmolLM3's, RoFormer's, vision
    encoders') is left as it is, with a warning.

    Args:
        model: a Keras model or layer, e.g. a keras-hub `Backbone` or
            `CausalLM`, built or not.

    Returns:
        int. How many layers were replaced (0 on a model already exact).

    Example:

    >>> import keras_hub
    >>> from keras_posenc import compat
    >>> backbone = keras_hub.models.LlamaBackbone(
    ...     vocabulary_size=100, num_layers=1, num_query_heads=2,
    ...     num_key_value_heads=1, hidden_dim=32, intermediate_dim=64)
    >>> compat.use_exact(backbone)
    1
    """
    _require_keras3()
    plans, marks, left, outside = [], {}, set(), False
    for layer, owner, path, backbone in _walk(model):
        if type(layer).__name__ in _LEFT_AS_IS:
            left.add(type(layer).__name__)
        drop_in = _drop_in(layer, owner, path)
        if drop_in is None:
            continue
        plans.append((layer, drop_in, drop_in._options_of(layer)))
        if backbone is None:
            outside = True
        else:
            marks[id(backbone)] = backbone
    for layer, drop_in, options in plans:
        layer.__class__ = drop_in
        layer._adopt(options)
    if outside:
        marks[id(model)] = model
    for marked in marks.values():
        _mark(marked)
    for target in [model] + [layer for layer, *_ in _walk(model)]:
        for name in _COMPILED:
            if getattr(target, name, None) is not None:
                setattr(target, name, None)
    if left:
        warnings.warn(
            f"use_exact left keras-hub's other rotary code as it is (float32 "
            f"angles): {sorted(left)}.",
            stacklevel=2,
        )
    return len(plans)
