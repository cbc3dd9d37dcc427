"""ALiBi attention biases (Press et al., 2021), exact to float32 rounding.

"Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation" (https://arxiv.org/abs/2108.12409) adds ``slope_h *
(key - query)`` to the attention scores of head `h`. Here the product is
formed from the exact slope and the int32 distance within 0.6 float32 ulp
of the exact value, for every distance below 2**31, whatever the compute
dtype (`_alibi.bias`), and cast once to the dtype of the scores.
"""

from typing import Any

import numpy as np
from keras import backend, ops

from keras_posenc import _backend
from keras_posenc._alibi import bias as _bias
from keras_posenc._alibi import slopes as _slopes
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._hf import alibi as _hf_alibi
from keras_posenc._keras import PositionLayer, keras, output_shape

_DEFAULT_BIAS_MAX = 8


def alibi_slopes(heads: int, alibi_bias_max: int = 8) -> np.ndarray:
    """The ALiBi slope of each head, correctly rounded to float64.

    Press et al., 2021 (https://arxiv.org/abs/2108.12409), with the rule of
    the paper's repository for any head count: with ``c = 2**floor(log2
    heads)``, head ``h < c`` has slope ``2**(-(h + 1) * m / c)``, and the
    other ``heads - c`` heads take the slopes of `2c` heads at odd
    positions, ``2**(-(2j + 1) * m / (2c))`` (keras-hub, BLOOM, Falcon and
    MPT follow it), with ``m = alibi_bias_max``. Computed in `decimal`, so
    every value is the float64 nearest the exact power of two.

    Args:
        heads: int. Number of heads, at most 4096.
        alibi_bias_max: int. `m` above, from 1 to 64. Defaults to `8`
            (the paper's).

    Returns:
        float64 numpy array `[heads]`.

    Example:

    >>> keras_posenc.alibi_slopes(4)
    array([0.25      , 0.0625    , 0.015625  , 0.00390625])
    >>> keras_posenc.alibi_slopes(3).round(4)  # 2 heads, then 1 of 4
    array([0.0625, 0.0039, 0.25  ])

    References:
        - [Press et al., 2021](https://arxiv.org/abs/2108.12409)
    """
    heads = _slopes.check_heads(heads)
    return _slopes.slopes(heads, _slopes.check_bias_max(alibi_bias_max))


def _check_forms(symmetric, one_row):
    """Checks `symmetric` and `one_row` (the one-row form is causal only)."""
    _arguments.check_bool("symmetric", symmetric)
    _arguments.check_bool("one_row", one_row)
    if symmetric and one_row:
        expected = (
            "False with `symmetric=True`: the rows of -|j - i| differ by more "
            "than a constant, so one row cannot stand for them"
        )
        raise _arguments.invalid("one_row", expected, one_row)


def _resolve(heads, alibi_bias_max, slopes):
    """``(heads, slopes)``: the checked head count (or `None`) and float64
    slopes (or `None`, computed once the head count is known)."""
    if slopes is not None:
        slopes = _slopes.check_slopes(slopes)
        if alibi_bias_max != _DEFAULT_BIAS_MAX:
            expected = (
                "8 (the default) with explicit `slopes`, which it would not change"
            )
            raise _arguments.invalid("alibi_bias_max", expected, alibi_bias_max)
        if heads is not None and heads != len(slopes):
            expected = f"{len(slopes)}, the number of `slopes`"
            raise _arguments.invalid("heads", expected, heads)
        return len(slopes), slopes
    _slopes.check_bias_max(alibi_bias_max)
    return (None if heads is None else _slopes.check_heads(heads)), None


class _Split:
    """The float32 ``(high, low)`` slope pairs, made on the host once per
    head count (outside `torch.compile`) and kept as numpy."""

    def __init__(self, alibi_bias_max, slopes):
        self._max, self._slopes, self._pairs = alibi_bias_max, slopes, {}

    def __call__(self, heads):
        pair = self._pairs.get(heads)
        if pair is None:
            pair = self._pairs[heads] = _backend.host_work(self._make)(heads)
        return pair

    def _make(self, heads):
        values = self._slopes
        if values is None:
            values = _slopes.slopes(heads, self._max)
        return _bias.slope_constants(_slopes.split(values))


