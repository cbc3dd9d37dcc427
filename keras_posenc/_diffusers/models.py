"""The diffusers transformers whose position code keras_posenc reads, as data.

One `Model` per `_class_name` (as diffusers 0.42.1 writes it in a
`transformer/config.json`): every key its `__init__` takes with its
default, which of them set positions, and the conventions of its
timestep embedding (`Timestep`), its sin-cos grid (`PatchGrid`,
`VideoGrid`) and its RoPE (`AxesRope`), each read from the module diffusers
builds (named in `source`). A value taken from the config is a `Key`.
Every other key of the class concerns no position code (the layers, the
widths of the projections, the norms) and is listed in `defaults` only.
"""

import dataclasses
from collections.abc import Callable
from types import MappingProxyType

# diffusers' own keys in every saved config (its class, version, origin).
META = ("_class_name", "_diffusers_version", "_name_or_path", "_use_default_values")
DIFFUSERS_VERSION = "0.42.1"


@dataclasses.dataclass(frozen=True)
class Key:
    """The value of the config's key `name` (the class's default when absent)."""

    name: str


@dataclasses.dataclass(frozen=True)
class When:
    """A part applies only when the config's key `name` is `value`."""

    name: str
    value: object
    otherwise: str  # what the model does instead, for the refusal


@dataclasses.dataclass(frozen=True)
class Timestep:
    """diffusers' `Timesteps(num_channels, flip_sin_to_cos, downscale_freq_shift,
    scale)` as the model builds it, applied to the transformer's `timestep`
    argument (and to the guidance, where the model embeds one, with the
    same module).

    `width` is an int or the keys whose product it is; `scale` is the
    factor the transformer's forward multiplies the timestep by first
    (FLUX's 1000) times `Timesteps`' own.
    """

    source: str
    width: int | tuple = 256
    flip_sin_to_cos: bool | Key = True
    downscale_freq_shift: float | Key = 0.0
    scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class PatchGrid:
    """`PatchEmbed`'s 2-D sin-cos table: `base_size = sample_size //
    patch_size`, positions rounded to float32 as diffusers computes them,
    cropped from the `max_size` table when that key is set (SD3).

    `scale` is `interpolation_scale`; `scale_if_none` what diffusers uses
    when the key is None: a rule's name in `SCALE_RULES`, or None when
    None means no position encoding (Sana).
    """

    source: str
    scale: float | Key = 1.0
    scale_if_none: str | None = None
    max_size: Key | None = None


@dataclasses.dataclass(frozen=True)
class VideoGrid:
    """`CogVideoXPatchEmbed`'s 3-D sin-cos table of its sample video: `(T, H,
    W)` from the sample frames and sizes, the text tokens first with zero
    rows, one scale for time and one for space."""

    source: str
    when: When | None = None
    learned: Key | None = None


@dataclasses.dataclass(frozen=True)
class AxesRope:
    """N-axis RoPE (`get_1d_rotary_pos_embed` per axis, `repeat_interleave_real`:
    interleaved pairs): `axes` is the key of the features per axis, or
    `split` the model's split of the head dim into axes; `sequence_axis`
    where the model's attention holds the sequence."""

    source: str
    head_dim: Key
    axes: Key | None = None
    split: Callable[[int], tuple] | None = None
    theta: float | Key = 10000.0
    sequence_axis: int = 1
    when: When | None = None


@dataclasses.dataclass(frozen=True)
class Model:
    """One diffusers transformer class: its keys, its position code."""

    defaults: MappingProxyType
    positions: tuple  # the keys read for positions; the rest concern none
    timestep: Timestep
    grid: PatchGrid | VideoGrid | None
    rope: AxesRope | None
    instead: str  # what the model uses where it has no grid or no RoPE


def _model(defaults, positions, **parts):
    unknown = set(positions) - set(defaults)
    assert not unknown, unknown  # a position key is one of the class's keys
    return Model(MappingProxyType(dict(defaults)), tuple(positions), **parts)


