"""Tests of `keras_posenc.timestep`: diffusion timestep embeddings, exact.

The references are float64 transcriptions of the public formulas (diffusers'
`get_timestep_embedding`, GLIDE/DiT's `timestep_embedding`, FLUX's
`timestep_embedding`), evaluated at the float32 timestep exactly as given,
and 40-digit mpmath at the reported timesteps.
"""

import math
import re

import mpmath
import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    TOL,
    exact,
    keras3_only,
    max_diff,
    serve,
    to_numpy,
    traced,
)
from keras import backend, ops

import keras_posenc
from keras_posenc._keras import keras

# Timesteps of real samplers: fractional (Karras/DPM++ schedules), the two of
# the public bf16 report, continuous times in [0, 1], negatives, large values.
TIMESTEPS = np.array(
    [0.0, 1.0, 998.3897, 937.5001, 999.0, 500.5, 0.02, 1e-6, -3.25, 65536.75, 2e6],
    np.float32,
)


def diffusers_reference(
    t, dim, flip_sin_to_cos=False, shift=1.0, scale=1.0, max_period=10000.0
):
    """diffusers `get_timestep_embedding`, in float64 at the float32 `t`."""
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half) / (half - shift)
    angle = np.asarray(t, np.float64)[..., None] * np.exp(exponent) * scale
    emb = np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)
    if flip_sin_to_cos:
        emb = np.concatenate([emb[..., half:], emb[..., :half]], axis=-1)
    if dim % 2:
        emb = np.concatenate([emb, np.zeros(emb.shape[:-1] + (1,))], axis=-1)
    return emb


def dit_reference(t, dim, max_period=10000.0):
    """GLIDE/ADM/DiT `timestep_embedding`: [cos | sin], freqs over half."""
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half) / half)
    args = np.asarray(t, np.float64)[:, None] * freqs[None]
    emb = np.concatenate([np.cos(args), np.sin(args)], axis=-1)
    if dim % 2:
        emb = np.concatenate([emb, np.zeros_like(emb[:, :1])], axis=-1)
    return emb


def flux_reference(t, dim, max_period=10000.0, time_factor=1000.0):
    """FLUX (and keras-hub's Flux) `timestep_embedding`, without the rounding
    of ``time_factor * t`` to the input dtype."""
    return dit_reference(np.asarray(t, np.float64) * time_factor, dim, max_period)


@pytest.mark.parametrize("dim", [1, 6, 7, 256])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0.0},
        {"flip_sin_to_cos": True, "downscale_freq_shift": 0.0, "scale": 1000.0},
        {"max_period": 500.0, "downscale_freq_shift": 0.5, "scale": 2.0},
    ],
    ids=["diffusers", "dit", "flux", "other"],
)
def test_matches_the_float64_formula_at_fractional_timesteps(dim, options):
    # Every convention, every dim parity, within the precision bound.
    if dim < 3 and options.get("downscale_freq_shift", 1.0) == 1.0:
        pytest.skip("dim // 2 - shift is 0: refused (tested below)")
    t = TIMESTEPS if options.get("scale", 1.0) < 1000 else TIMESTEPS[:-1] / 1000
    got = to_numpy(keras_posenc.timestep_embedding(t, dim, **options))
    expected = diffusers_reference(
        t,
        dim,
        options.get("flip_sin_to_cos", False),
        options.get("downscale_freq_shift", 1.0),
        options.get("scale", 1.0),
        options.get("max_period", 10000.0),
    )
    assert got.dtype == np.float32 and got.shape == (len(t), dim)
    assert max_diff(got, expected) <= TOL


def test_dit_and_flux_conventions():
    # DiT is flip + shift 0; FLUX is that with scale = time_factor = 1000.
    t = np.array([0.0, 0.25, 0.9983897, 1.0], np.float32)
    dit = keras_posenc.timestep_embedding(
        t * 1000, 256, flip_sin_to_cos=True, downscale_freq_shift=0.0
    )
    assert max_diff(to_numpy(dit), dit_reference(t * 1000, 256)) <= TOL
    flux = keras_posenc.timestep_embedding(
        t, 257, flip_sin_to_cos=True, downscale_freq_shift=0.0, scale=1000.0
    )
    assert max_diff(to_numpy(flux), flux_reference(t, 257)) <= TOL


