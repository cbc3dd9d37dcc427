"""Regression tests for the reliability issue: table functions and checks.

Section 2: no silently wrong values (no int32 wrap-around, exact constants
for any `max_wavelength`, no plausible rows from invalid traced values).
Section 4: every bad argument is one `ValueError` naming it and echoing
its value. Section 6: untrusted sizes are refused before any work.
(The layer, export and CLI cases live in their own test files.)
"""

import json
import time
import zipfile

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    TOL,
    keras,
    only_tensorflow,
    reference_mp,
    to_numpy,
)
from keras import ops

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding, _arguments, _phase_constants

only_jax = pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
needs_int64 = pytest.mark.skipif(
    BACKEND == "jax", reason="JAX without x64 cannot hold an int64 tensor"
)
# Well under a second: the checks run before any allocation or host work.
FAST = 1.0


def _tensor(value, dtype):
    return ops.convert_to_tensor(np.array(value, dtype), dtype)


def _nan_rows(table):
    """Whether every value is NaN (and there is at least one)."""
    values = to_numpy(table)
    return values.size > 0 and bool(np.isnan(values).all())


# --- Section 2: silently wrong values ---------------------------------------


def test_start_index_2_31_raises_instead_of_wrapping_to_minus_2_31():
    # 2**31 would wrap to -2**31 in int32: a valid-looking row of -2**31.
    with pytest.raises(ValueError, match=r"`start_index`.*start_index=2147483648$"):
        keras_posenc.sinusoidal_table(4, 8, start_index=2**31)


def test_start_index_2_32_plus_3_raises_instead_of_wrapping_to_3():
    # 2**32 + 3 would wrap to 3: exactly the rows of position 3.
    with pytest.raises(ValueError, match=r"`start_index`.*start_index=4294967299$"):
        keras_posenc.sinusoidal_table(4, 8, start_index=2**32 + 3)


@needs_int64
def test_int64_tensor_start_index_raises():
    # An int64 tensor 2**32 + 7 is checked before its int32 cast.
    start = _tensor(2**32 + 7, "int64")
    with pytest.raises(ValueError, match=r"`start_index`.*start_index=4294967303$"):
        keras_posenc.sinusoidal_table(4, 8, start_index=start)


@needs_int64
def test_int64_tensor_length_raises():
    # An int64 length 2**32 + 5 would give 5 rows: it raises, naming `length`.
    length = _tensor(2**32 + 5, "int64")
    with pytest.raises(ValueError, match=r"`length`.*Received: length=4294967301$"):
        keras_posenc.sinusoidal_table(length, 8)


@pytest.mark.parametrize(
    "name, value",
    [
        ("start_index", np.uint32(2**32 - 1)),
        ("start_index", np.uint32(2**31)),
        ("start_index", np.uint64(2**63 + 5)),
        ("start_index", np.int64(2**40)),
        ("length", np.uint32(2**31)),
        ("length", np.uint64(2**32 + 5)),
        ("length", np.int64(-1)),
    ],
)
def test_numpy_unsigned_and_wide_values_raise(name, value):
    # numpy scalars of every width are range-checked as the numbers they are.
    args = {"length": 4, "start_index": 0} | {name: value}
    with pytest.raises(ValueError, match=rf"`{name}`.*Received: {name}={int(value)}$"):
        keras_posenc.sinusoidal_table(args.pop("length"), 8, **args)


@pytest.mark.parametrize(
    "dtype, value",
    [
        pytest.param("uint32", 2**32 - 1, id="uint32"),
        pytest.param(
            "uint64",
            2**63,
            id="uint64",
            marks=pytest.mark.skipif(
                BACKEND != "tensorflow", reason="uint64 tensors: TensorFlow only"
            ),
        ),
    ],
)
def test_unsigned_tensor_start_index_raises(dtype, value):
    # Unsigned tensors do not wrap to negative (or zero) int32 positions.
    with pytest.raises(ValueError, match=rf"`start_index`.*start_index={value}$"):
        keras_posenc.sinusoidal_table(4, 8, start_index=_tensor(value, dtype))


