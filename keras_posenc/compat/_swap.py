"""`use_exact`: keras-hub's position layers inside a model, made exact in place."""

import os
import re
import tempfile
import warnings
from typing import Any, cast

import keras

from keras_posenc.compat._alibi import AlibiBias
from keras_posenc.compat._base import PACKAGE, require_keras3
from keras_posenc.compat._d_fine import ExactSincos
from keras_posenc.compat._flux import (
    FluxRotaryPositionalEmbedding,
    FluxTimestepEmbedding,
)
from keras_posenc.compat._phi3 import Phi3SuScaledRotaryEmbedding
from keras_posenc.compat._rotary import RotaryEmbedding
from keras_posenc.compat._sam3 import SAM3SinePositionEmbedding
from keras_posenc.compat._sd3 import SD3TimestepEmbedding
from keras_posenc.compat._sine import SinePositionEncoding
from keras_posenc.compat._subclasses import ESMRotaryEmbedding, LlamaRotaryEmbedding
from keras_posenc.compat._video_prism import VideoPrismSinusoidalPositionalEmbedding

_HUB = "keras_hub.src."
_HUB_ROTARY = (_HUB + "layers.modeling.rotary_embedding", "RotaryEmbedding")
_HUB_SINE = (_HUB + "layers.modeling.sine_position_encoding", "SinePositionEncoding")
_HUB_ALIBI = (_HUB + "layers.modeling.alibi_bias", "AlibiBias")
_HUB_BACKBONE = (_HUB + "models.backbone", "Backbone")
# keras-hub's position layers (module, class name) and their drop-ins: every
# subclass of its position layers in keras-hub 0.32's source.
_DROP_INS = {
    _HUB_ALIBI: AlibiBias,
    _HUB_ROTARY: RotaryEmbedding,
    _HUB_SINE: SinePositionEncoding,
    (
        _HUB + "models.llama.llama_rotary_embedding",
        "LlamaRotaryEmbedding",
    ): LlamaRotaryEmbedding,
    (
        _HUB + "models.phi3.phi3_rotary_embedding",
        "Phi3SuScaledRotaryEmbedding",
    ): Phi3SuScaledRotaryEmbedding,
    (_HUB + "models.esm.esm_attention", "ESMRotaryEmbedding"): ESMRotaryEmbedding,
    # FLUX's own layers, held by `EmbedND.rope` and `FluxBackbone`.
    (
        _HUB + "models.flux.flux_maths",
        "RotaryPositionalEmbedding",
    ): FluxRotaryPositionalEmbedding,
    (_HUB + "models.flux.flux_maths", "TimestepEmbedding"): FluxTimestepEmbedding,
    # Stable Diffusion 3's, held by `MMDiT` (`StableDiffusion3Backbone.diffuser`).
    (
        _HUB + "models.stable_diffusion_3.mmdit",
        "TimestepEmbedding",
    ): SD3TimestepEmbedding,
    # VideoPrism's, held by `VideoPrismEmbedding` (`VideoPrismBackbone.text_embedding`).
    (
        _HUB + "models.video_prism.video_prism_layers",
        "SinusoidalPositionalEmbedding",
    ): VideoPrismSinusoidalPositionalEmbedding,
    # SAM 3's, held by its vision encoder, geometry encoder and DETR decoder.
    (
        _HUB + "models.sam3.sam3_layers",
        "SAM3SinePositionEmbedding",
    ): SAM3SinePositionEmbedding,
}
# keras-hub layers whose sine is a method of a larger layer with weights:
# the layer gets a subclass of its own class, the mixin first.
_SUBCLASSED = {
    (_HUB + "models.d_fine.d_fine_hybrid_encoder", "DFineHybridEncoder"): ExactSincos,
}
_SUBCLASSES: dict = {}
# Subclasses with no exact equivalent, and why.
_REFUSED = {
    "MoonshineRotaryEmbedding": (
        "it returns float32 angles (from a stored float32 `inv_freq` weight) "
        "that Moonshine's attention turns into cos and sin itself"
    ),
}
# keras-hub's other rotary code (own classes, inline rotations): left as is.
_LEFT_AS_IS = (
    "Gemma4VisionAttention",
    "Qwen3_5VisionRotaryEmbedding",
    "RoformrPositionalEmbedding",
    "SAM3ViTRotaryEmbedding",
    "SmolLM3RotaryEmbedding",
)
# keras-hub's ALiBi built inline, not as a layer (Falcon's decoder makes
# its bias in a method): left as is.
_ALIBI_LEFT_AS_IS = ("FalconTransformerDecoder",)
_STALE = re.compile(r"\._layers\[\d+\]$")
_COMPILED = ("train_function", "test_function", "predict_function", "generate_function")


def _lineage(obj):
    return {(klass.__module__, klass.__qualname__) for klass in type(obj).__mro__}


