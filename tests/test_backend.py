"""`keras_posenc._backend` under compilers: the failure policy and tables computed once.

A value known only when a graph runs trips a TensorFlow graph assertion
naming the argument; where assertions cannot run (XLA, `jax.jit`) every row
is NaN, never the rows of a wrapped position. Under XLA the engine's
tables are computed once per call, never inside the output loop.
"""

import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, only_jax, only_tensorflow, to_numpy, traced
from keras import ops

import keras_posenc
from keras_posenc import _backend


def _nan_rows(table):
    """Whether every value is NaN (and there is at least one)."""
    values = to_numpy(table)
    return values.size > 0 and bool(np.isnan(values).all())


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

    build = traced(lambda v: _table_of(name, v))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"`{name}`"):
        build(tf.constant(value, dtype))


@only_tensorflow
@pytest.mark.parametrize("name, dtype, value", DYNAMIC_CASES)
def test_xla_dynamic_values_give_nan_rows_never_wrapped_rows(name, dtype, value):
    # XLA compiles assertions out: every row is NaN (a negative length
    # gives no rows at all), never the rows of a wrapped position.
    import tensorflow as tf

    table = traced(lambda v: _table_of(name, v), jit_compile=True)(
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
        traced(encode)(tf.constant(value, dtype))
    assert _nan_rows(traced(encode, jit_compile=True)(tf.constant(value, dtype)))


@only_jax
@pytest.mark.parametrize(
    "dtype, value", [("int32", 2**31 - 2), ("uint32", 2**32 - 1), ("uint32", 2**31)]
)
def test_jax_jit_invalid_traced_start_gives_nan_rows(dtype, value):
    # jax.jit cannot raise on a traced value: the rows are NaN instead.
    import jax

    build = jax.jit(lambda s: keras_posenc.sinusoidal_table(4, 8, start_index=s))
    assert _nan_rows(build(np.array(value, dtype)))


# -- tables computed once: the engine runs once per call under XLA (_platform) --

xla_only = pytest.mark.skipif(
    BACKEND not in ("jax", "tensorflow"), reason="XLA: JAX or TensorFlow"
)


def _runtime_zero(x):
    """0 as a run-time value: no compiler can fold the tables into constants."""
    return ops.cast(ops.reshape(x, (-1,))[0] * 0, "int32")


def _at_runtime_positions(layer, positions):
    """`layer` called at run-time positions: a start, or explicit positions."""
    if positions:
        return lambda x: layer(x, positions=_runtime_zero(x) + ops.arange(256))
    return lambda x: layer(x, start_index=_runtime_zero(x))


@xla_only
@pytest.mark.parametrize("positions", [False, True], ids=["start", "positions"])
@pytest.mark.parametrize(
    "make_layer, shape, most",
    [
        (keras_posenc.RotaryEmbedding, (2, 256, 4, 64), 20),
        (keras_posenc.SinusoidalPositionEncoding, (2, 256, 64), 80),
    ],
    ids=["rope", "sinusoidal"],
)
def test_xla_output_kernel_holds_no_engine(make_layer, shape, most, positions):
    # The kernel that writes the output holds the rotation (11 HLO
    # instructions) or the add of the fine rows (45-55); with the engine
    # fused into it, redone for every batch row and head, 240 or more.
    from benchmarks.forward import output_fusion_ops

    x = ops.convert_to_tensor(np.ones(shape, "float32"))
    call = _at_runtime_positions(make_layer(), positions)
    assert output_fusion_ops(call, x) <= most


@xla_only
@pytest.mark.parametrize("positions", [False, True], ids=["start", "positions"])
def test_xla_rows_from_the_lowest_position_take_the_other_branch_same_bits(
    positions,
):
    # Under XLA the engine's coarse rows are computed inside a conditional;
    # when the first coarse position is -2**31 its other branch (a scatter)
    # runs. Rows from there are the bits of the same rows reached the
    # usual way (from a start 64 positions higher).
    low = -(2**31)
    layer = keras_posenc.SinusoidalPositionEncoding(merge=None)
    x = ops.convert_to_tensor(np.ones((1, 192, 16), "float32"))

    def rows_from(first):
        def call(x):
            start = _runtime_zero(x) + first
            if positions:
                return layer(x, positions=start + ops.arange(192))
            return layer(x, start_index=start)

        return to_numpy(traced(call, jit_compile=True)(x))[0]

    lowest, usual = rows_from(low), rows_from(low + 64)
    assert np.isfinite(lowest).all()
    assert lowest[64:].tobytes() == usual[:128].tobytes()


@only_jax
@pytest.mark.skipif(LEGACY, reason="Keras 3 only")
def test_jax_jit_a_nan_first_row_leaves_the_other_rows_bit_for_bit():
    # The tables leave XLA's fusion through a conditional on their first
    # value; a NaN there (a fractional position) takes the other branch,
    # whose values are the same.
    import jax

    from keras_posenc import compat

    x = np.random.default_rng(0).standard_normal((1, 3, 8)).astype("float32")
    layer = compat.RotaryEmbedding()
    rotate = jax.jit(lambda p: layer(x, positions=p))
    nan_first = to_numpy(rotate(np.array([[0.5, 1.0, 7.0]], "float32")))[0]
    valid = to_numpy(rotate(np.array([[0.0, 1.0, 7.0]], "float32")))[0]
    assert np.isnan(nan_first[0]).all()
    assert nan_first[1:].tobytes() == valid[1:].tobytes()


@pytest.mark.parametrize("shape", [(4, 1, 8, 2, 32), (-1,), (32, 64)])
def test_reshape_matches_numpy_on_tensors_and_arrays(shape):
    """The backend's own reshape (eager torch) is Keras's: same values, shape."""
    values = np.random.default_rng(0).normal(size=(4, 1, 8, 64)).astype("float32")
    for given in (values, ops.convert_to_tensor(values)):
        out = _backend.reshape(given, shape)
        np.testing.assert_array_equal(to_numpy(out), values.reshape(shape))


@only_jax
def test_unstack_on_jax_compiles_one_program_for_every_row(caplog):
    # Iterating a JAX array compiled splits into up to 100 outputs: 6.7 s
    # for a decoding block's 512 rows, most of a process's first eager call
    # (9 s against keras-hub's 2). One compiled dynamic index serves them all.
    import jax

    _backend.unstack(ops.zeros((300, 1, 5)))  # what any shape shares, made once
    values = np.arange(300 * 7, dtype="float32").reshape(300, 1, 7)  # a new shape
    tensor = ops.convert_to_tensor(values)
    with caplog.at_level("WARNING"), jax.log_compiles(True):
        rows = _backend.unstack(tensor)
    compiled = [r for r in caplog.records if "Finished XLA compilation" in r.message]
    assert len(compiled) == 1, [r.message for r in compiled]
    np.testing.assert_array_equal(np.stack([to_numpy(r) for r in rows]), values)


def test_unstack_gives_each_row_as_its_own_tensor():
    values = np.random.default_rng(1).normal(size=(130, 1, 1, 6)).astype("float32")
    rows = _backend.unstack(ops.convert_to_tensor(values))
    assert len(rows) == 130
    for row, want in zip(rows, values, strict=True):
        np.testing.assert_array_equal(to_numpy(row), want)
