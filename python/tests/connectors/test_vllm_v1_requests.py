"""Issue 43: vLLM requests whose KV depends on more than their tokens, engines whose weights differ,
requests vLLM aborts or preempts, and KV computed on a failed load, driven through the vLLM miniature
(vllm_v1_driver.MiniEngine) against a real Store."""

from __future__ import annotations

import pathlib
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library, wait_for  # noqa: E402,F401
from vllm_v1_driver import (CachedRequestData, FlashAttnCache, KVCacheBlocks, MiniEngine, NewRequestData,  # noqa: E402
                            Request, SchedulerOutput, image, lora, reference_rows, vllm_config)

import kvtier  # noqa: E402
from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import worker as vllm_worker  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, KvtierConnectorMetadata, ModelSpec  # noqa: E402

pytestmark = requires_library

BS, CHUNK, LAYERS, HEADS, DIM, BLOCKS = 16, 32, 2, 2, 8, 96
SPEC = ModelSpec(model="test/llama-tiny", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="float32", block_size=BS)
WIDTH = HEADS * DIM


def prompt(seed, n):
    return [(seed * 7919 + i * 31) % 32000 for i in range(n)]


def variant(req: Request, t: int) -> float:
    """What besides the tokens changes token t's KV in the model below: the adapter, and the images
    whose placeholders start at or before t (attention is causal); the salt does not (it isolates
    tenants only)."""
    lora_name = req.lora_request.lora_name if req.lora_request is not None else ""
    images = [f.identifier for f in req.mm_features or () if f.mm_position.offset <= t]
    return float(sum(repr((lora_name, images)).encode()) % 101)


def rows(req: Request, start: int, end: int, layer: int, kv: int) -> torch.Tensor:
    shift = torch.tensor([variant(req, t) * 10 for t in range(start, end)], dtype=torch.float32).reshape(-1, 1)
    return reference_rows(req.prompt_token_ids, start, end, layer, kv, WIDTH) + shift


class Model:
    """A model whose new KV also depends on the KV it attends to: rows of tokens [start, end) are the
    request's own rows plus the difference between the context the cache holds (layer 0's K of
    tokens [0, start)) and the context it should hold. Right context: exactly the request's rows."""

    def __init__(self, eng: MiniEngine) -> None:
        self.eng = eng
        eng.compute, eng.check = self.compute, self.check

    def compute(self, req: Request, start: int, end: int) -> None:
        cache = self.eng.cache
        drift = 0.0
        if start:
            held = cache.read_rows(0, 0, req.block_ids, 0, start)
            drift = float((held - rows(req, 0, start, 0, 0)).abs().sum())
        for layer in range(LAYERS):
            for kv in (0, 1):
                cache.write_rows(layer, kv, req.block_ids, start, rows(req, start, end, layer, kv) + drift)

    def check(self, req: Request) -> bool:
        n = len(req.prompt_token_ids)
        return all(torch.equal(self.eng.cache.read_rows(layer, kv, req.block_ids, 0, n), rows(req, 0, n, layer, kv))
                   for layer in range(LAYERS) for kv in (0, 1))


def engine(url, spec=SPEC, step_tokens=1 << 30, **extra):
    cfg = {"tiers": url, "chunk_tokens": CHUNK, **extra}
    sched, worker = KvtierConnectorCore("scheduler", spec, cfg), KvtierConnectorCore("worker", spec, cfg)
    eng = MiniEngine(sched, worker, FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM), BLOCKS, step_tokens=step_tokens)
    Model(eng)
    return eng


def close(eng):
    eng.worker.shutdown()
    eng.sched.shutdown()


def serve(url, requests, **extra):
    """A fresh engine that runs ``requests`` ([(id, tokens, fields)]) one after the other; per
    request (chunks loaded, KV equal to the request's own model)."""
    eng = engine(url, **extra)
    out = {}
    for rid, tokens, fields in requests:
        before = eng.worker.stats()["loaded_chunks"]
        eng.add(rid, tokens, **fields)
        eng.run()
        out[rid] = (eng.worker.stats()["loaded_chunks"] - before, eng.kv_ok[rid])
    close(eng)
    return out


TOKENS = prompt(1, 3 * CHUNK + 5)


