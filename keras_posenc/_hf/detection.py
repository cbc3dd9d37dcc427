"""`GridPositionEncoding` arguments from a detection model's `config.json`,
as the transformers release `TRANSFORMERS_VERSION` builds its 2-D sine.

`MODEL_TYPES` holds, per model type, where its position module reads its
width and temperature and which conventions its code fixes (a table:
house rule 17); `_read` applies it. The width is the full channel count
`D` (DETR's modules take ``D // 2`` as `num_position_features`; RT-DETR's
`embed_dim` is `D`). A nested key (``"decoder_config.d_model"``) is read
from that sub-config as transformers builds it: the sub-config's own
default when it is absent or `None`. Every key read is applied; a value
the module would not apply as a sine (`position_embedding_type="learned"`,
a width the module fails on or that differs between two sines of one
model) is refused by name, and so is every other `model_type`, saying
what it uses instead (`REFUSED`).
"""

import dataclasses

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import config_file as _hf_json
from keras_posenc._hf.model_types import TRANSFORMERS_VERSION

# The arguments `from_hf_config` reads from the config.
READ = ("sine", "temperature", "normalize", "offset", "scale", "dim", "merge")


@dataclasses.dataclass(frozen=True)
class SineType:
    """How one model type's position module is configured.

    Attributes:
        module: the transformers class or function (for messages, docs).
        sine: `"detr"` or `"rt_detr"` (`SineOptions.sine`).
        width: key of the width `D` (dotted for a sub-config).
        aliases: other names transformers maps onto `width`
            (`attribute_map`), at the same level.
        also: keys of other sines' widths in the same model, which must
            equal `width` (one layer reproduces one width).
        temperature: keys of the temperature: `()` (10000 in the code),
            one key, or `(height key, width key)` (DAB-DETR).
        temperature_default: the configuration class's default.
        scale: key of `scale` (`None` for the default: the code's ``2 pi``).
        offset: DETR's offset fixed in the code (Deformable DETR: 0.5).
        learned: whether `position_embedding_type` chooses sine or learned.
    """

    module: str
    sine: str
    width: str
    aliases: tuple = ()
    also: tuple = ()
    temperature: tuple = ()
    temperature_default: float = 10000.0
    scale: str | None = None
    offset: float | None = None
    learned: bool = False


def _detr(module, **kwargs):
    return SineType(
        module, "detr", "d_model", aliases=("hidden_size",), learned=True, **kwargs
    )


def _rt_detr(module):
    return SineType(
        module,
        "rt_detr",
        "encoder_hidden_dim",
        temperature=("positional_encoding_temperature",),
    )


def _grounding(module):
    return _detr(
        module,
        temperature=("positional_embedding_temperature",),
        temperature_default=20.0,
    )


def _neck(model, parent):
    module = f"{model}SinePositionEmbedding"
    return SineType(module, "detr", f"{parent}fpn_hidden_size")


_RT_DETR = "build_2d_sinusoidal_position_embedding"
# fmt: off
MODEL_TYPES = {
    "detr": _detr("DetrSinePositionEmbedding"),
    "conditional_detr": _detr("ConditionalDetrSinePositionEmbedding"),
    "deformable_detr": _detr("DeformableDetrSinePositionEmbedding", offset=0.5),
    "table-transformer": _detr("TableTransformerSinePositionEmbedding"),
    "grounding-dino": _grounding("GroundingDinoSinePositionEmbedding"),
    "mm-grounding-dino": _grounding("MMGroundingDinoSinePositionEmbedding"),
    "dab-detr": SineType(
        "DabDetrSinePositionEmbedding", "detr", "hidden_size",
        temperature=("temperature_height", "temperature_width"),
        temperature_default=20.0, scale="sine_position_embedding_scale",
    ),
    # MaskFormer's transformer module: its DETR decoder config's width.
    "maskformer": SineType(
        "MaskFormerSinePositionEmbedding", "detr", "decoder_config.d_model",
        aliases=("decoder_config.hidden_size",),
    ),
    # Two sines: the pixel decoder's (feature_size / conv_dim) and the
    # transformer decoder's (hidden_dim).
    "mask2former": SineType(
        "Mask2FormerSinePositionEmbedding", "detr", "hidden_dim",
        aliases=("hidden_size",), also=("feature_size",),
    ),
    "oneformer": SineType(
        "OneFormerSinePositionEmbedding", "detr", "hidden_dim",
        aliases=("hidden_size",), also=("conv_dim",),
    ),
    # The vision encoder's FPN neck (the full model's, or the vision model's).
    "sam2": _neck("Sam2", "vision_config."),
    "sam2_vision_model": _neck("Sam2", ""),
    "edgetam": _neck("EdgeTam", "vision_config."),
    "edgetam_vision_model": _neck("EdgeTam", ""),
    "sam3": _neck("Sam3", "vision_config."),
    "sam3_vision_model": _neck("Sam3", ""),
    "rt_detr": _rt_detr(_RT_DETR),
    "rt_detr_v2": _rt_detr(_RT_DETR),
    "d_fine": _rt_detr(_RT_DETR),
    "deimv2": _rt_detr(_RT_DETR),
    "pp_doclayout_v2": _rt_detr(_RT_DETR),
    "pp_doclayout_v3": _rt_detr(_RT_DETR),
    "pp_doclayout_v4": _rt_detr(_RT_DETR),
}
# fmt: on

