"""keras-hub drop-ins: its position layers' arguments and values, computed exactly.

`SinePositionEncoding` and `RotaryEmbedding` take keras-hub's constructor
arguments (with its defaults) and call arguments (`start_index`, and
`positions` as keras-hub takes them: integers, or floats with integral
values) and return keras-hub's layout, computed by the exact engine of
`keras_posenc.SinusoidalPositionEncoding` (Vaswani et al., 2017,
https://arxiv.org/abs/1706.03762) and `keras_posenc.RotaryEmbedding` (Su
et al., 2021, https://arxiv.org/abs/2104.09864): equal to keras-hub's
values within float32 noise at short positions, and within 2e-7 of the
exact values at every int32 position, where keras-hub's float32 angles are
off by ``p * 2**-24`` radians (0.06 at position 10**6).
`LlamaRotaryEmbedding`, `Phi3SuScaledRotaryEmbedding` and
`ESMRotaryEmbedding` stand in for the keras-hub subclasses of those names;
`FluxRotaryPositionalEmbedding` and `FluxTimestepEmbedding` for FLUX's
`RotaryPositionalEmbedding` and `TimestepEmbedding` (`flux_maths`);
`SD3TimestepEmbedding` for Stable Diffusion 3's `TimestepEmbedding`
(`mmdit`: its sinusoid exact, its MLP and weights kept).
`VideoPrismSinusoidalPositionalEmbedding` for VideoPrism's
`SinusoidalPositionalEmbedding` (tensor2tensor's timing signal), and
`SAM3SinePositionEmbedding` for SAM 3's (DETR's 2-D sine). D-FINE's
2-D sine, a method of its `DFineHybridEncoder`, is made exact by
`use_exact` in place (a subclass overriding only that method).
`AlibiBias` stands in for keras-hub's ALiBi layer (Press et al., 2021,
https://arxiv.org/abs/2108.12409), with the distances never rounded.

`use_exact(model)` makes every keras-hub position layer inside a keras-hub
model exact, in place, and refuses by name any layer it cannot map exactly.

keras-hub is Keras 3 only: so is this package (under `TF_USE_LEGACY_KERAS=1`
it imports, and its layers refuse to be made).

Example:

>>> import keras_hub
>>> from keras_posenc import compat
>>> x = np.random.default_rng(0).normal(size=(1, 8, 2, 16)).astype("float32")
>>> theirs = keras_hub.layers.RotaryEmbedding(scaling_factor=2.0)(x, start_index=5)
>>> ours = compat.RotaryEmbedding(scaling_factor=2.0)(x, start_index=5)
>>> difference = keras.ops.max(keras.ops.abs(ours - theirs))
>>> bool(keras.ops.convert_to_numpy(difference) < 1e-5)
True
"""

from keras_posenc.compat._alibi import AlibiBias
from keras_posenc.compat._flux import (
    FluxRotaryPositionalEmbedding,
    FluxTimestepEmbedding,
)
from keras_posenc.compat._phi3 import Phi3SuScaledRotaryEmbedding
from keras_posenc.compat._rotary import RotaryEmbedding
from keras_posenc.compat._sam3 import SAM3SinePositionEmbedding
from keras_posenc.compat._sd3 import SD3TimestepEmbedding
from keras_posenc.compat._sine import SinePositionEncoding
from keras_posenc.compat._subclasses import ESMRotaryEmbedding, LlamaRotaryEmbedding
from keras_posenc.compat._swap import use_exact
from keras_posenc.compat._video_prism import VideoPrismSinusoidalPositionalEmbedding

__all__ = [
    "AlibiBias",
    "ESMRotaryEmbedding",
    "FluxRotaryPositionalEmbedding",
    "FluxTimestepEmbedding",
    "LlamaRotaryEmbedding",
    "Phi3SuScaledRotaryEmbedding",
    "RotaryEmbedding",
    "SAM3SinePositionEmbedding",
    "SD3TimestepEmbedding",
    "SinePositionEncoding",
    "VideoPrismSinusoidalPositionalEmbedding",
    "use_exact",
]
