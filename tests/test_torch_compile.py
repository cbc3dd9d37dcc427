"""Both layers under `torch.compile`: one graph, no recompile, eager's bits.

A graph break costs a separate graph and Python in between; a recompile a
new graph for every start. Built layers (as `fit` and `predict` compile
them) trace as one graph with a Python-int or a tensor `start_index`,
explicit positions, in compute and lookup mode, and give eager's bits.
"""

import warnings

import pytest
from _helpers import BACKEND, LLAMA3

import keras_posenc

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")


@pytest.fixture(autouse=True)
def eager_rounding_on_cuda():
    """On CUDA, compile as `emulate_precision_casts` asks (README).

    There Inductor's Triton kernels contract a multiply and an add into one
    FMA, rounding once where eager's kernels round twice: by default a
    compiled RoPE layer is up to one float32 ulp from eager (4.8e-7 on an
    H200, on 11 to 33% of its elements; benchmarks/compile_bits.py). With
    `emulate_precision_casts` (torch 2.10+) the contraction is off and
    every family gave eager's bits there. On a CPU nothing changes.
    """
    import torch

    if not torch.cuda.is_available():
        yield
        return
    import torch._inductor.config as inductor

    with inductor.patch(emulate_precision_casts=True):
        yield


def assert_eager_bits(got, want):
    """`got` (compiled) holds `want`'s (eager) bits."""
    assert got.shape == want.shape and got.dtype == want.dtype
    got, want = got.detach().cpu(), want.detach().cpu()
    assert got.numpy().tobytes() == want.numpy().tobytes()


def _cases():
    import torch

    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    q = torch.randn(2, 16, 4, 32, generator=torch.Generator().manual_seed(1))
    sinusoidal = keras_posenc.SinusoidalPositionEncoding
    rotary = keras_posenc.RotaryEmbedding
    return {
        "sinusoidal": (sinusoidal(), x),
        "sinusoidal lookup": (sinusoidal(mode="lookup", max_length=64), x),
        "sinusoidal alone": (sinusoidal(merge=None), x),
        "rope": (rotary(max_wavelength=500000.0), q),
        "rope lookup": (rotary(mode="lookup", max_length=64), q),
        "rope extend": (
            rotary(mode="lookup", max_length=64, out_of_range="extend"),
            q,
        ),
        "sinusoidal extend": (
            sinusoidal(mode="lookup", max_length=64, out_of_range="extend"),
            x,
        ),
        "rope llama3": (rotary(rope_scaling=LLAMA3), q),
    }


CASES = [
    "sinusoidal",
    "sinusoidal lookup",
    "sinusoidal extend",
    "rope extend",
    "sinusoidal alone",
    "rope",
    "rope lookup",
    "rope llama3",
]
HOW = ["int", "tensor", "positions"]


def _call(layer, how):
    """`layer` called at start `s`: an int, a tensor, or explicit positions."""
    import torch

    if how == "positions":
        return lambda x, s: layer(x, positions=torch.arange(16) + s)
    return lambda x, s: layer(x, start_index=s)


def _start(how, value):
    """The start a caller passes: a Python int, else a tensor made outside."""
    import torch

    return value if how == "int" else torch.tensor(value)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("case", CASES)
def test_a_built_layer_traces_as_one_graph(case, how):
    import torch

    layer, x = _cases()[case]
    call = _call(layer, how)
    call(x, _start(how, 3))  # built eagerly, as Keras builds models before
    torch._dynamo.reset()
    explained = torch._dynamo.explain(call)(x, _start(how, 5))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("how", ["tensor", "positions"])
@pytest.mark.parametrize(
    "case",
    ["sinusoidal", "sinusoidal lookup", "rope", "rope lookup", "rope extend"],
)
def test_compiled_equals_eager_bit_for_bit_and_a_new_start_does_not_recompile(
    case, how
):
    import torch
    from torch._dynamo.utils import counters

    layer, x = _cases()[case]
    call = _call(layer, how)
    call(x, _start(how, 3))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(call)
    for start in (3, 40, 7):
        out = compiled(x, _start(how, start))
        want = call(x, _start(how, start))
        assert_eager_bits(out, want)
    if how == "tensor":
        assert counters["stats"]["unique_graphs"] == 1


def test_compiled_rope_equals_eager_bit_for_bit():
    import torch

    layer, q = _cases()["rope"]
    layer(q, start_index=0)
    compiled = torch.compile(lambda q, s: layer(q, start_index=s))
    for start in (0, 1000, 2**31 - 64):
        want = layer(q, start_index=torch.tensor(start))
        got = compiled(q, torch.tensor(start))
        assert_eager_bits(got, want)


