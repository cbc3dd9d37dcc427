"""The validated options of the detection models' 2-D sines.

`grid_sincos_table` and `GridPositionEncoding` take, beside MAE's grid
options (`_checks.grid_options`), the family of 2-D sine (`sine`) and the
conventions of that family; `SineOptions` holds every rule about them, so
each rule is stated once. The families, with the models that use each
value (transformers 5.24):

* `sine="mae"` (the default): MAE's `get_2d_sincos_pos_embed` (the grid
  options apply; nothing here does).
* `sine="detr"`: DETR's `DetrSinePositionEmbedding` (Carion et al., 2020,
  https://arxiv.org/abs/2005.12872): positions are the cumulative sums of
  a pixel mask, 1 at the first valid row or column; with `normalize`
  (every model but SAM 3's decoder: `normalize=False`) they are divided by
  the line's valid length plus ``eps = 1e-6`` and multiplied by `scale`
  (``2 pi`` everywhere), after subtracting `offset` (Deformable DETR:
  0.5). Channel pair ``k`` of an axis of ``D/2`` channels has the angle
  ``position / temperature ** (2k / (D/2))``, sine then cosine
  (interleaved); the feature blocks are ``[y (D/2) | x (D/2)]``.
  `temperature`: 10000 (DETR, Conditional DETR, Deformable DETR, Table
  Transformer, MaskFormer, Mask2Former, OneFormer, SAM 2, SAM 3,
  EdgeTAM), 20 (Grounding DINO, MM Grounding DINO: their
  `positional_embedding_temperature`), ``(height, width)`` pairs
  (DAB-DETR's `temperature_height`, `temperature_width`: 20 each).
* `sine="rt_detr"`: RT-DETR's `build_2d_sinusoidal_position_embedding`
  (Zhao et al., 2023, https://arxiv.org/abs/2304.08069; RT-DETR v2,
  D-FINE, DEIMv2, PP-DocLayout v2 to v4): integer positions from 0,
  frequencies ``temperature ** (-k / (D/4))``, feature blocks
  ``[sin y | cos y | sin x | cos x]`` of ``D/4`` each; no mask, no
  normalization. `temperature`: the config's
  `positional_encoding_temperature` (10000).
"""

import dataclasses
import math

from keras import backend

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.arguments import invalid

SINES = ("mae", "detr", "rt_detr")
# Deformable DETR subtracts half a pixel before normalizing; the others nothing.
OFFSETS = (0.0, 0.5)
# Every DETR-family module adds this to the valid length it divides by.
EPS = 1e-6
DEFAULT_TEMPERATURE = 10000.0
DEFAULT_SCALE = 2 * math.pi
# Channels: DETR's two axes of interleaved (sin, cos) pairs, RT-DETR's four
# blocks: a multiple of 4 either way (an odd `D/2` fails DETR's own stack).
DIM_MULTIPLE = 4
# MAE's grid options and the value each must keep with a detection sine.
_MAE_DEFAULTS = {
    "extra_tokens": 0,
    "base_size": None,
    "interpolation_scale": 1.0,
    "positions": "exact",
    "mode": "compute",
    "max_grid_shape": None,
    "crop": "center",
}


