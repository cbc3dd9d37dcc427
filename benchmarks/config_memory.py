"""Process memory per RoPE configuration used once (torch, issue 47 item 9).

    python -m benchmarks.config_memory [--configs 250] [--runs 3]

Each run is a fresh torch process: `--configs` RoPE layers, each with its own
base (`max_wavelength` 10000 + i, head dim 64), take a prompt of 16
positions and one decoding step, then are dropped. The process's resident
memory is read before and after, as it is (what a user sees) and after
`malloc_trim(0)` (what glibc could give back). keras-hub's `RotaryEmbedding`
does the same in the same run, interleaved, as the baseline. Figures are
medians over `--runs` processes per layer; the table prints ours / keras-hub.

The goal (issue 47): untrimmed growth at most 2x keras-hub's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks import _common

VARIANTS = ("ours", "keras_hub")
GOAL = 2.0


def _rss_mib(trim):
    import ctypes
    import gc

    gc.collect()
    if trim:
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(variant, configs):
    """Runs in a fresh torch process: RSS growth over `configs` layers, MiB."""
    import numpy as np

    import keras_posenc

    if variant == "keras_hub":
        import keras_hub

        make = keras_hub.layers.RotaryEmbedding
    else:
        make = keras_posenc.RotaryEmbedding
    prompt = np.ones((1, 16, 2, 64), "float32")
    step = np.ones((1, 1, 2, 64), "float32")
    make(max_wavelength=9999.0)(prompt)  # warm: the backend's own first use
    before = _rss_mib(False)
    for i in range(configs):
        layer = make(max_wavelength=10000.0 + i)
        layer(prompt)
        layer(step, start_index=16)
        del layer
    grown = _rss_mib(False) - before
    trimmed = _rss_mib(True) - before
    info = keras_posenc.cache_info()
    return {
        "untrimmed_MiB": grown,
        "trimmed_MiB": trimmed,
        "cache_MiB": info.nbytes / 2**20,
    }


def _run_child(variant, configs):
    code = (
        "import json; from benchmarks.config_memory import child; "
        f"print(json.dumps(child({variant!r}, {configs})))"
    )
    env = dict(os.environ, KERAS_BACKEND="torch", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=_common.ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=250)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    info = _common.run_info("torch")
    results = {variant: [] for variant in VARIANTS}
    for _ in range(args.runs):  # interleaved: load drifts hit both alike
        for variant in VARIANTS:
            results[variant].append(_run_child(variant, args.configs))
    medians = {
        variant: {
            key: statistics.median(run[key] for run in runs)
            for key in ("untrimmed_MiB", "trimmed_MiB", "cache_MiB")
        }
        for variant, runs in results.items()
    }
    print(_common.machine_line(info))
    print(f"{args.configs} RoPE configurations, {args.runs} processes each (median)")
    print(
        f"{'layer':<10} {'untrimmed':>10} {'trimmed':>9} {'cache':>7}  runs (untrimmed)"
    )
    for variant in VARIANTS:
        m, runs = medians[variant], results[variant]
        each = ", ".join(f"{run['untrimmed_MiB']:.0f}" for run in runs)
        print(
            f"{variant:<10} {m['untrimmed_MiB']:>9.1f}M {m['trimmed_MiB']:>8.1f}M "
            f"{m['cache_MiB']:>6.1f}M  {each}"
        )
    ratio = medians["ours"]["untrimmed_MiB"] / max(
        medians["keras_hub"]["untrimmed_MiB"], 1e-9
    )
    print(f"untrimmed ours / keras-hub: {ratio:.2f}x (goal <= {GOAL}x)")


if __name__ == "__main__":
    main()