# Types with a 2-D sine (or a sine-like table) that are not read, and why.
_VIDEO = (
    "two DETR sines, the vision neck's (vision_config.fpn_hidden_size) and the "
    "memory encoder's (memory_encoder_output_channels); one layer is one "
    "sine: build GridPositionEncoding(sine='detr', merge=None) for each"
)
_MAE = (
    "its fixed table is MAE's [sin w | cos w | sin h | cos h] layout: "
    "keras_posenc.GridPositionEncoding() (the default sine)"
)
REFUSED = {
    "omdet-turbo": (
        "its build_2d_sincos_position_embedding flattens a width-major "
        "meshgrid (token h*W + w gets width index (h*W + w) // H and height "
        "index (h*W + w) % H), which is a channels-last grid only when H == W; "
        "there it equals GridPositionEncoding(sine='rt_detr', merge=None)"
    ),
    "vit_mae": _MAE,
    "aimv2": _MAE + " (native resolution: is_native)",
    "granite_docling": _MAE + " (the RT-DETR table rolled by D/2)",
    "sam2_video": _VIDEO,
    "edgetam_video": _VIDEO,
    "sam3_tracker_video": _VIDEO,
    "sam3_lite_text": (
        "its sines are its geometry encoder's (hidden_size) and its "
        "decoder's (normalize=False); build GridPositionEncoding(sine='detr', "
        "merge=None) (normalize=False for the decoder's) for each"
    ),
}

# Sub-configs' defaults, as their configuration classes set them.
_SUB_DEFAULTS = {
    "decoder_config.d_model": 256,
    "vision_config.fpn_hidden_size": 256,
}
_DEFAULT_WIDTH = 256


def _sub(config, dotted):
    """``(value, present)`` of a possibly dotted key."""
    *parents, key = dotted.split(".")
    for parent in parents:
        value = config.get(parent)
        if value is None:
            return None, False
        if not isinstance(value, dict):
            raise _arguments.invalid(parent, "a dict (a sub-config)", shortened(value))
        config = value
    value = config.get(key)
    return value, value is not None


def _width(kind, config):
    """`D` from `kind.width` (or an alias: both given must agree)."""
    width, present = _sub(config, kind.width)
    name = kind.width
    for alias in kind.aliases:
        value, given = _sub(config, alias)
        if given and present and value != width:
            expected = f"the value of `{kind.width}`={width!r} (they name one setting)"
            raise _arguments.invalid(alias, expected, shortened(value))
        if given and not present:
            width, present, name = value, True, alias
    if not present:
        width = _SUB_DEFAULTS.get(kind.width, _DEFAULT_WIDTH)
    if not _arguments.is_int(width) or width <= 0 or width % 4:
        expected = (
            f"a positive multiple of 4 ({kind.module} lays out width // 4 "
            "sin/cos pairs per axis; transformers fails or drops channels otherwise)"
        )
        raise _arguments.invalid(name, expected, shortened(width))
    for other in kind.also:
        value, given = _sub(config, other)
        value = value if given else _DEFAULT_WIDTH
        if value != width:
            expected = (
                f"the value of `{name}`={width!r}: the model has two sines, of "
                f"`{other}` and `{name}` channels; build each with "
                "GridPositionEncoding(sine='detr', merge=None) on its feature map"
            )
            raise _arguments.invalid(other, expected, shortened(value))
    return int(width)


def _number(name, value, low):
    return _arguments.check_number_above(name, value, low, echo=shortened(value))


def _temperature(kind, config):
    values = []
    for key in kind.temperature:
        value = config.get(key)
        value = kind.temperature_default if value is None else value
        values.append(_number(key, value, 1.0))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _read(kind, config):
    if kind.learned:
        value = config.get("position_embedding_type", "sine")
        if value != "sine":
            expected = (
                f'"sine" ({value!r} positions are the checkpoint\'s weights, '
                "not a sine; load them with the model)"
                if value == "learned"
                else '"sine" (transformers refuses any other than "learned")'
            )
            raise _arguments.invalid(
                "position_embedding_type", expected, shortened(value)
            )
    arguments = {
        "sine": kind.sine,
        "temperature": _temperature(kind, config),
        "merge": None,
    }
    if kind.sine == "detr":
        arguments["offset"] = kind.offset
        if kind.scale is not None and config.get(kind.scale) is not None:
            arguments["scale"] = _number(kind.scale, config[kind.scale], 0.0)
    arguments["dim"] = _width(kind, config)
    return arguments


def read(config):
    """The `GridPositionEncoding` arguments of a config (already loaded)."""
    model_type = config.get("model_type")
    kind = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    if kind is None:
        why = REFUSED.get(model_type) if isinstance(model_type, str) else None
        expected = (
            f"one of the {len(MODEL_TYPES)} model types with a 2-D sine read in "
            f"transformers {TRANSFORMERS_VERSION}: {tuple(MODEL_TYPES)}"
        )
        if why is not None:
            expected += f"; {model_type} is not read: {why}"
        raise _arguments.invalid("model_type", expected, shortened(model_type))
    return _read(kind, config)


def layer_arguments(config, overrides):
    """The `GridPositionEncoding` arguments of `config`, with `overrides`
    (other constructor arguments, none of them one read from the config)."""
    config = _hf_json.load(config)
    return _hf_json.with_overrides(read(config), overrides, READ)


__all__ = ["MODEL_TYPES", "READ", "REFUSED", "SineType", "layer_arguments", "read"]
