"""keras-hub's FLUX drop-ins (`compat/_flux.py`) and `use_exact` on a FluxBackbone.

The references are float64 transcriptions of keras-hub's `flux_maths`
formulas (FLUX's `rope` and `timestep_embedding`), taken at the ids and
timesteps exactly as given.
"""

import numpy as np
import pytest
from _helpers import LEGACY, TOL, keras, max_diff, to_numpy

keras_hub = pytest.importorskip("keras_hub")

from keras_posenc import compat  # noqa: E402

pytestmark = pytest.mark.skipif(LEGACY, reason="keras-hub is Keras 3 only")


def rope64(pos, dim, theta):
    """keras-hub's `RotaryPositionalEmbedding.call` in float64."""
    omega = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    out = np.einsum("...n,d->...nd", np.asarray(pos, np.float64), omega)
    return np.stack([np.cos(out), np.sin(out)], axis=-1)


def timestep64(t, dim, max_period=10000, time_factor=1000.0):
    """keras-hub's `TimestepEmbedding.call` in float64, `t` as given."""
    t = time_factor * np.asarray(t, np.float64)
    half = dim // 2
    freqs = np.exp(-np.log(max_period) * np.arange(half, dtype=np.float64) / half)
    args = t[:, None] * freqs[None]
    embedding = np.concatenate([np.cos(args), np.sin(args)], axis=-1)
    if dim % 2:
        embedding = np.concatenate([embedding, np.zeros_like(embedding[:, :1])], -1)
    return embedding


def test_rope_drop_in_is_exact_where_keras_hub_is_off(rng):
    # Image ids up to 4096, fractional ones, long-video ids up to 2**20.
    pos = np.stack(
        [
            rng.integers(0, 4096, 16),
            rng.integers(0, 4096, 16) * rng.uniform(0.1, 1.0, 16),
            rng.integers(0, 2**20, 16),
        ]
    ).astype("float32")  # [3, 16]: keras-hub's (batch, length)
    ours = to_numpy(compat.FluxRotaryPositionalEmbedding()(pos, dim=56, theta=10000))
    want = rope64(pos, 56, 10000)
    assert ours.shape == (3, 16, 28, 2) and ours.dtype == np.float32
    assert max_diff(ours, want) < TOL
    from keras_hub.src.models.flux.flux_maths import RotaryPositionalEmbedding

    theirs = to_numpy(RotaryPositionalEmbedding()(pos, dim=56, theta=10000))
    assert max_diff(theirs[2], want[2]) > 1e-2  # float32 angles at 2**20


def test_timestep_drop_in_is_exact_at_t_as_given():
    # keras-hub multiplies t by 1000 in float32 first: we take t as given.
    t = np.array([0.0, 0.25, 0.9983897, 1.0], "float32")
    for dim in (256, 7):
        ours = to_numpy(compat.FluxTimestepEmbedding()(t, dim=dim))
        assert ours.shape == (4, dim)
        assert max_diff(ours, timestep64(t, dim)) < TOL
    ours = compat.FluxTimestepEmbedding()(t, dim=8, max_period=100, time_factor=3.0)
    assert max_diff(to_numpy(ours), timestep64(t, 8, 100, 3.0)) < TOL


def test_timestep_drop_in_never_rounds_timesteps_to_bfloat16():
    # bfloat16 holds 0.9983897 * 1000 nowhere near: the embedding of the
    # float32 timestep, cast once.
    embed = compat.FluxTimestepEmbedding(dtype="mixed_bfloat16")
    t = np.array([0.9983897], "float32")
    out = embed(t, dim=16)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    want = timestep64(t, 16)
    got = to_numpy(keras.ops.cast(out, "float32"))
    assert max_diff(got, want) < 4e-3  # bfloat16's rounding of the result only


@pytest.mark.parametrize(
    "call, match",
    [
        ({"dim": 5, "theta": 10000}, "`dim`, expected a positive even integer"),
        ({"dim": 4, "theta": -1.0}, "`theta`, expected a finite number > 0"),
        ({"dim": 4, "theta": 10000, "pos": [[np.nan]]}, "`pos`, expected finite"),
    ],
)
def test_rope_drop_in_refusals(call, match):
    pos = call.pop("pos", [[1.0, 2.0]])
    with pytest.raises(ValueError, match=match):
        compat.FluxRotaryPositionalEmbedding()(np.array(pos, "float32"), **call)


def test_timestep_drop_in_refusals():
    t = np.ones(2, "float32")
    with pytest.raises(ValueError, match="`scale`, expected `scale` times each"):
        compat.FluxTimestepEmbedding()(t, dim=4, time_factor=1e9)
    with pytest.raises(ValueError, match="`time_factor`, expected a finite number"):
        compat.FluxTimestepEmbedding()(t, dim=4, time_factor=0.0)
    with pytest.raises(ValueError, match="`max_period`, expected a finite number"):
        compat.FluxTimestepEmbedding()(t, dim=4, max_period=float("inf"))
    with pytest.raises(ValueError, match="`dim`, expected a positive integer"):
        compat.FluxTimestepEmbedding()(t, dim=0)
    with pytest.raises(ValueError, match="`t`, expected finite numbers"):
        compat.FluxTimestepEmbedding()(np.array([np.inf], "float32"), dim=4)


def _flux_backbone():
    return keras_hub.models.FluxBackbone(
        input_channels=4,
        hidden_size=16,
        mlp_ratio=2.0,
        num_heads=2,
        depth=0,  # one single-stream block: positions and timesteps reach it
        depth_single_blocks=1,
        axes_dim=[2, 2, 4],
        theta=10000,
        use_bias=True,
        image_shape=(6, 4),
        text_shape=(2, 8),
        image_ids_shape=(6, 3),
        text_ids_shape=(2, 3),
        y_shape=(8,),
    )


@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer")
def test_use_exact_on_a_flux_backbone(rng):
    # Both FLUX layers replaced; the outputs move only by keras-hub's float32
    # error in the ids' and timesteps' angles, amplified by float32 layers.
    # `predict_on_batch`: compiled (JAX's eager first call takes 20 s).
    backbone = _flux_backbone()
    ids = np.zeros((2, 6, 3), "float32")
    ids[..., 1:] = rng.integers(0, 64, (2, 6, 2))
    x = {
        "image": rng.normal(size=(2, 6, 4)).astype("float32"),
        "image_ids": ids,
        "text": rng.normal(size=(2, 2, 8)).astype("float32"),
        "text_ids": np.zeros((2, 2, 3), "float32"),
        "y": rng.normal(size=(2, 8)).astype("float32"),
        "timesteps": np.array([0.25, 0.9983897], "float32"),
        "guidance": np.ones(2, "float32"),
    }
    before = backbone.predict_on_batch(x)
    assert compat.use_exact(backbone) == 2
    assert type(backbone.positional_embedder.rope).__name__ == (
        "FluxRotaryPositionalEmbedding"
    )
    assert isinstance(backbone.timestep_embedding, compat.FluxTimestepEmbedding)
    after = backbone.predict_on_batch(x)
    assert max_diff(after, before) < 1e-3 * np.abs(before).max()
    assert compat.use_exact(backbone) == 0
