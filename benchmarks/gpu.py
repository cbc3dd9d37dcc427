"""The accelerator benchmark: the exact path against the plain one where models run.

    python -m benchmarks.gpu [--backend jax|torch | --all-backends] [--reps 51]
        [--smoke] [--json PATH] [--record]

Meant for a GPU (JAX with CUDA, torch with CUDA); it runs anywhere, and
records the device it ran on. Each case times, in interleaved repetitions
after a warm-up and with the work synchronised, a floor (the same op with
precomputed float32 tables) and the layers; ratios are medians over the
case's floor.

JAX (`jax.jit`, the start a run-time argument unless said):

* `rope_prefill` `[4, 2048, 8, 64]`: floor = constant cos/sin (start
  ignored); `floor_dynamic` = a cos/sin table of 8192 positions read at
  the start with `dynamic_slice`; ours in compute and lookup mode;
  keras-hub's `RotaryEmbedding`. `rope_prefill_static`: ours, start closed
  over. `cos_sin`: `rotary_cos_sin` of 2048 positions alone.
* `sinusoidal_add` `(8, 4096, 1024)`: floor = `x + table[:L]` (static
  slice), `floor_dynamic` = `x + dynamic_slice(table, start)`; ours in
  compute and lookup mode; keras-hub's `SinePositionEncoding` + add; also
  in bfloat16 (`sinusoidal_add_bf16`).

torch (eager, and `torch.compile` with its compile time):

* `sinusoidal_add` and `rope_prefill` eager: floor = a plain Keras layer
  doing the floor's op (Keras's call cost included); ours (rows kept from
  the previous call at the same positions, as a model's next layers read
  them), ours at a new span every call, ours in lookup mode, keras-hub.
* `*_compiled`: the same under `torch.compile`, a tensor start.
* `kernels`: aten ops per eager call that are not views (torch.profiler),
  at new positions: the budget stated in benchmarks/README.md.

Both: `decode_step` `[32, 1, 1024]` eager at 4095 and on: a plain Keras
layer adding a precomputed row, ours, keras-hub.
"""

import itertools
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
from benchmarks.rotary import ConstantRope, floor_tables, swap_halves  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "gpu"
FULL = {"rope": (4, 2048, 8, 64), "add": (8, 4096, 1024), "step": (32, 1, 1024)}
SMOKE = {"rope": (1, 64, 2, 16), "add": (2, 64, 32), "step": (2, 1, 32)}
TABLE_ROWS = 8192  # the lookup tables and the dynamic floors
# Non-view aten ops per eager torch call at new positions, most allowed
# (benchmarks/README.md): each is a kernel launch on a GPU.
KERNEL_BUDGET = {"sinusoidal_compute": 45, "rope_compute": 50, "rope_lookup": 4}
# Issue 28's GPU goals: (backend, case, row, the floor row, most x that floor).
GOALS = (
    ("jax", "rope_prefill", "ours_compute", "floor", 1.5),
    ("jax", "rope_prefill", "ours_lookup", "floor_dynamic", 1.10),
    ("jax", "sinusoidal_add", "ours_compute", "floor_dynamic", 1.05),
    ("jax", "sinusoidal_add_bf16", "ours_compute", "floor", 1.10),
    ("torch", "sinusoidal_add", "ours_compute", "floor", 1.5),
    ("torch", "rope_prefill", "ours_compute", "floor", 1.5),
    ("torch", "sinusoidal_add_compiled", "ours_compute", "floor", 1.10),
    ("torch", "rope_prefill_compiled", "ours_compute", "floor", 1.10),
)


def _random(shape, dtype="float32"):
    values = np.random.default_rng(0).normal(size=shape).astype("float32")
    return ops.cast(ops.convert_to_tensor(values), dtype)


def _hub():
    try:
        import keras_hub
    except ImportError:
        return None
    return keras_hub.layers


def _rope_rows(shape):
    """name -> callable(x, start) of the RoPE prefill floors and layers."""
    _, length, _, dim = shape
    floor = ConstantRope(*floor_tables(length, dim), dim)
    wide_cos, wide_sin = floor_tables(TABLE_ROWS, dim)
    ours = keras_posenc.RotaryEmbedding()
    lookup = keras_posenc.RotaryEmbedding(mode="lookup", max_length=TABLE_ROWS)

    def dynamic_floor(x, s):
        begin, size = (0, s, 0, 0), (1, length, 1, dim)
        cos, sin = (ops.slice(t, begin, size) for t in (wide_cos, wide_sin))
        return x * cos + swap_halves(x, dim) * sin

    rows = {
        "floor": lambda x, s: floor(x),
        "floor_dynamic": dynamic_floor,
        "ours_compute": lambda x, s: ours(x, start_index=s),
        "ours_lookup": lambda x, s: lookup(x, start_index=s),
    }
    hub = _hub()
    if hub is not None:
        layer = hub.RotaryEmbedding()
        rows["keras_hub"] = lambda x, s: layer(x, start_index=s)
    return rows


