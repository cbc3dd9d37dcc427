"""ALiBi slopes on the host, exact: correctly rounded float64, and the
float32 pairs the graph multiplies by.

Press et al., 2021 (https://arxiv.org/abs/2108.12409): with `n` heads and
`c = 2**floor(log2(n))`, head `h < c` has slope ``2**(-(h + 1) m / c)``
and the `n - c` others take every other slope of `2c` heads, starting at
the first: ``2**(-(2j + 1) m / (2c))`` (the original repository's rule,
which keras-hub, BLOOM, Falcon and MPT follow; `m` is `alibi_bias_max`,
8 in the paper). Each slope is a power of two with a rational exponent,
computed in `decimal` to 40 digits and rounded once to float64.
"""

import decimal
import fractions
import math

import numpy as np

from keras_posenc._checks import arguments as _arguments

# Most heads: bounds the host work (a `decimal` power per head, ~20 us).
MAX_HEADS = 2**12
# `alibi_bias_max` at most this: the smallest slope, 2**-64, keeps the
# float32 split normal.
MAX_BIAS_MAX = 64
# Explicit slopes lie in [2**-64, 2**64]: the split stays normal and every
# bias (|distance| < 2**31) stays finite in float32.
SLOPE_RANGE = (2.0**-64, 2.0**64)
# Significant bits of a slope's high part: times a 19-bit multiple of 4096
# (the distance's high part) it stays within float32's 24 bits, exactly.
HIGH_BITS = 5
_DIGITS = 40


def check_heads(heads, name="heads"):
    return _arguments.check_positive_int(name, heads, MAX_HEADS)


def check_bias_max(value):
    return _arguments.check_positive_int("alibi_bias_max", value, MAX_BIAS_MAX)


def exponents(heads, alibi_bias_max):
    """The exponents `r` of the slopes ``2**-r``, as exact fractions."""
    c = 1 << (heads.bit_length() - 1)  # the largest power of two <= heads
    first = [fractions.Fraction((h + 1) * alibi_bias_max, c) for h in range(c)]
    extra = [
        fractions.Fraction((2 * j + 1) * alibi_bias_max, 2 * c)
        for j in range(heads - c)
    ]
    return first + extra


def power_of_two(exponent, scale=1):
    """``2**-exponent / sqrt(scale)`` correctly rounded to float64
    (`exponent` a Fraction, `scale` a positive int)."""
    with decimal.localcontext() as context:
        context.prec = _DIGITS
        if exponent.denominator == 1 and scale == 1:
            return math.ldexp(1.0, -int(exponent))
        value = (
            -decimal.Decimal(exponent.numerator) / decimal.Decimal(exponent.denominator)
        ) * decimal.Decimal(2).ln()
        value = value.exp()
        if scale != 1:
            value = value / decimal.Decimal(scale).sqrt()
        return float(value)


def slopes(heads, alibi_bias_max=8, scale=1):
    """The slopes of `heads` heads as float64 numpy, each correctly rounded."""
    return np.array(
        [power_of_two(r, scale) for r in exponents(heads, alibi_bias_max)],
        dtype=np.float64,
    )


def check_slopes(values):
    """Explicit slopes: a non-empty list of numbers in `SLOPE_RANGE`."""
    low, high = SLOPE_RANGE
    expected = "a non-empty list of numbers in [2**-64, 2**64], one per head"
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # an int past float64 too
        raise _arguments.invalid("slopes", expected, values) from None
    if (
        isinstance(values, (str, bytes))
        or _arguments.host_array(values).dtype == object  # bools: not slopes
        or array.ndim != 1
        or not 0 < array.size <= MAX_HEADS
        or np.any(~((array >= low) & (array <= high)))
    ):
        raise _arguments.invalid("slopes", expected, values)
    return [float(v) for v in array]


def split(values):
    """`values` (float64) as float32 ``(high, low)``: `high` keeps
    `HIGH_BITS` significant bits, ``high + low`` is within 2**-29 of each
    value (relative)."""
    high = []
    for value in values:
        mantissa, exponent = math.frexp(value)
        high.append(math.ldexp(round(mantissa * 2**HIGH_BITS), exponent - HIGH_BITS))
    high64 = np.array(high, dtype=np.float64)
    low = (np.asarray(values, dtype=np.float64) - high64).astype(np.float32)
    return high64.astype(np.float32), low
