"""Which layers of a model rotate, recorded from transformers' own forward.

Run from the repository root with transformers 5.24 installed (not a
project dependency; the tests read only the file this writes)::

    python tests/golden/hf/make_plans.py [--only=a,b] [--table]

For each text model type in `TYPES` or `--only` (and the configs in
`EXTRA`: EXAONE-4 with and without a sliding window, SmolLM3's
`no_rope_layers`, Cohere 2, OLMo-3's published YaRN), a tiny model is
built from its raw config (sizes shrunk, `num_hidden_layers` 8, its
default `layer_types` cut to 8) and run once in float32 on 8 tokens, its
attention implementation "eager". The module's `apply_rotary_pos_emb` is
wrapped so that each call records the calling attention layer's
`layer_idx` and the cos and sin it was given at position 1, from which the
frequencies and attention factor follow (``w = atan2(sin, cos)``, factor
``hypot(sin, cos)``). A layer that never calls it rotates nothing.
`plans.json` keeps, per case, the raw config and one entry per layer
(None, or the sorted angles of its features at position 1, each frequency
once or twice, and its factor), or the error that stopped the tiny model.

It then writes `keras_posenc/_hf/plans.py` (`--table`: only that): per
model type, the rule of `keras_posenc._hf.layers.RULES` whose plan, read
with this checkout's `RotaryEmbedding.from_hf_config` per layer, matches
transformers' layers (which layers rotate, their frequencies within 1e-6
and attention factor) on the most recorded cases, and on every other one
refuses it with a ValueError (the first rule among equals).
"""

import copy
import json
import sys
import warnings

import make_survey as survey
import numpy as np
import torch
import transformers
from make_layers import YARN
from transformers import AutoModel

HERE = survey.HERE
LAYERS = 8
# The types planned without --only: each pattern of layers without RoPE in
# transformers' attention code, and the common decoders (a tiny model takes
# seconds to tens of seconds to build; --only=a,b adds types).
TYPES = (
    "cohere2",
    "cohere2_moe",
    "exaone4",
    "exaone_moe",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "granitemoehybrid",
    "kolibri1",
    "lfm2",
    "llama",
    "ministral",
    "mistral",
    "mixtral",
    "olmo2",
    "olmo3",
    "olmo_hybrid",
    "phi3",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_5_text",
    "qwen3_moe",
    "qwen3_next",
    "smollm3",
    "starcoder2",
)
TINY = {
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "pad_token_id": 0,
    "num_hidden_layers": LAYERS,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
}
PATTERN = ["sliding_attention"] * 3 + ["full_attention"]
EXTRA = {
    "exaone4": [
        ("no_window", {"sliding_window": None, "layer_types": ["full_attention"] * 8}),
        ("window", {"sliding_window": 4, "layer_types": PATTERN * 2}),
    ],
    "exaone_moe": [("window", {"sliding_window": 4, "layer_types": PATTERN * 2})],
    "kolibri1": [("window", {"sliding_window": 4, "layer_types": PATTERN * 2})],
    "cohere2_moe": [
        ("window", {"sliding_window": 4, "layer_types": PATTERN * 2}),
        (
            # its dense layers then rotate in every layer type
            "force_rope",
            {
                "sliding_window": 4,
                "layer_types": PATTERN * 2,
                "mlp_layer_types": ["dense"] * 8,
                "prefix_dense_sliding_window_pattern": 1,
            },
        ),
    ],
    "qwen3_5_text": [
        (
            "rope",
            {
                "head_dim": 64,
                "rope_parameters": {
                    "rope_type": "default",
                    "mrope_section": [4, 2, 2],
                    "mrope_interleaved": True,
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 10000000.0,
                },
            },
        )
    ],
    "granitemoehybrid": [
        (
            name,
            {
                "position_embedding_type": name,
                "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2,
            },
        )
        for name in ("rope", "nope")
    ],
    "smollm3": [("no_rope_layers", {"no_rope_layers": [1, 1, 0, 1, 0, 1, 1, 0]})],
    "cohere2": [
        ("window", {"sliding_window": 4, "layer_types": PATTERN * 2}),
        ("no_window", {"sliding_window": None, "layer_types": PATTERN * 2}),
    ],
    "olmo3": [
        (
            "published",
            {
                "rope_scaling": YARN,
                "rope_theta": 500000,
                "max_position_embeddings": 65536,
                "layer_types": PATTERN * 2,
            },
        )
    ],
}


def _recorder(calls):
    def wrap(apply):
        def recorded(q, k, cos, sin, *args, **kwargs):
            frame = sys._getframe(1)
            owner = frame.f_locals.get("self")
            index = getattr(owner, "layer_idx", None)
            c = cos.detach().double().reshape(-1, cos.shape[-1])
            s = sin.detach().double().reshape(-1, sin.shape[-1])
            calls.setdefault(index, (c[1].numpy(), s[1].numpy()))
            return apply(q, k, cos, sin, *args, **kwargs)

        return recorded

    return wrap


def _tiny(model_type, keys):
    default = survey.text_config(survey.load({"model_type": model_type}))
    raw = {"model_type": model_type, **TINY}
    layer_types = getattr(default, "layer_types", None)
    if isinstance(layer_types, list):
        raw["layer_types"] = list(layer_types[:LAYERS])
    raw.update(keys)
    return raw


