"""``KvtierNativeConnector``: the class LMCache's ``native_plugin`` L2 adapter builds as
``KvtierNativeConnector(**adapter_params)`` and wraps in its native-connector bridge (re-exported as
``kvtier.connectors.lmcache``'s): its constructor and the surface the bridge calls."""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any, List, Sequence

import kvtier

from .. import byte_layout, engine_key, open_store, split_engine_kwargs
from .._pending import PendingWrites
from .identity import SizeRegistry
from .ops import Completion, Op
from .options import OWN_OPTIONS, SLOT
from .submission import Submission


class KvtierNativeConnector(Submission, SizeRegistry):
    """LMCache native connector over a kvtier Store (see the package docstring)."""

    def __init__(self, **adapter_params: Any) -> None:
        opts = split_engine_kwargs(adapter_params, OWN_OPTIONS, "kvtier LMCache connector")
        store = opts.get("store")
        self._own_store = store is None
        self._store = store if store is not None else open_store(opts.get("tiers"), opts)
        self._model_id = str(opts.get("model_id", "lmcache"))
        self._tenant = str(opts.get("tenant", ""))
        self._salt = str(opts["salt"]) if opts.get("salt") else None
        self._max_sizes = max(1, int(opts.get("max_sizes", 64)))
        self._namespaces: dict[int, kvtier.Namespace] = {}
        self._lock = threading.RLock()  # _submit_io makes namespaces while it holds it
        self._ops: dict[int, Op] = {}
        self._next_id = 1
        self._pending = PendingWrites(self._store)
        self._registry = self._identity("size-registry", SLOT.size).namespace(
            byte_layout(SLOT.size), tenant=self._tenant)
        self._slots = 0  # registry slots read so far
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._exists_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(opts.get("exists_threads", 1))),
            thread_name_prefix="kvtier-lmcache-exists")
        self._closed = False
        self._read_registry()
        if opts.get("chunk_bytes"):
            self._ns(int(opts["chunk_bytes"]))

    # ---- LMCache's connector surface ---------------------------------------------------------------

    def event_fd(self) -> int:
        return self._efd

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        """A get of an object this process stored whose write may still be on its way to a tier
        (read-your-writes) waits, on the connector's thread pool, until that write settled."""
        try:
            after_writes = any(engine_key(k) in self._pending for k in keys)
        except (TypeError, ValueError):
            after_writes = False  # _submit_io reports the bad key as a failed completion
        if after_writes and len(keys) == len(memoryviews):
            return self._submit_task("get", keys, lambda kv_keys: self._get_after_writes(kv_keys, memoryviews))
        return self._submit_io("get", keys, memoryviews)

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        return self._submit_io("set", keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        return self._submit_task("exists", keys, self._exists)

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        return self._submit_task("delete", keys, self._delete)

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

    def get_usage(self) -> dict:
        """Bytes and chunks kvtier holds, and its capacity (0: unbounded), over all tiers."""
        tiers = self._store.stats().get("tiers", [])
        return {"usage_bytes": sum(int(t.get("usage_bytes", 0)) for t in tiers),
                "chunks": sum(int(t.get("chunks", 0)) for t in tiers),
                "capacity_bytes": sum(int(t.get("capacity_bytes", 0)) for t in tiers)}

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
