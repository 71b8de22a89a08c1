"""The scheduler side of the connector (vLLM's scheduler process): looks up a prompt's chunks, records
which chunks go to which blocks, and hands the workers the step's loads and saves
(``KvtierConnectorMetadata``). A mixin of ``core.KvtierConnectorCore``, which holds the state both
sides share (the spec, the options, the namespaces, the store, the counters)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import kvtier

from .groups import skipped_blocks, skipped_state_blocks
from .metadata import KvtierConnectorMetadata, LoadSpec, SaveSpec
from .request_keys import RequestKeys, chunk_keys, request_material
from .sched_output import resumed_ids

logger = logging.getLogger("kvtier.connectors.vllm_v1")


@dataclass
class _ReqState:
    tokens: list
    block_ids: list        # one list of block ids per KV cache group
    saved_chunks: int      # chunks [0, saved_chunks) are in kvtier or being saved
    held: bool = False     # a save or an asynchronous load was handed to the workers
    stopped: bool = False  # a chunk's window blocks were gone before its save: no more saves
    extras: Optional[RequestKeys] = None



class SchedulerSide:
    """vLLM's scheduler-side connector calls, under vLLM's names and signatures."""

    def _init_scheduler_state(self) -> None:
        self._reqs: dict[str, _ReqState] = {}
        self._hits: dict[str, int] = {}          # req id -> chunks found by the last lookup
        self._load_failed: set[str] = set()      # requests whose load failed (failed_recving): no more hits
        self._pending_loads: list[LoadSpec] = []

    def _usable_chunks(self, tokens: Sequence[int]) -> int:
        # at least one prompt token is left for the engine to compute
        return max(0, (len(tokens) - 1) // self._chunk_tokens)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        try:
            tokens, extras = request_material(request)
        except Exception as e:  # a request kvtier cannot key is computed, never an error in vLLM's scheduler
            logger.warning("KvtierConnector: request %s not cached: %s", getattr(request, "request_id", "?"), e)
            tokens = None
        if tokens is None:  # prompt embeddings: not cached (_vllm_request_keys)
            self._hits.pop(request.request_id, None)
            return 0, False
        usable = self._usable_chunks(tokens)
        hit = 0
        # A request vLLM restarts after its load failed (failed_recving) is computed: this process's
        # tiers may still list the chunk the worker could not use (a file:// index is per process), and
        # another hit would fail the same way, again and again.
        if usable and not self._closed and request.request_id not in self._load_failed:
            prefix = tokens[:usable * self._chunk_tokens]
            try:
                hit = min(self._store.lookup(ns, chunk_keys(ns.chunk_keys(prefix), extras, self._chunk_tokens))
                          for ns in self._namespaces)
            except kvtier.KvtierError as e:  # a tier that cannot answer is a miss, never an error
                logger.warning("KvtierConnector: lookup failed (%s); treated as a miss", e)
                hit = 0
        self._hits[request.request_id] = hit
        self._stats["lookups"] += 1
        new = hit * self._chunk_tokens - num_computed_tokens
        if new <= 0:
            return 0, False
        return new, self._async_load

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        rid = request.request_id
        state = self._reqs.get(rid)
        tokens, extras = None, None
        if state is None:
            try:
                tokens, extras = request_material(request)
            except Exception:  # logged by the lookup: computed, never cached
                tokens = None
            if tokens is None:  # prompt embeddings: not cached
                self._hits.pop(rid, None)
                return
        block_ids = self._group_lists(blocks.get_block_ids() if blocks is not None else None)
        hit = self._hits.pop(rid, 0)
        if state is None:
            state = self._reqs[rid] = _ReqState(list(tokens or ()), block_ids, hit, extras=extras)
        elif any(block_ids):
            state.block_ids = block_ids
        state.saved_chunks = max(state.saved_chunks, hit)  # chunks found are in kvtier already
        if num_external_tokens <= 0:
            return
        end_tokens = hit * self._chunk_tokens
        local = end_tokens - num_external_tokens        # tokens the engine holds already
        first = local // self._chunk_tokens
        bs = self._spec.block_size
        tables = []
        for ids, window, has_state in zip(block_ids, self._windows, self._states):
            gone = skipped_blocks(window, end_tokens, bs)  # a window group's null blocks: never written
            if has_state:  # only the prefix's last block takes a state: the state as of the prefix's end
                gone = end_tokens // bs - 1
            tables.append([-1 if b < local // bs or b < gone else int(ids[b])
                           for b in range(first * self._chunk_tokens // bs, end_tokens // bs)])
        self._stats["hit_tokens"] += num_external_tokens
        self._pending_loads.append(LoadSpec(rid, list(state.tokens[:end_tokens]), first, self._per_group(tables),
                                            self._async_load, state.extras))

    def _group_lists(self, block_ids: Any) -> list:
        """vLLM's block ids (a tuple of one list per KV cache group, or one plain list) as one list
        per group; ValueError when the number of groups is not the configuration's."""
        if block_ids is None:
            return [[] for _ in self._windows]
        if not isinstance(block_ids, tuple):
            block_ids = (block_ids,)
        if len(block_ids) != len(self._windows):
            raise ValueError(f"KvtierConnector: {len(block_ids)} KV cache groups; the connector was "
                             f"configured with {len(self._windows)}")
        return [list(ids) for ids in block_ids]

    def _per_group(self, tables: list) -> list:
        """The block tables of a load or save as metadata: one flat list with one KV cache group (the
        single-group form), else one list per group."""
        return tables if self._groups else tables[0]

    def _kv_lost(self, chunk: int, computed_tokens: int) -> Optional[str]:
        """Which counter to raise when vLLM, with ``computed_tokens`` computed, freed (or never held) a
        block of ``chunk`` that a prefix load ending at or after that chunk needs, else None.
        Window groups: the blocks a save finds freed are saved as zeros: a chunk's blocks freed before
        the step that completes it hold only tokens before the window of the shortest prefix ending with
        it (the window moved on from a point inside the chunk), which every load of a prefix holding the
        chunk leaves to vLLM's null block. A chunk saved later (vLLM's own prefix cache held it) may have
        lost more: not saved. Mamba groups: the block that ends the chunk holds its state; vLLM keeps
        only the block of the last computed token's state, so a chunk saved after vLLM moved past that
        block has no state to save."""
        bs, end = self._spec.block_size, (chunk + 1) * self._chunk_tokens
        if any(skipped_blocks(w, computed_tokens, bs) > max(chunk * self._chunk_tokens // bs,
                                                            skipped_blocks(w, end, bs))
               for w in self._windows):
            return "window_saves_skipped"
        if self._has_state and end // bs - 1 < skipped_state_blocks(computed_tokens, bs):
            return "state_saves_skipped"
        return None

    def build_connector_meta(self, scheduler_output: Any) -> KvtierConnectorMetadata:
        meta = KvtierConnectorMetadata(loads=self._pending_loads,
                                       preempted=set(getattr(scheduler_output, "preempted_req_ids", None) or ()))
        self._pending_loads = []
        for spec in meta.loads:  # held at its end until the workers' reads of it ended (finished_sending):
            if spec.req_id in self._reqs:  # a synchronous load given up at its deadline may still write
                self._reqs[spec.req_id].held = True
        computed: dict[str, int] = {}
        for new in scheduler_output.scheduled_new_reqs:
            state = self._reqs.get(new.req_id)
            if state is not None:
                state.block_ids = self._group_lists(new.block_ids)
                computed[new.req_id] = new.num_computed_tokens
        cached = scheduler_output.scheduled_cached_reqs
        resumed = resumed_ids(cached)
        for i, rid in enumerate(cached.req_ids):
            state = self._reqs.get(rid)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                ids = self._group_lists(new_ids)
                state.block_ids = ids if rid in resumed else [a + b for a, b in zip(state.block_ids, ids)]
            computed[rid] = cached.num_computed_tokens[i]
        for rid, done_before in computed.items():
            state = self._reqs[rid]
            done = done_before + scheduler_output.num_scheduled_tokens.get(rid, 0)
            full = min(done, len(state.tokens)) // self._chunk_tokens
            if full <= state.saved_chunks or state.stopped:
                continue
            first = state.saved_chunks
            lost = self._kv_lost(first, done_before)
            if lost:  # nothing after the chunk is reachable either
                state.stopped = True
                self._stats[lost] += 1
                continue
            bs = self._spec.block_size
            lo, hi = (c * self._chunk_tokens // bs for c in (first, full))
            tables = [[-1 if b < skipped_blocks(w, done_before, bs) else int(ids[b]) for b in range(lo, hi)]
                      for ids, w in zip(state.block_ids, self._windows)]  # -1: freed window blocks, zeros
            # (a Mamba group's table: its chunks' last blocks hold the states, which _kv_lost found held)
            meta.saves.append(SaveSpec(rid, state.tokens[:full * self._chunk_tokens], first,
                                       self._per_group(tables), state.extras,
                                       [int(b) for ids in state.block_ids for b in ids]))
            state.saved_chunks, state.held = full, True
        return meta

    def update_connector_output(self, connector_output: Any) -> None:
        """Blocks that failed to load are recomputed by the engine: their chunks are saved again (a
        request whose asynchronous load failed, ``failed_recving``: all of them, from token 0)."""
        for rid in getattr(connector_output, "failed_recving", None) or ():
            if rid in self._reqs:
                self._reqs[rid].saved_chunks = 0
                self._load_failed.add(rid)
        invalid = set(getattr(connector_output, "invalid_block_ids", None) or ())
        if not invalid:
            return
        per_chunk = self._chunk_tokens // self._spec.block_size
        for state in self._reqs.values():
            bad = [i for ids in state.block_ids for i, b in enumerate(ids) if b in invalid]
            if bad:
                state.saved_chunks = min(state.saved_chunks, min(bad) // per_chunk)

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> tuple[bool, Optional[dict]]:
        rid = request.request_id
        self._hits.pop(rid, None)
        self._load_failed.discard(rid)
        self._pending_loads = [s for s in self._pending_loads if s.req_id != rid]
        state = self._reqs.pop(rid, None)
        return (state is not None and state.held), None

    def request_finished_all_groups(self, request: Any, block_ids: tuple) -> tuple[bool, Optional[dict]]:
        """vLLM's SupportsHMA call at a request's end (one block id list per KV cache group):
        request_finished's answer, for every group's blocks."""
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])
