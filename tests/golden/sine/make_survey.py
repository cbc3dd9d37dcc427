"""Surveys transformers' 1-D sinusoidal position tables against the reader.

Run from the repository root (needs transformers 5.24):

    python tests/golden/sine/make_survey.py

Scans every `models/<name>/modeling_<name>.py` of the installed
transformers for the code of a sinusoidal table (`Sinusoidal...` classes,
`sinusoids`, `create_sinusoidal_embeddings`, `positional_encoding`,
`SinusoidsPositionEmbedding`, `get_embedding`) and lists each model type
of such a module with what `SinusoidalPositionEncoding.from_hf_config`
does with it: read (a row of `keras_posenc/_hf/sinusoidal.CONVENTIONS`,
held against the module by `make_golden.py`), refused (with the reason it
gives), or not applicable (the sinusoids are something else: RoPE angles,
a 2-D grid, a diffusion timestep). A module found here and classified
nowhere stops the script, so a new transformers release cannot pass
unnoticed. Writes `survey.json` and `survey.md` beside this script and the
table between the survey markers of `docs/sinusoidal.md`.
"""

import json
import os
import re

import transformers
from transformers.models.auto.configuration_auto import (
    CONFIG_MAPPING_NAMES,
    model_type_to_module_name,
)

from keras_posenc._hf import sinusoidal as _hf_sinusoidal

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DOCS = os.path.join(ROOT, "docs", "sinusoidal.md")
MARKERS = ("<!-- survey:start -->", "<!-- survey:end -->")
PATTERN = re.compile(
    r"class \w*Sinusoid\w*\(|def sinusoids\(|def _?create_sinusoidal_embeddings\("
    r"|def positional_encoding\(|class SinusoidsPositionEmbedding|def get_embedding\("
    r"|log_timescale_increment"
)
# Sub-configs that hold a table but are no entry of CONFIG_MAPPING.
PARTS = {"kosmos2": ["kosmos_2_text_model"]}
# Model types whose sinusoids are not a 1-D table of token positions.
NOT_APPLICABLE = {
    "codegen": "RoPE angles (create_sinusoidal_positions): RotaryEmbedding",
    "gptj": "RoPE angles (create_sinusoidal_positions): RotaryEmbedding",
    "vibevoice": "a diffusion timestep embedding: TimestepEmbedding",
    "gemma3n": "relative-position sinusoids inside its audio conformer's attention "
    "(projected by learned weights), not a table added to the inputs",
    "gemma4": "relative-position sinusoids inside its audio conformer's attention "
    "(projected by learned weights), not a table added to the inputs",
    "aimv2": "a 2-D sine-cosine grid over image patches: GridPositionEncoding",
    "vit_mae": "a 2-D sine-cosine grid over image patches: GridPositionEncoding",
}
# Model types with a 1-D table that the reader does not read yet, and what
# reproduces it with the layer's options.
NOT_READ = {
    "canary": "[sin | cos] with max_timescale 10000 ** ((d - 2) / d): the paper's "
    "frequencies; SinusoidalPositionEncoding(layout='concatenated')",
    "kosmos2_5": "fairseq's table (as Kosmos-2) inside a composite config not read yet",
    "qwen2_5_omni": "Whisper's sinusoids in its audio encoder (a nested audio "
    "config); SinusoidalPositionEncoding(frequency_rule='tensor2tensor', "
    "layout='concatenated', odd_depth='error')",
    "tipsv2": "fairseq's table without a padding row, positions 0.., in its "
    "text model; SinusoidalPositionEncoding(frequency_rule='tensor2tensor', "
    "layout='concatenated', odd_depth='zero')",
    "timesfm": "tensor2tensor's get_timing_signal_1d with the config's "
    "min_timescale and max_timescale over time-series patches",
    "timesfm2_5": "tensor2tensor's get_timing_signal_1d with the config's "
    "min_timescale and max_timescale over time-series patches",
    "fun_asr_nano": "Whisper's sinusoids in its audio encoder (nested config)",
    "qwen3_asr": "Whisper's sinusoids in its audio encoder (nested config)",
    "qwen3_omni_moe": "Whisper's sinusoids in its audio encoder (nested config)",
}
# Other parts of those modules' models: no table of their own.
PART_TYPES = {
    "kosmos_2_vision_model": "Kosmos-2's vision encoder (learned positions)",
    "speecht5_hifigan": "SpeechT5's vocoder (no position table)",
}


