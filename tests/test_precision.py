"""Precision: within 2e-7 of exact at every position below 2**31, every path.

Reference: float64 numpy below 2**24 (exact to ~1e-9 there), 40-digit
mpmath above. Correct rounding would give 3e-8; 2e-7 is about three ulps.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import LAYOUTS, keras, reference, reference_mp

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding

TOL = 2e-7
# Windows of 64 positions around each landmark, and a random sample.
LANDMARKS = [2**10, 2**16, 2**20, 2**24 - 64]
RANDOM = np.random.default_rng(7).integers(0, 2**24 - 64, 48)


def _lookup_options(start, length):
    return {"mode": "lookup", "max_length": int(start + length)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [2, 31, 512, 4096])
def test_table_at_landmarks(layout, depth):
    for start in LANDMARKS:
        got = keras_posenc.sinusoidal_table(64, depth, start_index=start, layout=layout)
        want = reference(start + np.arange(64), depth, layout=layout)
        err = np.abs(got.numpy() - want).max()
        assert err <= TOL, (start, err)


def test_random_positions_all_depth_4096_frequencies():
    got = keras_posenc.sinusoidal_table(1, 4096, start_index=0)  # warm the constants
    for start in RANDOM:
        got = keras_posenc.sinusoidal_table(3, 4096, start_index=int(start))
        assert np.abs(got.numpy() - reference(start + np.arange(3), 4096)).max() <= TOL


def test_naive_float32_formula_fails_where_we_do_not():
    # The usual float32 code at 2**20: error ~0.06, 3e5 times our bound.
    pos = np.arange(2**20, 2**20 + 64, dtype=np.float32)[:, None]
    omega = (1e4 ** (-np.arange(0, 64, 2) / 64)).astype(np.float32)
    naive = np.sin(pos * omega)
    exact = reference(2**20 + np.arange(64), 64)[:, 0::2]
    assert np.abs(naive - exact).max() > 1e-2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_layer_paths_eager_function_xla(mode, layout):
    # Shared start, [B] offsets, and [B, L] int32/int64 positions; eager,
    # tf.function and jit_compile=True, all against the same reference.
    starts = np.array([2**10, 2**16 + 3, 2**20 - 5, 2**24 - 40])
    length, depth = 24, 64
    options = _lookup_options(starts.max(), length) if mode == "lookup" else {"mode": "compute"}
    layer = SinusoidalPositionEncoding(merge=None, depth=depth, layout=layout, **options)
    x = tf.zeros((4, length, 1))
    positions = starts[:, None] + np.arange(length)
    want = reference(positions, depth, layout=layout)

    def all_paths(x, starts, positions64):
        return (
            layer(x, start_index=starts[3]),
            layer(x, start_index=starts),
            layer(x, positions=tf.cast(positions64, tf.int32)),
            layer(x, positions=positions64),
        )

    args = (x, tf.constant(starts, tf.int32), tf.constant(positions, tf.int64))
    for fn in (all_paths, tf.function(all_paths), tf.function(all_paths, jit_compile=True)):
        shared, per_example, pos32, pos64 = fn(*args)
        assert np.abs(shared.numpy()[0] - want[3]).max() <= TOL
        for got in (per_example, pos32, pos64):
            assert np.abs(got.numpy() - want).max() <= TOL


@pytest.mark.parametrize("start", [2**24 - 1, 2**24, 2**28 + 12345, 2**31 - 8])
def test_beyond_float32_integers_up_to_2_31(start):
    # float32 cannot represent these positions; ours stay int32 end to end.
    depth = 16
    want = reference_mp(start + np.arange(8), depth)
    got = keras_posenc.sinusoidal_table(8, depth, start_index=start).numpy()
    assert np.abs(got - want).max() <= TOL
    layer = SinusoidalPositionEncoding(merge=None, depth=depth)
    got = layer(tf.zeros((1, 8, 1)), positions=tf.constant(start + np.arange(8), tf.int64)).numpy()
    assert np.abs(got[0] - want).max() <= TOL


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16", "float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_16_bit_policies_are_correctly_rounded(policy, mode):
    # The output is the exact value rounded to the 16-bit dtype (ties within
    # 2e-7 of a rounding boundary may go either way), at positions past 2**16.
    keras.mixed_precision.set_global_policy(policy)
    dtype = tf.as_dtype(policy.replace("mixed_", ""))
    start, length, depth = 2**16 + 2**15, 256, 128
    options = _lookup_options(start, length) if mode == "lookup" else {}
    layer = SinusoidalPositionEncoding(merge=None, depth=depth, **options)
    got = layer(tf.zeros((1, length, 1)), start_index=start)[0]
    assert got.dtype == dtype
    exact = reference(start + np.arange(length), depth)
    rounded = tf.cast(tf.constant(exact), dtype).numpy().astype(np.float64)
    got = got.numpy().astype(np.float64)
    assert (got == rounded).mean() >= 0.999
    assert np.abs(got - exact).max() <= np.abs(rounded - exact).max() + TOL


def test_saved_model_and_tflite_keep_the_precision(tmp_path):
    start = 2**24 - 100
    layer = SinusoidalPositionEncoding(merge=None, depth=64)
    want = reference(start + np.arange(50), 64)
    fn = tf.function(lambda x: layer(x, start_index=start), input_signature=[tf.TensorSpec([1, None, 1])])
    module = tf.Module()
    module.f = fn
    tf.saved_model.save(module, str(tmp_path / "sm"))
    got = tf.saved_model.load(str(tmp_path / "sm")).f(tf.zeros((1, 50, 1)))
    assert np.abs(got.numpy()[0] - want).max() <= TOL

    from ai_edge_litert.interpreter import Interpreter

    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(inp["index"], [1, 50, 1])
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], np.zeros((1, 50, 1), np.float32))
    interpreter.invoke()
    assert np.abs(interpreter.get_tensor(out["index"])[0] - want).max() <= TOL


def test_graph_has_no_float64_op():
    # TPUs and TFLite have no float64: every op in the graph is int32/float32.
    layer = SinusoidalPositionEncoding(mode="compute")
    fn = tf.function(lambda x, p: (layer(x, start_index=5), layer(x, positions=p)))
    graph = fn.get_concrete_function(tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None], tf.int64)).graph
    for op in graph.get_operations():
        for t in list(op.inputs) + list(op.outputs):
            assert t.dtype != tf.float64, op.name


@pytest.mark.skipif(not os.environ.get("KERAS_POSENC_EXHAUSTIVE"), reason="set KERAS_POSENC_EXHAUSTIVE=1 (minutes)")
def test_exhaustive_every_position_below_2_24():
    # Every position in [0, 2**24) at depth 64, in 2**18-row blocks.
    worst = 0.0
    for start in range(0, 2**24, 2**18):
        got = keras_posenc.sinusoidal_table(2**18, 64, start_index=start).numpy()
        worst = max(worst, np.abs(got - reference(start + np.arange(2**18), 64)).max())
    assert worst <= TOL, worst
