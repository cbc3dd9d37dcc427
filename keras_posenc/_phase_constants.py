"""Host-side constants of the exact phase engine (numpy and `decimal` only).

The engine (`_engine.py`) evaluates ``sin(p * w)`` and ``cos(p * w)`` for
int32 positions ``p`` without ever rounding an angle to float32. It needs,
per frequency ``w`` (radians per position), the turns per position
``f = w / (2 pi)`` split so that int32 products give ``p * f mod 1``
exactly:

* ``frac(2**(12k) f)`` for ``k = 0, 1, 2`` (one per 12-bit chunk of ``p``)
  is split into a 12-bit integer ``hi``, a signed integer ``mid`` in units
  of 2**-24 turns, and a float32 rest ``lo`` (``|lo| <= 2**-25``);
* the fine table ``sin/cos(l * w)`` for ``l < FINE_ROWS``, which the engine
  combines with coarse rows ``q = 64 * floor(p / 64)`` through the
  angle-addition identities.

Everything is derived from the exact frequency with enough decimal digits
that ``frac(2**24 f)`` keeps 40 digits after the point, whatever the size
of ``f`` (a tiny ``max_wavelength`` gives frequencies near 1e30 rad).
"""

import dataclasses
import decimal
import functools
import math

import numpy as np

# Rows of the fine table: positions are combined as coarse (multiple of
# FINE_ROWS) + fine (0 .. FINE_ROWS - 1).
FINE_ROWS = 64

# Fraction digits kept below 2**24 f; p < 2**31 needs about 26 of them.
_FRACTION_DIGITS = 40
_PI = decimal.Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620"
    "8998628034825342117067982148086513282306647093844609550582231725359408128481117"
    "4502841027019385211055596446229489549303819644288109756659334461284756482337867"
    "8316527120190914564856692346034861045432664821339360726024914127372458700660631"
    "5588174881520920962829254091715364367892590360011330530548820466521384146951941"
    "5116094330572703657595919530921861173819326117931051185480744623799627495673518"
    "8575272489122793818301194912983367336244065664308602139494639522473719070217986"
    "0943702770539217176293176752384674818467669405132000568127145263560827785771342"
    "7577896091736371787214684409012249534301465495853710507922796892589235420199561"
    "1212902196086403441815981362977477130996051870721134999999837297804995105973173"
)


def _digits_for(max_turns):
    """Decimal precision that keeps `_FRACTION_DIGITS` below ``2**24 * max_turns``."""
    integer_digits = max(0, int(math.log10(max(float(max_turns), 1.0) * 2**24)) + 1)
    return _FRACTION_DIGITS + integer_digits + 10


