"""Survey and goldens of the RoPE of vision and audio towers (issue 49).

Run from the repository root (a few minutes; not the 40-minute text survey):

    python tests/golden/hf/make_vision.py

For every model type of transformers whose configuration holds a vision or
audio part (a `vision_config`, `audio_config`, ... sub-config, possibly
nested, e.g. Qwen2.5-Omni's `thinker_config.vision_config`), and every
vision or audio configuration type itself, this finds the part's rotary
module in its modeling file (a `...Rotary...` class built from that
configuration class), runs it on probe patch ids and classifies its cos and
sin against the N-axis rules of `keras_posenc._hf.vision.RULES`, written
here again in float64 (`RULES`): a part whose module matches one rule on
its default config and on variants (other head dims and bases) is read;
one with a module that matches none is refused with the reason (`WHY`,
written by hand from its modeling code); one without is "none".

Writes:

* `keras_posenc/_hf/vision_types.json`: `PARTS` (composite type -> part ->
  (path, default part type)), `READ` (part type -> how it is read),
  `REFUSED` (part type -> why) and `NONE` (part types without rotary
  module);
* `tests/golden/hf/vision.json` and `vision.npz`: per read type, a default
  and a variant config, patch ids as the model makes them
  (`get_vision_position_ids`, Pixtral's row-major grid), and the queries
  rotated by the model's own module and its own rotation function
  (`apply_rotary_pos_emb_vision` or the model's `apply_rotary_pos_emb`);
  the resolved head dim and base (the float64 recomputation in the tests
  uses them); and `get_vision_position_ids` of several `grid_thw`.

DINOv3 (`dinov3_vit`, whose module `DINOv3ViTRopePositionEmbedding` is no
`...Rotary...` class and rotates by patch centres in [-1, 1]) is checked
and written apart (`_dinov3`): its module in eval mode against its rule,
its own `apply_rotary_pos_emb` after its class and register tokens, and
`get_patches_center_coordinates` of several grids (`coordinates.HxW`).
"""

import importlib
import inspect
import json
import pathlib
import sys
import warnings

import numpy as np
import torch
import transformers
from transformers import CONFIG_MAPPING, vision_utils

from keras_posenc._hf.model_types import SUPPORTED as TEXT_SUPPORTED

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[2]
PART_KEYS = {"vision": ("vision",), "audio": ("audio",)}

# Why a part with a rotary module is not read: each from its modeling code.
WHY = {
    "kimi_k25_vision": (
        "its rotary module interleaves the axes frequency by frequency "
        "(w0, h0, w1, h1, ...): no N-axis layout"
    ),
    "step3p5_vision": (
        "its rotary module puts the column before the row ([w | h], "
        "rotate_half) while the model makes (row, column) ids "
        "(get_vision_position_ids): the N-axis layer rotates axis i by the "
        "i-th block, so it would take ids other than the model's own"
    ),
    "inkling2_vision": (
        "its rotary module puts the column before the row ([w | h], pairs "
        "interleaved) while the model makes (row + 1, column + 1) ids: the "
        "N-axis layer would take ids other than the model's own"
    ),
    "minimax_m3_vl_vision": (
        "its rotary module rotates 3 axes of 2 * ((head_dim // 3) // 2) "
        "features and passes the rest through: the N-axis layer rotates the "
        "whole head"
    ),
    "sam2_video": (
        "its rotary module is the memory attention's, over its own "
        "end_x x end_y grid (with repeats for the memory): not patch ids"
    ),
    "edgetam_video": "its rotary module is the memory attention's, over its own grid",
    "sam3_tracker_video": (
        "its rotary module is the memory attention's, over its own grid"
    ),
    "deepseek_ocr2_vision": (
        "its encoder is a 1-D text decoder (`encoder_config`): read it with "
        "from_hf_config on that config"
    ),
    "dots3_note_audio_encoder": (
        "transformers' audio rotary module fails on its default config"
    ),
}
# The model's rotation of the queries, by the name of its function.
APPLY = ("apply_rotary_pos_emb_vision", "apply_rotary_pos_emb")


def _part_of(name):
    for part, words in PART_KEYS.items():
        if any(w in name for w in words):
            return part
    return None


