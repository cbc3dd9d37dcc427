"""ALiBi's bias in the graph: ``slope * distance`` within float32 rounding.

The distance `d` (int32, ``|d| < 2**31``) is split into ``a + b`` with
``b = d & 4095`` and `a` a multiple of 4096: both exact in float32 (`a`
has at most 19 significant bits). Each slope comes from the host as a
float32 pair ``high + low`` (`_alibi.slopes.split`), `high` with 5
significant bits, so ``high * a`` and ``high * b`` are exact products;
their sum is formed error-free (Fast2Sum: ``|high * a| >= |high * b|``
whenever `a` is not 0) and the small term ``low * d`` (2**-4 of the
value or less) is added to the rounding error before the one last
rounding. The result is within 0.6 float32 ulp of the exact product:
correctly rounded but at near-ties. No distance is ever rounded to the
compute dtype; the bias is cast once, to the dtype of the scores, and
saturates to float16's finite range (+-65504) rather than becoming inf.
"""

from keras import ops

from keras_posenc import _backend, _platform

_LOW_MASK = 4095
FLOAT16_MAX = 65504.0


def slope_constants(pair):
    """The float32 ``(high, low)`` slope pair as the call path takes it.

    On torch, tensors made once (on the host, outside `torch.compile`,
    which cannot trace numpy); elsewhere numpy, converted where used, so
    that no graph constant is kept from one TF graph for another.
    """
    if _backend.NAME == "torch":
        return tuple(ops.convert_to_tensor(p, "float32") for p in pair)
    return pair


def distances(query_positions, key_length, symmetric):
    """``key - query`` (int32) for keys ``0 .. key_length - 1``: `[q, k]`
    for `[q]` query positions, `[B, q, k]` for `[B, q]`; ``-|key - query|``
    when `symmetric`."""
    keys = ops.arange(key_length, dtype="int32")
    query_positions = ops.cast(query_positions, "int32")
    d = keys - ops.expand_dims(query_positions, -1)
    return -ops.abs(d) if symmetric else d


def _product(d, high, low):
    """``(high + low) * d`` as float32 `[lead, H, q, k]` (see module doc)."""
    d = ops.expand_dims(d, -3)  # [..., 1, q, k] against slopes [H, 1, 1]
    if len(d.shape) == 3:
        d = ops.expand_dims(d, 0)
    below = ops.bitwise_and(d, _LOW_MASK)
    above = ops.cast(d - below, "float32")
    below = ops.cast(below, "float32")
    high = ops.reshape(ops.convert_to_tensor(high, "float32"), (-1, 1, 1))
    low = ops.reshape(ops.convert_to_tensor(low, "float32"), (-1, 1, 1))
    big, small = high * above, high * below  # exact
    total = big + small
    error = small - (total - big)  # exact: Fast2Sum
    return total + (error + low * ops.cast(d, "float32"))


def saturating_cast(x, dtype):
    """`x` (float32) cast once to `dtype`; float16 saturates at +-65504."""
    if dtype == "float32":
        return x
    if dtype == "float16":
        x = ops.clip(x, -FLOAT16_MAX, FLOAT16_MAX)
    return ops.cast(x, dtype)


def bias(query_positions, key_length, high, low, *, symmetric, dtype, one_row=False):
    """The bias `[1 or B, H, q, k]` in `dtype` of the queries at
    `query_positions` (a span: `[q]` shared, or `[B, q]` per example);
    with `one_row`, the last query's row only, `[1 or B, H, 1, k]`.

    Under XLA it is computed element-wise inside the add's loop (redone
    for every batch row of the scores: on a CPU, writing it once first was
    2.2x the precomputed-bias add at `[8, 32, 2048, 2048]` under `jax.jit`,
    fused 1.07x). Elsewhere a shared span takes the
    biases of the distinct distances, cast once, and moves them into place
    (`_Windows`; one pass over `[H, q, k]` instead of a dozen ops): the same
    values, since the bias depends on the distance only.
    """

    def compute(positions):
        d = distances(positions, key_length, symmetric)
        return (saturating_cast(_product(d, high, low), dtype),)

    if one_row:  # `H * k` values (none when there is no query), written
        # once under XLA: fused into the add, they would be redone per row.
        return _platform.computed_once(compute, query_positions[..., -1:])[0]
    if not _moves_windows(query_positions):
        return compute(query_positions)[0]
    windows = _Windows(query_positions, key_length, high, low, symmetric, dtype)
    return ops.expand_dims(windows.heads(0, windows.table.shape[0]), 0)


