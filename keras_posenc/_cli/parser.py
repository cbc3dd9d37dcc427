"""The argument parser of the command line (`keras_posenc.cli`).

Kept apart from the commands so that `--help` and usage errors need
nothing but argparse and the option tables: no Keras, no TensorFlow.
"""

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from keras_posenc import __version__, demo
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import options as _options

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
# A negative number is a value, not an option (as argparse reads it).
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+([eE][-+]?\d+)?")
# argparse %-formats option help (for `%(default)s`): a literal % is %%.
_TARGET_PERCENT = f"{demo.TARGET_ACCURACY:.0%}".replace("%", "%%")
_T = TypeVar("_T")


class UsageError(Exception):
    """A bad command line, reported like any other error."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """Raises `UsageError` instead of exiting; takes no abbreviated options."""

    def __init__(self, **kwargs: Any) -> None:
        # `--dep 8` is not `--depth 8`: an abbreviation would stop meaning
        # the same option as soon as another option shares its prefix.
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, f"{message} (see {self.prog} --help)")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Like argparse's, but unknown arguments after a command name it.

        argparse reports them from the top-level parser, whose usage does not
        list the command's options.
        """
        argv = list(args) if args is not None else sys.argv[1:]
        try:
            parsed, unknown = self.parse_known_args(argv, namespace)
        except UsageError:
            # A missing argument hides an unknown option (`--vers`, or
            # `export enc --dep 64`): name the option, the user's mistake.
            self._refuse_unknown_options(argv)
            raise
        if unknown:
            command = getattr(parsed, "command", None)
            prog = self.prog
            if command in argv and unknown[0] in argv[argv.index(str(command)) + 1 :]:
                prog = f"{self.prog} {command}"
            raise UsageError(
                prog,
                f"unrecognized arguments: {' '.join(unknown)} (see {prog} --help)",
            )
        return parsed

    def _refuse_unknown_options(self, argv: list[str]) -> None:
        """Raises `UsageError` naming the options in `argv` no parser takes."""
        commands: dict[str, argparse.ArgumentParser] = {}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                commands = action.choices
        parser: argparse.ArgumentParser = self
        unknown: dict[str, list[str]] = {}  # by the prog that reports them
        for word in argv:
            if parser is self and word in commands:
                parser = commands[word]
            elif (
                word.startswith("-")
                and not _NUMBER.fullmatch(word)
                and word.split("=", 1)[0] not in parser._option_string_actions
            ):
                unknown.setdefault(parser.prog, []).append(word)
        if unknown:
            prog, words = next(iter(unknown.items()))  # the first parser's
            raise UsageError(
                prog, f"unrecognized arguments: {' '.join(words)} (see {prog} --help)"
            )


def _argument_type(convert: Callable[[str], _T], expected: str) -> Callable[[str], _T]:
    """An argparse type: any value `convert` makes of the text (its rules
    are checked after parsing); other text is refused as not `expected`."""

    def parse(text: str) -> _T:
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {expected}. Received: {text!r}"
            ) from None

    return parse


_integer = _argument_type(int, "an integer")
_number = _argument_type(float, "a number")


def _add_overwrite(parser: argparse.ArgumentParser, written: str) -> None:
    """`--overwrite`: the command may replace an existing `written`."""
    parser.add_argument(
        "--overwrite", action="store_true", help=f"replace an existing {written}"
    )


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
        "keras_posenc cannot be imported, and compares outputs. Without "
        "TensorFlow installed, no SavedModel can be written: it says so and "
        "reloads model.keras in a fresh process instead. Writes DIR "
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
        f"stops early at {_TARGET_PERCENT} validation accuracy "
        f"(default: {demo.MAX_STEPS})",
    )
    _add_overwrite(demo_parser, "demo DIR")

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
    _add_overwrite(export, "SavedModel OUT")

    plot = sub.add_parser(
        "plot",
        help="draw the sinusoidal encoding (needs matplotlib)",
        description="Draws one picture of the sinusoidal encoding to FILE, "
        "written atomically in an existing directory, in the format its suffix "
        "names (.png, .svg or .pdf). Needs matplotlib: pip install matplotlib.",
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
    _add_overwrite(plot, "FILE")
    return parser
