"""`SinusoidalPositionEncoding` (`keras_posenc.sinusoidal`): behaviours, values, errors.

Runs under KERAS_BACKEND=tensorflow, jax and torch, and under tf-keras
(TF_USE_LEGACY_KERAS=1). Values are checked against the float64 and mpmath
references of `_helpers`; "bit-identical" claims use `np.array_equal`.
Shapes are small and shared between tests: JAX compiles once per shape.
"""

import json
import math
import re
import time
import zipfile

import ml_dtypes
import numpy as np
import pytest
from _helpers import (
    BACKEND,
    FAST,
    LAYOUTS,
    MODES,
    TABLE_MESSAGE,
    TOL,
    fairseq_positions,
    keras,
    keras3_only,
    max_diff,
    only_jax,
    only_tensorflow,
    random_inputs,
    reference,
    reference_mp,
    tensor2tensor_table,
    to_numpy,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from keras import ops
from keras.backend import standardize_dtype

from keras_posenc import SinusoidalPositionEncoding

only_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch only")

# The shape most tests share (JAX compiles the engine once per shape).
BATCH, LENGTH, DEPTH = 2, 8, 8
# The option dicts of MODES, for tests about one mode.
COMPUTE, LOOKUP = (param.values[0] for param in MODES)


def _x(batch=BATCH, length=LENGTH, depth=DEPTH, seed=0):
    return random_inputs(batch, length, depth, seed)


def _zeros(batch=BATCH, length=LENGTH, depth=DEPTH, dtype="float32"):
    return np.zeros((batch, length, depth), dtype)


def _int_tensor(values, dtype="int32"):
    return ops.convert_to_tensor(np.asarray(values, dtype), dtype)


def _has_int64():
    if BACKEND != "jax":
        return True
    import jax

    return bool(jax.config.jax_enable_x64)


def _encoding(options, **kwargs):
    """A `merge=None` layer: its output is the encoding alone."""
    return SinusoidalPositionEncoding(merge=None, **options, **kwargs)


INT64 = pytest.param(
    "int64",
    marks=pytest.mark.skipif(
        not _has_int64(), reason="JAX without jax_enable_x64 has no int64"
    ),
)


# -- behaviours -------------------------------------------------------------


@pytest.mark.parametrize("options", MODES)
def test_layer_behaviours(options):
    # Config round trip (plain JSON), symbolic call, output shape, no
    # weights, eager values, and one training step with a finite loss.
    layer = SinusoidalPositionEncoding(**options)
    config = layer.get_config()
    json.dumps(config)
    clone = SinusoidalPositionEncoding.from_config(config)
    assert clone.get_config() == config

    inputs = keras.Input(shape=(None, DEPTH))
    outputs = keras.layers.Dense(3)(layer(inputs))
    model = keras.Model(inputs, outputs)
    assert tuple(outputs.shape) == (None, None, 3)
    assert tuple(layer.compute_output_shape((None, None, DEPTH))) == (
        None,
        None,
        DEPTH,
    )
    assert model.count_params() == DEPTH * 3 + 3  # Dense only
    assert layer.weights == []

    x = _x()
    expected = x + reference(np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, rtol=0, atol=TOL)

    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, np.zeros((BATCH, LENGTH, 3)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@keras3_only
@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize(
    "kwargs, input_shape, input_dtype, output_shape",
    [
        pytest.param({}, (2, 8, 8), "float32", (2, 8, 8), id="add"),
        pytest.param(
            {"merge": "concat", "depth": 7},
            (2, 8, 8),
            "float32",
            (2, 8, 15),
            id="concat",
        ),
        pytest.param(
            {"merge": None, "depth": 8}, (2, 8), "int32", (2, 8, 8), id="token-ids"
        ),
        pytest.param(
            {"sequence_axis": -2}, (2, 3, 8, 8), "float32", (2, 3, 8, 8), id="rank4"
        ),
    ],
)
def test_keras_run_layer_test(options, kwargs, input_shape, input_dtype, output_shape):
    # Keras's own layer checks: serialization, symbolic and eager calls,
    # masking support, no weights, mixed precision dtypes, and (for "add",
    # to spare JAX one compile per variant) a training run.
    from keras.src.testing import TestCase

    TestCase().run_layer_test(
        SinusoidalPositionEncoding,
        init_kwargs={**options, **kwargs},
        input_shape=input_shape,
        input_dtype=input_dtype,
        expected_output_shape=output_shape,
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=True,
        run_training_check=not kwargs,
    )


# -- values -----------------------------------------------------------------


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [1, 7, 64])
def test_add_matches_reference(options, layout, depth):
    # Odd depths end with a sine column; both layouts; inputs + PE.
    x = _x(depth=depth)
    out = SinusoidalPositionEncoding(layout=layout, **options)(x)
    expected = x + reference(np.arange(LENGTH), depth, layout=layout)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_merge_none_is_the_encoding_alone(options):
    # merge=None returns PE shaped as the inputs with `depth` features.
    out = to_numpy(_encoding(options, depth=7)(_x()))
    assert out.shape == (BATCH, LENGTH, 7)
    for row in out:
        np.testing.assert_allclose(row, reference(np.arange(LENGTH), 7), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_merge_concat_appends_the_encoding(options):
    # The input features come first, unchanged; PE fills the new `depth` ones.
    x = _x()
    out = to_numpy(SinusoidalPositionEncoding(merge="concat", depth=7, **options)(x))
    assert out.shape == (BATCH, LENGTH, DEPTH + 7)
    np.testing.assert_array_equal(out[..., :DEPTH], x)
    expected = np.broadcast_to(reference(np.arange(LENGTH), 7), (BATCH, LENGTH, 7))
    np.testing.assert_allclose(out[..., DEPTH:], expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_scale_inputs_multiplies_by_sqrt_depth(options):
    # Section 3.4 of the paper: inputs * sqrt(d_model) + PE.
    x = _x()
    out = to_numpy(SinusoidalPositionEncoding(scale_inputs=True, **options)(x))
    expected = x * math.sqrt(DEPTH) + reference(np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("options", MODES)
def test_token_ids_with_merge_none_gain_a_feature_axis(options):
    # [batch, length] token ids give [batch, length, depth] float32 PE.
    ids = _int_tensor(np.tile([3, 1, 4, 1, 5, 9, 2, 6], (BATCH, 1)))
    out = _encoding(options, depth=DEPTH)(ids)
    assert tuple(out.shape) == (BATCH, LENGTH, DEPTH)
    assert standardize_dtype(out.dtype) == "float32"
    np.testing.assert_allclose(
        to_numpy(out)[1], reference(np.arange(LENGTH), DEPTH), rtol=0, atol=TOL
    )


# -- start_index and explicit positions --------------------------------------


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("form", ["int", "scalar-tensor"])
def test_shared_start_index(options, form):
    # A shared offset, as a Python int or an int scalar tensor.
    start = 7 if form == "int" else _int_tensor(7)
    out = to_numpy(_encoding(options)(_zeros(), start_index=start))
    expected = reference(7 + np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(out[1], expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_per_example_start_index(options):
    # A [batch] tensor of offsets: one decoding position per example.
    starts = np.array([3, 100])
    out = to_numpy(_encoding(options)(_zeros(), start_index=_int_tensor(starts)))
    expected = reference(starts[:, None] + np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("dtype", ["int32", INT64])
@pytest.mark.parametrize("rank", [1, 2])
def test_explicit_positions(options, dtype, rank):
    # Left padding and packing: positions [L] or [B, L] override start_index.
    packed = np.array([[0, 1, 2, 0, 1, 2, 3, 0], [5, 4, 3, 2, 1, 0, 0, 0]])
    positions = packed[0] if rank == 1 else packed
    out = to_numpy(
        _encoding(options)(
            _zeros(), positions=_int_tensor(positions, dtype), start_index=99
        )
    )
    expected = np.broadcast_to(reference(positions, DEPTH), out.shape)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(COMPUTE, id="compute"),
        pytest.param(LOOKUP, id="lookup"),
    ],
)
def test_empty_positions_with_length_zero_input(options):
    # An empty sequence encodes to an empty output, explicitly or not.
    x = _zeros(length=0)
    layer = SinusoidalPositionEncoding(**options)
    assert tuple(layer(x).shape) == (BATCH, 0, DEPTH)
    assert tuple(layer(x, positions=[]).shape) == (BATCH, 0, DEPTH)


@pytest.mark.parametrize("options", MODES)
def test_rows_are_bit_identical_whatever_the_call(options):
    # Position p's row is the same bits from a full call, decoding steps,
    # per-example offsets and explicit [L] / [B, L] positions.
    layer = _encoding(options)
    full = to_numpy(layer(_zeros()))[0]
    steps = np.concatenate(
        [to_numpy(layer(_zeros(length=1), start_index=t))[0] for t in range(LENGTH)]
    )
    offsets = to_numpy(layer(_zeros(length=4), start_index=_int_tensor([0, 4])))
    shared = to_numpy(layer(_zeros(), positions=np.arange(LENGTH)))[0]
    batched = to_numpy(layer(_zeros(), positions=np.tile(np.arange(LENGTH), (2, 1))))
    np.testing.assert_array_equal(steps, full)
    np.testing.assert_array_equal(np.concatenate(offsets), full)
    np.testing.assert_array_equal(shared, full)
    np.testing.assert_array_equal(batched[1], full)


def test_lookup_rows_are_bit_identical_to_computed_rows():
    # The table is built by the same engine: lookup == compute, bit for bit.
    compute = _encoding(COMPUTE)
    lookup = _encoding(LOOKUP)
    for kwargs in ({"start_index": 120}, {"positions": [0, 63, 64, 65, 127, 1, 2, 3]}):
        np.testing.assert_array_equal(
            to_numpy(lookup(_zeros(), **kwargs)), to_numpy(compute(_zeros(), **kwargs))
        )


@pytest.mark.parametrize("options", MODES)
def test_cached_decode_reproduces_the_full_forward(options):
    # Step-by-step decoding (start_index=t on one token) gives exactly the
    # outputs of the full call on the whole sequence.
    layer = SinusoidalPositionEncoding(**options)
    x = _x()
    full = to_numpy(layer(x))
    steps = [to_numpy(layer(x[:, t : t + 1], start_index=t)) for t in range(LENGTH)]
    np.testing.assert_array_equal(np.concatenate(steps, axis=1), full)


# -- negative positions -----------------------------------------------------


# Both ends of int32 and a run of small negatives, as [BATCH, LENGTH].
NEGATIVE = np.array([-(2**31), -(2**31) + 5, *range(-1000, -989), -64, -2, -1]).reshape(
    BATCH, LENGTH
)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_positions_are_exact_in_compute_mode(layout):
    # Relative distances: explicit negative positions down to -2**31.
    layer = _encoding(COMPUTE, layout=layout)
    out = to_numpy(layer(_zeros(), positions=NEGATIVE))
    expected = reference_mp(NEGATIVE, DEPTH, layout=layout)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("start", [-(2**31), -(2**31) + 5, -1000, 2**31 - LENGTH])
def test_start_index_at_the_int32_ends_is_exact_in_compute_mode(start):
    # A negative offset is as exact as a positive one, up to 2**31 - 1.
    out = to_numpy(_encoding(COMPUTE)(_zeros(), start_index=start))[0]
    expected = reference_mp(start + np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"start_index": -1}, r"`start_index`, expected .*\[0, 2\*\*31\).*=-1"),
        ({"positions": [0, 1, -3, 2, 3, 4, 5, 6]}, r"`positions`, .*\[0, 2\*\*31\)"),
    ],
)
def test_lookup_mode_rejects_negative_positions(kwargs, match):
    # The table starts at position 0: negatives are an error, not a wrap.
    layer = SinusoidalPositionEncoding(**LOOKUP)
    with pytest.raises(ValueError, match=match):
        layer(_zeros(), **kwargs)


# -- inputs of any rank -----------------------------------------------------


@pytest.mark.parametrize("options", MODES)
def test_rank4_with_sequence_axis_1(options):
    # [batch, length, heads, dim]: PE broadcasts over the heads.
    x = random_inputs(BATCH, LENGTH, 3 * DEPTH).reshape(BATCH, LENGTH, 3, DEPTH)
    out = to_numpy(SinusoidalPositionEncoding(**options)(x, start_index=5))
    expected = x + reference(5 + np.arange(LENGTH), DEPTH)[:, None, :]
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_rank4_per_example_offsets(options):
    # Per-example offsets reach the right example on rank-4 inputs.
    starts = np.array([0, 30])
    out = to_numpy(
        _encoding(options)(
            np.zeros((BATCH, LENGTH, 3, DEPTH), "float32"),
            start_index=_int_tensor(starts),
        )
    )
    expected = reference(starts[:, None] + np.arange(LENGTH), DEPTH)[:, :, None, :]
    np.testing.assert_allclose(out, np.broadcast_to(expected, out.shape), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_sequence_axis_minus2_matches_reference_on_rank4(options):
    # keras-hub's convention: positions on axis -2, any rank.
    x = np.zeros((1, 2, 4, 6), "float32")
    out = to_numpy(_encoding(options, sequence_axis=-2)(x))
    assert out.shape == (1, 2, 4, 6)
    expected = np.broadcast_to(reference(np.arange(4), 6), out.shape)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


def test_sequence_axis_minus2_matches_keras_hub():
    # Same values as keras_hub.layers.SinePositionEncoding on (1, 2, 4, 6)
    # (its angles are float32, so only at small positions).
    keras_hub = pytest.importorskip("keras_hub")
    x = np.zeros((1, 2, 4, 6), "float32")
    ours = to_numpy(_encoding(COMPUTE, sequence_axis=-2)(x))
    theirs = to_numpy(keras_hub.layers.SinePositionEncoding()(x))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("options", MODES)
def test_merge_none_keeps_every_axis_on_rank4(options):
    # [B, L, H, F] with depth gives [B, L, H, depth]: no axis is dropped.
    layer = _encoding(options, depth=7)
    out = layer(np.zeros((BATCH, LENGTH, 3, DEPTH), "float32"))
    assert tuple(out.shape) == (BATCH, LENGTH, 3, 7)
    shape = layer.compute_output_shape((BATCH, LENGTH, 3, DEPTH))
    assert tuple(shape) == (BATCH, LENGTH, 3, 7)
    expected = np.broadcast_to(reference(np.arange(LENGTH), 7)[:, None], out.shape)
    np.testing.assert_allclose(to_numpy(out), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize(
    "kwargs, shape, match",
    [
        ({"sequence_axis": 0}, (2, 8, 4), r"`sequence_axis`, expected an axis"),
        ({"sequence_axis": 2}, (2, 8, 4), r"feature axis \(2\).*sequence_axis=2"),
        ({"sequence_axis": -3}, (2, 8, 4), r"sequence_axis=-3"),
        ({}, (2, 8), r"`inputs`, expected rank >= 3.*inputs='<shape=\(2, 8\)>'"),
        ({"merge": None}, (2, 8), r"`depth`, .*cannot be inferred.*depth=None"),
        ({"merge": None}, (5,), r"`inputs`, expected rank >= 3"),
        ({"depth": 6}, (2, 8, 4), r"last dimension of `inputs` \(4\).*depth=6"),
    ],
)
def test_shape_errors_say_what_is_wrong(kwargs, shape, match):
    # Bad sequence_axis, rank 2 with merge="add", a depth that cannot be inferred.
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**kwargs)(np.zeros(shape, "float32"))


def test_unknown_feature_axis_needs_depth():
    # A symbolic input with no known feature size cannot give `depth`.
    with pytest.raises(ValueError, match=r"`depth`, .*cannot be inferred"):
        SinusoidalPositionEncoding()(keras.Input(shape=(None, None)))


# -- masks ------------------------------------------------------------------


def test_lstm_behind_it_ignores_padding():
    # The Embedding mask survives the layer: padded == unpadded LSTM output.
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(10, DEPTH, mask_zero=True)(inputs)
    x = SinusoidalPositionEncoding()(x)
    model = keras.Model(inputs, keras.layers.LSTM(3)(x))
    padded = to_numpy(model(np.array([[1, 2, 3, 4, 0, 0, 0, 0]])))
    unpadded = to_numpy(model(np.array([[1, 2, 3, 4]])))
    np.testing.assert_allclose(padded, unpadded, rtol=0, atol=1e-6)


def test_compute_mask_passes_the_mask_through():
    # The mask object comes back unchanged.
    mask = np.array([[True, True, False]])
    assert SinusoidalPositionEncoding().compute_mask(_zeros(1, 3), mask) is mask


# -- dtype policies ---------------------------------------------------------

POLICIES = ["mixed_float16", "mixed_bfloat16", "float16", "bfloat16"]
HOST_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FAR = 70000  # past 2**16: 16-bit angles would be off by whole radians here
FAR_MODES = [
    pytest.param(COMPUTE, id="compute"),
    pytest.param({**LOOKUP, "max_length": FAR + LENGTH}, id="lookup"),
]


def _float32_rows(options, start):
    return to_numpy(_encoding(options)(_zeros(), start_index=start))


@pytest.mark.parametrize("options", FAR_MODES)
@pytest.mark.parametrize("policy", POLICIES)
def test_16bit_policies_round_the_float32_encoding_once(options, policy):
    # Angles stay float32: the 16-bit encoding is the float32 one rounded
    # once (keras-hub's is off by up to 2.0 under mixed_bfloat16).
    exact32 = _float32_rows(options, FAR)
    keras.mixed_precision.set_global_policy(policy)
    dtype = policy.split("_")[-1]
    out = _encoding(options)(_zeros(dtype=dtype), start_index=FAR)
    assert standardize_dtype(out.dtype) == dtype
    rounded = exact32.astype(HOST_DTYPES[dtype]).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(ops.cast(out, "float32")), rounded)


@pytest.mark.parametrize("options", FAR_MODES)
@pytest.mark.parametrize("policy", POLICIES)
def test_16bit_policies_add_to_the_inputs_once_rounded(options, policy):
    # merge="add": the 16-bit inputs plus the once-rounded encoding, with
    # one 16-bit rounding of the sum.
    host = HOST_DTYPES[policy.split("_")[-1]]
    exact32 = _float32_rows(options, FAR)
    keras.mixed_precision.set_global_policy(policy)
    x = _x().astype(host)
    out = SinusoidalPositionEncoding(**options)(x, start_index=FAR)
    encoding = exact32.astype(host).astype(np.float64)
    expected = (x.astype(np.float64) + encoding).astype(host).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(ops.cast(out, "float32")), expected)


def test_integer_dtype_policy_is_rejected():
    # The encoding is floating: an integer policy fails in the constructor.
    with pytest.raises(ValueError, match=r"`dtype`, expected a floating dtype"):
        SinusoidalPositionEncoding(dtype="int32")


@pytest.mark.parametrize("merge", ["add", "concat"])
def test_integer_inputs_are_rejected_when_merged(merge):
    # Adding or concatenating float PE to int inputs would truncate it.
    with pytest.raises(ValueError, match=rf"`inputs`, .*merge='{merge}'.*int32"):
        SinusoidalPositionEncoding(merge=merge, depth=DEPTH)(
            _int_tensor(np.zeros((BATCH, LENGTH, DEPTH)))
        )


# -- compiled execution -----------------------------------------------------


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("options", MODES)
def test_tf_function_with_dynamic_length_equals_eager(options, jit_compile):
    # One trace serves any batch and length ([None, None, D]); with and
    # without XLA its rows equal the eager ones (XLA may differ in the last
    # bit: bit-identity holds within one execution mode).
    import tensorflow as tf

    layer = _encoding(options)
    run = tf.function(
        lambda x, s: layer(x, start_index=s),
        input_signature=[
            tf.TensorSpec([None, None, DEPTH]),
            tf.TensorSpec([], "int32"),
        ],
        jit_compile=jit_compile,
    )
    for batch, length, start in [(2, 8, 3), (3, 40, 70)]:
        x = _zeros(batch, length)
        eager = to_numpy(layer(x, start_index=start))
        out = to_numpy(run(x, start))
        np.testing.assert_allclose(out, eager, rtol=0, atol=TOL)
        expected = reference(start + np.arange(length), DEPTH)
        np.testing.assert_allclose(out[-1], expected, rtol=0, atol=TOL)


@only_jax
@pytest.mark.parametrize("options", MODES)
def test_jax_jit_of_stateless_call_equals_eager(options):
    # jax.jit of `stateless_call` with a traced start gives the eager bits.
    import jax

    layer = SinusoidalPositionEncoding(**options)
    x = _x()
    eager = to_numpy(layer(x, start_index=3))

    @jax.jit
    def run(x, start):
        return layer.stateless_call([], [], x, start_index=start)[0]

    np.testing.assert_array_equal(to_numpy(run(x, np.int32(3))), eager)


def _tf_xla_decode_and_full(options):
    import tensorflow as tf

    layer = _encoding(options)
    run = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
    full = to_numpy(run(_zeros(1), tf.constant(70)))[0]
    steps = [to_numpy(run(_zeros(1, 1), tf.constant(70 + t)))[0] for t in range(8)]
    return np.concatenate(steps), full


@only_tensorflow
def test_tf_xla_lookup_decode_steps_equal_the_full_call_bit_for_bit():
    # Within XLA too, a cached decode from the table reproduces the full
    # forward exactly (both are slices of the same table).
    steps, full = _tf_xla_decode_and_full(LOOKUP)
    np.testing.assert_array_equal(steps, full)


@only_tensorflow
def test_tf_xla_compute_decode_steps_are_within_the_bound_of_the_full_call():
    # TF XLA on a CPU may round the engine's last steps differently per
    # shape (LLVM contracts them into fused multiply-adds on some CPUs; it
    # holds bit for bit with --xla_backend_optimization_level=0), so what
    # is promised there is the precision bound, not the bits.
    steps, full = _tf_xla_decode_and_full(COMPUTE)
    assert max_diff(steps, full) <= TOL
    assert max_diff(full, reference(np.arange(70, 78), full.shape[-1])) <= TOL


@only_jax
@pytest.mark.parametrize("options", MODES)
def test_jax_jit_decode_steps_equal_the_full_call_bit_for_bit(options):
    # Within jax.jit, a cached decode reproduces the full forward exactly.
    import jax

    layer = _encoding(options)
    run = jax.jit(lambda x, s: layer(x, start_index=s))
    full = to_numpy(run(_zeros(1), np.int32(70)))[0]
    steps = [to_numpy(run(_zeros(1, 1), np.int32(70 + t)))[0] for t in range(8)]
    np.testing.assert_array_equal(np.concatenate(steps), full)


@only_torch
@pytest.mark.slow
def test_torch_compile_equals_eager():
    # torch.compile traces the layer (with graph breaks where it reads
    # values on the host) and gives the eager bits. Slow: ~20 s of tracing.
    import torch

    layer = SinusoidalPositionEncoding(merge=None)
    x = torch.zeros((1, 4, 2))
    eager = to_numpy(layer(x, start_index=3))
    compiled = torch.compile(lambda x: layer(x, start_index=3), backend="eager")
    np.testing.assert_array_equal(to_numpy(compiled(x)), eager)


# -- out of range in lookup mode --------------------------------------------

SMALL = {"mode": "lookup", "max_length": 16}
EXTEND = {**SMALL, "out_of_range": "extend"}


@pytest.mark.parametrize(
    "kwargs, position",
    [
        ({"start_index": 10}, 17),
        ({"start_index": 16}, 23),
        ({"positions": [0, 1, 2, 40, 3, 4, 5, 6]}, 40),
    ],
)
def test_lookup_out_of_range_eager_error(kwargs, position):
    # Eagerly: a ValueError naming max_length and the first bad position.
    layer = _encoding(SMALL)
    layer(_zeros(), start_index=8)  # rows 8..15: exactly fits
    match = rf"Position {position} is out of range .*`max_length`=16"
    with pytest.raises(ValueError, match=match):
        layer(_zeros(), **kwargs)


def test_lookup_extend_gives_exact_rows_past_the_table():
    # out_of_range="extend": rows past the table are computed, exactly.
    layer = _encoding(EXTEND)
    out = to_numpy(layer(_zeros(), start_index=12))[0]
    np.testing.assert_allclose(out, reference(12 + np.arange(LENGTH), DEPTH), atol=TOL)
    far = np.array([0, 15, 16, 99, 5000, 2**31 - 1, 7, 8])
    out = to_numpy(layer(_zeros(), positions=far))[0]
    np.testing.assert_allclose(out, reference_mp(far, DEPTH), rtol=0, atol=TOL)


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_tf_static_too_long_length_fails_at_trace_time(jit_compile):
    # A static length past the table is a ValueError when tracing.
    import tensorflow as tf

    layer = _encoding(SMALL)
    run = tf.function(
        layer,
        input_signature=[tf.TensorSpec([None, 20, DEPTH])],
        jit_compile=jit_compile,
    )
    with pytest.raises(ValueError, match=r"Position 19 is out of range"):
        run.get_concrete_function()


@only_tensorflow
def test_tf_dynamic_length_out_of_range_trips_the_graph_assertion():
    # A dynamic length past the table: InvalidArgumentError at run time.
    import tensorflow as tf

    layer = _encoding(SMALL)
    run = tf.function(layer, input_signature=[tf.TensorSpec([None, None, DEPTH])])
    assert tuple(run(_zeros(1, 16)).shape) == (1, 16, DEPTH)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`max_length`=16"):
        run(_zeros(1, 20))


@only_tensorflow
def test_tf_graph_positions_out_of_range_trip_the_graph_assertion():
    # Graph-time positions past the table: InvalidArgumentError at run time.
    import tensorflow as tf

    layer = _encoding(SMALL)
    run = tf.function(
        lambda p: layer(_zeros(1, 2), positions=p),
        input_signature=[tf.TensorSpec([None, None], "int32")],
    )
    assert tuple(run(tf.constant([[3, 15]])).shape) == (1, 2, DEPTH)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`max_length`=16"):
        run(tf.constant([[3, 16]]))


@only_tensorflow
@pytest.mark.parametrize(
    "options, jit_compile",
    [(SMALL, True), (EXTEND, False), (EXTEND, True)],
    ids=["error-xla", "extend-graph", "extend-xla"],
)
def test_tf_dynamic_length_past_the_table(options, jit_compile):
    # XLA drops assertions: "error" gives NaN rows (never a clamped row);
    # "extend" gives exact rows, in a graph and under XLA; no XLA compile
    # error for length > max_length + 2.
    import tensorflow as tf

    layer = _encoding(options)
    run = tf.function(
        layer,
        input_signature=[tf.TensorSpec([None, None, DEPTH])],
        jit_compile=jit_compile,
    )
    out = to_numpy(run(_zeros(1, 20)))[0]
    expected = reference(np.arange(20), DEPTH)
    if options.get("out_of_range") == "extend":
        np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)
    else:
        np.testing.assert_allclose(out[:16], expected[:16], rtol=0, atol=TOL)
        assert np.isnan(out[16:]).all()


