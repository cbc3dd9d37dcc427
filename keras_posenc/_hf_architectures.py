"""How transformers 5.23 reads RoPE from each architecture's `config.json`.

One `Architecture` per `model_type` whose attention uses rotary embeddings:
the keys its configuration class and rotary module read, the defaults
its configuration class fills in, and how its attention pairs features.
Read from transformers' `models/*/configuration_*.py` (the fields, their
defaults, `convert_rope_params_to_dict`, `__post_init__`) and
`modeling_*.py` (the rotary module and `apply_rotary_pos_emb`). Keys use
the names of transformers' standardized configs: `hidden_size`,
`num_attention_heads`, `head_dim`, `max_position_embeddings`,
`rope_theta`, `partial_rotary_factor`, `original_max_position_embeddings`.
`_hf_config` reads a config with this table.
"""

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

_FROZEN = types.MappingProxyType


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What one `model_type` reads for RoPE, and its defaults.

    Attributes:
        defaults: standardized key -> the value its config class gives
            when the key is absent (None: computed, or no default).
        aliases: ``((raw key, standardized key), ...)``: keys this model
            reads in place of the standardized one (GPT-NeoX's
            `rotary_pct`); the raw key wins when both are present.
        ignored: top-level keys its config class or rotary module does not
            read for RoPE (a name, or ``(raw key, standardized key)``):
            refused unless equal to the value read.
        partial: whether its rotary embedding applies
            `partial_rotary_factor` (else the whole head rotates, and a
            factor other than 1 is refused).
        layout: `"half"` or `"interleaved"`, or ``(key, default)``: a bool
            key choosing interleaved (DeepSeek-V3's `rope_interleave`).
        mrope: whether `mrope_section` is read (Qwen2-VL style models).
        section: the `mrope_section` its rotary module uses when absent.
        text: the `model_type` of its `text_config` (multimodal wrappers).
        lift: without a `text_config`, the top-level keys are the text
            config's (Qwen2-VL); else a `text_config` is required.
        local_theta: ``(key, default)``: the base of `sliding_attention`
            layers, read from its own key (Gemma 3's `rope_local_base_freq`).
        rope_parameters: the `rope_parameters` used when none is given.
        renamed: legacy `rope_type` values it maps (Phi-3's `"su"`).
        refuse: ``((key, value, why), ...)``: a value of a key that means
            no RoPE, or a RoPE that transformers cannot run.
    """

    defaults: dict
    aliases: tuple = ()
    ignored: tuple = ()
    partial: bool = False
    layout: object = "half"
    mrope: bool = False
    section: tuple | None = None
    text: str | None = None
    lift: bool = False
    local_theta: tuple | None = None
    rope_parameters: dict | None = None
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    refuse: tuple = ()


def _defaults(hidden, heads, positions, head_dim=None, theta=10000.0, **extra):
    return _FROZEN(
        {
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "max_position_embeddings": positions,
            "head_dim": head_dim,
            "rope_theta": theta,
            "partial_rotary_factor": None,
            "original_max_position_embeddings": None,
            **extra,
        }
    )


def _llama_like(hidden, heads, positions, head_dim=None, theta=10000.0, **fields):
    return Architecture(_defaults(hidden, heads, positions, head_dim, theta), **fields)


_DEEPSEEK = {"aliases": (("qk_rope_head_dim", "head_dim"),), "ignored": ("head_dim",)}
_VL: dict[str, Any] = {"mrope": True, "renamed": _FROZEN({"mrope": "default"})}
_QWEN_VL = {**_VL, "section": (16, 24, 24)}

# A config without a `model_type`, or with one this table does not know: the
# standardized keys as transformers' Llama reads them, with
# `partial_rotary_factor` applied (as most architectures and every scaled
# `rope_type` do) and multimodal sections allowed.
GENERIC = Architecture(
    _defaults(None, None, None), partial=True, mrope=True, renamed=_VL["renamed"]
)

ARCHITECTURES = _FROZEN(
    {
        "llama": _llama_like(4096, 32, 2048),
        "mistral": _llama_like(4096, 32, 131072),
        "mixtral": _llama_like(4096, 32, 131072, theta=1e6),
        "qwen2": _llama_like(4096, 32, 32768),
        "qwen2_moe": _llama_like(2048, 16, 32768),
        "qwen3": _llama_like(4096, 32, 32768, head_dim=128),
        "qwen3_moe": _llama_like(2048, 32, 32768),
        "qwen2_vl_text": _llama_like(8192, 64, 32768, theta=1e6, **_QWEN_VL),
        "qwen2_5_vl_text": _llama_like(8192, 64, 32768, theta=1e6, **_QWEN_VL),
        "qwen2_vl": _llama_like(8192, 64, 32768, text="qwen2_vl_text", lift=True),
        "qwen2_5_vl": _llama_like(8192, 64, 32768, text="qwen2_5_vl_text", lift=True),
        "gemma": _llama_like(3072, 16, 8192, head_dim=256),
        "gemma2": _llama_like(2304, 8, 8192, head_dim=256),
        "gemma3_text": _llama_like(
            2304,
            8,
            131072,
            head_dim=256,
            theta=1e6,
            local_theta=("rope_local_base_freq", 10000.0),
        ),
        "gemma3": _llama_like(2304, 8, 131072, text="gemma3_text"),
        "phi": Architecture(
            _defaults(2048, 32, 2048, partial_rotary_factor=0.5), partial=True
        ),
        "phi3": Architecture(
            _defaults(3072, 32, 4096, original_max_position_embeddings=4096),
            partial=True,
            renamed=_FROZEN({"su": "longrope", "yarn": "longrope"}),
        ),
        "deepseek_v2": _llama_like(
            4096, 32, 2048, 64, layout="interleaved", **_DEEPSEEK
        ),
        "deepseek_v3": _llama_like(
            7168, 128, 4096, 64, layout=("rope_interleave", True), **_DEEPSEEK
        ),
        "gpt_neox": Architecture(
            _defaults(6144, 64, 2048, partial_rotary_factor=0.25),
            aliases=(
                ("rotary_pct", "partial_rotary_factor"),
                ("rotary_emb_base", "rope_theta"),
            ),
            ignored=("rope_theta", "partial_rotary_factor"),
            partial=True,
        ),
        "gptj": Architecture(
            _defaults(4096, 16, 2048, rotary_dim=64),
            aliases=(
                ("n_embd", "hidden_size"),
                ("n_head", "num_attention_heads"),
                ("n_positions", "max_position_embeddings"),
            ),
            ignored=(
                "rope_theta",
                "rope_scaling",
                "rope_parameters",
                "partial_rotary_factor",
            ),
            layout="interleaved",
            refuse=(("rotary_dim", None, "an integer (GPT-J rotates rotary_dim)"),),
        ),
        "falcon": _llama_like(
            4544,
            71,
            2048,
            aliases=(("n_embed", "hidden_size"),),
            ignored=("head_dim", ("n_head", "num_attention_heads")),
            refuse=(("alibi", True, "false (with ALiBi, Falcon uses no RoPE)"),),
        ),
        "stablelm": Architecture(
            _defaults(2560, 32, 4096, partial_rotary_factor=0.25), partial=True
        ),
        "olmo": _llama_like(4096, 32, 2048),
        "olmo2": _llama_like(4096, 32, 2048),
        "cohere": _llama_like(8192, 64, 8192, theta=500000.0, layout="interleaved"),
        "granite": _llama_like(4096, 32, 2048),
        "starcoder2": _llama_like(3072, 24, 4096),
        "gpt_oss": _llama_like(
            2880,
            64,
            131072,
            head_dim=64,
            theta=150000.0,
            rope_parameters=_FROZEN(
                {
                    "rope_type": "yarn",
                    "factor": 32.0,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                    "original_max_position_embeddings": 4096,
                }
            ),
        ),
    }
)

# model_type -> why: architectures in transformers whose rotary embedding
# this table does not map exactly; refused by name rather than guessed.
REFUSED: Mapping[str, str] = _FROZEN({})