def _query_positions(start_index, query_length, key_length, scores=None):
    """The query positions (int32 `[q]` or `[B, q]`) and their run-time checks.

    By default the queries are the last `query_length` of the keys
    (self-attention, with a cache too): positions ``k - q .. k - 1``, or
    ``0 .. q - 1`` when there are more queries than keys.
    """
    if start_index is None:
        if isinstance(query_length, int) and isinstance(key_length, int):
            start = max(key_length - query_length, 0)
            return ops.arange(start, start + query_length, dtype="int32"), ()
        start = ops.maximum(key_length - query_length, 0)
        return ops.cast(start, "int32") + ops.arange(query_length, dtype="int32"), ()
    if scores is not None:
        parsed = _positions.in_call(scores, 2, start_index, None, low=0)
    else:
        parsed = _positions.span(start_index, query_length, low=0)
    known = parsed.known_range
    if known is not None:  # no numpy on the call path (`torch.compile`)
        # Offset, not `arange(first, end)`: `end` may be 2**31, past int32.
        return ops.arange(known[1] - known[0], dtype="int32") + known[0], parsed.checks
    return parsed.as_values(), parsed.checks


@_backend.on_keras_device
def alibi_bias(
    heads: int,
    query_length: Any,
    key_length: Any = None,
    *,
    start_index: Any = None,
    symmetric: bool = False,
    one_row: bool = False,
    alibi_bias_max: int = 8,
    slopes: Any = None,
    dtype: Any = "float32",
) -> Any:
    """The ALiBi bias `[1, heads, query, key]`, exact to float32 rounding.

    The linear biases of Press et al., 2021
    (https://arxiv.org/abs/2108.12409): ``slope_h * (j - i)`` for the query
    at position `i` and the key at position `j` (causal form; mask the
    future keys as usual), or ``-slope_h * |j - i|`` with `symmetric`
    (bidirectional). Keys are at positions ``0 .. key_length - 1``; queries
    at ``start_index .. start_index + query_length - 1``. Each value is
    within 0.6 float32 ulp of the exact product for every distance below
    2**31 (the distance is never rounded, see `keras_posenc.alibi`), then
    cast once to `dtype`; float16 saturates at +-65504 instead of inf.
    For attention code of one's own, e.g. the `bias` of
    `keras.ops.dot_product_attention` (which takes `[batch, query, heads,
    dim]` inputs and a bias broadcast to `[batch, heads, query, key]`).

    Args:
        heads: int. Number of heads (at most 4096).
        query_length: int (or an int scalar tensor on TensorFlow).
        key_length: int, or as `query_length`. Defaults to `query_length`.
        start_index: int, or int tensor scalar or `[batch]`: position of
            the first query. Defaults to `key_length - query_length` (the
            queries are the last keys, as in decoding with a cache; 0 when
            there are more queries than keys).
        symmetric: bool. The bidirectional form ``-|j - i|``. Defaults to
            `False`.
        one_row: bool. Return only the last query's row, ``slope_h * (j -
            last)``, `[1, heads, 1, key_length]`, to broadcast over the
            queries (keras-hub's and Hugging Face's form: under softmax the
            same attention weights as the full causal bias, whose rows differ
            from it by a constant). Not with `symmetric`. Defaults to `False`.
        alibi_bias_max: int. The `m` of `alibi_slopes`. Defaults to `8`.
        slopes: list of floats in ``[2**-64, 2**64]``, one per head, used
            instead of `alibi_slopes(heads, alibi_bias_max)`. Defaults to
            `None`.
        dtype: floating dtype of the result. Defaults to `"float32"`.

    Returns:
        `[1, heads, query_length, key_length]` tensor (`query_length` 1
        with `one_row`), or `[batch, ...]` for a `[batch]` `start_index`.

    Example:

    >>> bias = keras_posenc.alibi_bias(2, 3)  # head 0, slope 1/16
    >>> [[float(v) for v in row] for row in bias[0, 0]]
    [[0.0, 0.0625, 0.125], [-0.0625, 0.0, 0.0625], [-0.125, -0.0625, 0.0]]
    >>> step = keras_posenc.alibi_bias(2, 1, 3)  # one decoding step
    >>> [float(v) for v in step[0, 0, 0]]
    [-0.125, -0.0625, 0.0]
    >>> row = keras_posenc.alibi_bias(2, 3, one_row=True)  # the last query's
    >>> tuple(row.shape), [float(v) for v in row[0, 0, 0]]
    ((1, 2, 1, 3), [-0.125, -0.0625, 0.0])

    References:
        - [Press et al., 2021](https://arxiv.org/abs/2108.12409)
    """
    heads = _slopes.check_heads(heads)
    heads, values = _resolve(heads, alibi_bias_max, slopes)
    _check_forms(symmetric, one_row)
    dtype = _arguments.check_floating_dtype(dtype)
    q, q_checks = _positions.size("query_length", query_length, low=0)
    if key_length is None:
        k, k_checks = q, ()
    else:
        k, k_checks = _positions.size("key_length", key_length, low=0)
    queries, checks = _query_positions(start_index, q, k)
    high, low = _Split(alibi_bias_max, values)(heads)
    bias = _bias.bias(
        queries, k, high, low, symmetric=symmetric, one_row=one_row, dtype=dtype
    )
    return _backend.guard(bias, (*q_checks, *k_checks, *checks))


