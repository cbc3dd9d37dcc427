"""Max |error| against float64 at growing positions, per backend.

    python -m benchmarks.precision [--backend tensorflow|jax|torch | --all-backends]
        [--depth 512] [--window 1024] [--smoke] [--exhaustive] [--json PATH]

Compares, on windows of positions ending at 2**11, 2**16, 2**20 and 2**24:
keras_posenc's `sinusoidal_table` on the Keras backend (float32 and the two
16-bit dtypes, rounded once), the naive float32 formula (angle `p * w`
formed in float32, as the TF tutorial and most code do), and the
compute-dtype formula (positions and angles in bfloat16/float16, as
keras-hub's SinePositionEncoding does under mixed precision). The naive
rows and the reference come from `keras_posenc._exact.reference` (numpy, the same
on every backend); the reference forms `p * w` in float64, exact to ~1e-9
below 2**24. `--exhaustive` also checks every position below 2**24 at
depth 64 (a few minutes).
"""

import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import keras_posenc  # noqa: E402
from keras_posenc._exact import reference as _reference  # noqa: E402

BACKEND = keras.backend.backend()
NAME = "precision"
LANDMARKS = (2**11, 2**16, 2**20, 2**24)
EXHAUSTIVE_DEPTH = 64
EXHAUSTIVE_END = 2**24

# Rows: results and tests key on these; LABELS are for people.
OURS_FLOAT32 = "ours_float32"
NAIVE_FLOAT32 = "naive_float32"
OURS_BFLOAT16 = "ours_bfloat16"
ROUNDED_BFLOAT16 = "exact_rounded_bfloat16"
COMPUTE_BFLOAT16 = "compute_dtype_bfloat16"
OURS_FLOAT16 = "ours_float16"
ROUNDED_FLOAT16 = "exact_rounded_float16"
COMPUTE_FLOAT16 = "compute_dtype_float16"
LABELS = {
    OURS_FLOAT32: "keras_posenc float32",
    NAIVE_FLOAT32: "naive float32",
    OURS_BFLOAT16: "keras_posenc bfloat16",
    ROUNDED_BFLOAT16: "bfloat16 rounding of exact",
    COMPUTE_BFLOAT16: "compute-dtype bfloat16",
    OURS_FLOAT16: "keras_posenc float16",
    ROUNDED_FLOAT16: "float16 rounding of exact",
    COMPUTE_FLOAT16: "compute-dtype float16",
}


def ours(positions, depth, dtype="float32"):
    """`sinusoidal_table` on the backend, as float64 numpy."""
    table = keras_posenc.sinusoidal_table(
        len(positions), depth, start_index=int(positions[0]), dtype=dtype
    )
    # float32 holds every 16-bit value exactly; numpy has no bfloat16.
    return ops.convert_to_numpy(ops.cast(table, "float32")).astype(np.float64)


def max_error(got, want):
    """Largest |got - want|; NaN when `got` has a non-finite value (overflow)."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(got, np.float64) - want)
    return float(err.max()) if np.isfinite(err).all() else float("nan")


def _naive(positions, depth, dtype):
    with np.errstate(invalid="ignore", over="ignore"):  # float16 overflows
        return _reference.naive_float32(positions, depth, dtype=dtype)


def measure(depth, window, landmarks=LANDMARKS):
    """`{end: {row: max error}}` on the positions `[end - window, end)`."""
    results = {}
    for end in landmarks:
        positions = np.arange(end - window, end)
        want = _reference.sinusoidal_float64(positions, depth)
        results[end] = {
            OURS_FLOAT32: max_error(ours(positions, depth), want),
            NAIVE_FLOAT32: max_error(_naive(positions, depth, np.float32), want),
            OURS_BFLOAT16: max_error(ours(positions, depth, "bfloat16"), want),
            ROUNDED_BFLOAT16: max_error(want.astype(ml_dtypes.bfloat16), want),
            COMPUTE_BFLOAT16: max_error(
                _naive(positions, depth, ml_dtypes.bfloat16), want
            ),
            OURS_FLOAT16: max_error(ours(positions, depth, "float16"), want),
            ROUNDED_FLOAT16: max_error(want.astype(np.float16), want),
            COMPUTE_FLOAT16: max_error(_naive(positions, depth, np.float16), want),
        }
    return results


def exhaustive(depth=EXHAUSTIVE_DEPTH, end=EXHAUSTIVE_END, block=2**18):
    """Max error of the float32 table over every position in `[0, end)`."""
    worst = 0.0
    for start in range(0, end, block):
        positions = np.arange(start, min(start + block, end))
        want = _reference.sinusoidal_float64(positions, depth)
        worst = max(worst, max_error(ours(positions, depth), want))
    return worst


def markdown(results, window, depth):
    """The error table: one row per entry of `LABELS`, one column per end."""
    ends = list(results)
    header = [f"max abs error, positions [p - {window}, p), depth {depth}"]
    header += [f"p = 2**{int(np.log2(p))}" for p in ends]
    rows = []
    for key, label in LABELS.items():
        cells = [results[p][key] for p in ends]
        rows.append(
            [label] + ["NaN (overflow)" if np.isnan(c) else f"{c:.1e}" for c in cells]
        )
    return _common.markdown_table(header, rows)


def merged_markdown(sections):
    """keras_posenc's rows on every backend side by side (the rest is numpy)."""
    first = next(iter(sections.values()))
    ends = list(first["errors"])
    header = ["max abs error"] + [f"p = 2**{int(np.log2(int(p)))}" for p in ends]
    rows = []
    for key in (OURS_FLOAT32, OURS_BFLOAT16, OURS_FLOAT16):
        for backend, section in sections.items():
            cells = [f"{section['errors'][p][key]:.1e}" for p in ends]
            rows.append([f"{LABELS[key]} ({backend})"] + cells)
    return _common.markdown_table(header, rows)


def run(depth, window, with_exhaustive):
    info = _common.run_info(BACKEND)
    print(f"{BACKEND}: {_common.machine_line(info)}", flush=True)
    results = measure(depth, window)
    print(markdown(results, window, depth), flush=True)
    section = {**info, "depth": depth, "window": window}
    section["errors"] = {str(end): row for end, row in results.items()}
    if with_exhaustive:
        worst = exhaustive()
        section["exhaustive"] = {
            "depth": EXHAUSTIVE_DEPTH,
            "positions": [0, EXHAUSTIVE_END],
            "max_error": worst,
        }
        print(
            f"\nevery position in [0, 2**24), depth {EXHAUSTIVE_DEPTH}: "
            f"max error {worst:.2e}"
        )
    return section


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _common.argument_parser(__doc__, NAME)
    parser.add_argument("--depth", type=int, default=512)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--smoke", action="store_true", help="depth 16, window 32")
    parser.add_argument(
        "--exhaustive",
        action="store_true",
        help=f"also every position < 2**24 at depth {EXHAUSTIVE_DEPTH}",
    )
    args = parser.parse_args(argv)
    sections = _common.run_requested_backends(
        NAME, argv, args, BACKEND, merged_markdown
    )
    if sections is not None:
        return sections
    depth, window = (16, 32) if args.smoke else (args.depth, args.window)
    section = run(depth, window, args.exhaustive)
    return _common.write_section(NAME, BACKEND, section, args)


if __name__ == "__main__":
    main()
