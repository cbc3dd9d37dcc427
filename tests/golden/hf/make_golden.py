"""Golden RoPE values of each architecture's own transformers rotary module.

Run from the repository root (needs torch and transformers 5.24, which are
not project dependencies; the tests need only numpy and these files)::

    python tests/golden/hf/make_golden.py

For each `configs/<model_type>.json` (a small config with the keys of a
published one, see README.md), and for the bare ``{"model_type": ...}`` of
each architecture (its defaults), per layer type where RoPE differs per
layer type, this loads the config with transformers (`AutoConfig.for_model`
on the raw dict), builds that architecture's own rotary embedding and
records in `golden.npz` (arrays named ``<case>.<field>``) and `cases.json`:

* ``inv_freq``: its float32 inverse frequencies; ``attention_scaling``;
* ``inv_freq64``: the same formula in float64, from transformers'
  standardized `rope_parameters` (`tests/golden/rope/make_golden.py`'s
  transcription), the reference for the long positions;
* ``q`` (``[1, positions, 1, head features]``, multiples of 1/8 drawn by
  `default_rng(0)`) and
  ``q_rotated``: the query rotated by the model's own `apply_rotary_pos_emb`
  (or GPT-J's sinusoidal table, DeepSeek-V2's complex product) at
  ``POSITIONS``, in the same layout, the pass-through features appended;
* ``layout`` (how the model pairs features), ``rotary_dim``, and
  ``deinterleaved`` (DeepSeek-V3 `rope_interleave`: its output lists the
  rotated even features, then the odd ones).
"""

import copy
import importlib
import json
import pathlib
import sys

import numpy as np
import torch
import transformers
from transformers import AutoConfig

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rope"))
import make_golden as rope_golden  # noqa: E402  (the float64 transcription)

