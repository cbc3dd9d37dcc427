"""keras-hub's SAM 3 `SAM3SinePositionEmbedding`, computed exactly."""

import math

import keras
from keras import ops

import keras_posenc
from keras_posenc._checks import arguments as _arguments
from keras_posenc.compat._base import PACKAGE, HubLayer

_TWO_PI = 2 * math.pi  # keras-hub's `scale` when none is given


def _dtype_of(values, fallback):
    dtype = keras.backend.standardize_dtype(values.dtype)
    return dtype if "float" in dtype else fallback


@keras.saving.register_keras_serializable(
    package=PACKAGE, name="KerasHubSAM3SinePositionEmbedding"
)
class SAM3SinePositionEmbedding(HubLayer):
    """keras-hub's SAM 3 `SAM3SinePositionEmbedding`, exact.

    DETR's 2-D sine (Carion et al., 2020, https://arxiv.org/abs/2005.12872)
    as keras-hub's SAM 3 (https://github.com/facebookresearch/sam3)
    computes it, in its three forms.
    Channel pair `k` of an axis (`num_pos_feats` channels) is ``sin, cos``
    of ``pos / temperature ** (2k / num_pos_feats)``, interleaved:

    - `call(inputs, height, width)`: the feature map's sine,
      ``[batch, height, width, 2 * num_pos_feats]``, blocks ``[y | x]``,
      ``pos = c / (n + 1e-6) * scale`` at the 1-based row or column `c` of
      `n` (``pos = c`` without `normalize`): `keras_posenc.grid_sincos_table`
      with `sine="detr"`.
    - `encode_1d_positions(x, y)`: ``pos = x * scale`` at float positions
      ``[N]``, returns ``(pos_x, pos_y)``, each ``[N, num_pos_feats]``.
    - `encode_boxes(boxes)`: boxes ``[batch, N, 4]`` (cx, cy, w, h) at
      ``pos = value * scale``, blocks ``[y | x | w | h]``.

    The last two come from the exact engine of `keras_posenc.TimestepEmbedding`
    (frequencies ``scale * temperature ** (-k / (num_pos_feats / 2))``, the
    positions as given). keras-hub forms positions, frequencies and angles
    in the input's dtype (the compute dtype for `call`): up to about 1e-6
    off in float32 at valid cells, bfloat16 under mixed precision. Here
    every value is within 2e-7 of the float64 value of that formula,
    computed in float32 and cast once (to the compute dtype for `call`, to
    the positions' dtype for the others, as keras-hub returns them).
    `use_exact` puts it in place of the layers keras-hub's
    `SAM3VisionEncoder`, `SAM3GeometryEncoder` and `SAM3DetrDecoder` hold.

    Args:
        num_pos_feats: int. Channels per axis, even. Defaults to `64`.
        temperature: float > 1. Defaults to `10000`.
        normalize: bool. Normalizes `call`'s positions. Defaults to `False`.
        scale: float > 0 or `None` (``2 * pi``); only with `normalize`, as
            keras-hub requires (its config holds ``2 * pi`` either way,
            which is read as `None`). Defaults to `None`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: tensor ``[batch, ...]``: only its batch size is read.
        height: int. Rows of the feature map.
        width: int. Columns of the feature map.
        training: ignored, as keras-hub ignores it.

    Example:

    >>> from keras_posenc import compat
    >>> sine = compat.SAM3SinePositionEmbedding(num_pos_feats=4, normalize=True)
    >>> tuple(sine(np.zeros((2, 3, 5, 8), "float32"), height=3, width=5).shape)
    (2, 3, 5, 8)
    >>> pos_x, pos_y = sine.encode_1d_positions(
    ...     np.array([0.25], "float32"), np.array([0.5], "float32"))
    >>> [round(float(v), 4) for v in pos_x[0]]  # sin, cos of pi/2 and pi/200
    [1.0, 0.0, 0.0157, 0.9999]

    References:
        - [Carion et al., 2020](https://arxiv.org/abs/2005.12872) (DETR)
        - [SAM 3](https://github.com/facebookresearch/sam3)
    """

    def __init__(
        self, num_pos_feats=64, temperature=10000, normalize=False, scale=None, **kwargs
    ):
        num_pos_feats = _arguments.check_positive_int("num_pos_feats", num_pos_feats)
        if num_pos_feats % 2:
            expected = "an even number (sine and cosine pairs)"
            raise _arguments.invalid("num_pos_feats", expected, num_pos_feats)
        temperature = _arguments.check_wavelength(temperature, "temperature")
        if temperature <= 1:
            raise _arguments.invalid("temperature", "a number > 1", temperature)
        normalize = _arguments.check_bool("normalize", normalize)
        if scale is not None and not normalize:
            expected = "None unless normalize=True (keras-hub's rule)"
            raise _arguments.invalid("scale", expected, scale)
        scale = (
            _TWO_PI if scale is None else _arguments.check_wavelength(scale, "scale")
        )
        options = {
            "num_pos_feats": num_pos_feats,
            "temperature": temperature,
            "normalize": normalize,
            "scale": _TWO_PI if scale is None else scale,
        }
        super().__init__(options, **kwargs)

    @classmethod
    def translate(cls, config):
        # keras-hub's config holds its default 2 pi as `scale` without
        # `normalize` too, which its own constructor refuses.
        config = dict(config)
        if not config.get("normalize", False) and config.get("scale") == _TWO_PI:
            config["scale"] = None
        return config

    def exact_layer(self, width):
        return keras_posenc.TimestepEmbedding(
            width,
            max_period=self.temperature,
            downscale_freq_shift=0.0,
            scale=self.scale,
        )

    def build(self, input_shape=None):
        # keras-hub's owners call `build()` without a shape.
        return

    def _sines(self, values):
        """Interleaved ``sin, cos`` of ``values * scale`` per pair:
        ``values.shape + [num_pos_feats]``, float32."""
        rows = self._exact_layers(self.num_pos_feats)(values)  # [..., sin | cos]
        half = self.num_pos_feats // 2
        pairs = ops.stack([rows[..., :half], rows[..., half:]], axis=-1)
        return ops.reshape(pairs, (*ops.shape(values), self.num_pos_feats))

    def encode_1d_positions(self, x, y):
        """``(pos_x, pos_y)``, each ``[N, num_pos_feats]``, of positions ``[N]``."""
        dtype = _dtype_of(x, self.compute_dtype)
        pos_x = ops.reshape(self._sines(x), (-1, self.num_pos_feats))
        pos_y = ops.reshape(self._sines(y), (-1, self.num_pos_feats))
        return ops.cast(pos_x, dtype), ops.cast(pos_y, dtype)

    def encode_boxes(self, boxes):
        """``[batch, N, 4 * num_pos_feats]`` of boxes ``[batch, N, 4]``."""
        if len(boxes.shape) != 3:
            expected = "a tensor [batch, N, 4] (cx, cy, w, h)"
            raise _arguments.invalid("boxes", expected, f"<shape={boxes.shape}>")
        sines = self._sines(boxes)  # [batch, N, 4, num_pos_feats]: x, y, w, h
        sines = ops.take(sines, [1, 0, 2, 3], axis=2)
        shape = ops.shape(boxes)
        out = ops.reshape(sines, (shape[0], shape[1], 4 * self.num_pos_feats))
        return ops.cast(out, _dtype_of(boxes, self.compute_dtype))

    def call(self, inputs, height, width, training=None):
        height = _arguments.check_positive_int("height", height)
        width = _arguments.check_positive_int("width", width)
        table = keras_posenc.grid_sincos_table(
            (height, width),
            2 * self.num_pos_feats,
            sine="detr",
            temperature=self.temperature,
            normalize=self.normalize,
            scale=self.scale if self.normalize else None,
        )
        table = ops.reshape(table, (1, height, width, 2 * self.num_pos_feats))
        table = ops.tile(table, (ops.shape(inputs)[0], 1, 1, 1))
        return ops.cast(table, self.compute_dtype)

    def compute_output_spec(self, inputs, height, width, training=None):
        shape = (inputs.shape[0], height, width, 2 * self.num_pos_feats)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)
