"""keras_posenc: the sinusoidal positional encoding of Vaswani et al. (2017), exact.

https://arxiv.org/abs/1706.03762, section 3.5.
"""

__version__ = "0.1.0"

from keras_posenc.export import export_saved_model
from keras_posenc.layer import SinusoidalPositionEncoding
from keras_posenc.tables import positional_encoding, sinusoidal_table

__all__ = [
    "SinusoidalPositionEncoding",
    "__version__",
    "export_saved_model",
    "positional_encoding",
    "sinusoidal_table",
]