def _sub_parts(config, path=(), depth=0):
    """``[(part, path, sub config)]`` of the vision and audio sub-configs."""
    found = []
    classes = getattr(config, "sub_configs", {}) or {}
    for key in sorted(classes):
        sub = getattr(config, key, None)
        if sub is None:  # built on demand (Gemma 4): its class's defaults
            try:
                sub = classes[key]()
            except Exception:
                continue
        part = _part_of(key)
        if part is not None:
            found.append((part, (*path, key), sub))
        elif depth < 1:
            found += _sub_parts(sub, (*path, key), depth + 1)
    return found


def _rotary_class(config_class):
    """The `...Rotary...` class of the modeling module built from
    `config_class`, or None."""
    package = config_class.__module__.rsplit(".", 1)[0]
    name = package.rsplit(".", 1)[1]
    try:
        modeling = importlib.import_module(f"{package}.modeling_{name}")
    except Exception:
        return None, None
    for attr, cls in sorted(vars(modeling).items()):
        if "Rotary" not in attr or not inspect.isclass(cls):
            continue
        if cls.__module__ != modeling.__name__:
            continue
        hints = inspect.signature(cls.__init__).parameters.get("config")
        annotation = getattr(hints, "annotation", None)
        named = (
            annotation
            if isinstance(annotation, str)
            else getattr(annotation, "__name__", "")
        )
        if named == config_class.__name__:
            return cls, modeling
    return None, modeling


def _field_default(config_class, name):
    """The class's declared default of `name` (None where it declares none)."""
    field = getattr(config_class, "__dataclass_fields__", {}).get(name)
    default = getattr(field, "default", None)
    return default if isinstance(default, int) else None


def _same_part(model_type, path):
    """Whether the wrapper given an empty part builds the part's defaults."""
    made = getattr(CONFIG_MAPPING[model_type](**{path[0]: {}}), path[0])
    base = type(made)()
    keys = ("hidden_size", "embed_dim", "num_attention_heads", "head_dim")
    return all(getattr(made, k, None) == getattr(base, k, None) for k in keys)


def _own_defaults(sub):
    """The RoPE keys where a wrapper's default part (built when its config
    has none: Mistral Large 4) differs from the part class's defaults."""
    try:
        base = type(sub)()
    except Exception:
        return {}
    keys = ("hidden_size", "embed_dim", "num_attention_heads", "head_dim")
    own = {
        key: getattr(sub, key)
        for key in keys
        if getattr(sub, key, None) != getattr(base, key, None)
    }
    theta = (getattr(sub, "rope_parameters", None) or {}).get("rope_theta")
    if theta != (getattr(base, "rope_parameters", None) or {}).get("rope_theta"):
        own["rope_theta"] = theta
    return own


def _head_dim(config, module_class):
    source = inspect.getsource(module_class)
    width = "embed_dim" if "config.embed_dim" in source else "hidden_size"
    head_dim = getattr(config, "head_dim", None) or (
        getattr(config, width) // config.num_attention_heads
    )
    return width, head_dim


def _per_axis(ids, d, theta):
    """Qwen2-VL's rule: each axis theta ** (-2k / (d/2)), [h | w], twice."""
    half = d // 2
    w = theta ** (-np.arange(0, half, 2, dtype=np.float64) / half)
    angles = np.concatenate([ids[:, a, None] * w for a in range(ids.shape[1])], -1)
    return np.concatenate([angles, angles], -1)


def _strided(ids, d, theta):
    """Pixtral's rule: one ladder theta ** (-2k / d), even k for the row,
    odd k for the column, [h | w], twice."""
    w = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    n = ids.shape[1]
    angles = np.concatenate([ids[:, a, None] * w[a::n] for a in range(n)], -1)
    return np.concatenate([angles, angles], -1)


def _per_axis_blocks(ids, d, theta):
    """Gemma 4's rule: each axis theta ** (-2k / (d/2)), each axis twice
    in its own half of the head, [h, h, w, w] (rotate_half per axis)."""
    half = d // 2
    w = theta ** (-np.arange(0, half, 2, dtype=np.float64) / half)
    return np.concatenate([ids[:, a, None] * w for a in range(2) for _ in "hh"], -1)


