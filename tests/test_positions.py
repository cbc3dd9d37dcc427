"""Positions parsed once (`keras_posenc._checks.positions`), through every entry point.

`start_index`, `positions` and sizes (`length`, `batch_size`) of any integer
type are checked against the int32 range before any cast, wherever they come
from: a value known now raises a `ValueError` naming the argument and echoing
it, never the rows of a wrapped position. (What a traced value that fails
the checks does is the guard's policy: tests/test_backend.py.)
"""

import os
import re
import sys

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    TOL,
    keras,
    only_jax,
    only_tensorflow,
    reference,
    reference_mp,
    tensor_of,
    to_numpy,
    traced,
)
from keras import ops

import keras_posenc

LAYERS = [
    pytest.param(lambda: keras_posenc.SinusoidalPositionEncoding(), id="sinusoidal"),
    pytest.param(lambda: keras_posenc.RotaryEmbedding(), id="rotary"),
]
WIDE = 2**32 + 3  # wraps to 3 in int32: exactly the rows of position 3
needs_int64 = pytest.mark.skipif(
    BACKEND == "jax", reason="JAX without x64 cannot hold an int64 tensor"
)


def _inputs(length=4, batch=2):
    return np.random.default_rng(0).normal(size=(batch, length, 8)).astype("float32")


@pytest.mark.parametrize("make_layer", LAYERS)
@pytest.mark.parametrize(
    "start",
    [np.int64(WIDE), np.array(WIDE), np.array([WIDE, 0]), np.int64(2**31)],
    ids=["np.int64", "0-d array", "per example", "2**31"],
)
def test_wide_numpy_start_index_is_refused_by_a_layer_call(make_layer, start):
    # Keras converts array call arguments to 32-bit tensors on JAX before
    # `call`; the layers parse what the caller gave, so 2**32 + 3 is an error
    # on every backend, never the rows of position 3 (nor 2**31 of -2**31).
    bad = int(np.ravel(start)[0])
    with pytest.raises(ValueError, match=rf"`start_index`.*start_index={bad}\b"):
        make_layer()(_inputs(), start_index=start)


@pytest.mark.parametrize("make_layer", LAYERS)
def test_wide_numpy_positions_are_refused_by_a_layer_call(make_layer):
    # positions [0, 1, 2, 2**32 + 3] would be [0, 1, 2, 3] after a 32-bit cast.
    positions = np.array([0, 1, 2, WIDE], np.int64)
    with pytest.raises(ValueError, match=rf"`positions`.*positions={WIDE}\b"):
        make_layer()(_inputs(), positions=positions)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit")
@pytest.mark.parametrize("make_layer", LAYERS)
def test_wide_numpy_start_index_closed_over_in_jax_jit_is_refused(make_layer):
    # A host value inside a jitted function is known at trace time: refused
    # there, not turned into finite rows of a wrapped position.
    import jax

    layer = make_layer()
    step = jax.jit(lambda x: layer(x, start_index=np.int64(WIDE)))
    with pytest.raises(ValueError, match=rf"start_index={WIDE}\b"):
        step(_inputs())


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit")
@pytest.mark.parametrize("make_layer", LAYERS)
def test_traced_out_of_range_start_index_gives_nan_rows_under_jax_jit(make_layer):
    # A traced start whose span passes 2**31 cannot raise under jax.jit: the
    # rows are NaN, never plausible.
    import jax

    layer = make_layer()
    out = jax.jit(lambda x, s: layer(x, start_index=s))(_inputs(), 2**31 - 2)
    assert np.isnan(to_numpy(out)).all()


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit")
@pytest.mark.parametrize("make_layer", LAYERS)
@pytest.mark.parametrize("start", [WIDE, 2**31])
def test_traced_int64_start_index_under_jax_x64_gives_nan_rows(make_layer, start):
    # With 64-bit types on, a wide start reaches the layer as an int64
    # tracer: NaN rows, never those of the wrapped position. (With them off,
    # JAX's default, jax.jit converts the argument to int32 before any code
    # runs; the README says so.)
    import jax

    layer = make_layer()
    with jax.enable_x64(True):
        out = jax.jit(lambda x, s: layer(x, start_index=s))(_inputs(), np.int64(start))
    assert np.isnan(to_numpy(out)).all()


