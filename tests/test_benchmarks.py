"""The benchmark scripts keep working on every backend (smoke runs, no timings)."""

import argparse
import contextlib
import json
import math
import mmap
import os
import platform
import sys

import keras
import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    TOL,
    only_tensorflow,
    reference,
    run_python,
    to_numpy,
)

import keras_posenc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _repository_root_on_path():
    """Imports `benchmarks.*` from the repository root (not a package dep)."""
    sys.path.insert(0, ROOT)
    try:
        yield
    finally:
        sys.path.remove(ROOT)


with _repository_root_on_path():
    from benchmarks import _common as common
    from benchmarks import (
        _floors,
        alibi,
        compile_bits,
        decode,
        diffusion_step,
        forward,
        gpu,
        grid,
        memory,
        parts,
        precision,
        rotary,
        timestep,
    )


def _has_keras_hub():
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def forward_smoke(tmp_path_factory):
    """One in-process `forward --smoke` run on this backend, and its JSON file."""
    path = tmp_path_factory.mktemp("forward") / "forward.json"
    returned = forward.main(["--smoke", "--no-memory", "--json", str(path)])
    return returned, json.loads(path.read_text())


@pytest.fixture(scope="module")
def precision_smoke(tmp_path_factory):
    """One in-process `precision --smoke` run on this backend, and its JSON file."""
    path = tmp_path_factory.mktemp("precision") / "precision.json"
    precision.main(["--smoke", "--json", str(path)])
    return json.loads(path.read_text())


# -- forward.py ------------------------------------------------------------------


def test_forward_smoke_has_every_configuration_of_the_backend(forward_smoke):
    # The floor (bare and as a plain Keras layer), both of our modes and the
    # generic peer run everywhere; the TF tutorial only on TensorFlow;
    # keras-hub whenever it is installed.
    expected = {
        forward.FLOOR,
        forward.PLAIN_LAYER,
        forward.OURS_COMPUTE,
        forward.OURS_LOOKUP,
        forward.TILED_GATHER,
    }
    if BACKEND == "tensorflow":
        expected.add(forward.TF_TUTORIAL)
    if _has_keras_hub():
        expected.add(forward.KERAS_HUB)
    _, results = forward_smoke
    section = results["backends"][BACKEND]
    assert [entry["shape"] for entry in section["shapes"]] == [
        list(s) for s in forward.SMOKE_SHAPES
    ]
    for entry in section["shapes"]:
        assert {row["config"] for row in entry["rows"]} == expected


def test_forward_smoke_times_every_mode_of_the_backend(forward_smoke):
    # Each row has median/min/max and a finite positive ratio in each mode.
    _, results = forward_smoke
    section = results["backends"][BACKEND]
    assert section["modes"] == list(forward.MODES[BACKEND])
    for entry in section["shapes"]:
        for row in entry["rows"]:
            for mode in forward.MODES[BACKEND]:
                cell = row[mode]
                assert cell["min_ms"] <= cell["median_ms"] <= cell["max_ms"]
                assert math.isfinite(cell["ratio"]) and cell["ratio"] > 0


def test_forward_floor_ratio_is_one(forward_smoke):
    # Ratios are to the floor measured in the same mode.
    _, results = forward_smoke
    for entry in results["backends"][BACKEND]["shapes"]:
        floor = next(r for r in entry["rows"] if r["config"] == forward.FLOOR)
        assert all(floor[mode]["ratio"] == 1.0 for mode in forward.MODES[BACKEND])


def test_forward_records_the_machine_and_load(forward_smoke):
    # The machine, versions and load average are part of every result.
    _, results = forward_smoke
    section = results["backends"][BACKEND]
    assert section["machine"]["backend"] == BACKEND
    assert section["machine"]["cores"] >= 1
    assert section["machine"]["versions"]["keras"]
    assert len(section["load_start"]) == 3 and len(section["load_end"]) == 3
    assert section["copy_GBps"] > 0 and section["table_build"]["ours_s"] > 0