def _contained(path, value):
    """The layers held in an attribute value (a layer, list, tuple or dict)."""
    if isinstance(value, keras.layers.Layer):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _contained(f"{path}[{i}]", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _contained(f"{path}[{key!r}]", item)


def _children(layer):
    """``(path, child)`` for the layers a layer holds, named attributes first."""
    attributes = dict(vars(layer))
    attributes.update(attributes.pop("_modules", None) or {})  # torch modules
    for name in sorted(attributes, key=lambda n: (n.startswith("_"), n)):
        yield from _contained(f".{name}", attributes[name])


def _walk(root):
    """``(layer, owner, path, backbone)`` for every layer under `root`, once.

    `backbone` is the innermost keras-hub `Backbone` holding the layer: the
    object whose config rebuilds it when a saved model is loaded.
    """
    seen = {id(root)}
    backbone = root if _HUB_BACKBONE in _lineage(root) else None
    stack = [(root, "model", backbone)]
    while stack:
        owner, path, backbone = stack.pop()
        found = []
        for name, child in _children(owner):
            if id(child) in seen:
                continue
            seen.add(id(child))
            inner = child if _HUB_BACKBONE in _lineage(child) else backbone
            yield child, owner, path + name, inner
            found.append((child, path + name, inner))
        stack.extend(reversed(found))


def _refuse_mrope(owner, path):
    mrope = getattr(owner, "mrope_section", None)
    if mrope is not None:
        raise ValueError(
            f"use_exact cannot make `{path}` exact: its owner "
            f"{type(owner).__name__} (mrope_section={mrope}) computes its "
            "multimodal rotation itself from the layer's float32 "
            "frequencies. Build the model with mrope_section=None for text."
        )


def _exact_subclass(cls, mixin):
    """`cls` with `mixin` first, under `cls`'s name and module: its config
    and saved form stay keras-hub's (its backbone rebuilds it when loaded)."""
    if cls not in _SUBCLASSES:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        _SUBCLASSES[cls] = type(cls.__name__, (mixin, cls), namespace)
    return _SUBCLASSES[cls]


def _drop_in(layer, owner, path):
    """The drop-in for a keras-hub position layer, `None` for other layers."""
    key = (type(layer).__module__, type(layer).__qualname__)
    if key in _SUBCLASSED:
        mixin = _SUBCLASSED[key]
        return None if isinstance(layer, mixin) else _exact_subclass(type(layer), mixin)
    if key in _DROP_INS:
        _refuse_mrope(owner, path)
        return _DROP_INS[key]
    lineage = _lineage(layer)
    if _HUB_ROTARY in lineage or _HUB_SINE in lineage or _HUB_ALIBI in lineage:
        name = type(layer).__name__
        why = _REFUSED.get(name, "use_exact does not know what it computes")
        known = sorted(cls.__name__ for cls in _DROP_INS.values())
        raise ValueError(
            f"use_exact cannot make `{path}` ({name}, a subclass of a keras-hub "
            f"position layer) exact: {why}. It replaces only layers it maps "
            f"exactly, the keras-hub layers named {known}; nothing was changed."
        )
    return None


class _ExactModel:
    """A model made exact by `use_exact`: saved as the model it is (its class
    and config), and made exact again when loaded (its config rebuilds
    keras-hub's layers)."""

    _original: Any = object  # the keras-hub class it stands in for

    def get_config(self):
        original = self._original
        return {
            "model": {
                "module": original.__module__,
                "class_name": original.__name__,
                "config": original.get_config(self),
                "registered_name": keras.saving.get_registered_name(original),
            }
        }

    @classmethod
    def from_config(cls, config):
        model = keras.saving.deserialize_keras_object(config["model"])
        use_exact(model)
        return model

    def __reduce__(self):
        # Its class is made at run time: pickle (multiprocessing, joblib, Ray)
        # takes the model as its `.keras` file, which loads it exact.
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model.keras")
            cast(Any, self).save(path)
            with open(path, "rb") as file:
                return (_unpickle, (file.read(),))


def _unpickle(data):
    """A model pickled after `use_exact`, from its `.keras` bytes."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as file:
            file.write(data)
        return keras.saving.load_model(path)


_EXACT_NAME = "KerasHubExactModel"
keras.saving.register_keras_serializable(package=PACKAGE, name=_EXACT_NAME)(_ExactModel)
_EXACT_CLASSES: dict = {}


def _mark(model):
    """Gives `model` a subclass of its class that saves it as `_ExactModel`."""
    cls = type(model)
    if issubclass(cls, _ExactModel):
        return
    if cls not in _EXACT_CLASSES:
        namespace = {
            "_original": cls,
            "__module__": __name__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        }
        exact = type(cls.__name__, (_ExactModel, cls), namespace)
        # Every such class is saved under the one registered name, which
        # loads through `_ExactModel.from_config`.
        keras.saving.register_keras_serializable(package=PACKAGE, name=_EXACT_NAME)(
            exact
        )
        keras.saving.get_custom_objects()[f"{PACKAGE}>{_EXACT_NAME}"] = _ExactModel
        _EXACT_CLASSES[cls] = exact
    model.__class__ = _EXACT_CLASSES[cls]


def _plan(model):
    """What `use_exact` will change, checked in full before any change.

    Returns:
        ``(swaps, marks, left)``: ``(layer, drop-in, options)`` triples,
        the models to save as exact, the names of rotary code left as is.
    """
    swaps, marks, left = [], {}, set()
    for layer, owner, path, backbone in _walk(model):
        # Keras keeps a replaced sublayer in `_layers` (ESM's attention
        # replaces RoFormer's rotary layer): only one in use is worth a word.
        name = type(layer).__name__
        if name in _LEFT_AS_IS + _ALIBI_LEFT_AS_IS and not _STALE.search(path):
            left.add(name)
        drop_in = _drop_in(layer, owner, path)
        if drop_in is None:
            continue
        swaps.append((layer, drop_in, drop_in.options_of(layer)))
        saved = model if backbone is None else backbone
        marks[id(saved)] = saved
    return swaps, marks, left


def _reset_compiled(model):
    """Drops compiled functions, so that `predict` and `generate` retrace."""
    for target in [model] + [layer for layer, *_ in _walk(model)]:
        for name in _COMPILED:
            if getattr(target, name, None) is not None:
                setattr(target, name, None)


def use_exact(model):
    """Makes every keras-hub position layer inside `model` exact, in place.

    Each keras-hub `RotaryEmbedding`, `SinePositionEncoding`, `AlibiBias`
    (Press et al., 2021, https://arxiv.org/abs/2108.12409; BLOOM's),
    `LlamaRotaryEmbedding` (Llama 3 scaling), `Phi3SuScaledRotaryEmbedding`
    (LongRoPE) and `ESMRotaryEmbedding` inside a keras-hub backbone or task
    (or any Keras model or layer) becomes the drop-in of
    `keras_posenc.compat` with the same configuration: the same values
    within float32 noise at short positions, and within 2e-7 of exact cos
    and sin (RoFormer, Su et al., 2021, https://arxiv.org/abs/2104.09864)
    at every int32 position. So do FLUX's `RotaryPositionalEmbedding` and
    `TimestepEmbedding` (`FluxBackbone`): exact at float ids and
    timesteps; and Stable Diffusion 3's `TimestepEmbedding` (`MMDiT`, in
    `StableDiffusion3Backbone`): its sinusoid exact at the float32
    timestep, its MLP kept; VideoPrism's `SinusoidalPositionalEmbedding`
    (`VideoPrismBackbone`'s text encoder): tensor2tensor's timing signal;
    SAM 3's `SAM3SinePositionEmbedding` (DETR's 2-D sine, its box and
    point sines too); and D-FINE's `DFineHybridEncoder`
    (`DFineBackbone.encoder`), whose RT-DETR 2-D sine, a static method,
    becomes exact (the layer gets a subclass of its class overriding only
    that method; its weights, config and call are kept). The layer
    objects are kept and change class, so every reference to them
    (attention layers' attributes, functional graphs) sees the exact
    layer; weights are untouched. A subclass that cannot be mapped
    exactly (Moonshine's, which returns angles; an unknown one; Qwen 3.5's
    multimodal rotation) is refused by name, and then nothing is changed.

    Compiled functions (`predict_function`, keras-hub's
    `generate_function`, ...) are reset, so `predict` and `generate` trace
    the exact layers. A saved model (`model.save("m.keras")`) loads with
    exact layers (`import keras_posenc.compat` first). Rotary code of
    keras-hub that is not one of these layers (SmolLM3's, RoFormer's,
    vision encoders') is left as it is, with a warning.

    Args:
        model: a Keras model or layer, e.g. a keras-hub `Backbone` or
            `CausalLM`, built or not.

    Returns:
        int. How many layers were replaced (0 on a model already exact).

    Example:

    >>> import keras_hub
    >>> from keras_posenc import compat
    >>> backbone = keras_hub.models.LlamaBackbone(
    ...     vocabulary_size=100, num_layers=1, num_query_heads=2,
    ...     num_key_value_heads=1, hidden_dim=32, intermediate_dim=64)
    >>> compat.use_exact(backbone)
    1
    >>> compat.use_exact(backbone)
    0
    """
    require_keras3()
    swaps, marks, left = _plan(model)
    for layer, drop_in, options in swaps:
        layer.__class__ = drop_in
        layer.adopt(options)
    for marked in marks.values():
        _mark(marked)
    _reset_compiled(model)
    rotary = left.difference(_ALIBI_LEFT_AS_IS)
    if rotary:
        warnings.warn(
            "use_exact left keras-hub's other rotary code as it is (float32 "
            f"angles): {sorted(rotary)}.",
            stacklevel=2,
        )
    if left & set(_ALIBI_LEFT_AS_IS):
        warnings.warn(
            "use_exact left the ALiBi bias of keras-hub's Falcon as it is: "
            "FalconTransformerDecoder builds it in a method, in the compute "
            "dtype, not in a layer that could be replaced.",
            stacklevel=2,
        )
    return len(swaps)
