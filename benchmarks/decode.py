"""Decoding steps: the per-call cost of both layers, eager, against a plain layer.

    python -m benchmarks.decode [--backend tensorflow|jax|torch | --all-backends]
        [--reps 31] [--steps 64] [--torch-threads 1] [--smoke] [--record]

Generation calls every position layer once per layer per token, mostly
eagerly (Keras's default on PyTorch, every step of keras-hub's `generate()`
loop on torch): there the cost of one call is what counts, not FLOPs.

* **Sinusoidal**, inputs `[32, 1, 1024]`. The floor is a plain Keras layer
  that adds row `t` of a precomputed float32 table (`x + table[t:t+1]`):
  Keras's own call cost plus one slice and one add, the least any position
  layer can cost. Then ours in compute and lookup mode, and keras-hub's
  `SinePositionEncoding` + add.
* **Rotary**, queries `[4, 1, 8, 64]`. The floor is a plain Keras layer
  applying precomputed cos/sin rows `t` (`x * cos + rotate_half(x) * sin`,
  as Hugging Face and keras-hub write it). Then ours and keras-hub's
  `RotaryEmbedding`.

Every runner decodes like a model does: call `i` is at position
`4095 + i mod 1024`, so positions advance by one per step and the cost of
moving to a new position (our decoding cache computes a new block of rows
every 64 steps) is in the numbers. A repetition times `--steps` calls of one
runner; repetitions of all runners are interleaved (rotated order) after a
warm-up, and the table shows the median per call, min-max, and the ratio to
the floor and to keras-hub measured in the same run.
"""

import itertools
import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402
from benchmarks._floors import PlainAdd  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "decode"
FIRST, CYCLE, TABLE_ROWS = 4095, 1024, 8192
SINE_SHAPE, ROPE_SHAPE = (32, 1, 1024), (4, 1, 8, 64)
FLOOR, COMPUTE, LOOKUP, ROPE, KERAS_HUB = (
    "floor",
    "ours_compute",
    "ours_lookup",
    "ours",
    "keras_hub",
)
LABELS = {
    "sinusoidal": {
        FLOOR: "plain layer: x + table[t:t+1]",
        COMPUTE: "ours, compute mode",
        LOOKUP: "ours, lookup mode",
        KERAS_HUB: "keras-hub SinePositionEncoding + add",
    },
    "rotary": {
        FLOOR: "plain layer: x * cos[t] + rotate_half(x) * sin[t]",
        ROPE: "ours RotaryEmbedding",
        KERAS_HUB: "keras-hub RotaryEmbedding",
    },
}
GOALS = "goals: at most 1.5x the floor, at most 0.5x keras-hub"


class PlainRope(keras.layers.Layer):
    """The floor: applies precomputed cos/sin rows `start_index` (half layout)."""

    def __init__(self, cos, sin, **kwargs):
        super().__init__(**kwargs)
        self.cos = ops.convert_to_tensor(cos[:, None, :])  # [rows, 1, dim]
        self.sin = ops.convert_to_tensor(sin[:, None, :])

    def call(self, x, start_index=0):
        cos = self.cos[start_index : start_index + 1]
        sin = self.sin[start_index : start_index + 1]
        half = x.shape[-1] // 2
        rotated = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin


def _stepper(call):
    """A runner: one call per decoding step, positions advancing by one."""
    positions = itertools.cycle(range(FIRST, FIRST + CYCLE))
    return lambda: call(next(positions))


def sinusoidal_runners(shape):
    x = ops.convert_to_tensor(np.random.default_rng(0).normal(size=shape), "float32")
    depth = shape[-1]
    table = keras_posenc.sinusoidal_table(TABLE_ROWS, depth)
    floor = PlainAdd(ops.convert_to_numpy(table))
    compute = keras_posenc.SinusoidalPositionEncoding()
    lookup = keras_posenc.SinusoidalPositionEncoding(
        mode="lookup", max_length=TABLE_ROWS
    )
    runners = {
        FLOOR: _stepper(lambda t: floor(x, start_index=t)),
        COMPUTE: _stepper(lambda t: compute(x, start_index=t)),
        LOOKUP: _stepper(lambda t: lookup(x, start_index=t)),
    }
    hub = _keras_hub()
    if hub is not None:
        sine = hub.layers.SinePositionEncoding()
        runners[KERAS_HUB] = _stepper(lambda t: x + sine(x, start_index=t))
    return runners