@pytest.mark.skipif(BACKEND == "torch", reason="no traced start on torch")
@pytest.mark.parametrize("make_layer", LAYERS)
def test_empty_sequence_with_a_traced_start_index_is_empty(make_layer):
    # A static length of 0 needs no rows, whatever the traced start: the
    # empty output, as in eager mode (was an AttributeError).
    layer = make_layer()
    out = traced(lambda x, s: layer(x, start_index=s))(_inputs(length=0), 5)
    assert tuple(out.shape) == (2, 0, 8)


@pytest.mark.skipif(BACKEND == "torch", reason="no traced start on torch")
def test_sinusoidal_table_of_zero_rows_with_a_traced_start_is_empty():
    # The table function takes the same path: shape (0, depth), no error.
    out = traced(lambda s: keras_posenc.sinusoidal_table(0, 8, start_index=s))(5)
    assert tuple(out.shape) == (0, 8)


def test_valid_int64_numpy_start_index_gives_the_exact_rows():
    # Valid int64 values pass through the checks unchanged.
    layer = keras_posenc.SinusoidalPositionEncoding(merge=None, depth=8)
    out = layer(_inputs(), start_index=np.int64(2**31 - 4))
    want = reference(2**31 - 4 + np.arange(4), 8)
    # float64 angles at 2**31 are exact to ~1e-7 rad: a loose bound suffices
    # to tell position 2**31 - 4 from any wrapped one.
    np.testing.assert_allclose(to_numpy(out)[0], want, rtol=0, atol=1e-6)


@pytest.mark.skipif(LEGACY, reason="Keras 3 symbolic calls")
def test_concat_on_integer_symbolic_inputs_is_refused_when_the_model_is_built():
    # merge="concat" needs floating inputs: refused at the symbolic call,
    # not reported as float32 and left to fail at run time.
    tokens = keras.Input(shape=(None, 4), dtype="int32")
    layer = keras_posenc.SinusoidalPositionEncoding(merge="concat", depth=4)
    with pytest.raises(ValueError, match=r"`inputs`, expected a floating tensor"):
        layer(tokens)


def test_rows_are_exact_after_parsing_per_example_offsets():
    # Per-example offsets are parsed once and tiled: each example's rows are
    # its own positions' rows.
    layer = keras_posenc.SinusoidalPositionEncoding(merge=None, depth=8)
    out = to_numpy(layer(_inputs(length=3), start_index=np.array([0, 1000])))
    np.testing.assert_allclose(out[1], reference(1000 + np.arange(3), 8), atol=TOL)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX compiles per shape")
def test_eager_jax_compilations_level_off_for_new_lengths():
    # Eager JAX compiles the engine once per input size; sizes are rounded up
    # to powers of two, so once lengths up to 300 have been seen, new lengths
    # (explicit positions and spans) compile nothing more: memory levels off.
    from keras_posenc._exact import engine as _engine

    encoder = _engine.sinusoidal_encoder(8, 10000.0, "interleaved", "paper")
    layer = keras_posenc.SinusoidalPositionEncoding(merge=None, depth=8)

    def call_lengths(lengths):
        for length in lengths:
            x = np.zeros((1, length, 8), "float32")
            layer(x, positions=np.arange(length))
            layer(x, start_index=7)
        return encoder.compiled_count()

    seen = call_lengths([1, 64, 65, 128, 129, 256, 257, 300])
    assert call_lengths(range(2, 300, 11)) == seen


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
    start = tensor_of(2**32 + 7, "int64")
    with pytest.raises(ValueError, match=r"`start_index`.*start_index=4294967303$"):
        keras_posenc.sinusoidal_table(4, 8, start_index=start)


@needs_int64
def test_int64_tensor_length_raises():
    # An int64 length 2**32 + 5 would give 5 rows: it raises, naming `length`.
    length = tensor_of(2**32 + 5, "int64")
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
        keras_posenc.sinusoidal_table(4, 8, start_index=tensor_of(value, dtype))


def test_float_tensor_start_index_echoes_its_value():
    # A float tensor shows its number, not `<tensor ...>`.
    with pytest.raises(ValueError, match=r"`start_index`.*Received: start_index=2\.7"):
        keras_posenc.sinusoidal_table(4, 8, start_index=tensor_of(2.7, "float32"))


@only_tensorflow
def test_tf_function_valid_int64_values_are_exact():
    # The checks pass valid int64 values through unchanged.
    import tensorflow as tf

    table = traced(lambda s: keras_posenc.sinusoidal_table(4, 8, start_index=s))(
        tf.constant(2**31 - 4, tf.int64)
    )
    want = reference_mp(2**31 - 4 + np.arange(4), 8)
    np.testing.assert_allclose(table.numpy(), want, rtol=0, atol=TOL)


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


