"""What the package keeps between eager calls: one budget, least recently used first.

Eager decoding asks every layer, at every step, for the rows of one new
position, and a prompt asks every layer of a model for the same span
(vllm and transformers keep a cos/sin cache per position for the same
reason). The exact engine of Vaswani et al. (2017, section 3.5,
https://arxiv.org/abs/1706.03762) and of RoPE keeps such rows, so that a
step reads a slice instead of running the engine. Everything it keeps
lives in one store, which is:

* **bounded**: one budget in bytes for all kept rows together (64 MiB, or
  `KERAS_POSENC_CACHE_BYTES` when the process starts; `set_cache_budget`
  changes it), the least recently used rows evicted first; rows larger
  than the budget are computed and not kept;
* **owned**: each entry belongs to an encoder (the rows of one
  configuration, shared by every layer that has it) and goes with it, so
  the rows of layers that are gone are released; `clear_cache` releases
  everything;
* **invisible**: a result never shares memory with kept rows, nothing is
  kept from inside a trace (`jax.jit`, `tf.function`, `torch.compile`),
  and rows are made outside torch's inference mode, so the order of calls
  never changes a result.
"""

import collections
import dataclasses
import os
import threading
import weakref
from typing import Any

from keras_posenc import _arguments

BUDGET_VARIABLE = "KERAS_POSENC_CACHE_BYTES"
DEFAULT_BUDGET = 64 * 2**20


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What the cache holds now (see `cache_info`).

    Attributes:
        entries: int. Kept blocks of rows.
        nbytes: int. Their size in bytes.
        budget: int. The most bytes kept at once.
        hits: int. Eager calls served from kept rows since the last clear.
        misses: int. Eager calls that had to compute (and maybe keep) rows.
    """

    entries: int
    nbytes: int
    budget: int
    hits: int
    misses: int


def _budget_from_environment():
    setting = os.environ.get(BUDGET_VARIABLE, "").strip()
    if not setting:
        return DEFAULT_BUDGET
    try:
        budget = int(setting)
    except ValueError:
        budget = -1
    if budget < 0:
        raise ValueError(
            f"The environment variable {BUDGET_VARIABLE} must be a non-negative "
            f"number of bytes. Received: {BUDGET_VARIABLE}={setting!r}"
        )
    return budget


class _Store:
    """Entries ``key -> (value, nbytes)`` in least-recently-used order."""

    def __init__(self, budget):
        self.lock = threading.RLock()
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._nbytes = 0
        self.budget = budget  # read without the lock: one int
        self._hits = self._misses = 0

    def get(self, key, serves):
        with self.lock:
            entry = self._entries.get(key)
            if entry is None or not serves(entry[0]):
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return entry[0]

    def put(self, key, value, nbytes):
        with self.lock:
            self.drop(key)
            if nbytes > self.budget:
                return
            self._entries[key] = (value, nbytes)
            self._nbytes += nbytes
            self._evict()

    def drop(self, key):
        with self.lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._nbytes -= entry[1]

    def clear(self):
        with self.lock:
            self._entries.clear()
            self._nbytes = self._hits = self._misses = 0

    def set_budget(self, budget):
        with self.lock:
            self.budget = budget
            self._evict()

    def _evict(self):
        while self._nbytes > self.budget:
            _, (_, nbytes) = self._entries.popitem(last=False)
            self._nbytes -= nbytes

    def info(self):
        with self.lock:
            return CacheInfo(
                entries=len(self._entries),
                nbytes=self._nbytes,
                budget=self.budget,
                hits=self._hits,
                misses=self._misses,
            )


_STORE = _Store(_budget_from_environment())


class Slot:
    """One entry of the cache: the rows an encoder keeps, shared by its users.

    The entry goes when the budget needs its bytes (least recently used
    first), when `owner` is collected, or when the last of its users (the
    row sources that layers hold) is collected and no function call pinned
    it: the rows of layers that are gone are released.

    Args:
        owner: the object whose rows the slot holds (an encoder).
    """

    def __init__(self, owner):
        self._key = object()
        self._users = 0
        self._pinned = False
        weakref.finalize(owner, _STORE.drop, self._key)

    def add_user(self, user):
        """Counts `user` (an object a layer holds) until it is collected."""
        with _STORE.lock:
            self._users += 1
        weakref.finalize(user, self._release)

    def pin(self):
        """Keeps the entry while no layer uses it (for function calls)."""
        self._pinned = True

    def _release(self):
        with _STORE.lock:
            self._users -= 1
            if self._users == 0 and not self._pinned:
                _STORE.drop(self._key)

    def get(self, serves) -> Any:
        """The kept value if `serves(value)`, else `None` (a miss)."""
        return _STORE.get(self._key, serves)

    def put(self, value, nbytes):
        """Keeps `value` (`nbytes` bytes) if it fits the budget, evicting others."""
        _STORE.put(self._key, value, nbytes)


def fits(nbytes):
    """Whether `nbytes` of rows fit the budget (else they are not kept)."""
    return nbytes <= _STORE.budget


def cache_info() -> CacheInfo:
    """What the cache of eager rows holds now: entries, bytes, budget, hits.

    The exact sinusoidal encoding (Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762) and RoPE keep the rows of recent
    eager calls (decoding steps, a prompt that every layer asks for) in one
    store with one budget; see `set_cache_budget` and `clear_cache`.

    Returns:
        A `CacheInfo`.

    Example:

    >>> keras_posenc.clear_cache()
    >>> pe = keras_posenc.SinusoidalPositionEncoding()
    >>> _ = pe(np.zeros((1, 8, 16), "float32"))
    >>> info = keras_posenc.cache_info()
    >>> info.entries, info.nbytes <= info.budget
    (1, True)
    """
    return _STORE.info()


def clear_cache() -> None:
    """Releases every row the package keeps between eager calls.

    Later calls compute their rows again (the same bits) and keep them
    within the budget. Hits and misses start again from zero.

    Example:

    >>> keras_posenc.clear_cache()
    >>> keras_posenc.cache_info().nbytes
    0
    """
    _STORE.clear()


def set_cache_budget(nbytes: int) -> int:
    """Sets the most bytes of rows kept between eager calls; returns the old one.

    The budget covers everything kept, for every layer and configuration
    together; the least recently used rows are evicted first. `0` keeps
    nothing: every eager call computes its rows (decoding steps cost an
    engine run each). The default is 64 MiB, or `KERAS_POSENC_CACHE_BYTES`
    when the process starts.

    Args:
        nbytes: int. A non-negative number of bytes.

    Returns:
        The previous budget, in bytes.

    Example:

    >>> old = keras_posenc.set_cache_budget(2**20)
    >>> keras_posenc.cache_info().budget
    1048576
    >>> _ = keras_posenc.set_cache_budget(old)
    """
    nbytes = _arguments.check_non_negative_int("nbytes", nbytes)
    old = _STORE.info().budget
    _STORE.set_budget(nbytes)
    return old


__all__ = ["CacheInfo", "cache_info", "clear_cache", "set_cache_budget"]
