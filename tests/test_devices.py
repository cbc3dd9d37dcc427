"""Device-agnostic code: no tensor is turned into numpy behind the caller's back.

On a GPU, `np.asarray(cuda_tensor)` (a numpy array mixed into a tensor op,
a result converted in an example) raises "can't convert cuda:0 device
type tensor to numpy". This machine has no GPU: the test makes
`torch.Tensor.__array__` raise for every call made from inside the package
and then calls every public function and layer with torch tensors. An
explicit `.cpu().numpy()` (reading a known `start_index`) is a deliberate
copy and stays allowed.
"""

import os

import numpy as np
import pytest
from _helpers import BACKEND, LEGACY, LLAMA3

import keras_posenc

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="torch tensors")
PACKAGE = os.path.dirname(os.path.abspath(keras_posenc.__file__))


@pytest.fixture
def no_implicit_numpy(monkeypatch):
    """`torch.Tensor.__array__` raises when a package module asks for it."""
    import sys

    import torch

    original = torch.Tensor.__array__
    calls = []

    def guarded(self, *args, **kwargs):
        # The Python frame that asked numpy for the array (numpy is C code);
        # `keras.ops.convert_to_numpy` asks from Keras, after `.cpu()`.
        frame = sys._getframe(1)
        if frame.f_code.co_filename.startswith(PACKAGE):
            calls.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
            raise TypeError("implicit tensor-to-numpy conversion in keras_posenc")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__array__", guarded)
    return calls


def _public_calls():
    """Every public function and layer, fed torch tensors (name -> call)."""
    import torch

    x = torch.ones((2, 8, 16))
    q = torch.ones((2, 8, 4, 16))
    positions = torch.arange(8).reshape(1, 8).repeat(2, 1)
    starts = torch.tensor([0, 5])
    sinusoidal = keras_posenc.SinusoidalPositionEncoding
    rotary = keras_posenc.RotaryEmbedding
    scores = torch.ones((2, 4, 8, 8))
    cos, sin = keras_posenc.rotary_cos_sin(torch.arange(8), 16)
    calls = {
        "sinusoidal_table": lambda: keras_posenc.sinusoidal_table(
            torch.tensor(8), 16, start_index=torch.tensor(3)
        ),
        "positional_encoding": lambda: keras_posenc.positional_encoding(
            2, 8, 16, start_index=torch.tensor(3)
        ),
        "frequencies": lambda: keras_posenc.frequencies(16),
        "rotary_cos_sin": lambda: keras_posenc.rotary_cos_sin(positions, 16),
        "rotary_cos_sin mrope": lambda: keras_posenc.rotary_cos_sin(
            torch.stack([positions] * 3),
            16,
            rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]},
        ),
        "apply_rotary": lambda: keras_posenc.apply_rotary(
            q, cos[:, None], sin[:, None]
        ),
        "sinusoidal compute": lambda: sinusoidal()(x, start_index=torch.tensor(3)),
        "sinusoidal per example": lambda: sinusoidal()(x, start_index=starts),
        "sinusoidal positions": lambda: sinusoidal(merge=None)(x, positions=positions),
        "sinusoidal concat": lambda: sinusoidal(merge="concat", depth=4)(x),
        "sinusoidal lookup": lambda: sinusoidal(mode="lookup", max_length=32)(
            x, start_index=torch.tensor(3)
        ),
        "sinusoidal step": lambda: sinusoidal()(x[:, :1], start_index=torch.tensor(9)),
        "rope": lambda: rotary(rope_scaling=LLAMA3)(q, start_index=torch.tensor(3)),
        "rope positions": lambda: rotary()(q, positions=positions),
        "rope per example": lambda: rotary()(q, start_index=starts),
        "rope lookup": lambda: rotary(mode="lookup", max_length=32)(q),
        "rope step": lambda: rotary()(q[:, :1], start_index=torch.tensor(9)),
        "rope checkpoint frequencies": lambda: rotary(
            inverse_frequencies=torch.tensor([1.0, 0.1, 0.01, 0.001])
        )(torch.ones((1, 8, 8))),
        "cache": lambda: keras_posenc.cache_info(),
        "grid_sincos_table": lambda: keras_posenc.grid_sincos_table(
            (3, 4), 16, base_size=16, positions="float32", extra_tokens=1
        ),
        "grid compute": lambda: keras_posenc.GridPositionEncoding(base_size=8)(
            torch.ones((2, 3, 4, 16))
        ),
        "grid lookup": lambda: keras_posenc.GridPositionEncoding(
            mode="lookup", max_grid_shape=(5, 5)
        )(torch.ones((2, 3, 4, 16))),
        "grid tokens": lambda: keras_posenc.GridPositionEncoding(grid_shape=(2, 4))(x),
        "alibi": lambda: keras_posenc.AlibiBias()(scores, start_index=torch.tensor(3)),
        "alibi one row": lambda: keras_posenc.AlibiBias(one_row=True)(
            scores, start_index=torch.tensor(3)
        ),
        "alibi per example": lambda: keras_posenc.AlibiBias()(
            scores, start_index=starts
        ),
        "alibi_bias": lambda: keras_posenc.alibi_bias(
            4, torch.tensor(8), 8, start_index=torch.tensor(2)
        ),
        "timestep_embedding": lambda: keras_posenc.timestep_embedding(
            torch.tensor([998.3897, -3.25]), 9, flip_sin_to_cos=True
        ),
        "timestep int": lambda: keras_posenc.timestep_embedding(
            torch.tensor([999, 3]), 8
        ),
        "timestep layer": lambda: keras_posenc.TimestepEmbedding(8)(
            torch.tensor([0.5, 12.25])
        ),
        "rope axes": lambda: rotary(axes_dim=(2, 2, 4))(
            torch.ones((1, 3, 2, 8)), positions=torch.tensor([[0.0, 1.5, 2.0]] * 3)
        ),
    }
    if not LEGACY:
        from keras_posenc import compat

        calls["compat sine"] = lambda: compat.SinePositionEncoding()(
            x, start_index=torch.tensor(2)
        )
        calls["compat rotary"] = lambda: compat.RotaryEmbedding()(
            q, start_index=torch.tensor(2)
        )
        calls["compat alibi"] = lambda: compat.AlibiBias()(scores)
        calls["compat sd3 timestep"] = lambda: compat.SD3TimestepEmbedding(8)(
            torch.tensor([[998.3897], [3.0]])
        )
        calls["compat flux rope"] = lambda: compat.FluxRotaryPositionalEmbedding()(
            torch.tensor([[0.0, 1.5, 2.0]]), dim=8, theta=10000
        )
        calls["compat flux timestep"] = lambda: compat.FluxTimestepEmbedding()(
            torch.tensor([0.5, 0.25]), dim=8
        )
        calls["compat phi3"] = lambda: compat.Phi3SuScaledRotaryEmbedding(
            [1.0] * 8, [2.0] * 8
        )(q, start_index=torch.tensor(2))
        calls["compat esm"] = lambda: compat.ESMRotaryEmbedding()(q, q)
        calls["compat llama"] = lambda: compat.LlamaRotaryEmbedding()(
            q, start_index=torch.tensor(2)
        )
    return calls


