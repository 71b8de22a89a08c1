"""KvtierConnector with MLA caches (DeepSeek-V3/R1, Kimi K2) on the host paged path: vLLM's MLA
backends give one tensor per layer, [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]
(vllm/v1/attention/backends/mla/common.py, get_kv_cache_shape); kvtier stores a chunk of them in the
grouped layout of one ``latent`` group (docs/models.md), layer-major, so a chunk's bytes of a layer are,
block by block, whole block regions. Also the refusals of the layouts the connector does not serve
(hybrid state, MLA in several KV cache groups; docs/connectors.md; CUDA MLA caches: test_vllm_v1_gpu.py)."""

from __future__ import annotations

import pathlib
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import FlashAttnCache, LatentCache, MiniEngine, vllm_config  # noqa: E402

import kvtier  # noqa: E402
from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import host_paged  # noqa: E402
from kvtier.connectors.vllm.gpu_paged import gpu_cache_of  # noqa: E402
from kvtier.connectors.vllm.kv_caches import paged_cache_of  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

BS, CHUNK, LAYERS, LATENT, BLOCKS = 16, 32, 3, 576, 48


def mla_spec(tp_size=1, dtype="float32", layers=LAYERS, model_fields=()):
    return ModelSpec(model="test/deepseek-tiny", revision="r1", layers=layers, kv_heads=1, head_dim=LATENT,
                     kv_dtype=dtype, block_size=BS, tp_size=tp_size, attention="mla", model_fields=model_fields)


def engine(url, tp_size=1, tp_rank=0, pad=0, reverse_blocks=False, **extra):
    cfg = {"tiers": url, "chunk_tokens": CHUNK, **extra}
    spec = mla_spec(tp_size)
    sched = KvtierConnectorCore("scheduler", spec, cfg)
    worker = KvtierConnectorCore("worker", spec, cfg, tp_rank=tp_rank)
    eng = MiniEngine(sched, worker, LatentCache(LAYERS, BLOCKS, BS, LATENT, pad=pad), BLOCKS)
    if reverse_blocks:  # the second visit's chunks land in other blocks than the first's
        eng.free.reverse()
    return eng


def close(eng):
    eng.worker.shutdown()
    eng.sched.shutdown()


def prompt(seed, n):
    return [(seed * 7919 + i * 31) % 32000 for i in range(n)]


def run(eng, **prompts):
    for name, tokens in prompts.items():
        eng.add(name, tokens)
    eng.run()
    return eng


@pytest.mark.parametrize("pad", [0, 40])
@pytest.mark.parametrize("async_load", [False, True])
def test_mla_save_then_load_into_other_blocks_is_byte_exact(file_tier, pad, async_load):
    url, _ = file_tier
    a, b = prompt(1, 4 * CHUNK + 3), prompt(2, 2 * CHUNK + 1)
    first = run(engine(url, pad=pad, async_load=async_load), a=a, b=b)
    assert first.kv_ok == {"a": True, "b": True}
    assert first.worker.stats()["saved_chunks"] == 4 + 2
    close(first)
    # blocks are taken from the free list's front: the first visit used 0.., this one uses 47 down
    second = engine(url, pad=pad, async_load=async_load, reverse_blocks=True)
    run(second, a=a, b=b)
    assert second.kv_ok == {"a": True, "b": True} and not second.load_error_blocks
    assert second.worker.stats()["loaded_chunks"] == 4 + 2
    if pad:  # the padding between blocks is never written
        assert all(not t.view(BLOCKS, -1)[:, -pad:].any() for t in second.cache.raw.values())
    close(second)


