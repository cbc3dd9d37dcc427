"""What every benchmark script shares: backend choice, timing, machine, results.

A script picks its Keras backend before Keras is imported
(`select_backend`, `prepare_process`), times zero-argument callables in
interleaved repetitions (`interleaved_times`, `time_summary`, `speed_of`;
a layer in every mode of its backend: `modes_speed`), records what it ran
on (`machine`, `load_average`, `run_info`, `start_run`) and writes one
JSON file per benchmark with one section per backend (`write_results`).
The backend is fixed per process, so `run_backends` runs a script once
per backend, each in its own subprocess, and returns their sections; a
script's `main` is `script_main`, `layer_main` or its own parser ending in
`run_script`, so that each benchmark holds only its cases. `markdown_table`,
`fmt_ms`, `modes_table`, `one_mode_table`, `ratio_table` and `goal_lines`
format the printed tables and lines. Nothing here imports Keras at module
level.
"""

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

BACKENDS = ("tensorflow", "jax", "torch")
# The modes a layer's benchmark times it in, per backend.
LAYER_MODES = {
    "tensorflow": ("tf.function", "tf.function + XLA"),
    "jax": ("jax.jit",),
    "torch": ("eager",),
}
# The mode a model runs in, per backend.
MODEL_MODE = {"tensorflow": "tf.function", "jax": "jax.jit", "torch": "eager"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
# Where a run writes unless asked to `--record` (not committed).
LATEST = os.path.join(RESULTS, "latest")
# Options that choose the backend or the output file: never passed on to a
# per-backend child, which gets its own.
_DRIVER_OPTIONS = {"--backend": 1, "--json": 1, "--all-backends": 0, "--record": 0}


# -- choosing the backend ------------------------------------------------------


def prepare_process(argv):
    """`select_backend` and `pin_one_core`: what a script does at its top,
    under ``if __name__ == "__main__"``, before Keras is imported."""
    select_backend(argv)
    pin_one_core(argv)


def select_backend(argv):
    """Sets `KERAS_BACKEND` from `--backend` in `argv`, before Keras is imported.

    A script calls it at the top, under ``if __name__ == "__main__"``, so
    that ``python -m benchmarks.X --backend jax`` runs in one process.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--backend", choices=BACKENDS)
    known, _ = parser.parse_known_args(argv)
    if known.backend and "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = known.backend


def pin_one_core(argv):
    """With `--one-core` in `argv`, runs this process on one core (Linux).

    A script calls it at the top, before the backend starts, so that the
    backend sizes its thread pools for one core (as torch runs with one
    intra-op thread here: on a busy 2-core machine, a call split across
    both cores waits whenever the other core is taken).
    """
    if "--one-core" in argv and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def add_one_core_argument(parser):
    """`--one-core` (acted on by `pin_one_core`, before the backend starts).

    The parser must not take abbreviations (`allow_abbrev=False`):
    `pin_one_core` looks for the whole option.
    """
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="run on one core (only as `python -m benchmarks.NAME`: pinned "
        "before the backend starts); results go to NAME_one_core.json",
    )


def check_one_core(parser, args):
    """Refuses `--one-core` when this process is not on one core (it was not
    pinned before the backend started, or the OS cannot pin)."""
    if args.one_core and usable_cores() != 1:
        parser.error(
            f"--one-core: this process runs on {usable_cores()} cores; run it "
            "as `python -m benchmarks.NAME --one-core` on Linux"
        )


def one_core_suffix(args):
    """The results file's suffix: `"_one_core"` for a one-core run."""
    return "_one_core" if args.one_core else ""


def usable_cores():
    """The cores this process may run on (its affinity where the OS says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def script_parser(doc, name, reps, smoke_help):
    """`argument_parser` with `--reps` (default `reps`) and `--smoke`."""
    parser = argument_parser(doc, name)
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    return parser


def argument_parser(doc, name):
    """A benchmark's parser: its docstring's first line, no abbreviated
    options (one could stand for a driver option), and the backend options."""
    parser = argparse.ArgumentParser(
        description=doc.splitlines()[0], allow_abbrev=False
    )
    add_backend_arguments(parser, name)
    return parser


def add_backend_arguments(parser, name):
    """`--backend`, `--all-backends` and `--json` for the benchmark `name`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--backend",
        choices=BACKENDS,
        help="Keras backend (default: the configured one)",
    )
    group.add_argument(
        "--all-backends",
        action="store_true",
        help="every backend, each in its own subprocess; tables merged",
    )
    parser.add_argument(
        "--json",
        help=f"results file (default: benchmarks/results/latest/{name}.json)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"write the committed benchmarks/results/{name}.json",
    )


