"""The table functions (`keras_posenc.tables`) on every backend.

`frequencies`, `sinusoidal_table` and `positional_encoding`: values against
the float64 formula of `_helpers.reference` (positions below 2**24, where
float64 angles are exact to ~1e-9) and hand-computed goldens; each bad
argument is one `ValueError` naming it and echoing its value.
"""

import configparser
import importlib.metadata
import pathlib

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LAYOUTS,
    TOL,
    only_tensorflow,
    reference,
    tensor2tensor_table,
    tensor_of,
    to_numpy,
)
from keras import backend, ops

import keras_posenc
from keras_posenc._exact import engine as _engine

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _dtype(tensor):
    return backend.standardize_dtype(tensor.dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [1, 2, 7, 64, 512])
def test_matches_float64_reference(layout, depth):
    # Every depth (odd ones end with a sine), both layouts, several offsets
    # (one row length, so JAX compiles once per option set).
    for start in (0, 5, 4097):
        table = keras_posenc.sinusoidal_table(
            300, depth, start_index=start, layout=layout
        )
        assert tuple(table.shape) == (300, depth)
        assert _dtype(table) == "float32"
        expected = reference(start + np.arange(300), depth, layout=layout)
        np.testing.assert_allclose(to_numpy(table), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("base", [2.0, 500.0, 10000.0, 1e6])
def test_other_bases(base):
    # The base enters only through the host constants: any finite b > 0.
    table = keras_posenc.sinusoidal_table(200, 33, max_wavelength=base)
    expected = reference(np.arange(200), 33, base)
    np.testing.assert_allclose(to_numpy(table), expected, rtol=0, atol=TOL)


def test_golden_values():
    # Row 0 is [0, 1, 0, 1]; PE(1, 0) = sin(1), PE(1, 1) = cos(1), and
    # PE(2, 2) = sin(2 / 10000**(2/4)) = sin(0.02), PE(2, 3) = cos(0.02).
    table = to_numpy(keras_posenc.sinusoidal_table(3, 4))
    np.testing.assert_array_equal(table[0], [0.0, 1.0, 0.0, 1.0])
    golden = {
        (1, 0): 0.8414709848078965,
        (1, 1): 0.5403023058681398,
        (2, 2): 0.019998666693333080,
        (2, 3): 0.99980000666657776,
    }
    for (p, c), value in golden.items():
        assert abs(table[p, c] - value) <= 1e-7, (p, c)


def test_golden_concatenated_layout():
    # [sin | cos]: the same channels as the paper's, sines first.
    table = to_numpy(keras_posenc.sinusoidal_table(2, 4, layout="concatenated"))
    expected = [np.sin(1.0), np.sin(0.01), np.cos(1.0), np.cos(0.01)]
    np.testing.assert_allclose(table[1], expected, rtol=0, atol=1e-7)


def test_frequencies_golden_and_float64_formula():
    # w_i = b**(-2i/depth): [1, 0.01] at depth 4; the float64 formula to an ulp.
    np.testing.assert_array_equal(keras_posenc.frequencies(4), [1.0, 0.01])
    got = keras_posenc.frequencies(512, 500.0)
    expected = 500.0 ** (-2.0 * np.arange(256) / 512)
    np.testing.assert_allclose(got, expected, rtol=4e-16, atol=0)


def test_i_over_depth_exponent_variant_differs():
    # Some tutorials use w = b**(-i/d) per column i instead of
    # b**(-2*floor(i/2)/d): the table is not that variant, and is exact.
    depth = 16
    p = np.arange(100)[:, None]
    i = np.arange(depth)
    angle = p * 1e4 ** (-i / depth)
    variant = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    ours = to_numpy(keras_posenc.sinusoidal_table(100, depth))
    assert np.abs(ours - variant).max() > 0.1
    np.testing.assert_allclose(ours, reference(np.arange(100), depth), atol=TOL)


@only_tensorflow
def test_traced_once_for_every_length(monkeypatch):
    # One tf.function trace serves lengths 0, 1, 7 and 1000 and any offset.
    traces = []

    def counting_range_rows(*args):
        traces.append(args[2])
        return range_rows(*args)

    range_rows = _engine.range_rows
    monkeypatch.setattr(_engine, "range_rows", counting_range_rows)
    keras_posenc.clear_cache()  # a new encoder: bind the counter
    # Held, as a layer holds its engine: a configuration's first function
    # call keeps nothing, and its second would build (and trace) another.
    held = _engine.sinusoidal_encoder(24, 777.0, "interleaved", "paper")
    try:
        for length, start in [(0, 0), (1, 0), (7, 3), (1000, 12345)]:
            table = keras_posenc.sinusoidal_table(
                length, 24, start_index=start, max_wavelength=777.0
            )
            expected = reference(start + np.arange(length), 24, 777.0)
            np.testing.assert_allclose(to_numpy(table), expected, atol=TOL)
    finally:
        keras_posenc.clear_cache()
    assert len(traces) == 1 and held.width == 24


def test_tensor_arguments():
    # Backend int tensors for length and start_index (int64 where it exists).
    start_dtype = "int32" if BACKEND == "jax" else "int64"
    table = keras_posenc.sinusoidal_table(
        ops.convert_to_tensor(5, "int32"),
        8,
        start_index=ops.convert_to_tensor(2, start_dtype),
    )
    np.testing.assert_allclose(
        to_numpy(table), reference(2 + np.arange(5), 8), rtol=0, atol=TOL
    )


def test_zero_length():
    # An empty table has the right shape and dtype, at any start.
    for start in (0, 2**31 - 1, -(2**31)):
        table = keras_posenc.sinusoidal_table(0, 8, start_index=start)
        assert tuple(table.shape) == (0, 8)
        assert _dtype(table) == "float32"


@only_tensorflow
def test_inside_tf_function_with_dynamic_length():
    # A length known only when the graph runs.
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def build(n):
        return keras_posenc.sinusoidal_table(n, 10, start_index=n)

    np.testing.assert_allclose(
        build(9).numpy(), reference(9 + np.arange(9), 10), rtol=0, atol=TOL
    )


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
def test_under_jax_jit_with_traced_start():
    # A traced start_index, a static length.
    import jax

    build = jax.jit(
        lambda start: keras_posenc.sinusoidal_table(6, 10, start_index=start)
    )
    np.testing.assert_allclose(
        to_numpy(build(70000)), reference(70000 + np.arange(6), 10), rtol=0, atol=TOL
    )


@pytest.mark.parametrize(
    "dtype",
    [
        "float16",
        "bfloat16",
        pytest.param(
            "float64",
            marks=pytest.mark.skipif(
                BACKEND == "jax", reason="JAX without x64 has no float64"
            ),
        ),
    ],
)
def test_dtypes_are_rounded_once(dtype):
    # Other dtypes equal the float32 table cast once (no 16-bit maths).
    table = keras_posenc.sinusoidal_table(50, 12, start_index=70000, dtype=dtype)
    assert _dtype(table) == dtype
    f32 = keras_posenc.sinusoidal_table(50, 12, start_index=70000)
    np.testing.assert_array_equal(to_numpy(table), to_numpy(ops.cast(f32, dtype)))


def test_positional_encoding_is_the_tiled_table():
    # Every batch row equals sinusoidal_table with the same options.
    options = {"start_index": 7, "layout": "concatenated", "max_wavelength": 500.0}
    pe = keras_posenc.positional_encoding(3, 20, 10, **options)
    assert tuple(pe.shape) == (3, 20, 10)
    assert _dtype(pe) == "float32"
    table = to_numpy(keras_posenc.sinusoidal_table(20, 10, **options))
    for b in range(3):
        np.testing.assert_array_equal(to_numpy(pe)[b], table)
    expected = reference(7 + np.arange(20), 10, 500.0, layout="concatenated")
    np.testing.assert_allclose(table, expected, rtol=0, atol=TOL)


def test_positional_encoding_dtype():
    # The dtype argument reaches the tiled result.
    pe = keras_posenc.positional_encoding(2, 4, 6, dtype="bfloat16")
    assert _dtype(pe) == "bfloat16"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"depth": 0},
            r"`depth`, expected a positive integer <= 65536. Received: depth=0",
        ),
        ({"depth": -3}, r"Received: depth=-3"),
        ({"depth": 2.5}, r"`depth`.*Received: depth=2.5"),
        ({"depth": 65537}, r"`depth`.*<= 65536. Received: depth=65537"),
        ({"max_wavelength": 0.0}, r"`max_wavelength`.*Received: max_wavelength=0.0"),
        ({"max_wavelength": -2.0}, r"`max_wavelength`.*Received: max_wavelength=-2.0"),
        ({"max_wavelength": float("nan")}, r"`max_wavelength`.*max_wavelength=nan"),
        ({"max_wavelength": float("inf")}, r"`max_wavelength`.*max_wavelength=inf"),
        ({"max_wavelength": "1e4"}, r"`max_wavelength`.*max_wavelength='1e4'"),
        ({"layout": "sincos"}, r"`layout`.*Received: layout='sincos'"),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype.*dtype='int32'"),
        ({"dtype": "nope"}, r"`dtype`, expected a floating dtype.*dtype='nope'"),
        ({"length": -1}, r"`length`, expected an integer in \[0, 2147483520\].*=-1$"),
        # The engine's coarse rows must stay int32: longer is refused clearly.
        ({"length": 2**31 - 63}, r"`length`, expected an integer in \[0, 2147483520\]"),
        ({"length": 2.0}, r"`length`.*Received: length=2.0"),
        (
            {"length": [3]},
            r"`length`, expected a tensor of rank 0. Received: length=\[3\]",
        ),
        ({"start_index": 2**31 - 5}, r"`start_index`, expected start_index \+ length"),
        ({"start_index": -(2**31) - 1}, r"`start_index`.*start_index=-2147483649"),
        ({"start_index": "3"}, r"`start_index`.*Received: start_index='3'"),
        (
            {"start_index": [1, 2]},
            r"`start_index`, expected a tensor of rank 0.*\[1, 2\]",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    # Each bad argument: one ValueError naming it and echoing the value.
    args = {"length": 10, "depth": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        keras_posenc.sinusoidal_table(args.pop("length"), args.pop("depth"), **args)


def test_bad_tensor_start_index_echoes_value():
    # A tensor argument's value is echoed, not its repr.
    start = ops.convert_to_tensor([1, 2], "int32")
    with pytest.raises(
        ValueError, match=r"`start_index`.*Received: start_index=\[1, 2\]"
    ):
        keras_posenc.sinusoidal_table(4, 8, start_index=start)


def test_bad_batch_size():
    # batch_size must be a positive int.
    with pytest.raises(ValueError, match=r"`batch_size`.*Received: batch_size=0"):
        keras_posenc.positional_encoding(0, 4, 4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"length": None}, r"`length`.*Received: length=None$"),
        ({"length": 2**63}, r"`length`.*Received: length=9223372036854775808$"),
        ({"start_index": None}, r"`start_index`.*Received: start_index=None$"),
        (
            {"start_index": 2**63},
            r"`start_index`.*Received: start_index=9223372036854775808$",
        ),
        ({"max_wavelength": 10**400}, r"`max_wavelength`.*max_wavelength=10{400}$"),
        (
            {"layout": np.array(["interleaved"])},
            r"`layout`, expected one of \('interleaved', 'concatenated', 'cos_sin'\)",
        ),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype.*dtype='int32'$"),
        ({"start_index": 2.7}, r"`start_index`.*Received: start_index=2\.7$"),
        ({"depth": "8"}, r"`depth`.*Received: depth='8'$"),
        ({"frequency_rule": "fairseq"}, r"`frequency_rule`, expected one of"),
        ({"odd_depth": None}, r"`odd_depth`, expected one of"),
        ({"padding_id": -2}, r"`padding_id`, .*Received: padding_id=-2$"),
        (
            {"depth": 9, "odd_depth": "error"},
            r"`depth`, expected an even width.*Received: depth=9$",
        ),
        (
            {"depth": 2, "frequency_rule": "tensor2tensor"},
            r"`depth`, expected at least 4.*Received: depth=2$",
        ),
    ],
)
def test_bad_argument_is_one_value_error_naming_it(kwargs, match):
    # One ValueError, the argument in backticks, the value echoed.
    args = {"length": 4, "depth": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        keras_posenc.sinusoidal_table(args.pop("length"), args.pop("depth"), **args)


@pytest.mark.parametrize(
    "batch_size, shown",
    [
        (1.5, "1.5"),
        (True, "True"),
        (2**32 + 1, "4294967297"),
        (0, "0"),
        (-3, "-3"),
        (None, "None"),
    ],
)
def test_bad_batch_size_raises_naming_it(batch_size, shown):
    # Python values: one ValueError naming batch_size, echoing the value.
    with pytest.raises(
        ValueError, match=rf"`batch_size`.*Received: batch_size={shown}$"
    ):
        keras_posenc.positional_encoding(batch_size, 3, 4)


@pytest.mark.parametrize(
    "value, dtype, shown",
    [(2.7, "float32", r"2\.7"), (0, "int32", "0"), (2**31, "uint32", "2147483648")],
)
def test_bad_batch_size_tensor_raises_naming_it(value, dtype, shown):
    # Backend tensors: a float, zero, and one past the int32 range.
    with pytest.raises(
        ValueError, match=rf"`batch_size`.*Received: batch_size={shown}"
    ):
        keras_posenc.positional_encoding(tensor_of(value, dtype), 3, 4)


@only_tensorflow
def test_graph_assert_on_position_limit():
    # A start_index the host cannot see is checked in the graph.
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def build(start):
        return keras_posenc.sinusoidal_table(10, 4, start_index=start)

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"start_index.*2\*\*31"):
        build(2**31 - 3)


