"""The exact sin/cos engine, written once against `keras.ops` (int32, float32).

Vaswani et al., "Attention Is All You Need" (2017), section 3.5, and every
rotary embedding, need ``sin(p * w)`` and ``cos(p * w)`` for integer
positions ``p``. The usual float32 code forms ``p * w`` in float32 and
loses about ``p * 2**-24`` radians (0.06 at position 2**20). Here no angle
is ever rounded:

1. A position ``q`` (int32, negative too) is split into 12-bit chunks;
   int32 products of the chunks with host-split constants give the phase
   ``q * f mod 1`` exactly, in units of 2**-24 turns (`_phase_constants`).
2. The phase is rounded to the nearest 1/256 turn ``j``; sin and cos of
   ``2 pi j / 256`` come from a hi+lo float32 table, and the small rest
   (below 0.013 rad) enters through short Taylor series: within 3.3e-8.
3. Every position ``p`` is ``q + l`` with ``q = 64 * floor(p / 64)`` and
   ``0 <= l < 64``; its value is ``u[l] * cos(q w) + v[l] * sin(q w)`` with a
   constant fine table ``u, v``. Contiguous rows compute ``q`` once per 64
   rows (three float32 operations per output value); explicit positions
   use the same coarse and fine rows, so a position's encoding is the same
   bits whichever way it is asked for (full call, decoding step, offsets,
   lookup table).

On TensorFlow the ops are TF ops (a SavedModel holds no Python, TFLite
converts with builtins only); on JAX they run under `jax.jit`; on torch,
eagerly. The graph has no float64 op.
"""

import dataclasses
import functools
from typing import Any

import numpy as np
from keras import ops

from keras_posenc import _backend, _platform
from keras_posenc._checks.arguments import POSITION_LIMIT
from keras_posenc._exact import kept
from keras_posenc._exact.phase_constants import (
    FINE_ROWS,
    TURN_TABLE,
    PhaseConstants,
    phase_constants,
    sinusoidal_constants,
    turns_of,
)

_TWO_PI = 2.0 * np.pi
# A position's 12-bit chunks: q = c0 + 4096 c1 + 2**24 c2, with c0 and c1 in
# [0, 4096) and c2 in [-128, 128) (signed), from ``q // _CHUNK_DIVISORS``
# (or ``q >> _CHUNK_SHIFTS``: the same, see `_phase`).
_CHUNK_DIVISORS = np.array([1, 4096, 4096**2], np.int32).reshape(3, 1, 1)
_CHUNK_SHIFTS = np.array([0, 12, 24], np.int32).reshape(3, 1, 1)
_CHUNK_WRAPS = np.array([True, True, False]).reshape(3, 1, 1)
# The phase ``(hi mod 4096) * 4096 + mid mod 2**24`` from ``[hi, mid]``.
_PART_MODULI = np.array([[4096], [2**24]], np.int32)
_PART_BITS = np.array([[12], [24]], np.int32)  # their logarithms
_PART_WEIGHTS = np.array([[4096], [1]], np.int32)


def _pair_turns():
    """float32 [514, 3]: one formula gives sin (rows j) and cos (rows 257 + j).

    Row j: sin hi, -sin lo, cos hi of ``2 pi j / 256``; row 257 + j: cos hi,
    -cos lo, -sin hi. With them ``a - (b - (c sin_t - a versine))`` is
    ``sin(x + t)`` or ``cos(x + t)``, each rounded as the usual sum (the
    negations are exact, and rounding is symmetric).
    """
    sin_hi, sin_lo, cos_hi, cos_lo = TURN_TABLE.T
    sines = np.stack([sin_hi, -sin_lo, cos_hi], axis=-1)
    cosines = np.stack([cos_hi, -cos_lo, -sin_hi], axis=-1)
    return np.concatenate([sines, cosines]).astype(np.float32)


_PAIR_TURNS = _pair_turns()
_PAIR_OFFSETS = np.array([[0], [len(TURN_TABLE)]], np.int32)  # sin, cos


