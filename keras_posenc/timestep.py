"""Diffusion timestep embeddings, exact: `timestep_embedding`, `TimestepEmbedding`.

Diffusion models embed their (often fractional) timestep with the sinusoid
of Vaswani et al., "Attention Is All You Need" (2017), section 3.5
(https://arxiv.org/abs/1706.03762), as in DDPM (Ho et al., 2020,
https://arxiv.org/abs/2006.11239), GLIDE/DiT's `timestep_embedding`,
diffusers' `get_timestep_embedding` / `Timesteps` and FLUX. With
``half = dim // 2`` and ``w_i = max_period ** (-i / (half - shift))``:

    emb(t) = [sin(scale * t * w_i) | cos(scale * t * w_i)]   (i < half)

(``[cos | sin]`` with `flip_sin_to_cos`, and a zero column when `dim` is
odd). The values come from the exact engine at fractional positions
(`_exact/fractional.py`): within 2e-7 of the exact value at the timestep
exactly as given, for every float32 timestep with ``|t| < 2**31``, with
int32 and float32 ops only. Timesteps are never rounded to the compute
dtype: under `mixed_bfloat16` the sinusoid is taken of the float32 (or
int) timestep and the result cast once.
"""

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._diffusers import layers as _diffusers
from keras_posenc._exact import fractional as _fractional
from keras_posenc._exact import kept as _kept
from keras_posenc._exact.phase_constants import (
    geometric_largest_log10,
    geometric_turns,
    radians_of,
    scaled_turns,
)
from keras_posenc._files.versions import Versioned
from keras_posenc._keras import NoEmptyTorchParams, keras, output_shape


def _finite_positive(name, value):
    # An int past float64 too (10**400): refused by name, not OverflowError.
    return _arguments.check_wavelength(value, name)


def _given_frequencies(value, count):
    """A checkpoint's frequencies as a tuple of exact Python floats, or None."""
    if value is None:
        return None
    array = _arguments.host_array(value)
    ok = array.ndim == 1 and array.dtype.kind in "fiu" and array.size == count
    if not ok or not np.isfinite(array).all():
        expected = f"a 1-D array of dim // 2 = {count} finite frequencies"
        raise _arguments.invalid(
            "inverse_frequencies", expected, _arguments.array_echo(array)
        )
    return tuple(float(w) for w in array)  # float32 values stay exact


def _too_fast(options, largest):
    """The refusal of frequencies over `MAX_TURNS`, naming what set them:
    `scale` when the frequencies alone are within it, else the given
    `inverse_frequencies` (a `max_period` below 1 that makes them grow is
    refused before, by `TimestepOptions.check_growth`)."""
    limit = _fractional.MAX_TURNS
    rad = f"{2 * math.pi * limit:.0f} rad"
    if float(largest) / options.scale <= limit:
        expected = f"`scale` times each frequency at most {limit} turns ({rad})"
        expected += " per unit"
        return _arguments.invalid("scale", expected, options.scale)
    expected = f"frequencies of at most {limit} turns ({rad}) per unit of timestep"
    echo = _arguments.array_echo(np.asarray(options.inverse_frequencies))
    return _arguments.invalid("inverse_frequencies", expected, echo)


