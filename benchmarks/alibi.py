"""ALiBi: the bias add against a precomputed-bias add and keras-hub, per backend.

    python -m benchmarks.alibi [--backend tensorflow|jax|torch | --all-backends]
        [--reps 7] [--shape B,H,Q,K] [--torch-threads 1] [--one-core]
        [--smoke] [--json PATH] [--record]

Scores `[batch, heads, query, key]`, default `(8, 32, 1024, 1024)` (1 GiB
of float32 per tensor; the issue's `(8, 32, 2048, 2048)` is 4 GiB per
tensor, see benchmarks/README.md). The floor is a plain Keras layer
adding a precomputed float32 bias `[1, H, Q, K]` (a constant: read the
scores and the bias once, write the output once). Ours (`AlibiBias`)
computes the exact bias `[1, H, Q, K]` at every call, once (not per batch
row), and adds it; keras-hub's `AlibiBias` computes a `[1, H, 1, K]` bias
in the compute dtype (one row, broadcast over the queries) and adds it;
ours in that form (`AlibiBias(one_row=True)`, exact) is timed against a
precomputed `[1, H, 1, K]` add. A second floor writes the precomputed bias
once per call before adding it (``scores + (bias + zero)``, `zero` a
variable): the least any full bias made per call costs where nothing
fuses it into the add (not under XLA, which fuses it away).
Every configuration runs in the same process, in interleaved repetitions
after a warm-up, per execution mode (TensorFlow: `tf.function` and
`tf.function(jit_compile=True)`; JAX: `jax.jit`; torch: eager, no grad);
the table shows medians, min-max and the ratio to the floor of the same
mode. `--all-backends` runs one subprocess per backend and merges the
ratios.
"""

import contextlib
import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])
    _common.pin_one_core(sys.argv[1:])

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from keras_posenc import AlibiBias, alibi_bias  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "alibi"
SHAPE = (8, 32, 1024, 1024)
SMOKE_SHAPE = (1, 4, 8, 8)

FLOOR, OURS, KERAS_HUB = "floor", "ours", "keras_hub"
FLOOR_ROW, OURS_ROW = "floor_one_row", "ours_one_row"
WRITTEN = "floor_bias_written"
LABELS = {
    FLOOR: "floor: plain Keras layer, scores + precomputed bias [1, H, Q, K]",
    OURS: "ours: AlibiBias (exact bias computed every call)",
    KERAS_HUB: "keras-hub AlibiBias ([1, H, 1, K] bias in the compute dtype)",
    FLOOR_ROW: "floor, one row: scores + precomputed bias [1, H, 1, K]",
    OURS_ROW: "ours, one row: AlibiBias(one_row=True) (exact, keras-hub's form)",
    WRITTEN: "floor with the bias written per call: scores + (bias + zero)",
}
MODES = {
    "tensorflow": ("tf.function", "tf.function + XLA"),
    "jax": ("jax.jit",),
    "torch": ("eager",),
}
GOAL = 1.05  # ours / floor, in each mode


class ConstantBias(keras.layers.Layer):
    """The floor: adds a precomputed bias."""

    def __init__(self, bias, **kwargs):
        super().__init__(**kwargs)
        self.bias = bias

    def call(self, scores):
        return scores + self.bias


class WrittenBias(ConstantBias):
    """The floor, writing its bias once per call before the add: ``bias +
    zero`` with `zero` a variable, which no graph optimizer folds away."""

    def build(self, input_shape):
        self.zero = self.add_weight(shape=(), initializer="zeros", trainable=False)

    def call(self, scores):
        return scores + (self.bias + self.zero)


def configurations(shape):
    """name -> function(scores) adding ALiBi biases."""
    _, heads, q, k = shape
    configs = {
        FLOOR: ConstantBias(alibi_bias(heads, q, k)),
        OURS: AlibiBias(),
        WRITTEN: WrittenBias(alibi_bias(heads, q, k)),
        # keras-hub's form: one row per head, the last query's, broadcast
        # over the queries (the same softmax under a causal mask).
        FLOOR_ROW: ConstantBias(alibi_bias(heads, q, k, one_row=True)),
        OURS_ROW: AlibiBias(one_row=True),
    }
    try:
        import keras_hub
    except ImportError:
        return configs
    configs[KERAS_HUB] = keras_hub.layers.AlibiBias()
    return configs


