"""Tests of `keras_posenc.alibi`: ALiBi slopes and biases (Press et al., 2021).

References are independent of the package: the slopes by mpmath from the
paper's rule, and transformers 5.24.0's `_get_alibi_slopes` (BLOOM,
Falcon) and `build_mpt_alibi_tensor` (MPT) transcribed below in float64
numpy (transformers is never imported).
"""

import math
import re

import mpmath
import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, to_numpy, traced
from keras import ops

import keras_posenc
from keras_posenc import AlibiBias, alibi_bias, alibi_slopes
from keras_posenc._keras import keras

# The bias promise: within this many float32 ulps of the exact product.
ULPS = 0.6
HEADS = range(1, 129)


def _exact_slopes(heads, m=8):
    """The paper repository's rule, in mpmath (120 bits)."""
    with mpmath.workprec(120):

        def power_of_2(n):
            start = mpmath.power(2, -mpmath.mpf(m) / n)
            return [start ** (i + 1) for i in range(n)]

        c = 2 ** int(math.floor(math.log2(heads)))
        return power_of_2(c) + power_of_2(2 * c)[0::2][: heads - c]


def _bloom_slopes(heads):
    """transformers' `_get_alibi_slopes` (BLOOM, Falcon), in float64."""
    c = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(c) - 3)))
    slopes = base ** np.arange(1, 1 + c, dtype=np.float64)
    if c != heads:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * c) - 3)))
        remaining = min(c, heads - c)
        extra = extra_base ** np.arange(1, 1 + 2 * remaining, 2, dtype=np.float64)
        slopes = np.concatenate([slopes, extra])
    return slopes


def _mpt_slopes(heads, alibi_bias_max=8):
    """transformers' `build_mpt_alibi_tensor` slopes, in float64."""
    n = 2 ** math.ceil(math.log2(heads))
    base = np.arange(1, n + 1, dtype=np.float64) * (alibi_bias_max / n)
    slopes = 1.0 / np.power(2.0, base)
    if n != heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:heads]
    return slopes


def _ulps(ours, exact_values):
    """|ours - exact| in float32 ulps of the exact value (float64 array)."""
    ulp = np.spacing(np.abs(exact_values).astype(np.float32)).astype(np.float64)
    return np.abs(ours.astype(np.float64) - exact_values) / np.maximum(ulp, 2.0**-149)


# -- slopes ---------------------------------------------------------------------


def test_slopes_are_the_correctly_rounded_values_for_every_head_count():
    # float64 nearest to mpmath's for 1..128 heads, powers of two and not.
    for heads in HEADS:
        expected = np.array([float(s) for s in _exact_slopes(heads)])
        np.testing.assert_array_equal(alibi_slopes(heads), expected)


@pytest.mark.parametrize("m", [1, 6, 12, 64])
def test_slopes_follow_alibi_bias_max(m):
    for heads in (1, 3, 8, 12, 71):
        expected = np.array([float(s) for s in _exact_slopes(heads, m)])
        np.testing.assert_array_equal(alibi_slopes(heads, m), expected)


def test_slopes_equal_transformers_bloom_and_mpt_rules():
    # Both interleave the same way (MPT's slopes[1::2] + slopes[::2] of the
    # next power of two is the paper's order); float64 pow rounds differently.
    for heads in HEADS:
        ours = alibi_slopes(heads)
        np.testing.assert_allclose(_bloom_slopes(heads), ours, rtol=1e-14)
        np.testing.assert_allclose(_mpt_slopes(heads), ours, rtol=1e-14)


# -- the bias -------------------------------------------------------------------


@pytest.mark.parametrize("start", [0, 10**6, 2**24 + 1, 2**31 - 1])
def test_bias_is_within_float32_rounding_of_the_exact_product(start):
    # Queries at start, start + 1 against keys 0..15: distances up to 2**31 - 1,
    # for head counts powers of two and not, against mpmath.
    for heads in (1, 5, 12, 64, 71, 128):
        q = 1 if start == 2**31 - 1 else 2
        bias = to_numpy(alibi_bias(heads, q, 16, start_index=start))[0]
        keys = np.arange(16)
        with mpmath.workprec(120):
            for h, slope in enumerate(_exact_slopes(heads)):
                for i in range(q):
                    want = np.array([float(slope * int(j - start - i)) for j in keys])
                    assert _ulps(bias[h, i], want).max() <= ULPS


