"""Golden position values of diffusers models, from diffusers' own modules.

Run from the repository root with diffusers 0.42.1 and torch (neither is
a project dependency; the tests need only numpy, `golden.npz` and the
configs)::

    python tests/golden/diffusers/make_golden.py

`configs/*.json` are modelled on the published `transformer/config.json`
of each pipeline (black-forest-labs/FLUX.1-dev, -schnell, -Kontext-dev;
stabilityai/stable-diffusion-3-medium, 3.5-large, 3.5-medium;
PixArt-alpha/PixArt-XL-2-1024-MS and 512x512, PixArt-Sigma-XL-2-1024-MS;
facebook/DiT-XL-2-256; Efficient-Large-Model/Sana_1600M 1024px and 4Kpx;
THUDM/CogVideoX-2b, -5b, CogVideoX1.5-5B; Wan-AI/Wan2.1-T2V-1.3B;
hunyuanvideo-community/HunyuanVideo). For
each, this builds the position modules the model's transformer builds,
with the config's values (not the whole transformer; widths of other
modules tiny), and records in
`golden.npz` (arrays named ``<config>.<field>``):

* ``t``, ``timestep``: the transformer's `timestep` argument and its
  `Timesteps` output (FLUX's forward multiplies by 1000 first, in float32);
* ``grid.<h>x<w>`` (2-D) or ``grid.<t>x<h>x<w>`` (CogVideoX): the sin-cos
  table `PatchEmbed.forward` adds (its projection zeroed, so the output is
  the table), or `CogVideoXPatchEmbed`'s joint table with the text rows;
  of a table over 256 rows, every ``grid.<...>.step``-th row;
* ``ids``, ``q``, ``q_rotated``: position ids, a query in the model's
  attention layout and diffusers' `apply_rotary_emb` of it with the
  model's RoPE (`FluxPosEmbed`; `WanRotaryPosEmbed`; CogVideoX's
  `get_3d_rotary_pos_embed` as its pipeline calls it, ids being the
  positions it uses).
"""

import json
import pathlib

import numpy as np
import torch
from diffusers.models import embeddings
from diffusers.models.normalization import AdaLayerNormSingle, AdaLayerNormZero
from diffusers.models.transformers.sana_transformer import (
    SanaCombinedTimestepGuidanceEmbeddings,
)
from diffusers.models.transformers.transformer_flux import FluxPosEmbed
from diffusers.models.transformers.transformer_hunyuan_video import (
    HunyuanVideoConditionEmbedding,
    HunyuanVideoRotaryPosEmbed,
)
from diffusers.models.transformers.transformer_wan import (
    WanRotaryPosEmbed,
    WanTimeTextImageEmbedding,
)
from diffusers.pipelines.cogvideo.pipeline_cogvideox import (
    get_resize_crop_region_for_grid,
)

HERE = pathlib.Path(__file__).resolve().parent
TIMESTEPS = np.array([0.0, 1.0, 3.5, 250.25, 500.0, 998.3897, 999.0], np.float32)
SIGMAS = np.array([0.0, 0.001, 0.25, 0.5, 0.7311, 0.999, 1.0], np.float32)
DIM = 32  # the grid tables' width (a multiple of 16)
KEPT_ROWS = 256  # rows kept of a larger table, evenly spaced


def _config(name):
    with open(HERE / "configs" / f"{name}.json") as file:
        return json.load(file)


# -- timesteps: each model's own module ------------------------------------------


def _flux(config, t):
    embed = (
        embeddings.CombinedTimestepGuidanceTextProjEmbeddings
        if config.get("guidance_embeds")
        else embeddings.CombinedTimestepTextProjEmbeddings
    )(embedding_dim=8, pooled_projection_dim=8)
    # FluxTransformer2DModel.forward: `timestep.to(hidden_states.dtype) * 1000`.
    return embed.time_proj(torch.from_numpy(t) * 1000)


