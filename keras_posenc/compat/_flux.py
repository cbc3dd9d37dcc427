"""keras-hub's FLUX position layers (`flux_maths`), computed exactly."""

import keras
from keras import ops

import keras_posenc
from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._rope import axes as _axes
from keras_posenc._rope.config import check_rotary_dim
from keras_posenc.compat._base import PACKAGE, GivenValues


class _FluxLayer(GivenValues):
    """A FLUX layer of keras-hub: no constructor arguments but `Layer`'s."""

    def __init__(self, **kwargs):
        super().__init__({}, **kwargs)


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubFluxRotaryPositionalEmbedding"
)
class FluxRotaryPositionalEmbedding(_FluxLayer):
    """keras-hub's FLUX `RotaryPositionalEmbedding`, exact to float32 rounding.

    FLUX's ``rope(pos, dim, theta)`` (https://github.com/black-forest-labs/flux;
    rotary embeddings of Su et al., 2021, https://arxiv.org/abs/2104.09864)
    as keras-hub's port returns it: ``stack([cos, sin], -1)`` of the angles
    ``pos * theta ** (-arange(0, dim, 2) / dim)``, float32. keras-hub forms
    the frequencies and the angles in float32 (off by 2.4e-4 at id 4096,
    0.06 at 2**20); FLUX and diffusers need float64 for them. Here they come
    from `keras_posenc.RotaryEmbedding`'s N-axis engine: within 2e-7 of the
    exact values at every float32 id below 2**31 in magnitude (fractional
    ones too), int32 ids included. `use_exact` puts it in place of the
    layer keras-hub's `EmbedND` holds (`FluxBackbone.positional_embedder`).

    Args:
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        pos: int or float tensor ``[..., n]``: one axis of the position ids.
        dim: int. The features of this axis (even).
        theta: float. The base.

    Returns:
        float32 tensor ``[..., n, dim / 2, 2]``: cos, then sin.

    Example:

    >>> from keras_posenc import compat
    >>> rope = compat.FluxRotaryPositionalEmbedding()
    >>> out = rope(np.array([[0.0, 1.0, 4096.0]], "float32"), dim=4, theta=10000)
    >>> tuple(out.shape)
    (1, 3, 2, 2)
    >>> [round(float(v), 4) for v in out[0, 1, 0]]  # cos and sin of 1 rad
    [0.5403, 0.8415]

    References:
        - [FLUX](https://github.com/black-forest-labs/flux) (`rope`, `EmbedND`)
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
    """

    argument = "pos"

    def exact_layer(self, dim, theta):
        return _axes.axes_rows((dim,), theta)

    @_backend.on_keras_device
    def call(self, pos, dim, theta):
        dim = check_rotary_dim(dim, "dim")
        theta = _arguments.check_wavelength(theta, "theta")
        ids = ops.expand_dims(pos, -1)  # one axis
        rows = self._exact_layers(dim, theta).function_rows(ids, "pos")
        half = dim // 2
        return ops.stack([rows[..., half:], rows[..., :half]], axis=-1)

    def compute_output_spec(self, pos, dim, theta):
        shape = (*pos.shape, dim // 2, 2)
        return keras.KerasTensor(shape, dtype="float32")


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubFluxTimestepEmbedding"
)
class FluxTimestepEmbedding(_FluxLayer):
    """keras-hub's FLUX `TimestepEmbedding`, exact to float32 rounding.

    FLUX's ``timestep_embedding(t, dim, max_period, time_factor)`` (the
    sinusoid of Vaswani et al., 2017, https://arxiv.org/abs/1706.03762, as
    diffusion models use it) as keras-hub returns it: ``[cos | sin]`` of
    ``time_factor * t * max_period ** (-i / (dim // 2))``, then a zero
    column when `dim` is odd. keras-hub multiplies `t` by `time_factor` in
    the input dtype first and forms the angles in it (off by up to about
    6e-5 in float32 at ``t = 1``); this computes the sinusoid of ``t`` as
    given, with `time_factor` folded exactly into the frequencies
    (`keras_posenc.timestep_embedding`, `flip_sin_to_cos=True`,
    `downscale_freq_shift=0`, `scale=time_factor`): within 2e-7 of the
    exact value, in float32, cast once to the compute dtype.

    Args:
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        t: int or float tensor ``[N]`` of timesteps (fractional too).
        dim: int. Width of the embedding.
        max_period: float. Defaults to `10000`.
        time_factor: float > 0 (`timestep_embedding`'s `scale`: a value
            too large for the engine is refused under that name).
            Defaults to `1000.0`.

    Returns:
        Tensor ``[N, dim]`` in the compute dtype.

    Example:

    >>> from keras_posenc import compat
    >>> embed = compat.FluxTimestepEmbedding()
    >>> out = embed(np.array([0.0, 0.5], "float32"), dim=4)
    >>> [round(float(v), 4) for v in out[1]]  # cos, sin of 500 and 5 rad
    [-0.8838, 0.2837, -0.4678, -0.9589]

    References:
        - [FLUX](https://github.com/black-forest-labs/flux) (`timestep_embedding`)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    argument = "t"

    def exact_layer(self, dim, max_period, time_factor):
        return keras_posenc.TimestepEmbedding(
            dim,
            max_period=max_period,
            flip_sin_to_cos=True,
            downscale_freq_shift=0.0,
            scale=time_factor,
            dtype=self.dtype_policy,
        )

    def call(self, t, dim, max_period=10000, time_factor=1000.0):
        dim = _arguments.check_depth(dim, "dim")
        max_period = _arguments.check_wavelength(max_period, "max_period")
        time_factor = _arguments.check_wavelength(time_factor, "time_factor")
        return self._exact_layers(dim, max_period, time_factor)(t)

    def compute_output_spec(self, t, dim, max_period=10000, time_factor=1000.0):
        return keras.KerasTensor((*t.shape, dim), dtype=self.compute_dtype)
