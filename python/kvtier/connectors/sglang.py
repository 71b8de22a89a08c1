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

Identity (``kvtier.EngineIdentity``, docs/connectors.md): the namespace of a page is made from
engine ``sglang``, the host pool's class and ``layout`` (``layer_first``, ``page_first``,
``page_first_direct``, ``page_head``), the I/O path (``v1`` for batch_*_v1, ``generic`` for
batch_get/batch_set: they order a page's bytes differently), the model id and revision, the KV
dtype, attention kind, page tokens, K and V head dims, KV heads, layers, TP/PP/CP size and rank
(``replicated`` for MLA, whose pages are the same on every TP rank), split heads and the hash
scheme. A host pool class or layout this connector was not written for is refused when it is
registered (ValueError), never mapped to a default.

Hybrid models (Mamba / linear attention, sliding-window attention; docs/connectors.md "Hybrid
models"): SGLang's hybrid cache controller registers each entry of its HostPoolGroup with
``register_mem_host_pool_v2(pool, name)``. "kv" is the KV pool registered above (for a hybrid SWA
model: the full-attention layers). Two side pools are served by ``batch_set_v2`` / ``batch_get_v2`` /
``batch_exists_v2`` (``_sglang_pools``), each in a namespace of its own, keyed by the hash of a KV page:
"mamba" (a ``MambaPoolHost``, one request state per slot; a state is one chunk, keyed by the page it
follows; its namespace carries the real TP rank) and "swa" (the KV host pool of the sliding-window
layers, paged as the KV pool; a window page is one chunk of the page's bytes, keyed by its KV page,
split or replicated across TP ranks as the KV pages are). ``batch_exists_v2`` answers the longest
prefix whose KV pages and the trailing pages each transfer asks for (the state at its last page; the
pages of its last window) are stored; a side page that fails verification is False (slots zeroed) and
the next lookup ends before it. With side pools registered, the KV pages' identity names them
(``state_pools``, ``window_pools``), so a deployment without them never reads those pages. Any other
pool name ("indexer", "draft_swa", ...) is refused when registered.

Read-your-writes: stored keys stay in a per-process in-flight set (``_pending.PendingWrites``);
``batch_exists`` waits (bounded) for a key of that set to settle, so a page a set reported stored
is counted by the next ``batch_exists`` of this process.

Extra-config keys read here: ``tiers`` (required; ``{tp_rank}``, ``{pp_rank}`` and ``{rank}`` are
replaced by this process's ranks; one file:// directory shared by several ranks is refused),
``model_id`` (default: the server's model name), ``model_revision``, ``tenant``, ``salt``,
``interface_v1`` and the Store options (``kvtier.connectors.STORE_OPTION_NAMES``).
"""

from __future__ import annotations

import functools
import logging
import threading
import types
from typing import Any, List, Optional

import kvtier

from . import RANK_FIELDS, as_buffer, byte_layout, engine_key, open_store, split_urls, tier_urls
from ._pending import PRESENT, PendingWrites
from ._sglang_pools import (DEFAULT_REFUSAL, NOT_SERVED, STATE_POOLS, WINDOW_POOLS, class_and_layout,
                            pool_name, state_fields, window_fields)

logger = logging.getLogger(__name__)

try:  # the engine's base class when SGLang is installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]
try:  # batch_exists_v2's answer type (SGLang revisions with hybrid-model pools)
    from sglang.srt.mem_cache.hicache_storage import PoolTransferResult as _PoolResult
except Exception:  # pragma: no cover - depends on the environment
    _PoolResult = None

# The host pool layouts whose page bytes this connector knows how to name (memory_pool_host.py).
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# The host pool classes it was written for, and their attention kind.
HOST_POOLS = {
    "MHATokenToKVPoolHost": "mha",
    "AsymmetricMHATokenToKVPoolHost": "mha",
    "MLATokenToKVPoolHost": "mla",
}
IO_PATHS = ("v1", "generic")
HASH_SCHEME = "sglang-page-sha256"  # HiCache's page keys: SHA-256 chained over token ids


def _int(cfg: Any, name: str, default: int) -> int:
    value = getattr(cfg, name, None)
    return default if value is None else int(value)


def _ranks(cfg: Any) -> dict[str, int]:
    tp_rank, tp_size = _int(cfg, "tp_rank", 0), max(1, _int(cfg, "tp_size", 1))
    pp_rank = _int(cfg, "pp_rank", 0)
    return {"tp_rank": tp_rank, "pp_rank": pp_rank, "rank": pp_rank * tp_size + tp_rank}


def _config_layout(cfg: Any) -> Optional[str]:
    """The layout the storage config names (newer revisions), or None where it only says
    page-first or not (is_page_first_layout), which the host pool then decides."""
    layout = getattr(cfg, "layout", None)
    if layout is None:
        return None
    layout = str(getattr(layout, "value", layout))
    if layout not in LAYOUTS:
        raise ValueError(f"kvtier: unknown SGLang host layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return layout


def _refuse_shared_file_dir(urls: List[str], cfg: Any) -> None:
    processes = max(1, _int(cfg, "tp_size", 1)) * max(1, _int(cfg, "pp_size", 1)) * \
        max(1, _int(cfg, "attn_cp_size", 1))
    if processes <= 1:
        return
    for url in urls:
        if url.startswith("file://") and not any("{" + f + "}" in url for f in RANK_FIELDS):
            raise ValueError(
                f"kvtier: {processes} SGLang ranks would share the file:// directory of {url!r}, each "
                "with the full capacity; put {tp_rank} (and {pp_rank}) or {rank} in its path, or use "
                "an fs:// pool, which is made to be shared")


def _while_open(closed_result: Any) -> Any:
    """Runs a store call unless the backend is closed (then ``closed_result(keys)``); close()
    waits for the calls that have started. Nothing raises into HiCache's threads: any exception is
    logged and answered with ``closed_result(keys)``."""
    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def guarded(self: "KvtierHiCacheStorage", keys: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                if not self._enter():
                    return closed_result(keys)
            except Exception:  # pragma: no cover - a lock cannot fail
                return closed_result(keys)
            try:
                return method(self, keys, *args, **kwargs)
            except Exception as e:  # the engine's thread must survive any failure of ours
                logger.warning("kvtier %s of %d pages failed: %s", method.__name__,
                               len(keys) if hasattr(keys, "__len__") else -1, e)
                return closed_result(keys)
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
        self._config_layout = _config_layout(storage_config)
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
            _refuse_shared_file_dir(split_urls(extra.get("tiers")), storage_config)
            urls = tier_urls(extra.get("tiers"), _ranks(storage_config))
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
        cls = type(pool).__name__
        if cls == "HostPoolGroup":
            raise ValueError(
                "kvtier: SGLang passed its HostPoolGroup (a hybrid model's KV and state pools) to "
                "register_mem_pool_host; kvtier takes only the KV pool there (the group's anchor "
                "entry, as newer SGLang revisions pass it) and each other pool through "
                "register_mem_host_pool_v2(pool, name): a whole group is refused rather than "
                "guessing which entry's pages the page calls mean")
        if cls in STATE_POOLS.values():
            raise ValueError(
                f"kvtier: SGLang's {cls} holds per-request Mamba / linear-attention states, not KV "
                f"pages; it is served only as the 'mamba' pool of register_mem_host_pool_v2, beside a "
                f"KV pool registered with register_mem_pool_host")
        cls, layout = class_and_layout(
            pool, HOST_POOLS, LAYOUTS,
            f"kvtier: SGLang host pool {{cls}} is not one this connector was written for (known: "
            f"{', '.join(sorted(HOST_POOLS))})",
            "kvtier: unknown SGLang host layout {layout!r} of {cls} (known: {known})")
        if self._config_layout is not None and self._config_layout != layout:
            raise ValueError(f"kvtier: storage config says layout {self._config_layout!r} but the "
                             f"host pool has {layout!r}")
        attention = HOST_POOLS[cls]
        if (attention == "mla") != self._mla:
            raise ValueError(f"kvtier: host pool {cls} does not match is_mla_model={self._mla}")
        cfg = self.storage_config
        fields: dict[str, Any] = {
            "engine": "sglang", "host_pool": cls, "layout": layout, "model": self._model_id,
            "model_revision": self._revision, "kv_dtype": str(getattr(pool, "dtype", "")) or None,
            "attention": attention, "page_tokens": getattr(pool, "page_size", None),
            "layers": getattr(pool, "layer_num", None), "hash_scheme": HASH_SCHEME,
            "salt": self._salt,
            "tp_size": _int(cfg, "tp_size", 1),
            "tp_rank": "replicated" if attention == "mla" else _int(cfg, "tp_rank", 0),
            "pp_size": _int(cfg, "pp_size", 1), "pp_rank": _int(cfg, "pp_rank", 0),
            "cp_size": _int(cfg, "attn_cp_size", 1), "cp_rank": _int(cfg, "attn_cp_rank", 0),
        }
        if getattr(cfg, "should_split_heads", False):
            fields["split_heads"] = getattr(cfg, "tp_lcm_size", None) or "1"
        if attention == "mla":
            fields["k_head_dim"] = getattr(pool, "kv_lora_rank", None)
            fields["v_head_dim"] = getattr(pool, "qk_rope_head_dim", None)
        else:
            fields["kv_heads"] = getattr(pool, "head_num", None)
            fields["k_head_dim"] = getattr(pool, "head_dim", None)
            fields["v_head_dim"] = getattr(pool, "v_head_dim", None) or getattr(pool, "head_dim", None)
        return fields

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

    @_while_open(lambda keys: [False] * len(keys))
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

    @_while_open(lambda keys: [False] * len(keys))
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

    @_while_open(lambda keys: False)
    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Stores one page per key; True when every page was stored."""
        if not keys:
            return True
        bufs = [as_buffer(v) for v in values]
        for size, positions in _runs(bufs):
            kv_keys = [engine_key(keys[i]) for i in positions]
            self._store.save(self._ns("generic", size), kv_keys, [bufs[i] for i in positions])
            self._pending.started(kv_keys)
        return True

    # ---- existence ---------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    @_while_open(lambda keys: 0)
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

    # ---- hybrid models: side pools beside the KV pool (the v2 calls) -------------------------------

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Takes one entry of SGLang's HostPoolGroup: "kv" must be the pool registered with
        register_mem_pool_host, "mamba" a MambaPoolHost, "swa" the KV host pool of the window
        layers (after the KV pool, paged alike); ValueError for any other pool."""
        name = pool_name(host_pool_name)
        if name == "kv":
            if self.mem_pool_host is None:
                self.register_mem_pool_host(host_pool)
            elif host_pool is not self.mem_pool_host:
                raise ValueError("kvtier: SGLang's 'kv' pool is not the host pool registered with "
                                 "register_mem_pool_host")
            return
        if name in WINDOW_POOLS:
            fields = self._window_pool_fields(name, host_pool)
        elif name in STATE_POOLS:
            fields = state_fields(name, host_pool)
        else:
            raise ValueError(f"kvtier: SGLang host pool {name!r} ({type(host_pool).__name__}) is "
                             f"refused: {NOT_SERVED.get(name, DEFAULT_REFUSAL)}")
        with self._lock:
            self._state_pools[name] = (host_pool, fields)
            self._side_pending.setdefault(name, PendingWrites(self._store))
            self._namespaces = {}  # the KV pages' identity names the side pools
            self._state_namespaces = {}

    def _window_pool_fields(self, name: str, pool: Any) -> dict[str, Any]:
        """The identity fields of a window pool's pages (``_sglang_pools.window_fields``)."""
        with self._lock:
            kv_pool, kv = self.mem_pool_host, self._identity
        if kv_pool is None or kv is None:
            raise ValueError(f"kvtier: SGLang's {name!r} pool came before a KV pool "
                             f"(register_mem_pool_host): its pages are keyed and paged as the KV pages")
        if pool is kv_pool:
            raise ValueError(f"kvtier: SGLang's {name!r} pool is the KV pool itself, not the host pool "
                             f"of the sliding-window layers")
        return window_fields(name, pool, self._pool_identity(pool), kv)

    def _state_ns(self, name: str) -> tuple[Any, kvtier.Namespace]:
        """The side pool registered as ``name`` and the namespace of its pages (states or window
        pages)."""
        with self._lock:
            entry = self._state_pools.get(name)
            ns = self._state_namespaces.get(name)
        if entry is None:
            raise ValueError(f"no SGLang pool {name!r} registered")
        pool, side = entry
        if ns is None:
            kv = self._kv_fields()
            if kv is None:
                raise ValueError("no host memory pool registered")
            if name in WINDOW_POOLS:  # the window pages: split (or replicated) as the KV pages
                layout = byte_layout(side["block_bytes"])
                fields = dict(kv, **side)
            else:  # a state is split by the engine's TP rank even where KV pages are replicated (MLA)
                layout = kvtier.Layout.from_spec(
                    f"layers=1 tokens=1 state:layers=0,bytes={side['state_bytes']},dtype=fp8")
                fields = dict(kv, **side, tp_rank=_int(self.storage_config, "tp_rank", 0))
            ns = kvtier.EngineIdentity(fields).namespace(layout, tenant=self._tenant)
            with self._lock:
                ns = self._state_namespaces.setdefault(name, ns)
        return pool, ns

    def _side_present(self, name: str, ns: kvtier.Namespace, key: bytes) -> bool:
        if self._store.lookup(ns, [key]) == 1:
            return True
        pending = self._side_pending.get(name)
        return pending is not None and key in pending and pending.wait(ns, key) == PRESENT

    def _pool_boundary(self, transfer: Any, keys: List[str], limit: int) -> int:
        """The longest prefix (at most ``limit`` pages) whose pages of this pool are present:
        every page for SGLang's all-pages policy, the last len(transfer.keys) pages for its
        trailing-pages policy (a Mamba state: the one at the prefix's last page; the window pool:
        the pages of the prefix's last window)."""
        name = pool_name(transfer.name)
        if name == "kv":
            return limit
        try:
            _, ns = self._state_ns(name)
        except ValueError as e:
            logger.warning("kvtier batch_exists_v2: %s", e)
            return 0
        present = functools.lru_cache(maxsize=None)(
            lambda i: self._side_present(name, ns, engine_key(keys[i])))
        if pool_name(getattr(transfer, "hit_policy", "")) != "trailing_pages":
            return next((i for i in range(limit) if not present(i)), limit)
        trailing = max(1, len(transfer.keys or []))
        for end in range(limit, 0, -1):
            if all(present(i) for i in range(max(0, end - trailing), end)):
                return end
        return 0

    @_while_open(lambda keys: _pool_result(0, {}))
    def batch_exists_v2(self, keys: List[str], pool_transfers: Any = None,
                        extra_info: Any = None) -> Any:
        """The longest prefix of ``keys`` whose KV pages and the pages of every pool transfer are
        present (SGLang's PoolTransferResult: ``kv_hit_pages``, ``extra_pool_hit_pages``)."""
        final = self.batch_exists(keys, extra_info)
        hits: dict[Any, int] = {"kv": final} if final else {}
        for transfer in pool_transfers or []:
            if final == 0:
                break
            boundary = self._pool_boundary(transfer, keys, final)
            if boundary:
                hits[transfer.name] = boundary
            final = min(final, boundary)
        return _pool_result(final, hits)

    def _state_transfer(self, transfer: Any, load: bool) -> List[bool]:
        """Loads or saves the pages of one pool transfer (states or window pages); one bool per
        key, False from the first page missing or failing verification (its host slots zeroed)."""
        keys = list(transfer.keys or [])
        if not keys:
            return []
        name = pool_name(transfer.name)
        try:
            pool, ns = self._state_ns(name)
            indices = transfer.host_indices
            count = 0 if indices is None else len(indices)
            if count != len(keys) * int(getattr(pool, "page_size", 1) or 1):
                raise ValueError(f"{count} host slots for {len(keys)} keys")
            pieces = self._page_pieces(keys, indices, pool)
            if any(sum(n for _, n in p) != ns.chunk_bytes for p in pieces):
                raise ValueError(f"a page is not {ns.chunk_bytes} bytes")
            kv_keys = [engine_key(k) for k in keys]
            if load:
                loaded = self._store.load(ns, kv_keys, pieces)
                return [i < loaded for i in range(len(keys))]
            self._store.save(ns, kv_keys, pieces)
            self._side_pending[name].started(kv_keys)
            return [True] * len(keys)
        except (ValueError, kvtier.KvtierError) as e:
            logger.warning("kvtier %s of %d %s pages failed: %s", "load" if load else "save",
                           len(keys), name, e)
            return [False] * len(keys)

    @_while_open(lambda transfers: {t.name: [False] * len(t.keys or []) for t in transfers})
    def batch_get_v2(self, transfers: List[Any], extra_info: Any = None) -> dict:
        """Loads each transfer's pages into its host slots; one bool per key and pool."""
        return {t.name: self._state_transfer(t, load=True) for t in transfers}

    @_while_open(lambda transfers: {t.name: [False] * len(t.keys or []) for t in transfers})
    def batch_set_v2(self, transfers: List[Any], extra_info: Any = None) -> dict:
        """Stores each transfer's pages from its host slots; one bool per key and pool."""
        return {t.name: self._state_transfer(t, load=False) for t in transfers}

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


def _pool_result(kv_hit_pages: int, hits: dict) -> Any:
    """batch_exists_v2's answer: SGLang's PoolTransferResult, or the same fields without SGLang."""
    if _PoolResult is not None:
        return _PoolResult(kv_hit_pages, hits)
    return types.SimpleNamespace(kv_hit_pages=kv_hit_pages, extra_pool_hit_pages=hits)
