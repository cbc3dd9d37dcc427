"""Golden 2-D sines from transformers' own detection modules (`golden.npz`).

Run from the repository root with transformers 5.24.0 and torch (neither
is a project dependency; the tests need only numpy, `golden.npz` and
`configs/`)::

    python tests/golden/detr_sine/make_golden.py

Each `configs/<type>.json` holds the keys of a published checkpoint that
its position module reads (and a few others, as published). The script
builds that model type's configuration class from it, builds the position
module as the model's own code does (its `build_position_encoding`, or the
constructor call of the modeling file, quoted below), and runs it in
float32 on feature maps of `SHAPES`, without a mask and with a padding
mask (image 0 of the batch padded at the bottom and right, image 1 not:
the mask as the model resizes it to the feature map). Outputs are
recorded channels last, ``[batch, H, W, D]``: ``<type>/<case>``, with the
mask as ``<type>/<case>/mask``. RT-DETR's family takes no mask.
"""

import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import CONFIG_MAPPING

HERE = pathlib.Path(__file__).resolve().parent
assert transformers.__version__ == "5.24.0", transformers.__version__

# (batch, H, W, valid H of image 0, valid W of image 0)
SHAPES = {"small": (2, 5, 7, 3, 4), "tall": (2, 9, 4, 6, 4)}


def module_of(model_type):
    return __import__(
        f"transformers.models.{model_type}.modeling_{model_type}", fromlist=["x"]
    )


def _shape_call(position):
    """DETR's newer signature: ``(shape, device, dtype, mask)``."""

    def run(mask, batch, height, width):
        shape = torch.Size((batch, 1, height, width))
        return position(shape, "cpu", torch.float32, mask)

    return run


def _pixel_call(position):
    """Table Transformer, DAB-DETR, Grounding DINO: ``(pixel_values,
    pixel_mask)``, a mask always (a full one when unpadded)."""

    def run(mask, batch, height, width):
        if mask is None:
            mask = torch.ones((batch, height, width), dtype=torch.long)
        pixels = torch.zeros((batch, 1, height, width))
        return position(pixels, mask.long())

    return run