def child_argv(argv):
    """`argv` without the options that pick the backend or the output file."""
    out, skip = [], 0
    for token in argv:
        if skip:
            skip -= 1
            continue
        option = token.split("=", 1)[0]
        if option in _DRIVER_OPTIONS:
            skip = _DRIVER_OPTIONS[option] if "=" not in token else 0
            continue
        out.append(token)
    return out


def run_requested_backends(
    module,
    argv,
    args,
    current,
    merged_markdown=None,
    backends=BACKENDS,
    suffix="",
    summary=None,
):
    """Runs `--all-backends` (every one of `backends`) or another `--backend`
    in subprocesses, prints `merged_markdown(sections)` (several backends)
    and `summary(sections)`, and writes them (`suffix` as in `write_results`).

    Returns the sections written, or `None` when this process should
    measure its own backend.
    """
    if not (args.all_backends or (args.backend or current) != current):
        return None
    wanted = backends if args.all_backends else [args.backend]
    sections = run_backends(module, argv, wanted)
    if merged_markdown is not None and len(sections) > 1:
        print("\n## Every backend\n\n" + merged_markdown(sections))
    if summary is not None:
        print("\n" + summary(sections))
    written = write_results(module, sections, args.json, args.record, suffix)
    print("\nwritten:", written)
    return sections


