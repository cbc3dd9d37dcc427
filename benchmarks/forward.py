"""Forward-pass benchmark: our layer against the floor and its peers, per backend.

    python -m benchmarks.forward [--backend tensorflow|jax|torch | --all-backends]
        [--reps 15] [--smoke] [--shape B,L,D,S ...] [--no-memory]
        [--torch-threads N] [--json PATH]

The floor is the least any implementation can do: `x + table[s:s + L]`
with a precomputed float32 constant (read the inputs once, write the output
once); the same in a plain Keras layer adds Keras's call cost, the floor
for any layer called eagerly. Every configuration runs in the same
process, in interleaved repetitions after a warm-up, in every execution
mode of the backend (TensorFlow: eager, `tf.function`,
`tf.function(jit_compile=True)`; JAX: eager, `jax.jit`; torch: eager);
the table shows medians, min-max, and the ratio to the floor measured in
the same mode. Peak memory (TensorFlow
only) is measured per configuration in its own subprocess: the growth of
peak RSS during one traced `tf.function` forward. The backend is fixed per
process: `--all-backends` runs one subprocess per backend and merges the
tables.
"""

import argparse
import functools
import os
import re
import subprocess
import sys
import time

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402
from benchmarks._floors import PlainAdd  # noqa: E402
from keras_posenc._exact import reference as _reference  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "forward"

SHAPES = (  # (batch, length, depth, start_index)
    (1, 128, 512, 0),
    (32, 512, 512, 0),
    (8, 4096, 1024, 0),
    (32, 1, 1024, 4095),
)
SMOKE_SHAPES = ((2, 16, 8, 0), (2, 1, 8, 7))

# Configurations: results and tests key on these; LABELS are for people.
FLOOR = "floor"
PLAIN_LAYER = "plain_layer"
OURS_COMPUTE = "ours_compute"
OURS_LOOKUP = "ours_lookup"
TILED_GATHER = "tiled_gather"
TF_TUTORIAL = "tf_tutorial"
KERAS_HUB = "keras_hub"
LABELS = {
    FLOOR: "floor: x + table[s:s+L]",
    PLAIN_LAYER: "plain Keras layer: x + table[s:s+L]",
    OURS_COMPUTE: "ours, compute",
    OURS_LOOKUP: "ours, lookup",
    TILED_GATHER: "classic batch-tiled gather",
    TF_TUTORIAL: "TF tutorial table",
    KERAS_HUB: "keras-hub SinePositionEncoding + add",
}

# Execution modes per backend, and the one a model normally runs in (its
# GB/s and, on TensorFlow, its peak memory are reported).
EAGER, FUNCTION, JIT = "eager", "function", "jit"
MODES = {
    "tensorflow": (EAGER, FUNCTION, JIT),
    "jax": (EAGER, JIT),
    "torch": (EAGER,),
}
MAIN_MODE = {"tensorflow": FUNCTION, "jax": JIT, "torch": EAGER}
MODE_LABELS = {
    "tensorflow": {EAGER: "eager", FUNCTION: "tf.function", JIT: "XLA (jit_compile)"},
    "jax": {EAGER: "eager", JIT: "jax.jit"},
    "torch": {EAGER: "eager"},
}


# -- the configurations --------------------------------------------------------


def tutorial_table(length, depth):
    """The TF tutorial's `positional_encoding` (concatenated layout), its maths."""
    half = depth / 2
    positions = np.arange(length)[:, np.newaxis]
    depths = np.arange(half)[np.newaxis, :] / half
    angle_rads = positions * (1 / (10000**depths))
    table = np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)
    return ops.convert_to_tensor(table.astype(np.float32))


def _tiled_gather(table, positions):
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.nn.embedding_lookup(table, positions)
    return ops.take(table, positions, axis=0)