def test_reported_timesteps_against_mpmath():
    # The two timesteps of the public bf16 report, 40 digits.
    mpmath.mp.dps = 40
    t = np.array([998.3897, 937.5001], np.float32)
    got = to_numpy(keras_posenc.timestep_embedding(t, 64))
    for row, value in zip(got, t, strict=True):
        for i in range(32):
            w = mpmath.power(10000, -mpmath.mpf(i) / 31)
            angle = mpmath.mpf(float(value)) * w
            assert abs(row[i] - float(mpmath.sin(angle))) <= TOL
            assert abs(row[32 + i] - float(mpmath.cos(angle))) <= TOL


def test_the_float32_formula_is_far_off_where_ours_is_exact():
    # What the usual float32 code gives at FLUX's scale: radians off.
    t = np.float32(0.9983897)
    ours = to_numpy(keras_posenc.timestep_embedding(t, 256, scale=1000.0))
    f32 = (
        np.float32(1000.0)
        * t
        * np.exp(
            -np.float32(math.log(10000.0)) * np.arange(128, dtype=np.float32) / 127
        ).astype(np.float32)
    )
    usual = np.concatenate([np.sin(f32), np.cos(f32)])
    expected = diffusers_reference(t, 256, scale=1000.0)
    assert max_diff(ours, expected) <= TOL
    assert max_diff(usual, expected) > 1e-5


def test_any_shape_and_integer_timesteps():
    # [B, F] timesteps (per-frame), and int32/int64 ones taken exactly.
    t = np.array([[0, 999], [2**30 + 5, -7]], np.int64)
    got = to_numpy(keras_posenc.timestep_embedding(t, 8))
    assert got.shape == (2, 2, 8)
    assert max_diff(got, diffusers_reference(t.astype(np.float64), 8)) <= TOL


def test_sixteen_bit_timesteps_are_taken_as_they_are():
    # A bf16 timestep is already rounded: it is embedded as that value.
    t = ops.cast(ops.convert_to_tensor(np.array([998.3897], np.float32)), "bfloat16")
    got = to_numpy(keras_posenc.timestep_embedding(t, 16))
    assert max_diff(got, diffusers_reference(np.array([1000.0]), 16)) <= TOL


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_layer_never_rounds_timesteps_to_the_compute_dtype(policy):
    # The sinusoid of 998.3897, not of bf16(998.3897) = 1000, cast once.
    keras.mixed_precision.set_global_policy(policy)
    layer = keras_posenc.TimestepEmbedding(64)
    t = np.array([998.3897, 937.0], np.float32)
    got = layer(t)
    assert backend.standardize_dtype(got.dtype) == policy.split("_")[1]
    got = to_numpy(ops.cast(got, "float32"))
    expected = diffusers_reference(t, 64)
    step = 2.0**-8 if policy == "mixed_bfloat16" else 2.0**-11
    assert max_diff(got, expected) <= step  # the 16-bit rounding only
    rounded = diffusers_reference(np.array([1000.0, 936.0]), 64)
    assert max_diff(got, rounded) > 0.5


INTEGER_DTYPE = (
    "Received an invalid value for `dtype`, expected a floating dtype such as "
    "'float32'. Received: dtype='int32'"
)


def test_an_integer_dtype_is_refused():
    # The embedding cast to int32 would be 0s and 1s.
    with pytest.raises(ValueError, match=exact(INTEGER_DTYPE)):
        keras_posenc.TimestepEmbedding(8, dtype="int32")


@keras3_only  # tf-keras refuses an integer global policy itself
def test_an_integer_policy_is_refused():
    keras.mixed_precision.set_global_policy("int32")
    with pytest.raises(ValueError, match=exact(INTEGER_DTYPE)):
        keras_posenc.TimestepEmbedding(8)