def sinusoidal_turns(depth, max_wavelength):
    """Turns per position ``b**(-2i/depth) / (2 pi)`` of each sine channel.

    Args:
        depth: int. Width of the encoding.
        max_wavelength: float. The base ``b``.

    Returns:
        A tuple of ``(depth + 1) // 2`` `decimal.Decimal` values.
    """
    base = decimal.Decimal(max_wavelength)
    largest = 1.0 if max_wavelength >= 1 else (1.0 / max_wavelength) / (2 * math.pi)
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(largest)
        log_base = base.ln()
        two_pi = 2 * +_PI
        return tuple(
            (-(decimal.Decimal(2 * i) / depth) * log_base).exp() / two_pi
            for i in range((depth + 1) // 2)
        )


def radians_of(turns):
    """float64 angular frequencies ``2 pi f``, rounded once from the exact turns."""
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(max((abs(t) for t in turns), default=0))
        return np.array([float(2 * _PI * t) for t in turns], np.float64)


def turns_of(angular_frequencies):
    """Exact turns per position of frequencies given in radians per position.

    Each value is taken as the exact binary number it is (a float32
    checkpoint array stays bit-for-bit that array).

    Args:
        angular_frequencies: 1-D array-like of floats.

    Returns:
        A tuple of `decimal.Decimal` values.
    """
    values = [float(w) for w in np.asarray(angular_frequencies).ravel()]
    largest = max((abs(w) for w in values), default=0.0) / (2 * math.pi)
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(largest)
        two_pi = 2 * +_PI
        return tuple(decimal.Decimal(w) / two_pi for w in values)


@dataclasses.dataclass(frozen=True)
class PhaseConstants:
    """What the engine needs for a set of output columns.

    Column ``c`` holds ``sin(p * w_k)`` (``is_sin[c]``) or ``cos(p * w_k)``
    with ``k = frequency[c]``; all arrays are indexed by column.
    """

    turn_hi: np.ndarray  # int32 [3, C]: frac(2**(12k) f) in units of 2**-12
    turn_mid: np.ndarray  # int32 [3, C]: the next bits, units of 2**-24, signed
    turn_lo: np.ndarray  # float32 [3, C]: the rest, in turns
    fine_u: np.ndarray  # float32 [FINE_ROWS, C]: the column's value at l
    fine_v: np.ndarray  # float32 [FINE_ROWS, C]: its derivative in the angle

    @property
    def width(self):
        return self.fine_u.shape[1]


def _split(turns):
    """hi, mid, lo of ``frac(2**(12k) f)`` for each frequency, and frac(f)."""
    n = len(turns)
    hi = np.zeros((3, n), np.int32)
    mid = np.zeros((3, n), np.int32)
    lo = np.zeros((3, n), np.float32)
    frac = np.zeros(n, np.float64)
    largest = max((abs(t) for t in turns), default=decimal.Decimal(0))
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(largest)
        for i, f in enumerate(turns):
            frac[i] = float(f % 1)
            for k in range(3):
                t = (f * 2 ** (12 * k)) % 1
                h = int((t * 4096).to_integral_value())
                rest = t - decimal.Decimal(h) / 4096
                m = int((rest * 2**24).to_integral_value())
                hi[k, i] = h % 4096
                mid[k, i] = m
                lo[k, i] = float(rest - decimal.Decimal(m) / 2**24)
    return hi, mid, lo, frac


def phase_constants(turns, frequency, is_sin):
    """Builds the constants of columns ``frequency`` (indices into `turns`).

    Args:
        turns: sequence of `decimal.Decimal`, turns per position.
        frequency: int array ``[C]``: the frequency of each column.
        is_sin: bool array ``[C]``: sine (True) or cosine column.

    Returns:
        A `PhaseConstants`.
    """
    hi, mid, lo, frac = _split(turns)
    frequency = np.asarray(frequency, np.int64)
    is_sin = np.asarray(is_sin, bool)
    # frac(l * f) from frac(f) in float64 is exact to ~1e-15 turns for l < 64,
    # whatever the size of f: the fine table never sees a huge angle.
    phase = np.mod(np.arange(FINE_ROWS)[:, None] * frac[frequency][None, :], 1.0)
    angle = 2.0 * np.pi * phase
    fine_u = np.where(is_sin, np.sin(angle), np.cos(angle))
    fine_v = np.where(is_sin, np.cos(angle), -np.sin(angle))
    return PhaseConstants(
        turn_hi=hi[:, frequency],
        turn_mid=mid[:, frequency],
        turn_lo=lo[:, frequency],
        fine_u=fine_u.astype(np.float32),
        fine_v=fine_v.astype(np.float32),
    )


def sinusoidal_columns(depth, layout):
    """Frequency index and sine role of every column of the sinusoidal table."""
    if layout == "interleaved":
        columns = np.arange(depth)
        return columns // 2, columns % 2 == 0
    n_sin, n_cos = (depth + 1) // 2, depth // 2
    frequency = np.concatenate([np.arange(n_sin), np.arange(n_cos)])
    return frequency, np.arange(depth) < n_sin


@functools.lru_cache(maxsize=64)
def sinusoidal_constants(depth, max_wavelength, layout):
    """`PhaseConstants` of the sinusoidal table (cached per option set)."""
    turns = sinusoidal_turns(depth, max_wavelength)
    return phase_constants(turns, *sinusoidal_columns(depth, layout))


def _turn_table():
    """sin and cos of ``2 pi j / 256`` for j = 0..256, each as float32 hi + lo."""
    angle = 2.0 * np.pi * np.arange(257) / 256.0
    columns = []
    for exact in (np.sin(angle), np.cos(angle)):
        hi = exact.astype(np.float32)
        columns += [hi, (exact - hi).astype(np.float32)]
    return np.stack(columns, axis=-1)


# float32 [257, 4]: sin hi, sin lo, cos hi, cos lo of multiples of 1/256 turn.
TURN_TABLE = _turn_table()