def test_bias_matches_transformers_over_heads_1_to_128_and_distances_to_10_6():
    # transformers' bias is slope * key (BLOOM, Falcon) or slope * (key - (K-1))
    # (MPT): slope * (key - query) plus a constant per row. Here: ours equals
    # their float64 slopes times (key - query) within float32 rounding.
    # Every head count's slopes in one call (slopes are tested above), one
    # query per start (per-example starts).
    slopes = np.concatenate([alibi_slopes(heads) for heads in HEADS])
    theirs = np.concatenate([_bloom_slopes(heads) for heads in HEADS])
    starts, keys = np.array([15, 1000, 54321, 10**6]), np.arange(16)
    for part in np.array_split(np.arange(slopes.size), 3):
        bias = alibi_bias(part.size, 1, 16, start_index=starts, slopes=slopes[part])
        want = theirs[part][None, :, None] * (keys - starts[:, None])[:, None, :]
        assert _ulps(to_numpy(bias)[:, :, 0], want).max() <= ULPS + 1e-6


def test_attention_weights_equal_transformers_bloom_and_mpt():
    # softmax over keys ignores the constant per row: same weights as HF's.
    heads, length = 12, 9
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(1, heads, length, length)).astype("float32")
    future = np.triu(np.ones((length, length), bool), 1)
    keys = np.arange(length)

    def weights(biased):
        biased = np.where(future, -np.inf, biased.astype(np.float64))
        e = np.exp(biased - biased.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    ours = weights(to_numpy(AlibiBias()(scores)))
    bloom = weights(scores + _bloom_slopes(heads)[:, None, None] * keys)
    mpt = weights(scores + _mpt_slopes(heads)[:, None, None] * (keys - length + 1))
    np.testing.assert_allclose(ours, bloom, atol=1e-6)
    np.testing.assert_allclose(ours, mpt, atol=1e-6)


def test_layer_forms_causal_symmetric_and_decoding_steps():
    heads, q, k = 3, 4, 6
    slopes = alibi_slopes(heads)[:, None, None]
    scores = np.zeros((2, heads, q, k), "float32")
    i, j = np.arange(k - q, k)[:, None], np.arange(k)[None, :]
    np.testing.assert_allclose(to_numpy(AlibiBias()(scores))[0], slopes * (j - i))
    symmetric = to_numpy(AlibiBias(symmetric=True)(scores))[1]
    np.testing.assert_allclose(symmetric, -slopes * np.abs(j - i))
    # A step at position 5 equals row 5 of the full causal bias.
    full = to_numpy(AlibiBias()(np.zeros((1, heads, k, k), "float32")))
    step = to_numpy(AlibiBias()(np.zeros((1, heads, 1, k), "float32")))
    np.testing.assert_array_equal(step[0, :, 0], full[0, :, k - 1])
    # Per-example starts: one row of positions per example.
    per_example = to_numpy(AlibiBias()(scores, start_index=np.array([0, 2])))
    np.testing.assert_allclose(per_example[1], slopes * (j - (i - k + q + 2)))


def test_one_row_form_is_the_last_query_row_with_the_same_softmax():
    # keras-hub's and Hugging Face's form: one row per head, broadcast over
    # the queries; under a causal mask, the attention weights of the full bias.
    heads, q, k = 5, 6, 9
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(2, heads, q, k)).astype("float32")
    full = to_numpy(AlibiBias()(np.zeros_like(scores)))
    row = to_numpy(AlibiBias(one_row=True)(np.zeros_like(scores)))
    np.testing.assert_array_equal(row, np.broadcast_to(full[:, :, -1:], row.shape))
    slopes = alibi_slopes(heads)[:, None, None]
    i, j = np.arange(k - q, k)[:, None], np.arange(k)[None, :]
    mask = np.where(j <= i, 0.0, -np.inf)

    def weights(x):
        x = x + mask
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    exact = weights(scores.astype(np.float64) + slopes * (j - i))
    ours = weights(to_numpy(AlibiBias(one_row=True)(scores)).astype(np.float64))
    np.testing.assert_allclose(ours, exact, atol=1e-6)
    # Per-example starts: each example's last query; the function's shape.
    per_example = to_numpy(
        AlibiBias(one_row=True)(np.zeros_like(scores), start_index=np.array([0, 40]))
    )
    np.testing.assert_allclose(per_example[1, :, 0], slopes[:, 0] * (j - 45)[0])
    assert tuple(alibi_bias(heads, q, k, one_row=True).shape) == (1, heads, 1, k)


