"""`SinusoidalPositionEncoding`: behaviours, options, positions, errors."""

import math

import numpy as np
import pytest
import tensorflow as tf
from conftest import LAYOUTS, keras, reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_posenc import SinusoidalPositionEncoding

TOL = 2e-7
MODES = [
    pytest.param({"mode": "compute"}, id="compute"),
    pytest.param({"mode": "lookup", "max_length": 128}, id="lookup"),
]


def _x(batch=2, length=10, depth=8, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=(batch, length, depth)), tf.float32)


@pytest.mark.parametrize("options", MODES)
def test_layer_behaviours(options):
    # Config round trip, symbolic call, eager call, one training step.
    layer = SinusoidalPositionEncoding(layout="concatenated", **options)
    clone = SinusoidalPositionEncoding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()

    inputs = keras.Input(shape=(None, 8))
    outputs = keras.layers.Dense(3)(layer(inputs))
    model = keras.Model(inputs, outputs)
    assert tuple(layer.compute_output_shape((None, None, 8))) == (None, None, 8)
    assert model.count_params() == 8 * 3 + 3  # the layer has no weights

    x = _x()
    expected = x.numpy() + reference(np.arange(10), 8, layout="concatenated")
    np.testing.assert_allclose(layer(x).numpy(), expected, atol=TOL)

    model.compile("sgd", "mse")
    history = model.fit(x, tf.zeros((2, 10, 3)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("depth", [1, 7, 64])
def test_add_matches_reference(options, layout, depth):
    x = _x(3, 17, depth)
    out = SinusoidalPositionEncoding(layout=layout, **options)(x)
    np.testing.assert_allclose(
        out.numpy(), x.numpy() + reference(np.arange(17), depth, layout=layout), atol=TOL
    )


@pytest.mark.parametrize("options", MODES)
def test_merge_variants_agree_with_bare_encoding(options):
    x = _x(2, 9, 6)
    bare = SinusoidalPositionEncoding(merge=None, **options)(x).numpy()
    assert bare.shape == (2, 9, 6)
    np.testing.assert_allclose(bare[1], reference(np.arange(9), 6), atol=TOL)
    concat = SinusoidalPositionEncoding(merge="concat", depth=4, **options)(x).numpy()
    assert concat.shape == (2, 9, 10)
    np.testing.assert_array_equal(concat[..., :6], x.numpy())
    np.testing.assert_allclose(concat[..., 6:], np.broadcast_to(reference(np.arange(9), 4), (2, 9, 4)), atol=TOL)
    scaled = SinusoidalPositionEncoding(scale_inputs=True, **options)(x).numpy()
    np.testing.assert_allclose(scaled, x.numpy() * math.sqrt(6) + bare, atol=1e-6)


def test_merge_none_on_token_ids_needs_depth():
    ids = tf.constant([[3, 1, 4], [1, 5, 9]])
    out = SinusoidalPositionEncoding(merge=None, depth=5)(ids)
    assert out.shape == (2, 3, 5) and out.dtype == tf.float32
    np.testing.assert_allclose(out[0].numpy(), reference(np.arange(3), 5), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_start_index_forms(options):
    x = _x(3, 12, 8)
    layer = SinusoidalPositionEncoding(merge=None, **options)
    for start in (7, tf.constant(7), tf.constant(7, tf.int64)):
        np.testing.assert_allclose(layer(x, start_index=start)[2].numpy(), reference(7 + np.arange(12), 8), atol=TOL)
    starts = np.array([0, 5, 100])
    out = layer(x, start_index=tf.constant(starts)).numpy()
    np.testing.assert_allclose(out, reference(starts[:, None] + np.arange(12), 8), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_explicit_positions(options):
    # Left padding and packed sequences: positions [L] or [B, L], int32 or int64.
    x = _x(2, 6, 8)
    layer = SinusoidalPositionEncoding(merge=None, **options)
    packed = np.array([[0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 2, 3]])
    for dtype in (tf.int32, tf.int64):
        out = layer(x, positions=tf.constant(packed, dtype)).numpy()
        np.testing.assert_allclose(out, reference(packed, 8), atol=TOL)
    shared = np.array([5, 4, 3, 2, 1, 0])
    out = layer(x, positions=tf.constant(shared), start_index=99).numpy()
    np.testing.assert_allclose(out[1], reference(shared, 8), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_inside_tf_function_dynamic_shapes(options):
    layer = SinusoidalPositionEncoding(**options)
    spec = tf.TensorSpec([None, None, 8])

    @tf.function(input_signature=[spec, tf.TensorSpec([None], tf.int32)])
    def run(x, starts):
        return layer(x), layer(x, start_index=starts), layer(x, start_index=starts[0])

    for batch, length in [(2, 5), (3, 40)]:
        x = _x(batch, length, 8)
        starts = np.arange(batch) * 3 + 1
        shared, per_example, first = run(x, tf.constant(starts, tf.int32))
        np.testing.assert_allclose(shared.numpy(), x.numpy() + reference(np.arange(length), 8), atol=TOL)
        np.testing.assert_allclose(
            per_example.numpy(), x.numpy() + reference(starts[:, None] + np.arange(length), 8), atol=TOL
        )
        np.testing.assert_allclose(first.numpy(), x.numpy() + reference(1 + np.arange(length), 8), atol=TOL)


@pytest.mark.parametrize("options", MODES)
def test_jit_compile_equals_eager(options):
    layer = SinusoidalPositionEncoding(**options)
    x = _x(2, 33, 8)
    compiled = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
    np.testing.assert_allclose(compiled(x, tf.constant(11)).numpy(), layer(x, start_index=11).numpy(), atol=TOL)


def test_mask_passes_through():
    # The padding mask survives the layer: an LSTM behind it ignores padding,
    # so a padded sequence gives the same output as the unpadded one.
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(10, 4, mask_zero=True)(inputs)
    x = SinusoidalPositionEncoding()(x)
    model = keras.Model(inputs, keras.layers.LSTM(3)(x))
    padded = model(tf.constant([[1, 2, 0, 0]])).numpy()
    unpadded = model(tf.constant([[1, 2]])).numpy()
    np.testing.assert_allclose(padded, unpadded, atol=1e-6)
    layer, mask = SinusoidalPositionEncoding(), tf.constant([[True, False]])
    assert layer.compute_mask(tf.zeros((1, 2, 4)), mask) is mask


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("options", MODES)
def test_mixed_precision_values(policy, options):
    # Angles are never formed in 16 bits: the encoding equals the exact value
    # rounded once to the compute dtype (keras-hub is off by up to 2.0 here).
    keras.mixed_precision.set_global_policy(policy)
    dtype = policy.split("_")[1]
    layer = SinusoidalPositionEncoding(merge=None, depth=16, **({"mode": "lookup", "max_length": 5000} if options["mode"] == "lookup" else {}))
    out = layer(tf.zeros((1, 100, 16), dtype), start_index=4000)
    assert out.dtype == tf.as_dtype(dtype)
    exact = reference(4000 + np.arange(100), 16)
    rounded = tf.cast(tf.constant(exact, tf.float64), dtype)
    err = np.abs(out.numpy().astype(np.float64) - exact)
    # Equal to the correctly rounded value unless exact is within 2e-7 of a tie.
    assert err.max() <= np.abs(rounded.numpy().astype(np.float64) - exact).max() + TOL
    assert (out.numpy() == rounded.numpy()).mean() > 0.999


@pytest.mark.parametrize("options", MODES)
def test_sequential_and_subclassed_models(options):
    seq = keras.Sequential([keras.Input(shape=(None, 4)), SinusoidalPositionEncoding(**options), keras.layers.Dense(1)])
    assert seq(_x(2, 3, 4)).shape == (2, 3, 1)

    class Tiny(keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(20, 4)
            self.pe = SinusoidalPositionEncoding(**options)

        def call(self, ids):
            return self.pe(self.embed(ids))

    assert Tiny()(tf.constant([[1, 2, 3]])).shape == (1, 3, 4)


# -- properties ---------------------------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 70),
    depth=st.integers(1, 24),
    starts=st.lists(st.integers(0, 10**6), min_size=3, max_size=3),
    layout=st.sampled_from(LAYOUTS),
)
def test_property_lookup_equals_compute(batch, length, depth, starts, layout):
    x = tf.zeros((batch, length, depth))
    compute = SinusoidalPositionEncoding(layout=layout)
    lookup = SinusoidalPositionEncoding(mode="lookup", max_length=10**6 + 80, layout=layout)
    start = tf.constant(starts[:batch])
    np.testing.assert_allclose(compute(x, start_index=start).numpy(), lookup(x, start_index=start).numpy(), atol=2 * TOL)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(2, 40), depth=st.integers(1, 16), offset=st.integers(0, 2**24))
def test_property_step_by_step_decoding_equals_full_call(length, depth, offset):
    layer = SinusoidalPositionEncoding(merge=None, depth=depth)
    full = layer(tf.zeros((1, length, 1)), start_index=offset).numpy()
    steps = np.concatenate([layer(tf.zeros((1, 1, 1)), start_index=offset + t).numpy() for t in range(length)], axis=1)
    np.testing.assert_allclose(steps, full, atol=2 * TOL)


# -- out of range (lookup mode) --------------------------------------------------

def test_out_of_range_eager_errors_name_max_length():
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=16)
    layer(_x(1, 16, 8))  # exactly fits
    with pytest.raises(ValueError, match=r"Position 19 is out of range .*`max_length`=16"):
        layer(_x(1, 10, 8), start_index=10)
    with pytest.raises(ValueError, match=r"Position 16 is out of range"):
        layer(_x(1, 17, 8))
    with pytest.raises(ValueError, match=r"Position 40 is out of range"):
        layer(_x(2, 2, 8), positions=tf.constant([[0, 1], [40, 2]]))


def test_out_of_range_at_trace_time_with_static_length():
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=16)
    for jit in (False, True):
        fn = tf.function(lambda x: layer(x), jit_compile=jit, input_signature=[tf.TensorSpec([None, 20, 8])])
        with pytest.raises(ValueError, match=r"Position 19 is out of range"):
            fn.get_concrete_function()


def test_out_of_range_in_tf_function_raises_at_run_time():
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=16)
    fn = tf.function(lambda x, s: layer(x, start_index=s), input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec([], tf.int32)])
    assert fn(_x(1, 6, 8), 10).shape == (1, 6, 8)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"out of range .*max_length`=16"):
        fn(_x(1, 6, 8), 11)
    per_example = tf.function(lambda x, p: layer(x, positions=p), input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None], tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"out of range"):
        per_example(_x(1, 2, 8), tf.constant([[3, 16]]))


