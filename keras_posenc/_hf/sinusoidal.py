# ruff: noqa: E501
"""`SinusoidalPositionEncoding` arguments from a Hugging Face `config.json`,
as the transformers release `TRANSFORMERS_VERSION` builds its 1-D tables.

Each model type with a 1-D sinusoidal table is one row of `CONVENTIONS`
(data, not branches): its frequency rule, layout, odd-width rule, offset,
padding row, whether positions come from the token ids, and the config
keys that give its width, padding id and vocabulary, with the defaults of
its configuration class. The rows were read from each model's position
module (`tests/golden/sine/make_survey.py` lists them against
transformers, `tests/golden/sine/make_golden.py` runs them). A wrapper
whose table belongs to a part (Kosmos-2's `text_config`, MusicGen's
`decoder`) reads that part as transformers does.

Every key read is applied: the width, the padding id (checked against the
vocabulary), and the switches that choose a sinusoidal table over a
learned one (refused by name when they choose the learned one). Lengths
(`max_position_embeddings`, `max_source_positions`) are not read: the
layer computes every position, and within each model's table its rows
are the model's. Every other `model_type` is refused by name, saying
what it uses instead.
"""

import dataclasses

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import alibi as _hf_alibi
from keras_posenc._hf import config_file as _hf_json
from keras_posenc._hf import model_types as _model_types
from keras_posenc._hf.model_types import TRANSFORMERS_VERSION


@dataclasses.dataclass(frozen=True)
class Convention:
    """How one model type lays out its 1-D sinusoidal table.

    Attributes:
        width: the config keys of the table's width (the first is the
            class's own name, the rest its `attribute_map` aliases).
        width_default: the configuration class's default width.
        frequency_rule, layout, odd_depth, position_offset: the layer's
            options of the same names.
        padding: `None` (no padding row), `"row"` (the padding id's row is
            zero; positions count from 0) or `"ids"` (fairseq's positions
            from the token ids, and the zero row).
        pad: the keys of the padding id and its default.
        vocab: the keys of the vocabulary size and its default (the
            padding id must be inside it).
        requires: ``(key, wanted, default)`` of a switch that must hold
            `wanted` for the table to be sinusoidal (else the model learns
            its positions: DistilBERT's `sinusoidal_pos_embds`, TrOCR's
            `use_learned_position_embeddings`).
        part: the key of the sub-config that holds the table (`None`: the
            config itself), and that part's model type.
    """

    width: tuple = ("d_model", "hidden_size")
    width_default: int = 1024
    frequency_rule: str = "tensor2tensor"
    layout: str = "concatenated"
    odd_depth: str = "zero"
    position_offset: int = 0
    padding: str | None = "ids"
    pad: tuple = ("pad_token_id",)
    pad_default: int | None = 1
    vocab: tuple = ("vocab_size",)
    vocab_default: int | None = None
    requires: tuple | None = None
    part: tuple | None = None


_FAIRSEQ = Convention()
_PAPER = Convention(
    frequency_rule="paper", odd_depth="sine", padding=None, pad=(), pad_default=None
)

