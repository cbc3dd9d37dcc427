"""What the package keeps between eager calls (`keras_posenc.cache`).

Kept rows are owned (no result is a view of them), bounded (one budget,
least recently used first, released with the layers that used them, freed
on request), and invisible (never kept from inside a trace, never made
under torch's inference mode): nothing a caller does, and no order of
calls, changes a later result.
"""

import gc
import json
import os
import threading
import weakref

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    ROOT,
    TOL,
    exact,
    on_host_only,
    reference,
    run_python,
    subprocess_env,
    to_numpy,
    traced,
)

import keras_posenc
from keras_posenc import cache

DEPTH = 16
only_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch only")


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts from an empty cache with the default budget."""
    keras_posenc.clear_cache()
    budget = keras_posenc.set_cache_budget(cache.DEFAULT_BUDGET)
    yield
    keras_posenc.set_cache_budget(budget)
    keras_posenc.clear_cache()


def _zeros(length, depth=DEPTH, batch=1):
    return np.zeros((batch, length, depth), "float32")


def _alone(**options):
    return keras_posenc.SinusoidalPositionEncoding(merge=None, depth=DEPTH, **options)


# Entry points whose result is the encoding alone, each at 5 positions
# from 40 (a span the cache keeps) or 1 position (a decoding step).
ALONE_RESULTS = {
    "table": lambda n: keras_posenc.sinusoidal_table(n, DEPTH, start_index=40),
    "layer": lambda n: _alone()(_zeros(n), start_index=40)[0],
    "lookup": lambda n: _alone(mode="lookup", max_length=64)(_zeros(n), start_index=40)[
        0
    ],
}


def _edit_in_place(result):
    """What a caller may do to a result: edit it, or the numpy array of it."""
    if BACKEND == "torch":
        result.add_(1.0)
        if result.device.type == "cpu":  # a GPU tensor has no numpy view
            result.numpy()[...] = 7.0
    elif BACKEND == "tensorflow":
        result.numpy()[...] = 7.0  # a copy: the tensor itself is immutable
        # A zero-copy DLPack view of its buffer is writable.
        torch = pytest.importorskip("torch")
        torch.from_dlpack(result).add_(1.0)
    else:
        view = np.asarray(result)
        assert not view.flags.writeable


@pytest.mark.parametrize("length", [5, 1], ids=["span", "step"])
@pytest.mark.parametrize("entry", sorted(ALONE_RESULTS))
def test_editing_a_result_never_changes_a_later_result(entry, length):
    # A result never shares memory with rows the package keeps (torch hands
    # out views): edited in place, the next call (of the same entry point
    # or another layer of the same configuration) still gives the exact rows.
    call = ALONE_RESULTS[entry]
    _edit_in_place(call(length))
    want = reference(40 + np.arange(length), DEPTH)
    for again in ALONE_RESULTS.values():
        np.testing.assert_allclose(to_numpy(again(length)), want, atol=TOL)


# The other public functions, at one position or row (a decoding step) and
# at several.
FUNCTION_RESULTS = {
    "rotary_cos": lambda n: keras_posenc.rotary_cos_sin(40 + np.arange(n), DEPTH)[0],
    "rotary_sin": lambda n: keras_posenc.rotary_cos_sin(40 + np.arange(n), DEPTH)[1],
    "timestep": lambda n: keras_posenc.timestep_embedding(
        np.arange(n, dtype="float32"), DEPTH
    ),
    "grid": lambda n: keras_posenc.grid_sincos_table((n,), DEPTH),
    "alibi": lambda n: keras_posenc.alibi_bias(4, 1, n),
}


@pytest.mark.parametrize("length", [5, 1], ids=["span", "step"])
@pytest.mark.parametrize("entry", sorted(FUNCTION_RESULTS))
def test_editing_a_function_result_never_changes_the_next_one(entry, length):
    call = FUNCTION_RESULTS[entry]
    call(length)
    want = to_numpy(call(length)).copy()
    _edit_in_place(call(length))
    np.testing.assert_array_equal(to_numpy(call(length)), want)


@only_torch
def test_training_a_table_as_a_parameter_leaves_the_encoding_exact():
    # The pattern that used to corrupt every later encoding: a table wrapped
    # in a trainable torch Parameter, trained for a few SGD steps.
    import torch

    table = torch.nn.Parameter(keras_posenc.sinusoidal_table(128, 64))
    optimizer = torch.optim.SGD([table], lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        (table**2).sum().backward()
        optimizer.step()
    fresh = keras_posenc.SinusoidalPositionEncoding()(np.zeros((1, 128, 64), "float32"))
    np.testing.assert_allclose(
        to_numpy(fresh)[0], reference(np.arange(128), 64), atol=TOL
    )


def test_a_compat_encoding_is_not_a_view_of_kept_rows():
    # keras-hub's drop-in returns the encoding alone: the same guarantee.
    if LEGACY:
        pytest.skip("keras-hub is Keras 3 only")
    from keras_posenc import compat

    layer = compat.SinePositionEncoding()
    _edit_in_place(layer(_zeros(6), start_index=40)[0])
    again = to_numpy(layer(_zeros(6), start_index=40))[0]
    np.testing.assert_allclose(again, reference(40 + np.arange(6), DEPTH), atol=TOL)


# -- bounded: one budget, LRU, released with the layers, freed on request ------


def test_everything_kept_stays_within_one_budget():
    # Many configurations, each keeping a prompt: the total never exceeds
    # the budget, and the most recent ones are the ones kept.
    keras_posenc.set_cache_budget(40_000)
    layers = [_alone(max_wavelength=100.0 + i) for i in range(12)]
    for layer in layers:
        layer(_zeros(400), start_index=0)  # 464 rows x 16 x 4 = 29696 bytes
        info = keras_posenc.cache_info()
        assert info.nbytes <= 40_000
    assert keras_posenc.cache_info().entries == 1


def test_the_least_recently_used_rows_go_first():
    # Budget for two prompts: using A again before C arrives keeps A, evicts B.
    # (The layers are built first: their engines are older than any rows.)
    a, b, c = (_alone(max_wavelength=w) for w in (101.0, 102.0, 103.0))
    for layer in (a, b, c):
        layer.build((1, 400, DEPTH))
    keras_posenc.set_cache_budget(2 * 29_696)
    for layer in (a, b, a, c):
        layer(_zeros(400))
    hits_before = keras_posenc.cache_info().hits
    a(_zeros(400))
    assert keras_posenc.cache_info().hits == hits_before + 1
    b(_zeros(400))
    assert keras_posenc.cache_info().hits == hits_before + 1  # B was evicted


def test_rows_larger_than_the_budget_are_computed_not_kept():
    keras_posenc.set_cache_budget(1000)
    rows = to_numpy(_alone()(_zeros(300), start_index=7))[0]
    np.testing.assert_allclose(rows, reference(7 + np.arange(300), DEPTH), atol=TOL)
    assert keras_posenc.cache_info().nbytes == 0


def test_rows_of_layers_that_are_gone_are_released():
    layer = _alone(max_wavelength=12345.0)
    layer(_zeros(100))
    assert keras_posenc.cache_info().entries == 1
    del layer
    gc.collect()
    assert keras_posenc.cache_info().entries == 0


def test_rows_shared_by_two_layers_stay_while_one_of_them_lives():
    first, second = _alone(max_wavelength=777.0), _alone(max_wavelength=777.0)
    first(_zeros(100))
    second(_zeros(100))
    assert keras_posenc.cache_info().entries == 1
    del first
    gc.collect()
    assert keras_posenc.cache_info().entries == 1
    del second
    gc.collect()
    assert keras_posenc.cache_info().entries == 0


def test_clear_cache_frees_everything_and_later_rows_are_the_same_bits():
    layer = _alone()
    before = to_numpy(layer(_zeros(200), start_index=3))
    # Pinned: no layer. Twice: a configuration's first function call keeps
    # nothing (its engine, and the rows it holds, go with the call).
    for _ in range(2):
        keras_posenc.sinusoidal_table(100, 8, start_index=5)
    assert keras_posenc.cache_info().entries == 2
    keras_posenc.clear_cache()
    assert keras_posenc.cache_info() == cache.CacheInfo(
        0, 0, cache.DEFAULT_BUDGET, 0, 0
    )
    assert to_numpy(layer(_zeros(200), start_index=3)).tobytes() == before.tobytes()


def test_a_zero_budget_keeps_nothing_and_decoding_steps_keep_their_bits():
    keras_posenc.set_cache_budget(0)
    layer = _alone()
    full = to_numpy(layer(_zeros(70)))[0]
    steps = [to_numpy(layer(_zeros(1), start_index=t))[0, 0] for t in range(70)]
    assert np.array(steps).tobytes() == full.tobytes()
    assert keras_posenc.cache_info().entries == 0


def test_set_cache_budget_returns_the_old_budget_and_evicts_down_to_the_new():
    _alone()(_zeros(400))
    assert keras_posenc.set_cache_budget(100) == cache.DEFAULT_BUDGET
    assert keras_posenc.cache_info().nbytes == 0


@pytest.mark.parametrize("nbytes", [-1, 1.5, "64M", None, True])
def test_a_bad_budget_is_refused_naming_nbytes(nbytes):
    message = (
        "Received an invalid value for `nbytes`, expected a non-negative integer. "
        f"Received: nbytes={nbytes!r}"
    )
    with pytest.raises(ValueError, match=exact(message)):
        keras_posenc.set_cache_budget(nbytes)


@pytest.mark.parametrize(
    "setting, budget", [("1000", 1000), ("", cache.DEFAULT_BUDGET)]
)
def test_the_budget_comes_from_the_environment_at_start(setting, budget):
    env = {**os.environ, cache.BUDGET_VARIABLE: setting}
    code = "import keras_posenc; print(keras_posenc.cache_info().budget)"
    out = run_python(code, env=env, cwd=ROOT)
    assert out.stdout.strip() == str(budget), out.stderr[-2000:]


def test_a_bad_budget_in_the_environment_is_refused_by_name():
    env = {**os.environ, cache.BUDGET_VARIABLE: "lots"}
    code = "import keras_posenc; keras_posenc.cache_info()"
    out = run_python(code, env=env, cwd=ROOT)
    assert out.returncode != 0
    assert "KERAS_POSENC_CACHE_BYTES must be a non-negative number of bytes" in (
        out.stderr
    )


def test_threads_decoding_under_a_small_budget_get_exact_rows():
    # Eight threads decode with layers of four configurations, evicting each
    # other's rows all the time: every row is still the full call's.
    keras_posenc.set_cache_budget(3 * 2**16)
    layers = [_alone(max_wavelength=1000.0 * (1 + i % 4)) for i in range(8)]
    fulls = [to_numpy(layer(_zeros(300)))[0] for layer in layers]
    errors = []

    def decode(layer, full):
        for t in range(0, 300, 7):
            row = to_numpy(layer(_zeros(1), start_index=t))[0, 0]
            if row.tobytes() != full[t].tobytes():
                errors.append(t)

    threads = [
        threading.Thread(target=decode, args=pair)
        for pair in zip(layers, fulls, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert keras_posenc.cache_info().nbytes <= 3 * 2**16


# -- invisible: nothing kept inside a trace, nothing tied to an autograd mode --


@pytest.mark.skipif(BACKEND == "torch", reason="tf.function or jax.jit")
@pytest.mark.parametrize("rotary", [False, True], ids=["sinusoidal", "rope"])
def test_nothing_is_kept_from_inside_a_trace(rotary):
    # Under jax.jit with a static start (Keras's predict and fit) or in a
    # tf.function, kept rows would be constants of each compiled program.
    if rotary:
        layer, x = keras_posenc.RotaryEmbedding(), np.ones((1, 256, 2, 32), "float32")
    else:
        layer, x = _alone(), _zeros(256)
    out = to_numpy(traced(lambda x: layer(x, start_index=5))(x))
    assert keras_posenc.cache_info().entries == 0
    assert to_numpy(layer(x, start_index=5)).tobytes() == out.tobytes()


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit")
@pytest.mark.parametrize(
    "options",
    [{}, {"mode": "lookup", "max_length": 4096}],
    ids=["compute", "lookup"],
)
def test_a_jitted_call_holds_no_table_as_a_constant(options):
    # Lowered with a static start (Keras's predict), the program computes its
    # rows: its text is far smaller than the rows (4000 x 64 float32 = 1 MB)
    # or a lookup table would be as an embedded constant.
    import jax

    layer = keras_posenc.SinusoidalPositionEncoding(**options)
    x = np.zeros((1, 4000, 64), "float32")
    layer(x[:, :8])
    text = jax.jit(lambda x: layer(x)).lower(x).as_text()
    assert len(text) < 4000 * 64 * 4 // 4


@only_torch
@pytest.mark.parametrize("rotary", [False, True], ids=["sinusoidal", "rope"])
def test_rows_kept_in_inference_mode_serve_later_autograd_calls(rotary):
    # The first call (under torch.inference_mode) keeps the rows; a later
    # call with autograd reads them and must be able to backpropagate.
    import torch

    if rotary:
        layer, shape = keras_posenc.RotaryEmbedding(), (1, 200, 2, 16)
    else:
        layer, shape = keras_posenc.SinusoidalPositionEncoding(), (1, 200, DEPTH)
    with torch.inference_mode():
        layer(torch.zeros(shape), start_index=3)
        layer(torch.zeros((1, 1, *shape[2:])), start_index=3)
    for length in (200, 1):
        x = torch.ones((1, length, *shape[2:]), requires_grad=True)
        layer(x, start_index=3).sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()


@only_torch
def test_a_lookup_table_built_in_inference_mode_serves_autograd_calls():
    import torch

    layer = keras_posenc.SinusoidalPositionEncoding(mode="lookup", max_length=64)
    with torch.inference_mode():
        layer(torch.zeros((1, 8, DEPTH)))
    x = torch.ones((1, 8, DEPTH), requires_grad=True)
    layer(x, start_index=2).sum().backward()
    assert x.grad is not None


# -- several sessions, function calls, honest sizes, devices -------------------


@pytest.mark.parametrize("rotary", [False, True], ids=["sinusoidal", "rope"])
def test_two_sessions_decoding_at_once_keep_their_own_blocks(rotary):
    # A server alternating two requests (positions 100 and 1000 apart):
    # each keeps its block, so steps hit instead of evicting each other.
    if rotary:
        layer, shape = keras_posenc.RotaryEmbedding(), (1, 1, 2, 16)
    else:
        layer, shape = _alone(), (1, 1, DEPTH)
    x = np.ones(shape, "float32")
    for t in range(2):  # the first step of each session computes
        layer(x, start_index=100 + t)
        layer(x, start_index=1000 + t)
    before = keras_posenc.cache_info()
    for t in range(2, 40):
        layer(x, start_index=100 + t)
        layer(x, start_index=1000 + t)
    after = keras_posenc.cache_info()
    assert after.misses == before.misses
    assert after.hits - before.hits >= 76


def test_a_function_call_does_not_keep_the_rows_of_layers_that_are_gone():
    # sinusoidal_table keeps its own span (pinned, within the budget); the
    # layer's rows still go with the layer. Twice: a configuration's first
    # function call keeps nothing (its engine goes with the call).
    for _ in range(2):
        keras_posenc.sinusoidal_table(100, DEPTH, start_index=5000)
    layer = _alone()
    layer(_zeros(100), start_index=0)
    assert keras_posenc.cache_info().entries == 2
    del layer
    gc.collect()
    assert keras_posenc.cache_info().entries == 1


def test_rotary_cos_sin_keeps_nothing_and_holds_no_layer_rows():
    keras_posenc.rotary_cos_sin(np.arange(16), 16)
    layer = keras_posenc.RotaryEmbedding()
    layer(np.ones((1, 100, 2, 16), "float32"))
    del layer
    gc.collect()
    assert keras_posenc.cache_info().entries == 0


@pytest.mark.skipif(BACKEND == "torch", reason="split steps are copies on TF, JAX")
def test_rope_steps_that_do_not_fit_are_computed_not_rebuilt_per_step():
    # A budget that holds the encoder's step block but not the step tables'
    # cos, sin and their copies: steps read the encoder's kept rows (hits)
    # instead of rebuilding and dropping step tables at every step.
    from keras_posenc import _backend

    layer = keras_posenc.RotaryEmbedding()
    x = np.ones((1, 1, 2, 64), "float32")
    # The encoder's 512 rows and their split copies, with their arrays.
    encoder_block = 2 * 4 * 512 * 64 + _backend.ARRAY_OVERHEAD * 513
    keras_posenc.set_cache_budget(encoder_block + 1000)
    layer(x, start_index=0)
    before = keras_posenc.cache_info()
    for t in range(1, 30):
        layer(x, start_index=t)
    after = keras_posenc.cache_info()
    assert after.entries == 1 and after.misses == before.misses


@pytest.mark.skipif(BACKEND != "jax", reason="JAX arrays can be deleted")
def test_deleting_a_jax_result_does_not_delete_a_kept_row():
    # A one-row table used to be the kept row itself; deleting (or donating)
    # it broke every later call at that position.
    row = keras_posenc.sinusoidal_table(1, DEPTH, start_index=40)
    row.delete()
    again = keras_posenc.sinusoidal_table(1, DEPTH, start_index=40)
    np.testing.assert_allclose(to_numpy(again), reference([40], DEPTH), atol=TOL)


@only_torch
def test_kept_rows_are_counted_as_the_memory_they_hold():
    # A kept prompt is a copy, not a view of the larger computed table, so
    # its storage is what the budget counts (plus the array's own cost).
    layer = _alone()
    layer(_zeros(1000), start_index=7)
    info = keras_posenc.cache_info()
    # The one entry of rows (the others are engines).
    (entry,) = [e for e in cache.STORE._entries.values() if isinstance(e[0], tuple)]
    rows = entry[0][1]
    assert rows.untyped_storage().nbytes() == rows.numel() * 4
    assert info.nbytes >= rows.untyped_storage().nbytes()


@only_torch
def test_rows_made_on_one_device_are_not_served_on_another():
    # Constants and kept rows are per device: a layer first used on the
    # `meta` device (no values) still gives exact rows on the CPU.
    import keras
    import torch
    from keras.src.backend.torch.core import get_device

    with keras.device("meta"):
        _alone()(torch.zeros((1, 4, DEPTH), device="meta"), start_index=3)
    out = _alone()(_zeros(4), start_index=3)
    assert out.device.type == torch.device(get_device()).type  # Keras's
    np.testing.assert_allclose(
        to_numpy(out)[0], reference(3 + np.arange(4), DEPTH), atol=TOL
    )


# -- engines: built once per configuration, kept in the same budget ------------


def _engines_of(max_wavelength, depth=DEPTH):
    """The sinusoidal and RoPE encoders of one configuration, as the memo has them."""
    from keras_posenc._exact import engine
    from keras_posenc._rope.config import RopeConfig

    config = RopeConfig.build(max_wavelength)
    return (
        engine.sinusoidal_encoder(depth, max_wavelength, "interleaved", "paper"),
        engine.rotary_encoder(config.frequencies(depth)),
    )


def _use_configuration(max_wavelength, depth=DEPTH, length=8):
    """Layers and functions of one configuration: a prompt, then one step."""
    x, q = _zeros(length, depth), np.ones((1, length, 1, depth), "float32")
    pe = keras_posenc.SinusoidalPositionEncoding(max_wavelength=max_wavelength)
    rope = keras_posenc.RotaryEmbedding(max_wavelength=max_wavelength)
    pe(x), pe(x[:, :1], start_index=length)
    rope(q), rope(q[:, :1], start_index=length)
    keras_posenc.sinusoidal_table(length, depth, max_wavelength=max_wavelength)
    keras_posenc.rotary_cos_sin(np.arange(length), depth, max_wavelength=max_wavelength)


def test_clear_cache_frees_the_engines_of_every_configuration():
    # Engines (host constants, device tensors, compiled functions) used to be
    # kept in lru_caches, outside the budget: clear_cache freed none of them.
    _use_configuration(500.0)
    engines = [weakref.ref(e) for e in _engines_of(500.0)]
    info = keras_posenc.cache_info()
    assert info.engines == 3  # sinusoidal, RoPE, RoPE frequencies
    assert 0 < info.engine_nbytes < info.nbytes <= info.budget
    keras_posenc.clear_cache()
    gc.collect()
    assert [e() for e in engines] == [None, None]
    info = keras_posenc.cache_info()
    assert (info.engines, info.engine_nbytes, info.nbytes) == (0, 0, 0)


def test_engines_go_least_recently_used_first_and_layers_keep_theirs():
    # A budget for two engines and no rows: each new configuration (used
    # twice: the first use keeps nothing) evicts the least recently used
    # engine; a layer still holding an evicted one gives exact rows, and
    # the next call of its configuration is handed the same engine.
    from keras_posenc._exact import engine

    def encoder(max_wavelength):
        return engine.sinusoidal_encoder(DEPTH, max_wavelength, "interleaved", "paper")

    layer = _alone(max_wavelength=600.0)
    layer(_zeros(1))
    first = encoder(600.0)  # the layer's: its second request keeps it
    keras_posenc.set_cache_budget(2 * first.nbytes)
    for w in (601.0, 602.0):
        for _ in range(2):
            keras_posenc.sinusoidal_table(4, DEPTH, max_wavelength=w)
    info = keras_posenc.cache_info()
    assert (info.engines, info.engine_nbytes) == (2, 2 * first.nbytes)
    assert encoder(602.0) is encoder(602.0)  # kept
    assert encoder(600.0) is first  # evicted, but the layer holds it
    rows = to_numpy(layer(_zeros(5), start_index=9))[0]
    np.testing.assert_allclose(
        rows, reference(9 + np.arange(5), DEPTH, 600.0), atol=TOL
    )


def _rope_used_once(max_wavelength, steps=1, dim=64):
    """A RoPE layer of one configuration: a 16-position prompt, then `steps`
    decoding steps."""
    layer = keras_posenc.RotaryEmbedding(max_wavelength=max_wavelength)
    layer(np.ones((1, 16, 2, dim), "float32"))
    for t in range(steps):
        layer(np.ones((1, 1, 2, dim), "float32"), start_index=16 + t)
    return layer


def test_a_configuration_used_once_keeps_nothing_after_its_layer_is_gone():
    # 250 configurations used once kept 10 MiB of engines (issue 47): the
    # first request of a configuration's engine and frequencies lives as
    # long as its layer holds it.
    layer = _rope_used_once(900.0)
    assert keras_posenc.cache_info().engines == 0
    del layer
    gc.collect()
    info = keras_posenc.cache_info()
    assert (info.engines, info.entries, info.nbytes) == (0, 0, 0)


class _Held:
    """A value a memo hands out (held weakly while a caller holds it)."""


def test_first_requests_are_recorded_in_a_fixed_space_oldest_forgotten():
    # The record of first requests was a dict entry and a Python int per
    # configuration (0.2 KiB each, 250 configurations used once grew the
    # process by 50 KiB, issue 47): now a fixed array, written in turn.
    import tracemalloc

    from keras_posenc._exact import kept

    @kept.memoized(lambda value: 64, repeat_only=True)
    def make(i):
        return _Held()

    make(-1)  # the record of this memo's first request, made
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(3 * kept.FIRST_REQUESTS):
            make(i)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert grown < 16 * 1024, grown
    assert keras_posenc.cache_info().engines == 0  # each asked once
    # A second request within the last FIRST_REQUESTS is kept; one after
    # more first requests than that counts as a first request again.
    make(0)
    assert keras_posenc.cache_info().engines == 0
    make(3 * kept.FIRST_REQUESTS - 1)
    assert keras_posenc.cache_info().engines == 1


@only_torch
def test_a_built_layer_makes_no_empty_torch_module():
    # Keras's torch layers make a ParameterDict of their variables when
    # built (2.5 KiB, a torch module): ours have none, and it is made when
    # asked for, as Keras's own property does (issue 47, memory per layer).
    from keras_posenc import compat

    layers = [
        _rope_used_once(901.0),
        keras_posenc.SinusoidalPositionEncoding(),
        keras_posenc.TimestepEmbedding(8),
        compat.RotaryEmbedding(),
    ]
    layers[1](np.ones((1, 4, 8), "float32"))
    layers[2](np.arange(3.0, dtype="float32"))
    layers[3](np.ones((1, 4, 2, 8), "float32"))
    for layer in layers:
        assert layer.built and "_torch_params" not in layer._modules, layer
        assert list(layer.named_parameters()) == []
        assert len(layer.torch_params) == 0


@only_torch
def test_a_layer_with_variables_still_tracks_them_for_torch():
    from keras_posenc._keras import PositionLayer

    class Scaled(PositionLayer):
        def build(self, input_shape):
            self.scale = self.add_weight(shape=(), initializer="ones")

        def call(self, inputs):
            return inputs * self.scale

    layer = Scaled()
    layer(np.ones((2, 3), "float32"))
    assert "_torch_params" in layer._modules
    assert [p.shape for p in layer.parameters()] == [()]


def test_a_configuration_used_twice_keeps_its_engine_for_the_next_layer():
    # The second request (a second layer, or a function call) keeps the
    # engine and the frequencies in the one budget, as before.
    for _ in range(2):
        _rope_used_once(901.0)  # a layer, dropped
        gc.collect()
    assert keras_posenc.cache_info().engines == 2  # RoPE engine, frequencies


def test_two_living_layers_of_one_configuration_share_one_engine():
    # Also when the store kept none (first use) or dropped it (clear_cache,
    # eviction): a living layer's engine is handed to the next one.
    first = _rope_used_once(902.0)
    keras_posenc.clear_cache()
    second = _rope_used_once(902.0)
    assert second._rotation.rows(64).encoder is first._rotation.rows(64).encoder


@pytest.mark.skipif(BACKEND != "torch", reason="torch tensors share numpy memory")
def test_a_torch_engine_holds_its_constants_once_on_a_cpu():
    # Keras's convert_to_tensor copies a numpy array: every engine held its
    # host constants twice, and its own copy of the constants all share.
    from keras.src.backend.torch.core import get_device

    from keras_posenc._exact import engine

    if str(get_device()) != "cpu":
        pytest.skip("on a GPU the constants are copied to it (held_bytes counts it)")
    first = engine.rotary_encoder((1.0, 0.25))
    second = engine.rotary_encoder((0.5, 0.125))
    host = first._host
    for name in ("fine_u", "fine_v", "chunk_turns", "chunk_rests"):
        tensor = getattr(first.consts, name)
        assert tensor.data_ptr() == getattr(host, name).ctypes.data, name
    assert first.consts.pair_turns is second.consts.pair_turns


@pytest.mark.skipif(BACKEND != "torch", reason="another length compiles on TF, JAX")
def test_a_short_prompt_and_one_step_keep_no_decoding_block_on_torch():
    # A 16-position prompt (a span of at most 64 positions: a step-sized
    # request) and one step kept a 128-row block of cos and sin per
    # configuration, held by a layer Python collects late (Keras's layers
    # are cyclic garbage): the first two step-sized requests are computed.
    layer = _rope_used_once(903.0)
    assert layer.built and keras_posenc.cache_info().entries == 0


@pytest.mark.skipif(BACKEND != "torch", reason="another length compiles on TF, JAX")
def test_a_session_keeps_a_short_first_decoding_block_on_torch():
    # From the second step on a block is kept: 128 rows first (64 to 128
    # steps), not 512.
    from keras_posenc import _backend

    layer = _rope_used_once(904.0, steps=3)
    info = keras_posenc.cache_info()
    block = 2 * 4 * 128 * 64 + _backend.ARRAY_OVERHEAD * 2 * 129
    assert layer.built and 0 < info.nbytes - info.engine_nbytes <= block


def _memory_around_clear_cache(count, depth=4096):
    """``(start, held, after, counted)`` in MiB: the process's resident memory
    before `count` configurations, with their engines kept, after
    `clear_cache`, and what the cache counted for the engines."""
    import ctypes

    trim = ctypes.CDLL("libc.so.6").malloc_trim

    def rss_mib():
        gc.collect()
        trim(0)
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    _use_configuration(700.0, depth, 16)  # compile and warm up once
    keras_posenc.clear_cache()
    start = rss_mib()
    for i in range(count):
        _use_configuration(701.0 + i, depth, 16)
    counted = keras_posenc.cache_info().engine_nbytes / 2**20
    held = rss_mib()
    keras_posenc.clear_cache()
    return start, held, rss_mib(), counted


@pytest.mark.slow
def test_a_process_keeps_no_memory_for_configurations_after_clear_cache():
    # The measurement, smaller: configurations used once at depth
    # 4096 by a sinusoidal and a RoPE layer (a prompt, then a step), layers
    # dropped. The engines they kept (about 2 MiB each on torch, whose tensors
    # share the host constants on a CPU: 4 before 0.5.0; 17 on TF and JAX) are
    # counted, and clear_cache gives their memory back to the system.
    # Measured in fresh interpreters: in the suite's process, what earlier
    # tests left in the allocator's arenas moves the resident size by tens of
    # MiB either way; in a fresh one JAX's runtime still moves it by about
    # +-15 MiB, and more on a loaded machine (CI: the median of three
    # processes was 20.8 and 21.5 MiB against a bound of 20, -3 to -7 on a
    # quiet one), so the growth is the least of three processes: a leak
    # shows in each.
    count = 2
    code = (
        "import json, test_cache; "
        f"print(json.dumps(test_cache._memory_around_clear_cache({count})))"
    )
    # The host's memory: engines kept on a GPU are not in it.
    env = on_host_only(subprocess_env(BACKEND, LEGACY))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "tests"), env["PYTHONPATH"]]
    )
    runs = []
    for _ in range(3):
        out = run_python(code, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for start, held, after, counted in runs:
        assert counted >= 2 * 2 * count  # two engines per configuration
        assert held - after >= counted / 2, (start, held, after, counted)
    start, held, after, counted = min(runs, key=lambda r: r[2] - r[0])
    assert after - start < 128 * count / 64 + 16, runs


@pytest.mark.skipif(BACKEND != "torch", reason="torch keeps shared engine tensors")
def test_clear_cache_frees_the_engines_shared_tensors():
    from keras_posenc._exact import engine

    keras_posenc.rotary_cos_sin(np.arange(8), 16)
    assert engine._SHARED_TENSORS  # made once per device, shared by engines
    keras_posenc.clear_cache()
    assert not engine._SHARED_TENSORS
