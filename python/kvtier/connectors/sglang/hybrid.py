"""The v2 interface of hybrid models: the side pools SGLang's HostPoolGroup registers beside the KV
pool (``register_mem_host_pool_v2``), and ``batch_exists_v2`` / ``batch_get_v2`` / ``batch_set_v2`` over
them (docs/connectors.md, "Hybrid models"; the pools' checks are in ``pools``)."""

from __future__ import annotations

import functools
import logging
from typing import Any, List

import kvtier

from .. import byte_layout, engine_key
from .._pending import PRESENT, PendingWrites
from .engine_api import pool_result
from .guard import while_open
from .options import int_option
from .pools import (DEFAULT_REFUSAL, NOT_SERVED, STATE_POOLS, WINDOW_POOLS, pool_name, state_fields,
                    window_fields)

logger = logging.getLogger(__name__)


class HybridPools:
    """The v2 calls of ``KvtierHiCacheStorage``, over the KV pages of ``storage.HiCacheStorageCore``
    (whose state, ``_state_pools`` and the namespaces, they share)."""

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
        """The identity fields of a window pool's pages (``pools.window_fields``)."""
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
                fields = dict(kv, **side, tp_rank=int_option(self.storage_config, "tp_rank", 0))
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

    @while_open(lambda keys: pool_result(0, {}))
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
        return pool_result(final, hits)

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

    @while_open(lambda transfers: {t.name: [False] * len(t.keys or []) for t in transfers})
    def batch_get_v2(self, transfers: List[Any], extra_info: Any = None) -> dict:
        """Loads each transfer's pages into its host slots; one bool per key and pool."""
        return {t.name: self._state_transfer(t, load=True) for t in transfers}

    @while_open(lambda transfers: {t.name: [False] * len(t.keys or []) for t in transfers})
    def batch_set_v2(self, transfers: List[Any], extra_info: Any = None) -> dict:
        """Stores each transfer's pages from its host slots; one bool per key and pool."""
        return {t.name: self._state_transfer(t, load=False) for t in transfers}
