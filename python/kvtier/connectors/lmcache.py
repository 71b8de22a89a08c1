"""kvtier as a native connector for LMCache's ``native_plugin`` L2 adapter.

LMCache builds the class named by an ``--l2-adapter`` JSON of type ``native_plugin`` as
``KvtierNativeConnector(**adapter_params)`` and wraps it in its native-connector bridge, which
polls ``event_fd()`` and then calls ``drain_completions()``. The connector's surface:

- ``event_fd() -> int``: an eventfd that becomes readable when an operation has finished.
- ``submit_batch_get(keys, memoryviews) -> int``, ``submit_batch_set(keys, memoryviews) -> int``,
  ``submit_batch_exists(keys) -> int``: start an operation and return its future id at once.
- ``drain_completions() -> list[(future_id, ok, error, per_key_results)]``: the operations that
  finished since the last call; never blocks.
  kvtier marks an operation done before it writes the descriptor it was given, so a drain that
  follows a wake-up always sees the operation that caused it.
- ``close()``: waits for the operations in flight (their buffers stay in use until kvtier ends
  them), then releases the store. Idempotent.

Keys are LMCache's object-key strings (model, KV rank, group and chunk hash, maybe a salt);
``kvtier.key_of`` maps each to a 32-byte kvtier key. An object's byte size fixes its kvtier
namespace (``byte_layout(size)``): a full chunk and a shorter last chunk live in two namespaces.
``submit_batch_exists`` carries no size, so it asks the namespaces of ``chunk_bytes`` (the
configured full-chunk size) and of every size this process has stored or loaded.

Results: a get reports True for each leading object loaded and verified; a missing or corrupt
object and those after it in the same size run are False, and a corrupt object's buffer is
zeroed, never left holding another object's bytes. A set reports per key whether kvtier accepted
it (took a copy). kvtier never waits for slow storage: when a tier or its write queue is full it
drops the object softly (counted in the store's ``dropped_saves``) and a later exists check says
False; a save it refuses outright is False. Nothing raises into LMCache. ``ok`` is True when every key succeeded (for
exists: when the check ran).

``adapter_params``: ``tiers`` (required), ``model_id`` (default ``"lmcache"``), ``tenant``,
``salt``, ``chunk_bytes``, ``exists_threads`` and the Store options
(``kvtier.connectors.STORE_OPTION_NAMES``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import threading
from typing import Any, List, Optional, Sequence, Tuple

import kvtier

from . import STORE_OPTION_NAMES, byte_layout, engine_key, group_by_size, open_store

logger = logging.getLogger(__name__)

Completion = Tuple[int, bool, str, Optional[List[bool]]]


@dataclasses.dataclass
class _Op:
    kind: str                       # "get", "set" or "exists"
    n_keys: int
    handles: list = dataclasses.field(default_factory=list)  # (positions, Handle) per size group
    future: Optional[concurrent.futures.Future] = None      # exists checks
    error: str = ""                 # set when the operation could not start


class KvtierNativeConnector:
    """LMCache native connector over a kvtier Store (see the module docstring)."""

    def __init__(self, tiers: Any = None, model_id: str = "lmcache", tenant: str = "",
                 salt: str = "", chunk_bytes: int | None = None, exists_threads: int = 1,
                 store: kvtier.Store | None = None, **store_options: Any) -> None:
        unknown = set(store_options) - set(STORE_OPTION_NAMES)
        if unknown:
            raise ValueError(f"unknown kvtier adapter_params: {sorted(unknown)}")
        self._own_store = store is None
        self._store = store if store is not None else open_store(tiers, store_options)
        self._model_id = model_id
        self._tenant = tenant
        self._salt = f"lmcache;{salt}" if salt else "lmcache"
        self._namespaces: dict[int, kvtier.Namespace] = {}
        self._lock = threading.Lock()
        self._ops: dict[int, _Op] = {}
        self._next_id = 1
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._exists_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(exists_threads)), thread_name_prefix="kvtier-lmcache-exists")
        self._closed = False
        if chunk_bytes:
            self._ns(int(chunk_bytes))

    # ---- LMCache's connector surface ---------------------------------------------------------------

    def event_fd(self) -> int:
        return self._efd

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        return self._submit_io("get", keys, memoryviews)

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        return self._submit_io("set", keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        self._check_open()
        kv_keys = [engine_key(k) for k in keys]
        op = _Op("exists", len(kv_keys))
        with self._lock:
            future_id = self._add(op)
            namespaces = list(self._namespaces.values())
            op.future = self._exists_pool.submit(self._exists, kv_keys, namespaces)
        op.future.add_done_callback(lambda _f: self._signal())
        return future_id

    def drain_completions(self) -> List[Completion]:
        """Operations finished since the last call; never blocks."""
        if not self._closed:  # after close the descriptor number may belong to someone else
            try:
                os.eventfd_read(self._efd)
            except BlockingIOError:
                pass  # nothing signalled since the last call
        with self._lock:
            done = [fid for fid, op in self._ops.items() if self._op_done(op)]
            ops = [(fid, self._ops.pop(fid)) for fid in done]
        return [self._complete(fid, op) for fid, op in ops]

    def close(self) -> None:
        """Waits for the operations in flight, then releases the store and the eventfd."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            ops = list(self._ops.values())
        for op in ops:
            for _, handle in op.handles:
                try:
                    handle.wait()
                except kvtier.KvtierError:
                    pass
        self._exists_pool.shutdown(wait=True)
        if self._own_store:
            self._store.close()
        os.close(self._efd)

    @property
    def store(self) -> kvtier.Store:
        return self._store

    # ---- internals ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the kvtier connector is closed")

    def _ns(self, size: int) -> kvtier.Namespace:
        ns = self._namespaces.get(size)
        if ns is None:
            ns = self._store.namespace(self._model_id, byte_layout(size), tenant=self._tenant,
                                       salt=self._salt)
            self._namespaces[size] = ns
        return ns

    def _add(self, op: _Op) -> int:
        future_id = self._next_id
        self._next_id += 1
        self._ops[future_id] = op
        return future_id

    def _signal(self) -> None:
        if not self._closed:
            os.eventfd_write(self._efd, 1)

    def _submit_io(self, kind: str, keys: Sequence[str], views: Sequence[Any]) -> int:
        self._check_open()
        if len(keys) != len(views):
            raise ValueError(f"{len(keys)} keys but {len(views)} buffers")
        kv_keys = [engine_key(k) for k in keys]
        sizes = [memoryview(v).nbytes for v in views]
        op = _Op(kind, len(kv_keys))
        with self._lock:
            future_id = self._add(op)
            try:
                for size, positions in group_by_size(sizes).items():
                    ns = self._ns(size)
                    ks = [kv_keys[i] for i in positions]
                    bufs = [views[i] for i in positions]
                    start = self._store.load_async if kind == "get" else self._store.save_async
                    op.handles.append((positions, start(ns, ks, bufs, notify_fd=self._efd)))
            except (kvtier.KvtierError, ValueError) as e:
                op.error = str(e)
        if op.error:
            self._signal()  # report the failure through the usual path
        return future_id

    def _exists(self, kv_keys: List[bytes], namespaces: List[kvtier.Namespace]) -> List[bool]:
        found = [False] * len(kv_keys)
        for i, k in enumerate(kv_keys):
            for ns in namespaces:
                if self._store.lookup(ns, [k]) == 1:
                    found[i] = True
                    break
        return found

    @staticmethod
    def _op_done(op: _Op) -> bool:
        if op.future is not None:
            return op.future.done()
        return all(handle.done() for _, handle in op.handles)

    def _complete(self, future_id: int, op: _Op) -> Completion:
        if op.kind == "exists":
            try:
                return (future_id, True, "", op.future.result())
            except Exception as e:  # a failed check is an unanswered one: report it, keep running
                return (future_id, False, str(e), None)
        results = [False] * op.n_keys
        errors = [op.error] if op.error else []
        for positions, handle in op.handles:
            try:
                count = int(handle.wait())
            except kvtier.KvtierError as e:
                count = 0
                errors.append(str(e))
            finally:
                handle.close()
            for j, pos in enumerate(positions):
                results[pos] = j < count
        ok = not errors and all(results)
        if not ok and not errors:
            errors.append(f"{results.count(False)} of {op.n_keys} objects not "
                          f"{'loaded' if op.kind == 'get' else 'stored'}")
        return (future_id, ok, "; ".join(errors), results)
