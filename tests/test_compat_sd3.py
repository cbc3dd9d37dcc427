"""keras-hub's SD3 drop-in (`compat/_sd3.py`) and `use_exact` on an MMDiT.

The reference is a float64 transcription of keras-hub's
`mmdit.TimestepEmbedding._create_timestep_embedding`, taken at the float32
timesteps exactly as given. The sinusoid is read through the layers' own
call, their MLP swapped for `Identity`.
"""

import numpy as np
import pytest
from _helpers import LEGACY, TOL, assert_layer_round_trips, keras, max_diff, to_numpy

keras_hub = pytest.importorskip("keras_hub")

from keras_posenc import compat  # noqa: E402

pytestmark = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")

# SD3's flow-matching timesteps (sigma * 1000: fractional), and integers.
TIMESTEPS = np.array([[998.3897], [937.5001], [500.25], [1.0], [0.0]], "float32")
BF16_HALF_ULP = 2.0**-9  # bfloat16's rounding of a value in [-1, 1]


def sinusoid64(t, frequency_dim, max_period=10000):
    """keras-hub's SD3 sinusoid in float64: `t` is `[batch, 1]`."""
    half = frequency_dim // 2
    freqs = np.exp(-np.log(max_period) * np.arange(half, dtype=np.float64) / half)
    x = np.asarray(t, np.float64) * freqs[None]
    embedding = np.concatenate([np.cos(x), np.sin(x)], axis=-1)
    if frequency_dim % 2:
        embedding = np.pad(embedding, [[0, 0], [0, 1]])
    return embedding