def test_one_row_bias_is_within_float32_rounding_at_long_distances():
    # Two queries, the last at 2**31 - 1: its row, distances to 2**31 - 1.
    for heads in (5, 64):
        bias = to_numpy(alibi_bias(heads, 2, 16, start_index=2**31 - 2, one_row=True))
        with mpmath.workprec(120):
            for h, slope in enumerate(_exact_slopes(heads)):
                want = np.array([float(slope * (j - 2**31 + 1)) for j in range(16)])
                assert _ulps(bias[0, h, 0], want).max() <= ULPS


@pytest.mark.parametrize(
    "q, k", [(1, 1), (3, 16), (16, 17), (20, 5), (0, 7), (5, 0), (33, 40)]
)
@pytest.mark.parametrize("symmetric", [False, True])
def test_full_bias_at_every_shape_is_the_exact_product(q, k, symmetric):
    # Rows moved into place block by block (blocks of 16 keys): every shape,
    # ragged last blocks, more queries than keys, and empty ones; also in a
    # TF graph whose lengths are known only when it runs.
    heads = 3
    layer = AlibiBias(symmetric=symmetric)
    scores = np.zeros((1, heads, q, k), "float32")
    i, j = np.arange(max(k - q, 0), max(k - q, 0) + q)[:, None], np.arange(k)[None]
    d = -np.abs(j - i) if symmetric else j - i
    want = alibi_slopes(heads)[:, None, None] * d
    out = to_numpy(layer(scores))[0]
    assert out.shape == (heads, q, k)
    assert q * k == 0 or _ulps(out, want).max() <= ULPS
    if BACKEND == "tensorflow":
        import tensorflow as tf

        spec = tf.TensorSpec((None, heads, None, None), tf.float32)
        graph = tf.function(layer, input_signature=[spec], autograph=False)
        np.testing.assert_array_equal(graph(scores).numpy()[0], out)


@pytest.mark.parametrize("slice_bytes", [1, 2 * 33 * 40 * 4, 2**30])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bias_added_a_few_heads_at_a_time_is_the_whole_add(
    monkeypatch, slice_bytes, dtype
):
    # Eager torch adds a large shared full bias a few heads at a time (here
    # any: one head, two or four with a ragged last slice, all in one); every
    # backend must give the float32 exact bias cast once and added in the
    # scores' dtype.
    from keras_posenc._alibi import bias as alibi_bias_module

    monkeypatch.setattr(alibi_bias_module, "_SLICE_BYTES", slice_bytes)
    monkeypatch.setattr(keras_posenc._backend, "_WHOLE_SLICES", 0)
    heads, q, k = 5, 33, 40
    scores = np.random.default_rng(2).normal(size=(3, heads, q, k)).astype("float32")
    scores = ops.cast(scores, dtype)
    out = AlibiBias(dtype=dtype)(scores, start_index=k - q)
    i, j = np.arange(k - q, k)[:, None], np.arange(k)[None]
    exact = alibi_slopes(heads)[:, None, None] * (j - i)
    bias = ops.cast(ops.cast(exact, "float32"), dtype)
    want = to_numpy(ops.cast(scores + bias[None], "float32"))
    got = to_numpy(ops.cast(out, "float32"))
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(BACKEND != "torch", reason="torch autograd")
def test_bias_added_in_slices_passes_the_gradient_to_the_scores(monkeypatch):
    import torch

    from keras_posenc._alibi import bias as alibi_bias_module

    monkeypatch.setattr(alibi_bias_module, "_SLICE_BYTES", 1)
    monkeypatch.setattr(keras_posenc._backend, "_WHOLE_SLICES", 0)
    scores = torch.zeros((2, 4, 6, 6), requires_grad=True)
    weights = torch.arange(scores.numel(), dtype=torch.float32).reshape(scores.shape)
    out = AlibiBias()(scores)  # on Keras's device (a GPU's, where there is one)
    (out * weights.to(out.device)).sum().backward()
    np.testing.assert_array_equal(to_numpy(scores.grad), to_numpy(weights))
    np.testing.assert_array_equal(
        to_numpy(out.detach()), to_numpy(alibi_bias(4, 6)) + np.zeros((2, 1, 1, 1))
    )


