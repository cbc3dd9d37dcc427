"""Image and video grids: `grid_sincos_table` and `GridPositionEncoding`.

The fixed 2-D sin-cos encoding of MAE (He et al., 2021,
https://arxiv.org/abs/2111.06377), shared by DiT, PixArt, SD3 and
diffusers, its 1-D form, and CogVideoX's 3-D one, exact to float32
rounding (`_exact/grid_rows.py`).
"""

from typing import Any

from keras import backend, ops

from keras_posenc import _backend
from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.grid_options import (
    GridOptions,
    call_grid,
    check_grid_shape,
)
from keras_posenc._checks.sine_options import SineOptions, check_pixel_mask
from keras_posenc._diffusers import layers as _diffusers
from keras_posenc._exact.detr_rows import SineRows
from keras_posenc._exact.grid_rows import GridRows
from keras_posenc._hf import detection as _hf_detection
from keras_posenc._keras import PositionLayer, keras, output_shape


def _with_tokens(table, dim, extra_tokens):
    """``[N, dim]`` rows, after `extra_tokens` zero rows (class tokens)."""
    table = ops.reshape(table, (-1, dim))
    if not extra_tokens:
        return table
    return ops.concatenate([ops.zeros((extra_tokens, dim), table.dtype), table], axis=0)


def _fitted(table, tokens, checks):
    """A token table of a count known when the graph runs, under `checks`.

    At most `tokens` rows, so that a table of one row never broadcasts
    over the tokens (nor one token over the table); where a check fails,
    every row is NaN (`_backend.guard`: under XLA nothing else can refuse).
    """
    count = ops.minimum(tokens, ops.shape(table)[0])
    table = ops.slice(table, ops.stack([0, 0]), ops.stack([count, table.shape[1]]))
    return _backend.guard(table, checks)


