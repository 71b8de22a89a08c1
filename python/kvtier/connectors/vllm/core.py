"""``KvtierConnectorCore``: the connector without vLLM, under vLLM's method names and signatures. It
holds the state both sides share (the spec, the options, the layout and namespaces, the store, the
counters) and the calls of both roles: the scheduler side (``scheduler``) and the worker side
(``worker``)."""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional, Sequence

import kvtier

from .groups import CacheGroup, state_identity
from .identity import identity_of, layout_of
from .metadata import KvtierConnectorMetadata
from .options import SCHEDULER, WORKER, check_options, chunk_tokens_of, configuration_errors, load_timeout_of
from .scheduler import SchedulerSide
from .spec import ModelSpec
from .stats import KvtierConnectorStats
from .stores import acquire_store, release_store
from .worker import WorkerSide


class KvtierConnectorCore(SchedulerSide, WorkerSide):
    """The connector without vLLM (see ``kvtier.connectors.vllm_v1``). ``role`` is "scheduler" or "worker";
    ``tp_rank`` is the worker's rank (the scheduler looks up every rank's namespace)."""

    def __init__(self, role: str, spec: ModelSpec, extra: Mapping[str, Any], tp_rank: int = 0,
                 store: Optional[kvtier.Store] = None, groups: Optional[Sequence[CacheGroup]] = None) -> None:
        if role not in (SCHEDULER, WORKER):
            raise ValueError(f"KvtierConnector: role {role!r} is neither {SCHEDULER!r} nor {WORKER!r}")
        extra = dict(extra or {})
        check_options(extra)
        if spec.tp_size < 1 or not 0 <= tp_rank < spec.tp_size:
            raise ValueError(f"KvtierConnector: TP rank {tp_rank} of size {spec.tp_size}")
        self._core_role, self._spec, self._extra, self._tp_rank = role, spec, extra, tp_rank
        # vLLM's KV cache groups when there are several, a sliding window or Mamba states (None: one
        # full-attention group)
        self._groups = list(groups) if groups and (len(groups) > 1 or groups[0].window or groups[0].state) else None
        self._windows = [g.window for g in self._groups] if self._groups else [0]
        self._states = [g.state is not None for g in self._groups] if self._groups else [False]
        self._has_state = any(self._states)
        self._chunk_tokens = chunk_tokens_of(extra, spec.block_size)
        with configuration_errors():
            self._layout = layout_of(spec, self._chunk_tokens, extra, self._groups)
        # An MLA latent is the same on every rank: one namespace for all of them, and only rank 0 saves.
        ranks = range(spec.tp_size) if role == SCHEDULER and spec.attention != "mla" else [tp_rank]
        self._saves = spec.attention != "mla" or tp_rank == 0
        tenant = str(extra.get("tenant", ""))
        state = state_identity(self._groups) if self._groups else None
        with configuration_errors():
            self._namespaces = [identity_of(spec, extra, r, state).namespace(self._layout, tenant) for r in ranks]
        self._store_key = None
        if store is None:
            with configuration_errors():
                store, self._store_key = acquire_store(extra)
        self._store = store
        # Several KV cache groups: vLLM recovers a failed load only as a failed asynchronous one
        # (get_transfer_results' failed_recving), never by block ids (unique within a group only)
        self._several_groups = bool(self._groups) and len(self._groups) > 1
        self._async_load = bool(extra.get("async_load", False)) or self._several_groups
        self._load_timeout = load_timeout_of(extra)
        self._lock = threading.Lock()
        self._closed = False
        self._meta: Optional[KvtierConnectorMetadata] = None
        self._init_scheduler_state()
        self._init_worker_state()
        self._stats = {"lookups": 0, "hit_tokens": 0, "loads": 0, "loaded_chunks": 0, "load_errors": 0,
                       "error_blocks": 0, "saves": 0, "saved_chunks": 0, "saves_failed": 0,
                       "window_saves_skipped": 0, "state_saves_skipped": 0, "load_timeouts": 0,
                       "late_load_ends": 0}
        self._reported: dict[str, int] = {}

    # ---- properties ----------------------------------------------------------------------------

    @property
    def chunk_tokens(self) -> int:
        return self._chunk_tokens

    @property
    def namespace(self) -> kvtier.Namespace:
        """This worker's namespace (the scheduler's: rank 0's)."""
        return self._namespaces[0]

    @property
    def store(self) -> kvtier.Store:
        return self._store

    # ---- metadata (the base class's methods when vLLM is there) --------------------------------

    def bind_connector_metadata(self, connector_metadata: KvtierConnectorMetadata) -> None:
        """Binds the step's metadata; first waits for the operations of requests preempted in this
        step (as ``handle_preemptions`` does; revisions that do not call it still never have a preempted
        request's freed blocks rewritten while kvtier reads them: this runs before the forward)."""
        if self._core_role == WORKER:
            self._end_preempted(connector_metadata)
            self._failed_loads, self._step_errors = set(), set()  # a new step
        self._meta = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._meta = None

    def _metadata(self) -> KvtierConnectorMetadata:
        if self._meta is None:
            raise RuntimeError("KvtierConnector: no connector metadata bound for this step")
        return self._meta


    def get_kv_connector_stats(self) -> Optional[KvtierConnectorStats]:
        """The counters since the last call (None when nothing changed), for vLLM's stats logger."""
        delta = {k: v - self._reported.get(k, 0) for k, v in self._stats.items()}
        self._reported = dict(self._stats)
        stats = KvtierConnectorStats(data={k: v for k, v in delta.items() if v})
        return None if stats.is_empty() else stats

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict] = None) -> KvtierConnectorStats:
        return KvtierConnectorStats(data=dict(data or {}))

    def stats(self) -> dict:
        """The connector's counters and the store's statistics (``store``)."""
        out: dict[str, Any] = dict(self._stats)
        if not self._closed:
            out["store"] = self._store.stats()
        return out

    def shutdown(self) -> None:
        """Waits for every load and save in flight, then closes the store it opened; idempotent."""
        if self._closed:
            return
        for op in self._ops_of(lambda o: True):
            self._finish(op)
        self._sync_loads = []
        if self._gpu is not None:
            self._gpu.close()
        self._closed = True
        if self._store_key is not None:
            release_store(self._store_key)
