"""Rotary position embeddings (RoPE), exact to float32 rounding at every position."""

import functools
import json

from keras import backend, ops

from keras_posenc import _arguments, _backend, _engine, _positions, _rope_scaling
from keras_posenc._keras import PositionLayer, keras, output_shape
from keras_posenc._rows import ComputedRows


@functools.lru_cache(maxsize=64)
def _plan(scaling_json, max_wavelength, dim, given):
    """(rows of ``[sin | cos]``, attention factor) for one option set, cached."""
    scaling = json.loads(scaling_json)
    if given is None:
        given = tuple(_rope_scaling.frequencies(scaling, dim, max_wavelength))
    return _row_source(given), _rope_scaling.attention_factor(scaling)


def _row_source(frequencies):
    return ComputedRows(_engine.rotary_encoder(frequencies))


def _tables(rows, dim, attention, layout, signed):
    """cos and (with `signed`, the rotation's sign folded in) sin, ``[..., dim]``."""
    n = dim // 2
    sin, cos = rows[..., :n], rows[..., n:]
    if attention != 1.0:
        sin, cos = sin * attention, cos * attention
    first = -sin if signed else sin
    if layout == "half":
        return ops.concatenate([cos, cos], -1), ops.concatenate([first, sin], -1)
    shape = (*ops.shape(rows)[:-1], dim)
    pairs = (ops.stack([cos, cos], -1), ops.stack([first, sin], -1))
    return tuple(ops.reshape(t, shape) for t in pairs)


def _swap(x, dim, layout):
    """Halves or (2i, 2i+1) pairs swapped: one reverse of a size-2 axis (one
    pass in TF graphs, fused by XLA, a TFLite builtin, unlike `tf.roll`)."""
    n = dim // 2
    split = (2, n) if layout == "half" else (n, 2)
    pairs = ops.reshape(x, (*ops.shape(x)[:-1], *split))
    return ops.reshape(
        ops.flip(pairs, axis=-2 if layout == "half" else -1), ops.shape(x)
    )


@functools.lru_cache(maxsize=64)
def _rotation(attention, layout, seq, rank, dim, features, batched):
    """``x -> x * cos + swap(x) * sin`` (first `dim` features), compiled once.

    The `[L, dim]` (or `[B, L, dim]`) tables are built once per call and
    broadcast over every other axis; the maths run in float32 (float64
    inputs stay float64) and the result is cast once to the input dtype.
    """

    def rotate(x, table):
        (table,) = _backend.materialize(table)  # else XLA redoes the engine per column
        cos, sin = _backend.materialize(
            *_tables(table, dim, attention, layout, signed=True)
        )
        shape = [1] * rank
        shape[seq], shape[-1] = ops.shape(cos)[-2], dim
        if batched:
            shape[0] = ops.shape(cos)[0]
        dtype = _backend.dtype_name(x)
        work = "float64" if dtype == "float64" else "float32"
        cos, sin = (ops.cast(ops.reshape(t, shape), work) for t in (cos, sin))
        rotated = ops.cast(x[..., :dim] if dim < features else x, work)
        out = ops.cast(rotated * cos + _swap(rotated, dim, layout) * sin, dtype)
        if dim < features:
            out = ops.concatenate([out, x[..., dim:]], axis=-1)
        return out

    return _backend.compile_function(rotate)