def _add_rows(shape):
    """name -> callable(x, start) of the sinusoidal add floors and layers."""
    _, length, depth = shape
    table = keras_posenc.sinusoidal_table(TABLE_ROWS, depth)
    ours = keras_posenc.SinusoidalPositionEncoding()
    lookup = keras_posenc.SinusoidalPositionEncoding(
        mode="lookup", max_length=TABLE_ROWS
    )
    rows = {
        "floor": lambda x, s: x + ops.cast(table[:length], x.dtype),
        "floor_dynamic": lambda x, s: (
            x + ops.cast(ops.slice(table, (s, 0), (length, depth)), x.dtype)
        ),
        "ours_compute": lambda x, s: ours(x, start_index=s),
        "ours_lookup": lambda x, s: lookup(x, start_index=s),
    }
    hub = _hub()
    if hub is not None:
        layer = hub.SinePositionEncoding()
        rows["keras_hub"] = lambda x, s: x + layer(x, start_index=s)
    return rows


def _bound(functions, *args):
    """`{name: f}` -> `{name: lambda: f(*args)}`: zero-argument runners."""
    return {name: (lambda f=f: f(*args)) for name, f in functions.items()}


def _timed(runners, base, reps):
    times = _common.interleaved_times(runners, reps)
    return {k: _common.time_summary(times[k], times[base]) for k in runners}


def _jax_cases(shapes, reps):
    import jax

    start = ops.convert_to_tensor(0, "int32")
    cases = {}
    q = _random(shapes["rope"])
    rope = {k: jax.jit(f) for k, f in _rope_rows(shapes["rope"]).items()}
    runners = _bound(rope, q, start)
    static = keras_posenc.RotaryEmbedding()
    runners["ours_static_start"] = jax.jit(lambda: static(q, start_index=0))
    cos_sin = jax.jit(
        lambda s: keras_posenc.rotary_cos_sin(
            s + jax.numpy.arange(shapes["rope"][1]), shapes["rope"][3]
        )
    )
    runners["cos_sin_alone"] = lambda: cos_sin(start)
    cases["rope_prefill"] = _timed(runners, "floor", reps)
    for dtype, case in (
        ("float32", "sinusoidal_add"),
        ("bfloat16", "sinusoidal_add_bf16"),
    ):
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if dtype == "bfloat16" else "float32"
        )
        try:
            x = _random(shapes["add"], dtype)
            add = {k: jax.jit(f) for k, f in _add_rows(shapes["add"]).items()}
            runners = _bound(add, x, start)
            cases[case] = _timed(runners, "floor", reps)
        finally:
            keras.mixed_precision.set_global_policy("float32")
    return cases


def _torch_cases(shapes, reps):
    import torch

    cases = {}
    q, x = _random(shapes["rope"]), _random(shapes["add"])
    new_starts = itertools.cycle([0, 64])
    for case, rows, value in (
        ("rope_prefill", _rope_rows(shapes["rope"]), q),
        ("sinusoidal_add", _add_rows(shapes["add"]), x),
    ):
        eager = dict(rows)
        eager.pop("floor_dynamic")
        floor = PlainAdd(keras_posenc.sinusoidal_table(TABLE_ROWS, shapes["add"][2]))
        if case == "sinusoidal_add":
            eager["floor"] = _at_new_starts(floor, itertools.repeat(0))
            fresh = keras_posenc.SinusoidalPositionEncoding(max_wavelength=10001.0)
        else:
            fresh = keras_posenc.RotaryEmbedding(max_wavelength=10001.0)
        # Its own encoder (base 10001: the same work), at alternating starts.
        eager["ours_new_span"] = _at_new_starts(fresh, new_starts)
        with torch.no_grad():
            runners = _bound(eager, value, 0)
            cases[case] = _timed(runners, "floor", reps)
            cases[case + "_compiled"] = _compiled_case(rows, value, reps)
    cases["kernels"] = _kernels(q, x)
    return cases


def _at_new_starts(layer, starts):
    """`layer` called at the next of `starts` (whatever start it is given)."""
    return lambda v, s: layer(v, start_index=next(starts))


def _compiled_case(rows, value, reps):
    """`torch.compile` of each row (a tensor start): times and compile seconds."""
    import torch

    start = torch.tensor(0, device=value.device)
    compiled, seconds = {}, {}
    for name, fn in rows.items():
        torch._dynamo.reset()
        began = time.perf_counter()
        compiled[name] = torch.compile(fn)
        _common.block(compiled[name](value, start))
        seconds[name] = time.perf_counter() - began
    timed = _timed(_bound(compiled, value, start), "floor", reps)
    for name in timed:
        timed[name]["compile_s"] = seconds[name]
        timed[name]["compile_ratio"] = seconds[name] / seconds["floor"]
    return timed