def _tf_function(fn, jit_compile=False):
    import tensorflow as tf

    return tf.function(fn, jit_compile=jit_compile, autograph=False)


DYNAMIC_CASES = [
    pytest.param("start_index", "int64", 2**32 + 7, id="start-int64"),
    pytest.param("start_index", "int64", -(2**40), id="start-int64-negative"),
    pytest.param("start_index", "uint32", 2**32 - 1, id="start-uint32"),
    pytest.param("start_index", "uint64", 2**63, id="start-uint64"),
    pytest.param("start_index", "int32", 2**31 - 2, id="start-end-past-2**31"),
    pytest.param("length", "int64", 2**32 + 5, id="length-int64"),
    pytest.param("length", "int32", -1, id="length-negative"),
]


def _table_of(name, value):
    if name == "start_index":
        return keras_posenc.sinusoidal_table(4, 8, start_index=value)
    return keras_posenc.sinusoidal_table(value, 8)


@only_tensorflow
@pytest.mark.parametrize("name, dtype, value", DYNAMIC_CASES)
def test_tf_function_dynamic_values_trip_a_graph_assertion(name, dtype, value):
    # Values known only when the graph runs: InvalidArgumentError naming them.
    import tensorflow as tf

    build = _tf_function(lambda v: _table_of(name, v))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"`{name}`"):
        build(tf.constant(value, dtype))


@only_tensorflow
@pytest.mark.parametrize("name, dtype, value", DYNAMIC_CASES)
def test_xla_dynamic_values_give_nan_rows_never_wrapped_rows(name, dtype, value):
    # XLA compiles assertions out: every row is NaN (a negative length
    # gives no rows at all), never the rows of a wrapped position.
    import tensorflow as tf

    table = _tf_function(lambda v: _table_of(name, v), jit_compile=True)(
        tf.constant(value, dtype)
    )
    if value < 0 and name == "length":
        assert tuple(table.shape) == (0, 8)
    else:
        assert _nan_rows(table)


@only_tensorflow
@pytest.mark.parametrize("dtype, value", [("int32", 0), ("int64", 2**32 + 1)])
def test_dynamic_batch_size_is_checked_in_graph_and_nan_under_xla(dtype, value):
    # positional_encoding: assertion in a tf.function, NaN under XLA.
    import tensorflow as tf

    def encode(batch):
        return keras_posenc.positional_encoding(batch, 3, 4)

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`batch_size`"):
        _tf_function(encode)(tf.constant(value, dtype))
    assert _nan_rows(_tf_function(encode, jit_compile=True)(tf.constant(value, dtype)))


@only_tensorflow
def test_tf_function_valid_int64_values_are_exact():
    # The checks pass valid int64 values through unchanged.
    import tensorflow as tf

    table = _tf_function(lambda s: keras_posenc.sinusoidal_table(4, 8, start_index=s))(
        tf.constant(2**31 - 4, tf.int64)
    )
    want = reference_mp(2**31 - 4 + np.arange(4), 8)
    np.testing.assert_allclose(table.numpy(), want, rtol=0, atol=TOL)


@only_jax
@pytest.mark.parametrize(
    "dtype, value", [("int32", 2**31 - 2), ("uint32", 2**32 - 1), ("uint32", 2**31)]
)
def test_jax_jit_invalid_traced_start_gives_nan_rows(dtype, value):
    # jax.jit cannot raise on a traced value: the rows are NaN instead.
    import jax

    build = jax.jit(lambda s: keras_posenc.sinusoidal_table(4, 8, start_index=s))
    assert _nan_rows(build(np.array(value, dtype)))


@only_jax
def test_jax_jit_traced_length_is_a_clear_error():
    # JAX shapes are static: a traced length is refused by name.
    import jax

    with pytest.raises(ValueError, match=r"`length`.*static"):
        jax.jit(lambda n: keras_posenc.sinusoidal_table(n, 8))(np.int32(4))


