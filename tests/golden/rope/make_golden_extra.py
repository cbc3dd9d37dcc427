"""Golden RoPE values from transformers for multimodal and proportional RoPE.

Run from the repository root::

    python tests/golden/rope/make_golden_extra.py

Like ``make_golden.py`` (whose float64 transcription of YaRN it reuses),
this needs torch and transformers (5.23), which are NOT project
dependencies; the tests only read the files it writes beside it:

* multimodal RoPE: Qwen2-VL and Qwen2.5-VL (contiguous ``mrope_section``),
  Qwen3-VL (interleaved sections), GLM-4V (contiguous sections, pairs
  ``(2i, 2i+1)``, partial rotary), each through the model's own text rotary
  embedding (its ``recomposition_frequencies``) and ``apply_rotary_pos_emb``,
  with ``[3, batch, length]`` positions: an image grid between text tokens,
  and a text-only row near position 4095;
* ``proportional`` (Gemma 4's rope type) through ``LlamaRotaryEmbedding``;
* YaRN with ``"truncate": None`` (transformers does not truncate then).

Per case ``{name}``: ``inv_freq`` (HF float32), ``inv_freq64`` (the formula
in float64 numpy), ``positions`` (int64; ``[3, batch, length]`` for
multimodal cases), ``cos`` and ``sin`` (HF float32, ``[batch, length,
rotary dim]``, attention factor included), ``q`` (float32 ``[batch, length,
heads, head_dim]``) and ``q_rotated`` (HF's rotation of ``q``, same
layout); ``extra_cases.json`` records the configs, the `RotaryEmbedding`
arguments that express them, and the versions.
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import numpy as np

OUT_DIR = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(OUT_DIR))
import make_golden  # noqa: E402

HEADS = 2
TEXT = np.arange(4)
# An image of 2 x 3 patches at temporal position 4, then text from 7.
GRID_T = np.full(6, 4)
GRID_H = 4 + np.repeat(np.arange(2), 3)
GRID_W = 4 + np.tile(np.arange(3), 2)
AFTER = np.arange(7, 10)
IMAGE_ROWS = np.stack(
    [
        np.concatenate([TEXT, GRID_T, AFTER]),
        np.concatenate([TEXT, GRID_H, AFTER]),
        np.concatenate([TEXT, GRID_W, AFTER]),
    ]
)
TEXT_ROWS = np.tile(np.arange(4083, 4096), (3, 1))
# [3, batch, length]: example 0 has an image, example 1 is text only.
MROPE_POSITIONS = np.stack([IMAGE_ROWS, TEXT_ROWS], axis=1).astype(np.int64)
POSITIONS = make_golden.POSITIONS[None, :]  # [1, 13]


def _text(model, **extra):
    base = {
        "hidden_size": 256,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "num_hidden_layers": 1,
        "max_position_embeddings": 32768,
    }
    return {"model": model, "config": dict(base, **extra)}


def _qwen2_mrope(model, section, **extra):
    """A Qwen2-VL-style case (``rope_scaling`` of type "mrope", theta 1e6)
    and the `RotaryEmbedding` arguments that express it."""
    return dict(
        _text(
            model,
            rope_theta=1000000.0,
            rope_scaling={"type": "mrope", "mrope_section": list(section)},
            **extra,
        ),
        name=f"mrope_{model}",
        arguments={
            "max_wavelength": 1000000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": list(section)},
        },
    )


CASES = [
    _qwen2_mrope("qwen2_vl", [16, 24, 24]),
    _qwen2_mrope("qwen2_5_vl", [8, 12, 12], hidden_size=128),
    dict(
        _text(
            "qwen3_vl",
            head_dim=128,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        ),
        name="mrope_qwen3_vl",
        arguments={
            "max_wavelength": 5000000.0,
            "rope_scaling": {
                "rope_type": "default",
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        },
    ),
    dict(
        _text(
            "glm4v",
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
                "mrope_section": [8, 12, 12],
            },
        ),
        name="mrope_glm4v",
        arguments={
            "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]},
            "rotary_dim": 64,
            "layout": "interleaved",
        },
    ),
    dict(
        _text(
            "llama",
            head_dim=64,
            rope_parameters={
                "rope_type": "proportional",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
                "factor": 2.0,
            },
        ),
        name="proportional",
        arguments={
            "rope_scaling": {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "factor": 2.0,
            }
        },
    ),
    dict(
        _text(
            "llama",
            head_dim=64,
            max_position_embeddings=16384,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "truncate": None,
            },
        ),
        name="yarn_truncate_none",
        arguments={
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "truncate": None,
            }
        },
    ),
]


def hf_classes(model):
    """(config class, text rotary class, apply_rotary_pos_emb) of a model."""
    import transformers
    from transformers.models.glm4v import modeling_glm4v
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
    from transformers.models.qwen2_vl import modeling_qwen2_vl
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    return {
        "qwen2_vl": (
            transformers.Qwen2VLTextConfig,
            modeling_qwen2_vl.Qwen2VLRotaryEmbedding,
            modeling_qwen2_vl.apply_rotary_pos_emb,
        ),
        "qwen2_5_vl": (
            transformers.Qwen2_5_VLTextConfig,
            modeling_qwen2_5_vl.Qwen2_5_VLRotaryEmbedding,
            modeling_qwen2_5_vl.apply_rotary_pos_emb,
        ),
        "qwen3_vl": (
            transformers.Qwen3VLTextConfig,
            modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding,
            modeling_qwen3_vl.apply_rotary_pos_emb,
        ),
        "glm4v": (
            transformers.Glm4vTextConfig,
            modeling_glm4v.Glm4vTextRotaryEmbedding,
            modeling_glm4v.apply_rotary_pos_emb,
        ),
        "llama": (
            transformers.LlamaConfig,
            modeling_llama.LlamaRotaryEmbedding,
            modeling_llama.apply_rotary_pos_emb,
        ),
    }[model]


def inv_freq64(rope_parameters, head_dim):
    """The frequencies in float64 numpy, transcribed from transformers."""
    theta = np.float64(rope_parameters["rope_theta"])
    rope_type = rope_parameters["rope_type"]
    if rope_type == "yarn":
        case = {
            "config": {"rope_theta": theta, "rope_scaling": rope_parameters},
        }
        case["config"]["head_dim"], case["config"]["num_attention_heads"] = head_dim, 1
        inverse, _ = make_golden.reference_inv_freq(case, make_golden.F64)
        return np.array(inverse, np.float64)
    partial = rope_parameters.get("partial_rotary_factor", 1.0)
    if rope_type == "proportional":
        angles = int(partial * head_dim // 2)
        rotated = theta ** -(np.arange(0, 2 * angles, 2) / head_dim)
        inverse = np.concatenate([rotated, np.zeros(head_dim // 2 - angles)])
        return inverse / rope_parameters.get("factor", 1.0)
    dim = int(head_dim * partial)
    return theta ** -(np.arange(0, dim, 2) / dim)


def run_case(case, torch):
    Config, Rotary, apply_rope = hf_classes(case["model"])
    config = Config(**copy.deepcopy(case["config"]))
    rope = Rotary(config)
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )
    multimodal = "mrope_section" in config.rope_parameters
    positions = MROPE_POSITIONS if multimodal else POSITIONS
    batch, length = positions.shape[-2:]
    x = torch.zeros(batch, length, head_dim)
    cos_t, sin_t = rope(x, torch.from_numpy(positions))
    rng = np.random.default_rng(make_golden.Q_SEED)
    q = rng.standard_normal((batch, length, HEADS, head_dim)).astype(np.float32)
    q_t = torch.from_numpy(q).transpose(1, 2)
    q_rot, _ = apply_rope(q_t, q_t, cos_t, sin_t, unsqueeze_dim=1)
    inverse = rope.inv_freq.numpy()
    inverse64 = inv_freq64(config.rope_parameters, head_dim)
    ulps = make_golden.ulp_diff(inverse64.astype(np.float32), inverse)
    assert ulps.max() <= make_golden.MAX_ULPS, (case["name"], ulps)
    files = {
        "inv_freq": inverse,
        "inv_freq64": inverse64,
        "positions": positions,
        "cos": cos_t.numpy(),
        "sin": sin_t.numpy(),
        "q": q,
        "q_rotated": q_rot.transpose(1, 2).contiguous().numpy(),
    }
    for key, array in files.items():
        path = OUT_DIR / f"{case['name']}.{key}.npy"
        np.save(path, array)
        assert path.stat().st_size < 200_000, path
    return {
        "name": case["name"],
        "hf_config": case["config"],
        "hf_config_class": Config.__name__,
        "rope_parameters": config.rope_parameters,
        "rotary_embedding_class": f"{Rotary.__module__}.{Rotary.__name__}",
        "apply_rotary_pos_emb": f"{apply_rope.__module__}.{apply_rope.__name__}",
        "arguments": case["arguments"],
        "head_dim": head_dim,
        "rotary_dim": int(cos_t.shape[-1]),
        "attention_factor": float(rope.attention_scaling),
        "multimodal": multimodal,
        "inv_freq64_max_ulps_vs_hf": int(ulps.max()),
    }


def main():
    import torch
    import transformers

    torch.set_grad_enabled(False)
    entries = []
    for case in CASES:
        entry = run_case(case, torch)
        entry["transformers_version"] = transformers.__version__
        entry["torch_version"] = torch.__version__
        entries.append(entry)
        print(f"{entry['name']:20s} rotary_dim={entry['rotary_dim']}")
    (OUT_DIR / "extra_cases.json").write_text(json.dumps(entries, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