def _tf32_matmuls():
    """Whether float32 matrix products may run in TF32 here (JAX on a GPU)."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() != "cpu"


def _hub_layer(*args, **kwargs):
    from keras_hub.src.models.stable_diffusion_3.mmdit import TimestepEmbedding

    return TimestepEmbedding(*args, **kwargs)


def _sinusoid(layer, t, dtype="float32"):
    """What `layer` gives its MLP: its call, the MLP made the identity."""
    layer.mlp = keras.layers.Identity(dtype=layer.dtype_policy)
    out = layer(t)
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    return to_numpy(keras.ops.cast(out, "float32"))


@pytest.mark.parametrize("frequency_dim", [256, 7])
def test_sinusoid_is_exact_where_keras_hub_is_off(frequency_dim):
    want = sinusoid64(TIMESTEPS, frequency_dim)
    ours = _sinusoid(compat.SD3TimestepEmbedding(8, frequency_dim), TIMESTEPS)
    assert ours.shape == (5, frequency_dim)
    assert max_diff(ours, want) < TOL
    # keras-hub forms its frequencies and angles in float32.
    theirs = _sinusoid(_hub_layer(8, frequency_dim), TIMESTEPS)
    assert max_diff(theirs, want) > 5 * TOL


def test_mixed_bfloat16_takes_the_float32_timestep():
    # keras-hub's call casts 998.3897 to bfloat16 (1000) before the
    # sinusoid; the drop-in casts only the float32 embedding.
    ours = compat.SD3TimestepEmbedding(8, 256, dtype="mixed_bfloat16")
    want = sinusoid64(TIMESTEPS, 256)
    assert max_diff(_sinusoid(ours, TIMESTEPS, "bfloat16"), want) <= BF16_HALF_ULP + TOL
    theirs = _hub_layer(8, 256, dtype="mixed_bfloat16")
    theirs = _sinusoid(theirs, TIMESTEPS, "bfloat16")
    rounded = to_numpy(keras.ops.cast(keras.ops.cast(TIMESTEPS, "bfloat16"), "float32"))
    assert rounded[0, 0] == 1000.0
    assert max_diff(theirs, sinusoid64(rounded, 256)) < BF16_HALF_ULP + 1e-4
    assert max_diff(theirs, want) > 0.5


def test_shapes_weights_and_mlp_are_keras_hub_s():
    # Same call shapes, weight paths and MLP: with keras-hub's weights it
    # gives keras-hub's values wherever keras-hub's sinusoid is exact (t = 0).
    ours = compat.SD3TimestepEmbedding(16, 7, name="t")
    theirs = _hub_layer(16, frequency_dim=7, name="t")
    for shape, out in [((3, 1), (3, 16)), ((1,), (1, 16)), ((), (1, 16))]:
        assert tuple(ours(np.zeros(shape, "float32")).shape) == out
        assert tuple(theirs(np.zeros(shape, "float32")).shape) == out
    assert tuple(ours(np.zeros((2, 3, 1), "float32")).shape) == (2, 3, 16)
    assert [w.path for w in ours.weights] == [w.path for w in theirs.weights]
    ours.set_weights(theirs.get_weights())
    zero = np.zeros((2, 1), "float32")
    assert max_diff(to_numpy(ours(zero)), to_numpy(theirs(zero))) < 1e-6
    symbolic = ours(keras.Input((1,)))
    assert tuple(symbolic.shape) == (None, 16)


def test_refusals():
    with pytest.raises(ValueError, match="`embedding_dim`, expected a positive"):
        compat.SD3TimestepEmbedding(0)
    with pytest.raises(ValueError, match="`frequency_dim`, expected a positive"):
        compat.SD3TimestepEmbedding(8, frequency_dim=0)
    with pytest.raises(ValueError, match="`max_period`, expected a finite number"):
        compat.SD3TimestepEmbedding(8, max_period=-1.0)
    layer = compat.SD3TimestepEmbedding(8, 6)
    # keras-hub multiplies 3 timesteps by its 3 frequencies elementwise.
    for shape in [(3,), (2, 3)]:
        with pytest.raises(ValueError, match=r"`inputs`, expected timesteps of shape"):
            layer(np.ones(shape, "float32"))
    with pytest.raises(ValueError, match="`inputs`, expected finite numbers"):
        layer(np.array([[np.inf]], "float32"))


def test_keras_file_round_trip(tmp_path):
    t = keras.Input((1,))
    layer = compat.SD3TimestepEmbedding(8, 7, max_period=100, name="te")
    model = keras.Model(t, layer(t))
    again = assert_layer_round_trips(model, layer, TIMESTEPS, tmp_path)
    for a, b in zip(again.weights, layer.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    # keras-hub's config makes the same layer.
    hub_config = _hub_layer(8, 7, max_period=100, name="te").get_config()
    again = compat.SD3TimestepEmbedding.from_config(hub_config)
    assert again.get_config() == layer.get_config()


@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer")
def test_use_exact_on_an_mmdit(rng):
    # The smallest MMDiT (one block, 2x2 latent patches), compiled
    # (`predict_on_batch`). Only the sinusoid changes: at t = 0 (exact in
    # float32 too) the outputs are keras-hub's.
    from keras_hub.src.models.stable_diffusion_3.mmdit import MMDiT

    mmdit = MMDiT(
        patch_size=2,
        hidden_dim=16,
        num_layers=1,
        num_heads=2,
        position_size=4,
        latent_shape=(4, 4, 4),
        context_shape=(3, 8),
        pooled_projection_shape=(8,),
    )
    x = {
        "latent": rng.normal(size=(2, 4, 4, 4)).astype("float32"),
        "context": rng.normal(size=(2, 3, 8)).astype("float32"),
        "pooled_projection": rng.normal(size=(2, 8)).astype("float32"),
        "timestep": np.array([[0.0], [998.3897]], "float32"),
    }
    layer, mlp = mmdit.timestep_embedding, mmdit.timestep_embedding.mlp
    weights = [to_numpy(w) for w in layer.weights]
    before = mmdit.predict_on_batch(x)
    assert compat.use_exact(mmdit) == 1
    assert mmdit.timestep_embedding is layer and layer.mlp is mlp
    assert isinstance(layer, compat.SD3TimestepEmbedding)
    for a, b in zip(layer.weights, weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), b)
    after = mmdit.predict_on_batch(x)
    assert after.shape == before.shape and after.dtype == before.dtype
    assert max_diff(after[0], before[0]) < 1e-6
    changed = max_diff(after[1], before[1])
    assert changed < 1e-3 * np.abs(before).max()
    # JAX on a GPU multiplies float32 matrices in TF32 by default, which can
    # round the sinusoid's change away (0.0 on an H200): held on a CPU.
    assert changed > 0 or _tf32_matmuls()
    assert compat.use_exact(mmdit) == 0