def test_public_names():
    # The three table functions are exported from the package.
    for name in ("frequencies", "positional_encoding", "sinusoidal_table"):
        assert name in keras_posenc.__all__
        assert getattr(keras_posenc, name) is getattr(keras_posenc.tables, name)


def test_version_is_single_sourced():
    # One version string: __init__ is what setup.cfg reads (attr:) and what
    # the installed distribution reports (reinstall after a version bump).
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["version"].strip() == "attr: keras_posenc.__version__"
    try:
        installed = importlib.metadata.version("keras-posenc")
    except importlib.metadata.PackageNotFoundError:
        # Imported from a copied tree (the lent GPU machine): no distribution.
        pytest.skip("keras-posenc is not installed as a distribution here")
    assert installed == keras_posenc.__version__


@pytest.mark.parametrize("depth", [16, 17])
def test_fairseq_table_matches_its_float64_formula(depth):
    # M2M100's and NLLB's table: tensor2tensor frequencies, [sin | cos], a
    # zero column for an odd width, the padding row zero; far positions too.
    start = 100_000
    table = keras_posenc.sinusoidal_table(
        64,
        depth,
        start_index=start,
        layout="concatenated",
        frequency_rule="tensor2tensor",
        odd_depth="zero",
        padding_id=start + 5,
    )
    positions = start + np.arange(64)
    expected = tensor2tensor_table(positions, depth, padding_id=start + 5)
    np.testing.assert_allclose(to_numpy(table), expected, rtol=0, atol=TOL)


def test_readme_layout_sentence_measured():
    # The concatenated layout with the paper's frequencies is not M2M100's
    # table (the README's correction): 0.52 apart at 12 rows, width 16.
    paper = to_numpy(keras_posenc.sinusoidal_table(12, 16, layout="concatenated"))
    m2m = tensor2tensor_table(np.arange(12), 16)
    assert 0.5 < np.abs(paper - m2m).max() < 0.53
    fairseq = keras_posenc.sinusoidal_table(
        12, 16, layout="concatenated", frequency_rule="tensor2tensor"
    )
    np.testing.assert_allclose(to_numpy(fairseq), m2m, rtol=0, atol=TOL)


def test_odd_cos_sin_table_holds_one_more_cosine_first():
    # [cos | sin] with an odd width and odd_depth="sine": ceil(d/2) cosines,
    # then the sines (the first block takes the extra column), as documented.
    table = to_numpy(keras_posenc.sinusoidal_table(3, 5, layout="cos_sin"))
    w = 10000.0 ** (-2.0 * np.arange(3) / 5)
    angle = np.arange(3)[:, None] * w
    want = np.concatenate([np.cos(angle), np.sin(angle[:, :2])], axis=1)
    np.testing.assert_allclose(table, want, atol=2e-7)