@only_tensorflow
@pytest.mark.parametrize("options", MODES)
def test_tf_xla_int64_positions_past_int32_are_nan(options):
    # 2**32 + 1 never wraps to position 1 under XLA: its row is NaN.
    import tensorflow as tf

    layer = _encoding(options)
    run = tf.function(lambda p: layer(_zeros(1, 3), positions=p), jit_compile=True)
    out = to_numpy(run(tf.constant([1, 2**32 + 1, 5], tf.int64)))[0]
    assert np.isnan(out[1]).all()
    np.testing.assert_allclose(out[[0, 2]], reference([1, 5], DEPTH), atol=TOL)


@only_jax
@pytest.mark.parametrize("options", [SMALL, EXTEND], ids=["error", "extend"])
def test_jax_jit_traced_positions_past_the_table(options):
    # Under jax.jit nothing can raise: "error" gives NaN rows (never a
    # clamped row): a span read with a run-time start is one dynamic slice,
    # NaN as a whole when it leaves the table, explicit positions a gather,
    # NaN where they do. "extend" gives the exact rows.
    import jax

    layer = _encoding(options)
    start_rows = jax.jit(lambda s: layer(_zeros(), start_index=s))
    at_rows = jax.jit(lambda p: layer(_zeros(), positions=p))
    positions = np.array([0, 15, 16, 99, 3, 17, 1, 2], np.int32)
    by_start = to_numpy(start_rows(np.int32(12)))[0]
    by_position = to_numpy(at_rows(positions))[0]
    ranged = reference(12 + np.arange(LENGTH), DEPTH)
    if options.get("out_of_range") == "extend":
        np.testing.assert_allclose(by_start, ranged, rtol=0, atol=TOL)
        np.testing.assert_allclose(
            by_position, reference(positions, DEPTH), rtol=0, atol=TOL
        )
    else:
        assert np.isnan(by_start).all()
        inside = to_numpy(start_rows(np.int32(16 - LENGTH)))[0]
        np.testing.assert_allclose(
            inside, reference(16 - LENGTH + np.arange(LENGTH), DEPTH), rtol=0, atol=TOL
        )
        outside = (positions >= 16)[:, None]
        assert np.isnan(by_position[outside[:, 0]]).all()
        np.testing.assert_allclose(
            by_position[~outside[:, 0]],
            reference(positions[~outside[:, 0]], DEPTH),
            rtol=0,
            atol=TOL,
        )


