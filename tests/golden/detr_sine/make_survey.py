"""Survey of transformers' 2-D sines: `survey.json` and the table in `docs/grids.md`.

Run from the repository root with transformers 5.24.0::

    PYTHONPATH=. python tests/golden/detr_sine/make_survey.py

Greps every `models/<dir>/modeling_<dir>.py` of the installed transformers
for a 2-D sine (`SinePositionEmbedding`, `PositionEmbeddingSine`,
`build_2d_sincos_position_embedding`, `build_2d_sinusoidal_position_embedding`),
lists the model types each such directory registers, and says for each
whether `GridPositionEncoding.from_hf_config` reads it (with the
conventions it applies, from `keras_posenc._hf.detection.MODEL_TYPES`) or
refuses it (with the reason it gives, `REFUSED`). It fails if a directory
with a sine has no model type in either table: a new model is never
silently left out. `tests/test_grid_detr.py` checks the docs table against
`survey.json` and the reader's tables.
"""

import json
import pathlib
import re

import transformers
from transformers.models.auto.configuration_auto import (
    CONFIG_MAPPING_NAMES,
    model_type_to_module_name,
)

from keras_posenc._hf.detection import MODEL_TYPES, REFUSED

HERE = pathlib.Path(__file__).resolve().parent
DOCS = HERE.parents[2] / "docs" / "grids.md"
START, END = "<!-- detr-survey:start -->", "<!-- detr-survey:end -->"
PATTERN = re.compile(
    r"\b(\w*SinePositionEmbedding|\w*PositionEmbeddingSine|"
    r"build_2d_sincos_position_embedding|build_2d_sinusoidal_position_embedding)\b"
)
assert transformers.__version__ == "5.24.0", transformers.__version__


def conventions(kind):
    temperature = ", ".join(kind.temperature) or "10000 (fixed)"
    if kind.temperature:
        temperature += f" (default {kind.temperature_default:g})"
    offset = "c - 0.5" if kind.offset else "c"
    if kind.sine == "rt_detr":
        offset = "i (from 0)"
    return {
        "sine": kind.sine,
        "module": kind.module,
        "width": kind.width,
        "temperature": temperature,
        "position": offset,
    }


def main():
    models = pathlib.Path(transformers.__file__).parent / "models"
    survey = {}
    for path in sorted(models.glob("*/modeling_*.py")):
        directory = path.parent.name
        if path.stem != f"modeling_{directory}":
            continue
        found = sorted(set(PATTERN.findall(path.read_text())))
        if not found:
            continue
        types = sorted(
            t
            for t in CONFIG_MAPPING_NAMES
            if model_type_to_module_name(t) == directory
            and (t in MODEL_TYPES or t in REFUSED)
        )
        assert types, f"{directory}: a 2-D sine, no model type read or refused"
        for model_type in types:
            entry = {"directory": directory, "code": found}
            if model_type in MODEL_TYPES:
                entry.update(status="read", **conventions(MODEL_TYPES[model_type]))
            else:
                entry.update(status="refused", why=REFUSED[model_type])
            survey[model_type] = entry
    (HERE / "survey.json").write_text(json.dumps(survey, indent=1) + "\n")
    rows = [
        "| model type | status | sine | width key | temperature | position |",
        "|---|---|---|---|---|---|",
    ]
    for model_type, e in survey.items():
        if e["status"] == "read":
            rows.append(
                f"| `{model_type}` | read | `{e['sine']}` | `{e['width']}` | "
                f"{e['temperature']} | {e['position']} |"
            )
        else:
            why = e["why"].replace("|", "\\|")
            rows.append(f"| `{model_type}` | refused | {why} | | | |")
    text = DOCS.read_text()
    head, rest = text.split(START)
    _, tail = rest.split(END)
    DOCS.write_text(f"{head}{START}\n" + "\n".join(rows) + f"\n{END}{tail}")
    print(f"{len(survey)} model types")


if __name__ == "__main__":
    main()
