"""Rotary frequencies of every `rope_type`, as Hugging Face transformers defines them.

One function per `rope_type` of transformers' `modeling_rope_utils`
(default, linear, dynamic NTK, YaRN, Llama 3, LongRoPE): the inverse
frequencies ``w_i`` (radians per position) of the ``rotary_dim / 2``
rotation planes, and the attention factor that multiplies cos and sin.

transformers evaluates the frequencies in float32 (torch's ``pow``, off by
up to a few ulps); here the same formulas run on the host with 50-digit
`decimal` arithmetic and each frequency is rounded once to float64. The
attention factors are transformers' own float64 expressions, so they equal
its values bit for bit. `dynamic` is NTK scaling fixed for one serving
length ``seq_len`` (transformers recomputes it whenever a longer sequence
arrives, which a compiled graph cannot do); `longrope` picks its long
factors when ``seq_len > original_max_position_embeddings``, as
transformers does for the current length.
"""

import decimal
import math
import numbers

import numpy as np

from keras_posenc import _arguments
from keras_posenc._phase_constants import PI

ROPE_LAYOUTS = ("half", "interleaved")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
_YARN_OPTIONAL = ("beta_fast", "beta_slow", "attention_factor", "mscale")
_YARN_OPTIONAL += ("mscale_all_dim", "truncate")
_LLAMA3_REQUIRED = ("factor", "low_freq_factor", "high_freq_factor")
_LLAMA3_REQUIRED += ("original_max_position_embeddings",)
# rope_type -> (required keys, optional keys), "rope_type" aside.
_KEYS = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ("seq_len",)),
    "yarn": (("factor", "original_max_position_embeddings"), _YARN_OPTIONAL),
    "llama3": (_LLAMA3_REQUIRED, ()),
    "longrope": (
        ("short_factor", "long_factor", "original_max_position_embeddings"),
        ("factor", "attention_factor", "seq_len"),
    ),
}
_INTEGER_KEYS = ("original_max_position_embeddings", "seq_len")
_LIST_KEYS = ("short_factor", "long_factor")
# Any finite number: only their ratio counts.
_SIGNED_KEYS = ("mscale", "mscale_all_dim")
_PRECISION = 50


def _bad(value, expected, rope_type=None):
    where = "" if rope_type is None else f" for rope_type={rope_type!r}"
    return _arguments.invalid("rope_scaling", f"{expected}{where}", value)


def _number(value, positive=True):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) and (number > 0 or not positive) else None


def _plain(key, value, rope_type, given):
    """A config value as a plain JSON value, or a ValueError naming `key`."""
    if key in _INTEGER_KEYS:
        if not _arguments.is_int(value) or value <= 0:
            raise _bad(given, f"{key!r} to be a positive integer", rope_type)
        return int(value)
    if key == "truncate":
        if not isinstance(value, bool):
            raise _bad(given, "'truncate' to be a bool", rope_type)
        return value
    if key in _LIST_KEYS:
        values = list(np.ravel(value)) if isinstance(value, (list, tuple)) else None
        if not values or any(_number(v) is None for v in values):
            expected = f"{key!r} to be a non-empty list of finite numbers > 0"
            raise _bad(given, expected, rope_type)
        return [float(v) for v in values]
    if _number(value, positive=key not in _SIGNED_KEYS) is None:
        kind = "a finite number" if key in _SIGNED_KEYS else "a finite number > 0"
        raise _bad(given, f"{key!r} to be {kind}", rope_type)
    return value.item() if isinstance(value, np.generic) else value


def validate(rope_scaling):
    """Checks a `rope_scaling` dict; returns a plain-JSON copy (or `None`).

    Optional keys may be `None` (absent). Unknown keys are refused, so a
    misspelt key never silently falls back to a default.
    """
    if rope_scaling is None:
        return None
    if not isinstance(rope_scaling, dict):
        raise _bad(rope_scaling, "None or a dict with a 'rope_type' key")
    rope_type = rope_scaling.get("rope_type")
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        raise _bad(rope_scaling, f"a 'rope_type' key, one of {ROPE_TYPES}")
    required, optional = _KEYS[rope_type]
    unknown = sorted(set(rope_scaling) - {"rope_type", *required, *optional})
    if unknown:
        expected = f"only the keys {('rope_type', *required, *optional)}, not {unknown}"
        raise _bad(rope_scaling, expected, rope_type)
    clean = {"rope_type": rope_type}
    for key in required + optional:
        value = rope_scaling.get(key)
        if value is None and key in required:
            raise _bad(rope_scaling, f"a {key!r} key", rope_type)
        clean[key] = (
            None if value is None else _plain(key, value, rope_type, rope_scaling)
        )
    if rope_type == "llama3" and clean["high_freq_factor"] <= clean["low_freq_factor"]:
        raise _bad(rope_scaling, "'high_freq_factor' > 'low_freq_factor'", rope_type)
    if rope_type == "longrope" and clean["factor"] is None:
        if clean["attention_factor"] is None:
            expected = "a 'factor' key (or an explicit 'attention_factor')"
            raise _bad(rope_scaling, expected, rope_type)
    return clean


