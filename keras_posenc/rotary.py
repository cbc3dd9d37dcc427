"""Rotary position embeddings (RoPE), exact to float32 rounding at every position."""

from collections.abc import Mapping, Sequence
from typing import Any

from keras import backend, ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import positions as _positions
from keras_posenc._checks.options import ShapeMemo, check_table_options
from keras_posenc._diffusers import layers as _diffusers
from keras_posenc._exact.rows import ComputedRows, decoding_range
from keras_posenc._hf import parts as _hf_parts
from keras_posenc._keras import PositionLayer, keras, output_shape
from keras_posenc._rope import axes as _axes
from keras_posenc._rope import inputs as _rotary_inputs
from keras_posenc._rope import rotation as _rotation
from keras_posenc._rope.config import (
    CONFIG_CHANGES,
    LAYOUTS,
    RopeConfig,
    check_rotary_dim,
    check_sizes,
)


@_backend.not_autograph
@_backend.on_keras_device
def apply_rotary(x: Any, cos: Any, sin: Any, layout: str = "half") -> Any:
    """Rotates the first ``cos.shape[-1]`` features of `x` by RoPE angles.

    The rotation of Su et al., "RoFormer" (2021),
    https://arxiv.org/abs/2104.09864: each feature pair ``(a, b)`` becomes
    ``(a cos - b sin, b cos + a sin)``; pairs are ``(i, i + d/2)`` with
    `layout="half"` and ``(2i, 2i+1)`` with `"interleaved"`; the features
    past ``d = cos.shape[-1]`` pass through. The building block of
    `RotaryEmbedding` (the same function), for attention code of your own,
    with `cos` and `sin` from `rotary_cos_sin` (same `layout`).

    Args:
        x: floating tensor ``[..., features]``.
        cos, sin: float tensors ``[..., d]`` of one shape, broadcastable
            against ``x[..., :d]`` (e.g. ``cos[:, None]`` for `x` of shape
            ``[length, heads, features]``); `d` even, at most `features`.
        layout: `"half"` or `"interleaved"` (a `"half_per_axis"` rotation
            is `"half"` on each axis's features). Defaults to `"half"`.

    Returns:
        `x` rotated: same shape and dtype, computed in float32 (float64 for
        float64 inputs) and cast once.

    Example:

    >>> from keras_posenc.rotary import apply_rotary
    >>> q = np.ones((8, 2, 64), "float32")  # [length, heads, dim]
    >>> cos, sin = keras_posenc.rotary_cos_sin(np.arange(8), 64)
    >>> rotated = apply_rotary(q, cos[:, None], sin[:, None])
    >>> tuple(rotated.shape)
    (8, 2, 64)
    """
    layout = _arguments.check_choice("layout", layout, LAYOUTS)
    if layout == "half_per_axis":
        expected = (
            "'half' or 'interleaved' (for 'half_per_axis', rotate each axis's "
            "features with layout='half')"
        )
        raise _arguments.invalid("layout", expected, layout)
    x, cos, sin = (ops.convert_to_tensor(t) for t in (x, cos, sin))
    dtype, features = _backend.dtype_name(x), x.shape[-1]
    if not backend.is_float_dtype(dtype) or not _arguments.is_int(features):
        expected = "a floating tensor with a known last dimension"
        raise _arguments.invalid("x", expected, f"<dtype={dtype} shape={x.shape}>")
    dim = cos.shape[-1]
    if tuple(sin.shape) != tuple(cos.shape):
        expected = f"the shape of `cos` {tuple(cos.shape)}"
        raise _arguments.invalid("sin", expected, f"<shape={tuple(sin.shape)}>")
    if not _arguments.is_int(dim) or dim <= 0 or dim % 2 or dim > features:
        expected = f"a positive even last dimension, at most {features} (`x`'s)"
        raise _arguments.invalid("cos", expected, f"<shape={tuple(cos.shape)}>")
    signs = _rotation.pair_signs(dim, layout).astype(_backend.dtype_name(sin))
    signed = ops.multiply(sin, signs)  # the tensor's device: no numpy operator
    return _rotation.rotate(x, cos, signed, layout, dim, features)