@pytest.mark.parametrize("kv_dtype,dtype", [("bfloat16", torch.bfloat16), ("fp8_e4m3", torch.uint8)])
def test_mla_blocks_round_trip_bit_for_bit(file_tier, kv_dtype, dtype):
    """The host plan alone: random bf16 latents (or fp8 bytes: vLLM's fp8 MLA cache is uint8) of some
    blocks saved, loaded into other blocks of another cache, compared as bits."""
    url, _ = file_tier
    spec = mla_spec(dtype=kv_dtype)
    cfg = {"tiers": url, "chunk_tokens": CHUNK}
    worker = KvtierConnectorCore("worker", spec, cfg)
    ns, store = worker.namespace, worker.store
    view = torch.int16 if dtype == torch.bfloat16 else torch.uint8
    src = {f"layers.{i}.attn": torch.randint(0, 256, (BLOCKS, BS, LATENT), dtype=dtype) if dtype == torch.uint8
           else torch.randn(BLOCKS, BS, LATENT).to(dtype) for i in range(LAYERS)}
    dst = {f"layers.{i}.attn": torch.zeros(BLOCKS, BS, LATENT, dtype=dtype) for i in range(LAYERS)}
    src_cache, dst_cache = paged_cache_of(src, spec), paged_cache_of(dst, spec)
    row = LATENT * src[next(iter(src))].element_size()
    assert (src_cache.regions, src_cache.layer_end(1, CHUNK)) == (LAYERS, 2 * CHUNK * row)
    keys = ns.chunk_keys(prompt(3, 3 * CHUNK))
    saved = np.array([[5, 9], [2, 3], [40, 7]])
    loaded = np.array([[1, 0], [30, 31], [8, 20]])
    with host_paged.save_async(store, ns, keys, src_cache, saved) as h:
        assert h.wait() == 3
    store.flush()
    with host_paged.load_async(store, ns, keys, dst_cache, loaded) as h:
        assert h.wait() == 3
    for name in src:
        for s, d in zip(saved.ravel(), loaded.ravel()):
            assert torch.equal(src[name][s].view(view), dst[name][d].view(view))
    untouched = sorted(set(range(BLOCKS)) - set(loaded.ravel()))
    assert not any(dst[name][untouched].view(view).any() for name in dst)
    worker.shutdown()


def test_mla_latents_saved_once_at_tp2_load_at_tp4(file_tier):
    url, _ = file_tier
    a = prompt(4, 3 * CHUNK + 1)
    rank1 = run(engine(url, tp_size=2, tp_rank=1), a=a)  # rank 1 holds the same latents: saves none
    assert rank1.worker.stats()["saves"] == 0 and rank1.sending_done == {"a"}
    assert rank1.sched.get_num_new_matched_tokens(rank1.reqs["a"], 0) == (0, False)
    close(rank1)
    rank0 = run(engine(url, tp_size=2, tp_rank=0), a=a)
    assert rank0.worker.stats()["saved_chunks"] == 3
    close(rank0)
    for tp_rank in (0, 3):  # every rank of a TP-4 engine loads them (one namespace, whatever the TP)
        eng = run(engine(url, tp_size=4, tp_rank=tp_rank, reverse_blocks=True), a=a)
        assert eng.kv_ok["a"] and eng.worker.stats()["loaded_chunks"] == 3
        close(eng)


def test_mla_corrupt_last_layer_is_a_load_error_and_recomputed(file_tier):
    url, tier_dir = file_tier
    a = prompt(5, 2 * CHUNK + 1)
    first = run(engine(url), a=a)
    key = first.sched.namespace.chunk_keys(a[:CHUNK])[0]
    close(first)
    layer_bytes = CHUNK * LATENT * 4  # chunk 0's last layer: its own listed piece
    corrupt_chunk(tier_dir, key, payload_offset=(LAYERS - 1) * layer_bytes + 5)
    eng = run(engine(url, reverse_blocks=True), a=a)
    assert eng.load_error_blocks and eng.kv_ok["a"]  # reported, recomputed, right in the end
    assert eng.worker.stats()["loaded_chunks"] == 0
    close(eng)


