"""The exact engine at fractional positions: sin and cos of ``t * w`` for float32 ``t``.

Diffusion timesteps (Ho et al., 2020, https://arxiv.org/abs/2006.11239;
the sinusoid of Vaswani et al., 2017, section 3.5) and interpolated grid or
FLUX position ids are fractional. Their angle ``t * w`` formed in float32
loses ``|t w| * 2**-24`` radians, and 16-bit pipelines round ``t`` itself
(998.39 becomes 1000 in bfloat16). Here no angle and no position is ever
rounded: a float32 ``|t| < 2**31`` is split exactly as

    |t| = a + c * 2**-23 + r,   a, c integers, c < 2**23, 0 <= r < 2**-23

(``a = floor(|t|)``, then the fraction's first 23 bits; every step is exact
in float32). Exact integer arithmetic, as the integer engine's
(`_exact.engine.phase_of`), gives ``a * f + c * (f * 2**-23)``
modulo one turn in one reduction over five 12-bit chunks, and ``r * f``
is a rest below ``2**-11`` turns, formed in float32 (an error below
2**-34 turns). sin and cos of the sum come from `_exact.engine.sincos_of_phase`:
within 2e-7 of the exact values, the engine's promise, for every float32
``t`` with ``|t| < 2**31`` and frequencies up to `MAX_TURNS` turns per unit.
Integer positions (int32) go through the integer engine unchanged.
"""

import decimal
import functools

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._exact import engine as _engine
from keras_posenc._exact import kept
from keras_posenc._exact.phase_constants import phase_constants

# Largest frequency, in turns per unit of position, at which the float32 rest
# ``r * f`` (r < 2**-23) stays below 2**-11 turns (the engine's series is
# within its bound there).
MAX_TURNS = 2**12
_FRACTION_BITS = 23
# Positions at or past 2**31 in magnitude cannot be split into int32 parts.
_LIMIT = 2.0**31
# |t| times these, floored: a * 2**23 + c, then the same shifted right by
# 12, 12 (to a), 12, 12 bits, then 0; each but the last, minus the next
# times its multiple, is one chunk (c0, c1, a0, a1, a2; c1 has 11 bits).
_SPLIT_SCALES = np.array(
    [2.0**23, 2.0**11, 1.0, 2.0**-12, 2.0**-24, 0.0], np.float32
).reshape(6, 1, 1)
_SPLIT_MULTIPLES = np.array([4096, 2048, 4096, 4096, 4096], np.float32).reshape(5, 1, 1)


def _integer_pairs(consts, q):
    """int32 ``[N]`` -> float32 ``[N, 2, n]`` (sin, cos)."""
    whole = consts[0]
    phase, rest = _engine.phase_of(q, whole)
    return _engine.sincos_of_phase(phase, rest, whole)


