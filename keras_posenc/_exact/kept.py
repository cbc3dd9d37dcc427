"""The store of rows kept between eager calls: one budget, least recently used first.

The engine (Vaswani et al., 2017, section 3.5,
https://arxiv.org/abs/1706.03762) and the RoPE step tables keep the rows
of recent eager calls here (`Slot`); `keras_posenc.cache` is its public
face (`cache_info`, `clear_cache`, `set_cache_budget`), whose docstring
says what the store guarantees.
"""

import collections
import dataclasses
import threading
import weakref
from typing import Any

from keras_posenc._checks.arguments import bytes_from_environment

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


STORE = _Store(bytes_from_environment(BUDGET_VARIABLE, DEFAULT_BUDGET))


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
        weakref.finalize(owner, STORE.drop, self._key)

    def add_user(self, user):
        """Counts `user` (an object a layer holds) until it is collected."""
        with STORE.lock:
            self._users += 1
        weakref.finalize(user, self._release)

    def pin(self):
        """Keeps the entry while no layer uses it (for function calls)."""
        self._pinned = True

    def _release(self):
        with STORE.lock:
            self._users -= 1
            if self._users == 0 and not self._pinned:
                STORE.drop(self._key)

    def get(self, serves) -> Any:
        """The kept value if `serves(value)`, else `None` (a miss)."""
        return STORE.get(self._key, serves)

    def put(self, value, nbytes):
        """Keeps `value` (`nbytes` bytes) if it fits the budget, evicting others."""
        STORE.put(self._key, value, nbytes)


def fits(nbytes):
    """Whether `nbytes` of rows fit the budget (else they are not kept)."""
    return nbytes <= STORE.budget
