"""Every transformers model type with a rotary module, read by that module.

Run from the repository root with transformers installed (it is not a
project dependency; the tests read only the files this writes)::

    python tests/golden/hf/make_survey.py

For each model type whose transformers modeling module defines a
``*RotaryEmbedding`` class, and each composite type whose default text
model is one (`wrapper_types`: Llava, Mistral 3, ...), this builds raw
`config.json` dicts (the bare ``{"model_type": ...}``, and variants:
other sizes, a top-level `rope_theta`, `partial_rotary_factor`, each
`rope_type` as `rope_scaling` and as `rope_parameters`, one dict per layer
type), loads each as transformers loads a file (``from_dict``), and runs
that type's own rotary module in float64 (torch's float32 requests are
turned into float64 while it runs) at positions 0..4095, 131072 +- 64
and 10**6 +- 64. A random query is then rotated by the function its
attention calls (``apply_rotary_pos_emb``, DeepSeek's interleaved or complex forms), and
the rotation is matched against the four RoPE rotations (pairs ``(i, i +
d/2)`` or ``(2i, 2i + 1)``, by plus or minus the angle) built from the
module's own float64 frequencies and attention factor. Per case it keeps
the facts a layer must reproduce (`survey.json`): rotary dimension,
pairing, sign, attention factor, the multimodal row of each frequency
(models with `mrope_section`), and the float64 inverse frequencies (in
`survey.npz`, each distinct array once). A case transformers cannot run
keeps its error instead.

Then every case is read with `RotaryEmbedding.from_hf_config` (this
checkout's `keras_posenc`) and `keras_posenc/_hf/model_types.json` is written: a
model type is supported when its defaults are read exactly and no case of
it is read wrongly (a case is either read exactly or refused with a
`ValueError`); its `rope_type`s and `partial_rotary_factor` are allowed
only where their cases are read exactly. Every other model type is refused
by name, with the first evidence against it. The page
`docs/hf-model-types.md` is written from that table.
"""

import contextlib
import copy
import dataclasses
import importlib
import inspect
import json
import math
import pathlib
import re
import resource
import sys
import warnings