def configurations(batch, length, depth, start, keys=None):
    """`{key: fn(x)}`, each returning `x + PE` for positions `start + [0, L)`.

    Args:
        batch, length, depth, start: the shape and first position.
        keys: the configurations wanted (default: every one this backend
            and the installed packages allow).
    """
    rows = start + length
    table = keras_posenc.sinusoidal_table(rows, depth)
    builders = {
        FLOOR: lambda: lambda x: x + table[start:rows],
        PLAIN_LAYER: lambda: functools.partial(PlainAdd(table), start_index=start),
        OURS_COMPUTE: lambda: _ours(start, depth),
        OURS_LOOKUP: lambda: _ours(start, depth, mode="lookup", max_length=rows),
        TILED_GATHER: lambda: _classic(table, batch, start, rows),
    }
    if BACKEND == "tensorflow":
        tutorial = tutorial_table(rows, depth)
        builders[TF_TUTORIAL] = lambda: lambda x: x + tutorial[None, start:rows, :]
    if _keras_hub() is not None:
        builders[KERAS_HUB] = lambda: _hub(start)
    keys = list(builders) if keys is None else keys
    return {key: builders[key]() for key in keys}


def _ours(start, depth, **kwargs):
    layer = keras_posenc.SinusoidalPositionEncoding(**kwargs)
    layer.build((None, None, depth))
    return lambda x: layer(x, start_index=start)


def _classic(table, batch, start, rows):
    tiled = ops.tile(ops.arange(start, rows, dtype="int32")[None, :], (batch, 1))
    return lambda x: x + _tiled_gather(table, tiled)


@functools.cache
def _keras_hub():
    """keras-hub, a peer (not a dependency of ours), or `None` when absent."""
    try:
        import keras_hub
    except ImportError:
        return None
    return keras_hub


def _hub(start):
    layer = _keras_hub().layers.SinePositionEncoding()
    return lambda x: x + layer(x, start_index=start)


def compiled(fn, mode):
    """`fn` in one of the backend's execution modes."""
    if mode == EAGER:
        return fn
    if BACKEND == "tensorflow":
        import tensorflow as tf

        # One tf.function per configuration and shape is the point here,
        # not an accidental retrace: silence TensorFlow's warning about it.
        tf.get_logger().setLevel("ERROR")
        return tf.function(fn, jit_compile=mode == JIT)
    if BACKEND == "jax" and mode == JIT:
        import jax

        return jax.jit(fn)
    raise ValueError(f"No mode {mode!r} on {BACKEND}")


def output_fusion_ops(fn, x):
    """HLO instructions in the kernel XLA writes the output with (JIT mode).

    The floor's kernel holds a handful (read `x`, read the row, add); a
    large count means XLA fused the whole encoding into the output loop
    and recomputes it for every element of `[B, L, D]`, not once per row.
    `None` where the output is not written by a fusion.
    """
    if BACKEND == "jax":
        import jax

        text = jax.jit(fn).lower(x).compile().as_text()
    else:
        import tensorflow as tf

        compiled_fn = tf.function(fn, jit_compile=True)
        text = compiled_fn.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    entry = text[text.index("\nENTRY") :]
    root = re.search(r"ROOT \S+ = [^\n]*? fusion\([^\n]*?calls=%?([\w.\-]+)", entry)
    if root is None:
        return None
    name = re.escape(root.group(1))
    body = re.search(rf"^%?{name} \(.*?\n}}", text, re.S | re.M)
    return len(re.findall(r"^\s+(?:ROOT )?%\S+ = ", body.group(0), re.M))


def inputs(batch, length, depth):
    x = np.random.default_rng(12).standard_normal((batch, length, depth))
    return ops.convert_to_tensor(x.astype(np.float32))


# -- timing ----------------------------------------------------------------------


def time_shape(shape, reps, keys=None):
    """`{(config, mode): [seconds]}` for one shape, every mode interleaved."""
    x = inputs(*shape[:3])
    runners = {}
    for key, fn in configurations(*shape, keys=keys).items():
        for mode in MODES[BACKEND]:
            runners[(key, mode)] = functools.partial(compiled(fn, mode), x)
    return _common.interleaved_times(runners, reps)


def fusion_sizes(shape, keys):
    """`{config: output_fusion_ops}` for one shape, on backends with XLA."""
    if JIT not in MODES[BACKEND]:
        return {}
    x = inputs(*shape[:3])
    configs = configurations(*shape, keys=keys)
    return {key: output_fusion_ops(fn, x) for key, fn in configs.items()}


