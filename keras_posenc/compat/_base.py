"""What every keras-hub drop-in shares: its config in, exact layers inside."""

import keras
from keras import ops

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._files import versions as _versions
from keras_posenc._keras import NoEmptyTorchParams

PACKAGE = "keras_posenc"
# keras-hub's defaults for the arguments of its base `RotaryEmbedding`.
ROTARY_DEFAULTS = {
    "scaling_factor": 1.0,
    "rope_type": "linear",
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "original_max_position_embeddings": 4096,
    "truncate": True,
    "denominator_dim": None,
}
# Base `Layer` keys of a config, which `use_exact` keeps from the layer.
LAYER_KEYS = ("name", "trainable", "dtype")


def require_keras3():
    if not issubclass(keras_posenc.RotaryEmbedding, keras.layers.Layer):
        raise RuntimeError(
            "keras_posenc.compat stands in for keras-hub layers, which are "
            "Keras 3 only; it is unavailable under TF_USE_LEGACY_KERAS=1 "
            "(tf-keras). Use keras_posenc.RotaryEmbedding and "
            "keras_posenc.SinusoidalPositionEncoding there."
        )


def unused(owner, config, used=()):
    """Refuses keras-hub base-class keys that `owner` would silently ignore.

    keras-hub's subclasses accept every argument of its base
    `RotaryEmbedding` and ignore most of them: a non-default one here could
    only be a value the keras-hub layer does not apply, so it is refused
    rather than guessed at. Returns `config` without those keys.
    """
    config = dict(config)
    for key, default in ROTARY_DEFAULTS.items():
        value = config.pop(key, default)
        if key not in used and value != default:
            expected = f"{default!r}: keras-hub's {owner} ignores `{key}`"
            raise _arguments.invalid(key, expected, value)
    return config


def fixed(owner, config, defaults):
    """Refuses keys of `config` that keras-hub's `owner` accepts but ignores
    unless they hold its default; returns `config` without them."""
    config = dict(config)
    for key, default in defaults.items():
        value = config.pop(key, default)
        if value != default:
            expected = f"{default!r}: keras-hub's {owner} ignores it"
            raise _arguments.invalid(key, expected, value)
    return config


def sequence_axis(inputs, axis, name="sequence_axis"):
    """`axis` of `inputs` as a non-negative index, or a ValueError naming it."""
    rank = len(inputs.shape)
    if not -rank <= axis < rank:
        expected = f"an axis of inputs of rank {rank}"
        raise _arguments.invalid(name, expected, axis)
    return axis % rank


class ExactLayers:
    """The exact layer for each key (a feature width, ...), made on first use.

    Not tracked by Keras (the layers hold no state), so that a layer that
    is already built can make one, even inside a trace.
    """

    def __init__(self, make):
        self._make, self._layers = make, {}

    def __call__(self, width, *key):
        if not _arguments.is_int(width):
            raise _arguments.invalid("inputs", "a known feature dimension", width)
        key = (int(width), *key)
        if key not in self._layers:
            self._layers[key] = self._make(*key)
        return self._layers[key]


class HubLayer(NoEmptyTorchParams, _versions.Versioned, keras.layers.Layer):
    """A drop-in: keras-hub's config and call, exact `keras_posenc` layers inside.

    Subclasses check their constructor arguments into a dict of options
    (passed here), and define `exact_layer(*key)` and `call`, with exactly
    the call signature of the keras-hub layer they stand in for, and
    `translate(config)` when keras-hub's config keys differ from its
    constructor's.
    """

    def __init__(self, options, **kwargs):
        require_keras3()
        super().__init__(**kwargs)
        self.adopt(options)

    def adopt(self, options):
        """Sets the checked options (from `__init__`, or `use_exact`)."""
        self._option_names = tuple(options)
        for name, value in options.items():
            setattr(self, name, value)
        self._exact_layers = ExactLayers(self.exact_layer)
        self.built = True  # stateless, as keras-hub's layers are

    @classmethod
    def translate(cls, config):
        """Constructor arguments from a keras-hub config dict."""
        return dict(config)

    @classmethod
    def from_config(cls, config):
        config = _versions.as_written(config, cls.__name__, cls.config_changes)
        return cls(**cls.translate(config))

    @classmethod
    def options_of(cls, layer):
        """The checked options of a keras-hub layer, for `use_exact`."""
        config = cls.translate(layer.get_config())
        for key in LAYER_KEYS:
            config.pop(key, None)
        checked = cls(**config)
        return {name: getattr(checked, name) for name in checked._option_names}

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self._option_names})
        return config

    def compute_output_shape(self, input_shape):
        return input_shape


class GivenValues(HubLayer):
    """A drop-in whose first call argument (timesteps, ids) reaches `call`
    as given: Keras would otherwise cast it to the compute dtype first
    (bfloat16 holds 998.39 as 1000 and no integer above 256 exactly)."""

    argument = ""  # the name of the first call argument

    def adopt(self, options):
        super().adopt(options)
        self._convert_input_args = False

    def __call__(self, values, *args, **kwargs):
        if not ops.is_tensor(values) and not isinstance(values, keras.KerasTensor):
            # Keras takes tensors only: numpy and Python values are read
            # here, once, as the call would read them.
            values, _ = _positions.reals(self.argument, values)
        return super().__call__(values, *args, **kwargs)