def _temperature(value):
    """A number > 1, or a ``(height, width)`` pair of them (DAB-DETR)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise invalid(
                "temperature", "a number > 1, or a (height, width) pair", value
            )
        return tuple(
            _arguments.check_number_above("temperature", v, 1.0) for v in value
        )
    return _arguments.check_number_above("temperature", value, 1.0)


@dataclasses.dataclass(frozen=True)
class SineOptions:
    """The 2-D sine family and its conventions, checked when constructed.

    `None` is the family's default: `temperature` 10000, `normalize` True,
    `offset` 0.0, `scale` ``2 pi``; `dim`, the feature width when fixed
    (a checkpoint's), `None` for any. A value that the family does not use
    raises a `ValueError` naming it.

    Example:

    >>> from keras_posenc._checks.sine_options import SineOptions
    >>> SineOptions(sine="detr", temperature=20).temperatures
    (20.0, 20.0)
    """

    sine: str = "mae"
    temperature: float | tuple | None = None
    normalize: bool | None = None
    offset: float | None = None
    scale: float | None = None
    dim: int | None = None

    def __post_init__(self):
        _arguments.check_choice("sine", self.sine, SINES)
        detr_only = ("normalize", "offset", "scale")
        if self.sine == "mae":
            self._refuse(("temperature", "dim", *detr_only), "a DETR or RT-DETR")
            return
        if self.dim is not None:
            dim = self.dim
            object.__setattr__(self, "dim", None)
            object.__setattr__(self, "dim", self.check_dim(dim))
        if self.temperature is not None:
            object.__setattr__(self, "temperature", _temperature(self.temperature))
        if self.sine == "rt_detr":
            self._refuse(detr_only, "a DETR")
            if isinstance(self.temperature, tuple):
                expected = "one number with sine='rt_detr' (one for both axes)"
                raise invalid("temperature", expected, self.temperature)
            return
        self._check_detr()

    def _refuse(self, names, kind, why=None):
        """Refuses any of `names` that is not `None`."""
        for name in names:
            value = getattr(self, name)
            if value is not None:
                reason = why or f"with sine={self.sine!r} ({kind} convention)"
                raise invalid(name, f"None {reason}", value)

    def _check_detr(self):
        if self.normalize is not None:
            _arguments.check_bool("normalize", self.normalize)
        if self.offset is not None:
            value = self.offset
            if isinstance(value, bool) or value not in OFFSETS:
                raise invalid("offset", f"one of {OFFSETS}", value)
            object.__setattr__(self, "offset", float(value))
        if self.scale is not None:
            object.__setattr__(
                self, "scale", _arguments.check_number_above("scale", self.scale, 0.0)
            )
        if self.normalize is False:
            why = "with normalize=False (it applies when normalizing)"
            self._refuse(("offset", "scale"), "", why)

    @property
    def temperatures(self):
        """``(height axis, width axis)`` temperatures."""
        value = DEFAULT_TEMPERATURE if self.temperature is None else self.temperature
        return value if isinstance(value, tuple) else (value, value)

    @property
    def normalizes(self):
        return self.sine == "detr" and self.normalize is not False

    @property
    def half_offset(self):
        """Whether positions are ``c - 0.5`` (Deformable DETR)."""
        return self.normalizes and self.offset == 0.5

    @property
    def scale_value(self):
        return DEFAULT_SCALE if self.scale is None else self.scale

    def check_grid(self, grid):
        """Refuses MAE's grid options (a `GridOptions`) other than their
        defaults with a detection sine."""
        if self.sine == "mae":
            return
        for name, default in _MAE_DEFAULTS.items():
            value = getattr(grid, name)
            if value != default or type(value) is not type(default):
                expected = f"{default!r} with sine={self.sine!r} (an MAE grid option)"
                raise invalid(name, expected, value)

    def check_dim(self, dim, name="dim"):
        """The feature width: a positive multiple of 4 (`dim` when set)."""
        if self.dim is not None and dim != self.dim:
            raise invalid(name, f"{self.dim} features (dim={self.dim})", dim)
        if not _arguments.is_int(dim) or dim <= 0 or dim % DIM_MULTIPLE:
            expected = (
                f"a positive multiple of {DIM_MULTIPLE} with sine={self.sine!r} "
                "(two axes of sin/cos pairs)"
            )
            raise invalid(name, expected, dim)
        return _arguments.check_depth(dim, name)

    def to_config(self):
        config = dataclasses.asdict(self)
        if isinstance(config["temperature"], tuple):
            config["temperature"] = list(config["temperature"])
        return config


def check_pixel_mask(options, mask, shape):
    """Refuses a pixel mask that is not bool ``[batch, H, W]`` (the feature
    map's `shape` ``(batch, H, W)``, each `None` where unknown), or one given
    to a family that takes none."""
    if mask is None:
        return None
    if options.sine != "detr":
        expected = f"None with sine={options.sine!r} (only DETR's sine takes a mask)"
        raise invalid("pixel_mask", expected, f"<shape={tuple(mask.shape)}>")
    dtype = getattr(mask, "dtype", None)
    dtype = None if dtype is None else backend.standardize_dtype(dtype)
    if dtype != "bool":
        expected = "a bool tensor [batch, H, W] (True at valid pixels)"
        raise invalid("pixel_mask", expected, f"<dtype={dtype}>")
    mask_shape = tuple(mask.shape)
    ok = len(mask_shape) == 3 and all(
        m is None or s is None or m == s for m, s in zip(mask_shape, shape, strict=True)
    )
    if not ok:
        expected = f"the feature map's [batch, H, W] = {list(shape)}"
        raise invalid("pixel_mask", expected, f"<shape={mask_shape}>")
    return mask


__all__ = ["EPS", "OFFSETS", "SINES", "SineOptions", "check_pixel_mask"]
