"""keras_posenc: exact sinusoidal and rotary position encodings for Keras 3.

The encoding of Vaswani et al., "Attention Is All You Need" (2017),
section 3.5 (https://arxiv.org/abs/1706.03762), and rotary embeddings (Su
et al., 2021, https://arxiv.org/abs/2104.09864), exact to float32 rounding
on TensorFlow, JAX and PyTorch.
"""

__version__ = "0.2.0"

from keras_posenc.export import export_encoder, export_saved_model
from keras_posenc.layer import SinusoidalPositionEncoding
from keras_posenc.rotary import RotaryEmbedding, rotary_cos_sin
from keras_posenc.tables import frequencies, positional_encoding, sinusoidal_table

__all__ = [
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "__version__",
    "export_encoder",
    "export_saved_model",
    "frequencies",
    "positional_encoding",
    "rotary_cos_sin",
    "sinusoidal_table",
]
