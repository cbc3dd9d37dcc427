"""Precision: within 2e-7 of exact at every int32 position, every path, every backend.

References: the float64 formula of `_helpers.reference` below 2**24 (exact
to ~1e-9 there) and the mpmath one of `_helpers.reference_mp` beyond it
and for negative positions. Correct rounding would give 3e-8; TOL = 2e-7
is about three float32 ulps.
"""

import os

import ml_dtypes
import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LAYOUTS,
    TOL,
    keras,
    only_tensorflow,
    reference,
    reference_mp,
    to_numpy,
)
from keras import backend, ops

import keras_posenc
from keras_posenc import SinusoidalPositionEncoding

# Windows of 64 positions starting at each landmark.
LANDMARKS = [2**10, 2**16, 2**20, 2**24 - 64]
# The widest integer dtype each backend has (JAX runs without x64).
WIDE_INT = "int32" if BACKEND == "jax" else "int64"


def _max_error(got, want):
    return float(np.abs(to_numpy(got).astype(np.float64) - want).max())


def _bare_layer(depth, **options):
    """The encoding alone (merge=None), `[batch, length, depth]`."""
    return SinusoidalPositionEncoding(merge=None, depth=depth, **options)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [2, 31, 512, 4096])
def test_table_at_landmarks(layout, depth):
    # 64 rows at 2**10, 2**16, 2**20 and just below 2**24, every column.
    for start in LANDMARKS:
        got = keras_posenc.sinusoidal_table(64, depth, start_index=start, layout=layout)
        want = reference(start + np.arange(64), depth, layout=layout)
        assert _max_error(got, want) <= TOL, start


def test_random_positions_at_depth_4096():
    # 64 random positions below 2**24, all 4096 columns (2048 frequencies),
    # as one explicit-positions call and as 3-row tables at 8 of them.
    positions = np.random.default_rng(7).integers(0, 2**24 - 64, 64)
    want = reference(positions, 4096)
    got = _bare_layer(4096)(np.zeros((1, 64, 1), "float32"), positions=positions[None])
    assert _max_error(got[0], want) <= TOL
    for start in positions[:8]:
        got = keras_posenc.sinusoidal_table(3, 4096, start_index=int(start))
        assert _max_error(got, reference(start + np.arange(3), 4096)) <= TOL


def test_naive_float32_formula_fails_where_we_do_not():
    # At positions 2**20 .. 2**20 + 63 the usual float32 formula (angle
    # p * w formed in float32) is off by more than 1e-2; ours, at the same
    # positions, stays within TOL.
    positions = 2**20 + np.arange(64)
    exact = reference(positions, 64)
    omega = (1e4 ** (-np.arange(0, 64, 2) / 64)).astype(np.float32)
    angle = positions.astype(np.float32)[:, None] * omega
    naive = np.empty((64, 64), np.float32)
    naive[:, 0::2], naive[:, 1::2] = np.sin(angle), np.cos(angle)
    ours = keras_posenc.sinusoidal_table(64, 64, start_index=2**20)
    naive_error, our_error = _max_error(naive, exact), _max_error(ours, exact)
    assert our_error <= TOL
    assert naive_error > 1e-2
    assert naive_error > 1e4 * our_error


def _paths():
    """(layout, path) pairs: both layouts eagerly, one through each compiler."""
    compilers = {
        "tensorflow": ["tf.function", "xla"],
        "jax": ["jax.jit"],
    }.get(BACKEND, [])
    return [
        pytest.param(layout, "eager", id=f"{layout}-eager") for layout in LAYOUTS
    ] + [
        pytest.param("interleaved", path, id=f"interleaved-{path}")
        for path in compilers
    ]


def _compiled(fn, path):
    if path == "tf.function":
        import tensorflow as tf

        return tf.function(fn)
    if path == "xla":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if path == "jax.jit":
        import jax

        return jax.jit(fn)
    return fn