@dataclasses.dataclass(frozen=True, eq=False)
class EngineConstants:
    """Everything the engine multiplies, adds or gathers, for one encoder.

    numpy arrays on TensorFlow and JAX (they become constants of the traced
    graph: a SavedModel or TFLite model holds `Const` ops); tensors made
    once on the device Keras uses on torch (a numpy array there is turned
    into a tensor at every call, and `torch.compile` traces numpy
    separately and breaks its graph on it).
    """

    layout: str
    width: int
    chunk_turns: Any  # int32 [3, 2, n]
    chunk_rests: Any  # float32 [3, 1, n]
    fine_u: Any  # float32 [FINE_ROWS, C]
    fine_v: Any  # float32 [FINE_ROWS, C]
    divisors: Any = dataclasses.field(default_factory=lambda: _CHUNK_DIVISORS)
    shifts: Any = dataclasses.field(default_factory=lambda: _CHUNK_SHIFTS)
    wraps: Any = dataclasses.field(default_factory=lambda: _CHUNK_WRAPS)
    moduli: Any = dataclasses.field(default_factory=lambda: _PART_MODULI)
    part_bits: Any = dataclasses.field(default_factory=lambda: _PART_BITS)
    weights: Any = dataclasses.field(default_factory=lambda: _PART_WEIGHTS)
    pair_turns: Any = dataclasses.field(default_factory=lambda: _PAIR_TURNS)
    pair_offsets: Any = dataclasses.field(default_factory=lambda: _PAIR_OFFSETS)

    @classmethod
    def of(cls, consts: PhaseConstants, cos_first=False):
        """The constants of `consts` (a `PhaseConstants`) for this backend;
        with `cos_first`, `sincos_of_phase` gives (cos, sin)."""
        made = cls(
            consts.layout,
            consts.width,
            consts.chunk_turns,
            consts.chunk_rests,
            consts.fine_u,
            consts.fine_v,
        )
        if _backend.NAME != "torch":
            if cos_first:
                made = dataclasses.replace(made, pair_offsets=_COS_FIRST_OFFSETS)
            return made
        own = {name: getattr(made, name) for name in _OWN_FIELDS}
        with _backend.eager_scope():
            # Each configuration's arrays, sharing the host's memory on a
            # CPU; the constants every encoder has, made once per device.
            tensors = {name: _backend.constant(a) for name, a in own.items()}
            shared = _shared_tensors(_backend.device_key(), cos_first)
        return dataclasses.replace(made, **tensors, **shared)


# The fields of `EngineConstants` that differ between configurations.
_OWN_FIELDS = ("chunk_turns", "chunk_rests", "fine_u", "fine_v")
_COS_FIRST_OFFSETS = np.ascontiguousarray(_PAIR_OFFSETS[::-1])
# (device, cos_first) -> the fields every encoder shares, as torch tensors.
_SHARED_TENSORS: dict = {}


def clear_shared():
    """Forgets the shared constants of `_shared_tensors` (about 6 KiB a
    device, too small for the budget to count; `clear_cache` frees them)."""
    _SHARED_TENSORS.clear()


def _shared_tensors(device, cos_first):
    """The fields of `EngineConstants` that every configuration shares, as
    tensors on `device` (torch; in `eager_scope`), made once per device:
    an encoder holds its own constants only."""
    shared = _SHARED_TENSORS.get((device, cos_first))
    if shared is None:
        arrays = {
            field.name: field.default_factory()  # type: ignore[operator]
            for field in dataclasses.fields(EngineConstants)
            if field.name not in ("layout", "width", *_OWN_FIELDS)
        }
        if cos_first:
            arrays["pair_offsets"] = _COS_FIRST_OFFSETS
        shared = {name: _backend.constant(a) for name, a in arrays.items()}
        _SHARED_TENSORS[device, cos_first] = shared
    return shared


# Most values an encoder keeps for one eager span at known positions (32 MiB;
# the cache's budget, shared by everything kept, may allow less).
KEPT_VALUES = 2**23
# Rows kept for decoding steps: one engine run serves 448 to 512 steps (a
# run costs about ten steps on eager torch, almost whatever its length).
STEP_ROWS = 8 * FINE_ROWS
# Rows of an owner's first decoding block on torch: a prompt of at most 64
# positions and 64 to 128 steps. A configuration used once, or a short
# session, read few of 512 rows, and their build's temporaries (over 64 KiB
# each) were heap the allocator kept (issue 47). Torch only: on TF and JAX
# another length is another compiled program per configuration.
FIRST_STEP_ROWS = 2 * FINE_ROWS


