"""KvtierConnector with vLLM's hybrid KV cache manager (SupportsHMA): a gpt-oss-like model whose
sliding-window layers are a KV cache group of their own, with their own block ids and vLLM's null
block before each request's window (vllm/v1/core/single_type_kv_cache_manager.py; docs/connectors.md).

``HybridEngine`` plays vLLM's scheduler and worker for two groups over one block pool: a new request's
window blocks before its window are the null block (block 0, never written), a running request's
window blocks are freed as its window moves on (``remove_skipped_blocks``) and overwritten with
poison, as the next request given them would; layers of the two groups share tensors pairwise, as
vLLM's KV cache tensors are shared by one layer of each group."""

from __future__ import annotations

import dataclasses

import ctypes
import pathlib
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import (CachedRequestData, FakeCuda, NewRequestData, SchedulerOutput, hang_loads,  # noqa: E402
                            reference_rows, step_within, vllm_config)

from kvtier import _lib  # noqa: E402
from kvtier.connectors import open_store, split_urls  # noqa: E402
from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import cpu_kernel, gpu_grouped, gpu_paged  # noqa: E402
from kvtier.connectors.vllm import connector as vllm_connector, scheduler as vllm_scheduler  # noqa: E402
from kvtier.connectors.vllm.gpu_grouped import GpuGroupedWorker, bad_blocks, device_grouped_cache  # noqa: E402
from kvtier.connectors.vllm.host_paged import _start  # noqa: E402
from kvtier.connectors.vllm.groups import (CacheGroup, grouped_cache_of, mamba_state_of, skipped_blocks,  # noqa: E402
                                           skipped_state_blocks)
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

# gpt-oss's pattern at toy size: even layers sliding-window, odd layers full attention
BS, WINDOW, LAYERS, HEADS, DIM, BLOCKS = 4, 10, 4, 2, 8, 96
SPEC = ModelSpec(model="test/gpt-oss-tiny", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="float32", block_size=BS)
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
GROUPS = [CacheGroup(tuple(NAMES[1::2]), 0), CacheGroup(tuple(NAMES[0::2]), WINDOW)]  # vLLM's group order
SENTINEL, POISON = -7.0, 1e9


@dataclass
class Req:
    request_id: str
    prompt_token_ids: list
    computed: int = 0
    status: str = "waiting"
    blocks: list = field(default_factory=lambda: [[], []])  # per KV cache group


class Blocks:  # vLLM's KVCacheBlocks
    def __init__(self, ids: list) -> None:
        self._ids = ids

    def get_block_ids(self) -> tuple:
        return tuple(list(g) for g in self._ids)


class DriverEngine:
    """What both engines below share: vLLM's scheduler and worker of one KvtierConnectorCore each, one
    block pool (block 0: the null block), and the scheduler's step around the model's compute. A subclass
    gives ``_alloc``, ``_free_skipped`` (blocks vLLM frees as a running request moves on), ``_forward``
    (the worker's layer calls and the model's compute) and ``_request_ok``.

    Load results as vLLM 0.32's scheduler (vllm/v1/core/sched/scheduler.py of the engines venv) takes
    them: an asynchronous load's request waits (``remote``) until ``get_transfer_results`` reports it in
    ``finished_recving``; one also in ``failed_recving`` is recomputed from token 0 (its blocks freed,
    the connector asked again); block-level load errors (``invalid_block_ids``) with several KV cache
    groups raise, as ``_handle_invalid_blocks`` does (EngineCore dies)."""

    def __init__(self, spec: ModelSpec, groups: list, url: str, step_tokens: int, extra: dict) -> None:
        """``separate_stores`` in ``extra``: the worker gets a Store of its own, as in vLLM, whose
        scheduler and workers are different processes (a file:// index is per process)."""
        extra = dict(extra)
        separate = extra.pop("separate_stores", False)
        cfg = {"tiers": url, "kv_cache_layout": "cpu_attn", "chunk_tokens": 8, **extra}
        self.groups = groups
        self.sched = KvtierConnectorCore("scheduler", spec, cfg, groups=groups)
        self.own_store = open_store(split_urls(url), cfg) if separate else None
        self.worker = KvtierConnectorCore("worker", spec, cfg, groups=groups, store=self.own_store)
        self.free, self.used = list(range(1, BLOCKS)), set()
        self.step_tokens, self.reqs, self.held, self.finished_ids = step_tokens, {}, {}, set()
        self.kv_ok, self.errors = {}, set()
        self.failed_recving: set = set()  # every request vLLM was told failed to load

    def add(self, rid: str, tokens: list) -> None:
        self.reqs[rid] = Req(rid, list(tokens), blocks=[[] for _ in self.groups])

    def _schedule(self) -> tuple:
        new, cached, n_sched = [], CachedRequestData(), {}
        for r in self.reqs.values():
            if r.status == "waiting":
                ext, is_async = self.sched.get_num_new_matched_tokens(r, 0)
                if is_async:  # vLLM allocates the hit's blocks and waits for finished_recving
                    assert ext > 0
                    self._alloc(r, ext, ext)
                    self.sched.update_state_after_alloc(r, Blocks(r.blocks), ext)
                    r.computed, r.status = ext, "remote"
                    continue
                n = len(r.prompt_token_ids) - ext if ext else min(self.step_tokens, len(r.prompt_token_ids))
                self._alloc(r, ext, ext + n)
                self.sched.update_state_after_alloc(r, Blocks(r.blocks), ext)
                r.computed, r.status = ext, "running"
                new.append(NewRequestData(r.request_id, r.prompt_token_ids, Blocks(r.blocks).get_block_ids(), ext))
                n_sched[r.request_id] = n
            elif r.status == "loaded":  # its load finished: scheduled without asking the connector again
                n = len(r.prompt_token_ids) - r.computed
                self._alloc(r, r.computed, r.computed + n)
                self.sched.update_state_after_alloc(r, Blocks(r.blocks), 0)
                r.status = "running"
                new.append(NewRequestData(r.request_id, r.prompt_token_ids, Blocks(r.blocks).get_block_ids(),
                                          r.computed))
                n_sched[r.request_id] = n
            elif r.status == "running":
                n = min(self.step_tokens, len(r.prompt_token_ids) - r.computed)
                self._free_skipped(r)
                had = [len(ids) for ids in r.blocks]
                self._alloc(r, r.computed, r.computed + n)
                cached.req_ids.append(r.request_id)
                cached.new_block_ids.append(tuple(ids[h:] for ids, h in zip(r.blocks, had)))
                cached.num_computed_tokens.append(r.computed)
                n_sched[r.request_id] = n
        out = SchedulerOutput(new, cached, n_sched, self.finished_ids, set())
        self.finished_ids = set()
        return out, n_sched

    def step(self) -> None:
        out, n_sched = self._schedule()
        w = self.worker
        meta = self.sched.build_connector_meta(out)
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        self._forward(n_sched)
        w.wait_for_save()
        if hasattr(w, "get_transfer_results"):
            results = w.get_transfer_results(out.finished_req_ids)
        else:  # vLLM's base class: get_finished's sets, nothing failed
            sending, recving = w.get_finished(out.finished_req_ids)
            results = types.SimpleNamespace(finished_sending=set(sending or ()), finished_recving=set(recving or ()))
        invalid = w.get_block_ids_with_load_errors() | getattr(self, "early_invalid", set())
        self.early_invalid = set()
        w.clear_connector_metadata()
        self._after_transfers(results, invalid)
        for rid, n in n_sched.items():
            r = self.reqs[rid]
            r.computed += n
            if r.computed >= len(r.prompt_token_ids):
                self.kv_ok[rid] = self._request_ok(r)
                hold, _ = self.sched.request_finished_all_groups(r, Blocks(r.blocks).get_block_ids())
                r.status = "finished"
                self.finished_ids.add(rid)
                if hold:
                    self.held[rid] = r.blocks

    def _after_transfers(self, results: Any, invalid: set) -> None:
        """vLLM 0.32's update_from_output for the connector's results (see the class docstring)."""
        self.errors |= invalid
        if invalid and len(self.groups) > 1:
            raise RuntimeError("vLLM _handle_invalid_blocks: block-level load failures with several KV cache "
                               "groups (EngineCore dies)")
        failed = set(getattr(results, "failed_recving", None) or ())
        self.failed_recving |= failed
        self.sched.update_connector_output(types.SimpleNamespace(
            finished_sending=results.finished_sending, finished_recving=results.finished_recving,
            failed_recving=failed, invalid_block_ids=invalid))
        assert failed <= set(results.finished_recving), "a failed receive is also finished (vLLM's contract)"
        for rid in results.finished_recving:
            r = self.reqs[rid]
            if r.status == "remote" and rid in failed:  # recomputed from token 0: blocks freed, asked again
                self._release(r)
                r.computed, r.status = 0, "waiting"
            elif r.status == "remote":
                r.status = "loaded"
            else:
                assert r.status == "finished", f"{rid} reported received in status {r.status}"
                self.held.pop(rid)
        for rid in results.finished_sending:
            self.held.pop(rid)

    def _release(self, r: Req) -> None:
        for ids in r.blocks:
            self.free += [b for b in ids if b]
        r.blocks = [[] for _ in self.groups]

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while any(r.status != "finished" for r in self.reqs.values()) or self.held or self.finished_ids:
            assert time.monotonic() < deadline, "engine did not finish"
            self.step()

    def close(self) -> None:
        self.worker.shutdown()
        self.sched.shutdown()
        if self.own_store is not None:
            self.own_store.close()


