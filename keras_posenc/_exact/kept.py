"""The store of what is kept between eager calls: one budget, least recently used first.

The engine (Vaswani et al., 2017, section 3.5,
https://arxiv.org/abs/1706.03762) and the RoPE step tables keep the rows
of recent eager calls here (`Slot`), and the engines and frequencies of
recent configurations (`memoized`); `keras_posenc.cache` is its public
face (`cache_info`, `clear_cache`, `set_cache_budget`), whose docstring
says what the store guarantees.
"""

import collections
import dataclasses
import functools
import threading
import weakref
from typing import Any

import numpy as np

from keras_posenc._checks.arguments import bytes_from_environment

BUDGET_VARIABLE = "KERAS_POSENC_CACHE_BYTES"
DEFAULT_BUDGET = 64 * 2**20
# How many first requests `memoized(..., repeat_only=True)` remembers (a
# hash each, all functions together): a key asked for again after more
# first requests than this counts as a first request again.
FIRST_REQUESTS = 1024


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What the package keeps between eager calls, as `cache_info` returns it.

    The rows the exact encodings (Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762; RoPE) keep for decoding steps and
    prompts, and the engines of recent configurations, within one budget.

    Attributes:
        entries: int. Kept blocks of rows.
        nbytes: int. Everything kept, in bytes: the rows and the engines.
        budget: int. The most bytes kept at once.
        hits: int. Eager calls served from kept rows since the last clear.
        misses: int. Eager calls that had to compute (and maybe keep) rows.
        engines: int. Kept values built once per configuration (an engine
            with its constants and compiled functions, RoPE frequencies),
            for the next layer or function call of that configuration; a
            sinusoidal or RoPE configuration's from its second request
            (the first lives with the layers holding it, and is not
            counted).
        engine_nbytes: int. Their size in bytes (part of `nbytes`).

    Example:

    >>> info = keras_posenc.cache_info()
    >>> isinstance(info, keras_posenc.CacheInfo), info.nbytes <= info.budget
    (True, True)
    """

    entries: int
    nbytes: int
    budget: int
    hits: int
    misses: int
    engines: int = 0
    engine_nbytes: int = 0


class _Memo:
    """The owner of the values one `memoized` function keeps, and of those
    its callers hold (`living`, weakly: a value is never built twice while
    one of them holds it)."""

    def __init__(self, name):
        self.name = name
        self.living: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def held(self, key):
        """The value of `key` that a caller still holds, else `None`."""
        with STORE.lock:
            return self.living.get(key)

    def hold_weakly(self, key, value):
        with STORE.lock:
            try:
                self.living[key] = value
            except TypeError:  # a tuple (RoPE frequencies): built again
                pass

    def __repr__(self):
        return f"<memo of {self.name}>"


class _Store:
    """Entries ``(slot, key) -> (value, nbytes, pinned)``, least recently used first."""

    def __init__(self, budget):
        self.lock = threading.RLock()
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._nbytes = 0
        self.budget = budget  # read without the lock: one int
        self._hits = self._misses = 0
        # hash((memo, key)) of the last `FIRST_REQUESTS` first requests
        # (`asked_before`), oldest overwritten first: a fixed 8 KiB made
        # once, not a Python int and a dict entry per configuration (which
        # grew the process by 0.2 KiB for each configuration used once).
        self._asked = np.zeros(FIRST_REQUESTS, np.int64)
        self._asked_count = 0  # first requests recorded since the last clear

    def asked_before(self, token):
        """Whether `token` (a hash) is among the last `FIRST_REQUESTS` first
        requests recorded since the last clear; else records it."""
        with self.lock:
            recorded = self._asked[: self._asked_count]
            if (recorded == token).any():
                return True
            self._asked[self._asked_count % FIRST_REQUESTS] = token
            self._asked_count += 1
            return False

    def find(self, slot, keys, serves):
        """The first kept value under `keys` that `serves`, else `None`;
        one hit or one miss either way."""
        with self.lock:
            for key in keys:
                entry = self._entries.get((slot, key))
                if entry is not None and serves(entry[0]):
                    self._entries.move_to_end((slot, key))
                    self._hits += 1
                    return entry[0]
            self._misses += 1
            return None

    def get(self, owner, key):
        """The value kept under `key` for `owner`, else `None` (no hit or miss:
        those count calls served rows)."""
        with self.lock:
            entry = self._entries.get((owner, key))
            if entry is None:
                return None
            self._entries.move_to_end((owner, key))
            return entry[0]

    # Values leave the store after its lock is released (`dropped`): an
    # encoder that goes with its entry runs its slot's finalizer, which
    # drops its rows from the store.

    def put(self, slot, key, value, nbytes, pinned):
        with self.lock:
            dropped = [self._pop((slot, key))]
            if nbytes > self.budget:
                return
            self._entries[(slot, key)] = (value, nbytes, pinned)
            self._nbytes += nbytes
            dropped += self._evict()
        del dropped

    def drop_slot(self, slot, keep_pinned=False):
        """Drops `slot`'s entries (but its pinned ones, with `keep_pinned`)."""
        with self.lock:
            dropped = [
                self._pop(key)
                for key, entry in list(self._entries.items())
                if key[0] is slot and not (keep_pinned and entry[2])
            ]
        del dropped

    def _pop(self, key):
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._nbytes -= entry[1]
        return entry

    def clear(self):
        with self.lock:
            dropped, self._entries = self._entries, collections.OrderedDict()
            self._nbytes = self._hits = self._misses = 0
            self._asked_count = 0
        del dropped

    def set_budget(self, budget):
        """Sets the budget, evicts down to it; returns the old one."""
        with self.lock:
            old, self.budget = self.budget, budget
            dropped = self._evict()
        del dropped
        return old

    def _evict(self):
        dropped = []
        while self._nbytes > self.budget:
            _, entry = self._entries.popitem(last=False)
            self._nbytes -= entry[1]
            dropped.append(entry)
        return dropped

    def info(self):
        with self.lock:
            memos = [
                entry[1]
                for key, entry in self._entries.items()
                if isinstance(key[0], _Memo)
            ]
            return CacheInfo(
                entries=len(self._entries) - len(memos),
                nbytes=self._nbytes,
                budget=self.budget,
                hits=self._hits,
                misses=self._misses,
                engines=len(memos),
                engine_nbytes=sum(memos),
            )