# fmt: off
CONVENTIONS = {
    # fairseq: tensor2tensor frequencies, [sin | cos], odd widths zero-padded,
    # positions from the ids, zero padding row.
    "m2m_100": dataclasses.replace(_FAIRSEQ, vocab_default=128112),  # and NLLB-200
    "nllb-moe": dataclasses.replace(_FAIRSEQ, vocab_default=128112),
    "speech_to_text": dataclasses.replace(_FAIRSEQ, width_default=256, vocab_default=10000),
    "trocr": dataclasses.replace(_FAIRSEQ, vocab_default=50265, requires=("use_learned_position_embeddings", False, True)),
    "kosmos_2_text_model": dataclasses.replace(_FAIRSEQ, width=("embed_dim",), width_default=2048, vocab_default=65037),
    "kosmos-2": dataclasses.replace(_FAIRSEQ, part=("text_config", "kosmos_2_text_model")),
    "seamless_m4t": dataclasses.replace(_FAIRSEQ, width=("hidden_size",), pad_default=0, vocab_default=256102),
    "seamless_m4t_v2": dataclasses.replace(_FAIRSEQ, width=("hidden_size",), pad_default=0, vocab_default=256102),
    # XGLM: fairseq's table read at position + 2, positions counted from 0.
    "xglm": dataclasses.replace(_FAIRSEQ, position_offset=2, padding="row", vocab_default=256008),
    # MusicGen: [cos | sin], no padding row.
    "musicgen_decoder": dataclasses.replace(_FAIRSEQ, width=("hidden_size",), layout="cos_sin", padding=None, pad=(), pad_default=None),
    "musicgen": dataclasses.replace(_FAIRSEQ, part=("decoder", "musicgen_decoder")),
    "musicgen_melody_decoder": dataclasses.replace(_FAIRSEQ, width=("hidden_size",), layout="cos_sin", padding=None, pad=(), pad_default=None),
    "musicgen_melody": dataclasses.replace(_FAIRSEQ, part=("decoder", "musicgen_melody_decoder")),
    # Whisper's `sinusoids` (the encoder's table), PEGASUS-X: odd widths refused.
    "whisper": dataclasses.replace(_FAIRSEQ, width_default=384, odd_depth="error", padding=None, pad=(), pad_default=None),
    "pegasus_x": dataclasses.replace(_FAIRSEQ, odd_depth="error", padding=None, pad=(), pad_default=None),
    # The paper's frequencies in [sin | cos], ceil(d / 2) sines first.
    "marian": _PAPER,
    "pegasus": _PAPER,
    "ctrl": dataclasses.replace(_PAPER, width=("n_embd", "hidden_size"), width_default=1280),
    "time_series_transformer": dataclasses.replace(_PAPER, width_default=64),
    "informer": dataclasses.replace(_PAPER, width_default=64),
    "autoformer": dataclasses.replace(_PAPER, width_default=64),
    # The paper's, interleaved, when the config asks for sinusoids.
    "distilbert": dataclasses.replace(_PAPER, width=("dim", "hidden_size"), width_default=768, layout="interleaved", requires=("sinusoidal_pos_embds", True, False)),
    "xlm": dataclasses.replace(_PAPER, width=("emb_dim", "hidden_size"), width_default=2048, layout="interleaved", requires=("sinusoidal_embeddings", True, False)),
    "flaubert": dataclasses.replace(_PAPER, width=("emb_dim", "hidden_size"), width_default=2048, layout="interleaved", requires=("sinusoidal_embeddings", True, False)),
}
# Model types with a 1-D sinusoidal table that is not read, and why.
REFUSED = {
    "fsmt": "fairseq's table with the cache length added after the padding mask (a padded token of a cached call reads row pad + cache, not the zero row): build SinusoidalPositionEncoding(frequency_rule='tensor2tensor', layout='concatenated', odd_depth='zero', padding_id=1) and pass its positions",
    "speecht5": "a table scaled by a learned alpha in its speech encoder, and fairseq's table at positions of its own in its speech prenet: not a table its config alone gives",
    "roformer": "RoPE (its sinusoids are the angles of its rotary embedding): keras_posenc.RotaryEmbedding",
}
# fmt: on
MODEL_TYPES = tuple(sorted(CONVENTIONS))
# The arguments `from_hf_config` reads from the config.
READ = (
    "depth",
    "max_wavelength",
    "layout",
    "frequency_rule",
    "odd_depth",
    "position_offset",
    "padding_id",
    "positions_from_ids",
)
_GRID = (
    "detr", "conditional_detr", "deformable_detr", "dab_detr", "table-transformer",
    "maskformer", "mask2former", "oneformer", "grounding-dino", "mm-grounding-dino",
    "rt_detr", "rt_detr_v2", "d_fine", "deimv2", "omdet-turbo", "sam2", "sam3",
    "edgetam", "lw_detr", "rf_detr",
)  # fmt: skip


def _instead(model_type):
    """What a model type without a 1-D sinusoidal table uses instead."""
    if model_type in REFUSED:
        return REFUSED[model_type]
    if model_type in _hf_alibi.MODEL_TYPES:
        return "ALiBi: keras_posenc.AlibiBias.from_hf_config"
    if model_type in _model_types.SUPPORTED or model_type in _model_types.REFUSED:
        return "RoPE: keras_posenc.RotaryEmbedding.from_hf_config"
    if model_type in _GRID:
        return "a 2-D sine over the image: keras_posenc.GridPositionEncoding"
    return (
        "learned position embeddings (or none): it has no 1-D sinusoidal "
        f"table in transformers {TRANSFORMERS_VERSION}"
    )


