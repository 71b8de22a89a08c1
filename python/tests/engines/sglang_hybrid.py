"""kvtier's SGLang backend on hybrid models' pools (its v2, multi-pool path, connectors/sglang/hybrid.py)
with SGLang 0.5.23's real classes on CPU (formerly python/tests/connectors/test_sglang_hybrid.py, over
stand-ins): ``MambaPoolHost`` built from a real ``MambaStateBufferInfo`` (CPU tensors,
``pin_memory=False``), ``MHATokenToKVPoolHost`` / ``MLATokenToKVPoolHost`` as KV and sliding-window
(SWA) pools, ``HostPoolGroup`` / ``PoolEntry``, and the v2 interface's ``PoolName``, ``PoolHitPolicy``,
``PoolTransfer``. HiCache's hybrid cache controller needs CUDA; the calls follow its order:

Mamba: ``register_mem_pool_host(kv)``, then ``register_mem_host_pool_v2`` for "kv" and "mamba". Backup of
a radix node: ``batch_set_v2([PoolTransfer("mamba", host_indices=[slot], keys=[hash of its last page],
trailing_pages)])`` and its KV pages with ``batch_set_v1``. Prefetch: ``batch_exists_v2(hashes,
[PoolTransfer("mamba", keys=["__placeholder__"])])`` -> ``kv_hit_pages``; ``batch_get_v1`` of the KV
pages, then ``batch_get_v2`` of the state at the last hit page.

SWA: the "kv" pool (full-attention layers, the anchor) and an "swa" pool of the same class, page size and
layout over the window layers. SWAComponent's backup sends PoolTransfer("swa", host_indices=<its last
pages>, keys=<their hashes>) to batch_set_v2 before the KV pages go to batch_set_v1; its prefetch asks
batch_exists_v2 with ["__placeholder__"] x window pages; the controller loads the KV pages, re-keys the
transfer to the last hit pages (shrinking host_indices) and calls batch_get_v2; a window with fewer
leading True than its pages is dropped whole. Helpers: sglang_hicache.py, sglang_connector.py.
"""

from __future__ import annotations

import ctypes

import pytest
import torch
from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost

import kvtier
from kvtier.connectors import engine_key
from kvtier.connectors.sglang import KvtierHiCacheStorage
from sglang_connector import holds, put
from sglang_hicache import (PAGE, backend, fill, host_pool, indices, mla_host_pool, page_bytes, page_key,
                            storage_config, tier)  # noqa: F401 - tier is a fixture
from connector_helpers import CHUNK_SUFFIX, HEADER_BYTES, flip_payload_byte  # noqa: E402 (path: sglang_hicache)

MAMBA_LAYERS = 3
TEMPORAL = (16, 32)       # fp32 SSM state per layer
CONV = (4, 3)             # bf16 conv state per layer
STATE_BYTES = MAMBA_LAYERS * (16 * 32 * 4 + 4 * 3 * 2)  # 6216: a state file is larger than a page's


def mamba_pool(layout: str = "page_first") -> MambaPoolHost:
    """The real host pool of a Mamba model's states: 9 slots (device capacity 4 x ratio 2, plus one)."""
    info = MambaStateBufferInfo(temporal=torch.zeros((MAMBA_LAYERS, 4) + TEMPORAL, dtype=torch.float32),
                                conv=(torch.zeros((MAMBA_LAYERS, 4) + CONV, dtype=torch.bfloat16),))
    pool = MambaPoolHost(info, 2.0, 0, device_capacity=4, pin_memory=False, device="cpu", layout=layout)
    assert pool.size_per_token == STATE_BYTES
    return pool


def fill_state(pool: MambaPoolHost, slot: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(900 + seed)
    for buf in (pool.temporal_buffer, *pool.conv_buffer):
        raw = buf[slot].view(torch.int16)
        raw.copy_(torch.randint(-32768, 32767, raw.shape, dtype=torch.int16, generator=gen))


def state(pool: MambaPoolHost, slot: int) -> bytes:
    """A slot's state as the pool itself places it (its get_page_buffer_meta pieces)."""
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor([slot], dtype=torch.int64))
    return b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, sizes))