def test_forward_merged_table_has_a_column_per_backend_mode(forward_smoke):
    # `--all-backends` merges sections into one ratio table per shape, with
    # a column per (backend, mode); here a second, eager-only section.
    returned, _ = forward_smoke
    other = "jax" if BACKEND == "torch" else "torch"
    sections = {
        BACKEND: returned[BACKEND],
        other: dict(returned[BACKEND], modes=[forward.EAGER]),
    }
    table = forward.merged_markdown(sections)
    header = next(line for line in table.splitlines() if line.startswith("| config"))
    assert header.count("|") == 3 + len(forward.MODES[BACKEND])
    assert f"| {other} eager |" in header
    assert table.count(f"| {forward.LABELS[forward.FLOOR]} |") == len(
        forward.SMOKE_SHAPES
    )


def test_forward_floor_output_kernel_is_a_handful_of_ops(forward_smoke):
    # Under XLA the floor's output is one small fused kernel (read x, read
    # the row, add): the yardstick for every other configuration's kernel.
    _, results = forward_smoke
    for entry in results["backends"][BACKEND]["shapes"]:
        rows = {row["config"]: row for row in entry["rows"]}
        if forward.JIT not in forward.MODES[BACKEND]:
            assert all("fusion_ops" not in row for row in rows.values())
            continue
        assert 2 <= rows[forward.FLOOR]["fusion_ops"] <= 8
        assert all("fusion_ops" in row for row in rows.values())


def test_forward_shape_option_parses_and_rejects():
    # `--shape B,L,D,S`: four integers, B, L, D positive.
    assert forward.parse_shape("8,4096,1024,0") == (8, 4096, 1024, 0)
    with pytest.raises(Exception, match="expected B,L,D,S"):
        forward.parse_shape("8,0,1024,0")


@only_tensorflow
@pytest.mark.slow
def test_forward_peak_memory_of_the_floor_is_its_output():
    # The memory method sees exactly the floor's output buffer (8 MiB).
    shape = (8, 512, 512, 0)
    peak = forward.peak_memory(shape, [forward.FLOOR])[forward.FLOOR]
    output_mib = 8 * 512 * 512 * 4 / 2**20
    assert output_mib <= peak <= output_mib + 0.5


# -- precision.py ----------------------------------------------------------------


def test_precision_errors_are_those_against_the_test_reference():
    # The script's float32 error equals the one computed against the tests'
    # own float64 formula, and is within the package's bound.
    depth, window = 16, 32
    results = precision.measure(depth, window, landmarks=(2**11, 2**20))
    for end, row in results.items():
        positions = np.arange(end - window, end)
        want = reference(positions, depth)
        got = precision.ours(positions, depth)
        assert row[precision.OURS_FLOAT32] == pytest.approx(
            np.abs(got - want).max(), abs=1e-12
        )
        assert row[precision.OURS_FLOAT32] <= TOL


def test_precision_naive_rows_show_the_known_failures(precision_smoke):
    # Naive float32 loses ~1 at 2**24; bfloat16 angles are off by ~2 at
    # 2**11; float16 positions overflow above 65504 (NaN).
    errors = precision_smoke["backends"][BACKEND]["errors"]
    assert errors[str(2**24)][precision.NAIVE_FLOAT32] > 0.1
    assert errors[str(2**11)][precision.COMPUTE_BFLOAT16] > 0.5
    assert math.isnan(errors[str(2**16)][precision.COMPUTE_FLOAT16])


def test_precision_16_bit_rows_are_one_rounding_of_exact(precision_smoke):
    # Ours in bfloat16/float16 is within one rounding (half an ulp of 1).
    errors = precision_smoke["backends"][BACKEND]["errors"]
    for row in errors.values():
        assert row[precision.OURS_BFLOAT16] <= 2**-9 + TOL
        assert row[precision.OURS_FLOAT16] <= 2**-12 + TOL