def test_out_of_range_under_xla_is_nan_never_a_wrong_row():
    # XLA compiles graph assertions out and clamps gathers/slices: we give NaN.
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=16, merge=None)
    fn = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
    ok = fn(_x(1, 4, 8), tf.constant(12)).numpy()
    np.testing.assert_allclose(ok[0], reference(12 + np.arange(4), 8), atol=TOL)
    bad = fn(_x(1, 4, 8), tf.constant(13)).numpy()
    assert np.isnan(bad).all()
    gather = tf.function(lambda x, p: layer(x, positions=p), jit_compile=True)
    rows = gather(_x(1, 3, 8), tf.constant([[15, 16, 99]])).numpy()[0]
    np.testing.assert_allclose(rows[0], reference([15], 8)[0], atol=TOL)
    assert np.isnan(rows[1:]).all()


@pytest.mark.parametrize("jit", [False, True])
def test_out_of_range_extend_computes_exact_rows(jit):
    layer = SinusoidalPositionEncoding(mode="lookup", max_length=16, merge=None, out_of_range="extend")
    eager = layer(_x(1, 30, 8), start_index=5).numpy()
    np.testing.assert_allclose(eager[0], reference(5 + np.arange(30), 8), atol=TOL)
    fn = tf.function(lambda x, s, p: (layer(x, start_index=s), layer(x, positions=p)), jit_compile=jit)
    rng_rows, pos_rows = fn(_x(1, 30, 8), tf.constant(5), tf.constant([np.arange(30) * 7]))
    np.testing.assert_allclose(rng_rows.numpy()[0], reference(5 + np.arange(30), 8), atol=TOL)
    np.testing.assert_allclose(pos_rows.numpy()[0], reference(np.arange(30) * 7, 8), atol=TOL)