class HybridEngine(DriverEngine):
    """See the module docstring. ``step_tokens``: the most prompt tokens a step computes."""

    def __init__(self, url: str, step_tokens: int = 1 << 30, device: str = "cpu", form: Any = None,
                 **extra) -> None:
        """``form``: what the worker registers per layer, from the HND tensor [2, blocks, heads, BS, DIM]
        (FakeCuda over FlashAttention's HND view; default: the tensor itself, vLLM's CPU backend's)."""
        super().__init__(SPEC, GROUPS, url, step_tokens,
                         {"kv_cache_layout": "cpu_attn" if form is None else "hnd", **extra})
        self.raw = [torch.full((2, BLOCKS, HEADS, BS, DIM), SENTINEL, device=device) for _ in range(LAYERS // 2)]
        self.tensors = {n: self.raw[i // 2] for i, n in enumerate(NAMES)}  # layers 2k, 2k+1 share one
        self.worker.register_kv_caches({n: (form or (lambda t: t))(t) for n, t in self.tensors.items()})

    def _alloc(self, r: Req, computed: int, upto: int) -> None:
        for ids, g in zip(r.blocks, GROUPS):
            if not ids and g.window:  # vLLM pads a new request's skipped window blocks with the null block
                ids += [0] * skipped_blocks(g.window, computed, BS)
            while len(ids) < -(-upto // BS):
                ids.append(self.free.pop(0))
                self.used.add(ids[-1])

    def _free_skipped(self, r: Req) -> None:  # the window blocks
        ids = r.blocks[1]
        for i in range(min(len(ids), skipped_blocks(WINDOW, r.computed, BS))):
            if ids[i]:
                for t in self.raw:
                    t[:, ids[i]] = POISON  # what the next owner of the block writes
                self.free.append(ids[i])
                ids[i] = 0

    def _compute(self, r: Req, start: int, end: int) -> None:
        for layer in range(LAYERS):
            ids = r.blocks[1 if layer % 2 == 0 else 0]  # even layers: the window group
            for kv in (0, 1):
                rows = reference_rows(r.prompt_token_ids, start, end, layer, kv, HEADS * DIM)
                for i, t in enumerate(range(start, end)):
                    self.raw[layer // 2][kv, ids[t // BS], :, t % BS] = rows[i].view(HEADS, DIM)

    def attended_kv_is_reference(self, r: Req) -> bool:
        """The KV vLLM attends to for the next token: every token of the full layers, the last
        WINDOW - 1 tokens of the window layers."""
        n = len(r.prompt_token_ids)
        for layer in range(LAYERS):
            window = layer % 2 == 0
            ids, lo = r.blocks[1 if window else 0], max(0, n - WINDOW + 1) if window else 0
            for kv in (0, 1):
                got = torch.stack([self.raw[layer // 2][kv, ids[t // BS], :, t % BS].reshape(-1)
                                   for t in range(lo, n)]).cpu()
                if not torch.equal(got, reference_rows(r.prompt_token_ids, lo, n, layer, kv, HEADS * DIM)):
                    return False
        return True

    def untouched_blocks_hold_the_sentinel(self) -> bool:
        """Blocks no request was given (the null block among them) were never written."""
        spare = [b for b in range(BLOCKS) if b not in self.used]
        return all(bool((t[:, spare] == SENTINEL).all()) for t in self.raw)

    def _forward(self, n_sched: dict) -> None:
        for name in NAMES:
            self.worker.wait_for_layer_load(name)
            self.worker.save_kv_layer(name, self.tensors[name], None)
        for rid, n in n_sched.items():
            self._compute(self.reqs[rid], self.reqs[rid].computed, self.reqs[rid].computed + n)

    def _request_ok(self, r: Req) -> bool:
        return self.attended_kv_is_reference(r)


def expected_chunk(tokens: list, start: int, n: int, zero_window_rows: int = 0) -> np.ndarray:
    """The chunk of tokens [start, start + n) in kvtier's grouped order (docs/models.md): the kv group
    (layers 1, 3), then the window group (layers 0, 2); per group head-major, per layer K then V."""
    parts = []
    for layers, window in (((1, 3), False), ((0, 2), True)):
        for h in range(HEADS):
            for layer in layers:
                for kv in (0, 1):
                    rows = reference_rows(tokens, start, start + n, layer, kv, HEADS * DIM).view(n, HEADS, DIM)
                    rows = rows[:, h].clone()
                    if window:
                        rows[:zero_window_rows] = 0
                    parts.append(rows.reshape(-1))
    return torch.cat(parts).numpy()


def saved_chunk_keys(engine_class, url: str, tokens: list) -> list:
    """Runs ``tokens`` as request "a" through a fresh engine of ``engine_class`` on ``url`` (which saves
    its chunks), closes it, and returns the prompt's chunk keys."""
    engine = engine_class(url)
    engine.add("a", tokens)
    engine.run()
    keys = engine.worker.namespace.chunk_keys(tokens)
    engine.close()
    return keys


def prompt(seed: int, n: int) -> list:
    return [(seed * 7919 + i * 31) % 32000 for i in range(n)]


@pytest.mark.parametrize("tier", ["file", "mem"])
def test_window_groups_reload_what_vllm_attends_to_and_never_write_the_null_block(file_tier, tier):
    url = file_tier[0] if tier == "file" else "mem://?capacity=64MiB"
    a = prompt(1, 6 * 8 + 3)  # 6 chunks of 8 tokens (less than the window of 10) and 3 tokens
    first = HybridEngine(url, step_tokens=12)  # steps across chunk boundaries: window blocks freed mid-prefill
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True}
    assert first.worker.stats()["saved_chunks"] == 6 and first.sched.stats()["window_saves_skipped"] == 0
    if tier == "file":  # a restart: a new Store reads the pool
        first.close()
    second = HybridEngine(url)  # fresh connectors (mem:// keeps its chunks while the first Store is open)
    if tier == "mem":
        first.close()
    second.add("a", a)
    second.run()
    st = second.worker.stats()
    assert second.sched.stats()["hit_tokens"] == 48 and st["loaded_chunks"] == 6 and not second.errors
    assert second.kv_ok == {"a": True}
    assert second.untouched_blocks_hold_the_sentinel()
    # file:// skips the window group of chunks 0-3 (no token of the 48-token prefix's window); mem:// copies
    # whole chunks, whose window bytes before the window go to scratch, never to a block
    window_group = HEADS * 2 * 2 * 8 * DIM * 4  # heads x 2 window layers x K,V x 8 tokens x dim x fp32
    assert st["store"]["load_bytes_skipped"] == (4 * window_group if tier == "file" else 0)
    # a model served without the window groups (one full-attention group) never reads these chunks
    flat = KvtierConnectorCore("scheduler", SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn",
                                                   "chunk_tokens": 8})
    assert flat.namespace.id != second.sched.namespace.id
    request = types.SimpleNamespace(request_id="x", prompt_token_ids=a)
    assert flat.get_num_new_matched_tokens(request, 0) == (0, False)
    flat.shutdown()
    second.close()


def test_a_failed_load_of_several_groups_fails_the_request_never_engine_core(file_tier):
    """Issue 43: vLLM's recovery by block ids cannot tell several KV cache groups' blocks apart (0.32's
    _handle_invalid_blocks raises, older revisions die unpacking one group), and the driver raises as
    0.32 does. The connector loads several groups asynchronously and reports a request whose load failed
    in failed_recving (also in finished_recving); vLLM recomputes it from token 0 and asks the connector
    again, whose lookup now ends before the bad chunk (removed), and the recomputed chunks are saved
    again: the next identical request, and a fresh engine's, are served every chunk, equal to recompute.
    The scheduler's Store is not the worker's (vLLM's processes): the worker removed the bad chunk from
    its tiers, but the scheduler's file:// index still lists it, so the restarted request gets no hit
    (with one, in real vLLM 0.32 it failed again and again: EngineCore spun forever). Fails on the code
    before the fix (block-level errors: the driver's RuntimeError)."""
    url, tier_dir = file_tier
    a = prompt(4, 6 * 8 + 3)
    keys = saved_chunk_keys(HybridEngine, url, a)
    corrupt_chunk(tier_dir, keys[5])
    second = HybridEngine(url, separate_stores=True)
    second.add("a", a)
    second.run()
    st = second.worker.stats()
    assert second.failed_recving == {"a"} and not second.errors and second.kv_ok == {"a": True}
    assert st["load_errors"] == 1 and second.sched.stats()["hit_tokens"] == 48  # restarted: computed
    assert second.untouched_blocks_hold_the_sentinel()  # the null block among them: never written
    second.worker.store.flush()
    second.add("b", a)
    second.run()
    assert second.kv_ok["b"] and second.failed_recving == {"a"} and not second.errors
    assert second.sched.stats()["hit_tokens"] == 48 + 48
    second.close()
    third = HybridEngine(url)
    third.add("a", a)
    third.run()
    assert third.sched.stats()["hit_tokens"] == 48 and third.kv_ok == {"a": True} and not third.failed_recving
    third.close()


def test_a_hung_read_of_several_groups_never_holds_up_the_forward_and_keeps_its_blocks(file_tier):
    """Several groups load asynchronously: while a's tier read hangs (HungRead) the forward goes on and
    another request completes; a waits for its load with its blocks (vLLM frees them only at
    finished_recving) and is served the loaded KV once the read ends."""
    url, _ = file_tier
    a = prompt(11, 6 * 8 + 3)
    saved_chunk_keys(HybridEngine, url, a)
    eng = HybridEngine(url, load_timeout_s=0.2)
    hung = hang_loads(eng.worker, count=1)
    eng.add("a", a)
    eng.add("b", prompt(12, 20))
    for _ in range(4):
        step_within(eng, hung)
    assert eng.reqs["b"].status == "finished" and eng.kv_ok == {"b": True}
    assert eng.reqs["a"].status == "remote" and len(hung) == 1 and not hung[0].released
    blocks = [b for ids in eng.reqs["a"].blocks for b in ids if b]
    assert blocks and not set(blocks) & set(eng.free)
    hung[0].release()
    eng.run()
    assert eng.kv_ok["a"] and not eng.failed_recving and eng.worker.stats()["loaded_chunks"] == 6
    eng.close()


@pytest.mark.parametrize("on", ["cpu", "fake_cuda"])
def test_window_blocks_freed_before_a_save_are_saved_as_zeros_and_never_loaded(file_tier, request, on):
    """On the CPU backend, and on FlashAttention's HND cache "on CUDA" (kvtier.gpu's pieces played by the
    host path, HostTransfer: the zeros come from device scratch)."""
    url, _ = file_tier
    form = None
    if on == "fake_cuda":
        request.getfixturevalue("host_gpu")
        form = fa_hnd
    a = prompt(2, 40)
    # chunks of 16 tokens (more than the window of 10), steps of 6: chunk 1 completes in the step after
    # 30 tokens, when vLLM has freed the window blocks of tokens 0-19 (poison now), block 4 among them
    first = HybridEngine(url, step_tokens=6, chunk_tokens=16, form=form)
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True}
    assert first.worker.stats()["saved_chunks"] == 2 and first.sched.stats()["window_saves_skipped"] == 0
    ns = first.worker.namespace
    buf = bytearray(ns.chunk_bytes)
    assert first.worker.store.load(ns, ns.chunk_keys(a[:32])[1:], [buf]) == 1
    # kvtier's grouped order (kv group, then window group; head-major), zeros for tokens 16-19 of the
    # window layers (block 4: freed, poison by then, never read)
    assert np.array_equal(np.frombuffer(buf, np.float32), expected_chunk(a, 16, 16, zero_window_rows=4))
    first.close()
    second = HybridEngine(url, chunk_tokens=16, form=form)
    second.add("a", a)
    second.run()
    assert second.sched.stats()["hit_tokens"] == 32 and second.kv_ok == {"a": True} and not second.errors
    assert second.untouched_blocks_hold_the_sentinel()
    second.close()


def test_a_chunk_vllm_holds_without_its_window_is_not_saved(file_tier):
    """vLLM's own prefix cache held the first 32 tokens: the request's window blocks of tokens 0-19 are
    the null block, so chunk 0's window KV (tokens 7-15 are in the window of the 16-token prefix) is not
    there to save, and no later chunk is reachable by a lookup without it."""
    url, _ = file_tier
    sched = KvtierConnectorCore("scheduler", SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn",
                                                    "chunk_tokens": 16}, groups=GROUPS)
    req = types.SimpleNamespace(request_id="r", prompt_token_ids=prompt(3, 40))
    assert sched.get_num_new_matched_tokens(req, 32) == (0, False)
    full, win = list(range(1, 11)), [0] * 5 + list(range(11, 16))
    sched.update_state_after_alloc(req, Blocks([full, win]), 0)
    out = SchedulerOutput([NewRequestData("r", req.prompt_token_ids, (full, win), 32)], CachedRequestData(),
                          {"r": 8}, set(), set())
    assert sched.build_connector_meta(out).saves == [] and sched.stats()["window_saves_skipped"] == 1
    sched.shutdown()


class _Spec:  # stand-ins of vLLM's KV cache spec classes (vllm/v1/kv_cache_interface.py), by name
    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


FULL, WINDOWED = type("FullAttentionSpec", (_Spec,), {}), type("SlidingWindowSpec", (_Spec,), {})
MAMBA = type("MambaSpec", (_Spec,), {})


def kv_cache_config(*groups):
    return types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(layer_names=list(names), kv_cache_spec=s)
                                                  for names, s in groups])


def test_vllm_groups_map_to_kvtier_groups_and_what_cannot_be_served_is_refused(file_tier):
    url, _ = file_tier
    cfg = kv_cache_config((NAMES[1::2], FULL(block_size=BS)),
                          (NAMES[0::2], WINDOWED(block_size=BS, sliding_window=WINDOW)))
    assert vllm_v1.check_kv_cache_config(cfg, SPEC) == GROUPS
    assert vllm_v1.check_kv_cache_config(kv_cache_config((NAMES, FULL())), SPEC) is None
    layout = vllm_v1.layout_of(SPEC, 8, {"kv_cache_layout": "cpu_attn"}, GROUPS)
    assert layout.spec == ("layers=4 tokens=8 kv:layers=1+3,heads=2,dim=8,dtype=fp32 "
                           "window:layers=0+2,heads=2,dim=8,window=10,dtype=fp32")
    # a kvtier group per vLLM group (gemma-3 splits its window layers over several), in a fixed order
    split = [GROUPS[0], CacheGroup((NAMES[2],), WINDOW), CacheGroup((NAMES[0],), WINDOW)]
    assert vllm_v1.layout_of(SPEC, 8, {"kv_cache_layout": "cpu_attn"}, split).spec == (
        "layers=4 tokens=8 kv:layers=1+3,heads=2,dim=8,dtype=fp32 window:layers=0,heads=2,dim=8,window=10,"
        "dtype=fp32 window:layers=2,heads=2,dim=8,window=10,dtype=fp32")
    for extra, match in (({}, "disable-hybrid-kv-cache-manager"), ({"kv_cache_layout": "flash_attn"}, "head-major"),
                         ({"kv_cache_layout": "flashinfer"}, "kv_cache_layout 'hnd', which KvtierHybridConnector"),
                         ({"kv_cache_layout": "cpu_attn", "async_load": False}, "failed_recving")):
        with pytest.raises(ValueError, match=match):
            KvtierConnectorCore("worker", SPEC, {"tiers": url, **extra}, groups=GROUPS)
    mamba = kv_cache_config((NAMES[1::2], FULL()), (NAMES[0::2], MAMBA()))
    other_size = kv_cache_config((NAMES[1::2], FULL(block_size=2 * BS)), (NAMES[0::2], FULL()))
    for bad, match in ((mamba, "mamba_cache_mode 'all'"), (other_size, "block size 8")):
        with pytest.raises(ValueError, match=match):
            vllm_v1.check_kv_cache_config(bad, SPEC)
    # vLLM's adapter: SupportsHMA's request_finished_all_groups, the groups from the KVCacheConfig, the
    # CPU backend's layout on a CPU device, vLLM's HND layout asked for and served on a CUDA device
    assert callable(getattr(vllm_v1.KvtierHybridConnector, "request_finished_all_groups", None))

    def on(device):
        return vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url]}, device=device)

    with pytest.raises(ValueError, match="KvtierHybridConnector"):  # the default class serves one group
        vllm_v1.KvtierConnector(on("cpu"), types.SimpleNamespace(name="SCHEDULER"), cfg)
    old, vllm_connector.REPORTS_FAILED_RECVING = vllm_connector.REPORTS_FAILED_RECVING, False
    try:  # a vLLM revision whose scheduler cannot recover a failed load of several groups: refused
        with pytest.raises(ValueError, match="no failed_recving"):
            vllm_v1.KvtierHybridConnector(on("cpu"), types.SimpleNamespace(name="SCHEDULER"), cfg)
    finally:
        vllm_connector.REPORTS_FAILED_RECVING = old
    conn = vllm_v1.KvtierHybridConnector(on("cpu"), types.SimpleNamespace(name="SCHEDULER"), cfg)
    # the adapter adds the ModelConfig's dtype and, on a CPU device, the kernel's K packing
    cpu_fields = (("cpu_attn_isa", cpu_kernel.cpu_attn_isa(on("cpu").model_config, BS, DIM, "auto")),
                  ("weight_dtype", "float32"))
    core = KvtierConnectorCore("scheduler", dataclasses.replace(SPEC, model_fields=cpu_fields),
                               {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=GROUPS)
    assert conn.namespace.id == core.namespace.id
    cpu_ns = conn.namespace.id
    conn.shutdown()
    core.shutdown()
    assert vllm_v1.KvtierHybridConnector.get_required_kvcache_layout(on("cuda")) == "HND"
    assert vllm_v1.KvtierHybridConnector.get_required_kvcache_layout(on("cpu")) == "NHD"
    assert vllm_v1.KvtierConnector.get_required_kvcache_layout(on("cuda")) == "NHD"
    on_gpu = vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url]}, device="cuda")
    on_gpu.model_config.use_mla = True
    assert vllm_v1.KvtierHybridConnector.get_required_kvcache_layout(on_gpu) == "NHD"  # MLA: not asked
    named = vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url], "kv_cache_layout": "flash_attn"},
                        device="cuda")
    assert vllm_v1.KvtierHybridConnector.get_required_kvcache_layout(named) == "NHD"  # the configuration's
    with pytest.raises(ValueError, match="disable-hybrid-kv-cache-manager"):           # NHD: refused
        vllm_v1.KvtierHybridConnector(named, types.SimpleNamespace(name="WORKER"), cfg)
    gpu = vllm_v1.KvtierHybridConnector(on("cuda"), types.SimpleNamespace(name="WORKER"), cfg)
    # kvtier's head-major chunk order, as the CPU backend's, but not its kernel's K packing
    assert gpu.namespace.id != cpu_ns
    gpu.shutdown()
    worker = KvtierConnectorCore("worker", SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=GROUPS)
    with pytest.raises(ValueError, match="not the layers of the KV cache groups"):
        worker.register_kv_caches({n: torch.zeros(2, 8, HEADS, BS, DIM) for n in NAMES[:3]})
    worker.shutdown()