@_backend.not_autograph
def grid_sincos_table(
    grid_shape: tuple,
    dim: int,
    *,
    extra_tokens: int = 0,
    base_size: int | None = None,
    interpolation_scale: float | tuple = 1.0,
    positions: str = "exact",
    max_grid_shape: tuple | None = None,
    crop: str = "center",
    sine: str = "mae",
    temperature: float | tuple | None = None,
    normalize: bool | None = None,
    offset: float | None = None,
    scale: float | None = None,
    pixel_mask: Any = None,
    dtype: str = "float32",
) -> Any:
    """The fixed sin-cos table of a 1-D, 2-D or 3-D grid of patches.

    MAE's `get_2d_sincos_pos_embed` (He et al., 2021,
    https://arxiv.org/abs/2111.06377; DiT, PixArt, SD3 and diffusers share
    it): each axis gets the 1-D sinusoid `[sin(p w) | cos(p w)]`,
    `w_k = 10000 ** (-2k / width)`, of its positions `p`, and a patch's
    row joins them. Feature blocks: 1-D `[D]`; 2-D `[width axis D/2 |
    height axis D/2]` (MAE's meshgrid puts the width coordinate first);
    3-D (CogVideoX's `get_3d_sincos_pos_embed`) `[time D/4 | width 3D/8 |
    height 3D/8]`. Rows are in row-major patch order (time, then height,
    then width), after `extra_tokens` zero rows. Within 2e-7 of the exact
    sinusoid of the positions, with int32 and float32 ops only.

    Positions: index `i` of an axis of `G` rows is `i / scale`, or with
    `base_size` (PixArt, SD3: diffusers' default is 16) `i * base_size /
    (G * scale)`, where `G` is the grid's size on that axis, or its
    `max_grid_shape` size when the table is cropped from a larger one.
    `positions="exact"` takes that rational number exactly;
    `positions="float32"` first rounds it as diffusers does (float32
    `arange(G) / (G / base_size) / scale`) and then takes the exact
    sinusoid of the rounded value. The two differ where the rounding
    matters: SD3's 192-row table (`base_size=64`, position `i / 3`) puts
    index 118 at 39.333... exactly and at 39.333332 in float32, and the
    tables differ by up to 1.3e-6 (integer positions, as in MAE, give the
    same table either way).

    Args:
        grid_shape: tuple of 1 to 3 positive ints: `(L,)`, `(H, W)` or
            `(T, H, W)`.
        dim: int. Features `D`: even (1-D), a multiple of 4 (2-D) or of 16
            (3-D).
        extra_tokens: int. Zero rows before the grid's (a class token:
            MAE's `cls_token=True` is `extra_tokens=1`). Defaults to `0`.
        base_size: int or `None`. Positions span `[0, base_size)` on every
            axis, whatever its size (PixArt's and SD3's interpolation).
            Defaults to `None` (integer positions, as in MAE).
        interpolation_scale: float > 0, or a tuple of one per axis (e.g.
            CogVideoX's `(1.0, 1.875, 1.875)`): positions are divided by
            it. Defaults to `1.0`.
        positions: `"exact"` or `"float32"` (diffusers' rounded positions).
            Defaults to `"exact"`.
        max_grid_shape: tuple or `None`. The table is that grid's, cropped
            to `grid_shape` (SD3's `pos_embed_max_size`, centre crop).
            Defaults to `None`.
        crop: `"center"` (SD3's `top = (max - h) // 2`) or `"top_left"`.
            Defaults to `"center"`.
        sine: the 2-D sine's family: `"mae"` (the above), `"detr"` (DETR's
            normalized-coordinate sine: DETR, Conditional/Deformable/DAB-DETR,
            Table Transformer, MaskFormer, Mask2Former, OneFormer, Grounding
            DINO, SAM 2/3, EdgeTAM) or `"rt_detr"` (RT-DETR's
            `build_2d_sinusoidal_position_embedding`: RT-DETR v1/v2,
            D-FINE, DEIMv2, PP-DocLayout). Both take 2-D grids `(H, W)` and
            a `dim` that is a multiple of 4, and none of MAE's options
            above. DETR's channels are `[y D/2 | x D/2]`, each interleaved
            `sin, cos` pairs of angle `pos / temperature ** (4k / D)` at
            `pos = (c - offset) / (n + 1e-6) * scale` (`c`: 1-based row or
            column among the valid cells of its line, `n` the line's valid
            length; `pos = c` without `normalize`); RT-DETR's are
            `[sin y | cos y | sin x | cos x]`, `D/4` each, angle
            `i * temperature ** (-4k / D)` at 0-based index `i`. Within
            2e-7 of the float64 values of those formulas. Defaults to
            `"mae"`.
        temperature: number > 1, or a `(height, width)` pair (DAB-DETR's
            `temperature_height`, `temperature_width`), or `None`: 10000
            (DETR and most of its family; Grounding DINO: 20).
            Detection sines only.
        normalize: bool or `None` (True). `sine="detr"` only: False counts
            positions unnormalized (SAM 3's decoder).
        offset: `0.0`, `0.5` (Deformable DETR: `c - 0.5`) or `None` (0.0).
            `sine="detr"` with `normalize` only.
        scale: number > 0 or `None` (`2 * pi`, every model). `sine="detr"`
            with `normalize` only.
        pixel_mask: bool `[batch, H, W]` or `None` (`sine="detr"` only):
            True at valid cells of padded images, which are then each
            normalized by their own valid height and width (DETR's
            `pixel_mask` at the feature map's resolution; at most 8192 cells
            a side).
        dtype: floating dtype of the result. Defaults to `"float32"`.

    Returns:
        A backend tensor `[extra_tokens + prod(grid_shape), dim]`, or
        `[batch, H * W, dim]` with a `pixel_mask`.

    Example:

    >>> table = keras_posenc.grid_sincos_table((2, 3), 8)
    >>> tuple(table.shape)
    (6, 8)
    >>> [round(float(v), 3) for v in table[4]]  # row 1, column 1
    [0.841, 0.01, 0.54, 1.0, 0.841, 0.01, 0.54, 1.0]
    """
    options = GridOptions(
        extra_tokens=extra_tokens,
        base_size=base_size,
        interpolation_scale=interpolation_scale,
        positions=positions,
        max_grid_shape=max_grid_shape,
        crop=crop,
    )
    sines = SineOptions(sine, temperature, normalize, offset, scale)
    sines.check_grid(options)
    sizes = check_grid_shape("grid_shape", grid_shape)
    if sines.sine != "mae" or pixel_mask is not None:
        return _sine_table(sines, sizes, dim, pixel_mask, dtype)
    axes = options.for_rank(len(sizes))
    dim = axes.check_dim(dim)
    dtype = _arguments.check_floating_dtype(dtype)
    table = GridRows(axes, dim)(sizes)
    return ops.cast(_with_tokens(table, dim, options.extra_tokens), dtype)


