"""Golden grid tables from diffusers' own functions (`golden.npz`).

Run from the repository root with diffusers 0.42.1 and torch (neither is
a project dependency; the tests need only numpy and `golden.npz`)::

    /work/venv-hf/bin/python tests/golden/grid/make_golden.py

Each case is one call of diffusers' `get_2d_sincos_pos_embed`,
`get_3d_sincos_pos_embed` or `get_1d_sincos_pos_embed_from_grid`, or an
SD3 `PatchEmbed(pos_embed_max_size=...)`'s `cropped_pos_embed`, recorded
as ``<case>`` (the table as diffusers returns it, float64 before any
`.float()` where diffusers computes in float64) with its arguments in
`CASES`, which `tests/test_grid.py` repeats as `grid_sincos_table` calls.
diffusers rounds positions to float32 first: `positions="float32"`.
"""

import pathlib

import numpy as np
import torch
from diffusers.models import embeddings

HERE = pathlib.Path(__file__).resolve().parent


def sd3_crop(dim, max_size, base_size, height, width):
    patch = embeddings.PatchEmbed(
        height=base_size * 2,
        width=base_size * 2,
        patch_size=2,
        in_channels=1,
        embed_dim=dim,
        pos_embed_max_size=max_size,
    )
    assert patch.base_size == base_size
    return patch.cropped_pos_embed(height * 2, width * 2)[0]


CASES = {
    # MAE: positions i (base_size = grid size), a class token.
    "mae": lambda: embeddings.get_2d_sincos_pos_embed(
        32, 7, cls_token=True, extra_tokens=1, base_size=7
    ),
    # diffusers' defaults (base_size=16), a grid that is not square.
    "diffusers": lambda: embeddings.get_2d_sincos_pos_embed(32, (7, 12)),
    # PixArt: base_size and interpolation_scale.
    "pixart": lambda: embeddings.get_2d_sincos_pos_embed(
        16, 24, base_size=32, interpolation_scale=2.0
    ),
    # SD3: the 192 x 192 table (base 64), centre-cropped to 20 x 30.
    "sd3": lambda: sd3_crop(16, 192, 64, 20, 30),
    # CogVideoX: spatial_size is (width, height); scales 1.875 and 1.0.
    "cogvideox": lambda: embeddings.get_3d_sincos_pos_embed(32, (6, 4), 3, 1.875, 1.0),
    # 1-D.
    "line": lambda: embeddings.get_1d_sincos_pos_embed_from_grid(
        12, torch.arange(10, dtype=torch.float32)
    ),
}


def main():
    arrays = {}
    for name, make in CASES.items():
        with torch.no_grad():
            arrays[name] = make().double().numpy()
    np.savez_compressed(HERE / "golden.npz", **arrays)
    for name, value in arrays.items():
        print(name, value.shape)


if __name__ == "__main__":
    main()
