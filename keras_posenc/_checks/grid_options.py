"""The validated options of image and video grid encodings.

`grid_sincos_table` and `GridPositionEncoding` both build one
`GridOptions`; its constructor holds every rule about them, so each rule
is stated once. Rules that need the grid's rank (the width's multiple, one
interpolation scale per axis) are checked by `for_rank`.
"""

import dataclasses
import fractions
import math

from keras import ops

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.arguments import invalid
from keras_posenc._checks.positions import Check

POSITIONS = ("exact", "float32")
CROPS = ("center", "top_left")
MODES = ("compute", "lookup")
# The feature width must split into [sin | cos] halves for every axis: 1-D
# (D), 2-D (D/2 per axis, MAE), 3-D (D/4 temporal, 3D/8 per spatial axis,
# CogVideoX): D a multiple of 2, 4 or 16.
DIM_MULTIPLES = {1: 2, 2: 4, 3: 16}


def check_grid_shape(name, value, allow_none=False):
    """A tuple of 1 to 3 positive integers (a list is accepted: JSON configs)."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, (tuple, list)) and 1 <= len(value) <= 3
    if not ok or not all(
        _arguments.is_int(v) and 0 < v <= _arguments.MAX_LENGTH for v in value
    ):
        raise invalid(
            name, "a tuple of 1 to 3 positive integers (e.g. (16, 16))", value
        )
    return tuple(int(v) for v in value)


def call_grid(inputs, grid_shape, extra):
    """A layer call's grid: the sizes (ints, or int32 tensors in a TF graph)
    of `grid_shape` on `inputs` (`[batch, *grid, C]`, or `[batch, N, C]`
    tokens, `extra` of them before the grid), and the run-time checks that
    the tokens fit them; a `ValueError` naming `grid_shape` or `inputs` for
    what is known not to fit."""
    shape = tuple(inputs.shape)
    if len(shape) > 3:
        dims = ops.shape(inputs)[1:-1]
        known = shape[1:-1]
        if grid_shape is not None and tuple(grid_shape) != known:
            raise _arguments.invalid(
                "grid_shape", f"the grid of the inputs, {known}", grid_shape
            )
        pairs = zip(known, dims, strict=True)
        return [k if k is not None else d for k, d in pairs], ()
    tokens = shape[1]
    if grid_shape is None:
        if tokens is not None:
            if tokens <= extra:
                raise _arguments.invalid(
                    "inputs",
                    f"[batch, N, C] tokens with N > extra_tokens={extra}",
                    f"<shape={shape}>",
                )
            return [tokens - extra], ()
        tokens = ops.shape(inputs)[1]
        # At least one grid row, so that no op sees a negative size
        # (under XLA the check cannot stop them).
        check = Check(
            ops.greater(tokens, extra),
            "Received an invalid value for `inputs`: expected more than "
            f"extra_tokens={extra} tokens",
        )
        return [ops.maximum(tokens - extra, 1)], (check,)
    sizes = check_grid_shape("grid_shape", grid_shape)
    needed = extra + math.prod(sizes)
    if tokens is not None and tokens != needed:
        raise _arguments.invalid(
            "grid_shape",
            f"a grid of the inputs' {tokens} tokens after extra_tokens={extra}",
            grid_shape,
        )
    if tokens is not None:
        return list(sizes), ()
    check = Check(
        ops.equal(ops.shape(inputs)[1], needed),
        f"Received an invalid value for `grid_shape`: expected {needed} tokens "
        f"(extra_tokens={extra} and the grid {sizes}) in `inputs`",
    )
    return list(sizes), (check,)


def _check_scale(value):
    """One finite float > 0, or a tuple of them (one per grid axis)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    try:  # an int past float64 (10**400) is refused here, not an OverflowError
        if not 1 <= len(values) <= 3:
            raise ValueError(len(values))
        scales = tuple(_arguments.check_wavelength(v) for v in values)
    except ValueError:
        expected = "a finite number > 0, or a tuple of one per grid axis"
        raise invalid("interpolation_scale", expected, value) from None
    return scales if isinstance(value, (tuple, list)) else scales[0]