# Step-sized requests of an owner computed, not kept, before its first
# block, on torch: a configuration used once (a short prompt and a step)
# keeps no block. Its layer is cyclic garbage (Keras's layers are) that
# Python may collect only at a full collection, and the blocks it held
# until then were heap the allocator kept (issue 47: 67 KiB a layer). A
# block costs about one engine run, as each such request does.
COMPUTED_STEPS = 2


def computed_not_kept(owner):
    """Whether a step-sized request of `owner` (an `Encoder`, RoPE
    `StepTables`) that no kept block serves is computed now and not kept
    (its first `COMPUTED_STEPS` on torch); counts it in `owner.step_misses`."""
    owner.step_misses += 1
    return _backend.NAME == "torch" and owner.step_misses <= COMPUTED_STEPS


def first_block(owner):
    """Whether `owner`'s next kept decoding block is its first (`step_block`)."""
    return owner.step_misses <= 1 + COMPUTED_STEPS * (_backend.NAME == "torch")


# What an encoder holds, in copies of its host constants: they, the device
# tensors (torch) or the constants of its compiled programs (TF, JAX), and
# what compiling costs. Measured as process growth per kept encoder after
# a prompt and a decoding step at depth 4096 (2.15 MiB of host constants):
# torch 2.2 MiB (its tensors share the host arrays on a CPU, 0.5.0; 4.3
# before), JAX 12.6 (RoPE) to 17.3 (sinusoidal), TF 21.5. The budget
# counts it; tests/test_cache.py checks that clear_cache frees it.
HELD_COPIES = {"torch": 1, "jax": 8, "tensorflow": 10}.get(_backend.NAME, 8)


def held_bytes(*host):
    """What an engine built on `host` (`PhaseConstants`) holds, roughly: the
    host constants, times `HELD_COPIES` (device tensors, compiled programs;
    measured), and once more for torch tensors on an accelerator (a copy
    in its memory)."""
    arrays = []
    for h in host:
        arrays += [h.chunk_turns, h.chunk_rests, h.fine_u, h.fine_v]
    copies = HELD_COPIES
    if _backend.NAME == "torch" and not str(_backend.device_key()).startswith("cpu"):
        copies += 1
    return copies * sum(a.nbytes + _backend.ARRAY_OVERHEAD for a in arrays)


def _phase(q, consts):
    """``q``'s 12-bit chunks (int32 ``[N, 3, 1, 1]``) and ``q * f mod 1`` for
    every frequency, in units of 2**-24 turns (int32 ``[N, 1, n]``).

    Integers, exact: two ways to the same values. Eagerly, few broadcast ops
    (each costs about 10 us on TF and eager torch, and is a kernel launch
    on a GPU): divisions by the chunk sizes, the chunks' products in one.
    Under XLA, shifts, products and sums only, which XLA fuses with the
    rest of the engine into one loop: an integer division or remainder by
    an array, or a sum over an axis, would each be a loop of its own (a
    larger compiled program, kept per input shape).
    """
    chunks = chunks_of(q, consts)
    return chunks, turns_of_chunks(chunks, consts)


def chunks_of(q, consts):
    """int32 ``q`` ``[N]`` as its 12-bit chunks ``[N, 3, 1, 1]`` (see `_phase`):
    ``c0 + 4096 c1 + 2**24 c2``, ``c2`` signed."""
    q = _backend.reshape(q, (-1, 1, 1, 1))
    if not _backend.in_xla():
        shifted = ops.floor_divide(q, consts.divisors)
        return ops.where(consts.wraps, ops.mod(shifted, 4096), shifted)
    # Arithmetic shifts divide by powers of two rounding down, whatever the
    # sign; ``x - (x >> k) * 2**k`` is then ``x mod 2**k``, in [0, 2**k).
    shifted = ops.right_shift(q, consts.shifts)
    wrapped = shifted - ops.right_shift(shifted, 12) * 4096
    return ops.where(consts.wraps, wrapped, shifted)