# max_period < 1 with downscale_freq_shift just below dim // 2: frequencies
# max_period ** (-i / (dim // 2 - shift)) of millions of digits.
GROWING = [
    {"dim": 8, "max_period": 0.5, "downscale_freq_shift": 3.9999999},
    {"dim": 8, "max_period": 0.5, "downscale_freq_shift": 3.9999},
    {"dim": 65536, "max_period": 5e-324, "downscale_freq_shift": 32767.0},
]


@pytest.mark.parametrize("kwargs", GROWING, ids=["overflow", "slow", "subnormal"])
def test_growing_frequencies_are_refused_before_any_decimal_work(kwargs, monkeypatch):
    # They used to choose a decimal precision of hundreds of thousands of
    # digits (seconds to minutes), or raise decimal.Overflow, before the
    # range check; also in `load_model`. The bound is in float, first.
    from keras_posenc import timestep

    def decimal_work(*args):
        raise AssertionError("decimal work before the range check")

    monkeypatch.setattr(timestep, "geometric_turns", decimal_work)
    message = (
        "Received an invalid value for `max_period`, expected frequencies "
        "scale * max_period ** (-i / (dim // 2 - downscale_freq_shift)) of at "
        "most 4096 turns (25736 rad) per unit (with dim="
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        keras_posenc.TimestepEmbedding(**kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        keras_posenc.timestep_embedding(np.zeros(1, "float32"), **kwargs)


def test_the_float_bound_is_the_largest_frequency():
    # log10 of the largest turns per unit, against the float64 formula.
    from keras_posenc._exact.phase_constants import geometric_largest_log10

    for count, base, denominator, scale in (
        (4, 10000.0, 3.0, 1.0),
        (4, 0.5, 3.0, 1000.0),
        (128, 0.01, 127.5, 2.0),
    ):
        i = np.arange(count)
        turns = scale * base ** (-i / denominator) / (2 * np.pi)
        want = np.log10(turns.max())
        got = geometric_largest_log10(count, base, denominator, scale)
        assert abs(got - want) <= 1e-12


def test_given_frequencies_are_used_exactly():
    # A checkpoint's float32 frequencies, times scale, taken as given.
    w = np.exp(-np.log(10000.0) * np.arange(8, dtype=np.float32) / 8).astype(np.float32)
    t = np.array([0.5, 999.25], np.float32)
    got = to_numpy(
        keras_posenc.timestep_embedding(t, 16, inverse_frequencies=w, scale=3.0)
    )
    angle = t.astype(np.float64)[:, None] * w.astype(np.float64) * 3.0
    assert max_diff(got, np.concatenate([np.sin(angle), np.cos(angle)], -1)) <= TOL


def test_frequencies_function():
    expected = 1000.0 * np.exp(-np.log(10000.0) * np.arange(4) / 3.0)
    got = keras_posenc.timestep_frequencies(8, downscale_freq_shift=1.0, scale=1e3)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_compiled_calls_give_the_eager_bits():
    # tf.function / jax.jit (and XLA on TF) compute the same values.
    t = TIMESTEPS[:-1]
    eager = to_numpy(keras_posenc.timestep_embedding(t, 32))
    if BACKEND == "torch":
        import torch

        fn = torch.compile(lambda x: keras_posenc.timestep_embedding(x, 32))
        compiled = to_numpy(fn(ops.convert_to_tensor(t)))
        assert max_diff(compiled, eager) <= TOL
        return
    for jit_compile in (False, True) if BACKEND == "tensorflow" else (True,):
        fn = traced(lambda x: keras_posenc.timestep_embedding(x, 32), jit_compile)
        compiled = to_numpy(fn(ops.convert_to_tensor(t)))
        assert max_diff(compiled, eager) <= 4e-8


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TF graph optimizer")
def test_tf_graphs_give_the_same_bits_whether_shapes_are_known_or_not():
    # TF's graph optimizer merges float sums into one AddN ordered by what it
    # knows of their shapes: a graph for [None, None] timesteps (a model, a
    # SavedModel signature) gives the bits of one traced for the shape.
    import tensorflow as tf

    rng = np.random.default_rng(0)
    t = tf.constant(
        rng.uniform(-1000.0, 1000.0, 3000).astype("float32").reshape(30, 100)
    )

    def embed(x):
        return keras_posenc.timestep_embedding(x, 64)

    known = tf.function(embed, autograph=False)(t).numpy()
    spec = [tf.TensorSpec([None, None], tf.float32)]
    unknown = tf.function(embed, autograph=False, input_signature=spec)(t).numpy()
    assert np.array_equal(known.view(np.int32), unknown.view(np.int32))


@pytest.mark.skipif(BACKEND == "torch", reason="no tracing without assertions")
def test_traced_nan_timesteps_give_nan_rows():
    # Under jax.jit / XLA no assertion can run: bad timesteps give NaN rows.
    fn = traced(lambda x: keras_posenc.timestep_embedding(x, 8), jit_compile=True)
    got = to_numpy(fn(ops.convert_to_tensor(np.array([1.0, np.nan, 3e9], "float32"))))
    assert np.isfinite(got[0]).all() and np.isnan(got[1:]).all()


@pytest.mark.parametrize(
    "value, message",
    [
        (
            np.array([1.0, np.nan]),
            "`timesteps`, expected finite numbers below 2**31 "
            "in magnitude. Received: timesteps=nan",
        ),
        (
            np.array([2.0**31]),
            "`timesteps`, expected finite numbers below 2**31 "
            "in magnitude. Received: timesteps=2147483648.0",
        ),
        (
            np.array([2**40]),
            "`timesteps`, expected positions in [-2147483648, "
            "2**31) (int32). Received: timesteps=1099511627776",
        ),
        (
            "1.0",
            "`timesteps`, expected real numbers (int or float). "
            "Received: timesteps='1.0'",
        ),
    ],
    ids=["nan", "large-float", "large-int", "string"],
)
def test_bad_timesteps_are_refused_by_name(value, message):
    with pytest.raises(
        ValueError, match=exact("Received an invalid value for " + message)
    ):
        keras_posenc.timestep_embedding(value, 8)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dim": 0}, "`dim`, expected a positive integer <= 65536. Received: dim=0"),
        (
            {"dim": 2},
            "`downscale_freq_shift`, expected a number below dim // 2 = 1 "
            "(the exponent divides by it). Received: downscale_freq_shift=1.0",
        ),
        (
            {"scale": -1.0},
            "`scale`, expected a finite number > 0. Received: scale=-1.0",
        ),
        (
            {"scale": 1e9},
            "`scale`, expected `scale` times each frequency at most 4096 "
            "turns (25736 rad) per unit. Received: scale=1000000000.0",
        ),
        (
            {"max_period": 0.0},
            "`max_period`, expected a finite number > 0. Received: max_period=0.0",
        ),
        (
            {"flip_sin_to_cos": 1},
            "`flip_sin_to_cos`, expected a bool. Received: flip_sin_to_cos=1",
        ),
        (
            {"inverse_frequencies": [1.0]},
            "`inverse_frequencies`, expected a 1-D "
            "array of dim // 2 = 4 finite frequencies. "
            "Received: inverse_frequencies=[1.0]",
        ),
    ],
    ids=["dim", "shift", "scale", "huge-scale", "period", "flip", "given"],
)
def test_bad_options_are_refused_by_name(kwargs, message):
    kwargs = {"dim": 8, **kwargs}
    with pytest.raises(
        ValueError, match=exact("Received an invalid value for " + message)
    ):
        keras_posenc.TimestepEmbedding(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"max_period": 5e-324},
            "`max_period`, expected frequencies scale * max_period ** (-i / "
            "(dim // 2 - downscale_freq_shift)) of at most 4096 turns (25736 rad) "
            "per unit (with dim=8, downscale_freq_shift=1.0 and scale=1.0 they "
            "reach 10**322.5 turns). Received: max_period=5e-324",
        ),
        (
            {"inverse_frequencies": [1e300, 1.0, 1.0, 1.0]},
            "`inverse_frequencies`, expected frequencies of at most 4096 turns "
            "(25736 rad) per unit of timestep. "
            "Received: inverse_frequencies=[1e+300, 1.0, 1.0, 1.0]",
        ),
        (
            {"inverse_frequencies": [True, 0.5, 0.25, 0.125]},
            "`inverse_frequencies`, expected a 1-D array of dim // 2 = 4 finite "
            "frequencies. Received: inverse_frequencies=[True, 0.5, 0.25, 0.125]",
        ),
        (
            {"scale": 10**400},
            f"`scale`, expected a finite number > 0. Received: scale={10**400}",
        ),
    ],
    ids=["tiny-period", "huge-frequency", "bool-frequency", "scale-past-float64"],
)
def test_options_are_refused_naming_the_argument_given(kwargs, message):
    # Frequencies too fast for the engine name what made them, not `scale`.
    with pytest.raises(
        ValueError, match=exact("Received an invalid value for " + message)
    ):
        keras_posenc.timestep_embedding(np.array([1.0]), 8, **kwargs)