@dataclasses.dataclass(frozen=True)
class GridOptions:
    """The options of a grid encoding, checked when constructed.

    The fields are those of `GridPositionEncoding`; a bad value raises a
    `ValueError` naming the argument.

    Example:

    >>> from keras_posenc._checks.grid_options import GridOptions
    >>> GridOptions(interpolation_scale=(1.0, 1.875, 1.875)).for_rank(3).scales
    (1.0, 1.875, 1.875)
    """

    grid_shape: tuple | None = None
    extra_tokens: int = 0
    base_size: int | None = None
    interpolation_scale: float | tuple = 1.0
    positions: str = "exact"
    mode: str = "compute"
    max_grid_shape: tuple | None = None
    crop: str = "center"

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("grid_shape", check_grid_shape("grid_shape", self.grid_shape, True))
        put(
            "extra_tokens",
            _arguments.check_non_negative_int("extra_tokens", self.extra_tokens),
        )
        if self.base_size is not None:
            put(
                "base_size",
                _arguments.check_positive_int("base_size", self.base_size, 2**16),
            )
        put("interpolation_scale", _check_scale(self.interpolation_scale))
        _arguments.check_choice("positions", self.positions, POSITIONS)
        _arguments.check_choice("mode", self.mode, MODES)
        _arguments.check_choice("crop", self.crop, CROPS)
        maximum = check_grid_shape("max_grid_shape", self.max_grid_shape, True)
        if self.mode == "lookup" and maximum is None:
            raise invalid(
                "max_grid_shape",
                "a tuple of positive integers with mode='lookup'",
                None,
            )
        put("max_grid_shape", maximum)

    def for_rank(self, rank):
        """The `GridAxes` of a grid of `rank` axes (1, 2 or 3)."""
        scales = self.interpolation_scale
        if not isinstance(scales, tuple):
            scales = (scales,) * rank
        elif len(scales) != rank:
            raise invalid(
                "interpolation_scale",
                f"one number, or a tuple of {rank} (one per axis of a {rank}-D grid)",
                self.interpolation_scale,
            )
        maximum = self.max_grid_shape
        if maximum is not None and len(maximum) != rank:
            raise invalid(
                "max_grid_shape", f"a tuple of {rank} sizes (a {rank}-D grid)", maximum
            )
        return GridAxes(rank, scales, self)

    def to_config(self):
        config = dataclasses.asdict(self)
        for name in ("grid_shape", "max_grid_shape", "interpolation_scale"):
            if isinstance(config[name], tuple):
                config[name] = list(config[name])
        return config


@dataclasses.dataclass(frozen=True)
class GridAxes:
    """`GridOptions` for a grid of `rank` axes: one scale per axis."""

    rank: int
    scales: tuple
    options: GridOptions

    def check_dim(self, dim, name="dim"):
        """The feature width, a multiple of `DIM_MULTIPLES[rank]`."""
        multiple = DIM_MULTIPLES[self.rank]
        if not _arguments.is_int(dim) or dim <= 0 or dim % multiple:
            raise invalid(
                name,
                f"a positive multiple of {multiple} for a {self.rank}-D grid",
                dim,
            )
        return _arguments.check_depth(dim, name)

    def ratio(self, axis, size):
        """The exact position of index 1 on `axis` of a table of `size`
        rows: ``base_size / (size * scale)``, or ``1 / scale``."""
        base = self.options.base_size
        ratio = fractions.Fraction(base, size) if base else fractions.Fraction(1)
        return ratio / fractions.Fraction(self.scales[axis])


__all__ = ["CROPS", "DIM_MULTIPLES", "POSITIONS", "GridAxes", "GridOptions"]