@pytest.mark.parametrize("name", sorted(_public_calls() if BACKEND == "torch" else {}))
def test_no_public_call_turns_a_tensor_into_numpy(name, no_implicit_numpy):
    result = _public_calls()[name]()
    assert result is not None
    assert no_implicit_numpy == []


def test_the_guard_catches_an_implicit_conversion(no_implicit_numpy):
    # The fixture can fail: numpy's asarray of a tensor inside a package
    # module raises; the same call from a test does not.
    import torch

    from keras_posenc._checks import positions as _positions

    tensor = torch.ones(2)
    with pytest.raises(TypeError, match="implicit tensor-to-numpy"):
        _positions.Positions(values=tensor, known=tensor).known_values()
    assert np.asarray(tensor).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("name", sorted(_public_calls() if BACKEND == "torch" else {}))
def test_tensors_on_another_device_than_keras_are_moved_as_keras_ops_move_them(name):
    # On a machine with a GPU, Keras's device is `cuda:0` and a tensor made
    # with `torch.ones` is on the CPU: `keras.ops` (a Dense layer) moves it
    # to Keras's device; so does every public call (constants live there;
    # an H200 run failed 61 tests with "found at least two devices, cuda:0
    # and cpu" before). Here Keras's device is `meta` (shapes, no values)
    # and the inputs are on the CPU: the result is on `meta`, shaped as
    # the same call's on the CPU.
    import keras
    import torch

    call = _public_calls()[name]
    expected = call()
    with keras.device("meta"):
        result = call()
    for want, got in zip(_leaves(expected), _leaves(result), strict=True):
        if isinstance(want, torch.Tensor) and want.numel() > 0:
            assert got.device.type == "meta", name
            assert tuple(got.shape) == tuple(want.shape), name


def test_keras_own_layers_move_a_tensor_to_its_device_too():
    # The convention the test above holds the package to is Keras's.
    import keras
    import torch

    with keras.device("meta"):
        dense = keras.layers.Dense(3)
        out = dense(torch.ones((2, 4)))
    assert out.device.type == "meta"


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