@pytest.mark.skipif(BACKEND != "torch", reason="torch.func")
@pytest.mark.parametrize("axis", [0, 2])
def test_bias_added_in_slices_under_torch_func_vmap_and_grad(monkeypatch, axis):
    import torch

    from keras_posenc._alibi import bias as alibi_bias_module

    monkeypatch.setattr(alibi_bias_module, "_SLICE_BYTES", 1)
    monkeypatch.setattr(keras_posenc._backend, "_WHOLE_SLICES", 0)
    layer = AlibiBias()
    scores = torch.randn(3, 2, 4, 5, 6, generator=torch.Generator().manual_seed(0))
    want = scores.numpy() + to_numpy(alibi_bias(4, 5, 6))
    mapped = torch.func.vmap(layer, in_dims=axis)(scores.movedim(0, axis))
    np.testing.assert_array_equal(to_numpy(mapped), want)
    grads = torch.func.vmap(torch.func.grad(lambda s: (layer(s) ** 2).sum()))(scores)
    np.testing.assert_allclose(to_numpy(grads), 2 * want, rtol=1e-6)


@pytest.mark.skipif(BACKEND != "torch", reason="torch forward mode and tracing")
def test_bias_added_in_slices_under_jvp_hessian_and_jit_trace(monkeypatch):
    import torch

    from keras_posenc._alibi import bias as alibi_bias_module

    monkeypatch.setattr(alibi_bias_module, "_SLICE_BYTES", 1)
    monkeypatch.setattr(keras_posenc._backend, "_WHOLE_SLICES", 0)
    layer = AlibiBias()
    scores = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    want = scores.numpy() + to_numpy(alibi_bias(3, 4, 5))
    tangent = torch.ones_like(scores)
    out, out_tangent = torch.func.jvp(layer, (scores,), (tangent,))
    np.testing.assert_array_equal(to_numpy(out), want)
    np.testing.assert_array_equal(to_numpy(out_tangent), to_numpy(tangent))
    hessian = torch.func.hessian(lambda s: (layer(s) ** 2).sum())(scores[:1, :1])
    eye = 2 * np.eye(20).reshape(1, 1, 4, 5, 1, 1, 4, 5)
    np.testing.assert_array_equal(to_numpy(hessian), eye)
    traced_layer = torch.jit.trace(layer, scores, check_trace=False)
    np.testing.assert_array_equal(to_numpy(traced_layer(scores)), want)


def test_explicit_slopes_are_used_as_given():
    slopes = [0.5, 0.3, 1e-3]
    out = to_numpy(AlibiBias(slopes=slopes)(np.zeros((1, 3, 1, 4), "float32")))
    want = np.array(slopes)[:, None] * (np.arange(4) - 3)
    np.testing.assert_allclose(out[0, :, 0], want, rtol=1e-7)


