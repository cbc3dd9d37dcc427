"""A Hugging Face `config.json`, read safely: a regular file, bounded in size
and depth.

`RotaryEmbedding.from_hf_config` takes a dict, or the path of a
`config.json` file or of a directory holding one. A path must name a
regular file: a FIFO, a device (`/dev/zero`) or a socket is refused
without reading a byte (it is opened without blocking, then checked). At
most `MAX_BYTES` are read, a config nested deeper than `MAX_DEPTH` is
refused, and so is a dict whose keys are not all strings. Every refusal is
a `ValueError` naming `config`, raised in milliseconds.
"""

import json
import os
import pathlib
import stat

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks.echo import shortened

# Published configs are 1-100 KB (Phi-3's LongRoPE lists included).
MAX_BYTES = 4 << 20
# Published configs nest 3 or 4 levels (a text_config's rope dicts).
MAX_DEPTH = 16
# Published configs hold a few thousand values (LongRoPE's lists included).
MAX_VALUES = 2**18
_NESTED = (dict, list, tuple)
FILE = "a dict, or the path of a config.json file or of a directory holding one"
_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _refused(why, echo):
    return _arguments.invalid("config", f"{FILE} ({why})", echo)


def _read(path, echo):
    """The bytes of the regular file at `path` (at most `MAX_BYTES`)."""
    try:
        if path.is_dir():
            path = path / "config.json"
        fd = os.open(path, _OPEN)
    except OSError as error:
        raise _refused(error, echo) from None
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refused(f"{str(path)!r} is not a regular file", echo)
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise _refused(f"a file of at most {MAX_BYTES} bytes", echo)
    return data


def check_plain(config, echo):
    """Refuses keys that are not strings, nesting past `MAX_DEPTH` and more
    than `MAX_VALUES` values (counted before they are looked at)."""
    stack, count = [(config, 1)], 0
    while stack:
        value, depth = stack.pop()
        count += len(value)
        if depth > MAX_DEPTH:
            raise _refused(f"nested at most {MAX_DEPTH} levels deep", echo)
        if count > MAX_VALUES:
            raise _refused(f"at most {MAX_VALUES} values in all", echo)
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise _refused(f"string keys, as JSON has, not {key!r}", echo)
            value = value.values()
        stack.extend((v, depth + 1) for v in value if isinstance(v, _NESTED))


def with_overrides(arguments, overrides, read, method="from_hf_config"):
    """`arguments` read from a config, then the caller's `overrides`, which
    may not repeat one of the keys in `read` (a `ValueError` naming it and
    the reader, `method`). Every config reader's one check of them."""
    overrides = overrides or {}
    for key in read:
        if key in overrides:
            read = arguments.get(key)
            here = (
                "this model leaves it at the layer's default"
                if read is None
                else f"here {shortened(read)!r}"
            )
            expected = (
                f"no `{key}` argument to {method}: it is read from `config` "
                f"({here}); build the layer directly to set it"
            )
            raise _arguments.invalid(key, expected, shortened(overrides[key]))
    return {**arguments, **overrides}


def load(config):
    """The config dict: `config` itself, or the JSON object at its path."""
    if isinstance(config, dict):
        check_plain(config, shortened(config))
        return config
    if not isinstance(config, (str, os.PathLike)):
        raise _arguments.invalid("config", FILE, shortened(config))
    echo = shortened(os.fspath(config))
    data = _read(pathlib.Path(config), echo)
    try:
        content = json.loads(data)
    except RecursionError:
        raise _refused(f"nested at most {MAX_DEPTH} levels deep", echo) from None
    except ValueError as error:  # JSON, or UTF-8, that does not decode
        raise _refused(error, echo) from None
    if not isinstance(content, dict):
        raise _refused("a JSON object", echo)
    check_plain(content, echo)
    return content