# -- argument errors --------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "table"}, r"`mode`, expected one of .*Received: mode='table'"),
        ({"merge": "mul"}, r"`merge`, expected one of .*Received: merge='mul'"),
        ({"layout": "blocks"}, r"`layout`, .*Received: layout='blocks'"),
        ({"layout": np.array(["interleaved"])}, r"`layout`, expected one of"),
        ({"out_of_range": "clip"}, r"`out_of_range`, .*out_of_range='clip'"),
        ({"depth": 0}, r"`depth`, expected a positive integer.*Received: depth=0"),
        ({"depth": -3}, r"Received: depth=-3"),
        ({"depth": 70000}, r"<= 65536. Received: depth=70000"),
        ({"depth": "8"}, r"Received: depth='8'"),
        ({"mode": "lookup"}, r"`max_length`, expected a positive.*max_length=None"),
        ({"mode": "lookup", "max_length": None}, r"max_length=None"),
        ({"mode": "lookup", "max_length": "10"}, r"max_length='10'"),
        ({"mode": "lookup", "max_length": 0}, r"Received: max_length=0"),
        ({"mode": "lookup", "max_length": 2**31 + 1}, r"max_length=2147483649"),
        (
            {"mode": "lookup", "max_length": 2**31, "depth": 8},
            r"`max_length`, expected a positive integer <= 2147483520",
        ),
        (
            {"mode": "lookup", "max_length": 2**28, "depth": 8},
            r"`max_length`, expected a table of at most",
        ),
        ({"max_length": 10}, r"`max_length`, expected None with mode='compute'"),
        ({"scale_inputs": "yes"}, r"`scale_inputs`, expected a bool"),
        (
            {"scale_inputs": True, "merge": "concat", "depth": 4},
            r"`scale_inputs`, expected False unless merge='add'",
        ),
        ({"merge": "concat"}, r"`depth`, .*with merge='concat'. Received: depth=None"),
        ({"sequence_axis": 1.0}, r"`sequence_axis`, expected an int"),
        ({"max_wavelength": 0}, r"`max_wavelength`, expected a finite number > 0"),
        ({"max_wavelength": -1}, r"Received: max_wavelength=-1"),
        ({"max_wavelength": float("nan")}, r"Received: max_wavelength=nan"),
        ({"max_wavelength": float("inf")}, r"Received: max_wavelength=inf"),
        ({"max_wavelength": 10**400}, r"`max_wavelength`, expected a finite"),
        ({"max_wavelength": "x"}, r"Received: max_wavelength='x'"),
    ],
)
def test_constructor_errors(kwargs, match):
    # Every bad argument is a ValueError in the constructor, named and echoed.
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"start_index": None}, r"`start_index`, .*Received: start_index=None"),
        ({"start_index": 2**63}, r"Received: start_index=9223372036854775808"),
        ({"start_index": 2.7}, r"`start_index`, expected integer .*start_index=2.7"),
        ({"start_index": 2**31 - 4}, r"start_index \+ length <= 2\*\*31"),
        ({"start_index": [3]}, r"`start_index`, expected one row per example: batch 2"),
        ({"positions": np.zeros((3, 8), "int32")}, r"`positions`, .*one row per ex"),
        ({"positions": [0, 1]}, r"`positions`, expected 8 positions per sequence"),
        ({"positions": [0.0] * 8}, r"`positions`, expected integer positions"),
        ({"positions": np.zeros((1, 1, 8), "int32")}, r"rank 1 or 2"),
        ({"positions": [2**31] + [0] * 7}, r"`positions`, .*positions=2147483648"),
    ],
)
@pytest.mark.parametrize("options", MODES)
def test_call_errors(options, kwargs, match):
    # Bad start_index / positions: a ValueError naming the argument.
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**options)(_x(), **kwargs)


