"""Process memory per RoPE configuration used once (torch, issue 47 item 9).

    python -m benchmarks.config_memory [--configs 250] [--runs 3]
        [--shape simple|mixed] [--json PATH | --record]

Each run is a fresh torch process: `--configs` RoPE layers take a prompt
and one decoding step, then are dropped. `--shape simple` (the default):
`keras_posenc.RotaryEmbedding`, each with its own base (`max_wavelength`
10000 + i), head dim 64, a prompt of 16 positions, 2 heads. `--shape
mixed` (the issue's harder case): `keras_posenc.compat.RotaryEmbedding`
and keras-hub's layer with the same arguments, bases 10000 + 37 i, head
dims 32 to 256, scalings linear (factors 1, 2, 4), dynamic and YaRN
(factor 4), prompts of 16, 100 and 512 positions, 4 heads. The process's
resident memory is read before and after, as it is (what a user sees)
and after `malloc_trim(0)` (what glibc could give back), with
`cache_info().nbytes` (what the one budget keeps on purpose; freed by
`clear_cache()`). keras-hub's `RotaryEmbedding` does the same in the same
run, interleaved, as the baseline. Figures are medians over `--runs`
processes per layer; the table prints ours / keras-hub. Results go to
`benchmarks/results/latest/config_memory[_mixed].json` (`--record`: the
committed `benchmarks/results/`).

The goal (issue 47): untrimmed growth at most 2x keras-hub's.
"""

import argparse
import statistics

from benchmarks import _common

VARIANTS = ("ours", "keras_hub")
GOAL = 2.0
SHAPES = ("simple", "mixed")
_KEYS = (
    "untrimmed_MiB",
    "trimmed_MiB",
    "cache_MiB",
    "cleared_MiB",
    "cleared_trimmed_MiB",
)
# The mixed shape's cycles (their lengths are coprime: 60 combinations).
_DIMS = (32, 64, 80, 128, 256)
_LENGTHS = (16, 100, 512)
_SCALINGS = (
    {},
    {"scaling_factor": 2.0},
    {"scaling_factor": 4.0},
    {"scaling_factor": 4.0, "rope_type": "dynamic"},
    {"scaling_factor": 4.0, "rope_type": "yarn"},
    {"scaling_factor": 4.0, "rope_type": "linear"},
    {"scaling_factor": 2.0, "rope_type": "dynamic"},
)


def configurations(shape, count):
    """``(arguments, length, heads, dim)`` of each of `count` layers."""
    for i in range(count):
        if shape == "simple":
            yield {"max_wavelength": 10000.0 + i}, 16, 2, 64
            continue
        arguments = {"max_wavelength": 10000.0 + 37 * i, **_SCALINGS[i % 7]}
        yield arguments, _LENGTHS[i % 3], 4, _DIMS[i % 5]


def _use(make, arguments, length, heads, dim):
    import numpy as np

    layer = make(**arguments)
    layer(np.ones((1, length, heads, dim), "float32"))
    layer(np.ones((1, 1, heads, dim), "float32"), start_index=length)


def child(variant, configs, shape="simple"):
    """Runs in a fresh torch process: RSS growth over `configs` layers, MiB."""
    import keras_posenc

    if variant == "keras_hub":
        import keras_hub

        make = keras_hub.layers.RotaryEmbedding
    elif shape == "mixed":
        from keras_posenc import compat

        make = compat.RotaryEmbedding
    else:
        make = keras_posenc.RotaryEmbedding
    # Warm: the backend's own first use, at every head dim and length.
    warm = {"max_wavelength": 9999.0}
    for _, length, heads, dim in configurations(shape, 15):
        _use(make, warm, length, heads, dim)
    before = _common.rss_mib(False)
    for config in configurations(shape, configs):
        _use(make, *config)
    grown = _common.rss_mib(False) - before
    trimmed = _common.rss_mib(True) - before
    info = keras_posenc.cache_info()
    keras_posenc.clear_cache()  # what a user can do (nothing to keras-hub's)
    return {
        "untrimmed_MiB": grown,
        "trimmed_MiB": trimmed,
        "cache_MiB": info.nbytes / 2**20,
        "cleared_MiB": _common.rss_mib(False) - before,
        "cleared_trimmed_MiB": _common.rss_mib(True) - before,
    }


def _run_child(variant, configs, shape):
    return _common.child_json("config_memory", [variant, configs, shape], "torch")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=250)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shape", choices=SHAPES, default="simple")
    parser.add_argument("--json", help="results file (default: results/latest/)")
    parser.add_argument(
        "--record", action="store_true", help="write the committed results file"
    )
    args = parser.parse_args(argv)
    info = _common.run_info("torch")
    results = {variant: [] for variant in VARIANTS}
    for _ in range(args.runs):  # interleaved: load drifts hit both alike
        for variant in VARIANTS:
            results[variant].append(_run_child(variant, args.configs, args.shape))
    medians = {
        variant: {key: statistics.median(run[key] for run in runs) for key in _KEYS}
        for variant, runs in results.items()
    }
    print(_common.machine_line(info))
    print(
        f"{args.configs} RoPE configurations ({args.shape}), {args.runs} processes "
        "each (median)"
    )
    print(
        f"{'layer':<10} {'untrimmed':>10} {'trimmed':>9} {'cache':>7} "
        f"{'cleared':>8}  runs (untrimmed)"
    )
    for variant in VARIANTS:
        m, runs = medians[variant], results[variant]
        each = ", ".join(f"{run['untrimmed_MiB']:.1f}" for run in runs)
        print(
            f"{variant:<10} {m['untrimmed_MiB']:>9.1f}M {m['trimmed_MiB']:>8.1f}M "
            f"{m['cache_MiB']:>6.1f}M {m['cleared_MiB']:>7.1f}M  {each}"
        )
    ratio = medians["ours"]["untrimmed_MiB"] / max(
        medians["keras_hub"]["untrimmed_MiB"], 1e-9
    )
    print(f"untrimmed ours / keras-hub: {ratio:.2f}x (goal <= {GOAL}x)")
    beyond = medians["ours"]["untrimmed_MiB"] - medians["ours"]["cache_MiB"]
    print(f"ours untrimmed minus what the budget keeps: {beyond:.1f}M")
    print("cleared: untrimmed growth after keras_posenc.clear_cache()")
    section = {
        "run": info,
        "configs": args.configs,
        "shape": args.shape,
        "medians": medians,
        "runs": results,
        "ratio_untrimmed": ratio,
        "goal": GOAL,
    }
    suffix = "" if args.shape == "simple" else f"_{args.shape}"
    path = _common.write_results(
        "config_memory", {"torch": section}, args.json, args.record, suffix
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
