"""Diffusion timestep embeddings: error against float64, and time per call.

    python -m benchmarks.timestep [--backend tensorflow|jax|torch | --all-backends]
        [--reps 201] [--smoke] [--torch-compile] [--dit-block] [--json PATH]
        [--record]

Precision (numpy, the same on every backend, plus ours on the backend): the
max |error| of the embedding at dim 256 over sampler timesteps, against the
float64 formula at the timesteps as given, for ours, the usual float32
formula (diffusers' `get_timestep_embedding`, GLIDE/DiT, keras-hub's Flux:
angle ``t * w`` formed in float32), and that formula on timesteps rounded to
bfloat16 first (what a bf16 pipeline feeds it). Two conventions: diffusers
(`t` in [0, 1000), scale 1) and FLUX (`t` in [0, 1], `time_factor` 1000).

Speed: a batch of 256 timesteps at dim 256 (FLUX's), under `jax.jit`,
`tf.function` or eager torch: ours against the float32 formula doing the
same op (the floor), medians of interleaved repetitions. On torch,
`--torch-compile` adds both under `torch.compile` (`speed_compiled`), and
`--dit-block` times ours and the formula eagerly beside one DiT-XL/2 block's
forward (`dit_block`: hidden 1152, 16 heads, MLP 4608, adaLN-Zero, 256
tokens, batch 8, float32, as the DiT paper's 256x256 model; a sampling step
runs 28 of them): what exactness costs a step, per call.
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


def speed_compiled(reps, batch):
    """Ours (the layer) and the formula under `torch.compile` (torch only)."""
    import torch

    t = ops.convert_to_tensor(_timesteps(1.0, batch, seed=1))
    # The layer, as a compiled model holds it (the function's store lookup
    # takes a lock: a graph break).
    layer = keras_posenc.TimestepEmbedding(
        DIM, flip_sin_to_cos=True, downscale_freq_shift=0.0, scale=1000.0
    )
    layer(t)  # built eagerly, as Keras builds a model before it is compiled
    floor, ours = torch.compile(_floor), torch.compile(layer)
    with torch.no_grad():
        return _common.speed_of(
            {FLOOR: lambda: floor(t), OURS: lambda: ours(t)}, reps, FLOOR
        )


def dit_block(reps, smoke):
    """Eager ours and formula beside one DiT-XL/2 block's forward (torch).

    The block is DiT's (Peebles & Xie, 2023): adaLN-Zero modulation from
    the conditioning, self-attention and a GELU MLP, in plain torch on
    Keras's device. Returns the three times and the share of a block
    (and of a 28-block step) that ours adds over the formula.
    """
    import torch
    from keras.src.backend.torch.core import get_device

    hidden, heads, tokens, batch = (64, 4, 16, 2) if smoke else (1152, 16, 256, 8)
    device = get_device()
    block = _dit_block_class()(hidden, heads).to(device).eval()
    x = torch.randn(batch, tokens, hidden, device=device)
    c = torch.randn(batch, hidden, device=device)
    t = ops.convert_to_tensor(_timesteps(1.0, batch, seed=2))
    runners = {FLOOR: lambda: _floor(t), OURS: lambda: _ours(t)}
    runners["dit_block"] = lambda: block(x, c)
    with torch.no_grad():
        speed = _common.speed_of(runners, reps, FLOOR)
    extra = speed[OURS]["median_ms"] - speed[FLOOR]["median_ms"]
    block_ms = speed["dit_block"]["median_ms"]
    return {
        "shape": {"hidden": hidden, "heads": heads, "tokens": tokens, "batch": batch},
        "device": str(device),
        "speed": speed,
        "ours_minus_formula_ms": extra,
        "share_of_block": extra / block_ms,
        "share_of_28_block_step": extra / (28 * block_ms),
    }


def _dit_block_class():
    """DiT's block as a torch module (torch is imported only on torch)."""
    import torch
    from torch import nn

    class DiTBlock(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)
            self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

        def forward(self, x, c):
            shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c)[
                :, None
            ].chunk(6, dim=-1)
            b, n, d = x.shape
            h = self.norm1(x) * (1 + scale1) + shift1
            q, k, v = self.qkv(h).view(b, n, 3, self.heads, -1).unbind(2)
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            )
            x = x + gate1 * self.proj(a.transpose(1, 2).reshape(b, n, d))
            h = self.norm2(x) * (1 + scale2) + shift2
            mlp = self.fc2(nn.functional.gelu(self.fc1(h), approximate="tanh"))
            return x + gate2 * mlp

    return DiTBlock


def run(reps, batch, count, torch_compile=False, dit=False, smoke=False):
    section = {
        "run": _common.run_info(BACKEND),
        "shape": [batch, DIM],
        "mode": MODE,
        "goal": GOAL,
        "precision": precision(count),
        "speed": speed(reps, batch),
    }
    if BACKEND == "torch" and torch_compile:
        section["speed_compiled"] = speed_compiled(reps, batch)
    if BACKEND == "torch" and dit:
        section["dit_block"] = dit_block(reps, smoke)
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
    if "speed_compiled" in section:
        print(f"\n### Time per call, [{batch}] timesteps, dim {DIM}, torch.compile\n")
        rows = [[k, _common.fmt_ms(v)] for k, v in section["speed_compiled"].items()]
        print(_common.markdown_table(["", "median ms (ratio to the formula)"], rows))
    if "dit_block" in section:
        dit = section["dit_block"]
        print(f"\n### Beside one DiT block, eager, {dit['shape']}, {dit['device']}\n")
        rows = [[k, _common.fmt_ms(v)] for k, v in dit["speed"].items()]
        print(_common.markdown_table(["", "median ms (ratio to the formula)"], rows))
        print(
            f"ours - formula: {dit['ours_minus_formula_ms']:.4f} ms a call, "
            f"{dit['share_of_block']:.2%} of a block, "
            f"{dit['share_of_28_block_step']:.3%} of a 28-block step"
        )
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


OPTIONS = (
    (("--torch-compile",), {"action": "store_true", "help": "torch: also compiled"}),
    (("--dit-block",), {"action": "store_true", "help": "torch: beside a DiT block"}),
)


def main(argv=None):
    return _common.script_main(
        argv,
        sys.modules[__name__],
        201,
        "5 reps, batch 8",
        measure,
        merged_markdown,
        OPTIONS,
    )


def measure(args):
    """This backend's section at the sizes `args` ask for."""
    reps, batch, count = (5, 8, 16) if args.smoke else (args.reps, BATCH, 4096)
    return run(reps, batch, count, args.torch_compile, args.dit_block, args.smoke)


if __name__ == "__main__":
    main()