def test_float_tensor_start_index_is_rejected():
    # A float tensor offset is not silently truncated.
    start = ops.convert_to_tensor(2.7, "float32")
    with pytest.raises(ValueError, match=r"`start_index`, expected integer"):
        SinusoidalPositionEncoding()(_x(), start_index=start)


def test_layout_array_is_refused_not_compared_per_item():
    # An array where a string is expected is refused, not compared per item.
    with pytest.raises(ValueError, match=r"`layout`, expected one of"):
        SinusoidalPositionEncoding(layout=np.array(["interleaved", "concatenated"]))


@only_tensorflow
def test_tf_function_offsets_for_the_wrong_batch_fail_at_trace_time():
    # [3] offsets for a batch of 2 in a tf.function with static shapes.
    import tensorflow as tf

    layer = SinusoidalPositionEncoding()
    run = tf.function(lambda x, s: layer(x, start_index=s))
    with pytest.raises(ValueError, match=r"`start_index`, .*one row per example"):
        run(tf.constant(_x()), tf.constant([3]))


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("argument", ["start_index", "positions"])
def test_tf_one_row_for_a_dynamic_batch_of_two_is_never_broadcast(
    argument, jit_compile
):
    # Batch unknown at trace time: a [1] start_index or [1, L] positions for
    # a batch of 2 trips the graph assertion, or gives NaN rows under XLA.
    import tensorflow as tf

    layer = _encoding(COMPUTE)
    value = tf.constant([3]) if argument == "start_index" else tf.constant([[3] * 8])
    run = tf.function(
        lambda x, v: layer(x, **{argument: v}),
        input_signature=[
            tf.TensorSpec([None, None, DEPTH]),
            tf.TensorSpec([None] * len(value.shape), "int32"),
        ],
        jit_compile=jit_compile,
    )
    if jit_compile:
        assert np.isnan(to_numpy(run(_zeros(), value))).all()
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"`{argument}`"):
            run(_zeros(), value)


