"""kvtier as a native connector for LMCache's ``native_plugin`` L2 adapter.

LMCache builds the class named by an ``--l2-adapter`` JSON of type ``native_plugin`` as
``KvtierNativeConnector(**adapter_params)`` and wraps it in its native-connector bridge, which
polls ``event_fd()`` and then calls ``drain_completions()``. The connector's surface:

- ``event_fd() -> int``: an eventfd that becomes readable when an operation has finished.
- ``submit_batch_get(keys, memoryviews) -> int``, ``submit_batch_set(keys, memoryviews) -> int``,
  ``submit_batch_exists(keys) -> int``: start an operation and return its future id at once.
- ``submit_batch_delete(keys) -> int``: removes the objects from every kvtier tier (LMCache's L2
  eviction), in every object size this connector knows.
- ``drain_completions() -> list[(future_id, ok, error, per_key_results)]``: the operations that
  finished since the last call; never blocks.
  kvtier marks an operation done before it writes the descriptor it was given, so a drain that
  follows a wake-up always sees the operation that caused it.
- ``close()``: waits for the operations in flight (their buffers stay in use until kvtier ends
  them), then releases the store. Idempotent. A submit after close returns a future id whose
  completion (in the next drain) is a failure, "closed"; it never raises.
- ``get_usage() -> dict``: bytes and chunks kvtier holds, and its capacity, summed over the tiers.

Keys are LMCache's object-key strings (model, KV rank, group and chunk hash, maybe a salt);
``kvtier.key_of`` maps each to a 32-byte kvtier key. An object's byte size fixes its kvtier
namespace (``byte_layout(size)``): a full chunk and a shorter last chunk live in two namespaces.
``submit_batch_exists`` carries no size, so it asks the namespace of every object size the pool
has seen: the sizes are kept in the pool itself (a size registry of up to ``max_sizes`` slots,
each an 8-byte chunk of its own namespace), so after a restart exists finds the objects of every
size earlier processes wrote, without ``chunk_bytes`` (still accepted, as a size known at once).
Identity (``kvtier.EngineIdentity``): engine ``lmcache``, layout ``object``, the model id, the
object's byte size and the salt; LMCache's object keys already carry its model, KV rank and
chunk hash. Read-your-writes: an exists right after a set of this process waits for that set
to become visible (``_pending.PendingWrites``).

Results: a get reports True for each leading object loaded and verified; a missing or corrupt
object and those after it in the same size run are False, and a corrupt object's buffer is
zeroed, never left holding another object's bytes. A set reports per key whether kvtier accepted
it (took a copy). kvtier never waits for slow storage: when a tier or its write queue is full it
drops the object softly (counted in the store's ``dropped_saves``) and a later exists check says
False; a save it refuses outright is False. Nothing raises into LMCache. ``ok`` is True when every key succeeded (for
exists: when the check ran).

``adapter_params``: ``tiers`` (required), ``model_id`` (default ``"lmcache"``), ``tenant``,
``salt``, ``chunk_bytes``, ``max_sizes`` (default 64), ``exists_threads`` and the Store options
(``kvtier.connectors.STORE_OPTION_NAMES``). Other parameters are logged and ignored unless they
are a close misspelling of one of these (refused).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import struct
import threading
from typing import Any, List, Optional, Sequence, Tuple

import kvtier

from . import (STORE_OPTION_NAMES, byte_layout, engine_key, group_by_size, open_store, remove_keys,
               split_engine_kwargs)
from ._pending import PRESENT, PendingWrites

logger = logging.getLogger(__name__)

Completion = Tuple[int, bool, str, Optional[List[bool]]]

OWN_OPTIONS = ("tiers", "model_id", "tenant", "salt", "chunk_bytes", "max_sizes", "exists_threads",
               "store") + STORE_OPTION_NAMES
_SLOT = struct.Struct("<Q")


@dataclasses.dataclass
class _Op:
    kind: str                       # "get", "set", "exists" or "delete"
    n_keys: int
    handles: list = dataclasses.field(default_factory=list)  # (positions, Handle) per size group
    future: Optional[concurrent.futures.Future] = None      # exists checks and deletes
    error: str = ""                 # set when the operation could not start
    kv_keys: list = dataclasses.field(default_factory=list)


class KvtierNativeConnector:
    """LMCache native connector over a kvtier Store (see the module docstring)."""

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
        self._ops: dict[int, _Op] = {}
        self._next_id = 1
        self._pending = PendingWrites(self._store)
        self._registry = self._identity("size-registry", _SLOT.size).namespace(
            byte_layout(_SLOT.size), tenant=self._tenant)
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

    # ---- identity, namespaces and the size registry ------------------------------------------------

    def _identity(self, layout: str, size: int) -> kvtier.EngineIdentity:
        return kvtier.EngineIdentity(engine="lmcache", layout=layout, model=self._model_id,
                                     block_bytes=size, salt=self._salt)

    def _ns(self, size: int) -> kvtier.Namespace:
        with self._lock:
            ns = self._namespaces.get(size)
        if ns is None:
            ns = self._identity("object", size).namespace(byte_layout(size), tenant=self._tenant)
            with self._lock:
                ns = self._namespaces.setdefault(size, ns)
        return ns

    def _slot_key(self, i: int) -> bytes:
        return kvtier.key_of(f"kvtier-lmcache-size-slot:{i}")

    def _read_registry(self) -> None:
        """Reads the registry slots written since the last read (by any process)."""
        while self._slots < self._max_sizes:
            buf = bytearray(_SLOT.size)
            key = self._slot_key(self._slots)
            if self._store.lookup(self._registry, [key]) != 1 or \
                    self._store.load(self._registry, [key], [buf]) != 1:
                return
            self._ns(_SLOT.unpack(buf)[0])
            self._slots += 1

    def _register_size(self, size: int) -> None:
        """Makes ``size`` known to later processes: the first free registry slot gets it."""
        with self._lock:
            if size in self._namespaces:
                return
        self._read_registry()
        with self._lock:
            if size in self._namespaces:
                return
        self._ns(size)
        if self._slots >= self._max_sizes:
            logger.warning("kvtier: more than %d LMCache object sizes; objects of %d bytes are found "
                           "by exists only in this process", self._max_sizes, size)
            return
        self._store.save(self._registry, [self._slot_key(self._slots)], [_SLOT.pack(size)])
        self._slots += 1

    # ---- internals ---------------------------------------------------------------------------------

    def _add(self, op: _Op) -> int:
        future_id = self._next_id
        self._next_id += 1
        self._ops[future_id] = op
        return future_id

    def _signal(self) -> None:
        if not self._closed:
            try:
                os.eventfd_write(self._efd, 1)
            except OSError:  # closed meanwhile
                pass

    def _failed(self, kind: str, n_keys: int, error: str) -> int:
        """A future id whose completion is a failure (an operation that could not start)."""
        op = _Op(kind, n_keys, error=error)
        with self._lock:
            future_id = self._add(op)
        self._signal()
        return future_id

    def _submit_task(self, kind: str, keys: Sequence[str], fn: Any) -> int:
        if self._closed:
            return self._failed(kind, len(keys), "the kvtier connector is closed")
        try:
            kv_keys = [engine_key(k) for k in keys]
        except (TypeError, ValueError) as e:
            return self._failed(kind, len(keys), str(e))
        op = _Op(kind, len(kv_keys))
        with self._lock:
            future_id = self._add(op)
            try:
                op.future = self._exists_pool.submit(fn, kv_keys)
            except RuntimeError as e:  # the pool shut down meanwhile
                op.error = str(e)
        if op.future is not None:
            op.future.add_done_callback(lambda _f: self._signal())
        else:
            self._signal()
        return future_id

    def _submit_io(self, kind: str, keys: Sequence[str], views: Sequence[Any]) -> int:
        if self._closed:
            return self._failed(kind, len(keys), "the kvtier connector is closed")
        try:
            if len(keys) != len(views):
                raise ValueError(f"{len(keys)} keys but {len(views)} buffers")
            kv_keys = [engine_key(k) for k in keys]
            sizes = [memoryview(v).nbytes for v in views]
        except (TypeError, ValueError) as e:  # never raise into LMCache's thread: a failed completion
            return self._failed(kind, len(keys), str(e))
        op = _Op(kind, len(kv_keys), kv_keys=kv_keys if kind == "set" else [])
        try:
            if kind == "set":
                for size in set(sizes):
                    self._register_size(size)
        except (kvtier.KvtierError, ValueError) as e:
            op.error = str(e)
        with self._lock:
            future_id = self._add(op)
            try:
                for size, positions in ([] if op.error else group_by_size(sizes).items()):
                    ns = self._ns(size)
                    ks = [kv_keys[i] for i in positions]
                    bufs = [views[i] for i in positions]
                    start = self._store.load_async if kind == "get" else self._store.save_async
                    handle = start(ns, ks, bufs, notify_fd=self._efd)
                    op.handles.append((positions, handle))
                    if kind == "set":
                        self._pending.started(ks, handle.done)
            except (kvtier.KvtierError, ValueError) as e:
                op.error = str(e)
        if op.error:
            self._signal()  # report the failure through the usual path
        return future_id

    def _exists(self, kv_keys: List[bytes]) -> List[bool]:
        self._read_registry()  # sizes other processes registered since
        with self._lock:
            namespaces = list(self._namespaces.values())
        found = [False] * len(kv_keys)
        for i, k in enumerate(kv_keys):
            for ns in namespaces:
                if self._store.lookup(ns, [k]) == 1:
                    found[i] = True
                    break
            if not found[i] and k in self._pending:  # this process stored it: wait until visible
                found[i] = any(self._pending.wait(ns, k) == PRESENT for ns in namespaces)
        return found

    def _get_after_writes(self, kv_keys: List[bytes], views: Sequence[Any]) -> List[bool]:
        """A get whose keys include some this process stored: each such key is waited for until its
        write settled (``PendingWrites.wait``), then the objects are loaded as a get loads them."""
        results = [False] * len(kv_keys)
        for size, positions in group_by_size([memoryview(v).nbytes for v in views]).items():
            ns = self._ns(size)
            ks = [kv_keys[i] for i in positions]
            for k in ks:
                if k in self._pending:
                    self._pending.wait(ns, k)
            handle = self._store.load_async(ns, ks, [views[i] for i in positions])
            try:
                count = int(handle.wait())
            finally:
                handle.close()
            for j, pos in enumerate(positions):
                results[pos] = j < count
        return results

    def _delete(self, kv_keys: List[bytes]) -> List[bool]:
        with self._lock:
            namespaces = list(self._namespaces.values())
        self._pending.forget(kv_keys)
        for ns in namespaces:
            remove_keys(self._store, ns, kv_keys)
        return [True] * len(kv_keys)

    @staticmethod
    def _op_done(op: _Op) -> bool:
        if op.future is not None:
            return op.future.done()
        return all(handle.done() for _, handle in op.handles)

    def _complete(self, future_id: int, op: _Op) -> Completion:
        if op.future is not None or (op.kind in ("exists", "delete")):
            if op.future is None:
                return (future_id, False, op.error, None)
            try:
                results = op.future.result()
            except Exception as e:  # a failed check is an unanswered one: report it, keep running
                return (future_id, False, str(e), [False] * op.n_keys if op.kind == "get" else None)
            if op.kind == "get" and not all(results):
                return (future_id, False, f"{results.count(False)} of {op.n_keys} objects not loaded", results)
            return (future_id, True, "", results)
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
        if op.kind == "set":  # keys not stored are not waited for by exists
            self._pending.forget([k for k, ok in zip(op.kv_keys, results) if not ok])
        ok = not errors and all(results)
        if not ok and not errors:
            errors.append(f"{results.count(False)} of {op.n_keys} objects not "
                          f"{'loaded' if op.kind == 'get' else 'stored'}")
        return (future_id, ok, "; ".join(errors), results)