TIMESTEP_MODULES = {
    "FluxTransformer2DModel": (_flux, SIGMAS),
    "SD3Transformer2DModel": (
        lambda c, t: embeddings.CombinedTimestepTextProjEmbeddings(8, 8).time_proj(
            torch.from_numpy(t)
        ),
        TIMESTEPS,
    ),
    "PixArtTransformer2DModel": (
        lambda c, t: AdaLayerNormSingle(6).emb.time_proj(torch.from_numpy(t)),
        TIMESTEPS,
    ),
    "DiTTransformer2DModel": (
        lambda c, t: AdaLayerNormZero(8, num_embeddings=10).emb.time_proj(
            torch.from_numpy(t)
        ),
        TIMESTEPS,
    ),
    "SanaTransformer2DModel": (
        lambda c, t: SanaCombinedTimestepGuidanceEmbeddings(8).time_proj(
            torch.from_numpy(t)
        ),
        TIMESTEPS,
    ),
    # CogVideoXTransformer3DModel.__init__: `Timesteps(inner_dim,
    # flip_sin_to_cos, freq_shift)`.
    "CogVideoXTransformer3DModel": (
        lambda c, t: embeddings.Timesteps(
            c["num_attention_heads"] * c["attention_head_dim"],
            c.get("flip_sin_to_cos", True),
            c.get("freq_shift", 0),
        )(torch.from_numpy(t)),
        TIMESTEPS,
    ),
    "HunyuanVideoTransformer3DModel": (
        lambda c, t: HunyuanVideoConditionEmbedding(8, 8, True).time_proj(
            torch.from_numpy(t)
        ),
        TIMESTEPS,
    ),
    "WanTransformer3DModel": (
        lambda c, t: WanTimeTextImageEmbedding(
            dim=8,
            time_freq_dim=c.get("freq_dim", 256),
            time_proj_dim=48,
            text_embed_dim=8,
        ).timesteps_proj(torch.from_numpy(t)),
        TIMESTEPS,
    ),
}
# Legacy `Transformer2DModel` configs, as diffusers remaps them.
REMAP = {
    "ada_norm_zero": "DiTTransformer2DModel",
    "ada_norm_single": "PixArtTransformer2DModel",
}


def class_of(config):
    name = config["_class_name"]
    return REMAP[config["norm_type"]] if name == "Transformer2DModel" else name


# -- grids -----------------------------------------------------------------------


