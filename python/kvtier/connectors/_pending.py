"""Read-your-writes for the connectors: a per-process in-flight set consulted by lookups.

A connector reports a store successful once kvtier has taken a copy; the chunk may still be on its
way to a tier whose writes run in the background (file://, fs://, redis://, ...). Every key whose
store this process reported (or started) is kept here until a lookup has seen it settle:

- ``PRESENT``: the store's own lookup finds it -- the key leaves the set;
- ``PENDING``: not visible yet while its save still runs (its job is not done, or kvtier's
  background write queue is not empty) -- asked again, it answers PENDING again until it settles;
- ``ABSENT``: not visible although nothing is left to write it (kvtier dropped it softly: a full
  tier or queue) -- the key leaves the set and the engine recomputes the block.

The queue backlog is read before the lookup, so "nothing is left to write it" is never concluded
from a lookup that ran before the last write finished. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Optional

import kvtier

PRESENT, PENDING, ABSENT = "present", "pending", "absent"

_MAX_KEYS = 1 << 20  # a bound on the set: past it the oldest keys are forgotten (they answer by lookup)


class PendingWrites:
    def __init__(self, store: kvtier.Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        # kvtier key -> the running save's done() (None: the save call has returned)
        self._keys: dict[bytes, Optional[Callable[[], bool]]] = {}

    def started(self, keys: Iterable[bytes], done: Optional[Callable[[], bool]] = None) -> None:
        """Saves of ``keys`` were started (``done``: the asynchronous operation's done()) or have
        returned (``done`` None)."""
        with self._lock:
            for k in keys:
                self._keys.pop(k, None)  # re-insert: the newest save decides, the oldest key goes first
                self._keys[k] = done
            while len(self._keys) > _MAX_KEYS:
                self._keys.pop(next(iter(self._keys)))

    def forget(self, keys: Iterable[bytes]) -> None:
        with self._lock:
            for k in keys:
                self._keys.pop(k, None)

    def __contains__(self, key: bytes) -> bool:
        with self._lock:
            return key in self._keys

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys)

    def state(self, ns: kvtier.Namespace, key: bytes) -> str:
        """PRESENT, PENDING or ABSENT for a key of this set (see the module docstring); for a key
        not in the set, PRESENT or ABSENT by the store's lookup."""
        with self._lock:
            tracked = key in self._keys
            done = self._keys.get(key)
        if not tracked:
            return PRESENT if self._store.lookup(ns, [key]) == 1 else ABSENT
        running = done is not None and not _safe(done)
        backlog = 0 if running else _backlog(self._store)
        if self._store.lookup(ns, [key]) == 1:
            self.forget([key])
            return PRESENT
        if running or backlog > 0:
            return PENDING
        self.forget([key])
        return ABSENT

    def wait(self, ns: kvtier.Namespace, key: bytes, limit_s: float = 5.0) -> str:
        """state(), waiting while PENDING (for engine calls that have no "not yet" answer); the
        limit only guards against a tier that never finishes."""
        deadline = time.monotonic() + limit_s
        delay = 0.0005
        while True:
            s = self.state(ns, key)
            if s != PENDING or time.monotonic() >= deadline:
                return s
            time.sleep(delay)
            delay = min(delay * 2, 0.02)


def _safe(done: Callable[[], bool]) -> bool:
    try:
        return bool(done())
    except Exception:  # a closed handle has ended
        return True


def _backlog(store: kvtier.Store) -> int:
    stats: Any = store.stats()
    return int(stats.get("queue_chunks_now", 0))  # queued and running background writes