@pytest.mark.parametrize("layout, path", _paths())
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_layer_paths(mode, layout, path):
    # Shared start, [B] offsets, and [B, L] positions (int32 and the widest
    # int), against one reference. Lookup tables stop at 2**17 rows (32 MB).
    length, depth = 24, 64
    if mode == "lookup":
        starts = np.array([2**10, 2**14 + 3, 2**16 - 5, 2**17 - 40])
        options = {"mode": "lookup", "max_length": 2**17}
    else:
        starts = np.array([2**10, 2**16 + 3, 2**20 - 5, 2**24 - 40])
        options = {"mode": "compute"}
    layer = _bare_layer(depth, layout=layout, **options)
    positions = starts[:, None] + np.arange(length)
    want = reference(positions, depth, layout=layout)

    def all_paths(x, starts, positions32, positions_wide):
        return (
            layer(x, start_index=starts[3]),
            layer(x, start_index=starts),
            layer(x, positions=positions32),
            layer(x, positions=positions_wide),
        )

    args = (
        ops.zeros((4, length, 1)),
        ops.convert_to_tensor(starts, "int32"),
        ops.convert_to_tensor(positions, "int32"),
        ops.convert_to_tensor(positions, WIDE_INT),
    )
    shared, per_example, pos32, pos_wide = _compiled(all_paths, path)(*args)
    assert _max_error(to_numpy(shared)[0], want[3]) <= TOL
    for got in (per_example, pos32, pos_wide):
        assert _max_error(got, want) <= TOL


@pytest.mark.parametrize("start", [2**24 - 1, 2**24, 2**28 + 12345, 2**31 - 8])
def test_beyond_float32_integers_up_to_2_31(start):
    # float32 cannot hold these positions; ours stay int32 end to end
    # (table and explicit positions of the widest int dtype).
    depth = 16
    want = reference_mp(start + np.arange(8), depth)
    got = keras_posenc.sinusoidal_table(8, depth, start_index=start)
    assert _max_error(got, want) <= TOL
    positions = ops.convert_to_tensor(start + np.arange(8)[None], WIDE_INT)
    got = _bare_layer(depth)(np.zeros((1, 8, 1), "float32"), positions=positions)
    assert _max_error(to_numpy(got)[0], want) <= TOL


@pytest.mark.parametrize("start", [-(2**31), -(2**28) - 7, -(2**24) - 1, -64])
def test_negative_positions_down_to_minus_2_31(start):
    # Relative distances: negative positions are as exact as positive ones.
    depth = 16
    want = reference_mp(start + np.arange(8), depth)
    got = keras_posenc.sinusoidal_table(8, depth, start_index=start)
    assert _max_error(got, want) <= TOL
    positions = start + np.arange(8)[None]
    got = _bare_layer(depth)(np.zeros((1, 8, 1), "float32"), positions=positions)
    assert _max_error(to_numpy(got)[0], want) <= TOL


def test_mirror_symmetry_at_the_int32_ends():
    # sin(-p w) = -sin(p w) and cos(-p w) = cos(p w), bit for bit at the
    # largest positions (the two ends of int32 go through different chunks).
    depth = 32
    high = to_numpy(keras_posenc.sinusoidal_table(8, depth, start_index=2**31 - 8))
    low = to_numpy(keras_posenc.sinusoidal_table(8, depth, start_index=-(2**31) + 1))
    mirrored = high[::-1] * np.where(np.arange(depth) % 2 == 0, -1.0, 1.0)
    np.testing.assert_allclose(low, mirrored, rtol=0, atol=2 * TOL)


