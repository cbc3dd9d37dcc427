"""The RoPE configuration: `RopeConfig`, validated, hashable, one per option set.

`RotaryEmbedding` and `rotary_cos_sin` turn their arguments (`max_wavelength`,
`rope_scaling`, `inverse_frequencies`, the rotary dimension) into one
frozen `RopeConfig`, checked before any work: every key of `rope_scaling`
is one the `rope_type` reads (`_rope.scalings.REGISTRY`) or a multimodal
section key, and is applied; any other key is refused by name. Caches of
frequencies and rows key on the configuration itself, and `get_config`'s
`rope_scaling` comes from it, as plain JSON values.
"""

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._exact import kept
from keras_posenc._files import versions
from keras_posenc._rope import scalings as _rope_types
from keras_posenc._rope.scalings import REGISTRY, ROPE_TYPES

# Widest rotary dimension, as `depth`: the host-side constants take about
# a second there (frequencies, then the engine's phase constants).
MAX_ROTARY_DIM = _arguments.MAX_DEPTH
# How features pair: rotate_half, (2i, 2i+1), or rotate_half within each
# axis's own features (N-axis RoPE of equal axes: Gemma 4's vision tower).
LAYOUTS = ("half", "interleaved", "half_per_axis")
MROPE_KEYS = ("mrope_section", "mrope_interleaved")
# Most values in a list key (one per frequency): checked before the values.
MAX_ENTRIES = MAX_ROTARY_DIM // 2
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).smallest_subnormal)
# Every frequency is below max(1, 1 / base) / min(1, divisors): that bound
# must be a float64 (the engine takes each frequency as a float64).
_LOG_FLOAT64_MAX = math.log(float(np.finfo(np.float64).max))
# transformers keeps these in `rope_parameters`; here they are arguments.
_ARGUMENT_KEYS = {"rope_theta": "max_wavelength", "partial_rotary_factor": "rotary_dim"}
_INVALID = object()


def check_rotary_dim(value, name="rotary_dim"):
    """A positive even rotary dimension, at most `MAX_ROTARY_DIM`."""
    if not _arguments.is_int(value) or value <= 0 or value % 2:
        raise _arguments.invalid(name, "a positive even integer", value)
    if value > MAX_ROTARY_DIM:
        raise _arguments.invalid(
            name, f"a positive even integer <= {MAX_ROTARY_DIM}", value
        )
    return int(value)


# -- key kinds: each returns the plain value, or _INVALID ---------------------------