def attention_factor(rope_scaling):
    """The factor on cos and sin: transformers' float64 expressions."""
    params = rope_scaling or {"rope_type": "default"}
    given = params.get("attention_factor")
    if given is not None:
        return float(given)
    factor = params.get("factor")
    if params["rope_type"] == "yarn":

        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            return float(
                get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            )
        return float(get_mscale(factor))
    if params["rope_type"] == "longrope" and factor > 1.0:
        orig = params["original_max_position_embeddings"]
        return math.sqrt(1 + math.log(factor) / math.log(orig))
    return 1.0


# -- one function per rope_type: exact inverse frequencies (Decimal) ----------


def _d(value):
    return decimal.Decimal(value)  # the exact binary value of a float


def _powers(base, dim):
    """``base ** (2i / dim)`` for ``i < dim / 2``."""
    log_base = base.ln()
    return [(log_base * 2 * i / dim).exp() for i in range(dim // 2)]


def default(params, dim, base):
    return [1 / p for p in _powers(base, dim)]


def linear(params, dim, base):
    return [1 / p / _d(params["factor"]) for p in _powers(base, dim)]


def dynamic(params, dim, base):
    factor, orig = _d(params["factor"]), params["original_max_position_embeddings"]
    seq_len = max(params.get("seq_len") or orig, orig)
    growth = factor * seq_len / orig - (factor - 1)
    return default(params, dim, base * (growth.ln() * dim / (dim - 2)).exp())


def yarn(params, dim, base):
    factor = _d(params["factor"])
    orig = params["original_max_position_embeddings"]

    def correction_dim(rotations):
        return dim * (orig / (_d(rotations) * 2 * PI)).ln() / (2 * base.ln())

    low = correction_dim(params.get("beta_fast") or 32)
    high = correction_dim(params.get("beta_slow") or 1)
    if params.get("truncate") is not False:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(_d(low), _d(0)), min(_d(high), _d(dim - 1))
    if low == high:
        high += decimal.Decimal("0.001")  # transformers' guard against 0 / 0
    inverse = []
    for i, p in enumerate(_powers(base, dim)):
        ramp = min(max((i - low) / (high - low), _d(0)), _d(1))
        inverse.append(ramp / (factor * p) + (1 - ramp) / p)
    return inverse


def llama3(params, dim, base):
    factor, orig = _d(params["factor"]), params["original_max_position_embeddings"]
    low, high = _d(params["low_freq_factor"]), _d(params["high_freq_factor"])
    inverse = []
    for w in default(params, dim, base):
        wavelength = 2 * PI / w
        if wavelength < orig / high:
            inverse.append(w)
        elif wavelength > orig / low:
            inverse.append(w / factor)
        else:
            smooth = (orig / wavelength - low) / (high - low)
            inverse.append((1 - smooth) * w / factor + smooth * w)
    return inverse


def longrope(params, dim, base):
    seq_len, orig = params.get("seq_len"), params["original_max_position_embeddings"]
    key = "long_factor" if seq_len and seq_len > orig else "short_factor"
    factors = params[key]
    if len(factors) != dim // 2:
        expected = f"{key!r} with rotary_dim / 2 = {dim // 2} values"
        raise _bad(params, expected, "longrope")
    return [1 / (_d(f) * p) for f, p in zip(factors, _powers(base, dim), strict=True)]


_FREQUENCIES = {
    "default": default,
    "linear": linear,
    "dynamic": dynamic,
    "yarn": yarn,
    "llama3": llama3,
    "longrope": longrope,
}


def frequencies(rope_scaling, dim, max_wavelength):
    """float64 inverse frequencies ``[dim / 2]``, each the exact value rounded once.

    Args:
        rope_scaling: a dict checked by `validate`, or `None`.
        dim: int. The (even) rotary dimension.
        max_wavelength: float. The base (`rope_theta`).
    """
    params = rope_scaling or {"rope_type": "default"}
    if params["rope_type"] == "dynamic" and dim <= 2:
        raise _arguments.invalid("rotary_dim", "an even integer > 2 with dynamic", dim)
    if params["rope_type"] == "yarn" and max_wavelength == 1:
        raise _arguments.invalid("max_wavelength", "a base other than 1 with yarn", 1.0)
    with decimal.localcontext() as ctx:
        ctx.prec = _PRECISION
        inverse = _FREQUENCIES[params["rope_type"]](params, dim, _d(max_wavelength))
        return np.array([float(w) for w in inverse], np.float64)


# -- Hugging Face configs --------------------------------------------------------


def hf_arguments(config, seq_len=None, layer_type=None):
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
        keys = _KEYS.get(rope_type, ((), ()))
        known = {k: v for k, v in params.items() if k in keys[0] + keys[1]}
        scaling = {"rope_type": rope_type, **known}
    return {
        "max_wavelength": theta,
        "rope_scaling": scaling,
        "rotary_dim": int(head_dim * partial),
    }


# -- the other arguments of RotaryEmbedding and rotary_cos_sin -------------------


def even_dim(value, name):
    if not _arguments.is_int(value) or value <= 0 or value % 2:
        raise _arguments.invalid(name, "a positive even integer", value)
    return int(value)


def _check_count(given, dim):
    if given is not None and len(given) != dim // 2:
        expected = f"rotary_dim / 2 = {dim // 2} values"
        raise _arguments.invalid(
            "inverse_frequencies", expected, f"<{len(given)} values>"
        )


def _given_frequencies(value, rotary_dim):
    """A checkpoint's inverse frequencies as a tuple of exact Python floats."""
    if value is None:
        return None
    array = np.asarray(value)
    ok = array.ndim == 1 and array.size and np.issubdtype(array.dtype, np.number)
    if not ok or not (np.isfinite(array).all() and (array >= 0).all()):
        expected = "a 1-D array of finite inverse frequencies >= 0"
        raise _arguments.invalid("inverse_frequencies", expected, array.tolist())
    given = tuple(float(w) for w in array)  # float32 values stay exact
    if rotary_dim is not None:
        _check_count(given, rotary_dim)
    return given


def options(max_wavelength, rope_scaling, rotary_dim, layout, inverse_frequencies):
    """The checked ``(max_wavelength, rope_scaling, rotary_dim, layout, given)``."""
    max_wavelength = _arguments.check_wavelength(max_wavelength)
    rope_scaling = validate(rope_scaling)
    if rotary_dim is not None:
        rotary_dim = even_dim(rotary_dim, "rotary_dim")
    layout = _arguments.check_choice("layout", layout, ROPE_LAYOUTS)
    given = _given_frequencies(inverse_frequencies, rotary_dim)
    return max_wavelength, rope_scaling, rotary_dim, layout, given


def axes_arguments(sequence_axis, feature_axis):
    for name, value in (
        ("sequence_axis", sequence_axis),
        ("feature_axis", feature_axis),
    ):
        if not _arguments.is_int(value):
            raise _arguments.invalid(name, "an int", value)
    return int(sequence_axis), int(feature_axis)


def input_layout(shape, sequence_axis, feature_axis, rotary_dim, given):
    """``(sequence axis, feature axis, rotary dim)`` for inputs of `shape`."""
    rank = len(shape)
    axes = []
    for name, axis in (
        ("sequence_axis", sequence_axis),
        ("feature_axis", feature_axis),
    ):
        if not (-rank <= axis < rank and axis % rank != 0 and axis % rank not in axes):
            expected = f"a distinct non-batch axis of inputs of shape {shape}"
            raise _arguments.invalid(name, expected, axis)
        axes.append(axis % rank)
    features = shape[axes[1]]
    dim = rotary_dim or features
    if not _arguments.is_int(features) or not _arguments.is_int(dim) or dim % 2:
        expected = "a known, even feature dimension (or an even `rotary_dim`)"
        raise _arguments.invalid("inputs", expected, f"<shape={shape}>")
    if dim > features:
        raise _arguments.invalid("rotary_dim", f"at most {features} features", dim)
    _check_count(given, dim)
    return axes[0], axes[1], int(dim)