def _graph_breaks(layer, x):
    """Graph breaks of three calls of an unbuilt `layer` under torch.compile."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x: layer(x), backend="eager")
    for _ in range(3):
        compiled(x)
    return sum(counters["graph_break"].values())


@pytest.mark.parametrize("case", ["sinusoidal", "rope lookup"])
def test_a_layer_built_inside_a_compiled_call_breaks_less_than_a_plain_layer(case):
    # Building is host work (exact constants in decimal): it runs outside
    # the graph, one break. A plain Keras layer breaks more while it builds.
    import keras

    layer, x = _cases()[case]
    plain = keras.layers.Dense(x.shape[-1])
    assert _graph_breaks(layer, x) <= _graph_breaks(plain, x)


def test_no_dynamo_warning_while_compiling():
    import torch

    layer, q = _cases()["rope"]
    layer(q)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(lambda q, s: layer(q, start_index=s), backend="eager")(
            q, torch.tensor(2)
        )
    dynamo = [str(w.message)[:120] for w in caught if "ynamo" in str(w.message)]
    assert dynamo == []


def test_nothing_is_kept_from_inside_torch_compile():
    import torch

    keras_posenc.clear_cache()
    layer = keras_posenc.SinusoidalPositionEncoding()
    x = torch.zeros((1, 300, 16))
    layer.build(x.shape)
    out = torch.compile(lambda x: layer(x, start_index=5), backend="eager")(x)
    assert keras_posenc.cache_info().entries == 0
    assert torch.equal(out, layer(x, start_index=5))  # the "eager" backend


@pytest.mark.parametrize("case", ["sinusoidal extend", "rope extend"])
def test_compiled_extend_past_the_table_equals_eager(case):
    # Under torch.compile a run-time start past the table takes the computed
    # rows (both are computed, one selected: no data-dependent branch).
    import torch

    layer, x = _cases()[case]
    layer(x)
    compiled = torch.compile(lambda x, s: layer(x, start_index=s), fullgraph=True)
    for start in (10, 60, 1000):
        got = compiled(x, torch.tensor(start))
        want = layer(x, start_index=start)
        assert_eager_bits(got, want)


def test_compiled_alibi_equals_eager_bit_for_bit():
    # A built AlibiBias traces as one graph (its slopes are tensors made
    # once, not numpy), at a known start and at the default one.
    import torch

    layer = keras_posenc.AlibiBias()
    scores = torch.randn(2, 4, 8, 8)
    eager = layer(scores, start_index=3)
    compiled = torch.compile(lambda x: layer(x, start_index=3), fullgraph=True)
    assert_eager_bits(compiled(scores), eager)
    default = torch.compile(lambda x: layer(x), fullgraph=True)
    assert_eager_bits(default(scores), layer(scores))
    row = keras_posenc.AlibiBias(one_row=True)
    eager = row(scores, start_index=3)  # built first
    one_row = torch.compile(lambda x: row(x, start_index=3), fullgraph=True)
    assert_eager_bits(one_row(scores), eager)


@pytest.mark.parametrize("family", ["timestep", "rope axes"])
def test_new_families_trace_as_one_graph(family):
    # The timestep layer holds its engine (no store lookup, whose lock breaks
    # the graph); N-axis RoPE reads float ids through the fractional engine.
    import torch

    if family == "timestep":
        layer = keras_posenc.TimestepEmbedding(16, flip_sin_to_cos=True)
        args = (torch.tensor([1.5, 998.3897]),)
        call = layer
    else:
        layer = keras_posenc.RotaryEmbedding(axes_dim=(4, 4))
        ids = torch.tensor([[0.0, 1.5], [1.0, 2.0], [2.0, 2.5]])
        args = (torch.ones((1, 3, 2, 8)), ids)

        def call(q, ids):
            return layer(q, positions=ids)

    eager = call(*args)
    explained = torch._dynamo.explain(call)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(call, fullgraph=True)(*args)
    assert_eager_bits(compiled, eager)


def test_compiled_n_axis_rope_at_flux_width_equals_eager():
    # FLUX's axes (16, 56, 56) over 300 fractional ids: the case an H200 run
    # found off by one ulp under Inductor's default FMA contraction.
    import torch

    layer = keras_posenc.RotaryEmbedding(axes_dim=(16, 56, 56))
    index = torch.arange(300)
    ids = torch.stack([torch.zeros(300), index // 20 + 0.5, index % 20 * 1.25], -1)
    q = torch.randn(1, 300, 2, 128, generator=torch.Generator().manual_seed(2))
    eager = layer(q, positions=ids)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, i: layer(q, positions=i))(q, ids)
    assert_eager_bits(compiled, eager)