# ---- Mamba / linear-attention groups (MambaSpec, mamba_cache_mode 'all') --------------------------------
# A qwen3-next-like toy: layers 2 and 5 full attention, layers 0, 3 and 1, 4 linear attention in two Mamba
# groups (vLLM puts as many layers in each group), one KV cache tensor per (attention layer, Mamba layer,
# Mamba layer) triple, as vLLM shares one tensor by a layer of each group. Each block's page is an
# attention block (K then V of the block: vLLM's hybrid layout, _update_hybrid_attention_mamba_layout) or
# a Mamba layer's conv state (bf16) then SSM state (fp32), padded to the attention page.
M_LAYERS = 6
M_NAMES = [f"model.layers.{i}.{'self_attn.attn' if i in (2, 5) else 'linear_attn'}" for i in range(M_LAYERS)]
M_SPEC = ModelSpec(model="test/qwen3-next-tiny", revision="r1", layers=M_LAYERS, kv_heads=HEADS, head_dim=DIM,
                   kv_dtype="float32", block_size=BS)
CONV, SSM = (4, 6), (2, 4, 6)
PAGE = 2 * HEADS * BS * DIM * 4      # the attention page; the Mamba state (48 + 192 bytes) is padded to it
STATE = mamba_state_of(types.SimpleNamespace(shapes=(CONV, SSM), dtypes=(torch.bfloat16, torch.float32),
                                                     mamba_type="gdn_attention", mamba_cache_mode="all"))