@pytest.mark.parametrize("name, first, others, same", [
    ("lora", {"lora_request": lora("adapter1", 1)},
     [{"lora_request": lora("adapter2", 2)}, {}], {"lora_request": lora("adapter1", 7)}),
    ("image", {"mm_features": [image("img-A", 4, 40)]},
     [{"mm_features": [image("img-B", 4, 40)]}, {"mm_features": [image("img-A", 20, 40)]}, {}],
     {"mm_features": [image("img-A", 4, 40)]}),
    ("cache_salt", {"cache_salt": "tenant-A"}, [{"cache_salt": "tenant-B"}, {}], {"cache_salt": "tenant-A"}),
])
def test_same_prompt_other_adapter_image_or_salt_never_hits_and_the_same_one_does(file_tier, name, first, others,
                                                                                 same):
    """LoRA adapter 2 and the base model were served adapter 1's KV; another image behind the same
    placeholder tokens was served the first image's; tenant B hit tenant A's salted prefix."""
    url, _ = file_tier
    requests = [("first", TOKENS, first)] + [(f"other{i}", TOKENS, f) for i, f in enumerate(others)]
    requests.append(("same", TOKENS, same))
    out = serve(url, requests)
    assert out["first"] == (0, True)
    for i in range(len(others)):
        assert out[f"other{i}"] == (0, True), (name, others[i])   # no hit across, its own KV
    assert out["same"] == (3, True)                               # hits within (lora's int id is per process)


def test_an_image_after_a_chunk_leaves_that_chunk_shared(file_tier):
    """A chunk's key covers the images whose placeholders start in or before it: chunks before the
    first image are the text's alone and shared; the chunks from the image on are not."""
    url, _ = file_tier
    out = serve(url, [("a", TOKENS, {"mm_features": [image("img-A", 2 * CHUNK + 3, 20)]}),
                      ("b", TOKENS, {"mm_features": [image("img-B", 2 * CHUNK + 3, 20)]}),
                      ("text", TOKENS, {})])
    assert out["a"] == (0, True) and out["b"] == (2, True) and out["text"] == (2, True)


def test_request_keys_are_deterministic_and_need_no_python_hash():
    from kvtier.connectors.vllm.request_keys import chunk_keys, request_keys
    req = Request("r", TOKENS, lora_request=lora("a"), cache_salt="s", mm_features=[image("img", 40, 8)])
    base = [bytes([i]) * 32 for i in range(3)]
    keys = chunk_keys(base, request_keys(req), CHUNK)
    assert len(set(keys)) == 3 and not set(keys) & set(base)
    assert keys == chunk_keys(base, request_keys(Request("r2", TOKENS, lora_request=lora("a", 9), cache_salt="s",
                                                           mm_features=[image("img", 40, 8)])), CHUNK)
    assert chunk_keys(base, request_keys(Request("p", TOKENS)), CHUNK) == base
    # older revisions: mm_positions beside mm_hashes, the same material; an input without a hash
    # cannot be keyed (the connector computes such a request, never raises)
    old = types.SimpleNamespace(prompt_token_ids=TOKENS, lora_request=lora("a"), cache_salt="s",
                                mm_positions=[types.SimpleNamespace(offset=40, length=8)], mm_hashes=["img"])
    assert request_keys(old) == request_keys(req)
    old.mm_hashes = []
    with pytest.raises(ValueError, match="content hash"):
        request_keys(old)


def test_prompt_embeds_and_empty_prompts_are_computed_never_raised_into_vllm(file_tier):
    """A prompt-embeds request (no prompt_token_ids) made get_num_new_matched_tokens raise into vLLM's
    scheduler. Such requests are not cached: no lookup, no save, no exception."""
    url, _ = file_tier
    eng = engine(url)
    embeds = Request("e", None, prompt_embeds=torch.zeros(3 * CHUNK, 4))
    assert eng.sched.get_num_new_matched_tokens(embeds, 0) == (0, False)
    eng.sched.update_state_after_alloc(embeds, KVCacheBlocks([0, 1]), 0)
    out = SchedulerOutput([NewRequestData("e", None, ([0, 1],), 0)], CachedRequestData(), {"e": 3 * CHUNK}, set(),
                          set())
    meta = eng.sched.build_connector_meta(out)
    assert not meta.saves and not meta.loads
    assert eng.sched.request_finished(embeds, [0, 1]) == (False, None)
    # with token ids beside the embeddings (vLLM may fill placeholders): still not cached
    eng.add("both", TOKENS, prompt_embeds=torch.zeros(len(TOKENS), 4))
    eng.add("empty", [])
    assert eng.sched.get_num_new_matched_tokens(eng.reqs["both"], 0) == (0, False)
    assert eng.sched.get_num_new_matched_tokens(eng.reqs["empty"], 0) == (0, False)
    unhashed = Request("u", TOKENS, mm_features=[image(None, 4, 8)])
    no_range = Request("n", TOKENS, mm_features=[types.SimpleNamespace(identifier="img", mm_position=object())])
    for odd in (unhashed, no_range):   # inputs kvtier cannot key: computed, never an exception
        assert eng.sched.get_num_new_matched_tokens(odd, 0) == (0, False)
        eng.sched.update_state_after_alloc(odd, KVCacheBlocks([0]), 0)
        assert eng.sched.request_finished(odd, [0]) == (False, None)
    close(eng)


