"""kvtier as a secondary tier of vLLM's tiered KV offloading (TieringOffloadingSpec).

vLLM keeps offloaded blocks in a pinned CPU primary tier; a secondary tier receives blocks from
it (store / cascade) and returns blocks into it (load / promotion). The tiering spec builds each
entry of ``kv_connector_extra_config["secondary_tiers"]`` with

    tier_cls(offloading_spec=<the spec>, primary_kv_view=<memoryview>, tier_type=<type>, **rest)

where ``primary_kv_view`` is a 2-D byte view (num_blocks, bytes_per_block) over the primary tier.
Some vLLM versions pass ``vllm_config=`` instead of ``offloading_spec=``; both are accepted.

Every method runs in the scheduler process and returns without waiting for I/O:

- ``submit_store`` / ``submit_load`` start ``Store.save_async`` / ``Store.load_async`` over slices
  of the primary view (zero-copy) and return.
- ``get_finished_jobs`` polls each job's ``Handle.done()`` (never blocks) and reports the finished
  ones. A load reports success only when every block was loaded and verified; a partial load lists
  its loaded leading keys in ``successful_keys``. A failed or corrupt block is never reported
  loaded and its slot holds no byte of another block (kvtier zeroes it).
- ``lookup`` answers RETRY (``None`` on versions with a bool/None answer) while a store of that
  key is in flight, or while an exists check on a thread runs (``async_lookup``, the default for
  fs:// tiers, whose index lives on a shared filesystem); file:// and mem:// tiers keep their
  index in memory and are asked directly.
- A store job succeeds once kvtier has taken a copy of every block (the primary slots may then be
  reused). kvtier never makes the caller wait for slow storage: when a tier is full or its write
  queue is, the block is dropped softly (counted in the store's ``dropped_saves``) and a later
  ``lookup`` answers MISS, so vLLM recomputes it; a save kvtier refuses outright is reported with
  ``success=False``. Nothing raises into the scheduler.
- ``shutdown`` waits for the jobs in flight (kvtier cannot abandon a copy halfway, and the primary
  slots must stay untouched until it ends), then closes the store it opened.

Configuration keys (besides ``type`` and ``module_path``): ``tiers`` (required: URL list or a
comma-separated string), ``model_id``, ``tenant``, ``salt``, ``block_bytes`` (default: the view's
row size), ``async_lookup`` (bool), ``lookup_threads`` and the Store options
(``kvtier.connectors.STORE_OPTION_NAMES``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
from collections import Counter
from typing import Any, Collection, Iterable

import kvtier

from . import STORE_OPTION_NAMES, byte_layout, engine_key, open_store, tier_urls

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

_MAX_LOOKUP_ANSWERS = 65536


def _hit() -> Any:
    return _LookupResult.HIT if _LookupResult is not None else True


def _miss() -> Any:
    return _LookupResult.MISS if _LookupResult is not None else False


def _retry() -> Any:
    return _LookupResult.RETRY if _LookupResult is not None else None


def _model_id(offloading_spec: Any, vllm_config: Any) -> str:
    for root in (vllm_config, getattr(offloading_spec, "vllm_config", None),
                 getattr(getattr(offloading_spec, "config", None), "vllm_config", None)):
        model = getattr(getattr(root, "model_config", None), "model", None)
        if model:
            return str(model)
    return "vllm"


def _block_bytes(view: memoryview, configured: Any) -> int:
    if configured is not None:
        return int(configured)
    if view.ndim >= 2 and view.strides:
        return int(view.strides[0])
    raise ValueError("primary_kv_view is one-dimensional: set block_bytes in the tier config")


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
                 tier_type: str = "kvtier", *, vllm_config: Any = None, tiers: Any = None,
                 model_id: str | None = None, tenant: str = "", salt: str = "",
                 block_bytes: int | None = None, async_lookup: bool | None = None,
                 lookup_threads: int = 1, store: kvtier.Store | None = None,
                 **store_options: Any) -> None:
        if primary_kv_view is None:
            raise ValueError("KvtierSecondaryTier needs primary_kv_view")
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None
        unknown = set(store_options) - set(STORE_OPTION_NAMES)
        if unknown:
            raise ValueError(f"unknown kvtier tier option(s): {sorted(unknown)}")
        self._bytes = primary_kv_view.cast("B") if primary_kv_view.format != "B" or \
            primary_kv_view.ndim != 1 else primary_kv_view
        self._block_bytes = _block_bytes(primary_kv_view, block_bytes)
        self._num_blocks = self._bytes.nbytes // self._block_bytes
        urls = tier_urls(tiers) if store is None else []
        self._own_store = store is None
        self._store = store if store is not None else open_store(urls, store_options)
        layout = byte_layout(self._block_bytes)
        self._ns = self._store.namespace(model_id or _model_id(offloading_spec, vllm_config),
                                         layout, tenant=tenant,
                                         salt=f"vllm-offload;{salt}" if salt else "vllm-offload")
        if async_lookup is None:
            async_lookup = any(u.startswith("fs://") for u in urls)
        self._async_lookup = bool(async_lookup)
        self._lookup_pool = (concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(lookup_threads)), thread_name_prefix="kvtier-vllm-lookup")
            if self._async_lookup else None)
        self._lookups: dict[bytes, concurrent.futures.Future] = {}
        self._lock = threading.Lock()  # guards _lookups against the lookup threads
        self._jobs: dict[int, _Job] = {}
        self._finished: list[Any] = []
        self._storing: Counter[bytes] = Counter()
        self._closed = False

    # ---- lookups ---------------------------------------------------------------------------------

    def lookup(self, key: Any, req_context: Any = None) -> Any:
        """HIT/True when present, MISS/False when absent, RETRY/None while that is not known yet."""
        if self._closed:
            return _miss()
        k = engine_key(key)
        if self._storing[k] > 0:
            return _retry()
        if not self._async_lookup:
            return _hit() if self._present(k) else _miss()
        with self._lock:
            future = self._lookups.get(k)
            if future is None:
                if len(self._lookups) >= _MAX_LOOKUP_ANSWERS:
                    self._forget_answered_lookups()
                self._lookups[k] = self._lookup_pool.submit(self._present, k)
                return _retry()
            if not future.done():
                return _retry()
            del self._lookups[k]  # one answer per question: a later lookup asks again
        return _hit() if future.result() else _miss()

    def _present(self, k: bytes) -> bool:
        try:
            return self._store.lookup(self._ns, [k]) == 1
        except kvtier.KvtierError as e:
            logger.warning("kvtier lookup failed: %s", e)
            return False

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
        job_id = job.job_id
        keys = list(job.keys)
        ids = getattr(job, "chunk_ids", None)
        if ids is None:
            ids = getattr(job, "block_ids")
        ids = [int(i) for i in ids]
        if self._closed or len(ids) != len(keys):
            if len(ids) != len(keys):
                logger.error("kvtier job %s: %d keys but %d blocks", job_id, len(keys), len(ids))
            self._finished.append(JobResult(job_id=job_id, success=False))
            return
        kv_keys = [engine_key(k) for k in keys]
        try:
            bufs = [self._block(i) for i in ids]
            if is_store:
                handle = self._store.save_async(self._ns, kv_keys, bufs)
            else:
                handle = self._store.load_async(self._ns, kv_keys, bufs)
        except (kvtier.KvtierError, ValueError, IndexError) as e:
            logger.warning("kvtier %s job %s not started: %s", "store" if is_store else "load",
                           job_id, e)
            self._finished.append(JobResult(job_id=job_id, success=False))
            return
        self._jobs[job_id] = _Job(handle, keys, kv_keys, is_store)
        if is_store:
            self._storing.update(kv_keys)

    def _block(self, block_id: int) -> memoryview:
        if not 0 <= block_id < self._num_blocks:
            raise IndexError(f"primary block {block_id} outside 0..{self._num_blocks - 1}")
        start = block_id * self._block_bytes
        return self._bytes[start:start + self._block_bytes]

    def get_finished_jobs(self) -> Iterable[Any]:
        """Jobs finished since the last call, as JobResult; never blocks."""
        for job_id, job in list(self._jobs.items()):
            if job.handle.done():
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
        except kvtier.KvtierError as e:
            job.count, job.error = 0, e
        finally:
            job.handle.close()
        self._report(job_id)

    def _report(self, job_id: int) -> None:
        job = self._jobs.pop(job_id)
        if job.is_store:
            self._storing.subtract(job.kv_keys)
            self._storing += Counter()  # drop keys whose count reached zero
        if job.error is not None:
            logger.warning("kvtier %s job %s failed: %s", "store" if job.is_store else "load",
                           job_id, job.error)
        ok = job.error is None and job.count == len(job.keys)
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

    # ---- request hooks and recency ---------------------------------------------------------------

    def touch(self, keys: Collection[Any], req_context: Any = None) -> None:
        """Asks kvtier to promote these blocks into its fastest tier, in the background."""
        if self._closed or not keys:
            return
        try:
            self._store.prefetch(self._ns, [engine_key(k) for k in keys])
        except kvtier.KvtierError as e:
            logger.debug("kvtier prefetch skipped: %s", e)

    def on_new_request(self, req_context: Any) -> Any:
        return _RequestContext() if _RequestContext is not None else None

    def get_request_offloading_context(self, req_context: Any) -> Any:
        return self.on_new_request(req_context)

    def on_request_finished(self, req_context: Any) -> None:
        return None

    request_finished = on_request_finished

    def take_events(self) -> Iterable[Any]:
        return ()

    def get_stats(self) -> Any:
        return None

    def stop_executor(self) -> None:
        return None

    # ---- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Waits for the jobs in flight, then releases the store. Never raises; idempotent."""
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

    @property
    def namespace(self) -> kvtier.Namespace:
        return self._ns

    @property
    def store(self) -> kvtier.Store:
        return self._store

