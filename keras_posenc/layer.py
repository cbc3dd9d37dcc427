"""The `SinusoidalPositionEncoding` Keras layer."""

import math

import numpy as np
import tensorflow as tf

from keras_posenc import _checks, tables
from keras_posenc._keras import keras, output_shape

_NAN = float("nan")


@keras.saving.register_keras_serializable(package="keras_posenc")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Sinusoidal position encoding, exact to float32 rounding.

    The fixed encoding of Vaswani et al., "Attention Is All You Need"
    (2017), section 3.5: position `p` gets `sin(p * w_i)` and `cos(p * w_i)`
    with `w_i = max_wavelength ** (-2i / depth)`. Values are within 1.5e-7 of
    the exact ones at every position below 2**31 (float32 and int32
    arithmetic only, no float64 op, so it runs the same under XLA, on TPU
    and in TFLite). Under 16-bit dtype policies positions stay integers,
    the maths stay float32, and the encoding is cast once at the end.

    The layer has no weights. In `"compute"` mode the encoding of the actual
    positions is built with TF ops at every call, with no length limit. In
    `"lookup"` mode a table of `max_length` rows is built once in `build`
    and read by slicing (shared positions, broadcast over the batch) or with
    `tf.nn.embedding_lookup` over batch-tiled positions (per-example
    offsets or positions).

    Args:
        max_wavelength: float. The base `b` of the wavelengths, which run
            from `2 pi` to `2 pi b`. Defaults to `10000.0`.
        mode: `"compute"` or `"lookup"`. Defaults to `"compute"`.
        max_length: int. Rows of the lookup table; required with
            `mode="lookup"`, and must be `None` with `mode="compute"`.
        merge: `"add"` returns `inputs + PE`; `"concat"` concatenates PE
            after the features of `inputs` (needs `depth`); `None` returns
            PE alone, broadcast to `[batch, length, depth]`. Defaults to
            `"add"`.
        depth: int. Width of the encoding. Defaults to the last dimension
            of `inputs` (required with `merge="concat"`, and with
            `merge=None` on rank-2 inputs such as token ids).
        layout: `"interleaved"` (the paper's: sine on even columns, cosine
            on odd) or `"concatenated"` (`[sin | cos]`, as tensor2tensor,
            fairseq, Hugging Face and the TF tutorial lay it out). Defaults
            to `"interleaved"`.
        scale_inputs: bool. With `merge="add"`, return
            `inputs * sqrt(depth) + PE` as in section 3.4 of the paper.
            Defaults to `False`.
        out_of_range: what `"lookup"` mode does with a position outside
            `[0, max_length)`: `"error"` raises (eagerly, at trace time when
            the length is static, and as a graph assertion otherwise) and
            `"extend"` computes the exact rows past the table. Under XLA,
            where graph assertions are compiled out, `"error"` gives NaN
            rows instead: never a plausible wrong value. Defaults to
            `"error"`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `[batch, length, features]` floating tensor (`"add"`,
            `"concat"`), or any `[batch, length, ...]` tensor (`merge=None`).
        start_index: int, int scalar tensor, or int `[batch]` tensor.
            Position of the first token, shared or per example (cached
            decoding). Defaults to `0`.
        positions: int32/int64 tensor `[length]` or `[batch, length]`.
            Explicit positions (left padding, packed sequences); overrides
            `start_index`.
        mask: the Keras padding mask; passed through unchanged.

    Input shape:
        `(batch, length, features)`, or `(batch, length)` with `merge=None`.

    Output shape:
        `"add"`: as the input. `"concat"`: `(batch, length, features +
        depth)`. `None`: `(batch, length, depth)`.

    Example:

    >>> tokens = keras.Input(shape=(None,), dtype="int32")
    >>> x = keras.layers.Embedding(1000, 64)(tokens)
    >>> x = keras_posenc.SinusoidalPositionEncoding()(x)
    >>> x.shape
    (None, None, 64)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """

    def __init__(
        self,
        max_wavelength=10000.0,
        mode="compute",
        max_length=None,
        merge="add",
        depth=None,
        layout="interleaved",
        scale_inputs=False,
        out_of_range="error",
        **kwargs,
    ):
        max_wavelength = _checks.wavelength(max_wavelength)
        mode = _checks.choice("mode", mode, _checks.MODES)
        merge = _checks.choice("merge", merge, _checks.MERGES)
        layout = _checks.choice("layout", layout, _checks.LAYOUTS)
        out_of_range = _checks.choice("out_of_range", out_of_range, _checks.OUT_OF_RANGE)
        if depth is not None:
            depth = _checks.positive_int("depth", depth)
        if mode == "lookup":
            if max_length is None or not 0 < max_length <= _checks.POSITION_LIMIT:
                raise _checks.invalid(
                    "max_length",
                    "a positive integer <= 2**31 with mode='lookup'",
                    max_length,
                )
            max_length = _checks.positive_int("max_length", max_length)
        elif max_length is not None:
            raise _checks.invalid(
                "max_length",
                "None with mode='compute' (it has no length limit; "
                "use mode='lookup' for a table of max_length rows)",
                max_length,
            )
        if merge == "concat" and depth is None:
            raise _checks.invalid("depth", "a positive integer with merge='concat'", None)
        if not isinstance(scale_inputs, bool):
            raise _checks.invalid("scale_inputs", "a bool", scale_inputs)
        if scale_inputs and merge != "add":
            raise _checks.invalid(
                "scale_inputs", f"False unless merge='add' (merge={merge!r})", True
            )
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.mode = mode
        self.max_length = max_length
        self.merge = merge
        self.depth = depth
        self.layout = layout
        self.scale_inputs = scale_inputs
        self.out_of_range = out_of_range
        self.supports_masking = True
        self._table = None

    def _resolve_depth(self, input_shape):
        shape = tf.TensorShape(input_shape)
        rank = shape.rank
        if rank is None:
            raise ValueError(
                "Received an invalid value for `inputs`, expected a known rank. "
                f"Received: inputs.shape={shape}"
            )
        if self.merge is None and rank < 2:
            raise ValueError(
                "Received an invalid value for `inputs`, expected rank >= 2 "
                f"(batch, length, ...) with merge=None. Received: inputs.shape={shape}"
            )
        if self.merge is not None and rank != 3:
            raise ValueError(
                "Received an invalid value for `inputs`, expected rank 3 "
                f"(batch, length, features) with merge={self.merge!r}. "
                f"Received: inputs.shape={shape}"
            )
        last = shape[-1] if rank == 3 else None
        if self.merge == "add" and self.depth is not None and last not in (None, self.depth):
            raise _checks.invalid(
                "depth",
                f"the last dimension of `inputs` ({last}) with merge='add'",
                self.depth,
            )
        depth = self.depth or (last if self.merge != "concat" else None)
        if depth is None:
            raise ValueError(
                "Cannot infer `depth`: the last dimension of `inputs` is unknown "
                f"or not a feature axis. Pass `depth`. Received: inputs.shape={shape}"
            )
        return depth

    def build(self, input_shape):
        self._depth = self._resolve_depth(input_shape)
        # Kept so that a bare built layer can be exported with its input shape.
        self._posenc_input_shape = tuple(tf.TensorShape(input_shape).as_list())
        if self.mode == "lookup":
            # Built eagerly even when Keras builds the layer inside a graph.
            with tf.init_scope():
                table = tables.sinusoidal_table(
                    self.max_length,
                    self._depth,
                    max_wavelength=self.max_wavelength,
                    layout=self.layout,
                )
                # Row `max_length` is NaN: out-of-range ids are routed there
                # when graph assertions cannot run (XLA).
                self._table = tf.concat([table, tf.fill([1, self._depth], _NAN)], 0)
        super().build(input_shape)

    def call(self, inputs, start_index=0, positions=None, mask=None):
        del mask  # Passed through unchanged by `compute_mask`.
        if self.merge == "add" and not inputs.dtype.is_floating:
            raise _checks.invalid(
                "inputs",
                "a floating tensor with merge='add'",
                f"<tensor dtype={inputs.dtype.name}>",
            )
        static_length = inputs.shape[1]
        # A Python int when known: eager `tf.shape(x)[1]` costs a slice op.
        length = static_length if static_length is not None else tf.shape(inputs)[1]
        if positions is not None:
            encoding = self._encode_positions(self._check_positions(positions, static_length))
        else:
            start = self._check_start(start_index, length, static_length)
            if start.shape.rank == 0:
                encoding = self._encode_range(start, length, static_length)
            elif self.mode == "lookup":
                # Per-example offsets: the batch-tiled positions [B, L].
                tiled = start[:, None] + tf.range(length)[None, :]
                encoding = self._encode_positions(tiled)
            else:
                encoding = self._compute_range(start, length)
        dtype = inputs.dtype if self.merge is not None else self.compute_dtype
        encoding = tf.cast(encoding, dtype)
        if self.merge == "add":
            if self.scale_inputs:
                inputs = inputs * tf.cast(math.sqrt(self._depth), inputs.dtype)
            return inputs + encoding
        full = tf.stack([tf.shape(inputs)[0], length, self._depth])
        encoding = tf.broadcast_to(encoding, full)
        if self.merge == "concat":
            return tf.concat([inputs, encoding], axis=-1)
        return encoding

    # -- positions ---------------------------------------------------------

    def _check_start(self, start_index, length, static_length):
        if isinstance(start_index, (int, np.integer)) and not isinstance(start_index, bool):
            start = _checks.non_negative_int("start_index", int(start_index))
            if static_length is not None:
                _checks.position_range(start, static_length)
            return tf.constant(start, tf.int32)
        start = tf.convert_to_tensor(start_index)
        if not start.dtype.is_integer or start.shape.rank not in (0, 1):
            raise _checks.invalid(
                "start_index",
                "a non-negative int, int scalar tensor or int [batch] tensor",
                f"<tensor dtype={start.dtype.name} shape={start.shape}>",
            )
        value = tf.get_static_value(start)
        if value is not None and static_length is not None:
            if np.min(value, initial=0) < 0:
                raise _checks.invalid("start_index", "non-negative offsets", value)
            _checks.position_range(int(np.max(value, initial=0)), static_length)
        else:
            _assert_positions(
                tf.cast(start, tf.int64) + tf.cast(length, tf.int64) - 1,
                tf.cast(start, tf.int64),
            )
        return tf.cast(start, tf.int32)

    def _check_positions(self, positions, static_length):
        positions = tf.convert_to_tensor(positions)
        if not positions.dtype.is_integer:
            raise _checks.invalid(
                "positions", "an int32 or int64 tensor", f"<tensor dtype={positions.dtype.name}>"
            )
        if positions.shape.rank not in (1, 2):
            raise _checks.invalid(
                "positions",
                "shape (length,) or (batch, length)",
                f"<tensor shape={positions.shape}>",
            )
        if None not in (static_length, positions.shape[-1]) and positions.shape[-1] != static_length:
            raise _checks.invalid(
                "positions",
                f"{static_length} positions per sequence, the length of `inputs`",
                f"<tensor shape={positions.shape}>",
            )
        value = tf.get_static_value(positions)
        if value is not None:
            if value.size and value.min() < 0:
                raise _checks.invalid("positions", "non-negative positions", int(value.min()))
            if value.size and value.max() >= _checks.POSITION_LIMIT:
                raise _checks.invalid("positions", "positions < 2**31", int(value.max()))
        else:
            wide = tf.cast(positions, tf.int64)
            _assert_positions(wide, wide)
        return tf.cast(positions, tf.int32)

    # -- encoders ------------------------------------------------------------

    def _options(self):
        return self._depth, self.max_wavelength, self.layout

    def _compute_range(self, start, length):
        if tf.executing_eagerly():
            # A tensor length: one trace serves every length.
            length = tf.constant(length, tf.int32)
            return tables._compiled(*self._options())[0](start, length)
        return tables._encode_range(start, length, *self._options())

    def _compute_positions(self, positions):
        if tf.executing_eagerly():
            return tables._compiled(*self._options())[1](positions)
        return tables._encode_positions(positions, *self._options())

    def _encode_range(self, start, length, static_length):
        """Shared positions `start + [0, length)`: `[length, depth]`."""
        if self.mode == "compute":
            return self._compute_range(start, length)
        limit = self.max_length
        if static_length is not None and static_length > limit:
            return self._out_of_range(static_length - 1, start, length)
        start_value = tf.get_static_value(start)
        if start_value is not None and static_length is not None:
            end = int(start_value) + static_length
            if end > limit:
                return self._out_of_range(end - 1, start, length)
            return tf.slice(self._table, [int(start_value), 0], [static_length, -1])
        end = start + length
        in_range = tf.logical_and(start >= 0, end <= limit)

        def rows():
            return tf.slice(self._table, tf.stack([start, 0]), tf.stack([length, -1]))

        if self.out_of_range == "extend":
            return tf.cond(in_range, rows, lambda: self._compute_range(start, length))

        def fail():
            message = self._range_message("<runtime>")
            check = tf.debugging.Assert(False, [message, "last position:", end - 1])
            with tf.control_dependencies([check]):
                return tf.fill(tf.stack([length, self._depth]), _NAN)

        return tf.cond(in_range, rows, fail)

    def _encode_positions(self, positions):
        """Explicit positions `[L]` or `[B, L]`: `positions.shape + [depth]`."""
        if self.mode == "compute":
            return self._compute_positions(positions)
        limit = self.max_length
        value = tf.get_static_value(positions)
        if value is not None:
            if value.size and value.max() >= limit:
                return self._out_of_range(int(value.max()), None, None, positions)
            return tf.nn.embedding_lookup(self._table, positions)
        in_range = tf.logical_and(positions >= 0, positions < limit)
        if self.out_of_range == "extend":
            return tf.cond(
                tf.reduce_all(in_range),
                lambda: tf.nn.embedding_lookup(self._table, positions),
                lambda: self._compute_positions(positions),
            )
        check = tf.debugging.Assert(
            tf.reduce_all(in_range),
            [self._range_message("<runtime>"), "largest position:", tf.reduce_max(positions)],
        )
        # Without the assertion (XLA) out-of-range ids read the NaN row.
        with tf.control_dependencies([check]):
            safe = tf.where(in_range, positions, limit)
            return tf.nn.embedding_lookup(self._table, safe)

    def _out_of_range(self, position, start, length, positions=None):
        if self.out_of_range == "error":
            raise ValueError(self._range_message(position))
        if positions is not None:
            return self._compute_positions(positions)
        return self._compute_range(start, length)

    def _range_message(self, position):
        return (
            f"Position {position} is out of range for the lookup table of "
            f"`max_length`={self.max_length} rows (positions must be in "
            "[0, max_length)). Raise `max_length`, use out_of_range='extend', "
            "or mode='compute'."
        )

    # -- Keras plumbing --------------------------------------------------------

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)
        depth = self._resolve_depth(shape)
        dims = shape.as_list()
        if self.merge == "add":
            return output_shape(dims)
        if self.merge == "concat":
            last = None if dims[-1] is None else dims[-1] + depth
            return output_shape(dims[:-1] + [last])
        return output_shape(dims[:2] + [depth])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "mode": self.mode,
                "max_length": self.max_length,
                "merge": self.merge,
                "depth": self.depth,
                "layout": self.layout,
                "scale_inputs": self.scale_inputs,
                "out_of_range": self.out_of_range,
            }
        )
        return config


def _assert_positions(last, first):
    """Graph-time checks of int64 position bounds (compiled out under XLA)."""
    tf.debugging.assert_non_negative(
        first, message="Received an invalid value for `start_index`/`positions`: negative position"
    )
    tf.debugging.assert_less(
        last,
        tf.constant(_checks.POSITION_LIMIT, tf.int64),
        message="Received an invalid value for `start_index`/`positions`: positions must be < 2**31",
    )
