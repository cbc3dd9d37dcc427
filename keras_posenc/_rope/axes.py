"""N-axis RoPE: each axis of a position id rotates its own features (FLUX).

FLUX (Black Forest Labs, 2024, https://github.com/black-forest-labs/flux)
gives every token a position id of several axes (`EmbedND`: index, row,
column) and rotates ``axes_dim[i]`` features by axis ``i`` with its own
frequencies ``theta ** (-arange(0, d_i, 2) / d_i)`` (its ``rope(pos, dim,
theta)``), the axes' features concatenated in order; 2-D axial RoPE for
ViT patch grids (Heo et al., 2024, https://arxiv.org/abs/2403.13298) is
the same with two axes. Ids may be fractional (interpolated grids): the
values come from the exact engine at fractional positions
(`_exact.fractional`), within 2e-7 of the exact sin and cos at every
float32 id below 2**31 in magnitude (int32 ids through its integer path).
The rows are the engine's ``[sin | cos]`` of all the axes' frequencies, so
`_rope.rotation` lays them out and rotates as for one axis.

How the axes share frequencies is `AXES_FREQUENCIES`: `"per_axis"` (FLUX,
Qwen2-VL's vision tower) gives axis ``i`` its own ladder over
``axes_dim[i]``; `"strided"` (Pixtral's vision tower) makes one ladder
``theta ** (-2k / sum(axes_dim))`` and deals its rungs to the axes in turn
(the row the even ones, the column the odd ones), equal axes only.

What a frequency counts is `FREQUENCY_UNITS`: radians per unit of position
(`"radians"`, RoFormer's ``p * w``) or turns (`"turns"`: DINOv3, whose
angles are ``2 pi x / period`` at coordinates ``x`` in [-1, 1], periods
``theta ** (2k / d_i)``): the engine takes turns exactly, so no rounded
``2 pi`` enters the angle.
"""

import numpy as np
from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._checks.echo import shortened
from keras_posenc._exact import kept
from keras_posenc._exact.engine import length_bucket
from keras_posenc._exact.fractional import MAX_TURNS, fractional_encoder
from keras_posenc._exact.phase_constants import sinusoidal_turns
from keras_posenc._rope import rotation as _rotation
from keras_posenc._rope.config import LAYOUTS, MAX_ROTARY_DIM


def check_axes_dim(value):
    """`axes_dim` as a tuple of positive even ints summing to at most 65536."""
    expected = (
        f"a non-empty list of positive even integers summing to at most "
        f"{MAX_ROTARY_DIM} (the features each axis rotates)"
    )
    listed = isinstance(value, (list, tuple)) and 0 < len(value) <= MAX_ROTARY_DIM
    if not listed or not all(
        _arguments.is_int(d) and d > 0 and d % 2 == 0 for d in value
    ):
        raise _arguments.invalid("axes_dim", expected, shortened(value))
    if sum(value) > MAX_ROTARY_DIM:
        raise _arguments.invalid("axes_dim", expected, shortened(value))
    return tuple(int(d) for d in value)


# How the axes share frequencies (see the module docstring).
AXES_FREQUENCIES = ("per_axis", "strided")


def check_frequencies(value, axes_dim):
    """`axes_frequencies` as one of `AXES_FREQUENCIES`: the default without
    `axes_dim` (None); `"strided"` needs `axes_dim` of equal axes."""
    value = _arguments.check_choice("axes_frequencies", value, AXES_FREQUENCIES)
    if axes_dim is None and value != "per_axis":
        expected = "'per_axis' without `axes_dim` (how N-axis RoPE's axes share)"
        raise _arguments.invalid("axes_frequencies", expected, value)
    if value == "strided" and axes_dim is not None and len(set(axes_dim)) > 1:
        expected = "equal axes with axes_frequencies='strided' (one rung each in turn)"
        raise _arguments.invalid("axes_dim", expected, list(axes_dim))
    return value


# What a frequency counts per unit of position (see the module docstring).
FREQUENCY_UNITS = ("radians", "turns")


def check_unit(value, axes_dim):
    """`frequency_unit` as one of `FREQUENCY_UNITS`; `"turns"` needs `axes_dim`."""
    value = _arguments.check_choice("frequency_unit", value, FREQUENCY_UNITS)
    if axes_dim is None and value != "radians":
        expected = "'radians' without `axes_dim` (turns are N-axis RoPE's option)"
        raise _arguments.invalid("frequency_unit", expected, value)
    return value