def script_main(argv, module, reps, smoke_help, measure, merged_markdown, options=()):
    """`main` of a script with no options but `--reps`, `--smoke` and
    `options` (`(flags, keywords)` pairs for `add_argument`): every backend
    asked for in child processes, or this one's section, `measure(args)`,
    written. `module` gives `__doc__`, `NAME` and `BACKEND`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = script_parser(module.__doc__, module.NAME, reps, smoke_help)
    for flags, keywords in options:
        parser.add_argument(*flags, **keywords)
    args = parser.parse_args(argv)
    return run_script(argv, args, module.NAME, module.BACKEND, measure, merged_markdown)


def run_script(argv, args, name, backend, measure, merged_markdown=None, **options):
    """The end of a script's `main`: the backends asked for in child
    processes (`run_requested_backends`, `options` passed on), or this
    one's section, `measure(args)`, written (`write_section`).

    Returns the sections written.
    """
    sections = run_requested_backends(
        name, argv, args, backend, merged_markdown, **options
    )
    if sections is not None:
        return sections
    section = measure(args)
    return write_section(name, backend, section, args, options.get("suffix", ""))


def write_section(module, backend, section, args, suffix=""):
    """Writes this process's `section` as `--json` / `--record` ask; returns
    `{backend: section}`."""
    written = write_results(module, {backend: section}, args.json, args.record, suffix)
    print("written:", written)
    return {backend: section}


def rss_mib(trim=True):
    """This process's resident memory, MiB, after a garbage collection and,
    with `trim`, after glibc gives back the freed heap it holds (freed
    buffers would otherwise count, differently each run; not glibc: the
    reading keeps what the heap holds)."""
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


def child_json(module, arguments, backend, environment=None):
    """`benchmarks.<module>.child(*arguments)` run in a fresh Python process
    on `backend` (a process's memory measured from its start), returning
    what it printed as JSON on its last line. `environment`: variables to
    set, or to remove where the value is None."""
    code = (
        f"import json; from benchmarks.{module} import child; "
        f"print(json.dumps(child(*{list(arguments)!r})))"
    )
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    for name, value in (environment or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_backends(module, argv, backends=BACKENDS):
    """Runs ``python -m benchmarks.<module>`` once per backend, in subprocesses.

    Each child prints its own tables as it goes and writes its section to a
    temporary file.

    Args:
        module: the script's module name under `benchmarks`, e.g. `"forward"`.
        argv: the parent's arguments; backend and output options are dropped.
        backends: the backends to run, in order.

    Returns:
        `{backend: section}`, the sections the children wrote.
    """
    sections = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            path = os.path.join(folder, f"{backend}.json")
            command = [sys.executable, "-m", f"benchmarks.{module}"]
            command += ["--backend", backend, "--json", path, *child_argv(argv)]
            env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
            print(f"\n## {backend}\n", flush=True)
            subprocess.run(command, cwd=ROOT, env=env, check=True)
            with open(path) as f:
                sections[backend] = json.load(f)["backends"][backend]
    return sections


# -- timing --------------------------------------------------------------------


def block(value):
    """Waits until `value` (or each tensor of a tuple or list of them) is
    computed: JAX (and CUDA torch) return early."""
    if isinstance(value, (tuple, list)):
        for item in value:
            block(item)
    elif hasattr(value, "block_until_ready"):
        value.block_until_ready()
    elif getattr(value, "is_cuda", False):
        import torch

        torch.cuda.synchronize()


def interleaved_times(runners, reps, warmup=2):
    """Wall and CPU seconds per call of every runner, repetitions interleaved.

    Each runner is called `warmup` times first (traces, compiles, caches).
    Then every repetition calls each runner once, in an order rotated by
    one from the previous repetition, so no runner always follows the same
    one; a busy moment on the machine hits every runner alike. CPU time is
    this process's (every thread's): it leaves out the time spent waiting
    for a core on a loaded machine.

    Args:
        runners: `{key: callable()}` returning a backend tensor.
        reps: repetitions.
        warmup: untimed calls per runner before the first repetition.

    Returns:
        `{key: {"wall": [seconds] * reps, "cpu": [seconds] * reps,
        "faults": [minor page faults] * reps}}`.
    """
    for run in runners.values():
        for _ in range(warmup):
            block(run())
    keys = list(runners)
    times = {key: {"wall": [], "cpu": [], "faults": []} for key in keys}
    for rep in range(reps):
        shift = rep % len(keys)
        for key in keys[shift:] + keys[:shift]:
            faults = _minor_faults()
            cpu, wall = time.process_time(), time.perf_counter()
            block(runners[key]())
            times[key]["wall"].append(time.perf_counter() - wall)
            times[key]["cpu"].append(time.process_time() - cpu)
            times[key]["faults"].append(_minor_faults() - faults)
    return times


def compiled(fn, mode):
    """`fn` compiled as `mode` says: `"tf.function"` (`" + XLA"`: with
    `jit_compile`), `"jax.jit"`, or anything else (eager) as it is."""
    if mode.startswith("tf.function"):
        import tensorflow as tf

        return tf.function(fn, autograph=False, jit_compile=mode.endswith("XLA"))
    if mode == "jax.jit":
        import jax

        return jax.jit(fn)
    return fn


def no_grad(backend):
    """torch's `no_grad()` on torch (restored after: the caller may train),
    inference as keras-hub's `generate()` runs; nothing elsewhere."""
    if backend != "torch":
        return contextlib.nullcontext()
    import torch

    return torch.no_grad()


def parse_shape(text):
    """`--shape` values: comma-separated integers."""
    return tuple(int(v) for v in text.split(","))


