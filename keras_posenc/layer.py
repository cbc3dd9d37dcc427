"""The sinusoidal layer's module before 0.5: `keras_posenc.sinusoidal`.

Kept so that `from keras_posenc.layer import SinusoidalPositionEncoding`
(Vaswani et al., 2017, https://arxiv.org/abs/1706.03762) goes on working;
the layer is the same class, registered once.

Example:

>>> from keras_posenc.layer import SinusoidalPositionEncoding
>>> SinusoidalPositionEncoding is keras_posenc.SinusoidalPositionEncoding
True
"""

from keras_posenc.sinusoidal import SinusoidalPositionEncoding

__all__ = ["SinusoidalPositionEncoding"]