POSITIONS = np.array([0, 1, 2, 3, 7, 64, 100, 511, 1000], np.int64)
HEADS = 1
# model_type -> (module, rotary class, how q is rotated).
MODELS = {
    "llama": ("llama", "LlamaRotaryEmbedding", "half"),
    "mistral": ("mistral", "MistralRotaryEmbedding", "half"),
    "mixtral": ("mixtral", "MixtralRotaryEmbedding", "half"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding", "half"),
    "qwen2_moe": ("qwen2_moe", "Qwen2MoeRotaryEmbedding", "half"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding", "half"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeRotaryEmbedding", "half"),
    "qwen2_vl": ("qwen2_vl", "Qwen2VLRotaryEmbedding", "mrope"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", "mrope"),
    "gemma": ("gemma", "GemmaRotaryEmbedding", "half"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding", "half"),
    "gemma3": ("gemma3", "Gemma3RotaryEmbedding", "layers"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding", "layers"),
    "phi": ("phi", "PhiRotaryEmbedding", "half"),
    "phi3": ("phi3", "Phi3RotaryEmbedding", "half"),
    "deepseek_v2": ("deepseek_v2", "DeepseekV2RotaryEmbedding", "complex"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding", "deepseek_v3"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding", "half"),
    "gptj": ("gptj", None, "gptj"),
    "falcon": ("falcon", "FalconRotaryEmbedding", "half"),
    "stablelm": ("stablelm", "StableLmRotaryEmbedding", "half"),
    "olmo": ("olmo", "OlmoRotaryEmbedding", "half"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding", "half"),
    "cohere": ("cohere", "CohereRotaryEmbedding", "half"),
    "granite": ("granite", "GraniteRotaryEmbedding", "half"),
    "starcoder2": ("starcoder2", "Starcoder2RotaryEmbedding", "half"),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding", "half"),
}
# A multimodal wrapper without a text_config is refused by our reader.
NO_DEFAULTS = ("gemma3",)
INTERLEAVED = ("gptj", "cohere", "deepseek_v2")


def _module(name):
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _q(head_dim):
    # Multiples of 1/8 in [-2, 2]: exact in float32, and they compress well.
    rng = np.random.default_rng(0)
    size = (1, len(POSITIONS), HEADS, head_dim)
    return (rng.integers(-16, 17, size=size) / 8).astype(np.float32)


def _head_features(model_type, config):
    if model_type in ("deepseek_v2", "deepseek_v3"):
        return config.qk_rope_head_dim  # the rope slice of each head
    if model_type == "gptj":
        return config.n_embd // config.n_head
    return getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )


def _gptj(module, config, q):
    dim = config.rotary_dim
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    table = module.create_sinusoidal_positions(int(POSITIONS.max()) + 1, dim)
    sincos = table[torch.from_numpy(POSITIONS)][None]
    sin, cos = torch.split(sincos, dim // 2, dim=-1)
    x = torch.from_numpy(q)
    rotated = module.apply_rotary_pos_emb(x[..., :dim], sin, cos)
    return inv.float(), 1.0, torch.cat([rotated, x[..., dim:]], -1)


def _rotary(model_type, config, q, layer_type):
    """``(inv_freq, attention_scaling, rotated q [B, L, H, D])`` by the model."""
    name, cls, kind = MODELS[model_type]
    module = _module(name)
    if kind == "gptj":
        return _gptj(module, config, q)
    rope = getattr(module, cls)(config)
    x = torch.from_numpy(q).transpose(1, 2)  # [B, H, L, D] as attention has it
    positions = torch.from_numpy(POSITIONS)[None]
    if kind == "mrope":
        positions = positions[None].expand(3, -1, -1)
    args = (layer_type,) if kind == "layers" else ()
    prefix = "" if kind != "layers" else f"{layer_type}_"
    inv = getattr(rope, f"{prefix}inv_freq")
    scaling = getattr(rope, f"{prefix}attention_scaling", None)
    scaling = rope.attention_scaling if scaling is None else scaling
    out = rope(x, positions, *args)
    dim = 2 * inv.shape[0]
    part = x[..., :dim]
    if kind == "complex":
        rotated, _ = module.apply_rotary_emb(part, part, out)
    elif kind == "deepseek_v3":
        rotated, _ = module.apply_rotary_pos_emb_interleave(part, part, *out)
    else:
        rotated, _ = module.apply_rotary_pos_emb(part, part, *out)
    rotated = torch.cat([rotated, x[..., dim:]], -1).transpose(1, 2)
    return inv, float(scaling), rotated


def _inv_freq64(text, rope_parameters, rotary_dim, model_type):
    if model_type == "gptj":
        rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    params = dict(rope_parameters)
    theta = params.pop("rope_theta")
    params.pop("partial_rotary_factor", None)
    rope_type = params.setdefault("rope_type", "default")
    if rope_type == "longrope" and params.get("factor") is None:
        params.pop("factor", None)
    case = {
        "config": {
            "head_dim": rotary_dim,
            "num_attention_heads": 1,
            "rope_theta": theta,
            "rope_scaling": params,
            "max_position_embeddings": text.max_position_embeddings
            if model_type != "gptj"
            else text.n_positions,
        },
        "seq_len": None,
    }
    inverse, _ = rope_golden.reference_inv_freq(case, rope_golden.F64)
    return np.array(inverse, np.float64)


def _rope_parameters(text, layer_type):
    params = getattr(text, "rope_parameters", None)
    if layer_type is not None:
        params = params[layer_type]
    return copy.deepcopy(params)


def run_case(name, raw, layer_type):
    model_type = raw["model_type"]
    config = AutoConfig.for_model(**copy.deepcopy(raw))
    text = config.get_text_config()
    head = _head_features(model_type, text)
    q = _q(head)
    inv, scaling, rotated = _rotary(model_type, text, q, layer_type)
    rotary_dim = 2 * inv.shape[0]
    params = _rope_parameters(text, layer_type)
    inv64 = _inv_freq64(text, params or {}, rotary_dim, model_type)
    ulps = np.abs(inv64.astype(np.float32).view(np.int32) - inv.numpy().view(np.int32))
    assert ulps.max() <= 4, (name, ulps.max())
    interleave = model_type == "deepseek_v3" and getattr(text, "rope_interleave", False)
    layout = "interleaved" if model_type in INTERLEAVED or interleave else "half"
    meta = {
        "name": name,
        "config": raw,
        "model_type": model_type,
        "layer_type": layer_type,
        "rotary_dim": rotary_dim,
        "head_features": head,
        "layout": layout,
        "deinterleaved": bool(interleave),
        "attention_scaling": scaling,
        "rope_parameters": params,
        "inv_freq64_max_ulps_vs_hf": int(ulps.max()),
    }
    arrays = {
        "inv_freq": inv.numpy().astype(np.float32),
        "inv_freq64": inv64,
        "q": q,
        "q_rotated": rotated.numpy().astype(np.float32),
    }
    return meta, arrays


def _cases():
    for path in sorted((HERE / "configs").glob("*.json")):
        raw = json.loads(path.read_text())
        yield path.stem, raw
    for model_type in MODELS:
        if model_type not in NO_DEFAULTS:
            yield f"{model_type}_defaults", {"model_type": model_type}


def main():
    torch.manual_seed(0)
    cases, arrays = [], {"positions": POSITIONS}
    for name, raw in _cases():
        text = AutoConfig.for_model(**copy.deepcopy(raw)).get_text_config()
        nested = MODELS[raw["model_type"]][2] == "layers"
        for layer_type in sorted(set(text.layer_types)) if nested else [None]:
            case = name if layer_type is None else f"{name}.{layer_type}"
            meta, values = run_case(case, raw, layer_type)
            cases.append(meta)
            arrays.update({f"{case}.{k}": v for k, v in values.items()})
    np.savez_compressed(HERE / "golden.npz", **arrays)
    header = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "positions": POSITIONS.tolist(),
        "cases": cases,
    }
    (HERE / "cases.json").write_text(json.dumps(header, indent=1) + "\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