@only_jax
def test_jax_jit_traced_batch_size_is_a_clear_error():
    # The same for positional_encoding's batch_size.
    import jax

    with pytest.raises(ValueError, match=r"`batch_size`.*static"):
        jax.jit(lambda b: keras_posenc.positional_encoding(b, 3, 4))(np.int32(2))


WAVELENGTHS = [1e-10, 1e-30, 1e-45, 1e-60, 1e-100, 1e-300, 5e-324, 1e30, 1e300]


@pytest.mark.parametrize("max_wavelength", WAVELENGTHS)
def test_extreme_max_wavelength_rows_are_exact(max_wavelength):
    # Frequencies up to 1e323 rad per position: the constants keep enough
    # digits, so contiguous rows at both int32 ends stay within TOL.
    depth = 64
    for start in (2**31 - 8, -(2**31), 12345):
        table = keras_posenc.sinusoidal_table(
            8, depth, start_index=start, max_wavelength=max_wavelength
        )
        want = reference_mp(start + np.arange(8), depth, max_wavelength)
        np.testing.assert_allclose(to_numpy(table), want, rtol=0, atol=TOL)


@pytest.mark.parametrize("max_wavelength", WAVELENGTHS)
def test_extreme_max_wavelength_explicit_positions_are_exact(max_wavelength):
    # The same through explicit positions (coarse + fine rows per position).
    depth = 64
    positions = np.array([[0, 1, 63, 64, 4097, 2**24 + 1, 2**31 - 1, -(2**31), -7]])
    layer = SinusoidalPositionEncoding(
        max_wavelength=max_wavelength, merge=None, depth=depth
    )
    got = layer(np.zeros((1, positions.shape[1], 1), "float32"), positions=positions)
    want = reference_mp(positions[0], depth, max_wavelength)
    np.testing.assert_allclose(to_numpy(got)[0], want, rtol=0, atol=TOL)


def test_widest_host_constants_are_computed_quickly():
    # The worst case the checks allow (depth 65536, the smallest base) took
    # 60 s with per-frequency decimal powers; bounded loosely (~2 s here).
    start = time.perf_counter()
    constants = _phase_constants.phase_constants(
        _phase_constants.sinusoidal_turns(_arguments.MAX_DEPTH, 1e-300),
        *_phase_constants.sinusoidal_columns(_arguments.MAX_DEPTH, "interleaved"),
    )
    assert constants.width == _arguments.MAX_DEPTH
    assert time.perf_counter() - start < 20.0


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
        keras_posenc.positional_encoding(_tensor(value, dtype), 3, 4)


# --- Section 4: unclear errors ------------------------------------------------


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
            r"`layout`, expected one of \('interleaved', 'concatenated'\)",
        ),
        ({"dtype": "int32"}, r"`dtype`, expected a floating dtype.*dtype='int32'$"),
        ({"start_index": 2.7}, r"`start_index`.*Received: start_index=2\.7$"),
        ({"depth": "8"}, r"`depth`.*Received: depth='8'$"),
    ],
)
def test_bad_argument_is_one_value_error_naming_it(kwargs, match):
    # One ValueError, the argument in backticks, the value echoed.
    args = {"length": 4, "depth": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        keras_posenc.sinusoidal_table(args.pop("length"), args.pop("depth"), **args)


def test_float_tensor_start_index_echoes_its_value():
    # A float tensor shows its number, not `<tensor ...>`.
    with pytest.raises(ValueError, match=r"`start_index`.*Received: start_index=2\.7"):
        keras_posenc.sinusoidal_table(4, 8, start_index=_tensor(2.7, "float32"))


def test_bad_layout_array_in_the_layer_too():
    # An array where a string is expected is refused, not compared per item.
    with pytest.raises(ValueError, match=r"`layout`, expected one of"):
        SinusoidalPositionEncoding(layout=np.array(["interleaved", "concatenated"]))


# --- Section 6: untrusted sizes ----------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: keras_posenc.sinusoidal_table(4, 10**9), id="table"),
        pytest.param(lambda: keras_posenc.frequencies(10**9), id="frequencies"),
        pytest.param(lambda: SinusoidalPositionEncoding(depth=10**9), id="layer"),
    ],
)
def test_huge_depth_is_refused_at_once(build):
    # depth=10**9 is refused before any host work (MAX_DEPTH).
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"`depth`.*<= 65536. Received: depth=10{9}"):
        build()
    assert time.perf_counter() - start < FAST


