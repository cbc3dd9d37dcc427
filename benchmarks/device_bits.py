"""Exactness across devices: the same tables on every backend and device, bit for bit.

    python -m benchmarks.device_bits [--backend jax|torch|tensorflow]
        [--device cpu|cuda] --save PATH.npz
    python -m benchmarks.device_bits --compare A.npz B.npz ...

The first form computes a fixed set of tables with the public functions
(integer and fractional positions, large positions, timesteps, grids with
interpolated positions, RoPE at long positions, FLUX's N-axis RoPE ids,
ALiBi biases) on the
backend's default device (`--device cpu` hides a GPU first) and saves them
with their max error against the float64 formula (absolute, relative
where the value exceeds 1). The second prints, for
every table, whether all files hold the same bits and the worst error of
each. Written for the lent GPU machine (benchmarks/README.md): run there
on JAX and torch, on the GPU and the CPU, and here on TensorFlow, then
compare.
"""

import argparse
import os
import sys

import numpy as np


def _select(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax", "torch"))
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--save")
    parser.add_argument("--compare", nargs="+")
    args = parser.parse_args(argv)
    if args.backend:
        os.environ["KERAS_BACKEND"] = args.backend
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["JAX_PLATFORMS"] = "cpu"
    return args


def references():
    """name -> (inputs for the call, the float64 value of the formula)."""
    positions = np.array([0, 1, 7, 1000, 65_535, 1_000_003, 16_777_215])
    depth = 64
    rates = 10000.0 ** (-np.arange(0, depth, 2) / depth)
    angles = positions[:, None] * rates
    sinusoid = np.stack([np.sin(angles), np.cos(angles)], -1).reshape(-1, depth)

    timesteps = np.array([0.0, 0.5, 937.5001, 998.3897, 999.0, 12_345.678], "f4")
    half = 128
    w = np.exp(-np.log(10000.0) * np.arange(half) / (half - 1.0))
    t_angles = timesteps.astype("f8")[:, None] * w
    timestep = np.concatenate([np.sin(t_angles), np.cos(t_angles)], -1)

    # MAE/diffusers 2-D grid, 24 x 40 patches at base size 16, scale 1.5:
    # positions i * 16 / (grid * 1.5) exactly, width first.
    grid_h, grid_w, dim = 24, 40, 64
    rows = np.arange(grid_h) * 16 / (grid_h * 1.5)
    cols = np.arange(grid_w) * 16 / (grid_w * 1.5)
    omega = 1.0 / 10000.0 ** (np.arange(dim // 4) / (dim / 4.0))

    def one_axis(pos):
        out = pos.reshape(-1)[:, None] * omega
        return np.concatenate([np.sin(out), np.cos(out)], -1)

    hh, ww = np.meshgrid(rows, cols, indexing="ij")
    grid = np.concatenate([one_axis(ww), one_axis(hh)], -1)

    # FLUX: ids [N, 3], axes_dim (16, 56, 56), theta 10000.
    ids = np.stack(
        [np.zeros(300), np.repeat(np.arange(15), 20), np.tile(np.arange(20), 15)], -1
    ).astype("f4")
    flux_angles = []
    for axis, size in enumerate((16, 56, 56)):
        inverse = 10000.0 ** (-np.arange(0, size, 2) / size)
        flux_angles.append(ids[:, axis : axis + 1].astype("f8") * inverse)
    flux = np.concatenate(flux_angles, -1)

    # Llama-style RoPE at long positions: head dim 128, base 500000.
    rope_positions = np.array([0, 1, 7, 1000, 65_535, 131_071, 1_000_003, 2**20])
    rope_angles = rope_positions[:, None] * 500000.0 ** (-np.arange(0, 128, 2) / 128)

    # Causal form: slope * (key - query), future keys too (masked later).
    heads, queries, keys = 12, 4, 4096
    slopes = 2.0 ** (-8.0 * np.arange(1, 9) / 8)
    slopes = np.concatenate([slopes, 2.0 ** (-8.0 * np.arange(1, 16, 2) / 16)[:4]])
    distance = np.arange(keys)[None, :] - (keys - queries + np.arange(queries))[:, None]
    alibi = slopes[:, None, None] * distance[None]
    return {
        "sinusoidal_table": (positions, sinusoid),
        "timestep_embedding": (timesteps, timestep),
        "grid_sincos_table": ((grid_h, grid_w), grid),
        "rotary_cos_sin": (
            rope_positions,
            np.concatenate([np.cos(rope_angles), np.sin(rope_angles)], -1),
        ),
        "rotary_cos_sin_flux": (ids, np.concatenate([np.cos(flux), np.sin(flux)], -1)),
        "alibi_bias": ((heads, queries, keys), alibi),
    }


def compute():
    """name -> (ours as float32 numpy, the float64 reference)."""
    from keras import ops

    import keras_posenc

    refs = references()
    tensor = ops.convert_to_tensor
    out = {}
    positions, _ = refs["sinusoidal_table"]
    out["sinusoidal_table"] = ops.concatenate(
        [keras_posenc.sinusoidal_table(1, 64, start_index=int(p)) for p in positions],
        axis=0,
    )
    timesteps, _ = refs["timestep_embedding"]
    out["timestep_embedding"] = keras_posenc.timestep_embedding(tensor(timesteps), 256)
    grid_shape, _ = refs["grid_sincos_table"]
    out["grid_sincos_table"] = keras_posenc.grid_sincos_table(
        grid_shape, 64, base_size=16, interpolation_scale=1.5
    )
    rope_positions, _ = refs["rotary_cos_sin"]
    cos, sin = keras_posenc.rotary_cos_sin(
        tensor(rope_positions), 128, max_wavelength=500000.0
    )
    # half layout: each angle in both halves; keep the first.
    out["rotary_cos_sin"] = ops.concatenate([cos[:, :64], sin[:, :64]], -1)
    ids, _ = refs["rotary_cos_sin_flux"]
    cos, sin = keras_posenc.rotary_cos_sin(
        tensor(ids[None]), 128, axes_dim=(16, 56, 56), layout="interleaved"
    )
    # interleaved: each angle twice; keep one of each pair.
    out["rotary_cos_sin_flux"] = ops.concatenate([cos[0, :, ::2], sin[0, :, ::2]], -1)
    (heads, queries, keys), _ = refs["alibi_bias"]
    out["alibi_bias"] = keras_posenc.alibi_bias(
        heads, queries, keys, start_index=keys - queries
    )[0]
    return {
        name: (np.asarray(ops.convert_to_numpy(value)), refs[name][1])
        for name, value in out.items()
    }


def save(path):
    import keras

    results = compute()
    device = "cpu"
    if keras.backend.backend() == "jax":
        import jax

        device = str(jax.devices()[0])
    elif keras.backend.backend() == "torch":
        from keras.src.backend.torch.core import get_device

        device = str(get_device())
    arrays = {}
    for name, (ours, reference) in results.items():
        if ours.shape != reference.shape:
            sys.exit(f"{name}: shape {ours.shape}, reference {reference.shape}")
        # Relative where the value exceeds 1 (ALiBi's biases): float32
        # rounding is the floor there.
        scale = np.maximum(np.abs(reference), 1.0)
        error = float(np.max(np.abs(ours.astype("f8") - reference) / scale))
        arrays[name] = ours
        arrays[f"{name}__error"] = np.float64(error)
        print(f"{name}: max error {error:.2e}")
    arrays["__label"] = np.array(f"{keras.backend.backend()} on {device}")
    np.savez(path, **arrays)
    print("saved", path, arrays["__label"])


def compare(paths):
    files = [dict(np.load(p)) for p in paths]
    labels = [str(f["__label"]) for f in files]
    print("files:", "; ".join(labels))
    same_everywhere = True
    for name in [k for k in files[0] if not k.startswith("__") and "__" not in k]:
        first = files[0][name]
        same = all(
            f[name].shape == first.shape
            and np.array_equal(f[name].view("u4"), first.view("u4"))
            for f in files
        )
        same_everywhere &= same
        errors = ", ".join(f"{float(f[name + '__error']):.1e}" for f in files)
        print(f"{name}: {'same bits' if same else 'bits differ'}; max error {errors}")
    return same_everywhere


if __name__ == "__main__":
    arguments = _select(sys.argv[1:])
    if arguments.compare:
        sys.exit(0 if compare(arguments.compare) else 1)
    save(arguments.save)
