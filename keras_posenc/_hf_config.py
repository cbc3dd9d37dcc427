"""`RotaryEmbedding` arguments from a Hugging Face `config.json`, as transformers
5.23 reads it.

A raw `config.json` (the file as published) is read as transformers'
configuration class of its `model_type` reads it once loaded: the
architecture's own key names and defaults (`_hf_architectures`), legacy
`rope_scaling` or `rope_parameters` (transformers 5, possibly holding
`rope_theta` and `partial_rotary_factor`, possibly nested per layer type),
as `standardize_rope_params` completes them. Every key transformers reads
for RoPE is applied; a RoPE key it would not read is refused by name, as
is any unknown key inside `rope_scaling` / `rope_parameters`
(`RopeConfig.build` checks those when the layer is built).
"""

import json
import math
import numbers
import os
import pathlib

from keras_posenc import _arguments
from keras_posenc._hf_architectures import ARCHITECTURES, GENERIC, REFUSED

_ORIG = "original_max_position_embeddings"
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")
# rope types whose pretraining length transformers completes from the config.
_ORIG_TYPES = ("llama3", "yarn", "longrope")
_FILE = "a dict, or the path of a config.json file or of a directory holding one"


def load(config):
    """The config dict: `config` itself, or the JSON object at its path."""
    if isinstance(config, dict):
        return config
    if not isinstance(config, (str, os.PathLike)):
        raise _arguments.invalid("config", _FILE, config)
    path = pathlib.Path(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (OSError, ValueError) as error:
        raise _arguments.invalid("config", f"{_FILE} ({error})", str(config)) from None
    if not isinstance(content, dict):
        raise _arguments.invalid("config", f"{_FILE} (a JSON object)", str(config))
    return content


def _architecture(config):
    """``(model_type, Architecture, the dict it reads)``."""
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise _arguments.invalid("model_type", "a string", model_type)
    if model_type is not None and model_type in REFUSED:
        raise _arguments.invalid("model_type", REFUSED[model_type], model_type)
    arch = GENERIC if model_type is None else ARCHITECTURES.get(model_type, GENERIC)
    if arch.text is None:
        return model_type, arch, config
    text = config.get("text_config")
    if isinstance(text, dict):
        return _architecture({"model_type": arch.text, **text})
    if arch.lift and text is None:
        return arch.text, ARCHITECTURES[arch.text], config
    expected = f"a 'text_config' dict for model_type {model_type!r}"
    raise _arguments.invalid("text_config", expected, text)


def _positive_int(name, value):
    if not _arguments.is_int(value) or value <= 0:
        raise _arguments.invalid(name, "a positive integer", value)
    return int(value)


def _fraction(name, value):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 < value <= 1:
        raise _arguments.invalid(name, "a number in (0, 1]", value)
    return value


def _top_level(arch, config):
    """Standardized top-level values and the raw key each was read from."""
    shadowed = {item if isinstance(item, str) else item[0] for item in arch.ignored}
    values, names = dict(arch.defaults), {key: key for key in arch.defaults}
    sources = [(key, key) for key in arch.defaults if key not in shadowed]
    for raw, key in (*sources, *arch.aliases):
        if raw in config and (config[raw] is not None or key.startswith("partial")):
            values[key], names[key] = config[raw], raw
    for key, value, why in arch.refuse:
        if (config[key] if key in config else values.get(key)) is value:
            raise _arguments.invalid(key, why, value)
    for key in ("hidden_size", "num_attention_heads"):
        if values[key] is not None:
            values[key] = _positive_int(names[key], values[key])
    if values["head_dim"]:
        values["head_dim"] = _positive_int(names["head_dim"], values["head_dim"])
    elif values["hidden_size"] and values["num_attention_heads"]:
        values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
    else:
        expected = "a 'head_dim', or 'hidden_size' and 'num_attention_heads' key"
        raise _arguments.invalid("config", expected, sorted(config))
    key = "partial_rotary_factor"
    if names[key] in config or values[key] is not None:
        values[key] = _fraction(names[key], values[key])
    return values, names


def _rope_dict(arch, config):
    """`rope_scaling` (it wins, as in transformers) or `rope_parameters`: a copy."""
    shadowed = {item if isinstance(item, str) else item[0] for item in arch.ignored}
    for name in ("rope_scaling", "rope_parameters"):
        value = config.get(name)
        if name in shadowed or value is None:
            continue
        if not isinstance(value, dict):
            raise _arguments.invalid(name, "None or a dict of RoPE parameters", value)
        if value:
            return name, {
                k: dict(v) if isinstance(v, dict) else v for k, v in value.items()
            }
    return "rope_parameters", dict(arch.rope_parameters or {})


def _local_layers(params, config, values, local):
    """Gemma 3: full-attention layers take `rope_scaling`, sliding ones their
    own base (`rope_local_base_freq`)."""
    if not any(isinstance(v, dict) for v in params.values()):
        params = {"full_attention": {"rope_type": "default", **params}}
    key, default = local
    local_theta = config.get(key)
    params.setdefault("full_attention", {"rope_type": "default"})
    params.setdefault("sliding_attention", {"rope_type": "default"})
    params["full_attention"].setdefault("rope_theta", values["rope_theta"])
    params["sliding_attention"].setdefault(
        "rope_theta", default if local_theta is None else local_theta
    )
    return params


def _select_layer(params, config, layer_type):
    """The flat parameters of `layer_type`; whether they were nested."""
    nested = sorted(k for k, v in params.items() if isinstance(v, dict))
    if nested:
        if layer_type not in nested:
            raise _arguments.invalid("layer_type", f"one of {nested}", layer_type)
        return dict(params[layer_type]), True
    if layer_type is not None:
        declared = config.get("layer_types")
        allowed = sorted(set(declared)) if isinstance(declared, list) else []
        if layer_type not in allowed:
            raise _arguments.invalid(
                "layer_type", f"None or one of {allowed}", layer_type
            )
    return params, False


def _rope_type(arch, name, params):
    """`rope_type` (or legacy `type`), popped, with the model's renamings."""
    given = params.pop("rope_type", None)
    legacy = params.pop("type", None)
    rope_type, legacy = (arch.renamed.get(t, t) for t in (given, legacy))
    if rope_type is not None and legacy is not None and rope_type != legacy:
        expected = "'rope_type' and 'type' to agree (transformers reads 'rope_type')"
        raise _arguments.invalid(name, expected, {"rope_type": given, "type": legacy})
    return rope_type or legacy or "default"


def _check_keys(model_type, arch, name, params):
    if "seq_len" in params:
        expected = "no 'seq_len' key (the serving length is the `seq_len` argument)"
        raise _arguments.invalid(name, expected, params)
    for key in _MROPE_KEYS:
        if key in params and not arch.mrope:
            expected = f"no {key!r} key: transformers' {model_type} does not read it"
            raise _arguments.invalid(name, expected, params)


def _lengths(rope_type, name, params, values, nested, seq_len):
    """Pretraining length, factor and serving length as transformers fills them."""
    max_positions = values["max_position_embeddings"]
    if rope_type == "dynamic":
        given = params.get(_ORIG)
        if given is not None and given != max_positions:
            expected = (
                f"no {_ORIG!r} key with 'dynamic' (transformers reads "
                f"max_position_embeddings={max_positions})"
            )
            raise _arguments.invalid(name, expected, params)
        params[_ORIG] = max_positions
    if rope_type in _ORIG_TYPES:
        top = values[_ORIG]
        if top is not None and not nested:  # Phi-3's top-level length wins
            params[_ORIG] = top
        elif params.get(_ORIG) is None:
            params[_ORIG] = max_positions
        if rope_type != "llama3" and params.get("factor") is None:
            if params[_ORIG] and max_positions:
                params["factor"] = max_positions / params[_ORIG]
    if rope_type in ("dynamic", "longrope") and seq_len is not None:
        params["seq_len"] = seq_len


def _check_ignored(model_type, arch, config, values):
    """A key this model does not read is refused unless it equals what is read."""
    for item in arch.ignored:
        raw, key = (item, item) if isinstance(item, str) else item
        value = config.get(raw)
        if value is None or value == {} or value == values.get(key):
            continue
        expected = (
            f"{values.get(key)!r} or no {raw!r} key: transformers' {model_type} "
            f"does not read it"
        )
        raise _arguments.invalid(raw, expected, value)


def _layout(arch, config):
    if isinstance(arch.layout, str):
        return arch.layout
    key, default = arch.layout
    value = config.get(key, default)
    if not (value is None or isinstance(value, bool)):
        raise _arguments.invalid(key, "a bool", value)
    return "interleaved" if value else "half"


def _rotary_dim(model_type, arch, rope_type, values, partial):
    if "rotary_dim" in values:  # GPT-J rotates its own `rotary_dim`
        return values["rotary_dim"]
    if rope_type == "proportional":
        return values["head_dim"]
    if partial != 1 and not arch.partial:
        expected = (
            f"1 for model_type {model_type!r} (its rotary embedding rotates the "
            "whole head)"
        )
        raise _arguments.invalid("partial_rotary_factor", expected, partial)
    return int(values["head_dim"] * partial)


def rotary_arguments(config, seq_len=None, layer_type=None):
    """`RotaryEmbedding` arguments from a transformers `config.json`.

    Returns:
        A dict with `max_wavelength`, `rope_scaling`, `rotary_dim` and
        `layout`.
    """
    model_type, arch, config = _architecture(load(config))
    values, names = _top_level(arch, config)
    name, params = _rope_dict(arch, config)
    if arch.local_theta is not None:
        params = _local_layers(params, config, values, arch.local_theta)
    params, nested = _select_layer(params, config, layer_type)
    rope_type = _rope_type(arch, name, params)
    _check_keys(model_type, arch, name, params)
    if arch.section is not None:
        params.setdefault("mrope_section", list(arch.section))
    theta = params.pop("rope_theta", None)
    if theta is None:
        theta = _arguments.check_wavelength(values["rope_theta"], names["rope_theta"])
    values["rope_theta"] = theta = _arguments.check_wavelength(theta, "rope_theta")
    if "partial_rotary_factor" in params:
        partial = _fraction(
            "partial_rotary_factor", params.pop("partial_rotary_factor")
        )
    else:
        partial = values["partial_rotary_factor"] or 1.0
    values["partial_rotary_factor"] = partial
    if rope_type == "proportional":
        params["partial_rotary_factor"] = partial
    _lengths(rope_type, name, params, values, nested, seq_len)
    _check_ignored(model_type, arch, config, values)
    mrope = any(key in params for key in _MROPE_KEYS)
    scaling = None
    if rope_type != "default" or mrope:
        scaling = {"rope_type": rope_type, **params}
    return {
        "max_wavelength": theta,
        "rope_scaling": scaling,
        "rotary_dim": _rotary_dim(model_type, arch, rope_type, values, partial),
        "layout": _layout(arch, config),
    }