def _adapter(url, model_fields, cache_dtype="auto"):
    cfg = vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url], "chunk_tokens": CHUNK},
                      model_fields=model_fields, cache_dtype=cache_dtype)
    return vllm_v1.KvtierConnector(cfg, types.SimpleNamespace(name="WORKER"))


@pytest.mark.parametrize("a, b, cache_dtype", [
    ({"quantization": "awq", "dtype": "torch.float16",
      "hf_config": types.SimpleNamespace(quantization_config={"bits": 4, "group_size": 128})},
     {"quantization": None, "dtype": "torch.float16"}, "auto"),
    ({"quantization": "awq", "dtype": "torch.float16",
      "hf_config": types.SimpleNamespace(quantization_config={"bits": 4, "group_size": 128})},
     {"quantization": "awq", "dtype": "torch.float16",
      "hf_config": types.SimpleNamespace(quantization_config={"bits": 4, "group_size": 64})}, "auto"),
    ({"dtype": "torch.bfloat16"}, {"dtype": "torch.float16"}, "bfloat16"),
    ({"dtype": "torch.bfloat16"}, {"dtype": "torch.float16"}, "fp8_e4m3"),
])
def test_engines_whose_weights_differ_never_share_a_namespace(file_tier, a, b, cache_dtype):
    """AWQ and unquantized engines of one model and revision shared a namespace; so did bf16- and
    fp16-weight engines with an explicit --kv-cache-dtype. A chunk one saves is no hit for the other;
    the same configuration hits."""
    url, _ = file_tier
    first, other, again = _adapter(url, a, cache_dtype), _adapter(url, b, cache_dtype), _adapter(url, a, cache_dtype)
    assert first.namespace.id != other.namespace.id and first.namespace.id == again.namespace.id
    keys = first.namespace.chunk_keys(TOKENS[:CHUNK])
    first.store.save(first.namespace, keys, [bytes(first.namespace.chunk_bytes)])
    first.store.flush()
    assert other.store.lookup(other.namespace, other.namespace.chunk_keys(TOKENS[:CHUNK])) == 0
    assert again.store.lookup(again.namespace, again.namespace.chunk_keys(TOKENS[:CHUNK])) == 1
    ident = vllm_v1.identity_of(vllm_v1.spec_of_vllm_config(vllm_config(
        SPEC.model, LAYERS, HEADS, DIM, BS, {}, model_fields=a, cache_dtype=cache_dtype)), {}, 0)
    assert ident.get("weight_dtype") == a["dtype"].replace("torch.", "")
    assert ident.get("quantization") == a.get("quantization")
    for conn in (first, other, again):
        conn.shutdown()


def test_a_head_size_of_zero_is_a_value_error(file_tier):
    url, _ = file_tier
    with pytest.raises(ValueError, match="head_dim 0"):
        vllm_v1.KvtierConnector(vllm_config(SPEC.model, LAYERS, HEADS, 0, BS, {"tiers": [url]}),
                                types.SimpleNamespace(name="SCHEDULER"))
    with pytest.raises(ValueError, match="kv_heads 0"):
        KvtierConnectorCore("scheduler", ModelSpec("m", LAYERS, 0, DIM, "float32", BS), {"tiers": url})


