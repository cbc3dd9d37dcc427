"""Names a `.keras` file may hold that `import keras_posenc` answers lazily.

`keras_posenc.compat` registers its keras-hub drop-ins and the models
`compat.use_exact` swaps (Llama, FLUX, MMDiT, BLOOM, ...) under these names
when it is imported; `import keras_posenc` does not import it (nor keras-hub,
which takes seconds). Until then each name is held by a stand-in whose
`from_config` imports `keras_posenc.compat` (whose import registers the real
class, replacing the stand-in) and reads the config with it, so such a file
loads in a fresh process after `import keras_posenc` alone. keras-hub's own
classes inside the file are imported by Keras from their modules.
"""

import importlib

PACKAGE = "keras_posenc"
# Every name `keras_posenc.compat` registers (tests/test_compat.py holds the
# two lists equal).
COMPAT_NAMES = (
    "KerasHubAlibiBias",
    "KerasHubESMRotaryEmbedding",
    "KerasHubExactModel",
    "KerasHubFluxRotaryPositionalEmbedding",
    "KerasHubFluxTimestepEmbedding",
    "KerasHubLlamaRotaryEmbedding",
    "KerasHubPhi3SuScaledRotaryEmbedding",
    "KerasHubRotaryEmbedding",
    "KerasHubSAM3SinePositionEmbedding",
    "KerasHubSD3TimestepEmbedding",
    "KerasHubSinePositionEncoding",
    "KerasHubVideoPrismSinusoidalPositionalEmbedding",
)


def _stand_in(keras, name):
    key = f"{PACKAGE}>{name}"

    class StandIn:
        @classmethod
        def from_config(cls, config):
            importlib.import_module(f"{PACKAGE}.compat")
            # The global registry, which the import filled (a load's own
            # scope may still hold this stand-in).
            real = keras.saving.get_custom_objects()[key]
            if real is cls:
                raise TypeError(f"keras_posenc.compat registers no {key!r}")
            return real.from_config(config)

        def get_config(self):  # never made: Keras asks registered classes for it
            raise NotImplementedError(key)

    StandIn.__name__ = StandIn.__qualname__ = name
    StandIn.__doc__ = f"Stands in for `{key}` until `keras_posenc.compat` is imported."
    return StandIn


def register_compat_names(keras):
    """Registers a stand-in under each name of `COMPAT_NAMES` not yet taken."""
    custom = keras.saving.get_custom_objects()
    for name in COMPAT_NAMES:
        key = f"{PACKAGE}>{name}"
        if key not in custom:
            custom[key] = _stand_in(keras, name)


__all__ = ["COMPAT_NAMES", "register_compat_names"]
