"""Diffusion timestep embeddings: error against float64, and time per call.

    python -m benchmarks.timestep [--backend tensorflow|jax|torch | --all-backends]
        [--reps 201] [--smoke] [--json PATH] [--record]

Precision (numpy, the same on every backend, plus ours on the backend): the
max |error| of the embedding at dim 256 over sampler timesteps, against the
float64 formula at the timesteps as given, for ours, the usual float32
formula (diffusers' `get_timestep_embedding`, GLIDE/DiT, keras-hub's Flux:
angle ``t * w`` formed in float32), and that formula on timesteps rounded to
bfloat16 first (what a bf16 pipeline feeds it). Two conventions: diffusers
(`t` in [0, 1000), scale 1) and FLUX (`t` in [0, 1], `time_factor` 1000).

Speed: a batch of 256 timesteps at dim 256 (FLUX's), under `jax.jit`,
`tf.function` or eager torch: ours against the float32 formula doing the
same op (the floor), medians of interleaved repetitions.
"""

import math
import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "timestep"
DIM, BATCH = 256, 256
MODE = _common.MODEL_MODE[BACKEND]
GOAL = 1.10
CONVENTIONS = {
    # name: (timesteps in the pipeline's units, scale, shift, flip)
    "diffusers": (1000.0, 1.0, 1.0, False),
    "flux": (1.0, 1000.0, 0.0, True),
}
FLOOR, OURS = "float32_formula", "ours"


def _timesteps(span, count, seed=0):
    """Sampler-like timesteps: fractional, plus the reported 998.3897, 937.5001."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.0, span, count).astype(np.float32)
    values[:2] = np.array([998.3897, 937.5001], np.float32) * (span / 1000.0)
    return values


def _formula(t, dim, scale, shift, flip, dtype):
    """The public formula with its angle formed in `dtype` (numpy)."""
    half = dim // 2
    exponent = -math.log(10000.0) * np.arange(half) / (half - shift)
    freqs = np.exp(exponent.astype(dtype)).astype(dtype)
    angle = (np.asarray(t, dtype)[:, None] * freqs[None]).astype(dtype)
    angle = (angle * dtype(scale)).astype(dtype)
    emb = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    return np.concatenate([emb[:, half:], emb[:, :half]], -1) if flip else emb


def precision(count):
    rows = {}
    for name, (span, scale, shift, flip) in CONVENTIONS.items():
        t = _timesteps(span, count)
        exact = _formula(t.astype(np.float64), DIM, scale, shift, flip, np.float64)
        ours = keras_posenc.timestep_embedding(
            t, DIM, scale=scale, downscale_freq_shift=shift, flip_sin_to_cos=flip
        )
        bf16 = t.astype(ml_dtypes.bfloat16).astype(np.float32)
        rows[name] = {
            "ours": float(np.abs(ops.convert_to_numpy(ours) - exact).max()),
            "float32_formula": float(
                np.abs(_formula(t, DIM, scale, shift, flip, np.float32) - exact).max()
            ),
            "bf16_timesteps": float(
                np.abs(
                    _formula(bf16, DIM, scale, shift, flip, np.float32) - exact
                ).max()
            ),
        }
    return rows


def _floor(t):
    half = DIM // 2
    exponent = -math.log(10000.0) * ops.arange(half, dtype="float32") / half
    angle = t[:, None] * ops.exp(exponent)[None] * 1000.0
    return ops.concatenate([ops.cos(angle), ops.sin(angle)], axis=-1)


def _ours(t):
    return keras_posenc.timestep_embedding(
        t, DIM, flip_sin_to_cos=True, downscale_freq_shift=0.0, scale=1000.0
    )


def speed(reps, batch):
    t = ops.convert_to_tensor(_timesteps(1.0, batch, seed=1))
    floor, ours = _common.compiled(_floor, MODE), _common.compiled(_ours, MODE)
    return _common.speed_of(
        {FLOOR: lambda: floor(t), OURS: lambda: ours(t)}, reps, FLOOR
    )


def run(reps, batch, count):
    section = {
        "run": _common.run_info(BACKEND),
        "shape": [batch, DIM],
        "mode": MODE,
        "goal": GOAL,
        "precision": precision(count),
        "speed": speed(reps, batch),
    }
    print(_common.machine_line(section["run"]))
    print(f"\n### Max |error|, dim {DIM}, {count} sampler timesteps\n")
    rows = [
        [name, *(f"{r[k]:.1e}" for k in ("ours", "float32_formula", "bf16_timesteps"))]
        for name, r in section["precision"].items()
    ]
    header = ["convention", "ours", "float32 formula", "float32 formula, bf16 t"]
    print(_common.markdown_table(header, rows))
    print(f"\n### Time per call, [{batch}] timesteps, dim {DIM}, {MODE}\n")
    rows = [[k, _common.fmt_ms(v)] for k, v in section["speed"].items()]
    print(_common.markdown_table(["", "median ms (ratio to the formula)"], rows))
    return section


def merged_markdown(sections):
    header = ["backend", "mode", "formula ms", "ours ms", "ratio"]
    rows = []
    for backend, section in sections.items():
        speed_ = section["speed"]
        rows.append(
            [
                backend,
                section["mode"],
                f"{speed_[FLOOR]['median_ms']:.3f}",
                f"{speed_[OURS]['median_ms']:.3f}",
                f"{speed_[OURS]['ratio']:.2f}x",
            ]
        )
    return _common.markdown_table(header, rows)


def main(argv=None):
    return _common.script_main(
        argv, sys.modules[__name__], 201, "5 reps, batch 8", measure, merged_markdown
    )


def measure(args):
    """This backend's section at the sizes `args` ask for."""
    reps, batch, count = (5, 8, 16) if args.smoke else (args.reps, BATCH, 4096)
    return run(reps, batch, count)


if __name__ == "__main__":
    main()