def _compiled(fn, mode):
    if mode.startswith("tf.function"):
        import tensorflow as tf

        return tf.function(fn, autograph=False, jit_compile=mode.endswith("XLA"))
    if mode == "jax.jit":
        import jax

        return jax.jit(fn)
    return fn


def _no_grad():
    if BACKEND != "torch":
        return contextlib.nullcontext()
    import torch

    return torch.no_grad()


def run(shape, reps):
    """One backend's section: timings and ratios per configuration and mode."""
    info = _common.run_info(BACKEND)
    print(_common.machine_line(info))
    scores = ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=shape).astype("float32")
    )
    runners = {}
    for name, layer in configurations(shape).items():
        for mode in MODES[BACKEND]:
            compiled = _compiled(lambda x, layer=layer: layer(x), mode)
            runners[(name, mode)] = (lambda f: lambda: f(scores))(compiled)
    with _no_grad():
        speed = _common.speed_of(runners, reps, FLOOR)
    section = _common.section_of(info, shape, reps, speed)
    print(speed_markdown(section))
    return section


def speed_markdown(section):
    shape = ", ".join(map(str, section["shape"]))
    modes = list(next(iter(section["speed"].values())))
    header = [f"(B, H, Q, K) = ({shape}), {BACKEND}"]
    header += [f"{mode}: ms (x floor; min x floor) [min-max]" for mode in modes]
    body = [
        [LABELS[name]] + [_common.fmt_ms(s) for s in cells.values()]
        for name, cells in section["speed"].items()
    ]
    return _common.markdown_table(header, body)


def merged_markdown(sections):
    """Ratios to the floor, every backend and mode side by side."""
    return _common.ratio_table(sections, LABELS, MODES)


def goals(sections):
    """Whether ours is within GOAL of the floor and beats keras-hub, per mode."""
    lines = []
    for backend, section in sections.items():
        speed = section["speed"]
        for mode in MODES[backend]:
            ratio = speed[OURS][mode]["ratio"]
            line = f"{backend} {mode}: ours {ratio:.2f}x floor "
            line += f"({'within' if ratio <= GOAL else 'above'} {GOAL}x)"
            if KERAS_HUB in speed:
                hub = speed[KERAS_HUB][mode]["median_ms"]
                verdict = "faster" if speed[OURS][mode]["median_ms"] < hub else "slower"
                line += f"; {verdict} than keras-hub ({hub:.1f} ms)"
            row = speed[OURS_ROW][mode]["median_ms"]
            row_floor = speed[FLOOR_ROW][mode]["median_ms"]
            line += f"; one-row form {row / row_floor:.2f}x its floor"
            if KERAS_HUB in speed:
                hub = speed[KERAS_HUB][mode]["median_ms"]
                line += f" ({row / hub:.2f}x keras-hub)"
            written = speed[WRITTEN][mode]["ratio"]
            line += f"; writing the bias alone costs {written:.2f}x"
            lines.append(line)
    return "\n".join(lines)


def parse_shape(text):
    return tuple(int(v) for v in text.split(","))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _common.argument_parser(__doc__, NAME)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shape, one repetition"
    )
    parser.add_argument(
        "--shape", type=parse_shape, help="B,H,Q,K instead of 8,32,1024,1024"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads"
    )
    _common.add_one_core_argument(parser)
    args = parser.parse_args(argv)
    _common.check_one_core(parser, args)
    suffix = _common.one_core_suffix(args)
    sections = _common.run_requested_backends(
        NAME, argv, args, BACKEND, merged_markdown, suffix=suffix, summary=goals
    )
    if sections is not None:
        return sections
    if BACKEND == "torch":
        import torch

        torch.set_num_threads(args.torch_threads)
    shape = args.shape or (SMOKE_SHAPE if args.smoke else SHAPE)
    section = run(shape, 1 if args.smoke else args.reps)
    print("\n" + goals({BACKEND: section}))
    return _common.write_section(NAME, BACKEND, section, args, suffix)


if __name__ == "__main__":
    main()
