"""Command line: `python -m keras_posenc {demo,export,plot}` (also `keras-posenc`).

Every failure, of the arguments or of the work (a refused path, a full
disk, TensorFlow running out of memory), ends the same way: one line
``keras-posenc <command>: error: <what>`` on stderr and exit status 1,
never a traceback; Ctrl-C gives one line and status 130. Paths and sizes
are checked before anything is trained, drawn or allocated.
"""

import argparse
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType, ModuleType
from typing import Any, NoReturn

from keras_posenc import __version__, _arguments, _files, _options, demo

PROG = "keras-posenc"
DESCRIPTION = """\
Exact position encodings for Keras 3 (TensorFlow, JAX, PyTorch), within 2e-7
of the exact values at every int32 position: the sinusoidal encoding of
Vaswani et al. (2017), keras_posenc.SinusoidalPositionEncoding, and rotary
embeddings (RoPE, Su et al. 2021), keras_posenc.RotaryEmbedding.

Commands:
  demo    train a small model that needs positions, export it as a SavedModel,
          reload it in a fresh process and compare outputs
  export  write a standalone sinusoidal encoding SavedModel (positions in,
          encoding out)
  plot    draw the sinusoidal table, its wavelengths, similarity or precision
          to a PNG, SVG or PDF file

Any error prints one line on stderr and exits with status 1; Ctrl-C exits
with status 130.
"""
PLOT_KINDS = ("heatmap", "wavelengths", "similarity", "precision")
# The demo fails if the reloaded SavedModel differs from Keras by more.
DEMO_TOLERANCE = 1e-5
INTERRUPTED = 130
# Flags named after the SinusoidalOptions fields they set.
_EXPORT_FLAGS = {
    "depth": "--depth",
    "layout": "--layout",
    "max_length": "--max-length",
    "max_wavelength": "--max-wavelength",
    "mode": "--mode",
    "out_of_range": "--out-of-range",
}


class _UsageError(Exception):
    """A bad command line, reported like any other error."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(self.prog, f"{message} (see {self.prog} --help)")


def _integer(text: str) -> int:
    """An argparse type: any integer (its rules are checked after parsing)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer. Received: {text!r}"
        ) from None


def _number(text: str) -> float:
    """An argparse type: any float (its rules are checked after parsing)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number. Received: {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `keras-posenc` (errors raise, never exit)."""
    parser = _Parser(
        prog=PROG,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo_parser = sub.add_parser(
        "demo",
        help="train, export, reload apart, compare",
        description="Trains a 16-token 'is the 1 before the 2?' classifier (with "
        "SinusoidalPositionEncoding) on the configured Keras backend until "
        f"{demo.TARGET_ACCURACY:.0%} validation accuracy, saves it as model.keras, "
        "exports it as a SavedModel (on torch: by reloading model.keras under "
        "TensorFlow in a subprocess), reloads that in a fresh process where "
        "keras_posenc cannot be imported, and compares outputs. Writes DIR "
        "atomically. Fails (status 1, nothing written) if the model does not "
        "learn within the step budget.",
    )
    demo_parser.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: a new saved_models/demo/run-<time>)",
    )
    demo_parser.add_argument(
        "--steps",
        type=_integer,
        default=demo.MAX_STEPS,
        help=f"training budget in steps of {demo.BATCH_SIZE} sequences; training "
        f"stops early at {demo.TARGET_ACCURACY:.0%} validation accuracy "
        f"(default: {demo.MAX_STEPS})",
    )
    demo_parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing demo DIR"
    )

    export = sub.add_parser(
        "export",
        help="write a standalone sinusoidal encoding SavedModel",
        description="Writes a SavedModel with two int32-in, float32-out signatures: "
        "serving_default(positions[batch, length]) -> "
        "{'encoding': [batch, length, depth]} "
        "and table(length, start_index) -> {'encoding': [length, depth]}. "
        "It loads with tf.saved_model.load; keras_posenc is not needed to use it. "
        "It is built with TensorFlow whatever KERAS_BACKEND says (another "
        "backend re-runs the command with KERAS_BACKEND=tensorflow).",
    )
    export.add_argument("out", metavar="OUT", help="directory to create")
    export.add_argument(
        "--depth",
        type=_integer,
        required=True,
        help=f"width of the encoding, in [1, {_arguments.MAX_DEPTH}]",
    )
    export.add_argument("--mode", choices=_options.MODES, default=_options.MODES[0])
    export.add_argument(
        "--max-length", type=_integer, help="table rows (needed by --mode lookup)"
    )
    export.add_argument(
        "--layout", choices=_options.LAYOUTS, default=_options.LAYOUTS[0]
    )
    export.add_argument("--max-wavelength", type=_number, default=10000.0)
    export.add_argument(
        "--out-of-range",
        choices=_options.OUT_OF_RANGE,
        default=_options.OUT_OF_RANGE[0],
        help="lookup mode: raise, or compute rows past the table",
    )
    export.add_argument(
        "--overwrite", action="store_true", help="replace an existing SavedModel OUT"
    )

    plot = sub.add_parser(
        "plot",
        help="draw the sinusoidal encoding (needs the 'plot' extra)",
        description="Draws one picture of the sinusoidal encoding to FILE, "
        "written atomically in an existing directory, in the format its suffix "
        "names (.png, .svg or .pdf). Needs matplotlib: "
        "pip install 'keras-posenc[plot]'.",
    )
    plot.add_argument("--kind", choices=PLOT_KINDS, default=PLOT_KINDS[0])
    plot.add_argument(
        "--length",
        type=_integer,
        default=128,
        help="positions, for heatmap and similarity (default: 128); at most "
        "length x depth = 2**24 cells, and 4096 positions for similarity",
    )
    plot.add_argument(
        "--depth",
        type=_integer,
        default=64,
        help=f"dimensions, in [1, {_arguments.MAX_DEPTH}] (default: 64)",
    )
    plot.add_argument(
        "--layout",
        choices=_options.LAYOUTS,
        default=_options.LAYOUTS[0],
        help="heatmap column order",
    )
    plot.add_argument("--max-wavelength", type=_number, default=10000.0)
    plot.add_argument(
        "--out", required=True, metavar="FILE", help="file to write: .png, .svg, .pdf"
    )
    plot.add_argument(
        "--overwrite", action="store_true", help="replace an existing FILE"
    )
    return parser


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