def layer_main(argv, module, run, shape_help):
    """`main` of a layer's benchmark (`alibi`, `rotary`): its options
    (`--reps`, `--smoke`, `--shape`, `--torch-threads`, one thread by
    default: two threads wait on each other on a busy 2-core machine, and
    `--one-core`), every backend asked for in child processes, or this
    one's section, run, summed up and written.

    Args:
        argv: the command line's arguments, or `None` for `sys.argv[1:]`.
        module: the benchmark's module: its `__doc__`, `NAME`, `BACKEND`,
            `REPS`, `SHAPE`, `SMOKE_SHAPE`, `merged_markdown` and `goals`.
        run: `run(shape, reps, smoke)`, the backend's section.
        shape_help: the help of `--shape`.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = script_parser(
        module.__doc__, module.NAME, module.REPS, "tiny shape, one repetition"
    )
    parser.add_argument("--shape", type=parse_shape, help=shape_help)
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads"
    )
    add_one_core_argument(parser)
    args = parser.parse_args(argv)
    check_one_core(parser, args)

    def measure(args):
        set_torch_threads(module.BACKEND, args.torch_threads)
        shape = args.shape or (module.SMOKE_SHAPE if args.smoke else module.SHAPE)
        section = run(shape, 1 if args.smoke else args.reps, args.smoke)
        print("\n" + module.goals({module.BACKEND: section}))
        return section

    return run_script(
        argv,
        args,
        module.NAME,
        module.BACKEND,
        measure,
        module.merged_markdown,
        suffix=one_core_suffix(args),
        summary=module.goals,
    )


def random_inputs(shape):
    """Standard normal float32 inputs of `shape` (seed 0), a backend tensor."""
    import numpy as np
    from keras import ops

    return ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=shape).astype("float32")
    )


def start_run(backend, steady=None):
    """`run_info` of this run, its `machine_line` printed.

    With `steady` (True or False), `steady_heap` is applied when true and
    whether it applied is recorded as `info["steady_heap"]`.
    """
    info = run_info(backend)
    if steady is not None:
        info["steady_heap"] = steady and steady_heap()
    print(machine_line(info))
    return info


def modes_speed(configurations, backend, reps, floor, *inputs):
    """Times every configuration in every mode of `LAYER_MODES[backend]`,
    interleaved, inference only (`no_grad`): `speed_of` over `(name, mode)`.

    Args:
        configurations: `{name: fn(*inputs)}`.
        backend: the backend running.
        reps: repetitions.
        floor: the configuration every other is divided by.
        *inputs: the arguments of each call.
    """
    runners = {}
    for name, fn in configurations.items():
        for mode in LAYER_MODES[backend]:
            call = compiled(fn, mode)
            runners[(name, mode)] = (lambda f: lambda: f(*inputs))(call)
    with no_grad(backend):  # inference, as keras-hub's generate() runs
        return speed_of(runners, reps, floor)


def one_mode_table(section, labels, column, title=""):
    """One backend's times in its one mode: a row per configuration.

    The header's first cell is `(shape), backend, mode` and `title`;
    `column` heads the times.
    """
    shape = ", ".join(map(str, section["shape"]))
    backend = section["run"]["machine"]["backend"]
    header = [f"({shape}), {backend}, {section['mode']}{title}", column]
    body = [[labels[k], fmt_ms(s)] for k, s in section["speed"].items()]
    return markdown_table(header, body)


def set_torch_threads(backend, threads):
    """torch's intra-op threads, on torch (`threads=None`: torch's default)."""
    if backend == "torch" and threads:
        import torch

        torch.set_num_threads(threads)


def speed_of(runners, reps, floor):
    """Times `runners` interleaved; each one's summary and ratio to the floor.

    Args:
        runners: `{key: callable()}`. A key is a configuration's name, or a
            `(name, mode)` pair when each configuration runs in several
            modes (each is then divided by `(floor, mode)`).
        reps: repetitions (`interleaved_times`).
        floor: the name of the baseline every runner is divided by.

    Returns:
        `{name: time_summary}`, or `{name: {mode: time_summary}}` for pairs,
        in the runners' order.
    """
    times = interleaved_times(runners, reps)
    if not all(isinstance(key, tuple) for key in runners):
        return {key: time_summary(times[key], times[floor]) for key in runners}
    speed = {}
    for name, mode in runners:
        speed.setdefault(name, {})[mode] = time_summary(
            times[(name, mode)], times[(floor, mode)]
        )
    return speed


def section_of(info, shape, reps, speed, **fields):
    """One backend's section as the results files hold it.

    `run` (the machine), `fields` (e.g. `mode`), `shape`, `reps`, the load
    average at the end of the timings (`load_end`), then `speed`.
    """
    section = {"run": info, **fields, "shape": list(shape), "reps": reps}
    section["load_end"] = load_average()
    section["speed"] = speed
    return section


def modes_table(section, labels, axes, backend, faults=False):
    """One backend's times per configuration (rows) and mode (columns).

    `axes` names the shape's dimensions (`"B, H, Q, K"`); with `faults`,
    a column per mode of minor page faults per call follows.
    """
    shape = ", ".join(map(str, section["shape"]))
    modes = list(next(iter(section["speed"].values())))
    header = [f"({axes}) = ({shape}), {backend}"]
    header += [f"{mode}: ms (x floor; min x floor) [min-max]" for mode in modes]
    if faults:
        header += [f"{mode}: page faults per call" for mode in modes]
    body = []
    for name, cells in section["speed"].items():
        row = [labels[name]] + [fmt_ms(s) for s in cells.values()]
        if faults:
            row += [f"{s.get('faults', 0):.0f}" for s in cells.values()]
        body.append(row)
    return markdown_table(header, body)


def ratio_table(sections, labels, modes):
    """Ratios to the floor, every backend and mode side by side.

    Args:
        sections: `{backend: section}` whose `speed` is keyed by name, then
            mode.
        labels: `{name: label}`: the rows, in order.
        modes: `{backend: (mode, ...)}`: the columns of each backend.

    Returns:
        A markdown table: `ratio (min ratio)` per cell, `-` where a
        configuration did not run.
    """
    columns = [(backend, mode) for backend in sections for mode in modes[backend]]
    header = ["median time / floor"] + [f"{b}: {m}" for b, m in columns]
    body = []
    for name, label in labels.items():
        cells = []
        for backend, mode in columns:
            cell = sections[backend]["speed"].get(name, {}).get(mode)
            text = "-" if cell is None else f"{cell['ratio']:.2f}x"
            if cell is not None:
                text += f" (min {cell['min_ratio']:.2f}x)"
            cells.append(text)
        body.append([label] + cells)
    return markdown_table(header, body)


def goal_line(backend, mode, speed, ours, goal, keras_hub=None, digits=1):
    """``backend mode: ours Rx floor (medians; Mx by minimums) (within Gx)``
    and, where keras-hub ran (`speed[keras_hub]`), whether ours is faster."""
    cell = speed[ours][mode]
    line = f"{backend} {mode}: ours {cell['ratio']:.2f}x floor (medians; "
    line += f"{cell['min_ratio']:.2f}x by minimums)"
    line += f" ({'within' if cell['ratio'] <= goal else 'above'} {goal}x)"
    if keras_hub in speed:
        hub = speed[keras_hub][mode]["median_ms"]
        verdict = "faster" if cell["median_ms"] < hub else "slower"
        line += f"; {verdict} than keras-hub ({hub:.{digits}f} ms)"
    return line


def goal_lines(sections, modes, ours, goal, keras_hub=None, digits=1, more=None):
    """`goal_line` of every backend's mode (`modes[backend]`), one a line,
    each followed by `more(speed, mode)` where given."""
    lines = []
    for backend, section in sections.items():
        speed = section["speed"]
        for mode in modes[backend]:
            line = goal_line(backend, mode, speed, ours, goal, keras_hub, digits)
            lines.append(line + (more(speed, mode) if more else ""))
    return "\n".join(lines)


def steady_heap():
    """Keeps freed buffers up to 32 MiB in the process (glibc), for stable times.

    By default glibc moves its mmap threshold as blocks are freed and trims
    the heap's free top once it exceeds twice that threshold, so whether a
    call's 16 MiB buffers come back as fresh pages (a fault per 4 KiB page,
    and memory zeroed by the kernel) depends on what ran before it:
    interleaved eager timings turn bimodal (medians of 7 ms or 33 ms for
    the same torch RoPE call, 12256 faults per call in the slow mode).
    `mallopt` fixes the mmap threshold at 32 MiB (glibc's most) and turns
    trimming off: every configuration then runs on a warm heap, the same
    for all. Returns whether it applied (False off glibc).
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20)) and bool(
        libc.mallopt(m_trim_threshold, 2**31 - 1)
    )