def _sine_table(sines, sizes, dim, pixel_mask, dtype):
    """`grid_sincos_table` of a detection sine: ``[H * W, dim]`` rows, or
    ``[batch, H * W, dim]`` with a pixel mask."""
    if sines.sine == "mae":  # a mask given to MAE's table: refused by name
        check_pixel_mask(sines, pixel_mask, (None,) * 3)
    if len(sizes) != 2:
        expected = f"a 2-D grid (H, W) with sine={sines.sine!r}"
        raise _arguments.invalid("grid_shape", expected, sizes)
    dim = sines.check_dim(dim)
    dtype = _arguments.check_floating_dtype(dtype)
    batch = None if pixel_mask is None else pixel_mask.shape[0]
    check_pixel_mask(sines, pixel_mask, (batch, *sizes))
    table = SineRows(sines, dim)(sizes, pixel_mask, "grid_shape")
    shape = (-1, dim) if pixel_mask is None else (-1, sizes[0] * sizes[1], dim)
    return ops.cast(ops.reshape(table, shape), dtype)


def _made_rows(axes, dim):
    """A layer's `GridRows` (host work, outside `torch.compile`: a class given
    to `torch.compiler.disable` would have its methods disabled too)."""
    return GridRows(axes, dim, keeps=True)


@keras.saving.register_keras_serializable(package="keras_posenc")
class GridPositionEncoding(PositionLayer):
    """Adds the fixed sin-cos encoding of an image or video grid of patches.

    The 2-D encoding of MAE (He et al., 2021,
    https://arxiv.org/abs/2111.06377), DiT, PixArt and SD3, its 1-D form
    and CogVideoX's 3-D one, exactly as `grid_sincos_table` defines them,
    added to patch features laid out as a grid `[batch, H, W, C]`,
    `[batch, T, H, W, C]`, or as tokens `[batch, N, C]` with a
    `grid_shape` (and `extra_tokens` class tokens first). Any grid size at
    call time, eager or compiled. Under 16-bit dtype policies the table is
    computed in float32 and cast once.

    The layer has no weights. In `"compute"` mode each call computes its
    grid's table (1-D tables per axis, joined). In `"lookup"` mode the
    per-axis tables of `max_grid_shape` are built once in `build` and each
    call crops them (SD3: `max_grid_shape=(192, 192)`, `base_size=64`).

    Args:
        grid_shape: tuple or `None`. The grid of `[batch, N, C]` inputs,
            `(L,)`, `(H, W)` or `(T, H, W)` (also a call argument); `None`
            reads grid inputs' shape, and makes token inputs a 1-D grid.
            Defaults to `None`.
        extra_tokens: int. Tokens before the grid's in `[batch, N, C]`
            inputs, left unchanged. Defaults to `0`.
        base_size, interpolation_scale, positions, max_grid_shape, crop:
            as in `grid_sincos_table`.
        mode: `"compute"` or `"lookup"` (needs `max_grid_shape`).
            Defaults to `"compute"`.
        sine, temperature, normalize, offset, scale: the 2-D sine of
            detection models (DETR's normalized coordinates, RT-DETR's
            `build_2d_sinusoidal_position_embedding`), as in
            `grid_sincos_table`; with them the inputs are feature maps
            `[batch, H, W, C]`, `C` a multiple of 4. Defaults to `"mae"`
            and `None`s. `GridPositionEncoding.from_hf_config` sets them
            from a checkpoint's `config.json`.
        dim: int or `None`. With a detection sine, the feature width the
            inputs must have (a checkpoint's `d_model`); `None` takes the
            inputs'. Defaults to `None`.
        merge: `"add"` returns `inputs + PE`; `None` returns the encoding
            alone, `[batch, H, W, C]` (the inputs give its shape: the
            position modules of transformers' detection models).
            Defaults to `"add"`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: floating tensor `[batch, H, W, C]`, `[batch, T, H, W, C]` or
            `[batch, N, C]`.
        grid_shape: tuple or `None`: the grid of token inputs for this
            call. Defaults to the layer's.
        pixel_mask: bool tensor `[batch, H, W]` or `None` (`sine="detr"`
            only): True at the valid cells of padded images, at the
            feature map's resolution (at most 8192 cells a side); each
            image is normalized by its own valid height and width. Defaults
            to `None` (all valid).

    Input shape:
        `(batch, H, W, C)`, `(batch, T, H, W, C)` or `(batch, N, C)`.

    Output shape:
        As the input.

    Example:

    >>> patches = keras.Input(shape=(None, None, 64))
    >>> x = keras_posenc.GridPositionEncoding()(patches)
    >>> tuple(x.shape)
    (None, None, None, 64)

    References:
        - [He et al., 2021 (MAE)](https://arxiv.org/abs/2111.06377)
        - [Peebles and Xie, 2023 (DiT)](https://arxiv.org/abs/2212.09748)
    """

    def __init__(
        self,
        grid_shape: tuple | None = None,
        extra_tokens: int = 0,
        base_size: int | None = None,
        interpolation_scale: float | tuple = 1.0,
        positions: str = "exact",
        mode: str = "compute",
        max_grid_shape: tuple | None = None,
        crop: str = "center",
        sine: str = "mae",
        temperature: float | tuple | None = None,
        normalize: bool | None = None,
        offset: float | None = None,
        scale: float | None = None,
        dim: int | None = None,
        merge: str | None = "add",
        **kwargs: Any,
    ) -> None:
        options = GridOptions(
            grid_shape=grid_shape,
            extra_tokens=extra_tokens,
            base_size=base_size,
            interpolation_scale=interpolation_scale,
            positions=positions,
            mode=mode,
            max_grid_shape=max_grid_shape,
            crop=crop,
        )
        sines = SineOptions(sine, temperature, normalize, offset, scale, dim)
        sines.check_grid(options)
        self.merge = _arguments.check_choice("merge", merge, ("add", None))
        super().__init__(**kwargs)
        _arguments.check_floating_dtype(self.compute_dtype, name="dtype")
        self._options, self._sines = options, sines
        for name, value in {**options.to_config(), **sines.to_config()}.items():
            setattr(self, name, value)
        self._dim = 0  # the features, known in `build`
        self._rows: dict = {}  # rank -> `_exact.grid_rows.GridRows`

    def _rank(self, input_shape, grid_shape):
        rank = len(input_shape)
        if rank in (4, 5) and self._options.extra_tokens == 0:
            return rank - 2
        if rank == 3:
            return 1 if grid_shape is None else len(grid_shape)
        raise _arguments.invalid(
            "inputs",
            "[batch, H, W, C] or [batch, T, H, W, C] (without extra_tokens), "
            "or [batch, N, C] tokens",
            f"<shape={tuple(input_shape)}>",
        )

    @classmethod
    def from_hf_config(cls, config: Any, **kwargs: Any) -> "GridPositionEncoding":
        """The 2-D sine of a detection model's Hugging Face `config.json`.

        The position module of each model type of transformers 5.24.0 with
        a 2-D sine (`_hf.detection.MODEL_TYPES`: DETR and its family,
        RT-DETR and its family, SAM 2/3 and EdgeTAM), as a layer with
        `merge=None`: called on a feature map `[batch, H, W, C]` (and
        DETR's `pixel_mask` at that resolution) it returns that module's
        output, channels last. Composite configs (`backbone_config`,
        `vision_config`, ...) are read as transformers reads them; a type
        with learned positions (`position_embedding_type="learned"`) and
        every other type are refused by name, saying what they use.

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json` file or of a directory holding one.
            **kwargs: other layer arguments (`name`, `dtype`), not one read
                from `config`.

        Returns:
            A `GridPositionEncoding`.

        Example:

        >>> layer = keras_posenc.GridPositionEncoding.from_hf_config(
        ...     {"model_type": "deformable_detr", "d_model": 256})
        >>> layer.sine, layer.offset, layer.merge
        ('detr', 0.5, None)
        """
        return cls(**_hf_detection.layer_arguments(config, kwargs))

    def build(self, input_shape):
        if self._sines.sine != "mae":
            if len(input_shape) != 4:
                expected = f"a feature map [batch, H, W, C] with sine={self.sine!r}"
                raise _arguments.invalid(
                    "inputs", expected, f"<shape={tuple(input_shape)}>"
                )
            # Returned alone (merge=None), the sine only needs the map's
            # height and width: DETR's module gets the backbone's map (2048
            # channels for a ResNet-50) and returns `dim` of them.
            alone = self.merge is None and self._sines.dim is not None
            width = self._sines.dim if alone else input_shape[-1]
            self._dim = self._sines.check_dim(width, "inputs")
            self._sine_rows = SineRows(self._sines, self._dim)
            return super().build(input_shape)
        rank = self._rank(input_shape, self._options.grid_shape)
        self._dim = self._options.for_rank(rank).check_dim(input_shape[-1], "inputs")
        self._rows_of(rank)  # lookup mode: the tables, built once
        super().build(input_shape)

    def _rows_of(self, rank):
        """The `GridRows` of `rank`-D grids (token inputs may change rank)."""
        rows = self._rows.get(rank)
        if rows is None:
            axes = self._options.for_rank(rank)
            axes.check_dim(self._dim, "inputs")
            rows = self._rows[rank] = _backend.host_work(_made_rows)(axes, self._dim)
        return rows

    @_backend.on_keras_device
    def call(self, inputs: Any, grid_shape: Any = None, pixel_mask: Any = None) -> Any:
        dtype = _backend.dtype_name(inputs)
        if not backend.is_float_dtype(dtype):
            raise _arguments.invalid("inputs", "a floating tensor", f"<dtype={dtype}>")
        check_pixel_mask(self._sines, pixel_mask, tuple(inputs.shape)[:3])
        sizes, checks = call_grid(
            inputs, grid_shape or self._options.grid_shape, self._options.extra_tokens
        )
        if self._sines.sine != "mae":
            table = self._sine_rows(sizes, pixel_mask)
        else:
            rows = self._rows_of(len(sizes))
            table = rows(sizes, "inputs" if len(inputs.shape) > 3 else "grid_shape")
            if len(inputs.shape) == 3:
                table = _with_tokens(table, self._dim, self._options.extra_tokens)
        if checks:
            table = _fitted(table, ops.shape(inputs)[1], checks)
        if table.dtype != inputs.dtype:  # a 16-bit policy: cast once
            table = ops.cast(table, inputs.dtype)
        with _backend.checks_first(checks):  # before a broadcast that fails
            if self.merge is None:
                shape = tuple(ops.shape(inputs))[:-1] + (self._dim,)
                return ops.broadcast_to(table, shape)
            return inputs + table

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        if self.merge is None and self._sines.dim is not None:
            shape[-1] = self._sines.dim
        return output_shape(shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(self._options.to_config())
        config.update(self._sines.to_config(), merge=self.merge)
        return config

    @classmethod
    def from_diffusers_config(cls, config, **kwargs):
        """The sin-cos grid of a diffusers transformer, from its config.

        The table diffusers adds to the patches (MAE's 2-D sin-cos, He et
        al., 2021, https://arxiv.org/abs/2111.06377), with its positions
        rounded to float32 as diffusers computes them (`positions="float32"`):
        `PatchEmbed`'s `base_size = sample_size // patch_size` and
        `interpolation_scale` for `PixArtTransformer2DModel` (None: `max(
        sample_size // 64, 1)`), `DiTTransformer2DModel` and
        `SanaTransformer2DModel` (None: no position encoding, refused);
        `SD3Transformer2DModel`'s `pos_embed_max_size` table, centre-cropped
        (`mode="lookup"`); `CogVideoXTransformer3DModel`'s 3-D table of its
        sample video (`grid_shape=(T, H, W)`, the text's
        `max_text_seq_length` tokens first) when it does not use RoPE. A
        model whose positions are RoPE (FLUX, CogVideoX 5B and 1.5) or a
        learned weight is refused, saying which; so are other classes, keys
        the class does not take, and transformers configs.

        Args:
            config: dict (a `config.json`'s content), or the path of a
                `config.json`, of a model's directory (a pipeline's
                `transformer/`) or of a pipeline's root directory.
            **kwargs: other `GridPositionEncoding` arguments (`name`), not
                one read from `config`.

        Returns:
            A `GridPositionEncoding`.

        Example:

        >>> sd3 = {"_class_name": "SD3Transformer2DModel", "sample_size": 128,
        ...        "patch_size": 2, "pos_embed_max_size": 192}
        >>> grid = keras_posenc.GridPositionEncoding.from_diffusers_config(sd3)
        >>> grid.base_size, list(grid.max_grid_shape), grid.positions
        (64, [192, 192], 'float32')
        """
        return cls(**_diffusers.grid_arguments(config, kwargs))


__all__ = ["GridPositionEncoding", "grid_sincos_table"]