@pytest.mark.parametrize(
    "value, echo",
    [
        (np.timedelta64(5), "np.timedelta64(5)"),
        (np.array([5, 6], "m8[s]"), "array([5, 6], dtype='timedelta64[s]')"),
    ],
)
def test_a_time_is_not_a_position(value, echo):
    # numpy makes timedelta64 a signed integer; 5 seconds is not position 5.
    message = (
        "Received an invalid value for `start_index`, expected integer positions "
        f"in [-2147483648, 2**31). Received: start_index={echo!r}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        keras_posenc.sinusoidal_table(2, 4, start_index=value)


# -- the path of start_index: parsed once, raised once ---------------------------

# Modules by layer, highest first: a call into a higher one goes back up.
_LAYERS = {
    "sinusoidal": 4,
    "_checks/positions": 3,
    "_checks/arguments": 2,
    "_backend": 1,
}


def _module_events(call):
    """(event, module) of every call and return inside the package."""
    package = os.path.dirname(os.path.abspath(keras_posenc.__file__))
    events = []

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event in ("call", "return") and path.startswith(package):
            events.append((event, os.path.relpath(path, package)[:-3]))

    sys.setprofile(profile)
    try:
        call()
    except ValueError:
        pass
    finally:
        sys.setprofile(None)
    return events


def _start_index_path(call):
    """Module changes from the layer's call into `_checks/positions` until it
    returns there: (entries by a call, calls back up the layers, returns)."""
    stack, started, entries, up, returns = [], False, 0, 0, 0
    for event, module in _module_events(call):
        before = stack[-1] if stack else None
        stack = stack + [module] if event == "call" else stack[:-1]
        now = stack[-1] if stack else None
        if not started:
            started = (event, before, module) == (
                "call",
                "sinusoidal",
                "_checks/positions",
            )
            entries = int(started)
        elif now not in (before, None) and event == "call":
            entries += 1
            up += _LAYERS.get(now, 0) > _LAYERS.get(before, 0)
        elif now not in (before, None):
            returns += 1
            if now == "sinusoidal":
                break
    return entries, up, returns


START_INDEX_KINDS = {
    "int": 5,
    "numpy-int": np.int64(5),
    "per-example": np.array([1]),
    "past-int32": 2**32,
    "numpy-past-int32": np.int64(-(2**40)),
    "float": 2.5,
    "bool": True,
    "none": None,
    "bad-rank": np.zeros((2, 2), "int32"),
    "past-2**31": 2**31 - 2,
    "time": np.timedelta64(5),
}


@pytest.mark.parametrize("kind", sorted(START_INDEX_KINDS))
def test_start_index_is_parsed_once_and_raised_once(kind):
    # Followed from the layer's call, a start_index (good or bad) enters at
    # most 8 modules, goes back up the layers at most twice and comes back
    # to a module it had left at most 3 times: no bouncing between modules
    # per kind of wrong value.
    layer = keras_posenc.SinusoidalPositionEncoding()
    x = ops.convert_to_tensor(np.zeros((1, 4, 8), "float32"))
    layer(x)
    start = START_INDEX_KINDS[kind]
    entries, up, returns = _start_index_path(lambda: layer.call(x, start_index=start))
    assert 1 <= entries <= 8 and up <= 2 and returns <= 3, (entries, up, returns)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda v: keras_posenc.timestep_embedding(v, 8), "timesteps"),
        (lambda v: keras_posenc.TimestepEmbedding(8)(v), "timesteps"),
        (lambda v: keras_posenc.rotary_cos_sin(v, 8), "positions"),
        (lambda v: keras_posenc.sinusoidal_table(3, 8, start_index=v), "start_index"),
        (
            lambda v: keras_posenc.SinusoidalPositionEncoding()(
                np.ones((2, 2, 8), "float32"), positions=v
            ),
            "positions",
        ),
    ],
    ids=["timestep", "timestep-layer", "rotary", "table-start", "layer-positions"],
)
def test_ragged_lists_are_refused_by_name(call, name):
    # numpy's own message ("inhomogeneous shape") names no argument.
    message = (
        f"Received an invalid value for `{name}`, expected a rectangular array "
        f"(every row of one length), not ragged lists. Received: {name}=[[1, 2], [3]]"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        call([[1, 2], [3]])