def _minor_faults():
    """This process's minor page faults so far (0 where `resource` is missing).

    A fresh 16 MiB buffer costs 4096 of them; whether a call gets fresh
    memory depends on what ran before it (glibc returns large freed blocks
    to the system), so fault counts explain a bimodal median.
    """
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_summary(times, base=None):
    """Milliseconds (median, min, max; CPU median), page faults and ratios to `base`.

    Args:
        times: one entry of `interleaved_times`.
        base: the entry to divide by (the floor), or `None`.

    Returns:
        `{median_ms, min_ms, max_ms, cpu_ms, faults}` (`faults`: median minor
        page faults per call), plus with `base`: `ratio`
        (of medians), `min_ratio` (of minimums) and `cpu_ratio` (of CPU
        medians).
    """
    wall, cpu = times["wall"], times["cpu"]
    out = {
        "median_ms": statistics.median(wall) * 1e3,
        "min_ms": min(wall) * 1e3,
        "max_ms": max(wall) * 1e3,
        "cpu_ms": statistics.median(cpu) * 1e3,
        "faults": statistics.median(times.get("faults") or [0]),
    }
    if base is not None:
        ref = time_summary(base)
        out["ratio"] = out["median_ms"] / ref["median_ms"]
        out["min_ratio"] = out["min_ms"] / ref["min_ms"]
        out["cpu_ratio"] = out["cpu_ms"] / ref["cpu_ms"] if ref["cpu_ms"] else None
    return out