def transfer(keys, slots=None, name=PoolName.MAMBA):
    return PoolTransfer(name=name, keys=list(keys), hit_policy=PoolHitPolicy.TRAILING_PAGES,
                        host_indices=None if slots is None else torch.tensor(slots, dtype=torch.int64))


def attach(cfg, kv, pools, store=None):
    """What the hybrid cache controller does: the factory's backend (or one on a shared Store), the KV
    pool, then each pool of its group with register_mem_host_pool_v2."""
    if store is None:
        made = backend(cfg, kv)
    else:
        made = KvtierHiCacheStorage(cfg, {}, store=store)
        made.register_mem_pool_host(kv)
    made.register_mem_host_pool_v2(kv, PoolName.KV)
    for name, pool in pools.items():
        made.register_mem_host_pool_v2(pool, name)
    return made


def hybrid_backend(url, kv=None, mamba=None, cfg=None, store=None):
    kv, mamba = kv or host_pool("page_first"), mamba or mamba_pool()
    return attach(cfg or storage_config(url, "page_first"), kv, {PoolName.MAMBA: mamba}, store), kv, mamba


def backup_node(b, kv, mamba, pages, state_slot):
    """A radix node's write to storage: its last page's state, then its KV pages (host page p holds
    page p)."""
    fill_state(mamba, state_slot, pages[-1])
    assert b.batch_set_v2([transfer([page_key(pages[-1])], [state_slot])]) == {"mamba": [True]}
    for p in pages:
        put(kv, p, p)
    assert b.batch_set_v1([page_key(p) for p in pages], indices(pages)) == [True] * len(pages)


def hit_pages(b, n):
    result = b.batch_exists_v2([page_key(p) for p in range(n)], [transfer(["__placeholder__"])])
    return result.kv_hit_pages, result.extra_pool_hit_pages


def load_state(b, page, slot):
    return b.batch_get_v2([transfer([page_key(page)], [slot])])["mamba"]


def state_file(tier_dir, page):
    """The file of the state stored under ``page``'s key (its KV page has the same key, in the KV
    namespace's folder, and a smaller size)."""
    name = engine_key(page_key(page)).hex() + CHUNK_SUFFIX
    found = [p for p in tier_dir.rglob(name) if p.stat().st_size >= HEADER_BYTES + STATE_BYTES]
    assert len(found) == 1, found
    return found[0]


def test_prefix_hit_needs_kv_pages_and_the_state_at_its_last_page(tier):
    url, _ = tier
    b, kv, mamba = hybrid_backend(url)
    try:
        backup_node(b, kv, mamba, [0, 1, 2], state_slot=0)   # node A: pages 0-2, state at 2
        backup_node(b, kv, mamba, [3, 4, 5], state_slot=1)   # node B: pages 3-5, state at 5
        assert hit_pages(b, 8) == (6, {"kv": 6, "mamba": 6})
        kv.kv_buffer.zero_()
        assert b.batch_get_v1([page_key(p) for p in range(6)], indices(range(6))) == [True] * 6
        assert load_state(b, 5, slot=6) == [True]
        assert state(mamba, 6) == state(mamba, 1)
        assert all(holds(kv, p, p) for p in range(6))
        # KV pages past the last state are no hit: pages 6-7 stored without a state
        for p in (6, 7):
            put(kv, p, p)
        assert b.batch_set_v1([page_key(6), page_key(7)], indices([6, 7])) == [True] * 2
        assert hit_pages(b, 8) == (6, {"kv": 8, "mamba": 6})
        # a state whose KV pages are missing is no hit either
        fill_state(mamba, 2, 20)
        assert b.batch_set_v2([transfer([page_key(20)], [2])]) == {"mamba": [True]}
        assert b.batch_exists_v2([page_key(20)], [transfer(["x"])]).kv_hit_pages == 0
    finally:
        b.close()