@_backend.not_autograph
@_backend.on_keras_device
def rotary_cos_sin(
    positions: Any,
    dim: int,
    *,
    max_wavelength: float = 10000.0,
    rope_scaling: Mapping[str, Any] | None = None,
    layout: str = "half",
    inverse_frequencies: Sequence[float] | None = None,
    axes_dim: Sequence[int] | None = None,
    axes_frequencies: str = "per_axis",
    frequency_unit: str = "radians",
) -> tuple[Any, Any]:
    """cos and sin of the RoPE angles ``p * w_i``, times the attention factor.

    The tables of Su et al., "RoFormer" (2021), https://arxiv.org/abs/2104.09864,
    with any Hugging Face `rope_type`, within 2e-7 of the exact values (for
    the frequencies in use) at every position in `[-2**31, 2**31)`.

    Args:
        positions: int array or tensor, rank 0 to 3. With an
            `mrope_section`, rank 3 means ``[3, batch, length]`` (temporal,
            height, width) as in transformers; lower ranks are text. With
            `axes_dim`: position ids ``[..., n_axes]`` (rank 1 to 4), int
            or float (FLUX's `ids`).
        dim: int. The rotary dimension (even, at most 65536); with
            `axes_dim`, `sum(axes_dim)`.
        max_wavelength, rope_scaling, layout, inverse_frequencies: as in
            `RotaryEmbedding`.
        axes_dim, axes_frequencies, frequency_unit: as in `RotaryEmbedding`.

    Returns:
        `(cos, sin)`, float32 tensors of shape `positions.shape + [dim]`
        (``[batch, length, dim]`` for multimodal positions,
        `positions.shape[:-1] + [dim]` with `axes_dim`): `[c | c]` with
        `layout="half"`, `[c0, c0, c1, c1, ...]` with `"interleaved"`,
        ``[c_0 | c_0 | c_1 | c_1]`` (axis by axis) with `"half_per_axis"`.

    Example:

    >>> cos, sin = keras_posenc.rotary_cos_sin(np.arange(8), 64)
    >>> tuple(cos.shape)
    (8, 64)
    """
    dim = check_rotary_dim(dim, "dim")
    if axes_dim is not None:
        options = (max_wavelength, rope_scaling, layout, inverse_frequencies)
        return _axes.cos_sin(
            positions, dim, axes_dim, *options, axes_frequencies, frequency_unit
        )
    _axes.check_frequencies(axes_frequencies, None)
    _axes.check_unit(frequency_unit, None)
    config = RopeConfig.build(max_wavelength, rope_scaling, inverse_frequencies)
    config.check_dim(dim, "dim")
    layout, _ = _axes.check_layout(layout, None)
    parsed = _positions.explicit(
        "positions", positions, low=_arguments.POSITION_MIN, ranks=(0, 1, 2, 3)
    )
    table = _rotation.function_rows(config, dim)(parsed)
    sections = config.channel_rows(dim)
    shape = getattr(parsed.values, "shape", ())  # a Python int has none
    if sections is not None and len(shape) == 3:
        _rotary_inputs.check_section_shape(shape)
        table = _rotation.by_section([table[row] for row in range(3)], sections)
    return _rotation.cos_sin(table, dim, config.attention_factor, layout, signed=False)


def grid_position_ids(
    grid_shape: Sequence[int], *, text_length: int = 0, n_axes: int | None = None
) -> Any:
    """Position ids of a grid of patches, for N-axis RoPE (`axes_dim`).

    The ids of FLUX's `EmbedND` (https://github.com/black-forest-labs/flux)
    and of 2-D axial RoPE for ViT patch grids (Heo et al., 2024,
    https://arxiv.org/abs/2403.13298): one row per patch, in row-major
    order, holding its index along each axis of the grid; `text_length`
    rows of zeros first (FLUX's text ids), and with `n_axes` larger than
    the grid's rank the grid's indices fill the last axes, the first ones
    being 0 (FLUX's ``(0, row, column)``).

    Args:
        grid_shape: list of positive ints, e.g. ``(height, width)`` in
            patches.
        text_length: int. Rows of zeros before the grid. Defaults to `0`.
        n_axes: int. Columns of the ids, at least `len(grid_shape)`.
            Defaults to `len(grid_shape)`.

    Returns:
        int32 numpy array ``[text_length + prod(grid_shape), n_axes]``.

    Example:

    >>> keras_posenc.grid_position_ids((2, 3)).tolist()
    [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    >>> keras_posenc.grid_position_ids((1, 2), text_length=1, n_axes=3).tolist()
    [[0, 0, 0], [0, 0, 0], [0, 0, 1]]
    """
    return _axes.grid_ids(grid_shape, text_length, n_axes)