def _fractional_pairs(consts, t):
    """float32 ``[N]`` -> float32 ``[N, 2, n]`` (sin, cos); NaN where ``t``
    is not finite or ``|t| >= 2**31``.

    One exact phase for ``a * f + c * (f * 2**-23)``: the 12-bit chunks of
    `a` (three) and of `c` (two: ``c < 2**23``) against one table of five
    rows of turns, reduced once (as the integer engine reduces three).
    `chunk_rests` are the five chunks' float rests (a's as the engine has them).

    Few ops, none an integer division (slow on CPUs) nor a sum over an
    axis: the chunks are split in float32 on ``[N, 5, 1, 1]`` (exact);
    their products with the turns are multiply-subtracts of ``[N, 2, n]``,
    of signed chunks (a negative position turns the other way: ``-phase``).

    TF's graph optimizer merges the float sums of the rest into one `AddN`
    whose order depends on the graph: on the names of its terms' ops and on
    whether their shapes are known to be equal. The terms here are formed
    by the ops that formed them before (one product and its rows, shapes
    from ``[N]`` by reshapes and broadcasting alone, then the negation), so
    that TF graphs keep their bits, shapes known or not (a test checks the
    two agree).
    """
    whole, splits, chunk_turns, chunk_rests, turns = consts
    scales, next_scales, multiples = splits
    size = ops.abs(t)
    valid = size < _LIMIT  # False for NaN and infinities too
    t = ops.where(valid, t, 0.0)
    sign, size = ops.sign(t), ops.abs(t)
    # floor(|t| * [2**23, 2**11, 1, 2**-12, 2**-24]): a * 2**23 + c,
    # a * 2**11 + c // 2**12, a, a // 2**12, a // 2**24 (exact: scaling by
    # powers of two, floors); each minus the next (0 after the last) times
    # 4096 (2048 for c's top chunk) is a chunk, exactly: c0, c1, a0, a1, a2.
    # (Operators, not `ops`: both sides are tensors, or numpy constants
    # on the right outside torch; Keras's checks cost on eager torch.)
    size4 = _backend.reshape(size, (-1, 1, 1, 1))
    chunks = ops.floor(size4 * scales) - ops.floor(size4 * next_scales) * multiples
    # exact: below 2**-23.
    r = size - ops.floor(size * 2.0**_FRACTION_BITS) * 2.0**-_FRACTION_BITS
    signed = ops.cast(chunks * _backend.reshape(sign, (-1, 1, 1, 1)), "int32")
    phase = _phase_of_chunks(signed, chunk_turns)
    # a's rest as the integer engine forms it (`_exact.engine.rest_of_chunks`,
    # its rows 1 and 2 negated: an integer-valued position gives the integer
    # engine's bits, c and r being 0), then c's and r's.
    c0, c1, r0, minus_r1, minus_r2 = ops.unstack(chunks * chunk_rests, num=5, axis=1)
    rest = ((r0 - minus_r1) - minus_r2) + (c0 + c1)
    rest = rest + _backend.reshape(r, (-1, 1, 1)) * turns
    # -rest for a negative position (after the sums: see above).
    rest = ops.where(_backend.reshape(t < 0, (-1, 1, 1)), -rest, rest)
    pair = _engine.sincos_of_phase(phase, rest, whole)
    return ops.where(_backend.reshape(valid, (-1, 1, 1)), pair, float("nan"))


def _phase_of_chunks(chunks, chunk_turns):
    """``sum_k chunks_k * turns_k mod 1``: int32 ``[N, 1, n]``, units of 2**-24.

    Args:
        chunks: int32 ``[N, K, 1, 1]``, each in ``(-2**12, 2**12)``.
        chunk_turns: `K` int32 ``[2, n]``: each chunk's turns, hi (taken
            modulo 4096, in units of 2**-12 turns) and mid; negated but the
            first (subtractions: TF merges a chain of additions into one
            `AddN`, slower).
    """
    # Every product is below 2**24 in magnitude, every sum below 2**27:
    # int32 is exact, in any order. Arithmetic shifts divide by powers of
    # two rounding down, whatever the sign: ``x - (x >> k) * 2**k`` is
    # ``x mod 2**k``.
    first, *others = ops.unstack(chunks, num=len(chunk_turns), axis=1)
    parts = first * chunk_turns[0]
    for column, minus_turns in zip(others, chunk_turns[1:], strict=True):
        parts = parts - column * minus_turns
    hi, mid = parts[:, :1], parts[:, 1:]
    phase = (hi - ops.right_shift(hi, 12) * 4096) * 4096 + mid
    return phase - ops.right_shift(phase, 24) * 2**24


def _device_consts(host, cos_first):
    """The engine constants of `host` for the backend (tensors on torch)."""
    whole, *arrays = host
    made = _engine.EngineConstants.of(whole, cos_first)
    if _backend.NAME != "torch":
        return (made, *arrays)
    with _backend.eager_scope():
        return (made, *_tensors(arrays))


def _tensors(arrays):
    """numpy arrays, as nested, as tensors."""
    if isinstance(arrays, (tuple, list)):
        return tuple(_tensors(a) for a in arrays)
    return _backend.constant(arrays)


