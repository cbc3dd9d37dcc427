"""Rotary embeddings: speed against the floor and keras-hub, precision against position.

    python -m benchmarks.rotary [--backend tensorflow|jax|torch | --all-backends]
        [--reps 21] [--shape B,L,H,D] [--torch-threads 1] [--one-core]
        [--smoke] [--json PATH]

Speed, at `(batch, length, heads, dim) = (4, 2048, 8, 64)` in the half
layout. The floor is the least a RoPE layer can do: a plain Keras layer
computing `x * cos + rotate(x) * sin` with cos and sin precomputed
constants `[1, L, 1, D]` (the rotation written as ours: one reverse of a
size-2 axis, the sign folded into sin; eager, Keras's call costs about
0.1 ms on torch, compiled it is traced away). Ours
computes exact cos and sin at every call (`[L, D]` once, broadcast over
batch and heads); keras-hub's `RotaryEmbedding` (float32 angles) runs when
installed. Every configuration runs in the same process, in interleaved
repetitions after a warm-up, per execution mode (TensorFlow: `tf.function`
and `tf.function(jit_compile=True)`; JAX: `jax.jit`; torch: eager); the
table shows medians, min-max, the ratio to the floor of the same mode, and
the median minor page faults per call (4096 are a fresh 16 MiB buffer).
The process keeps freed buffers (`_common.steady_heap`): otherwise
whether a call gets fresh memory depends on what ran before it, and
eager medians turn bimodal.
`--all-backends` runs one subprocess per backend and merges the ratios.

Eager, ours reads the rows its encoder kept from the previous call at the
same positions (a model's other layers); `ours_new_span` shows the cost
when every call is at new positions.

Precision: the largest error of cos and sin over positions `[p - 64, p)`
at p = 2**11, 2**16, 2**20 and 2**24, head dim 128, base 10000: ours; the
naive float32 code of Hugging Face and keras-hub (float32 positions times
float32 `inv_freq`); and positions rounded to bfloat16 first (keras-hub
#1494). The reference is float64 `cos(p * w)` with the float64
frequencies, exact to 2e-9 at these positions.
"""

import itertools
import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.prepare_process(sys.argv[1:])

import keras  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from keras_posenc._rope.config import RopeConfig  # noqa: E402
from keras_posenc.rotary import RotaryEmbedding, rotary_cos_sin  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "rotary"
SHAPE = (4, 2048, 8, 64)
SMOKE_SHAPE = (1, 64, 2, 16)
REPS = 21
LANDMARKS = (2**11, 2**16, 2**20, 2**24)
WINDOW, PRECISION_DIM = 64, 128

FLOOR, OURS, OURS_NEW, KERAS_HUB = "floor", "ours_compute", "ours_new_span", "keras_hub"
LABELS = {
    FLOOR: "floor: plain Keras layer, x * cos + rotate(x) * sin, constant cos/sin",
    OURS: "ours (exact cos/sin; eager: rows kept for the next layers)",
    OURS_NEW: "ours, eager, a new span every call (no kept rows)",
    KERAS_HUB: "keras-hub RotaryEmbedding",
}
MODES = _common.LAYER_MODES
GOAL = 1.10  # ours / floor, in each main mode


# -- precision -----------------------------------------------------------------