def detr(model_type, prefix):
    cls = getattr(module_of(model_type), f"{prefix}SinePositionEmbedding")

    def build(config):
        # modeling_<type>.py: `<Prefix>SinePositionEmbedding(config.d_model // 2,
        # normalize=True)` when position_embedding_type == "sine".
        assert config.position_embedding_type == "sine"
        return _shape_call(cls(config.d_model // 2, normalize=True))

    return build


def built_by_function(model_type):
    def build(config):
        # modeling_<type>.py: `build_position_encoding(config)`.
        return _pixel_call(module_of(model_type).build_position_encoding(config))

    return build


def dab_detr(config):
    # modeling_dab_detr.py: `DabDetrSinePositionEmbedding(config)`.
    return _pixel_call(module_of("dab_detr").DabDetrSinePositionEmbedding(config))


def maskformer(config):
    # modeling_maskformer.py: `MaskFormerSinePositionEmbedding(
    # num_position_features=config.decoder_config.hidden_size // 2, normalize=True)`
    cls = module_of("maskformer").MaskFormerSinePositionEmbedding
    width = config.decoder_config.hidden_size
    return _shape_call(cls(num_position_features=width // 2, normalize=True))


def mask2former(config):
    # modeling_mask2former.py: the pixel decoder's `feature_size // 2` and the
    # transformer module's `hidden_dim // 2` (equal here), normalize=True.
    assert config.feature_size == config.hidden_dim
    cls = module_of("mask2former").Mask2FormerSinePositionEmbedding
    return _shape_call(
        cls(num_position_features=config.hidden_dim // 2, normalize=True)
    )


def oneformer(config):
    # modeling_oneformer.py: `conv_dim // 2` and `hidden_dim // 2` (equal here).
    assert config.conv_dim == config.hidden_dim
    cls = module_of("oneformer").OneFormerSinePositionEmbedding
    return _shape_call(
        cls(num_position_features=config.hidden_dim // 2, normalize=True)
    )


def neck(model_type, prefix):
    def build(config):
        # modeling_<type>.py (vision neck): `<Prefix>SinePositionEmbedding(
        # num_position_features=config.fpn_hidden_size // 2, normalize=True)`.
        cls = getattr(module_of(model_type), f"{prefix}SinePositionEmbedding")
        width = config.vision_config.fpn_hidden_size
        return _shape_call(cls(num_position_features=width // 2, normalize=True))

    return build


def rt_detr(model_type, prefix):
    def build(config):
        # modeling_<type>.py: `<Prefix>SinePositionEmbedding(
        #     embed_dim=config.encoder_hidden_dim,
        #     temperature=config.positional_encoding_temperature)`,
        # called with (width, height, device, dtype) -> [1, H * W, D].
        cls = getattr(module_of(model_type), f"{prefix}SinePositionEmbedding")
        position = cls(
            embed_dim=config.encoder_hidden_dim,
            temperature=config.positional_encoding_temperature,
        )

        def run(mask, batch, height, width):
            assert mask is None
            rows = position(width, height, torch.device("cpu"), torch.float32)
            return rows.reshape(1, height, width, -1).permute(0, 3, 1, 2)

        return run

    return build


BUILDERS = {
    "detr": detr("detr", "Detr"),
    "conditional_detr": detr("conditional_detr", "ConditionalDetr"),
    "deformable_detr": detr("deformable_detr", "DeformableDetr"),
    "table_transformer": built_by_function("table_transformer"),
    "dab_detr": dab_detr,
    "grounding_dino": built_by_function("grounding_dino"),
    "mm_grounding_dino": built_by_function("mm_grounding_dino"),
    "maskformer": maskformer,
    "mask2former": mask2former,
    "oneformer": oneformer,
    "sam2": neck("sam2", "Sam2"),
    "edgetam": neck("edgetam", "EdgeTam"),
    "sam3": neck("sam3", "Sam3"),
    "rt_detr": rt_detr("rt_detr", "RTDetr"),
    "rt_detr_v2": rt_detr("rt_detr_v2", "RTDetrV2"),
    "d_fine": rt_detr("d_fine", "DFine"),
    "deimv2": rt_detr("deimv2", "Deimv2"),
    "pp_doclayout_v3": rt_detr("pp_doclayout_v3", "PPDocLayoutV3"),
}


def main():
    out = {}
    for path in sorted((HERE / "configs").glob("*.json")):
        raw = json.loads(path.read_text())
        config = CONFIG_MAPPING[raw["model_type"]](
            **{k: v for k, v in raw.items() if k != "model_type"}
        )
        model_type = path.stem  # the modeling module's name
        run = BUILDERS[model_type](config)
        for case, (batch, height, width, valid_h, valid_w) in SHAPES.items():
            with torch.no_grad():
                if model_type.startswith(("rt_detr", "d_fine", "deimv2", "pp_")):
                    plain = run(None, 1, height, width)
                    out[f"{model_type}/{case}"] = plain.permute(0, 2, 3, 1).numpy()
                    continue
                plain = run(None, batch, height, width)
                mask = torch.ones((batch, height, width), dtype=torch.bool)
                mask[0, valid_h:, :] = False
                mask[0, :, valid_w:] = False
                padded = run(mask, batch, height, width)
            out[f"{model_type}/{case}"] = plain.permute(0, 2, 3, 1).numpy()
            out[f"{model_type}/{case}/padded"] = padded.permute(0, 2, 3, 1).numpy()
            out[f"{model_type}/{case}/mask"] = mask.numpy()
        print(model_type, out[f"{model_type}/small"].shape)
    for key, value in out.items():
        assert value.dtype in (np.float32, np.bool_), (key, value.dtype)
    np.savez_compressed(HERE / "golden.npz", **out)


if __name__ == "__main__":
    main()