def record(model_type, module, raw):
    """One entry per layer: None, or ``{"inv_freq": sorted, "factor": f}``."""
    config = survey.load(raw)
    config._attn_implementation = "eager"
    calls = {}
    name = "apply_rotary_pos_emb"
    original = getattr(module, name)
    setattr(module, name, _recorder(calls)(original))
    try:
        torch.manual_seed(0)
        model = AutoModel.from_config(config).eval()
        with torch.no_grad():
            model(input_ids=torch.arange(8)[None] % 100)
    finally:
        setattr(module, name, original)
    if None in calls:
        raise RuntimeError("its rotations are not called by indexed attention layers")
    layers = []
    for index in range(config.num_hidden_layers):
        if index not in calls:
            layers.append(None)
            continue
        cos, sin = calls[index]  # every feature's (each angle twice, or once)
        layers.append(
            {
                "inv_freq": sorted(np.arctan2(sin, cos).tolist()),
                "factor": float(np.hypot(sin, cos).mean()),
            }
        )
    return layers


FREQ_TOL = 1e-6  # float32 cos and sin at position 1: the angle within ~1e-7


def judged(case, rule):
    """Whether `rule`'s plan of `case` matches transformers' layers, or None
    where the library refuses the case (a ValueError)."""
    from keras_posenc import RotaryEmbedding
    from keras_posenc._hf import layers as _hf_layers

    try:
        plan = _hf_layers.plan(case["config"], rule)
        made = [
            None
            if t is False
            else RotaryEmbedding.from_hf_config(case["config"], layer_type=t)
            for t in plan
        ]
    except ValueError:
        return None
    if len(made) != len(case["layers"]):
        return False
    return all(map(same, made, case["layers"]))


def same(layer, want):
    """Whether a planned layer (or None) is what transformers' layer does."""
    if layer is None or want is None:
        return layer is None and want is None
    freqs = np.array(layer.rope_config.frequencies(layer.rotary_dim))
    if len(want["inv_freq"]) == 2 * len(freqs):  # cos and sin of every feature
        freqs = np.repeat(freqs, 2)
    freqs = np.sort(freqs)
    return (
        len(freqs) == len(want["inv_freq"])
        and np.allclose(freqs, want["inv_freq"], rtol=0, atol=FREQ_TOL)
        and abs(layer.attention_factor - want["factor"]) < FREQ_TOL
    )


def choose(cases):
    """`PLANS`: per model type, the rule that matches most of its recorded
    cases and gets none wrong (the first of `RULES` among equals)."""
    from keras_posenc._hf.layers import RULES

    by_type = {}
    for case in cases:
        if "layers" in case:
            by_type.setdefault(case["model_type"], []).append(case)
    plans = {}
    for model_type, group in sorted(by_type.items()):
        best = 0
        for rule in RULES:
            verdicts = [judged(case, rule) for case in group]
            if False not in verdicts and verdicts.count(True) > best:
                plans[model_type], best = rule, verdicts.count(True)
    return plans


TABLE = survey.ROOT / "keras_posenc" / "_hf" / "plans.py"


def write_table(plans):
    text = TABLE.read_text()
    head = text[: text.index("PLANS = {")]
    rows = [f"    {key!r}: {plans[key]!r}," for key in sorted(plans)]
    head = head.replace(
        head[head.index('TRANSFORMERS_VERSION = "') : head.index("\n\n# fmt")],
        f'TRANSFORMERS_VERSION = "{transformers.__version__}"',
    )
    TABLE.write_text(head + "PLANS = {\n" + "\n".join(rows) + "\n}\n# fmt: on\n")


def main():
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    from keras_posenc._hf.architectures import ARCHITECTURES

    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    if "--table" in sys.argv:
        cases = json.loads((HERE / "plans.json").read_text())["cases"]
        write_table(choose(cases))
        return
    path = HERE / "plans.json"
    cases = json.loads(path.read_text())["cases"] if only and path.exists() else []
    cases = [c for c in cases if c["model_type"] not in (only[0] if only else ())]
    for model_type, arch in sorted(ARCHITECTURES.items()):
        if arch.text is not None or model_type not in (only[0] if only else TYPES):
            continue
        print(model_type, file=sys.stderr, flush=True)
        module = survey._modeling(survey.CONFIG_MAPPING[model_type])
        for name, keys in [("defaults", {}), *EXTRA.get(model_type, ())]:
            case = {"name": f"{model_type}.{name}", "model_type": model_type}
            try:
                case["config"] = _tiny(model_type, copy.deepcopy(keys))
                case["layers"] = record(model_type, module, case["config"])
            except Exception as error:
                case["error"] = survey._message(error)
            cases.append(case)
    cases.sort(key=lambda c: c["name"])
    header = {"transformers": transformers.__version__, "torch": torch.__version__}
    lines = ",\n".join(json.dumps(case, sort_keys=True) for case in cases)
    body = json.dumps(header, indent=1)[:-2]
    path.write_text(f'{body},\n "cases": [\n{lines}\n ]\n}}\n')
    print(sum("layers" in c for c in cases), "recorded of", len(cases))
    plans = choose(cases)
    write_table(plans)
    print(len(plans), "model types planned")


if __name__ == "__main__":
    main()
