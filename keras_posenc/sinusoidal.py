"""The `SinusoidalPositionEncoding` Keras layer."""

import dataclasses
import math
from typing import Any

from keras import ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._checks.options import SinusoidalOptions
from keras_posenc._exact.rows import sinusoidal_rows
from keras_posenc._hf import sinusoidal as _hf_sinusoidal
from keras_posenc._keras import PositionLayer, keras, output_shape

# Tensors with no dense sequence axis to place positions on: TF ragged and
# sparse, JAX sparse (matched by name, as Keras's own data adapters do, so
# that no backend has to be imported to check).
_NOT_DENSE = ("RaggedTensor", "SparseTensor", "BCOO", "BCSR")


def _check_dense(inputs):
    kind = type(inputs).__name__
    if kind in _NOT_DENSE or getattr(inputs, "is_sparse", False) is True:
        raise _arguments.invalid(
            "inputs",
            "a dense tensor (pad ragged sequences and densify sparse ones first)",
            f"<{kind} shape={tuple(inputs.shape)}>",
        )


@keras.saving.register_keras_serializable(package="keras_posenc")
class SinusoidalPositionEncoding(PositionLayer):
    """Sinusoidal position encoding, exact to float32 rounding.

    The fixed encoding of Vaswani et al., "Attention Is All You Need"
    (2017), section 3.5: position `p` gets `sin(p * w_i)` and `cos(p * w_i)`
    with `w_i = max_wavelength ** (-2i / depth)`, within 2e-7 of the exact
    values at every position in `[-2**31, 2**31)` (int32 and float32 ops
    only, on every Keras 3 backend, under XLA and in TFLite). Under 16-bit
    dtype policies the maths stay float32 and the encoding is cast once at
    the end. A position's row is the same bits however it is asked for
    (full sequence, decoding step, offsets, explicit positions, lookup), so
    a cached decode reproduces the full forward exactly.

    The layer has no weights. In `"compute"` mode the rows of the actual
    positions are computed at every call, with no length limit and
    negative positions allowed (relative distances). In `"lookup"` mode a
    table of `max_length` rows is built once in `build` and read by slicing
    (shared positions, broadcast over the batch) or gathering over
    batch-tiled positions (per-example offsets or positions).

    Args:
        max_wavelength: float. The base `b` of the wavelengths, which run
            from `2 pi` to `2 pi b`. Any finite `b > 0`. Defaults to
            `10000.0`.
        mode: `"compute"` or `"lookup"`. Defaults to `"compute"`.
        max_length: int. Rows of the lookup table; required with
            `mode="lookup"` (at most 2**31, and a table of at most 1 GiB
            unless `KERAS_POSENC_MAX_TABLE_BYTES` allows more), `None` with
            `mode="compute"`.
        merge: `"add"` returns `inputs + PE`; `"concat"` appends PE to the
            features (needs `depth`); `None` returns PE alone, shaped as
            the inputs with `depth` features. Defaults to `"add"`.
        depth: int. Width of the encoding, at most 65536. Defaults to the
            last dimension of `inputs`.
        layout: `"interleaved"` (the paper's: sine on even columns, cosine
            on odd; DistilBERT, XLM and FlauBERT with sinusoidal
            embeddings), `"concatenated"` (`[sin | cos]`, an odd width with
            one more sine: tensor2tensor, fairseq's M2M100, NLLB, XGLM,
            Speech2Text, TrOCR, Kosmos-2, SeamlessM4T, Whisper, Marian,
            Pegasus, PEGASUS-X, CTRL, the TF tutorial) or `"cos_sin"`
            (`[cos | sin]`: MusicGen, MusicGen Melody). Defaults to
            `"interleaved"`.
        scale_inputs: bool. With `merge="add"`, return
            `inputs * sqrt(depth) + PE` as in section 3.4 of the paper.
            Defaults to `False`.
        out_of_range: what `"lookup"` mode does with a position outside
            `[0, max_length)`: `"error"` raises (eagerly, at trace time when
            static, as a graph assertion otherwise; where assertions cannot
            run, under XLA or `jax.jit`, the rows are NaN instead, never a
            plausible wrong value) and `"extend"` computes the exact rows.
            Defaults to `"error"`.
        sequence_axis: int. The axis of positions; features are last and
            the encoding broadcasts over every other axis. `1` fits
            `[batch, length, features]` and `[batch, length, heads, dim]`;
            `-2` reproduces keras-hub's `SinePositionEncoding` on any rank.
            Defaults to `1`.
        frequency_rule: `"paper"` (`w_i = b ** (-2i / depth)`: the paper,
            Marian, Pegasus, CTRL, DistilBERT, XLM, FlauBERT) or
            `"tensor2tensor"` (`w_i = b ** (-i / (depth // 2 - 1))`,
            tensor2tensor's `get_timing_signal_1d` with `max_wavelength` as
            its `max_timescale`: fairseq's M2M100, NLLB, XGLM,
            Speech2Text, TrOCR, Kosmos-2, MusicGen, SeamlessM4T, Whisper's
            `sinusoids`, PEGASUS-X; needs `depth >= 4`). Defaults to
            `"paper"`.
        odd_depth: what an odd width holds: `"sine"` (one more sine
            column: the paper, Marian, XLM; with `layout="cos_sin"` one
            more cosine, the first block's), `"zero"` (the even table
            with a zero column appended: fairseq's tables, MusicGen) or
            `"error"` (refused: Whisper, PEGASUS-X). Defaults to `"sine"`.
        position_offset: int. Added to every position before its row is
            read (XGLM reads row `p + 2`). Defaults to `0`.
        padding_id: int or `None`. The position whose row is zero
            (fairseq's padding row: M2M100, NLLB, XGLM, Speech2Text,
            TrOCR, Kosmos-2, SeamlessM4T). Defaults to `None`.
        positions_from_ids: bool. With `merge=None` and `padding_id`,
            the call takes integer token ids `[batch, length]` and derives
            the positions from them as fairseq's `make_positions` does:
            `(cumsum(ids != padding_id) + start_index) * (ids !=
            padding_id) + padding_id`, so each row of a left-padded batch
            counts its own tokens and padding gets the zero row (M2M100,
            NLLB, Speech2Text, TrOCR, Kosmos-2, SeamlessM4T). Defaults to
            `False`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...); the dtype
            policy must be floating.

    Call arguments:
        inputs: dense floating tensor `[batch, ..., features]` of rank >= 3,
            or with `merge=None` also `[batch, length]` token ids (ragged
            and sparse tensors are refused: pad or densify them first).
        start_index: int, int scalar tensor, or int `[batch]` tensor.
            Position of the first token, shared or per example (cached
            decoding; with `positions_from_ids`, the cache length added to
            each token's count). Defaults to `0`.
        positions: int tensor `[length]` or `[batch, length]`. Explicit
            positions (left padding, packed sequences); overrides
            `start_index`. Refused with `positions_from_ids`.
        mask: the Keras padding mask; passed through unchanged.

    Input shape:
        `(batch, ..., features)`, or `(batch, length)` with `merge=None`.

    Output shape:
        `"add"`: as the input. `"concat"`: the input with `features +
        depth` features. `None`: the input with `depth` features (token ids
        gain a feature axis).

    Example:

    >>> tokens = keras.Input(shape=(None,), dtype="int32")
    >>> x = keras.layers.Embedding(1000, 64)(tokens)
    >>> x = keras_posenc.SinusoidalPositionEncoding()(x)
    >>> tuple(x.shape)
    (None, None, 64)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        max_wavelength: float = 10000.0,
        mode: str = "compute",
        max_length: int | None = None,
        merge: str | None = "add",
        depth: int | None = None,
        layout: str = "interleaved",
        scale_inputs: bool = False,
        out_of_range: str = "error",
        sequence_axis: int = 1,
        frequency_rule: str = "paper",
        odd_depth: str = "sine",
        position_offset: int = 0,
        padding_id: int | None = None,
        positions_from_ids: bool = False,
        **kwargs: Any,
    ) -> None:
        options = SinusoidalOptions(
            max_wavelength=max_wavelength,
            mode=mode,
            max_length=max_length,
            merge=merge,
            depth=depth,
            layout=layout,
            scale_inputs=scale_inputs,
            out_of_range=out_of_range,
            sequence_axis=sequence_axis,
            frequency_rule=frequency_rule,
            odd_depth=odd_depth,
            position_offset=position_offset,
            padding_id=padding_id,
            positions_from_ids=positions_from_ids,
        )
        super().__init__(**kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self._options = options
        # The options as plain attributes (`layer.mode`, ...), for reading.
        for name, value in options.to_config().items():
            setattr(self, name, value)
        self.supports_masking = True
        self._rows: Any = None  # a row source (`_exact.rows`), made by `build`
        self._width: int | None = None  # the encoding's width, set by `build`

    @classmethod
    def from_hf_config(cls, config: Any, **kwargs: Any) -> "SinusoidalPositionEncoding":
        """The sinusoidal table of a Hugging Face `config.json`, as the model's.

        A layer with `merge=None` whose call on token ids `[batch, length]`
        returns `[batch, length, d_model]`, equal to what the model's
        position module of transformers 5.24.0 returns for those ids
        (frequency rule, layout, odd width, offset, positions from ids
        with their zero padding row), within 2e-7 of the float64 value of
        that module's formula. Pass `start_index` as the module's
        `cache_length`. The model types read, and the convention of each,
        are listed in the docs (`docs/sinusoidal.md`); for Whisper the
        layer gives the encoder's table over audio frames (positions
        0..). A composite config (`text_config`, `decoder`) is read as
        transformers reads it. Every other `model_type` is refused by
        name, saying what it uses instead (learned positions, RoPE,
        ALiBi), and so is a key read here whose value the model would not
        apply (a padding id outside the vocabulary, an odd width the
        model refuses).

        Args:
            config: a dict, or the path of a `config.json` file or of a
                directory holding one (at most 4 MiB, nested at most 16
                levels).
            **kwargs: other constructor arguments (`mode`, `max_length`,
                `name`, `dtype`, ...); none of those read from `config`.

        Returns:
            A `SinusoidalPositionEncoding`.

        Example:

        >>> config = {"model_type": "m2m_100", "d_model": 8, "pad_token_id": 1}
        >>> pe = keras_posenc.SinusoidalPositionEncoding.from_hf_config(config)
        >>> ids = np.array([[1, 1, 5, 6]])  # left-padded
        >>> table = pe(ids)
        >>> tuple(table.shape), {float(v) for v in table[0, 1]}  # the padding row
        ((1, 4, 8), {0.0})

        References:
            - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
            - [fairseq `make_positions`](https://github.com/facebookresearch/fairseq)
        """
        return cls(**_hf_sinusoidal.layer_arguments(config, kwargs))

    def _layout(self, input_shape):
        shape = None if input_shape is None else tuple(input_shape)
        return self._options.input_layout(shape)

    def build(self, input_shape):
        width, _ = self._layout(input_shape)
        self._rows = sinusoidal_rows(self._options, width)
        self._width = width
        super().build(input_shape)

    @_backend.on_keras_device
    def call(
        self, inputs: Any, start_index: Any = 0, positions: Any = None, mask: Any = None
    ) -> Any:
        del mask  # passed through unchanged by `compute_mask`
        _check_dense(inputs)
        self._options.check_inputs_dtype(_backend.dtype_name(inputs))
        width, axis = self._layout(inputs.shape)
        if width != self._width:
            expected = (
                f"inputs whose encoding is {self._width} features wide "
                "(the layer was built for them; make a new layer for another width)"
            )
            shape = f"<shape={tuple(inputs.shape)}>"
            raise _arguments.invalid("inputs", expected, shape)
        rows = self._rows(
            self._parsed_positions(inputs, axis, start_index, positions),
            alone=self.merge is None,
        )
        return self._merge(inputs, rows, width, axis)

    def _parsed_positions(self, inputs, axis, start_index, positions):
        """The call's `Positions`: from token ids (`positions_from_ids`), or
        `start_index`/`positions` moved by `position_offset`."""
        options = self._options
        if not options.positions_from_ids:
            offset = options.position_offset
            start_index, start_checks = _positions.shifted(
                "start_index", start_index, offset
            )
            positions, position_checks = _positions.shifted(
                "positions", positions, offset
            )
            parsed = _positions.in_call(
                inputs, axis, start_index, positions, low=options.lowest_position
            )
            checks = start_checks + position_checks
            return dataclasses.replace(parsed, checks=parsed.checks + checks)
        if positions is not None:
            expected = "None with positions_from_ids=True (positions come from the ids)"
            raise _arguments.invalid("positions", expected, "<given>")
        return _positions.from_token_ids(inputs, options.padding_id, start_index)

    def _merge(self, inputs, encoding, width, axis):
        """Casts once, places the sequence axis, and merges with the inputs."""
        if self.merge is None:
            encoding = ops.cast(encoding, self.compute_dtype)
        elif encoding.dtype != inputs.dtype:  # a 16-bit policy: cast once
            encoding = ops.cast(encoding, inputs.dtype)
        if len(inputs.shape) > 3:
            # [L, D] or [B, L, D] onto the sequence and feature axes.
            shape = [1] * len(inputs.shape)
            shape[axis], shape[-1] = ops.shape(encoding)[-2], width
            if len(encoding.shape) == 3:
                shape[0] = ops.shape(encoding)[0]
            encoding = ops.reshape(encoding, tuple(shape))
        if self.merge == "add":
            if self.scale_inputs:
                inputs = inputs * ops.cast(math.sqrt(width), inputs.dtype)
            # `+`, not `ops.add`: Keras's TF `add` turns a [0, D] encoding
            # into a BiasAdd that rejects it (length-0 inputs).
            return inputs + encoding
        lead = ops.shape(inputs) if len(inputs.shape) == 2 else ops.shape(inputs)[:-1]
        encoding = ops.broadcast_to(encoding, (*lead, width))
        if self.merge == "concat":
            return ops.concatenate([inputs, encoding], axis=-1)
        return encoding

    def compute_output_spec(self, inputs, *args, **kwargs):
        # Keras would report the output of `compute_output_shape` as float32
        # without running `call`: integer inputs to "add"/"concat" are refused
        # when the model is built, not when it first runs.
        self._options.check_inputs_dtype(_backend.dtype_name(inputs))
        return super().compute_output_spec(inputs, *args, **kwargs)

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        dims = list(input_shape)
        width, _ = self._layout(dims)
        if self.merge == "add":
            return output_shape(dims)
        if self.merge == "concat":
            last = None if dims[-1] is None else dims[-1] + width
            return output_shape(dims[:-1] + [last])
        return output_shape((dims if len(dims) == 2 else dims[:-1]) + [width])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(self._options.to_config())
        return config