@only_tensorflow
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_ragged_and_sparse_inputs_are_rejected(kind):
    # No dense sequence axis: a clear error naming `inputs`.
    import tensorflow as tf

    dense = tf.constant(_x())
    x = (
        tf.RaggedTensor.from_tensor(dense)
        if kind == "ragged"
        else tf.sparse.from_dense(dense)
    )
    with pytest.raises(ValueError, match=r"`inputs`, expected a dense tensor"):
        SinusoidalPositionEncoding()(x)


# -- untrusted table sizes ------------------------------------------------


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


# -- property ---------------------------------------------------------------


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.integers(1, 2),
    length=st.sampled_from([1, LENGTH, 65]),
    depth=st.sampled_from([7, 64]),
    starts=st.lists(st.integers(0, 128 - 65), min_size=2, max_size=2),
    layout=st.sampled_from(LAYOUTS),
)
def test_property_lookup_equals_compute_bit_for_bit(
    batch, length, depth, starts, layout
):
    # Any batch, length, depth and per-example offsets (rows on both sides
    # of the 64-row coarse grid): the same bits.
    x = np.zeros((batch, length, depth), "float32")
    start = _int_tensor(starts[:batch])
    compute = _encoding(COMPUTE, layout=layout)
    lookup = _encoding(LOOKUP, layout=layout)
    np.testing.assert_array_equal(
        to_numpy(lookup(x, start_index=start)), to_numpy(compute(x, start_index=start))
    )