def table_build(length, depth, reps):
    """`sinusoidal_table` vs the float64 numpy formula, median seconds."""
    _common.block(keras_posenc.sinusoidal_table(length, depth))  # trace once
    positions = np.arange(length)
    ours = _common.interleaved_times(
        {"ours": lambda: keras_posenc.sinusoidal_table(length, depth)}, reps, warmup=0
    )["ours"]["wall"]
    numpy_s = []
    for _ in range(max(1, reps // 2)):
        t0 = time.perf_counter()
        _reference.sinusoidal_float64(positions, depth).astype(np.float32)
        numpy_s.append(time.perf_counter() - t0)
    ours_s, numpy_s = float(np.median(ours)), float(np.median(numpy_s))
    return {
        "shape": [length, depth],
        "ours_s": ours_s,
        "numpy_float64_s": numpy_s,
        "speedup": numpy_s / ours_s,
    }


# -- memory (TensorFlow only): one subprocess per configuration -------------------


def _rss_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def _child(name, batch, length, depth, start):
    """Traces one configuration, then prints the forward's peak RSS growth in KiB.

    The high-water mark is reset after tracing (/proc/self/clear_refs), so
    the number is what one forward call allocates: inputs and tables exist
    before, the output and any intermediate are counted.
    """
    import tensorflow as tf

    x = inputs(batch, length, depth)
    fn = tf.function(configurations(batch, length, depth, start, keys=[name])[name])
    fn.get_concrete_function(x)
    before = _rss_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    y = fn(x)
    print(_rss_kib("VmHWM:") - before)
    del y


def peak_memory(shape, keys):
    """Peak RSS growth of one `tf.function` forward, MiB, per configuration."""
    # oneDNN's pooled CPU allocator would hand out memory freed earlier, and
    # glibc could reuse freed heap: with both off, every buffer shows in RSS.
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        MALLOC_MMAP_THRESHOLD_="65536",
        TF_ENABLE_ONEDNN_OPTS="0",
        TF_CPP_MIN_LOG_LEVEL="3",
    )

    def run(key):
        command = [sys.executable, "-m", "benchmarks.forward", "--backend"]
        command += ["tensorflow", "--child", key, *map(str, shape)]
        out = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=True,
            cwd=_common.ROOT,
            env=env,
        )
        return int(out.stdout.strip().splitlines()[-1]) / 1024

    return {key: run(key) for key in keys}


# -- reporting ---------------------------------------------------------------------


def summarise(shape, times, memory=None, fusion=None):
    """Rows `{config, <mode>: time_summary, GBps[, peak_MiB, fusion_ops]}`.

    Every ratio is to the floor in the same mode (`time_summary`).
    """
    batch, length, depth, _ = shape
    moved = (2 * batch * length * depth + length * depth) * 4
    keys = list(dict.fromkeys(key for key, _ in times))
    modes = list(dict.fromkeys(mode for _, mode in times))
    rows = []
    for key in keys:
        row = {"config": key}
        for mode in modes:
            row[mode] = _common.time_summary(times[(key, mode)], times[(FLOOR, mode)])
        row["GBps"] = moved / row[MAIN_MODE[BACKEND]]["median_ms"] / 1e6
        if memory and key in memory:
            row["peak_MiB"] = memory[key]
        if fusion and key in fusion:
            row["fusion_ops"] = fusion[key]
        rows.append(row)
    return rows


def shape_title(shape):
    b, length, d, s = shape
    return f"(B, L, D) = ({b}, {length}, {d}), start_index = {s}"


def markdown(backend, shape, rows):
    """One shape's table: ms (x floor) [min-max] per mode, GB/s, memory."""
    modes = [m for m in MODES[backend] if m in rows[0]]
    labels = MODE_LABELS[backend]
    header = ["configuration"] + [f"{labels[m]} ms (x floor)" for m in modes]
    main = MAIN_MODE[backend]
    header += [f"{labels[main]} CPU time (x floor)", f"{labels[main]} GB/s"]
    with_fusion = any("fusion_ops" in row for row in rows)
    if with_fusion:
        header.append(f"{labels[JIT]} output-kernel HLO ops")
    with_memory = any("peak_MiB" in row for row in rows)
    if with_memory:
        out_mib = shape[0] * shape[1] * shape[2] * 4 / 2**20
        header.append(f"peak MiB (output alone: {out_mib:.0f})")
    cells = []
    for row in rows:
        line = [LABELS[row["config"]]]
        line += [_common.fmt_ms(row[m]) for m in modes]
        cpu = row[main]["cpu_ratio"]
        line.append("-" if cpu is None else f"{row[main]['cpu_ms']:.3f} ({cpu:.2f}x)")
        line.append(f"{row['GBps']:.1f}")
        if with_fusion:
            line.append(str(row.get("fusion_ops", "-")))
        if with_memory:
            mib = row.get("peak_MiB")
            line.append("-" if mib is None else f"{mib:.0f}")
        cells.append(line)
    return f"\n**{shape_title(shape)}**\n\n" + _common.markdown_table(header, cells)