def test_mla_caches_of_the_wrong_shape_are_refused(file_tier):
    url, _ = file_tier
    worker = KvtierConnectorCore("worker", mla_spec(), {"tiers": url, "chunk_tokens": CHUNK})
    names = [f"layers.{i}.attn" for i in range(LAYERS)]
    for bad, match in ((torch.zeros(2, BLOCKS, BS, 1, LATENT), "not an MLA latent cache"),
                       (torch.zeros(BLOCKS, BS, 512), "latent_dim"),
                       (torch.zeros(BLOCKS, 2 * BS, LATENT), "block_size"),
                       (torch.zeros(BLOCKS, LATENT, BS).transpose(1, 2), "contiguous"),
                       (torch.zeros(BLOCKS, BS, LATENT, dtype=torch.bfloat16), "dtype")):
        with pytest.raises(ValueError, match=match):
            worker.register_kv_caches({n: bad for n in names})
    with pytest.raises(ValueError, match="not an MLA latent cache"):
        worker.register_kv_caches({n: (torch.zeros(BLOCKS, BS, 1, LATENT),) * 2 for n in names})
    worker.register_kv_caches({n: torch.zeros(BLOCKS, BS, LATENT) for n in names})  # the served shape
    worker.shutdown()
    mha = ModelSpec(model="m", layers=LAYERS, kv_heads=2, head_dim=8, kv_dtype="float32", block_size=BS)
    worker = KvtierConnectorCore("worker", mha, {"tiers": url, "chunk_tokens": CHUNK})
    with pytest.raises(ValueError, match="MLA latent cache, but the configuration is not MLA"):
        worker.register_kv_caches({n: torch.zeros(BLOCKS, BS, 16) for n in names})
    worker.shutdown()
    classic = f"layers={LAYERS} tokens={CHUNK} classic:heads=2,dim=8,dtype=fp32"
    KvtierConnectorCore("worker", mha, {"tiers": url, "chunk_tokens": CHUNK, "layout_spec": classic}).shutdown()
    with pytest.raises(ValueError, match="not the layout"):  # the MLA layout for a K/V cache
        KvtierConnectorCore("worker", mha, {"tiers": url, "chunk_tokens": CHUNK, "layout_spec":
                            f"layers={LAYERS} tokens={CHUNK} latent:layers=0-2,dim=16,dtype=fp32"})
    with pytest.raises(ValueError, match="kv_heads 1"):
        ModelSpec(model="m", layers=2, kv_heads=2, head_dim=LATENT, kv_dtype="float32", block_size=BS,
                  attention="mla")
    with pytest.raises(ValueError, match="not the layout"):
        KvtierConnectorCore("worker", mla_spec(), {"tiers": url, "chunk_tokens": CHUNK, "layout_spec":
                            f"layers={LAYERS} tokens={CHUNK} latent:layers=0-2,dim=512,dtype=fp32"})
    good = f"layers={LAYERS} tokens={CHUNK} latent:layers=0-2,dim={LATENT},dtype=fp32"
    KvtierConnectorCore("worker", mla_spec(), {"tiers": url, "chunk_tokens": CHUNK, "layout_spec": good}).shutdown()
    with pytest.raises(ValueError, match="no block-table form"):  # CUDA MLA caches go by pieces
        gpu_cache_of({}, mla_spec())


def test_mla_namespace_is_tp_independent_and_not_the_mha_one():
    spec = mla_spec(tp_size=2)
    ident = vllm_v1.identity_of(spec, {}, 1)
    assert ident.get("attention") == "mla" and ident.get("latent_dim") == str(LATENT)
    assert ident.get("tp_size") is None and ident.get("tp_rank") is None
    assert ident == vllm_v1.identity_of(mla_spec(tp_size=8), {}, 5)
    layout = vllm_v1.layout_of(spec, CHUNK, {})
    assert layout.spec == f"layers={LAYERS} tokens={CHUNK} latent:layers=0-2,dim={LATENT},dtype=fp32"
    assert layout.chunk_bytes == LAYERS * CHUNK * LATENT * 4
    mha = ModelSpec(model=spec.model, revision=spec.revision, layers=LAYERS, kv_heads=1, head_dim=LATENT // 2,
                    kv_dtype="float32", block_size=BS)  # the same chunk size, another layout
    assert vllm_v1.layout_of(mha, CHUNK, {}).chunk_bytes == layout.chunk_bytes
    assert vllm_v1.identity_of(mha, {}, 0).namespace(vllm_v1.layout_of(mha, CHUNK, {})).id != \
        ident.namespace(layout).id