@keras.saving.register_keras_serializable(package="keras_posenc")
class AlibiBias(PositionLayer):
    """Adds ALiBi biases to attention scores, exact to float32 rounding.

    The linear biases of Press et al., 2021, "Train Short, Test Long"
    (https://arxiv.org/abs/2108.12409): head `h` adds ``slope_h * (j -
    i)`` to the score of the query at position `i` and the key at position
    `j` (causal form), or ``-slope_h * |j - i|`` (`symmetric`, for
    bidirectional attention). Slopes follow the paper's repository for any
    head count (`keras_posenc.alibi_slopes`), or are given. Each bias is
    within 0.6 float32 ulp of the exact product for every distance below
    2**31 and every head count, whatever the compute dtype: the int32
    distance is never rounded to bfloat16 or float16 (keras-hub's layer
    rounds a distance of 1000 to a multiple of 4 under `mixed_bfloat16`),
    and the float32 bias is cast once to the dtype of the scores and added
    there; in float16 it saturates at +-65504 instead of becoming inf.

    The causal form differs from keras-hub's and Hugging Face's biases
    (``slope * (j - (key_length - 1))``, or ``slope * j``) by a constant
    per query row, which softmax ignores: the attention weights are the
    same. `keras_posenc.compat.AlibiBias` gives keras-hub's values.

    Args:
        heads: int. The number of heads; checked against the scores.
            Defaults to `None` (read from the scores).
        alibi_bias_max: int. The `m` of the slopes ``2**(-m (h + 1) /
            heads)``, from 1 to 64 (keras-hub's and MPT's argument).
            Defaults to `8`.
        slopes: list of floats in ``[2**-64, 2**64]``: one slope per head,
            instead of the computed ones. Defaults to `None`.
        symmetric: bool. Use ``-|j - i|`` (bidirectional). Defaults to
            `False`.
        one_row: bool. Add one bias row per head to every query row: the
            last query's, ``slope_h * (j - last)`` (keras-hub's and Hugging
            Face's form). Under softmax the attention weights are those of
            the full causal bias (its rows differ from this one by a
            constant), and no `[heads, query, key]` bias is formed: the add
            costs what adding a precomputed one-row bias costs. Not with
            `symmetric`. Defaults to `False`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        attention_scores: floating tensor `[batch, heads, query, key]`.
        start_index: int, int scalar tensor or `[batch]` tensor: position
            of the first query (keys are at ``0 .. key - 1``). Defaults to
            `key - query` (the queries are the last keys: prefill, and
            decoding with a cache).

    Input shape:
        `(batch, heads, query, key)`.

    Output shape:
        As the input.

    Example:

    >>> scores = np.zeros((1, 4, 1, 3), "float32")  # one decoding step
    >>> out = keras_posenc.AlibiBias()(scores)
    >>> for head in range(4):
    ...     print([float(v) for v in out[0, head, 0]])
    [-0.5, -0.25, 0.0]
    [-0.125, -0.0625, 0.0]
    [-0.03125, -0.015625, 0.0]
    [-0.0078125, -0.00390625, 0.0]

    References:
        - [Press et al., 2021](https://arxiv.org/abs/2108.12409)
    """

    def __init__(
        self,
        heads: int | None = None,
        alibi_bias_max: int = 8,
        slopes: Any = None,
        symmetric: bool = False,
        one_row: bool = False,
        **kwargs: Any,
    ) -> None:
        heads, values = _resolve(heads, alibi_bias_max, slopes)
        _check_forms(symmetric, one_row)
        super().__init__(**kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self.heads, self.alibi_bias_max = heads, int(alibi_bias_max)
        self.slopes, self.symmetric, self.one_row = values, symmetric, one_row
        self._split = _Split(self.alibi_bias_max, values)

    @classmethod
    def from_hf_config(cls, config: Any, **kwargs: Any) -> "AlibiBias":
        """The layer of a Hugging Face `config.json` with ALiBi.

        The model types of transformers 5.24.0 that use ALiBi, read as
        their modeling code builds the bias: `"bloom"` (`n_head`, alias
        `num_attention_heads`), `"mpt"` (`n_heads`; `attn_config.alibi`
        must be true, and `attn_config.alibi_bias_max` 8: transformers'
        MPT ignores it and uses 8), `"falcon"` with `"alibi": true`
        (`num_attention_heads`; Falcon adds its bias to the unscaled
        scores and divides both by ``sqrt(head_dim)``, so the slopes here
        are divided by ``sqrt(hidden_size // num_attention_heads)``, exact,
        for scores already scaled). Every other `model_type` is refused by
        name (Baichuan-13B and Jais use ALiBi through remote code, not
        transformers). The layer's causal form equals transformers' biases
        up to a constant per query row, which softmax ignores.

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json` file or of a directory holding one.
            **kwargs: other `AlibiBias` arguments (`name`, `symmetric`,
                ...), not one read from `config`.

        Returns:
            An `AlibiBias`.

        Example:

        >>> config = {"model_type": "bloom", "n_head": 16}
        >>> keras_posenc.AlibiBias.from_hf_config(config).heads
        16
        """
        return cls(**_hf_alibi.layer_arguments(config, kwargs))

    def build(self, input_shape):
        self._heads_of(input_shape)
        super().build(input_shape)

    def _heads_of(self, shape):
        shape = tuple(shape)
        if len(shape) != 4 or shape[1] is None:
            expected = "a tensor [batch, heads, query, key] with a known heads axis"
            raise _arguments.invalid("attention_scores", expected, f"<shape={shape}>")
        if self.heads is not None and shape[1] != self.heads:
            expected = f"{self.heads} heads on axis 1 (heads={self.heads})"
            raise _arguments.invalid("attention_scores", expected, f"<shape={shape}>")
        return int(shape[1])

    @_backend.on_keras_device
    def call(self, attention_scores: Any, start_index: Any = None) -> Any:
        heads = self._heads_of(attention_scores.shape)
        dtype = _backend.dtype_name(attention_scores)
        if not backend.is_float_dtype(dtype):
            expected = "a floating tensor [batch, heads, query, key]"
            raise _arguments.invalid("attention_scores", expected, f"<dtype={dtype}>")
        q, k = attention_scores.shape[2], attention_scores.shape[3]
        if q is None or k is None:
            q, k = ops.shape(attention_scores)[2], ops.shape(attention_scores)[3]
        queries, checks = _query_positions(start_index, q, k, attention_scores)
        high, low = self._split(heads)
        forms = {"symmetric": self.symmetric, "one_row": self.one_row, "dtype": dtype}
        return _bias.added(attention_scores, queries, k, high, low, checks, **forms)

    def compute_output_shape(self, input_shape):
        return output_shape(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "heads": self.heads,
                "alibi_bias_max": self.alibi_bias_max,
                "slopes": self.slopes,
                "symmetric": self.symmetric,
                "one_row": self.one_row,
            }
        )
        return config