@dataclasses.dataclass(frozen=True)
class TimestepOptions:
    """The options of a timestep embedding, checked once (see `timestep_embedding`)."""

    dim: int
    max_period: float = 10000.0
    flip_sin_to_cos: bool = False
    downscale_freq_shift: float = 1.0
    scale: float = 1.0
    inverse_frequencies: tuple | None = None

    @classmethod
    def build(cls, dim, max_period, flip_sin_to_cos, shift, scale, given):
        """The checked options; the same object for the same plain arguments
        (its frequencies and engine are made once)."""
        arguments = (dim, max_period, flip_sin_to_cos, shift, scale, given)
        try:
            key = _arguments.typed_key(arguments)
        except TypeError:  # unhashable: an array of frequencies
            return cls._checked(*arguments)
        return _options(key)

    @classmethod
    def _checked(cls, dim, max_period, flip_sin_to_cos, shift, scale, given):
        dim = _arguments.check_depth(dim, "dim")
        half = dim // 2
        if isinstance(shift, bool) or not isinstance(shift, (int, float, np.number)):
            raise _arguments.invalid("downscale_freq_shift", "a number", shift)
        if given is None and half and not half - shift > 0:
            expected = f"a number below dim // 2 = {half} (the exponent divides by it)"
            raise _arguments.invalid("downscale_freq_shift", expected, shift)
        options = cls(
            dim,
            _arguments.check_wavelength(max_period, "max_period"),
            _arguments.check_bool("flip_sin_to_cos", flip_sin_to_cos),
            float(shift),
            _finite_positive("scale", scale),
            _given_frequencies(given, half),
        )
        options.check_growth()
        largest = max((abs(t) for t in options.turns()), default=0)
        if largest > _fractional.MAX_TURNS:
            raise _too_fast(options, largest)
        return options

    def check_growth(self):
        """Refuses frequencies past `MAX_TURNS` that grow with `i` (a
        `max_period` below 1), bounded in float before any decimal work:
        their exact turns would take millions of digits."""
        if self.inverse_frequencies is not None or self.max_period >= 1:
            return
        half = self.dim // 2
        denominator = half - self.downscale_freq_shift
        log10 = geometric_largest_log10(half, self.max_period, denominator, self.scale)
        if log10 > math.log10(_fractional.MAX_TURNS) + 1e-9:
            expected = (
                "frequencies scale * max_period ** (-i / (dim // 2 - "
                f"downscale_freq_shift)) of at most {_fractional.MAX_TURNS} turns "
                f"({2 * math.pi * _fractional.MAX_TURNS:.0f} rad) per unit (with "
                f"dim={self.dim}, downscale_freq_shift={self.downscale_freq_shift!r}"
                f" and scale={self.scale!r} they reach 10**{log10:.4g} turns)"
            )
            raise _arguments.invalid("max_period", expected, self.max_period)

    def turns(self):
        """Turns per unit of timestep of each frequency, `scale` included
        (host work: the engine is made from them once, `_encoder`)."""
        if self.inverse_frequencies is not None:
            return scaled_turns(self.inverse_frequencies, self.scale)
        half = self.dim // 2
        denominator = half - self.downscale_freq_shift
        return geometric_turns(half, self.max_period, denominator, self.scale)

    def embed(self, timesteps, encoder=None):
        """float32 ``timesteps.shape + [dim]``."""
        values, checks = _positions.reals("timesteps", timesteps)
        if self.dim == 1:  # no frequency: one zero column
            return _backend.guard(ops.zeros((*ops.shape(values), 1)), checks)
        # [..., 2, half]: sin, cos (cos, sin when flipped)
        encoder = encoder or _encoder(self)  # a layer passes the one it holds
        pairs = encoder.pairs(values, self.flip_sin_to_cos)
        rows = ops.reshape(pairs, (*ops.shape(values), 2 * (self.dim // 2)))
        if self.dim % 2:
            zeros = ops.zeros_like(rows[..., :1])
            rows = ops.concatenate([rows, zeros], axis=-1)
        return _backend.guard(rows, checks)

    def config(self):
        config = dataclasses.asdict(self)
        given = self.inverse_frequencies
        config["inverse_frequencies"] = None if given is None else list(given)
        return config


@functools.lru_cache(maxsize=64)
def _options(key):
    """Checked options: plain values (a few hundred bytes each), so the 64
    kept here stay outside the budget (`keras_posenc.cache` says so). Keyed
    on the arguments with their types (`typed_key`): `1` is not `True`."""
    _, typed = key
    return TimestepOptions._checked(*(_untyped(item) for item in typed))


def _untyped(item):
    kind, value = item
    return tuple(_untyped(v) for v in value) if kind is tuple else value


@_kept.memoized(lambda encoder: encoder.nbytes)
def _encoder(options):
    """The fractional engine of `options`' frequencies, in the one budget."""
    return _fractional.FractionalEncoder(options.turns())


@_backend.not_autograph
@_backend.on_keras_device
def timestep_embedding(
    timesteps: Any,
    dim: int,
    *,
    max_period: float = 10000.0,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1.0,
    scale: float = 1.0,
    inverse_frequencies: Any = None,
    dtype: str = "float32",
) -> Any:
    """The sinusoidal embedding of diffusion timesteps, exact.

    Vaswani et al. (2017, section 3.5, https://arxiv.org/abs/1706.03762) as
    diffusion models use it (Ho et al., 2020, https://arxiv.org/abs/2006.11239;
    diffusers' `get_timestep_embedding`, whose defaults these are): with
    ``half = dim // 2`` and ``w_i = max_period ** (-i / (half -
    downscale_freq_shift))``, the row of ``t`` is ``[sin(scale t w_i) |
    cos(scale t w_i)]``, then a zero column if `dim` is odd. Within 2e-7 of
    the exact value at `timesteps` exactly as given (float32 ``|t| < 2**31``,
    fractional and negative too; int32), where the usual float32 formula is
    off by up to 0.06 at ``t = 1000`` with `scale=1000`. float64 timesteps
    are rounded to float32 once; 16-bit ones are taken as they are.

    Conventions: diffusers `Timesteps(n, flip_sin_to_cos, downscale_freq_shift,
    scale)` is `timestep_embedding(t, n, flip_sin_to_cos=...,
    downscale_freq_shift=..., scale=...)`; GLIDE, ADM and DiT are
    `flip_sin_to_cos=True, downscale_freq_shift=0`; FLUX and keras-hub's
    Flux are those with `scale=1000.0` (its `time_factor`).

    Args:
        timesteps: int or float tensor, numpy array or number, any shape.
        dim: int. Width of the embedding, in `[1, 65536]`.
        max_period: float. The base of the frequencies. Defaults to `10000.0`.
        flip_sin_to_cos: bool. `[cos | sin]` instead of `[sin | cos]`.
            Defaults to `False`.
        downscale_freq_shift: float. `shift` above, below `dim // 2`.
            Defaults to `1.0` (diffusers; `0.0` for GLIDE, DiT, FLUX).
        scale: float > 0. Multiplies every angle exactly (FLUX's
            `time_factor`). Defaults to `1.0`.
        inverse_frequencies: `dim // 2` frequencies to use as given (a
            checkpoint's float32 ones, taken exactly), instead of
            `max_period` and `downscale_freq_shift`. Defaults to `None`.
        dtype: floating dtype of the result. Defaults to `"float32"`.

    Returns:
        A backend tensor of shape `timesteps.shape + [dim]`.

    Example:

    >>> emb = keras_posenc.timestep_embedding(np.array([0.0, 998.3897]), 6)
    >>> [round(float(v), 4) for v in emb[1]]
    [-0.5946, -0.5304, 0.0997, 0.804, -0.8477, 0.995]
    """
    options = TimestepOptions.build(
        dim,
        max_period,
        flip_sin_to_cos,
        downscale_freq_shift,
        scale,
        inverse_frequencies,
    )
    dtype = _arguments.check_floating_dtype(dtype)
    return ops.cast(options.embed(timesteps), dtype)


def timestep_frequencies(
    dim: int,
    *,
    max_period: float = 10000.0,
    downscale_freq_shift: float = 1.0,
    scale: float = 1.0,
) -> Any:
    """The angular frequencies ``scale * max_period ** (-i / (dim // 2 - shift))``.

    Those of `timestep_embedding` (Vaswani et al., 2017, section 3.5,
    https://arxiv.org/abs/1706.03762, as diffusion models use them),
    computed in decimal arithmetic and rounded once to float64.

    Args:
        dim, max_period, downscale_freq_shift, scale: as in
            `timestep_embedding`.

    Returns:
        float64 numpy array of shape `[dim // 2]`, radians per unit of time.

    Example:

    >>> keras_posenc.timestep_frequencies(6, downscale_freq_shift=0.0)
    array([1.        , 0.04641589, 0.00215443])
    """
    options = TimestepOptions.build(
        dim, max_period, False, downscale_freq_shift, scale, None
    )
    return radians_of(options.turns())


def _is_symbolic(value):
    symbolic = getattr(keras, "KerasTensor", None)  # Keras 3; tf-keras has none
    return symbolic is not None and isinstance(value, symbolic)


@keras.saving.register_keras_serializable(package="keras_posenc")
class TimestepEmbedding(NoEmptyTorchParams, Versioned, keras.layers.Layer):
    """Embeds diffusion timesteps with the exact sinusoid.

    The timestep embedding of diffusion models (Vaswani et al., 2017,
    section 3.5, https://arxiv.org/abs/1706.03762; Ho et al., 2020,
    https://arxiv.org/abs/2006.11239), as `timestep_embedding` computes it:
    within 2e-7 of the exact value at the timestep as given. Timesteps are
    never cast to the compute dtype (a `mixed_bfloat16` pipeline would
    round 998.39 to 1000 and 937 to 936 before the sinusoid): the
    embedding is computed from the float32 (or int) timestep and cast to
    the compute dtype once. No weights.

    Args:
        dim: int. Width of the embedding, in `[1, 65536]`.
        max_period: float. Defaults to `10000.0`.
        flip_sin_to_cos: bool. `[cos | sin]`. Defaults to `False`.
        downscale_freq_shift: float. Defaults to `1.0` (diffusers).
        scale: float > 0. Multiplies every angle. Defaults to `1.0`.
        inverse_frequencies: `dim // 2` frequencies used as given. Defaults
            to `None`.
        **kwargs: other keyword arguments of `keras.layers.Layer` (`name`,
            `dtype`).

    Call arguments:
        timesteps: int or float tensor of any shape (fractional and
            negative values too).

    Input shape:
        Any shape `S`.

    Output shape:
        `S + [dim]`, in the compute dtype.

    Example:

    >>> embed = keras_posenc.TimestepEmbedding(8, flip_sin_to_cos=True,
    ...                                        downscale_freq_shift=0.0)
    >>> tuple(embed(np.array([1.0, 500.5, 999.0])).shape)
    (3, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    def __init__(
        self,
        dim,
        max_period=10000.0,
        flip_sin_to_cos=False,
        downscale_freq_shift=1.0,
        scale=1.0,
        inverse_frequencies=None,
        **kwargs,
    ):
        options = TimestepOptions.build(
            dim,
            max_period,
            flip_sin_to_cos,
            downscale_freq_shift,
            scale,
            inverse_frequencies,
        )
        kwargs.pop("autocast", None)
        # Timesteps are never cast to the compute dtype (nor converted by
        # Keras: `_checks.positions.reals` reads them as given).
        super().__init__(autocast=False, **kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self.options = options
        # Held, as RoPE layers hold theirs: a call reads no shared store (its
        # lock would break a `torch.compile` graph), and eviction never
        # rebuilds it.
        self._engine = _encoder(options)
        if hasattr(self, "_convert_input_args"):
            self._convert_input_args = False
        self.built = True

    def __call__(self, timesteps, *args, **kwargs):
        if not _backend.is_tensor(timesteps) and not _is_symbolic(timesteps):
            # Keras takes tensors only; numpy and Python values are read here,
            # once, before any conversion could wrap or round them.
            timesteps, _ = _positions.reals("timesteps", timesteps)
        return super().__call__(timesteps, *args, **kwargs)

    @_backend.on_keras_device
    def call(self, timesteps):
        rows = self.options.embed(timesteps, self._engine)
        return ops.cast(rows, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return output_shape((*tuple(input_shape), self.options.dim))

    def get_config(self):
        config = super().get_config()
        config.update(self.options.config())
        return config

    @classmethod
    def from_diffusers_config(cls, config, **kwargs):
        """The timestep embedding of a diffusers transformer, from its config.

        diffusers' `Timesteps` as the model's transformer builds it
        (`flip_sin_to_cos`, `downscale_freq_shift`, width; `scale` is the
        factor its forward multiplies the timestep by, FLUX's 1000), applied
        to the transformer's `timestep` argument (and its guidance, where it
        embeds one). Read for `FluxTransformer2DModel` (FLUX.1 dev, schnell,
        Kontext: `[cos | sin]`, shift 0, scale 1000), `SD3Transformer2DModel`,
        `PixArtTransformer2DModel`, `SanaTransformer2DModel` (shift 0; Sana's
        pipeline multiplies the timestep by `timestep_scale` before the
        transformer), `DiTTransformer2DModel` (shift 1: diffusers' DiT, where
        the DiT repository uses 0), `CogVideoXTransformer3DModel` (its
        `flip_sin_to_cos`, `freq_shift`, width `num_attention_heads *
        attention_head_dim`), `WanTransformer3DModel` (width `freq_dim`,
        shift 0), `HunyuanVideoTransformer3DModel` (shift 0); the class
        is the config's `_class_name` (a legacy `Transformer2DModel` as
        diffusers remaps it). Any other class, a key the class does not
        take, and a transformers config are refused by name; keys that set
        no position are listed in `keras_posenc/_diffusers/models.py`.

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json`, of a model's directory (a pipeline's
                `transformer/`) or of a pipeline's root directory.
            **kwargs: other `TimestepEmbedding` arguments (`name`, `dtype`),
                not one read from `config`.

        Returns:
            A `TimestepEmbedding`.

        Example:

        >>> flux = {"_class_name": "FluxTransformer2DModel", "guidance_embeds": True}
        >>> embed = keras_posenc.TimestepEmbedding.from_diffusers_config(flux)
        >>> embed.options.dim, embed.options.scale, embed.options.flip_sin_to_cos
        (256, 1000.0, True)
        """
        return cls(**_diffusers.timestep_arguments(config, kwargs))


__all__ = ["TimestepEmbedding", "timestep_embedding", "timestep_frequencies"]