class _Spec:  # stand-ins of vLLM's KV cache spec classes (vllm/v1/kv_cache_interface.py), by name
    pass


def _spec_class(name, base=_Spec):
    return type(name, (base,), {})


def _kv_cache_config(*spec_names):
    full = _spec_class("FullAttentionSpec")
    classes = {"FullAttentionSpec": full, "MLAAttentionSpec": _spec_class("MLAAttentionSpec", full),
               "SlidingWindowSpec": _spec_class("SlidingWindowSpec"), "MambaSpec": _spec_class("MambaSpec")}
    return types.SimpleNamespace(kv_cache_groups=[
        types.SimpleNamespace(layer_names=[f"l{i}"], kv_cache_spec=classes[n]()) for i, n in enumerate(spec_names)])


def test_hybrid_state_groups_and_unserved_specs_are_refused_with_the_reason():
    mha = ModelSpec(model="m", layers=2, kv_heads=2, head_dim=8, kv_dtype="float32", block_size=BS)
    vllm_v1.check_kv_cache_config(_kv_cache_config("FullAttentionSpec"), mha)
    vllm_v1.check_kv_cache_config(_kv_cache_config("MLAAttentionSpec"), mla_spec())
    vllm_v1.check_kv_cache_config(None, mha)
    # several full-attention or sliding-window groups are served (test_vllm_v1_hma.py), MLA in several is not
    assert len(vllm_v1.check_kv_cache_config(_kv_cache_config("FullAttentionSpec", "FullAttentionSpec"), mha)) == 2
    for names, spec, match in (
            (("FullAttentionSpec", "MambaSpec"), mha, "MambaSpec names no mamba_cache_mode"),
            (("FullAttentionSpec", "SlidingWindowSpec"), mha, "sliding_window 0"),
            (("MLAAttentionSpec", "MLAAttentionSpec"), mla_spec(), "MLA model in several KV cache groups"),
            (("FullAttentionSpec",), mla_spec(), "attention is 'mla'"),
            (("MLAAttentionSpec",), mha, "attention is 'mha'")):
        with pytest.raises(ValueError, match=match):
            vllm_v1.check_kv_cache_config(_kv_cache_config(*names), spec)
    uniform = types.SimpleNamespace(kv_cache_groups=[types.SimpleNamespace(
        layer_names=["a", "b"], kv_cache_spec=types.SimpleNamespace(kv_cache_specs={
            "a": _spec_class("FullAttentionSpec")(), "b": _spec_class("MambaSpec")()}))])
    with pytest.raises(ValueError, match="mamba_cache_mode"):
        vllm_v1.check_kv_cache_config(uniform, mha)


def test_adapter_reads_an_mla_vllm_config(file_tier):
    url, _ = file_tier

    def cfg(**parallel):
        return vllm_config("test/deepseek-tiny", LAYERS, 1, LATENT, BS, {"tiers": [url], "chunk_tokens": CHUNK},
                           use_mla=True, **{"tensor_parallel_size": 2, "rank": 1, **parallel})

    weights = (("weight_dtype", "float32"),)  # the ModelConfig's dtype
    assert vllm_v1.spec_of_vllm_config(cfg()) == mla_spec(tp_size=2, model_fields=weights)
    conn = vllm_v1.KvtierConnector(cfg(), types.SimpleNamespace(name="WORKER"), _kv_cache_config("MLAAttentionSpec"))
    other = KvtierConnectorCore("worker", mla_spec(tp_size=4, model_fields=weights), {"tiers": url, "chunk_tokens": CHUNK},
                                tp_rank=2)
    assert conn.namespace.id == other.namespace.id
    other.shutdown()
    conn.shutdown()
    with pytest.raises(ValueError, match="mamba_cache_mode 'all'"):
        vllm_v1.KvtierConnector(cfg(), types.SimpleNamespace(name="WORKER"),
                                _kv_cache_config("MLAAttentionSpec", "MambaSpec"))
    with pytest.raises(ValueError, match="context parallelism"):
        vllm_v1.KvtierConnector(cfg(decode_context_parallel_size=2), types.SimpleNamespace(name="WORKER"))
