"""Every `rope_type` of transformers 5.23, one `RopeType` entry each, exact.

The entries of Hugging Face transformers' `modeling_rope_utils`
(`ROPE_INIT_FUNCTIONS` and the default): default, linear, dynamic NTK,
YaRN, Llama 3, LongRoPE, proportional. Each `RopeType` holds the keys of
its standardized `rope_parameters` (`rope_theta` and, but for
proportional, `partial_rotary_factor` aside: they are arguments of the
layer), its rules, its inverse frequencies ``w_i`` (radians per position)
and its attention factor (the factor on cos and sin), with one signature
per role, as transformers has one per type.

transformers evaluates the frequencies in float32 (torch's ``pow``, off by
up to a few ulps); here the same formulas run on the host with 60-digit
`decimal` arithmetic and each frequency is rounded once to float64. Its
float64 expressions (YaRN's correction range, the attention factors) are
evaluated as it writes them, so they equal its values bit for bit.
`dynamic` is NTK scaling fixed for one serving length ``seq_len``
(transformers recomputes it whenever a longer sequence arrives, which a
compiled graph cannot do); `longrope` picks its long factors when
``seq_len > original_max_position_embeddings``, as transformers does for
the current length. Parameters are checked by `_rope.config` before any
entry sees them.
"""

import dataclasses
import decimal
import math
from collections.abc import Callable

from keras_posenc._exact.phase_constants import PI

_PRECISION = 60
_ORIG = "original_max_position_embeddings"


def _d(value):
    return decimal.Decimal(value)  # the exact binary value of a float


