"""The HiCache storage backend's KV pages: ``register_mem_pool_host``, the zero-copy calls
``batch_get_v1`` / ``batch_set_v1``, the tensor calls ``batch_get`` / ``batch_set``, ``batch_exists`` and
``close`` (the package docstring has the conventions)."""

from __future__ import annotations

import logging
import threading
from typing import Any, List, Optional

import kvtier

from .. import as_buffer, byte_layout, engine_key, open_store, split_urls, tier_urls
from .._pending import PRESENT, PendingWrites
from .engine_api import Base
from .guard import while_open
from .identity import pool_identity
from .options import config_layout, ranks, refuse_shared_file_dir
from .pools import STATE_POOLS, WINDOW_POOLS

logger = logging.getLogger(__name__)


class HiCacheStorageCore(Base):  # type: ignore[misc,valid-type]
    """The KV pages of a HiCache storage backend over a kvtier Store: identity, namespaces, the
    zero-copy (v1) and tensor calls, existence and housekeeping (the package docstring)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None,
                 store: kvtier.Store | None = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.storage_config = storage_config
        self._config_layout = config_layout(storage_config)
        self._mla = bool(getattr(storage_config, "is_mla_model", False))
        self._io_path = "v1" if extra.get("interface_v1") else "generic"
        self._model_id = str(extra.get("model_id") or getattr(storage_config, "model_name", None)
                             or "")
        if not self._model_id:
            raise ValueError("kvtier: no model id (set model_id in the extra config)")
        self._revision = extra.get("model_revision") or \
            getattr(storage_config, "model_identity_hash", None)
        self._tenant = str(extra.get("tenant", ""))
        self._salt = str(extra["salt"]) if extra.get("salt") else None
        self._lock = threading.Lock()  # the prefetch and backup threads share the namespace map
        self._identity: dict[str, Any] | None = None  # identity fields of the registered pool
        self._namespaces: dict[tuple[str, int], kvtier.Namespace] = {}
        self._page_size_bytes: int | None = None
        self._closed = False
        self._calls = 0  # store calls running on HiCache's threads; close() waits for them
        self._idle = threading.Condition(self._lock)
        self._own_store = store is None
        if store is None:
            refuse_shared_file_dir(split_urls(extra.get("tiers")), storage_config)
            urls = tier_urls(extra.get("tiers"), ranks(storage_config))
            store = open_store(urls, extra)
        self._store = store
        self._pending = PendingWrites(store)
        # hybrid models: side pool name -> (host pool, identity fields of its pages); their namespaces
        self._state_pools: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._state_namespaces: dict[str, kvtier.Namespace] = {}
        # one in-flight set per side pool: a state or window page shares its KV page's key
        self._side_pending: dict[str, PendingWrites] = {}
        self.mem_pool_host = None
        pool = (kwargs or {}).get("mem_pool_host")
        if pool is not None:
            self.register_mem_pool_host(pool)

    def _enter(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._calls += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._calls -= 1
            if self._calls == 0:
                self._idle.notify_all()

    # ---- identity and namespaces -------------------------------------------------------------------

    def _pool_identity(self, pool: Any) -> dict[str, Any]:
        """The identity fields a host pool decides; ValueError for one this connector does not know."""
        return pool_identity(pool, self.storage_config, config_layout=self._config_layout, mla=self._mla,
                             model_id=self._model_id, revision=self._revision, salt=self._salt)

    def _kv_fields(self) -> dict[str, Any] | None:
        """The identity fields of the KV pages: the pool's, plus the side pools registered beside
        it (a hybrid deployment's pages are never read by a deployment without its side pools)."""
        with self._lock:
            if self._identity is None:
                return None
            fields = dict(self._identity)
            states = sorted(n for n in self._state_pools if n in STATE_POOLS)
            windows = sorted(n for n in self._state_pools if n in WINDOW_POOLS)
            if states:
                fields["state_pools"] = ",".join(states)
            if windows:
                fields["window_pools"] = ",".join(windows)
            return fields

    def _ns(self, io_path: str, page_bytes: int) -> kvtier.Namespace:
        with self._lock:
            ns = self._namespaces.get((io_path, page_bytes))
        fields = self._kv_fields()
        if ns is None:
            if fields is None:
                raise ValueError("no host memory pool registered")
            ident = kvtier.EngineIdentity(fields, io_path=io_path, block_bytes=page_bytes)
            ns = ident.namespace(byte_layout(page_bytes), tenant=self._tenant)
            with self._lock:
                ns = self._namespaces.setdefault((io_path, page_bytes), ns)
        return ns

    def _page_bytes(self) -> int:
        """Bytes of one page of the registered host pool, computed once from its geometry (the
        flat page only where the pool has no per-token size)."""
        if self._page_size_bytes is None:
            pool = self.mem_pool_host
            if pool is None:
                raise ValueError("no host memory pool registered")
            per_token = getattr(pool, "size_per_token", None)
            if per_token:
                nbytes = int(per_token) * int(pool.page_size)
            else:
                page = pool.get_dummy_flat_data_page()
                nbytes = getattr(page, "nbytes", None)
                nbytes = int(nbytes if nbytes is not None else page.numel() * page.element_size())
            self._page_size_bytes = nbytes
        return self._page_size_bytes

    @property
    def identity(self) -> Optional[kvtier.EngineIdentity]:
        """The identity of this backend's pages on its configured I/O path (None before a pool)."""
        fields = self._kv_fields()
        if fields is None:
            return None
        return kvtier.EngineIdentity(fields, io_path=self._io_path, block_bytes=self._page_bytes())

    # ---- zero-copy interface (host_indices into the host pool) -------------------------------------

    def _page_pieces(self, keys: List[str], host_indices: Any,
                     pool: Any = None) -> List[List[tuple[int, int]]]:
        meta = (pool or self.mem_pool_host).get_page_buffer_meta(host_indices)
        if meta is None:
            raise ValueError("the host pool offers no page buffers")
        ptrs, sizes = meta
        if not keys or len(ptrs) % len(keys) or len(ptrs) != len(sizes):
            raise ValueError(f"{len(ptrs)} page pieces for {len(keys)} keys")
        per_page = len(ptrs) // len(keys)
        return [[(int(ptrs[i * per_page + j]), int(sizes[i * per_page + j]))
                 for j in range(per_page)] for i in range(len(keys))]

    @while_open(lambda keys: [False] * len(keys))
    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Loads each page into its host-pool slots; True per page loaded and verified."""
        if not keys:
            return []
        pieces = self._page_pieces(keys, host_indices)
        ns = self._ns("v1", sum(s for _, s in pieces[0]))
        try:
            loaded = self._store.load(ns, [engine_key(k) for k in keys], pieces)
        except kvtier.KvtierError as e:
            logger.warning("kvtier batch_get_v1 of %d pages failed: %s", len(keys), e)
            loaded = 0
        return [i < loaded for i in range(len(keys))]

    @while_open(lambda keys: [False] * len(keys))
    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Stores each page from its host-pool slots; True per page stored."""
        if not keys:
            return []
        pieces = self._page_pieces(keys, host_indices)
        ns = self._ns("v1", sum(s for _, s in pieces[0]))
        kv_keys = [engine_key(k) for k in keys]
        self._store.save(ns, kv_keys, pieces)
        self._pending.started(kv_keys)
        return [True] * len(keys)

    # ---- tensor interface (one flat page tensor per key) -------------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """Loads one page into ``target_location``; returns it, or None on a miss."""
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    @while_open(lambda keys: [None] * len(keys))
    def batch_get(self, keys: List[str], target_locations: Any = None,
                  target_sizes: Any = None) -> List[Any]:
        """One target per key, or None from the first page that is missing or corrupt."""
        if not keys:
            return []
        if target_locations is None:
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        loaded = 0
        try:
            bufs = [as_buffer(t) for t in target_locations]
            for size, positions in size_runs(bufs):
                got = self._store.load(self._ns("generic", size),
                                       [engine_key(keys[i]) for i in positions],
                                       [bufs[i] for i in positions])
                loaded += got
                if got < len(positions):
                    break
        except kvtier.KvtierError as e:
            logger.warning("kvtier batch_get of %d pages failed: %s", len(keys), e)
        return [t if i < loaded else None for i, t in enumerate(target_locations)]

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    @while_open(lambda keys: False)
    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Stores one page per key; True when every page was stored."""
        if not keys:
            return True
        bufs = [as_buffer(v) for v in values]
        for size, positions in size_runs(bufs):
            kv_keys = [engine_key(keys[i]) for i in positions]
            self._store.save(self._ns("generic", size), kv_keys, [bufs[i] for i in positions])
            self._pending.started(kv_keys)
        return True

    # ---- existence ---------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    @while_open(lambda keys: 0)
    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading keys are present (a later load may still find fewer). A key this
        process stored and kvtier still writes is waited for, so it is counted once visible."""
        if not keys:
            return 0
        ns = self._ns(self._io_path, self._page_bytes())
        kv_keys = [engine_key(k) for k in keys]
        found = int(self._store.lookup(ns, kv_keys))
        while found < len(kv_keys) and kv_keys[found] in self._pending:
            if self._pending.wait(ns, kv_keys[found]) != PRESENT:
                break
            found += int(self._store.lookup(ns, kv_keys[found:]))
        return found


    # ---- housekeeping ------------------------------------------------------------------------------

    @property
    def store(self) -> kvtier.Store:
        return self._store

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Takes the host pool HiCache registers; ValueError for a pool class or layout this
        connector was not written for (the controller then fails to start, it never runs on a
        guessed layout)."""
        fields = self._pool_identity(mem_pool_host)
        with self._lock:
            self.mem_pool_host = mem_pool_host
            self._identity = fields
            self._namespaces = {}
            self._state_namespaces = {}
            self._page_size_bytes = None

    def clear(self) -> None:
        """kvtier keeps its chunks (they are content-addressed); `kvtier gc` trims a tier."""
        return None

    def get_stats(self) -> Any:
        return None

    def close(self) -> None:
        """Waits for kvtier's background writes and closes the store it opened. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while self._calls:
                self._idle.wait()
        if self._own_store:
            try:
                self._store.close()
            except Exception:  # close runs on the engine's exit path: log, never raise
                logger.exception("kvtier HiCache storage close")


def size_runs(bufs: List[Any]) -> List[tuple[int, List[int]]]:
    """Consecutive positions of equal byte size, in order (one load/save call per run)."""
    runs: List[tuple[int, List[int]]] = []
    for i, b in enumerate(bufs):
        size = b[1] if isinstance(b, tuple) else memoryview(b).nbytes
        if runs and runs[-1][0] == size:
            runs[-1][1].append(i)
        else:
            runs.append((size, [i]))
    return runs

