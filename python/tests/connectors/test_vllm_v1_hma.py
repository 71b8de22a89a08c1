"""KvtierConnector with vLLM's hybrid KV cache manager (SupportsHMA): a gpt-oss-like model whose
sliding-window layers are a KV cache group of their own, with their own block ids and vLLM's null
block before each request's window (vllm/v1/core/single_type_kv_cache_manager.py; docs/connectors.md).

``HybridEngine`` plays vLLM's scheduler and worker for two groups over one block pool: a new request's
window blocks before its window are the null block (block 0, never written), a running request's
window blocks are freed as its window moves on (``remove_skipped_blocks``) and overwritten with
poison, as the next request given them would; layers of the two groups share tensors pairwise, as
vLLM's KV cache tensors are shared by one layer of each group."""

from __future__ import annotations

import pathlib
import sys
import time
import types
from dataclasses import dataclass, field

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import CachedRequestData, NewRequestData, SchedulerOutput, reference_rows, vllm_config  # noqa: E402

from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors._vllm_groups import CacheGroup, skipped_blocks  # noqa: E402
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


class HybridEngine:
    """See the module docstring. ``step_tokens``: the most prompt tokens a step computes."""

    def __init__(self, url: str, step_tokens: int = 1 << 30, **extra) -> None:
        cfg = {"tiers": url, "kv_cache_layout": "cpu_attn", "chunk_tokens": 8, **extra}
        self.sched = KvtierConnectorCore("scheduler", SPEC, cfg, groups=GROUPS)
        self.worker = KvtierConnectorCore("worker", SPEC, cfg, groups=GROUPS)
        self.raw = [torch.full((2, BLOCKS, HEADS, BS, DIM), SENTINEL) for _ in range(LAYERS // 2)]
        self.tensors = {n: self.raw[i // 2] for i, n in enumerate(NAMES)}  # layers 2k, 2k+1 share one
        self.free, self.used = list(range(1, BLOCKS)), set()              # block 0: the null block
        self.step_tokens, self.reqs, self.held, self.finished_ids = step_tokens, {}, {}, set()
        self.kv_ok, self.errors = {}, set()
        self.worker.register_kv_caches(self.tensors)

    def add(self, rid: str, tokens: list) -> None:
        self.reqs[rid] = Req(rid, list(tokens))

    def _alloc(self, r: Req, computed: int, upto: int) -> None:
        for ids, g in zip(r.blocks, GROUPS):
            if not ids and g.window:  # vLLM pads a new request's skipped window blocks with the null block
                ids += [0] * skipped_blocks(g.window, computed, BS)
            while len(ids) < -(-upto // BS):
                ids.append(self.free.pop(0))
                self.used.add(ids[-1])

    def _free_window(self, r: Req) -> None:
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
                                   for t in range(lo, n)])
                if not torch.equal(got, reference_rows(r.prompt_token_ids, lo, n, layer, kv, HEADS * DIM)):
                    return False
        return True

    def untouched_blocks_hold_the_sentinel(self) -> bool:
        """Blocks no request was given (the null block among them) were never written."""
        spare = [b for b in range(BLOCKS) if b not in self.used]
        return all(bool((t[:, spare] == SENTINEL).all()) for t in self.raw)

    def step(self) -> None:
        new, cached, n_sched = [], CachedRequestData(), {}
        for r in self.reqs.values():
            if r.status == "waiting":
                ext, is_async = self.sched.get_num_new_matched_tokens(r, 0)
                assert not is_async
                n = len(r.prompt_token_ids) - ext if ext else min(self.step_tokens, len(r.prompt_token_ids))
                self._alloc(r, ext, ext + n)
                self.sched.update_state_after_alloc(r, Blocks(r.blocks), ext)
                r.computed, r.status = ext, "running"
                new.append(NewRequestData(r.request_id, r.prompt_token_ids, Blocks(r.blocks).get_block_ids(), ext))
                n_sched[r.request_id] = n
            elif r.status == "running":
                n = min(self.step_tokens, len(r.prompt_token_ids) - r.computed)
                self._free_window(r)
                had = [len(ids) for ids in r.blocks]
                self._alloc(r, r.computed, r.computed + n)
                cached.req_ids.append(r.request_id)
                cached.new_block_ids.append(tuple(ids[h:] for ids, h in zip(r.blocks, had)))
                cached.num_computed_tokens.append(r.computed)
                n_sched[r.request_id] = n
        out = SchedulerOutput(new, cached, n_sched, self.finished_ids, set())
        self.finished_ids = set()
        meta = self.sched.build_connector_meta(out)
        w = self.worker
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        for name in NAMES:
            w.wait_for_layer_load(name)
            w.save_kv_layer(name, self.tensors[name], None)
        for rid, n in n_sched.items():
            self._compute(self.reqs[rid], self.reqs[rid].computed, self.reqs[rid].computed + n)
        w.wait_for_save()
        sending, _ = w.get_finished(out.finished_req_ids)
        self.errors |= w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        for rid in sending or ():
            self.held.pop(rid)
        for rid, n in n_sched.items():
            r = self.reqs[rid]
            r.computed += n
            if r.computed >= len(r.prompt_token_ids):
                self.kv_ok[rid] = self.attended_kv_is_reference(r)
                hold, _ = self.sched.request_finished_all_groups(r, Blocks(r.blocks).get_block_ids())
                r.status = "finished"
                self.finished_ids.add(rid)
                if hold:
                    self.held[rid] = r.blocks

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while any(r.status != "finished" for r in self.reqs.values()) or self.held or self.finished_ids:
            assert time.monotonic() < deadline, "engine did not finish"
            self.step()

    def close(self) -> None:
        self.worker.shutdown()
        self.sched.shutdown()


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


def test_a_corrupt_chunk_reports_its_blocks_of_every_group(file_tier):
    """vLLM recomputes from the first block reported (at the revision read its recovery handles one KV
    cache group: docs/connectors.md); the connector reports the chunk's blocks in each group, the null
    blocks never."""
    url, tier_dir = file_tier
    a = prompt(4, 6 * 8 + 3)
    first = HybridEngine(url)
    first.add("a", a)
    first.run()
    keys = first.worker.namespace.chunk_keys(a)
    first.close()
    corrupt_chunk(tier_dir, keys[5])
    second = HybridEngine(url)
    second.add("a", a)
    second.run()
    full, window = second.reqs["a"].blocks
    assert second.worker.stats()["loaded_chunks"] == 5
    assert second.errors == set(full[10:12]) | set(window[10:12]) and 0 not in second.errors
    second.close()


def test_window_blocks_freed_before_a_save_are_saved_as_zeros_and_never_loaded(file_tier):
    url, _ = file_tier
    a = prompt(2, 40)
    # chunks of 16 tokens (more than the window of 10), steps of 6: chunk 1 completes in the step after
    # 30 tokens, when vLLM has freed the window blocks of tokens 0-19 (poison now), block 4 among them
    first = HybridEngine(url, step_tokens=6, chunk_tokens=16)
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
    second = HybridEngine(url, chunk_tokens=16)
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
                         ({"kv_cache_layout": "cpu_attn", "async_load": True}, "_update_waiting_for_remote_kv")):
        with pytest.raises(ValueError, match=match):
            KvtierConnectorCore("worker", SPEC, {"tiers": url, **extra}, groups=GROUPS)
    mamba = kv_cache_config((NAMES[1::2], FULL()), (NAMES[0::2], MAMBA()))
    other_size = kv_cache_config((NAMES[1::2], FULL(block_size=2 * BS)), (NAMES[0::2], FULL()))
    for bad, match in ((mamba, "mamba_cache_mode 'all'"), (other_size, "block size 8")):
        with pytest.raises(ValueError, match=match):
            vllm_v1.check_kv_cache_config(bad, SPEC)
    # vLLM's adapter: SupportsHMA's request_finished_all_groups, the groups from the KVCacheConfig, the
    # CPU backend's layout on a CPU device, the refusal naming --disable-hybrid-kv-cache-manager elsewhere
    assert callable(getattr(vllm_v1.KvtierHybridConnector, "request_finished_all_groups", None))

    def on(device):
        return vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url]}, device=device)

    with pytest.raises(ValueError, match="KvtierHybridConnector"):  # the default class serves one group
        vllm_v1.KvtierConnector(on("cpu"), types.SimpleNamespace(name="SCHEDULER"), cfg)
    conn = vllm_v1.KvtierHybridConnector(on("cpu"), types.SimpleNamespace(name="SCHEDULER"), cfg)
    core = KvtierConnectorCore("scheduler", SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=GROUPS)
    assert conn.namespace.id == core.namespace.id
    conn.shutdown()
    core.shutdown()
    with pytest.raises(ValueError, match="disable-hybrid-kv-cache-manager"):
        vllm_v1.KvtierHybridConnector(on("cuda"), types.SimpleNamespace(name="WORKER"), cfg)
    worker = KvtierConnectorCore("worker", SPEC, {"tiers": url, "kv_cache_layout": "cpu_attn"}, groups=GROUPS)
    with pytest.raises(ValueError, match="not the layers of the KV cache groups"):
        worker.register_kv_caches({n: torch.zeros(2, 8, HEADS, BS, DIM) for n in NAMES[:3]})
    cuda = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda", index=0))  # what is_cuda reads
    with pytest.raises(ValueError, match="CUDA tensors"):  # never a host copy into device addresses
        worker.register_kv_caches({n: cuda for n in NAMES})
    worker.shutdown()