def axis_turns(axes_dim, max_wavelength, frequencies="per_axis", unit="radians"):
    """Per axis, the turns per unit of position of its frequencies."""
    in_turns = unit == "turns"
    if frequencies == "per_axis":
        return [sinusoidal_turns(d, max_wavelength, 1, in_turns) for d in axes_dim]
    ladder = sinusoidal_turns(sum(axes_dim), max_wavelength, 1, in_turns)
    return [ladder[axis :: len(axes_dim)] for axis in range(len(axes_dim))]


def check_layout(value, axes_dim):
    """``(layout, blocks)``: `layout` one of `LAYOUTS`, and the equal axes a
    `"half_per_axis"` rotation splits the head into (1 for the others)."""
    value = _arguments.check_choice("layout", value, LAYOUTS)
    if value != "half_per_axis":
        return value, 1
    if axes_dim is None:
        expected = "'half' or 'interleaved' without `axes_dim` (one axis)"
        raise _arguments.invalid("layout", expected, value)
    if len(set(axes_dim)) > 1:
        expected = "equal axes with layout='half_per_axis' (one block each)"
        raise _arguments.invalid("axes_dim", expected, list(axes_dim))
    return value, len(axes_dim)


def check_options(axes_dim, *, rope_scaling=None, inverse_frequencies=None, **others):
    """Refuses, by name, the options N-axis RoPE does not apply.

    `others` hold options whose only allowed value is given as
    ``(value, allowed)``: `rotary_dim` (None) and `mode` ("compute").
    """
    given = {"rope_scaling": rope_scaling, "inverse_frequencies": inverse_frequencies}
    for name, value in given.items():
        if value is not None:
            expected = "None with `axes_dim` (N-axis RoPE takes `max_wavelength` only)"
            raise _arguments.invalid(name, expected, shortened(value))
    for name, (value, allowed) in others.items():
        if value != allowed:
            expected = f"{allowed!r} with `axes_dim`"
            raise _arguments.invalid(name, expected, value)


def check_head_dim(dim, axes_dim):
    """The features to rotate (the head dim) must be `sum(axes_dim)`."""
    if dim != sum(axes_dim):
        expected = (
            f"dimensions summing to the head dim, {dim} (they sum to {sum(axes_dim)})"
        )
        raise _arguments.invalid("axes_dim", expected, list(axes_dim))