def rotary_runners(shape):
    q = ops.convert_to_tensor(np.random.default_rng(1).normal(size=shape), "float32")
    dim = shape[-1]
    cos, sin = keras_posenc.rotary_cos_sin(np.arange(TABLE_ROWS), dim)
    floor = PlainRope(ops.convert_to_numpy(cos), ops.convert_to_numpy(sin))
    ours = keras_posenc.RotaryEmbedding()
    runners = {
        FLOOR: _stepper(lambda t: floor(q, start_index=t)),
        ROPE: _stepper(lambda t: ours(q, start_index=t)),
    }
    hub = _keras_hub()
    if hub is not None:
        rope = hub.layers.RotaryEmbedding()
        runners[KERAS_HUB] = _stepper(lambda t: rope(q, start_index=t))
    return runners


def _keras_hub():
    try:
        import keras_hub
    except ImportError:
        return None
    return keras_hub


def _batched(runner, steps):
    """`steps` calls of `runner` per repetition (a call is ~0.1 ms)."""

    def run():
        for _ in range(steps):
            out = runner()
        return out

    return run


def measure(runners, reps, steps):
    """Per-call summaries of `runners`, with ratios to the floor and keras-hub."""
    times = _common.interleaved_times(
        {key: _batched(run, steps) for key, run in runners.items()}, reps
    )
    per_call = {
        key: {kind: [s / steps for s in values] for kind, values in t.items()}
        for key, t in times.items()
    }
    out = {key: _common.time_summary(t, per_call[FLOOR]) for key, t in per_call.items()}
    if KERAS_HUB in per_call:
        hub = _common.time_summary(per_call[KERAS_HUB])["median_ms"]
        for summary in out.values():
            summary["vs_keras_hub"] = summary["median_ms"] / hub
    return out


def markdown(section):
    lines = []
    for layer, results in section["layers"].items():
        header = [f"{layer}, eager, per call", "ms (x floor; min x floor) [min-max]"]
        header.append("x keras-hub")
        rows = []
        for key, summary in results.items():
            vs_hub = summary.get("vs_keras_hub")
            rows.append(
                [
                    LABELS[layer][key],
                    _common.fmt_ms(summary),
                    "" if vs_hub is None else f"{vs_hub:.2f}x",
                ]
            )
        lines.append(_common.markdown_table(header, rows))
    return "\n\n".join(lines) + f"\n\n{GOALS}"


def merged_markdown(sections):
    header = ["per call, eager: x floor (x keras-hub)", *sections]
    rows = []
    first = next(iter(sections.values()))
    for layer, results in first["layers"].items():
        for key in results:
            cells = []
            for section in sections.values():
                summary = section["layers"][layer].get(key)
                if summary is None:
                    cells.append("")
                    continue
                cell = f"{summary['ratio']:.2f}x"
                if summary.get("vs_keras_hub") is not None and key != KERAS_HUB:
                    cell += f" ({summary['vs_keras_hub']:.2f}x)"
                cells.append(cell)
            rows.append([f"{layer}: {LABELS[layer][key]}", *cells])
    return _common.markdown_table(header, rows) + f"\n\n{GOALS}"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _common.argument_parser(__doc__, NAME)
    parser.add_argument("--reps", type=int, default=31)
    parser.add_argument("--steps", type=int, default=64, help="calls per repetition")
    parser.add_argument("--smoke", action="store_true", help="3 repetitions of 4")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads"
    )
    args = parser.parse_args(argv)
    sections = _common.run_requested_backends(
        NAME, argv, args, BACKEND, merged_markdown
    )
    if sections is not None:
        return sections
    _common.set_torch_threads(BACKEND, args.torch_threads)
    reps, steps = (3, 4) if args.smoke else (args.reps, args.steps)
    section = _common.run_info(BACKEND)
    print(_common.machine_line(section), flush=True)
    section["layers"] = {
        "sinusoidal": measure(sinusoidal_runners(SINE_SHAPE), reps, steps),
        "rotary": measure(rotary_runners(ROPE_SHAPE), reps, steps),
    }
    section["load_end"] = _common.load_average()
    print(markdown(section))
    return _common.write_section(NAME, BACKEND, section, args)


if __name__ == "__main__":
    main()