# Options the cache of checked options has seen, then the same values of
# another type (equal and of equal hash): each must be checked as given,
# whatever came before. A period no other test uses keeps the cache fresh.
@pytest.mark.parametrize(
    "seen, given, message",
    [
        (
            {"flip_sin_to_cos": True},
            {"flip_sin_to_cos": 1},
            "`flip_sin_to_cos`, expected a bool. Received: flip_sin_to_cos=1",
        ),
        (
            {"dim": 8},
            {"dim": 8.0},
            "`dim`, expected a positive integer <= 65536. Received: dim=8.0",
        ),
        (
            {"dim": 2, "inverse_frequencies": (1,)},
            {"dim": 2, "inverse_frequencies": (True,)},
            "`inverse_frequencies`, expected a 1-D array of dim // 2 = 1 finite "
            "frequencies. Received: inverse_frequencies=[True]",
        ),
    ],
    ids=["flip-after-bool", "dim-after-int", "frequency-after-int"],
)
def test_options_are_checked_whatever_was_seen_before(seen, given, message):
    options = {"dim": 8, "max_period": 4321.5, **seen}
    keras_posenc.timestep_embedding(np.array([3.0]), **options)
    with pytest.raises(
        ValueError, match=exact("Received an invalid value for " + message)
    ):
        keras_posenc.timestep_embedding(np.array([3.0]), **{**options, **given})