def test_precision_smoke_has_every_row_and_landmark(precision_smoke):
    # The JSON holds a finite or NaN number per row constant and landmark.
    section = precision_smoke["backends"][BACKEND]
    assert list(section["errors"]) == [str(p) for p in precision.LANDMARKS]
    for row in section["errors"].values():
        assert set(row) == set(precision.LABELS)
    assert section["machine"]["backend"] == BACKEND


def test_precision_markdown_has_a_row_per_label():
    # Header, rule, then one line per row constant, NaN spelled out.
    results = {2**11: dict.fromkeys(precision.LABELS, 1e-7)}
    results[2**11][precision.COMPUTE_FLOAT16] = float("nan")
    table = precision.markdown(results, 32, 16)
    assert table.count("\n") == 1 + len(precision.LABELS)
    assert "| keras_posenc float32 | 1.0e-07 |" in table
    assert "| compute-dtype float16 | NaN (overflow) |" in table


# -- _common.py ------------------------------------------------------------------


def test_write_results_keeps_other_backends(tmp_path):
    # Each backend's section replaces its own and leaves the others.
    path = str(tmp_path / "x.json")
    common.write_results("x", {"jax": {"v": 1}}, path)
    common.write_results("x", {"torch": {"v": 2}}, path)
    common.write_results("x", {"jax": {"v": 3}}, path)
    with open(path) as f:
        assert json.load(f) == {
            "benchmark": "x",
            "backends": {"jax": {"v": 3}, "torch": {"v": 2}},
        }


def test_write_results_rounds_floats_to_four_digits(tmp_path):
    # Results files stay small: 4 significant digits.
    path = str(tmp_path / "x.json")
    common.write_results("x", {"jax": {"t": 1.23456789, "n": [2.0 / 3]}}, path)
    with open(path) as f:
        assert json.load(f)["backends"]["jax"] == {"t": 1.235, "n": [0.6667]}


def test_child_argv_drops_backend_and_output_options():
    # A per-backend child gets the parent's options but its own backend/file.
    argv = ["--all-backends", "--reps", "3", "--json", "a.json", "--backend=jax"]
    assert common.child_argv(argv + ["--smoke"]) == ["--reps", "3", "--smoke"]


def test_interleaved_times_calls_each_runner_warmup_plus_reps_times():
    # Every runner gets `warmup` untimed calls, then one timed call per rep.
    calls = {"a": 0, "b": 0}

    def runner(key):
        def run():
            calls[key] += 1

        return run

    times = common.interleaved_times({k: runner(k) for k in calls}, reps=3, warmup=2)
    assert calls == {"a": 5, "b": 5}
    assert {k: (len(v["wall"]), len(v["cpu"])) for k, v in times.items()} == {
        "a": (3, 3),
        "b": (3, 3),
    }


