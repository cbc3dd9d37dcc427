"""Host-side constants of the exact phase engine (numpy and `decimal` only).

The engine (`_exact/engine.py`) evaluates ``sin(p * w)`` and ``cos(p * w)`` for
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
of ``f`` (the smallest subnormal ``max_wavelength`` gives frequencies near
1e323 rad). The frequencies come from one decimal power and repeated
multiplication, the splits from shifts of Python integers: depth 65536
takes about a second, whatever the base.
"""

import dataclasses
import decimal
import math

import numpy as np

from keras_posenc._exact.pages import empty_in_own_pages

# Rows of the fine table: positions are combined as coarse (multiple of
# FINE_ROWS) + fine (0 .. FINE_ROWS - 1).
FINE_ROWS = 64

# Fraction digits kept below 2**24 f; p < 2**31 needs about 26 of them.
_FRACTION_DIGITS = 40
# Extra digits: rounding in the recurrence f_i = f_(i-1) * b**(-2/depth)
# loses at most log10(32768) < 5 of them.
_GUARD_DIGITS = 10
# Bits below the point of the fixed-point frequencies that `_split` works
# on (2**-192 turns, far below the 40 digits above).
_FRACTION_BITS = 192
PI = decimal.Decimal(
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
    """Decimal precision that keeps `_FRACTION_DIGITS` below ``2**24 * max_turns``.

    `max_turns` is a float or a `decimal.Decimal` of any size (no float
    overflow: a subnormal `max_wavelength` gives frequencies near 1e323).
    """
    scaled = max(decimal.Decimal(max_turns), decimal.Decimal(1)) * 2**24
    return _FRACTION_DIGITS + scaled.adjusted() + 1 + _GUARD_DIGITS


def sinusoidal_turns(depth, max_wavelength, scale=1, in_turns=False):
    """Turns per position ``scale * b**(-2i/depth) / (2 pi)`` of each sine channel.

    The ratio ``b**(-2/depth)`` is computed once and the frequencies by
    repeated multiplication, all with enough digits that every
    ``frac(2**24 f)`` keeps `_FRACTION_DIGITS` correct digits.

    Args:
        depth: int. Width of the encoding.
        max_wavelength: float. The base ``b``.
        scale: int or `fractions.Fraction` > 0, exact: every frequency
            times `scale` (a grid's positions ``i * scale``, folded in).
        in_turns: bool. ``scale * b**(-2i/depth)`` are turns per position
            already, without the ``1 / (2 pi)`` (DINOv3's angles ``2 pi x /
            period``, periods ``b**(2i/depth)``).

    Returns:
        A tuple of ``(depth + 1) // 2`` `decimal.Decimal` values.
    """
    base = decimal.Decimal(max_wavelength)
    numerator, denominator = scale.numerator, scale.denominator
    with decimal.localcontext() as ctx:
        ctx.prec = 28
        # The largest frequency: f_0 = scale / (2 pi) when b >= 1, below
        # scale / (2 pi b) otherwise (no 2 pi in turns).
        factor = decimal.Decimal(numerator) / denominator
        low = min(base, decimal.Decimal(1))
        largest = factor / low if in_turns else factor / (2 * low * PI)
        ctx.prec = _digits_for(largest)
        ratio = (-2 * base.ln() / depth).exp()
        first = decimal.Decimal(numerator) / denominator
        turns = [first if in_turns else first / (2 * +PI)]
        for _ in range((depth + 1) // 2 - 1):
            turns.append(turns[-1] * ratio)
        return tuple(turns)


def geometric_largest_log10(count, base, denominator, scale=1.0):
    """``log10`` of the largest of `geometric_turns`, in float (no `decimal`).

    Its precision grows with that size: a base below 1 and a small
    denominator make ``base**(-(count - 1) / denominator)`` millions of
    digits long, so callers bound this first. `base`, `denominator` and
    `scale` are floats > 0; the result may be ``inf``, never raises.
    """
    if count == 0:
        return -math.inf
    growth = max(-(count - 1) * math.log10(base) / denominator, 0.0)
    return math.log10(scale) + growth - math.log10(2 * math.pi)


def geometric_turns(count, base, denominator, scale=1.0):
    """Turns per unit ``scale * base**(-i / denominator) / (2 pi)``, ``i < count``.

    The frequencies of diffusion timestep embeddings (`keras_posenc.timestep`):
    the ratio ``base**(-1 / denominator)`` is computed once and the rest by
    repeated multiplication, with enough digits that every ``frac(2**24 f)``
    keeps `_FRACTION_DIGITS` correct digits; `scale` (a float, taken as the
    exact binary number it is) multiplies each frequency exactly. The
    caller bounds `geometric_largest_log10` first.

    Returns:
        A tuple of `count` `decimal.Decimal` values.
    """
    if count == 0:
        return ()
    base, scale = decimal.Decimal(base), decimal.Decimal(scale)
    denominator = decimal.Decimal(denominator)
    with decimal.localcontext() as ctx:
        ctx.prec = 28
        ratio = (-base.ln() / denominator).exp()
        largest = abs(scale) * max(ratio ** max(count - 1, 0), 1) / (2 * PI)
        ctx.prec = _digits_for(largest) + len(str(count))
        ratio = (-base.ln() / denominator).exp()
        turns = [scale / (2 * +PI)]
        for _ in range(count - 1):
            turns.append(turns[-1] * ratio)
        return tuple(turns[:count])


def scaled_turns(angular_frequencies, scale):
    """`turns_of` the frequencies, each multiplied exactly by `scale`."""
    scale = decimal.Decimal(scale)
    turns = turns_of(angular_frequencies)
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(max((abs(t) for t in turns), default=0) * abs(scale))
        return tuple(t * scale for t in turns)


def radians_of(turns):
    """float64 angular frequencies ``2 pi f``, rounded once from the exact turns."""
    with decimal.localcontext() as ctx:
        ctx.prec = _digits_for(max((abs(t) for t in turns), default=0))
        return np.array([float(2 * PI * t) for t in turns], np.float64)


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
        two_pi = 2 * +PI
        return tuple(decimal.Decimal(w) / two_pi for w in values)


# Signs of the three chunks' rests in `PhaseConstants.chunk_rests`: the
# engine subtracts those of chunks 1 and 2 (see `_exact.engine`).
_REST_SIGNS = np.array([1.0, -1.0, -1.0], np.float32).reshape(3, 1, 1)


@dataclasses.dataclass(frozen=True)
class PhaseConstants:
    """What the engine needs for a set of output columns.

    The turn arrays hold one column per frequency ``w_k`` (the engine
    reduces each phase once, however many columns share it); the fine
    tables one per output column. Column ``c`` holds ``sin(p * w_k)`` or
    ``cos(p * w_k)`` as `columns` lays them out. The arrays share pages of
    their own (`_exact.pages`).
    """

    # int32 [3, 2, n]: per 12-bit chunk k, frac(2**(12k) f) in units of
    # 2**-12 (`turn_hi`) and the next bits in units of 2**-24, signed
    # (`turn_mid`), side by side for the engine's one product with a
    # position's three chunks.
    chunk_turns: np.ndarray
    # float32 [3, 1, n]: the rest in turns (`turn_lo`), negated (exactly)
    # for chunks 1 and 2.
    chunk_rests: np.ndarray
    fine_u: np.ndarray  # float32 [FINE_ROWS, C]: the column's value at l
    fine_v: np.ndarray  # float32 [FINE_ROWS, C]: its derivative in the angle
    layout: str  # "interleaved", "concatenated" or "cos_sin": see `columns`

    @property
    def width(self):
        return self.fine_u.shape[1]

    @property
    def turn_hi(self):
        """int32 ``[3, n]``: ``frac(2**(12k) f)`` in units of 2**-12."""
        return self.chunk_turns[:, 0]

    @property
    def turn_mid(self):
        """int32 ``[3, n]``: the next bits, in units of 2**-24, signed."""
        return self.chunk_turns[:, 1]

    @property
    def turn_lo(self):
        """float32 ``[3, n]``: the rest, in turns (``|lo| <= 2**-25``)."""
        return (self.chunk_rests * _REST_SIGNS)[:, 0]


def _split(turns):
    """hi, mid, lo of ``frac(2**(12k) f)`` for each frequency, and frac(f).

    Integer arithmetic on ``F = frac(f) * 2**_FRACTION_BITS``: shifts and
    masks give ``frac(2**(12k) f)`` exactly, however large ``f`` is, and
    ``int / int`` rounds the float rests correctly. Roundings are half-up:
    no frequency is a tie (``f`` is a non-zero number over ``pi``).
    """
    bits = _FRACTION_BITS
    mask = (1 << bits) - 1
    hi_shift, mid_shift = bits - 12, bits - 24
    hi_half, mid_half = 1 << (hi_shift - 1), 1 << (mid_shift - 1)
    fixed = []
    for f in turns:
        numerator, denominator = f.as_integer_ratio()
        fixed.append((((numerator << bits) + denominator // 2) // denominator) & mask)
    his, mids, los = [], [], []
    for value in fixed:
        for k in range(3):
            t = (value << (12 * k)) & mask
            h = (t + hi_half) >> hi_shift
            rest = t - (h << hi_shift)  # in [-2**-13, 2**-13] turns
            m = (rest + mid_half) >> mid_shift
            his.append(h % 4096)
            mids.append(m)
            los.append((rest - (m << mid_shift)) / (1 << bits))
    hi = np.array(his, np.int32).reshape(-1, 3).T
    mid = np.array(mids, np.int32).reshape(-1, 3).T
    # float64 first, rounded correctly from the exact rest, then float32.
    lo = np.array(los, np.float64).reshape(-1, 3).T.astype(np.float32)
    frac = np.array([v / (1 << bits) for v in fixed], np.float64)
    return hi, mid, lo, frac


def columns(width, layout):
    """Frequency index and sine role of each of `width` columns.

    `"interleaved"`: sin and cos of frequency ``c // 2`` alternate (the
    paper's layout). `"concatenated"`: the ``ceil(width / 2)`` sines, then
    the cosines (``[sin | cos]``, also the layout of RoPE rows).
    `"cos_sin"`: the same frequencies with the roles swapped (``[cos |
    sin]``, MusicGen's), so the engine lays out its coarse rows as for
    `"concatenated"`.
    """
    if layout == "interleaved":
        index = np.arange(width)
        return index // 2, index % 2 == 0
    n_first, n_second = (width + 1) // 2, width // 2
    frequency = np.concatenate([np.arange(n_first), np.arange(n_second)])
    first = np.arange(width) < n_first
    return frequency, first if layout == "concatenated" else ~first


def phase_constants(turns, width, layout, kept=True):
    """Builds the constants of `width` columns of `turns` laid out as `layout`.

    Args:
        turns: sequence of ``(width + 1) // 2`` `decimal.Decimal`, turns per
            position.
        width: int. Output columns.
        layout: `"interleaved"`, `"concatenated"` or `"cos_sin"` (see
            `columns`).
        kept: bool. Whether an engine keeps them (in pages of their own,
            `_exact.pages`); `False` for a build read once and dropped
            (on the heap: a mapping costs more to make).

    Returns:
        A `PhaseConstants`.
    """
    hi, mid, lo, frac = _split(turns)
    frequency, is_sin = columns(width, layout)
    # Row-major (torch keeps numpy strides, and column-major tables would make
    # the engine's reshape copy the whole [L, C] result on every call), in
    # pages of their own: the layers that hold them go at a late collection.
    n = len(frac)
    specs = (
        ((3, 2, n), np.int32),
        ((3, 1, n), np.float32),
        ((FINE_ROWS, width), np.float32),
        ((FINE_ROWS, width), np.float32),
    )
    if kept:
        chunk_turns, chunk_rests, fine_u, fine_v = empty_in_own_pages(*specs)
    else:
        chunk_turns, chunk_rests, fine_u, fine_v = (np.empty(*s) for s in specs)
    chunk_turns[:, 0], chunk_turns[:, 1] = hi, mid
    np.multiply(lo[:, None, :], _REST_SIGNS, out=chunk_rests)
    # frac(l * f) from frac(f) in float64 is exact to ~1e-15 turns for l < 64,
    # whatever the size of f: the fine table never sees a huge angle.
    # One sin and one cos per frequency (not per column: sine and cosine
    # columns share them), each rounded once to float32 in its columns: the
    # temporaries are [FINE_ROWS, n] (issue 47: a build's heap).
    angle = np.arange(FINE_ROWS, dtype=np.float64)[:, None] * frac[None, :]
    np.mod(angle, 1.0, out=angle)
    angle *= 2.0 * np.pi
    sin = np.sin(angle)
    cos = np.cos(angle, out=angle)
    is_cos = ~is_sin
    fine_u[:, is_sin] = sin[:, frequency[is_sin]]
    fine_u[:, is_cos] = cos[:, frequency[is_cos]]
    fine_v[:, is_sin] = cos[:, frequency[is_sin]]
    fine_v[:, is_cos] = sin[:, frequency[is_cos]]
    fine_v[:, is_cos] *= -1.0  # -sin: exact in float32 as in float64
    return PhaseConstants(chunk_turns, chunk_rests, fine_u, fine_v, layout)


def tensor2tensor_turns(depth, max_timescale):
    """Turns per position of tensor2tensor's rule, ``b**(-i / (depth // 2 - 1))``
    over ``2 pi``, for the ``(depth + 1) // 2`` sine channels of `depth`
    columns (`get_timing_signal_1d`, fairseq's and Whisper's `sinusoids`):
    a geometric sequence, exact as `geometric_turns` makes it.

    Args:
        depth: int, at least 4 (the rule divides by ``depth // 2 - 1``).
        max_timescale: float. The base ``b``.
    """
    return geometric_turns((depth + 1) // 2, max_timescale, depth // 2 - 1)


def sinusoidal_constants(depth, max_wavelength, layout, frequency_rule="paper"):
    """`PhaseConstants` of the sinusoidal table (kept with its encoder:
    `_exact.engine.sinusoidal_encoder`); `frequency_rule` is `"paper"` or
    `"tensor2tensor"` (`tensor2tensor_turns`)."""
    if frequency_rule == "tensor2tensor":
        turns = tensor2tensor_turns(depth, max_wavelength)
    else:
        turns = sinusoidal_turns(depth, max_wavelength)
    return phase_constants(turns, depth, layout)


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
