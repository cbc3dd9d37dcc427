"""The command line: every error is one line and exit 1; export, plot, demo.

Most tests call `cli.main` in this process (fast, output through capsys);
subprocesses only where a fresh interpreter is the point: the console
script, an export started under KERAS_BACKEND=jax, the demo's reload.
"""

import decimal
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    TOL,
    invalid_value,
    keras,
    needs_tensorflow,
    reference,
    run_python,
)

import keras_posenc
from keras_posenc import _tensorflow, cli, demo
from keras_posenc._checks import options as _options

# Subprocess tests that do not depend on the pass's backend run once.
tensorflow_pass = pytest.mark.skipif(
    BACKEND != "tensorflow" or LEGACY,
    reason="backend-independent subprocess test: run once, in the TensorFlow pass",
)
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3"}
keras3_pass = pytest.mark.skipif(LEGACY, reason="Keras 3 backends only")


def command_line(*argv, env=None, **kwargs):
    """Runs `python -m keras_posenc *argv` as a user would (no log settings)."""
    env = {**os.environ, **(env or {})}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-m", "keras_posenc", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        **kwargs,
    )


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


def assert_refused_leaving_files(workdir, capsys, argv, message):
    """`keras-posenc *argv` fails (exit 1, nothing on stdout) with one error
    line holding `message`, and every file under `workdir` stays as it was."""
    before = snapshot(workdir)
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert message in error_line(err, argv[0])
    assert snapshot(workdir) == before


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


# -- the package: lazy for the command line, registered for everyone else ----------


def test_package_all_and_dir_list_every_public_name():
    # __all__ names what `from keras_posenc import *` gives; dir() shows it.
    names = set(keras_posenc.__all__)
    assert {"SinusoidalPositionEncoding", "RotaryEmbedding", "__version__"} <= names
    assert names <= set(dir(keras_posenc))
    for name in names:
        assert getattr(keras_posenc, name) is not None


def test_unknown_package_attribute_is_an_attribute_error():
    # PEP 562 __getattr__ answers only for the public names.
    with pytest.raises(AttributeError, match="has no attribute 'SinusoidalEncoding'"):
        keras_posenc.SinusoidalEncoding  # noqa: B018


# A dotted name as the README, the docs and the notebooks write it.
DOCUMENTED_NAME = re.compile(r"\bkeras_posenc(?:\.[A-Za-z_]\w*)+")
# Resolves each dotted name in argv after a plain `import keras_posenc`;
# prints those that fail, and the submodules loaded before any lookup.
_RESOLVE_SCRIPT = """
import sys
import keras_posenc
print([m for m in ("keras_posenc.compat", "keras_posenc.plot") if m in sys.modules])
for name in sys.argv[1:]:
    found = keras_posenc
    try:
        for part in name.split(".")[1:]:
            found = getattr(found, part)
    except AttributeError as error:
        print(f"{name}: {error}")
"""


