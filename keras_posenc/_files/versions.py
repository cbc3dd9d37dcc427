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
# PEP 440's optional parts after the release, in their order: a pre-release
# (a, b, rc), a post-release (".postN", or "-N"), a development release
# (".devN"), a local label ("+..."); separators and spelling as PEP 440
# normalizes them.
_SUFFIX = re.compile(
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:-(?P<post_implicit>\d+)|[-_.]?(?P<post>post|rev|r)[-_.]?(?P<post_n>\d*))?"
    r"(?:[-_.]?(?P<dev>dev)[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?",
    re.IGNORECASE,
)
_PRE = {"a": -3, "alpha": -3, "b": -2, "beta": -2, "c": -1, "rc": -1}
_PRE.update(pre=-1, preview=-1)
_NONE = 1 << 62  # no dev part sorts after every devN
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


def order(value: Any) -> tuple[int, ...]:
    """A version string's place in PEP 440's order: its release, then its
    pre-release, post-release and development parts (a local label aside),
    so that "0.5.0.dev1" < "0.5.0a1" < "0.5.0rc1.dev2" < "0.5.0rc1" <
    "0.5.0" < "0.5.0.post1.dev3" < "0.5.0.post1"; a ValueError naming it."""
    release = parse(value)
    parts = _SUFFIX.fullmatch(re.sub(r"^\d+\.\d+\.\d+", "", value))
    if parts is None:
        raise _invalid(value)
    pre, dev = parts["pre"], parts["dev"]
    post = parts["post_implicit"] or parts["post_n"]
    is_post = post is not None or parts["post"] is not None
    if pre is not None:
        pre_key = (_PRE[pre.lower()], int(parts["pre_n"] or 0))
    elif dev is not None and not is_post:
        pre_key = (-4, 0)  # "1.0.0.dev1" before "1.0.0a1"
    else:
        pre_key = (0, 0)
    post_key = int(post or 0) if is_post else -1
    dev_key = _NONE if dev is None else int(parts["dev_n"] or 0)
    return (*release, *pre_key, post_key, dev_key)


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
        ValueError: the version is not a version, is newer than this
            package's (its meanings are unknown here), or is a pre-release
            of a version in `changes` (it may have either meaning).
    """
    config = dict(config)
    written = config.pop(VERSION_KEY, None)
    if written is not None:
        version, today = order(written), order(current())
        if version > today:
            raise ValueError(
                f"This {layer} config was written by keras_posenc {written}, newer "
                f"than this keras_posenc {current()}: its meaning may differ here, "
                f"so it is not read. Upgrade keras_posenc to load it. Received: "
                f"{VERSION_KEY}={written!r}"
            )
    for change in changes:
        if written is None:
            older = change.unversioned_older(config)
        elif (  # not this build's own: a pre-release of the change
            version != today
            and version[:3] == change.version
            and version < (*change.version, 0, 0, -1, _NONE)
        ):
            raise ValueError(
                f"This {layer} config was written by keras_posenc {written}, a "
                f"pre-release of {'.'.join(map(str, change.version))}, the version "
                "that changed the meaning of some of its keys: whether it has the "
                "old meaning or the new one is unknown, so it is not read. Save it "
                f"again with a release of keras_posenc. Received: "
                f"{VERSION_KEY}={written!r}"
            )
        else:  # this build's own configs have today's meaning
            older = version != today and version[:3] < change.version
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
    "order",
    "current",
    "parse",
    "stamped",
]
