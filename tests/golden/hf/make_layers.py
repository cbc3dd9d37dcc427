"""Per-layer-type RoPE with scalings, read by each model's own rotary module.

Run from the repository root with transformers 5.24 installed (not a
project dependency; the tests read only the files this writes)::

    python tests/golden/hf/make_layers.py

The survey (`make_survey.py`) tries each model type's defaults and
variants; a model type whose configuration class splits RoPE by layer
type (Gemma 3, OLMo-3, ModernBERT, Dory, ...) has no scaling in its
defaults, so a legacy `rope_scaling` beside `layer_types` (what published
files hold, OLMo-3's YaRN) was never tried there. For every supported model
type whose loaded default config nests `rope_parameters` by layer type
(and every wrapper of one), this builds raw configs with a non-default
scaling on some layer types: a `rope_scaling` (YaRN with an attention
factor, linear beside a top-level `rope_theta`), a top-level `rope_theta`,
the type's own base keys, `rope_parameters` nested with YaRN on one layer
type, and a flat `rope_parameters`; each with the `layer_types` list a
published file holds. Each is run, per layer type, by the model's own
rotary module exactly as `make_survey.module_facts` runs the survey's
cases (float64, positions 0..4095, 131072 +- 64 and 10**6 +- 64), and
written as survey cases: `layers.json` (the facts, or transformers'
error) and `layers.npz` (float64 inverse frequencies).
"""

import json
import sys
import time
import warnings

import make_survey as survey
import numpy as np
import transformers

HERE = survey.HERE
YARN = {
    "rope_type": "yarn",
    "factor": 8.0,
    "original_max_position_embeddings": 8192,
    "attention_factor": 1.2079441541679836,
    "beta_fast": 32,
    "beta_slow": 1,
}
# The RoPE keys of allenai/Olmo-3-7B-Think's config.json (sizes kept: its
# head is 128 wide).
OLMO3 = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 32,
    "max_position_embeddings": 65536,
    "rope_theta": 500000,
    "rope_scaling": YARN,
    "sliding_window": 4096,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
}
# Keys of a layer type's own base, tried where a type reads one.
BASE_KEYS = {
    "rope_local_base_freq": 20000.0,
    "global_rope_theta": 800000.0,
    "local_rope_theta": 20000.0,
}


def variants(model_type, config):
    """``(name, keys)`` of the raw text configs tried on `model_type`."""
    layer_types = list(config.layer_types)
    nested = survey._nested_types(config)
    common = {"layer_types": layer_types, "max_position_embeddings": 65536}
    yield "scaling_yarn", {**common, "rope_scaling": YARN}
    yield (
        "scaling_linear_theta",
        {
            **common,
            "rope_scaling": {"rope_type": "linear", "factor": 4.0},
            "rope_theta": 2e6,
        },
    )
    yield "theta", {**common, "rope_theta": 2e6}
    fields = {f.name for f in survey.dataclasses.fields(type(config))}
    from keras_posenc._hf.architectures import ARCHITECTURES

    split = ARCHITECTURES[model_type].layers
    own = {k for _, k, _ in split.bases if k} if split else set()
    for key, value in BASE_KEYS.items():
        if key in own or key in fields:
            yield f"base_{key}", {**common, key: value}
    for i, layer_type in enumerate(nested):
        params = {t: {"rope_type": "default", "rope_theta": 20000.0} for t in nested}
        params[layer_type] = {**YARN, "rope_theta": 1e6}
        yield f"nested_yarn_{i}", {**common, "rope_parameters": params}
    yield "flat_parameters", {**common, "rope_parameters": {**YARN, "rope_theta": 1e6}}
    if model_type == "olmo3":
        yield "published", OLMO3


def layer_types_of(model_type, text_type, types):
    """The module and classes to run, and the default text config, of a
    per-layer model type (None: its RoPE is not split by layer type)."""
    module, classes = types.get(text_type or model_type, (None, None))
    if module is None:
        return None
    config = survey.text_config(survey.load({"model_type": model_type}))
    if not survey._nested_types(config) or not getattr(config, "layer_types", None):
        return None
    return module, classes, config


def run(model_type, types, arrays):
    text_type = survey.composite(model_type)
    found = layer_types_of(model_type, text_type, types)
    if found is None:
        return []
    module, classes, config = found
    cases = []
    for name, keys in variants(text_type or model_type, config):
        raw = (
            {"model_type": model_type, "text_config": keys}
            if text_type
            else {"model_type": model_type, **keys}
        )
        for layer_type in sorted(set(keys["layer_types"])):
            case = {
                "name": f"{model_type}.{name}.{layer_type}",
                "model_type": model_type,
                "variant": name,
                "config": raw,
                "layer_type": layer_type,
                "seq_len": int(survey.LONG.max()) + 1,
            }
            survey.record_facts(case, module, classes, survey.LONG, arrays, "l")
            cases.append(case)
    return cases


def main():
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    from keras_posenc._hf.architectures import ARCHITECTURES

    types = survey.rotary_types()
    arrays, cases = {}, []
    for model_type in sorted(ARCHITECTURES):
        start = time.time()
        found = run(model_type, types, arrays)
        if found:
            print(
                model_type, len(found), f"{time.time() - start:.0f}s", file=sys.stderr
            )
        cases += found
    header = {"transformers": transformers.__version__, "fit": survey.FIT}
    used = {c["transformers"]["inv_freq"] for c in cases if "transformers" in c}
    kept = {name: array for name, array in arrays.values() if name in used}
    np.savez_compressed(HERE / "layers.npz", **kept)
    lines = ",\n".join(json.dumps(case, sort_keys=True) for case in cases)
    body = json.dumps(header, indent=1)[:-2]
    (HERE / "layers.json").write_text(f'{body},\n "cases": [\n{lines}\n ]\n}}\n')
    verdicts = {}
    with np.load(HERE / "layers.npz") as data:
        named = {n: data[n] for n in data.files}
    for case in cases:
        verdict = survey.verdict(case, named)
        verdicts.setdefault(verdict.split(" (")[0][:60], []).append(case["name"])
    for verdict, names in sorted(verdicts.items()):
        print(f"{len(names):4d} {verdict}: {', '.join(names[:6])}")


if __name__ == "__main__":
    main()
