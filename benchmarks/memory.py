"""Process memory per new sequence length under Keras's `predict` (JAX).

    python -m benchmarks.memory [--depth 2048] [--lengths 500,1000,...]
        [--smoke] [--json PATH] [--record]

`predict` compiles one program per input shape (the start is static there:
0). Rows kept from inside such a trace would be constants of each program,
one copy per length (issue 29: 178 MiB per new length at L=4000, D=2000,
against 24 MiB for keras-hub's computed encoding). Each variant runs in a
fresh process: a model `x -> layer(x)` (keras-hub: `x + SinePositionEncoding()(x)`)
predicts one batch at each length in turn, and the process's resident
memory is read after each. The table shows the growth per new length
(median) and its ratio to keras-hub's; the goal is at most 1.5x.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks import _common

NAME = "memory"
VARIANTS = ("ours_compute", "ours_lookup", "keras_hub")
LENGTHS = (500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500)
GOAL = 1.5


def _rss_mib():
    """Resident memory, MiB, after glibc gives back the freed heap it holds
    (freed output buffers would otherwise count, differently each run)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: the reading keeps what the heap holds
        pass
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


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
    before = _rss_mib()
    after = []
    for length in lengths:
        model.predict(np.zeros((1, length, depth), "float32"), verbose=0)
        after.append(_rss_mib())
    return {"before_MiB": before, "after_MiB": after}


def _run_child(variant, depth, lengths):
    code = (
        "import json, sys; from benchmarks.memory import child; "
        f"print(json.dumps(child({variant!r}, {depth}, {list(lengths)!r})))"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=_common.ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(result):
    steps = [result["after_MiB"][0] - result["before_MiB"]]
    after = result["after_MiB"]
    steps += [b - a for a, b in zip(after, after[1:], strict=False)]
    return {
        "per_new_length_MiB": statistics.median(steps),
        "total_MiB": result["after_MiB"][-1] - result["before_MiB"],
        **result,
    }


def markdown(section):
    variants = section["variants"]
    hub = variants.get("keras_hub", {}).get("per_new_length_MiB")
    rows = []
    for name, result in variants.items():
        per = result["per_new_length_MiB"]
        ratio = f"{per / hub:.2f}x" if hub else "n/a"
        rows.append([name, f"{per:.1f}", f"{result['total_MiB']:.0f}", ratio])
    header = ["layer", "MiB per new length (median)", "MiB in all", "x keras-hub"]
    return _common.markdown_table(header, rows)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=2048)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--smoke", action="store_true", help="depth 64, 3 lengths")
    parser.add_argument("--json")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    depth, lengths = args.depth, [int(v) for v in args.lengths.split(",")]
    if args.smoke:
        depth, lengths = 64, [100, 200, 300]
    info = _common.run_info("jax")
    print(_common.machine_line(info))
    variants = {v: summary(_run_child(v, depth, lengths)) for v in VARIANTS}
    section = {"run": info, "depth": depth, "lengths": lengths, "variants": variants}
    print(markdown(section))
    ours = variants["ours_compute"]["per_new_length_MiB"]
    hub = variants["keras_hub"]["per_new_length_MiB"]
    verdict = "met" if ours <= GOAL * max(hub, 1e-9) else "NOT met"
    print(
        f"ours (compute) per new length: {ours / hub:.2f}x keras-hub "
        f"(goal <= {GOAL}x): {verdict}"
    )
    return _common.write_section(NAME, "jax", section, args)


if __name__ == "__main__":
    main()