import numpy as np
import torch
import transformers
from transformers.models.auto.configuration_auto import (
    CONFIG_MAPPING,
    CONFIG_MAPPING_NAMES,
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

LONG = np.concatenate(
    [
        np.arange(4096),
        np.arange(131072 - 64, 131072 + 65),
        np.arange(10**6 - 64, 10**6 + 65),
    ]
).astype(np.int64)
SHORT = np.arange(4096, dtype=np.int64)
# The query's features are drawn once; the fit of a rotation is its largest
# difference (float64 noise is ~1e-10 at position 10**6).
FIT = 1e-7
MEMORY = 6 << 30
# Rotary classes of vision, audio or speech parts, never a text model's.
_OTHER_PARTS = re.compile("Vision|Audio|DiT|Talker|SaProt")
# How an attention calls its rotation, read from the modeling source.
_CALL = re.compile(r"(?<!def )\b(apply_rotary\w*|apply_multimodal\w*)\(")
_SLICE = re.compile(r"\[(?:\.\.\.|:, :, :), *: *self\.rotary_\w+\]")
# DeepSeek's attention splits each head into a part without RoPE, then its
# rope part (`qk_rope_head_dim` features), which alone is rotated.
_SPLIT = re.compile(r"\[self\.qk_nope_head_dim, self\.qk_rope_head_dim\]")
_LOWP = (torch.float32, torch.float16, torch.bfloat16)


# -- float64 ---------------------------------------------------------------------------


def _wide(value):
    return torch.float64 if value in _LOWP else value


def _dtype_argument(function):
    def wrapped(*args, **kwargs):
        if "dtype" in kwargs:
            kwargs["dtype"] = _wide(kwargs["dtype"])
        return function(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def float64():
    """transformers' float32 (and half) requests give float64 while it runs."""
    saved = []

    def patch(owner, name, make):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, make(getattr(owner, name)))

    def to(original):
        def wrapped(self, *args, **kwargs):
            args = tuple(_wide(a) for a in args)
            if "dtype" in kwargs:
                kwargs["dtype"] = _wide(kwargs["dtype"])
            return original(self, *args, **kwargs)

        return wrapped

    patch(torch.Tensor, "to", to)
    patch(torch.Tensor, "float", lambda f: lambda self, *a, **k: self.double())
    patch(torch.Tensor, "type_as", lambda f: lambda self, o: self.to(_wide(o.dtype)))
    for name in ("arange", "tensor", "ones", "zeros", "full", "linspace", "empty"):
        patch(torch, name, _dtype_argument)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(default)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


# -- model types -----------------------------------------------------------------------


def _modeling(config_class):
    package = config_class.__module__.rsplit(".", 1)[0]
    name = package.rsplit(".", 1)[1]
    return importlib.import_module(f"{package}.modeling_{name}")


def rotary_types():
    """``{model_type: (modeling module, candidate rotary classes)}``."""
    found = {}
    for model_type in CONFIG_MAPPING_NAMES:
        try:
            module = _modeling(CONFIG_MAPPING[model_type])
        except Exception:  # no modeling module, or one that needs extras
            continue
        classes = [
            value
            for name, value in vars(module).items()
            if name.endswith("RotaryEmbedding")
            and inspect.isclass(value)
            and value.__module__ == module.__name__
        ]
        if classes:
            text = [c for c in classes if "Text" in c.__name__]
            rest = [c for c in classes if c not in text]
            ordered = text + [c for c in rest if not _OTHER_PARTS.search(c.__name__)]
            found[model_type] = (module, ordered)
    return found


def wrapper_types(types):
    """``{model_type: (None, None)}`` of each composite type without a rotary
    module of its own whose default text model has one (Llava, Mistral 3):
    it is surveyed through its `text_config`, as transformers builds it."""
    found = {}
    for model_type in CONFIG_MAPPING_NAMES:
        if model_type in types:
            continue
        try:
            text_type = composite(model_type)
        except Exception:  # a config that needs extras, or fails on defaults
            continue
        if text_type in types:
            found[model_type] = (None, None)
    return found


def load(raw):
    """The config transformers makes of a raw `config.json` dict."""
    raw = copy.deepcopy(raw)
    return CONFIG_MAPPING[raw["model_type"]].from_dict(raw)


def text_config(config):
    try:
        return config.get_text_config(decoder=True)
    except Exception:  # an encoder-decoder without one text config
        return config


def composite(model_type):
    """The default text `model_type` of a wrapper with a `text_config`."""
    defaults = getattr(CONFIG_MAPPING[model_type], "sub_configs", {}) or {}
    if "text_config" not in defaults:
        return None
    text = text_config(load({"model_type": model_type}))
    return None if text is None else text.model_type


# -- what the module computes ----------------------------------------------------------


def _rotation_call(module, config):
    """The function the attention rotates queries with, and its form."""
    source = inspect.getsource(module)
    calls = {
        name
        for name in _CALL.findall(source)
        if not re.search("vision|2d|time|multidim|emb_vision", name)
    }
    if calls == {"apply_rotary_pos_emb"}:
        apply = module.apply_rotary_pos_emb
        first = list(inspect.signature(apply).parameters)[:3]
        # GPT-J: apply_rotary_pos_emb(tensor, sin, cos) on [batch, length, heads, d]
        return apply, "table" if first == ["tensor", "sin", "cos"] else "cos_sin"
    if calls == {"apply_rotary_pos_emb_interleave"}:
        return module.apply_rotary_pos_emb_interleave, "cos_sin"
    if calls == {"apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave"}:
        if "if self.config.rope_interleave" not in source:
            raise RuntimeError("chooses its interleaved rotation in its own way")
        interleave = getattr(config, "rope_interleave", False)
        name = (
            "apply_rotary_pos_emb_interleave" if interleave else "apply_rotary_pos_emb"
        )
        return getattr(module, name), "cos_sin"
    if calls == {"apply_rotary_emb"}:
        return module.apply_rotary_emb, "complex"
    raise RuntimeError(f"its attention rotates with {sorted(calls) or 'no known call'}")


def _run(rope, positions, layer_type, rows=None):
    with float64():
        x = torch.zeros(1, 1, len(positions), 8, dtype=torch.float64)
        ids = torch.from_numpy(positions)[None]
        if rows is not None:
            ids = torch.from_numpy(np.stack(rows))[:, None]
        if "layer_type" in inspect.signature(rope.forward).parameters:
            return rope(x, ids, layer_type)
        if layer_type is not None:
            raise RuntimeError("its rotary module has one RoPE for every layer type")
        return rope(x, ids)


def _reference(q, cos, sin, layout, sign):
    """``q`` rotated by the half-size tables `cos`, `sin` ([L, d/2])."""
    n = cos.shape[-1]
    rot, rest = q[..., : 2 * n], q[..., 2 * n :]
    sin = sign * sin
    if layout == "half":
        a, b = rot[..., :n], rot[..., n:]
        out = np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = np.empty_like(rot)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
    return np.concatenate([out, rest], -1)


def _head(config):
    head = getattr(config, "head_dim", None)
    if head is None and getattr(config, "num_attention_heads", None):
        head = config.hidden_size // config.num_attention_heads
    return head


def _rotated(module, apply, form, out, q, dim):
    """The query rotated by the attention's call; whether it slices first."""
    qt = torch.from_numpy(q)
    args = (out,) if form == "complex" else tuple(out)
    source = inspect.getsource(module)
    with float64():
        if form == "table":  # its attention slices the rotated features first
            if not _SLICE.search(source):
                raise RuntimeError("it rotates a table in a way not read here")
            part = qt[..., :dim].transpose(1, 2)
            return apply(part, *args).transpose(1, 2).numpy(), True
        if form == "complex" or _SPLIT.search(source):
            # the attention rotates its rope part only
            return apply(qt[..., :dim], qt[..., :dim], *args)[0].numpy(), True
        try:
            return apply(qt, qt, *args)[0].numpy(), False
        except RuntimeError:  # the attention passes only the rotated features
            if not _SLICE.search(source):
                raise
            return apply(qt[..., :dim], qt[..., :dim], *args)[0].numpy(), True


def _mrope_rows(rope, layer_type, inverse, scaling, half):
    """The position row (temporal, height, width) each frequency reads."""
    rows = [SHORT, 3 * SHORT + 1, 5 * SHORT + 2]
    cos, _ = _run(rope, SHORT, layer_type, rows)
    cos = cos.detach().numpy()
    if cos.size != len(SHORT) * 2 * len(inverse):
        raise RuntimeError(f"its multimodal cos has shape {cos.shape}")
    cos = cos.reshape(len(SHORT), -1)
    cos = cos[:, : len(inverse)] if half else cos[:, 0::2]
    found = []
    for i, w in enumerate(inverse):
        errors = [np.abs(np.cos(r * w) * scaling - cos[:, i]).max() for r in rows]
        found.append(int(np.argmin(errors)) if min(errors) < FIT else -1)
    return found


def _rope(classes, text, positions, layer_type):
    """The first rotary class that runs on `text`, its output, and the
    positions it ran at (a table ends at `max_position_embeddings`)."""
    errors = []
    for cls in classes:
        try:
            with float64():
                rope = cls(text)
            try:
                return rope, _run(rope, positions, layer_type), positions
            except IndexError:  # GPT-J's table of max_position_embeddings rows
                positions = positions[positions < text.max_position_embeddings]
                return rope, _run(rope, positions, layer_type), positions
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
    if not errors:
        raise RuntimeError("its only rotary modules are a vision or audio part's")
    raise RuntimeError(errors[0])


def _frequencies(rope, form, out, positions, layer_type):
    """The module's float64 inverse frequencies and attention factor."""
    if form == "table":  # GPT-J's sin and cos table: the angle at position 1
        sin, cos = (t.detach().numpy().reshape(len(positions), -1) for t in out)
        one = int(np.flatnonzero(positions == 1)[0])
        return np.arctan2(sin[one], cos[one]), 1.0
    prefix = "" if layer_type is None else f"{layer_type}_"
    inverse = getattr(rope, f"{prefix}inv_freq", None)
    inverse = rope.inv_freq if inverse is None else inverse
    scaling = getattr(rope, f"{prefix}attention_scaling", None)
    scaling = float(rope.attention_scaling if scaling is None else scaling)
    return inverse.detach().numpy().astype(np.float64), scaling


def module_facts(module, classes, raw, layer_type, positions):
    """What the model's own rotary module and attention compute for `raw`:
    ``(facts, float64 frequencies, positions it ran at)``."""
    text = text_config(load(raw))
    if NO_ROPE.get(raw["model_type"], lambda c: False)(text):
        raise RuntimeError("the model applies no RoPE with this config")
    rope, out, positions = _rope(classes, text, positions, layer_type)
    apply, form = _rotation_call(module, text)
    inverse, scaling = _frequencies(rope, form, out, positions, layer_type)
    dim = 2 * len(inverse)
    head = max(_head(text) or dim, dim)
    q = np.random.default_rng(0).normal(size=(1, 1, len(positions), head))
    rotated, sliced = _rotated(module, apply, form, out, q, dim)
    if rotated.shape[-1] == dim < head:
        rotated = np.concatenate([rotated, q[..., dim:]], -1)
    angles = positions[:, None] * inverse[None]
    cos, sin = np.cos(angles) * scaling, np.sin(angles) * scaling
    fits = {}
    for layout in ("half", "interleaved"):
        for sign in (1, -1):
            want = _reference(q, cos, sin, layout, sign)
            fits[layout, sign, False] = float(np.abs(want - rotated).max())
            if layout == "interleaved":  # DeepSeek's evens-then-odds output
                order = np.r_[0:dim:2, 1:dim:2, dim : want.shape[-1]]
                fits[layout, sign, True] = float(
                    np.abs(want[..., order] - rotated).max()
                )
    (layout, sign, listed), fit = min(fits.items(), key=lambda item: item[1])
    if fit > FIT:
        raise RuntimeError(
            f"its rotation is no RoPE of its frequencies (off by {fit:.2g})"
        )
    facts = {
        "rotary_dim": dim,
        "layout": layout,
        "sign": sign,
        "attention_factor": scaling,
        "fit": fit,
        "sliced": sliced,
        # The rotated pairs listed evens first, then odds (the same scores).
        "deinterleaved": listed,
    }
    rope_parameters = getattr(text, "rope_parameters", None) or {}
    if layer_type is not None:
        rope_parameters = rope_parameters.get(layer_type) or {}
    section = getattr(rope, "mrope_section", None)  # its default, when unset
    if form == "cos_sin" and (section or rope_parameters.get("mrope_section")):
        half = layout == "half"
        facts["rows"] = _mrope_rows(rope, layer_type, inverse, scaling, half)
        if isinstance(section, (list, tuple)):
            facts["section"] = [int(n) for n in section]
    return facts, inverse, positions


# -- variants --------------------------------------------------------------------------


def _has_field(config_class, name):
    return any(f.name == name for f in dataclasses.fields(config_class))


# Keys without which a model applies no RoPE (read from its modeling source:
# the rotary module is made, or used, only under that condition), and the
# test of that condition on a loaded config.
ENABLE = {
    "esm": {"position_embedding_type": "rotary"},
    "granitemoehybrid": {"position_embedding_type": "rope"},
    # Its defaults give a head of 4096 // 96 = 42 and rotary dimension 21,
    # which no attention can use: the published head_dim (GLM-4.5).
    "glm4_moe": {"head_dim": 128},
}
NO_ROPE = {
    "esm": lambda c: c.position_embedding_type != "rotary",
    "granitemoehybrid": lambda c: c.position_embedding_type != "rope",
    "falcon": lambda c: bool(c.alibi),
}


def _phi3(rope_type, **keys):
    """A Phi-3 (head 96) LongRoPE dict under one of its rope_type names."""
    return {
        "type": rope_type,
        "short_factor": [1.0] * 48,
        "long_factor": [2.0] * 48,
        **keys,
    }


# Cases of the keys each model reads in its own way (`_hf_architectures.QUIRKS`).
EXTRA = {
    "esm": [("absolute", {"position_embedding_type": "absolute"})],
    "granitemoehybrid": [
        ("nope", {"position_embedding_type": "nope"}),
        ("no_type", {"position_embedding_type": None}),
    ],
    "falcon": [
        ("alibi", {"alibi": True}),
        ("alibi_int", {"alibi": 1}),
        ("alibi_str", {"alibi": "true"}),
        ("n_embed", {"n_embed": 512, "num_attention_heads": 8}),
    ],
    "gpt_neox": [("rotary_keys", {"rotary_pct": 0.5, "rotary_emb_base": 20000})],
    "gpt_neox_japanese": [
        ("rotary_keys", {"rotary_pct": 0.4, "rotary_emb_base": 20000}),
        ("rotary_pct", {"rotary_pct": 0.25}),
    ],
    "gptj": [("rotary_dim", {"rotary_dim": 32}), ("n_embd", {"n_embd": 512})],
    "deepseek_v2": [("qk_rope_head_dim", {"qk_rope_head_dim": 32})],
    "deepseek_v3": [
        ("qk_rope_head_dim", {"qk_rope_head_dim": 32}),
        ("not_interleaved", {"rope_interleave": False}),
    ],
    "gemma3_text": [
        ("local_base", {"rope_local_base_freq": 5000.0, "rope_theta": 2e6}),
        ("flat_parameters", {"rope_parameters": {"rope_type": "default"}}),
        (
            "flat_linear",
            {"rope_parameters": {"rope_type": "linear", "factor": 8.0}},
        ),
        (
            "scaling_and_nested",
            {
                "rope_scaling": {"rope_type": "linear", "factor": 8.0},
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 3e4},
                },
            },
        ),
    ],
    "phi3": [
        ("su", {"rope_scaling": _phi3("su")}),
        (
            "su_length",
            {"rope_scaling": _phi3("su", original_max_position_embeddings=2048)},
        ),
        ("yarn_renamed", {"rope_scaling": _phi3("yarn")}),
        (
            "top_length",
            {
                "original_max_position_embeddings": 2048,
                "rope_scaling": _phi3("longrope"),
            },
        ),
    ],
    "qwen2_5_vl": [
        (
            # what some published files hold: the legacy "mrope" beside "default"
            "legacy_mrope",
            {
                "rope_scaling": {
                    "type": "mrope",
                    "mrope_section": [16, 24, 24],
                    "rope_type": "default",
                }
            },
        )
    ],
    "qwen2_vl": [
        (
            "lifted",
            {
                "rope_theta": 5e5,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            },
        )
    ],
    "llama": [
        (
            "finetuned",
            {
                "rope_scaling": {
                    "type": "yarn",
                    "factor": 16.0,
                    "original_max_position_embeddings": 4096,
                    "finetuned": True,
                },
                "max_position_embeddings": 65536,
            },
        ),
        (
            "llama3_equal",
            {
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 2.0,
                    "high_freq_factor": 2.0,
                    "original_max_position_embeddings": 8192,
                },
                "max_position_embeddings": 131072,
            },
        ),
    ],
}