@_backend.not_autograph
def rotary_cos_sin(
    positions,
    dim,
    *,
    max_wavelength=10000.0,
    rope_scaling=None,
    layout="half",
    inverse_frequencies=None,
):
    """cos and sin of the RoPE angles ``p * w_i``, times the attention factor.

    The tables of Su et al., "RoFormer" (2021), https://arxiv.org/abs/2104.09864,
    with any Hugging Face `rope_type`, within 2e-7 of the exact values (for
    the frequencies in use) at every position in `[-2**31, 2**31)`.

    Args:
        positions: int array or tensor, rank 0 to 3.
        dim: int. The rotary dimension (even).
        max_wavelength, rope_scaling, layout, inverse_frequencies: as in
            `RotaryEmbedding`.

    Returns:
        `(cos, sin)`, float32 tensors of shape `positions.shape + [dim]`:
        `[c | c]` with `layout="half"`, `[c0, c0, c1, c1, ...]` with
        `"interleaved"`.

    Example:

    >>> cos, sin = keras_posenc.rotary_cos_sin(np.arange(8), 64)
    >>> tuple(cos.shape)
    (8, 64)
    """
    dim = _rope_scaling.even_dim(dim, "dim")
    wavelength, scaling, _, layout, given = _rope_scaling.options(
        max_wavelength, rope_scaling, dim, layout, inverse_frequencies
    )
    parsed = _positions.explicit(
        "positions", positions, low=_arguments.POSITION_MIN, ranks=(0, 1, 2, 3)
    )
    rows, attention = _plan(json.dumps(scaling), wavelength, dim, given)
    return _tables(rows(parsed), dim, attention, layout, signed=False)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RotaryEmbedding(PositionLayer):
    """Rotary position embedding (RoPE), exact to float32 rounding.

    The rotation of [RoFormer](https://arxiv.org/abs/2104.09864) (Su et al.,
    2021): features are paired and each pair is turned by the angle `p * w_i`
    of its position `p`, so that `<R_p q, R_k k>` depends on `p - k` only.
    The frequencies `w_i` follow Hugging Face transformers for every
    `rope_type` (linear; dynamic NTK; [YaRN](https://arxiv.org/abs/2309.00071);
    Llama 3; [LongRoPE](https://arxiv.org/abs/2402.13753)), computed exactly
    on the host. cos and sin come from the exact phase engine: within 2e-7
    at every position in `[-2**31, 2**31)`, where float32 angles lose
    `p * 2**-24` radians (0.06 at position 2**20). The rotation runs in
    float32 under 16-bit policies and is cast once at the end; a decoding
    step gives the bits of the full call. The layer has no weights.

    Args:
        max_wavelength: float. The base (`rope_theta`). Defaults to
            `10000.0`.
        rope_scaling: `None` or a dict with Hugging Face keys, e.g.
            `{"rope_type": "linear", "factor": 4.0}`; `rope_type` is one of
            `"default"`, `"linear"`, `"dynamic"` (NTK scaling fixed at
            construction for a serving length `seq_len`, by default
            `original_max_position_embeddings`, i.e. unscaled: transformers'
            per-call update cannot live in a compiled graph), `"yarn"`,
            `"llama3"`, `"longrope"` (long factors when `seq_len` exceeds
            `original_max_position_embeddings`). Defaults to `None`.
        rotary_dim: int. Rotate the first `rotary_dim` features (even) and
            pass the rest through. Defaults to all features.
        layout: `"half"` (rotate_half: Hugging Face, Llama, GPT-NeoX,
            keras-hub) or `"interleaved"` (pairs `(2i, 2i+1)`: GPT-J,
            RoFormer). Defaults to `"half"`.
        inverse_frequencies: a checkpoint's own `inv_freq` array (`rotary_dim
            / 2` values, float32 or float64), used exactly as given;
            `rope_scaling` then only sets the attention factor. Defaults to
            `None`.
        sequence_axis: int. Axis of positions. Defaults to `1`.
        feature_axis: int. Axis of features. Defaults to `-1`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: floating tensor, e.g. `[batch, length, heads, dim]` or
            `[batch, length, dim]`.
        start_index: int, int scalar tensor or int `[batch]` tensor.
            Position of the first token (cached decoding). Defaults to `0`.
        positions: int tensor `[length]` or `[batch, length]` (left
            padding, packed sequences); overrides `start_index`. Positions
            may be negative (a rotation backwards).

    Example:

    >>> q = np.ones((2, 16, 4, 64), "float32")  # [batch, length, heads, dim]
    >>> rope = keras_posenc.RotaryEmbedding(max_wavelength=500000.0)
    >>> tuple(rope(q, start_index=3).shape)
    (2, 16, 4, 64)

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Peng et al., 2023 (YaRN)](https://arxiv.org/abs/2309.00071)
        - [Ding et al., 2024 (LongRoPE)](https://arxiv.org/abs/2402.13753)
    """

    def __init__(
        self,
        max_wavelength=10000.0,
        rope_scaling=None,
        rotary_dim=None,
        layout="half",
        inverse_frequencies=None,
        sequence_axis=1,
        feature_axis=-1,
        **kwargs,
    ):
        options = _rope_scaling.options(
            max_wavelength, rope_scaling, rotary_dim, layout, inverse_frequencies
        )
        axes = _rope_scaling.axes_arguments(sequence_axis, feature_axis)
        super().__init__(**kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self.max_wavelength, scaling, self.rotary_dim, self.layout, given = options
        # Plain text and tuples: Keras would wrap a dict or list for tracking.
        self._scaling_json, self._given = json.dumps(scaling), given
        self.sequence_axis, self.feature_axis = axes

    @classmethod
    def from_hf_config(cls, config, *, seq_len=None, layer_type=None, **kwargs):
        """The layer of a Hugging Face config dict (`config.json`).

        Reads `rope_theta`, `rope_scaling` or `rope_parameters` (which may
        hold `rope_theta` and `partial_rotary_factor`), `partial_rotary_factor`,
        `head_dim` (else `hidden_size // num_attention_heads`) and
        `max_position_embeddings`, as transformers does.

        Args:
            config: dict. The config.
            seq_len: int. Serving length for `"dynamic"` and `"longrope"`.
            layer_type: str. Key of nested per-layer `rope_parameters`.
            **kwargs: other `RotaryEmbedding` arguments (`name`, ...).
        """
        return cls(**_rope_scaling.hf_arguments(config, seq_len, layer_type), **kwargs)

    @property
    def rope_scaling(self):
        return json.loads(self._scaling_json)

    @property
    def attention_factor(self):
        return _rope_scaling.attention_factor(self.rope_scaling)

    def _layout(self, shape):
        """(sequence axis, feature axis, rotary dim) for an input shape."""
        options = (self.sequence_axis, self.feature_axis, self.rotary_dim, self._given)
        return _rope_scaling.input_layout(tuple(shape), *options)

    def build(self, input_shape):
        self._layout(input_shape)
        super().build(input_shape)

    def call(self, inputs, start_index=0, positions=None):
        dtype = _backend.dtype_name(inputs)
        if not backend.is_float_dtype(dtype):
            raise _arguments.invalid("inputs", "a floating tensor", f"<dtype={dtype}>")
        seq, feat, dim = self._layout(inputs.shape)
        x = inputs if feat == len(inputs.shape) - 1 else ops.moveaxis(inputs, feat, -1)
        seq -= int(feat < seq)
        options = (self._scaling_json, self.max_wavelength, dim, self._given)
        rows, attention = _plan(*options)
        # RoPE is defined for negative positions.
        parsed = _positions.in_call(
            x, seq, start_index, positions, low=_arguments.POSITION_MIN
        )
        table = rows(parsed)
        batched = len(table.shape) == 3
        rotate = _rotation(
            attention, self.layout, seq, len(x.shape), dim, x.shape[-1], batched
        )
        out = rotate(x, table)
        return out if feat == len(inputs.shape) - 1 else ops.moveaxis(out, -1, feat)

    def compute_output_shape(self, input_shape):
        return output_shape(input_shape)

    def get_config(self):
        config = super().get_config()
        given = None if self._given is None else list(self._given)
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "rope_scaling": self.rope_scaling,
                "rotary_dim": self.rotary_dim,
                "layout": self.layout,
                "inverse_frequencies": given,
                "sequence_axis": self.sequence_axis,
                "feature_axis": self.feature_axis,
            }
        )
        return config
