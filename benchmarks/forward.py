"""Forward-pass benchmark: our layer against the floor and its peers, side by side.

    python -m benchmarks.forward [--reps 15] [--smoke] [--no-memory] [--json PATH]

The floor is the least any implementation can do: `x + table[s:s + L]`
with a precomputed float32 constant (read the inputs once, write the output
once). Every configuration runs in the same process, in interleaved
repetitions after a warm-up, in eager mode, in a `tf.function` and with
`jit_compile=True`; the table shows medians, min-max, and the ratio to the
floor measured in the same mode. Peak memory is measured per configuration
in its own subprocess: the growth of peak RSS during one traced `tf.function`
forward (the output itself is the least it can be).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_posenc  # noqa: E402
from benchmarks._common import machine, write_json  # noqa: E402
from benchmarks.precision import reference  # noqa: E402

SHAPES = [  # (batch, length, depth, start_index)
    (1, 128, 512, 0),
    (32, 512, 512, 0),
    (8, 4096, 1024, 0),
    (32, 1, 1024, 4095),
]
SMOKE_SHAPES = [(2, 16, 8, 0), (2, 1, 8, 7)]
EXECUTION = ("eager", "function", "jit")


def tutorial_table(length, depth):
    """The TF tutorial's `positional_encoding` (concatenated layout), verbatim maths."""
    depth = depth / 2
    positions = np.arange(length)[:, np.newaxis]
    depths = np.arange(depth)[np.newaxis, :] / depth
    angle_rads = positions * (1 / (10000**depths))
    table = np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)
    return tf.cast(table, tf.float32)


def configurations(batch, length, depth, start):
    """name -> callable(x) returning `x + PE` for positions `start + [0, L)`."""
    rows = start + length
    table = tf.constant(keras_posenc.sinusoidal_table(rows, depth))
    ours_compute = keras_posenc.SinusoidalPositionEncoding()
    ours_lookup = keras_posenc.SinusoidalPositionEncoding(mode="lookup", max_length=rows)
    ours_lookup.build((None, None, depth))
    tiled = tf.tile(tf.range(start, rows)[None, :], [batch, 1])
    tutorial = tutorial_table(rows, depth)
    configs = {
        "floor: x + table[s:s+L]": lambda x: x + table[start:rows],
        "ours, compute": lambda x: ours_compute(x, start_index=start),
        "ours, lookup": lambda x: ours_lookup(x, start_index=start),
        "classic tiled embedding_lookup": lambda x: x + tf.nn.embedding_lookup(table, tiled),
        "TF tutorial table": lambda x: x + tutorial[tf.newaxis, start:rows, :],
    }
    try:
        import keras_hub

        hub = keras_hub.layers.SinePositionEncoding()
        configs["keras-hub SinePositionEncoding + add"] = lambda x: x + hub(x, start_index=start)
    except ImportError:
        pass
    return configs


def _inputs(batch, length, depth):
    return tf.random.stateless_normal((batch, length, depth), seed=(1, 2))


def time_shape(shape, reps):
    batch, length, depth, start = shape
    x = _inputs(batch, length, depth)
    runners = {}
    for name, fn in configurations(*shape).items():
        runners[(name, "eager")] = fn
        runners[(name, "function")] = tf.function(fn)
        runners[(name, "jit")] = tf.function(fn, jit_compile=True)
    for fn in runners.values():  # warm-up: traces, compiles, caches
        fn(x)
        fn(x)
    times = {key: [] for key in runners}
    for _ in range(reps):
        for key, fn in runners.items():
            t0 = time.perf_counter()
            y = fn(x)
            y.shape  # noqa: B018  CPU execution is synchronous; keeps `y` alive
            times[key].append(time.perf_counter() - t0)
            del y
    return times


