"""The command line: every error is one line and exit 1; export, plot, demo.

Most tests call `cli.main` in this process (fast, output through capsys);
subprocesses only where a fresh interpreter is the point: the console
script, an export started under KERAS_BACKEND=jax, the demo's reload.
"""

import decimal
import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, TOL, reference

from keras_posenc import _options, cli, demo

# Subprocess tests that do not depend on the pass's backend run once.
tensorflow_pass = pytest.mark.skipif(
    BACKEND != "tensorflow" or LEGACY,
    reason="backend-independent subprocess test: run once, in the TensorFlow pass",
)
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}


def run(capsys, *argv):
    """`keras-posenc *argv` in this process: (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err, command):
    """The one stderr line of a failed command (asserts there is only one)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    prefix = f"keras-posenc {command}: error: " if command else "keras-posenc: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0][len(prefix) :]


def snapshot(root):
    """Every file under `root` with its bytes, and every directory."""
    found = {}
    for here, dirs, files in os.walk(root):
        for d in dirs:
            found[os.path.relpath(os.path.join(here, d), root)] = "<dir>"
        for f in files:
            with open(os.path.join(here, f), "rb") as handle:
                found[os.path.relpath(os.path.join(here, f), root)] = handle.read()
    return found


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A cwd holding files a careless overwrite would destroy."""
    (tmp_path / "notes.txt").write_text("keep me\n")
    (tmp_path / "saved_model.pb").write_bytes(b"\x00not a real model")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data.bin").write_bytes(bytes(range(256)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- help and usage -------------------------------------------------------------


def test_help_exits_zero_with_usage(capsys):
    # --help prints the usage and the three commands, and is not an error.
    code, out, err = run(capsys, "--help")
    assert code == 0 and err == ""
    assert out.startswith("usage: keras-posenc")
    assert all(name in out for name in ("demo", "export", "plot"))


def test_missing_command_is_one_line(capsys):
    # No command: one line naming COMMAND, exit 1, no usage block.
    code, _, err = run(capsys)
    assert code == 1
    assert "the following arguments are required: COMMAND" in error_line(err, None)


def test_choices_reuse_the_allowed_value_tuples():
    # --mode, --layout and --out-of-range offer exactly the tuples of _options.
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    choices = {
        (name, action.dest): action.choices
        for name, command in sub.choices.items()
        for action in command._actions
        if action.choices is not None
    }
    assert choices[("export", "mode")] is _options.MODES
    assert choices[("export", "layout")] is _options.LAYOUTS
    assert choices[("export", "out_of_range")] is _options.OUT_OF_RANGE
    assert choices[("plot", "layout")] is _options.LAYOUTS


NUMBER = "expected a finite number > 0. Received: "
DEPTH = "expected an integer in [1, 65536]. Received: "
POSITIVE = "expected an integer >= 1. Received: "
PNG = ["--out", "x.png"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--seconds", "-1"], f"argument --seconds: {NUMBER}'-1'"),
        (["demo", "--seconds", "nan"], f"argument --seconds: {NUMBER}'nan'"),
        (["demo", "--seconds", "inf"], f"argument --seconds: {NUMBER}'inf'"),
        (["demo", "--seconds", "0"], f"argument --seconds: {NUMBER}'0'"),
        (["plot", *PNG, "--length", "0"], f"argument --length: {POSITIVE}'0'"),
        (["plot", *PNG, "--depth", "2.5"], f"argument --depth: {DEPTH}'2.5'"),
        (["plot", *PNG, "--kind", "pie"], "argument --kind: invalid choice: 'pie'"),
        (["plot"], "the following arguments are required: --out"),
        (["export", "e", "--depth", "0"], f"argument --depth: {DEPTH}'0'"),
        (["export", "e", "--depth", "65537"], f"argument --depth: {DEPTH}'65537'"),
        (
            ["export", "e", "--depth", "8", "--mode", "table"],
            "argument --mode: invalid choice: 'table'",
        ),
        (
            ["export", "e", "--depth", "8", "--max-wavelength", "nan"],
            f"argument --max-wavelength: {NUMBER}'nan'",
        ),
        (
            ["export", "e", "--depth", "8", "--max-length", "-5"],
            f"argument --max-length: {POSITIVE}'-5'",
        ),
    ],
)
def test_bad_arguments_are_one_line_naming_the_flag(workdir, capsys, argv, message):
    # argparse errors: one line naming the flag and the value, exit 1, no files.
    before = snapshot(workdir)
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert message in error_line(err, argv[0])
    assert snapshot(workdir) == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mode", "lookup"], "--mode lookup needs --max-length"),
        (["--max-length", "5"], "--max-length needs --mode lookup"),
    ],
)
def test_export_max_length_goes_with_lookup(workdir, capsys, extra, message):
    # --max-length and --mode lookup come together, checked before any export.
    code, _, err = run(capsys, "export", "enc", "--depth", "8", *extra)
    assert code == 1 and error_line(err, "export") == message
    assert not os.path.exists("enc")


# -- paths: checked first, never destroyed ---------------------------------------


@pytest.mark.parametrize(
    "out, message",
    [
        ("", "Received an invalid value for `OUT`, expected a non-empty str"),
        (".", "it is the current directory or one of its ancestors"),
        ("..", "it is the current directory or one of its ancestors"),
    ],
)
def test_export_with_overwrite_never_touches_cwd(workdir, capsys, out, message):
    # `export "" / . / .. --overwrite` refuse in one line; every file stays as it was.
    before = snapshot(workdir)
    code, _, err = run(capsys, "export", out, "--depth", "8", "--overwrite")
    assert code == 1 and message in error_line(err, "export")
    assert snapshot(workdir) == before


def test_export_refuses_a_file_or_foreign_directory_even_with_overwrite(
    workdir, capsys
):
    # --overwrite replaces a SavedModel only: not a file, not any directory.
    before = snapshot(workdir)
    code, _, err = run(capsys, "export", "notes.txt", "--depth", "8", "--overwrite")
    assert code == 1 and "not a SavedModel directory" in error_line(err, "export")
    code, _, err = run(capsys, "export", "sub", "--depth", "8", "--overwrite")
    assert code == 1 and "not a SavedModel directory" in error_line(err, "export")
    assert snapshot(workdir) == before


def test_plot_refuses_an_existing_file_without_overwrite(workdir, capsys, monkeypatch):
    # An existing --out is refused before drawing, naming --overwrite.
    from keras_posenc import plot

    monkeypatch.setattr(plot, "heatmap", _never("drawn"))
    code, _, err = run(capsys, "plot", "--out", "notes.txt")
    line = error_line(err, "plot")
    assert code == 1 and "Refusing to replace" in line and "--overwrite" in line
    assert (workdir / "notes.txt").read_text() == "keep me\n"


def test_plot_overwrite_refuses_a_directory(workdir, capsys):
    # --overwrite replaces a regular file only (kind="file").
    code, _, err = run(capsys, "plot", "--out", "sub", "--overwrite")
    assert code == 1 and "it is not a regular file" in error_line(err, "plot")
    assert (workdir / "sub" / "data.bin").read_bytes() == bytes(range(256))


def _never(what):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} before the path was checked")

    return fail


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--out", "notes.txt/run"], "notes.txt' is not a directory"),
        (["demo", "--out", "notes.txt"], "Refusing to replace the existing path"),
        (["demo", "--out", "notes.txt", "--overwrite"], "Refusing to overwrite"),
        (["demo", "--out", "sub", "--overwrite"], "no report.json inside"),
        (["demo", "--out", ""], "Received an invalid value for `--out`"),
        (["plot", "--out", "notes.txt/x.png"], "notes.txt' is not a directory"),
        (["export", "notes.txt/enc", "--depth", "8"], "notes.txt' is not a directory"),
    ],
)
def test_unwritable_out_fails_before_any_work(
    workdir, capsys, monkeypatch, argv, message
):
    # A bad output location is reported before training, drawing or exporting.
    monkeypatch.setattr(demo, "train", _never("trained"))
    monkeypatch.setattr(demo, "build_model", _never("built a model"))
    from keras_posenc import export, plot

    monkeypatch.setattr(export, "export_encoder", _never("exported"))
    for name in ("heatmap", "similarity", "wavelengths", "precision"):
        monkeypatch.setattr(plot, name, _never("drawn"))
    before = snapshot(workdir)
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert message in error_line(err, argv[0])
    assert snapshot(workdir) == before


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes into read-only directories",
)
def test_demo_out_in_a_read_only_directory_fails_before_training(
    workdir, capsys, monkeypatch
):
    # Permission is checked before training.
    monkeypatch.setattr(demo, "train", _never("trained"))
    os.chmod(workdir / "sub", 0o555)
    try:
        code, _, err = run(capsys, "demo", "--out", "sub/run")
    finally:
        os.chmod(workdir / "sub", 0o755)
    assert code == 1 and "is not writable" in error_line(err, "demo")


# -- sizes: checked before anything is allocated ---------------------------------


def test_plot_similarity_refuses_a_huge_matrix_naming_length_and_bytes(workdir, capsys):
    # 100000 positions: a 74.5 GiB float64 matrix, refused up front.
    code, _, err = run(
        capsys, "plot", "--kind", "similarity", "--length", "100000", "--out", "s.png"
    )
    line = error_line(err, "plot")
    assert code == 1
    assert "`--length`" in line and "at most 4096 positions" in line
    assert "80000000000 bytes (74.5 GiB)" in line
    assert not os.path.exists("s.png")


def test_plot_heatmap_refuses_too_many_cells(workdir, capsys):
    # length x depth beyond 2**24 cells is refused, naming --length.
    code, _, err = run(
        capsys, "plot", "--length", "65537", "--depth", "256", "--out", "h.png"
    )
    line = error_line(err, "plot")
    assert code == 1 and "`--length`" in line and "16777216 cells" in line
    assert "134219776 bytes" in line


@pytest.mark.parametrize("kind", ["heatmap", "similarity"])
def test_plot_length_zero_blames_length(workdir, capsys, kind):
    # --length 0 names --length, never `origin`.
    code, _, err = run(
        capsys, "plot", "--kind", kind, "--length", "0", "--out", "x.png"
    )
    line = error_line(err, "plot")
    assert code == 1 and "--length" in line and "origin" not in line


# -- every failure of the work is one line ----------------------------------------


def _tf_out_of_disk():
    import tensorflow as tf

    return tf.errors.ResourceExhaustedError(
        None, None, "/tmp/x; No space left on device\n\t [[{{node SaveV2}}]]"
    )


@pytest.mark.parametrize(
    "make_error, message",
    [
        (MemoryError, "MemoryError"),
        (
            lambda: OSError(errno.ENOSPC, "No space left on device", "x.png"),
            "[Errno 28] No space left on device: 'x.png'",
        ),
        (
            lambda: decimal.InvalidOperation([decimal.InvalidOperation]),
            "InvalidOperation: [<class 'decimal.InvalidOperation'>]",
        ),
        (lambda: RuntimeError("first line\n  second line"), "RuntimeError: first line"),
        (lambda: ValueError("\nKeras-style message\nmore"), "Keras-style message"),
        (lambda: ValueError(""), "ValueError"),
        pytest.param(
            _tf_out_of_disk,
            "ResourceExhaustedError: /tmp/x; No space left on device",
            id="tf-ResourceExhaustedError",
        ),
    ],
)
def test_any_exception_becomes_one_line_and_exit_1(
    workdir, capsys, monkeypatch, make_error, message
):
    # Whatever the work raises: exit 1 and its first line, never a traceback.
    from keras_posenc import plot

    def fail(*args, **kwargs):
        raise make_error()

    monkeypatch.setattr(plot, "heatmap", fail)
    code, out, err = run(capsys, "plot", "--out", "x.png")
    assert code == 1 and out == ""
    assert error_line(err, "plot") == message


def test_keyboard_interrupt_exits_130_with_one_line(workdir, capsys, monkeypatch):
    # Ctrl-C: status 130 and one line, no traceback.
    from keras_posenc import plot

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plot, "heatmap", interrupted)
    code, _, err = run(capsys, "plot", "--out", "x.png")
    assert code == 130
    assert err.strip().splitlines() == ["keras-posenc plot: interrupted"]


# -- export -------------------------------------------------------------------------


def _load(path):
    import tensorflow as tf

    return tf.saved_model.load(str(path))


def test_export_writes_a_standalone_encoder(tmp_path, capsys):
    # A lookup encoder whose two signatures equal the float64 reference
    # (re-run under TensorFlow when this pass's backend is another).
    out = tmp_path / "enc"
    code, stdout, err = run(
        capsys,
        "export", out, "--depth", "6", "--mode", "lookup", "--max-length", "50",
        "--layout", "concatenated",
    )  # fmt: skip
    assert code == 0, err
    printed = json.loads(stdout.strip().splitlines()[-1])
    assert printed["exported"] == str(out) and printed["mode"] == "lookup"
    import tensorflow as tf

    loaded = _load(out)
    positions = np.array([[0, 1, 2], [7, 8, 49]], "int32")
    serve = loaded.signatures["serving_default"](positions=tf.constant(positions))
    np.testing.assert_allclose(
        serve["encoding"].numpy(),
        reference(positions, 6, layout="concatenated"),
        rtol=0,
        atol=TOL,
    )
    table = loaded.signatures["table"](
        length=tf.constant(4), start_index=tf.constant(10)
    )
    np.testing.assert_allclose(
        table["encoding"].numpy(),
        reference(10 + np.arange(4), 6, layout="concatenated"),
        rtol=0,
        atol=TOL,
    )


def test_export_refuses_an_existing_encoder_then_replaces_it_when_asked(
    tmp_path, capsys, monkeypatch
):
    # Without --overwrite: one line naming --overwrite, nothing exported.
    out = tmp_path / "enc"
    out.mkdir()
    (out / "saved_model.pb").write_bytes(b"old")
    from keras_posenc import export

    monkeypatch.setattr(export, "export_encoder", _never("exported"))
    code, _, err = run(capsys, "export", out, "--depth", "6")
    line = error_line(err, "export")
    assert code == 1 and "Refusing to replace" in line and "--overwrite" in line
    assert (out / "saved_model.pb").read_bytes() == b"old"


def test_rerun_under_tensorflow_passes_argv_output_and_status_through(
    capsys, monkeypatch
):
    # On another backend, export re-runs the same argv with
    # KERAS_BACKEND=tensorflow and hands on its stdout, stderr and status.
    import keras

    calls = []

    def fake_run(command, env, capture_output, text):
        calls.append((command, env["KERAS_BACKEND"]))
        return subprocess.CompletedProcess(command, 3, "child out\n", "child err\n")

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    argv = ["export", "enc-never-written", "--depth", "8"]
    assert cli.main(argv) == 3
    assert calls == [([sys.executable, "-m", "keras_posenc", *argv], "tensorflow")]
    assert capsys.readouterr() == ("child out\n", "child err\n")
    assert not os.path.exists("enc-never-written")


@pytest.mark.slow
@tensorflow_pass
def test_export_under_jax_reruns_under_tensorflow(tmp_path):
    # `KERAS_BACKEND=jax python -m keras_posenc export` works: the command
    # re-runs itself under TensorFlow and the SavedModel is the reference.
    env = dict(os.environ, KERAS_BACKEND="jax", **QUIET)
    env.pop("TF_USE_LEGACY_KERAS", None)
    out = tmp_path / "enc"
    done = subprocess.run(
        [sys.executable, "-m", "keras_posenc", "export", str(out), "--depth", "5"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["exported"] == str(out)
    import tensorflow as tf

    positions = np.array([[0, 3, -7, 2**31 - 1]], "int32")
    got = _load(out).signatures["serving_default"](positions=tf.constant(positions))
    np.testing.assert_allclose(
        got["encoding"].numpy()[:, :3], reference(positions[:, :3], 5), atol=TOL
    )


def test_console_script_is_installed_and_runs_main():
    # `keras-posenc` (setup.cfg console_scripts) is installed and runs cli.main.
    from importlib.metadata import entry_points

    script = shutil.which("keras-posenc")
    points = [
        e for e in entry_points(group="console_scripts") if e.name == "keras-posenc"
    ]
    if script is None or not points:
        pytest.skip("keras-posenc is not installed as a console script")
    assert [p.value for p in points] == ["keras_posenc.cli:main"]
    assert points[0].load() is cli.main
    assert os.access(script, os.X_OK)


# -- plot -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", cli.PLOT_KINDS)
def test_plot_writes_a_png(tmp_path, capsys, kind):
    # Each kind writes a real PNG at --out and prints its path; nothing else.
    pytest.importorskip("matplotlib")
    out = tmp_path / f"{kind}.png"
    code, stdout, err = run(
        capsys, "plot", "--kind", kind, "--length", "32", "--depth", "16", "--out", out
    )
    assert code == 0, err
    assert stdout.strip() == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == [f"{kind}.png"]


# -- demo -------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), "6", True])
def test_demo_run_checks_seconds(tmp_path, seconds):
    # demo.run refuses a budget that is not a finite number > 0, before training.
    with pytest.raises(ValueError, match=r"`seconds`, expected a finite number > 0"):
        demo.run(tmp_path / "out", seconds=seconds)
    assert not os.listdir(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND != "tensorflow", reason="trains a model: run once, on TensorFlow"
)
def test_demo_trains_exports_and_reloads_apart(tmp_path, capsys):
    # The README's main job: train, save, export, reload in a process where
    # keras_posenc cannot be imported, and get the same outputs.
    out = tmp_path / "demo"
    code, stdout, err = run(capsys, "demo", "--out", out, "--seconds", "1")
    assert code == 0, err
    assert "reloaded in a fresh process without keras_posenc" in stdout
    report = json.loads((out / "report.json").read_text())
    assert report["max_abs_difference"] <= cli.DEMO_TOLERANCE
    assert report["reload_shape"] == [64, 1]
    assert report["backend"] == ("tf-keras" if LEGACY else "tensorflow")
    assert 0.0 <= report["val_accuracy"] <= 1.0
    assert sorted(os.listdir(out)) == [
        "check_inputs.npy",
        "check_outputs.npy",
        "model.keras",
        "report.json",
        "saved_model",
    ]
    assert sorted(os.listdir(tmp_path)) == ["demo"]  # no staging debris
    # Not replaced unasked; refused before training.
    code, _, err = run(capsys, "demo", "--out", out, "--seconds", "1")
    assert code == 1 and "--overwrite" in error_line(err, "demo")


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "torch", reason="the torch export route")
def test_torch_model_exports_through_a_tensorflow_subprocess(tmp_path):
    # torch cannot write SavedModels: the demo reloads its .keras file under
    # TensorFlow and exports there; the SavedModel answers as the torch model.
    model = demo.build_model()
    keras_path = str(tmp_path / "model.keras")
    model.save(keras_path)
    export_dir = str(tmp_path / "saved_model")
    demo.export_from_keras_file(keras_path, export_dir)
    x, _ = demo.make_data(8, seed=5)
    reloaded = demo.reload_in_fresh_process(export_dir, x, str(tmp_path))
    expected = np.asarray(model.predict(x, verbose=0))
    np.testing.assert_allclose(reloaded, expected, rtol=0, atol=1e-6)