RULES = {
    "per_axis": _per_axis,
    "strided": _strided,
    "per_axis_blocks": _per_axis_blocks,
}
# Modules that take ids [batch, N, 2] and rotate with their own function
# (Gemma 4's `apply_multidimensional_rope`: rotate_half per axis).
BATCHED = {"per_axis_blocks": "apply_multidimensional_rope"}


def _per_axis_turns(coords, d, theta):
    """DINOv3's rule: periods theta ** (2k / (d/2)), angles 2 pi x / period
    at coordinates in [-1, 1], [y | x], twice."""
    return 2 * np.pi * _per_axis(coords, d, theta)


# DINOv3: its module (`DINOv3ViTRopePositionEmbedding`, no `...Rotary...`
# class) rotates the patches of the image it is given by their centres;
# the class and register tokens before them are left as they are. A small
# grid, and the grids whose coordinates are compared bit for bit.
DINOV3_GRID = (3, 5)
DINOV3_COORDINATE_GRIDS = ((3, 5), (14, 14), (7, 11), (1, 1), (37, 23))
# The keys a vision module reads its base from: its config's standardized
# `rope_parameters` (a raw `rope_scaling` or top-level `rope_theta` too),
# but DINOv3's reads the field `rope_theta` alone.
THETA_KEYS = ["rope_parameters", "rope_scaling", "rope_theta"]


def _probe(module, ids, batched=False):
    x = torch.zeros(1, dtype=torch.float32)
    ids = torch.tensor(ids)
    cos, sin = module(x, ids[None] if batched else ids)
    return cos.double().numpy().reshape(len(ids), -1), sin.double().numpy().reshape(
        len(ids), -1
    )


def llama4_ids(config):
    """Llama 4's ids of its fixed grid: (column + 1, row + 1) row-major, then
    the class token at (0, 0) (its table's `img_idx`, masked to angle 0)."""
    n = config.image_size // config.patch_size
    rows, cols = np.divmod(np.arange(n * n), n)
    ids = np.stack([cols + 1, rows + 1], -1)
    return np.concatenate([ids, [[0, 0]]]).astype(np.int32)


def _table_rule(config, module_class):
    """Llama 4: its complex table against the per-axis ladder, pairs
    interleaved (its `vision_apply_rotary_emb` rotates complex pairs)."""
    module = module_class(config)
    _, d = _head_dim(config, module_class)
    ids = llama4_ids(config)
    table = module.freqs_ci[:, 0, :]
    angles = _per_axis(ids.astype(np.float64), d, config.rope_parameters["rope_theta"])
    angles = angles[:, : d // 2]
    cos, sin = table.real.double().numpy(), table.imag.double().numpy()
    ok = np.allclose(np.cos(angles), cos, atol=2e-4) and np.allclose(
        np.sin(angles), sin, atol=2e-4
    )
    return "per_axis_interleaved" if ok else None


def _classify(config, module_class):
    """The rule the module's cos and sin follow on `config`, or None."""
    if hasattr(module_class, "_compute_freqs_ci"):
        return _table_rule(config, module_class)
    module = module_class(config)
    _, d = _head_dim(config, module_class)
    theta = config.rope_parameters["rope_theta"]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 40, size=(24, 2))
    cos, sin = _probe(module, ids)
    for name, rule in RULES.items():
        if name not in BATCHED and _follows(rule, ids, d, theta, cos, sin):
            return name
    # Gemma 4's module takes ids [batch, N, 2] (its processor's); a 1-D
    # module given two ids a token would look [h, h, w, w] too: axial only.
    if config.rope_parameters.get("rope_type") != "axial":
        return None
    try:
        cos, sin = _probe(module, ids, batched=True)
    except Exception:
        return None
    for name in BATCHED:
        if _follows(RULES[name], ids, d, theta, cos, sin):
            return name
    return None


def _follows(rule, ids, d, theta, cos, sin):
    """Whether the module's cos and sin are `rule`'s at `ids`."""
    angles = rule(ids.astype(np.float64), d, theta)
    return (
        angles.shape == cos.shape
        and np.allclose(np.cos(angles), cos, atol=2e-5)
        and np.allclose(np.sin(angles), sin, atol=2e-5)
    )