def test_corrupt_state_is_a_miss_of_its_prefix_never_a_stale_hit(tier):
    url, tier_dir = tier
    b, kv, mamba = hybrid_backend(url)  # file:// only: the load reads the damaged file
    try:
        backup_node(b, kv, mamba, [0, 1, 2], state_slot=0)
        backup_node(b, kv, mamba, [3, 4, 5], state_slot=1)
        b.store.flush()
        flip_payload_byte(state_file(tier_dir, 5), 7)
        fill_state(mamba, 5, 99)
        assert load_state(b, 5, slot=5) == [False]
        assert not any(state(mamba, 5)), "the corrupt state's slot must be zeroed"
        assert hit_pages(b, 6) == (3, {"kv": 6, "mamba": 3})  # the state at page 2 is next
        assert load_state(b, 2, slot=5) == [True]
        assert state(mamba, 5) == state(mamba, 0)
        assert load_state(b, 4, slot=5) == [False]  # never stored: a miss, not a stale state
    finally:
        b.close()


def test_non_hybrid_deployment_never_reads_hybrid_pages(tier):
    url, _ = tier
    with kvtier.Store([url]) as store:
        hybrid, kv, mamba = hybrid_backend(url, store=store)
        backup_node(hybrid, kv, mamba, [0, 1], state_slot=0)
        plain = KvtierHiCacheStorage(storage_config(url, "page_first"), {}, store=store)
        plain.register_mem_pool_host(host_pool("page_first"))
        put(plain.mem_pool_host, 7, 7)
        assert plain.batch_set_v1([page_key(7)], indices([7])) == [True]
        store.flush()
        assert hybrid.batch_exists([page_key(0), page_key(1)]) == 2
        assert plain.batch_exists([page_key(0), page_key(1)]) == 0
        assert plain.batch_exists([page_key(7)]) == 1
        assert hybrid.batch_exists([page_key(7)]) == 0
        assert hybrid.identity.get("state_pools") == "mamba" and plain.identity.get("state_pools") is None
        hybrid.close()
        plain.close()


def test_mla_pages_are_shared_across_ranks_but_states_are_not(tier):
    url, _ = tier
    with kvtier.Store([url]) as store:
        ranks = [hybrid_backend(url, kv=mla_host_pool("page_first"), store=store,
                                cfg=storage_config(url, "page_first", tp_rank=rank, tp_size=2, mla=True))
                 for rank in (0, 1)]
        (r0, kv0, m0), (r1, kv1, m1) = ranks
        backup_node(r0, kv0, m0, [0, 1], state_slot=0)
        store.flush()
        assert r1.batch_exists([page_key(0), page_key(1)]) == 2  # latents: one copy
        assert hit_pages(r1, 2)[0] == 0  # rank 1's state shard was never stored
        backup_node(r1, kv1, m1, [0, 1], state_slot=3)
        assert hit_pages(r1, 2)[0] == 2 and hit_pages(r0, 2)[0] == 2
        assert load_state(r0, 1, slot=4) == [True] and state(m0, 4) == state(m0, 0)
        r0.close()
        r1.close()


def test_pools_it_was_not_written_for_are_refused_with_the_reason(tier):
    url, _ = tier
    b = KvtierHiCacheStorage(storage_config(url, "page_first"), {})
    try:
        group = HostPoolGroup([PoolEntry(name=PoolName.KV, host_pool=host_pool("page_first"),
                                         device_pool=None, layer_mapper=lambda i: i,
                                         is_primary_index_anchor=True),
                               PoolEntry(name=PoolName.MAMBA, host_pool=mamba_pool(), device_pool=None,
                                         layer_mapper=lambda i: i)])
        with pytest.raises(ValueError, match="HostPoolGroup .* to register_mem_pool_host"):
            b.register_mem_pool_host(group)
        with pytest.raises(ValueError, match="MambaPoolHost holds per-request .* states, not KV"):
            b.register_mem_pool_host(mamba_pool())
        kv = host_pool("page_first")
        b.register_mem_pool_host(kv)
        with pytest.raises(ValueError, match="'indexer' .* DSA indexer pool is not served"):
            b.register_mem_host_pool_v2(host_pool("page_first"), PoolName.INDEXER)
        with pytest.raises(ValueError, match="'kv' pool is not the host pool registered"):
            b.register_mem_host_pool_v2(host_pool("page_first"), PoolName.KV)
        # 0.5.23's MambaPoolHost asserts page_first or page_first_direct when built; a revision with a
        # layer_first Mamba pool (its default argument names one) is refused by kvtier, never guessed
        layer_first = mamba_pool()
        layer_first.layout = "layer_first"
        with pytest.raises(ValueError, match="layout 'layer_first' has no page buffers"):
            b.register_mem_host_pool_v2(layer_first, PoolName.MAMBA)
        with pytest.raises(ValueError, match="'mamba' pool is a MHATokenToKVPoolHost"):
            b.register_mem_host_pool_v2(kv, PoolName.MAMBA)
        # nothing was registered: a state transfer is answered False, never raised
        assert b.batch_set_v2([transfer([page_key(0)], [0])]) == {"mamba": [False]}
        assert b.batch_exists_v2([page_key(0)], [transfer(["x"])]).kv_hit_pages == 0
    finally:
        b.close()
    assert b.batch_get_v2([transfer([page_key(0)], [0])]) == {"mamba": [False]}