def copy_bandwidth(megabytes=512):
    """Best-of-5 numpy copy, bytes read + written per second."""
    a = np.ones(megabytes * 2**20 // 4, np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(5))
    return 2 * a.nbytes / best / 1e9


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def table_build(length=65536, depth=1024, reps=5):
    """`sinusoidal_table` vs the float64 numpy formula, median seconds."""
    keras_posenc.sinusoidal_table(length, depth)  # trace once

    def numpy_formula():
        return reference(np.arange(length), depth).astype(np.float32)

    ours = statistics.median(_timed(lambda: keras_posenc.sinusoidal_table(length, depth)) for _ in range(reps))
    ref = statistics.median(_timed(numpy_formula) for _ in range(max(1, reps // 2)))
    return {"shape": [length, depth], "ours_s": ours, "numpy_float64_s": ref, "speedup": ref / ours}


# -- memory: one subprocess per configuration ----------------------------------


def _rss_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def _child(args):
    """Traces one configuration, then prints the forward's peak RSS growth in KiB.

    The high-water mark is reset after tracing (/proc/self/clear_refs), so
    the number is what one forward call allocates: inputs and tables exist
    before, the output and any intermediate are counted.
    """
    batch, length, depth, start = (int(v) for v in args.child[1:5])
    name = args.child[0]
    x = _inputs(batch, length, depth)
    fn = tf.function(configurations(batch, length, depth, start)[name])
    fn.get_concrete_function(x)
    before = _rss_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    y = fn(x)
    print(_rss_kib("VmHWM:") - before)
    del y


def peak_memory(shape, names):
    """Peak RSS growth of one `tf.function` forward, MiB, per configuration."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # oneDNN's pooled CPU allocator would hand out memory freed earlier, and
    # glibc could reuse freed heap: with both off, every buffer shows in RSS.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", TF_ENABLE_ONEDNN_OPTS="0",
               TF_CPP_MIN_LOG_LEVEL="3")

    def run(name):
        command = [sys.executable, "-m", "benchmarks.forward", "--child", name, *map(str, shape)]
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=root, env=env)
        return int(out.stdout.strip().splitlines()[-1]) / 1024

    return {name: run(name) for name in names}


# -- report ----------------------------------------------------------------------


def summarise(shape, times, memory, bandwidth):
    batch, length, depth, _ = shape
    moved = (2 * batch * length * depth + length * depth) * 4
    names = list(dict.fromkeys(name for name, _ in times))
    floor = next(n for n in names if n.startswith("floor"))
    rows = []
    for name in names:
        row = {"config": name}
        for execution in EXECUTION:
            t = times[(name, execution)]
            med = statistics.median(t)
            row[execution] = {
                "median_ms": med * 1e3, "min_ms": min(t) * 1e3, "max_ms": max(t) * 1e3,
                "ratio_to_floor": med / statistics.median(times[(floor, execution)]),
            }
        row["function_GBps"] = moved / row["function"]["median_ms"] * 1e3 / 1e9
        row["function_fraction_of_copy_bandwidth"] = row["function_GBps"] / bandwidth
        if memory:
            row["function_peak_MiB"] = memory.get(name)
        rows.append(row)
    return rows


def markdown(shape, rows):
    b, l, d, s = shape
    lines = [f"\n**(B, L, D) = ({b}, {l}, {d}), start_index = {s}**\n",
             "| configuration | eager ms (x floor) | tf.function ms (x floor) | jit ms (x floor) "
             "| tf.function GB/s | tf.function peak MiB (output alone: %.0f) |" % (b * l * d * 4 / 2**20),
             "|---|---|---|---|---|---|"]
    for row in rows:
        cells = [
            f"{row[e]['median_ms']:.3f} ({row[e]['ratio_to_floor']:.2f}x) "
            f"[{row[e]['min_ms']:.3f}-{row[e]['max_ms']:.3f}]"
            for e in EXECUTION
        ]
        mem = row.get("function_peak_MiB")
        mem = "-" if mem is None else f"{mem:.0f}"
        lines.append(f"| {row['config']} | " + " | ".join(cells) + f" | {row['function_GBps']:.1f} | {mem} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one repetition")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--json", help="where to write the results (default benchmarks/results/forward.json)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    reps = 1 if args.smoke else args.reps
    bandwidth = copy_bandwidth(16 if args.smoke else 512)
    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, TF {info['tensorflow']}; "
          f"numpy copy bandwidth {bandwidth:.1f} GB/s; {reps} interleaved repetitions")
    results = {"machine": info, "copy_GBps": bandwidth, "reps": reps, "shapes": []}
    for shape in shapes:
        times = time_shape(shape, reps)
        names = list(dict.fromkeys(name for name, _ in times))
        big = shape[0] * shape[1] * shape[2] >= 2**22
        measure_memory = not args.no_memory and (big or args.smoke)
        memory = peak_memory(shape, names if not args.smoke else names[:2]) if measure_memory else None
        rows = summarise(shape, times, memory, bandwidth)
        print(markdown(shape, rows), flush=True)
        results["shapes"].append({"shape": list(shape), "rows": rows})
    build = table_build(*((4096, 64) if args.smoke else (65536, 1024)), reps=1 if args.smoke else 5)
    results["table_build"] = build
    print(f"\nsinusoidal_table{tuple(build['shape'])}: {build['ours_s'] * 1e3:.1f} ms; "
          f"float64 numpy formula: {build['numpy_float64_s'] * 1e3:.1f} ms ({build['speedup']:.1f}x faster)")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        print("written:", args.json)
    else:
        print("written:", write_json("forward", results))


if __name__ == "__main__":
    main()