@pytest.mark.parametrize("one_row", [False, True])
def test_compiled_calls_give_the_same_bits(one_row):
    layer = AlibiBias(one_row=one_row)
    scores = np.random.default_rng(1).normal(size=(2, 6, 5, 40)).astype("float32")
    eager = to_numpy(layer(scores, start_index=3 * 10**8))
    if BACKEND in ("tensorflow", "jax"):
        for jit in (False, True) if BACKEND == "tensorflow" else (True,):
            fn = traced(lambda x: layer(x, start_index=3 * 10**8), jit_compile=jit)
            np.testing.assert_array_equal(to_numpy(fn(scores)), eager)


# -- mixed precision --------------------------------------------------------------


@pytest.mark.skipif(LEGACY, reason="Keras 3 dtype policies")
def test_bfloat16_bias_is_the_float32_bias_rounded_once():
    # keras-hub rounds the distance 1000 to bf16 (a multiple of 4) first;
    # here the float32 bias is rounded once, to the scores' dtype.
    layer = AlibiBias(alibi_bias_max=1, dtype="mixed_bfloat16")
    out = layer(np.zeros((1, 1, 1, 1002), "float32"))
    assert "bfloat16" in str(out.dtype)
    exact = alibi_slopes(1, 1)[0] * -np.arange(1001, -1, -1, dtype=np.float64)
    want = to_numpy(ops.cast(ops.cast(exact, "float32"), "bfloat16"))
    np.testing.assert_array_equal(to_numpy(ops.cast(out, "float32"))[0, 0, 0], want)


@pytest.mark.skipif(LEGACY, reason="Keras 3 dtype policies")
def test_float16_bias_saturates_at_the_finite_range():
    out = AlibiBias(alibi_bias_max=1, dtype="mixed_float16")(
        np.zeros((1, 1, 1, 140000), "float32")
    )
    values = to_numpy(ops.cast(out, "float32"))[0, 0, 0]
    assert np.isfinite(values).all()
    assert values[0] == -65504.0 and values[-1] == 0.0
    bias = to_numpy(alibi_bias(1, 1, 3, alibi_bias_max=1, dtype="float16"))
    assert bias.dtype == np.float16


# -- config, saving ---------------------------------------------------------------


def test_config_round_trip_and_keras_file(tmp_path):
    for layer in (
        AlibiBias(heads=3, symmetric=True, name="alibi"),
        AlibiBias(one_row=True),
    ):
        again = AlibiBias.from_config(layer.get_config())
        assert again.get_config() == layer.get_config()
    assert again.one_row
    inputs = keras.Input((3, None, None))
    model = keras.Model(inputs, AlibiBias(slopes=[0.5, 0.25, 0.125])(inputs))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 7)).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


@pytest.mark.skipif(
    not LEGACY and BACKEND not in ("tensorflow", "jax"), reason="SavedModel writers"
)
def test_saved_model_serves_any_batch_and_lengths(tmp_path):
    from _helpers import serve

    inputs = keras.Input((4, None, None))
    model = keras.Model(inputs, AlibiBias()(inputs))
    path = keras_posenc.export_saved_model(model, tmp_path / "alibi")
    for shape in ((1, 4, 3, 3), (2, 4, 1, 9)):
        x = np.random.default_rng(0).normal(size=shape).astype("float32")
        np.testing.assert_array_equal(serve(path, x), to_numpy(model(x)))


# -- config.json ------------------------------------------------------------------


