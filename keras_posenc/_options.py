"""The validated options of the sinusoidal family, shared by every entry point.

`SinusoidalPositionEncoding`, `export_encoder` and the command line all
build one `SinusoidalOptions`; its constructor holds every rule about the
options (allowed values, cross-checks such as `max_length` with
`mode="lookup"`), so each rule is stated once.
"""

import dataclasses

from keras_posenc import _arguments
from keras_posenc._arguments import invalid

LAYOUTS = ("interleaved", "concatenated")
MODES = ("compute", "lookup")
MERGES = ("add", "concat", None)
OUT_OF_RANGE = ("error", "extend")


@dataclasses.dataclass(frozen=True)
class SinusoidalOptions:
    """The options of a sinusoidal encoding, checked when constructed.

    The fields are those of `SinusoidalPositionEncoding` (Vaswani et al.,
    2017, section 3.5, https://arxiv.org/abs/1706.03762); a bad value
    raises a `ValueError` naming the argument.

    Example:

    >>> from keras_posenc._options import SinusoidalOptions
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

    def __post_init__(self):
        def normalise(name, value):
            object.__setattr__(self, name, value)

        normalise("max_wavelength", _arguments.check_wavelength(self.max_wavelength))
        _arguments.check_choice("mode", self.mode, MODES)
        _arguments.check_choice("merge", self.merge, MERGES)
        _arguments.check_choice("layout", self.layout, LAYOUTS)
        _arguments.check_choice("out_of_range", self.out_of_range, OUT_OF_RANGE)
        _arguments.check_bool("scale_inputs", self.scale_inputs)
        normalise(
            "sequence_axis", _arguments.check_int("sequence_axis", self.sequence_axis)
        )
        if self.depth is not None:
            normalise("depth", _arguments.check_depth(self.depth))
        self._check_max_length(normalise)
        if self.merge == "concat" and self.depth is None:
            raise invalid("depth", "a positive integer with merge='concat'", None)
        if self.scale_inputs and self.merge != "add":
            raise invalid(
                "scale_inputs", f"False unless merge='add' (merge={self.merge!r})", True
            )

    def _check_max_length(self, normalise):
        if self.mode == "compute":
            if self.max_length is not None:
                raise invalid(
                    "max_length",
                    "None with mode='compute' (it has no length limit; "
                    "use mode='lookup' for a table of max_length rows)",
                    self.max_length,
                )
            return
        if self.max_length is None:
            raise invalid("max_length", "a positive integer with mode='lookup'", None)
        max_length = _arguments.check_positive_int(
            "max_length", self.max_length, _arguments.POSITION_LIMIT
        )
        normalise("max_length", max_length)
        if self.depth is not None:
            _arguments.check_table_bytes(max_length, self.depth)

    @property
    def lowest_position(self):
        """Compute mode encodes any int32 position; a table starts at 0."""
        return _arguments.POSITION_MIN if self.mode == "compute" else 0

    def to_config(self):
        """The options as the plain JSON dict of a layer config."""
        return dataclasses.asdict(self)