STORE = _Store(bytes_from_environment(BUDGET_VARIABLE, DEFAULT_BUDGET))


class Slot:
    """The rows one owner (an encoder, step tables) keeps, shared by its users.

    The owner keeps several entries (the blocks of several decoding
    sessions, a prompt), each under its own key, all within the one budget.
    An entry goes when the budget needs its bytes (least recently used
    first), when `owner` is collected, or, unless a function call put it
    (`pinned`), when the last of the slot's users (the row sources that
    layers hold) is collected: the rows of layers that are gone are
    released, whatever function calls did.

    Args:
        owner: the object whose rows the slot holds.
    """

    def __init__(self, owner):
        self._id = object()
        self._users = 0
        weakref.finalize(owner, STORE.drop_slot, self._id)

    def add_user(self, user):
        """Counts `user` (an object a layer holds) until it is collected."""
        with STORE.lock:
            self._users += 1
        weakref.finalize(user, self._release)

    def _release(self):
        with STORE.lock:
            self._users -= 1
            if self._users == 0:
                STORE.drop_slot(self._id, keep_pinned=True)

    def find(self, keys, serves) -> Any:
        """The first kept value under one of `keys` that `serves`, or `None`."""
        return STORE.find(self._id, keys, serves)

    def put(self, key, value, nbytes, pinned=False):
        """Keeps `value` (`nbytes` bytes) under `key` if it fits the budget."""
        STORE.put(self._id, key, value, nbytes, pinned)


def fits(nbytes):
    """Whether `nbytes` of rows fit the budget (else they are not kept)."""
    return nbytes <= STORE.budget


def memoized(nbytes_of, repeat_only=False):
    """Keeps `make(*key)` per key in the store, within the one budget.

    For what is built once per configuration and shared by the layers and
    function calls that have it (an `_exact.engine.Encoder`, RoPE
    frequencies): each value counts `nbytes_of(value)` bytes, goes least
    recently used first (with the rows) and with `clear_cache`, and is built
    again by the next call that needs it. Whoever holds a value (a layer)
    keeps using it, and a value someone holds is handed to the next caller
    of its key instead of being built again (held weakly: `_Memo.living`).
    A plain function (no `functools.lru_cache`, which `torch.compile` would
    warn about); a value larger than the budget is returned and not kept.

    Args:
        nbytes_of: what a value costs, in bytes.
        repeat_only: bool. Keep a key's value only from the key's second
            request (among the last `FIRST_REQUESTS` first ones): the first
            one's lives as long as its callers hold it, so that a
            configuration used once (one layer, dropped) leaves nothing
            behind (issue 47: 250 RoPE configurations kept 10 MiB of
            engines). For values that their callers hold (a layer holds its
            encoder); the second request of a key whose first value is gone
            builds it once more.
    """

    def decorate(make):
        owner = _Memo(make.__qualname__)

        @functools.wraps(make)
        def memo(*key):
            value = STORE.get(owner, key)
            if value is not None:
                return value
            value = owner.held(key)
            if value is None:
                value = make(*key)
                owner.hold_weakly(key, value)
            if not repeat_only or STORE.asked_before(hash((owner, key))):
                STORE.put(owner, key, value, nbytes_of(value), True)
            return value

        return memo

    return decorate