def _refused_type(model_type):
    expected = (
        f"a model type with a 1-D sinusoidal table in transformers "
        f"{TRANSFORMERS_VERSION} (the {len(MODEL_TYPES)} listed in "
        f"docs/sinusoidal.md); {model_type!r} uses {_instead(model_type)}"
    )
    return _arguments.invalid("model_type", expected, shortened(model_type))


def _value(config, keys, default, where):
    """The value of the first of `keys` in `config` (its aliases must agree),
    or `default`; returns ``(key, value)`` with the key named in messages."""
    given = [key for key in keys if key in config]
    for key in given[1:]:
        if config[key] != config[given[0]]:
            first = f"`{where}{given[0]}`={config[given[0]]!r}"
            expected = f"the value of {first} (they name one setting)"
            raise _arguments.invalid(where + key, expected, shortened(config[key]))
    key = given[0] if given else keys[0]
    return where + key, config.get(key, default)


def _int(config, keys, default, where, low):
    name, value = _value(config, keys, default, where)
    if not _arguments.is_int(value) or value < low:
        kind = "a positive integer" if low else "a non-negative integer"
        raise _arguments.invalid(name, kind, shortened(value))
    return name, int(value)


def _part(convention, config):
    """The sub-config holding the table, with its convention and key prefix."""
    key, model_type = convention.part
    part = config.get(key)
    part = {} if part is None else part
    if not isinstance(part, dict):
        raise _arguments.invalid(key, "a dict (a sub-config)", shortened(part))
    inner = part.get("model_type", model_type)
    if inner != model_type:
        raise _arguments.invalid(
            f"{key}.model_type", repr(model_type), shortened(inner)
        )
    return CONVENTIONS[model_type], part, f"{key}."


def _padding_id(convention, config, where):
    name, pad = _value(config, convention.pad, convention.pad_default, where)
    if not _arguments.is_int(pad) or pad < 0:
        expected = (
            "a non-negative integer: the padding id whose row of the table is zero"
        )
        raise _arguments.invalid(name, expected, shortened(pad))
    vocab_name, vocab = _int(
        config, convention.vocab, convention.vocab_default, where, 1
    )
    if pad >= vocab:
        expected = f"an id inside the vocabulary (below `{vocab_name}`={vocab})"
        raise _arguments.invalid(name, expected, pad)
    return int(pad)


def conventions(config):
    """The layer's arguments read from `config` (a dict already loaded)."""
    model_type = config.get("model_type")
    convention = CONVENTIONS.get(model_type) if isinstance(model_type, str) else None
    if convention is None:
        raise _refused_type(model_type)
    where = ""
    if convention.part is not None:
        convention, config, where = _part(convention, config)
    if convention.requires is not None:
        key, wanted, default = convention.requires
        value = config.get(key, default)
        if value is not wanted:
            expected = (
                f"{wanted} (with {value!r} the model learns its position embeddings)"
            )
            raise _arguments.invalid(where + key, expected, shortened(value))
    name, width = _int(config, convention.width, convention.width_default, where, 1)
    if width % 2 and convention.odd_depth == "error":
        expected = f"an even width: transformers' {model_type} refuses odd ones"
        raise _arguments.invalid(name, expected, width)
    low = 4 if convention.frequency_rule == "tensor2tensor" else 1
    if width < low:
        expected = f"at least {low}: the model's rule divides by width // 2 - 1"
        raise _arguments.invalid(name, expected, width)
    padding_id = None
    if convention.padding is not None:
        padding_id = _padding_id(convention, config, where)
    return {
        "merge": None,
        "depth": width,
        "max_wavelength": 10000.0,
        "layout": convention.layout,
        "frequency_rule": convention.frequency_rule,
        "odd_depth": convention.odd_depth,
        "position_offset": convention.position_offset,
        "padding_id": padding_id,
        "positions_from_ids": convention.padding == "ids",
    }


def layer_arguments(config, overrides):
    """The `SinusoidalPositionEncoding` arguments of `config` (a dict or a
    path), with `overrides` (other constructor arguments, none of them one
    read from the config)."""
    arguments = conventions(_hf_json.load(config))
    return _hf_json.with_overrides(arguments, overrides, READ)
