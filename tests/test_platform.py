"""The platform choice (`keras_posenc._platform`): no device stall on a GPU.

Under XLA the engine's tables are kept out of the output loop by a
division by ones on a CPU (XLA's CPU compiler strips barriers, and never
fuses a division into a loop that reads it many times) and by an
optimization barrier on a GPU or TPU; neither is a conditional on data,
which costs a device-to-host copy and a wait in every call on a GPU.
These tests lower for the accelerators on this CPU machine
(`jax.export`), or trace TensorFlow's graph as it would be placed on a
GPU, and read the program; on the CPU they read what XLA compiled.
"""

import re
import types

import numpy as np
import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    data_dependent_conditionals,
    float_divisions,
    to_numpy,
)

import keras_posenc

only_jax = pytest.mark.skipif(BACKEND != "jax", reason="jax.export")
only_tensorflow = pytest.mark.skipif(
    BACKEND != "tensorflow" or LEGACY, reason="TensorFlow (Keras 3)"
)


def _jax_cases():
    """(name, function, argument specs) of the paths that run on an accelerator."""
    import jax
    import jax.numpy as jnp

    rope = keras_posenc.RotaryEmbedding(max_wavelength=500000.0)
    rope_lookup = keras_posenc.RotaryEmbedding(mode="lookup", max_length=4096)
    rope_lookup.build((1, 2048, 8, 64))
    sinusoidal = keras_posenc.SinusoidalPositionEncoding()
    q = jax.ShapeDtypeStruct((4, 2048, 8, 64), jnp.float32)
    x = jax.ShapeDtypeStruct((8, 512, 256), jnp.float32)
    start = jax.ShapeDtypeStruct((), jnp.int32)
    starts = jax.ShapeDtypeStruct((8,), jnp.int32)
    positions = jax.ShapeDtypeStruct((8, 512), jnp.int32)
    rope_positions = jax.ShapeDtypeStruct((4, 2048), jnp.int32)
    return {
        "rope prefill": (lambda q, s: rope(q, start_index=s), (q, start)),
        "rope positions": (lambda q, p: rope(q, positions=p), (q, rope_positions)),
        "rope lookup": (lambda q, s: rope_lookup(q, start_index=s), (q, start)),
        "sinusoidal": (lambda x, s: sinusoidal(x, start_index=s), (x, start)),
        "sinusoidal per example": (
            lambda x, s: sinusoidal(x, start_index=s),
            (x, starts),
        ),
        "sinusoidal positions": (
            lambda x, p: sinusoidal(x, positions=p),
            (x, positions),
        ),
        "cos/sin": (
            lambda s: keras_posenc.rotary_cos_sin(s + jnp.arange(2048), 128),
            (start,),
        ),
    }


def _lowered(fn, specs, platform):
    import jax
    from jax import export

    return export.export(jax.jit(fn), platforms=[platform])(*specs).mlir_module()


@only_jax
@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize(
    "case",
    [
        "rope prefill",
        "rope positions",
        "rope lookup",
        "sinusoidal",
        "sinusoidal per example",
        "sinusoidal positions",
        "cos/sin",
    ],
)
def test_what_jax_lowers_for_an_accelerator_has_no_conditional_on_data(case, platform):
    fn, specs = _jax_cases()[case]
    assert data_dependent_conditionals(_lowered(fn, specs, platform)) == []


@only_jax
def test_what_jax_lowers_for_a_cpu_divides_instead_of_a_barrier():
    fn, specs = _jax_cases()["rope prefill"]
    lowered = _lowered(fn, specs, "cpu")
    assert data_dependent_conditionals(lowered) == []
    assert "optimization_barrier" not in lowered
    # The engine's coarse rows, then the cos and sin tables made from them.
    assert len(float_divisions(lowered)) == 3
    assert float_divisions(_lowered(fn, specs, "cuda")) == []


def _output_loop(hlo):
    """The computation XLA fused into the loop that writes the result (the
    entry's root), from an optimized HLO module's text."""
    entry = hlo[hlo.index("\nENTRY ") :]
    root = re.search(r"ROOT \S+ = .*?calls=(%[\w.-]+)", entry)
    assert root, entry[:2000]  # the result is written by a fusion
    start = hlo.index(f"\n{root.group(1)} ")
    return hlo[start : hlo.index("\n}", start)]


# The engine's Taylor coefficient 1/6 (its sine series), which only the
# engine multiplies by: the output loop must not.
_ENGINE = re.compile(r"constant\(0\.16666")