def fmt_ms(summary):
    """A table cell: ``median (ratio; min ratio) [min-max]``, in ms.

    The ratios appear when `summary` has them (a `time_summary` with a base).
    """
    text = f"{summary['median_ms']:.3f}"
    if "ratio" in summary:
        text += f" ({summary['ratio']:.2f}x; min {summary['min_ratio']:.2f}x)"
    return text + f" [{summary['min_ms']:.3f}-{summary['max_ms']:.3f}]"


def copy_bandwidth(megabytes=512):
    """Best-of-5 numpy copy: bytes read plus bytes written per second, GB/s."""
    import numpy as np

    a = np.ones(megabytes * 2**20 // 4, np.float32)
    b = np.empty_like(a)
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - start)
    return 2 * a.nbytes / best / 1e9


# -- the machine -----------------------------------------------------------------


def _first(path, prefix):
    try:
        with open(path) as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith(prefix)
            )
    except (OSError, StopIteration):
        return None


def _versions():
    out = {"python": platform.python_version()}
    for package in (
        "numpy",
        "keras",
        "tensorflow",
        "tf-keras",
        "jax",
        "jaxlib",
        "torch",
        "keras-hub",
    ):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    import keras_posenc

    out["keras_posenc"] = keras_posenc.__version__
    return out