class _Gate:
    """A kvtier Handle that says "not done" while the gate is shut (a slow tier), else the real one."""

    shut = True

    def __init__(self, handle):
        self._h = handle

    def done(self):
        return not _Gate.shut and self._h.done()

    def __getattr__(self, name):
        return getattr(self._h, name)


def test_request_aborted_during_its_async_load_is_reported_once(file_tier, monkeypatch):
    """An abort while the async load runs: get_finished reported the request in finished_recving and
    finished_sending in one call; vLLM freed it for the first and failed `assert req_id in
    self.requests` for the second (EngineCore died). The driver asserts as vLLM does."""
    url, _ = file_tier
    tokens = prompt(9, 4 * CHUNK + 1)
    serve(url, [("first", tokens, {})])
    real = vllm_worker.load_async
    monkeypatch.setattr(vllm_worker, "load_async", lambda *a, **k: _Gate(real(*a, **k)))
    _Gate.shut = True
    eng = engine(url, async_load=True)
    r = eng.add("a", tokens)
    eng.step()                                   # async load dispatched, not done yet
    assert r.status == "remote" and eng.worker._ops
    eng.abort("a")                               # vLLM: request_finished while WAITING_FOR_REMOTE_KVS
    assert "a" in eng.held
    _Gate.shut = False
    eng.run()                                    # the driver fails on a second report
    assert ("a" in eng.recving_done) != ("a" in eng.sending_done) and not eng.held
    assert sorted(eng.free) == list(range(BLOCKS))
    close(eng)


@pytest.mark.parametrize("fault", ["evicted", "corrupt"])
def test_kv_computed_on_a_failed_load_is_never_saved(file_tier, fault):
    """A partial hit (chunks 0..3) whose chunk 2 is evicted (or corrupt) between lookup and load; the
    same step computes chunks 4..8 against the zeroed chunk. Those were saved, the re-save after
    recompute skipped (the keys existed), and a later engine was served the wrong KV. Now the step's
    saves of that request are dropped: a fresh engine with the same prompt gets only KV equal to
    recompute."""
    url, tier_dir = file_tier
    tokens = prompt(3, 9 * CHUNK + 3)
    serve(url, [("seed", tokens[:4 * CHUNK + 1], {})])
    eng = engine(url)
    ns = eng.worker.namespace
    key2 = ns.chunk_keys(tokens[:3 * CHUNK])[2]
    start = eng.worker.start_load_kv

    def fault_then_load(*a, **k):
        if eng.worker._metadata().loads:  # the step of the load, after the lookup
            if fault == "evicted":
                eng.worker.store.remove(ns, [key2])
            else:
                corrupt_chunk(tier_dir, key2)
        return start(*a, **k)

    eng.worker.start_load_kv = fault_then_load
    eng.add("partial", tokens)
    eng.run()
    assert eng.kv_ok["partial"] and eng.load_error_blocks     # vLLM recomputed from chunk 2
    close(eng)
    out = serve(url, [("later", tokens, {})])
    assert out["later"] == (9, True)                          # every chunk a hit, each equal to recompute


def test_resumed_requests_of_revisions_with_resumed_from_preemption(file_tier):
    """Revisions whose CachedRequestData says `resumed_from_preemption` (one bool per request) and has
    no `resumed_req_ids`: a resumed request's new_block_ids are its whole block list, not an
    addition (the old code appended them, and later saves read the wrong blocks)."""
    url, _ = file_tier
    sched = KvtierConnectorCore("scheduler", SPEC, {"tiers": url, "chunk_tokens": CHUNK})
    tokens = prompt(4, 3 * CHUNK + 1)
    r = Request("a", tokens)
    assert sched.get_num_new_matched_tokens(r, 0) == (0, False)
    first = list(range(7))
    sched.update_state_after_alloc(r, KVCacheBlocks(first), 0)
    sched.build_connector_meta(SchedulerOutput([NewRequestData("a", tokens, (first,), 0)], CachedRequestData(),
                                               {"a": CHUNK}, set(), set()))
    # preempted, then resumed with new blocks: an older revision's CachedRequestData
    cached = types.SimpleNamespace(req_ids=["a"], resumed_from_preemption=[True], new_block_ids=[(list(range(20, 27)),)],
                                   num_computed_tokens=[0])
    meta = sched.build_connector_meta(SchedulerOutput([], cached, {"a": 3 * CHUNK}, set(), set()))
    assert [(s.first_chunk, s.blocks) for s in meta.saves] == [(1, list(range(22, 26)))]
    sched.shutdown()