# -- bad arguments --------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"depth": 0}, r"`depth`, expected a positive integer. Received: depth=0"),
        ({"depth": -3}, r"Received: depth=-3"),
        ({"depth": 4.0}, r"Received: depth=4.0"),
        ({"max_wavelength": -1.0}, r"`max_wavelength`.*Received: max_wavelength=-1.0"),
        ({"max_wavelength": float("nan")}, r"max_wavelength=nan"),
        ({"max_wavelength": float("inf")}, r"max_wavelength=inf"),
        ({"mode": "table"}, r"`mode`.*Received: mode='table'"),
        ({"layout": "blocks"}, r"`layout`.*Received: layout='blocks'"),
        ({"merge": "mul"}, r"`merge`.*Received: merge='mul'"),
        ({"out_of_range": "clip"}, r"`out_of_range`.*Received: out_of_range='clip'"),
        ({"mode": "lookup"}, r"`max_length`, expected a positive integer.*Received: max_length=None"),
        ({"mode": "lookup", "max_length": 0}, r"Received: max_length=0"),
        ({"mode": "lookup", "max_length": -5}, r"Received: max_length=-5"),
        ({"max_length": 10}, r"`max_length`, expected None with mode='compute'.*max_length=10"),
        ({"merge": "concat"}, r"`depth`, expected a positive integer with merge='concat'. Received: depth=None"),
        ({"scale_inputs": "yes"}, r"`scale_inputs`, expected a bool"),
        ({"scale_inputs": True, "merge": None, "depth": 4}, r"`scale_inputs`, expected False unless merge='add'"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**kwargs)