def vision_position_ids(
    grid_thw: Sequence[Sequence[int]],
    *,
    spatial_merge_size: int = 1,
    include_temporal: bool = False,
    coordinates: str = "index",
) -> Any:
    """Patch ids of images and videos in a vision tower's own order.

    The ids transformers' vision towers rotate by (its
    `get_vision_position_ids`, Qwen2-VL, https://arxiv.org/abs/2409.12191,
    and its family): per image or video ``(t, h, w)`` in patches, the
    ``(row, column)`` of each patch, laid out block by block over
    ``spatial_merge_size x spatial_merge_size`` windows (the patches one
    merged token will hold are neighbours), the frames one after another.
    With `spatial_merge_size=1` the grid is row-major: Pixtral's order (one
    image ``(1, h, w)`` each). With `include_temporal` a frame index comes
    first (``(t, row, column)``). With `coordinates="normalized_centers"`
    they are DINOv3's (Siméoni et al., 2025, https://arxiv.org/abs/2508.10104)
    patch centres normalized to [-1, 1] per axis, float32 as its
    `get_patches_center_coordinates` computes them (bit for bit). Feed them
    to the layer of `RotaryEmbedding.from_hf_config(config, part="vision")`.

    Args:
        grid_thw: list of ``(t, h, w)`` lists of positive ints (the
            model's `image_grid_thw` / `video_grid_thw`), `h` and `w`
            multiples of `spatial_merge_size`.
        spatial_merge_size: positive int. The model's
            `vision_config.spatial_merge_size` (2 for Qwen2-VL and most of
            its family). Defaults to `1`.
        include_temporal: bool. Put the frame index first. Defaults to
            `False`.
        coordinates: `"index"` (integer ``(row, column)``: Qwen2-VL, Pixtral
            and the other towers of `part="vision"`) or
            `"normalized_centers"` (``(2 (row + 0.5) / h - 1, 2 (column +
            0.5) / w - 1)``: DINOv3; without `include_temporal`). Defaults
            to `"index"`.

    Returns:
        int32 numpy array ``[sum(t * h * w), 2]`` (``[..., 3]`` with
        `include_temporal`); float32 with `"normalized_centers"`.

    Example:

    >>> keras_posenc.vision_position_ids([(1, 2, 4)], spatial_merge_size=2).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
    >>> keras_posenc.vision_position_ids(
    ...     [(1, 2, 4)], coordinates="normalized_centers")[:4].tolist()
    [[-0.5, -0.75], [-0.5, -0.25], [-0.5, 0.25], [-0.5, 0.75]]
    """
    return _axes.vision_ids(grid_thw, spatial_merge_size, include_temporal, coordinates)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RotaryEmbedding(PositionLayer):
    """Rotary position embedding (RoPE), exact to float32 rounding.

    The rotation of [RoFormer](https://arxiv.org/abs/2104.09864) (Su et al.,
    2021): features are paired and each pair is turned by the angle `p * w_i`
    of its position `p`, so that `<R_p q, R_k k>` depends on `p - k` only.
    The frequencies `w_i` follow Hugging Face transformers for every
    `rope_type` (linear; dynamic NTK; [YaRN](https://arxiv.org/abs/2309.00071);
    Llama 3; [LongRoPE](https://arxiv.org/abs/2402.13753); proportional) and
    its multimodal sections (Qwen2-VL, Qwen3-VL), computed exactly on the
    host. cos and sin come from the exact phase engine: within 2e-7 at every
    position in `[-2**31, 2**31)`, where float32 angles lose `p * 2**-24`
    radians (0.06 at position 2**20). The rotation runs in float32 under
    16-bit policies and is cast once at the end; a decoding step gives the
    bits of the full call. The layer has no weights.

    Args:
        max_wavelength: float. The base (`rope_theta`). Defaults to
            `10000.0`.
        rope_scaling: `None` or a dict of transformers' `rope_parameters`
            keys, e.g. `{"rope_type": "linear", "factor": 4.0}`: `rope_type`
            is one of `"default"`, `"linear"`, `"dynamic"` (NTK scaling
            fixed at construction for a serving length `seq_len`, by
            default `original_max_position_embeddings`, i.e. unscaled:
            transformers' per-call update cannot live in a compiled graph),
            `"yarn"`, `"llama3"`, `"longrope"` (long factors when `seq_len`
            exceeds `original_max_position_embeddings`), `"proportional"`.
            Any type takes `mrope_section` (multimodal RoPE: frequencies
            per position row, with `positions` `[3, batch, length]`) and
            `mrope_interleaved`. Every key is applied; any other is refused.
            Defaults to `None`.
        rotary_dim: int. Rotate the first `rotary_dim` features (even, at
            most 65536) and pass the rest through. Defaults to all features.
        layout: `"half"` (rotate_half: Hugging Face, Llama, GPT-NeoX,
            keras-hub), `"interleaved"` (pairs `(2i, 2i+1)`: GPT-J,
            RoFormer) or, with `axes_dim` of equal axes, `"half_per_axis"`
            (each axis rotate_half within its own `axes_dim[i]` features,
            cos ``[h, h, w, w]``: Gemma 4's vision tower). Defaults to
            `"half"`.
        inverse_frequencies: a checkpoint's own `inv_freq` array (`rotary_dim
            / 2` values, float32 or float64), used exactly as given;
            `rope_scaling` then only sets the attention factor and the
            sections. Defaults to `None`.
        sequence_axis: int. Axis of positions. Defaults to `1`.
        feature_axis: int. Axis of features. Defaults to `-1`.
        mode: `"compute"` or `"lookup"`. `"compute"` computes the cos/sin
            of the call's positions (any int32 position, no length limit).
            `"lookup"` builds the cos/sin of positions `[0, max_length)`
            once in `build` (as serving engines keep a cos/sin cache) and
            reads them with the call's start, also a run-time one (a
            dynamic slice): the cheapest path, with compute mode's bits
            (under XLA with a run-time start, XLA may round the rotation's
            multiply-adds otherwise: within 2 ulp). Multimodal
            (`[3, batch, length]`) positions are computed. Defaults to
            `"compute"`.
        max_length: int. Positions of the lookup table; required with
            `mode="lookup"` (a table of at most 1 GiB unless
            `KERAS_POSENC_MAX_TABLE_BYTES` allows more), `None` with
            `"compute"`.
        out_of_range: what `"lookup"` mode does with a position outside
            `[0, max_length)`: `"error"` raises (eagerly, at trace time
            when static, as a graph assertion otherwise; under XLA or
            `jax.jit` the outputs are NaN instead: the whole span when a
            run-time start leaves the table) and `"extend"` computes the
            exact values, negative positions too. Defaults to `"error"`.
        axes_dim: list of even ints, or `None`. N-axis RoPE (FLUX's
            `EmbedND`; 2-D axial RoPE for patch grids): calls take position
            ids ``[..., n_axes]`` and axis `i` rotates the next
            `axes_dim[i]` features with its own frequencies
            ``max_wavelength ** (-2k / axes_dim[i])``, concatenated in axis
            order (`"interleaved"` pairs them as FLUX does). Ids may be int
            or float (within 2e-7 at every float32 id below 2**31 in
            magnitude); `sum(axes_dim)` must be the head dim. Only
            `max_wavelength`, `layout` and the axes apply with it.
            Defaults to `None`.
        axes_frequencies: how the axes of `axes_dim` share frequencies:
            `"per_axis"` (each axis its own ladder, as above: FLUX, and the
            vision towers of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V and
            their family) or `"strided"` (one ladder ``max_wavelength **
            (-2k / sum(axes_dim))`` dealt to the axes in turn, axis `i`
            taking rungs ``i, i + n_axes, ...``: Pixtral's vision tower,
            whose rows take the even rungs and columns the odd ones; equal
            axes only). Defaults to `"per_axis"`.
        frequency_unit: what the frequencies of `axes_dim` count per unit
            of position: `"radians"` (RoFormer's angle ``p * w``) or
            `"turns"` (the angle is ``2 pi p w``, the ``2 pi`` exact:
            DINOv3's vision transformer, whose angles are ``2 pi x /
            period`` at patch coordinates ``x`` in [-1, 1] and periods
            ``max_wavelength ** (2k / axes_dim[i])``). Defaults to
            `"radians"`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: floating tensor, e.g. `[batch, length, heads, dim]` or
            `[batch, length, dim]`.
        start_index: int, int scalar tensor or int `[batch]` tensor.
            Position of the first token (cached decoding). Defaults to `0`.
        positions: int tensor `[length]` or `[batch, length]` (left
            padding, packed sequences), or `[3, batch, length]` (temporal,
            height, width) with an `mrope_section`; overrides
            `start_index`. Positions may be negative (a rotation backwards).
            With `axes_dim` (required): position ids ``[length, n_axes]``
            or ``[batch, length, n_axes]``, int or float, e.g. from
            `grid_position_ids`.

    Example:

    >>> q = np.ones((2, 16, 4, 64), "float32")  # [batch, length, heads, dim]
    >>> rope = keras_posenc.RotaryEmbedding(max_wavelength=500000.0)
    >>> tuple(rope(q, start_index=3).shape)
    (2, 16, 4, 64)

    FLUX's position ids (text, then a 2 x 4 grid of patches):

    >>> flux = keras_posenc.RotaryEmbedding(
    ...     axes_dim=(16, 56, 56), layout="interleaved")
    >>> ids = keras_posenc.grid_position_ids((2, 4), text_length=8, n_axes=3)
    >>> tuple(flux(np.ones((1, 16, 2, 128), "float32"), positions=ids).shape)
    (1, 16, 2, 128)

    References:
        - [Su et al., 2021](https://arxiv.org/abs/2104.09864)
        - [Peng et al., 2023 (YaRN)](https://arxiv.org/abs/2309.00071)
        - [Ding et al., 2024 (LongRoPE)](https://arxiv.org/abs/2402.13753)
        - [Wang et al., 2024 (Qwen2-VL, M-RoPE)](https://arxiv.org/abs/2409.12191)
        - [Heo et al., 2024 (axial RoPE for ViT)](https://arxiv.org/abs/2403.13298)
        - [FLUX](https://github.com/black-forest-labs/flux) (`EmbedND`)
    """

    # Config keys that meant something else in earlier versions.
    config_changes = CONFIG_CHANGES

    def __new__(cls, *args: Any, **kwargs: Any) -> "RotaryEmbedding":
        # Keras's `__new__` walks every argument (its automatic config)
        # before `__init__`: lists are sized first, reading no element
        # (positional ones where the signature is this class's own).
        own = args if cls.__init__ is RotaryEmbedding.__init__ else ()
        check_sizes(
            own[1] if len(own) > 1 else kwargs.get("rope_scaling"),
            own[4] if len(own) > 4 else kwargs.get("inverse_frequencies"),
        )
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        max_wavelength: float = 10000.0,
        rope_scaling: Mapping[str, Any] | None = None,
        rotary_dim: int | None = None,
        layout: str = "half",
        inverse_frequencies: Sequence[float] | None = None,
        sequence_axis: int = 1,
        feature_axis: int = -1,
        mode: str = "compute",
        max_length: int | None = None,
        out_of_range: str = "error",
        axes_dim: Sequence[int] | None = None,
        axes_frequencies: str = "per_axis",
        frequency_unit: str = "radians",
        **kwargs: Any,
    ) -> None:
        config = RopeConfig.build(
            max_wavelength, rope_scaling, inverse_frequencies, rotary_dim
        )
        axes = None
        if axes_dim is None:
            layout, blocks = _axes.check_layout(layout, None)
            axes_frequencies = _axes.check_frequencies(axes_frequencies, None)
            frequency_unit = _axes.check_unit(frequency_unit, None)
        else:
            axes_dim = _axes.check_axes_dim(axes_dim)
            layout, blocks = _axes.check_layout(layout, axes_dim)
            axes_frequencies = _axes.check_frequencies(axes_frequencies, axes_dim)
            frequency_unit = _axes.check_unit(frequency_unit, axes_dim)
            _axes.check_options(
                axes_dim,
                rope_scaling=rope_scaling,
                inverse_frequencies=inverse_frequencies,
                rotary_dim=(rotary_dim, None),
                mode=(mode, "compute"),
            )
            axes = _axes.axes_rows(
                axes_dim, config.max_wavelength, axes_frequencies, frequency_unit
            )
        sequence_axis = _arguments.check_int("sequence_axis", sequence_axis)
        feature_axis = _arguments.check_int("feature_axis", feature_axis)
        max_length = check_table_options(mode, max_length, out_of_range)
        if max_length is not None and rotary_dim is not None:
            _arguments.check_table_bytes(max_length, 2 * int(rotary_dim))
        super().__init__(**kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self.rope_config = config
        self.rotary_dim = None if rotary_dim is None else int(rotary_dim)
        self.layout = layout
        self.sequence_axis, self.feature_axis = sequence_axis, feature_axis
        self.mode, self.max_length, self.out_of_range = mode, max_length, out_of_range
        self.axes_dim, self._axes = axes_dim, axes
        self.axes_frequencies = axes_frequencies
        self.frequency_unit = frequency_unit
        self._rotation = _rotation.LayerRotation(
            config, layout, max_length, out_of_range == "extend", blocks
        )
        self._layouts = ShapeMemo(self._layout_of)

    @classmethod
    def from_hf_config(
        cls, config, *, seq_len=None, layer_type=None, part="text", **kwargs
    ):
        """The layer of a Hugging Face `config.json`, read as transformers reads it.

        The RoPE of [RoFormer](https://arxiv.org/abs/2104.09864) as
        transformers 5.24.0 configures it for the checkpoint's `model_type`
        after loading the raw file: the architecture's own key names
        (GPT-NeoX's `rotary_pct` and `rotary_emb_base`, GPT-J's `n_embd`,
        `n_head` and `rotary_dim`, DeepSeek's `qk_rope_head_dim`, Gemma 3's
        `rope_local_base_freq`), its defaults (DeepSeek-V3's
        `rope_interleave`, gpt-oss's YaRN, Phi's `partial_rotary_factor`),
        its pairing of features (`layout`), a wrapper's `text_config`
        (Gemma 3, Qwen-VL, Qwen 3.5, Llava, Mistral 3), and `rope_scaling` or
        `rope_parameters` (transformers 5, possibly holding `rope_theta`
        and `partial_rotary_factor`, possibly per layer type) as
        `standardize_rope_params` completes them.

        Only model types verified against their own transformers rotary
        modules are read (the docs page "Hugging Face model types" lists
        them, and the refused ones with the evidence against each); any
        other `model_type` is refused by name. A config without
        `model_type` is read as Llama reads its standard keys (`head_dim`,
        else `hidden_size // num_attention_heads`; `partial_rotary_factor`
        applied). Every key transformers reads for RoPE is applied; a RoPE
        key it would not read, and any other key inside `rope_scaling` /
        `rope_parameters`, is refused by name, but `"finetuned"`, which
        transformers ignores with a warning, as this does. A value that
        means no RoPE (Falcon's `alibi`, ESM's and Granite 4 hybrid's
        `position_embedding_type`) is refused, as is a model without RoPE
        (GPT-2, BERT: saying so; BLOOM, MPT: pointing to
        `keras_posenc.AlibiBias.from_hf_config`). A path must name a regular
        file of at most 4 MiB, nested at most 16 levels deep.

        DeepSeek rotates the last `qk_rope_head_dim` features of each head
        (apply the layer to that slice); with `rope_interleave` its output
        lists the rotated even features, then the odd ones, where this
        layer keeps each pair in place: the same attention scores. Gemma 3,
        OLMo-3 and other models with per-layer RoPE take `layer_type`, read
        as their configuration class splits RoPE by layer type (OLMo-3's
        `rope_scaling` is its full-attention layers' only). Layers whose
        attention rotates nothing (SmolLM3's `no_rope_layers`, EXAONE-4's
        global layers) are given by `layer_plan`.

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json` file or of a directory holding one.
            seq_len: int. Serving length for `"dynamic"` and `"longrope"`.
                Defaults to `None` (the pretraining length: unscaled).
            layer_type: str. The layer type (e.g. `"sliding_attention"`,
                `"full_attention"`) of configs whose RoPE differs per layer
                type (Gemma 3, OLMo-3). Defaults to `None`.
            part: `"text"`, `"vision"` or `"audio"`. The part of a
                multimodal model whose RoPE to read. `"vision"` reads the
                axial RoPE of a vision tower (Qwen2-VL, Qwen2.5-VL,
                Qwen3-VL, Qwen 3.5, GLM-4V, GLM-OCR, Pixtral / Mistral 3,
                ERNIE-4.5-VL, PaddleOCR-VL, VideoLLaMA3 and the other types
                of the docs page "Hugging Face model types") from a
                composite config or the vision config alone: the layer
                takes queries ``[batch, N, heads, head_dim]`` and
                `positions=` patch ids ``[batch, N, 2]`` (row, column), e.g.
                from `vision_position_ids`, and rotates them as the model's
                vision attention does (Gemma 4: its processor's ``(column,
                row)`` ids; DINOv3: patch centres in [-1, 1],
                `vision_position_ids(..., coordinates="normalized_centers")`,
                at inference). A part without RoPE (a CLIP or SigLIP
                tower) or whose RoPE is not read is refused by name, with
                the reason. Defaults to `"text"`.
            **kwargs: other `RotaryEmbedding` arguments (`name`, ...), not
                one read from `config`.

        Returns:
            A `RotaryEmbedding`.

        Example:

        >>> config = {
        ...     "model_type": "gpt_neox",  # Pythia
        ...     "hidden_size": 512,
        ...     "num_attention_heads": 8,
        ...     "rotary_pct": 0.25,
        ...     "rotary_emb_base": 10000,
        ... }
        >>> rope = keras_posenc.RotaryEmbedding.from_hf_config(config)
        >>> rope.rotary_dim, rope.layout
        (16, 'half')

        The vision tower of Qwen2.5-VL (head dim 1280 / 16 = 80):

        >>> qwen = {"model_type": "qwen2_5_vl", "vision_config": {
        ...     "hidden_size": 1280, "num_heads": 16}}
        >>> vision = keras_posenc.RotaryEmbedding.from_hf_config(qwen, part="vision")
        >>> vision.axes_dim, vision.max_wavelength
        ((40, 40), 10000.0)
        """
        return cls(
            **_hf_parts.layer_arguments(config, seq_len, layer_type, part, kwargs)
        )

    @classmethod
    def layer_plan(cls, config, *, seq_len=None, part="text", **kwargs):
        """Each layer's RoPE of a Hugging Face model, None where it has none.

        Some attentions skip RoPE on some layers (NoPE,
        [Kazemnejad et al., 2023](https://arxiv.org/abs/2305.19466)):
        EXAONE-4's global layers when it has a `sliding_window`, Cohere 2's
        global layers, SmolLM3's `no_rope_layers`, the linear-attention
        layers of Qwen3-Next. The plan has one entry per layer index
        (`num_hidden_layers` of them): the `RotaryEmbedding` that layer's
        attention applies, read with `from_hf_config(config,
        layer_type=...)` for its entry of `layer_types` (one layer per layer
        type, shared), or None where it rotates nothing. Only model types
        whose plan was verified against transformers 5.24.0's attention
        code (a tiny model of each, run by transformers, recording which
        layers rotate and with what) are planned; any other is refused by
        name, as is a config missing the keys the plan reads
        (`num_hidden_layers`, `layer_types`, `no_rope_layers`).

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json` file or of a directory holding one.
            seq_len: int. Serving length for `"dynamic"` and `"longrope"`.
                Defaults to `None` (the pretraining length: unscaled).
            part: `"text"`, `"vision"` or `"audio"`, as in
                `from_hf_config`. A vision tower's plan has one entry per
                block (its `depth`), every one the same layer: its blocks
                all rotate alike. Defaults to `"text"`.
            **kwargs: other `RotaryEmbedding` arguments (`name`, ...), not
                one read from `config`.

        Returns:
            A list of `num_hidden_layers` entries, each a `RotaryEmbedding`
            or None.

        Example:

        >>> config = {
        ...     "model_type": "exaone4",
        ...     "hidden_size": 512,
        ...     "num_attention_heads": 8,
        ...     "num_hidden_layers": 4,
        ...     "sliding_window": 4096,
        ...     "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        ... }
        >>> plan = keras_posenc.RotaryEmbedding.layer_plan(config)
        >>> [layer is not None for layer in plan]
        [True, True, True, False]
        >>> plan[0] is plan[1]
        True
        """
        return _hf_parts.layer_plan(cls, config, seq_len, part, kwargs)

    @property
    def max_wavelength(self) -> float:
        return self.rope_config.max_wavelength

    @property
    def rope_scaling(self) -> dict[str, Any] | None:
        return self.rope_config.rope_scaling

    @property
    def attention_factor(self) -> float:
        return self.rope_config.attention_factor

    def _layout(self, shape):
        """(sequence axis, feature axis, rotary dim) for an input shape."""
        return self._layouts(tuple(shape))

    def _layout_of(self, shape):
        options = (self.sequence_axis, self.feature_axis, self.rotary_dim)
        layout = _rotary_inputs.rotary_layout(shape, *options, self.rope_config)
        if self.axes_dim is not None:
            _axes.check_head_dim(layout[2], self.axes_dim)
        return layout

    def build(self, input_shape):
        _, _, dim = self._layout(input_shape)
        if self._axes is None:  # N-axis rows are made with the layer
            self._rotation.prepare(dim, table=self.mode == "lookup")
        super().build(input_shape)

    @_backend.on_keras_device
    def call(self, inputs: Any, start_index: Any = 0, positions: Any = None) -> Any:
        dtype = _backend.dtype_name(inputs)
        if not backend.is_float_dtype(dtype):
            raise _arguments.invalid("inputs", "a floating tensor", f"<dtype={dtype}>")
        seq, feat, dim = self._layout(inputs.shape)
        table_dim = self._rotation.table_dim
        if self.mode == "lookup" and dim != table_dim:
            expected = (
                f"{table_dim} features to rotate (the lookup table was built for "
                "them; make a new layer for another width)"
            )
            shape = f"<shape={tuple(inputs.shape)}>"
            raise _arguments.invalid("inputs", expected, shape)
        last = len(inputs.shape) - 1
        x = inputs if feat == last else ops.moveaxis(inputs, feat, -1)
        out = self._rotate(x, seq - int(feat < seq), dim, start_index, positions)
        return out if feat == last else ops.moveaxis(out, -1, feat)

    def _rotate(self, x, seq, dim, start_index, positions):
        """`x` (features last, sequence axis `seq`) rotated at its positions."""
        config, features = self.rope_config, x.shape[-1]
        if self._axes is not None:  # position ids: N-axis RoPE
            table = self._axes.layer_rows(x, seq, positions)
            batched = len(table.shape) == 3
            return self._rotation.rotation(seq, len(x.shape), dim, features, batched)(
                x, table
            )
        rotation, rows = self._rotation, self._rotation.rows(dim)
        # RoPE is defined for negative positions; a table that refuses what
        # it lacks starts at 0, as the sinusoidal layer's does.
        refuses = self.mode == "lookup" and self.out_of_range == "error"
        low = 0 if refuses else _arguments.POSITION_MIN
        sections = config.channel_rows(dim)
        lookup = rotation.table if self.mode == "lookup" else None
        if sections is not None and _rotary_inputs.is_multimodal(positions):
            table = _rotary_inputs.section_rows(rows, positions, x, seq, low, sections)
            lookup = None
        else:
            parsed = _positions.in_call(x, seq, start_index, positions, low=low)
            step = self._step(parsed, rows)
            tables = (
                None if step is None else rotation.steps(dim, len(x.shape) - seq - 2)
            )
            if tables is not None and tables.fits():  # else computed, not kept
                return rotation.step_rotation(dim, features)(x, *tables(*step))
            table = (lookup or rows)(parsed)
        rotate = rotation.rotation(
            seq, len(x.shape), dim, features, len(table.shape) == 3, lookup is not None
        )
        return rotate(x, table)

    def _step(self, parsed, rows: ComputedRows):
        """``(first, end)`` of a decoding step read from the step tables, or
        `None`; in lookup mode only inside the table (else it raises there)
        or with `out_of_range="extend"` (the same exact values)."""
        step = decoding_range(parsed, rows.encoder)
        if step is None or self.mode == "compute" or self.out_of_range == "extend":
            return step
        return step if 0 <= step[0] and step[1] <= self.max_length else None

    def compute_output_shape(self, input_shape):
        return output_shape(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        given = self.rope_config.inverse_frequencies
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "rope_scaling": self.rope_scaling,
                "rotary_dim": self.rotary_dim,
                "layout": self.layout,
                "inverse_frequencies": None if given is None else list(given),
                "sequence_axis": self.sequence_axis,
                "feature_axis": self.feature_axis,
                "mode": self.mode,
                "max_length": self.max_length,
                "out_of_range": self.out_of_range,
                "axes_dim": None if self.axes_dim is None else list(self.axes_dim),
                "axes_frequencies": self.axes_frequencies,
                "frequency_unit": self.frequency_unit,
            }
        )
        return config

    @classmethod
    def from_diffusers_config(cls, config, **kwargs):
        """The N-axis RoPE of a diffusers transformer, from its config.

        `FluxTransformer2DModel` (FLUX.1 dev, schnell, Kontext): diffusers'
        `FluxPosEmbed(theta=10000, axes_dim=axes_dims_rope)`, interleaved
        pairs, on `[batch, length, heads, head_dim]` (diffusers' layout:
        `sequence_axis=1`); `CogVideoXTransformer3DModel` with
        `use_rotary_positional_embeddings` (CogVideoX 5B, 1.5): its
        pipeline's `get_3d_rotary_pos_embed`, axes `(head_dim // 4,
        head_dim // 8 * 3, head_dim // 8 * 3)` for (frame, row, column),
        theta 10000, interleaved, on `[batch, heads, length, head_dim]`
        (`sequence_axis=2`; rotate the video tokens, after the text's);
        `WanTransformer3DModel` (Wan 2.1): `WanRotaryPosEmbed`, axes
        `(head_dim - 4 * (head_dim // 6), 2 * (head_dim // 6), 2 *
        (head_dim // 6))`, theta 10000, interleaved, `sequence_axis=1`;
        `HunyuanVideoTransformer3DModel`: `rope_axes_dim`, theta
        `rope_theta` (256), interleaved, `sequence_axis=1`.
        Position ids are the call's (`grid_position_ids`; fractional ids
        for CogVideoX's resized grids). A model whose positions are a
        sin-cos grid is refused, saying so, as are other classes, keys the
        class does not take, and transformers configs (`from_hf_config`).

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json`, of a model's directory (a pipeline's
                `transformer/`) or of a pipeline's root directory.
            **kwargs: other `RotaryEmbedding` arguments (`name`,
                `sequence_axis`), not one read from `config`.

        Returns:
            A `RotaryEmbedding` with `axes_dim`.

        Example:

        >>> flux = {"_class_name": "FluxTransformer2DModel",
        ...         "axes_dims_rope": [16, 56, 56]}
        >>> rope = keras_posenc.RotaryEmbedding.from_diffusers_config(flux)
        >>> rope.axes_dim, rope.layout, rope.max_wavelength
        ((16, 56, 56), 'interleaved', 10000.0)
        """
        return cls(**_diffusers.rotary_arguments(config, kwargs))


__all__ = [
    "RotaryEmbedding",
    "apply_rotary",
    "grid_position_ids",
    "rotary_cos_sin",
    "vision_position_ids",
]
