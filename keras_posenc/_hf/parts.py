"""`RotaryEmbedding.from_hf_config` and `layer_plan`, per part of a model:
the text model (`_hf.config`, `_hf.layers`) or a vision or audio tower
(`_hf.vision`)."""

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import config as _hf_config
from keras_posenc._hf import config_file as _hf_json
from keras_posenc._hf import layers as _hf_layers
from keras_posenc._hf import vision as _hf_vision

# No tower has more blocks; a larger depth is refused before any work.
MAX_DEPTH = 2**16


def _check_part(part, seq_len=None, layer_type=None):
    part = _arguments.check_choice("part", part, _hf_vision.PART_NAMES)
    if part != "text":
        for name, value in (("seq_len", seq_len), ("layer_type", layer_type)):
            if value is not None:
                expected = f"None with part={part!r} (a text model's option)"
                raise _arguments.invalid(name, expected, shortened(value))
    return part


def layer_arguments(config, seq_len, layer_type, part, overrides):
    """The `RotaryEmbedding` arguments of `part` of `config`."""
    if _check_part(part, seq_len, layer_type) == "text":
        return _hf_config.layer_arguments(config, seq_len, layer_type, overrides)
    config = _hf_json.load(config)
    one_d = _hf_vision.one_dimensional_part(config, part)
    if one_d is not None:  # an audio tower rotating over time, as a text model
        return _hf_config.layer_arguments(one_d, None, None, overrides)
    return _hf_vision.part_arguments(config, part, overrides)


def _depth(raw):
    """A tower's blocks: `depth` (Qwen's name) or `num_hidden_layers`."""
    for key in ("depth", "num_hidden_layers"):
        if raw.get(key) is not None:
            return _arguments.check_positive_int(key, raw[key], MAX_DEPTH)
    expected = "a 'depth' or 'num_hidden_layers' key (the blocks of the tower)"
    raise _arguments.invalid("config", expected, shortened(sorted(raw)))


def layer_plan(make, config, seq_len, part, overrides):
    """`RotaryEmbedding.layer_plan` of `part`: the text model's, or one
    layer per block of a tower (the same layer: its blocks rotate alike)."""
    if _check_part(part, seq_len) == "text":
        return _hf_layers.layer_plan(make, config, seq_len, overrides)
    config = _hf_json.load(config)
    raw = _hf_vision.one_dimensional_part(config, part)
    if raw is None:
        _, raw = _hf_vision.locate(config, part)
    layer = make(**layer_arguments(config, None, None, part, overrides))
    return [layer] * _depth(raw)
