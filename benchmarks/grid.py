"""Grid benchmark: the 2-D grid add against a float32 formula and a table.

    python -m benchmarks.grid [--backend tensorflow|jax|torch | --all-backends]
        [--reps 31] [--smoke] [--json PATH] [--record]

`x + PE` on a `[8, 64, 64, 1152]` patch grid (DiT-XL/2 at 512 pixels:
64 x 64 patches, 1152 features), in the mode a model runs in per backend
(`jax.jit`, `tf.function`, eager torch). Baselines measured in the same
run, interleaved: the float32 formula computing the same table per call
(MAE's `get_2d_sincos_pos_embed` written with `keras.ops` in float32: the
same op as ours, inexact angles) plus the add, and the add of a
precomputed table (a constant). Ours: `GridPositionEncoding` with integer
positions (MAE, DiT), with PixArt/diffusers' exact rational positions
(`base_size=32`), with diffusers' float32 positions, and in lookup mode
(SD3-style, a `(64, 64)` max grid). The goal: ours at most 1.10x the
float32 formula.
"""

import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "grid"
SHAPE = (8, 64, 64, 1152)
SMOKE_SHAPE = (2, 4, 4, 16)
MODE = _common.MODEL_MODE
GOAL = 1.10  # ours / the float32 formula

FORMULA, TABLE = "float32_formula", "precomputed_table"
OURS = "ours_mae"
LABELS = {
    FORMULA: "float32 formula per call + add",
    TABLE: "precomputed table + add",
    OURS: "ours, MAE/DiT (integer positions)",
    "ours_base_size": "ours, base_size=32 (exact rational)",
    "ours_float32": "ours, base_size=32, positions='float32'",
    "ours_lookup": "ours, lookup (max grid 64 x 64)",
}
OPTIONS = {
    OURS: {},
    "ours_base_size": {"base_size": 32},
    "ours_float32": {"base_size": 32, "positions": "float32"},
    "ours_lookup": {"mode": "lookup", "max_grid_shape": (64, 64)},
}


def float32_formula(x):
    """`x` + MAE's 2-D table, computed in float32 with `keras.ops` per call."""
    _, height, width, dim = x.shape
    quarter = dim // 4
    omega = 1.0 / 10000.0 ** (ops.arange(quarter, dtype="float32") / quarter)

    def axis(size):
        angle = ops.arange(size, dtype="float32")[:, None] * omega[None, :]
        return ops.concatenate([ops.sin(angle), ops.cos(angle)], axis=-1)

    rows_w = ops.broadcast_to(axis(width)[None], (height, width, dim // 2))
    rows_h = ops.broadcast_to(axis(height)[:, None], (height, width, dim // 2))
    return x + ops.concatenate([rows_w, rows_h], axis=-1)


def runners(shape):
    """`{key: callable()}`: every configuration on inputs of `shape`."""
    x = _common.random_inputs(shape)
    table = keras_posenc.grid_sincos_table(shape[1:3], shape[3])
    table = ops.reshape(table, shape[1:])
    functions = {FORMULA: float32_formula, TABLE: lambda x: x + table}
    for key, options in OPTIONS.items():
        layer = keras_posenc.GridPositionEncoding(**options)
        layer.build(shape)
        functions[key] = layer
    calls = {key: _common.compiled(f, MODE[BACKEND]) for key, f in functions.items()}
    return {key: (lambda f=f: f(x)) for key, f in calls.items()}


def run(shape, reps):
    """This backend's section: each configuration's time and its ratio to
    the float32 formula."""
    info = _common.start_run(BACKEND)
    speed = _common.speed_of(runners(shape), reps, FORMULA)
    section = _common.section_of(info, shape, reps, speed, mode=MODE[BACKEND])
    print(markdown(section))
    return section


def markdown(section):
    """One backend's table: times and ratios to the float32 formula."""
    return _common.one_mode_table(
        section, LABELS, "ms (x float32 formula; min x) [min-max]"
    )


def merged(sections):
    """Ratios to the float32 formula, one column per backend."""
    keys = list(LABELS)
    header = ["x float32 formula"] + [f"{b} {s['mode']}" for b, s in sections.items()]
    body = [
        [LABELS[k]] + [f"{s['speed'][k]['ratio']:.2f}x" for s in sections.values()]
        for k in keys
    ]
    return _common.markdown_table(header, body)


def main(argv=None):
    return _common.script_main(
        argv, sys.modules[__name__], 31, "tiny shapes, one rep", measure, merged
    )


def measure(args):
    """This backend's section at the shape and repetitions `args` ask for."""
    return run(SMOKE_SHAPE if args.smoke else SHAPE, 1 if args.smoke else args.reps)


if __name__ == "__main__":
    main()
