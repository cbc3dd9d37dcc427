"""Writes `golden.npz`: transformers' own 1-D sinusoidal position modules.

Run from the repository root (needs transformers 5.24 and torch):

    python tests/golden/sine/make_golden.py

Each `configs/<name>.json` (the keys of a published checkpoint's
config.json that its position module reads) is loaded with transformers'
own configuration class (`AutoConfig.for_model`), and the model type's
position module is built from it as the model builds it, then called as
the model calls it: on a left-padded batch of token ids (`ids`) at cache
length 0, and on its last column at cache length `CACHE` (a decoding step).
The float32 outputs are stored as `<name>/full` and `<name>/step`, with
the ids, in one `.npz` the tests read (they never import transformers).
Configs whose type refuses a sinusoidal table (learned positions) are
skipped here; the tests check that they are refused.
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers.models.autoformer import modeling_autoformer
from transformers.models.ctrl import modeling_ctrl
from transformers.models.distilbert import modeling_distilbert
from transformers.models.flaubert import modeling_flaubert
from transformers.models.informer import modeling_informer
from transformers.models.kosmos2 import modeling_kosmos2
from transformers.models.m2m_100 import modeling_m2m_100
from transformers.models.marian import modeling_marian
from transformers.models.musicgen import modeling_musicgen
from transformers.models.musicgen_melody import modeling_musicgen_melody
from transformers.models.nllb_moe import modeling_nllb_moe
from transformers.models.pegasus import modeling_pegasus
from transformers.models.pegasus_x import modeling_pegasus_x
from transformers.models.seamless_m4t import modeling_seamless_m4t
from transformers.models.seamless_m4t_v2 import modeling_seamless_m4t_v2
from transformers.models.speech_to_text import modeling_speech_to_text
from transformers.models.time_series_transformer import (
    modeling_time_series_transformer,
)
from transformers.models.trocr import modeling_trocr
from transformers.models.whisper import modeling_whisper
from transformers.models.xglm import modeling_xglm
from transformers.models.xlm import modeling_xlm

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = 37  # the cache length of the decoding step
LENGTH = 9
SKIPPED = ("distilbert-base-uncased",)


def _ids(pad):
    """Three rows: no padding, left padding of 3, left padding of 6 (ids
    drawn away from `pad`)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 90, size=(3, LENGTH))
    ids[ids == pad] = pad + 1
    ids[1, :3] = pad
    ids[2, :6] = pad
    return torch.tensor(ids)


def _fairseq(module_class, width_key="d_model", part=None):
    """fairseq's module: positions from ids, zero padding row."""

    def run(config):
        config = getattr(config, part) if part else config
        width = getattr(config, width_key)
        module = module_class(
            config.max_position_embeddings
            if hasattr(config, "max_position_embeddings")
            else 1024,
            width,
            config.pad_token_id,
        )
        ids = _ids(config.pad_token_id)
        full = module(ids, cache_length=0)
        step = module(ids[:, -1:], cache_length=CACHE)
        return ids, full, step

    return run


def _range(table_of):
    """A table read at positions 0.. (and CACHE.. for the step)."""

    def run(config):
        table = table_of(config)
        ids = _ids(-1)
        batch = ids.shape[0]
        full = table[None, :LENGTH].expand(batch, -1, -1)
        step = table[None, CACHE : CACHE + 1].expand(batch, -1, -1)
        return ids, full, step

    return run


def _weight(module_class, width_key="d_model", rows=512):
    def table(config):
        module = module_class(rows, getattr(config, width_key))
        return module.create_weight()

    return table


def _xglm(config):
    module = modeling_xglm.XGLMSinusoidalPositionalEmbedding(
        config.max_position_embeddings, config.d_model, config.pad_token_id
    )
    ids = _ids(-1)
    positions = torch.arange(LENGTH)[None].expand(ids.shape[0], -1)
    full = module(positions, cache_length=0)
    step = module(positions[:, -1:] * 0 + CACHE, cache_length=CACHE)
    return ids, full, step


def _musicgen(module_class, part=None, embeds=False):
    """MusicGen's module is called on codes [batch, codebooks, length],
    MusicGen Melody's on the decoder's input embeddings [batch, length, d]."""

    def run(config):
        config = getattr(config, part) if part else config
        module = module_class(config.max_position_embeddings, config.hidden_size)
        ids = _ids(-1)
        batch = ids.shape[0]
        codes = ids[:, None, :].expand(-1, config.num_codebooks, -1)
        if embeds:
            codes = torch.zeros(batch, LENGTH, config.hidden_size)
            full = module(codes, cache_length=0)[None].expand(batch, -1, -1)
            step = module(codes[:, -1:], cache_length=CACHE)
            return ids, full, step[None].expand(batch, -1, -1)
        full = module(codes, cache_length=0)[None].expand(batch, -1, -1)
        step = module(codes[..., -1:], cache_length=CACHE)[None].expand(batch, -1, -1)
        return ids, full, step

    return run


