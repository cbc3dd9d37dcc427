"""The inputs of a `RotaryEmbedding` call: axes, rotary dimension, sections.

Read once per input shape (the layer remembers it), so that a call only
looks up the layout; multimodal positions (Qwen2-VL's M-RoPE, Wang et al., 2024,
https://arxiv.org/abs/2409.12191) are split into their three rows here.
"""

import numpy as np

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._rope import rotation as _rotation
from keras_posenc._rope.config import MAX_ROTARY_DIM


def check_section_shape(shape):
    """Multimodal positions are ``[3, batch, length]``."""
    if len(shape) != 3 or shape[0] != 3:
        expected = (
            "[3, batch, length] positions (temporal, height, width) with an "
            "'mrope_section', or text positions [length] or [batch, length]"
        )
        raise _arguments.invalid("positions", expected, f"<shape={tuple(shape)}>")


def section_rows(rows, positions, x, seq, low, sections):
    """Rows of ``[3, batch, length]`` positions, each column from its row."""
    shape = positions.shape if hasattr(positions, "shape") else np.shape(positions)
    check_section_shape(shape)
    tables = []
    for row in range(3):
        parsed = _positions.in_call(x, seq, 0, positions[row], low=low)
        tables.append(rows(parsed))
    return _rotation.by_section(tables, sections)


def is_multimodal(positions):
    """Whether call `positions` are ``[3, batch, length]`` (rank above 2)."""
    if positions is None:
        return False
    rank = len(positions.shape) if hasattr(positions, "shape") else np.ndim(positions)
    return rank > 2


def _axes(shape, sequence_axis, feature_axis):
    rank, axes = len(shape), []
    for name, axis in (
        ("sequence_axis", sequence_axis),
        ("feature_axis", feature_axis),
    ):
        if not (-rank <= axis < rank and axis % rank != 0 and axis % rank not in axes):
            expected = f"a distinct non-batch axis of inputs of shape {shape}"
            raise _arguments.invalid(name, expected, axis)
        axes.append(axis % rank)
    return axes


def rotary_layout(shape, sequence_axis, feature_axis, rotary_dim, config):
    """``(sequence axis, feature axis, rotary dim)`` for inputs of `shape`."""
    seq, feat = _axes(shape, sequence_axis, feature_axis)
    features = shape[feat]
    dim = rotary_dim or features
    if not _arguments.is_int(features) or not _arguments.is_int(dim) or dim % 2:
        expected = "a known, even feature dimension (or an even `rotary_dim`)"
        raise _arguments.invalid("inputs", expected, f"<shape={shape}>")
    if dim > features:
        raise _arguments.invalid("rotary_dim", f"at most {features} features", dim)
    if dim <= 0 or dim > MAX_ROTARY_DIM:
        expected = (
            f"between 2 and {MAX_ROTARY_DIM} features to rotate (or a `rotary_dim` "
            "in that range)"
        )
        raise _arguments.invalid("inputs", expected, f"<shape={shape}>")
    config.check_dim(dim)
    return seq, feat, int(dim)
