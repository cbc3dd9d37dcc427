"""How a configuration class splits RoPE by layer type, as transformers
reads it: a `LayerSplit` per model type that makes one dict per layer type
in its own `convert_rope_params_to_dict` (Gemma 3, T5Gemma 2, OLMo-3,
ModernBERT: `_hf.architectures` attaches them), the dicts it makes from a
raw config (`split_layers`), and the refusal of a flat dict where a model
reads its RoPE per layer type only (Dory, Step-3.5: `check_per_layer`).
"""

import dataclasses

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened


def copy_params(params):
    """A copy of a RoPE dict, one level of nested dicts copied too."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in params.items()}


@dataclasses.dataclass(frozen=True)
class LayerSplit:
    """How a configuration class makes one RoPE dict per layer type (its
    `convert_rope_params_to_dict`): a legacy `rope_scaling` updates the
    dicts of the layer types in `scaled` only, and each layer type takes
    its base from its own key (None: always the default)."""

    scaled: tuple  # the layer types a `rope_scaling` updates
    bases: tuple  # ((layer type, key or None, default base), ...)


def split(scaled, full, sliding):
    return LayerSplit(
        scaled, (("full_attention", *full), ("sliding_attention", *sliding))
    )


GEMMA3 = split(
    ("full_attention",), ("rope_theta", 1e6), ("rope_local_base_freq", 10000.0)
)
GEMMA3_TYPES = ("gemma3_text", "t5gemma2_text", "t5gemma2_decoder")
# OLMo-3 pops `rope_theta` for its full-attention layers: sliding layers
# always take the default base.
OLMO3 = split(("full_attention",), ("rope_theta", 500000.0), (None, 500000.0))
MODERNBERT = split(
    ("full_attention", "sliding_attention"),
    ("global_rope_theta", 160000.0),
    ("local_rope_theta", 10000.0),
)


def split_layers(model_type, arch, config):
    """One dict per layer type, as its configuration class makes them
    (`arch.layers`, its `convert_rope_params_to_dict`): `rope_scaling`
    updates the dicts of `layers.scaled`, and each layer type without its
    own `rope_theta` takes its base key's value, or the default."""
    given = config.get("rope_parameters")
    if given is None:
        given = {
            layer_type: {"rope_type": "default"} for layer_type, *_ in arch.layers.bases
        }
    if not isinstance(given, dict) or any(
        not isinstance(v, dict) for v in given.values()
    ):
        expected = (
            f"a dict per layer type ('full_attention', 'sliding_attention'): "
            f"transformers' {model_type} rotary module reads only those"
        )
        raise _arguments.invalid("rope_parameters", expected, shortened(given))
    params = copy_params(given)
    scaling = config.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict) or any(
            t not in params for t in arch.layers.scaled
        ):
            where = " and ".join(repr(t) for t in arch.layers.scaled)
            expected = (
                f"None, or a dict that updates rope_parameters[{where}] "
                f"(transformers' {model_type} reads it there)"
            )
            raise _arguments.invalid("rope_scaling", expected, shortened(scaling))
        for layer_type in arch.layers.scaled:
            params[layer_type].update(scaling)
    for layer_type, key, default in arch.layers.bases:
        base = None if key is None else config.get(key)
        params.setdefault(layer_type, {"rope_type": "default"})
        params[layer_type].setdefault("rope_theta", default if base is None else base)
    return "rope_parameters", params


def check_per_layer(model_type, arch, name, params):
    """A type whose RoPE is one dict per layer type (Dory, Step-3.5) takes no
    flat dict: its rotary module would read none of it for a layer type."""
    nested = any(isinstance(v, dict) for v in (arch.rope_parameters or {}).values())
    if (
        name is not None
        and nested
        and not any(isinstance(v, dict) for v in params.values())
    ):
        expected = (
            f"a dict per layer type in 'rope_parameters' "
            f"({sorted(arch.rope_parameters)}): transformers' {model_type} reads "
            "its RoPE per layer type"
        )
        raise _arguments.invalid(name, expected, shortened(params))


def _every_nth_global(config, layers):
    """EXAONE-4 (`Exaone4Config.__post_init__`): layer ``i`` is global where
    ``(i + 1) % sliding_window_pattern == 0`` (default 4), sliding otherwise;
    without a `sliding_window` the pattern is 0 and transformers fails."""
    if "sliding_window" in config and config["sliding_window"] is None:
        expected = (
            "an integer, or a 'layer_types' list: transformers' exaone4 derives "
            "the layer types from 'sliding_window_pattern' and fails without a "
            "window (ZeroDivisionError)"
        )
        raise _arguments.invalid("sliding_window", expected, None)
    pattern = config.get("sliding_window_pattern", 4)
    if not _arguments.is_int(pattern) or pattern <= 0:
        expected = (
            "a positive integer without 'layer_types' (transformers' exaone4 "
            "derives the layer types from it: every n-th layer global)"
        )
        raise _arguments.invalid("sliding_window_pattern", expected, shortened(pattern))
    return [
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
        for i in range(layers)
    ]


# Model types whose configuration class derives `layer_types` when a config
# has none: (the derivation, its default `num_hidden_layers`).
DERIVED_LAYER_TYPES = {"exaone4": (_every_nth_global, 32)}


def layer_types(model_type, config, layers=None):
    """`config`'s `layer_types`, else the list its configuration class derives
    for `layers` layers (by default the config's `num_hidden_layers`), else
    None."""
    declared = config.get("layer_types")
    if declared is not None or model_type not in DERIVED_LAYER_TYPES:
        return declared
    derive, default = DERIVED_LAYER_TYPES[model_type]
    if layers is None:
        layers = config.get("num_hidden_layers", default)
        layers = layers if _arguments.is_int(layers) and layers > 0 else default
    return derive(config, layers)