def test_saves_of_preempted_requests_end_before_the_forward_without_handle_preemptions(file_tier, monkeypatch):
    """Revisions that never call handle_preemptions: binding the step's metadata (before the forward)
    waits for the preempted request's saves, whose freed blocks the forward may rewrite."""
    url, _ = file_tier
    real = vllm_worker.save_async
    monkeypatch.setattr(vllm_worker, "save_async", lambda *a, **k: _Gate(real(*a, **k)))
    _Gate.shut = True
    eng = engine(url, step_tokens=2 * CHUNK)
    eng.worker.handle_preemptions = lambda meta: None          # an older revision: never called
    eng.add("a", prompt(8, 4 * CHUNK))
    eng.step()                                                 # chunks 0 and 1 computed; their save starts
    assert any(not op.is_load for op in eng.worker._ops)
    eng.worker.bind_connector_metadata(KvtierConnectorMetadata(preempted={"a"}))
    assert not [op for op in eng.worker._ops if op.req_id == "a"]
    eng.worker.clear_connector_metadata()
    _Gate.shut = False
    close(eng)


def test_sync_load_errors_reach_vllm_in_their_step_whatever_the_call_order(file_tier):
    """The issue reports that with speculative decoding the step's output can be collected before
    wait_for_save ended the synchronous loads, so their errors came a step late, after a token
    computed on zeroed KV was emitted. Here the worker is asked for its load errors (and finished
    requests) before wait_for_save: the errors are in that step's report, vLLM drops the step's
    output and recomputes, and the failed load's request saves nothing computed on it."""
    url, tier_dir = file_tier
    tokens = prompt(6, 3 * CHUNK + 3)
    serve(url, [("seed", tokens[:2 * CHUNK + 1], {})])
    eng = engine(url)
    corrupt_chunk(tier_dir, eng.worker.namespace.chunk_keys(tokens[:CHUNK])[0])

    def output_before_save(out):
        w, meta = eng.worker, out.kv_connector_metadata
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        for name in eng.cache.names:
            w.wait_for_layer_load(name)
        for rid, n in out.num_scheduled_tokens.items():
            req = eng.reqs[rid]
            eng.compute(req, req.num_computed_tokens, req.num_computed_tokens + n)
        invalid = w.get_block_ids_with_load_errors()   # collected before wait_for_save
        sending, recving = w.get_finished(out.finished_req_ids)
        w.wait_for_save()
        w.clear_connector_metadata()
        return set(invalid), set(recving or ()), set(sending or ())

    eng._worker_step = output_before_save
    r = eng.add("a", tokens)
    eng.step()
    assert eng.load_error_blocks and r.num_computed_tokens == 0   # reported in the step of the load
    eng.run()
    assert eng.kv_ok["a"]
    close(eng)
    assert serve(url, [("later", tokens, {})])["later"] == (3, True)


@pytest.mark.parametrize("fields, why", [
    ({"req_id": str, "resumed_from_preemption": bool, "new_block_ids": list}, "no req_ids"),
    ({"req_ids": list, "new_block_ids": list, "num_computed_tokens": list}, "neither resumed_req_ids"),
])
def test_vllm_revisions_whose_scheduler_output_cannot_be_read_are_refused(file_tier, monkeypatch, fields, why):
    """A revision whose CachedRequestData is one object per request, or tells no resumed requests,
    is refused at construction with the reason (a stand-in of vllm.v1.core.sched.output)."""
    import dataclasses as dc
    url, _ = file_tier
    output = types.ModuleType("vllm.v1.core.sched.output")
    output.CachedRequestData = dc.make_dataclass("CachedRequestData", list(fields.items()))
    for name in ("vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.core.sched.output", output)
    cfg = vllm_config(SPEC.model, LAYERS, HEADS, DIM, BS, {"tiers": [url], "chunk_tokens": CHUNK})
    with pytest.raises(ValueError, match=why):
        vllm_v1.KvtierConnector(cfg, types.SimpleNamespace(name="SCHEDULER"))
    output.CachedRequestData = dc.make_dataclass("CachedRequestData", [("req_ids", list), ("resumed_req_ids", set)])
    vllm_v1.KvtierConnector(cfg, types.SimpleNamespace(name="SCHEDULER")).shutdown()