@pytest.mark.parametrize(
    "kwargs, shape, match",
    [
        ({}, (2, 8), r"`inputs`, expected rank 3 .*merge='add'. Received: inputs.shape=\(2, 8\)"),
        ({"merge": "concat", "depth": 4}, (2, 3, 4, 5), r"expected rank 3"),
        ({"depth": 6}, (2, 3, 8), r"`depth`, expected the last dimension of `inputs` \(8\).*Received: depth=6"),
        ({"merge": None}, (5,), r"expected rank >= 2"),
        ({"merge": None}, (2, 5), r"Cannot infer `depth`.*Pass `depth`"),
    ],
)
def test_bad_input_shapes(kwargs, shape, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding(**kwargs)(tf.zeros(shape))


def test_non_floating_inputs_in_add_mode():
    with pytest.raises(ValueError, match=r"`inputs`, expected a floating tensor with merge='add'.*int32"):
        SinusoidalPositionEncoding(depth=3)(tf.zeros((1, 2, 3), tf.int32))


@pytest.mark.parametrize(
    "call_kwargs, match",
    [
        ({"start_index": -1}, r"`start_index`, expected a non-negative integer. Received: start_index=-1"),
        ({"start_index": tf.constant([0, -2])}, r"`start_index`, expected non-negative offsets"),
        ({"start_index": tf.constant(1.5)}, r"`start_index`, expected a non-negative int"),
        ({"start_index": 2**31 - 2}, r"start_index \+ length <= 2\*\*31"),
        ({"positions": tf.constant([0, -1, 2])}, r"`positions`, expected non-negative positions. Received: positions=-1"),
        ({"positions": tf.constant([0.0, 1.0, 2.0])}, r"`positions`, expected an int32 or int64 tensor"),
        ({"positions": tf.zeros((1, 1, 3), tf.int32)}, r"`positions`, expected shape \(length,\) or \(batch, length\)"),
        ({"positions": tf.constant([0, 1])}, r"`positions`, expected 3 positions per sequence"),
        ({"positions": tf.constant([0, 1, 2**31], tf.int64)}, r"`positions`, expected positions < 2\*\*31"),
    ],
)
def test_bad_call_arguments(call_kwargs, match):
    with pytest.raises(ValueError, match=match):
        SinusoidalPositionEncoding()(tf.zeros((2, 3, 4)), **call_kwargs)


def test_negative_positions_in_graph_raise():
    layer = SinusoidalPositionEncoding()
    fn = tf.function(lambda x, p: layer(x, positions=p), input_signature=[tf.TensorSpec([None, None, 4]), tf.TensorSpec([None], tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative position"):
        fn(tf.zeros((1, 2, 4)), tf.constant([0, -3]))