# -- models -----------------------------------------------------------------


@pytest.mark.parametrize("options", MODES)
def test_sequential_model(options):
    # The layer works inside a Sequential model.
    model = keras.Sequential(
        [
            keras.Input(shape=(None, DEPTH)),
            SinusoidalPositionEncoding(**options),
            keras.layers.Dense(1),
        ]
    )
    assert tuple(model(_x()).shape) == (BATCH, LENGTH, 1)


@pytest.mark.parametrize("options", MODES)
def test_subclassed_model(options):
    # ... and inside a subclassed model, with an offset passed through.
    class Tiny(keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(20, DEPTH)
            self.encode = SinusoidalPositionEncoding(**options)

        def call(self, ids, start_index=0):
            return self.encode(self.embed(ids), start_index=start_index)

    model = Tiny()
    ids = np.tile(np.arange(LENGTH), (BATCH, 1))
    out = to_numpy(model(ids, start_index=4))
    embedded = to_numpy(model.embed(ids))
    expected = embedded + reference(4 + np.arange(LENGTH), DEPTH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("merge", ["add", None])
def test_a_built_layer_refuses_inputs_of_another_width(merge):
    # Built for one feature, then called on eight: broadcasting would spread
    # sin(p) over all eight features without a word. Refused, naming inputs.
    layer = SinusoidalPositionEncoding(merge=merge)
    layer(np.zeros((1, 3, 1), "float32"))
    message = (
        "Received an invalid value for `inputs`, expected inputs whose encoding "
        "is 1 features wide (the layer was built for them; make a new layer for "
        "another width). Received: inputs='<shape=(1, 3, 8)>'"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        layer(np.zeros((1, 3, 8), "float32"))


def test_a_lookup_table_that_extends_computes_negative_positions():
    # out_of_range="extend" computes what the table lacks, below 0 too (as
    # the rotary layer's does); "error" refuses it by name.
    extend = SinusoidalPositionEncoding(
        mode="lookup", max_length=16, out_of_range="extend", merge=None
    )
    rows = to_numpy(extend(np.zeros((1, 4, 8), "float32"), start_index=-2))[0]
    np.testing.assert_allclose(rows, reference(np.arange(-2, 2), 8), atol=TOL)
    with pytest.raises(ValueError, match=r"`start_index`, expected positions in \[0"):
        SinusoidalPositionEncoding(mode="lookup", max_length=16)(
            np.zeros((1, 4, 8), "float32"), start_index=-2
        )


# -- published conventions (frequency rule, odd widths, offset, padding) -------

# Positions in the thousands and near 2**31: the float64 transcriptions of
# `_helpers` stay good to ~1e-12 there only for moderate positions.
FAR_SPAN = np.arange(5000, 5000 + LENGTH)


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("layout", ["concatenated", "cos_sin"])
@pytest.mark.parametrize("depth", [8, 9])
def test_tensor2tensor_zero_column_matches_fairseq_formula(options, layout, depth):
    # b**(-i / (d//2 - 1)), [sin | cos] or [cos | sin], odd widths zero-padded.
    layer = _encoding(
        options,
        depth=depth,
        layout=layout,
        frequency_rule="tensor2tensor",
        odd_depth="zero",
        out_of_range="extend",
    )
    out = to_numpy(layer(_zeros(), start_index=int(FAR_SPAN[0])))
    expected = tensor2tensor_table(FAR_SPAN, depth, cos_first=layout == "cos_sin")
    np.testing.assert_allclose(out, np.broadcast_to(expected, out.shape), 0, TOL)


def test_tensor2tensor_odd_width_with_sine_rule_has_one_more_frequency():
    # odd_depth="sine": (d + 1) // 2 sines, the last at b**(-(d//2) / (d//2 - 1)).
    out = to_numpy(
        _encoding(
            COMPUTE, depth=9, frequency_rule="tensor2tensor", layout="concatenated"
        )(_zeros())
    )
    w = 10000.0 ** (-np.arange(5) / 3.0)
    angle = np.arange(LENGTH)[:, None] * w
    expected = np.concatenate([np.sin(angle), np.cos(angle[:, :4])], axis=-1)
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_padding_row_is_zero(options):
    # The padding id's position reads zeros; every other row is the table's.
    layer = _encoding(options, depth=DEPTH, padding_id=3)
    out = to_numpy(layer(_zeros()))
    expected = reference(np.arange(LENGTH), DEPTH)
    expected[3] = 0.0
    np.testing.assert_allclose(out[1], expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_position_offset_reads_the_shifted_row(options):
    # XGLM: position p reads row p + 2, explicit positions too.
    layer = _encoding(options, depth=DEPTH, position_offset=2)
    positions = np.array([5, 0, 7, 1, 2, 3, 4, 6])
    out = to_numpy(layer(_zeros(), positions=positions))
    expected = reference(positions + 2, DEPTH)
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=TOL)


IDS = np.array([[9, 9, 9, 4, 5, 6, 7, 8], [4, 5, 6, 7, 8, 4, 5, 6]], np.int32)


@pytest.mark.parametrize("options", MODES)
def test_positions_from_ids_follow_fairseq(options):
    # Left-padded rows count their own tokens from padding_id + 1; padding
    # tokens read the zero row.
    layer = SinusoidalPositionEncoding(
        merge=None,
        depth=DEPTH,
        padding_id=9,
        positions_from_ids=True,
        out_of_range="extend",
        **options,
    )
    out = to_numpy(layer(IDS))
    positions = fairseq_positions(IDS, 9)
    expected = reference(positions, DEPTH)
    expected[positions == 9] = 0.0
    assert out.shape == (2, LENGTH, DEPTH)
    np.testing.assert_allclose(out, expected, rtol=0, atol=TOL)


def test_positions_from_ids_continue_at_start_index():
    # A decoding step with a per-example cache length equals that step of
    # the full call.
    layer = _encoding(COMPUTE, depth=DEPTH, padding_id=9, positions_from_ids=True)
    full = to_numpy(layer(IDS))
    step = to_numpy(layer(IDS[:, -1:], start_index=np.array([4, 7])))
    np.testing.assert_array_equal(step[:, 0], full[:, -1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"frequency_rule": "t2t"}, r"`frequency_rule`, expected one of"),
        ({"odd_depth": "pad"}, r"`odd_depth`, expected one of"),
        ({"position_offset": 1.5}, r"`position_offset`, expected an int"),
        ({"position_offset": 2**31}, r"`position_offset`, expected an int in"),
        ({"padding_id": -1}, r"`padding_id`, expected a non-negative integer"),
        ({"positions_from_ids": 1}, r"`positions_from_ids`, expected a bool"),
        ({"positions_from_ids": True}, r"`padding_id`, expected an int with"),
        (
            {"positions_from_ids": True, "padding_id": 1, "merge": "add"},
            r"`merge`, expected None with positions_from_ids=True",
        ),
        ({"depth": 7, "odd_depth": "error"}, r"`depth`, expected an even width"),
        (
            {"depth": 3, "frequency_rule": "tensor2tensor"},
            r"`depth`, expected at least 4 with frequency_rule='tensor2tensor'",
        ),
        ({"depth": 1, "odd_depth": "zero"}, r"`depth`, expected at least 2"),
    ],
)
def test_bad_convention_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**kwargs)