def _dinov3(rng):
    """DINOv3's row of `READ`, its cases and arrays: the model's own module
    (eval) and `apply_rotary_pos_emb` on a small grid after its class and
    register tokens, whose ids are (0, 0) here (angle 0: unrotated)."""
    from transformers.models.dinov3_vit import modeling_dinov3_vit as modeling

    config_class = transformers.DINOv3ViTConfig
    variants = {
        "default": {},
        "variant": {
            "num_attention_heads": 12,
            "rope_theta": 500.0,
            "num_register_tokens": 2,
        },
    }
    cases, arrays = [], {}
    h, w = DINOV3_GRID
    for variant, raw in variants.items():
        config = config_class(**raw)
        module = modeling.DINOv3ViTRopePositionEmbedding(config).eval()
        size = config.patch_size
        cos, sin = module(torch.zeros(1, 3, h * size, w * size))
        d = config.hidden_size // config.num_attention_heads
        coords = modeling.get_patches_center_coordinates(h, w, torch.float32, "cpu")
        angles = _per_axis_turns(coords.double().numpy(), d, config.rope_theta)
        if not (
            np.allclose(np.cos(angles), cos.double().numpy(), atol=2e-5)
            and np.allclose(np.sin(angles), sin.double().numpy(), atol=2e-5)
        ):
            raise ValueError(f"DINOv3's module left its rule ({variant})")
        prefix = 1 + config.num_register_tokens
        q = rng.uniform(-1, 1, (1, 1, prefix + h * w, d)).astype(np.float32)
        q = torch.tensor(q)
        rotated, _ = modeling.apply_rotary_pos_emb(q, q, cos, sin)
        ids = np.concatenate([np.zeros((prefix, 2), np.float32), coords.numpy()])
        name = f"dinov3_vit.{variant}"
        arrays[f"{name}.q"] = q[0, 0, :, None].numpy()
        arrays[f"{name}.rotated"] = rotated[0, 0, :, None].numpy()
        arrays[f"{name}.ids"] = ids
        cases.append(
            {
                "name": name,
                "part": "vision",
                "model_type": "dinov3_vit",
                "config": {"model_type": "dinov3_vit", **raw},
                "rule": "per_axis_turns",
                "head_dim": d,
                "rope_theta": config.rope_theta,
                "grid_thw": [[1, h, w]],
                "spatial_merge_size": 1,
                "prefix_tokens": prefix,
            }
        )
    for h, w in DINOV3_COORDINATE_GRIDS:
        coords = modeling.get_patches_center_coordinates(h, w, torch.float32, "cpu")
        arrays[f"coordinates.{h}x{w}"] = coords.numpy()
    config = config_class()
    row = {
        "part": "vision",
        "rule": "per_axis_turns",
        "width": "hidden_size",
        "defaults": {
            "hidden_size": config.hidden_size,
            "num_attention_heads": config.num_attention_heads,
            "head_dim": None,
            "rope_theta": config.rope_theta,
        },
        # Its module reads hidden_size // num_attention_heads only.
        "reads_head_dim": False,
        "theta_keys": ["rope_theta"],
        "aliases": [],
    }
    return row, cases, arrays


def _table_golden(config, module_class, modeling, rng, d):
    """Llama 4's own rotation of 40 patches and the class token (a slice
    of its fixed grid: each token is rotated alone)."""
    ids = llama4_ids(config)
    rows = np.r_[0:40, len(ids) - 1]
    table = module_class(config).freqs_ci
    q = torch.tensor(rng.uniform(-1, 1, (1, len(ids), 1, d)).astype(np.float32))
    rotated, _ = modeling.vision_apply_rotary_emb(q, q, table)
    return ids[rows], q[0, rows], rotated[0, rows]


def _variants(config, width):
    """Raw dicts tried: the defaults, and twice the heads (half the head
    dim) with another base, or the base alone where the class refuses that."""
    heads = config.num_attention_heads * 2
    theta = {"rope_parameters": {"rope_type": "axial", "rope_theta": 500.0}}
    return {
        "default": [{}],
        "variant": [
            {"num_heads": heads, "num_attention_heads": heads, **theta},
            theta,
        ],
    }


