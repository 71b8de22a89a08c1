"""kvtier as an SGLang HiCache storage backend (the L3 under HiCache's host memory pool).

SGLang loads it with ``--hicache-storage-backend dynamic`` and a JSON
``--hicache-storage-backend-extra-config`` naming ``backend_name``, ``module_path``
(``kvtier.connectors.sglang``) and ``class_name`` (``KvtierHiCacheStorage``). Its backend factory
builds the class as ``KvtierHiCacheStorage(storage_config, kwargs)`` and HiCache's controller
then calls ``register_mem_pool_host(host_pool)``. With ``"interface_v1": 1`` in the extra config the
controller uses the zero-copy calls ``batch_get_v1`` / ``batch_set_v1(keys, host_indices)``;
without it, ``batch_get`` / ``batch_set`` with one flat page tensor per key.

Pages: one key names one page (``page_size`` tokens). In the page-first host layouts a page is a
few contiguous pieces of the host pool -- the K and V halves for MHA, one piece for MLA -- whose
addresses and sizes come from ``host_pool.get_page_buffer_meta(host_indices)``; kvtier reads and
writes those pieces in place (a chunk made of pieces), nothing is copied in Python. The page's
byte size fixes the kvtier layout (``kvtier.connectors.byte_layout``); the model name, the ranks
and that size fix the namespace.

Return conventions (HiCacheStorage's):
- ``exists`` -> bool; ``batch_exists`` -> how many leading keys are present.
- ``get`` -> the target, or None on a miss; ``batch_get`` -> one target-or-None per key.
- ``set`` -> bool; ``batch_set`` -> True only when every page was stored. "Stored" means kvtier
  took a copy: when a tier (or its write queue) is full kvtier drops the page softly, counted in
  the store's ``dropped_saves``, and a later ``batch_exists`` does not count it.
- ``batch_get_v1`` / ``batch_set_v1`` -> one bool per key. A load stops at the first page that is
  missing or fails verification: that page and the ones after it are False, and a corrupt page's
  host slots are zeroed, never left holding another page's bytes.
Errors never raise into HiCache's threads: a failure is reported as False / None.

Extra-config keys read here: ``tiers`` (required), ``model_id`` (default: the server's model
name), ``tenant``, ``salt`` and the Store options (``kvtier.connectors.STORE_OPTION_NAMES``).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, List, Optional

import kvtier

from . import as_buffer, byte_layout, engine_key, open_store

logger = logging.getLogger(__name__)

try:  # the engine's base class when SGLang is installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]


def _rank_salt(cfg: Any) -> str:
    """The parallel position that decides which slice of a page this process holds."""
    parts = ["sglang-hicache"]
    mla = bool(getattr(cfg, "is_mla_model", False))
    if not mla:  # MLA pages are identical on every TP rank; MHA pages hold a rank's heads
        parts.append(f"tp{getattr(cfg, 'tp_rank', 0)}/{getattr(cfg, 'tp_size', 1)}")
    if int(getattr(cfg, "pp_size", 1) or 1) > 1:
        parts.append(f"pp{cfg.pp_rank}/{cfg.pp_size}")
    if int(getattr(cfg, "attn_cp_size", 1) or 1) > 1:
        parts.append(f"cp{cfg.attn_cp_rank}/{cfg.attn_cp_size}")
    if getattr(cfg, "should_split_heads", False):
        parts.append(f"split{getattr(cfg, 'tp_lcm_size', '')}")
    parts.append("page_first" if getattr(cfg, "is_page_first_layout", True) else "layer_first")
    return ";".join(parts)


def _while_open(closed_result: Any) -> Any:
    """Runs a store call unless the backend is closed (then ``closed_result(keys)``); close()
    waits for the calls that have started."""
    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def guarded(self: "KvtierHiCacheStorage", keys: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._enter():
                return closed_result(keys)
            try:
                return method(self, keys, *args, **kwargs)
            finally:
                self._leave()
        return guarded
    return wrap


class KvtierHiCacheStorage(_Base):  # type: ignore[misc,valid-type]
    """HiCache storage backed by a kvtier Store (see the module docstring)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None,
                 store: kvtier.Store | None = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.storage_config = storage_config
        self._own_store = store is None
        self._store = store if store is not None else open_store(extra.get("tiers"), extra)
        self._model_id = str(extra.get("model_id") or getattr(storage_config, "model_name", None)
                             or "sglang")
        self._tenant = str(extra.get("tenant", ""))
        salt = _rank_salt(storage_config)
        self._salt = f"{salt};{extra['salt']}" if extra.get("salt") else salt
        self._namespaces: dict[int, kvtier.Namespace] = {}
        self._lock = threading.Lock()  # the prefetch and backup threads share the namespace map
        self.mem_pool_host = (kwargs or {}).get("mem_pool_host")
        page_bytes = extra.get("page_bytes")
        self._page_size_bytes: int | None = int(page_bytes) if page_bytes else None
        self._closed = False
        self._calls = 0  # store calls running on HiCache's threads; close() waits for them
        self._idle = threading.Condition(self._lock)

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

    # ---- namespaces --------------------------------------------------------------------------------

    def _ns(self, page_bytes: int) -> kvtier.Namespace:
        with self._lock:
            ns = self._namespaces.get(page_bytes)
        if ns is None:
            ns = self._store.namespace(self._model_id, byte_layout(page_bytes),
                                       tenant=self._tenant, salt=self._salt)
            with self._lock:
                ns = self._namespaces.setdefault(page_bytes, ns)
        return ns

    def _page_bytes(self) -> int:
        """Bytes of one page of the registered host pool (its flat page), computed once."""
        if self._page_size_bytes is None:
            pool = self.mem_pool_host
            if pool is None:
                raise ValueError("no host memory pool registered")
            page = pool.get_dummy_flat_data_page()
            nbytes = getattr(page, "nbytes", None)
            self._page_size_bytes = int(nbytes if nbytes is not None
                                        else page.numel() * page.element_size())
        return self._page_size_bytes

    # ---- zero-copy interface (host_indices into the host pool) -------------------------------------

    def _page_pieces(self, keys: List[str], host_indices: Any) -> List[List[tuple[int, int]]]:
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if not keys or len(ptrs) % len(keys) or len(ptrs) != len(sizes):
            raise ValueError(f"{len(ptrs)} page pieces for {len(keys)} keys")
        per_page = len(ptrs) // len(keys)
        return [[(int(ptrs[i * per_page + j]), int(sizes[i * per_page + j]))
                 for j in range(per_page)] for i in range(len(keys))]

    @_while_open(lambda keys: [False] * len(keys))
    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Loads each page into its host-pool slots; True per page loaded and verified."""
        if not keys:
            return []
        try:
            pieces = self._page_pieces(keys, host_indices)
            ns = self._ns(sum(s for _, s in pieces[0]))
            loaded = self._store.load(ns, [engine_key(k) for k in keys], pieces)
        except (kvtier.KvtierError, ValueError) as e:
            logger.warning("kvtier batch_get_v1 of %d pages failed: %s", len(keys), e)
            loaded = 0
        return [i < loaded for i in range(len(keys))]

    @_while_open(lambda keys: [False] * len(keys))
    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Any = None) -> List[bool]:
        """Stores each page from its host-pool slots; True per page stored."""
        if not keys:
            return []
        try:
            pieces = self._page_pieces(keys, host_indices)
            ns = self._ns(sum(s for _, s in pieces[0]))
            self._store.save(ns, [engine_key(k) for k in keys], pieces)
            return [True] * len(keys)
        except (kvtier.KvtierError, ValueError) as e:
            logger.warning("kvtier batch_set_v1 of %d pages failed: %s", len(keys), e)
            return [False] * len(keys)

    # ---- tensor interface (one flat page tensor per key) -------------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """Loads one page into ``target_location``; returns it, or None on a miss."""
        return self.batch_get([key], [target_location])[0]

    @_while_open(lambda keys: [None] * len(keys))
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
            for size, positions in _runs(bufs):
                got = self._store.load(self._ns(size), [engine_key(keys[i]) for i in positions],
                                       [bufs[i] for i in positions])
                loaded += got
                if got < len(positions):
                    break
        except (kvtier.KvtierError, ValueError) as e:
            logger.warning("kvtier batch_get of %d pages failed: %s", len(keys), e)
        return [t if i < loaded else None for i, t in enumerate(target_locations)]

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    @_while_open(lambda keys: False)
    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Stores one page per key; True when every page was stored."""
        if not keys:
            return True
        try:
            bufs = [as_buffer(v) for v in values]
            for size, positions in _runs(bufs):
                self._store.save(self._ns(size), [engine_key(keys[i]) for i in positions],
                                 [bufs[i] for i in positions])
            return True
        except (kvtier.KvtierError, ValueError, TypeError) as e:
            logger.warning("kvtier batch_set of %d pages failed: %s", len(keys), e)
            return False

    # ---- existence ---------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    @_while_open(lambda keys: 0)
    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading keys are present (a later load may still find fewer)."""
        if not keys:
            return 0
        try:
            ns = self._ns(self._page_bytes())
            return int(self._store.lookup(ns, [engine_key(k) for k in keys]))
        except (kvtier.KvtierError, ValueError) as e:
            logger.warning("kvtier batch_exists failed: %s", e)
            return 0

    # ---- housekeeping ------------------------------------------------------------------------------

    @property
    def store(self) -> kvtier.Store:
        return self._store

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
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
            self._store.close()


def _runs(bufs: List[Any]) -> List[tuple[int, List[int]]]:
    """Consecutive positions of equal byte size, in order (one load/save call per run)."""
    runs: List[tuple[int, List[int]]] = []
    for i, b in enumerate(bufs):
        size = b[1] if isinstance(b, tuple) else memoryview(b).nbytes
        if runs and runs[-1][0] == size:
            runs[-1][1].append(i)
        else:
            runs.append((size, [i]))
    return runs