class AxesRows:
    """The engine's rows ``[sin | cos]`` of position ids ``[..., n_axes]``.

    Args:
        axes_dim: tuple of even ints: the features of each axis.
        max_wavelength: float. The base `theta` of every axis.
        frequencies: one of `AXES_FREQUENCIES`.
        unit: one of `FREQUENCY_UNITS`.
    """

    def __init__(
        self, axes_dim, max_wavelength, frequencies="per_axis", unit="radians"
    ):
        turns = axis_turns(axes_dim, max_wavelength, frequencies, unit)
        if max(max(t) for t in turns) > MAX_TURNS:
            expected = (
                f"a base whose frequencies are at most {MAX_TURNS} turns per "
                "unit of position with `axes_dim` (the engine's bound for "
                "fractional ids)"
            )
            raise _arguments.invalid("max_wavelength", expected, max_wavelength)
        self.axes_dim = axes_dim
        self._encoders = tuple(fractional_encoder(t) for t in turns)
        self.nbytes = sum(encoder.nbytes for encoder in self._encoders)
        # One compiled call for every axis (eager JAX: per length bucket).
        self._rows = _backend.compile_function(self._rows_of)
        # Eager TensorFlow and torch: each axis's distinct ids only.
        self._distinct_rows = _backend.compile_function(self._rows_of_distinct)

    def _rows_of(self, ids):
        """int32 or float32 ``[N, n_axes]`` -> float32 ``[N, dim]``."""
        return self._laid_out(
            [
                encoder.sincos(ids[:, axis])
                for axis, encoder in enumerate(self._encoders)
            ]
        )

    def _rows_of_distinct(self, ids):
        """`_rows_of`, the engine run on each axis's distinct ids and its
        rows gathered: the same bits (the engine is elementwise) for a
        fraction of the work where ids repeat along an axis (FLUX's 1152 ids
        of a 32 x 32 grid hold 33 distinct values an axis). Eager and plain
        graphs only: the distinct count is dynamic (no XLA)."""
        pairs = []
        for axis, encoder in enumerate(self._encoders):
            values, index = _backend.distinct(ids[:, axis])
            sin, cos = encoder.sincos(values)
            pairs.append(
                (_backend.take_rows(sin, index), _backend.take_rows(cos, index))
            )
        return self._laid_out(pairs)

    @staticmethod
    def _laid_out(pairs):
        """``[sin of every axis | cos of every axis]`` of ``(sin, cos)`` pairs."""
        return ops.concatenate([p[0] for p in pairs] + [p[1] for p in pairs], axis=-1)

    def __call__(self, ids):
        """float32 ``ids.shape[:-1] + [sum(axes_dim)]`` from checked int32 or
        float32 ids (NaN rows for float ids that cannot be encoded)."""
        shape = ops.shape(ids)[:-1]
        flat = ops.reshape(ids, (-1, len(self.axes_dim)))
        count = flat.shape[0]
        if _backend.NAME == "jax" and not _backend.is_traced(flat):
            # Eager JAX compiles per size: pad to a power of two (zeros are
            # valid ids), so that a few compilations serve every size.
            padded = ops.pad(flat, [(0, length_bucket(count) - count), (0, 0)])
            rows = self._rows(padded)[:count]
        elif _backend.has_distinct(flat):
            rows = self._distinct_rows(flat)
        else:
            rows = self._rows(flat)
        return ops.reshape(rows, (*shape, sum(self.axes_dim)))

    def parse(self, name, ids, ranks):
        """``(values, checks)`` of position ids ``[..., n_axes]`` of one of
        `ranks`; the checks on ``ids.shape[:-1]`` (an id holds every axis)."""
        values, checks = _positions.reals(name, ids)
        n_axes = len(self.axes_dim)
        shape = tuple(values.shape)
        if len(shape) not in ranks or shape[-1] != n_axes:
            expected = (
                f"position ids of rank {' or '.join(map(str, ranks))} whose last "
                f"axis holds the {n_axes} axes of `axes_dim`"
            )
            raise _arguments.invalid(name, expected, f"<shape={shape}>")
        return values, checks

    def layer_rows(self, inputs, seq, positions):
        """Rows for a layer call on `inputs` (sequence on `seq`): ``[length,
        dim]`` or ``[batch, length, dim]``, under the failure policy."""
        if positions is None:
            n_axes = len(self.axes_dim)
            expected = (
                f"position ids [batch, length, {n_axes}] or [length, {n_axes}] "
                "(required with `axes_dim`)"
            )
            raise _arguments.invalid("positions", expected, None)
        values, checks = self.parse("positions", positions, (2, 3))
        steps = "one id per step of the sequence axis of `inputs`"
        checks += _positions.fits(values, -2, inputs, seq, "positions", steps)
        if len(values.shape) == 3:
            examples = "one row of ids per example of `inputs`"
            checks += _positions.fits(values, 0, inputs, 0, "positions", examples)
        return _guarded(self(values), checks)

    def function_rows(self, positions, name="positions"):
        """Rows for `rotary_cos_sin`: ``positions.shape[:-1] + [dim]``."""
        values, checks = self.parse(name, positions, (1, 2, 3, 4))
        return _guarded(self(values), checks)


def _guarded(rows, checks):
    """`rows` under the failure policy of checks on every axis of the ids."""
    per_id = [_positions.Check(ops.all(ok, axis=-1), text) for ok, text in checks]
    return _backend.guard(rows, per_id)


@kept.memoized(lambda rows: rows.nbytes)
def axes_rows(axes_dim, max_wavelength, frequencies="per_axis", unit="radians"):
    """The `AxesRows` of one option set (kept in the one budget)."""
    return AxesRows(axes_dim, max_wavelength, frequencies, unit)


def cos_sin(
    positions,
    dim,
    axes_dim,
    max_wavelength,
    rope_scaling,
    layout,
    given,
    frequencies="per_axis",
    unit="radians",
):
    """`rotary_cos_sin` with `axes_dim` (`given`: `inverse_frequencies`)."""
    axes_dim = check_axes_dim(axes_dim)
    frequencies = check_frequencies(frequencies, axes_dim)
    unit = check_unit(unit, axes_dim)
    check_options(axes_dim, rope_scaling=rope_scaling, inverse_frequencies=given)
    check_head_dim(dim, axes_dim)
    layout, blocks = check_layout(layout, axes_dim)
    theta = _arguments.check_wavelength(max_wavelength)
    rows = axes_rows(axes_dim, theta, frequencies, unit)
    table = rows.function_rows(positions)
    return _rotation.cos_sin(table, dim, 1.0, layout, False, blocks)