def _inverse_powers(base, dim, count=None):
    """``base ** (-2i / dim)`` for ``i < count`` (default ``dim // 2``)."""
    ratio = (-2 * base.ln() / dim).exp()
    values, value = [], _d(1)
    for _ in range(dim // 2 if count is None else count):
        values.append(value)
        value *= ratio
    return values


def _default(p, dim, base):
    return _inverse_powers(base, dim)


def _linear(p, dim, base):
    return [w / _d(p["factor"]) for w in _inverse_powers(base, dim)]


def _dynamic(p, dim, base):
    factor, orig = _d(p["factor"]), p["original_max_position_embeddings"]
    seq_len = max(p["seq_len"] or orig, orig)
    growth = factor * seq_len / orig - (factor - 1)
    return _inverse_powers(base * (growth.ln() * dim / (dim - 2)).exp(), dim)


def _yarn_range(p, dim, base):
    """YaRN's ramp ends ``(low, high)``: transformers' float64 expressions."""
    orig = p["original_max_position_embeddings"]

    def correction_dim(rotations):
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = correction_dim(p["beta_fast"] or 32)
    high = correction_dim(p["beta_slow"] or 1)
    if p["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    return low, high + 0.001 if low == high else high  # its guard against 0 / 0


def _yarn(p, dim, base):
    factor = _d(p["factor"])
    low, high = (_d(end) for end in _yarn_range(p, dim, float(base)))
    inverse = []
    for i, w in enumerate(_inverse_powers(base, dim)):
        ramp = min(max((i - low) / (high - low), _d(0)), _d(1))
        inverse.append(ramp * w / factor + (1 - ramp) * w)
    return inverse


def _llama3(p, dim, base):
    factor, orig = _d(p["factor"]), p["original_max_position_embeddings"]
    low, high = _d(p["low_freq_factor"]), _d(p["high_freq_factor"])
    inverse = []
    for w in _inverse_powers(base, dim):
        wavelength = 2 * PI / w
        if wavelength < orig / high:
            inverse.append(w)
        elif wavelength > orig / low or high == low:
            inverse.append(w / factor)
        else:
            smooth = (orig / wavelength - low) / (high - low)
            inverse.append((1 - smooth) * w / factor + smooth * w)
    return inverse


def _longrope(p, dim, base):
    seq_len, orig = p["seq_len"], p["original_max_position_embeddings"]
    factors = p["long_factor" if seq_len and seq_len > orig else "short_factor"]
    powers = _inverse_powers(base, dim)
    return [w / _d(f) for f, w in zip(factors, powers, strict=True)]


def _proportional(p, dim, base):
    # transformers' `int(rope_proportion * head_dim // 2)`, in Python floats.
    proportion, factor = p["partial_rotary_factor"], p["factor"]
    rotated = int((1.0 if proportion is None else proportion) * dim // 2)
    factor = _d(1.0 if factor is None else factor)
    inverse = [w / factor for w in _inverse_powers(base, dim, rotated)]
    return inverse + [_d(0)] * (dim // 2 - rotated)


def _mscale(scale, mscale=1):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention(p):
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    factor, mscale, mscale_all_dim = p["factor"], p["mscale"], p["mscale_all_dim"]
    if mscale and mscale_all_dim:
        return float(_mscale(factor, mscale) / _mscale(factor, mscale_all_dim))
    return float(_mscale(factor))


def _longrope_attention(p):
    if p["attention_factor"] is not None:
        return float(p["attention_factor"])
    factor, orig = p["factor"], p["original_max_position_embeddings"]
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(orig))


# Rules: ``(params, base, dim) -> (argument, expected, value)`` for each broken
# one. `base` is None with given frequencies, `dim` before the input is known;
# argument None is the rotary dimension, a None value echoes `rope_scaling`.


def _dynamic_rules(p, base, dim):
    if dim is not None and dim <= 2:
        yield None, "an even integer > 2 with dynamic", dim


def _turns(p, key, default):
    """YaRN's ``original_max_position_embeddings / (2 pi beta)``, or None
    where float64 cannot hold it (transformers' `math.log` then fails)."""
    try:
        turns = p[_ORIG] / ((p[key] or default) * 2 * math.pi)
    except (OverflowError, ZeroDivisionError):
        return None
    return turns if 0 < turns < math.inf else None


def _yarn_rules(p, base, dim):
    if base == 1.0:
        yield "max_wavelength", "a base other than 1 with yarn", base
    for key, default in (("beta_fast", 32), ("beta_slow", 1)):
        if _turns(p, key, default) is None:
            expected = (
                f"{key!r} and 'original_max_position_embeddings' whose ratio "
                "float64 holds (YaRN takes the log of orig / (2 pi beta))"
            )
            yield "rope_scaling", expected, None
    mscale_all_dim = p["mscale_all_dim"]
    if p["attention_factor"] is None and p["mscale"] and mscale_all_dim:
        if _mscale(p["factor"], mscale_all_dim) == 0:
            expected = "'mscale_all_dim' that leaves the attention factor finite"
            yield "rope_scaling", expected, None


def _llama3_rules(p, base, dim):
    # Equal factors leave no smoothed band: transformers' frequencies are
    # finite then, and so are these.
    if p["high_freq_factor"] < p["low_freq_factor"]:
        yield "rope_scaling", "'high_freq_factor' >= 'low_freq_factor'", None


def _longrope_rules(p, base, dim):
    factor, orig = p["factor"], p["original_max_position_embeddings"]
    if p["attention_factor"] is None and factor is None:
        expected = "a 'factor' key (or an explicit 'attention_factor')"
        yield "rope_scaling", expected, None
    elif p["attention_factor"] is None and factor > 1 and orig == 1:
        expected = "'original_max_position_embeddings' > 1 when 'factor' > 1"
        yield (
            "rope_scaling",
            expected + " (the attention factor divides by its log)",
            None,
        )
    for key in ("short_factor", "long_factor"):
        if dim is not None and len(p[key]) != dim // 2:
            yield (
                "rope_scaling",
                f"{key!r} with rotary_dim / 2 = {dim // 2} values",
                None,
            )


@dataclasses.dataclass(frozen=True)
class RopeType:
    """One `rope_type`: keys, rules, exact frequencies and attention factor.

    Attributes:
        required, optional: its `rope_scaling` keys, `rope_type` aside.
        frequencies: ``(params, dim, base) -> [Decimal]``, ``dim / 2`` values.
        attention: ``params -> float``, transformers' float64 expression.
        rules: what is broken (see above).
        attention_keys: the keys the attention factor comes from.
        divisors: keys whose values divide the frequencies.
    """

    required: tuple
    optional: tuple
    frequencies: Callable
    attention: Callable = lambda p: 1.0
    rules: Callable = lambda p, base, dim: ()
    attention_keys: tuple = ()
    divisors: tuple = ()


_YARN_OPTIONAL = ("attention_factor", "beta_fast", "beta_slow", "mscale")
REGISTRY = {
    "default": RopeType((), (), _default),
    "linear": RopeType(("factor",), (), _linear, divisors=("factor",)),
    "dynamic": RopeType(
        ("factor", _ORIG), ("seq_len",), _dynamic, rules=_dynamic_rules
    ),
    "yarn": RopeType(
        ("factor", _ORIG),
        (*_YARN_OPTIONAL, "mscale_all_dim", "truncate"),
        _yarn,
        _yarn_attention,
        _yarn_rules,
        ("attention_factor", "factor", "mscale", "mscale_all_dim"),
        ("factor",),
    ),
    "llama3": RopeType(
        ("factor", "low_freq_factor", "high_freq_factor", _ORIG),
        (),
        _llama3,
        rules=_llama3_rules,
        divisors=("factor",),
    ),
    "longrope": RopeType(
        ("short_factor", "long_factor", _ORIG),
        ("factor", "attention_factor", "seq_len"),
        _longrope,
        _longrope_attention,
        _longrope_rules,
        ("attention_factor", "factor", _ORIG),
        ("short_factor", "long_factor"),
    ),
    "proportional": RopeType(
        (), ("factor", "partial_rotary_factor"), _proportional, divisors=("factor",)
    ),
}
ROPE_TYPES = tuple(REGISTRY)
# rope_type -> (required keys, optional keys), for adapters of other formats.
KEYS = {name: (entry.required, entry.optional) for name, entry in REGISTRY.items()}


def inverse_frequencies(rope_type, params, dim, max_wavelength):
    """The ``dim / 2`` inverse frequencies of `rope_type`, each the exact
    value rounded once to float64, as a tuple."""
    with decimal.localcontext() as ctx:
        ctx.prec = _PRECISION
        entry = REGISTRY[rope_type]
        inverse = entry.frequencies(params, dim, _d(max_wavelength))
        return tuple(float(w) for w in inverse)