def precision_rows(dim=PRECISION_DIM, window=WINDOW):
    """Max |error| of cos and sin per method and landmark position."""
    freqs = np.array(RopeConfig.build().frequencies(dim))
    inv32 = freqs.astype(np.float32)
    rows = {"ours": {}, "naive float32": {}, "bfloat16 positions": {}}
    for end in LANDMARKS:
        positions = np.arange(end - window, end)
        angle = positions[:, None] * freqs
        want = np.concatenate([np.cos(angle), np.sin(angle)], -1)
        cos, sin = rotary_cos_sin(positions, dim)
        ours = np.concatenate(
            [ops.convert_to_numpy(t)[:, : dim // 2] for t in (cos, sin)], -1
        )
        methods = {"ours": ours}
        for name, p in (
            ("naive float32", positions.astype(np.float32)),
            (
                "bfloat16 positions",
                positions.astype(ml_dtypes.bfloat16).astype(np.float32),
            ),
        ):
            angle32 = p[:, None] * inv32  # float32 product, as the usual code
            methods[name] = np.concatenate([np.cos(angle32), np.sin(angle32)], -1)
        for name, got in methods.items():
            rows[name][end] = float(np.abs(got.astype(np.float64) - want).max())
    return rows


def precision_markdown(rows, window=WINDOW, dim=PRECISION_DIM):
    header = [f"max abs error of cos/sin, positions [p - {window}, p), dim {dim}"]
    header += [f"p = 2**{int(np.log2(p))}" for p in LANDMARKS]
    body = [
        [name] + [f"{values[p]:.1e}" for p in LANDMARKS]
        for name, values in rows.items()
    ]
    return _common.markdown_table(header, body)


# -- speed ----------------------------------------------------------------------


def _reshape(x, shape):
    """As the layer reshapes: the tensor's own `reshape` on eager torch
    (Keras's flattens its arguments as a pytree first, about 33 us)."""
    return x.reshape(tuple(shape)) if BACKEND == "torch" else ops.reshape(x, shape)


def swap_halves(x, dim):
    """Halves swapped: one reverse of a size-2 axis (as the layer does it)."""
    pairs = _reshape(x, (*ops.shape(x)[:-1], 2, dim // 2))
    return _reshape(ops.flip(pairs, axis=-2), ops.shape(x))


class ConstantRope(keras.layers.Layer):
    """The floor: a plain layer applying constant cos/sin (half layout, sign in sin)."""

    def __init__(self, cos, sin, dim, **kwargs):
        super().__init__(**kwargs)
        self.cos, self.sin, self.dim = cos, sin, dim

    def call(self, x, start_index=0):
        return x * self.cos + swap_halves(x, self.dim) * self.sin


def floor_tables(length, dim):
    """The floor's constant cos and signed sin, ``[1, L, 1, D]``, at ``[0, L)``."""
    cos, sin = (ops.convert_to_numpy(t) for t in rotary_cos_sin(np.arange(length), dim))
    sin = np.concatenate([-sin[:, : dim // 2], sin[:, dim // 2 :]], -1)
    return tuple(ops.convert_to_tensor(t[None, :, None, :]) for t in (cos, sin))


def configurations(shape):
    """name -> function(x, start) applying RoPE at positions start + [0, L).

    `start` is a runtime tensor (0), so that no compiler folds our cos/sin
    into constants: compiled, ours computes them at every call. Eager (torch),
    the encoder keeps the rows of the last prompt for a model's next layers,
    as every layer asks for the same positions: `ours_new_span` alternates
    between two starts (0 and 64) so that every call computes them (with
    an encoder of its own). The floor's constants are for start 0.
    """
    _, length, _, dim = shape
    ours, floor = RotaryEmbedding(), ConstantRope(*floor_tables(length, dim), dim)
    configs = {
        FLOOR: lambda x, start: floor(x, start_index=start),
        OURS: lambda x, start: ours(x, start_index=start),
    }
    if BACKEND == "torch":  # the eager main mode
        # Its own encoder (base 10001: the same work): with ours's, its
        # spans would evict the rows that ours keeps.
        new_spans, starts = (
            RotaryEmbedding(max_wavelength=10001),
            itertools.cycle([0, 64]),
        )
        configs[OURS_NEW] = lambda x, start: new_spans(x, start_index=next(starts))
    try:
        import keras_hub
    except ImportError:
        return configs
    hub = keras_hub.layers.RotaryEmbedding()
    configs[KERAS_HUB] = lambda x, start: hub(x, start_index=start)
    return configs


def run(shape, reps, steady_heap=True):
    """One backend's section: timings and ratios per configuration and mode.

    With `steady_heap` (not in smoke runs, which may share a test process)
    the process keeps freed buffers: see `_common.steady_heap`.
    """
    info = _common.start_run(BACKEND, steady=steady_heap)
    x = _common.random_inputs(shape)
    start = ops.convert_to_tensor(0, "int32")
    speed = _common.modes_speed(configurations(shape), BACKEND, reps, FLOOR, x, start)
    section = _common.section_of(info, shape, reps, speed)
    print(speed_markdown(section))
    rows = precision_rows()
    section["precision"] = {
        k: {str(p): v for p, v in r.items()} for k, r in rows.items()
    }
    print("\n" + precision_markdown(rows))
    return section


def speed_markdown(section):
    return _common.modes_table(section, LABELS, "B, L, H, D", BACKEND, faults=True)


def merged_markdown(sections):
    """Ratios to the floor, every backend and mode side by side."""
    return _common.ratio_table(sections, LABELS, MODES)


def goals(sections):
    """Whether ours is within GOAL of the floor and beats keras-hub, per mode."""
    return _common.goal_lines(sections, MODES, OURS, GOAL, KERAS_HUB, 2, more=_new_span)


def _new_span(speed, mode):
    """The ratio with a new span every call, where it ran (eager)."""
    if OURS_NEW not in speed:
        return ""
    return f"; a new span every call {speed[OURS_NEW][mode]['ratio']:.2f}x"


def main(argv=None):
    return _common.layer_main(
        argv,
        sys.modules[__name__],
        lambda shape, reps, smoke: run(shape, reps, steady_heap=not smoke),
        "B,L,H,D instead of 4,2048,8,64",
    )


if __name__ == "__main__":
    main()
