"""How transformers 5.23 reads RoPE from each architecture's `config.json`.

One `Architecture` per `model_type` whose attention uses rotary embeddings:
the keys its configuration class and rotary module read, the defaults
its configuration class fills in, and how its attention pairs features.
Read from transformers' `models/*/configuration_*.py` (the fields, their
defaults, `convert_rope_params_to_dict`, `__post_init__`) and
`modeling_*.py` (the rotary module and `apply_rotary_pos_emb`). Keys use
the names of transformers' standardized configs: `hidden_size`,
`num_attention_heads`, `head_dim`, `max_position_embeddings`,
`rope_theta`, `partial_rotary_factor`, `original_max_position_embeddings`.
`_hf_config` reads a config with this table.
"""

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

_FROZEN = types.MappingProxyType


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What one `model_type` reads for RoPE, and its defaults.

    Attributes:
        defaults: standardized key -> the value its config class gives
            when the key is absent (None: computed, or no default).
        aliases: ``((raw key, standardized key), ...)``: keys this model
            reads in place of the standardized one (GPT-NeoX's
            `rotary_pct`); the raw key wins when both are present.
        ignored: top-level keys its config class or rotary module does not
            read for RoPE (a name, or ``(raw key, standardized key)``):
            refused unless equal to the value read.
        partial: whether its rotary embedding applies
            `partial_rotary_factor` (else the whole head rotates, and a
            factor other than 1 is refused).
        layout: `"half"` or `"interleaved"`, or ``(key, default)``: a bool
            key choosing interleaved (DeepSeek-V3's `rope_interleave`).
        mrope: whether `mrope_section` is read (Qwen2-VL style models).
        section: the `mrope_section` its rotary module uses when absent.
        text: the `model_type` of its `text_config` (multimodal wrappers).
        lift: without a `text_config`, the top-level keys are the text
            config's (Qwen2-VL); else a `text_config` is required.
        local_theta: ``(key, default)``: the base of `sliding_attention`
            layers, read from its own key (Gemma 3's `rope_local_base_freq`).
        rope_parameters: the `rope_parameters` used when none is given.
        renamed: legacy `rope_type` values it maps (Phi-3's `"su"`).
        refuse: ``((key, value, why), ...)``: a value of a key that means
            no RoPE, or a RoPE that transformers cannot run.
    """

    defaults: dict
    aliases: tuple = ()
    ignored: tuple = ()
    partial: bool = False
    layout: object = "half"
    mrope: bool = False
    section: tuple | None = None
    text: str | None = None
    lift: bool = False
    local_theta: tuple | None = None
    rope_parameters: dict | None = None
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    refuse: tuple = ()


def _defaults(hidden, heads, positions, head_dim=None, theta=10000.0, **extra):
    return _FROZEN(
        {
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "max_position_embeddings": positions,
            "head_dim": head_dim,
            "rope_theta": theta,
            "partial_rotary_factor": None,
            "original_max_position_embeddings": None,
            **extra,
        }
    )


def _llama_like(hidden, heads, positions, head_dim=None, theta=10000.0, **fields):
    return Architecture(_defaults(hidden, heads, positions, head_dim, theta), **fields)


_DEEPSEEK = {"aliases": (("qk_rope_head_dim", "head_dim"),), "ignored": ("head_dim",)}
_VL: dict[str, Any] = {"mrope": True, "renamed": _FROZEN({"mrope": "default"})}
_QWEN_VL = {**_VL, "section": (16, 24, 24)}

# A config without a `model_type`, or with one this table does not know: the
# standardized keys as transformers' Llama reads them, with
# `partial_rotary_factor` applied (as most architectures and every scaled
# `rope_type` do) and multimodal sections allowed.
GENERIC = Architecture(
    _defaults(None, None, None), partial=True, mrope=True, renamed=_VL["renamed"]
)

ARCHITECTURES = _FROZEN(
    {
        "llama": _llama_like(4096, 32, 2048),
        "mistral": _llama_like(4096, 32, 131072),
        "mixtral": _llama_like(4096, 32, 131072, theta=1e6),
        "qwen2": _llama_like(4096, 32, 32768),
        "qwen2_moe": _llama_like(2048, 16, 32768),
        "qwen3": _llama_like(4096, 32, 32768, head_dim=128),
        "qwen3_moe": _llama_like(2048, 32, 32768),
        "qwen2_vl_text": _llama_like(8192, 64, 32768, theta=1e6, **_QWEN_VL),
        "qwen2_5_vl_text": _llama_like(8192, 64, 32768, theta=1e6, **_QWEN_VL),
        "qwen2_vl": _llama_like(8192, 64, 32768, text="qwen2_vl_text", lift=True),
        "qwen2_5_vl": _llama_like(8192, 64, 32768, text="qwen2_5_vl_text", lift=True),
        "gemma": _llama_like(3072, 16, 8192, head_dim=256),
        "gemma2": _llama_like(2304, 8, 8192, head_dim=256),
        "gemma3_text": _llama_like(
            2304,
            8,
            131072,
            head_dim=256,
            theta=1e6,
            local_theta=("rope_local_base_freq", 10000.0),
        ),
        "gemma3": _llama_like(2304, 8, 131072, text="gemma3_text"),
        "phi": Architecture(
            _defaults(2048, 32, 2048, partial_rotary_factor=0.5), partial=True
        ),
        "phi3": Architecture(
            _defaults(3072, 32, 4096, original_max_position_embeddings=4096),
            partial=True,
            renamed=_FROZEN({"su": "longrope", "yarn": "longrope"}),
        ),
        "deepseek_v2": _llama_like(
            4096, 32, 2048, 64, layout="interleaved", **_DEEPSEEK
        ),
        "deepseek_v3": _llama_like(
            7168, 128, 4096, 64, layout=("rope_interleave", True), **_DEEPSEEK
        ),
        "gpt_neox": Architecture(
            _defaults(6144, 64, 2048, partial_rotary_factor=0.25),
            aliases=(
                ("rotary_pct", "partial_rotary_factor"),
                ("rotary_emb_base", "rope_theta"),
            ),
            ignored=("rope_theta", "partial_rotary_factor"),
            partial=True,
        ),
        "gptj": Architecture(
            _defaults(4096, 16, 2048, rotary_dim=64),
            aliases=(
                ("n_embd", "hidden_size"),
                ("n_head", "num_attention_heads"),
                ("n_positions", "max_position_embeddings"),
            ),
            ignored=(
                "rope_theta",
                "rope_scaling",
                "rope_parameters",
                "partial_rotary_factor",
            ),
            layout="interleaved",
            refuse=(("rotary_dim", None, "an integer (GPT-J rotates rotary_dim)"),),
        ),
        "falcon": _llama_like(
            4544,
            71,
            2048,
            aliases=(("n_embed", "hidden_size"),),
            ignored=("head_dim", ("n_head", "num_attention_heads")),
            refuse=(("alibi", True, "false (with ALiBi, Falcon uses no RoPE)"),),
        ),
        "stablelm": Architecture(
            _defaults(2560, 32, 4096, partial_rotary_factor=0.25), partial=True
        ),
        "olmo": _llama_like(4096, 32, 2048),
        "olmo2": _llama_like(4096, 32, 2048),
        "cohere": _llama_like(8192, 64, 8192, theta=500000.0, layout="interleaved"),
        "granite": _llama_like(4096, 32, 2048),
        "starcoder2": _llama_like(3072, 24, 4096),
        "gpt_oss": _llama_like(
            2880,
            64,
            131072,
            head_dim=64,
            theta=150000.0,
            rope_parameters=_FROZEN(
                {
                    "rope_type": "yarn",
                    "factor": 32.0,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                    "original_max_position_embeddings": 4096,
                }
            ),
        ),
    }
)

# Architectures of transformers 5.23 with rotary embeddings that this table does
# not map and that its Llama reading does not match (other defaults or key
# names, interleaved pairs, per-layer or multimodal RoPE of their own; found by
# comparing that reading with each one's own rotary module): refused by name
# rather than guessed.
_UNMAPPED = """
EvollaModel afmoe apertus axk1 axk2 bailing_hybrid bamba beam bitnet blt
blt_global_transformer blt_local_decoder blt_local_encoder blt_patcher
chameleon_vqgan clvp clvp_decoder clvp_encoder codegen cohere2 cohere2_moe
cohere_compass cohere_compass_text cohere_compass_vision cosmos3_edge
cosmos3_edge_text cosmos3_edge_vision csm csm_depth_decoder_model cwm dbrx
deepseek_ocr2_sam_vision_model deepseek_ocr2_vision deepseek_v32 deepseek_v4 dia
dia_decoder dia_encoder diffusion_gemma diffusion_gemma_text dinov3_vit
dots3_note dots3_note_audio_encoder dots3_note_text dots3_note_vision_encoder
edgetam_video edgetam_video_mask_decoder edgetam_video_prompt_encoder
efficientloftr embedding_gemma2 embedding_gemma2_text emu3 emu3_text_model
emu3_vqgan eomt_dinov3 ernie4_5 ernie4_5_moe ernie4_5_vl_moe
ernie4_5_vl_moe_text ernie4_5_vl_moe_vision esmfold2 evolla exaone4_5
exaone4_5_vision flex_olmo flint gemma3n gemma3n_audio gemma3n_text
gemma3n_vision gemma4 gemma4_audio gemma4_text gemma4_unified
gemma4_unified_audio gemma4_unified_text gemma4_unified_vision gemma4_vision glm
glm4 glm4_moe glm4_moe_lite glm4v glm4v_moe glm4v_moe_text glm4v_moe_vision
glm4v_text glm4v_vision glm5_next glm5_next_text glm5_next_vision glm_image
glm_image_text glm_image_vision glm_image_vqmodel glm_moe_dsa glm_ocr
glm_ocr_text glm_ocr_vision glmasr_encoder gradium_phonon_tts granite4_vision
granite4_vision_text granite_docling granite_docling_vision gte helium
higgs_audio_v2 hrm_text hunyuan_vl_vision hy_v3 idefics_perciever idefics_vision
inkling2 inkling2_text inkling2_vision jamba jetmoe jina_embeddings_v3 kimi_k25
kimi_k25_vision kolibri1 kyutai_speech_to_text laguna lasr_ctc lasr_encoder lfm2
lfm2_moe lfm3 lfm3_vl lfm3_vl_vision lightglue llama4 llama4_text
llama4_vision_model longcat_flash mellum mimo_v2_flash minicpm3 minimax
minimax_m2 minimax_m3_vl minimax_m3_vl_text minimax_m3_vl_vision ministral3
mistral4 mistral_large4 mistral_large4_text mlcd mlcd_vision_model mllama
mllama_text_model mllama_vision_model modernbert modernbert-decoder molmo2
molmo2_adapter molmo2_text molmo2_vision moonshine moonshine_streaming
moonshine_streaming_encoder moshi_depth muse_glimmer muse_glimmer_assistant
muse_glimmer_text muse_glimmer_vision muse_spark muse_spark_audio
muse_spark_text muse_spark_vision nemo_speechlm nemotron
nemotron3_5_transcribe_asr_audio nemotron3_5_transcribe_audio
nemotron3_5_transcribe_word_timestamp nemotron3_diarization
nemotron3_diarization_audio nemotron_asr_streaming
nemotron_asr_streaming_encoder nemotron_h neomme neucodec nomic_bert olmo3
openai_privacy_filter paddleocr_vl paddleocr_vl_text paddleocr_vl_vision
parakeet_ctc parakeet_encoder parakeet_rnnt parakeet_tdt pe_audio
pe_audio_encoder pe_audio_video pe_audio_video_encoder pe_video pe_video_encoder
persimmon phi4_multimodal_audio phi4_multimodal_vision phimoe pixtral pocket_tts
pocket_tts_audio_tokenizer pocket_tts_audio_tokenizer_decoder
pocket_tts_audio_tokenizer_encoder qwen2_5_omni qwen2_5_omni_audio_encoder
qwen2_5_omni_bigvgan qwen2_5_omni_dit qwen2_5_omni_talker qwen2_5_omni_text
qwen2_5_omni_thinker qwen2_5_omni_token2wav qwen2_5_omni_vision_encoder
qwen2_5_vl_vision qwen2_vl_vision qwen3_5_moe_vision qwen3_5_vision
qwen3_omni_moe qwen3_omni_moe_audio_encoder qwen3_omni_moe_talker_code_predictor
qwen3_omni_moe_talker_text qwen3_omni_moe_text qwen3_omni_moe_thinker
qwen3_omni_moe_vision_encoder qwen3_vl qwen3_vl_moe qwen3_vl_moe_text
qwen3_vl_moe_vision qwen3_vl_text qwen3_vl_vision qwen4_exp qwen4_exp_text
qwen4_exp_vision recurrent_gemma roformer sam2_video sam2_video_mask_decoder
sam2_video_prompt_encoder sam3 sam3_detr_decoder sam3_detr_encoder
sam3_geometry_encoder sam3_mask_decoder sam3_tracker_video
sam3_tracker_video_mask_decoder sam3_tracker_video_prompt_encoder
sam3_vision_model sam3_vit_model sapiens2 sapiens2_head seamless_m4t seed_oss
smollm3 solar_open step3p5 step3p5_vision step3p7 t5_gemma_module t5gemma
t5gemma2 t5gemma2_decoder t5gemma2_encoder t5gemma2_text timesfm2_5 ultrabert
unlimited_ocr_sam_vision_model unlimited_ocr_vision unlimited_ocr_vision_encoder
vaultgemma video_llama_3 video_llama_3_vision videoprism videoprism_text_model
videoprism_vision_model vjepa2 voxtral_realtime wav2vec2-bert wav2vec2-conformer
xcodec2 youtu zamba2 zaya
"""
REFUSED = _FROZEN(
    dict.fromkeys(
        _UNMAPPED.split(),
        "a model_type whose RoPE this reader maps (transformers reads this one "
        "differently from Llama; pass its `max_wavelength`, `rope_scaling`, "
        "`rotary_dim` and `layout` to `RotaryEmbedding`)",
    )
)
