"""kvtier as a secondary tier of vLLM's tiered KV offloading (TieringOffloadingSpec).

vLLM keeps offloaded blocks in a pinned CPU primary tier; a secondary tier receives blocks from
it (store / cascade) and returns blocks into it (load / promotion). The tiering spec builds each
entry of ``kv_connector_extra_config["secondary_tiers"]`` with

    tier_cls(offloading_spec=<the spec>, primary_kv_view=<memoryview>, tier_type=<type>, **rest)

where ``primary_kv_view`` is a 2-D byte view (num_blocks, bytes_per_block) over the primary tier.
Some vLLM versions pass ``vllm_config=`` instead of ``offloading_spec=``; both are accepted, and
so is any other argument a vLLM revision adds (``tier_name=``, ``backpressure_detector=``, ...):
it is logged and ignored. A name that is a close misspelling of one of kvtier's own options is
refused. Revisions whose factory keys a registry by ``get_tier_type()`` or by
``SecondaryTierFactory.register_tier`` are served by ``register()`` (below).

Every method runs in the scheduler process and returns without waiting for I/O:

- ``submit_store`` / ``submit_load`` start ``Store.save_async`` / ``Store.load_async`` over slices
  of the primary view (zero-copy) and return.
- ``get_finished_jobs`` polls each job's ``Handle.done()`` (never blocks) and reports the finished
  ones. A load reports success only when every block was loaded and verified; a partial load lists
  its loaded leading keys in ``successful_keys``. A failed or corrupt block is never reported
  loaded and its slot holds no byte of another block (kvtier zeroes it).
- ``lookup`` answers RETRY (``None`` on versions with a bool/None answer) while a store of that
  key is in flight or kvtier still writes it (read-your-writes: the per-process in-flight set
  ``_pending.PendingWrites``; a store reported successful answers HIT once visible, MISS only when
  kvtier dropped it), or while an exists check on a thread runs (``async_lookup``, the default for
  fs:// tiers, whose index lives on a shared filesystem); file:// and mem:// tiers keep their
  index in memory and are asked directly.
- A store job succeeds once kvtier has taken a copy of every block (the primary slots may then be
  reused). kvtier never makes the caller wait for slow storage: when a tier is full or its write
  queue is, the block is dropped softly (counted in the store's ``dropped_saves``) and a later
  ``lookup`` answers MISS, so vLLM recomputes it; a save kvtier refuses outright is reported with
  ``success=False``. Nothing raises into the scheduler.
- ``shutdown`` waits for the jobs in flight (kvtier cannot abandon a copy halfway, and the primary
  slots must stay untouched until it ends), then closes the store it opened.

- ``shutdown`` also releases every view kvtier made over the primary tier, so vLLM can close its
  shared memory (``mmap.close()``) afterwards.
- ``take_events()`` returns the blocks stored and removed since the last call, ``get_stats()``
  kvtier's counters, ``medium`` names the tier in both.

Identity (``kvtier.EngineIdentity``): engine ``vllm``, layout ``row`` (a row of the primary view
holds one block of every TP worker, interleaved), the row size, model id and revision, KV dtype,
attention kind (``mla`` when the model uses MLA), the weights' fields of the ModelConfig
(``weight_dtype``, ``quantization``, ...: ``engine_identity``; vLLM's block hashes carry the
LoRA adapter, images and cache salt but not the weights), block tokens, TP/PP/DCP size (a row covers every
TP rank, so the TP *size* decides its byte order), the prefix-caching hash algorithm and the hash
seed (``PYTHONHASHSEED``: without it vLLM seeds its block hashes per process, so blocks of
another process never match; docs/connectors.md). A layout other than ``row`` is refused.

Configuration keys (besides ``type`` and ``module_path``): ``tiers`` (required: URL list or a
comma-separated string), ``model_id``, ``model_revision``, ``tenant``, ``salt``, ``layout``,
``block_bytes`` (default: the view's row size), ``async_lookup`` (bool), ``lookup_threads``,
``medium`` and the Store options (``kvtier.connectors.STORE_OPTION_NAMES``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import threading
from collections import Counter
from typing import Any, Collection, Iterable

import kvtier

from .. import (STORE_OPTION_NAMES, byte_layout, engine_key, open_store, remove_keys,
               split_engine_kwargs, tier_urls)
from .._pending import ABSENT, PENDING, PRESENT, PendingWrites
from .engine_identity import model_identity_fields

logger = logging.getLogger(__name__)

try:  # the engine's own types when vLLM is installed, local stand-ins otherwise
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager as _Base
except Exception:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]

try:
    from vllm.v1.kv_offload.tiering.base import JobResult  # type: ignore[attr-defined]
except Exception:

    @dataclasses.dataclass
    class JobResult:  # type: ignore[no-redef]
        """Result of one store or load job (vLLM's JobResult fields)."""

        job_id: int
        success: bool
        successful_keys: Collection[Any] | None = None
        transfer_time: float | None = None


try:
    from vllm.v1.kv_offload.base import LookupResult as _LookupResult  # type: ignore
except Exception:
    _LookupResult = None

try:
    from vllm.v1.kv_offload.base import RequestOffloadingContext as _RequestContext  # type: ignore
except Exception:
    _RequestContext = None


@dataclasses.dataclass
class OffloadEvent:
    """Blocks stored in (``removed=False``) or removed from kvtier since the last take_events()."""

    keys: list
    block_bytes: int
    medium: str
    removed: bool = False


_MAX_LOOKUP_ANSWERS = 65536
TIER_TYPE = "kvtier"
LAYOUTS = ("row",)
# Options of this tier besides the Store options; any other argument is an engine's (ignored).
OWN_OPTIONS = ("tiers", "model_id", "model_revision", "tenant", "salt", "layout", "block_bytes",
               "async_lookup", "lookup_threads", "medium", "store") + STORE_OPTION_NAMES
ENGINE_ARGUMENTS = ("tier_name", "backpressure_detector", "locality", "kv_cache_config",
                    "primary_tier_meta", "tier_index")


def _hit() -> Any:
    return _LookupResult.HIT if _LookupResult is not None else True


def _miss() -> Any:
    return _LookupResult.MISS if _LookupResult is not None else False


def _retry() -> Any:
    return _LookupResult.RETRY if _LookupResult is not None else None


def _vllm_config(offloading_spec: Any, vllm_config: Any) -> Any:
    for root in (vllm_config, getattr(offloading_spec, "vllm_config", None),
                 getattr(getattr(offloading_spec, "config", None), "vllm_config", None)):
        if getattr(root, "model_config", None) is not None:
            return root
    return None


def _attr(obj: Any, *path: str) -> Any:
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _identity(cfg: Any, model_id: str | None, revision: str | None, layout: str,
              block_bytes: int, salt: str) -> kvtier.EngineIdentity:
    """What decides the bytes of one row: see the module docstring."""
    model = model_id or _attr(cfg, "model_config", "model")
    if not model:
        raise ValueError("kvtier: no model id (vllm_config.model_config.model or model_id)")
    use_mla = _attr(cfg, "model_config", "use_mla")
    algo = _attr(cfg, "cache_config", "prefix_caching_hash_algo")
    seed = os.environ.get("PYTHONHASHSEED")
    if not seed:
        logger.warning("kvtier: PYTHONHASHSEED is not set, so vLLM seeds its block hashes per process "
                       "and no other process or restart will hit these blocks (docs/connectors.md)")
    return kvtier.EngineIdentity(
        engine="vllm", layout=layout, block_bytes=block_bytes, model=model,
        model_revision=revision or _attr(cfg, "model_config", "revision"),
        kv_dtype=_attr(cfg, "cache_config", "cache_dtype"),
        attention=None if use_mla is None else ("mla" if use_mla else "mha"),
        page_tokens=_attr(cfg, "cache_config", "block_size"),
        tp_size=_attr(cfg, "parallel_config", "tensor_parallel_size"),
        pp_size=_attr(cfg, "parallel_config", "pipeline_parallel_size"),
        cp_size=_attr(cfg, "parallel_config", "decode_context_parallel_size"),
        hash_scheme=f"vllm-{algo}" if algo else None,
        hash_seed=seed or f"per-process-{os.getpid()}",
        salt=salt or None,
        **dict(model_identity_fields(getattr(cfg, "model_config", None))))


def _block_bytes(view: memoryview, configured: Any) -> int:
    if configured is not None:
        return int(configured)
    if view.ndim >= 2 and view.strides:
        return int(view.strides[0])
    raise ValueError("primary_kv_view is one-dimensional: set block_bytes in the tier config")


def register(factory: Any = None, tier_type: str = TIER_TYPE) -> None:
    """Registers this tier with vLLM's secondary-tier factory, for revisions that need it:
    ``SecondaryTierFactory.register_tier(type, module, class)`` where the factory has it, else the
    module-level registry keyed by ``get_tier_type()``. Registering twice is a no-op."""
    if factory is None:
        from vllm.v1.kv_offload.tiering import factory  # type: ignore  # pragma: no cover
    cls = getattr(factory, "SecondaryTierFactory", factory)
    if hasattr(cls, "register_tier"):
        registry = getattr(cls, "_registry", {})
        if tier_type not in registry:
            cls.register_tier(tier_type, "kvtier.connectors.vllm", "KvtierSecondaryTier")  # the public path
        return
    registry = getattr(factory, "_TIER_REGISTRY", None)
    if isinstance(registry, dict):
        registry.setdefault(tier_type, KvtierSecondaryTier)
        return
    raise ValueError("kvtier: this vLLM tier factory offers no way to register a tier")


@dataclasses.dataclass
class _Job:
    handle: Any
    keys: list[Any]        # the engine's keys, in job order
    kv_keys: list[bytes]   # kvtier keys
    is_store: bool
    count: int = 0
    error: Exception | None = None


class KvtierSecondaryTier(_Base):  # type: ignore[misc,valid-type]
    """A vLLM secondary tier backed by a kvtier Store (see the module docstring)."""

    def __init__(self, offloading_spec: Any = None, primary_kv_view: memoryview | None = None,
                 tier_type: str = TIER_TYPE, *, vllm_config: Any = None, **kwargs: Any) -> None:
        if primary_kv_view is None:
            raise ValueError("KvtierSecondaryTier needs primary_kv_view")
        opts = split_engine_kwargs(kwargs, OWN_OPTIONS, "kvtier vLLM tier", ENGINE_ARGUMENTS)
        layout = str(opts.get("layout", "row"))
        if layout not in LAYOUTS:
            raise ValueError(f"kvtier: unknown vLLM block layout {layout!r} (known: {', '.join(LAYOUTS)})")
        self._offloading_spec = offloading_spec
        self.tier_type = tier_type
        self.tier_name = kwargs.get("tier_name", tier_type)
        self.locality = None
        self.medium = str(opts.get("medium", "kvtier"))
        self._block_bytes = _block_bytes(primary_kv_view, opts.get("block_bytes"))
        cfg = _vllm_config(offloading_spec, vllm_config)
        self._identity = _identity(cfg, opts.get("model_id"), opts.get("model_revision"), layout,
                                   self._block_bytes, str(opts.get("salt", "")))
        self._bytes = primary_kv_view.cast("B") if primary_kv_view.format != "B" or \
            primary_kv_view.ndim != 1 else primary_kv_view[:]
        self._num_blocks = self._bytes.nbytes // self._block_bytes
        store = opts.get("store")
        urls = tier_urls(opts.get("tiers")) if store is None else []
        self._own_store = store is None
        self._store = store if store is not None else open_store(
            urls, {k: v for k, v in opts.items() if k in STORE_OPTION_NAMES})
        self._ns = self._identity.namespace(byte_layout(self._block_bytes),
                                            tenant=str(opts.get("tenant", "")))
        async_lookup = opts.get("async_lookup")
        if async_lookup is None:
            async_lookup = any(u.startswith("fs://") for u in urls)
        self._async_lookup = bool(async_lookup)
        self._lookup_pool = (concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(opts.get("lookup_threads", 1))),
            thread_name_prefix="kvtier-vllm-lookup") if self._async_lookup else None)
        self._lookups: dict[bytes, concurrent.futures.Future] = {}
        self._lock = threading.Lock()  # guards _lookups against the lookup threads
        self._jobs: dict[int, _Job] = {}
        self._finished: list[Any] = []
        self._storing: Counter[bytes] = Counter()
        self._pending = PendingWrites(self._store)
        self._events: list[OffloadEvent] = []
        self._closed = False

    @staticmethod
    def get_tier_type() -> str:
        """The type this tier registers under (revisions whose factory asks the class)."""
        return TIER_TYPE

    # ---- lookups ---------------------------------------------------------------------------------

    def lookup(self, key: Any, req_context: Any = None) -> Any:
        """HIT/True when present, MISS/False when absent, RETRY/None while that is not known yet
        (a store of it in flight or still being written, or an exists check running)."""
        try:
            return self._lookup(key)
        except Exception as e:  # never raise into the scheduler
            logger.warning("kvtier lookup failed: %s", e)
            return _miss()

    def _lookup(self, key: Any) -> Any:
        if self._closed:
            return _miss()
        k = engine_key(key)
        if self._storing[k] > 0:
            return _retry()
        if not self._async_lookup:
            return self._answer(self._state(k))
        with self._lock:
            future = self._lookups.get(k)
            if future is None:
                if len(self._lookups) >= _MAX_LOOKUP_ANSWERS:
                    self._forget_answered_lookups()
                self._lookups[k] = self._lookup_pool.submit(self._state, k)
                return _retry()
            if not future.done():
                return _retry()
            del self._lookups[k]  # one answer per question: a later lookup asks again
        return self._answer(future.result())

    @staticmethod
    def _answer(state: str) -> Any:
        return {PRESENT: _hit, PENDING: _retry, ABSENT: _miss}[state]()

    def _state(self, k: bytes) -> str:
        try:
            return self._pending.state(self._ns, k)
        except kvtier.KvtierError as e:
            logger.warning("kvtier lookup failed: %s", e)
            return ABSENT

    def _forget_answered_lookups(self) -> None:
        for k in [k for k, f in self._lookups.items() if f.done()]:
            del self._lookups[k]

    # ---- jobs ------------------------------------------------------------------------------------

    def submit_store(self, job_metadata: Any) -> None:
        """Starts copying the job's primary-tier blocks into kvtier; returns at once."""
        self._submit(job_metadata, is_store=True)

    def submit_load(self, job_metadata: Any) -> None:
        """Starts loading the job's blocks from kvtier into its primary-tier slots; returns at once."""
        self._submit(job_metadata, is_store=False)

    def _submit(self, job: Any, is_store: bool) -> None:
        job_id = getattr(job, "job_id", None)
        try:
            self._start(job, job_id, is_store)
        except Exception as e:  # never raise into the scheduler: the job fails
            logger.warning("kvtier %s job %s not started: %s", "store" if is_store else "load",
                           job_id, e)
            self._finished.append(JobResult(job_id=job_id, success=False))

    def _start(self, job: Any, job_id: Any, is_store: bool) -> None:
        keys = list(job.keys)
        ids = getattr(job, "chunk_ids", None)
        if ids is None:
            ids = getattr(job, "block_ids")
        ids = [int(i) for i in ids]
        if self._closed:
            raise ValueError("the tier is shut down")
        if len(ids) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(ids)} blocks")
        kv_keys = [engine_key(k) for k in keys]
        bufs = [self._block(i) for i in ids]
        if is_store:
            handle = self._store.save_async(self._ns, kv_keys, bufs)
        else:
            handle = self._store.load_async(self._ns, kv_keys, bufs)
        self._jobs[job_id] = _Job(handle, keys, kv_keys, is_store)
        if is_store:
            self._storing.update(kv_keys)
            self._pending.started(kv_keys, handle.done)

    def _block(self, block_id: int) -> memoryview:
        if not 0 <= block_id < self._num_blocks:
            raise IndexError(f"primary block {block_id} outside 0..{self._num_blocks - 1}")
        start = block_id * self._block_bytes
        return self._bytes[start:start + self._block_bytes]

    def get_finished_jobs(self) -> Iterable[Any]:
        """Jobs finished since the last call, as JobResult; never blocks."""
        for job_id, job in list(self._jobs.items()):
            try:
                done = job.handle.done()
            except Exception:  # a handle that cannot answer has ended
                done = True
            if done:
                self._settle(job_id)
        finished, self._finished = self._finished, []
        return finished

    # Older tiering interfaces poll under this name.
    get_finished = get_finished_jobs

    def _settle(self, job_id: int) -> None:
        """Collects a job's outcome, waiting for it if it still runs, and queues its result."""
        job = self._jobs[job_id]
        try:
            job.count = int(job.handle.wait())
        except Exception as e:
            job.count, job.error = 0, e
        finally:
            try:
                job.handle.close()
            except Exception:
                pass
        self._report(job_id)

    def _report(self, job_id: int) -> None:
        job = self._jobs.pop(job_id)
        ok = job.error is None and job.count == len(job.keys)
        if job.is_store:
            self._storing.subtract(job.kv_keys)
            self._storing += Counter()  # drop keys whose count reached zero
            if not ok:
                self._pending.forget(job.kv_keys[job.count:])
            if job.count:
                self._events.append(OffloadEvent(list(job.keys[:job.count]), self._block_bytes,
                                                 self.medium))
        if job.error is not None:
            logger.warning("kvtier %s job %s failed: %s", "store" if job.is_store else "load",
                           job_id, job.error)
        result = JobResult(job_id=job_id, success=ok)
        if not job.is_store and not ok and job.count > 0 and hasattr(result, "successful_keys"):
            result.successful_keys = job.keys[:job.count]
        self._finished.append(result)

    def drain_jobs(self) -> None:
        """Blocks until every submitted job and exists check has ended; results stay queued."""
        for job_id in list(self._jobs):
            self._settle(job_id)
        with self._lock:
            pending = list(self._lookups.values())
        concurrent.futures.wait(pending)

    def has_pending_work(self) -> bool:
        return bool(self._jobs) or bool(self._finished)

    # ---- request hooks, recency, events and statistics --------------------------------------------

    def touch(self, keys: Collection[Any], req_context: Any = None) -> None:
        """Asks kvtier to promote these blocks into its fastest tier, in the background."""
        if self._closed or not keys:
            return
        try:
            self._store.prefetch(self._ns, [engine_key(k) for k in keys])
        except Exception as e:
            logger.debug("kvtier prefetch skipped: %s", e)

    def remove(self, keys: Collection[Any]) -> bool:
        """Removes blocks from every kvtier tier (an eviction); True when every tier agreed."""
        if self._closed or not keys:
            return not self._closed
        try:
            remove_keys(self._store, self._ns, [engine_key(k) for k in keys])
            self._events.append(OffloadEvent(list(keys), self._block_bytes, self.medium, True))
            return True
        except Exception as e:
            logger.warning("kvtier remove failed: %s", e)
            return False

    def on_new_request(self, req_context: Any) -> Any:
        return _RequestContext() if _RequestContext is not None else None

    def get_request_offloading_context(self, req_context: Any) -> Any:
        return self.on_new_request(req_context)

    def on_request_finished(self, req_context: Any) -> None:
        return None

    request_finished = on_request_finished

    def take_events(self) -> Iterable[Any]:
        """Blocks stored (by finished store jobs) and removed since the last call."""
        events, self._events = self._events, []
        return events

    def get_stats(self) -> dict:
        """kvtier's counters for this tier (the Store's statistics, and the medium)."""
        try:
            stats = self._store.stats()
        except Exception as e:
            logger.debug("kvtier stats unavailable: %s", e)
            return {"medium": self.medium}
        out = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
        out["medium"] = self.medium
        return out

    def stop_executor(self) -> None:
        return None

    # ---- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Waits for the jobs in flight, then releases the store and every view of the primary
        tier kvtier made (so the engine can close its shared memory). Never raises; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.drain_jobs()
            if self._lookup_pool is not None:
                self._lookup_pool.shutdown(wait=True)
            if self._own_store:
                self._store.close()
        except Exception:  # shutdown runs on the engine's exit path: log, never raise
            logger.exception("kvtier secondary tier shutdown")
        self._release_views()

    def _release_views(self) -> None:
        view, self._bytes = self._bytes, None
        self._primary_kv_view = None
        if view is not None:
            try:
                view.release()
            except Exception:  # a slice still referenced elsewhere keeps it; say so
                logger.warning("kvtier: a view of the primary tier is still in use at shutdown")

    @property
    def namespace(self) -> kvtier.Namespace:
        return self._ns

    @property
    def identity(self) -> kvtier.EngineIdentity:
        return self._identity

    @property
    def store(self) -> kvtier.Store:
        return self._store
