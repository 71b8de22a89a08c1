"""Driver tests of kvtier.connectors.vllm_v1.KvtierConnector: vLLM's scheduler and worker call
sequence (vllm_v1_driver.MiniEngine) against a real Store, with real torch CPU tensors."""

from __future__ import annotations

import dataclasses
import multiprocessing
import pathlib
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library, tiny_file_tier  # noqa: E402,F401
from vllm_v1_driver import (FINISHED, FlashAttnCache, MiniEngine, hang_loads, reference_rows, step_within,  # noqa: E402
                            vllm_config)

import kvtier  # noqa: E402
from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import cpu_kernel  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library


@pytest.fixture
def fs_tier(tmp_path):
    """An fs:// pool (its index is the shared directory: one process sees another's writes) without
    the negative lookup cache, so a miss is not remembered."""
    d = tmp_path / "pool"
    d.mkdir()
    return f"fs://{d}?neg_ttl_ms=0"

BS, CHUNK, LAYERS, HEADS, DIM, BLOCKS = 16, 32, 3, 2, 8, 64
SPEC = ModelSpec(model="test/llama-tiny", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="float32", block_size=BS)


def connectors(tiers, spec=SPEC, **extra):
    cfg = {"tiers": tiers, "chunk_tokens": CHUNK, **extra}
    return KvtierConnectorCore("scheduler", spec, cfg), KvtierConnectorCore("worker", spec, cfg)


def engine(tiers, flashinfer=False, step_tokens=1 << 30, **extra):
    sched, worker = connectors(tiers, **extra)
    cpu_attn = extra.get("kv_cache_layout") == "cpu_attn"
    cache = FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM, flashinfer=flashinfer, cpu_attn=cpu_attn)
    return MiniEngine(sched, worker, cache, BLOCKS, step_tokens=step_tokens)


def prompt(seed, n):
    return [(seed * 7919 + i * 31) % 32000 for i in range(n)]


def close(eng):
    eng.worker.shutdown()
    eng.sched.shutdown()


def first_visit(url, *prompts, **extra):
    """An engine that prefills ``prompts`` (saving their chunks), then shuts down."""
    eng = engine(url, **extra)
    for i, tokens in enumerate(prompts):
        eng.add(f"first{i}", tokens)
    eng.run()
    close(eng)


@pytest.mark.parametrize("flashinfer", [False, True])
@pytest.mark.parametrize("async_load", [False, True])
def test_several_requests_partial_hits_reload_equals_recompute(file_tier, flashinfer, async_load):
    url, _ = file_tier
    a, b = prompt(1, 4 * CHUNK + 5), prompt(2, 3 * CHUNK)
    first = engine(url, flashinfer=flashinfer, async_load=async_load)
    first.add("a", a)
    first.add("b", b)
    first.run()
    assert first.worker.stats()["saved_chunks"] == 4 + 3
    close(first)
    # A new engine (another process, any PYTHONHASHSEED): the same prompts hit; a prompt sharing only
    # a's first two chunks hits those two; b is served from kvtier except its last chunk (at least one
    # token is left to compute).
    second = engine(url, flashinfer=flashinfer, async_load=async_load)
    ra = second.add("a2", a)
    rc = second.add("c", a[:2 * CHUNK] + prompt(3, 2 * CHUNK))
    rb = second.add("b2", b)
    assert second.sched.get_num_new_matched_tokens(ra, 0) == (4 * CHUNK, async_load)
    assert second.sched.get_num_new_matched_tokens(rc, 0) == (2 * CHUNK, async_load)
    assert second.sched.get_num_new_matched_tokens(rb, 0) == (2 * CHUNK, async_load)
    second.run()
    for r in (ra, rb, rc):
        assert second.kv_ok[r.request_id], r.request_id
    stats = second.worker.stats()
    assert stats["loaded_chunks"] == 4 + 2 + 2 and stats["load_errors"] == 0
    assert second.layer_waits >= LAYERS
    if async_load:
        assert {"a2", "b2", "c"} <= second.recving_done
    close(second)


