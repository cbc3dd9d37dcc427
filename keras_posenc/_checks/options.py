"""The validated options of the sinusoidal family, shared by every entry point.

`SinusoidalPositionEncoding`, `export_encoder` and the command line all
build one `SinusoidalOptions`; its constructor holds every rule about the
options (allowed values, cross-checks such as `max_length` with
`mode="lookup"`), so each rule is stated once.
"""

import dataclasses

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.arguments import invalid

LAYOUTS = ("interleaved", "concatenated", "cos_sin")
# The frequency rules: the paper's ``b**(-2i/d)``; tensor2tensor's
# ``b**(-i/(d//2 - 1))`` (fairseq, Whisper, MusicGen and most of transformers'
# translation and speech models).
FREQUENCY_RULES = ("paper", "tensor2tensor")
# What an odd width holds: one more sine (the paper's, Marian's); the even
# table with a zero column appended (fairseq); nothing (refused: Whisper).
ODD_DEPTHS = ("sine", "zero", "error")
# tensor2tensor's rule divides by ``depth // 2 - 1``.
TENSOR2TENSOR_MIN_DEPTH = 4
MODES = ("compute", "lookup")
MERGES = ("add", "concat", None)
OUT_OF_RANGE = ("error", "extend")


class ShapeMemo:
    """``fn(shape)`` remembered per shape, for one layer or option set.

    A dict read that `torch.compile` traces as plain Python, where a
    `functools.lru_cache` makes Dynamo warn and trace through the wrapper.
    Holds at most `size` shapes (then starts again).
    """

    def __init__(self, fn, size=256):
        self._fn, self._size, self._values = fn, size, {}

    def __call__(self, shape):
        value = self._values.get(shape)
        if value is None:
            if len(self._values) >= self._size:
                self._values.clear()
            value = self._values[shape] = self._fn(shape)
        return value


def check_table_options(mode, max_length, out_of_range):
    """`mode`, `max_length` and `out_of_range` of a layer with a lookup mode.

    `max_length` is required with `mode="lookup"` and refused with
    `"compute"` (which has no length limit); returns it normalised.
    """
    _arguments.check_choice("mode", mode, MODES)
    _arguments.check_choice("out_of_range", out_of_range, OUT_OF_RANGE)
    if mode == "compute":
        if max_length is not None:
            raise invalid(
                "max_length",
                "None with mode='compute' (it has no length limit; "
                "use mode='lookup' for a table of max_length rows)",
                max_length,
            )
        return None
    if max_length is None:
        raise invalid("max_length", "a positive integer with mode='lookup'", None)
    return _arguments.check_positive_int(
        "max_length", max_length, _arguments.MAX_LENGTH
    )


