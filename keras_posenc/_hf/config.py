"""`RotaryEmbedding` arguments from a Hugging Face `config.json`, as the
transformers release `TRANSFORMERS_VERSION` reads it.

A raw `config.json` (the file as published, read by `_hf.config_file`) is read as
transformers' configuration class of its `model_type` reads it once
loaded: the architecture's own key names and defaults
(`_hf.architectures`), legacy `rope_scaling` or `rope_parameters`
(transformers 5, possibly holding `rope_theta` and
`partial_rotary_factor`, possibly nested per layer type), as
`standardize_rope_params` completes them. Only model types verified
against their own transformers rotary modules are read; every other one is
refused by name, and a config without `model_type` is read as Llama reads
the standard keys. Every key transformers reads for RoPE is applied; a
RoPE key it would not read is refused by name, as is any unknown key
inside `rope_scaling` / `rope_parameters` (`RopeConfig.build` checks those
when the layer is built) but `"finetuned"`, which transformers ignores
with a warning: so does this.
"""

import math
import numbers
import warnings

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import config_file as _hf_json
from keras_posenc._hf import splits as _hf_splits
from keras_posenc._hf.architectures import TRANSFORMERS_VERSION, resolve
from keras_posenc._rope.config import PARAMETER_KEYS

_ORIG = "original_max_position_embeddings"
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")
# rope types whose pretraining length transformers completes from the config.
_ORIG_TYPES = ("llama3", "yarn", "longrope")
# Lengths beyond this are no config's: a float64 ratio of two of them is finite.
_MAX_LENGTH = 2**53
# The arguments `from_hf_config` reads from the config.
READ = ("max_wavelength", "rope_scaling", "rotary_dim", "layout")


def _positive_int(name, value):
    if not _arguments.is_int(value) or value <= 0:
        raise _arguments.invalid(name, "a positive integer", shortened(value))
    return int(value)


def _fraction(name, value):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 < value <= 1:
        raise _arguments.invalid(name, "a number in (0, 1]", shortened(value))
    return value


def _shadowed(arch):
    return {item if isinstance(item, str) else item[0] for item in arch.ignored}


def _check_requires(arch, config):
    """Refuses a value that means the model applies no RoPE."""
    for need in arch.requires:
        value = config.get(need.key, need.default)
        if not need.ok(value):
            raise _arguments.invalid(need.key, need.why, shortened(value))


def _top_level(arch, config):
    """Standardized top-level values and the raw key each was read from."""
    shadowed = _shadowed(arch)
    values, names = dict(arch.defaults), {key: key for key in arch.defaults}
    sources = [(key, key) for key in arch.defaults if key not in shadowed]
    for raw, key in (*sources, *arch.aliases):
        if raw in config and (config[raw] is not None or key.startswith("partial")):
            values[key], names[key] = config[raw], raw
    _check_requires(arch, config)
    for key in ("hidden_size", "num_attention_heads"):
        if values[key] is not None:
            values[key] = _positive_int(names[key], values[key])
    key = "max_position_embeddings"
    if values[key] is not None:
        values[key] = _arguments.check_positive_int(
            names[key], shortened(values[key]), _MAX_LENGTH
        )
    if values["head_dim"]:
        values["head_dim"] = _positive_int(names["head_dim"], values["head_dim"])
        source = names["head_dim"]
    elif values["hidden_size"] and values["num_attention_heads"]:
        values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        source = names["hidden_size"]
    else:
        expected = "a 'head_dim', or 'hidden_size' and 'num_attention_heads' key"
        raise _arguments.invalid("config", expected, shortened(sorted(config)))
    if values["head_dim"] > _arguments.MAX_DEPTH:
        # Before any float of it (an int past float64 overflows there).
        expected = (
            f"a head dimension of at most {_arguments.MAX_DEPTH} (the widest "
            "rotary dimension)"
        )
        raise _arguments.invalid(source, expected, shortened(config[source]))
    key = "partial_rotary_factor"
    if names[key] in config or values[key] is not None:
        values[key] = _fraction(names[key], values[key])
    return values, names