def test_cpu_backend_hnd_cache_round_trips_in_head_major_chunks(file_tier):
    """vLLM's CPU backend keeps [2, num_blocks, kv_heads, block_size, head_dim] per layer: its chunks
    are saved and loaded in the grouped head-major order (a region is one head's rows of one block),
    in a namespace of their own, so an NHD engine of the same model never reads them."""
    url, _ = file_tier
    a = prompt(11, 3 * CHUNK + 3)
    first_visit(url, a, kv_cache_layout="cpu_attn")
    second = engine(url, kv_cache_layout="cpu_attn")
    r = second.add("a", a)
    assert second.sched.get_num_new_matched_tokens(r, 0) == (3 * CHUNK, False)
    second.run()
    assert second.kv_ok["a"] and second.worker.stats()["loaded_chunks"] == 3
    # the stored bytes: for each head, for each layer, K rows then V rows of the chunk's tokens
    ns = second.worker.namespace
    chunk = torch.zeros(ns.layout.chunk_bytes // 4, dtype=torch.float32)
    assert second.worker.store.load(ns, ns.chunk_keys(a[:CHUNK]), [chunk.numpy()]) == 1
    want = torch.cat([reference_rows(a, 0, CHUNK, layer, kv, HEADS * DIM).view(CHUNK, HEADS, DIM)[:, h].reshape(-1)
                      for h in range(HEADS) for layer in range(LAYERS) for kv in (0, 1)])
    assert torch.equal(chunk, want)
    close(second)
    nhd = engine(url)  # FlashAttention's NHD cache of the same model: another chunk order, no hit
    assert nhd.sched.get_num_new_matched_tokens(nhd.add("a", a), 0) == (0, False)
    close(nhd)


def test_auto_layout_never_reads_an_hnd_cache_as_nhd(file_tier):
    url, _ = file_tier
    hnd = {f"l.{i}": torch.zeros(2, BLOCKS, HEADS, BS, DIM) for i in range(LAYERS)}
    sched, worker = connectors(url)
    with pytest.raises(ValueError, match="cpu_attn"):
        worker.register_kv_caches(hnd)  # the namespace was chosen for NHD chunks
    worker.shutdown()
    sched.shutdown()
    square = ModelSpec(model="test/llama-tiny", revision="r1", layers=LAYERS, kv_heads=BS, head_dim=DIM,
                       kv_dtype="float32", block_size=BS)  # kv_heads == block_size: both shapes agree
    sched, worker = connectors(url, spec=square)
    with pytest.raises(ValueError, match="kv_heads == block_size"):
        worker.register_kv_caches({f"l.{i}": torch.zeros(2, BLOCKS, BS, BS, DIM) for i in range(LAYERS)})
    worker.shutdown()
    sched.shutdown()
    sched, worker = connectors(url, kv_cache_layout="cpu_attn")
    with pytest.raises(ValueError, match="not an HND cache"):  # an NHD FlashAttention cache: refused
        worker.register_kv_caches({f"l.{i}": torch.zeros(2, BLOCKS, BS, HEADS, DIM) for i in range(LAYERS)})
    with pytest.raises(ValueError, match="not an HND cache"):  # an NHD FlashInfer cache: refused
        worker.register_kv_caches({f"l.{i}": torch.zeros(BLOCKS, 2, BS, HEADS, DIM) for i in range(LAYERS)})
    worker.register_kv_caches(hnd)
    worker.shutdown()
    sched.shutdown()


def test_local_prefix_cache_blocks_are_not_overwritten(file_tier):
    url, _ = file_tier
    tokens = prompt(4, 3 * CHUNK + 1)
    first_visit(url, tokens)
    second = engine(url)
    # the engine's own prefix cache holds one block (16 tokens) of the first chunk
    r = second.add("a", tokens, local_hit_tokens=BS)
    assert second.sched.get_num_new_matched_tokens(r, BS) == (3 * CHUNK - BS, False)
    second.run()
    assert second.kv_ok[r.request_id]
    close(second)


def test_chunked_prefill_saves_each_completed_chunk(file_tier):
    url, _ = file_tier
    tokens = prompt(5, 3 * CHUNK)
    first = engine(url, step_tokens=20)      # chunks complete in different steps than they start
    first.add("a", tokens)
    first.run()
    assert first.worker.stats()["saved_chunks"] == 3
    close(first)
    second = engine(url)
    r = second.add("a", tokens + [1])
    assert second.sched.get_num_new_matched_tokens(r, 0) == (3 * CHUNK, False)
    second.run()
    assert second.kv_ok[r.request_id]
    close(second)


def test_corrupt_chunk_is_a_load_error_and_recomputed(file_tier):
    url, tier_dir = file_tier
    tokens = prompt(6, 3 * CHUNK + 3)
    first_visit(url, tokens)
    second = engine(url)
    keys = second.worker.namespace.chunk_keys(tokens[:3 * CHUNK])
    corrupt_chunk(tier_dir, keys[1])
    r = second.add("a", tokens)
    assert second.sched.get_num_new_matched_tokens(r, 0) == (3 * CHUNK, False)  # lookup does not read
    second.run()
    assert second.kv_ok[r.request_id]        # chunk 1's blocks recomputed, never served
    per = CHUNK // BS
    stats = second.worker.stats()
    assert stats["loaded_chunks"] == 1 and stats["load_errors"] == 1
    assert stats["error_blocks"] == 2 * per      # chunk 1 failed, chunk 2 was never reached
    assert len(second.load_error_blocks) == 2 * per
    close(second)


def test_async_load_of_a_corrupt_chunk_is_reported_with_the_request(file_tier):
    url, tier_dir = file_tier
    tokens = prompt(7, 2 * CHUNK + 1)
    first_visit(url, tokens, async_load=True)
    second = engine(url, async_load=True)
    corrupt_chunk(tier_dir, second.worker.namespace.chunk_keys(tokens[:2 * CHUNK])[0])
    r = second.add("a", tokens)
    second.run()
    assert "a" in second.recving_done
    assert len(second.load_error_blocks) == 2 * (CHUNK // BS)
    assert second.kv_ok[r.request_id]
    close(second)


def test_preemption_waits_for_saves_and_resumes_from_kvtier(fs_tier):
    eng = engine(fs_tier, step_tokens=2 * CHUNK)
    tokens = prompt(8, 4 * CHUNK)
    r = eng.add("a", tokens)
    eng.add("b", prompt(9, CHUNK + 1))           # written into a's freed blocks next step
    eng.step()                                   # chunks 0 and 1 of a computed; their save starts
    assert r.num_computed_tokens == 2 * CHUNK
    eng.preempt("a")                             # blocks freed; this step's forward may overwrite them
    eng.step()                                   # handle_preemptions waited for a's save first
    eng.worker.store.flush()                     # written through to the shared fs:// pool
    eng.step()                                   # a is back: its two chunks hit
    assert eng.worker.stats()["loaded_chunks"] == 2
    eng.run()
    assert eng.kv_ok[r.request_id]
    close(eng)


def test_request_aborted_mid_load_keeps_its_blocks_until_the_load_ended(file_tier):
    url, _ = file_tier
    tokens = prompt(9, 4 * CHUNK + 1)
    first_visit(url, tokens)
    eng = engine(url, async_load=True)
    r = eng.add("a", tokens)
    eng.step()                                   # async load dispatched
    blocks = list(r.block_ids)
    assert blocks and r.status == "remote"
    eng.abort("a")                               # vLLM: request_finished while WAITING_FOR_REMOTE_KVS
    assert eng.held["a"] == blocks               # connector holds the blocks
    eng.run()
    # reported once (the driver fails on a second report, as vLLM's scheduler does), in either set
    assert "a" in eng.sending_done | eng.recving_done and not eng.held
    assert not eng.worker._ops                   # freed only once kvtier stopped writing them
    assert sorted(eng.free) == list(range(BLOCKS))
    close(eng)


def test_full_tier_drops_saves_without_raising(tiny_file_tier):
    url, _ = tiny_file_tier
    eng = engine(url)
    eng.add("a", prompt(10, 3 * CHUNK))
    eng.run()                                    # never raises
    stats = eng.worker.stats()
    assert stats["saves"] == 1
    store_stats = stats["store"]
    dropped = {k: v for k, v in store_stats.items() if "drop" in k or "reject" in k or "fail" in k}
    assert any(v for v in dropped.values()), store_stats
    eng.worker.store.flush()
    r = eng.add("b", prompt(10, 3 * CHUNK) + [1])
    assert eng.sched.get_num_new_matched_tokens(r, 0) == (0, False)   # a dropped save is a miss
    close(eng)


def test_shutdown_with_work_in_flight(file_tier):
    url, _ = file_tier
    tokens = [prompt(20 + i, 3 * CHUNK + 1) for i in range(4)]
    first_visit(url, *tokens)
    eng = engine(url, async_load=True)
    for i, t in enumerate(tokens):
        eng.add(f"s{i}", t)
    eng.step()                                   # four async loads in flight (or just done)
    eng.worker.shutdown()                        # waits for them, closes the store
    assert not eng.worker._ops
    eng.worker.shutdown()                        # idempotent
    eng.sched.shutdown()
    assert eng.sched.get_num_new_matched_tokens(eng.reqs["s0"], 0) == (0, False)


def test_namespace_is_the_engine_identity():
    base = vllm_v1.identity_of(SPEC, {}, 0)
    assert base.get("engine") == "vllm" and base.get("layout") == "chunk"
    for field, changed in (("model", "other"), ("revision", "r2"), ("kv_dtype", "bfloat16"),
                           ("block_size", 32), ("tp_size", 2)):
        other = vllm_v1.identity_of(SPEC.__class__(**{**SPEC.__dict__, field: changed}), {}, 0)
        assert other.encode() != base.encode(), field
    assert vllm_v1.identity_of(SPEC.__class__(**{**SPEC.__dict__, "tp_size": 2}), {}, 1).get("tp_rank") == "1"


def test_unknown_layouts_and_options_are_refused(file_tier):
    url, _ = file_tier
    sched, worker = connectors(url)
    with pytest.raises(ValueError, match="MLA"):
        worker.register_kv_caches({f"l.{i}": torch.zeros(BLOCKS, BS, 16) for i in range(LAYERS)})
    with pytest.raises(ValueError, match="HND"):
        hnd = torch.zeros(2, BLOCKS, HEADS, BS, DIM).transpose(2, 3)
        worker.register_kv_caches({f"l.{i}": hnd for i in range(LAYERS)})
    with pytest.raises(ValueError, match="dtype"):
        worker.register_kv_caches({f"l.{i}": torch.zeros(2, BLOCKS, BS, HEADS, DIM, dtype=torch.float16)
                                   for i in range(LAYERS)})
    with pytest.raises(ValueError, match="layers"):
        worker.register_kv_caches({"l.0": torch.zeros(2, BLOCKS, BS, HEADS, DIM)})
    pair = {f"l.{i}": (torch.zeros(BLOCKS, BS, HEADS, DIM), torch.zeros(BLOCKS, BS, HEADS, DIM))
            for i in range(LAYERS)}
    worker.register_kv_caches(pair)              # a (K, V) pair per layer is served
    with pytest.raises(ValueError, match="unknown kv_connector_extra_config"):
        KvtierConnectorCore("worker", SPEC, {"tiers": url, "chunk_tokns": 32})
    with pytest.raises(ValueError, match="multiple of the block size"):
        KvtierConnectorCore("worker", SPEC, {"tiers": url, "chunk_tokens": 24})
    worker.shutdown()
    sched.shutdown()


def test_adapter_reads_the_vllm_config(file_tier):
    url, _ = file_tier

    cfg = vllm_config("test/llama-tiny", LAYERS, HEADS, DIM, BS, {"tiers": [url], "chunk_tokens": CHUNK})
    role = types.SimpleNamespace(name="WORKER")
    conn = vllm_v1.KvtierConnector(cfg, role)
    assert conn.role is role and conn.chunk_tokens == CHUNK
    sched, _ = connectors(url)
    spec = dataclasses.replace(SPEC, model_fields=(("weight_dtype", "float32"),))  # the ModelConfig's dtype
    assert conn.namespace.id == KvtierConnectorCore("worker", spec, {"tiers": url, "chunk_tokens": CHUNK},
                                                    store=sched.store).namespace.id
    conn.shutdown()
    cfg.device_config = types.SimpleNamespace(device_type="cpu")  # vLLM's CPU platform: its HND backend
    cpu = vllm_v1.KvtierConnector(cfg, role)
    # on a CPU device the identity also names the kernel's K packing (cpu_kernel)
    isa = cpu_kernel.cpu_attn_isa(cfg.model_config, BS, DIM, "auto")
    spec = dataclasses.replace(spec, model_fields=tuple(sorted(spec.model_fields + (("cpu_attn_isa", isa),))))
    assert cpu.namespace.id == KvtierConnectorCore("worker", spec, {"tiers": url, "chunk_tokens": CHUNK,
                                                                    "kv_cache_layout": "cpu_attn"},
                                                   store=sched.store).namespace.id != conn.namespace.id
    cpu.shutdown()
    sched.shutdown()


def test_adapter_declares_layer_waits_and_best_effort_saves_to_vllm(file_tier):
    """The two declarations vLLM's configuration and scheduler read (base.py @003df2961dd8): layer
    waits that a full CUDA graph would skip ask for piecewise graphs, for both connector classes and
    whatever the extra config says; a preempted request's output is not dropped for kvtier's saves."""
    url, _ = file_tier
    for cls in (vllm_v1.KvtierConnector, vllm_v1.KvtierHybridConnector):
        assert cls.requires_piecewise_for_cudagraph({"tiers": [url]}) is True
        assert cls.requires_piecewise_for_cudagraph({}) is True
    cfg = vllm_config("test/llama-tiny", LAYERS, HEADS, DIM, BS, {"tiers": [url], "chunk_tokens": CHUNK})
    for role in ("SCHEDULER", "WORKER"):
        conn = vllm_v1.KvtierConnector(cfg, types.SimpleNamespace(name=role))
        assert conn.requires_kv_delivery is False
        conn.shutdown()


# ---- TP = 2 as two processes -------------------------------------------------------------------

TP_SPEC = ModelSpec(model="test/llama-tiny", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                    kv_dtype="float32", block_size=BS, tp_size=2)


def _rank_rows(tokens, n, layer, kv, rank):
    return reference_rows(tokens, 0, n, layer, kv, HEADS * DIM) + rank * 100.0


def _tp_worker(rank, url, meta, tokens, mode):
    """One TP rank: 'save' writes its KV (rank-dependent) and saves it; 'load' loads and checks."""
    import kvtier.connectors.vllm_v1 as v1
    from vllm_v1_driver import FlashAttnCache as Cache
    worker = v1.KvtierConnectorCore("worker", TP_SPEC, {"tiers": url, "chunk_tokens": CHUNK}, tp_rank=rank)
    cache = Cache(LAYERS, BLOCKS, BS, HEADS, DIM)
    worker.register_kv_caches(cache.tensors)
    n = 2 * CHUNK
    blocks = list(range(n // BS))
    if mode == "save":
        for l in range(LAYERS):
            for kv in (0, 1):
                cache.write_rows(l, kv, blocks, 0, _rank_rows(tokens, n, l, kv, rank))
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_layer_load(cache.names[0])
    worker.wait_for_save()
    ok = True
    if mode == "load":
        ok = all(torch.equal(cache.read_rows(l, kv, blocks, 0, n), _rank_rows(tokens, n, l, kv, rank))
                 for l in range(LAYERS) for kv in (0, 1))
    worker.shutdown()
    return ok, worker.stats()["load_errors"]


@pytest.fixture(params=["fs", "shm"])
def shared_tier(request, tmp_path):
    """A tier every process sees at once: an fs:// pool (its index is the shared directory), or, on one
    host, a shm:// pool as the first tier (its index is in the shared mapping: each TP rank and the
    scheduler process map one pool)."""
    if request.param == "fs":
        return request.getfixturevalue("fs_tier")
    return f"shm://vllm-tp?dir={tmp_path}&capacity=16MiB"


def test_tensor_parallel_two_processes(shared_tier):
    """TP=2: two worker processes and this process as the scheduler. The scheduler sees each rank's
    saves as they are made and counts a hit only when every rank has its chunks."""
    url = shared_tier
    tokens = prompt(30, 2 * CHUNK + 1)
    from vllm_v1_driver import KVCacheBlocks, Request
    sched = KvtierConnectorCore("scheduler", TP_SPEC, {"tiers": url, "chunk_tokens": CHUNK})
    save_meta = vllm_v1.KvtierConnectorMetadata(
        saves=[vllm_v1.SaveSpec("a", tokens[:2 * CHUNK], 0, list(range(2 * CHUNK // BS)))])
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        only0 = pool.apply(_tp_worker, (0, url, save_meta, tokens, "save"))
        assert only0 == (True, 0)
        req = Request("a", tokens)
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)   # rank 1 has nothing yet
        pool.apply(_tp_worker, (1, url, save_meta, tokens, "save"))
        assert sched.get_num_new_matched_tokens(req, 0) == (2 * CHUNK, False)
        sched.update_state_after_alloc(req, KVCacheBlocks(list(range(2 * CHUNK // BS + 1))), 2 * CHUNK)
        load_meta = sched.build_connector_meta(types.SimpleNamespace(
            scheduled_new_reqs=[], scheduled_cached_reqs=types.SimpleNamespace(req_ids=[]),
            num_scheduled_tokens={}, preempted_req_ids=set()))
        results = pool.starmap(_tp_worker, [(r, url, load_meta, tokens, "load") for r in (0, 1)])
    assert results == [(True, 0), (True, 0)]    # each rank got its own bytes back
    sched.shutdown()


def test_scattered_block_table_holds_the_bytes_of_store_load():
    """Loads through the connector's host plan into a shuffled block table, with a block the engine
    holds already (-1, read into scratch), equal Store.load into one contiguous buffer."""
    import numpy as np
    from kvtier.connectors.vllm import host_paged
    with kvtier.Store(["mem://?capacity=16MiB"]) as store:
        sched = KvtierConnectorCore("scheduler", SPEC, {"tiers": "mem://", "chunk_tokens": CHUNK}, store=store)
        worker = KvtierConnectorCore("worker", SPEC, {"tiers": "mem://", "chunk_tokens": CHUNK}, store=store)
        cache = FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM)
        worker.register_kv_caches(cache.tensors)
        ns, n = worker.namespace, 3
        keys = ns.chunk_keys(prompt(40, n * CHUNK))
        rng = np.random.default_rng(1)
        store.save(ns, keys, [rng.integers(0, 255, ns.layout.chunk_bytes, dtype=np.uint8) for _ in keys])
        table = np.array([17, 3, 40, 41, 9, 2], dtype=np.int64).reshape(n, CHUNK // BS)
        held = table.copy()
        held[0, 0] = -1
        h = host_paged.load_async(store, ns, keys, worker._cache, held)
        assert h.wait() == n
        h.close()
        flat = np.zeros(n * ns.layout.chunk_bytes, dtype=np.uint8)
        assert store.load(ns, keys, [memoryview(flat)[i * ns.layout.chunk_bytes:(i + 1) * ns.layout.chunk_bytes]
                                     for i in range(n)]) == n
        want = torch.from_numpy(flat.view(np.int32)).view(n, LAYERS, 2, CHUNK, HEADS * DIM)
        for c in range(n):
            for l in range(LAYERS):
                for kv in (0, 1):
                    got = cache.read_rows(l, kv, [int(b) for b in table[c]], 0, CHUNK).view(torch.int32)
                    if c == 0:   # block 17 was held by the engine: never written
                        assert not got[:BS].any()
                        assert torch.equal(got[BS:], want[c, l, kv, BS:])
                    else:
                        assert torch.equal(got, want[c, l, kv])
        worker.shutdown()
        sched.shutdown()


def test_one_process_shares_one_store_so_hits_need_no_restart(file_tier):
    """TP 1: vLLM's scheduler and worker live in one process; their connectors share the Store, so a
    file:// tier (index in memory) shows the scheduler the worker's saves while the engine runs."""
    url, _ = file_tier
    eng = engine(url)
    assert eng.sched.store is eng.worker.store
    tokens = prompt(50, 2 * CHUNK + 1)
    eng.add("a", tokens)
    eng.run()
    eng.worker.store.flush()                     # the background write of the file:// tier
    r = eng.add("b", tokens)
    assert eng.sched.get_num_new_matched_tokens(r, 0) == (2 * CHUNK, False)
    eng.run()
    assert eng.kv_ok["b"] and eng.worker.stats()["loaded_chunks"] == 2
    store = eng.worker.store
    eng.worker.shutdown()
    assert eng.sched.get_num_new_matched_tokens(r, 0) == (2 * CHUNK, False)  # still open for the scheduler
    eng.sched.shutdown()
    with pytest.raises(kvtier.KvtierError, match="closed"):
        store.lookup(eng.sched.namespace, [])
    with pytest.raises(ValueError, match="per-rank"):
        KvtierConnectorCore("worker", SPEC, {"tiers": url.replace("tier", "tier{tp_rank}")})


def test_connector_stats_are_interval_counters_that_add_up(file_tier):
    url, _ = file_tier
    eng = engine(url)
    assert eng.worker.get_kv_connector_stats() is None          # nothing happened yet
    eng.add("a", prompt(60, 2 * CHUNK))
    eng.run()
    first = eng.worker.get_kv_connector_stats()
    assert first.data["saves"] == 1 and first.data["saved_chunks"] == 2
    assert eng.worker.get_kv_connector_stats() is None          # the interval was reported
    other = KvtierConnectorCore.build_kv_connector_stats({"saves": 2, "loads": 1})
    total = first.aggregate(other).reduce()
    assert total["saves"] == 3 and total["loads"] == 1
    close(eng)


_STUB_BASE = '''
import abc, enum
class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1
class KVConnectorMetadata(abc.ABC):
    pass
class SupportsHMA(abc.ABC):
    @abc.abstractmethod
    def request_finished_all_groups(self, request, block_ids):
        raise NotImplementedError
class KVConnectorBase_V1(abc.ABC):
    def __init__(self, vllm_config, role, kv_cache_config):
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._role = role
    @property
    def role(self):
        return self._role
    def bind_connector_metadata(self, m):
        self._connector_metadata = m
    def clear_connector_metadata(self):
        self._connector_metadata = None
'''
_ABSTRACT = ("start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
             "get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta")
_STUB_METRICS = '''
from dataclasses import dataclass, field
@dataclass
class KVConnectorStats:
    data: dict = field(default_factory=dict)
'''


def test_adapter_is_a_kv_connector_base_v1_subclass_when_vllm_is_importable(tmp_path, file_tier):
    """With a stand-in of vLLM's base module on sys.path (abstract methods as in base.py, SupportsHMA
    among them), the module subclasses it, every abstract method is implemented, and the factory's
    call constructs it."""
    import subprocess
    url, _ = file_tier
    pkg = tmp_path / "vllm" / "distributed" / "kv_transfer" / "kv_connector" / "v1"
    pkg.mkdir(parents=True)
    for d in [tmp_path / "vllm", *list(pkg.parents)[:4], pkg]:
        (d / "__init__.py").touch()
    (pkg / "base.py").write_text(_STUB_BASE + "".join(
        f"    @abc.abstractmethod\n    def {m}(self, *a, **k):\n        pass\n" for m in _ABSTRACT))
    (pkg / "metrics.py").write_text(_STUB_METRICS)
    script = f'''
import sys, types
sys.path[:0] = [{str(tmp_path)!r}, {str(pathlib.Path(__file__).resolve().parents[2])!r}]
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole, SupportsHMA
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
from kvtier.connectors import vllm_v1
assert vllm_v1.HAVE_VLLM and issubclass(vllm_v1.KvtierConnector, KVConnectorBase_V1)
assert not issubclass(vllm_v1.KvtierConnector, SupportsHMA)  # vLLM turns its hybrid KV cache manager off
assert issubclass(vllm_v1.KvtierHybridConnector, SupportsHMA)  # opt-in: vLLM keeps it on
assert issubclass(vllm_v1.KvtierConnectorStats, KVConnectorStats)
class MC:
    model, revision, dtype, use_mla = "m", None, "torch.float16", False
    def get_num_layers(self, pc): return 2
    def get_num_kv_heads(self, pc): return 2
    def get_head_size(self): return 8
cfg = types.SimpleNamespace(model_config=MC(),
    cache_config=types.SimpleNamespace(block_size=16, cache_dtype="auto"),
    parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0),
    kv_transfer_config=types.SimpleNamespace(kv_connector_extra_config={{"tiers": [{url!r}]}}))
for role in KVConnectorRole:
    c = vllm_v1.KvtierConnector(cfg, role, None)
    assert c.role is role
    meta = vllm_v1.KvtierConnectorMetadata()
    c.bind_connector_metadata(meta)
    assert c._connector_metadata is meta
    c.clear_connector_metadata()
    c.shutdown()
print("ok")
'''
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_hung_tier_read_fails_its_load_at_the_deadline_and_its_blocks_stay_held_until_it_ends(file_tier):
    """Issue 43: a tier read that hangs (HungRead: a stalled NFS) blocked the forward forever. Now the
    synchronous load fails after ``load_timeout_s``: its blocks are load errors of that step (vLLM
    recomputes them), the step's saves computed on them are dropped and the forward goes on; the request
    finishes on recomputed KV, but its blocks are not reported free (finished_sending) while kvtier may
    still write them. Released, the late read writes, its blocks are reported again (vLLM recomputes what
    it wrote over) and the request is freed. Before the fix the step never returned (step_within fails)."""
    url, _ = file_tier
    tokens = prompt(21, 4 * CHUNK + 1)
    first_visit(url, tokens)
    eng = engine(url, load_timeout_s=0.2)
    hung = hang_loads(eng.worker, count=1)
    r = eng.add("a", tokens)
    step_within(eng, hung)                        # waits 0.2 s for the load, then goes on
    per = CHUNK // BS
    assert len(hung) == 1 and not hung[0].released
    assert eng.worker.stats()["load_timeouts"] == 1 and len(eng.load_error_blocks) == 4 * per
    assert r.num_computed_tokens == 0             # vLLM's recovery: recomputed from the first bad block
    for _ in range(3):                            # recomputed and finished; its blocks still held
        step_within(eng, hung)
    assert r.status == FINISHED and eng.kv_ok == {"a": True}
    assert "a" in eng.held and "a" not in eng.sending_done
    held = list(eng.held["a"])
    hung[0].release()                             # the read ends: kvtier writes the held blocks
    eng.run()
    assert "a" in eng.sending_done and held[0] in eng.free
    st = eng.worker.stats()
    assert st["late_load_ends"] == 1 and st["load_errors"] == 1
    b = eng.add("b", tokens)                      # the tier still serves the prefix, equal to recompute
    eng.run()
    assert eng.kv_ok["b"] and eng.worker.stats()["loaded_chunks"] == 4
    close(eng)


def test_a_late_read_that_ends_while_its_request_runs_is_recomputed_again(file_tier):
    """The read of a load given up at its deadline ends while its request is still computing (in the
    same blocks, vLLM's recompute policy): the connector reports those blocks again in the step it sees
    the read ended, and vLLM recomputes from the first of them, so no token keeps KV the late read wrote
    over; the request then holds only recomputed KV."""
    url, _ = file_tier
    tokens = prompt(22, 4 * CHUNK + 1)
    first_visit(url, tokens)
    eng = engine(url, load_timeout_s=0.2, step_tokens=CHUNK)
    hung = hang_loads(eng.worker, count=1)
    r = eng.add("a", tokens)
    step_within(eng, hung)                        # the load fails at its deadline
    assert r.num_computed_tokens == 0 and eng.worker.stats()["load_timeouts"] == 1
    step_within(eng, hung)                        # chunk 0 recomputed into the held blocks
    assert r.num_computed_tokens == CHUNK
    hung[0].release()
    hung[0].wait(30)                              # the late read has written its blocks
    errors_before = set(eng.load_error_blocks)
    eng.load_error_blocks = set()
    step_within(eng, hung)                        # seen ended: its blocks are load errors again
    assert eng.load_error_blocks == errors_before and r.num_computed_tokens == 0
    assert eng.worker.stats()["late_load_ends"] == 1
    eng.run()
    assert eng.kv_ok == {"a": True} and "a" in eng.sending_done
    close(eng)


@pytest.mark.parametrize("bad", [0, -1, "soon", float("nan"), True, None])
def test_a_load_timeout_that_is_not_a_positive_number_is_a_value_error(file_tier, bad):
    with pytest.raises(ValueError, match="load_timeout_s"):
        connectors(file_tier[0], load_timeout_s=bad)
    sched, worker = connectors(file_tier[0], load_timeout_s="inf")  # no deadline
    worker.shutdown()
    sched.shutdown()