def _modules():
    """Model folders whose modeling file holds a 1-D sinusoidal table's code."""
    models = os.path.join(os.path.dirname(transformers.__file__), "models")
    found = []
    for folder in sorted(os.listdir(models)):
        path = os.path.join(models, folder, f"modeling_{folder}.py")
        if os.path.isfile(path):
            with open(path) as file:
                if PATTERN.search(file.read()):
                    found.append(folder)
    return found


def _types(folder):
    types = [t for t in CONFIG_MAPPING_NAMES if model_type_to_module_name(t) == folder]
    return sorted(set(types + PARTS.get(folder, []))) or [folder]


def _status(model_type, folder):
    if model_type in _hf_sinusoidal.CONVENTIONS:
        c = _hf_sinusoidal.CONVENTIONS[model_type]
        if c.part is not None:
            key, inner = c.part
            c = _hf_sinusoidal.CONVENTIONS[inner]
            return "read", f"its `{key}` ({inner})", c
        return "read", "", c
    for table, status in ((_hf_sinusoidal.REFUSED, "refused"),):
        if model_type in table:
            return status, table[model_type], None
    if folder in NOT_APPLICABLE:
        return "not applicable", NOT_APPLICABLE[folder], None
    if folder in NOT_READ:
        return "not read", NOT_READ[folder], None
    if model_type in PART_TYPES:
        return "not applicable", PART_TYPES[model_type], None
    return None, None, None


def _row(model_type, status, why, c):
    if c is None:
        return f"| `{model_type}` | {status}: {why} | | | | | |"
    rule = "paper" if c.frequency_rule == "paper" else "tensor2tensor"
    layout = {
        "concatenated": "[sin \\| cos]",
        "cos_sin": "[cos \\| sin]",
        "interleaved": "interleaved",
    }[c.layout]
    positions = {
        "ids": "from ids (`padding_id` row zero)",
        "row": "0.. (`padding_id` row zero)",
        None: "0..",
    }[c.padding]
    offset = f"+{c.position_offset}" if c.position_offset else "0"
    status = f"read {why}".strip()
    return (
        f"| `{model_type}` | {status} | {rule} | {layout} | {c.odd_depth} "
        f"| {offset} | {positions} |"
    )


def main():
    assert transformers.__version__ == "5.24.0", transformers.__version__
    survey, lines, unknown = {}, [], []
    for folder in _modules():
        grouped = {}  # one row for the parts a module's refusal covers
        for model_type in _types(folder):
            status, why, convention = _status(model_type, folder)
            if status is None:
                unknown.append(f"{folder}: {model_type}")
                continue
            survey[model_type] = {"module": folder, "status": status, "why": why}
            if status == "read":
                lines.append(_row(model_type, status, why, convention))
            else:
                grouped.setdefault((status, why), []).append(model_type)
        for (status, why), types in grouped.items():
            lines.append(_row("`, `".join(types), status, why, None))
    if unknown:
        raise SystemExit("classify in make_survey.py: " + ", ".join(unknown))
    header = [
        f"Model types of transformers {transformers.__version__} whose "
        "modeling code builds a 1-D sinusoidal table "
        "(`tests/golden/sine/make_survey.py`).",
        "",
        "| model type | from_hf_config | frequencies | layout | odd width "
        "| offset | positions |",
        "|---|---|---|---|---|---|---|",
    ]
    table = "\n".join(header + lines) + "\n"
    with open(os.path.join(HERE, "survey.md"), "w") as file:
        file.write(table)
    with open(os.path.join(HERE, "survey.json"), "w") as file:
        json.dump(
            {"transformers": transformers.__version__, "types": survey}, file, indent=2
        )
        file.write("\n")
    with open(DOCS) as file:
        text = file.read()
    start, end = text.index(MARKERS[0]), text.index(MARKERS[1])
    text = text[: start + len(MARKERS[0])] + "\n" + table + text[end:]
    with open(DOCS, "w") as file:
        file.write(text)


if __name__ == "__main__":
    main()
