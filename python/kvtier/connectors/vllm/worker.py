"""The worker side of the connector (one per TP rank): registers the KV caches, runs the step's loads
and saves over them (CPU caches by the host path, ``host_paged`` and ``groups``; CUDA caches by the
GPU workers, ``gpu_paged`` and ``gpu_grouped``) and reports what ended to vLLM. A mixin of
``core.KvtierConnectorCore``, which holds the state both sides share."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

import kvtier

from .engine_api import KVConnectorTransferResults
from .gpu_grouped import GpuGroupedWorker
from .gpu_paged import GpuWorker, is_cuda
from .groups import GroupedCache, grouped_cache_of, load_grouped, save_grouped
from .host_paged import PagedCache, load_async, save_async
from .kv_caches import paged_cache_of
from .metadata import KvtierConnectorMetadata, SaveSpec
from .request_keys import chunk_keys

logger = logging.getLogger("kvtier.connectors.vllm_v1")


@dataclass
class _Op:
    req_id: str
    handle: Any
    blocks: np.ndarray     # [n_chunks, groups x blocks_per_chunk], -1 for blocks not written
    is_load: bool
    is_async: bool = False
    landed: float = 0      # a synchronous load: bytes of every chunk known to be in place (inf: ended)
    keys: list = field(default_factory=list)  # a load's keys: the first one not loaded is removed
    deadline: float = math.inf  # a synchronous load: given up at this time.monotonic()
    given_up: bool = False  # a synchronous load past its deadline: failed, its request busy until it ends


class _Ended:
    """A Handle's answers for an operation that ended before it was recorded (kvtier.gpu's loads)."""

    def __init__(self, count: int) -> None:
        self._count = count

    def done(self) -> bool:
        return True

    def wait(self, timeout: Optional[float] = None) -> int:
        return self._count

    def wait_bytes(self, nbytes: int, timeout: Optional[float] = None) -> int:
        return self._count

    def close(self) -> None:
        return None



class WorkerSide:
    """vLLM's worker-side connector calls, under vLLM's names and signatures."""

    def _init_worker_state(self) -> None:
        self._cache: Optional[PagedCache | GroupedCache] = None
        self._gpu: Optional[GpuWorker] = None
        self._layer_index: dict[str, int] = {}
        self._ops: list[_Op] = []
        self._sync_loads: list[_Op] = []
        self._load_errors: set[int] = set()
        self._held: set[str] = set()             # requests with saves or async loads, not yet reported
        self._finished_seen: set[str] = set()
        self._late_recving: set[str] = set()     # async loads ended while another op of theirs ran
        self._failed_loads: set[str] = set()     # requests with a load error in this step
        self._recv_failed: set[str] = set()      # several groups: async loads that failed, not yet reported
        self._step_errors: set[int] = set()      # blocks that failed to load in this step

    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        layout = self._extra.get("kv_cache_layout", "auto")
        if self._groups:  # several KV cache groups: an HND cache (layout_of checked the layout)
            if kv_caches and is_cuda(next(iter(kv_caches.values()))):
                self._gpu = GpuGroupedWorker(kv_caches, self._spec, self._groups, self._chunk_tokens,
                                             self.namespace, self._store)
                self._layer_index = {name: i for i, name in enumerate(self._gpu.names)}
                return
            self._host_cache(grouped_cache_of(kv_caches, self._spec, self._groups, self._chunk_tokens, layout))
            return
        if kv_caches and is_cuda(next(iter(kv_caches.values()))):
            if self._async_load:
                raise ValueError("KvtierConnector: async_load is not supported for CUDA KV caches "
                                 "(kvtier.gpu reads and verifies a load before start_load_kv returns)")
            groups = int(self._extra.get("layer_groups", min(self._spec.layers, 8)))
            self._gpu = GpuWorker(kv_caches, self._spec, layout, groups, self.namespace, self._store)
            self._layer_index = {name: i for i, name in enumerate(self._gpu.names)}
            return
        self._host_cache(paged_cache_of(kv_caches, self._spec, layout))

    def _host_cache(self, cache: Any) -> None:
        """Registers a cache in host memory: its layers' indices and, per layer, the bytes of a chunk that
        must have landed before the layer is usable (wait_for_layer_load)."""
        self._cache = cache
        self._layer_index = {name: i for i, name in enumerate(cache.layer_names)}
        self._layer_end = [cache.layer_end(i, self._chunk_tokens) for i in range(len(self._layer_index))]

    def _keys(self, spec: Any) -> list:
        """The keys of a load's or save's chunks [first_chunk, end): tokens and extra key material."""
        tail = self.namespace.chunk_keys(spec.tokens)[spec.first_chunk:]
        return chunk_keys(tail, getattr(spec, "extras", None), self._chunk_tokens, spec.first_chunk)

    def _chunk_blocks(self, blocks: Sequence[int], n_chunks: int) -> np.ndarray:
        per = self._chunk_tokens // self._spec.block_size
        arr = np.asarray(blocks, dtype=np.int64)
        if arr.size != n_chunks * per:
            raise ValueError(f"KvtierConnector: {arr.size} blocks for {n_chunks} chunks of {per} blocks")
        return arr.reshape(n_chunks, per)

    def _tables(self, blocks: Sequence[Any], n_chunks: int) -> np.ndarray:
        """The block tables of a load or save, [groups, n_chunks, blocks_per_chunk]."""
        per_group = blocks if self._groups else [blocks]
        return np.stack([self._chunk_blocks(b, n_chunks) for b in per_group])

    def _start_io(self, is_load: bool, keys: list, tables: np.ndarray) -> Any:
        """Starts a host-path load or save of ``keys`` over the block tables; its Handle."""
        self._require_cache()
        if isinstance(self._cache, GroupedCache):
            return (load_grouped if is_load else save_grouped)(self._store, self.namespace, keys,
                                                               self._cache, tables)
        return (load_async if is_load else save_async)(self._store, self.namespace, keys, self._cache,
                                                       tables[0])

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._metadata()
        for spec in meta.loads:
            keys = self._keys(spec)
            tables = self._tables(spec.blocks, len(keys))
            if self._gpu is not None and not spec.is_async:
                self._held.add(spec.req_id)  # the scheduler holds every loading request (reported at its end)
                self._load_gpu(spec.req_id, keys, tables if self._groups else tables[0])
                continue
            op = _Op(spec.req_id, None, tables.transpose(1, 0, 2).reshape(len(keys), -1), True, spec.is_async,
                     keys=keys)
            if self._gpu is not None:  # several groups on CUDA: read before this returns, reported as async
                op.handle = self._ended_gpu_load(spec.req_id, keys, tables)
                self._stats["loads"] += 1
                self._held.add(spec.req_id)
                with self._lock:
                    self._ops.append(op)
                continue
            try:
                op.handle = self._start_io(True, keys, tables)
            except (kvtier.KvtierError, ValueError, RuntimeError) as e:
                logger.warning("KvtierConnector: load of %s not started (%s); its tokens are recomputed",
                               spec.req_id, e)
            self._stats["loads"] += 1
            self._held.add(spec.req_id)  # the scheduler holds every loading request's blocks at its end
            if not spec.is_async:
                op.deadline = time.monotonic() + self._load_timeout
            with self._lock:
                self._ops.append(op)
            if self._has_state and not spec.is_async:  # a Mamba layer may read its state before any
                self._end_sync_load(op)  # attention layer waits: the load ends before the forward starts
            elif not spec.is_async:
                self._sync_loads.append(op)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Returns once ``layer_name``'s bytes of every synchronous load have landed (or the load
        ended); a name that is not a registered layer waits for the whole loads and accounts for them.
        Whether a chunk finally loaded is decided when the load ends (wait_for_save)."""
        index = self._layer_index.get(layer_name)
        if self._gpu is not None:
            if index is not None:
                self._gpu.wait_layer(index)  # the engine's stream waits; the host does not
            return
        if index is None or self._cache is None:
            self._end_sync_loads()
            return
        need = self._layer_end[index]
        for op in list(self._sync_loads):
            # A layer whose bytes an earlier wait already saw in place (with head-major chunks, every
            # layer after the first) costs no call: vLLM waits once per layer per step.
            if op.handle is None or op.landed >= need:
                continue
            try:
                ready = op.handle.wait_bytes(need, timeout=max(0.0, op.deadline - time.monotonic()))
            except kvtier.KvtierError as e:  # accounted for when the load is finished
                if e.status == kvtier.Status.BUSY and not op.handle.done():  # its deadline passed
                    self._sync_loads.remove(op)
                    self._give_up(op)
                    continue
                logger.warning("KvtierConnector: waiting for layer %s of %s failed: %s", layer_name,
                               op.req_id, e)
                ready = -1
            # Every chunk has `need` bytes in place, or the load ended (nothing more to wait for).
            op.landed = need if ready == len(op.blocks) else float("inf")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None  # a chunk holds every layer: saved whole in wait_for_save

    def wait_for_save(self) -> None:
        self.wait_for_layer_load("")  # a step whose layers never waited still finishes its loads
        meta = self._metadata()
        if self._gpu is not None:
            self._gpu.end_step()
        for spec in meta.saves:
            self._held.add(spec.req_id)
            keys = self._keys(spec)
            if not keys or not self._saves:  # MLA ranks other than 0: rank 0 saves the same latents
                continue
            if self._computed_on_failed_load(spec):
                continue
            tables = self._tables(spec.blocks, len(keys))
            if self._gpu is not None:
                self._save_gpu(spec.req_id, keys, tables if self._groups else tables[0])
                continue
            op = _Op(spec.req_id, None, tables.transpose(1, 0, 2).reshape(len(keys), -1), False)
            try:
                op.handle = self._start_io(False, keys, tables)
            except (kvtier.KvtierError, ValueError, RuntimeError) as e:
                self._stats["saves_failed"] += 1
                logger.warning("KvtierConnector: save of %s not started (%s)", spec.req_id, e)
                continue
            self._stats["saves"] += 1
            with self._lock:
                self._ops.append(op)
            if self._groups:  # vLLM frees window blocks as the window moves on, mid-request: the
                self._finish(op)  # save has read them before the next step may write them again

    def _computed_on_failed_load(self, spec: SaveSpec) -> bool:
        """Whether a save's chunks may have been computed against KV a load of this step failed to
        write (its own load, or a block it shares with a request whose load failed): such a save is
        dropped. vLLM recomputes those tokens, and the scheduler saves them again
        (update_connector_output)."""
        if spec.req_id in self._failed_loads:
            return True
        errors = self._step_errors
        if not errors:
            return False
        if any(b in errors for b in spec.context):
            return True
        return any(int(b) in errors for b in np.asarray(spec.blocks, dtype=np.int64).ravel())

    def handle_preemptions(self, kv_connector_metadata: KvtierConnectorMetadata) -> None:
        self._end_preempted(kv_connector_metadata)

    def _end_preempted(self, kv_connector_metadata: Any) -> None:
        """Waits for the operations of the step's preempted requests: vLLM freed their blocks."""
        preempted = set(getattr(kv_connector_metadata, "preempted", ()) or ())
        if preempted:
            for op in self._ops_of(lambda o: o.req_id in preempted):
                self._finish(op)

    def get_finished(self, finished_req_ids: set) -> tuple[Optional[set], Optional[set]]:
        """(finished_sending, finished_recving). A request is in at most one of them per call, and a
        finished request is reported once: vLLM frees a finished request's blocks for either set and
        forgets it (a second report fails its ``assert req_id in self.requests``). A request whose
        operations still run is not reported: kvtier may still read or write its blocks."""
        self._end_sync_loads()  # their errors belong to this step (get_block_ids_with_load_errors)
        self._finished_seen |= set(finished_req_ids)
        recving: set = set()
        for op in self._ops_of(lambda o: o.handle is None or o.handle.done()):
            self._finish(op)
            if op.is_load and op.is_async:
                recving.add(op.req_id)
        with self._lock:
            busy = {o.req_id for o in self._ops}
        late = recving & busy  # another operation of the request still uses its blocks: later
        recving = (recving - busy) | {r for r in self._late_recving if r not in busy}
        self._late_recving = (self._late_recving | late) - recving
        done_finished = recving & self._finished_seen  # vLLM frees these for finished_recving
        self._held -= done_finished
        sending = {r for r in self._held if r in self._finished_seen and r not in busy}
        self._held -= sending
        self._finished_seen &= self._held  # only ids that may still be reported
        return (sending or None), (recving or None)

    def get_transfer_results(self, finished_req_ids: set) -> Any:
        """vLLM's KVConnectorTransferResults: ``get_finished``'s two sets and, with several KV cache
        groups, the finished asynchronous loads that failed (``failed_recving``, each also in
        ``finished_recving``, as vLLM asks): vLLM recomputes such a request from its first token (its
        recovery by block ids cannot tell the groups' blocks apart)."""
        sending, recving = self.get_finished(finished_req_ids)
        failed = self._recv_failed & set(recving or ())
        self._recv_failed -= failed
        results = KVConnectorTransferResults(finished_sending=set(sending or ()), finished_recving=set(recving or ()))
        if failed:
            results.failed_recving = failed
        return results

    def get_block_ids_with_load_errors(self) -> set:
        """The blocks that failed to load since the last call. The step's synchronous loads are ended
        first, so their errors are reported in the step that used them, whichever of its calls vLLM
        makes first (the errors must reach vLLM before it keeps the step's output)."""
        self._end_sync_loads()
        errors, self._load_errors = self._load_errors, set()
        return errors

    def _end_sync_loads(self) -> None:
        while self._sync_loads:
            self._end_sync_load(self._sync_loads.pop())

    def _end_sync_load(self, op: _Op) -> None:
        """Waits for a synchronous load until its deadline (``load_timeout_s``), then accounts for it;
        past the deadline the load is given up (``_give_up``) and the forward goes on."""
        if op.handle is not None and not op.handle.done():
            try:
                op.handle.wait(timeout=max(0.0, op.deadline - time.monotonic()))
            except kvtier.KvtierError as e:
                if e.status == kvtier.Status.BUSY and not op.handle.done():
                    self._give_up(op)
                    return
        self._finish(op)

    def _give_up(self, op: _Op) -> None:
        """A synchronous load past its deadline (a tier read that hangs: a stalled NFS under fs://) has
        failed: every block it was to write is a load error of this step (vLLM recomputes them, or fails
        the request with kv_load_failure_policy 'fail'), and its saves are dropped. kvtier may still
        write those blocks until the read ends, so the operation stays in flight: its request is not
        reported finished (vLLM keeps its blocks) until then, and when it ends its blocks are reported
        again (get_finished), so that vLLM recomputes what the late read wrote over."""
        op.given_up = True
        self._stats["load_timeouts"] += 1
        logger.warning("KvtierConnector: load of %s not done after load_timeout_s %s s; its tokens are "
                       "recomputed, its blocks held until the read ends", op.req_id, self._load_timeout)
        self._note_load(op.req_id, 0, op.blocks[op.blocks >= 0])

    def _note_load(self, req_id: str, loaded: int, bad: np.ndarray) -> None:
        """Accounts for a finished load: ``bad`` are the blocks it did not fill (recomputed)."""
        self._stats["loaded_chunks"] += loaded
        if bad.size:
            self._failed_loads.add(req_id)
            self._step_errors |= {int(b) for b in bad}
            self._stats["load_errors"] += 1
            self._stats["error_blocks"] += int(bad.size)
            if self._several_groups:  # the whole request, in failed_recving (get_transfer_results)
                self._recv_failed.add(req_id)
            else:
                self._load_errors |= {int(b) for b in bad}

    def _load_gpu(self, req_id: str, keys: list, blocks: np.ndarray) -> None:
        self._stats["loads"] += 1
        try:
            self._require_cache()
            loaded, bad = self._gpu.load(keys, blocks)  # type: ignore[union-attr]
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            logger.warning("KvtierConnector: GPU load of %s failed (%s); its tokens are recomputed", req_id, e)
            loaded, bad = 0, blocks[blocks >= 0]
        self._note_load(req_id, loaded, bad)

    def _ended_gpu_load(self, req_id: str, keys: list, tables: np.ndarray) -> Optional["_Ended"]:
        """An asynchronous load of kvtier.gpu's grouped path: read and verified now, the engine's stream
        made to wait for it; its result as an ended operation (accounted for by get_finished)."""
        try:
            self._require_cache()
            loaded, _ = self._gpu.load(keys, tables)  # type: ignore[union-attr]
            self._gpu.wait_layer(0)  # type: ignore[union-attr]  # one layer group: the whole load
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            logger.warning("KvtierConnector: GPU load of %s failed (%s); its tokens are recomputed", req_id, e)
            return None
        return _Ended(loaded)

    def _save_gpu(self, req_id: str, keys: list, blocks: np.ndarray) -> None:
        try:
            self._require_cache()
            self._gpu.save(keys, blocks)  # type: ignore[union-attr]
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            self._stats["saves_failed"] += 1
            logger.warning("KvtierConnector: GPU save of %s failed: %s", req_id, e)
            return
        self._stats["saves"] += 1
        self._stats["saved_chunks"] += len(keys)

    def _forget_chunk(self, key: bytes) -> None:
        """Removes the first chunk a load could not use (missing, or failing verification) from the
        tiers, so that the save after vLLM recomputed it is written (a tier keeps the copy it holds
        under a key: a corrupt one would otherwise stay, a miss for every later request)."""
        try:
            self._store.remove(self.namespace, [key])
        except kvtier.KvtierError as e:
            logger.warning("KvtierConnector: removing a chunk that failed to load: %s", e)

    def _require_cache(self) -> None:
        if self._closed:
            raise RuntimeError("the connector is shut down")
        if self._cache is None and self._gpu is None:
            raise RuntimeError("register_kv_caches was not called")

    def _ops_of(self, pred: Any) -> list:
        with self._lock:
            picked = [o for o in self._ops if pred(o)]
        return picked

    def _finish(self, op: _Op) -> None:
        """Waits for one operation, accounts for it and forgets it (idempotent per op)."""
        with self._lock:
            if op not in self._ops:
                return
            self._ops.remove(op)
        if op.given_up:  # failed at its deadline already; its late writes are recomputed as well
            op.handle.close()
            self._stats["late_load_ends"] += 1
            if not self._several_groups:
                self._load_errors |= {int(b) for b in op.blocks[op.blocks >= 0]}
            return
        done, answered = 0, False
        if op.handle is not None:
            try:
                done, answered = op.handle.wait(), True
            except kvtier.KvtierError as e:
                logger.warning("KvtierConnector: %s of %s failed: %s", "load" if op.is_load else "save",
                               op.req_id, e)
            finally:
                op.handle.close()
        if op.is_load:
            if answered and done < len(op.keys):  # that chunk is missing or failed verification
                self._forget_chunk(op.keys[done])
            if self._has_state and done < len(op.blocks):  # the state as of the last good chunk is not
                done = 0  # in a block (only the prefix's last block takes one): recompute the whole load
            bad = op.blocks[done:]
            self._note_load(op.req_id, done, bad[bad >= 0])
        elif op.handle is None or done < len(op.blocks):
            self._stats["saved_chunks"] += done
            self._stats["saves_failed"] += 0 if op.handle is None else 1
        else:
            self._stats["saved_chunks"] += done