@only_jax
@pytest.mark.parametrize("case", ["sinusoidal", "sinusoidal positions", "rope prefill"])
def test_xla_on_a_cpu_writes_the_engine_tables_once(case):
    # Fused into the output loop, the engine would run again for every
    # element read (14x slower under `jax.jit`): XLA's CPU program must
    # write its tables in loops of their own, and read them.
    import jax

    fn, specs = _jax_cases()[case]
    compiled = jax.jit(fn).lower(*specs).compile().as_text()
    assert _ENGINE.search(compiled)
    assert not _ENGINE.search(_output_loop(compiled))


@only_tensorflow
def test_tensorflow_xla_on_a_cpu_writes_the_engine_tables_once():
    import tensorflow as tf

    layer = keras_posenc.SinusoidalPositionEncoding()
    fn = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
    x = np.ones((4, 512, 256), "float32")
    hlo = fn.experimental_get_compiler_ir(x, tf.constant(3))(stage="optimized_hlo")
    assert _ENGINE.search(hlo)
    assert not _ENGINE.search(_output_loop(hlo))


@only_jax
def test_what_jax_lowers_for_an_accelerator_holds_the_barriers():
    fn, specs = _jax_cases()["rope prefill"]
    assert _lowered(fn, specs, "cuda").count("stablehlo.optimization_barrier") == 2


def _tensorflow_graph(device):
    """Op types of a `jit_compile` RoPE prefill traced with `device` in scope,
    and its output at start 70."""
    import tensorflow as tf

    rope = keras_posenc.RotaryEmbedding()

    def call(q, s):
        with tf.device(device):
            return rope(q, start_index=s)

    fn = tf.function(call, jit_compile=True, autograph=False)
    q = np.random.default_rng(0).normal(size=(2, 128, 2, 64)).astype("float32")
    concrete = fn.get_concrete_function(
        tf.TensorSpec(q.shape, tf.float32), tf.TensorSpec((), tf.int32)
    )
    types = {op.type for op in concrete.graph.get_operations()}
    for function in concrete.graph.as_graph_def().library.function:
        types |= {node.op for node in function.node_def}
    tf.config.set_soft_device_placement(True)  # this machine has no GPU
    return types, to_numpy(fn(q, tf.constant(70)))


@only_tensorflow
def test_tensorflow_xla_on_a_gpu_has_a_barrier_and_no_conditional():
    gpu, gpu_out = _tensorflow_graph("/GPU:0")
    cpu, cpu_out = _tensorflow_graph("/CPU:0")
    conditionals = {"If", "StatelessIf", "Case", "StatelessCase"}
    assert not gpu & conditionals and "XlaOptimizationBarrier" in gpu
    assert not cpu & conditionals and "XlaOptimizationBarrier" not in cpu
    assert "RealDiv" in cpu and "RealDiv" not in gpu
    assert gpu_out.tobytes() == cpu_out.tobytes()


@only_tensorflow
def test_tensorflow_takes_a_visible_gpu_for_the_accelerator_path(monkeypatch):
    # Without a device scope, TensorFlow places the graph on a GPU or TPU
    # whenever it sees one: the choice follows what it sees.
    import tensorflow as tf

    from keras_posenc import _platform

    x = types.SimpleNamespace(device="")  # a graph tensor with no device scope
    assert _platform.tensorflow_device_kind(x) == _platform.CPU

    def visible(kind=None):
        return ["/device:GPU:0"] if kind == "GPU" else []

    monkeypatch.setattr(tf.config, "list_logical_devices", visible)
    assert _platform.tensorflow_device_kind(x) == _platform.ACCELERATOR


@only_jax
@pytest.mark.parametrize(
    "family", ["timestep", "rope axes", "grid float32", "alibi", "alibi one row"]
)
def test_new_families_lowered_for_cuda_have_no_conditional_on_data(family):
    # A conditional on data would copy its predicate to the host and wait,
    # per call, on a GPU: the fractional engine, grids and ALiBi have none.
    import jax
    import jax.numpy as jnp
    from jax import export

    cases = {
        "timestep": (
            lambda t: keras_posenc.timestep_embedding(t, 64, scale=1000.0),
            (8,),
        ),
        "rope axes": (
            lambda ids: keras_posenc.rotary_cos_sin(ids, 32, axes_dim=(8, 12, 12))[0],
            (16, 3),
        ),
        "grid float32": (
            lambda x: keras_posenc.GridPositionEncoding(
                base_size=16, positions="float32"
            )(x),
            (1, 4, 4, 16),
        ),
        "alibi": (lambda s: keras_posenc.AlibiBias()(s), (1, 4, 8, 8)),
        "alibi one row": (
            lambda s: keras_posenc.AlibiBias(one_row=True)(s),
            (1, 4, 8, 8),
        ),
    }
    fn, shape = cases[family]
    spec = jax.ShapeDtypeStruct(shape, jnp.float32)
    module = export.export(jax.jit(fn), platforms=["cuda"])(spec).mlir_module()
    assert data_dependent_conditionals(module) == []