@pytest.mark.skipif(sys.platform == "win32", reason="no `resource` module")
def test_interleaved_times_count_the_page_faults_of_fresh_memory():
    # A call that writes fresh anonymous memory faults (once per page, or per
    # huge page); one that does nothing does not: the benchmarks print the
    # median per call, which explains bimodal timings on eager backends.
    size = 4 * 2**20

    def touch():
        block = mmap.mmap(-1, size)
        block[::4096] = b"x" * (size // 4096)
        block.close()

    times = common.interleaved_times({"touch": touch, "idle": lambda: None}, reps=5)
    touch_faults = common.time_summary(times["touch"])["faults"]
    assert touch_faults >= 2
    assert common.time_summary(times["idle"])["faults"] < touch_faults


_THREE_BUFFERS = """
import sys
import numpy as np
from benchmarks import _common
if sys.argv[1] == "steady":
    assert _common.steady_heap()

def fill():  # three 16 MiB buffers at once, written, freed
    return [np.ones(2**22, np.float32) for _ in range(3)][0]

times = _common.interleaved_times({"fill": fill}, reps=5)
print(_common.time_summary(times["fill"])["faults"])
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_steady_heap_keeps_freed_buffers_so_calls_stop_faulting():
    # By default glibc gives the freed 48 MiB back to the system and every
    # call faults its pages in again (about 1000 per call here, in a fresh
    # process); after `steady_heap` they come back from the heap.
    def faults(mode):
        done = run_python(_THREE_BUFFERS, mode, cwd=ROOT, check=True)
        return float(done.stdout.split()[-1])

    # (Above 16 even where numpy's buffers get 2 MiB pages: 24 of them.)
    assert faults("default") > 16
    assert faults("steady") < 8


def test_plain_add_adds_the_table_rows_of_the_span():
    # The plain-layer floor adds rows start_index + [0, L), as ours does.
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    x = np.ones((2, 3, 4), np.float32)
    added = keras.ops.convert_to_numpy(_floors.PlainAdd(table)(x, start_index=5))
    np.testing.assert_array_equal(added, 1 + np.broadcast_to(table[5:8], (2, 3, 4)))


def test_time_summary_ratios_are_of_medians_minimums_and_cpu():
    # Ratios to the base: medians, minimums and CPU medians, each its own.
    base = {"wall": [1.0, 2.0, 9.0], "cpu": [1.0, 1.0, 1.0]}
    times = {"wall": [3.0, 4.0, 5.0], "cpu": [2.0, 2.0, 5.0]}
    summary = common.time_summary(times, base)
    assert summary["median_ms"] == 4000.0 and summary["max_ms"] == 5000.0
    assert summary["ratio"] == 2.0
    assert summary["min_ratio"] == 3.0
    assert summary["cpu_ratio"] == 2.0


def test_results_go_to_latest_unless_recorded(tmp_path, monkeypatch):
    # A run (a smoke run too) never rewrites the committed results: it writes
    # benchmarks/results/latest/ unless asked with --record.
    monkeypatch.setattr(common, "RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(common, "LATEST", str(tmp_path / "results" / "latest"))
    written = common.write_results("x", {"jax": {"v": 1}})
    assert written == str(tmp_path / "results" / "latest" / "x.json")
    assert not (tmp_path / "results" / "x.json").exists()
    recorded = common.write_results("x", {"jax": {"v": 2}}, record=True)
    assert recorded == str(tmp_path / "results" / "x.json")


# -- decode.py -------------------------------------------------------------------


def test_decode_smoke_times_both_layers_against_their_floors(tmp_path):
    # Every configuration of both layers is timed, the floor's ratio is 1.
    path = tmp_path / "decode.json"
    decode.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    sine, rope = section["layers"]["sinusoidal"], section["layers"]["rotary"]
    assert {decode.FLOOR, decode.COMPUTE, decode.LOOKUP} <= set(sine)
    assert {decode.FLOOR, decode.ROPE} <= set(rope)
    assert (decode.KERAS_HUB in sine) == _has_keras_hub()
    assert sine[decode.FLOOR]["ratio"] == rope[decode.FLOOR]["ratio"] == 1.0


def test_decode_floors_apply_the_rows_of_the_step():
    # The plain layers the ratios divide by compute the right thing: row t of
    # the table added, and cos/sin row t applied (checked against float64).
    from keras import ops

    depth, t = 8, 5
    table = reference(np.arange(16), depth).astype("float32")
    x = np.ones((2, 1, depth), "float32")
    added = ops.convert_to_numpy(decode.PlainAdd(table)(x, start_index=t))
    np.testing.assert_allclose(
        added, np.broadcast_to(1.0 + table[t], x.shape), atol=1e-6
    )
    angle = t * 10000.0 ** (-np.arange(depth // 2) * 2.0 / depth)
    cos = np.tile(np.concatenate([np.cos(angle)] * 2), (16, 1)).astype("float32")
    sin = np.tile(np.concatenate([np.sin(angle)] * 2), (16, 1)).astype("float32")
    q = np.random.default_rng(0).normal(size=(1, 1, 2, depth)).astype("float32")
    got = ops.convert_to_numpy(decode.PlainRope(cos, sin)(q, start_index=t))
    half = depth // 2
    x1, x2 = q[..., :half], q[..., half:]
    c, s = np.cos(angle), np.sin(angle)
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    np.testing.assert_allclose(got, want, atol=TOL * 10)


# -- rotary.py -------------------------------------------------------------------


def test_rotary_smoke_times_every_configuration_against_the_floor(tmp_path):
    # Ours and the floor in every main mode of the backend; on torch (eager)
    # also ours at a new span every call, which the kept rows cannot serve.
    path = tmp_path / "rotary.json"
    rotary.main(["--smoke", "--json", str(path)])
    speed = json.loads(path.read_text())["backends"][BACKEND]["speed"]
    expected = {rotary.FLOOR, rotary.OURS}
    if BACKEND == "torch":
        expected.add(rotary.OURS_NEW)
    if _has_keras_hub():
        expected.add(rotary.KERAS_HUB)
    assert set(speed) == expected
    for cells in speed.values():
        assert set(cells) == set(rotary.MODES[BACKEND])
    assert {cell["ratio"] for cell in speed[rotary.FLOOR].values()} == {1.0}
    if BACKEND == "torch":  # timed without autograd, which it leaves on
        import torch

        assert torch.is_grad_enabled()


def test_rotary_configurations_apply_the_same_rotation():
    # The floor and ours rotate the same way at start 0 (the floor's
    # constants), float32 rounding apart.
    from keras import ops

    shape = (1, 64, 2, 16)
    x = ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=shape).astype("float32")
    )
    configs = rotary.configurations(shape)
    start = ops.convert_to_tensor(0, "int32")
    want = ops.convert_to_numpy(configs[rotary.FLOOR](x, start))
    np.testing.assert_allclose(
        ops.convert_to_numpy(configs[rotary.OURS](x, start)), want, atol=1e-6
    )


# -- parts.py --------------------------------------------------------------------

only_parts = pytest.mark.skipif(
    BACKEND not in parts.BACKENDS, reason="the TensorFlow and JAX cells only"
)


@only_parts
def test_parts_smoke_times_each_part_against_the_floor(tmp_path):
    path = tmp_path / "parts.json"
    parts.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    expected = {parts.FLOOR, parts.OURS, parts.ROWS}
    if BACKEND == "jax":
        expected.add(parts.GIVEN)
    assert set(section["speed"]) == expected
    assert section["speed"][parts.FLOOR]["ratio"] == 1.0
    assert section["run"]["machine"]["usable_cores"] >= 1
    line = parts.budget_line(BACKEND, section)
    assert line.startswith(f"{BACKEND} {parts.MODE[BACKEND]}") and "budget" in line


@pytest.mark.skipif(BACKEND in parts.BACKENDS, reason="backends without a cell")
def test_parts_refuses_a_backend_without_a_cell(capsys):
    with pytest.raises(SystemExit):
        parts.main(["--smoke"])
    assert f"--backend: one of tensorflow, jax (got '{BACKEND}')" in (
        capsys.readouterr().err
    )


@only_parts
def test_parts_compute_what_they_are_named_for():
    # The rows alone are the engine's table (float64 reference); ours and
    # the floor's rotation with its tables passed in give the floor's output.
    shape = parts.SMOKE_SHAPES[BACKEND]
    length, depth = shape[1], shape[-1]
    runners = parts.runners(shape)
    layout = "interleaved" if BACKEND == "tensorflow" else "concatenated"
    want = reference(np.arange(length), depth, layout=layout)
    np.testing.assert_allclose(to_numpy(runners[parts.ROWS]()), want, atol=TOL)
    floor = to_numpy(runners[parts.FLOOR]())
    others = [parts.OURS] + ([parts.GIVEN] if BACKEND == "jax" else [])
    for part in others:
        np.testing.assert_allclose(to_numpy(runners[part]()), floor, atol=1e-6)


two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two usable cores",
)


@two_cores
def test_one_core_pins_the_process_only_when_asked():
    script = (
        "from benchmarks import _common\n"
        "before = _common.usable_cores()\n"
        "_common.pin_one_core(['--reps', '3'])\n"
        "unpinned = _common.usable_cores()\n"
        "_common.pin_one_core(['--one-core'])\n"
        "print(before, unpinned, _common.usable_cores())\n"
    )
    done = run_python(script, cwd=ROOT, check=True)
    before, unpinned, pinned = map(int, done.stdout.split())
    assert before == unpinned >= 2 and pinned == 1


def test_machine_records_the_usable_cores_and_says_when_fewer():
    info = common.run_info(BACKEND)
    assert info["machine"]["usable_cores"] == common.usable_cores()
    info["machine"].update(cores=2, usable_cores=2)
    assert ", 2 cores, " in common.machine_line(info)
    info["machine"].update(cores=2, usable_cores=1)
    assert ", 2 cores (1 usable), " in common.machine_line(info)


def test_one_core_does_nothing_where_the_os_cannot_pin(monkeypatch):
    # No CPU affinity (macOS, Windows): nothing pinned, every core usable,
    # and a script refuses `--one-core` instead of timing every core.
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    common.pin_one_core(["--one-core"])
    assert common.usable_cores() == 4
    parser = argparse.ArgumentParser(allow_abbrev=False)
    common.add_one_core_argument(parser)
    with pytest.raises(SystemExit):
        common.check_one_core(parser, parser.parse_args(["--one-core"]))
    common.check_one_core(parser, parser.parse_args([]))  # not asked: fine


def test_one_core_runs_keep_the_option_and_write_their_own_file(tmp_path, monkeypatch):
    # Children of --all-backends pin themselves; a one-core run never
    # replaces the sections of a run on every core.
    assert common.child_argv(["--all-backends", "--one-core"]) == ["--one-core"]
    monkeypatch.setattr(common, "RESULTS", str(tmp_path))
    args = argparse.Namespace(one_core=True)
    written = common.write_results(
        "x", {"jax": {"v": 1}}, record=True, suffix=common.one_core_suffix(args)
    )
    assert written == str(tmp_path / "x_one_core.json")
    assert common.one_core_suffix(argparse.Namespace(one_core=False)) == ""


@two_cores
@only_parts
def test_parts_refuse_one_core_in_a_process_on_every_core(capsys):
    with pytest.raises(SystemExit):
        parts.main(["--smoke", "--one-core"])
    assert "--one-core: this process runs on" in capsys.readouterr().err


@pytest.mark.skipif(BACKEND not in ("jax", "torch"), reason="GPU figures: JAX, torch")
def test_gpu_smoke_times_every_case_against_its_floor(tmp_path):
    path = tmp_path / "gpu.json"
    gpu.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    cases = section["cases"]
    if BACKEND == "jax":
        expected = {"rope_prefill", "sinusoidal_add", "sinusoidal_add_bf16"}
    else:
        expected = {"rope_prefill", "sinusoidal_add", "kernels"}
        expected |= {"rope_prefill_compiled", "sinusoidal_add_compiled"}
    assert expected | {"decode_step"} <= set(cases)
    for case, timed in cases.items():
        if case != "kernels":
            assert timed["floor"]["ratio"] == 1.0
            assert {"ours_compute", "ours"} & set(timed) or case == "decode_step"
    assert section["run"]["machine"]["devices"]


@pytest.mark.skipif(BACKEND != "torch", reason="torch.profiler")
def test_gpu_kernel_counts_are_the_aten_ops_that_are_not_views():
    # A plain Keras layer adding a row slice launches one kernel (the add);
    # lookup mode the same; the engine more, and fewer than the budget.
    from keras import ops

    # On Keras's device (a GPU where there is one), as a model's tensors.
    counts = gpu._kernels(ops.ones((1, 64, 4, 16)), ops.ones((1, 64, 16)))
    assert counts["plain_keras_layer"] == 1
    assert counts["sinusoidal_lookup"] == 1
    assert 1 < counts["sinusoidal_compute"] <= gpu.KERNEL_BUDGET["sinusoidal_compute"]
    assert 1 < counts["rope_compute"] <= gpu.KERNEL_BUDGET["rope_compute"]
    assert counts["rope_lookup"] <= gpu.KERNEL_BUDGET["rope_lookup"]


def test_gpu_goals_read_ratios_against_the_named_floor():
    timed = {"floor": {"median_ms": 2.0}, "floor_dynamic": {"median_ms": 4.0}}
    timed["ours_compute"] = {"median_ms": 4.2}
    lines = gpu.goals({"jax": {"cases": {"sinusoidal_add": timed}}})
    assert lines == (
        "jax sinusoidal_add ours_compute: 1.05x floor_dynamic (goal <= 1.05x): met"
    )


@pytest.mark.skipif(BACKEND != "jax", reason="memory.py measures JAX programs")
def test_memory_smoke_measures_every_variant_against_keras_hub(tmp_path):
    path = tmp_path / "memory.json"
    memory.main(["--smoke", "--json", str(path)])
    variants = json.loads(path.read_text())["backends"]["jax"]["variants"]
    assert set(variants) == set(memory.VARIANTS)
    for result in variants.values():
        (run,) = result["runs"]  # --smoke: one process per layer
        program = result["program_run"]  # and one with one malloc arena
        for one in (run, program):
            assert len(one["after_MiB"]) == 3 and one["before_MiB"] > 0
        # (the JSON keeps four significant digits: 0.1 MiB of a process)
        growth = run["after_MiB"][-1] - run["before_MiB"]
        assert result["process_growth_MiB"] == pytest.approx(growth, abs=0.2)
        assert result["per_new_length_MiB"] == pytest.approx(growth / 3, abs=0.1)
        steps = np.diff([program["before_MiB"], *program["after_MiB"]])
        median = np.median(steps)
        assert result["program_MiB_per_length"] == pytest.approx(median, abs=0.2)


# -- timestep.py -----------------------------------------------------------------


def test_timestep_smoke_records_precision_and_speed(tmp_path):
    # Ours within the bound, the float32 formula far off, bf16 timesteps worse.
    path = tmp_path / "timestep.json"
    timestep.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    for row in section["precision"].values():
        assert row["ours"] <= TOL < row["float32_formula"] < row["bf16_timesteps"]
    assert section["speed"]["float32_formula"]["ratio"] == 1.0
    assert section["speed"]["ours"]["median_ms"] > 0


# -- diffusion_step.py ------------------------------------------------------------

needs_keras_hub = pytest.mark.skipif(
    not _has_keras_hub() or LEGACY, reason="keras-hub (Keras 3) not installed"
)


@needs_keras_hub
@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer")
def test_diffusion_step_smoke_times_both_models_in_every_mode(tmp_path):
    # Flux and SD3, eager and compiled (torch: eager), keras-hub's layers and
    # use_exact side by side; the overhead is the ratio of medians less one.
    path = tmp_path / "diffusion_step.json"
    diffusion_step.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    modes = {"tensorflow": ["eager", "tf.function"], "jax": ["eager", "jax.jit"]}
    for name in ("flux", "sd3"):
        entry = section["models"][name]
        assert [m for m in entry if m != "size"] == modes.get(BACKEND, ["eager"])
        for mode in modes.get(BACKEND, ["eager"]):
            cell = entry[mode]
            ratio = cell[diffusion_step.EXACT]["ratio"]
            # (both rounded to 4 digits in the results file)
            assert cell["overhead"] == pytest.approx(ratio - 1.0, abs=1e-3)
            assert cell[diffusion_step.HUB]["median_ms"] > 0


@needs_keras_hub
@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer")
@pytest.mark.parametrize("name", ["flux", "sd3"])
def test_diffusion_step_builds_compute_the_same_step(name):
    # The exact build holds keras-hub's weights: the two outputs differ only
    # by the position layers' float32 error, amplified by the blocks.
    hub, exact, inputs, _ = diffusion_step.models(name, smoke=True)
    theirs = to_numpy(hub(inputs, training=False))
    ours = to_numpy(exact(inputs, training=False))
    assert np.abs(ours - theirs).max() <= 1e-3 * np.abs(theirs).max()


def test_grid_smoke_times_every_configuration_against_the_formula(tmp_path):
    path = tmp_path / "grid.json"
    grid.main(["--smoke", "--json", str(path)])
    section = json.loads(path.read_text())["backends"][BACKEND]
    assert set(section["speed"]) == set(grid.LABELS)
    assert section["speed"][grid.FORMULA]["ratio"] == 1.0
    assert section["mode"] == grid.MODE[BACKEND]


def test_grid_float32_formula_is_the_mae_table():
    # The baseline computes MAE's table (in float32): within float32 angles'
    # error of ours at a small grid.
    x = np.zeros((1, 3, 5, 16), "float32")
    ours = keras_posenc.grid_sincos_table((3, 5), 16)
    formula = grid.float32_formula(keras.ops.convert_to_tensor(x))
    assert np.abs(to_numpy(formula).reshape(15, 16) - to_numpy(ours)).max() < 1e-6


# -- alibi.py --------------------------------------------------------------------


def test_alibi_smoke_times_every_configuration_against_the_floor(tmp_path):
    # Ours, the floor and keras-hub (when installed) in every mode of the backend.
    path = tmp_path / "alibi.json"
    alibi.main(["--smoke", "--json", str(path)])
    speed = json.loads(path.read_text())["backends"][BACKEND]["speed"]
    expected = {alibi.FLOOR, alibi.OURS, alibi.WRITTEN, alibi.FLOOR_ROW, alibi.OURS_ROW}
    expected |= {alibi.KERAS_HUB} if _has_keras_hub() else set()
    assert set(speed) == expected
    for cells in speed.values():
        assert set(cells) == set(alibi.MODES[BACKEND])
    assert {cell["ratio"] for cell in speed[alibi.FLOOR].values()} == {1.0}


def test_alibi_floor_adds_the_same_bias_as_ours():
    shape = alibi.SMOKE_SHAPE
    scores = np.random.default_rng(0).normal(size=shape).astype("float32")
    configs = alibi.configurations(shape)
    floor, ours = (to_numpy(configs[k](scores)) for k in (alibi.FLOOR, alibi.OURS))
    np.testing.assert_array_equal(floor, ours)
    # The written floor adds the same bias; the one-row floor ours's one row.
    np.testing.assert_array_equal(to_numpy(configs[alibi.WRITTEN](scores)), floor)
    row_floor, row = (
        to_numpy(configs[k](scores)) for k in (alibi.FLOOR_ROW, alibi.OURS_ROW)
    )
    np.testing.assert_array_equal(row_floor, row)


# -- the GPU session's torch scripts ------------------------------------------------


@pytest.mark.skipif(BACKEND != "torch", reason="the DiT block is torch")
def test_timestep_smoke_times_ours_beside_a_dit_block(tmp_path):
    # What ours adds over the formula, as a share of one block and a step.
    path = tmp_path / "timestep.json"
    timestep.main(["--smoke", "--dit-block", "--json", str(path)])
    dit = json.loads(path.read_text())["backends"][BACKEND]["dit_block"]
    ms = {name: row["median_ms"] for name, row in dit["speed"].items()}
    extra = ms["ours"] - ms["float32_formula"]
    assert dit["ours_minus_formula_ms"] == pytest.approx(extra, rel=1e-3, abs=1e-4)
    share = dit["share_of_block"]
    assert share == pytest.approx(extra / ms["dit_block"], rel=1e-3, abs=1e-4)
    assert dit["share_of_28_block_step"] == pytest.approx(share / 28, rel=1e-2)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_compile_bits_references_hold_the_eager_cases():
    # The script compares compiled with eager (on a GPU); here its float64
    # references are checked: every eager case within the engine's bound.
    checked = 0
    for name, (fn, inputs, want) in compile_bits.cases().items():
        got = to_numpy(fn(*inputs))
        if want is None:
            continue
        assert got.shape == want.shape, name
        scale = np.maximum(np.abs(want), 1.0)
        assert np.max(np.abs(got - want) / scale) < 2e-7, name
        checked += 1
    assert checked == 5