def _devices(backend):
    """The backend's compute devices (Keras is imported by now)."""
    if backend == "tensorflow":
        import tensorflow as tf

        return [d.device_type for d in tf.config.list_logical_devices()]
    if backend == "jax":
        import jax

        return [d.platform for d in jax.devices()]
    import torch

    return ["cpu"] + (["cuda"] * torch.cuda.device_count())


def _threads(backend):
    """Intra-op threads where the backend says (torch); else `None`."""
    if backend == "torch":
        import torch

        return torch.get_num_threads()
    return None


def machine(backend):
    """What the numbers were measured on: CPU, cores, memory, versions, devices."""
    kib = _first("/proc/meminfo", "MemTotal")
    return {
        "cpu": _first("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_GiB": round(int(kib.split()[0]) / 2**20, 1) if kib else None,
        "os": platform.platform(),
        "versions": _versions(),
        "backend": backend,
        "devices": _devices(backend),
        "intra_op_threads": _threads(backend),
        "legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS", "0") not in ("", "0"),
    }


def load_average():
    """`os.getloadavg()`: runnable processes over 1, 5 and 15 minutes."""
    return [round(v, 2) for v in os.getloadavg()]


def _commit():
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def run_info(backend):
    """Date, code version, machine and load, at the start of a run."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        "commit": _commit(),
        "machine": machine(backend),
        "load_start": load_average(),
    }


def machine_line(info):
    """One printable line: CPU, cores, versions, load."""
    m, v = info["machine"], info["machine"]["versions"]
    backend = m["backend"]
    version = v.get(backend, "?")
    cores = f"{m['cores']} cores"
    if m.get("usable_cores", m["cores"]) != m["cores"]:
        cores += f" ({m['usable_cores']} usable)"
    return (
        f"{info['date']}: {m['cpu']}, {cores}, {m['memory_GiB']} GiB; "
        f"Python {v['python']}, Keras {v.get('keras')}, {backend} {version}, "
        f"keras-hub {v.get('keras-hub', 'absent')}; load {info['load_start']}"
    )


# -- results ---------------------------------------------------------------------


def _rounded(value, digits=4):
    """Floats to `digits` significant digits (results files stay small)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v, digits) for v in value]
    return value


def _dumps(value, indent=0):
    """JSON with one line per innermost object or list (small, diffable)."""
    if not isinstance(value, dict | list) or not any(
        isinstance(v, dict | list)
        for v in (value.values() if isinstance(value, dict) else value)
    ):
        return json.dumps(value)
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(k)}: {_dumps(v, indent + 1)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _dumps(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_results(name, sections, path=None, record=False, suffix=""):
    """Writes `{backend: section}` into the results file of benchmark `name`.

    The file holds ``{"benchmark": name, "backends": {backend: section}}``;
    a backend's section replaces its old one, other backends' stay, so
    each backend can be (re)run on its own. The committed results change
    only when asked: by default a run writes `benchmarks/results/latest/`.

    Args:
        name: the benchmark, e.g. `"forward"`.
        sections: `{backend: JSON-able dict}`.
        path: the file; defaults to `benchmarks/results/latest/<name>.json`.
        record: write the committed `benchmarks/results/<name>.json` instead
            of the default.
        suffix: appended to the default file's name (`"_one_core"`: a
            one-core run never replaces the sections of a run on every core).

    Returns:
        The path written.
    """
    path = path or os.path.join(RESULTS if record else LATEST, f"{name}{suffix}.json")
    merged = {}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old.get("benchmark") == name:
            merged = old.get("backends", {})
    merged.update(_rounded(sections))
    payload = {"benchmark": name, "backends": {k: merged[k] for k in sorted(merged)}}
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        f.write(_dumps(payload) + "\n")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(f.name, 0o666 & ~umask)  # a temporary file is private (0600)
    os.replace(f.name, path)
    return path


def markdown_table(header, rows):
    """A markdown table from a header list and rows of cell strings."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