def _make(config_class, tries):
    """The first of `tries` the config class accepts, and its raw keys."""
    attribute_map = getattr(config_class, "attribute_map", {}) or {}
    for raw in tries:
        keys = dict(raw)
        if "num_heads" in attribute_map.values():
            keys.pop("num_attention_heads", None)
        else:
            keys.pop("num_heads", None)
        try:
            return config_class(**keys), keys
        except Exception:
            continue
    raise ValueError("no variant")


def gemma4_ids(h, w):
    """Gemma 4's ids, as its image processor makes them: (column, row),
    row-major (`torch.meshgrid(arange(w), arange(h), indexing="xy")`)."""
    grid = torch.meshgrid(torch.arange(w), torch.arange(h), indexing="xy")
    return torch.stack(grid, -1).reshape(h * w, 2)


def _rotate(modeling, q, cos, sin):
    """q [N, heads, d] rotated by the model's own function."""
    if hasattr(modeling, "apply_rotary_pos_emb_vision"):
        out, _ = modeling.apply_rotary_pos_emb_vision(q, q, cos, sin)
        return out
    out, _ = modeling.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=-2)
    return out


def _ids_goldens():
    cases = [
        ([[1, 4, 6]], 2, False),
        ([[2, 4, 4], [1, 6, 2]], 2, False),
        ([[1, 3, 5]], 1, False),
        ([[2, 4, 6]], 2, True),
        ([[1, 8, 8], [3, 2, 4]], 2, True),
    ]
    out = []
    for grid_thw, merge, temporal in cases:
        ids = vision_utils.get_vision_position_ids(
            torch.tensor(grid_thw), merge, include_temporal=temporal
        )
        out.append(
            {
                "grid_thw": grid_thw,
                "spatial_merge_size": merge,
                "include_temporal": temporal,
                "ids": ids.tolist(),
            }
        )
    return out


