"""Command line: `python -m keras_posenc {demo,export,plot}` (also `keras-posenc`).

Every failure, of the arguments or of the work (a refused path, a full
disk, TensorFlow running out of memory), ends the same way: one line
``keras-posenc <command>: error: <what>`` on stderr and exit status 1,
never a traceback; Ctrl-C gives one line and status 130. Paths and sizes
are checked before anything is trained, drawn or allocated. The parser
is `_cli.parser`, the process handling (quiet imports, Ctrl-C)
`_cli.process`; this module holds the commands.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from keras_posenc import _tensorflow, demo
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import options as _options
from keras_posenc._cli import process as _cli_process
from keras_posenc._cli.parser import PLOT_KINDS, PROG, UsageError, build_parser
from keras_posenc._cli.process import report_interrupt
from keras_posenc._files import atomic as _files

__all__ = ["PLOT_KINDS", "PROG", "build_parser", "main", "report_interrupt"]

# The demo fails if the reloaded SavedModel differs from Keras by more.
DEMO_TOLERANCE = 1e-5
# The SinusoidalOptions fields `export` sets, each from the flag argparse
# names after it (`--max-length` sets `args.max_length`).
_EXPORT_FIELDS = (
    "depth",
    "layout",
    "max_length",
    "max_wavelength",
    "mode",
    "out_of_range",
)
_EXPORT_FLAGS = {name: "--" + name.replace("_", "-") for name in _EXPORT_FIELDS}


def _flag_names(error: Exception, flags: Mapping[str, str]) -> str:
    """`error`'s message with Python argument names replaced by flags."""
    message = str(error)
    for name, flag in flags.items():
        message = message.replace(f"`{name}`", f"`{flag}`")
        message = message.replace(f"Received: {name}=", f"Received: {flag}=")
    return message