M_GROUPS = [CacheGroup((M_NAMES[2], M_NAMES[5])), CacheGroup((M_NAMES[0], M_NAMES[3]), 0, STATE),
            CacheGroup((M_NAMES[1], M_NAMES[4]), 0, STATE)]
ATT_LAYERS, MAMBA_GROUP_LAYERS = (2, 5), ((0, 3), (1, 4))


def reference_state(tokens: list, n: int, layer: int, state=None, start: int = 0) -> tuple:
    """(conv, ssm) of a Mamba layer after tokens [0, n): a recurrence from ``state``, the state after
    ``start`` tokens (zeros at 0), exact in bf16 and fp32 (small integers)."""
    conv = torch.zeros(CONV, dtype=torch.float64) if state is None else state[0].double()
    ssm = torch.zeros(SSM, dtype=torch.float64) if state is None else state[1].double()
    for t in range(start, n):
        conv = torch.roll(conv, -1, 0)
        conv[-1] = (tokens[t] + layer + torch.arange(CONV[1])) % 251
        ssm = (ssm * 3 + tokens[t] + layer) % 10007
    return conv.to(torch.bfloat16), ssm.to(torch.float32)


class MambaEngine(DriverEngine):
    """vLLM's scheduler and worker for one attention and two Mamba groups over one block pool, with
    MambaManager's 'all' mode: a new request's Mamba blocks before the one of its last computed token are
    the null block (block 0), a running request's are freed as it moves on (remove_skipped_blocks,
    get_num_skipped_tokens = computed - 1) and overwritten with poison; the model's Mamba layers read the
    state of the block of the last computed token and write the state at each block's end into that
    block (vLLM's prefix-caching kernels, block_idx_last_computed_token / _scheduled_token)."""

    def __init__(self, url: str, step_tokens: int = 1 << 30, form: Any = None, **extra) -> None:
        super().__init__(M_SPEC, M_GROUPS, url, step_tokens,
                         {"kv_cache_layout": "cpu_attn" if form is None else "hnd", **extra})
        self.raw = [torch.full((BLOCKS * PAGE // 4,), SENTINEL) for _ in ATT_LAYERS]
        hidden = HEADS * BS * DIM
        self.tensors = {}
        for raw, att, mamba in zip(self.raw, ATT_LAYERS, zip(*MAMBA_GROUP_LAYERS)):
            self.tensors[M_NAMES[att]] = raw.as_strided((2, BLOCKS, HEADS, BS, DIM), (hidden, 2 * hidden, BS * DIM, DIM, 1))
            for layer in mamba:
                conv = raw.view(torch.bfloat16).as_strided((BLOCKS, *CONV), (PAGE // 2, CONV[1], 1))
                ssm = raw.as_strided((BLOCKS, *SSM), (PAGE // 4, SSM[1] * SSM[2], SSM[2], 1), 48 // 4)
                self.tensors[M_NAMES[layer]] = [conv, ssm]
        self.loaded_state = {}
        wrap = form or (lambda t: t)  # FakeCuda: the same tensors "on CUDA"
        self.worker.register_kv_caches({n: [wrap(x) for x in t] if isinstance(t, list) else wrap(t)
                                        for n, t in self.tensors.items()})

    def page(self, layer: int, block: int) -> tuple:
        conv, ssm = self.tensors[M_NAMES[layer]]
        return conv[block], ssm[block]

    def _alloc(self, r: Req, computed: int, upto: int) -> None:
        for g, ids in enumerate(r.blocks):
            if not ids and g:  # MambaManager: a new request's blocks before its last computed token's are null
                ids += [0] * skipped_state_blocks(computed, BS)
            while len(ids) < -(-upto // BS):
                ids.append(self.free.pop(0))
                self.used.add(ids[-1])

    def _free_skipped(self, r: Req) -> None:  # the Mamba groups' blocks
        for ids in r.blocks[1:]:
            for i in range(min(len(ids), skipped_state_blocks(r.computed, BS))):
                if ids[i]:
                    for raw in self.raw:
                        raw.view(BLOCKS, -1)[ids[i]] = POISON  # what the next owner of the block writes
                    self.free.append(ids[i])
                    ids[i] = 0

    def _compute(self, r: Req, start: int, end: int) -> None:
        tokens = r.prompt_token_ids
        for layer in ATT_LAYERS:
            for kv in (0, 1):
                rows = reference_rows(tokens, start, end, layer, kv, HEADS * DIM)
                for i, t in enumerate(range(start, end)):
                    self.tensors[M_NAMES[layer]][kv, r.blocks[0][t // BS], :, t % BS] = rows[i].view(HEADS, DIM)
        for g, layers in enumerate(MAMBA_GROUP_LAYERS):
            ids = r.blocks[1 + g]
            for layer in layers:  # from the state of the last computed token's block (none at token 0)
                state = tuple(x.clone() for x in self.page(layer, ids[(start - 1) // BS])) if start else None
                if state is not None:
                    self.loaded_state.setdefault((r.request_id, layer), state)
                pos = start
                for t in range(start, end):  # the state at each block's end, and at the step's end
                    if (t + 1) % BS == 0 or t + 1 == end:
                        state, pos = reference_state(tokens, t + 1, layer, state, pos), t + 1
                        conv, ssm = self.page(layer, ids[t // BS])
                        conv.copy_(state[0])
                        ssm.copy_(state[1])

    def state_is_reference(self, r: Req) -> bool:
        """The state of every Mamba layer after the whole prompt (in its last block) is the recurrence's
        from token 0: a prefix loaded with another prefix's state, or none, ends elsewhere."""
        n = len(r.prompt_token_ids)
        for g, layers in enumerate(MAMBA_GROUP_LAYERS):
            for layer in layers:
                conv, ssm = self.page(layer, r.blocks[1 + g][(n - 1) // BS])
                want = reference_state(r.prompt_token_ids, n, layer)
                if not (torch.equal(conv, want[0]) and torch.equal(ssm, want[1])):
                    return False
        return True

    def attended_kv_is_reference(self, r: Req) -> bool:
        n = len(r.prompt_token_ids)
        for layer in ATT_LAYERS:
            for kv in (0, 1):
                got = torch.stack([self.tensors[M_NAMES[layer]][kv, r.blocks[0][t // BS], :, t % BS].reshape(-1)
                                   for t in range(n)])
                if not torch.equal(got, reference_rows(r.prompt_token_ids, 0, n, layer, kv, HEADS * DIM)):
                    return False
        return True

    def untouched_blocks_hold_the_sentinel(self) -> bool:
        spare = [b for b in range(BLOCKS) if b not in self.used]
        return all(bool((raw.view(BLOCKS, -1)[spare] == SENTINEL).all()) for raw in self.raw)

    def _forward(self, n_sched: dict) -> None:
        self.early_invalid = self.worker.get_block_ids_with_load_errors()  # (a sync load with Mamba states
        self.errors |= self.early_invalid                                  # ends in start_load_kv)
        for name in M_NAMES:  # vLLM's attention layers wait; its Mamba layers may not
            if name.endswith("attn.attn"):
                self.worker.wait_for_layer_load(name)
        for rid, n in n_sched.items():
            if not self.errors:  # vLLM would recompute from the first failed block (not modelled here)
                self._compute(self.reqs[rid], self.reqs[rid].computed, self.reqs[rid].computed + n)

    def _request_ok(self, r: Req) -> bool:
        return self.attended_kv_is_reference(r) and self.state_is_reference(r)


def expected_mamba_chunk(tokens: list, start: int, n: int) -> np.ndarray:
    """Chunk bytes in kvtier's grouped order: the kv group (layers 2, 5) head-major, then each Mamba group
    (layers 0, 3; then 1, 4), per layer its conv then SSM state as of the chunk's end."""
    parts = []
    for h in range(HEADS):
        for layer in ATT_LAYERS:
            for kv in (0, 1):
                rows = reference_rows(tokens, start, start + n, layer, kv, HEADS * DIM).view(n, HEADS, DIM)
                parts.append(rows[:, h].contiguous().view(torch.uint8).reshape(-1))
    for layers in MAMBA_GROUP_LAYERS:
        for layer in layers:
            conv, ssm = reference_state(tokens, start + n, layer)
            parts += [conv.contiguous().view(torch.uint8).reshape(-1), ssm.contiguous().view(torch.uint8).reshape(-1)]
    return torch.cat(parts).numpy()


def test_mamba_states_are_saved_at_chunk_ends_and_a_prefix_loads_its_own_state(file_tier):
    url, _ = file_tier
    a = prompt(5, 6 * 8 + 3)
    first = MambaEngine(url, step_tokens=12)  # steps across chunk boundaries: Mamba blocks freed mid-prefill
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True} and first.worker.stats()["saved_chunks"] == 6
    ns = first.worker.namespace
    assert first.sched.stats()["state_saves_skipped"] == 0
    assert ns.layout.spec == ("layers=6 tokens=8 kv:layers=2+5,heads=2,dim=8,dtype=fp32 "
                              "state:layers=0+3,bytes=240,dtype=fp8 state:layers=1+4,bytes=240,dtype=fp8")
    buf = bytearray(ns.chunk_bytes)
    for k in (0, 2, 5):  # each chunk holds the attention KV and every Mamba layer's state as of its end
        assert first.worker.store.load(ns, ns.chunk_keys(a[:8 * (k + 1)])[k:], [buf]) == 1
        assert np.array_equal(np.frombuffer(buf, np.uint8), expected_mamba_chunk(a, 8 * k, 8))
    first.close()
    # a restart: fresh connectors, fresh tensors; the whole prefix, then a prefix of 3 chunks of another prompt
    second = MambaEngine(url)
    b = a[:24] + prompt(6, 13)
    second.add("a", a)
    second.add("b", b)
    second.run()
    assert second.sched.stats()["hit_tokens"] == 48 + 24 and second.worker.stats()["loaded_chunks"] == 9
    assert second.kv_ok == {"a": True, "b": True} and not second.errors
    # what each Mamba layer read at its first step: the state loaded into the prefix's last block
    for rid, n in (("a", 48), ("b", 24)):
        for layer in (0, 1, 3, 4):
            got, want = second.loaded_state[(rid, layer)], reference_state(a, n, layer)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert second.untouched_blocks_hold_the_sentinel()  # the null block among them: never written
    # the namespace names the states: a model without them, or with other state shapes, never reads them
    other = CacheGroup(M_GROUPS[1].names, 0, mamba_state_of(types.SimpleNamespace(
        shapes=(CONV, SSM), dtypes=(torch.float32, torch.bfloat16), mamba_cache_mode="all")))
    for groups in ([M_GROUPS[0], other, M_GROUPS[2]], None):
        flat = KvtierConnectorCore("scheduler", M_SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn",
                                                         "chunk_tokens": 8}, groups=groups)
        assert flat.namespace.id != ns.id
        flat.shutdown()
    second.close()


def test_a_corrupt_mamba_state_is_a_load_error_of_the_whole_load_never_a_hit_with_that_state(file_tier):
    """A flipped byte in chunk 5's state: the load fails as a whole (the state as of chunk 4's end was read
    and dropped, not put in a block), reported in failed_recving (several groups: never block ids, on
    which vLLM's scheduler raises), and vLLM recomputes the request from token 0 (no second hit: the
    scheduler's Store, another process's in vLLM, still lists the bad chunk); the recomputed chunk 5 is
    saved again and a fresh engine is served every chunk."""
    url, tier_dir = file_tier
    a = prompt(7, 6 * 8 + 3)
    keys = saved_chunk_keys(MambaEngine, url, a)
    kv_bytes = HEADS * 2 * 2 * 8 * DIM * 4  # chunk 5's kv group: heads x 2 layers x K, V x 8 tokens x dim x fp32
    corrupt_chunk(tier_dir, keys[5], payload_offset=kv_bytes + 3 * 240 + 100)  # layer 4's SSM state
    second = MambaEngine(url, separate_stores=True)
    second.add("a", a)
    second.run()
    st = second.worker.stats()
    assert second.failed_recving == {"a"} and not second.errors and second.kv_ok == {"a": True}
    assert st["load_errors"] == 1 and st["loaded_chunks"] == 0 and second.sched.stats()["hit_tokens"] == 48
    assert not second.loaded_state  # recomputed from token 0: no Mamba layer read a loaded state
    second.close()
    third = MambaEngine(url)  # a fresh engine: the recomputed chunk 5 was saved again
    third.add("a", a)
    third.run()
    assert third.sched.stats()["hit_tokens"] == 48 and third.kv_ok == {"a": True} and not third.errors
    third.close()


def test_a_chunk_whose_state_block_vllm_freed_is_not_saved(file_tier):
    """vLLM's own prefix cache held the first 32 tokens: the request's Mamba blocks before block 7 (the
    state after token 31) are the null block, so chunk 0's state (block 3, chunks of 16 tokens) is not
    there to save, and no later chunk is reachable by a lookup without it."""
    url, _ = file_tier
    sched = KvtierConnectorCore("scheduler", M_SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn",
                                                      "chunk_tokens": 16}, groups=M_GROUPS)
    req = types.SimpleNamespace(request_id="r", prompt_token_ids=prompt(3, 40))
    assert sched.get_num_new_matched_tokens(req, 32) == (0, False)
    full, ma, mb = list(range(1, 11)), [0] * 7 + list(range(11, 14)), [0] * 7 + list(range(14, 17))
    sched.update_state_after_alloc(req, Blocks([full, ma, mb]), 0)
    out = SchedulerOutput([NewRequestData("r", req.prompt_token_ids, (full, ma, mb), 32)], CachedRequestData(),
                          {"r": 8}, set(), set())
    assert sched.build_connector_meta(out).saves == [] and sched.stats()["state_saves_skipped"] == 1
    sched.shutdown()


def test_mamba_groups_are_served_in_mode_all_only_and_refused_otherwise_with_the_reason(file_tier):
    url, _ = file_tier

    def mamba(**fields):
        return MAMBA(**{"block_size": BS, "shapes": (CONV, SSM), "dtypes": (torch.bfloat16, torch.float32),
                        "mamba_type": "gdn_attention", "mamba_cache_mode": "all", **fields})

    cfg = kv_cache_config((M_GROUPS[0].names, FULL(block_size=BS)), (M_GROUPS[1].names, mamba()),
                          (M_GROUPS[2].names, mamba()))
    assert vllm_v1.check_kv_cache_config(cfg, M_SPEC) == M_GROUPS
    assert STATE.state_bytes == 4 * 6 * 2 + 2 * 4 * 6 * 4
    for fields, match in (({"mamba_cache_mode": "align"}, "mode 'align' is not served: .*ends inside a step"),
                          ({"mamba_cache_mode": "none"}, "mode 'none' is not served: .*overwritten in place"),
                          ({"mamba_cache_mode": None}, "names no mamba_cache_mode"),
                          ({"num_speculative_blocks": 2}, "2 speculative blocks"),
                          ({"block_size": 2 * BS}, "block size 8"),
                          ({"dtypes": (torch.int32, torch.float32)}, "dtype.*int32.*not supported")):
        bad = kv_cache_config((M_GROUPS[0].names, FULL(block_size=BS)), (M_GROUPS[1].names, mamba(**fields)),
                              (M_GROUPS[2].names, mamba()))
        with pytest.raises(ValueError, match=match):
            vllm_v1.check_kv_cache_config(bad, M_SPEC)
    with pytest.raises(ValueError, match="Mamba / linear-attention layers only"):
        vllm_v1.check_kv_cache_config(kv_cache_config((M_NAMES, mamba())), M_SPEC)
    with pytest.raises(ValueError, match="mamba_cache_mode 'all'"):  # the message names the mode that is served
        vllm_v1.check_kv_cache_config(kv_cache_config((M_GROUPS[0].names, FULL()),
                                                      (M_GROUPS[1].names, mamba(mamba_cache_mode="align"))), M_SPEC)
    # the adapter on a CPU device (its identity names the CPU kernel's K packing), and on a CUDA device
    # (vLLM's HND layout: kvtier's chunk order, no packing); an NHD layout named in the configuration is
    # refused, naming the ways out
    on = vllm_config(M_SPEC.model, M_LAYERS, HEADS, DIM, BS, {"tiers": [url]}, device="cpu")
    conn = vllm_v1.KvtierHybridConnector(on, types.SimpleNamespace(name="SCHEDULER"), cfg)
    cpu_fields = (("cpu_attn_isa", cpu_kernel.cpu_attn_isa(on.model_config, BS, DIM, "auto")),
                  ("weight_dtype", "float32"))
    core = KvtierConnectorCore("scheduler", dataclasses.replace(M_SPEC, model_fields=cpu_fields),
                               {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=M_GROUPS)
    assert conn.namespace.id == core.namespace.id
    on_gpu = vllm_config(M_SPEC.model, M_LAYERS, HEADS, DIM, BS, {"tiers": [url]}, device="cuda")
    gpu = vllm_v1.KvtierHybridConnector(on_gpu, types.SimpleNamespace(name="WORKER"), cfg)
    gpu_core = KvtierConnectorCore("scheduler", dataclasses.replace(M_SPEC, model_fields=(("weight_dtype", "float32"),)),
                                   {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=M_GROUPS)
    assert gpu.namespace.id == gpu_core.namespace.id != core.namespace.id
    for c in (conn, core, gpu, gpu_core):
        c.shutdown()
    on_gpu = vllm_config(M_SPEC.model, M_LAYERS, HEADS, DIM, BS, {"tiers": [url], "kv_cache_layout": "flashinfer"},
                         device="cuda")
    with pytest.raises(ValueError, match="Mamba / linear-attention KV cache groups .* HND caches only.*VLLM_KV_"):
        vllm_v1.KvtierHybridConnector(on_gpu, types.SimpleNamespace(name="WORKER"), cfg)
    worker = KvtierConnectorCore("worker", M_SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn", "chunk_tokens": 8},
                                 groups=M_GROUPS)
    engine = MambaEngine("mem://?capacity=16MiB")  # its tensors, in vLLM's layout
    swapped = dict(engine.tensors)
    swapped[M_NAMES[0]] = list(reversed(swapped[M_NAMES[0]]))  # SSM state first: not the MambaSpec's order
    with pytest.raises(ValueError, match="the MambaSpec says"):
        worker.register_kv_caches(swapped)
    gapped = dict(engine.tensors)
    conv, ssm = gapped[M_NAMES[3]]
    gapped[M_NAMES[3]] = [conv, ssm.as_strided(ssm.shape, ssm.stride(), ssm.storage_offset() + 4)]
    with pytest.raises(ValueError, match="not one after the other"):
        worker.register_kv_caches(gapped)
    engine.close()
    worker.shutdown()


# ---- several groups on CUDA caches: kvtier.gpu's pieces (gpu_grouped) ---------------------------------
# On the CPU, "CUDA" tensors are FakeCuda over host tensors and kvtier.gpu's Transfer is HostTransfer: the
# piece lists the connector builds for the GPU, with their device pointer arithmetic, run by kvtier's host
# path. The CUDA test at the end runs the real kvtier.gpu and skips, printing why, without a GPU.
STREAM = 0x5EED


def fa_hnd(t):
    """FlashAttention's [2, blocks, BS, heads, DIM] in vLLM's HND stride order, "on CUDA"."""
    return FakeCuda(t.transpose(2, 3))


class HostTransfer:
    """kvtier.gpu.Transfer's pieces calls, run by kvtier's host load and save over the same piece list;
    records the loads and the engine-stream waits."""

    made: list = []

    def __init__(self, ns, cache, device=0, layer_groups=1, **_) -> None:
        assert cache is None and layer_groups == 1  # pieces, one layer group (head-major chunks)
        self.waits, self.loads, self.saves = [], 0, 0
        HostTransfer.made.append(self)

    @staticmethod
    def _run(fn, store, ns, keys, pieces, per_chunk) -> int:
        handle = _start(fn, store, ns, keys, (np.ascontiguousarray(pieces, dtype=np.uint64), per_chunk), None)
        try:
            return handle.wait()
        finally:
            handle.close()

    def load_pieces(self, store, ns, keys, pieces, per_chunk, groups=None, after_stream=None) -> int:
        assert after_stream == STREAM and groups is None
        self.loads += 1
        return self._run(_lib.lib().kvtier_load_async, store, ns, keys, pieces, per_chunk)

    def save_pieces(self, store, ns, keys, pieces, per_chunk, groups=None, after_stream=None) -> None:
        assert after_stream == STREAM and groups is None
        self.saves += 1
        self._run(_lib.lib().kvtier_save_async, store, ns, keys, pieces, per_chunk)

    def stream_wait_layers(self, group, stream) -> None:
        self.waits.append((group, stream))

    def wait_layers(self, group) -> None:
        raise AssertionError("the engine's stream waits; the host never does")

    def close(self) -> None:
        pass


def host_alloc(nbytes: int, zeros: bool):
    """Device scratch, played by host memory; without ``zeros`` it holds garbage, as fresh memory may."""
    return torch.zeros(nbytes, dtype=torch.uint8) if zeros else torch.full((nbytes,), 0xA5, dtype=torch.uint8)


@pytest.fixture
def host_gpu(monkeypatch):
    """kvtier.gpu played by the host path (see HostTransfer); the Transfers made."""
    HostTransfer.made = []
    monkeypatch.setattr(gpu_grouped.gpu, "why_not", lambda device=0: "")
    monkeypatch.setattr(gpu_grouped.gpu, "Transfer", HostTransfer)
    monkeypatch.setattr(gpu_grouped.gpu, "HostPins", lambda store, device=0: types.SimpleNamespace(close=lambda: None))
    for module in (gpu_grouped, gpu_paged):
        monkeypatch.setattr(module, "_current_stream", lambda: STREAM)
    monkeypatch.setattr(gpu_grouped, "device_alloc", lambda device: host_alloc)
    return HostTransfer.made


# HND forms of a layer's cache: (physical tensor, the view vLLM registers). FlashAttention and FlashInfer
# in vLLM's HND stride order (0, 1, 3, 2, 4); the block of (K or V, block) as [BS, heads, DIM].
HND_FORMS = {
    "cpu_attn": (lambda: torch.randn(2, BLOCKS, HEADS, BS, DIM), lambda t: t,
                 lambda t, kv, b: t[kv, b].transpose(0, 1)),
    "flash_attn_hnd": (lambda: torch.randn(2, BLOCKS, HEADS, BS, DIM), lambda t: t.transpose(2, 3),
                       lambda t, kv, b: t[kv, b]),
    "flashinfer_hnd": (lambda: torch.randn(BLOCKS, 2, HEADS, BS, DIM), lambda t: t.transpose(2, 3),
                       lambda t, kv, b: t[b, kv]),
}


def _gather(entries: np.ndarray, counts: np.ndarray) -> list:
    """Each chunk's bytes read from the pieces' addresses (host memory here)."""
    out, i = [], 0
    for n in counts.astype(int):
        out.append(b"".join(ctypes.string_at(int(a), int(size)) for a, size in entries[i:i + n]))
        i += n
    return out


@pytest.mark.parametrize("form", list(HND_FORMS))
def test_cuda_piece_lists_of_several_groups_are_the_host_paths_and_address_the_right_rows(form):
    """For FlashAttention's and FlashInfer's HND caches and the CPU backend's form on CUDA, the pieces of a
    kv and a window group are the host path's for the same tensors and blocks; read from their addresses
    they give the chunk in kvtier's grouped order (kv group, then window group; head-major), with zeros
    for a window block of -1 (device scratch, zeros on a save)."""
    make, view, block_of = HND_FORMS[form]
    phys = [make() for _ in range(LAYERS)]
    cpu = {n: view(t) for n, t in zip(NAMES, phys)}
    host = grouped_cache_of(cpu, SPEC, GROUPS, 8)
    dev, device = device_grouped_cache({n: FakeCuda(t, 1) for n, t in cpu.items()}, SPEC, GROUPS, 8)
    assert device == 1 and dev.layer_names == host.layer_names == tuple(NAMES)
    tables = np.array([[[5, 6], [7, 8]], [[-1, 9], [10, 11]]])  # per vLLM group (full, window) 2 chunks
    full = np.array([[[5, 6], [7, 8]], [[12, 9], [10, 11]]])
    want, want_counts, _ = host.pieces(full)
    got, counts, scratch = dev.pieces(full, alloc=host_alloc)
    assert np.array_equal(got, want) and np.array_equal(counts, want_counts) and scratch == [None, None]
    got, counts, scratch = dev.pieces(tables, zeros=True, alloc=host_alloc)
    assert [s.numel() if s is not None else 0 for s in scratch] == [0, HEADS * 2 * 2 * BS * DIM * 4]
    host_entries, host_counts, kept = host.pieces(tables, zeros=True)  # kept: its scratch, alive while read
    assert _gather(got, counts) == _gather(host_entries, host_counts)
    for c, chunk in enumerate(_gather(got, counts)):
        parts = []
        for group, layers in ((0, (1, 3)), (1, (0, 2))):
            for h in range(HEADS):
                for layer in layers:
                    for kv in (0, 1):
                        for b in tables[group, c]:
                            rows = block_of(cpu[NAMES[layer]], kv, int(b))[:, h] if b >= 0 else torch.zeros(BS, DIM)
                            parts.append(rows.contiguous().view(torch.uint8).reshape(-1))
        assert chunk == torch.cat(parts).numpy().tobytes(), c


def test_nhd_caches_with_several_groups_are_refused_on_cuda_with_the_ways_out():
    """An NHD cache under 'hnd' (a row holds every head of a token) is refused when registered; an NHD
    kv_cache_layout with several groups is refused before any tensor (test above)."""
    nhd = {n: FakeCuda(torch.zeros(2, BLOCKS, BS, HEADS, DIM)) for n in NAMES}
    with pytest.raises(ValueError, match="not an HND cache .*FlashAttention HND"):
        device_grouped_cache(nhd, SPEC, GROUPS, 8)
    mixed = dict(nhd, **{NAMES[0]: torch.zeros(2, BLOCKS, HEADS, BS, DIM)})
    with pytest.raises(ValueError, match="a cpu tensor among CUDA ones"):
        device_grouped_cache(mixed, SPEC, GROUPS, 8)


def test_bad_blocks_of_a_grouped_load():
    tables = np.array([[[1, 2], [3, 4]], [[-1, 5], [6, 7]]])
    done, bad = bad_blocks(tables, 1, False)
    assert done == 1 and sorted(bad.tolist()) == [3, 4, 6, 7]
    done, bad = bad_blocks(tables, 1, True)  # a Mamba state only in the prefix's last block: all of them
    assert done == 0 and sorted(bad.tolist()) == [1, 2, 3, 4, 5, 6, 7]
    assert bad_blocks(tables, 2, True)[0] == 2


def test_window_groups_on_cuda_hnd_caches_reload_what_vllm_attends_to(file_tier, host_gpu):
    """The connector on FlashAttention's HND cache "on CUDA" (GpuGroupedWorker, kvtier.gpu's pieces):
    saves and loads of a kv and a window group, the null block never written, the engine's stream made to
    wait once per load step (one layer group), and the chunks are the CPU backend's: an engine on vLLM's
    CPU backend loads them."""
    url = file_tier[0]
    a = prompt(1, 6 * 8 + 3)
    first = HybridEngine(url, step_tokens=12, form=fa_hnd)
    assert isinstance(first.worker._gpu, GpuGroupedWorker)
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True} and first.worker.stats()["saved_chunks"] == 6
    assert sum(t.saves for t in host_gpu) == 4 and all(t.loads == 0 for t in host_gpu)  # a save per step of 12
    first.close()
    second = HybridEngine(url, form=fa_hnd)
    second.add("a", a)
    second.run()
    st = second.worker.stats()
    assert second.sched.stats()["hit_tokens"] == 48 and st["loaded_chunks"] == 6 and not second.errors
    assert second.kv_ok == {"a": True} and second.untouched_blocks_hold_the_sentinel()
    t = host_gpu[-1]
    assert t.loads == 1 and t.waits and set(t.waits) == {(0, STREAM)}
    second.close()
    third = HybridEngine(url)  # vLLM's CPU backend, the host path
    third.add("a", a)
    third.run()
    assert third.worker.stats()["loaded_chunks"] == 6 and third.kv_ok == {"a": True} and not third.errors
    third.close()


def test_mamba_states_on_cuda_caches_load_before_the_forward(file_tier, host_gpu):
    """Mamba groups "on CUDA": the state as of each chunk's end saved by pieces, a prefix's state loaded
    into its last block, and the engine's stream made to wait before start_load_kv returns (a Mamba layer
    reads its state with no layer wait); the chunks are those of the CPU backend's engine."""
    url, _ = file_tier
    a = prompt(5, 6 * 8 + 3)
    first = MambaEngine(url, step_tokens=12, form=FakeCuda)
    assert isinstance(first.worker._gpu, GpuGroupedWorker)
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True} and first.worker.stats()["saved_chunks"] == 6
    ns = first.worker.namespace
    buf = bytearray(ns.chunk_bytes)
    for k in (0, 5):
        assert first.worker.store.load(ns, ns.chunk_keys(a[:8 * (k + 1)])[k:], [buf]) == 1
        assert np.array_equal(np.frombuffer(buf, np.uint8), expected_mamba_chunk(a, 8 * k, 8))
    first.close()
    second = MambaEngine(url, form=FakeCuda)
    second.worker.start_load_kv = _waits_before_return(second.worker, host_gpu)
    second.add("a", a)
    second.run()
    assert second.worker.stats()["loaded_chunks"] == 6 and second.kv_ok == {"a": True} and not second.errors
    for layer in (0, 1, 3, 4):
        got, want = second.loaded_state[("a", layer)], reference_state(a, 48, layer)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert second.untouched_blocks_hold_the_sentinel()
    second.close()


def _waits_before_return(worker, made):
    """start_load_kv, checking that a step with a load has made the engine's stream wait when it returns."""
    start = worker.start_load_kv

    def wrapped(ctx, **kw):
        loads = sum(t.loads for t in made)
        waits = sum(len(t.waits) for t in made)
        start(ctx, **kw)
        if sum(t.loads for t in made) > loads:
            assert sum(len(t.waits) for t in made) > waits
    return wrapped


def _gpu_reason():
    if not torch.cuda.is_available():
        return "torch has no CUDA device here (Debian's CPU build of torch, or no GPU)"
    import kvtier.gpu
    return kvtier.gpu.why_not()


def test_cuda_hnd_groups_reload_equals_recompute(file_tier):
    """On a GPU (scripts/gpu-e2e.sh step 1b): a kv and a window group in FlashAttention's HND cache on CUDA
    through kvtier.gpu's pieces; the reload holds what vLLM attends to, the null block is never written,
    and an engine on vLLM's CPU backend loads the same chunks."""
    reason = _gpu_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    url = file_tier[0]
    a = prompt(1, 6 * 8 + 3)
    first = HybridEngine(url, step_tokens=12, device="cuda", form=lambda t: t.transpose(2, 3))
    assert isinstance(first.worker._gpu, GpuGroupedWorker)
    first.add("a", a)
    first.run()
    assert first.kv_ok == {"a": True} and first.worker.stats()["saved_chunks"] == 6
    first.close()
    second = HybridEngine(url, device="cuda", form=lambda t: t.transpose(2, 3))
    second.add("a", a)
    second.run()
    st = second.worker.stats()
    assert second.sched.stats()["hit_tokens"] == 48 and st["loaded_chunks"] == 6 and not second.errors
    assert second.kv_ok == {"a": True} and second.untouched_blocks_hold_the_sentinel()
    second.close()
    third = HybridEngine(url)  # vLLM's CPU backend, the host path: the same chunks
    third.add("a", a)
    third.run()
    assert third.worker.stats()["loaded_chunks"] == 6 and third.kv_ok == {"a": True} and not third.errors
    third.close()


def test_a_request_with_a_cuda_load_is_held_and_reported_once_at_its_end(file_tier, host_gpu):
    """Every request with a load is held at its end (request_finished answers True: a synchronous load
    given up at its deadline may still write its blocks), so a worker must report each one, also on the
    CUDA path, whose loads end inside start_load_kv (here of one group: kvtier.gpu's block-table path)."""
    url, _ = file_tier
    cfg = {"tiers": url, "kv_cache_layout": "hnd", "chunk_tokens": 8, "layer_groups": 1}
    sched, worker = KvtierConnectorCore("scheduler", SPEC, cfg), KvtierConnectorCore("worker", SPEC, cfg)
    worker.register_kv_caches({n: fa_hnd(torch.zeros(2, BLOCKS, HEADS, BS, DIM)) for n in NAMES})
    tokens = prompt(13, 17)
    load = vllm_v1.LoadSpec("r", tokens[:16], 0, [1, 2, 3, 4], False)  # nothing saved: a failed load
    sched._reqs["r"] = vllm_scheduler._ReqState(tokens, [[1, 2, 3, 4, 5]], 2)
    sched._pending_loads = [load]
    meta = sched.build_connector_meta(SchedulerOutput([], CachedRequestData(), {}, set(), set()))
    assert meta.loads == [load]
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    for name in NAMES:
        worker.wait_for_layer_load(name)
    worker.wait_for_save()
    assert worker.get_finished(set()) == (None, None) and worker.get_block_ids_with_load_errors()
    worker.clear_connector_metadata()
    assert sched.request_finished(types.SimpleNamespace(request_id="r"), [1, 2, 3, 4, 5])[0]
    assert worker.get_finished({"r"}) == ({"r"}, None) and worker.get_finished(set()) == (None, None)
    worker.shutdown()
    sched.shutdown()
