"""N-axis RoPE (`axes_dim`): FLUX's `EmbedND`, 2-D axial RoPE, `grid_position_ids`.

The references are transcribed here in float64 from the code they stand
for (FLUX's `rope()` and `apply_rope`, naver's rope-vit axial RoPE, timm's
`RotaryEmbeddingCat`), with mpmath past float64's exact range, and
diffusers' own `FluxPosEmbed` output kept in `golden/flux/golden.npz`
(`golden/flux/make_golden.py`).
"""

import os

import numpy as np
import pytest
from _helpers import BACKEND, TOL, exact, max_diff, to_numpy, traced
from keras import backend as keras_backend

import keras_posenc
from keras_posenc import RotaryEmbedding, grid_position_ids, rotary_cos_sin

FLUX_AXES = (16, 56, 56)
GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "flux", "golden.npz")
# Float32 rotations of values of magnitude ~4: a few float32 ulps.
ROTATE_TOL = 2e-6
compiled = pytest.mark.skipif(BACKEND == "torch", reason="jax.jit / XLA only")


def flux_rope(pos, dim, theta=10000.0):
    """FLUX's `rope(pos, dim, theta)` in float64: ``[..., n, dim/2, 2, 2]``."""
    scale = np.arange(0, dim, 2, dtype=np.float64) / dim
    omega = 1.0 / (theta**scale)
    out = np.einsum("...n,d->...nd", np.asarray(pos, np.float64), omega)
    out = np.stack([np.cos(out), -np.sin(out), np.sin(out), np.cos(out)], axis=-1)
    return out.reshape(*out.shape[:-1], 2, 2)


def flux_embed_nd(ids, axes_dim, theta=10000.0):
    """FLUX's `EmbedND.forward` (without its `unsqueeze(1)` for heads)."""
    parts = [flux_rope(ids[..., i], d, theta) for i, d in enumerate(axes_dim)]
    return np.concatenate(parts, axis=-3)


def flux_apply_rope(x, freqs_cis):
    """FLUX's `apply_rope` on ``x [..., n, D]`` with `freqs_cis [..., n, D/2, 2, 2]`."""
    pairs = np.asarray(x, np.float64).reshape(*x.shape[:-1], -1, 1, 2)
    out = freqs_cis[..., 0] * pairs[..., 0] + freqs_cis[..., 1] * pairs[..., 1]
    return out.reshape(x.shape)


def cos_sin_of(freqs_cis):
    """cos and sin, ``[..., D]`` interleaved, from FLUX's rotation matrices."""
    cos, sin = freqs_cis[..., 0, 0], freqs_cis[..., 1, 0]
    return np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)


def mp_cos_sin(ids, axes_dim, theta=10000):
    """40-digit cos and sin (interleaved) of float ids ``[N, n_axes]``."""
    import mpmath

    mpmath.mp.dps = 40
    cos, sin = [], []
    for row in ids:
        c, s = [], []
        for value, dim in zip(row, axes_dim, strict=True):
            for k in range(dim // 2):
                angle = mpmath.mpf(float(value)) * mpmath.power(
                    theta, mpmath.mpf(-2 * k) / dim
                )
                c += [float(mpmath.cos(angle))] * 2
                s += [float(mpmath.sin(angle))] * 2
        cos.append(c)
        sin.append(s)
    return np.array(cos), np.array(sin)


def _ids(rng, count, high, dtype="int32"):
    return rng.integers(0, high, size=(count, 3)).astype(dtype)


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# -- values ---------------------------------------------------------------------------


@pytest.mark.parametrize("high", [4096, 2**20], ids=["image", "video"])
def test_cos_sin_equal_flux_rope_in_float64(rng, high):
    # Integer ids as large as images (4096) and long videos (2**20) use them.
    ids = _ids(rng, 64, high)
    want = cos_sin_of(flux_embed_nd(ids, FLUX_AXES))
    got = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="interleaved")
    for g, w in zip(got, want, strict=True):
        assert max_diff(to_numpy(g), w) < TOL


def test_fractional_ids_equal_flux_rope_in_float64(rng):
    # Interpolated grids: float32 ids, taken exactly as given.
    ids = (_ids(rng, 64, 4096) * rng.uniform(0.1, 1.0, (64, 3))).astype("float32")
    want = cos_sin_of(flux_embed_nd(ids, FLUX_AXES))
    got = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="interleaved")
    for g, w in zip(got, want, strict=True):
        assert max_diff(to_numpy(g), w) < TOL