def turns_of_chunks(chunks, consts):
    """``sum_k chunks_k * turns_k mod 1``: int32 ``[N, 1, n]``, units of 2**-24.

    Args:
        chunks: int32 ``[N, 3, 1, 1]`` (`chunks_of`).
        consts: the `EngineConstants` (chunk turns, moduli, weights).
    """
    # Every product is below 2**24 in magnitude, every sum below 2**27:
    # int32 is exact, in any order.
    # (`ops.multiply`, not `*`: a torch tensor times a numpy array goes
    # through numpy.)
    products = ops.multiply(chunks, consts.chunk_turns)
    if not _backend.in_xla():
        parts = ops.mod(ops.sum(products, axis=1), consts.moduli)
        phase = ops.sum(ops.multiply(parts, consts.weights), axis=1, keepdims=True)
        return ops.mod(phase, 2**24)
    p0, p1, p2 = ops.unstack(products, num=3, axis=1)
    parts = (p0 + p1) + p2  # [N, 2, n]: hi, mid
    above = ops.right_shift(parts, consts.part_bits)
    parts = parts - ops.multiply(above, consts.moduli)
    phase = parts[:, :1] * 4096 + parts[:, 1:]
    return phase - ops.right_shift(phase, 24) * 2**24


def phase_of(q, consts):
    """``q * f mod 1`` for every frequency, split for `sincos_of_phase`.

    Args:
        q: int32 ``[N]`` positions (negative too).
        consts: the `EngineConstants`.

    Returns:
        ``(phase, rest)``: int32 ``[N, 1, n]`` in units of 2**-24 turns, in
        ``[0, 2**24)``, and the float32 rest in turns (``|rest| < 2**-23``).
    """
    chunks, phase = _phase(q, consts)
    return phase, rest_of_chunks(chunks, consts)


def rest_of_chunks(chunks, consts):
    """The float32 rest (turns) of `chunks` (``[N, 3, 1, 1]``): ``[N, 1, n]``."""
    # Float sums never chain two additions (nor products two products):
    # TF's graph optimizer regroups such chains where shapes are known, so
    # their rounding would depend on the call path. ``x + y`` is written
    # ``x - (-y)`` with ``-y`` from a negated constant: the same bits.
    r0, minus_r1, minus_r2 = ops.unstack(
        ops.multiply(ops.cast(chunks, "float32"), consts.chunk_rests), num=3, axis=1
    )
    return (r0 - minus_r1) - minus_r2


def sincos_of_phase(phase, rest, consts):
    """sin and cos of ``2 pi (phase * 2**-24 + rest)``: ``[N, 2, n]`` (sin, cos;
    cos, sin with constants made `cos_first`).

    Within 3.3e-8 of the exact values while ``|rest| <= 2**-10`` turns.

    Args:
        phase: int32 ``[N, 1, n]`` in ``[0, 2**24)``, units of 2**-24 turns.
        rest: float32, broadcastable to `phase`, in turns.
        consts: the `EngineConstants` (its turn table).
    """
    # Nearest 1/256 turn (a shift: an integer division is slow on CPUs).
    step = ops.right_shift(phase + 2**15, 16)
    rest_int = phase - step * 2**16  # in [-2**15, 2**15)
    # Python floats: every backend keeps them float32 next to a float32 tensor.
    theta = (ops.cast(rest_int, "float32") * 2.0**-24 + rest) * _TWO_PI
    theta2 = theta * theta
    sin_t = theta * (1.0 - theta2 * (1.0 / 6.0))
    versine = theta2 * (0.5 - theta2 * (1.0 / 24.0))
    pair_rows = _backend.add(step, consts.pair_offsets)
    turns = _backend.take_rows(consts.pair_turns, pair_rows)  # [N, 2, n, 3]
    hi, minus_lo, other_hi = ops.unstack(turns, num=3, axis=-1)
    # hi + (lo + (other_hi sin_t - hi versine)), as above.
    return hi - (minus_lo - (other_hi * sin_t - hi * versine))


def _sincos(q, consts):
    """sin and cos of ``q * w_k`` for every frequency: ``[N, 2, n]`` (sin, cos).

    Args:
        q: int32 ``[N]``.
        consts: the `EngineConstants`.
    """
    phase, rest = phase_of(q, consts)
    return sincos_of_phase(phase, rest, consts)