def _pegasus_x(config):
    module = modeling_pegasus_x.PegasusXSinusoidalPositionalEmbedding(config.d_model)
    ids = _ids(-1)
    embeds = torch.zeros(ids.shape[0], LENGTH, config.d_model)
    full = module(embeds, cache_length=0)
    step = module(embeds[:, -1:], cache_length=CACHE)
    return ids, full, step


def _whisper(config):
    return modeling_whisper.sinusoids(config.max_source_positions, config.d_model)


def _ctrl(config):
    return modeling_ctrl.positional_encoding(
        config.n_positions, config.n_embd, torch.float
    )


def _filled(create, width_key):
    def table(config):
        out = torch.empty(config.max_position_embeddings, getattr(config, width_key))
        return create(config.max_position_embeddings, out.shape[1], out)

    return table


RUNNERS = {
    "m2m_100": _fairseq(modeling_m2m_100.M2M100SinusoidalPositionalEmbedding),
    "nllb-moe": _fairseq(modeling_nllb_moe.NllbMoeSinusoidalPositionalEmbedding),
    "speech_to_text": _fairseq(
        modeling_speech_to_text.Speech2TextSinusoidalPositionalEmbedding
    ),
    "trocr": _fairseq(modeling_trocr.TrOCRSinusoidalPositionalEmbedding),
    "kosmos-2": _fairseq(
        modeling_kosmos2.Kosmos2TextSinusoidalPositionalEmbedding,
        "embed_dim",
        part="text_config",
    ),
    "seamless_m4t": _fairseq(
        modeling_seamless_m4t.SeamlessM4TSinusoidalPositionalEmbedding, "hidden_size"
    ),
    "seamless_m4t_v2": _fairseq(
        modeling_seamless_m4t_v2.SeamlessM4Tv2SinusoidalPositionalEmbedding,
        "hidden_size",
    ),
    "xglm": _xglm,
    "musicgen": _musicgen(
        modeling_musicgen.MusicgenSinusoidalPositionalEmbedding, part="decoder"
    ),
    "musicgen_decoder": _musicgen(
        modeling_musicgen.MusicgenSinusoidalPositionalEmbedding
    ),
    "musicgen_melody": _musicgen(
        modeling_musicgen_melody.MusicgenMelodySinusoidalPositionalEmbedding,
        part="decoder",
        embeds=True,
    ),
    "musicgen_melody_decoder": _musicgen(
        modeling_musicgen_melody.MusicgenMelodySinusoidalPositionalEmbedding,
        embeds=True,
    ),
    "whisper": _range(_whisper),
    "pegasus_x": _pegasus_x,
    "marian": _range(_weight(modeling_marian.MarianSinusoidalPositionalEmbedding)),
    "pegasus": _range(_weight(modeling_pegasus.PegasusSinusoidalPositionalEmbedding)),
    "time_series_transformer": _range(
        _weight(
            modeling_time_series_transformer.TimeSeriesSinusoidalPositionalEmbedding
        )
    ),
    "informer": _range(
        _weight(modeling_informer.InformerSinusoidalPositionalEmbedding)
    ),
    "autoformer": _range(
        _weight(modeling_autoformer.AutoformerSinusoidalPositionalEmbedding)
    ),
    "ctrl": _range(_ctrl),
    "distilbert": _range(
        _filled(modeling_distilbert._create_sinusoidal_embeddings, "dim")
    ),
    "xlm": _range(_filled(modeling_xlm.create_sinusoidal_embeddings, "emb_dim")),
    "flaubert": _range(
        _filled(modeling_flaubert.create_sinusoidal_embeddings, "emb_dim")
    ),
}


def _config(raw):
    raw = dict(raw)
    model_type = raw.pop("model_type")
    return model_type, transformers.AutoConfig.for_model(model_type, **raw)


def main():
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.set_default_dtype(torch.float32)
    arrays, index = {}, {}
    folder = os.path.join(HERE, "configs")
    for file in sorted(os.listdir(folder)):
        name = file[: -len(".json")]
        if name in SKIPPED:
            continue
        with open(os.path.join(folder, file)) as f:
            model_type, config = _config(json.load(f))
        with torch.no_grad():
            ids, full, step = RUNNERS[model_type](config)
        arrays[f"{name}/ids"] = ids.numpy().astype(np.int32)
        arrays[f"{name}/full"] = full.float().numpy()
        arrays[f"{name}/step"] = step.float().numpy()
        index[name] = model_type
        print(name, model_type, tuple(full.shape), file=sys.stderr)
    arrays["cache"] = np.array(CACHE, np.int32)
    np.savez_compressed(os.path.join(HERE, "golden.npz"), **arrays)
    with open(os.path.join(HERE, "golden.json"), "w") as f:
        json.dump(
            {"transformers": transformers.__version__, "configs": index}, f, indent=2
        )
        f.write("\n")


if __name__ == "__main__":
    main()