def test_ids_up_to_2_31_equal_mpmath(rng):
    # Past float64's exact angles: float32 ids up to 2**31, negative too.
    ids = rng.uniform(-(2.0**31), 2.0**31, size=(3, 3)).astype("float32")
    ids[0] = [2.0**31 - 128, -(2.0**31) + 128, 1234567.875]
    want = mp_cos_sin(ids, FLUX_AXES)
    got = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="interleaved")
    for g, w in zip(got, want, strict=True):
        assert max_diff(to_numpy(g), w) < TOL


@pytest.mark.parametrize("case", ["image", "fractional", "video"])
def test_cos_sin_equal_diffusers_flux_pos_embed(case):
    # diffusers' FluxPosEmbed (float64 frequencies, rounded once to float32);
    # its float32 variant (MPS, keras-hub) is far off: 2e-4 at 4096, 0.06 at 2**20.
    golden = np.load(GOLDEN)
    ids = golden[f"{case}.ids"]
    cos, sin = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="interleaved")
    assert max_diff(to_numpy(cos), golden[f"{case}.cos"]) < TOL
    assert max_diff(to_numpy(sin), golden[f"{case}.sin"]) < TOL
    float32 = max_diff(golden[f"{case}.cos32"], golden[f"{case}.cos"])
    assert float32 > (1e-2 if case == "video" else 1e-5)


def test_int_and_float_ids_give_the_same_bits(rng):
    # FLUX's ids are float32 whole numbers: the integer path's bits.
    ids = _ids(rng, 40, 2**24)
    ints = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES)
    floats = rotary_cos_sin(ids.astype("float32"), 128, axes_dim=FLUX_AXES)
    for a, b in zip(ints, floats, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_half_layout_pairs_j_with_j_plus_half():
    # "half": [c | c] over the axes' concatenated frequencies.
    ids = np.array([[3, 5, 8], [7, 11, 2]], "int32")
    cos, sin = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="half")
    icos, isin = rotary_cos_sin(ids, 128, axes_dim=FLUX_AXES, layout="interleaved")
    np.testing.assert_array_equal(to_numpy(cos)[:, :64], to_numpy(icos)[:, ::2])
    np.testing.assert_array_equal(to_numpy(cos)[:, 64:], to_numpy(icos)[:, ::2])
    np.testing.assert_array_equal(to_numpy(sin)[:, 64:], to_numpy(isin)[:, 1::2])


def test_one_axis_is_plain_rope(rng):
    # axes_dim=(D,) is RoPE at those positions.
    positions = rng.integers(-(2**31), 2**31 - 1, size=16).astype("int32")
    want = rotary_cos_sin(positions, 32, layout="interleaved")
    got = rotary_cos_sin(positions[:, None], 32, axes_dim=[32], layout="interleaved")
    for g, w in zip(got, want, strict=True):
        assert max_diff(to_numpy(g), to_numpy(w)) < TOL


# -- the layer ------------------------------------------------------------------------


def test_layer_equals_flux_apply_rope(rng):
    # FLUX's attention: q [batch, heads, length, head dim], ids [batch, length, 3].
    ids = np.concatenate([_ids(rng, 6, 64)[None], _ids(rng, 6, 4096)[None]])
    q = _x((2, 3, 6, 128))
    layer = RotaryEmbedding(axes_dim=FLUX_AXES, layout="interleaved", sequence_axis=2)
    got = to_numpy(layer(q, positions=ids))
    want = flux_apply_rope(q, flux_embed_nd(ids, FLUX_AXES)[:, None])
    assert max_diff(got, want) < ROTATE_TOL


def test_layer_shared_ids_and_get_config(rng):
    ids = _ids(rng, 5, 100).astype("float32") + 0.25
    layer = RotaryEmbedding(axes_dim=[2, 4, 2], max_wavelength=100.0)
    restored = RotaryEmbedding.from_config(layer.get_config())
    assert restored.get_config()["axes_dim"] == [2, 4, 2]
    q = _x((2, 5, 8))
    got = to_numpy(restored(q, positions=ids))
    cos, sin = rotary_cos_sin(ids, 8, axes_dim=(2, 4, 2), max_wavelength=100.0)
    want = keras_posenc.apply_rotary(q, cos, sin)  # XLA may fuse multiply-adds
    assert max_diff(got, to_numpy(want)) < ROTATE_TOL


# -- 2-D axial RoPE for patch grids ---------------------------------------------------