def _columns(values, consts):
    """Per-frequency ``values`` (``[..., n]``) laid out as the ``C`` columns:
    each once for the sine columns and once for the cosine ones (a copy)."""
    if consts.layout == "interleaved":
        pairs = ops.stack([values, values], axis=-1)
        values = ops.reshape(pairs, (*ops.shape(values)[:-1], 2 * values.shape[-1]))
    else:
        values = ops.concatenate([values, values], axis=-1)
    return values if values.shape[-1] == consts.width else values[..., : consts.width]


def _coarse(q, consts):
    """sin and cos of ``q * w`` for every column: ``q.shape + [C]`` each.

    Each phase is reduced once per frequency, under XLA once per call
    (XLA would otherwise redo it for every fine row: `_platform`).
    """
    (pair,) = _platform.computed_once(lambda q: (_sincos(q, consts),), q)
    sin, cos = ops.unstack(pair, num=2, axis=1)
    return _columns(sin, consts), _columns(cos, consts)


def _combine(fine_u, fine_v, sin, cos):
    """Angle addition: value at ``q + l`` from the coarse row at ``q``."""
    # `+`, not `ops.add`: Keras's TF add turns [0, C] + [0, C] into a BiasAdd
    # that rejects empty inputs.
    return ops.multiply(fine_u, cos) + ops.multiply(fine_v, sin)


def range_rows(consts, start, length):
    """Rows for positions ``start + [0, length)``: float32 ``[length, C]``.

    Args:
        consts: the `EngineConstants`.
        start: int32 scalar tensor, or a Python int (eager torch).
        length: int or int32 scalar tensor, `>= 0`.
    """
    offset = start % FINE_ROWS if isinstance(start, int) else ops.mod(start, FINE_ROWS)
    if not _backend.is_tensor(length):
        # Static, or symbolic under jax2tf (JAX needs it): enough coarse rows
        # for any offset.
        coarse_count = (length + 2 * FINE_ROWS - 2) // FINE_ROWS
    else:
        coarse_count = ops.floor_divide(offset + length + FINE_ROWS - 1, FINE_ROWS)
    coarse = (start - offset) + FINE_ROWS * ops.arange(coarse_count, dtype="int32")
    sin, cos = _coarse(coarse, consts)
    table = _combine(consts.fine_u, consts.fine_v, sin[:, None, :], cos[:, None, :])
    table = ops.reshape(table, (-1, consts.width))
    return _backend.slice_rows(table, offset, length)


def position_rows(consts, positions):
    """Rows for explicit int32 positions: float32 ``positions.shape + [C]``."""
    fine = ops.mod(positions, FINE_ROWS)
    sin, cos = _coarse(positions - fine, consts)
    fine_u = _backend.take_rows(consts.fine_u, fine)
    fine_v = _backend.take_rows(consts.fine_v, fine)
    return _combine(fine_u, fine_v, sin, cos)


def length_bucket(length):
    """`length` rounded up to a power of two (at least 64): eager JAX compiles
    once per bucket, not per length, so compilations (and memory) level off."""
    return max(FINE_ROWS, 1 << max(length - 1, 0).bit_length())


def _device_consts(on_device, host):
    """The `EngineConstants` of `host` on the device Keras uses now, made once
    per device into `on_device`."""
    device = _backend.device_key()
    consts = on_device.get(device)
    if consts is None:
        consts = on_device[device] = _backend.host_work(EngineConstants.of)(host)
    return consts