def added(
    scores, query_positions, key_length, high, low, checks, *, symmetric, dtype, one_row
):
    """``scores + bias(query_positions, ...)`` for scores `[batch, H, q, k]`,
    under `checks` (`_backend.guard`'s: run-time conditions on traced
    positions; eager calls have none).

    On eager torch a shared full bias is made a few heads at a time, each
    added as soon as it is made (`_backend.add_in_slices`): writing it
    whole first cost 1.12x the precomputed-bias add at `[8, 32, 1024,
    1024]` on the CPU; made in slices of about `_SLICE_BYTES`, it costs
    what reading a precomputed one costs (benchmarks/README.md).
    """
    if checks or one_row or not _moves_windows(query_positions):
        forms = {"symmetric": symmetric, "dtype": dtype, "one_row": one_row}
        whole = bias(query_positions, key_length, high, low, **forms)
        return scores + _backend.guard(whole, checks)
    windows = _Windows(query_positions, key_length, high, low, symmetric, dtype)
    heads = scores.shape[1]
    return _backend.add_in_slices(scores, windows.heads, heads, _SLICE_BYTES)


def _moves_windows(query_positions):
    """Whether the bias of these queries is moved into place from one table
    (a shared span outside XLA), not computed element-wise."""
    shared = len(query_positions.shape) == 1
    return shared and not _backend.in_xla() and query_positions.shape[0] != 0


class _Windows:
    """The full bias of a shared span, from the biases of its distances.

    Args as `bias`'s; the span is not empty.
    """

    def __init__(self, query_positions, key_length, high, low, symmetric, dtype):
        q = query_positions.shape[0]
        if q is None:  # a TF graph's dynamic length
            q = ops.shape(query_positions)[0]
        last = query_positions[q - 1] if isinstance(q, int) else _last(query_positions)
        blocks = (key_length + _BLOCK - 1) // _BLOCK
        # Distances key - query from -last (key 0, last query) to k - 1 - first,
        # and up to _BLOCK - 1 more (the last block's unused end).
        span = ops.arange(q + _BLOCK * blocks - 1, dtype="int32") - last
        span = -ops.abs(span) if symmetric else span
        self.table = saturating_cast(_product(span[None, :], high, low), dtype)[0, :, 0]
        self.q, self.key_length, self.blocks = q, key_length, blocks

    def heads(self, start, stop):
        """The bias of heads ``start .. stop - 1``: `[stop - start, q, k]`."""
        whole = start == 0 and stop == self.table.shape[0]
        table = self.table if whole else self.table[start:stop]
        sizes = (self.q, self.key_length)
        if _backend.NAME == "torch" and all(type(n) is int and n for n in sizes):
            # Row `i` is the window at `q - 1 - i`: views of the table, then
            # one copy of whole rows (1.7x faster than `_windows`' gathers;
            # not while `torch.jit.trace` records sizes as tensors).
            windows = table.unfold(-1, self.key_length, 1)[:, : self.q]
            return windows.flip(1)
        return _windows(table, self.q, self.key_length, self.blocks)


# The bytes of bias made at a time on eager torch (`added`): a few MiB,
# which stay in a CPU's L2 or L3 cache and a GPU's L2 while the batch rows
# of the scores read them (on the 2-core CPU at `[8, 32, 1024, 1024]`:
# 1.00x the precomputed-bias add from 1 to 8 MiB, 1.02x at 16, 1.06x at 32).
_SLICE_BYTES = 2**22


# Values moved per gathered index: a gather of 16 contiguous values at a
# time fills `[H, q, k]` 3-6x faster than one value at a time (measured on
# TF and torch CPU at H, q, k = 32, 1024, 1024).
_BLOCK = 16


def _windows(table, q, key_length, blocks):
    """Row `i` of `[H, q, key_length]` is ``table[:, q - 1 - i :][:, :key_length]``.

    First every window ``table[:, s : s + _BLOCK]`` (`[H, starts, _BLOCK]`,
    about `_BLOCK` times the table: small), then for row `i` and block `b`
    the window at ``q - 1 - i + _BLOCK * b``.
    """
    block = ops.arange(_BLOCK, dtype="int32")
    starts = ops.arange(_nonnegative(q + _BLOCK * (blocks - 1)), dtype="int32")
    windows = ops.take(table, starts[:, None] + block[None, :], axis=1)
    rows = q - 1 - ops.arange(q, dtype="int32")
    at = rows[:, None] + _BLOCK * ops.arange(blocks, dtype="int32")[None, :]
    moved = ops.take(windows, at, axis=1)  # [H, q, blocks, _BLOCK]
    moved = ops.reshape(moved, (table.shape[0], q, _BLOCK * blocks))
    if isinstance(key_length, int) and key_length == _BLOCK * blocks:
        return moved
    return moved[:, :, :key_length]


def _nonnegative(n):
    """``max(n, 0)``, for an int or an int scalar tensor."""
    return max(n, 0) if isinstance(n, int) else ops.maximum(n, 0)


def _last(values):
    """The last entry of a `[q]` tensor of dynamic length, or 0 when empty."""
    return ops.sum(values[-1:])