def variants(model_type, config, dim):
    """``(name, keys, positions)`` for the raw configs tried on `model_type`."""
    config_class = type(config)
    factors = [round(1.0 + i / 16, 4) for i in range(dim // 2)]
    yield "defaults", {}, "long"
    for name, keys in EXTRA.get(model_type, ()):
        yield name, keys, "long"
    yield "theta", {"rope_theta": 31250.0}, "long"
    if getattr(config, "num_attention_heads", None):
        kv = (
            {"num_key_value_heads": 8}
            if _has_field(config_class, "num_key_value_heads")
            else {}
        )
        yield "heads", {"hidden_size": 1024, "num_attention_heads": 8, **kv}, "long"
    if _has_field(config_class, "head_dim"):
        yield "head_dim", {"head_dim": 96}, "long"
    yield "partial", {"partial_rotary_factor": 0.5}, "long"
    params = {"rope_type": "default", "rope_theta": 31250.0}
    yield "rope_parameters", {"rope_parameters": params}, "long"
    yield "linear", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "long"
    dynamic = {
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
        "max_position_embeddings": 2048,
    }
    yield "dynamic", dynamic, "long"
    yield "dynamic_short", dynamic, "short"
    yarn = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
    }
    yield "yarn", {"rope_scaling": yarn, "max_position_embeddings": 16384}, "long"
    yarn = {
        **yarn,
        "rope_theta": 1e6,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "truncate": False,
    }
    yield (
        "yarn_parameters",
        {"rope_parameters": yarn, "max_position_embeddings": 16384},
        "long",
    )
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    keys = {
        "rope_scaling": llama3,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
    }
    yield "llama3", keys, "long"
    longrope = {
        "rope_type": "longrope",
        "short_factor": [1.0] * (dim // 2),
        "long_factor": factors,
        "original_max_position_embeddings": 4096,
    }
    keys = {"rope_scaling": longrope, "max_position_embeddings": 131072}
    yield "longrope", keys, "long"
    yield "longrope_short", keys, "short"
    for i, layer_type in enumerate(_nested_types(config)):
        nested = {
            t: {"rope_type": "default", "rope_theta": 20000.0 + 10000.0 * j}
            for j, t in enumerate(_nested_types(config))
        }
        nested[layer_type] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}
        yield f"nested_{i}", {"rope_parameters": nested}, "long"


def _nested_types(config):
    """The layer types `config`'s RoPE is nested by (none when flat)."""
    params = getattr(config, "rope_parameters", None) or {}
    return sorted(k for k, v in params.items() if isinstance(v, dict))


# -- the cases -------------------------------------------------------------------------


def _message(error):
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text if len(text) <= 200 else text[:197] + "..."


def _raw(model_type, text_type, keys):
    if text_type is None or not keys:
        return {"model_type": model_type, **ENABLE.get(model_type, {}), **keys}
    return {"model_type": model_type, "text_config": keys}


def record_facts(case, module, classes, positions, arrays, prefix):
    """Runs the rotary module on `case`'s config and layer type at
    `positions`: its facts go to `case["transformers"]` (its frequencies
    kept once in `arrays`, named `prefix` and a number) and the positions it
    ran to `case["seq_len"]`, or its error to `case["error"]`."""
    try:
        facts, inverse, ran = module_facts(
            module, classes, case["config"], case["layer_type"], positions
        )
    except Exception as error:
        case["error"] = _message(error)
    else:
        case["seq_len"] = int(ran.max()) + 1
        key = inverse.tobytes()
        arrays.setdefault(key, (f"{prefix}{len(arrays)}", inverse))
        facts["inv_freq"] = arrays[key][0]
        case["transformers"] = facts


def survey(model_type, module, classes, arrays, types):
    """Every case of `model_type`, with the module's facts or its error."""
    text_type = composite(model_type)
    if text_type in types:  # a wrapper runs its text model's own module
        module, classes = types[text_type]
    base = _raw(model_type, None, {})
    config = text_config(load(base))
    layer_types = _nested_types(config) or [None]
    facts, _, _ = module_facts(module, classes, base, layer_types[0], LONG)
    cases = []
    for name, keys, positions in variants(model_type, config, facts["rotary_dim"]):
        raw = _raw(model_type, text_type, keys)
        values = LONG if positions == "long" else SHORT
        for layer_type in layer_types:
            case = {
                "name": ".".join(filter(None, (model_type, name, layer_type))),
                "model_type": model_type,
                "variant": name,
                "config": raw,
                "layer_type": layer_type,
                "seq_len": int(values.max()) + 1,
            }
            record_facts(case, module, classes, values, arrays, "f")
            cases.append(case)
    return cases


def write_survey(cases, failed, arrays):
    header = {
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "fit": FIT,
        "failed": failed,
    }
    used = {
        case["transformers"]["inv_freq"] for case in cases if "transformers" in case
    }
    kept = {name: array for name, array in arrays.values() if name in used}
    np.savez_compressed(HERE / "survey.npz", **kept)
    lines = ",\n".join(json.dumps(case, sort_keys=True) for case in cases)
    body = json.dumps(header, indent=1)[:-2]
    (HERE / "survey.json").write_text(f'{body},\n "cases": [\n{lines}\n ]\n}}\n')


def run_survey(only=None):
    """Surveys every type (or those in `only`, kept with the others' cases)."""
    arrays, cases, failed = {}, [], {}
    if only:
        old = json.loads((HERE / "survey.json").read_text())
        with np.load(HERE / "survey.npz") as data:
            arrays = {data[n].tobytes(): (n, data[n]) for n in data.files}
        cases = [c for c in old["cases"] if c["model_type"] not in only]
        failed = {t: why for t, why in old["failed"].items() if t not in only}
    types = rotary_types()
    every = {**types, **wrapper_types(types)}
    for model_type, (module, classes) in sorted(every.items()):
        if only and model_type not in only:
            continue
        print(model_type, file=sys.stderr, flush=True)
        try:
            cases += survey(model_type, module, classes, arrays, types)
        except Exception as error:
            failed[model_type] = _message(error)
    cases.sort(key=lambda case: case["model_type"])
    write_survey(cases, failed, arrays)


# -- the table -------------------------------------------------------------------------

_KEYS = (
    "hidden_size",
    "num_attention_heads",
    "head_dim",
    "max_position_embeddings",
    "original_max_position_embeddings",
)
# Variants that try one rope_type: a type keeps the rope_types whose cases
# are all read exactly.
_ROPE_TYPE_OF = {
    "linear": "linear",
    "dynamic": "dynamic",
    "dynamic_short": "dynamic",
    "yarn": "yarn",
    "yarn_parameters": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
    "longrope_short": "longrope",
}
# The rope_types the variants try (proportional, Gemma 4's, is not among them).
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
# Reasons stated by hand where the evidence's own words say less.
REASONS = {
    "nanochat": "its attention rotates by minus the angle (rotate_half is "
    "cat(x2, -x1))",
    "llama4": "chunked attention with interleaved complex RoPE and NoPE layers",
    "ministral3": "its attention scales the queries by 1 + llama_4_scaling_beta "
    "* log(1 + floor(position / original_max_position_embeddings)) after RoPE, "
    "which a RoPE layer cannot express",
    "llama4_text": "chunked attention with interleaved complex RoPE and NoPE layers",
}


def _field_defaults(config_class):
    values = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            values[field.name] = field.default
    return values


def _plain(value):
    if isinstance(value, dict):  # sorted: some configs build theirs from sets
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def entry(model_type, cases):
    """What the table says of `model_type`, from its config class and cases."""
    config_class = CONFIG_MAPPING[model_type]
    text_type = composite(model_type)
    if text_type is not None:
        found = {
            "text": text_type,
            "partial": False,
            "layout": "half",
            "defaults": {},
            "rope_types": ROPE_TYPES,
        }
        if not bare(model_type, text_type):
            found["bare"] = False
        return found
    fields = _field_defaults(config_class)
    default = text_config(load(_raw(model_type, None, {})))
    params = getattr(default, "rope_parameters", None) or {}
    # `attribute_map` reads `config.key` from its own attribute `raw`
    aliases = {
        key: raw
        for key, raw in getattr(config_class, "attribute_map", {}).items()
        if key in _KEYS
    }
    defaults = {key: fields.get(aliases.get(key, key)) for key in _KEYS}
    theta = getattr(config_class, "default_theta", 10000.0)
    defaults["rope_theta"] = theta if isinstance(theta, (int, float)) else None
    # A partial factor is a default of the config class, or of its default
    # dict only (then a config's own rope dict rotates the whole head).
    try:
        mine = text_config(
            load(_raw(model_type, None, {"rope_parameters": {"rope_type": "default"}}))
        )
        kept = (getattr(mine, "rope_parameters", None) or {}).get(
            "partial_rotary_factor"
        )
    except Exception:
        kept = None
    partial_in_dict = params.get("partial_rotary_factor") is not None and kept is None
    defaults["partial_rotary_factor"] = (
        None if partial_in_dict else params.get("partial_rotary_factor")
    )
    found = {
        "defaults": defaults,
        "aliases": sorted([raw, key] for key, raw in aliases.items()),
        "partial": True,
        "rope_types": ROPE_TYPES,
    }
    first = next(c for c in cases if c["variant"] == "defaults")
    found["layout"] = first["transformers"]["layout"]
    source = inspect.getsource(_modeling(config_class))
    if "if self.config.rope_interleave" in source:
        found["layout"] = ["rope_interleave", fields.get("rope_interleave")]
    if _SPLIT.search(source) and "qk_rope_head_dim" in fields:
        # its rope part is `qk_rope_head_dim` wide, whatever `head_dim` says
        found["aliases"].append(["qk_rope_head_dim", "head_dim"])
        found["ignored"] = ["head_dim"]
        defaults["head_dim"] = fields["qk_rope_head_dim"]
    flat = not any(isinstance(v, dict) for v in params.values())
    # A default dict of its own keeps its base whatever a top-level
    # `rope_theta` says (set before transformers fills `rope_theta` in).
    from keras_posenc._hf.architectures import QUIRKS

    quirks = QUIRKS.get(model_type, {}).get("aliases", ())
    theta = next((raw for raw, key in quirks if key == "rope_theta"), "rope_theta")
    try:
        probe = text_config(load(_raw(model_type, None, {theta: 31250.0})))
    except Exception:  # it refuses a top-level rope_theta: no own base
        probe = None
    probed = getattr(probe, "rope_parameters", None) or {}
    own_base = probe is not None and flat and probed.get("rope_theta") != 31250.0
    if flat and (
        own_base or partial_in_dict or params.get("rope_type", "default") != "default"
    ):
        drop = {
            "partial_rotary_factor",
            "rope_theta",
            "mrope_section",
            "mrope_interleaved",
        }
        drop -= {"rope_theta"} if own_base else set()
        drop -= {"partial_rotary_factor"} if partial_in_dict else set()
        kept = {k: v for k, v in params.items() if k not in drop}
        found["rope_parameters"] = _plain(kept)

    facts = first["transformers"]
    if facts.get("section"):  # its rotary module's sections, and their layout
        found["section"] = facts["section"]
        found["interleaved"] = facts["rows"] == _rows(facts, interleaved=True)
    if not flat:
        found["rope_parameters"] = _plain(params)
    return found


def _rope_facts(config):
    keys = ("head_dim", "hidden_size", "num_attention_heads", "partial_rotary_factor")
    facts = {key: getattr(config, key, None) for key in (*_KEYS, *keys)}
    facts["rope_parameters"] = getattr(config, "rope_parameters", None)
    return facts


def bare(model_type, text_type):
    """Whether a wrapper without `text_config` gets its text model's own
    defaults (a dict `text_config`, even empty, always does; without one,
    some wrappers, Mistral 3's, build their own)."""
    try:
        alone = text_config(load({"model_type": model_type}))
        empty = text_config(load({"model_type": model_type, "text_config": {}}))
    except Exception:
        return False
    return _rope_facts(alone) == _rope_facts(empty)


def _rows(facts, interleaved):
    """The multimodal row of each frequency, as `keras_posenc` lays out
    `facts["section"]` (contiguous, or interleaved as Qwen3-VL)."""
    from keras_posenc._rope.config import RopeConfig

    scaling = {
        "rope_type": "default",
        "mrope_section": facts["section"],
        "mrope_interleaved": interleaved,
    }
    try:
        rows = RopeConfig.build(rope_scaling=scaling).channel_rows(facts["rotary_dim"])
    except ValueError:
        return None
    return list(rows)


def _difference(case, layer, arrays):
    """How `layer` differs from what transformers computes, or None."""
    want = case["transformers"]
    if want["sign"] != 1:
        return "its attention rotates by minus the angle"
    dim = layer.rotary_dim
    if dim != want["rotary_dim"]:
        return f"rotary dimension {dim}, transformers {want['rotary_dim']}"
    if layer.layout != want["layout"]:
        return f"pairs {layer.layout}, transformers {want['layout']}"
    if not math.isclose(
        layer.attention_factor, want["attention_factor"], rel_tol=1e-12
    ):
        factor, hf = layer.attention_factor, want["attention_factor"]
        return f"attention factor {factor}, transformers {hf}"
    got = np.array(layer.rope_config.frequencies(dim))
    expected = arrays[want["inv_freq"]]
    off = np.abs(got - expected) / np.where(expected == 0, 1, expected)
    if off.max() > 1e-12:
        return f"frequencies off by up to {off.max():.3g} (relative)"
    rows = layer.rope_config.channel_rows(dim)
    if want.get("rows") is not None and list(rows or ()) != want["rows"]:
        return f"multimodal rows {rows}, transformers {want['rows']}"
    return None


def verdict(case, arrays):
    """``"exact"``, ``"refused"``, or what is wrong."""
    from keras_posenc import RotaryEmbedding

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer = RotaryEmbedding.from_hf_config(
                case["config"], seq_len=case["seq_len"], layer_type=case["layer_type"]
            )
    except ValueError as error:
        return f"refused: {_message(error)}"
    except Exception as error:
        return f"crashed: {_message(error)}"
    if "error" in case:
        return f"read, where transformers fails ({case['error']})"
    return _difference(case, layer, arrays) or "exact"


TABLE = ROOT / "keras_posenc" / "_hf" / "model_types.json"


def _json_table(table):
    rows = [
        f"  {json.dumps(key)}: {json.dumps(table[key], sort_keys=True)}"
        for key in sorted(table)
    ]
    return "{\n" + ",\n".join(rows) + "\n}"


def write_table(supported, refused):
    """`keras_posenc/_hf/model_types.json`: one line per model type."""
    version = json.dumps(transformers.__version__)
    TABLE.write_text(
        f'{{\n"transformers_version": {version},\n"supported": '
        f'{_json_table(supported)},\n"refused": {_json_table(refused)}\n}}\n'
    )
    for name in ("model_types", "architectures", "config"):
        importlib.reload(importlib.import_module(f"keras_posenc._hf.{name}"))


def _failure(why):
    """Why a model type's defaults could not be surveyed, in a reader's words."""
    why = re.sub(r"^(RuntimeError: )+", "", why)
    if re.search(
        r"no attribute '(max_position_embeddings|rope_parameters|hidden_size)'", why
    ):
        return "no text model's RoPE: its config (a vision, audio or other part) " + why
    if why.startswith("its ") or why.startswith("AmbiguousGlobal"):
        return why
    return f"transformers' rotary module fails on its default config ({why})"


def classify(cases, failed, arrays):
    """`SUPPORTED` and `REFUSED`: each type's evidence, read with this checkout."""
    by_type = {}
    for case in cases:
        by_type.setdefault(case["model_type"], []).append(case)
    refused = {t: _failure(why) for t, why in failed.items()}
    supported = {}
    for model_type, group in by_type.items():
        first = [c for c in group if c["variant"] == "defaults"]
        failing = [c["error"] for c in first if "error" in c]
        if failing:
            refused[model_type] = _failure(failing[0])
        else:
            supported[model_type] = entry(model_type, group)
    # Wrappers last: they read their text model's entry, settled first.
    for wrappers in (False, True):
        for _ in range(len(ROPE_TYPES) + 2):
            write_table(supported, refused)
            changed = False
            for model_type in sorted(supported):
                if ("text" in supported[model_type]) == wrappers:
                    changed |= _judge(
                        model_type, by_type[model_type], supported, refused, arrays
                    )
            if not changed:
                break
    for model_type in REASONS.keys() & refused.keys():
        refused[model_type] = REASONS[model_type]
    write_table(supported, refused)
    return supported, refused


def _trait(variant):
    """Whether a wrong `variant` narrows its type rather than refusing it."""
    return variant == "partial" or variant in _ROPE_TYPE_OF


def _judge(model_type, group, supported, refused, arrays):
    """Narrows or refuses `model_type` on its evidence; whether it changed.

    A wrong case of a trait (`partial_rotary_factor`, one `rope_type`) takes
    that trait away, so that it is refused by name; any other wrong case, or
    defaults refused, refuses the type.
    """
    found = supported[model_type]
    if found.get("bare") is False:  # its bare defaults are refused, as is right
        group = [c for c in group if c["config"] != {"model_type": model_type}]
    verdicts = [(c, verdict(c, arrays)) for c in group]
    wrong = [
        (c, v) for c, v in verdicts if v != "exact" and not v.startswith("refused")
    ]
    if not wrong:
        wrong = [
            (c, v) for c, v in verdicts if c["variant"] == "defaults" and v != "exact"
        ]
    if not wrong:
        return False
    fatal = [(c, v) for c, v in wrong if not _trait(c["variant"])]
    if not fatal:
        variant = wrong[0][0]["variant"]
        if variant == "partial":
            found["partial"] = False
        else:
            rope_type = _ROPE_TYPE_OF[variant]
            found["rope_types"] = tuple(
                t for t in found["rope_types"] if t != rope_type
            )
        return True
    case, why = fatal[0]
    del supported[model_type]
    text = found.get("text")
    if text is not None and text not in supported:  # a wrapper of a refused type
        refused[model_type] = f"its text model, {text}, is refused"
        return True
    where = case["variant"] + (f", {case['layer_type']}" if case["layer_type"] else "")
    if why.startswith("refused: "):
        why = f"its {where} config is refused ({why[len('refused: ') :]})"
    else:
        why = f"its {where} config would be read wrongly: {why}"
    refused[model_type] = why
    print(f"refused {model_type}: {refused[model_type]}", file=sys.stderr)
    return True


def main():
    # A module that allocates past this fails one case, not the machine.
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY, MEMORY))
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    if "--table" not in sys.argv:
        run_survey(only[0] if only else None)
    survey_file = json.loads((HERE / "survey.json").read_text())
    with np.load(HERE / "survey.npz") as data:
        arrays = {name: data[name] for name in data.files}
    supported, refused = classify(survey_file["cases"], survey_file["failed"], arrays)
    from keras_posenc._hf import model_types_page as _hf_model_types_page

    page = ROOT / "docs" / "hf-model-types.md"
    page.write_text(_hf_model_types_page.model_types_page())
    print(f"{len(supported)} supported, {len(refused)} refused")


if __name__ == "__main__":
    main()
