"""keras-hub's D-FINE 2-D sine (`DFineHybridEncoder`), computed exactly.

keras-hub computes it in a static method of its hybrid encoder, a layer
with weights: `use_exact` gives that layer a subclass of its own class
(made when swapped, so this package never imports keras-hub) whose only
change is `ExactSincos.build_2d_sincos_position_embedding`.
"""

from keras import ops

import keras_posenc
from keras_posenc._checks import arguments as _arguments


def rt_detr_sincos(
    width, height, embedding_dim=256, temperature=10000.0, dtype="float32"
):
    """keras-hub's `DFineHybridEncoder.build_2d_sincos_position_embedding`, exact.

    RT-DETR's 2-D sine (Zhao et al., 2023, https://arxiv.org/abs/2304.08069)
    as D-FINE uses it: ``omega_k = temperature ** (-k / (D / 4))``, rows in
    the order of ``meshgrid(arange(width), arange(height), indexing="ij")``
    (width index first), channels ``[sin(w omega) | cos(w omega) | sin(h
    omega) | cos(h omega)]``: `keras_posenc.grid_sincos_table((width,
    height), D, sine="rt_detr")`, made here from two
    `keras_posenc.sinusoidal_table`s (`layout="concatenated"`, width
    ``D / 2``) so that `width` and `height` may be traced (a map of
    unknown size, `image_shape=(None, None, 3)`). Within 2e-7 of the exact
    value, cast once to `dtype` (keras-hub forms the angles in it).

    Returns:
        Tensor ``[1, width * height, embedding_dim]``.
    """
    if not _arguments.is_int(embedding_dim) or embedding_dim % 4:
        expected = "a multiple of 4 (2-D sin-cos position embedding)"
        raise _arguments.invalid("embedding_dim", expected, embedding_dim)
    half = embedding_dim // 2
    options = {"max_wavelength": temperature, "layout": "concatenated"}
    rows_w = keras_posenc.sinusoidal_table(width, half, **options)  # [W, D/2]
    rows_h = keras_posenc.sinusoidal_table(height, half, **options)  # [H, D/2]
    shape = (ops.shape(rows_w)[0], ops.shape(rows_h)[0], half)
    grid_w = ops.broadcast_to(rows_w[:, None, :], shape)
    grid_h = ops.broadcast_to(rows_h[None, :, :], shape)
    table = ops.concatenate([grid_w, grid_h], axis=-1)
    return ops.cast(ops.reshape(table, (1, -1, embedding_dim)), dtype)


class ExactSincos:
    """What `use_exact` adds to keras-hub's `DFineHybridEncoder` (a mixin
    before its class): the exact sine; weights, config and call unchanged."""

    build_2d_sincos_position_embedding = staticmethod(rt_detr_sincos)

    @classmethod
    def options_of(cls, layer):
        return {}

    def adopt(self, options):
        """Nothing to set: the layer keeps its own state."""
