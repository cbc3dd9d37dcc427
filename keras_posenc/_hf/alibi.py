"""`AlibiBias` arguments from a Hugging Face `config.json`, as the
transformers release `TRANSFORMERS_VERSION` builds its ALiBi biases.

Three model types of that release use ALiBi (Press et al., 2021,
https://arxiv.org/abs/2108.12409), each in its modeling code:

* `"bloom"`: `build_alibi_tensor`, `n_head` heads (`num_attention_heads`
  is its alias), slopes of the paper's rule with ``m = 8``;
* `"mpt"`: `build_mpt_alibi_tensor`, `n_heads` heads, the same slopes
  (`slopes[1::2]` then `slopes[::2]` of the next power of two is the same
  order); the model calls it without `attn_config.alibi_bias_max`, so 8;
* `"falcon"` with `alibi: true`: Bloom's slopes, added to the unscaled
  scores and divided with them by ``sqrt(hidden_size //
  num_attention_heads)``.

Every key read is applied; a value the model would not apply
(`attn_config.alibi_bias_max` other than 8) or that means no ALiBi is
refused by name, and so is every other `model_type`.
"""

from keras_posenc._alibi import slopes as _slopes
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import config_file as _hf_json
from keras_posenc._hf.model_types import TRANSFORMERS_VERSION

MODEL_TYPES = ("bloom", "falcon", "mpt")
# The arguments `from_hf_config` reads from the config.
READ = ("heads", "alibi_bias_max", "slopes")
# transformers' defaults (its configuration classes).
_BLOOM_HEADS, _MPT_HEADS, _FALCON_HEADS, _FALCON_HIDDEN = 8, 16, 71, 4544


def _int(config, key, default, name=None):
    value = config.get(key, default)
    if not _arguments.is_int(value) or value <= 0:
        raise _arguments.invalid(name or key, "a positive integer", shortened(value))
    return int(value)


def _aliased(config, key, alias, default):
    """`key`, or its alias when only that is given; both must agree."""
    if key in config and alias in config and config[key] != config[alias]:
        expected = f"the value of `{key}`={config[key]!r} (they name one setting)"
        raise _arguments.invalid(alias, expected, shortened(config[alias]))
    return _int(config, key if key in config else alias, default)


def _bloom(config):
    heads = _aliased(config, "n_head", "num_attention_heads", _BLOOM_HEADS)
    return {"heads": _slopes.check_heads(heads, "n_head")}


def _mpt(config):
    heads = _aliased(config, "n_heads", "num_attention_heads", _MPT_HEADS)
    attn = config.get("attn_config")
    attn = {} if attn is None else attn
    if not isinstance(attn, dict):
        raise _arguments.invalid("attn_config", "a dict", shortened(attn))
    if attn.get("alibi", True) is not True:
        expected = "true (false means MPT uses no ALiBi)"
        raise _arguments.invalid("attn_config.alibi", expected, attn.get("alibi"))
    bias_max = attn.get("alibi_bias_max", 8)
    if bias_max != 8 or isinstance(bias_max, bool):
        expected = (
            f"8: transformers {TRANSFORMERS_VERSION}'s MPT builds its bias "
            "with 8 whatever this says"
        )
        raise _arguments.invalid("attn_config.alibi_bias_max", expected, bias_max)
    return {"heads": _slopes.check_heads(heads, "n_heads")}


def _falcon(config):
    if config.get("alibi", False) is not True:
        expected = (
            "true (without ALiBi Falcon uses RoPE: "
            "keras_posenc.RotaryEmbedding.from_hf_config)"
        )
        raise _arguments.invalid("alibi", expected, config.get("alibi", False))
    heads = _slopes.check_heads(
        _int(config, "num_attention_heads", _FALCON_HEADS), "num_attention_heads"
    )
    # `n_embed` overrides `hidden_size` when given (FalconConfig.__post_init__).
    key = "n_embed" if config.get("n_embed") is not None else "hidden_size"
    head_dim = _int(config, key, _FALCON_HIDDEN) // heads
    if head_dim == 0:
        expected = f"at least num_attention_heads={heads}"
        raise _arguments.invalid(key, expected, config.get(key, _FALCON_HIDDEN))
    exponents = _slopes.exponents(heads, 8)
    return {"slopes": [_slopes.power_of_two(r, head_dim) for r in exponents]}


_READERS = {"bloom": _bloom, "mpt": _mpt, "falcon": _falcon}


def layer_arguments(config, overrides):
    """The `AlibiBias` arguments of `config`, with `overrides` (other
    constructor arguments, none of them one read from the config)."""
    config = _hf_json.load(config)
    model_type = config.get("model_type")
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is None:
        expected = (
            f"one of {MODEL_TYPES}: the model types with ALiBi in transformers "
            f"{TRANSFORMERS_VERSION} (Baichuan-13B and Jais use remote code)"
        )
        raise _arguments.invalid("model_type", expected, shortened(model_type))
    return _hf_json.with_overrides(reader(config), overrides, READ)
