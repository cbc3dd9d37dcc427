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

import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.prepare_process(sys.argv[1:])

import keras  # noqa: E402

from keras_posenc import AlibiBias, alibi_bias  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "alibi"
SHAPE = (8, 32, 1024, 1024)
SMOKE_SHAPE = (1, 4, 8, 8)
REPS = 7

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
MODES = _common.LAYER_MODES
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


def run(shape, reps):
    """One backend's section: timings and ratios per configuration and mode."""
    info = _common.start_run(BACKEND)
    scores = _common.random_inputs(shape)
    layers = {
        name: (lambda x, layer=layer: layer(x))
        for name, layer in configurations(shape).items()
    }
    speed = _common.modes_speed(layers, BACKEND, reps, FLOOR, scores)
    section = _common.section_of(info, shape, reps, speed)
    print(speed_markdown(section))
    return section


def speed_markdown(section):
    return _common.modes_table(section, LABELS, "B, H, Q, K", BACKEND)


def merged_markdown(sections):
    """Ratios to the floor, every backend and mode side by side."""
    return _common.ratio_table(sections, LABELS, MODES)


def goals(sections):
    """Whether ours is within GOAL of the floor and beats keras-hub, per mode."""
    return _common.goal_lines(
        sections, MODES, OURS, GOAL, KERAS_HUB, more=_one_row_and_written
    )


def _one_row_and_written(speed, mode):
    """The one-row form against its floor (and keras-hub), and what writing
    the bias alone costs."""
    row = speed[OURS_ROW][mode]["median_ms"]
    row_floor = speed[FLOOR_ROW][mode]["median_ms"]
    line = f"; one-row form {row / row_floor:.2f}x its floor"
    if KERAS_HUB in speed:
        hub = speed[KERAS_HUB][mode]["median_ms"]
        line += f" ({row / hub:.2f}x keras-hub)"
    written = speed[WRITTEN][mode]["ratio"]
    return line + f"; writing the bias alone costs {written:.2f}x"


def main(argv=None):
    return _common.layer_main(
        argv,
        sys.modules[__name__],
        lambda shape, reps, smoke: run(shape, reps),
        "B,H,Q,K instead of 8,32,1024,1024",
    )


if __name__ == "__main__":
    main()