# ---- hybrid sliding-window (SWA) models: the "swa" pool beside the KV pool -------------------------

FULL_LAYERS, WINDOW_LAYERS = 2, 9  # files: a KV page 8 KiB, a window page 12 KiB (4 KiB-padded)


def swa_backend(url, layout="page_first", store=None, cfg=None, mla=False):
    make = (lambda n: mla_host_pool(layout, layers=n)) if mla else (lambda n: host_pool(layout, layers=n))
    kv, swa = make(FULL_LAYERS), make(WINDOW_LAYERS)
    return attach(cfg or storage_config(url, layout), kv, {PoolName.SWA: swa}, store), kv, swa


def swa_backup(b, kv, swa, pages, window_pages):
    """A radix node's write to storage: the window pages it holds on the host (its last
    ``window_pages``; none once evicted), then its KV pages. Host page p holds page p."""
    for p in pages:
        put(kv, p, 100 + p)
        put(swa, p, 200 + p)
    keys = [page_key(p) for p in pages]
    if window_pages:
        tail = pages[-window_pages:]
        done = b.batch_set_v2([PoolTransfer(PoolName.SWA, indices(tail), keys=keys[-window_pages:],
                                            hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        assert done == {PoolName.SWA: [True] * window_pages}
    assert b.batch_set_v1(keys, indices(pages)) == [True] * len(pages)


def swa_prefetch(b, n_pages, window_pages, kv_first, swa_first):
    """The controller's prefetch of pages 0..n-1: the hit, the KV pages into host pages kv_first...,
    the window re-keyed to the last hit pages into host pages swa_first...; (hit result, KV bools,
    window bools)."""
    hashes = [page_key(p) for p in range(n_pages)]
    window = PoolTransfer(PoolName.SWA, indices(range(swa_first, swa_first + window_pages)),
                          keys=["__placeholder__"] * window_pages, hit_policy=PoolHitPolicy.TRAILING_PAGES)
    result = b.batch_exists_v2(hashes, [window])
    hit = result.kv_hit_pages
    if not hit:
        return result, [], []
    got_kv = b.batch_get_v1(hashes[:hit], indices(range(kv_first, kv_first + hit)))
    window.keys = hashes[max(0, hit - window_pages):hit]
    window.host_indices = window.host_indices[:len(window.keys) * PAGE]
    return result, got_kv, b.batch_get_v2([window])[PoolName.SWA]


@pytest.mark.parametrize("layout", ["page_first", "layer_first", "page_first_direct"])
def test_swa_prefix_loads_its_kv_pages_and_only_its_last_window(tier, layout):
    url, _ = tier
    saver, kv, swa = swa_backend(url, layout)
    swa_backup(saver, kv, swa, [0, 1, 2, 3], window_pages=4)
    swa_backup(saver, kv, swa, [4, 5, 6, 7], window_pages=4)
    saver.close()
    with kvtier.Store([url]) as store:  # another process: fresh host pools, a cold store
        loader, kv2, swa2 = swa_backend(url, layout, store=store)
        fill(swa2, seed=5)  # what the host pool held before: only the window's pages may change
        before = [page_bytes(swa2, s) for s in range(swa2.page_num)]
        result, got_kv, got_window = swa_prefetch(loader, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (8, {"kv": 8, "swa": 8})
        assert got_kv == [True] * 8 and got_window == [True] * 3
        assert all(page_bytes(kv2, 8 + p) == page_bytes(kv, p) for p in range(8))
        assert [page_bytes(swa2, 12 + i) for i in range(3)] == [page_bytes(swa, p) for p in (5, 6, 7)]
        assert all(page_bytes(swa2, s) == before[s] for s in range(swa2.page_num) if s not in (12, 13, 14))
        assert store.stats()["load_chunks"] == 8 + 3  # window pages 0..4 are not read
        loader.close()


def test_swa_hit_needs_the_window_pages_of_its_last_pages(tier):
    url, _ = tier
    b, kv, swa = swa_backend(url)
    try:
        swa_backup(b, kv, swa, [0, 1, 2, 3], window_pages=2)  # window pages 2, 3 only
        swa_backup(b, kv, swa, [4, 5, 6, 7], window_pages=0)  # its window evicted before backup
        result, _, got_window = swa_prefetch(b, 8, window_pages=2, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (4, {"kv": 8, "swa": 4})
        assert got_window == [True, True]
        assert page_bytes(swa, 12) == page_bytes(swa, 2) and page_bytes(swa, 13) == page_bytes(swa, 3)
        # a 3-page window needs page 1 too: no prefix of these has one
        result, _, _ = swa_prefetch(b, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (0, {"kv": 8})
        # a 2-page prefix at the root is its own window: pages 0-1 have none stored
        assert swa_prefetch(b, 2, window_pages=2, kv_first=8, swa_first=12)[0].kv_hit_pages == 0
        # window pages without their KV pages are no hit either
        put(swa, 9, 9)
        assert b.batch_set_v2([PoolTransfer(PoolName.SWA, indices([9]), keys=[page_key(30)],
                                            hit_policy=PoolHitPolicy.TRAILING_PAGES)]) == {PoolName.SWA: [True]}
        assert b.batch_exists_v2([page_key(30)], [PoolTransfer(
            PoolName.SWA, keys=["x"], hit_policy=PoolHitPolicy.TRAILING_PAGES)]).kv_hit_pages == 0
    finally:
        b.close()


def test_mla_window_pages_are_shared_across_ranks_as_the_kv_pages(tier):
    url, _ = tier
    with kvtier.Store([url]) as store:
        ranks = [swa_backend(url, store=store, mla=True,
                             cfg=storage_config(url, "page_first", tp_rank=rank, tp_size=2, mla=True))
                 for rank in (0, 1)]
        (r0, kv0, swa0), (r1, _, swa1) = ranks
        swa_backup(r0, kv0, swa0, [0, 1, 2], window_pages=3)  # only rank 0 backs them up (should_backup)
        store.flush()
        result, got_kv, got_window = swa_prefetch(r1, 3, window_pages=2, kv_first=8, swa_first=12)
        assert result.kv_hit_pages == 3 and got_kv == [True] * 3 and got_window == [True] * 2
        assert [page_bytes(swa1, 12 + i) for i in range(2)] == [page_bytes(swa0, p) for p in (1, 2)]
        r0.close()
        r1.close()


def window_file(tier_dir, page):
    """The file of the window page stored under ``page``'s key (its KV page has the same key, in the
    KV namespace's folder, and a smaller file)."""
    name = engine_key(page_key(page)).hex() + CHUNK_SUFFIX
    found = sorted(tier_dir.rglob(name), key=lambda p: p.stat().st_size)
    assert len(found) == 2 and found[0].stat().st_size < found[1].stat().st_size, found
    return found[1]


def test_corrupt_window_page_is_a_miss_of_its_prefix_never_a_wrong_window(tier):
    url, tier_dir = tier
    b, kv, swa = swa_backend(url)  # file:// only: the load reads the damaged file
    try:
        swa_backup(b, kv, swa, list(range(8)), window_pages=8)
        b.store.flush()
        flip_payload_byte(window_file(tier_dir, 7), 11)
        put(swa, 14, 999)  # what the slot held before the load
        result, got_kv, got_window = swa_prefetch(b, 8, window_pages=3, kv_first=8, swa_first=12)
        assert result.kv_hit_pages == 8 and got_kv == [True] * 8  # lookups count, loads verify
        assert got_window == [True, True, False]  # 2 of 3 leading: SGLang drops the window
        assert not any(page_bytes(swa, 14)), "the corrupt page's host slots must be zeroed"
        # the tier dropped the page: the next hit is the 7-page prefix, whose window is intact
        result, _, got_window = swa_prefetch(b, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (7, {"kv": 8, "swa": 7})
        assert got_window == [True] * 3
        assert [page_bytes(swa, 12 + i) for i in range(3)] == [page_bytes(swa, p) for p in (4, 5, 6)]
    finally:
        b.close()


def test_swa_deployment_and_plain_deployment_never_read_each_others_pages(tier):
    url, _ = tier
    with kvtier.Store([url]) as store:
        hybrid, kv, swa = swa_backend(url, store=store)
        swa_backup(hybrid, kv, swa, [0, 1], window_pages=2)
        plain = KvtierHiCacheStorage(storage_config(url, "page_first"), {}, store=store)
        plain.register_mem_pool_host(host_pool("page_first", layers=FULL_LAYERS))
        store.flush()
        assert hybrid.batch_exists([page_key(0), page_key(1)]) == 2
        assert plain.batch_exists([page_key(0), page_key(1)]) == 0
        assert hybrid.identity.get("window_pools") == "swa" and plain.identity.get("window_pools") is None
        hybrid.close()
        plain.close()


def test_swa_pools_it_was_not_written_for_are_refused_with_the_reason(tier):
    url, _ = tier
    b = KvtierHiCacheStorage(storage_config(url, "page_first"), {})
    try:
        window = host_pool("page_first", layers=WINDOW_LAYERS, label="swa")
        with pytest.raises(ValueError, match="'swa' pool came before a KV pool"):
            b.register_mem_host_pool_v2(window, PoolName.SWA)
        kv = host_pool("page_first", layers=FULL_LAYERS)
        b.register_mem_pool_host(kv)
        with pytest.raises(ValueError, match="'swa' pool is the KV pool itself"):
            b.register_mem_host_pool_v2(kv, PoolName.SWA)
        with pytest.raises(ValueError, match="page_tokens 8 but the KV pool has 4"):
            b.register_mem_host_pool_v2(host_pool("page_first", layers=WINDOW_LAYERS, page=8), PoolName.SWA)
        with pytest.raises(ValueError, match="layout 'layer_first' but the KV pool has 'page_first'"):
            b.register_mem_host_pool_v2(host_pool("layer_first", layers=WINDOW_LAYERS), PoolName.SWA)
        with pytest.raises(ValueError, match="MLATokenToKVPoolHost does not match is_mla_model=False"):
            b.register_mem_host_pool_v2(mla_host_pool("page_first", layers=WINDOW_LAYERS), PoolName.SWA)
        with pytest.raises(ValueError, match="MambaPoolHost holds per-request"):
            b.register_mem_host_pool_v2(mamba_pool(), PoolName.SWA)
        with pytest.raises(ValueError, match="'draft_swa' .* draft model"):
            b.register_mem_host_pool_v2(window, PoolName.DRAFT_SWA)
        with pytest.raises(ValueError, match="'indexer' .* DSA indexer"):
            b.register_mem_host_pool_v2(window, PoolName.INDEXER)
        # nothing was registered as "swa": its transfers are False, never raised
        assert b.batch_get_v2([PoolTransfer(PoolName.SWA, indices([0]), keys=[page_key(0)])]) \
            == {PoolName.SWA: [False]}
        b.register_mem_host_pool_v2(window, PoolName.SWA)
        # slots that do not match the keys are False
        assert b.batch_set_v2([PoolTransfer(PoolName.SWA, indices([0, 1]), keys=[page_key(0)])]) \
            == {PoolName.SWA: [False]}
    finally:
        b.close()