def _real(value):
    """A finite float, or None (bools, strings, NaN, inf, ints past float64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _positive(value):
    number = _real(value)
    return _plain(value) if number is not None and number > 0 else _INVALID


def _signed(value):
    return _INVALID if _real(value) is None else _plain(value)


def _fraction(value):
    number = _real(value)
    return _plain(value) if number is not None and 0 <= number <= 1 else _INVALID


def _count(value):
    return int(value) if _arguments.is_int(value) and value > 0 else _INVALID


def _flag(value):
    return value if isinstance(value, bool) else _INVALID


def _truncate(value):
    # transformers tests `if truncate:`, so an explicit None does not truncate.
    return False if value is None else _flag(value)


def _listed(value):
    """Whether `value` is a list of 1 to `MAX_ENTRIES` entries (length first)."""
    return isinstance(value, (list, tuple)) and 0 < len(value) <= MAX_ENTRIES


def check_sizes(rope_scaling, inverse_frequencies):
    """Refuses list values past `MAX_ENTRIES` from their lengths alone.

    Keras walks every constructor argument of a layer (its automatic
    config) before `__init__` can check them: seconds for lists of millions
    of factors. This runs first, reading no element: the refusals are the
    full checks' own (`RopeConfig.build`).
    """
    for key in ("short_factor", "long_factor", "mrope_section"):
        value = rope_scaling.get(key) if isinstance(rope_scaling, dict) else None
        if isinstance(value, (list, tuple)) and len(value) > MAX_ENTRIES:
            expected = f"{key!r} to be {_KINDS[key][1]}"
            raise _bad(rope_scaling, expected, rope_scaling.get("rope_type"))
    if isinstance(inverse_frequencies, (list, tuple)):
        _check_frequency_count(len(inverse_frequencies))


def _check_frequency_count(count):
    if count > MAX_ROTARY_DIM // 2:
        expected = f"at most {MAX_ENTRIES} values (rotary_dim <= {MAX_ROTARY_DIM})"
        raise _arguments.invalid("inverse_frequencies", expected, f"<{count} values>")


def _factors(value):
    if not _listed(value):
        return _INVALID
    values = [_real(v) for v in value]
    return _INVALID if any(v is None or v <= 0 for v in values) else tuple(values)


def _section(value):
    if not _listed(value):
        return _INVALID
    if not all(_arguments.is_int(v) and v >= 0 for v in value) or not sum(value):
        return _INVALID
    return tuple(int(v) for v in value)


_POSITIVE = (_positive, "a finite number > 0")
_SIGNED = (_signed, "a finite number")
_COUNT = (_count, "a positive integer")
_FACTORS = (_factors, f"a non-empty list of at most {MAX_ENTRIES} finite numbers > 0")
_KINDS = {
    "factor": _POSITIVE,
    "attention_factor": _POSITIVE,
    "beta_fast": _POSITIVE,
    "beta_slow": _POSITIVE,
    "low_freq_factor": _POSITIVE,
    "high_freq_factor": _POSITIVE,
    "mscale": _SIGNED,
    "mscale_all_dim": _SIGNED,
    "original_max_position_embeddings": _COUNT,
    "seq_len": _COUNT,
    "truncate": (_truncate, "a bool or None (None: no truncation, as transformers)"),
    "short_factor": _FACTORS,
    "long_factor": _FACTORS,
    "partial_rotary_factor": (_fraction, "a number in [0, 1]"),
    "mrope_section": (
        _section,
        f"a non-empty list of at most {MAX_ENTRIES} integers >= 0, not all 0",
    ),
    "mrope_interleaved": (_flag, "a bool"),
}
# The value of an absent key (None for the others: transformers' default).
_ABSENT = {"truncate": True}
# Every key a RoPE parameters dict may hold (never a layer type's name).
PARAMETER_KEYS = frozenset({"rope_type", "type", "rope_theta", *_KINDS})


# -- parsing `rope_scaling` ----------------------------------------------------------


def _bad(value, expected, rope_type=None):
    where = "" if rope_type is None else f" for rope_type={shortened(rope_type)!r}"
    return _arguments.invalid("rope_scaling", f"{expected}{where}", shortened(value))


def _unknown(keys, known):
    hints = [
        f"{k!r} is the `{_ARGUMENT_KEYS[k]}` argument"
        for k in keys
        if k in _ARGUMENT_KEYS
    ]
    hint = f" ({'; '.join(hints)})" if hints else ""
    return f"only the keys {known}, not {shortened(keys)}{hint}"


def _value(key, scaling, required, rope_type):
    """The checked value of `key` (its default when absent, None meaning absent)."""
    if key not in scaling or (scaling[key] is None and key != "truncate"):
        if required:
            raise _bad(scaling, f"a {key!r} key", rope_type)
        return _ABSENT.get(key)
    parse, expected = _KINDS[key]
    value = parse(scaling[key])
    if value is _INVALID:
        raise _bad(scaling, f"{key!r} to be {expected}", rope_type)
    return value


def _parse(scaling):
    """`rope_scaling` as ``(rope_type, parameters, section, interleaved)``."""
    if scaling is None:
        return "default", (), None, False
    if not isinstance(scaling, dict):
        raise _bad(scaling, "None or a dict with a 'rope_type' key")
    rope_type = scaling.get("rope_type")
    if not isinstance(rope_type, str) or rope_type not in REGISTRY:
        raise _bad(scaling, f"a 'rope_type' key, one of {ROPE_TYPES}")
    entry = REGISTRY[rope_type]
    known = ("rope_type", *entry.required, *entry.optional, *MROPE_KEYS)
    unknown = sorted((k for k in scaling if k not in known), key=str)
    if unknown:
        raise _bad(scaling, _unknown(unknown, known), rope_type)
    parameters = tuple(
        (key, _value(key, scaling, key in entry.required, rope_type))
        for key in entry.required + entry.optional
    )
    section = _value("mrope_section", scaling, False, rope_type)
    interleaved = _value("mrope_interleaved", scaling, False, rope_type) or False
    if interleaved and (section is None or len(section) != 3):
        expected = "an 'mrope_section' of 3 values with 'mrope_interleaved'"
        raise _bad(scaling, expected, rope_type)
    return rope_type, parameters, section, interleaved


def _given_frequencies(value):
    """A checkpoint's inverse frequencies as a tuple of exact Python floats."""
    if value is None:
        return None
    array = _arguments.host_array(value)
    if array.ndim == 1:
        _check_frequency_count(array.size)
    # Floats and integers only: a complex value is not a frequency.
    ok = array.ndim == 1 and array.size and array.dtype.kind in "fiu"
    if not ok or not (np.isfinite(array).all() and (array >= 0).all()):
        expected = "a 1-D array of finite inverse frequencies >= 0"
        echo = _arguments.array_echo(array)
        raise _arguments.invalid("inverse_frequencies", expected, echo)
    return tuple(float(w) for w in array)  # float32 values stay exact


