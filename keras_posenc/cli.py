"""Command line: `python -m keras_posenc {demo,export,plot}` (also `keras-posenc`)."""

import argparse
import datetime
import json
import os
import sys

DESCRIPTION = """\
The sinusoidal positional encoding of Vaswani et al. (2017), exact to float32
rounding, as a Keras layer. Subcommands:
  demo    train a small model that needs positions, export it as a SavedModel,
          reload it in a fresh process and compare outputs
  export  write a standalone encoding SavedModel (positions in, encoding out)
  plot    draw the table, its wavelengths or its similarity to a PNG
"""


def _parser():
    parser = argparse.ArgumentParser(
        prog="keras-posenc",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="train, export, reload apart, compare")
    demo.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: a new saved_models/demo/run-<time>)",
    )
    demo.add_argument(
        "--seconds",
        type=float,
        default=6.0,
        help="training time budget in seconds (default: 6)",
    )
    demo.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out"
    )

    export = sub.add_parser(
        "export",
        help="write a standalone encoding SavedModel",
        description="Writes a SavedModel with two int32-in, float32-out signatures: "
        "serving_default(positions[batch, length]) -> {'encoding': [batch, length, depth]} "
        "and table(length, start_index) -> {'encoding': [length, depth]}. "
        "It loads with tf.saved_model.load; keras_posenc is not needed to use it.",
    )
    export.add_argument("out", metavar="OUT", help="directory to create")
    export.add_argument(
        "--depth", type=int, required=True, help="width of the encoding"
    )
    export.add_argument("--mode", choices=["compute", "lookup"], default="compute")
    export.add_argument("--max-length", type=int, help="table rows (lookup mode)")
    export.add_argument(
        "--layout", choices=["interleaved", "concatenated"], default="interleaved"
    )
    export.add_argument("--max-wavelength", type=float, default=10000.0)
    export.add_argument(
        "--out-of-range",
        choices=["error", "extend"],
        default="error",
        help="lookup mode: raise, or compute rows past the table",
    )
    export.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUT"
    )

    plot = sub.add_parser(
        "plot", help="draw the encoding to a PNG (needs the 'plot' extra)"
    )
    plot.add_argument(
        "--kind", choices=["heatmap", "wavelengths", "similarity"], default="heatmap"
    )
    plot.add_argument(
        "--length", type=int, default=128, help="positions (default: 128)"
    )
    plot.add_argument("--depth", type=int, default=64, help="dimensions (default: 64)")
    plot.add_argument(
        "--layout", choices=["interleaved", "concatenated"], default="interleaved"
    )
    plot.add_argument("--max-wavelength", type=float, default=10000.0)
    plot.add_argument("--out", required=True, metavar="FILE.png", help="PNG to write")
    plot.add_argument(
        "--overwrite", action="store_true", help="replace an existing FILE"
    )
    return parser


def _demo(args):
    from keras_posenc import demo

    out = args.out
    if out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        out = os.path.join("saved_models", "demo", f"run-{stamp}")
    print(
        f"Training a {demo.SEQ_LEN}-token 'is 1 before 2?' classifier "
        f"for up to {args.seconds:g} s (chance without the encoding: 50%)"
    )
    report = demo.run(out, seconds=args.seconds, overwrite=args.overwrite)
    print(
        f"\ntrained {report['epochs']} epochs in {report['train_seconds']} s: "
        f"validation accuracy {report['val_accuracy']:.1%}\n"
        f"exported SavedModel: {report['export_dir']} ({report['export_bytes'] / 1024:.0f} KiB)\n"
        f"reloaded in a fresh process without keras_posenc: outputs {report['reload_shape']}, "
        f"max |difference| = {report['max_abs_difference']:.3g}\n"
        f"report: {os.path.join(os.path.dirname(report['export_dir']), 'report.json')}"
    )
    return 0 if report["max_abs_difference"] <= 1e-5 else 1


def _export(args):
    from keras_posenc.export import _export_encoder

    options = {
        "mode": args.mode,
        "layout": args.layout,
        "max_wavelength": args.max_wavelength,
        "out_of_range": args.out_of_range,
    }
    if args.max_length is not None:
        options["max_length"] = args.max_length
    path = _export_encoder(args.out, args.depth, overwrite=args.overwrite, **options)
    print(json.dumps({"exported": path, "depth": args.depth, **options}))
    return 0


def _plot(args):
    from keras_posenc import plot
    from keras_posenc._checks import refuse_to_replace

    refuse_to_replace(args.out, args.overwrite)
    draw = {
        "heatmap": plot.heatmap,
        "wavelengths": plot.wavelengths,
        "similarity": plot.similarity,
    }[args.kind]
    options = {"depth": args.depth, "max_wavelength": args.max_wavelength}
    if args.kind != "wavelengths":
        options |= {"length": args.length}
    if args.kind == "heatmap":
        options |= {"layout": args.layout}
    figure = draw(**options)
    plot.save_png(figure, args.out)
    print(os.path.abspath(args.out))
    return 0


def main(argv=None):
    args = _parser().parse_args(argv)
    handler = {"demo": _demo, "export": _export, "plot": _plot}[args.command]
    try:
        return handler(args)
    except (ValueError, TypeError, OSError, ImportError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"keras-posenc {args.command}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
