"""Where the time goes in the two cells of issue 16 left above their goals.

    python -m benchmarks.parts [--backend tensorflow|jax | --all-backends]
        [--reps 101] [--one-core] [--smoke] [--json PATH] [--record]

Each part of a compiled call is timed alone, interleaved with the whole
call and its floor, so that the budget a goal leaves (10% of the floor)
can be set against what the part costs on its own:

- TensorFlow, `tf.function` without XLA, sinusoidal compute mode at
  `(8, 4096, 1024)`, start 0 (as `forward.py`): the floor `x + table`,
  ours, and the rows alone (`sinusoidal_table(4096, 1024)`, the engine's
  table that compute mode adds: coarse rows and their combination with
  the fine table, unfused ops).
- JAX, `jax.jit`, RoPE at `[4, 2048, 8, 64]`, start a runtime tensor (as
  `rotary.py`): the floor (constant cos/sin), ours, the floor's rotation
  with its cos/sin passed in as arguments, and the rows alone (the
  engine's ``[sin | cos]`` rows of 2048 positions at width 64, the same
  work as RoPE's at head dim 64).

If the rows alone cost more than the budget, no exact implementation that
builds them per call meets the goal there; what is left is caching them
(which embeds a table in every exported graph) or fusing them (XLA). The
process keeps freed buffers (`_common.steady_heap`) except in smoke runs.

`--one-core` pins the process to one core before the backend starts: the
floor's output loop, which XLA spreads across the cores, then runs on
one, and so do the rows' small kernels. The section records the cores
the run had (`usable_cores`).
"""

import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.prepare_process(sys.argv[1:])

import keras  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402
from benchmarks import forward, rotary  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "parts"
BACKENDS = ("tensorflow", "jax")  # torch meets its goals: nothing left to split
SHAPES = {"tensorflow": (8, 4096, 1024), "jax": (4, 2048, 8, 64)}
SMOKE_SHAPES = {"tensorflow": (2, 128, 16), "jax": (1, 64, 2, 16)}
MODE = _common.MODEL_MODE
GOAL = 1.10  # the goal of both cells: ours / floor

FLOOR, OURS, ROWS, GIVEN = "floor", "ours", "rows_alone", "rotation_given_tables"
LABELS = {
    FLOOR: "floor",
    OURS: "ours (whole call)",
    ROWS: "the engine's rows alone",
    GIVEN: "the floor's rotation, cos/sin passed in as arguments",
}


def sinusoidal_runners(shape):
    """TensorFlow: `{part: callable()}` at `(batch, length, depth)`, start 0."""
    import tensorflow as tf

    batch, length, depth = shape
    x = forward.inputs(batch, length, depth)
    configs = forward.configurations(
        batch, length, depth, 0, keys=[forward.FLOOR, forward.OURS_COMPUTE]
    )
    floor, ours = (
        forward.compiled(configs[key], forward.FUNCTION)
        for key in (forward.FLOOR, forward.OURS_COMPUTE)
    )
    rows = tf.function(
        lambda: keras_posenc.sinusoidal_table(length, depth), autograph=False
    )
    return {FLOOR: lambda: floor(x), OURS: lambda: ours(x), ROWS: rows}


def rotary_runners(shape):
    """JAX: `{part: callable()}` at `(batch, length, heads, dim)`, start a tensor."""
    import jax

    _, length, _, dim = shape
    x = _common.random_inputs(shape)
    start = ops.convert_to_tensor(0, "int32")
    configs = rotary.configurations(shape)
    floor, ours = (jax.jit(configs[key]) for key in (rotary.FLOOR, rotary.OURS))
    cos, sin = rotary.floor_tables(length, dim)
    given = jax.jit(lambda x, c, s: rotary.ConstantRope(c, s, dim)(x))
    rows = jax.jit(
        lambda s: keras_posenc.sinusoidal_table(
            length, dim, layout="concatenated", start_index=s
        )
    )
    return {
        FLOOR: lambda: floor(x, start),
        OURS: lambda: ours(x, start),
        GIVEN: lambda: given(x, cos, sin),
        ROWS: lambda: rows(start),
    }


def runners(shape):
    """`{part: callable()}` of this backend's cell (TensorFlow or JAX)."""
    if BACKEND == "tensorflow":
        return sinusoidal_runners(shape)
    return rotary_runners(shape)


def run(shape, reps, steady_heap=True):
    """This backend's section: each part's time and its ratio to the floor."""
    info = _common.start_run(BACKEND, steady=steady_heap)
    speed = _common.speed_of(runners(shape), reps, FLOOR)
    section = _common.section_of(info, shape, reps, speed, mode=MODE[BACKEND])
    print(markdown(section))
    print("\n" + budget_line(BACKEND, section))
    return section


def markdown(section):
    """One backend's parts: times and ratios to the floor."""
    cores = section["run"]["machine"]["usable_cores"]
    return _common.one_mode_table(
        section, LABELS, "ms (x floor; min x floor) [min-max]", f", cores: {cores}"
    )


def budget_lines(sections):
    """`budget_line` of every backend's section, one per line."""
    return "\n".join(budget_line(b, s) for b, s in sections.items())


def budget_line(backend, section):
    """What the goal leaves over the floor, and what the rows alone cost."""
    speed = section["speed"]
    budget = (GOAL - 1.0) * speed[FLOOR]["median_ms"]
    rows, cores = speed[ROWS], section["run"]["machine"]["usable_cores"]
    return (
        f"{backend} {section['mode']} (cores: {cores}): the goal ({GOAL}x) "
        f"leaves {budget:.3f} ms "
        f"over the floor; the rows alone take {rows['median_ms']:.3f} ms "
        f"(min {rows['min_ms']:.3f}), {rows['median_ms'] / budget:.2f}x that budget; "
        f"ours is {speed[OURS]['ratio']:.2f}x the floor "
        f"({speed[OURS]['min_ratio']:.2f}x by minimums)"
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _common.script_parser(__doc__, NAME, 101, "tiny shapes, one rep")
    _common.add_one_core_argument(parser)
    args = parser.parse_args(argv)
    wanted = args.backend or BACKEND
    if not args.all_backends and wanted not in BACKENDS:
        parser.error(f"--backend: one of {', '.join(BACKENDS)} (got {wanted!r})")
    _common.check_one_core(parser, args)
    return _common.run_script(
        argv,
        args,
        NAME,
        BACKEND,
        measure,
        backends=BACKENDS,
        suffix=_common.one_core_suffix(args),
        summary=budget_lines,
    )


def measure(args):
    """This backend's section at the shape and repetitions `args` ask for."""
    shape = (SMOKE_SHAPES if args.smoke else SHAPES)[BACKEND]
    return run(shape, 1 if args.smoke else args.reps, steady_heap=not args.smoke)


if __name__ == "__main__":
    main()