# `interpolation_scale=None` in PixArt: `max(sample_size // 64, 1)`.
SCALE_RULES = {
    "sample_size // 64, at least 1": lambda v: max(v["sample_size"] // 64, 1)
}

_GRID = "a sin-cos grid: `GridPositionEncoding.from_diffusers_config`"
_ROPE = "RoPE: `RotaryEmbedding.from_diffusers_config`"
_ROTARY = When("use_rotary_positional_embeddings", True, f"a 3-D {_GRID[2:]}")

MODELS = MappingProxyType(
    {
        "FluxTransformer2DModel": _model(
            {
                "patch_size": 1,
                "in_channels": 64,
                "out_channels": None,
                "num_layers": 19,
                "num_single_layers": 38,
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "joint_attention_dim": 4096,
                "pooled_projection_dim": 768,
                # The guidance goes through the same `Timesteps` (times 1000).
                "guidance_embeds": False,
                "axes_dims_rope": (16, 56, 56),
            },
            ("attention_head_dim", "axes_dims_rope"),
            timestep=Timestep(
                "CombinedTimestep(Guidance)TextProjEmbeddings; forward: t * 1000",
                scale=1000.0,
            ),
            grid=None,
            rope=AxesRope(
                "FluxPosEmbed(theta=10000, axes_dim=axes_dims_rope)",
                Key("attention_head_dim"),
                axes=Key("axes_dims_rope"),
            ),
            instead=_ROPE,
        ),
        "SD3Transformer2DModel": _model(
            {
                "sample_size": 128,
                "patch_size": 2,
                "in_channels": 16,
                "num_layers": 18,
                "attention_head_dim": 64,
                "num_attention_heads": 18,
                "joint_attention_dim": 4096,
                "caption_projection_dim": 1152,
                "pooled_projection_dim": 2048,
                "out_channels": 16,
                "pos_embed_max_size": 96,
                "dual_attention_layers": (),
                "qk_norm": None,
            },
            ("sample_size", "patch_size", "pos_embed_max_size"),
            timestep=Timestep("CombinedTimestepTextProjEmbeddings"),
            grid=PatchGrid(
                "PatchEmbed(pos_embed_max_size=...).cropped_pos_embed",
                max_size=Key("pos_embed_max_size"),
            ),
            rope=None,
            instead=_GRID,
        ),
        "PixArtTransformer2DModel": _model(
            {
                "num_attention_heads": 16,
                "attention_head_dim": 72,
                "in_channels": 4,
                "out_channels": 8,
                "num_layers": 28,
                "dropout": 0.0,
                "norm_num_groups": 32,
                "cross_attention_dim": 1152,
                "attention_bias": True,
                "sample_size": 128,
                "patch_size": 2,
                "activation_fn": "gelu-approximate",
                "num_embeds_ada_norm": 1000,
                "upcast_attention": False,
                # The only type its forward implements (adaLN-single).
                "norm_type": "ada_norm_single",
                "norm_elementwise_affine": False,
                "norm_eps": 1e-06,
                "interpolation_scale": None,
                # Resolution and aspect ratio: the same `Timesteps`.
                "use_additional_conditions": None,
                "caption_channels": None,
                "attention_type": "default",
            },
            ("sample_size", "patch_size", "interpolation_scale", "norm_type"),
            timestep=Timestep(
                "AdaLayerNormSingle: PixArtAlphaCombinedTimestepSizeEmbeddings"
            ),
            grid=PatchGrid(
                "PatchEmbed(interpolation_scale=...)",
                scale=Key("interpolation_scale"),
                scale_if_none="sample_size // 64, at least 1",
            ),
            rope=None,
            instead=_GRID,
        ),
        "DiTTransformer2DModel": _model(
            {
                "num_attention_heads": 16,
                "attention_head_dim": 72,
                "in_channels": 4,
                "out_channels": None,
                "num_layers": 28,
                "dropout": 0.0,
                "norm_num_groups": 32,
                "attention_bias": True,
                "sample_size": 32,
                "patch_size": 2,
                "activation_fn": "gelu-approximate",
                "num_embeds_ada_norm": 1000,  # the class labels
                "upcast_attention": False,
                # The only type its forward implements (adaLN-Zero).
                "norm_type": "ada_norm_zero",
                "norm_elementwise_affine": False,
                "norm_eps": 1e-05,
            },
            ("sample_size", "patch_size", "norm_type"),
            timestep=Timestep(
                "AdaLayerNormZero: CombinedTimestepLabelEmbeddings",
                downscale_freq_shift=1.0,
            ),
            grid=PatchGrid("PatchEmbed"),
            rope=None,
            instead=_GRID,
        ),
        "SanaTransformer2DModel": _model(
            {
                "in_channels": 32,
                "out_channels": 32,
                "num_attention_heads": 70,
                "attention_head_dim": 32,
                "num_layers": 20,
                "num_cross_attention_heads": 20,
                "cross_attention_head_dim": 112,
                "cross_attention_dim": 2240,
                "caption_channels": 2304,
                "mlp_ratio": 2.5,
                "dropout": 0.0,
                "attention_bias": False,
                "sample_size": 32,
                "patch_size": 1,
                "norm_elementwise_affine": False,
                "norm_eps": 1e-06,
                "interpolation_scale": None,
                # The guidance: the same convention, its own `Timesteps`.
                "guidance_embeds": False,
                # Factors its pipelines apply before calling the transformer
                # (`timestep * timestep_scale`), whose `timestep` the layer takes.
                "guidance_embeds_scale": 0.1,
                "qk_norm": None,
                "timestep_scale": 1.0,
            },
            ("sample_size", "patch_size", "interpolation_scale"),
            timestep=Timestep(
                "AdaLayerNormSingle / SanaCombinedTimestepGuidanceEmbeddings"
            ),
            grid=PatchGrid(
                "PatchEmbed(pos_embed_type='sincos' if interpolation_scale else None)",
                scale=Key("interpolation_scale"),
            ),
            rope=None,
            instead=_GRID,
        ),
        "CogVideoXTransformer3DModel": _model(
            {
                "num_attention_heads": 30,
                "attention_head_dim": 64,
                "in_channels": 16,
                "out_channels": 16,
                "flip_sin_to_cos": True,
                "freq_shift": 0,
                "time_embed_dim": 512,
                # CogVideoX 1.5 I2V: a second `Timesteps` of this width, the
                # same convention (`TimestepEmbedding(ofs_embed_dim, ...)`).
                "ofs_embed_dim": None,
                "text_embed_dim": 4096,
                "num_layers": 30,
                "dropout": 0.0,
                "attention_bias": True,
                "sample_width": 90,
                "sample_height": 60,
                "sample_frames": 49,
                "patch_size": 2,
                "patch_size_t": None,
                "temporal_compression_ratio": 4,
                "max_text_seq_length": 226,
                "activation_fn": "gelu-approximate",
                "timestep_activation_fn": "silu",
                "norm_elementwise_affine": True,
                "norm_eps": 1e-05,
                "spatial_interpolation_scale": 1.875,
                "temporal_interpolation_scale": 1.0,
                "use_rotary_positional_embeddings": False,
                "use_learned_positional_embeddings": False,
                "patch_bias": True,
            },
            (
                "num_attention_heads",
                "attention_head_dim",
                "flip_sin_to_cos",
                "freq_shift",
                "sample_width",
                "sample_height",
                "sample_frames",
                "patch_size",
                "patch_size_t",
                "temporal_compression_ratio",
                "max_text_seq_length",
                "spatial_interpolation_scale",
                "temporal_interpolation_scale",
                "use_rotary_positional_embeddings",
                "use_learned_positional_embeddings",
            ),
            timestep=Timestep(
                "Timesteps(inner_dim, flip_sin_to_cos, freq_shift)",
                width=("num_attention_heads", "attention_head_dim"),
                flip_sin_to_cos=Key("flip_sin_to_cos"),
                downscale_freq_shift=Key("freq_shift"),
            ),
            grid=VideoGrid(
                "CogVideoXPatchEmbed: get_3d_sincos_pos_embed",
                when=When("use_rotary_positional_embeddings", False, _ROPE),
                learned=Key("use_learned_positional_embeddings"),
            ),
            rope=AxesRope(
                "get_3d_rotary_pos_embed (the pipeline's "
                "_prepare_rotary_positional_embeddings)",
                Key("attention_head_dim"),
                split=lambda d: (d // 4, d // 8 * 3, d // 8 * 3),
                sequence_axis=2,  # its attention rotates [batch, heads, length, dim]
                when=_ROTARY,
            ),
            instead="",
        ),
        "HunyuanVideoTransformer3DModel": _model(
            {
                "in_channels": 16,
                "out_channels": 16,
                "num_attention_heads": 24,
                "attention_head_dim": 128,
                "num_layers": 20,
                "num_single_layers": 40,
                "num_refiner_layers": 2,
                "mlp_ratio": 4.0,
                "patch_size": 2,
                "patch_size_t": 1,
                "qk_norm": "rms_norm",
                # The guidance: the same `Timesteps` (its pipeline scales it).
                "guidance_embeds": True,
                "text_embed_dim": 4096,
                "pooled_projection_dim": 768,
                "rope_theta": 256.0,
                "rope_axes_dim": (16, 56, 56),
                "image_condition_type": None,
            },
            ("attention_head_dim", "rope_theta", "rope_axes_dim"),
            timestep=Timestep("HunyuanVideoConditionEmbedding"),
            grid=None,
            rope=AxesRope(
                "HunyuanVideoRotaryPosEmbed(patch_size, patch_size_t, rope_axes_dim, "
                "rope_theta)",
                Key("attention_head_dim"),
                axes=Key("rope_axes_dim"),
                theta=Key("rope_theta"),
            ),
            instead=_ROPE,
        ),
        "WanTransformer3DModel": _model(
            {
                "patch_size": (1, 2, 2),
                "num_attention_heads": 40,
                "attention_head_dim": 128,
                "in_channels": 16,
                "out_channels": 16,
                "text_dim": 4096,
                "freq_dim": 256,
                "ffn_dim": 13824,
                "num_layers": 40,
                "cross_attn_norm": True,
                "qk_norm": "rms_norm_across_heads",
                "eps": 1e-06,
                "image_dim": None,
                "added_kv_proj_dim": None,
                # The length of its precomputed table (ids must stay below
                # it there); the layer computes every id.
                "rope_max_seq_len": 1024,
                "pos_embed_seq_len": None,
            },
            ("attention_head_dim", "freq_dim"),
            timestep=Timestep(
                "WanTimeTextImageEmbedding: Timesteps(freq_dim, True, 0)",
                width=("freq_dim",),
            ),
            grid=None,
            rope=AxesRope(
                "WanRotaryPosEmbed(attention_head_dim, patch_size, rope_max_seq_len)",
                Key("attention_head_dim"),
                split=lambda d: (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)),
            ),
            instead=_ROPE,
        ),
    }
)

# Configs saved under a legacy class name, which diffusers loads as the
# class named by one key's value (`_CLASS_REMAPPING_DICT`): the legacy
# class's keys, of which those the new class does not take are dropped
# (by diffusers, and here).
REMAPPED = MappingProxyType(
    {
        "Transformer2DModel": (
            "norm_type",
            {
                "ada_norm_zero": "DiTTransformer2DModel",
                "ada_norm_single": "PixArtTransformer2DModel",
            },
            (
                "num_attention_heads",
                "attention_head_dim",
                "in_channels",
                "out_channels",
                "num_layers",
                "dropout",
                "norm_num_groups",
                "cross_attention_dim",
                "attention_bias",
                "sample_size",
                "num_vector_embeds",
                "patch_size",
                "activation_fn",
                "num_embeds_ada_norm",
                "use_linear_projection",
                "only_cross_attention",
                "double_self_attention",
                "upcast_attention",
                "norm_type",
                "norm_elementwise_affine",
                "norm_eps",
                "attention_type",
                "caption_channels",
                "interpolation_scale",
                "use_additional_conditions",
            ),
        )
    }
)
