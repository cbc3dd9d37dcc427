"""keras_posenc: exact sinusoidal and rotary position encodings for Keras 3.

The encoding of Vaswani et al., "Attention Is All You Need" (2017),
section 3.5 (https://arxiv.org/abs/1706.03762), and rotary embeddings (Su
et al., 2021, https://arxiv.org/abs/2104.09864), exact to float32 rounding
on TensorFlow, JAX and PyTorch.

The public names, and the public submodules (`keras_posenc.compat`,
`keras_posenc.plot`, ...), are loaded on first use (PEP 562), so that the
command line answers `--help` without importing Keras. `import
keras_posenc` still registers the layers with Keras at once, so a `.keras`
file that uses them loads right after it; only the command line defers
that until it has read its arguments.
"""

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.5.3"

# Public name -> the module that defines it.
_PUBLIC = {
    "AlibiBias": "keras_posenc.alibi",
    "CacheInfo": "keras_posenc.cache",
    "GridPositionEncoding": "keras_posenc.grid",
    "RotaryEmbedding": "keras_posenc.rotary",
    "SinusoidalPositionEncoding": "keras_posenc.sinusoidal",
    "TimestepEmbedding": "keras_posenc.timestep",
    "apply_rotary": "keras_posenc.rotary",
    "alibi_bias": "keras_posenc.alibi",
    "alibi_slopes": "keras_posenc.alibi",
    "cache_info": "keras_posenc.cache",
    "clear_cache": "keras_posenc.cache",
    "export_encoder": "keras_posenc.export",
    "export_saved_model": "keras_posenc.export",
    "frequencies": "keras_posenc.tables",
    "grid_position_ids": "keras_posenc.rotary",
    "vision_position_ids": "keras_posenc.rotary",
    "grid_sincos_table": "keras_posenc.grid",
    "positional_encoding": "keras_posenc.tables",
    "rotary_cos_sin": "keras_posenc.rotary",
    "set_cache_budget": "keras_posenc.cache",
    "sinusoidal_table": "keras_posenc.tables",
    "timestep_embedding": "keras_posenc.timestep",
    "timestep_frequencies": "keras_posenc.timestep",
}

# Public submodules, reachable as attributes after `import keras_posenc`.
_SUBMODULES = {
    "alibi",
    "cache",
    "cli",
    "compat",
    "demo",
    "export",
    "grid",
    "layer",
    "plot",
    "rotary",
    "sinusoidal",
    "tables",
    "timestep",
}

__all__ = [
    "AlibiBias",
    "CacheInfo",
    "GridPositionEncoding",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "TimestepEmbedding",
    "__version__",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "cache_info",
    "clear_cache",
    "export_encoder",
    "export_saved_model",
    "frequencies",
    "grid_position_ids",
    "vision_position_ids",
    "grid_sincos_table",
    "positional_encoding",
    "rotary_cos_sin",
    "set_cache_budget",
    "sinusoidal_table",
    "timestep_embedding",
    "timestep_frequencies",
]

if TYPE_CHECKING:
    from keras_posenc.alibi import AlibiBias, alibi_bias, alibi_slopes
    from keras_posenc.cache import (
        CacheInfo,
        cache_info,
        clear_cache,
        set_cache_budget,
    )
    from keras_posenc.export import export_encoder, export_saved_model
    from keras_posenc.grid import GridPositionEncoding, grid_sincos_table
    from keras_posenc.rotary import (
        RotaryEmbedding,
        apply_rotary,
        grid_position_ids,
        rotary_cos_sin,
        vision_position_ids,
    )
    from keras_posenc.sinusoidal import SinusoidalPositionEncoding
    from keras_posenc.tables import frequencies, positional_encoding, sinusoidal_table
    from keras_posenc.timestep import (
        TimestepEmbedding,
        timestep_embedding,
        timestep_frequencies,
    )


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        # Importing a submodule also sets it as an attribute of the package.
        return importlib.import_module(f"{__name__}.{name}")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)


def _started_as_command_line() -> bool:
    """Whether this process is `python -m keras_posenc` or `keras-posenc`."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "keras-posenc":
        return True
    # While `-m` locates the module, sys.argv[0] is "-m": read the original
    # command line instead, skipping the interpreter's own options.
    args = iter(getattr(sys, "orig_argv", [])[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None) == __name__
        if arg.startswith("-m"):
            return arg[2:] == __name__
        if arg in ("-W", "-X"):
            next(args, None)
        elif not arg.startswith("-") or arg == "-c":
            return False
    return False


if not _started_as_command_line():
    # Registers the layers (SinusoidalPositionEncoding, RotaryEmbedding,
    # TimestepEmbedding, GridPositionEncoding, AlibiBias) with Keras.
    try:
        importlib.import_module("keras_posenc.sinusoidal")
    except ModuleNotFoundError as error:
        from keras_posenc import _tensorflow

        # A JAX- or torch-only install with Keras left on its default backend.
        if not _tensorflow.is_missing(error):
            raise
        raise ModuleNotFoundError(
            _tensorflow.NOT_INSTALLED_AS_BACKEND, name="tensorflow"
        ) from error
    importlib.import_module("keras_posenc.rotary")
    importlib.import_module("keras_posenc.timestep")
    importlib.import_module("keras_posenc.grid")
    importlib.import_module("keras_posenc.alibi")
