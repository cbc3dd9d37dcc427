"""`grid_sincos_table` and `GridPositionEncoding` (`keras_posenc.grid`).

Values are checked against float64 transcriptions of MAE's and diffusers'
formulas written here (never keras_posenc code), at the positions each
convention defines (the exact rational numbers, or diffusers' float32
ones), and against diffusers' own outputs (`golden/grid/golden.npz`, made
by `golden/grid/make_golden.py`). Runs on every backend and under tf-keras.
"""

import json
import os
import re
from fractions import Fraction

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    TOL,
    exact,
    invalid_value,
    keras,
    keras3_only,
    max_diff,
    only_tensorflow,
    to_numpy,
    traced,
)
from keras import ops
from keras.backend import standardize_dtype

from keras_posenc import GridPositionEncoding, export_saved_model, grid_sincos_table

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = np.load(os.path.join(HERE, "golden", "grid", "golden.npz"))


# -- float64 transcriptions ------------------------------------------------------


def mae_1d(width, pos):
    """MAE's `get_1d_sincos_pos_embed_from_grid` in float64."""
    omega = np.arange(width // 2, dtype=np.float64) / (width / 2.0)
    omega = 1.0 / 10000**omega
    out = np.outer(np.asarray(pos, np.float64).reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def axis_positions(size, table_size, first, base_size, scale, positions):
    """Positions of indices ``first + [0, size)`` of an axis of `table_size` rows."""
    index = np.arange(first, first + size)
    if positions == "float32":  # diffusers: float32 arange / (G / base) / scale
        value = index.astype(np.float32)
        if base_size is not None:
            value = value / np.float32(table_size / base_size)
        return (value / np.float32(scale)).astype(np.float64)
    ratio = Fraction(base_size or 1, table_size if base_size else 1) / Fraction(scale)
    return np.array([float(int(i) * ratio) for i in index])


def grid_reference(
    grid,
    dim,
    *,
    extra_tokens=0,
    base_size=None,
    scale=1.0,
    positions="exact",
    max_grid=None,
    crop="center",
):
    """MAE's / CogVideoX's table of `grid` in float64, flattened row-major."""
    rank = len(grid)
    scales = scale if isinstance(scale, tuple) else (scale,) * rank
    pos = []
    for axis, size in enumerate(grid):
        table_size = size if max_grid is None else max_grid[axis]
        first = (table_size - size) // 2 if crop == "center" else 0
        pos.append(
            axis_positions(size, table_size, first, base_size, scales[axis], positions)
        )
    if rank == 1:
        table = mae_1d(dim, pos[0])
    elif rank == 2:
        # np.meshgrid(grid_w, grid_h): emb_h gets the width coordinate.
        h, w = np.meshgrid(pos[0], pos[1], indexing="ij")
        table = np.concatenate([mae_1d(dim // 2, w), mae_1d(dim // 2, h)], axis=1)
    else:
        t, h, w = np.meshgrid(*pos, indexing="ij")
        spatial = 3 * dim // 8
        table = np.concatenate(
            [mae_1d(dim // 4, t), mae_1d(spatial, w), mae_1d(spatial, h)], axis=1
        )
    return np.concatenate([np.zeros((extra_tokens, dim)), table])


# -- the conventions, against diffusers ------------------------------------------

# Each golden case as `grid_sincos_table` arguments (make_golden.py's CASES).
CASES = {
    "mae": ((7, 7), 32, {"extra_tokens": 1}),
    "diffusers": ((7, 12), 32, {"base_size": 16}),
    "pixart": ((24, 24), 16, {"base_size": 32, "interpolation_scale": 2.0}),
    "sd3": ((20, 30), 16, {"base_size": 64, "max_grid_shape": (192, 192)}),
    "cogvideox": ((3, 4, 6), 32, {"interpolation_scale": (1.0, 1.875, 1.875)}),
    "line": ((10,), 12, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_positions_reproduce_diffusers(case):
    # diffusers rounds positions to float32, then computes in float64.
    grid, dim, kwargs = CASES[case]
    golden = GOLDEN[case].reshape(-1, dim)
    table = grid_sincos_table(grid, dim, positions="float32", **kwargs)
    assert max_diff(to_numpy(table), golden) <= TOL
    # The transcription is diffusers' formula (its float64 rounding aside;
    # SD3's buffer is float32).
    options = dict(kwargs)
    reference = grid_reference(
        grid,
        dim,
        scale=options.pop("interpolation_scale", 1.0),
        positions="float32",
        max_grid=options.pop("max_grid_shape", None),
        **options,
    )
    assert max_diff(reference, golden) <= (1e-7 if case == "sd3" else 1e-12)


def test_exact_and_float32_positions_differ_where_rounding_matters():
    # SD3's 192 x 192 table (base_size 64): index 118 is 39.333... exactly
    # and 39.333332 in float32; the tables differ by ~1.3e-6 (the
    # docstring's figure), each within the bound of its own positions.
    # Integer positions (MAE) give the same table either way.
    kwargs = {"base_size": 64}
    exact_table = to_numpy(grid_sincos_table((192, 192), 16, **kwargs))
    rounded = grid_sincos_table((192, 192), 16, positions="float32", **kwargs)
    assert 1.2e-6 < max_diff(exact_table, to_numpy(rounded)) < 1.4e-6
    assert max_diff(exact_table, grid_reference((192, 192), 16, **kwargs)) <= TOL
    for positions in ("exact", "float32"):
        mae = grid_sincos_table((5, 5), 16, positions=positions)
        assert max_diff(to_numpy(mae), grid_reference((5, 5), 16)) <= TOL


# Sizes 1..256, sampled (each size is a new ratio, so a new compiled engine):
# one in every run, the rest marked slow.
SIZES = [255] + [
    pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 7, 16, 64, 256)
]


@pytest.mark.parametrize("positions", ["exact", "float32"])
@pytest.mark.parametrize("size", SIZES)
def test_within_the_bound_at_every_size(size, positions):
    # PixArt/SD3-style base size with CogVideoX's scale, and a scale alone.
    kwargs = {"base_size": 64, "interpolation_scale": (1.875, 0.5)}
    table = grid_sincos_table((size, 3), 16, positions=positions, **kwargs)
    expected = grid_reference(
        (size, 3), 16, base_size=64, scale=(1.875, 0.5), positions=positions
    )
    assert max_diff(to_numpy(table), expected) <= TOL


def test_sd3_crop_of_the_max_table():
    # SD3: the 192 x 192 table, centre crop top = (192 - h) // 2; also the
    # top-left crop, and a crop equal to slicing the full table.
    kwargs = {"base_size": 64, "max_grid_shape": (192, 192)}
    full = to_numpy(grid_sincos_table((192, 192), 16, **kwargs)).reshape(192, 192, 16)
    crop = to_numpy(grid_sincos_table((20, 31), 16, **kwargs)).reshape(20, 31, 16)
    np.testing.assert_array_equal(crop, full[86:106, 80:111])
    corner = grid_sincos_table((20, 31), 16, crop="top_left", **kwargs)
    np.testing.assert_array_equal(to_numpy(corner).reshape(20, 31, 16), full[:20, :31])
    expected = grid_reference((20, 31), 16, base_size=64, max_grid=(192, 192))
    assert max_diff(crop.reshape(-1, 16), expected) <= TOL


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_table_dtype_is_rounded_once(dtype):
    table = grid_sincos_table((4, 4), 16, base_size=16, dtype=dtype)
    assert standardize_dtype(table.dtype) == dtype
    float32 = grid_sincos_table((4, 4), 16, base_size=16)
    np.testing.assert_array_equal(to_numpy(ops.cast(float32, dtype)), to_numpy(table))


# -- the layer ----------------------------------------------------------------


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


LAYOUTS = [
    # (input shape, layer arguments, grid, extra tokens)
    ((2, 5, 7, 16), {}, (5, 7), 0),
    ((2, 3, 4, 5, 32), {"interpolation_scale": (1.0, 1.875, 1.875)}, (3, 4, 5), 0),
    ((2, 1 + 12, 16), {"grid_shape": (3, 4), "extra_tokens": 1}, (3, 4), 1),
    ((2, 9, 8), {}, (9,), 0),
]


@pytest.mark.parametrize("shape, kwargs, grid, extra", LAYOUTS)
@pytest.mark.parametrize("mode", ["compute", "lookup"])
def test_layer_adds_the_table(shape, kwargs, grid, extra, mode):
    if mode == "lookup":
        kwargs = {**kwargs, "mode": "lookup", "max_grid_shape": grid}
    layer = GridPositionEncoding(**kwargs)
    x = _x(shape)
    y = to_numpy(layer(x))
    options = {k: v for k, v in kwargs.items() if k not in ("grid_shape", "mode")}
    table = to_numpy(grid_sincos_table(grid, shape[-1], **options))
    np.testing.assert_array_equal(
        y.reshape(2, -1, shape[-1]), x.reshape(2, -1, shape[-1]) + table
    )
    assert (
        max_diff(
            table,
            grid_reference(
                grid,
                shape[-1],
                extra_tokens=extra,
                base_size=kwargs.get("base_size"),
                scale=kwargs.get("interpolation_scale", 1.0),
            ),
        )
        <= TOL
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"base_size": 16, "interpolation_scale": 1.5},
        {"base_size": 16, "interpolation_scale": 1.5, "positions": "float32"},
    ],
    ids=["mae", "exact", "float32"],
)
def test_a_layer_keeps_its_axis_rows_between_eager_calls(kwargs):
    # A model's next call at the same grid reads the rows its engines kept
    # (no engine op: on an eager GPU each op is a kernel launch), with the
    # bits computed rows have; they go with the layer.
    import gc

    import keras_posenc

    keras_posenc.clear_cache()
    layer = GridPositionEncoding(**kwargs)
    x = _x((2, 6, 10, 16))
    table = to_numpy(grid_sincos_table((6, 10), 16, **kwargs))
    assert keras_posenc.cache_info().entries == 0  # rows (engines apart)
    first = to_numpy(layer(x))
    kept = keras_posenc.cache_info()
    assert kept.entries > 0
    # A span per axis, not a decoding block of 512 rows split row by row.
    assert kept.nbytes - kept.engine_nbytes < 512 * 8 * 4
    again = to_numpy(layer(x))
    read = keras_posenc.cache_info()
    assert read.hits > kept.hits and read.misses == kept.misses  # read, not made
    for y in (first, again):
        np.testing.assert_array_equal(y, x + table.reshape(6, 10, 16))
    reference = grid_reference(
        (6, 10), 16, base_size=kwargs.get("base_size"),
        scale=kwargs.get("interpolation_scale", 1.0),
        positions=kwargs.get("positions", "exact"),
    )  # fmt: skip
    assert max_diff(table, reference) <= TOL
    del layer
    gc.collect()
    assert keras_posenc.cache_info().entries == 0


def _engines_made(monkeypatch):
    """Weak references to every axis engine made from now on."""
    import weakref

    from keras_posenc._exact import grid_rows

    made = []
    make = grid_rows.axis_engine

    def recorded(*args):
        engine = make(*args)
        made.append(weakref.ref(engine))
        return engine

    monkeypatch.setattr(grid_rows, "axis_engine", recorded)
    return made


def test_engines_of_each_grid_size_are_counted_and_freed_by_clear_cache(
    monkeypatch,
):
    # base_size without max_grid_shape: an engine per grid size (the ratio
    # base_size / size). They are in the one budget (cache_info reports
    # them) and clear_cache frees them, also while the layer lives.
    import gc

    import keras_posenc

    keras_posenc.clear_cache()
    made = _engines_made(monkeypatch)
    layer = GridPositionEncoding(base_size=16)
    for height in (4, 5, 6):  # ratios 16/4 (both axes), 16/5, 16/6
        layer(_x((1, height, 4, 16)))
    info = keras_posenc.cache_info()
    assert info.engines == 3
    assert 0 < info.engine_nbytes <= info.nbytes <= info.budget
    keras_posenc.clear_cache()
    gc.collect()
    assert made and [ref() for ref in made] == [None] * len(made)
    info = keras_posenc.cache_info()
    assert (info.engines, info.engine_nbytes, info.nbytes) == (0, 0, 0)
    x = _x((1, 5, 4, 16))  # the layer builds what it needs again, same bits
    table = to_numpy(grid_sincos_table((5, 4), 16, base_size=16))
    np.testing.assert_array_equal(to_numpy(layer(x)), x + table.reshape(5, 4, 16))


def test_engines_of_grid_sizes_stay_within_the_budget(monkeypatch):
    # A budget for about one engine: the layer does not keep the others
    # alive outside it (600 heights kept +414 MiB that cache_info did not
    # report).
    import gc

    import keras_posenc
    from keras_posenc import cache

    keras_posenc.clear_cache()
    made = _engines_made(monkeypatch)
    layer = GridPositionEncoding(base_size=16)
    layer(_x((1, 4, 4, 16)))
    one = keras_posenc.cache_info().engine_nbytes
    keras_posenc.set_cache_budget(one + one // 2)
    try:
        for height in (5, 6, 7, 8):
            layer(_x((1, height, 4, 16)))
        gc.collect()
        alive = [ref() for ref in made if ref() is not None]
        assert keras_posenc.cache_info().engines == 1
        assert sum(engine.nbytes for engine in alive) <= one + one // 2
    finally:
        keras_posenc.set_cache_budget(cache.DEFAULT_BUDGET)
        keras_posenc.clear_cache()


@pytest.mark.skipif(BACKEND != "torch", reason="torch results can be edited")
@pytest.mark.parametrize("kwargs", [{}, {"base_size": 16, "positions": "float32"}])
def test_editing_a_result_never_changes_the_next_one(kwargs):
    # The rows the layer keeps never leave it: its output is a new tensor
    # (also for 1-D token grids, whose table is one axis's rows).
    for shape in ((1, 6, 10, 16), (1, 9, 8)):
        layer = GridPositionEncoding(**kwargs)
        x = np.zeros(shape, "float32")
        first = layer(x)
        want = first.detach().clone()
        first.add_(1.0)
        if first.device.type == "cpu":  # a GPU's tensor has no numpy view
            first.numpy()[...] = 7.0
        assert np.array_equal(to_numpy(layer(x)), to_numpy(want))


def test_a_lookup_table_is_built_not_read_from_kept_rows():
    # Its axis tables are its own (a view of a kept block would hold the
    # block's bytes outside the budget once the block is evicted).
    import keras_posenc

    keras_posenc.clear_cache()
    layer = GridPositionEncoding(mode="lookup", max_grid_shape=(40, 40))
    layer(_x((1, 40, 40, 16)))
    assert keras_posenc.cache_info().entries == 0


def test_the_table_limit_is_on_all_axis_tables_together(monkeypatch):
    # (64, 64) at 16 features: two axis tables of 64 rows of 8 floats, 2048
    # bytes each; a limit of 3000 holds either, not both (a 3-D layer kept
    # three tables of the limit each).
    import gc

    from keras_posenc._checks.arguments import held_table_bytes

    gc.collect()
    held = held_table_bytes()  # tables of other tests' layers still alive
    living = f"; the lookup tables of living layers hold {held} bytes" if held else ""
    monkeypatch.setenv("KERAS_POSENC_MAX_TABLE_BYTES", str(held + 3000))
    layer = GridPositionEncoding(mode="lookup", max_grid_shape=(64, 64))
    message = (
        "Received an invalid value for `max_grid_shape`, expected a table of at "
        f"most {held + 3000} bytes (set KERAS_POSENC_MAX_TABLE_BYTES to allow "
        f"more); this one needs 4096 bytes (axis tables of widths (8, 8)){living}. "
        "Received: max_grid_shape=(64, 64)"
    )
    with pytest.raises(ValueError, match=exact(message)):
        layer(_x((1, 4, 4, 16)))
    monkeypatch.setenv("KERAS_POSENC_MAX_TABLE_BYTES", str(held + 4096))
    layer = GridPositionEncoding(mode="lookup", max_grid_shape=(64, 64))
    assert tuple(layer(_x((1, 4, 4, 16))).shape) == (1, 4, 4, 16)


def test_lookup_crops_the_same_bits_as_compute():
    # SD3's layer: the max table built once, centre-cropped per call; each
    # call's rows are the bits the compute mode gives.
    kwargs = {"base_size": 16, "max_grid_shape": (24, 24), "interpolation_scale": 1.875}
    lookup = GridPositionEncoding(mode="lookup", **kwargs)
    compute = GridPositionEncoding(**kwargs)
    for grid in ((24, 24), (5, 9), (1, 24)):
        x = np.zeros((1, *grid, 16), "float32")
        np.testing.assert_array_equal(to_numpy(lookup(x)), to_numpy(compute(x)))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_compiled_calls_at_several_grid_sizes(jit_compile):
    # tf.function (with and without XLA) or jax.jit: the eager values, at
    # two grid sizes, for computed exact and float32 positions and a lookup.
    if BACKEND == "torch" or (jit_compile and BACKEND == "jax"):
        pytest.skip("tf.function, jit_compile and jax.jit")
    for kwargs in (
        {"base_size": 16},
        {"positions": "float32", "base_size": 16},
        {"mode": "lookup", "max_grid_shape": (8, 8), "base_size": 16},
    ):
        layer = GridPositionEncoding(**kwargs)
        fn = traced(layer, jit_compile=jit_compile)
        for grid in ((4, 6), (8, 8)):
            x = np.zeros((2, *grid, 16), "float32")
            assert max_diff(to_numpy(fn(x)), to_numpy(layer(x))) <= TOL


@pytest.mark.slow  # Dynamo's first trace in a process: ~30 s on 2 busy cores
@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_torch_compile_is_one_graph_with_eager_bits():
    # A built layer with MAE positions or a lookup table traces as one
    # graph (fullgraph) at two grid sizes; positions scaled by the call's
    # own size build an encoder on the host per new size (a graph break).
    import torch

    lookup = {"mode": "lookup", "max_grid_shape": (8, 8), "base_size": 16}
    cropped = {"max_grid_shape": (8, 8), "base_size": 16}
    for kwargs in ({}, lookup, cropped):
        layer = GridPositionEncoding(**kwargs)
        layer(torch.zeros(2, 4, 6, 16))  # built, as `fit` and `predict` build
        # Dynamo's tracing is what is tested: the "eager" backend skips
        # Inductor's code generation (tens of seconds on a CPU).
        compiled = torch.compile(layer, fullgraph=True, backend="eager")
        for grid in ((4, 6), (8, 8)):
            x = torch.zeros(2, *grid, 16)
            assert torch.equal(compiled(x), layer(x))


@only_tensorflow
def test_tf_graph_with_unknown_grid_sizes():
    # [None, None, None, C]: MAE positions and a cropped lookup table work
    # whatever the size; positions scaled by the call's own size need it
    # known when traced (a ValueError naming `inputs`).
    import tensorflow as tf

    spec = tf.TensorSpec((None, None, None, 16), tf.float32)
    for kwargs in (
        {},
        {"mode": "lookup", "max_grid_shape": (8, 8), "base_size": 4},
        {"max_grid_shape": (8, 8), "base_size": 4},
    ):
        layer = GridPositionEncoding(**kwargs)
        fn = tf.function(layer, input_signature=[spec], autograph=False)
        for grid in ((3, 5), (8, 8)):
            x = np.zeros((1, *grid, 16), "float32")
            np.testing.assert_array_equal(fn(x).numpy(), to_numpy(layer(x)))
    layer = GridPositionEncoding(base_size=4)
    with pytest.raises(ValueError, match="grid sizes known when traced"):
        tf.function(
            layer, input_signature=[spec], autograph=False
        ).get_concrete_function()


@only_tensorflow
def test_lookup_past_the_max_grid_fails_at_run_time():
    import tensorflow as tf

    layer = GridPositionEncoding(mode="lookup", max_grid_shape=(4, 4))
    spec = tf.TensorSpec((None, None, None, 8), tf.float32)
    fn = tf.function(layer, input_signature=[spec], autograph=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_grid_shape"):
        fn(np.zeros((1, 5, 4, 8), "float32"))


@only_tensorflow
@pytest.mark.parametrize("mode", ["lookup", "compute"])
@pytest.mark.parametrize("crop", ["center", "top_left"])
def test_past_the_max_grid_is_nan_under_xla(mode, crop):
    # XLA runs no assertion: the rows are NaN, never a raw slice error.
    import tensorflow as tf

    layer = GridPositionEncoding(mode=mode, max_grid_shape=(4, 4), crop=crop)
    spec = tf.TensorSpec((None, None, None, 8), tf.float32)
    fn = tf.function(layer, input_signature=[spec], jit_compile=True, autograph=False)
    out = fn(np.zeros((1, 5, 4, 8), "float32")).numpy()
    assert out.shape == (1, 5, 4, 8)
    assert np.isnan(out).all()
    x = np.zeros((1, 3, 4, 8), "float32")  # within: the eager bits
    np.testing.assert_array_equal(fn(x).numpy(), to_numpy(layer(x)))


def test_mixed_precision_table_in_float32_cast_once():
    layer = GridPositionEncoding(base_size=16, dtype="mixed_bfloat16")
    x = np.zeros((1, 4, 4, 16), "float32")
    y = layer(x)
    assert standardize_dtype(y.dtype) == "bfloat16"
    table = grid_sincos_table((4, 4), 16, base_size=16, dtype="bfloat16")
    np.testing.assert_array_equal(
        to_numpy(ops.cast(y, "float32")).reshape(16, 16),
        to_numpy(ops.cast(table, "float32")),
    )


INTEGER_DTYPE = (
    "Received an invalid value for `dtype`, expected a floating dtype such as "
    "'float32'. Received: dtype='int32'"
)


def test_an_integer_dtype_is_refused():
    with pytest.raises(ValueError, match=exact(INTEGER_DTYPE)):
        GridPositionEncoding(dtype="int32")


@keras3_only  # tf-keras refuses an integer global policy itself
def test_an_integer_policy_is_refused():
    keras.mixed_precision.set_global_policy("int32")
    with pytest.raises(ValueError, match=exact(INTEGER_DTYPE)):
        GridPositionEncoding()


@pytest.mark.parametrize("shape", [(1, 2, 2, 8), (1, 5, 8)])
def test_integer_inputs_are_refused(shape):
    # The table cast to the inputs' int32 would add 0s and 1s.
    pattern = (
        "Received an invalid value for `inputs`, expected a floating tensor. "
        "Received: inputs='<dtype=int32>'"
    )
    with pytest.raises(ValueError, match=re.escape(pattern)):
        GridPositionEncoding()(np.ones(shape, "int32"))


def test_call_grid_shape_for_tokens():
    layer = GridPositionEncoding(extra_tokens=2)
    x = np.zeros((1, 2 + 15, 8), "float32")
    y = to_numpy(layer(x, grid_shape=(3, 5)))
    np.testing.assert_array_equal(
        y[0], to_numpy(grid_sincos_table((3, 5), 8, extra_tokens=2))
    )


CONFIG = {
    "grid_shape": [3, 4],
    "extra_tokens": 1,
    "base_size": 16,
    "interpolation_scale": [1.0, 2.0],
    "positions": "float32",
    "mode": "lookup",
    "max_grid_shape": [6, 6],
    "crop": "top_left",
}


# Each saved configuration: its arguments, its inputs' shape (batch aside),
# and whether its model takes DETR's pixel mask as a second input.
SAVED = {
    "mae": (CONFIG, (1 + 12, 16), False),
    "detr": (
        {"sine": "detr", "temperature": [20.0, 10.0], "offset": 0.5, "dim": 16},
        (5, 7, 16),
        True,
    ),
    "rt_detr": (
        {"sine": "rt_detr", "temperature": 100.0, "merge": None},
        (5, 7, 16),
        False,
    ),
}
SAVED_CASES = pytest.mark.parametrize("saved", sorted(SAVED))


@SAVED_CASES
def test_config_round_trip(saved):
    arguments = SAVED[saved][0]
    layer = GridPositionEncoding(**arguments)
    config = layer.get_config()
    assert {k: config[k] for k in arguments} == arguments
    json.dumps(config)
    again = GridPositionEncoding.from_config(config)
    assert again.get_config() == config


def _model(saved):
    arguments, shape, masked = SAVED[saved]
    inputs = keras.Input(shape=shape)
    head = keras.layers.Dense(
        4, kernel_initializer=keras.initializers.RandomNormal(seed=0)
    )
    if not masked:
        return keras.Model(inputs, head(GridPositionEncoding(**arguments)(inputs)))
    mask = keras.Input(shape=shape[:-1], dtype="bool")
    outputs = head(GridPositionEncoding(**arguments)(inputs, pixel_mask=mask))
    return keras.Model([inputs, mask], outputs)


def _model_inputs(saved):
    _, shape, masked = SAVED[saved]
    x = _x((2, *shape))
    if not masked:
        return x
    mask = np.ones((2, *shape[:-1]), bool)
    mask[0, 3:, :] = mask[0, :, 4:] = False  # image 0 padded
    return [x, mask]


@SAVED_CASES
def test_keras_file_round_trip(tmp_path, saved):
    model = _model(saved)
    path = str(tmp_path / "grid.keras")
    model.save(path)
    restored = keras.models.load_model(path, safe_mode=True)
    x = _model_inputs(saved)
    np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))


@pytest.mark.skipif(
    not LEGACY and BACKEND == "torch", reason="torch writes no SavedModels"
)
@SAVED_CASES
def test_saved_model_serves_the_layer(tmp_path, saved):
    import tensorflow as tf

    model = _model(saved)
    path = export_saved_model(model, tmp_path / "grid")
    x = _model_inputs(saved)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    names = sorted(serve.structured_input_signature[1])
    values = x if isinstance(x, list) else [x]
    feeds = {n: tf.constant(v) for n, v in zip(names, values, strict=True)}
    (out,) = serve(**feeds).values()
    assert max_diff(out.numpy(), to_numpy(model(x))) <= 1e-6


@keras3_only
def test_symbolic_call_keeps_the_shape():
    inputs = keras.Input(shape=(None, None, 32))
    assert tuple(GridPositionEncoding()(inputs).shape) == (None, None, None, 32)


# -- bad input ------------------------------------------------------------------

ERRORS = [
    (
        {"grid_shape": (0, 4), "dim": 8},
        "grid_shape",
        "a tuple of 1 to 3 positive integers (e.g. (16, 16))",
        "(0, 4)",
    ),
    (
        {"grid_shape": 16, "dim": 8},
        "grid_shape",
        "a tuple of 1 to 3 positive integers (e.g. (16, 16))",
        "16",
    ),
    (
        {"grid_shape": (4, 4), "dim": 6},
        "dim",
        "a positive multiple of 4 for a 2-D grid",
        "6",
    ),
    (
        {"grid_shape": (2, 4, 4), "dim": 40},
        "dim",
        "a positive multiple of 16 for a 3-D grid",
        "40",
    ),
    (
        {"grid_shape": (5,), "dim": 7},
        "dim",
        "a positive multiple of 2 for a 1-D grid",
        "7",
    ),
    ({"extra_tokens": -1}, "extra_tokens", "a non-negative integer", "-1"),
    (
        {"interpolation_scale": 0.0},
        "interpolation_scale",
        "a finite number > 0, or a tuple of one per grid axis",
        "0.0",
    ),
    (
        {"interpolation_scale": 10**400},
        "interpolation_scale",
        "a finite number > 0, or a tuple of one per grid axis",
        "1" + "0" * 400,
    ),
    (
        {"interpolation_scale": (1.0, 2.0, 3.0)},
        "interpolation_scale",
        "one number, or a tuple of 2 (one per axis of a 2-D grid)",
        "(1.0, 2.0, 3.0)",
    ),
    ({"base_size": 0}, "base_size", "a positive integer <= 65536", "0"),
    ({"positions": "float64"}, "positions", "one of ('exact', 'float32')", "'float64'"),
    ({"crop": "middle"}, "crop", "one of ('center', 'top_left')", "'middle'"),
    (
        {"max_grid_shape": (4,)},
        "max_grid_shape",
        "a tuple of 2 sizes (a 2-D grid)",
        "(4,)",
    ),
    (
        {"max_grid_shape": (4, 4), "grid_shape": (5, 4)},
        "grid_shape",
        "a grid within max_grid_shape=(4, 4)",
        "(5, 4)",
    ),
    (
        {"interpolation_scale": 1e-30, "positions": "float32"},
        "interpolation_scale",
        "a scale that keeps float32 positions below 2**31",
        "1e-30",
    ),
    (  # rounds to a float32 zero: positions 0 / 0 and i / 0
        {"interpolation_scale": 1e-300, "positions": "float32"},
        "interpolation_scale",
        "a scale that keeps float32 positions below 2**31",
        "1e-300",
    ),
    (
        {"interpolation_scale": 1e-300, "positions": "float32", "base_size": 16},
        "interpolation_scale",
        "a scale that keeps float32 positions below 2**31",
        "1e-300",
    ),
]


@pytest.mark.parametrize("kwargs, name, expected, value", ERRORS)
def test_bad_arguments_raise_naming_them(kwargs, name, expected, value):
    kwargs = {"grid_shape": (4, 4), "dim": 8, **kwargs}
    message = invalid_value(name, expected, value)
    with pytest.raises(ValueError, match=exact(message)):
        grid_sincos_table(kwargs.pop("grid_shape"), kwargs.pop("dim"), **kwargs)


def test_lookup_needs_max_grid_shape():
    message = (
        "Received an invalid value for `max_grid_shape`, expected a tuple of "
        "positive integers with mode='lookup'. Received: max_grid_shape=None"
    )
    with pytest.raises(ValueError, match=exact(message)):
        GridPositionEncoding(mode="lookup")


@pytest.mark.parametrize(
    "shape, kwargs, call, name, expected",
    [
        (
            (1, 13, 16),
            {"grid_shape": (3, 5)},
            {},
            "grid_shape",
            "a grid of the inputs' 13 tokens after extra_tokens=0",
        ),
        (
            (1, 4, 4, 16),
            {},
            {"grid_shape": (4, 5)},
            "grid_shape",
            "the grid of the inputs, (4, 4)",
        ),
        (
            (1, 4, 4, 16),
            {"extra_tokens": 1},
            {},
            "inputs",
            "[batch, H, W, C] or [batch, T, H, W, C] (without extra_tokens), "
            "or [batch, N, C] tokens",
        ),
        ((1, 4, 4, 10), {}, {}, "inputs", "a positive multiple of 4 for a 2-D grid"),
        (
            (1, 1, 8),
            {"extra_tokens": 64},
            {},
            "inputs",
            "[batch, N, C] tokens with N > extra_tokens=64",
        ),
        (
            (1, 2, 8),
            {"extra_tokens": 2},
            {},
            "inputs",
            "[batch, N, C] tokens with N > extra_tokens=2",
        ),
    ],
)
def test_bad_inputs_raise_naming_them(shape, kwargs, call, name, expected):
    pattern = f"Received an invalid value for `{name}`, expected {expected}. Received: "
    with pytest.raises(ValueError, match=re.escape(pattern)):
        GridPositionEncoding(**kwargs)(np.zeros(shape, "float32"), **call)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit: token counts are static")
def test_tokens_that_do_not_fit_raise_under_jax_jit():
    # Shapes are known when traced: the eager refusal, not a broadcast.
    layer = GridPositionEncoding(extra_tokens=2)
    with pytest.raises(ValueError, match=re.escape("N > extra_tokens=2")):
        traced(layer)(np.zeros((1, 1, 8), "float32"))


# Token inputs of a count known only when the graph runs (a serving
# signature): (layer arguments, call grid_shape, token count, the check's text).
UNFITTED_TOKENS = [
    ({"grid_shape": (1, 1)}, None, 6, "`grid_shape`: expected 1 tokens"),
    ({}, (2, 3), 1, "`grid_shape`: expected 6 tokens"),
    ({"extra_tokens": 1}, (2, 2), 4, "`grid_shape`: expected 5 tokens"),
    ({"extra_tokens": 64}, None, 1, "`inputs`: expected more than extra_tokens=64"),
    ({"extra_tokens": 2}, None, 2, "`inputs`: expected more than extra_tokens=2"),
]


def _token_function(kwargs, grid_shape, jit_compile):
    import tensorflow as tf

    layer = GridPositionEncoding(**kwargs)
    spec = tf.TensorSpec((1, None, 8), tf.float32)
    return tf.function(
        lambda x: layer(x, grid_shape=grid_shape),
        input_signature=[spec],
        jit_compile=jit_compile,
        autograph=False,
    )


@only_tensorflow
@pytest.mark.parametrize("kwargs, grid_shape, count, message", UNFITTED_TOKENS)
def test_tokens_that_do_not_fit_fail_a_graph_assertion(
    kwargs, grid_shape, count, message
):
    import tensorflow as tf

    fn = _token_function(kwargs, grid_shape, jit_compile=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        fn(np.zeros((1, count, 8), "float32"))


@only_tensorflow
@pytest.mark.parametrize("kwargs, grid_shape, count, message", UNFITTED_TOKENS)
def test_tokens_that_do_not_fit_are_nan_under_xla(kwargs, grid_shape, count, message):
    # XLA runs no assertion: every row is NaN, in the inputs' shape.
    out = _token_function(kwargs, grid_shape, jit_compile=True)(
        np.zeros((1, count, 8), "float32")
    )
    assert tuple(out.shape) == (1, count, 8)
    assert np.isnan(out.numpy()).all()


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_tokens_that_fit_in_a_graph_of_unknown_count(jit_compile):
    # The same rows as eagerly, with class tokens first.
    for kwargs, grid_shape, count in (
        ({"extra_tokens": 1}, (2, 2), 5),
        ({"extra_tokens": 2}, None, 7),
        ({"grid_shape": (2, 3)}, None, 6),
    ):
        fn = _token_function(kwargs, grid_shape, jit_compile)
        x = np.zeros((1, count, 8), "float32")
        eager = GridPositionEncoding(**kwargs)(x, grid_shape=grid_shape)
        np.testing.assert_array_equal(fn(x).numpy(), to_numpy(eager))
