"""Golden FLUX RoPE values from diffusers' own `FluxPosEmbed`.

Run from the repository root (needs torch and diffusers 0.42, which are not
project dependencies; the tests need only numpy and `golden.npz`)::

    python tests/golden/flux/make_golden.py

For each case (position ids ``[N, 3]`` as FLUX makes them, text rows of
zeros then ``(index, row, column)``), this records in `golden.npz` (arrays
named ``<case>.<field>``):

* ``ids``: the ids, float32 (diffusers takes ``ids.float()``);
* ``cos``, ``sin``: `FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56))`'s
  output on the CPU: frequencies and angles in float64, rounded once to
  float32 (`get_1d_rotary_pos_embed(..., freqs_dtype=torch.float64)`);
* ``cos32``, ``sin32``: the same with `freqs_dtype=torch.float32` (what
  `FluxPosEmbed` uses on MPS and NPU, and the float32 angles of keras-hub's
  FLUX port), for the documented error of float32 angles.

It prints, per case, the largest difference between the float32 and the
float64 results over a larger set of ids (the figures of docs/rotary.md).
"""

import pathlib

import numpy as np
import torch
from diffusers.models.embeddings import get_1d_rotary_pos_embed
from diffusers.models.transformers.transformer_flux import FluxPosEmbed

HERE = pathlib.Path(__file__).resolve().parent
AXES_DIM = (16, 56, 56)
THETA = 10000


def flux_ids(rng, count, high, fractional=False, text=2):
    """Text rows of zeros, then `count` image ids (index 0, row, column)."""
    ids = np.zeros((text + count, 3), np.float32)
    grid = rng.integers(0, high, size=(count, 2))
    ids[text:, 1:] = grid
    if fractional:  # interpolated grids: rows and columns scaled
        ids[text:, 1:] = (grid * rng.uniform(0.1, 1.0, size=(count, 2))).astype(
            np.float32
        )
    return ids


def video_ids(rng, count, high):
    """Ids whose three axes (frame, row, column) reach `high`."""
    return rng.integers(0, high, size=(count, 3)).astype(np.float32)


def embed(ids, freqs_dtype):
    pos = torch.from_numpy(ids)
    if freqs_dtype == torch.float64:
        cos, sin = FluxPosEmbed(theta=THETA, axes_dim=list(AXES_DIM))(pos)
        return cos.numpy(), sin.numpy()
    cos, sin = [], []
    for i, dim in enumerate(AXES_DIM):
        c, s = get_1d_rotary_pos_embed(
            dim,
            pos[:, i],
            theta=THETA,
            repeat_interleave_real=True,
            use_real=True,
            freqs_dtype=freqs_dtype,
        )
        cos.append(c)
        sin.append(s)
    return torch.cat(cos, -1).numpy(), torch.cat(sin, -1).numpy()


def main():
    rng = np.random.default_rng(0)
    cases = {
        "image": lambda count: flux_ids(rng, count, 4096),
        "fractional": lambda count: flux_ids(rng, count, 4096, fractional=True),
        "video": lambda count: video_ids(rng, count, 2**20),
    }
    arrays = {}
    for name, make in cases.items():
        ids = make(22)
        arrays[f"{name}.ids"] = ids
        for suffix, dtype in (("", torch.float64), ("32", torch.float32)):
            cos, sin = embed(ids, dtype)
            arrays[f"{name}.cos{suffix}"] = cos
            arrays[f"{name}.sin{suffix}"] = sin
        many = make(4000)
        exact, single = embed(many, torch.float64), embed(many, torch.float32)
        error = max(np.abs(a - b).max() for a, b in zip(exact, single, strict=True))
        print(
            f"{name}: float32 angles off by up to {error:.3g} (ids up to {many.max()})"
        )
    np.savez_compressed(HERE / "golden.npz", **arrays)


if __name__ == "__main__":
    main()