TABLE_MESSAGE = (
    r"`max_length`, expected a table of at most \d+ bytes "
    r"\(set KERAS_POSENC_MAX_TABLE_BYTES to allow more\); "
    r"this one needs (\d+) bytes at depth (\d+)"
)


def test_huge_lookup_table_is_refused_at_construction():
    # 2**22 rows at depth 512 (8 GiB) is refused before any allocation.
    start = time.perf_counter()
    with pytest.raises(ValueError, match=TABLE_MESSAGE) as error:
        SinusoidalPositionEncoding(mode="lookup", max_length=2**22, depth=512)
    assert time.perf_counter() - start < FAST
    assert "needs 8589936640 bytes at depth 512" in str(error.value)


def test_huge_lookup_table_is_refused_at_build():
    # With the depth inferred from the inputs, the refusal comes in build.
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=2**22)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=TABLE_MESSAGE):
        layer.build((None, None, 512))
    assert time.perf_counter() - start < FAST


def test_table_byte_limit_is_set_by_the_environment(monkeypatch):
    # KERAS_POSENC_MAX_TABLE_BYTES moves the limit: (max_length + 1) rows of
    # `depth` float32 values (the extra row is the NaN row).
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, str(65 * 8 * 4))
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)
    assert layer.max_length == 64
    with pytest.raises(ValueError, match=TABLE_MESSAGE):
        SinusoidalPositionEncoding(mode="lookup", max_length=65, depth=8)
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, str(66 * 8 * 4))
    layer = SinusoidalPositionEncoding(
        mode="lookup", max_length=65, depth=8, merge=None
    )
    got = layer(np.zeros((1, 65, 1), "float32"))
    want = reference_mp(np.arange(60, 65), 8)
    np.testing.assert_allclose(to_numpy(got)[0, 60:], want, rtol=0, atol=TOL)


@pytest.mark.parametrize("setting", ["1GB", "-1", "-4096"])
def test_bad_table_byte_limit_setting_is_a_clear_error(monkeypatch, setting):
    # A value that is not a byte count (a negative one would refuse every
    # table) names the variable and echoes the setting.
    monkeypatch.setenv(_arguments.TABLE_BYTES_VARIABLE, setting)
    with pytest.raises(
        ValueError, match=rf"KERAS_POSENC_MAX_TABLE_BYTES must be.*='{setting}'"
    ):
        SinusoidalPositionEncoding(mode="lookup", max_length=64, depth=8)


def _model_file(tmp_path, depth):
    """A saved model with a small lookup table, and its edited twin."""
    inputs = keras.Input((None, 16))
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=32, depth=depth)
    path, bad = tmp_path / "small.keras", tmp_path / "huge.keras"
    keras.Model(inputs, layer(inputs)).save(path)
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = files["config.json"].decode()
    assert config.count('"max_length": 32') == 1
    files["config.json"] = config.replace('"max_length": 32', f'"max_length": {2**26}')
    json.loads(files["config.json"])
    with zipfile.ZipFile(bad, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path, bad


@pytest.mark.parametrize("depth", [16, None], ids=["depth-in-config", "depth-inferred"])
def test_keras_file_with_a_huge_table_fails_at_load(tmp_path, depth):
    # A .keras file whose config asks for 2**26 rows fails in load_model
    # (safe_mode=True), before allocating, with the max_length message.
    good, bad = _model_file(tmp_path, depth)
    assert keras.saving.load_model(good, safe_mode=True) is not None
    start = time.perf_counter()
    # Keras 3 wraps the layer's ValueError in a TypeError with its text.
    with pytest.raises((ValueError, TypeError), match=TABLE_MESSAGE):
        keras.saving.load_model(bad, safe_mode=True)
    assert time.perf_counter() - start < FAST