def test_from_hf_config_reads_bloom_mpt_and_falcon():
    bloom = AlibiBias.from_hf_config({"model_type": "bloom", "num_attention_heads": 12})
    assert bloom.heads == 12 and bloom.slopes is None
    mpt = AlibiBias.from_hf_config({"model_type": "mpt", "n_heads": 24})
    assert mpt.heads == 24 and mpt.alibi_bias_max == 8
    falcon = AlibiBias.from_hf_config(
        {"model_type": "falcon", "alibi": True, "num_attention_heads": 71}
    )
    # Falcon divides its ALiBi by sqrt(head_dim) = sqrt(4544 // 71) = 8.
    np.testing.assert_allclose(falcon.slopes, _bloom_slopes(71) / 8, rtol=1e-14)
    assert AlibiBias.from_hf_config({"model_type": "bloom"}).heads == 8


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "llama"}, "`model_type`, expected one of"),
        ({"model_type": "baichuan"}, "remote code"),
        ({"model_type": "falcon"}, "`alibi`, expected true"),
        (
            {"model_type": "mpt", "attn_config": {"alibi": False}},
            "`attn_config.alibi`, expected true",
        ),
        (
            {"model_type": "mpt", "attn_config": {"alibi_bias_max": 16}},
            "`attn_config.alibi_bias_max`, expected 8",
        ),
        (
            {"model_type": "bloom", "n_head": 8, "num_attention_heads": 4},
            "`num_attention_heads`, expected the value of `n_head`",
        ),
        ({"model_type": "bloom", "n_head": 0}, "`n_head`, expected a positive"),
        (
            {"model_type": "falcon", "alibi": True, "hidden_size": 8},
            "`hidden_size`, expected at least num_attention_heads=71",
        ),
    ],
)
def test_from_hf_config_refuses_by_name(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        AlibiBias.from_hf_config(config)


def test_from_hf_config_refuses_an_argument_it_reads():
    message = "expected no `heads` argument to from_hf_config: it is read from"
    with pytest.raises(ValueError, match=re.escape(message) + ".*heads=4$"):
        AlibiBias.from_hf_config({"model_type": "bloom"}, heads=4)


# -- errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alibi_bias_max": 8.5}, "`alibi_bias_max`, expected a positive integer"),
        ({"alibi_bias_max": 65}, "`alibi_bias_max`, expected a positive integer <= 64"),
        ({"heads": 0}, "`heads`, expected a positive integer"),
        ({"slopes": []}, "`slopes`, expected a non-empty list"),
        ({"slopes": [0.5, -1.0]}, "`slopes`, expected a non-empty list"),
        ({"slopes": [0.5], "heads": 2}, "`heads`, expected 1, the number of `slopes`"),
        ({"slopes": [0.5], "alibi_bias_max": 4}, "`alibi_bias_max`, expected 8"),
        ({"symmetric": "yes"}, "`symmetric`, expected a bool"),
        ({"one_row": 1}, "`one_row`, expected a bool"),
        ({"symmetric": True, "one_row": True}, "`one_row`, expected False with"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        AlibiBias(**kwargs)


def test_scores_that_do_not_fit_are_refused():
    with pytest.raises(
        ValueError, match=re.escape("expected 4 heads on axis 1 (heads=4)")
    ):
        AlibiBias(heads=4)(np.zeros((1, 3, 2, 2), "float32"))
    with pytest.raises(
        ValueError, match=re.escape("`attention_scores`, expected a tensor")
    ):
        AlibiBias()(np.zeros((3, 2, 2), "float32"))
    with pytest.raises(ValueError, match=re.escape("`start_index`")):
        AlibiBias()(np.zeros((1, 2, 2, 2), "float32"), start_index=-1)


def test_bad_lengths_are_refused_by_name():
    with pytest.raises(
        ValueError, match=re.escape("`query_length`, expected an integer")
    ):
        alibi_bias(4, -1)
    with pytest.raises(
        ValueError, match=re.escape("`key_length`, expected an integer")
    ):
        alibi_bias(4, 2, -3)
    with pytest.raises(
        ValueError, match=re.escape("`dtype`, expected a floating dtype")
    ):
        alibi_bias(4, 2, dtype="int32")


@pytest.mark.parametrize(
    "slopes", [[10**400], [True, 0.5]], ids=["past-float64", "bool"]
)
def test_slopes_that_are_not_numbers_in_range_are_refused(slopes):
    message = (
        "Received an invalid value for `slopes`, expected a non-empty list of "
        "numbers in [2**-64, 2**64], one per head. Received: slopes="
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        AlibiBias(slopes=slopes)
