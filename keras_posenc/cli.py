"""Command line: `python -m keras_posenc {demo,export,plot}` (also `keras-posenc`).

Every failure, of the arguments or of the work (a refused path, a full
disk, TensorFlow running out of memory), ends the same way: one line
``keras-posenc <command>: error: <what>`` on stderr and exit status 1,
never a traceback; Ctrl-C gives one line and status 130. Paths and sizes
are checked before anything is trained, drawn or allocated.
"""

import argparse
import datetime
import json
import math
import os
import subprocess
import sys

from keras_posenc import _arguments, _files, _options

PROG = "keras-posenc"
DESCRIPTION = """\
The sinusoidal positional encoding of Vaswani et al. (2017), exact to float32
rounding, as a Keras layer. Subcommands:
  demo    train a small model that needs positions, export it as a SavedModel,
          reload it in a fresh process and compare outputs
  export  write a standalone encoding SavedModel (positions in, encoding out)
  plot    draw the table, its wavelengths, similarity or precision to a PNG

Any error prints one line on stderr and exits with status 1.
"""
PLOT_KINDS = ("heatmap", "wavelengths", "similarity", "precision")
# The demo fails if the reloaded SavedModel differs from Keras by more.
DEMO_TOLERANCE = 1e-5
INTERRUPTED = 130


class _UsageError(Exception):
    """A bad command line, reported like any other error."""

    def __init__(self, prog, message):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(self.prog, f"{message} (see {self.prog} --help)")


def _integer(low, high=None):
    """An argparse type: an integer in `[low, high]`."""
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"expected an integer {bound}. Received: {text!r}"
            )
        return value

    return parse


