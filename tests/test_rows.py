"""Row sources (`keras_posenc._exact.rows`): computed rows and the lookup table.

Every way of asking for a position's row gives the same bits; the eager
decoding cache (a block of rows kept by the shared encoder) included.
"""

import numpy as np
import pytest
from _helpers import BACKEND, TOL, reference, to_numpy

import keras_posenc
from keras_posenc._exact import engine as _engine

DEPTH = 16


def _encoding(**options):
    return keras_posenc.SinusoidalPositionEncoding(merge=None, depth=DEPTH, **options)


def _step(layer, t):
    return to_numpy(layer(np.zeros((1, 1, DEPTH), "float32"), start_index=t))[0]


@pytest.mark.parametrize("first", [0, 4000, 2**31 - 200])
def test_decoding_across_blocks_gives_the_bits_of_the_full_call(first):
    # 200 consecutive steps cross several 64-row blocks of the decoding
    # cache (and its last block below 2**31): each step's row is the full
    # call's row, bit for bit.
    layer = _encoding()
    full = to_numpy(layer(np.zeros((1, 200, DEPTH), "float32"), start_index=first))[0]
    steps = np.concatenate([_step(layer, first + t) for t in range(200)])
    np.testing.assert_array_equal(steps, full)


def test_decoding_steps_in_any_order_give_the_same_rows():
    # Jumps backwards and between distant positions refresh the cache: the
    # rows are still those of the full call (and within 2e-7 of float64).
    layer = _encoding()
    full = to_numpy(layer(np.zeros((1, 300, DEPTH), "float32")))[0]
    order = [299, 0, 150, 63, 64, 65, 1, 298, 127, 128]
    for t in order:
        np.testing.assert_array_equal(_step(layer, t)[0], full[t])
    np.testing.assert_allclose(full, reference(np.arange(300), DEPTH), atol=TOL)


def test_layers_of_different_depths_do_not_share_cached_rows():
    # The cache belongs to one encoder configuration: a layer of another
    # depth at the same step gets its own rows.
    narrow, wide = (
        _encoding(),
        keras_posenc.SinusoidalPositionEncoding(merge=None, depth=2 * DEPTH),
    )
    _step(narrow, 70)
    row = to_numpy(wide(np.zeros((1, 1, 2 * DEPTH), "float32"), start_index=70))
    np.testing.assert_allclose(row[0, 0], reference(70, 2 * DEPTH), atol=TOL)


@pytest.mark.parametrize(
    "first, length", [(0, 2048), (100, 1000), (2**31 - 1000, 1000)]
)
def test_a_prompt_kept_for_the_next_layers_gives_the_bits_of_explicit_positions(
    first, length
):
    # An eager span longer than a decoding step is kept by the shared encoder
    # for the model's next layers: their rows, and the first layer's, are the
    # bits of the same positions asked for one by one (and within 2e-7).
    x = np.zeros((1, length, DEPTH), "float32")
    span = to_numpy(_encoding()(x, start_index=first))[0]
    again = to_numpy(_encoding()(x, start_index=first))[0]
    positions = np.arange(first, first + length)
    explicit = to_numpy(_encoding()(x, positions=positions[None]))[0]
    np.testing.assert_array_equal(span, explicit)
    np.testing.assert_array_equal(again, span)
    np.testing.assert_allclose(span, reference(positions, DEPTH), atol=TOL)


def test_the_encoder_keeps_one_block_and_reuses_it():
    # A second call inside the kept span reads the same rows (no engine run);
    # a span outside it replaces the block.
    encoder = _engine.sinusoidal_encoder(DEPTH, 10000.0, "interleaved", "paper")
    base, rows, steps = encoder.block(100, 1100)
    assert (base, tuple(rows.shape), steps) == (64, (1036, DEPTH), [])
    assert encoder.block(64, 1100)[1] is rows
    assert encoder.block(5000, 5001)[1] is not rows


def test_rotary_prompt_rows_equal_explicit_positions_bit_for_bit():
    # The rotary layer reads the same kept rows: a prompt rotated at
    # start_index equals the rotation at the same explicit positions.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 700, 4, 32)).astype("float32")
    layer = keras_posenc.RotaryEmbedding()
    span = to_numpy(layer(x, start_index=4000))
    again = to_numpy(keras_posenc.RotaryEmbedding()(x, start_index=4000))
    explicit = to_numpy(layer(x, positions=np.arange(4000, 4700)))
    np.testing.assert_array_equal(span, explicit)
    np.testing.assert_array_equal(again, span)


@pytest.mark.parametrize("first", [0, 4000, 2**31 - 1400])
def test_rotary_steps_inside_and_after_a_kept_prompt_give_the_full_call_bits(first):
    # keras-hub's generate() runs the padded prompt, then steps at positions
    # inside it and past it: the step tables (blocks of their own, whatever
    # prompt the encoder keeps) give the full call's bits.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 1400, 2, 32)).astype("float32")
    layer = keras_posenc.RotaryEmbedding()
    full = to_numpy(layer(x, start_index=first))
    layer(x[:, :700], start_index=first)  # the prompt, kept
    for t in [5, 63, 64, 200, 699, 700, 701, 1100, 1399, 130, 640, 1300]:
        step = to_numpy(layer(x[:, t : t + 1], start_index=first + t))
        np.testing.assert_array_equal(step, full[:, t : t + 1])


@pytest.mark.parametrize(
    "start, match",
    [
        (np.int64(2**32 + 3), "start_index"),  # would wrap to 3 as int32
        (np.int64(-(2**31) - 1), "start_index"),
        (2**31 - 100, "start_index \\+ length <= 2\\*\\*31"),
    ],
)
def test_a_prompt_at_positions_out_of_range_is_refused_not_kept(start, match):
    # The kept-prompt path reads positions only after they were checked: an
    # int64 start that would wrap, or a span past 2**31, is a ValueError
    # naming start_index, on every backend, never rows of wrapped positions.
    x = np.zeros((1, 200, DEPTH), "float32")
    with pytest.raises(ValueError, match=match):
        _encoding()(x, start_index=start)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit")
def test_a_traced_prompt_start_out_of_range_gives_nan_rows_under_jit():
    # Under jax.jit nothing is kept: a traced start that cannot be encoded
    # gives NaN rows (the failure policy), never finite rows.
    import jax

    layer = _encoding()
    x = np.zeros((1, 200, DEPTH), "float32")
    rows = jax.jit(lambda s: layer(x, start_index=s))(np.int32(2**31 - 100))
    assert np.isnan(to_numpy(rows)).all()


@pytest.mark.parametrize("shape", [(8, 1024, 1024), (8, 256, 2048), (3, 100, 64)])
def test_per_example_starts_and_positions_give_the_bits_of_a_span(shape):
    # One start per example and explicit positions run the engine on every
    # position, a shared span on one coarse row per 64: the same bits. At
    # (8, 1024, 1024), TF's graph optimizer used to regroup a chain of
    # products in the first two ways only (14874 values 1 ulp apart).
    batch, length, depth = shape
    layer = keras_posenc.SinusoidalPositionEncoding(merge=None)
    x = np.zeros(shape, "float32")
    starts = np.arange(batch, dtype="int32") * 1000 + 7
    batched = to_numpy(layer(x, start_index=starts))
    explicit = to_numpy(layer(x, positions=starts[:, None] + np.arange(length)))
    for start, rows in zip(starts, batched, strict=True):
        span = keras_posenc.sinusoidal_table(length, depth, start_index=int(start))
        assert rows.tobytes() == to_numpy(span).tobytes()
    assert explicit.tobytes() == batched.tobytes()
