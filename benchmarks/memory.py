"""Process memory per new sequence length under Keras's `predict` (JAX).

    python -m benchmarks.memory [--depth 2048] [--lengths 500,1000,...]
        [--runs 3] [--smoke] [--json PATH] [--record]

`predict` compiles one program per input shape (the start is static there:
0). Rows kept from inside such a trace would be constants of each program,
one copy per length (issue 29: 178 MiB per new length at L=4000, D=2000,
against 24 MiB for keras-hub's computed encoding). Each run is a fresh
process: a model `x -> layer(x)` (keras-hub: `x + SinePositionEncoding()(x)`)
predicts one batch at each length in turn, and the process's resident
memory is read after each. Two figures per layer:

* **process growth** (what issue 29 measured): glibc's default allocator;
  the growth over all lengths, median of `--runs` processes per layer
  (interleaved), per new length. Most of it is freed input and output
  buffers that glibc's extra arenas keep (the same for every layer, and
  different in every run: hence the median of several processes).
* **compiled program**: the same run with ``MALLOC_ARENA_MAX=1`` (one
  arena, which `malloc_trim` returns in full), so the growth is what each
  compiled program holds; median step of one process.

The goal (issue 29): process growth per new length at most 1.5x
keras-hub's.
"""

import argparse
import statistics
import sys

from benchmarks import _common

NAME = "memory"
VARIANTS = ("ours_compute", "ours_lookup", "keras_hub")
LENGTHS = (500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500)
GOAL = 1.5


def child(variant, depth, lengths):
    """Runs in a fresh JAX process: RSS after each new length, MiB."""
    import keras
    import numpy as np

    import keras_posenc

    inputs = keras.Input((None, depth))
    if variant == "keras_hub":
        import keras_hub

        outputs = inputs + keras_hub.layers.SinePositionEncoding()(inputs)
    elif variant == "ours_lookup":
        layer = keras_posenc.SinusoidalPositionEncoding(
            mode="lookup", max_length=max(lengths)
        )
        outputs = layer(inputs)
    else:
        outputs = keras_posenc.SinusoidalPositionEncoding()(inputs)
    model = keras.Model(inputs, outputs)
    model.predict(np.zeros((1, 64, depth), "float32"), verbose=0)  # warm
    before = _common.rss_mib()
    after = []
    for length in lengths:
        model.predict(np.zeros((1, length, depth), "float32"), verbose=0)
        after.append(_common.rss_mib())
    return {"before_MiB": before, "after_MiB": after}


def _run_child(variant, depth, lengths, one_arena=False):
    arena = {"MALLOC_ARENA_MAX": "1" if one_arena else None}
    return _common.child_json("memory", [variant, depth, list(lengths)], "jax", arena)


def _steps(result):
    """Growth after each new length, MiB."""
    after = result["after_MiB"]
    previous = [result["before_MiB"], *after[:-1]]
    return [b - a for a, b in zip(previous, after, strict=True)]


def summary(runs, program, lengths):
    """One layer's figures from its default-allocator `runs` and its
    one-arena `program` run (each `child`'s result)."""
    totals = [run["after_MiB"][-1] - run["before_MiB"] for run in runs]
    return {
        "process_growth_MiB": statistics.median(totals),
        "per_new_length_MiB": statistics.median(totals) / len(lengths),
        "program_MiB_per_length": statistics.median(_steps(program)),
        "process_growth_runs_MiB": totals,
        "runs": runs,
        "program_run": program,
    }


def markdown(section):
    variants = section["variants"]
    hub = variants.get("keras_hub")
    rows = []
    for name, result in variants.items():
        per, program = result["per_new_length_MiB"], result["program_MiB_per_length"]
        runs = ", ".join(f"{v:.0f}" for v in result["process_growth_runs_MiB"])
        rows.append(
            [
                name,
                f"{per:.1f} ({runs})",
                f"{per / hub['per_new_length_MiB']:.2f}x" if hub else "n/a",
                f"{program:.1f}",
                f"{program / hub['program_MiB_per_length']:.2f}x" if hub else "n/a",
            ]
        )
    header = [
        "layer",
        "process growth per new length, MiB (totals of each run)",
        "x keras-hub",
        "compiled program per new length, MiB",
        "x keras-hub",
    ]
    return _common.markdown_table(header, rows)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=2048)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--runs", type=int, default=3, help="processes per layer")
    parser.add_argument("--smoke", action="store_true", help="depth 64, 3 lengths")
    parser.add_argument("--json")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    depth, lengths = args.depth, [int(v) for v in args.lengths.split(",")]
    if args.smoke:
        depth, lengths = 64, [100, 200, 300]
    info = _common.run_info("jax")
    print(_common.machine_line(info))
    runs = {v: [] for v in VARIANTS}
    for _ in range(1 if args.smoke else args.runs):  # interleaved
        for variant in VARIANTS:
            runs[variant].append(_run_child(variant, depth, lengths))
    variants = {
        v: summary(runs[v], _run_child(v, depth, lengths, one_arena=True), lengths)
        for v in VARIANTS
    }
    section = {"run": info, "depth": depth, "lengths": lengths, "variants": variants}
    print(markdown(section))
    hub = variants["keras_hub"]
    for name in ("ours_compute", "ours_lookup"):
        ours = variants[name]
        ratio = ours["per_new_length_MiB"] / max(hub["per_new_length_MiB"], 1e-9)
        program = ours["program_MiB_per_length"] / hub["program_MiB_per_length"]
        verdict = "met" if ratio <= GOAL else "NOT met"
        print(
            f"{name}: process growth per new length {ratio:.2f}x keras-hub "
            f"(goal <= {GOAL}x): {verdict}; compiled program {program:.2f}x"
        )
    return _common.write_section(NAME, "jax", section, args)


if __name__ == "__main__":
    main()