def _mpmath_split(depth, max_wavelength):
    """hi, mid, lo of frac(2**(12k) f) for each frequency, straight from mpmath."""
    import mpmath

    mpmath.mp.dps = 80 + max(0, int(-mpmath.log10(max_wavelength)))
    hi, mid, lo = (np.zeros((3, depth // 2), dtype) for dtype in ("i8", "i8", "f8"))
    for i in range(depth // 2):
        f = mpmath.mpf(max_wavelength) ** (mpmath.mpf(-2 * i) / depth) / (2 * mpmath.pi)
        for k in range(3):
            t = mpmath.frac(f * 2 ** (12 * k))
            h = int(mpmath.nint(t * 4096))
            rest = t - mpmath.mpf(h) / 4096
            m = int(mpmath.nint(rest * 2**24))
            hi[k, i], mid[k, i] = h % 4096, m
            lo[k, i] = float(rest - mpmath.mpf(m) / 2**24)
    return hi, mid, lo


@pytest.mark.parametrize("max_wavelength", [1e-300, 1e-30, 0.5, 2.0, 1e4, 1e300])
def test_phase_constants_match_mpmath(max_wavelength):
    # The host constants (decimal recurrence, integer split) equal an
    # independent mpmath computation: the int32 parts bit for bit, the
    # float32 rest to its last bit (|lo| <= 2**-25).
    from keras_posenc._exact import phase_constants as _phase_constants

    depth = 64
    constants = _phase_constants.sinusoidal_constants(
        depth, max_wavelength, "concatenated"
    )
    hi, mid, lo = _mpmath_split(depth, max_wavelength)
    np.testing.assert_array_equal(constants.turn_hi[:, : depth // 2], hi)
    np.testing.assert_array_equal(constants.turn_mid[:, : depth // 2], mid)
    np.testing.assert_allclose(
        constants.turn_lo[:, : depth // 2], lo, rtol=0, atol=2.0**-49
    )


def _float32_formula(q, constants, table):
    """sin and cos of ``q * w``: the engine's steps restated in numpy float32."""
    f32 = np.float32
    q = q.astype(np.int64)[:, None]
    chunks = (q % 4096, (q // 4096) % 4096, q // 4096**2)
    hi = sum(c * constants.turn_hi[k] for k, c in enumerate(chunks))
    mid = sum(c * constants.turn_mid[k] for k, c in enumerate(chunks))
    parts = [c.astype(f32) * constants.turn_lo[k] for k, c in enumerate(chunks)]
    rest = (parts[0] + parts[1]) + parts[2]
    phase = ((hi % 4096) * 4096 + mid) % 2**24
    j = (phase + 2**15) // 2**16
    theta = ((phase - j * 2**16).astype(f32) * f32(2.0**-24) + rest) * f32(2 * np.pi)
    theta2 = theta * theta
    sin_t = theta * (f32(1) - theta2 * f32(1 / 6))
    versine = theta2 * (f32(0.5) - theta2 * f32(1 / 24))
    s_hi, s_lo, c_hi, c_lo = (table[j, i] for i in range(4))
    sin = s_hi + (s_lo + (c_hi * sin_t - s_hi * versine))
    cos = c_hi + (c_lo - (s_hi * sin_t + c_hi * versine))
    return sin, cos


@pytest.mark.skipif(
    BACKEND == "jax", reason="XLA on CPU may fuse products and sums (FMA rounding)"
)
@pytest.mark.parametrize("shape", ["static", "dynamic"])
def test_engine_rounds_as_its_float32_formula(shape):
    # Every float32 operation of the engine rounds as written, whatever TF's
    # graph optimizer knows of the shapes: it regroups chains of additions
    # or products (rounding differently) only where shapes are known, which
    # once made rows depend on the call path.
    from keras_posenc._exact import engine as _engine
    from keras_posenc._exact import phase_constants as _phase_constants

    constants = _phase_constants.sinusoidal_constants(2048, 10000.0, "interleaved")
    rng = np.random.default_rng(0)
    q = np.concatenate(
        [rng.integers(-(2**25), 2**25, 4094) * 64, [-(2**31), 2**31 - 64]]
    )
    q = q.astype("int32")

    engine_constants = _engine.EngineConstants.of(constants)

    def sincos(q):
        return _engine._sincos(q, engine_constants)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        spec = tf.TensorSpec([q.size] if shape == "static" else [None], tf.int32)
        sincos = tf.function(sincos, input_signature=[spec], autograph=False)
    pair = to_numpy(sincos(ops.convert_to_tensor(q)))  # [N, 2, n]: sin, cos
    want = _float32_formula(q, constants, _phase_constants.TURN_TABLE)
    for got_values, want_values in zip(pair.swapaxes(0, 1), want, strict=True):
        assert np.ascontiguousarray(got_values).tobytes() == want_values.tobytes()


@pytest.mark.parametrize("xla", [False, True], ids=["eager-ops", "xla-ops"])
def test_engine_phase_is_exact_both_ways(xla, monkeypatch):
    # The engine's integer steps have two forms (divisions eagerly; shifts,
    # products and sums under XLA, which fuses them into one loop): both
    # give Python's integers, at the ends of int32 too.
    from keras_posenc import _backend
    from keras_posenc._exact import engine as _engine
    from keras_posenc._exact import phase_constants as _phase_constants

    constants = _phase_constants.sinusoidal_constants(2048, 10000.0, "interleaved")
    ends = [-(2**31), 1 - 2**31, -4097, -4096, -1, 0, 1, 4095, 4096, 2**24, 2**31 - 1]
    random = np.random.default_rng(1).integers(-(2**31), 2**31, 2000)
    q = np.concatenate([ends, random]).astype("int32")
    monkeypatch.setattr(_backend, "in_xla", lambda: xla)
    engine_constants = _engine.EngineConstants.of(constants)
    chunks, phase = _engine._phase(ops.convert_to_tensor(q), engine_constants)
    wide = q.astype(np.int64)[:, None]
    want = [wide % 4096, (wide // 4096) % 4096, wide // 4096**2]
    hi = sum(c * constants.turn_hi[k] for k, c in enumerate(want))
    mid = sum(c * constants.turn_mid[k] for k, c in enumerate(want))
    np.testing.assert_array_equal(
        to_numpy(chunks).reshape(len(q), 3), np.concatenate(want, axis=1)
    )
    np.testing.assert_array_equal(
        to_numpy(phase).reshape(len(q), -1), ((hi % 4096) * 4096 + mid) % 2**24
    )


_BITS16 = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.mark.parametrize(
    "policy", ["mixed_float16", "mixed_bfloat16", "float16", "bfloat16"]
)
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_16_bit_policies_are_correctly_rounded(policy, mode):
    # The output is the exact value rounded once to the 16-bit dtype (ties
    # within 2e-7 of a rounding boundary may go either way), past 2**16.
    keras.mixed_precision.set_global_policy(policy)
    dtype = policy.replace("mixed_", "")
    start, length, depth = 2**16 + 2**15, 256, 128
    options = (
        {"mode": "lookup", "max_length": start + length} if mode == "lookup" else {}
    )
    layer = _bare_layer(depth, **options)
    got = layer(np.zeros((1, length, 1), dtype), start_index=start)[0]
    assert backend.standardize_dtype(got.dtype) == dtype
    exact = reference(start + np.arange(length), depth)
    rounded = exact.astype(_BITS16[dtype]).astype(np.float64)
    got = to_numpy(got).astype(np.float64)
    assert (got == rounded).mean() >= 0.999
    assert np.abs(got - exact).max() <= np.abs(rounded - exact).max() + TOL


@only_tensorflow
def test_saved_model_and_tflite_keep_the_precision(tmp_path):
    # A tf.function SavedModel and its TFLite conversion (builtins only)
    # give the same values just below 2**24.
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    start = 2**24 - 100
    layer = _bare_layer(64)
    want = reference(start + np.arange(50), 64)
    fn = tf.function(
        lambda x: layer(x, start_index=start),
        input_signature=[tf.TensorSpec([1, None, 1])],
    )
    module = tf.Module()
    module.f = fn
    tf.saved_model.save(module, str(tmp_path / "sm"))
    got = tf.saved_model.load(str(tmp_path / "sm")).f(tf.zeros((1, 50, 1)))
    assert _max_error(got.numpy()[0], want) <= TOL

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [fn.get_concrete_function()], module
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=converter.convert())
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.resize_tensor_input(inp["index"], [1, 50, 1])
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], np.zeros((1, 50, 1), np.float32))
    interpreter.invoke()
    assert _max_error(interpreter.get_tensor(out["index"])[0], want) <= TOL


@only_tensorflow
def test_graph_has_no_float64_op():
    # TPUs and TFLite have no float64: the layer and the table function,
    # fed int64 positions and dynamic lengths, use int32/float32 only.
    import tensorflow as tf

    layer = SinusoidalPositionEncoding(mode="compute")

    def encode(x, positions, length, start):
        return (
            layer(x, start_index=5),
            layer(x, positions=positions),
            keras_posenc.sinusoidal_table(length, 8, start_index=start),
            keras_posenc.positional_encoding(2, length, 8, start_index=start),
        )

    graph = (
        tf.function(encode)
        .get_concrete_function(
            tf.TensorSpec([None, None, 8]),
            tf.TensorSpec([None, None], tf.int64),
            tf.TensorSpec([], tf.int64),
            tf.TensorSpec([], tf.int64),
        )
        .graph
    )
    for op in graph.get_operations():
        for tensor in list(op.inputs) + list(op.outputs):
            assert tensor.dtype != tf.float64, op.name


@pytest.mark.skipif(
    not os.environ.get("KERAS_POSENC_EXHAUSTIVE"),
    reason="set KERAS_POSENC_EXHAUSTIVE=1 to sweep every position below 2**24",
)
def test_exhaustive_every_position_below_2_24():
    # Every position in [0, 2**24) at depth 64, in 2**18-row blocks.
    worst = 0.0
    for start in range(0, 2**24, 2**18):
        got = keras_posenc.sinusoidal_table(2**18, 64, start_index=start)
        worst = max(worst, _max_error(got, reference(start + np.arange(2**18), 64)))
    assert worst <= TOL, worst