def _rope_dict(arch, config):
    """`rope_scaling` (it wins, as in transformers) or `rope_parameters`: a copy."""
    shadowed, given = _shadowed(arch), {}
    for name in ("rope_scaling", "rope_parameters"):
        value = config.get(name)
        if name in shadowed or value is None:
            continue
        if not isinstance(value, dict):
            raise _arguments.invalid(
                name, "None or a dict of RoPE parameters", shortened(value)
            )
        if value:
            given[name] = value
    if len(given) == 2 and given["rope_scaling"] != given["rope_parameters"]:
        expected = (
            "no 'rope_parameters' beside a different 'rope_scaling' (transformers "
            "reads 'rope_scaling' and drops it)"
        )
        raise _arguments.invalid("rope_parameters", expected, shortened(given))
    for name, value in given.items():
        return name, _hf_splits.copy_params(value)
    return None, _hf_splits.copy_params(arch.rope_parameters or {})


def _select_layer(model_type, name, params, config, layer_type):
    """The flat parameters of `layer_type`; whether they were nested."""
    nested = sorted(k for k, v in params.items() if isinstance(v, dict))
    misplaced = sorted(PARAMETER_KEYS.intersection(nested))
    if misplaced or len(nested) not in (0, len(params)):
        # A dict of RoPE per layer type holds dicts only, under layer type
        # names: this is one RoPE with a dict where a value belongs.
        key = (misplaced or nested)[0]
        expected = (
            f"{key!r} to be a plain JSON value, not a dict (a dict of dicts, "
            "every value one, is a RoPE per layer type)"
        )
        raise _arguments.invalid(name, expected, shortened({key: params[key]}))
    if nested:
        if layer_type not in nested:
            raise _arguments.invalid(
                "layer_type", f"one of {nested}", shortened(layer_type)
            )
        return dict(params[layer_type]), True
    if layer_type is not None:
        declared = _hf_splits.layer_types(model_type, config)
        allowed = sorted(set(declared)) if isinstance(declared, list) else []
        if layer_type not in allowed:
            raise _arguments.invalid(
                "layer_type", f"None or one of {shortened(allowed)}", layer_type
            )
    return params, False


def _rope_type(model_type, arch, name, params):
    """`rope_type` (or legacy `type`), popped: ``(as given, as the model
    renames it)`` (transformers completes the lengths before renaming)."""
    given = params.pop("rope_type", None)
    legacy = params.pop("type", None)
    for key, value in (("rope_type", given), ("type", legacy)):
        if value is not None and not isinstance(value, str):
            expected = f"{key!r} to be a string (a rope_type name)"
            raise _arguments.invalid(name, expected, shortened({key: value}))
    # Qwen2-VL files hold {"type": "mrope", "rope_type": "default"}: the same
    # RoPE once the model renames "mrope".
    renamed = arch.renamed.get
    if (
        given is not None
        and legacy is not None
        and renamed(given, given) != renamed(legacy, legacy)
    ):
        expected = "'rope_type' and 'type' to agree (transformers reads 'rope_type')"
        raise _arguments.invalid(name, expected, {"rope_type": given, "type": legacy})
    raw = given or legacy or "default"
    rope_type = arch.renamed.get(raw, raw)
    if arch.rope_types is not None and rope_type not in arch.rope_types:
        expected = (
            f"a rope_type transformers' {model_type} reads as verified, one of "
            f"{arch.rope_types}"
        )
        raise _arguments.invalid(name, expected, shortened({"rope_type": rope_type}))
    return raw, rope_type


def _check_keys(model_type, arch, name, params):
    if "finetuned" in params:
        warnings.warn(
            f"`{name}` holds 'finetuned': {shortened(params.pop('finetuned'))!r}, "
            f"which transformers {TRANSFORMERS_VERSION} ignores (with a warning): "
            "ignored here too.",
            stacklevel=5,
        )
    if "llama_4_scaling_beta" in params:
        expected = (
            "no 'llama_4_scaling_beta' key: Ministral 3 and Llama 4 scale the "
            "queries by 1 + beta * log(1 + floor(position / "
            "original_max_position_embeddings)) after RoPE, which a RoPE layer "
            "cannot express (scale them in the attention)"
        )
        raise _arguments.invalid(name, expected, shortened(params))
    if "seq_len" in params:
        expected = "no 'seq_len' key (the serving length is the `seq_len` argument)"
        raise _arguments.invalid(name, expected, shortened(params))
    for key in _MROPE_KEYS:
        if key in params and not arch.mrope:
            expected = f"no {key!r} key: transformers' {model_type} does not read it"
            raise _arguments.invalid(name, expected, shortened(params))


