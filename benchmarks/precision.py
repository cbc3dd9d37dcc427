"""Max |error| against float64 at growing positions: the README's precision table.

    python -m benchmarks.precision [--depth 512] [--window 1024] [--exhaustive]

Compares, on windows of positions ending at 2**11, 2**16, 2**20 and 2**24:
keras_posenc (float32 and the two 16-bit dtypes, rounded once), the naive
float32 formula (angle `p * w` formed in float32, as the TF tutorial and
most code do), and the compute-dtype formula (positions and angles in
bfloat16/float16, as keras-hub's SinePositionEncoding does under mixed
precision). The reference is float64 numpy, exact to ~1e-9 below 2**24.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_posenc  # noqa: E402
from benchmarks._common import machine, write_json  # noqa: E402

LANDMARKS = [2**11, 2**16, 2**20, 2**24]


def reference(positions, depth, base=10000.0):
    omega = base ** (-2.0 * (np.arange(depth) // 2) / depth)
    angle = positions.astype(np.float64)[:, None] * omega
    return np.where(np.arange(depth) % 2 == 0, np.sin(angle), np.cos(angle))


def naive_float32(positions, depth, base=10000.0):
    """The usual code: float32 positions times float32 frequencies."""
    omega = (base ** (-2.0 * (np.arange(depth) // 2) / depth)).astype(np.float32)
    angle = tf.constant(positions.astype(np.float32))[:, None] * omega
    return tf.where(np.arange(depth) % 2 == 0, tf.sin(angle), tf.cos(angle)).numpy()


def compute_dtype_formula(positions, depth, dtype, base=10000.0):
    """keras-hub SinePositionEncoding's maths, done in the compute dtype."""
    pos = tf.cast(positions, dtype)
    exponent = tf.cast(2 * (np.arange(depth) // 2), dtype) / tf.cast(depth, dtype)
    timescales = tf.pow(tf.cast(1.0 / base, dtype), exponent)
    angle = pos[:, None] * timescales[None, :]
    out = tf.where(np.arange(depth) % 2 == 0, tf.sin(angle), tf.cos(angle))
    return tf.cast(out, tf.float64).numpy()


def ours(positions, depth, dtype="float32"):
    table = keras_posenc.sinusoidal_table(len(positions), depth, start_index=int(positions[0]), dtype=dtype)
    return tf.cast(table, tf.float64).numpy()


def max_error(got, want):
    err = np.abs(np.asarray(got, np.float64) - want)
    return float("nan") if not np.isfinite(err).all() else float(err.max())


def measure(depth, window):
    rows = {}
    for end in LANDMARKS:
        positions = np.arange(end - window, end)
        want = reference(positions, depth)
        rows[end] = {
            "keras_posenc float32": max_error(ours(positions, depth), want),
            "naive float32": max_error(naive_float32(positions, depth), want),
            "keras_posenc bfloat16": max_error(ours(positions, depth, "bfloat16"), want),
            "bfloat16 rounding of exact": max_error(tf.cast(want, tf.bfloat16).numpy(), want),
            "compute-dtype bfloat16": max_error(compute_dtype_formula(positions, depth, tf.bfloat16), want),
            "keras_posenc float16": max_error(ours(positions, depth, "float16"), want),
            "float16 rounding of exact": max_error(tf.cast(want, tf.float16).numpy(), want),
            "compute-dtype float16": max_error(compute_dtype_formula(positions, depth, tf.float16), want),
        }
    return rows


def exhaustive(depth=64, block=2**18):
    """Max error of the float32 table over every position in [0, 2**24)."""
    worst = 0.0
    for start in range(0, 2**24, block):
        got = keras_posenc.sinusoidal_table(block, depth, start_index=start).numpy()
        worst = max(worst, max_error(got, reference(np.arange(start, start + block), depth)))
    return worst


def markdown(rows, window, depth):
    names = list(next(iter(rows.values())))
    head = "| max abs error, positions [p - %d, p), depth %d | " % (window, depth)
    head += " | ".join(f"p = 2**{int(np.log2(p))}" for p in rows) + " |"
    lines = [head, "|---" * (len(rows) + 1) + "|"]
    for name in names:
        cells = ["NaN (overflow)" if np.isnan(rows[p][name]) else f"{rows[p][name]:.1e}" for p in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=512)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--exhaustive", action="store_true", help="also every position < 2**24 at depth 64 (about a minute)")
    args = parser.parse_args(argv)
    rows = measure(args.depth, args.window)
    print(markdown(rows, args.window, args.depth))
    payload = {"machine": machine(), "depth": args.depth, "window": args.window,
               "rows": {str(k): v for k, v in rows.items()}}
    if args.exhaustive:
        payload["exhaustive_depth64_max_error"] = exhaustive()
        print(f"\nevery position in [0, 2**24), depth 64: max error {payload['exhaustive_depth64_max_error']:.2e}")
    print("\nwritten:", write_json("precision", payload))


if __name__ == "__main__":
    main()