class FractionalEncoder:
    """sin and cos of ``t * w_k`` for float32 or int32 positions ``t``.

    Nothing it holds refers back to it, so it goes (with what it holds) as
    soon as nothing holds it.

    Args:
        turns: sequence of `decimal.Decimal`: turns per unit of position
            ``w_k / (2 pi)``, each at most `MAX_TURNS` in magnitude.
    """

    def __init__(self, turns):
        turns = tuple(turns)
        count = len(turns)
        with decimal.localcontext() as ctx:
            ctx.prec = 80
            below = tuple(t / 2**_FRACTION_BITS for t in turns)
        whole = phase_constants(turns, 2 * count, "concatenated")
        below = phase_constants(below, 2 * count, "concatenated", kept=False)
        # The five chunks' turns and float rests, in the order `_fractional_pairs`
        # splits them: c's two, then a's three.
        chunk_turns = np.concatenate([below.chunk_turns[:2], whole.chunk_turns])
        chunk_rests = np.concatenate([below.turn_lo[:2, None], whole.chunk_rests])
        host = (
            whole,
            (_SPLIT_SCALES[:5], _SPLIT_SCALES[1:], _SPLIT_MULTIPLES),
            # Negated but the first (`_phase_of_chunks` subtracts them).
            (chunk_turns[0], *(-chunk_turns[1:])),
            np.ascontiguousarray(chunk_rests),
            np.array([float(t) for t in turns], np.float32),
        )
        self.count = count
        self.nbytes = _engine.held_bytes(whole) + sum(
            a.nbytes for a in (chunk_turns, chunk_rests, host[-1])
        )
        self._host = host
        self._on_device = {}
        # (integer, fractional) functions per order: compiled (TF, JAX) or,
        # on torch, eager with constants per device and order.
        self._compiled = {}

    def _functions(self, cos_first):
        if _backend.NAME == "torch":
            key = (_backend.device_key(), cos_first)
            consts = self._on_device.get(key)
            if consts is None:
                consts = _backend.host_work(_device_consts)(self._host, cos_first)
                self._on_device[key] = consts
            return (
                functools.partial(_integer_pairs, consts),
                functools.partial(_fractional_pairs, consts),
            )
        functions = self._compiled.get(cos_first)
        if functions is None:
            consts = _device_consts(self._host, cos_first)
            functions = self._compiled[cos_first] = tuple(
                _backend.compile_function(functools.partial(fn, consts))
                for fn in (_integer_pairs, _fractional_pairs)
            )
        return functions

    def pairs(self, positions, cos_first=False):
        """sin and cos at `positions`: float32 ``positions.shape + [2, n]``.

        Args:
            positions: a float32 or int32 tensor of any shape (checked by
                the caller); float ones that are not finite or not below
                2**31 in magnitude give NaN.
            cos_first: bool. cos before sin on the pair axis (no copy).
        """
        shape = ops.shape(positions)
        flat = ops.reshape(positions, (-1,))
        count = flat.shape[0]
        bucket = _backend.NAME == "jax" and not _backend.is_traced(flat)
        if bucket:
            # Eager JAX compiles once per size: pad to a power of two, so that
            # a few compilations serve every size (values are per element).
            flat = ops.pad(flat, [(0, _engine.length_bucket(count) - count)])
        integer, fractional = self._functions(cos_first)
        if "int" in _backend.dtype_name(flat):
            pair = integer(ops.cast(flat, "int32"))
        else:
            pair = fractional(ops.cast(flat, "float32"))
        if bucket:
            pair = pair[:count]
        return ops.reshape(pair, (*shape, 2, self.count))

    def sincos(self, positions):
        """`pairs` as two tensors ``positions.shape + [n]``: sin, cos."""
        sin, cos = ops.unstack(self.pairs(positions), num=2, axis=-2)
        return sin, cos


@kept.memoized(lambda encoder: encoder.nbytes)
def fractional_encoder(turns):
    """The `FractionalEncoder` of a tuple of `decimal.Decimal` turns (kept in
    the one budget: `_exact.kept.memoized`)."""
    return FractionalEncoder(turns)