def _kernels(q, x):
    """Non-view aten ops per eager call at new positions (nothing kept)."""
    from torch.profiler import ProfilerActivity, profile

    views = {
        "view",
        "reshape",
        "slice",
        "select",
        "unsqueeze",
        "expand",
        "as_strided",
        "alias",
        "unbind",
        "split",
        "t",
        "permute",
        "_unsafe_view",
        "squeeze",
        "detach",
        "lift_fresh",
        "empty",
        "narrow",
        "to",
        "_to_copy",
        "result_type",
    }
    sinusoidal = keras_posenc.SinusoidalPositionEncoding
    rotary = keras_posenc.RotaryEmbedding
    layers = {
        "plain_keras_layer": (
            PlainAdd(keras_posenc.sinusoidal_table(TABLE_ROWS, x.shape[2])),
            x,
        ),
        "sinusoidal_compute": (sinusoidal(), x),
        "sinusoidal_lookup": (sinusoidal(mode="lookup", max_length=TABLE_ROWS), x),
        "rope_compute": (rotary(), q),
        "rope_lookup": (rotary(mode="lookup", max_length=TABLE_ROWS), q),
    }
    calls = {
        name: (lambda layer=layer, v=v: layer(v, start_index=64))
        for name, (layer, v) in layers.items()
    }
    budget = keras_posenc.set_cache_budget(0)
    counts = {}
    try:
        for name, make_call in calls.items():
            make_call()  # builds, compiles nothing on torch
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                make_call()
            counts[name] = sum(
                1
                for e in prof.events()
                if e.name.startswith("aten::")
                and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
                and e.name[6:] not in views
            )
    finally:
        keras_posenc.set_cache_budget(budget)
    return counts


def _decode_step(shape, reps):
    """Eager decoding steps at 4095 and on: plain layer, ours, keras-hub."""
    depth = shape[2]
    x = _random(shape)
    table = keras_posenc.sinusoidal_table(8192, depth)
    plain, ours = PlainAdd(table), keras_posenc.SinusoidalPositionEncoding()
    steps = {k: itertools.count(4095) for k in ("floor", "ours", "keras_hub")}
    runners = {
        "floor": lambda: plain(x, start_index=next(steps["floor"])),
        "ours": lambda: ours(x, start_index=next(steps["ours"])),
    }
    hub = _hub()
    if hub is not None:
        layer = hub.SinePositionEncoding()
        runners["keras_hub"] = lambda: (
            x + layer(x, start_index=next(steps["keras_hub"]))
        )
    return _timed(runners, "floor", reps)


def run(shapes, reps):
    info = _common.run_info(BACKEND)
    print(_common.machine_line(info))
    print("devices:", info["machine"]["devices"])
    cases = _jax_cases(shapes, reps) if BACKEND == "jax" else _torch_cases(shapes, reps)
    cases["decode_step"] = _decode_step(shapes["step"], reps)
    section = {"run": info, "shapes": shapes, "reps": reps, "cases": cases}
    section["load_end"] = _common.load_average()
    print(markdown(section))
    return section


def markdown(section):
    rows = []
    for case, timed in section["cases"].items():
        if case == "kernels":
            rows += [[case, name, str(count), ""] for name, count in timed.items()]
            continue
        for name, summary in timed.items():
            extra = ""
            if "compile_s" in summary:
                seconds, ratio = summary["compile_s"], summary["compile_ratio"]
                extra = f"compile {seconds:.1f} s ({ratio:.2f}x)"
            rows.append([case, name, _common.fmt_ms(summary), extra])
    return _common.markdown_table(["case", "row", "ms (x floor)", ""], rows)


def goals(sections):
    """Issue 28's goals against a run (they are GPU goals: on a CPU, a check)."""
    lines = []
    for backend, case, row, floor, most in GOALS:
        timed = sections.get(backend, {}).get("cases", {}).get(case, {})
        if row not in timed or floor not in timed:
            continue
        ratio = timed[row]["median_ms"] / timed[floor]["median_ms"]
        verdict = "met" if ratio <= most else "NOT met"
        line = f"{backend} {case} {row}: {ratio:.2f}x {floor} (goal <= {most}x): "
        if "keras_hub" in timed:
            hub = timed[row]["median_ms"] / timed["keras_hub"]["median_ms"]
            line += f"{verdict}; {hub:.2f}x keras-hub"
        lines.append(line if "keras_hub" in timed else line + verdict)
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = _common.argument_parser(__doc__, NAME)
    parser.add_argument("--reps", type=int, default=51)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 3 reps")
    args = parser.parse_args(argv)
    sections = _common.run_requested_backends(
        NAME, argv, args, BACKEND, backends=("jax", "torch"), summary=goals
    )
    if sections is not None:
        return sections
    if BACKEND not in ("jax", "torch"):
        parser.error(
            f"--backend must be jax or torch (GPU figures). Received: {BACKEND}"
        )
    shapes = SMOKE if args.smoke else FULL
    section = run(shapes, 3 if args.smoke else args.reps)
    print(goals({BACKEND: section}))
    return _common.write_section(NAME, BACKEND, section, args)


if __name__ == "__main__":
    main()
