"""The docs page "Hugging Face model types", generated from the tables.

Lists the model types whose RoPE `RotaryEmbedding.from_hf_config` reads
(Su et al., 2021, https://arxiv.org/abs/2104.09864), as transformers reads
them, the refused ones with the reason (and which `part` reads a tower's
RoPE instead), the vision and audio towers, and each composite model
type's parts as `part_status` judges them (`docs/hf-model-types.md`;
`tests/golden/hf/make_survey.py` writes it and a test keeps it up to
date).

Example:

>>> from keras_posenc._hf import model_types_page
>>> model_types_page.model_types_page().splitlines()[0]
'# Hugging Face model types'
"""

from keras_posenc._hf.architectures import ARCHITECTURES, part_hint
from keras_posenc._hf.model_types import REFUSED, TRANSFORMERS_VERSION
from keras_posenc._hf.vision import part_status
from keras_posenc._hf.vision_types import NONE, PARTS
from keras_posenc._hf.vision_types import READ as VISION_READ
from keras_posenc._hf.vision_types import REFUSED as VISION_REFUSED


def _reads(arch):
    """What a model type reads in its own way, for the docs."""
    notes = [f"`{raw}` for `{key}`" for raw, key in arch.aliases]
    if arch.text is not None:
        need = "" if arch.bare else ", needed"
        notes.append(f"its `text_config` (`{arch.text}`{need})")
    if arch.layers is not None:
        scaled = " and ".join(f"`{t}`" for t in arch.layers.scaled)
        notes.append(f"`rope_scaling` for {scaled} layers")
        notes += [f"`{key}` for `{t}`" for t, key, _ in arch.layers.bases if key]
    if not isinstance(arch.layout, str):
        notes.append(f"`{arch.layout[0]}` for the pairing")
    notes += [f"`{need.key}`: {need.why}" for need in arch.requires]
    if arch.mrope:
        notes.append("`mrope_section`")
    ignored = [item if isinstance(item, str) else item[0] for item in arch.ignored]
    if ignored:
        notes.append("not read (refused): " + ", ".join(f"`{k}`" for k in ignored))
    return "; ".join(notes)


def _columns(arch):
    """The pairing, partial rotation and rope types of a supported type."""
    layout = arch.layout if isinstance(arch.layout, str) else "by key"
    aliased = {key for _, key in arch.aliases}
    read = {item if isinstance(item, str) else item[1] for item in arch.ignored}
    if "partial_rotary_factor" in read and "partial_rotary_factor" not in aliased:
        partial = "not read"
    else:
        partial = "applied" if arch.partial else "refused unless 1"
    no_dicts = {"rope_scaling", "rope_parameters"} <= read
    rope_types = "default only" if no_dicts else ", ".join(arch.rope_types or ())
    return layout, partial, rope_types


def model_types_page():
    """The docs page listing supported and refused model types (Markdown)."""
    lines = [
        "# Hugging Face model types",
        "",
        "`RotaryEmbedding.from_hf_config` reads a `config.json` by its "
        f"`model_type`, as transformers {TRANSFORMERS_VERSION} reads it. A model "
        "type is supported when its own transformers rotary module, run in "
        "float64 on its default config and on variants (other sizes, "
        "`rope_theta`, `partial_rotary_factor`, each `rope_type` as "
        "`rope_scaling` and as `rope_parameters`, per layer type), agrees with "
        "the layer read from the same config (frequencies within 1e-12, "
        "attention factor, rotary dimension, pairing and sign), and no variant "
        "is read wrongly; every other one is refused by name. A config without "
        "`model_type` is read as Llama reads the standard keys.",
        "",
        "This page is generated from `keras_posenc/_hf/model_types.json` (written by "
        "`tests/golden/hf/make_survey.py`, whose evidence is "
        "`tests/golden/hf/survey.json`); a test keeps it up to date.",
        "",
        f"## Supported ({len(ARCHITECTURES)})",
        "",
        "| model type | pairs | `partial_rotary_factor` | `rope_type`s | reads |",
        "| --- | --- | --- | --- | --- |",
    ]
    for model_type, arch in sorted(ARCHITECTURES.items()):
        layout, partial, rope_types = _columns(arch)
        lines.append(
            f"| `{model_type}` | {layout} | {partial} | {rope_types} | {_reads(arch)} |"
        )
    lines += [
        "",
        f"## Refused ({len(REFUSED)})",
        "",
        "| model type | why |",
        "| --- | --- |",
    ]
    for model_type, why in sorted(REFUSED.items()):
        why = why + part_hint(model_type)
        lines.append(f"| `{model_type}` | {why.replace('|', '/')} |")
    return "\n".join(lines + _parts_lines() + _composite_lines()) + "\n"


def _cell(model_type, part):
    """A composite's `part`, as `from_hf_config(..., part=part)` reads its
    defaults: read (the rule), refused (why) or no RoPE."""
    status = part_status(model_type, part)
    if status is None:
        return "-"
    state, part_type, detail = status
    if state == "read":
        return f"read: `{part_type}` ({detail})"
    if state == "refused":
        return f"refused: `{part_type}`: {detail.replace('|', '/')}"
    return f"no RoPE: `{part_type}`"


def _composite_lines():
    """The docs page's table of composite model types, part by part."""
    lines = [
        "",
        f"### Composite model types ({len(PARTS)})",
        "",
        "Each model type with a vision or audio part, and what "
        '`from_hf_config(config, part="vision")` (or `"audio"`) does with '
        "the part its config holds by default.",
        "",
        "| model type | vision | audio |",
        "| --- | --- | --- |",
    ]
    for model_type in sorted(PARTS):
        cells = " | ".join(_cell(model_type, part) for part in ("vision", "audio"))
        lines.append(f"| `{model_type}` | {cells} |")
    return lines


def _parts_lines():
    """The docs page's section on vision and audio towers."""
    lines = [
        "",
        "## Vision and audio towers",
        "",
        '`from_hf_config(config, part="vision")` (or `"audio"`) reads a '
        "tower's RoPE from a composite config or the tower's own config. A part "
        "type is read when its own transformers rotary module, on its defaults "
        "and a variant, follows one rule of the N-axis engine "
        "(`tests/golden/hf/make_vision.py`, generating "
        "`keras_posenc/_hf/vision_types.json`).",
        "",
        f"### Read ({len(VISION_READ)})",
        "",
        "| part type | part | rule | composites holding it by default |",
        "| --- | --- | --- | --- |",
    ]
    holders: dict = {}
    for model_type, parts in PARTS.items():
        for _, part_type, _ in parts.values():
            holders.setdefault(part_type, []).append(f"`{model_type}`")
    for part_type, read in sorted(VISION_READ.items()):
        held = ", ".join(sorted(holders.get(part_type, []))) or "-"
        lines.append(f"| `{part_type}` | {read['part']} | {read['rule']} | {held} |")
    lines += [
        "",
        f"### Refused ({len(VISION_REFUSED)})",
        "",
        "| part type | why |",
        "| --- | --- |",
    ]
    for part_type, why in sorted(VISION_REFUSED.items()):
        lines.append(f"| `{part_type}` | {why.replace('|', '/')} |")
    lines += [
        "",
        f"### No RoPE ({len(NONE)})",
        "",
        "Learned or absolute positions (CLIP, SigLIP, ...): refused by name. "
        + ", ".join(f"`{t}`" for t in NONE)
        + ".",
    ]
    return lines