def test_a_save_of_a_request_holding_a_block_that_failed_to_load_is_dropped(file_tier):
    """vLLM's prefix cache lets request B use blocks that request A loads in the same step; when A's
    load fails, B's chunks of that step were computed against them too: B's save is dropped, an
    unrelated request's is not."""
    from kvtier.connectors.vllm_v1 import LoadSpec, SaveSpec
    url, _ = file_tier
    worker = KvtierConnectorCore("worker", SPEC, {"tiers": url, "chunk_tokens": CHUNK})
    worker.register_kv_caches(FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM).tensors)
    a, b, c = prompt(11, 2 * CHUNK), prompt(11, 3 * CHUNK), prompt(12, CHUNK)
    per = CHUNK // BS
    meta = KvtierConnectorMetadata(
        loads=[LoadSpec("A", a, 0, list(range(2 * per)), False)],           # nothing stored: fails
        saves=[SaveSpec("B", b, 2, list(range(40, 40 + per)), context=list(range(2 * per)) + list(range(40, 42))),
               SaveSpec("C", c, 0, list(range(60, 60 + per)), context=list(range(60, 62)))])
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    assert worker.get_block_ids_with_load_errors() == set(range(2 * per))
    worker.clear_connector_metadata()
    worker.shutdown()
    assert worker.stats()["saves"] == 1 and worker.stats()["saved_chunks"] == 1   # C only


@pytest.mark.parametrize("when", ["loading", "loaded", "saving", "preempted", "waiting"])
def test_a_request_aborted_at_any_point_is_reported_at_most_once_and_frees_every_block(file_tier, monkeypatch,
                                                                                        when):
    """Aborts while the async load runs, after it was reported but before the request ran, while its
    saves run, after a preemption, and before it was scheduled: no report after vLLM forgot the request
    (the driver asserts as vLLM's scheduler does), every block back in the pool, nothing in flight."""
    url, _ = file_tier
    tokens = prompt(21, 4 * CHUNK + 1)
    serve(url, [("seed", tokens[:2 * CHUNK + 1], {})])
    for kind in ("load_async", "save_async"):
        real = getattr(vllm_worker, kind)
        monkeypatch.setattr(vllm_worker, kind, lambda *a, _real=real, **k: _Gate(_real(*a, **k)))
    _Gate.shut = when in ("loading", "saving")
    eng = engine(url, async_load=when in ("loading", "loaded"), step_tokens=CHUNK)
    r = eng.add("a", tokens)
    if when == "loaded":
        def reported():                  # async load dispatched, then reported (gate open)
            eng.step()
            return "a" in eng.recving_done
        wait_for(reported, "the async load's report")
        assert r.status == "waiting"     # not scheduled again yet
    elif when in ("loading", "saving"):
        eng.step()
        if when == "saving":
            eng.step()                   # chunk 2 computed: its save runs behind the shut gate
            assert any(not op.is_load for op in eng.worker._ops)
    elif when == "preempted":
        eng.step()
        eng.step()
        eng.preempt("a")
    if when == "waiting":
        eng.step()
        eng.preempt("a")                  # back to waiting; aborted before it is scheduled again
    eng.abort("a")
    _Gate.shut = False
    eng.run()
    assert not eng.held and not eng.worker._ops
    assert sorted(eng.free) == list(range(BLOCKS))
    close(eng)


@pytest.mark.parametrize("extra, spec, match", [
    ({"tiers": "bogus://x"}, SPEC, "opening tier bogus"),
    ({"tiers": "mem://?capacity=-5"}, SPEC, "capacity"),
    ({"tiers": "mem://", "background_threads": -1}, SPEC, "background_threads"),
    ({"tiers": "mem://", "chunk_tokens": "abc"}, SPEC, "chunk_tokens 'abc'"),
    ({"tiers": "mem://"}, ModelSpec("m", LAYERS, HEADS, 1 << 27, "float32", BS), "bad configuration"),
])
def test_bad_configuration_is_a_value_error_whatever_layer_found_it(extra, spec, match):
    """A tier URL or option kvtier refuses, or a layout it cannot make, was a KvtierError out of the
    constructor; the docs promise ValueError for bad configuration."""
    with pytest.raises(ValueError, match=match):
        KvtierConnectorCore("scheduler", spec, extra)