def test_layer_behaviours(tmp_path):
    # Config round trip, symbolic call, eager call, .keras save and load.
    layer = keras_posenc.TimestepEmbedding(
        9, flip_sin_to_cos=True, downscale_freq_shift=0.0, scale=1000.0
    )
    config = layer.get_config()
    again = keras_posenc.TimestepEmbedding.from_config(config)
    assert again.get_config() == config
    t = np.array([0.0, 0.5, 0.9983897], np.float32)
    expected = flux_reference(t, 9)
    assert max_diff(to_numpy(layer(t)), expected) <= TOL
    inputs = keras.Input(shape=(), dtype="float32")
    model = keras.Model(inputs, keras.layers.Dense(4)(layer(inputs)))
    assert tuple(model.output_shape) == (None, 4)
    if LEGACY:
        return
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert max_diff(to_numpy(loaded(t)), to_numpy(model(t))) == 0.0


@keras3_only
@pytest.mark.skipif(BACKEND != "tensorflow", reason="SavedModel export from TF")
def test_saved_model_round_trip(tmp_path):
    # Exported, then served by TensorFlow alone, equal to the eager layer.
    inputs = keras.Input(shape=(), dtype="float32")
    model = keras.Model(inputs, keras_posenc.TimestepEmbedding(16)(inputs))
    path = str(tmp_path / "saved")
    keras_posenc.export_saved_model(model, path)
    t = np.array([998.3897, 1.5], np.float32)
    served = serve(path, t)
    assert max_diff(served, diffusers_reference(t, 16)) <= TOL
