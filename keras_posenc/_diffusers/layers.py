"""The arguments of `TimestepEmbedding`, `GridPositionEncoding` and
`RotaryEmbedding` from a diffusers transformer config.

The config is read once (`read`) into a `Read`: the class diffusers
builds (a legacy `Transformer2DModel` as the class it is remapped to), its
`Model` from `_diffusers.models`, and the checked values of the keys that
set its positions (the class's defaults for the absent ones). Every key
is one the class takes (the others concern no position code: layers,
widths, norms), or diffusers' own `_class_name`, `_diffusers_version`,
`_name_or_path`; any other key is refused by name, as is a class not in
the table.
"""

import math
import numbers

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._diffusers import config_file as _config_file
from keras_posenc._diffusers import models as _models
from keras_posenc._diffusers.models import Key
from keras_posenc._hf import config_file as _hf_json


def _is_number(value):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return ok and math.isfinite(value)


def _positive_int(value):
    return _arguments.is_int(value) and 0 < value < _arguments.POSITION_LIMIT


_POSITIVE_INT = (_positive_int, "a positive integer")
_OPTIONAL_INT = (lambda v: v is None or _positive_int(v), "None or a positive integer")
_SCALE = (lambda v: _is_number(v) and v > 0, "a finite number > 0")
_BOOL = (lambda v: isinstance(v, bool), "a bool")
_AXES = (
    lambda v: (
        isinstance(v, (list, tuple))
        and 0 < len(v) <= 64
        and all(_positive_int(d) and d % 2 == 0 for d in v)
    ),
    "a list of positive even integers (the features of each axis)",
)
# How each key that sets positions is checked (the class's `norm_type` is
# the only one its forward implements).
RULES = {
    "sample_size": _POSITIVE_INT,
    "patch_size": _POSITIVE_INT,
    "pos_embed_max_size": _OPTIONAL_INT,
    "interpolation_scale": (
        lambda v: v is None or _SCALE[0](v),
        "None or " + _SCALE[1],
    ),
    "attention_head_dim": _POSITIVE_INT,
    "num_attention_heads": _POSITIVE_INT,
    "axes_dims_rope": _AXES,
    "rope_axes_dim": _AXES,
    "rope_theta": _SCALE,
    "flip_sin_to_cos": _BOOL,
    "freq_shift": (_is_number, "a finite number"),
    "freq_dim": _POSITIVE_INT,
    "sample_width": _POSITIVE_INT,
    "sample_height": _POSITIVE_INT,
    "sample_frames": _POSITIVE_INT,
    "patch_size_t": _OPTIONAL_INT,
    "temporal_compression_ratio": _POSITIVE_INT,
    "max_text_seq_length": (
        lambda v: _arguments.is_int(v) and 0 <= v < _arguments.POSITION_LIMIT,
        "a non-negative integer",
    ),
    "spatial_interpolation_scale": _SCALE,
    "temporal_interpolation_scale": _SCALE,
    "use_rotary_positional_embeddings": _BOOL,
    "use_learned_positional_embeddings": _BOOL,
}


class Read:
    """A diffusers config, read once: `name` (the class diffusers builds),
    `model` (its `Model`), `values` (the checked position keys)."""

    def __init__(self, name, model, values):
        self.name, self.model, self.values = name, model, values

    def value(self, item):
        """`item` itself, or the config's value when it is a `Key`."""
        return self.values[item.name] if isinstance(item, Key) else item

    def applies(self, part, layer):
        """Refuses `part` (a grid, a RoPE) when the model has none, or has it
        only with another value of a key."""
        if part is None:
            expected = (
                f"the config of a diffusers model with {layer}; "
                f"{self.name}'s positions are {self.model.instead}"
            )
            raise _arguments.invalid("_class_name", expected, self.name)
        when = getattr(part, "when", None)
        if when is not None and self.values[when.name] != when.value:
            expected = (
                f"{when.value!r} for {layer}; with {self.values[when.name]!r}, "
                f"{self.name}'s positions are {when.otherwise}"
            )
            raise _arguments.invalid(when.name, expected, self.values[when.name])


def _class_of(content):
    """``(class name, Model, the keys of a legacy class)`` of a config."""
    name = content["_class_name"]
    if not isinstance(name, str):
        raise _arguments.invalid("_class_name", "a string", shortened(name))
    legacy: tuple = ()
    if name in _models.REMAPPED:
        key, targets, legacy = _models.REMAPPED[name]
        target = targets.get(content.get(key))
        if target is None:
            expected = (
                f"one of {sorted(targets)} (diffusers loads a {name} with it as "
                f"{' or '.join(targets.values())}, read here; no other {name} is)"
            )
            raise _arguments.invalid(key, expected, shortened(content.get(key)))
        name = target
    model = _models.MODELS.get(name)
    if model is None:
        expected = (
            "a diffusers transformer whose position code keras_posenc reads, one "
            f"of {sorted(_models.MODELS)} (or a legacy {sorted(_models.REMAPPED)})"
        )
        raise _arguments.invalid("_class_name", expected, shortened(name))
    return name, model, legacy


