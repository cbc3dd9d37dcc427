"""The failure policy of `keras_posenc._backend.guard` for traced values.

A value known only when a graph runs trips a TensorFlow graph assertion
naming the argument; where assertions cannot run (XLA, `jax.jit`) every row
is NaN, never the rows of a wrapped position.
"""

import numpy as np
import pytest
from _helpers import only_jax, only_tensorflow, to_numpy, traced

import keras_posenc


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
