"""`RotaryEmbedding` arguments from a Hugging Face `config.json` dict."""

from keras_posenc import _arguments, _rope_types


def rotary_arguments(config, seq_len=None, layer_type=None):
    """`RotaryEmbedding` arguments from a transformers config dict.

    Reads `rope_parameters` (transformers 5, possibly holding `rope_theta`
    and `partial_rotary_factor`, possibly nested per layer type) or
    `rope_scaling` (older), as transformers' `standardize_rope_params` does.

    Returns:
        A dict with `max_wavelength`, `rope_scaling` and `rotary_dim`.
    """
    if not isinstance(config, dict):
        raise _arguments.invalid("config", "a dict (a config.json's content)", config)
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if layer_type is not None or any(isinstance(v, dict) for v in params.values()):
        if layer_type not in params or not isinstance(params[layer_type], dict):
            nested = sorted(k for k, v in params.items() if isinstance(v, dict))
            raise _arguments.invalid("layer_type", f"one of {nested}", layer_type)
        params = params[layer_type]
    params = dict(params)
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    theta = params.pop("rope_theta", config.get("rope_theta", 10000.0))
    partial = params.pop("partial_rotary_factor", None)
    partial = config.get("partial_rotary_factor", 1.0) if partial is None else partial
    head_dim = config.get("head_dim")
    if not head_dim:
        if not config.get("hidden_size") or not config.get("num_attention_heads"):
            expected = "a 'head_dim', or 'hidden_size' and 'num_attention_heads' key"
            raise _arguments.invalid("config", expected, sorted(config))
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    max_positions = config.get("max_position_embeddings")
    if rope_type == "dynamic":
        params["original_max_position_embeddings"] = max_positions
    if rope_type in ("yarn", "llama3", "longrope"):
        # Phi-3 keeps the pretraining length outside rope_scaling; it wins.
        orig = config.get("original_max_position_embeddings")
        orig = orig or params.get("original_max_position_embeddings") or max_positions
        params["original_max_position_embeddings"] = orig
        if rope_type != "llama3" and params.get("factor") is None:
            if orig and max_positions:
                params["factor"] = max_positions / orig
    if rope_type in ("dynamic", "longrope") and seq_len is not None:
        params["seq_len"] = seq_len
    if "truncate" in params and params["truncate"] is None:
        params["truncate"] = False  # transformers tests `if truncate:`
    scaling = None
    if rope_type != "default":
        keys = _rope_types.KEYS.get(rope_type, ((), ()))
        known = {k: v for k, v in params.items() if k in keys[0] + keys[1]}
        scaling = {"rope_type": rope_type, **known}
    return {
        "max_wavelength": theta,
        "rope_scaling": scaling,
        "rotary_dim": int(head_dim * partial),
    }
