"""The keras_posenc version that wrote a layer config, and its reading.

Every layer's `get_config` records the version that wrote it under
`VERSION_KEY`; `from_config` reads a config as that version meant it. A
key whose meaning changed is a `Change`: the version that first wrote the
present meaning, and how an older config says the same thing today. A
config from a newer keras_posenc is refused by name, never half read.

Configs without the key were written before 0.4.1. Their writer is told
from the config's shape where a change needs it (each `Change` says how),
and is otherwise the newest of them, whose meanings are today's.
"""

import re
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

VERSION_KEY = "keras_posenc_version"
# Versions as keras_posenc writes them ("0.4.0", "0.5.0.dev1", "1.0.0rc1").
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:[.+-]?[0-9A-Za-z.+-]*)?")
_EXPECTED = "the keras_posenc version that wrote the config, such as '0.4.0'"


class Change(NamedTuple):
    """A config key whose meaning changed in `version`.

    Attributes:
        version: the first version that wrote today's meaning.
        upgrade: the config, written before `version`, as today reads it.
        unversioned_older: whether a config without a version key has the
            shape of one written before `version`.
    """

    version: tuple[int, int, int]
    upgrade: Callable[[dict], dict]
    unversioned_older: Callable[[dict], bool]


def current() -> str:
    """This package's version."""
    return sys.modules["keras_posenc"].__version__


def parse(value: Any) -> tuple[int, int, int]:
    """`(major, minor, patch)` of a version string, or a ValueError naming it."""
    match = _VERSION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _invalid(value)
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _invalid(value):
    from keras_posenc._checks import arguments

    return arguments.invalid(VERSION_KEY, _EXPECTED, value)


def stamped(config: dict) -> dict:
    """`config` with the version that writes it."""
    config[VERSION_KEY] = current()
    return config


def as_written(config: dict, layer: str, changes: tuple = ()) -> dict:
    """A copy of `config` without its version key, meaning what its writer meant.

    Args:
        config: a `get_config` dict of any keras_posenc version.
        layer: the class name, for the message.
        changes: the layer's `Change`s, oldest first.

    Returns:
        The config as today's constructor reads it.

    Raises:
        ValueError: the version is not a version, or is newer than this
            package's (its meanings are unknown here).
    """
    config = dict(config)
    written = config.pop(VERSION_KEY, None)
    if written is not None:
        version = parse(written)
        if version > parse(current()):
            raise ValueError(
                f"This {layer} config was written by keras_posenc {written}, newer "
                f"than this keras_posenc {current()}: its meaning may differ here, "
                f"so it is not read. Upgrade keras_posenc to load it. Received: "
                f"{VERSION_KEY}={written!r}"
            )
    for change in changes:
        older = (
            change.unversioned_older(config)
            if written is None
            else version < change.version
        )
        if older:
            config = change.upgrade(config)
    return config


class Versioned:
    """Mixin of a Keras layer whose config records the version that wrote it.

    A layer whose config keys changed meaning lists its `Change`s in
    `config_changes`.
    """

    config_changes: tuple = ()

    def get_config(self):
        return stamped(super().get_config())  # type: ignore[misc]

    @classmethod
    def from_config(cls, config):
        config = as_written(config, cls.__name__, cls.config_changes)
        return super().from_config(config)  # type: ignore[misc]


__all__ = [
    "VERSION_KEY",
    "Change",
    "Versioned",
    "as_written",
    "current",
    "parse",
    "stamped",
]