def _documented_names():
    """Every public `keras_posenc.<name>(.<name>)*` in the README, docs, notebooks."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.join(root, "README.md")]
    for folder, suffix in (("docs", ".md"), ("notebooks", ".ipynb")):
        paths += sorted(
            os.path.join(root, folder, f)
            for f in os.listdir(os.path.join(root, folder))
            if f.endswith(suffix)
        )
    names = set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            names.update(DOCUMENTED_NAME.findall(f.read()))
    # Private modules are the design page's, imported by name, never attributes.
    return sorted(
        name
        for name in names
        if not any(p.startswith("_") and not p.endswith("__") for p in name.split("."))
    )


@tensorflow_pass
def test_every_dotted_name_the_docs_use_resolves_after_a_plain_import():
    # `import keras_posenc`, then `keras_posenc.compat.use_exact` or
    # `keras_posenc.plot.heatmap` as the README says, in a fresh process:
    # each submodule loads on first use, as the public names do.
    names = _documented_names()
    assert {"keras_posenc.compat.use_exact", "keras_posenc.plot.heatmap"} <= set(names)
    done = run_python(_RESOLVE_SCRIPT, *names, env={**os.environ, **QUIET})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[]"], done.stdout


def test_submodules_are_listed_by_dir():
    # dir(keras_posenc) names the public submodules as it names the classes.
    assert {"compat", "plot", "demo"} <= set(dir(keras_posenc))


@keras3_pass
def test_import_registers_the_layers_for_keras_files():
    # `import keras_posenc` (not as the command line) registers the layers
    # with Keras at once, so a `.keras` file that uses them loads right after.
    script = (
        "import keras_posenc, keras; print(all(keras.saving.get_registered_object("
        "f'keras_posenc>{n}') is not None for n in "
        "('SinusoidalPositionEncoding', 'RotaryEmbedding', 'AlibiBias')))"
    )
    done = run_python(script, env={**os.environ, **QUIET})
    assert done.stdout.strip() == "True", done.stderr[-2000:]


# -- help and usage -------------------------------------------------------------


def test_help_exits_zero_with_usage(capsys):
    # --help prints the usage and the three commands, and is not an error.
    code, out, err = run(capsys, "--help")
    assert code == 0 and err == ""
    assert out.startswith("usage: keras-posenc")
    assert all(name in out for name in ("demo", "export", "plot"))


def test_help_names_both_layers(capsys):
    # The top-level help says what the package holds: both layers.
    _, out, _ = run(capsys, "--help")
    assert "SinusoidalPositionEncoding" in out and "RotaryEmbedding" in out


def test_version_prints_the_package_version(capsys):
    # --version: the program name and __version__, status 0.
    code, out, err = run(capsys, "--version")
    assert (code, out, err) == (0, f"keras-posenc {keras_posenc.__version__}\n", "")


@tensorflow_pass
def test_help_imports_neither_keras_nor_a_backend():
    # `--help` parses before importing Keras: no keras, tensorflow, jax or
    # torch module is imported (what made it take seconds).
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "keras_posenc", "--help"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: keras-posenc")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    heavy = {"keras", "tensorflow", "jax", "torch", "matplotlib"}
    assert imported and not heavy & imported, heavy & imported


@keras3_pass
def test_commands_print_no_native_log_lines(tmp_path):
    # A plot on this pass's backend, with no TF_CPP_MIN_LOG_LEVEL set:
    # stdout is the path written, stderr is empty (no absl, CUDA or
    # TensorFlow lines).
    pytest.importorskip("matplotlib")
    out = tmp_path / "pe.png"
    done = command_line("plot", "--out", out, "--length", "16", "--depth", "8")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{out}\n", "")


def _commands():
    """The subcommand parsers, by name."""
    (sub,) = [a for a in cli.build_parser()._actions if a.dest == "command"]
    return sub.choices


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_help_exits_zero_and_lists_its_options(capsys, command):
    # `COMMAND --help` prints the command's usage with every option it takes
    # (`demo --help` crashed on the % of "95% validation accuracy").
    code, out, err = run(capsys, command, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"usage: keras-posenc {command}")
    options = {o for a in _commands()[command]._actions for o in a.option_strings}
    assert "--overwrite" in options
    assert [o for o in sorted(options) if o not in out] == []


@pytest.mark.parametrize(
    "argv, unknown",
    [
        (["demo", "--step", "3"], "--step 3"),
        (["export", "e", "--depth", "8", "--max-len", "5"], "--max-len 5"),
        (["plot", "--out", "x.png", "--dep", "8"], "--dep 8"),
        (["demo", "--bogus"], "--bogus"),
    ],
)
def test_unknown_or_abbreviated_options_name_the_command(
    workdir, capsys, argv, unknown
):
    # `--step` is not `--steps`: no abbreviations. An unknown option after a
    # command is reported by that command (was by the top-level program,
    # whose --help does not list it). Nothing runs.
    before = snapshot(workdir)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    command = argv[0]
    assert error_line(err, command) == (
        f"unrecognized arguments: {unknown} (see keras-posenc {command} --help)"
    )
    assert snapshot(workdir) == before


@pytest.mark.parametrize(
    "argv, prog, unknown",
    [
        (["--vers"], "keras-posenc", "--vers"),
        (["export", "enc", "--dep", "64"], "keras-posenc export", "--dep"),
        (["export", "--dep=64", "enc"], "keras-posenc export", "--dep=64"),
        (["plot", "--kin", "heatmap"], "keras-posenc plot", "--kin"),
        (["--bogus", "plot", "--max-wavelength", "-5"], "keras-posenc", "--bogus"),
    ],
)
def test_unknown_option_is_named_even_when_an_argument_is_missing(
    workdir, capsys, argv, prog, unknown
):
    # A missing command or required flag (`--depth`) used to hide the
    # mistake: "the following arguments are required". The unknown option is
    # the user's mistake, named by the parser it was given to; a negative
    # number is a value, not an option.
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    assert err == (
        f"{prog}: error: unrecognized arguments: {unknown} (see {prog} --help)\n"
    )


def test_missing_argument_without_unknown_options_is_still_named(capsys):
    # The scan for unknown options leaves argparse's own message otherwise.
    code, _, err = run(capsys, "export", "enc", "--max-wavelength", "-5")
    assert code == 1
    assert error_line(err, "export") == (
        "the following arguments are required: --depth (see keras-posenc export --help)"
    )


def test_unknown_option_before_the_command_names_the_program(capsys):
    # Given before any command, it is the program's to report.
    code, _, err = run(capsys, "--bogus", "demo")
    assert code == 1
    assert error_line(err, None) == (
        "unrecognized arguments: --bogus (see keras-posenc --help)"
    )


@pytest.mark.slow
@pytest.mark.skipif(
    BACKEND == "tensorflow" or LEGACY,
    reason="on TensorFlow, Keras's own import is the quiet one (tested with plot)",
)
def test_demo_prints_no_native_log_lines(tmp_path):
    # The demo imports TensorFlow on every backend where it is installed
    # (Keras's set_random_seed; the export from JAX): on JAX and torch it
    # printed TensorFlow's start-up lines after Keras had loaded. A one-step
    # budget fails after training: stderr holds that one line and nothing else.
    done = command_line("demo", "--out", tmp_path / "run", "--steps", "1")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("keras-posenc demo: error: the model did not learn")
    # stdout is a pipe: one line per epoch, no progress bar's ANSI escapes.
    assert "\x1b[" not in done.stdout and "\r" not in done.stdout


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


PNG = ["--out", "x.png"]


def invalid(flag, expected, value):
    """The Keras-style message, naming the flag."""
    return invalid_value(flag, expected, repr(value))


POSITIVE = "a positive integer"
DEPTH = "a positive integer <= 65536"
NUMBER = "a finite number > 0"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--steps", "0"], invalid("--steps", POSITIVE, 0)),
        (["demo", "--steps", "-1"], invalid("--steps", POSITIVE, -1)),
        (["demo", "--steps", "2.5"], "argument --steps: expected an integer"),
        (["plot", *PNG, "--length", "0"], invalid("--length", POSITIVE, 0)),
        (["plot", *PNG, "--depth", "0"], invalid("--depth", DEPTH, 0)),
        (["plot", *PNG, "--depth", "2.5"], "argument --depth: expected an integer"),
        (
            ["plot", *PNG, "--max-wavelength", "inf"],
            invalid("--max-wavelength", NUMBER, float("inf")),
        ),
        (["plot", *PNG, "--kind", "pie"], "argument --kind: invalid choice: 'pie'"),
        (["plot"], "the following arguments are required: --out"),
        (["export", "e", "--depth", "0"], invalid("--depth", DEPTH, 0)),
        (["export", "e", "--depth", "65537"], invalid("--depth", DEPTH, 65537)),
        (
            ["export", "e", "--depth", "8", "--mode", "table"],
            "argument --mode: invalid choice: 'table'",
        ),
        (
            ["export", "e", "--depth", "8", "--max-wavelength", "nan"],
            invalid("--max-wavelength", NUMBER, float("nan")),
        ),
        (
            ["export", "e", "--depth", "8", "--max-wavelength", "x"],
            "argument --max-wavelength: expected a number. Received: 'x'",
        ),
        (
            ["export", "e", "--depth", "8", "--mode", "lookup", "--max-length", "-5"],
            invalid("--max-length", "a positive integer <= 2147483520", -5),
        ),
    ],
)
def test_bad_arguments_are_one_line_naming_the_flag(workdir, capsys, argv, message):
    # argparse errors: one line naming the flag and the value, exit 1, no files.
    assert_refused_leaving_files(workdir, capsys, argv, message)


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--mode", "lookup"],
            invalid("--max-length", "a positive integer with mode='lookup'", None),
        ),
        (["--max-length", "5"], "`--max-length`, expected None with mode='compute'"),
        (
            ["--mode", "lookup", "--max-length", str(2**30)],
            "`--max-length`, expected a table of at most 1073741824 bytes",
        ),
    ],
)
def test_export_options_are_checked_by_sinusoidal_options(
    workdir, capsys, monkeypatch, extra, message
):
    # The rules of SinusoidalOptions (max_length with lookup only, table
    # size), named as flags, before any export or Keras work.
    monkeypatch.delenv("KERAS_POSENC_MAX_TABLE_BYTES", raising=False)
    from keras_posenc import export

    monkeypatch.setattr(export, "export_encoder", _never("exported"))
    code, _, err = run(capsys, "export", "enc", "--depth", "8", *extra)
    assert code == 1 and message in error_line(err, "export")
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
    (workdir / "old.png").write_bytes(b"keep me")
    code, _, err = run(capsys, "plot", "--out", "old.png")
    line = error_line(err, "plot")
    assert code == 1 and "Refusing to replace" in line and "--overwrite" in line
    assert (workdir / "old.png").read_bytes() == b"keep me"


def test_plot_into_a_missing_directory_is_one_line(workdir, capsys, monkeypatch):
    # --out in a directory that does not exist: refused, nothing created.
    from keras_posenc import plot

    monkeypatch.setattr(plot, "heatmap", _never("drawn"))
    before = snapshot(workdir)
    code, _, err = run(capsys, "plot", "--out", "missing/deeper/x.png")
    assert code == 1
    assert "the directory" in error_line(err, "plot")
    assert "missing/deeper' does not exist" in error_line(err, "plot")
    assert snapshot(workdir) == before


@pytest.mark.parametrize("name", ["x.txt", "x", "x.svg.bak", "x.jpeg"])
def test_plot_refuses_a_suffix_it_cannot_write(workdir, capsys, name):
    # Only .png, .svg and .pdf: never PNG bytes under another name.
    code, _, err = run(capsys, "plot", "--out", name)
    line = error_line(err, "plot")
    assert code == 1
    assert line == (
        "Received an invalid value for `--out`, expected a file name ending in "
        f".png, .svg, .pdf. Received: --out={name!r}"
    )
    assert not os.path.exists(name)


def test_plot_without_matplotlib_is_one_line_before_keras(workdir, capsys, monkeypatch):
    # Without matplotlib, `plot` says what to install at once: before Keras
    # (and TensorFlow, 8-15 s) would be imported.
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setattr(cli._cli_process, "load_keras", _never("Keras imported"))
    code, _, err = run(capsys, "plot", "--out", "pe.png")
    assert code == 1
    assert error_line(err, "plot") == (
        "keras_posenc.plot needs matplotlib, which is not installed: "
        "pip install matplotlib"
    )
    assert not os.path.exists("pe.png")


def test_plot_precision_refuses_a_base_below_one(workdir, capsys):
    # --max-wavelength 5e-324 for a precision plot: one line, before any
    # numpy work (which printed 18 overflow warnings).
    code, _, err = run(
        capsys, "plot", "--kind", "precision", "--max-wavelength", "5e-324",
        "--out", "p.png",
    )  # fmt: skip
    line = error_line(err, "plot")
    assert code == 1 and line.startswith(
        "Received an invalid value for `--max-wavelength`, expected a number >= 1"
    )
    assert line.endswith("Received: --max-wavelength=5e-324")


def test_plot_overwrite_refuses_a_directory(workdir, capsys):
    # --overwrite replaces a regular file only (kind="file").
    (workdir / "sub.png").mkdir()
    (workdir / "sub.png" / "data.bin").write_bytes(bytes(range(256)))
    code, _, err = run(capsys, "plot", "--out", "sub.png", "--overwrite")
    assert code == 1 and "it is not a regular file" in error_line(err, "plot")
    assert (workdir / "sub.png" / "data.bin").read_bytes() == bytes(range(256))


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
    assert_refused_leaving_files(workdir, capsys, argv, message)


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
            marks=needs_tensorflow,
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


def _interrupt_when_loaded(library, argv, env=None):
    """Starts the command line, sends SIGINT once `library` is mapped in it.

    Polling /proc/PID/maps catches the process in the middle of importing
    that library, whatever the machine's speed. The command starts with
    Ctrl-C's default action, as from a terminal, even when the tests run as
    a background job (which inherits SIGINT ignored, and passes that on).
    """
    env = {**os.environ, **(env or {})}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_posenc", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        with open(f"/proc/{process.pid}/maps") as maps:
            if library in maps.read():
                break
        time.sleep(0.002)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@tensorflow_pass
@pytest.mark.parametrize(
    "library, where",
    [
        ("_multiarray_umath", "importing numpy, before the arguments are read"),
        ("_pywrap_tensorflow_internal", "importing TensorFlow"),
        ("jaxlib", "importing jaxlib, which TensorFlow's import loads"),
    ],
)
def test_ctrl_c_while_importing_is_one_line_and_status_130(tmp_path, library, where):
    # Ctrl-C at any moment of the start: exit status 130 and one line on
    # stderr (was a 40-115 line traceback and death by SIGINT, or a crash
    # inside a native module's initialisation).
    code, out, err = _interrupt_when_loaded(
        library, ["plot", "--out", tmp_path / "x.png"]
    )
    assert code == 130, (where, code, err[-2000:])
    assert err.strip().splitlines() in (
        ["keras-posenc: interrupted"],
        ["keras-posenc plot: interrupted"],
    ), (where, err[-2000:])
    assert out == "" and os.listdir(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@tensorflow_pass
def test_ctrl_c_tests_hold_when_the_suite_runs_in_the_background(tmp_path):
    # A background job (`pytest &`) starts with SIGINT ignored and its
    # children inherit that; the Ctrl-C tests reset it in the command's
    # process, so they test Ctrl-C from a terminal wherever pytest runs.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code, _, err = _interrupt_when_loaded(
            "_multiarray_umath", ["plot", "--out", tmp_path / "x.png"]
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130, err[-2000:]


@tensorflow_pass
def test_unknown_keras_backend_is_one_line():
    # KERAS_BACKEND=foo: Keras refuses to start; one line naming the
    # setting, status 1 (was a 27-line traceback).
    done = command_line("plot", "--out", "never.png", env={"KERAS_BACKEND": "foo"})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "keras-posenc plot: error: Keras cannot start with KERAS_BACKEND='foo': "
        "Unable to import backend : foo"
    ]


@tensorflow_pass
def test_tf_keras_with_jax_is_one_line():
    # TF_USE_LEGACY_KERAS=1 needs Keras 3's TensorFlow backend: with JAX,
    # one line saying so, status 1 (was an 11-line traceback).
    done = command_line(
        "export",
        "never",
        "--depth",
        "8",
        env={"KERAS_BACKEND": "jax", "TF_USE_LEGACY_KERAS": "1"},
    )
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("keras-posenc export: error: TF_USE_LEGACY_KERAS=1 ")
    assert "Received: KERAS_BACKEND='jax'. Set KERAS_BACKEND=tensorflow." in line


# -- export -------------------------------------------------------------------------


def _load(path):
    import tensorflow as tf

    return tf.saved_model.load(str(path))


@needs_tensorflow
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


@pytest.mark.slow
@tensorflow_pass
def test_export_past_a_file_size_limit_names_out(tmp_path):
    # A file-size limit (or a full disk) while TensorFlow writes: one line
    # naming OUT with the system's reason (was TensorFlow's OutOfRangeError
    # naming its temporary file in the hidden staging directory, gone by
    # then), status 1, nothing left beside OUT.
    import resource

    out = tmp_path / "enc"
    limit = 16 * 1024  # below the encoder's saved_model.pb

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = command_line("export", out, "--depth", "8", cwd=tmp_path, preexec_fn=limited)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        f"keras-posenc export: error: [Errno {errno.EFBIG}] "
        f"{os.strerror(errno.EFBIG)}: {str(out)!r}"
    ]
    assert os.listdir(tmp_path) == []


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


@needs_tensorflow
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


def test_export_without_tensorflow_is_one_line_before_any_work(
    workdir, capsys, monkeypatch
):
    # A JAX- or torch-only install cannot write a SavedModel: one line saying
    # what it needs, before Keras starts or a re-run under TensorFlow.
    monkeypatch.setattr(_tensorflow, "installed", lambda: False)
    monkeypatch.setattr(cli._cli_process, "load_keras", _never("Keras loaded"))
    before = snapshot(workdir)
    code, out, err = run(capsys, "export", "enc", "--depth", "8")
    assert (code, out) == (1, "")
    assert error_line(err, "export").startswith(
        "export writes a SavedModel, which needs TensorFlow, and TensorFlow is "
        "not installed: `pip install tensorflow`."
    )
    assert snapshot(workdir) == before


@tensorflow_pass
def test_command_on_keras_default_backend_without_tensorflow_says_what_to_set(
    tmp_path,
):
    # KERAS_BACKEND unset in a JAX-only install: one line naming the
    # setting (was "No module named 'tensorflow'").
    from test_tensorflow import WITHOUT_TENSORFLOW

    # As the `keras-posenc` script starts it (argv[0] tells the package).
    script = WITHOUT_TENSORFLOW + (
        "sys.argv[0] = 'keras-posenc'\n"
        "from keras_posenc import cli; sys.exit(cli.main())"
    )
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    done = run_python(
        script,
        "plot",
        "--out",
        str(tmp_path / "x.png"),
        env={**env, "KERAS_HOME": str(tmp_path / "keras")},
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        f"keras-posenc plot: error: {_tensorflow.NOT_INSTALLED_AS_BACKEND}"
    ]


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


@pytest.mark.parametrize(
    "name, start",
    [("pe.svg", b"<?xml"), ("pe.pdf", b"%PDF-"), ("PE.PNG", b"\x89PNG\r\n\x1a\n")],
)
def test_plot_writes_the_format_its_suffix_names(tmp_path, capsys, name, start):
    # .svg is SVG, .pdf is PDF (was PNG bytes whatever the suffix).
    pytest.importorskip("matplotlib")
    out = tmp_path / name
    code, _, err = run(capsys, "plot", "--length", "16", "--depth", "8", "--out", out)
    assert code == 0, err
    assert out.read_bytes().startswith(start)


# -- demo -------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, -1, 2.5, "6", True])
def test_demo_run_checks_max_steps(tmp_path, steps):
    # demo.run refuses a budget that is not a positive int, before training.
    with pytest.raises(ValueError, match=r"`max_steps`, expected a positive integer"):
        demo.run(tmp_path / "out", max_steps=steps)
    assert not os.listdir(tmp_path)


def test_demo_training_output_has_no_escapes_when_not_a_terminal(capsys):
    # Keras draws its bar with ANSI escapes on every POSIX stdout; captured
    # (not a terminal), training prints one plain line per epoch instead.
    keras.utils.set_random_seed(0)
    demo.train(demo.build_model(), max_steps=1, target=None)
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "\r" not in out
    (line,) = out.splitlines()
    assert " - val_accuracy: " in line


def test_demo_that_does_not_learn_fails_in_one_line(workdir, capsys, monkeypatch):
    # At chance after its budget, the demo is an error (never "success"):
    # one line with the accuracy and the steps, status 1, nothing written.
    monkeypatch.setattr(
        demo, "train", lambda *a, **k: {"val_accuracy": [0.5, 0.479], "steps": 1}
    )
    monkeypatch.setattr(demo, "_export", _never("exported"))
    code, out, err = run(capsys, "demo", "--out", "run", "--steps", "1")
    assert code == 1
    assert error_line(err, "demo") == (
        "the model did not learn: validation accuracy 47.9% after 1 training "
        "step (target 95%, chance 50%); nothing was exported"
    )
    assert not os.path.exists("run")


@pytest.mark.slow
@keras3_pass
@needs_tensorflow
def test_demo_learns_exports_and_reloads_apart(tmp_path, capsys):
    # The README's main job, on this pass's backend: learn to 95% within
    # the step budget, save, export, reload in a process where keras_posenc
    # cannot be imported, and get the same outputs.
    out = tmp_path / "demo"
    code, stdout, err = run(capsys, "demo", "--out", out)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["backend"] == BACKEND
    assert report["val_accuracy"] >= demo.TARGET_ACCURACY
    assert report["steps"] <= demo.MAX_STEPS
    assert f"trained {report['steps']} steps in " in stdout
    assert "reloaded in a fresh process without keras_posenc" in stdout
    assert cli._far_line(report["rope_errors_far"]) in stdout
    assert report["rope_errors_far"]["keras_posenc"] <= TOL
    assert report["max_abs_difference"] <= cli.DEMO_TOLERANCE
    assert report["reload_shape"] == [64, 1]
    assert sorted(os.listdir(out)) == [
        "check_inputs.npy",
        "check_outputs.npy",
        "model.keras",
        "report.json",
        "saved_model",
    ]
    assert sorted(os.listdir(tmp_path)) == ["demo"]  # no staging debris
    # Not replaced unasked; refused before training.
    code, _, err = run(capsys, "demo", "--out", out)
    assert code == 1 and "--overwrite" in error_line(err, "demo")


@pytest.mark.slow
@keras3_pass
def test_demo_without_tensorflow_keeps_the_keras_file_and_says_why(
    tmp_path, capsys, monkeypatch
):
    # Where TensorFlow is missing no SavedModel can be written: the demo
    # saves model.keras, says why there is no SavedModel, and reloads the
    # .keras file in a fresh process on this backend for its check.
    monkeypatch.setattr(_tensorflow, "installed", lambda: False)
    monkeypatch.setattr(
        demo,
        "train",
        lambda *a, **k: {"val_accuracy": [0.99], "loss": [0.1], "steps": 1},
    )
    monkeypatch.setattr(demo, "_export", _never("exported"))
    out = tmp_path / "demo"
    code, stdout, err = run(capsys, "demo", "--out", out)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert (report["export_dir"], report["reloaded"]) == (None, "model.keras")
    assert report["export_route"] == demo.NO_SAVED_MODEL
    assert report["max_abs_difference"] == 0.0
    assert f"{demo.NO_SAVED_MODEL}; model.keras loads on every backend" in stdout
    assert "model.keras reloaded in a fresh process: outputs [64, 1]" in stdout
    assert sorted(os.listdir(out)) == [
        "check_inputs.npy",
        "check_outputs.npy",
        "model.keras",
        "report.json",
    ]


def test_demo_far_position_errors_match_an_independent_float64_reference():
    # The demo's line on why the library exists is measured, not written
    # down: RoPE's cos/sin from 2**20 are within the bound here, and the
    # usual float32 formula (angles p * w formed in float32) is as far off
    # as the tests' own float64 reference says.
    errors = demo.far_position_errors()
    positions = np.arange(demo.FAR_POSITION, demo.FAR_POSITION + demo.FAR_WINDOW)
    exact = reference(positions, demo.FAR_DIM)
    omega = (10000.0 ** (-2.0 * np.arange(demo.FAR_DIM // 2) / demo.FAR_DIM)).astype(
        np.float32
    )
    angle = positions.astype(np.float32)[:, None] * omega
    usual = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    expected = np.abs(usual - np.concatenate([exact[:, 0::2], exact[:, 1::2]], 1))
    assert errors["keras_posenc"] <= TOL
    assert errors["float32_formula"] == pytest.approx(expected.max(), rel=1e-3)
    assert errors["float32_formula"] > 1e-2


def test_demo_far_line_compares_both_errors():
    # The one line the demo prints from its report.
    line = cli._far_line(
        {
            "positions": [2**20, 2**20 + 64],
            "dim": 128,
            "keras_posenc": 9.92e-8,
            "float32_formula": 0.0590,
        }
    )
    assert line == (
        "RoPE cos/sin at positions 2**20 to 2**20 + 63 (dim 128), max error "
        "against float64: keras_posenc 9.9e-08, the usual float32 formula 5.9e-02"
    )


def test_plural_counts():
    # "1 step", "2 steps" (was "trained 1 epochs").
    assert [demo._plural(n, "step") for n in (0, 1, 2)] == [
        "0 steps",
        "1 step",
        "2 steps",
    ]


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "torch", reason="the torch export route")
@needs_tensorflow
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