def test_odd_inputs_width_is_refused_at_build_with_odd_depth_error():
    with pytest.raises(ValueError, match=r"`depth`, expected an even width.*depth=7"):
        SinusoidalPositionEncoding(odd_depth="error")(_zeros(depth=7))


def test_float_inputs_are_refused_with_positions_from_ids():
    layer = _encoding(COMPUTE, depth=DEPTH, padding_id=1, positions_from_ids=True)
    with pytest.raises(ValueError, match=r"`inputs`, expected integer token ids"):
        layer(np.zeros((2, 8), "float32"))


def test_explicit_positions_are_refused_with_positions_from_ids():
    layer = _encoding(COMPUTE, depth=DEPTH, padding_id=1, positions_from_ids=True)
    with pytest.raises(ValueError, match=r"`positions`, expected None with"):
        layer(IDS, positions=np.arange(LENGTH))


def test_negative_cache_length_is_refused_with_positions_from_ids():
    layer = _encoding(COMPUTE, depth=DEPTH, padding_id=1, positions_from_ids=True)
    with pytest.raises(
        ValueError, match=r"`start_index`, expected a cache length in \[0"
    ):
        layer(IDS, start_index=-1)


def test_position_offset_never_wraps_narrow_positions():
    # XGLM reads row p + 2: a uint8 255 is row 257 (255 + 2 wrapped to 1 in
    # uint8, the padding id's zero row), the same as an int64 255.
    layer = SinusoidalPositionEncoding(merge=None, depth=8, position_offset=2)
    x = _zeros(1, 1, 8)
    narrow = to_numpy(layer(x, positions=np.array([[255]], np.uint8)))
    wide = to_numpy(layer(x, positions=np.array([[255]], np.int64)))
    np.testing.assert_array_equal(narrow, wide)
    assert max_diff(wide[0], reference([257], 8)) <= TOL