def _patch_embed(config, name):
    sample, patch = config["sample_size"], config["patch_size"]
    scale = config.get("interpolation_scale")
    if name == "PixArtTransformer2DModel" and scale is None:
        scale = max(sample // 64, 1)  # PixArtTransformer2DModel.__init__
    arguments = {"interpolation_scale": scale} if scale is not None else {}
    module = embeddings.PatchEmbed(
        height=sample,
        width=sample,
        patch_size=patch,
        in_channels=1,
        embed_dim=DIM,
        pos_embed_max_size=config.get(
            "pos_embed_max_size", 96 if name == "SD3Transformer2DModel" else None
        ),
        **arguments,
    )
    torch.nn.init.zeros_(module.proj.weight)
    torch.nn.init.zeros_(module.proj.bias)
    return module


def patch_grids(config, name):
    """The table `PatchEmbed.forward` adds, at the sample grid and two others."""
    module = _patch_embed(config, name)
    base = config["sample_size"] // config["patch_size"]
    out = {}
    for h, w in ((base, base), (base // 2, base * 3 // 4 + 1), (7, 12)):
        latent = torch.zeros(1, 1, h * config["patch_size"], w * config["patch_size"])
        out[f"grid.{h}x{w}"] = module(latent)[0]
    return out


def video_grids(config):
    """`CogVideoXPatchEmbed`'s joint table (text rows first) of its sample
    video and of a smaller one."""
    module = embeddings.CogVideoXPatchEmbed(
        patch_size=config["patch_size"],
        in_channels=1,
        embed_dim=DIM,
        text_embed_dim=4,
        sample_width=config["sample_width"],
        sample_height=config["sample_height"],
        sample_frames=config["sample_frames"],
        temporal_compression_ratio=config["temporal_compression_ratio"],
        max_text_seq_length=config["max_text_seq_length"],
        spatial_interpolation_scale=config["spatial_interpolation_scale"],
        temporal_interpolation_scale=config["temporal_interpolation_scale"],
        use_positional_embeddings=True,
        use_learned_positional_embeddings=False,
    )
    patch, ratio = config["patch_size"], config["temporal_compression_ratio"]
    out = {}
    for height, width, frames in (
        (config["sample_height"], config["sample_width"], config["sample_frames"]),
        (16, 24, 9),
    ):
        table = module._get_positional_embeddings(height, width, frames)[0]
        grid = ((frames - 1) // ratio + 1, height // patch, width // patch)
        out["grid." + "x".join(map(str, grid))] = table
    return out


# -- RoPE ------------------------------------------------------------------------


def flux_rope(config, rng):
    axes = config.get("axes_dims_rope", (16, 56, 56))
    # Text ids (zeros), a 6 x 9 image (0, row, column), fractional ids.
    grid = np.indices((6, 9)).reshape(2, -1).T
    ids = np.zeros((4 + len(grid) + 5, 3), np.float32)
    ids[4 : 4 + len(grid), 1:] = grid
    ids[4 + len(grid) :, 1:] = rng.uniform(0, 2048, (5, 2))
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=axes)(torch.from_numpy(ids))
    heads, dim = 1, config["attention_head_dim"]
    # diffusers' FLUX attention: [batch, length, heads, dim], sequence_dim=1.
    q = rng.standard_normal((1, len(ids), heads, dim)).astype(np.float32)
    rotated = embeddings.apply_rotary_emb(
        torch.from_numpy(q), (cos, sin), sequence_dim=1
    )
    return {"ids": ids, "q": q, "q_rotated": rotated}


def cogvideox_rope(config, rng):
    """As `CogVideoXPipeline._prepare_rotary_positional_embeddings` calls it,
    for a grid other than the sample's (1.0: resized, fractional positions;
    1.5: sliced)."""
    patch, head = config["patch_size"], config["attention_head_dim"]
    base_h, base_w = config["sample_height"] // patch, config["sample_width"] // patch
    frames, grid_h, grid_w = 2, base_h // 4 + 1, base_w // 4 + 1
    if config.get("patch_size_t") is None:
        crops = get_resize_crop_region_for_grid((grid_h, grid_w), base_w, base_h)
        cos, sin = embeddings.get_3d_rotary_pos_embed(
            embed_dim=head,
            crops_coords=crops,
            grid_size=(grid_h, grid_w),
            temporal_size=frames,
        )
        # The positions get_3d_rotary_pos_embed takes ("linspace").
        (top, left), (bottom, right) = crops
        axes = (
            torch.linspace(0, frames * (frames - 1) / frames, frames),
            torch.linspace(top, bottom * (grid_h - 1) / grid_h, grid_h),
            torch.linspace(left, right * (grid_w - 1) / grid_w, grid_w),
        )
    else:
        cos, sin = embeddings.get_3d_rotary_pos_embed(
            embed_dim=head,
            crops_coords=None,
            grid_size=(grid_h, grid_w),
            temporal_size=frames,
            grid_type="slice",
            max_size=(base_h, base_w),
        )
        axes = tuple(
            torch.arange(n, dtype=torch.float32) for n in (frames, grid_h, grid_w)
        )
    mesh = torch.meshgrid(*axes, indexing="ij")
    ids = torch.stack([m.reshape(-1) for m in mesh], dim=-1).numpy()
    # CogVideoX's attention: [batch, heads, length, dim], sequence_dim=2.
    q = rng.standard_normal((1, 1, len(ids), head)).astype(np.float32)
    rotated = embeddings.apply_rotary_emb(torch.from_numpy(q), (cos, sin))
    return {"ids": ids, "q": q, "q_rotated": rotated}


def wan_rope(config, rng):
    """`WanRotaryPosEmbed`'s tables of a 3-frame, 8 x 12 latent (2 x 2 patches)."""
    head, patch = config["attention_head_dim"], tuple(config["patch_size"])
    rope = WanRotaryPosEmbed(head, patch, config.get("rope_max_seq_len", 1024))
    latent = torch.zeros(1, 1, 3 * patch[0], 8 * patch[1], 12 * patch[2])
    cos, sin = (table[0, :, 0] for table in rope(latent))
    ids = np.indices((3, 8, 12)).reshape(3, -1).T.astype(np.float32)
    # Wan's attention: [batch, length, heads, dim]; its own rotation is
    # apply_rotary_emb's interleaved one.
    q = rng.standard_normal((1, len(ids), 1, head)).astype(np.float32)
    rotated = embeddings.apply_rotary_emb(
        torch.from_numpy(q), (cos, sin), sequence_dim=1
    )
    return {"ids": ids, "q": q, "q_rotated": rotated}


def hunyuan_video_rope(config, rng):
    """`HunyuanVideoRotaryPosEmbed`'s tables of a 3-frame, 8 x 12 latent."""
    patch, patch_t = config.get("patch_size", 2), config.get("patch_size_t", 1)
    rope = HunyuanVideoRotaryPosEmbed(
        patch,
        patch_t,
        config.get("rope_axes_dim", (16, 56, 56)),
        config.get("rope_theta", 256.0),
    )
    latent = torch.zeros(1, 1, 3 * patch_t, 8 * patch, 12 * patch)
    cos, sin = rope(latent)
    ids = np.indices((3, 8, 12)).reshape(3, -1).T.astype(np.float32)
    # HunyuanVideo's attention: [batch, length, heads, dim], sequence_dim=1.
    q = rng.standard_normal((1, len(ids), 1, config["attention_head_dim"]))
    q = q.astype(np.float32)
    rotated = embeddings.apply_rotary_emb(
        torch.from_numpy(q), (cos, sin), sequence_dim=1
    )
    return {"ids": ids, "q": q, "q_rotated": rotated}


def main():
    arrays = {}
    rng = np.random.default_rng(0)
    for path in sorted((HERE / "configs").glob("*.json")):
        config, case = _config(path.stem), path.stem
        name = class_of(config)
        fields = {}
        module, t = TIMESTEP_MODULES[name]
        fields["t"], fields["timestep"] = t, module(config, t)
        rotary = config.get("use_rotary_positional_embeddings", False)
        if name == "FluxTransformer2DModel":
            fields.update(flux_rope(config, rng))
        elif name == "HunyuanVideoTransformer3DModel":
            fields.update(hunyuan_video_rope(config, rng))
        elif name == "WanTransformer3DModel":
            fields.update(wan_rope(config, rng))
        elif name == "CogVideoXTransformer3DModel" and rotary:
            fields.update(cogvideox_rope(config, rng))
        elif name == "CogVideoXTransformer3DModel":
            fields.update(video_grids(config))
        elif name != "SanaTransformer2DModel" or config.get("interpolation_scale"):
            fields.update(patch_grids(config, name))
        with torch.no_grad():
            for field, value in fields.items():
                if isinstance(value, torch.Tensor):  # as diffusers returns it
                    value = value.detach().numpy()
                if field.startswith("grid.") and len(value) > KEPT_ROWS:
                    # Every `step`-th row of a large table (the file stays small).
                    step = -(-len(value) // KEPT_ROWS)
                    value, arrays[f"{case}.{field}.step"] = value[::step], step
                arrays[f"{case}.{field}"] = value
    np.savez_compressed(HERE / "golden.npz", **arrays)
    for key, value in arrays.items():
        print(key, np.shape(value), np.asarray(value).dtype)


if __name__ == "__main__":
    main()