def _lengths(given_type, rope_type, name, params, values, nested, seq_len):
    """Pretraining length, factor and serving length as transformers fills them
    (the length for the `rope_type` as given, before the model renames it)."""
    max_positions = values["max_position_embeddings"]
    if rope_type == "dynamic":
        given = params.get(_ORIG)
        if given is not None and given != max_positions:
            expected = (
                f"no {_ORIG!r} key with 'dynamic' (transformers reads "
                f"max_position_embeddings={max_positions})"
            )
            raise _arguments.invalid(name, expected, shortened(params))
        params[_ORIG] = max_positions
    # transformers completes the length for the type as given, and again
    # (the top-level length winning) for the type as renamed; a type renamed
    # to one that needs it (Phi-3's "su") fails its check when it is missing.
    renamed_without = given_type not in _ORIG_TYPES and params.get(_ORIG) is None
    if rope_type in _ORIG_TYPES and not renamed_without:
        top = values[_ORIG]
        if top is not None and not nested:  # Phi-3's top-level length wins
            params[_ORIG] = top
        elif params.get(_ORIG) is None:
            params[_ORIG] = max_positions
    # yarn and longrope take the ratio of lengths for a missing factor when
    # their frequencies are made (after Phi-3 renames "su" to "longrope").
    orig = params.get(_ORIG)
    if rope_type in ("yarn", "longrope") and params.get("factor") is None:
        if _arguments.is_int(orig) and orig > 0 and max_positions:
            params["factor"] = max_positions / orig
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
        raise _arguments.invalid(raw, expected, shortened(value))


def _layout(arch, config):
    if isinstance(arch.layout, str):
        return arch.layout
    key, default = arch.layout
    value = config.get(key, default)
    if not (value is None or isinstance(value, bool)):
        raise _arguments.invalid(key, "a bool", shortened(value))
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


def _theta_and_partial(model_type, default, params, values, names, config):
    """`rope_theta` and `partial_rotary_factor`, popped from `params`
    (`default`: the model's default dict, not the config's own)."""
    theta = params.pop("rope_theta", None)
    top = config.get(names["rope_theta"])
    if default and theta is not None and top is not None and top != theta:
        # The default dict of its config class keeps its own base.
        expected = (
            f"{theta!r} or no {names['rope_theta']!r} key: transformers' "
            f"{model_type} reads it only with a rope_scaling or rope_parameters"
        )
        raise _arguments.invalid(names["rope_theta"], expected, shortened(top))
    if theta is None:
        theta = _arguments.check_wavelength(values["rope_theta"], names["rope_theta"])
    theta = _arguments.check_wavelength(theta, "rope_theta")
    if "partial_rotary_factor" in params:
        partial = _fraction(
            "partial_rotary_factor", params.pop("partial_rotary_factor")
        )
    else:
        partial = values["partial_rotary_factor"] or 1.0
    return theta, partial


def rotary_arguments(config, seq_len=None, layer_type=None):
    """`RotaryEmbedding` arguments from a transformers `config.json`.

    Returns:
        A dict with `max_wavelength`, `rope_scaling`, `rotary_dim` and
        `layout`.
    """
    if seq_len is not None:
        seq_len = _arguments.check_positive_int(
            "seq_len", seq_len, _arguments.POSITION_LIMIT
        )
    model_type, arch, config = resolve(_hf_json.load(config))
    values, names = _top_level(arch, config)
    if arch.layers is not None:
        name, params = _hf_splits.split_layers(model_type, arch, config)
    else:
        name, params = _rope_dict(arch, config)
        _hf_splits.check_per_layer(model_type, arch, name, params)
    default, name = name is None, name or "rope_parameters"
    params, nested = _select_layer(model_type, name, params, config, layer_type)
    given_type, rope_type = _rope_type(model_type, arch, name, params)
    _check_keys(model_type, arch, name, params)
    if arch.section is not None:
        params.setdefault("mrope_section", list(arch.section))
        if arch.interleaved:
            params.setdefault("mrope_interleaved", True)
    theta, partial = _theta_and_partial(
        model_type, default, params, values, names, config
    )
    values["rope_theta"], values["partial_rotary_factor"] = theta, partial
    if rope_type == "proportional":
        params["partial_rotary_factor"] = partial
    _lengths(given_type, rope_type, name, params, values, nested, seq_len)
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


def layer_arguments(config, seq_len=None, layer_type=None, overrides=None):
    """All `RotaryEmbedding` arguments: `rotary_arguments` and `overrides`
    (the caller's other arguments), which may not repeat one read from
    `config`."""
    arguments = rotary_arguments(config, seq_len, layer_type)
    return _hf_json.with_overrides(arguments, overrides, READ)