def merged_markdown(sections):
    """Ratio to the floor, every backend and mode side by side, per shape."""
    columns = [(b, m) for b in sections for m in sections[b]["modes"]]
    header = ["configuration"] + [f"{b} {m}" for b, m in columns]
    shapes = {}
    for backend, section in sections.items():
        for entry in section["shapes"]:
            for row in entry["rows"]:
                table = shapes.setdefault(tuple(entry["shape"]), {})
                table.setdefault(row["config"], {})[backend] = row
    out = []
    for shape, table in shapes.items():
        cells = []
        for key, by_backend in table.items():
            line = [LABELS[key]]
            for backend, mode in columns:
                row = by_backend.get(backend)
                line.append("-" if row is None else f"{row[mode]['ratio']:.2f}x")
            cells.append(line)
        out.append(f"\n**{shape_title(shape)}**: median / floor median, same mode\n")
        out.append(_common.markdown_table(header, cells))
    return "\n".join(out)


# -- the run -----------------------------------------------------------------------


def parse_shape(text):
    values = tuple(int(v) for v in text.split(","))
    if len(values) != 4 or min(values[:3]) < 1 or values[3] < 0:
        raise argparse.ArgumentTypeError(
            f"expected B,L,D,S (positive B, L, D), got {text!r}"
        )
    return values


def run(shapes, reps, memory, smoke):
    """One backend's section: machine, load, tables per shape, table build."""
    info = _common.run_info(BACKEND)
    bandwidth = _common.copy_bandwidth(16 if smoke else 512)
    print(
        f"{BACKEND}: {_common.machine_line(info)}; numpy copy {bandwidth:.1f} GB/s; "
        f"{reps} interleaved repetitions",
        flush=True,
    )
    section = {**info, "copy_GBps": bandwidth, "reps": reps}
    section["modes"] = list(MODES[BACKEND])
    section["memory"] = (
        "peak RSS growth of one tf.function forward, own subprocess"
        if memory and BACKEND == "tensorflow"
        else None
    )
    section["shapes"] = []
    for shape in shapes:
        times = time_shape(shape, reps)
        keys = list(dict.fromkeys(key for key, _ in times))
        big = shape[0] * shape[1] * shape[2] >= 2**22
        peaks = peak_memory(shape, keys) if section["memory"] and big else None
        rows = summarise(shape, times, peaks, fusion_sizes(shape, keys))
        print(markdown(BACKEND, shape, rows), flush=True)
        entry = {"shape": list(shape), "rows": rows, "load": _common.load_average()}
        section["shapes"].append(entry)
    length, depth = (4096, 64) if smoke else (65536, 1024)
    build = table_build(length, depth, reps=1 if smoke else 5)
    section["table_build"] = build
    print(
        f"\nsinusoidal_table({length}, {depth}): {build['ours_s'] * 1e3:.1f} ms; "
        f"float64 numpy formula: {build['numpy_float64_s'] * 1e3:.1f} ms "
        f"({build['speedup']:.1f}x faster)"
    )
    section["load_end"] = _common.load_average()
    print(f"load average at the end: {section['load_end']}", flush=True)
    return section


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _common.script_parser(
        __doc__, NAME, 15, "tiny shapes, one repetition, no memory subprocesses"
    )
    parser.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        help="B,L,D,S instead of the default shapes (repeatable)",
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="skip the memory subprocesses"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        help="torch's intra-op threads (default: one per core); ignored elsewhere",
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child[0], *(int(v) for v in args.child[1:]))
    return _common.run_script(argv, args, NAME, BACKEND, measure, merged_markdown)


def measure(args):
    """This backend's section at the shapes and repetitions `args` ask for."""
    _common.set_torch_threads(BACKEND, args.torch_threads)
    shapes = args.shape or (SMOKE_SHAPES if args.smoke else SHAPES)
    memory = not (args.no_memory or args.smoke)
    return run(shapes, 1 if args.smoke else args.reps, memory, args.smoke)


if __name__ == "__main__":
    main()
