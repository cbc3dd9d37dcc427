"""Sequence-sharded runs on JAX: what context parallelism relies on.

A sequence too long for one device is split along its length over several.
Three ways of doing so must give the bits of one device: GSPMD (a
`NamedSharding` along the sequence axis under `jax.jit`), `shard_map` with a
per-shard `start_index = start + axis_index * local_length`, and
`keras.distribution.ModelParallel` with a `LayoutMap` that lays the
sequence axis out over the mesh. Everything runs once, in a subprocess with
two host devices (`XLA_FLAGS` must be set before JAX starts, and must not
reach the rest of the suite); the tests read its JSON report.
"""

import json
import subprocess
import sys
import textwrap

import pytest
from _helpers import BACKEND, on_host_only, subprocess_env

DEVICES = 2
LAYERS = ["SinusoidalPositionEncoding", "RotaryEmbedding"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BACKEND != "jax", reason="jax.sharding: JAX pass only"),
]

# Each result is {"equal": bit-identical to one device, "spec": the output's
# PartitionSpec as a list, "devices": how many devices hold the output}. "One device"
# is the same program on one device (eager for eager, jit for jit): XLA may
# fuse a jitted program differently from eager ops, a few ulps apart, which
# is not what is tested here.
_SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    import numpy as np
    import keras
    import keras_posenc
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
    from keras import distribution

    devices = jax.devices()
    assert len(devices) == 2, devices
    rng = np.random.default_rng(0)
    # [batch, length, features] and [batch, length, heads, head_dim]
    inputs = {
        "SinusoidalPositionEncoding": rng.normal(size=(2, 64, 16)).astype("float32"),
        "RotaryEmbedding": rng.normal(size=(2, 64, 3, 16)).astype("float32"),
    }
    layers = {
        "SinusoidalPositionEncoding": keras_posenc.SinusoidalPositionEncoding(),
        "RotaryEmbedding": keras_posenc.RotaryEmbedding(max_wavelength=500000.0),
    }
    one_device = jax.sharding.SingleDeviceSharding(devices[0])

    def result(got, want):
        # model.predict returns numpy: no sharding to report.
        sharding = getattr(got, "sharding", None)
        spec = getattr(sharding, "spec", ())
        return {
            "equal": bool(np.array_equal(np.asarray(got), np.asarray(want))),
            "spec": [None if axis is None else str(axis) for axis in spec],
            "devices": len(sharding.device_set) if sharding else 0,
        }

    found = {"gspmd": {}, "shard_map": {}, "model_parallel": {}}
    for axis_type in ("Auto", "Explicit"):
        mesh = Mesh(devices, ("seq",), axis_types=(getattr(AxisType, axis_type),))
        split = NamedSharding(mesh, P(None, "seq"))
        for name, layer in layers.items():
            x = inputs[name]
            for start in (0, 1000):
                call = jax.jit(lambda t, layer=layer, start=start: layer(
                    t, start_index=start))
                want = call(jax.device_put(x, one_device))
                got = call(jax.device_put(x, split))
                found["gspmd"][f"{name}-{axis_type}-{start}"] = result(got, want)

    mesh = Mesh(devices, ("seq",))
    for name, layer in layers.items():
        x = inputs[name]
        local_length = x.shape[1] // len(devices)
        for start in (0, 1000):
            # The context-parallel pattern: each shard encodes its own slice
            # of positions, starting where the slice starts.
            def shard(t, layer=layer, start=start):
                offset = start + jax.lax.axis_index("seq") * local_length
                return layer(t, start_index=offset)

            split_call = jax.jit(jax.shard_map(
                shard, mesh=mesh, in_specs=P(None, "seq"), out_specs=P(None, "seq")
            ))
            whole = jax.jit(lambda t, layer=layer, start=start: layer(
                t, start_index=start))
            got = split_call(jax.device_put(x, NamedSharding(mesh, P(None, "seq"))))
            want = whole(jax.device_put(x, one_device))
            found["shard_map"][f"{name}-{start}"] = result(got, want)

    def build():
        features = keras.Input(shape=(None, 12))
        h = keras_posenc.SinusoidalPositionEncoding(name="sinusoidal")(features)
        h = keras.layers.Reshape((-1, 3, 4))(h)
        h = keras_posenc.RotaryEmbedding(name="rotary")(h)
        return keras.Model(features, h)

    x = rng.normal(size=(2, 64, 12)).astype("float32")
    single = build()
    expected = {
        "eager": single(x),
        "jit": jax.jit(single)(x),
        "predict": single.predict(x, batch_size=2, verbose=0),
    }
    mesh = distribution.DeviceMesh((1, 2), ("batch", "seq"), devices)
    layout_map = distribution.LayoutMap(mesh)
    # Every encoding output stays laid out along the sequence axis.
    layout_map["sinusoidal/output"] = distribution.TensorLayout((None, "seq", None))
    layout_map["rotary/output"] = distribution.TensorLayout(
        (None, "seq", None, None))
    parallel = distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with parallel.scope():
        model = build()
        sharded = distribution.distribute_tensor(
            x, distribution.TensorLayout((None, "seq", None), mesh))
        assert len(sharded.sharding.device_set) == 2, sharded.sharding
        got = {
            "eager": model(sharded),
            "jit": jax.jit(model)(sharded),
            "predict": model.predict(x, batch_size=2, verbose=0),
        }
    for call, value in got.items():
        found["model_parallel"][call] = result(value, expected[call])
    print(json.dumps(found))
    """
)


@pytest.fixture(scope="module")
def sharded():
    """The subprocess's report: {way: {case: result}}."""
    env = on_host_only(
        subprocess_env(
            "jax", XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}"
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("start", [0, 1000])
@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
@pytest.mark.parametrize("layer", LAYERS)
def test_gspmd_sequence_sharding_is_bit_identical(sharded, layer, axis_type, start):
    # Inputs split along the sequence over two devices (GSPMD with Auto mesh
    # axes, sharding in types with Explicit ones): the output stays split
    # and equals the one-device output bit for bit.
    found = sharded["gspmd"][f"{layer}-{axis_type}-{start}"]
    assert found["equal"], found
    assert found["devices"] == DEVICES, found
    assert found["spec"][:2] == [None, "seq"], found


@pytest.mark.parametrize("start", [0, 1000])
@pytest.mark.parametrize("layer", LAYERS)
def test_shard_map_with_per_shard_start_index_is_bit_identical(sharded, layer, start):
    # Each shard passes start_index = start + axis_index * local_length: the
    # gathered output is the whole sequence's, bit for bit.
    found = sharded["shard_map"][f"{layer}-{start}"]
    assert found["equal"], found
    assert found["devices"] == DEVICES, found
    assert found["spec"][:2] == [None, "seq"], found


@pytest.mark.parametrize("call", ["eager", "jit"])
def test_model_parallel_sequence_layout_is_bit_identical(sharded, call):
    # keras.distribution.ModelParallel over a (batch 1, seq 2) mesh, inputs
    # laid out along the sequence with a TensorLayout and every encoding
    # output kept there by the LayoutMap: the output is split over both
    # devices and equals one device's bit for bit.
    found = sharded["model_parallel"][call]
    assert found["equal"], found
    assert found["devices"] == DEVICES, found
    assert found["spec"][:2] == [None, "seq"], found


def test_model_parallel_predict_is_bit_identical(sharded):
    # model.predict under the same distribution (the trainer lays the data
    # out along the batch axis, the LayoutMap the encodings along the
    # sequence): the one-device predictions, bit for bit.
    assert sharded["model_parallel"]["predict"]["equal"]
