"""keras-hub's Stable Diffusion 3 timestep embedding (`mmdit`), its sinusoid exact."""

import keras
from keras import ops

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, GivenValues


class _MLP(keras.layers.Layer):
    """keras-hub's SD3 `MLP(units, units, "silu")`: the same two `Dense`
    layers under the same names, so the same weights and weight paths."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense1 = keras.layers.Dense(
            units, activation="silu", dtype=self.dtype_policy, name="dense1"
        )
        self.dense2 = keras.layers.Dense(units, dtype=self.dtype_policy, name="dense2")

    def build(self, inputs_shape):
        self.dense1.build(inputs_shape)
        self.dense2.build((*tuple(inputs_shape)[:-1], self.units))

    def call(self, inputs, training=None):
        x = self.dense1(inputs, training=training)
        return self.dense2(x, training=training)


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubSD3TimestepEmbedding"
)
class SD3TimestepEmbedding(GivenValues):
    """keras-hub's Stable Diffusion 3 `TimestepEmbedding`, its sinusoid exact.

    The timestep embedding of SD3's MMDiT (Esser et al., 2024,
    https://arxiv.org/abs/2403.03206; the sinusoid of Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762, as DDPM uses it) as keras-hub's
    `mmdit.TimestepEmbedding` computes it: ``[cos | sin]`` of ``t *
    max_period ** (-i / (frequency_dim // 2))`` (a zero column when
    `frequency_dim` is odd), cast to the compute dtype, then an MLP (`mlp`:
    ``Dense(embedding_dim, "silu")``, ``Dense(embedding_dim)``). keras-hub
    forms the frequencies and angles in float32, after Keras has cast the
    timesteps to the compute dtype (`mixed_bfloat16` takes 998.39 as 1000).
    Here the sinusoid comes from `keras_posenc.TimestepEmbedding`
    (`flip_sin_to_cos=True`, `downscale_freq_shift=0`): within 2e-7 of the
    exact value at the float32 timestep as given, cast once to the compute
    dtype before the MLP. The MLP, its weights and their paths are
    keras-hub's; `use_exact` puts this layer in place of the one keras-hub's
    `MMDiT` holds (`StableDiffusion3Backbone.diffuser.timestep_embedding`),
    keeping its MLP and weights.

    Args:
        embedding_dim: int. Width of the MLP and of the result.
        frequency_dim: int. Width of the sinusoid. Defaults to `256`.
        max_period: float. The base of the frequencies. Defaults to `10000`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: int or float tensor ``[batch, 1]`` of timesteps (any
            ``[..., 1]``; ``[1]`` as ``[1, 1]``, as keras-hub broadcasts it).
        training: bool. Passed to the MLP.

    Returns:
        Tensor ``[batch, embedding_dim]`` (``[..., embedding_dim]``) in the
        compute dtype.

    Example:

    >>> from keras_posenc import compat
    >>> embed = compat.SD3TimestepEmbedding(8, frequency_dim=6, name="t_embed")
    >>> tuple(embed(np.array([[0.0], [998.3897]], "float32")).shape)
    (2, 8)
    >>> [w.path for w in embed.weights][:2]  # keras-hub's paths
    ['t_embed/mlp/dense1/kernel', 't_embed/mlp/dense1/bias']

    References:
        - [Esser et al., 2024](https://arxiv.org/abs/2403.03206)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    argument = "inputs"

    def __init__(self, embedding_dim, frequency_dim=256, max_period=10000, **kwargs):
        options = {
            "embedding_dim": _arguments.check_positive_int(
                "embedding_dim", embedding_dim
            ),
            "frequency_dim": _arguments.check_depth(frequency_dim, "frequency_dim"),
            "max_period": _arguments.check_wavelength(max_period, "max_period"),
        }
        super().__init__(options, **kwargs)
        self.mlp = _MLP(self.embedding_dim, dtype=self.dtype_policy, name="mlp")

    def adopt(self, options):
        # It holds weights (the MLP's): built when they are, not before.
        built = self.built
        super().adopt(options)
        self.built = built

    def exact_layer(self, frequency_dim):
        return keras_posenc.TimestepEmbedding(
            frequency_dim,
            max_period=self.max_period,
            flip_sin_to_cos=True,
            downscale_freq_shift=0.0,
            dtype=self.dtype_policy,
        )

    def build(self, inputs_shape):
        self.mlp.build((None, self.frequency_dim))

    def call(self, inputs, training=None):
        shape = tuple(inputs.shape)
        if shape and shape[-1] not in (1, None):
            # keras-hub would multiply n timesteps by n frequencies elementwise.
            expected = "timesteps of shape [batch, 1] (or [..., 1])"
            raise _arguments.invalid("inputs", expected, f"<shape={shape}>")
        if len(shape) < 2:  # keras-hub broadcasts it against [1, half]
            timesteps = ops.reshape(inputs, (1,))
        else:
            timesteps = ops.squeeze(inputs, axis=-1)
        embedding = self._exact_layers(self.frequency_dim)(timesteps)
        return self.mlp(embedding, training=training)

    def compute_output_shape(self, inputs_shape):
        leading = tuple(inputs_shape)[:-1] if len(inputs_shape) > 1 else (1,)
        return (*leading, self.embedding_dim)
