"""`sinusoidal_table` and `positional_encoding` against the float64 reference."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import LAYOUTS, reference

import keras_posenc
from keras_posenc import tables

# Max abs error to the exact value, float32 output (see README "Precision").
TOL = 2e-7


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [1, 2, 7, 64, 512])
@pytest.mark.parametrize("start", [0, 5, 4097])
def test_matches_float64_reference(layout, depth, start):
    # Every depth (odd ones end with a sine), both layouts, several offsets.
    table = keras_posenc.sinusoidal_table(300, depth, start_index=start, layout=layout)
    expected = reference(start + np.arange(300), depth, layout=layout)
    assert table.shape == (300, depth)
    assert table.dtype == tf.float32
    np.testing.assert_allclose(table.numpy(), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("base", [2.0, 500.0, 10000.0, 1e6])
def test_other_bases(base):
    # The base enters only through the host constants: any finite b > 0.
    table = keras_posenc.sinusoidal_table(200, 33, max_wavelength=base)
    np.testing.assert_allclose(
        table.numpy(), reference(np.arange(200), 33, base), rtol=0, atol=TOL
    )


def test_golden_values():
    # Position 0 is [0, 1, 0, 1, ...]; hand-computed entries from the formula.
    table = keras_posenc.sinusoidal_table(3, 4).numpy()
    np.testing.assert_array_equal(table[0], [0.0, 1.0, 0.0, 1.0])
    # PE(1, 0) = sin(1), PE(1, 1) = cos(1), PE(2, 2) = sin(2 / 10000**(2/4)) = sin(0.02)
    golden = {(1, 0): 0.8414709848078965, (1, 1): 0.5403023058681398,
              (2, 2): 0.019998666693333080, (2, 3): 0.99980000666657776}
    for (p, c), value in golden.items():
        assert abs(table[p, c] - value) < 1e-7, (p, c)


def test_golden_concatenated_layout():
    # [sin | cos]: same channels as the paper, sines first.
    table = keras_posenc.sinusoidal_table(2, 4, layout="concatenated").numpy()
    np.testing.assert_allclose(
        table[1], [np.sin(1.0), np.sin(0.01), np.cos(1.0), np.cos(0.01)], atol=1e-7
    )


def test_known_bad_exponent_differs():
    # Some tutorials use w = b**(-i/d) for column i instead of b**(-2*floor(i/2)/d).
    depth = 16
    p = np.arange(100)[:, None]
    i = np.arange(depth)
    bad = np.where(i % 2 == 0, np.sin(p * 1e4 ** (-i / depth)), np.cos(p * 1e4 ** (-i / depth)))
    ours = keras_posenc.sinusoidal_table(100, depth).numpy()
    assert np.abs(ours - bad).max() > 0.1
    np.testing.assert_allclose(ours, reference(np.arange(100), depth), atol=TOL)


def test_traced_once_per_option_set():
    # One trace serves every length and offset of an option set.
    fn = tables._table_function(24, 10000.0, "interleaved", tf.float32)
    for length, start in [(1, 0), (7, 3), (1000, 12345), (0, 0)]:
        keras_posenc.sinusoidal_table(length, 24, start_index=start)
    assert fn.experimental_get_tracing_count() == 1


def test_tensor_arguments_and_zero_length():
    table = keras_posenc.sinusoidal_table(tf.constant(5), 8, start_index=tf.constant(2, tf.int64))
    np.testing.assert_allclose(table.numpy(), reference(2 + np.arange(5), 8), atol=TOL)
    assert keras_posenc.sinusoidal_table(0, 8).shape == (0, 8)


def test_inside_tf_function_with_dynamic_length():
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def build(n):
        return keras_posenc.sinusoidal_table(n, 10, start_index=n)

    np.testing.assert_allclose(build(9).numpy(), reference(9 + np.arange(9), 10), atol=TOL)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_dtypes_are_rounded_once(dtype):
    # 16-bit results equal the float32 table cast once (no 16-bit maths).
    table = keras_posenc.sinusoidal_table(50, 12, dtype=dtype)
    assert table.dtype == tf.as_dtype(dtype)
    f32 = keras_posenc.sinusoidal_table(50, 12)
    np.testing.assert_array_equal(table.numpy(), tf.cast(f32, dtype).numpy())


def test_positional_encoding_is_the_tiled_table():
    pe = keras_posenc.positional_encoding(3, 20, 10, start_index=7, layout="concatenated")
    assert pe.shape == (3, 20, 10)
    expected = reference(7 + np.arange(20), 10, layout="concatenated")
    for b in range(3):
        np.testing.assert_allclose(pe[b].numpy(), expected, atol=TOL)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"depth": 0}, r"`depth`, expected a positive integer. Received: depth=0"),
        ({"depth": -3}, r"Received: depth=-3"),
        ({"depth": 2.5}, r"`depth`.*Received: depth=2.5"),
        ({"max_wavelength": 0.0}, r"`max_wavelength`.*Received: max_wavelength=0.0"),
        ({"max_wavelength": float("nan")}, r"`max_wavelength`.*max_wavelength=nan"),
        ({"max_wavelength": float("inf")}, r"`max_wavelength`.*max_wavelength=inf"),
        ({"layout": "sincos"}, r"`layout`.*Received: layout='sincos'"),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype.*dtype='int32'"),
        ({"length": -1}, r"`length`, expected a non-negative integer. Received: length=-1"),
        ({"start_index": -2}, r"`start_index`.*Received: start_index=-2"),
        ({"start_index": 2**31 - 5}, r"`start_index`, expected start_index \+ length <= 2\*\*31"),
        ({"start_index": tf.constant(-4)}, r"`start_index`.*Received: start_index=-4"),
        ({"start_index": tf.constant([1, 2])}, r"`start_index`, expected a non-negative integer"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"length": 10, "depth": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        keras_posenc.sinusoidal_table(args.pop("length"), args.pop("depth"), **args)


def test_bad_batch_size():
    with pytest.raises(ValueError, match=r"`batch_size`.*Received: batch_size=0"):
        keras_posenc.positional_encoding(0, 4, 4)


def test_graph_assert_on_position_limit():
    # A tensor start_index the host cannot see is checked in the graph.
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def build(start):
        return keras_posenc.sinusoidal_table(10, 4, start_index=start)

    with pytest.raises(tf.errors.InvalidArgumentError, match="2\\*\\*31"):
        build(2**31 - 3)