@dataclasses.dataclass(frozen=True)
class SinusoidalOptions:
    """The options of a sinusoidal encoding, checked when constructed.

    The fields are those of `SinusoidalPositionEncoding` (Vaswani et al.,
    2017, section 3.5, https://arxiv.org/abs/1706.03762); a bad value
    raises a `ValueError` naming the argument.

    Example:

    >>> from keras_posenc._checks.options import SinusoidalOptions
    >>> SinusoidalOptions(mode="lookup", max_length=128).lowest_position
    0
    """

    max_wavelength: float = 10000.0
    mode: str = "compute"
    max_length: int | None = None
    merge: str | None = "add"
    depth: int | None = None
    layout: str = "interleaved"
    scale_inputs: bool = False
    out_of_range: str = "error"
    sequence_axis: int = 1
    frequency_rule: str = "paper"
    odd_depth: str = "sine"
    position_offset: int = 0
    padding_id: int | None = None
    positions_from_ids: bool = False
    # Not an option: the layout of each input shape, read at every call.
    _layouts: ShapeMemo = dataclasses.field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self):
        def normalise(name, value):
            object.__setattr__(self, name, value)

        normalise("max_wavelength", _arguments.check_wavelength(self.max_wavelength))
        _arguments.check_choice("merge", self.merge, MERGES)
        _arguments.check_choice("layout", self.layout, LAYOUTS)
        _arguments.check_bool("scale_inputs", self.scale_inputs)
        normalise(
            "sequence_axis", _arguments.check_int("sequence_axis", self.sequence_axis)
        )
        if self.depth is not None:
            normalise("depth", _arguments.check_depth(self.depth))
        normalise(
            "max_length",
            check_table_options(self.mode, self.max_length, self.out_of_range),
        )
        if self.mode == "lookup" and self.depth is not None:
            _arguments.check_table_bytes(self.max_length, self.depth)
        if self.merge == "concat" and self.depth is None:
            raise invalid("depth", "a positive integer with merge='concat'", None)
        if self.scale_inputs and self.merge != "add":
            raise invalid(
                "scale_inputs", f"False unless merge='add' (merge={self.merge!r})", True
            )
        self._check_conventions(normalise)
        if self.depth is not None:
            self.check_width(self.depth)
        normalise("_layouts", ShapeMemo(self._layout))

    def _check_conventions(self, normalise):
        """The published conventions: frequency rule, odd widths, offset,
        padding row and positions from token ids."""
        _arguments.check_choice("frequency_rule", self.frequency_rule, FREQUENCY_RULES)
        _arguments.check_choice("odd_depth", self.odd_depth, ODD_DEPTHS)
        normalise(
            "position_offset",
            _arguments.check_int("position_offset", self.position_offset),
        )
        if abs(self.position_offset) >= _arguments.POSITION_LIMIT:
            raise invalid(
                "position_offset",
                "an int in [-2**31 + 1, 2**31 - 1]",
                self.position_offset,
            )
        if self.padding_id is not None:
            normalise(
                "padding_id",
                _arguments.check_non_negative_int("padding_id", self.padding_id),
            )
        _arguments.check_bool("positions_from_ids", self.positions_from_ids)
        if self.positions_from_ids:
            if self.padding_id is None:
                raise invalid("padding_id", "an int with positions_from_ids=True", None)
            if self.position_offset:
                # fairseq's positions start after the padding id: no model
                # shifts them again, and the ids path would ignore it.
                raise invalid(
                    "position_offset",
                    "0 with positions_from_ids=True (the padding id sets the start)",
                    self.position_offset,
                )
            if self.merge is not None:
                raise invalid(
                    "merge",
                    "None with positions_from_ids=True (the inputs are token ids)",
                    self.merge,
                )

    def encoder_width(self, width):
        """Columns the engine computes for an encoding `width` wide: one
        fewer than an odd `width` with ``odd_depth="zero"`` (the last
        column is zero)."""
        return width - width % 2 if self.odd_depth == "zero" else width

    def check_width(self, width, name="depth"):
        """Refuses a `width` the conventions cannot lay out; returns it."""
        if width % 2 and self.odd_depth == "error":
            expected = (
                "an even width with odd_depth='error' (the model refuses odd ones)"
            )
            raise invalid(name, expected, width)
        low = TENSOR2TENSOR_MIN_DEPTH if self.frequency_rule == "tensor2tensor" else 2
        if self.frequency_rule == "tensor2tensor" or self.odd_depth == "zero":
            if width < low:
                expected = (
                    f"at least {low} with frequency_rule={self.frequency_rule!r} "
                    f"and odd_depth={self.odd_depth!r}"
                )
                raise invalid(name, expected, width)
        return width

    @property
    def lowest_position(self):
        """Compute mode, and a table that extends, encode any int32 position;
        a table that refuses what it lacks starts at 0."""
        if self.mode == "compute" or self.out_of_range == "extend":
            return _arguments.POSITION_MIN
        return 0

    def input_layout(self, shape):
        """``(depth, sequence axis)`` for inputs of `shape` (a tuple).

        The encoding's width is `depth`, else the inputs' feature size;
        the sequence axis is normalised to a non-negative int.
        """
        if shape is None:
            raise invalid("inputs", "a known rank", shape)
        return self._layouts(tuple(shape))

    def _layout(self, shape):
        """`input_layout`, once per shape (`_layouts`: a layer asks at every call)."""
        # Symbolic dimensions (jax2tf export) count as unknown.
        shape = tuple(d if _arguments.is_int(d) else None for d in shape)
        id_input = self.merge is None and len(shape) == 2
        if len(shape) < 3 and not id_input:
            expected = (
                "rank >= 3 (batch, ..., features), or rank 2 (batch, length) "
                "token ids with merge=None"
            )
            raise invalid("inputs", expected, f"<shape={shape}>")
        feature_rank = len(shape) + 1 if id_input else len(shape)
        axis = self.sequence_axis
        axis = axis + feature_rank if axis < 0 else axis
        if not 1 <= axis <= feature_rank - 2:
            raise invalid(
                "sequence_axis",
                f"an axis between the batch axis (0) and the feature axis "
                f"({feature_rank - 1}) of inputs of shape {shape}",
                self.sequence_axis,
            )
        return self._width(None if id_input else shape[-1], shape), axis

    def _width(self, features, shape):
        if self.merge == "add" and self.depth is not None:
            if features not in (None, self.depth):
                expected = (
                    f"the last dimension of `inputs` ({features}) with merge='add'"
                )
                raise invalid("depth", expected, self.depth)
        width = self.depth
        if width is None and self.merge != "concat":
            width = features
        if width is None:
            raise invalid(
                "depth",
                "a positive integer: it cannot be inferred from inputs whose "
                f"feature axis is unknown or absent (shape {shape})",
                None,
            )
        return self.check_width(_arguments.check_depth(width))

    def check_inputs_dtype(self, dtype):
        """Refuses integer inputs unless the encoding is returned alone."""
        # Imported here: the command line builds options without Keras.
        from keras import backend

        if self.merge is not None and not backend.is_float_dtype(dtype):
            raise invalid(
                "inputs",
                f"a floating tensor with merge={self.merge!r}",
                f"<tensor dtype={dtype}>",
            )

    def to_config(self):
        """The options as the plain JSON dict of a layer config."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.init
        }