class Encoder:
    """The engine bound to one set of columns, compiled for eager callers.

    Eager callers run one compiled function (a `tf.function` or `jax.jit`)
    instead of some fifty eager ops; inside a trace the ops are inlined.

    Args:
        consts: a `PhaseConstants`.
    """

    def __init__(self, consts: PhaseConstants):
        self._host = consts
        # The blocks of rows `block` keeps: a prompt, decoding steps.
        self.slot = kept.Slot(self)
        self.step_misses = 0  # step-sized requests no kept block served
        if _backend.NAME == "torch":
            # Tensors live on one device: one set of constants per device.
            # Made now, on the host: a compiled call only reads them. (The
            # calls hold the constants, not `self`: no cycle, so an encoder
            # nothing holds goes at once, with its kept rows.)
            self._on_device = {_backend.device_key(): EngineConstants.of(consts)}
            on_device = functools.partial(_device_consts, self._on_device, consts)
            self._range = lambda start, length: range_rows(on_device(), start, length)
            self._positions = lambda positions: position_rows(on_device(), positions)
            return
        numpy_consts = EngineConstants.of(consts)
        self._on_device = {None: numpy_consts}
        self._range = _backend.compile_function(
            functools.partial(range_rows, numpy_consts), static_argnums=(1,)
        )
        self._positions = _backend.compile_function(
            functools.partial(position_rows, numpy_consts)
        )

    @property
    def consts(self):
        """The `EngineConstants` of the device Keras uses now."""
        return _device_consts(self._on_device, self._host)

    @property
    def nbytes(self):
        """What the encoder holds, roughly (`held_bytes`)."""
        return held_bytes(self._host)

    @property
    def width(self):
        return self._host.width

    @property
    def step_rows(self):
        """Rows of a decoding block: `STEP_ROWS`, fewer for very wide rows
        (at most `KEPT_VALUES` values), at least 128."""
        fitting = KEPT_VALUES // self.width // FINE_ROWS * FINE_ROWS
        return max(2 * FINE_ROWS, min(STEP_ROWS, fitting))

    def compiled_count(self):
        """How many shapes the eager entry points are compiled for (JAX)."""
        return sum(
            f._cache_size()
            for f in (self._range, self._positions)
            if hasattr(f, "_cache_size")
        )

    def rows(self, start, length):
        """float32 ``[length, C]`` for positions ``start + [0, length)``.

        Args:
            start: int32 scalar tensor (or Python int).
            length: int, or an int32 scalar tensor inside a TF graph.
        """
        if _backend.NAME != "torch" or not isinstance(start, int):
            # One compiled function serves every start (TF, JAX).
            start = ops.convert_to_tensor(start, "int32")
        if _backend.NAME == "jax" and isinstance(length, int):
            # jax.jit compiles once per length: round up to a power of two so
            # that a few compilations serve every length. Rows do not depend
            # on the length, so the bits are the same.
            return self._range(start, length_bucket(length))[:length]
        return self._range(start, length)

    def block(self, first, end, pinned=False, steps=True):
        """``(base, rows, steps)``: kept rows from `base`, covering ``[first, end)``.

        For eager calls at known positions (never inside a trace: the rows
        would become constants of the compiled program). Decoding asks for
        one position per layer and step: the `step_rows` rows from
        ``64 * floor(first / 64)`` (the first block of an encoder on torch:
        `FIRST_STEP_ROWS`, after its first `COMPUTED_STEPS` such requests,
        computed and not kept) are computed once and kept (`kept`), so
        the next steps (and every layer sharing this encoder) read them,
        with the bits of `rows`, without running the engine; `steps` holds
        them one by one (``[1, C]`` each, `_backend.SplitRows`: split once,
        when the block is made, or on torch when a step first reads the
        row), so a one-position step costs no op at all (a TF eager slice
        costs more than a plain Keras layer's whole call). Several sessions decoding
        at once each keep their block (one per base). A longer span (a
        prompt, which every layer of a model asks for in turn) is kept the
        same way, from ``64 * floor(first / 64)``, with `steps` empty; see
        `keeps`. `pinned` (function calls) keeps a new block when no layer
        uses this encoder. Callers hand the rows out through
        `_backend.owned`. Without `steps` (a grid axis: the same span at
        every call, however short) a span is kept as a span.
        """

        def serves(block):
            return block[0] <= first < end <= block[0] + len(block[1])

        device = _backend.device_key()
        span_key = (device, "span", first - first % FINE_ROWS)
        keys = [span_key]
        steps = steps and end - first <= FINE_ROWS
        if steps:
            keys += [(device, "steps", base) for base in self.step_bases(first)]
        block = self.slot.find(keys, serves)
        if block is None:
            if steps and computed_not_kept(self):
                return first, self.rows(first, end - first), []
            block = self._keep(first, end, steps)
            key = (device, "steps", block[0]) if block[2] else span_key
            self.slot.put(key, block, self._kept_bytes(block), pinned)
        return block

    def step_bases(self, first):
        """The bases of the decoding blocks that could hold position `first`."""
        base = min(first - first % FINE_ROWS, POSITION_LIMIT - self.step_rows)
        return range(base, base - self.step_rows, -FINE_ROWS)

    def _kept_bytes(self, block):
        """What a kept block costs: its rows, and its steps (copies but on torch)."""
        base, rows, steps = block
        values = _backend.nbytes(rows)
        copies = values if steps and _backend.NAME != "torch" else 0
        return values + copies + _backend.ARRAY_OVERHEAD * (1 + len(steps))

    def _keep(self, first, end, steps):
        """``(base, rows, steps)`` of the block `block` keeps next: a
        decoding step block with `steps`, else a span."""
        if steps:
            base, rows = self.step_block(first, first_block(self))
            with _backend.eager_scope():
                return base, rows, _backend.SplitRows(rows)
        count = end - first + first % FINE_ROWS
        base = min(first - first % FINE_ROWS, POSITION_LIMIT - count)
        with _backend.eager_scope():
            # A copy on torch: a slice would keep the whole computed table.
            return base, _backend.owned(self.rows(base, count)), []

    def step_block(self, first, first_block=False):
        """``(base, rows)``: the `step_rows` rows of the decoding block that
        serves steps from `first` (from ``64 * floor(first / 64)``, or the
        last block below 2**31), computed now; `FIRST_STEP_ROWS` rows on
        torch for an owner's `first_block`."""
        count = self.step_rows
        if first_block and _backend.NAME == "torch":
            count = min(count, FIRST_STEP_ROWS)
        base = min(first - first % FINE_ROWS, POSITION_LIMIT - count)
        with _backend.eager_scope():
            return base, self.rows(base, count)

    def keeps(self, first, end, steps=True):
        """Whether `block` serves ``[first, end)``: a decoding step (with
        `steps`), or a span of at most `KEPT_VALUES` values, whose block fits
        the cache's budget."""
        if end - first <= 0:
            return False
        if steps and end - first <= FINE_ROWS:
            rows = 4 * self.step_rows * self.width
            copies = rows if _backend.NAME != "torch" else 0
            overhead = _backend.ARRAY_OVERHEAD * (1 + self.step_rows)
            return kept.fits(rows + copies + overhead)
        values = (end - first + FINE_ROWS) * self.width
        return values <= KEPT_VALUES and kept.fits(4 * values)

    def recent_rows(self, first, end, pinned=False, steps=True):
        """Rows for positions ``[first, end)`` (see `keeps`), read from `block`."""
        base, rows, step_rows = self.block(first, end, pinned, steps)
        if end - first == 1 and step_rows:
            return step_rows[first - base]
        return rows[first - base : end - base]

    def at(self, positions):
        """float32 ``positions.shape + [C]`` for int32 `positions`."""
        positions = ops.convert_to_tensor(positions, "int32")
        # Flat, so that one compiled function serves every rank and shape.
        flat = ops.reshape(positions, (-1,))
        count = flat.shape[0]
        if _backend.NAME == "jax" and not _backend.is_traced(flat):
            # Eager JAX compiles once per size: pad to a power of two so that
            # memory levels off (a few compilations serve every size).
            padded = ops.pad(flat, [(0, length_bucket(count) - count)])
            rows = self._positions(padded)[:count]
        else:
            rows = self._positions(flat)
        return ops.reshape(rows, (*ops.shape(positions), self.width))


def _encoder_bytes(encoder):
    return encoder.nbytes


@kept.memoized(_encoder_bytes, repeat_only=True)
def sinusoidal_encoder(depth, max_wavelength, layout, frequency_rule):
    """The `Encoder` of the sinusoidal table for one option set (kept from
    its second request: `kept.memoized`; layers hold theirs). Every
    argument is given, so that one option set is one key (a defaulted
    `frequency_rule` made two engines of one)."""
    return Encoder(sinusoidal_constants(depth, max_wavelength, layout, frequency_rule))


@kept.memoized(_encoder_bytes, repeat_only=True)
def rotary_encoder(inverse_frequencies):
    """The `Encoder` of RoPE rows ``[sin | cos]`` (``2 n`` columns), kept as
    `sinusoidal_encoder`.

    Args:
        inverse_frequencies: tuple of ``n`` floats, radians per position,
            each taken as the exact binary number it is.
    """
    turns = turns_of(np.array(inverse_frequencies, np.float64))
    return Encoder(phase_constants(turns, 2 * len(turns), "concatenated"))