def main():
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    parts, part_types, refused = {}, {}, {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[model_type]()
        except Exception:
            continue
        for part, path, sub in _sub_parts(config):
            own = _own_defaults(sub)
            parts.setdefault(model_type, {})[part] = [list(path), sub.model_type, own]
            part_types.setdefault(sub.model_type, (part, type(sub)))
        own, _ = _rotary_class(type(config))
        if own is not None and "Vision" in own.__name__ and model_type in WHY:
            refused[model_type] = WHY[model_type]  # SAM 2 video's memory
        name = type(config).__name__
        part = _part_of(model_type)
        alone = model_type not in parts
        if alone and part is not None and ("Vision" in name or "Audio" in name):
            part_types.setdefault(model_type, (part, type(config)))
    read, none = {}, []
    cases, arrays = [], {}
    rng = np.random.default_rng(49)
    for part_type, (part, config_class) in sorted(part_types.items()):
        module_class, modeling = _rotary_class(config_class)
        if module_class is None:
            none.append(part_type)
            continue
        try:
            config = config_class()
            width, _ = _head_dim(config, module_class)
            rule = _classify(config, module_class)
        except Exception as error:  # the module fails on its defaults
            refused[part_type] = WHY.get(
                part_type,
                f"transformers' rotary module fails on its default config "
                f"({type(error).__name__})",
            )
            continue
        if rule is None:
            one_d = "compute_default_rope_parameters" in inspect.getsource(module_class)
            if one_d and part_type in TEXT_SUPPORTED:
                why = (
                    "its rotary module is a 1-D RoPE (over time or tokens) of a "
                    "model type the text reader verifies: read as that text "
                    "model (the part of a composite, or its own config)"
                )
            elif one_d:
                why = (
                    "its rotary module is a 1-D RoPE (over time or tokens), not "
                    "over patch ids: not read as a part"
                )
            else:
                why = "its rotary module matches no N-axis rule"
            refused[part_type] = WHY.get(part_type, why)
            continue
        ok = True
        for variant, tries in _variants(config, width).items():
            made, raw = _make(config_class, tries)
            if _classify(made, module_class) != rule:
                ok = False
                break
            _, d = _head_dim(made, module_class)
            theta = made.rope_parameters["rope_theta"]
            merge = 1 if rule == "strided" else 2
            grid = [[1, 4, 6]]
            if rule == "per_axis_interleaved":  # Llama 4: its fixed grid
                ids, q, rotated = _table_golden(made, module_class, modeling, rng, d)
                grid, merge = None, None
            elif rule in BATCHED:  # Gemma 4: its processor's ids, batched
                ids = gemma4_ids(4, 6)
                cos, sin = module_class(made)(torch.zeros(1), ids[None])
                # Its own generator: the others' goldens keep their draws.
                own_rng = np.random.default_rng((49, len(cases)))
                q = own_rng.uniform(-1, 1, (len(ids), 1, d)).astype(np.float32)
                q = torch.tensor(q)
                apply = getattr(modeling, BATCHED[rule])
                rotated = apply(q[None], cos, sin, ids[None])[0]
                ids, grid, merge = ids.numpy(), None, None
            else:
                ids = vision_utils.get_vision_position_ids(torch.tensor(grid), merge)
                module = module_class(made)
                cos, sin = module(torch.zeros(1), ids)
                cos, sin = cos.reshape(len(ids), d), sin.reshape(len(ids), d)
                q = rng.uniform(-1, 1, (len(ids), 1, d)).astype(np.float32)
                q = torch.tensor(q)
                rotated = _rotate(modeling, q, cos, sin)
                ids = ids.numpy()
            name = f"{part_type}.{variant}"
            arrays[f"{name}.q"] = q.numpy()
            arrays[f"{name}.rotated"] = rotated.numpy()
            arrays[f"{name}.ids"] = ids.astype(np.int32)
            cases.append(
                {
                    "name": name,
                    "part": part,
                    "model_type": part_type,
                    "config": {"model_type": part_type, **raw},
                    "rule": rule,
                    "head_dim": d,
                    "rope_theta": theta,
                    "grid_thw": grid,
                    "spatial_merge_size": merge,
                }
            )
        if not ok:
            refused[part_type] = "its rotary module's rule changes with its config"
            continue
        read[part_type] = {
            "part": part,
            "rule": rule,
            "width": width,
            "defaults": {
                width: getattr(config, width),
                "num_attention_heads": config.num_attention_heads,
                # A head_dim its __post_init__ computes is no default.
                "head_dim": _field_default(config_class, "head_dim"),
                "rope_theta": config.rope_parameters["rope_theta"],
            },
            # Llama 4's table reads hidden_size // num_attention_heads only.
            "reads_head_dim": rule != "per_axis_interleaved",
            "theta_keys": THETA_KEYS,
            "aliases": sorted(
                [raw, key]
                for raw, key in (
                    (v, k) for k, v in (config_class.attribute_map or {}).items()
                )
                if key in ("num_attention_heads", "head_dim", width)
            ),
        }
    read["dinov3_vit"], dinov3_cases, dinov3_arrays = _dinov3(rng)
    cases += dinov3_cases
    arrays.update(dinov3_arrays)
    # Composite cases: a wrapper whose default part is read.
    for model_type, found in sorted(parts.items()):
        for part, (path, part_type, _) in found.items():
            if part_type in read and len(path) == 1 and _same_part(model_type, path):
                base = next(c for c in cases if c["name"] == f"{part_type}.default")
                cases.append(
                    {
                        **base,
                        "name": f"{model_type}.{part}",
                        "arrays": base["name"],
                        "config": {"model_type": model_type, path[0]: {}},
                    }
                )
    version = transformers.__version__
    with open(HERE / "vision.json", "w") as f:
        json.dump(
            {
                "transformers": version,
                "cases": cases,
                "position_ids": _ids_goldens(),
            },
            f,
            indent=1,
        )
    np.savez_compressed(HERE / "vision.npz", **arrays)
    tables = {"parts": parts, "read": read, "refused": refused}
    text = f'{{\n"transformers_version": {json.dumps(version)}'
    for name, table in tables.items():
        rows = [
            f"  {json.dumps(key)}: {json.dumps(table[key], sort_keys=True)}"
            for key in sorted(table)
        ]
        text += f',\n"{name}": {{\n' + ",\n".join(rows) + "\n}"
    text += f',\n"none": {json.dumps(sorted(none))}\n}}\n'
    (ROOT / "keras_posenc" / "_hf" / "vision_types.json").write_text(text)
    print(
        f"read {len(read)}, refused {len(refused)}, none {len(none)}", file=sys.stderr
    )
    for k, v in sorted(refused.items()):
        print("REFUSED", k, v, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