def _positive_number(text):
    """An argparse type: a finite number > 0 (no nan, no inf)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a finite number > 0. Received: {text!r}"
        )
    return value


def build_parser():
    """The argument parser of `keras-posenc` (errors raise, never exit)."""
    parser = _Parser(
        prog=PROG,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="train, export, reload apart, compare",
        description="Trains a 16-token 'is the 1 before the 2?' classifier with the "
        "configured Keras backend, saves it as model.keras, exports it as a "
        "SavedModel (on torch: by reloading model.keras under TensorFlow in a "
        "subprocess), reloads that in a fresh process where keras_posenc cannot "
        "be imported, and compares outputs. Writes OUT atomically.",
    )
    demo.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: a new saved_models/demo/run-<time>)",
    )
    demo.add_argument(
        "--seconds",
        type=_positive_number,
        default=6.0,
        help="training time budget in seconds, > 0 (default: 6)",
    )
    demo.add_argument(
        "--overwrite", action="store_true", help="replace an existing demo DIR"
    )

    export = sub.add_parser(
        "export",
        help="write a standalone encoding SavedModel",
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
        type=_integer(1, _arguments.MAX_DEPTH),
        required=True,
        help=f"width of the encoding, in [1, {_arguments.MAX_DEPTH}]",
    )
    export.add_argument("--mode", choices=_options.MODES, default=_options.MODES[0])
    export.add_argument(
        "--max-length", type=_integer(1), help="table rows (needed by --mode lookup)"
    )
    export.add_argument(
        "--layout", choices=_options.LAYOUTS, default=_options.LAYOUTS[0]
    )
    export.add_argument("--max-wavelength", type=_positive_number, default=10000.0)
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
        help="draw the encoding to a PNG (needs the 'plot' extra)",
        description="Draws one picture of the encoding to a PNG, written "
        "atomically. Needs matplotlib: pip install 'keras-posenc[plot]'.",
    )
    plot.add_argument("--kind", choices=PLOT_KINDS, default=PLOT_KINDS[0])
    plot.add_argument(
        "--length",
        type=_integer(1),
        default=128,
        help="positions, for heatmap and similarity (default: 128); at most "
        "length x depth = 2**24 cells, and 4096 positions for similarity",
    )
    plot.add_argument(
        "--depth",
        type=_integer(1, _arguments.MAX_DEPTH),
        default=64,
        help="dimensions (default: 64)",
    )
    plot.add_argument(
        "--layout",
        choices=_options.LAYOUTS,
        default=_options.LAYOUTS[0],
        help="heatmap column order",
    )
    plot.add_argument("--max-wavelength", type=_positive_number, default=10000.0)
    plot.add_argument("--out", required=True, metavar="FILE.png", help="PNG to write")
    plot.add_argument(
        "--overwrite", action="store_true", help="replace an existing FILE"
    )
    return parser


def _creatable(path):
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


def _demo(args, argv):
    from keras_posenc import demo

    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        out = os.path.join("saved_models", "demo", f"run-{stamp}")
    out = _files.check_path(out, "--out")
    _files.refuse_to_replace(out, args.overwrite, marker=demo.MARKER)
    _creatable(out)
    report = demo.run(out, seconds=args.seconds, overwrite=args.overwrite)
    print(
        f"\ntrained {report['epochs']} epochs in {report['train_seconds']} s: "
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


def _rerun_with_tensorflow(argv):
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


def _export(args, argv):
    from keras import backend

    out = _files.check_path(args.out, "OUT")
    _files.refuse_to_replace(out, args.overwrite)
    _creatable(out)
    if args.mode == "lookup" and args.max_length is None:
        raise _UsageError(f"{PROG} export", "--mode lookup needs --max-length")
    if args.mode == "compute" and args.max_length is not None:
        raise _UsageError(f"{PROG} export", "--max-length needs --mode lookup")
    if backend.backend() != "tensorflow":
        return _rerun_with_tensorflow(argv)
    from keras_posenc.export import export_encoder

    options = {
        "mode": args.mode,
        "layout": args.layout,
        "max_wavelength": args.max_wavelength,
        "out_of_range": args.out_of_range,
    }
    if args.max_length is not None:
        options["max_length"] = args.max_length
    path = export_encoder(out, args.depth, overwrite=args.overwrite, **options)
    print(json.dumps({"exported": path, "depth": args.depth, **options}))
    return 0


def _plot(args, argv):
    from keras_posenc import plot

    out = _files.check_path(args.out, "--out")
    _files.refuse_to_replace(out, args.overwrite, kind="file")
    _creatable(out)
    # Sizes first, named as flags (the other kinds are bounded by --depth).
    sized_kinds = {"heatmap": ["heatmap"], "similarity": ["similarity_matrix"]}
    for kind in sized_kinds.get(args.kind, []):
        plot.check_size(kind, args.length, args.depth, flags=True)
    waves = {"max_wavelength": args.max_wavelength}
    sized = {"length": args.length, "depth": args.depth, **waves}
    if args.kind == "heatmap":
        figure = plot.heatmap(layout=args.layout, **sized)
    elif args.kind == "wavelengths":
        figure = plot.wavelengths(args.depth, **waves)
    elif args.kind == "precision":
        figure = plot.precision(args.depth, **waves)
    else:
        figure, (left, right) = plot.subplots(2, width=11.0)
        plot.similarity(**sized, ax=left)
        plot.similarity_matrix(**sized, ax=right)
    print(plot.save_png(figure, out, overwrite=args.overwrite))
    return 0


# Errors whose message is meant for the user as it is; others are named.
_PLAIN = (ValueError, TypeError, OSError, ImportError)


def _first_line(error):
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    name = type(error).__name__
    if not lines:
        return name
    return lines[0] if isinstance(error, _PLAIN) else f"{name}: {lines[0]}"


def main(argv=None):
    """Runs the command line; returns the exit status.

    Args:
        argv: list of str. The arguments after the program name. Defaults
            to `sys.argv[1:]`.

    Returns:
        0 on success, 1 on any error (reported in one line on stderr),
        130 when interrupted.

    Example:

    >>> from keras_posenc import cli
    >>> cli.main(["export", "pe_encoder", "--depth", "64"])  # doctest: +SKIP
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = PROG
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help
            return done.code
        prog = f"{PROG} {args.command}"
        handler = {"demo": _demo, "export": _export, "plot": _plot}[args.command]
        return handler(args, argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except _UsageError as error:
        print(f"{error.prog}: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # the one boundary where every failure becomes a line
        print(f"{prog}: error: {_first_line(error)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