def grid_ids(grid_shape, text_length, n_axes):
    """int32 ``[text_length + prod(grid_shape), n_axes]``: zeros for the text,
    then the grid's indices in row-major order on the last axes."""
    expected = "a non-empty list of positive integers"
    if not isinstance(grid_shape, (list, tuple)) or not grid_shape:
        raise _arguments.invalid("grid_shape", expected, shortened(grid_shape))
    if not all(_arguments.is_int(s) and s > 0 for s in grid_shape):
        raise _arguments.invalid("grid_shape", expected, shortened(grid_shape))
    grid_shape = tuple(int(s) for s in grid_shape)
    text_length = _arguments.check_non_negative_int("text_length", text_length)
    n_axes = len(grid_shape) if n_axes is None else n_axes
    if not _arguments.is_int(n_axes) or not len(grid_shape) <= n_axes <= 64:
        expected = f"an integer in [{len(grid_shape)}, 64] (len(grid_shape) or more)"
        raise _arguments.invalid("n_axes", expected, n_axes)
    count = text_length + int(np.prod(grid_shape, dtype=object))
    if count > _arguments.MAX_LENGTH or max(grid_shape) > _arguments.POSITION_LIMIT:
        expected = f"at most {_arguments.MAX_LENGTH} ids with the text"
        raise _arguments.invalid("grid_shape", expected, grid_shape)
    ids = np.zeros((count, n_axes), np.int32)
    grid = np.indices(grid_shape, dtype=np.int32).reshape(len(grid_shape), -1)
    ids[text_length:, n_axes - len(grid_shape) :] = grid.T
    return ids


# What a vision tower's patch ids hold: integer (row, column) indices
# (Qwen2-VL, Pixtral, ...), or the patch centres normalized to [-1, 1]
# (DINOv3's `get_patches_center_coordinates`).
COORDINATES = ("index", "normalized_centers")


def _centers(index, size):
    """float32 ``2 (i + 0.5) / size - 1``, as DINOv3 computes it in float32:
    ``i + 0.5`` exact, one rounded division, ``2 c`` exact, one rounded
    subtraction (numpy's float32 operations are IEEE's, as torch's)."""
    halves = index.astype(np.float32) + np.float32(0.5)
    return np.float32(2.0) * (halves / np.float32(size)) - np.float32(1.0)


def vision_ids(grid_thw, merge, include_temporal, coordinates="index"):
    """int32 ``[sum(t*h*w), 2 or 3]``: transformers' `get_vision_position_ids`
    (float32 ``[..., 2]`` patch centres with `"normalized_centers"`)."""
    expected = "a non-empty list of (t, h, w) lists of positive integers"
    listed = isinstance(grid_thw, (list, tuple)) and 0 < len(grid_thw) <= 2**16
    if not listed or not all(
        isinstance(g, (list, tuple))
        and len(g) == 3
        and all(_arguments.is_int(s) and s > 0 for s in g)
        for g in grid_thw
    ):
        raise _arguments.invalid("grid_thw", expected, shortened(grid_thw))
    merge = _arguments.check_positive_int("spatial_merge_size", merge, 2**16)
    if not isinstance(include_temporal, bool):
        raise _arguments.invalid("include_temporal", "a bool", include_temporal)
    coordinates = _arguments.check_choice("coordinates", coordinates, COORDINATES)
    centers = coordinates == "normalized_centers"
    if centers and include_temporal:
        expected = "False with coordinates='normalized_centers' (spatial only)"
        raise _arguments.invalid("include_temporal", expected, include_temporal)
    count = sum(int(t) * int(h) * int(w) for t, h, w in grid_thw)
    if count > _arguments.MAX_LENGTH:
        expected = f"at most {_arguments.MAX_LENGTH} patches in all"
        raise _arguments.invalid("grid_thw", expected, shortened(grid_thw))
    found = []
    for t, h, w in grid_thw:
        if h % merge or w % merge:
            expected = (
                f"heights and widths that are multiples of spatial_merge_size={merge}"
            )
            raise _arguments.invalid("grid_thw", expected, shortened(grid_thw))
        rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        shape = (h // merge, merge, w // merge, merge)
        rows = rows.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
        cols = cols.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
        if centers:
            rows, cols = _centers(rows, h), _centers(cols, w)
        spatial = np.stack([rows, cols], -1)
        ids = np.tile(spatial, (t, 1))
        if include_temporal:
            ids = np.concatenate([np.repeat(np.arange(t), h * w)[:, None], ids], -1)
        found.append(ids)
    return np.concatenate(found).astype(np.float32 if centers else np.int32)