def _creatable(path: str) -> None:
    """Fails now, before any work, if `path` cannot be created.

    Its nearest existing ancestor must be a directory we may write in.
    """
    ancestor = os.path.dirname(path)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise NotADirectoryError(
            f"Cannot create {path!r}: {ancestor!r} is not a directory"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise PermissionError(f"Cannot create {path!r}: {ancestor!r} is not writable")


def _in_existing_directory(path: str) -> None:
    """Fails now if the folder of the file `path` is missing (never created)."""
    folder = os.path.dirname(path)
    if not os.path.lexists(folder):
        raise FileNotFoundError(
            f"Cannot write {path!r}: the directory {folder!r} does not exist"
        )
    _creatable(path)


def _far_line(errors: Mapping[str, Any]) -> str:
    """The demo's line on why the library exists: RoPE's error far out."""
    first, end = errors["positions"]
    exponent = first.bit_length() - 1
    start = f"2**{exponent}" if first == 2**exponent else str(first)
    return (
        f"RoPE cos/sin at positions {start} to {start} + {end - first - 1} "
        f"(dim {errors['dim']}), max error against float64: keras_posenc "
        f"{errors['keras_posenc']:.1e}, the usual float32 formula "
        f"{errors['float32_formula']:.1e}"
    )


def _demo(args: argparse.Namespace, argv: list[str]) -> int:
    steps = _arguments.check_positive_int("--steps", args.steps)
    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        out = os.path.join("saved_models", "demo", f"run-{stamp}")
    out = _files.check_path(out, "--out")
    _files.refuse_to_replace(out, args.overwrite, marker=demo.MARKER)
    _creatable(out)
    _cli_process.load_keras(f"{PROG} {args.command}", tensorflow=True)
    report = demo.run(out, max_steps=steps, overwrite=args.overwrite)
    steps = report["steps"]
    if report["export_dir"] is None:
        exported = f"{report['export_route']}; model.keras loads on every backend"
        reloaded = "model.keras reloaded in a fresh process"
    else:
        exported = (
            f"exported SavedModel: {report['export_dir']} "
            f"({report['export_bytes'] / 1024:.0f} KiB; {report['export_route']})"
        )
        reloaded = "SavedModel reloaded in a fresh process without keras_posenc"
    print(
        f"\ntrained {steps} step{'' if steps == 1 else 's'} in "
        f"{report['train_seconds']} s: "
        f"validation accuracy {report['val_accuracy']:.1%}\n"
        f"saved {report['keras_file']}\n"
        f"{exported}\n"
        f"{reloaded}: outputs {report['reload_shape']}, max |difference| = "
        f"{report['max_abs_difference']:.3g}\n"
        f"{_far_line(report['rope_errors_far'])}\n"
        f"report: {os.path.join(out, 'report.json')}"
    )
    if report["max_abs_difference"] > DEMO_TOLERANCE:
        raise RuntimeError(
            f"the reloaded {report['reloaded']} differs from the Keras model by "
            f"{report['max_abs_difference']:.3g} > {DEMO_TOLERANCE:g}"
        )
    return 0


def _rerun_with_tensorflow(argv: list[str]) -> int:
    """Runs the same command under KERAS_BACKEND=tensorflow; passes its output on."""
    if os.environ.get("KERAS_BACKEND") == "tensorflow":
        raise RuntimeError("KERAS_BACKEND=tensorflow did not select TensorFlow")
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    done = subprocess.run(
        [sys.executable, "-m", "keras_posenc", *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


def _export(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        fields = {name: getattr(args, name) for name in _EXPORT_FIELDS}
        options = _options.SinusoidalOptions(merge=None, **fields)
    except ValueError as error:
        raise UsageError(f"{PROG} export", _flag_names(error, _EXPORT_FLAGS)) from None
    out = _files.check_path(args.out, "OUT")
    _files.refuse_to_replace(out, args.overwrite)
    _creatable(out)
    _tensorflow.require("export")
    if _cli_process.load_keras(f"{PROG} {args.command}").backend() != "tensorflow":
        return _rerun_with_tensorflow(argv)
    from keras_posenc.export import export_encoder

    chosen = {
        "mode": options.mode,
        "layout": options.layout,
        "max_wavelength": options.max_wavelength,
        "out_of_range": options.out_of_range,
    }
    if options.max_length is not None:
        chosen["max_length"] = options.max_length
    path = export_encoder(out, options.depth, overwrite=args.overwrite, **chosen)
    print(json.dumps({"exported": path, "depth": options.depth, **chosen}))
    return 0


def _plot(args: argparse.Namespace, argv: list[str]) -> int:
    from keras_posenc import plot

    depth = _arguments.check_depth(args.depth, "--depth")
    waves = {
        "max_wavelength": _arguments.check_wavelength(
            args.max_wavelength, "--max-wavelength"
        )
    }
    plot.file_format(args.out, "--out")
    out = _files.check_path(args.out, "--out")
    _files.refuse_to_replace(out, args.overwrite, kind="file")
    _in_existing_directory(out)
    plot.check_matplotlib()  # before Keras: a missing matplotlib answers at once
    # Sizes first, named as flags (the other kinds are bounded by --depth).
    sized_kinds = {"heatmap": ["heatmap"], "similarity": ["similarity_matrix"]}
    for kind in sized_kinds.get(args.kind, []):
        plot.check_size(kind, args.length, depth, flags=True)
    if args.kind == "precision":
        plot.check_precision_base(waves["max_wavelength"], "--max-wavelength")
    _cli_process.load_keras(f"{PROG} {args.command}")
    sized = {"length": args.length, "depth": depth, **waves}
    if args.kind == "similarity":
        figure, (left, right) = plot.subplots(2, width=11.0)
        plot.similarity(**sized, ax=left)
        plot.similarity_matrix(**sized, ax=right)
    else:
        figure, (ax,) = plot.subplots(1)
        if args.kind == "heatmap":
            plot.heatmap(layout=args.layout, **sized, ax=ax)
        elif args.kind == "wavelengths":
            plot.wavelengths(depth, **waves, ax=ax)
        else:
            plot.precision(depth, **waves, ax=ax)
    print(plot.save(figure, out, overwrite=args.overwrite))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status.

    Args:
        argv: list of str. The arguments after the program name. Defaults
            to `sys.argv[1:]`, for the whole process: then Ctrl-C is ignored
            once the command is done, while Python exits.

    Returns:
        0 on success, 1 on any error (reported in one line on stderr),
        130 when interrupted.

    Example:

    >>> from keras_posenc import cli
    >>> cli.main(["--version"])
    keras-posenc 0.5.3
    0
    """
    whole_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = PROG
    previous = _cli_process.install_interrupt_handler()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else 1
        prog = f"{PROG} {args.command}"
        handler = {"demo": _demo, "export": _export, "plot": _plot}[args.command]
        return handler(args, argv)
    except KeyboardInterrupt:
        status = _cli_process.report_interrupt(prog)
        if whole_process:
            # Python would exit through the atexit handlers of half-loaded
            # native libraries (and, when the interrupt hit code they ran,
            # by re-raising SIGINT instead of returning 130).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status
    except UsageError as error:
        print(f"{error.prog}: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # the one boundary where every failure becomes a line
        print(f"{prog}: error: {_cli_process.first_line(error)}", file=sys.stderr)
        return 1
    finally:
        if whole_process and previous is not None:
            # The command is done; Ctrl-C while Python shuts down (atexit
            # handlers of matplotlib, TensorFlow) would only add a traceback.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        elif previous is not None:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