def rope_vit_axial(dim, end_x, end_y, theta=100.0):
    """naver rope-vit's `compute_axial_cis` in float64: cos and sin of
    ``[end_x * end_y, dim / 2]`` (x, then y frequencies)."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 4)[: dim // 4] / dim))
    t = np.arange(end_x * end_y)
    t_x, t_y = t % end_x, t // end_x
    angles = np.concatenate([np.outer(t_x, freqs), np.outer(t_y, freqs)], axis=-1)
    return np.cos(angles), np.sin(angles)


def timm_rotary_cat(dim, feat_shape, ref_feat_shape, temperature=10000.0):
    """timm's `build_rotary_pos_embed(in_pixels=False)` in float64, and the
    float32 grid positions it uses (EVA-02's `ref_feat_shape` scaling)."""
    bands = 1.0 / temperature ** (np.arange(dim // 4) / (dim // 4))
    t = [
        (np.arange(s, dtype=np.float32) / np.float32(s) * np.float32(r))
        for s, r in zip(feat_shape, ref_feat_shape, strict=True)
    ]
    grid = np.stack(np.meshgrid(*t, indexing="ij"), axis=-1).reshape(-1, 2)
    pos = grid.astype(np.float64)[..., None] * bands
    sin, cos = np.sin(pos).reshape(len(grid), -1), np.cos(pos).reshape(len(grid), -1)
    return grid, np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)


def test_rope_vit_axial_is_two_axes():
    # rope-vit: pairs (2k, 2k+1), x (column) frequencies first, theta 100.
    dim, height, width = 32, 3, 5
    cos, sin = rope_vit_axial(dim, width, height)
    ids = grid_position_ids((height, width))[:, ::-1]  # (x, y)
    got = rotary_cos_sin(
        ids, dim, axes_dim=(16, 16), max_wavelength=100.0, layout="interleaved"
    )
    assert max_diff(to_numpy(got[0])[:, ::2], cos) < TOL
    assert max_diff(to_numpy(got[1])[:, ::2], sin) < TOL


def test_timm_rotary_cat_with_fractional_grid():
    # timm's EVA-02 RotaryEmbeddingCat: (y, x), fractional when resized.
    grid, cos, sin = timm_rotary_cat(64, (6, 4), (16, 16))
    got = rotary_cos_sin(grid, 64, axes_dim=(32, 32), layout="interleaved")
    assert max_diff(to_numpy(got[0]), cos) < TOL
    assert max_diff(to_numpy(got[1]), sin) < TOL


def test_grid_position_ids():
    ids = grid_position_ids([2, 2, 3], text_length=2, n_axes=4)
    assert ids.dtype == np.int32 and ids.shape == (14, 4)
    assert not ids[:2].any() and not ids[:, 0].any()
    np.testing.assert_array_equal(ids[2:, 1:], list(np.ndindex(2, 2, 3)))  # row-major


# -- compiled -------------------------------------------------------------------------


def test_repeated_ids_equal_flux_rope_and_each_id_alone(rng):
    # Eager TF and torch run the engine on each axis's distinct ids and
    # gather (FLUX's grid ids repeat along every axis): the float64 values,
    # and each row the bits of its id computed alone.
    ids = (_ids(rng, 12, 2**20) * 0.75).astype("float32")
    repeated = ids[rng.integers(0, 12, size=300)]
    got = rotary_cos_sin(repeated, 128, axes_dim=FLUX_AXES, layout="interleaved")
    want = cos_sin_of(flux_embed_nd(repeated, FLUX_AXES))
    for g, w in zip(got, want, strict=True):
        assert max_diff(to_numpy(g), w) < TOL
    for row in (0, 150, 299):
        alone = rotary_cos_sin(
            repeated[row : row + 1], 128, axes_dim=FLUX_AXES, layout="interleaved"
        )
        for g, a in zip(got, alone, strict=True):
            np.testing.assert_array_equal(to_numpy(g)[row], to_numpy(a)[0])


@compiled
def test_compiled_equals_eager_and_bad_float_ids_are_nan(rng):
    # Under jax.jit / XLA: the eager values; NaN rows for NaN or 2**31 ids.
    ids = (_ids(rng, 8, 2**20) * 0.75).astype("float32")
    layer = RotaryEmbedding(axes_dim=(2, 4, 2))
    q = _x((1, 8, 2, 8))
    eager = to_numpy(layer(q, positions=ids))
    run = traced(lambda x, p: layer(x, positions=p), jit_compile=True)
    np.testing.assert_allclose(to_numpy(run(q, ids)), eager, rtol=0, atol=ROTATE_TOL)
    bad = ids.copy()
    bad[2, 1], bad[5, 0] = np.nan, 2.0**31
    out = to_numpy(run(q, bad))
    assert np.isnan(out[0, [2, 5]]).all()
    assert not np.isnan(np.delete(out, [2, 5], axis=1)).any()


@compiled
def test_compiled_cos_sin_with_int_ids(rng):
    ids = _ids(rng, 10, 2**31 - 1)
    eager = rotary_cos_sin(ids, 8, axes_dim=(2, 4, 2))
    run = traced(lambda p: rotary_cos_sin(p, 8, axes_dim=(2, 4, 2)), jit_compile=True)
    for g, w in zip(run(ids), eager, strict=True):
        assert max_diff(to_numpy(g), to_numpy(w)) < TOL


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow graphs only")
def test_tf_graph_asserts_on_bad_float_ids():
    import tensorflow as tf

    layer = RotaryEmbedding(axes_dim=(2, 2))
    run = tf.function(lambda x, p: layer(x, positions=p), autograph=False)
    ids = np.array([[0.5, 1.0], [np.inf, 2.0]], "float32")
    message = "`positions`: expected finite numbers"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        run(_x((1, 2, 4)), ids)


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[], [3, 4], [0, 2], (2.0, 4), "16", [2**16, 2]])
def test_bad_axes_dim(value):
    with pytest.raises(ValueError, match=r"`axes_dim`, expected a non-empty list"):
        RotaryEmbedding(axes_dim=value)