def _demo(args: argparse.Namespace, argv: list[str]) -> int:
    steps = _arguments.check_positive_int("--steps", args.steps)
    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        out = os.path.join("saved_models", "demo", f"run-{stamp}")
    out = _files.check_path(out, "--out")
    _files.refuse_to_replace(out, args.overwrite, marker=demo.MARKER)
    _creatable(out)
    _load_keras(args)
    report = demo.run(out, max_steps=steps, overwrite=args.overwrite)
    steps = report["steps"]
    print(
        f"\ntrained {steps} step{'' if steps == 1 else 's'} in "
        f"{report['train_seconds']} s: "
        f"validation accuracy {report['val_accuracy']:.1%}\n"
        f"saved {report['keras_file']}\n"
        f"exported SavedModel: {report['export_dir']} "
        f"({report['export_bytes'] / 1024:.0f} KiB; {report['export_route']})\n"
        "reloaded in a fresh process without keras_posenc: outputs "
        f"{report['reload_shape']}, max |difference| = "
        f"{report['max_abs_difference']:.3g}\n"
        f"report: {os.path.join(out, 'report.json')}"
    )
    if report["max_abs_difference"] > DEMO_TOLERANCE:
        raise RuntimeError(
            f"the reloaded SavedModel differs from the Keras model by "
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
        options = _options.SinusoidalOptions(
            max_wavelength=args.max_wavelength,
            mode=args.mode,
            max_length=args.max_length,
            merge=None,
            depth=args.depth,
            layout=args.layout,
            out_of_range=args.out_of_range,
        )
    except ValueError as error:
        raise _UsageError(f"{PROG} export", _flag_names(error, _EXPORT_FLAGS)) from None
    out = _files.check_path(args.out, "OUT")
    _files.refuse_to_replace(out, args.overwrite)
    _creatable(out)
    if _load_keras(args).backend() != "tensorflow":
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
    # Sizes first, named as flags (the other kinds are bounded by --depth).
    sized_kinds = {"heatmap": ["heatmap"], "similarity": ["similarity_matrix"]}
    for kind in sized_kinds.get(args.kind, []):
        plot.check_size(kind, args.length, depth, flags=True)
    if args.kind == "precision":
        plot.check_precision_base(waves["max_wavelength"], "--max-wavelength")
    _load_keras(args)
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


@contextlib.contextmanager
def _native_stderr_silenced(silence: bool) -> Iterator[int]:
    """Sends file descriptor 2 to /dev/null while `silence` is true.

    TensorFlow's libraries log through absl before anything can configure
    it ("All log messages before absl::InitializeLog() ...", "Could not
    find cuda drivers"), once per library, whatever TF_CPP_MIN_LOG_LEVEL
    says; only the file descriptor can hide them.

    Yields:
        A file descriptor of the real stderr.
    """
    if not silence:
        yield 2
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield saved
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _interrupt_exits_now(prog: str, stderr_fd: int) -> Iterator[None]:
    """Ctrl-C ends the process at once while native libraries load.

    An exception raised inside the initialisation of a native module
    (jaxlib under TensorFlow's import, for one) can crash the process
    while it unwinds; nothing has been written yet, so exiting without
    unwinding loses nothing. Only over `_interrupt_once` (the whole
    process is the command line), never for a caller of `main(argv)`.
    """
    if signal.getsignal(signal.SIGINT) is not _interrupt_once:
        yield
        return

    def exit_now(signum: int, frame: FrameType | None) -> None:
        os.write(stderr_fd, f"{prog}: interrupted\n".encode())
        os._exit(INTERRUPTED)

    signal.signal(signal.SIGINT, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _interrupt_once)


def _load_keras(args: argparse.Namespace) -> ModuleType:
    """Imports Keras for the configured backend, quietly; returns its backend.

    Called once the arguments are read, so that `--help` and usage errors
    never wait for TensorFlow. TF_CPP_MIN_LOG_LEVEL defaults to 3 (errors
    hidden too: the CLI reports its own), in this process and in those it
    starts; native log lines printed while importing are hidden unless it
    is 0. A bad `KERAS_BACKEND` or a tf-keras set-up that cannot work is
    one line.
    """
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The lines TensorFlow cannot filter are informational: show them only
    # to whoever asked for every log line.
    with (
        _native_stderr_silenced(level.strip() != "0") as stderr_fd,
        _interrupt_exits_now(f"{PROG} {args.command}", stderr_fd),
    ):
        try:
            from keras import backend

            from keras_posenc import _keras  # refuses tf-keras without TensorFlow
        except ImportError as error:
            raise ImportError(_first_line(error)) from None
        except Exception as error:
            name = os.environ.get("KERAS_BACKEND")
            setting = f"KERAS_BACKEND={name!r}" if name else "the configured backend"
            raise ImportError(
                f"Keras cannot start with {setting}: {_first_line(error)}"
            ) from None
    del _keras
    return backend


# Errors whose message is meant for the user as it is; others are named.
_PLAIN = (ValueError, TypeError, OSError, ImportError, demo.DidNotLearn)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    name = type(error).__name__
    if not lines:
        return name
    return lines[0] if isinstance(error, _PLAIN) else f"{name}: {lines[0]}"


def _interrupt_once(signum: int, frame: FrameType | None) -> None:
    """The first Ctrl-C raises KeyboardInterrupt; later ones are ignored.

    So an interrupt while the first one unwinds (or while Python exits)
    cannot add a second message or a traceback.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def install_interrupt_handler() -> Any:
    """Installs `_interrupt_once` for Ctrl-C; returns the handler it replaced.

    Only from the main thread, and only over Python's default handler (an
    application embedding `main` keeps its own). Returns None when nothing
    was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None
    signal.signal(signal.SIGINT, _interrupt_once)
    return previous


def report_interrupt(prog: str = PROG) -> int:
    """Prints the one line of an interrupted command; returns status 130."""
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED


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
    keras-posenc 0.2.0
    0
    """
    whole_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = PROG
    previous = install_interrupt_handler()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else 1
        prog = f"{PROG} {args.command}"
        handler = {"demo": _demo, "export": _export, "plot": _plot}[args.command]
        return handler(args, argv)
    except KeyboardInterrupt:
        status = report_interrupt(prog)
        if whole_process:
            # Python would exit through the atexit handlers of half-loaded
            # native libraries (and, when the interrupt hit code they ran,
            # by re-raising SIGINT instead of returning 130).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status
    except _UsageError as error:
        print(f"{error.prog}: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # the one boundary where every failure becomes a line
        print(f"{prog}: error: {_first_line(error)}", file=sys.stderr)
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