# -- the configuration -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Everything that sets the rotary frequencies and the attention factor.

    Hashable (caches key on it) and checked when built by `build`: a
    configuration that exists gives finite float64 frequencies and an
    attention factor that float32 holds. The rotary dimension is not part of
    it (it may come from the input); `check_dim` checks it when known.

    Attributes:
        rope_type: a key of `REGISTRY`.
        max_wavelength: float. The base (`rope_theta`).
        parameters: ``((key, value), ...)``: every key of the `rope_type`,
            None where absent (transformers' default), lists as tuples.
        mrope_section: tuple of ints, or None: frequencies per position row.
        mrope_interleaved: bool. Qwen3-VL's interleaved sections.
        inverse_frequencies: a checkpoint's frequencies (tuple), or None.
    """

    rope_type: str = "default"
    max_wavelength: float = 10000.0
    parameters: tuple = ()
    mrope_section: tuple | None = None
    mrope_interleaved: bool = False
    inverse_frequencies: tuple | None = None

    @classmethod
    def build(
        cls,
        max_wavelength=10000.0,
        rope_scaling=None,
        inverse_frequencies=None,
        rotary_dim=None,
    ):
        """The checked configuration of `RotaryEmbedding`'s arguments.

        Every rule that does not need the rotary dimension is checked here,
        the others too when `rotary_dim` is given.
        """
        base = _arguments.check_wavelength(max_wavelength)
        rope_type, parameters, section, interleaved = _parse(rope_scaling)
        config = cls(
            rope_type,
            base,
            parameters,
            section,
            interleaved,
            _given_frequencies(inverse_frequencies),
        )
        config._check(None, "rotary_dim", rope_scaling)
        if rotary_dim is not None:
            config.check_dim(check_rotary_dim(rotary_dim))
        return config

    @property
    def params(self):
        return dict(self.parameters)

    @property
    def attention_factor(self):
        """The factor on cos and sin: transformers' float64 value."""
        return REGISTRY[self.rope_type].attention(self.params)

    @property
    def rope_scaling(self):
        """The configuration as a `rope_scaling` dict of plain JSON values."""
        if self.rope_type == "default" and self.mrope_section is None:
            return None
        scaling: dict[str, Any] = {"rope_type": self.rope_type}
        for key, value in self.parameters:
            scaling[key] = list(value) if isinstance(value, tuple) else value
        if self.mrope_section is not None:
            scaling["mrope_section"] = list(self.mrope_section)
            scaling["mrope_interleaved"] = self.mrope_interleaved
        return scaling

    def frequencies(self, dim):
        """The ``dim / 2`` float64 inverse frequencies, as a tuple (kept:
        `_exact.kept.memoized`)."""
        return _frequencies(self, dim)

    def channel_rows(self, dim):
        """The position row (0, 1, 2: temporal, height, width) of each frequency.

        `None` without `mrope_section`. Contiguous sections take rows 0, 1,
        2, 0, ... in turn (Qwen2-VL); interleaved ones give height and width
        every third frequency from 1 and 2, temporal the rest (Qwen3-VL).
        """
        section = self.mrope_section
        if section is None:
            return None
        if not self.mrope_interleaved:
            return tuple(i % 3 for i, size in enumerate(section) for _ in range(size))
        rows = [0] * (dim // 2)
        for row in (1, 2):
            rows[row : 3 * section[row] : 3] = [row] * section[row]
        return tuple(rows)

    def check_dim(self, dim, name="rotary_dim"):
        """Checks the rules that need the rotary dimension `dim` (`name`)."""
        self._check(dim, name, self.rope_scaling)

    def _check(self, dim, name, echo):
        for argument, expected, value in self._problems(dim):
            if argument == "rope_scaling":
                raise _bad(echo if value is None else value, expected, self.rope_type)
            if argument is None:
                argument, value = name, dim
            raise _arguments.invalid(argument, expected, value)

    def _problems(self, dim):
        entry, p = REGISTRY[self.rope_type], self.params
        given = self.inverse_frequencies is not None
        yield from entry.rules(p, None if given else self.max_wavelength, dim)
        if dim is None:
            yield from self._attention_problems(entry)
            if not given:
                yield from self._range_problems(entry, p)
            return
        given_count = len(self.inverse_frequencies or ())
        if given and given_count != dim // 2:
            yield (
                "inverse_frequencies",
                f"rotary_dim / 2 = {dim // 2} values",
                f"<{given_count} values>",
            )
        if self.mrope_section is not None:
            yield from _section_problems(
                self.mrope_section, self.mrope_interleaved, dim
            )

    def _attention_problems(self, entry):
        if not entry.attention_keys:
            return
        factor = self.attention_factor
        if not _FLOAT32_TINY <= factor <= _FLOAT32_MAX:
            expected = (
                f"an attention factor (from {entry.attention_keys}) that float32 "
                f"holds, in [{_FLOAT32_TINY}, {_FLOAT32_MAX}]; they give {factor!r}"
            )
            yield "rope_scaling", expected, None

    def _range_problems(self, entry, p):
        if -math.log(self.max_wavelength) >= _LOG_FLOAT64_MAX:
            expected = (
                "a base whose inverse frequencies fit in float64 (they approach "
                "1 / max_wavelength)"
            )
            yield "max_wavelength", expected, self.max_wavelength
            return
        log_bound = max(0.0, -math.log(self.max_wavelength))
        for key in entry.divisors:
            smallest = min(p[key]) if isinstance(p[key], tuple) else p[key]
            log_bound -= min(0.0, math.log(1.0 if smallest is None else smallest))
            if log_bound >= _LOG_FLOAT64_MAX:
                expected = (
                    f"{key!r} large enough that the inverse frequencies fit in "
                    f"float64 (up to 1 / (min(1, max_wavelength) * {key!r}))"
                )
                yield "rope_scaling", expected, None


def _section_problems(section, interleaved, dim):
    n = dim // 2
    if sum(section) != n:
        yield "rope_scaling", f"'mrope_section' summing to rotary_dim / 2 = {n}", None
    elif interleaved and (3 * section[1] - 2 >= n or 3 * section[2] - 1 >= n):
        expected = (
            f"an interleaved 'mrope_section' whose height and width frequencies "
            f"(every third from 1 and from 2) fit in rotary_dim / 2 = {n}"
        )
        yield "rope_scaling", expected, None


# Its cost: the tuple of floats, and as much again for the factors the
# configuration (its key) may hold. Kept from the second request, as the
# encoder they make (`_exact.engine.rotary_encoder`).
@kept.memoized(lambda frequencies: 2 * 32 * len(frequencies) + 1024, repeat_only=True)
def _frequencies(config, dim):
    if config.inverse_frequencies is not None:
        return config.inverse_frequencies
    return _rope_types.inverse_frequencies(
        config.rope_type, config.params, dim, config.max_wavelength
    )


# -- configs of earlier versions -------------------------------------------------------


def _null_truncate_was_the_default(config):
    """0.2's `"truncate": null`: YaRN's default, which truncates."""
    scaling = config.get("rope_scaling")
    if isinstance(scaling, dict) and "truncate" in scaling:
        if scaling["truncate"] is None:
            config = {**config, "rope_scaling": {**scaling, "truncate": True}}
    return config


def _written_by_0_2(config):
    """Whether an unversioned config holds a null `truncate`: only 0.2 wrote
    one (0.3.0 to 0.4.0 wrote the value they read, `true` or `false`)."""
    scaling = config.get("rope_scaling")
    return isinstance(scaling, dict) and scaling.get("truncate", False) is None


# `RotaryEmbedding` configs whose keys meant something else when written
# (`_files.versions`): 0.3.0 reads an explicit null `truncate` as
# transformers does (no truncation); 0.2 wrote null for the default.
CONFIG_CHANGES = (
    versions.Change((0, 3, 0), _null_truncate_was_the_default, _written_by_0_2),
)