def test_axes_dim_must_sum_to_the_head_dim():
    message = (
        "Received an invalid value for `axes_dim`, expected dimensions summing "
        "to the head dim, 64 (they sum to 128). Received: axes_dim=[16, 56, 56]"
    )
    with pytest.raises(ValueError, match=exact(message)):
        RotaryEmbedding(axes_dim=FLUX_AXES)(_x((1, 2, 64)), positions=np.zeros((2, 3)))
    with pytest.raises(ValueError, match=exact(message)):
        rotary_cos_sin(np.zeros((2, 3)), 64, axes_dim=FLUX_AXES)


@pytest.mark.parametrize(
    "option, value",
    [
        ("rope_scaling", {"rope_type": "linear", "factor": 2.0}),
        ("inverse_frequencies", [1.0, 0.5]),
        ("rotary_dim", 4),
        ("mode", "lookup"),
    ],
)
def test_options_refused_with_axes_dim(option, value):
    extra = {"max_length": 8} if option == "mode" else {}
    with pytest.raises(ValueError, match=rf"`{option}`, expected .* with `axes_dim`"):
        RotaryEmbedding(axes_dim=(2, 2), **{option: value}, **extra)


def test_rotary_cos_sin_refuses_scaling_with_axes_dim():
    with pytest.raises(ValueError, match=r"`rope_scaling`, expected None with"):
        rotary_cos_sin(
            np.zeros((1, 2)), 4, axes_dim=(2, 2), rope_scaling={"rope_type": "default"}
        )


@pytest.mark.parametrize(
    "ids, match",
    [
        (None, r"`positions`, expected position ids \[batch, length, 2\]"),
        (np.zeros((3, 3)), r"`positions`, expected position ids of rank 2 or 3 whose"),
        (np.zeros(3), r"`positions`, expected position ids of rank 2 or 3 whose"),
        (np.zeros((4, 2)), r"`positions`, expected one id per step"),
        (np.zeros((2, 3, 2)), r"`positions`, expected one row of ids per example"),
        (np.array([[0.0, np.nan]] * 3), r"`positions`, expected finite numbers .*=nan"),
        (np.array([[0.0, 2.0**31]] * 3), r"`positions`, expected finite.*=2147483648"),
        (np.array([[0, 2**31]] * 3), r"`positions`, expected positions in"),
        (np.array([["a", "b"]] * 3), r"`positions`, expected real numbers"),
    ],
)
def test_bad_ids_raise_eagerly(ids, match):
    layer = RotaryEmbedding(axes_dim=(2, 2))
    with pytest.raises(ValueError, match=match):
        layer(_x((1, 3, 4)), positions=ids)


def test_tiny_base_refused():
    with pytest.raises(ValueError, match=r"`max_wavelength`, expected a base whose"):
        RotaryEmbedding(axes_dim=(4,), max_wavelength=1e-10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"grid_shape": []}, "`grid_shape`, expected a non-empty list"),
        ({"grid_shape": (2, 0)}, "`grid_shape`, expected a non-empty list"),
        ({"grid_shape": (2**16, 2**16)}, "`grid_shape`, expected at most"),
        ({"grid_shape": (2,), "text_length": -1}, "`text_length`, expected a non"),
        ({"grid_shape": (2, 2), "n_axes": 1}, r"`n_axes`, expected an integer in \[2"),
    ],
)
def test_bad_grid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        grid_position_ids(**kwargs)


def test_mixed_precision_rotates_in_float32(rng):
    ids = _ids(rng, 4, 2**20)
    layer = RotaryEmbedding(axes_dim=(2, 4, 2), dtype="mixed_bfloat16")
    q = _x((1, 4, 8))
    out = layer(q, positions=ids)
    assert keras_backend.standardize_dtype(out.dtype) == "bfloat16"
    want = to_numpy(RotaryEmbedding(axes_dim=(2, 4, 2))(q, positions=ids))
    assert max_diff(to_numpy(out).astype("float32"), want) < 0.05