def read(config):
    """The `Read` of a config (a dict, a path, a directory)."""
    content = _config_file.load(config)
    name, model, legacy = _class_of(content)
    for key in content:
        if key not in _models.META and key not in model.defaults and key not in legacy:
            expected = (
                f"no {key!r} key: diffusers {_models.DIFFUSERS_VERSION}'s {name} "
                "does not take it"
            )
            raise _arguments.invalid(key, expected, shortened(content[key]))
    values = {}
    for key in model.positions:
        value = content.get(key, model.defaults[key])
        rule = RULES.get(key)
        if rule is None:  # `norm_type`: the one its forward implements
            only = model.defaults[key]
            rule = (only.__eq__, f"{only!r} (the only one {name} implements)")
        check, expected = rule
        if not check(value):
            raise _arguments.invalid(key, expected, shortened(value))
        values[key] = value
    return Read(name, model, values)


def _with(arguments, overrides):
    """`arguments` and the caller's `overrides`, which may not repeat one."""
    return _hf_json.with_overrides(
        arguments, overrides, tuple(arguments), "from_diffusers_config"
    )


def timestep_arguments(config, overrides=None):
    """`TimestepEmbedding` arguments: diffusers' `Timesteps` of the model."""
    parsed = read(config)
    spec = parsed.model.timestep
    width = spec.width
    if not isinstance(width, int):
        width = math.prod(parsed.values[key] for key in width)
    arguments = {
        "dim": width,
        "flip_sin_to_cos": parsed.value(spec.flip_sin_to_cos),
        "downscale_freq_shift": float(parsed.value(spec.downscale_freq_shift)),
        "scale": spec.scale,
    }
    return _with(arguments, overrides)


def _patch_grid(parsed, spec):
    values = parsed.values
    base = values["sample_size"] // values["patch_size"]
    if base == 0:
        expected = f"at least patch_size={values['patch_size']}"
        raise _arguments.invalid("sample_size", expected, values["sample_size"])
    scale = parsed.value(spec.scale)
    if scale is None and spec.scale_if_none is None:
        expected = (
            f"a number for a sin-cos grid ({parsed.name} with None adds no "
            "position encoding: `PatchEmbed(pos_embed_type=None)`)"
        )
        raise _arguments.invalid(spec.scale.name, expected, None)
    if scale is None:
        scale = _models.SCALE_RULES[spec.scale_if_none](values)
    arguments = {
        "base_size": base,
        "interpolation_scale": float(scale),
        "positions": "float32",
    }
    largest = None if spec.max_size is None else parsed.value(spec.max_size)
    if largest is not None:
        arguments.update(mode="lookup", max_grid_shape=(largest, largest))
    return arguments


def _video_grid(parsed, spec):
    values = parsed.values
    if parsed.value(spec.learned):
        expected = (
            f"False for a sin-cos grid ({parsed.name}'s positional embedding is "
            "then a learned weight, loaded from the checkpoint)"
        )
        raise _arguments.invalid(spec.learned.name, expected, True)
    if values["patch_size_t"] is not None:
        expected = (
            "None with the sin-cos grid (its table counts frames, not temporal "
            "patches; CogVideoX 1.5 uses RoPE)"
        )
        raise _arguments.invalid("patch_size_t", expected, values["patch_size_t"])
    patch = values["patch_size"]
    frames = (values["sample_frames"] - 1) // values["temporal_compression_ratio"] + 1
    grid = (frames, values["sample_height"] // patch, values["sample_width"] // patch)
    if min(grid) == 0:
        expected = f"sample sizes of at least patch_size={patch}"
        raise _arguments.invalid("patch_size", expected, patch)
    spatial = float(values["spatial_interpolation_scale"])
    return {
        "grid_shape": grid,
        "extra_tokens": values["max_text_seq_length"],
        "interpolation_scale": (
            float(values["temporal_interpolation_scale"]),
            spatial,
            spatial,
        ),
        "positions": "float32",
    }


# One reader per kind of grid (the table's `grid` entries).
_GRIDS = {_models.PatchGrid: _patch_grid, _models.VideoGrid: _video_grid}


def grid_arguments(config, overrides=None):
    """`GridPositionEncoding` arguments: the model's sin-cos grid."""
    parsed = read(config)
    spec = parsed.model.grid
    parsed.applies(spec, "a sin-cos grid")
    arguments = _GRIDS[type(spec)](parsed, spec)
    return _with(arguments, overrides)


def rotary_arguments(config, overrides=None):
    """`RotaryEmbedding` arguments: the model's N-axis RoPE."""
    parsed = read(config)
    spec = parsed.model.rope
    parsed.applies(spec, "RoPE")
    head = parsed.value(spec.head_dim)
    if spec.axes is not None:
        axes, name = tuple(parsed.value(spec.axes)), spec.axes.name
    else:  # the model's split of the head dim
        axes, name = tuple(spec.split(head)), spec.head_dim.name
    if sum(axes) != head or not all(d > 0 and d % 2 == 0 for d in axes):
        expected = (
            f"axes of even features summing to attention_head_dim={head} "
            f"(here {list(axes)})"
        )
        raise _arguments.invalid(name, expected, shortened(parsed.values[name]))
    arguments = {
        "axes_dim": axes,
        "max_wavelength": float(parsed.value(spec.theta)),
        "layout": "interleaved",
    }
    # Where the model's attention holds the sequence: a default the caller
    # may change (its own layout of `q` and `k`).
    overrides = {"sequence_axis": spec.sequence_axis, **(overrides or {})}
    return _with(arguments, overrides)