def test_position_offset_refuses_what_it_would_push_past_int32():
    # 2**31 - 1 + 2 is no int32 position: refused, not the row of -2**31 + 1.
    layer = SinusoidalPositionEncoding(merge=None, depth=8, position_offset=2)
    with pytest.raises(ValueError, match=r"`positions`"):
        layer(_zeros(1, 1, 8), positions=np.array([[2**31 - 1]], np.int32))


@only_tensorflow
def test_position_offset_past_int32_asserts_in_a_graph():
    import tensorflow as tf

    layer = SinusoidalPositionEncoding(merge=None, depth=8, position_offset=2)
    run = tf.function(
        lambda p: layer(_zeros(1, 1, 8), positions=p),
        input_signature=[tf.TensorSpec([1, 1], tf.int32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="position_offset=2"):
        run(tf.constant([[2**31 - 1]], tf.int32))
    assert (
        max_diff(to_numpy(run(tf.constant([[5]], tf.int32)))[0], reference([7], 8))
        <= TOL
    )


def test_token_id_positions_refuse_a_cache_past_int32():
    # start + length + padding_id must stay in int32 (it wrapped to -2**31).
    layer = SinusoidalPositionEncoding(
        merge=None, depth=8, padding_id=1, positions_from_ids=True
    )
    with pytest.raises(ValueError, match=r"`start_index`, expected a cache length"):
        layer(np.array([[5, 6, 7]]), start_index=2**31 - 2)


def test_position_offset_with_positions_from_ids_is_refused():
    # The ids path sets the start from the padding id; an offset was ignored.
    with pytest.raises(ValueError, match=r"`position_offset`, expected 0 with"):
        SinusoidalPositionEncoding(
            merge=None,
            depth=8,
            padding_id=1,
            positions_from_ids=True,
            position_offset=5,
        )
