"""A diffusers `config.json`, read safely (`_hf.config_file` reads the bytes).

`from_diffusers_config` takes a dict, a `config.json` path, the model's
directory (a pipeline's `transformer/`) or the pipeline's root directory,
whose `transformer/config.json` is read (a pipeline's root holds
`model_index.json`, not a `config.json`). The file is read as any Hugging
Face config: a regular file of at most 4 MiB, nested at most 16 levels.
"""

import os
import pathlib

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened
from keras_posenc._hf import config_file as _hf_json

# The subfolder of a pipeline that holds its transformer (diffusers' layout).
SUBFOLDER = "transformer"


def _path(config):
    """The path to read: a pipeline's root is read at its `transformer/`."""
    path = pathlib.Path(config)
    try:
        nested = path / SUBFOLDER / "config.json"
        if path.is_dir() and not (path / "config.json").exists() and nested.exists():
            return path / SUBFOLDER
    except OSError:  # `_hf.config_file` names what cannot be read
        pass
    return path


def load(config):
    """The config dict of a diffusers model, with its `_class_name`.

    A transformers `config.json` (a `model_type`, no `_class_name`) is
    refused, pointing to `from_hf_config`.
    """
    if isinstance(config, (str, os.PathLike)):
        config = _path(config)
    content = _hf_json.load(config)
    if "_class_name" not in content:
        expected = "a diffusers config.json, which names its class in '_class_name'" + (
            " (this is a transformers config, with a 'model_type': read it "
            "with `RotaryEmbedding.from_hf_config`)"
            if "model_type" in content
            else ""
        )
        raise _arguments.invalid("config", expected, shortened(sorted(content)))
    return content
