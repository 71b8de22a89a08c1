"""kvtier as a HiCache storage backend of the real SGLang (PyPI sglang 0.5.23: scripts/engines-venv.sh sglang).

SGLang-side everything is the installed package: ``HiCacheStorageConfig``, ``StorageBackendFactory`` with
the ``dynamic`` backend (it imports kvtier's class by module path and checks it subclasses the real
``HiCacheStorage``), a real device pool (``MHATokenToKVPool`` on CPU) whose ``_mha_buffer_info()`` builds
the real host pool (``MHATokenToKVPoolHost``, ``pin_memory=False``) in each of the layouts
``layer_first``, ``page_first``, ``page_first_direct`` and ``page_head``, its ``get_page_buffer_meta``,
``get_data_page`` / ``get_dummy_flat_data_page``, and the v2 interface's ``PoolName``, ``PoolHitPolicy``,
``PoolTransfer`` and ``PoolTransferResult``. HiCache's cache controller (the threads that call these)
needs CUDA or ROCm and does not run here; the calls follow its order (docs/connectors.md).
"""

from __future__ import annotations

import ctypes
import hashlib
import pathlib
import sys
import threading

import pytest
import torch
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo, PoolHitPolicy, PoolName,
                                                  PoolTransfer, PoolTransferResult)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import AsymmetricMHATokenToKVPoolHost, MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

import kvtier
from kvtier.connectors.sglang import KvtierHiCacheStorage

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "connectors"))
from connector_helpers import corrupt_chunk, make_file_tier  # noqa: E402

PAGE = 4          # tokens per page
LAYERS = 2
HEADS = 2
DIM = 16
DEVICE_TOKENS = 64
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


def host_pool(layout: str, layers: int = LAYERS, label: str = "kv", v_head_dim: int = DIM,
              cls=MHATokenToKVPoolHost, page: int = PAGE) -> MHATokenToKVPoolHost:
    device = MHATokenToKVPool(size=DEVICE_TOKENS, page_size=page, dtype=torch.bfloat16, head_num=HEADS,
                              head_dim=DIM, v_head_dim=v_head_dim, layer_num=layers, device="cpu",
                              enable_memory_saver=False)
    return cls(device._mha_buffer_info(), host_to_device_ratio=4.0, host_size=0,
                                page_size=page, layout=layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
                                end_layer=layers - 1, pool_label=label)


def mla_host_pool(layout: str, layers: int = LAYERS) -> MLATokenToKVPoolHost:
    device = MLATokenToKVPool(size=DEVICE_TOKENS, page_size=PAGE, dtype=torch.bfloat16, kv_lora_rank=32,
                              qk_rope_head_dim=16, layer_num=layers, device="cpu", enable_memory_saver=False)
    return MLATokenToKVPoolHost(device._mla_buffer_info(), host_to_device_ratio=4.0, host_size=0,
                                page_size=PAGE, layout=layout, pin_memory=False, device="cpu",
                                device_capacity_tokens=DEVICE_TOKENS, start_layer=0, end_layer=layers - 1,
                                target_layer_num=layers)


def storage_config(tier_url, layout: str, *, interface_v1: bool = True, tp_rank: int = 0,
                   tp_size: int = 1, model: str = "kvtier-test/tiny", mla: bool = False,
                   **extra) -> HiCacheStorageConfig:
    """The real config; ``tier_url`` one tier URL or a list of them."""
    tiers = [tier_url] if isinstance(tier_url, str) else list(tier_url)
    extra_config = {"backend_name": "kvtier", "module_path": "kvtier.connectors.sglang",
                    "class_name": "KvtierHiCacheStorage", "tiers": tiers, **extra}
    if interface_v1:
        extra_config["interface_v1"] = 1
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
                                is_page_first_layout=layout != "layer_first", model_name=model,
                                extra_config=extra_config)


def backend(config: HiCacheStorageConfig, pool) -> KvtierHiCacheStorage:
    """As SGLang's cache controller attaches it: the factory's dynamic backend, then the host pool."""
    made = StorageBackendFactory.create_backend("dynamic", config, pool)
    assert isinstance(made, KvtierHiCacheStorage) and isinstance(made, HiCacheStorage), type(made)
    made.register_mem_pool_host(pool)
    return made


@pytest.fixture
def tier(tmp_path):
    return make_file_tier(tmp_path, "256MiB")


def page_key(i: int, salt: str = "") -> str:
    return hashlib.sha256(f"{salt}page-{i}".encode()).hexdigest()


def indices(slots) -> torch.Tensor:
    """Token slots of the pages ``slots`` (the host pool holds 65 pages: 0..64)."""
    return torch.tensor([t for s in slots for t in range(s * PAGE, (s + 1) * PAGE)], dtype=torch.int64)


def page_bytes(pool, slot: int) -> bytes:
    """A page's bytes as the host pool itself places them (its get_page_buffer_meta pieces)."""
    ptrs, sizes = pool.get_page_buffer_meta(indices([slot]))
    return b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ptrs, sizes))


def fill(pool, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    raw = pool.kv_buffer.view(torch.int16)
    raw.copy_(torch.randint(-32768, 32767, raw.shape, dtype=torch.int16, generator=gen))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pages_round_trip_byte_exact_through_a_restart(tier, layout):
    url, _ = tier
    src = host_pool(layout)
    fill(src, seed=1)
    keys = [page_key(i) for i in range(5)]
    slots = [3, 7, 1, 12, 20]
    first = backend(storage_config(url, layout), src)
    assert first.batch_set_v1(keys, indices(slots), HiCacheStorageExtraInfo()) == [True] * 5
    assert first.batch_exists(keys + [page_key(99)], HiCacheStorageExtraInfo()) == 5
    first.close()

    dst = host_pool(layout)
    fill(dst, seed=2)  # other bytes everywhere
    second = backend(storage_config(url, layout), dst)
    try:
        assert second.batch_exists(keys) == 5
        targets = [30, 2, 9, 15, 4]
        assert second.batch_get_v1(keys, indices(targets)) == [True] * 5
        for s, t in zip(slots, targets):
            assert page_bytes(dst, t) == page_bytes(src, s)
        assert page_bytes(dst, 0) != page_bytes(src, 0)  # slots no call named are untouched
    finally:
        second.close()


@pytest.mark.parametrize("layout", ("layer_first", "page_first"))
def test_flat_page_interface_round_trips(tier, layout):
    """Without interface_v1: batch_set of get_data_page's flat pages, batch_get into the pool's dummy
    flat pages, set_from_flat_data_page to place them."""
    url, _ = tier
    src = host_pool(layout)
    fill(src, seed=3)
    store = backend(storage_config(url, layout, interface_v1=False), src)
    try:
        keys = [page_key(i) for i in range(3)]
        pages = [src.get_data_page(s * PAGE, flat=True) for s in (2, 5, 8)]
        assert store.batch_set(keys, values=pages)
        assert store.exists(keys[0]) and not store.exists(page_key(42))
        assert store.batch_exists(keys) == 3  # HiCache's prefetch asks before it loads
        got = store.batch_get(keys, [src.get_dummy_flat_data_page() for _ in keys])
        dst = host_pool(layout)
        for slot, page in zip((10, 11, 12), got):
            assert page is not None
            dst.set_from_flat_data_page(slot * PAGE, page)
        for s, t in zip((2, 5, 8), (10, 11, 12)):
            assert page_bytes(dst, t) == page_bytes(src, s)
        assert store.batch_get([page_key(77)], [src.get_dummy_flat_data_page()]) == [None]
        assert store.set(page_key(3), src.get_data_page(9 * PAGE, flat=True)) is True
        assert store.exists(page_key(3))
        one = store.get(page_key(3), src.get_dummy_flat_data_page())
        want = src.get_data_page(9 * PAGE, flat=True)
        assert one is not None and torch.equal(one.view(torch.int16), want.view(torch.int16))  # bits: NaNs
        assert store.get(page_key(8), src.get_dummy_flat_data_page()) is None
    finally:
        store.close()


def test_identity_layouts_io_paths_ranks_and_models_do_not_share(tier):
    url, _ = tier
    src = host_pool("page_first")
    fill(src, seed=4)
    keys = [page_key(i) for i in range(2)]
    writer = backend(storage_config(url, "page_first"), src)
    assert writer.batch_set_v1(keys, indices([1, 2])) == [True, True]
    writer.close()
    readers = [("page_first_direct", {}), ("page_head", {}), ("layer_first", {}),
               ("page_first", {"interface_v1": False}), ("page_first", {"tp_rank": 1, "tp_size": 2}),
               ("page_first", {"model": "kvtier-test/other"}), ("page_first", {"salt": "tenant-1"})]
    for layout, overrides in readers:
        # two TP ranks may not share one file:// directory unless its path names the rank: rank 1
        # reads the same directory through a symlink named for it, so only the identity can miss
        reader_url = url
        if "tp_rank" in overrides:
            tier_dir = pathlib.Path(url[len("file://"):].split("?")[0])
            link = tier_dir.parent / "tier-1"
            if not link.exists():
                link.symlink_to(tier_dir)
            reader_url = url.replace("/tier?", "/tier-{tp_rank}?")
        reader = backend(storage_config(reader_url, layout, **overrides), host_pool(layout))
        try:
            assert reader.batch_exists(keys) == 0, (layout, overrides)
        finally:
            reader.close()
    same = backend(storage_config(url, "page_first"), host_pool("page_first"))
    assert same.batch_exists(keys) == 2
    same.close()


def test_corrupt_page_fails_its_load_and_zeroes_its_slots(tier):
    url, tier_dir = tier
    pool = host_pool("page_first")
    fill(pool, seed=5)
    keys = [page_key(i) for i in range(3)]
    store = backend(storage_config(url, "page_first"), pool)  # file:// only: the load reads the file
    try:
        assert store.batch_set_v1(keys, indices([1, 2, 3])) == [True] * 3
        store.store.flush()
        corrupt_chunk(tier_dir, kvtier.connectors.engine_key(keys[1]))
        originals = [page_bytes(pool, s) for s in (1, 2, 3)]
        assert store.batch_get_v1(keys, indices([4, 5, 6])) == [True, False, False]
        assert page_bytes(pool, 4) == originals[0]
        assert page_bytes(pool, 5) == bytes(len(originals[1])), "the corrupt page's slots are zeroed"
        assert page_bytes(pool, 6) not in originals
        assert store.batch_exists(keys) == 1  # the corrupt chunk was removed
    finally:
        store.close()


def test_v2_swa_pool_pages_with_the_real_pool_transfer_classes(tier):
    """A hybrid SWA deployment: a full-attention KV pool and a sliding-window KV pool registered with
    register_mem_host_pool_v2; batch_set_v2 / batch_exists_v2 / batch_get_v2 with real PoolTransfers."""
    url, _ = tier
    kv, swa = host_pool("page_first"), host_pool("page_first", layers=3, label="swa")
    fill(kv, seed=7)
    fill(swa, seed=8)
    keys = [page_key(i) for i in range(4)]
    writer = backend(storage_config(url, "page_first"), kv)
    writer.register_mem_host_pool_v2(swa, PoolName.SWA)
    assert writer.batch_set_v1(keys, indices([1, 2, 3, 4])) == [True] * 4
    window = PoolTransfer(name=PoolName.SWA, keys=keys[2:], host_indices=indices([5, 6]),
                          hit_policy=PoolHitPolicy.TRAILING_PAGES)
    assert writer.batch_set_v2([window]) == {"swa": [True, True]}
    writer.close()

    kv2, swa2 = host_pool("page_first"), host_pool("page_first", layers=3, label="swa")
    reader = backend(storage_config(url, "page_first"), kv2)
    reader.register_mem_host_pool_v2(swa2, PoolName.SWA)
    try:
        probe = PoolTransfer(name=PoolName.SWA, keys=keys[2:], hit_policy=PoolHitPolicy.TRAILING_PAGES)
        result = reader.batch_exists_v2(keys, [probe])
        assert isinstance(result, PoolTransferResult)
        assert result.kv_hit_pages == 4
        assert reader.batch_get_v1(keys, indices([8, 9, 10, 11])) == [True] * 4
        load = PoolTransfer(name=PoolName.SWA, keys=keys[2:], host_indices=indices([12, 13]),
                            hit_policy=PoolHitPolicy.TRAILING_PAGES)
        assert reader.batch_get_v2([load]) == {"swa": [True, True]}
        for s, t in zip((1, 2, 3, 4), (8, 9, 10, 11)):
            assert page_bytes(kv2, t) == page_bytes(kv, s)
        for s, t in zip((5, 6), (12, 13)):
            assert page_bytes(swa2, t) == page_bytes(swa, s)
    finally:
        reader.close()
    plain = backend(storage_config(url, "page_first"), host_pool("page_first"))  # no window pool
    assert plain.batch_exists(keys) == 0
    plain.close()


def test_page_unified_layout_is_refused_with_the_reason(tier):
    """0.5.23's fifth layout (K and V of a layer interleaved in each head group's block): kvtier was not
    written for it, so registering such a pool fails the attach instead of guessing its page bytes."""
    url, _ = tier
    pool = host_pool("page_unified")
    with pytest.raises(ValueError, match="unknown SGLang host layout 'page_unified'"):
        backend(storage_config(url, "page_unified"), pool)


@pytest.mark.parametrize("layout", ("layer_first", "page_first", "page_first_direct"))
def test_mla_pages_are_shared_across_tp_ranks(tmp_path, layout):
    """SGLang's MLA host pool (MLATokenToKVPool's buffer info): an MLA page is the same on every TP rank,
    so a page rank 0 of 2 wrote is found and loaded byte-exact by rank 1; an MHA pool under an MLA
    config is refused."""
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    for rank in (0, 1):  # each rank names its own directory; both lead to one pool
        (tmp_path / f"tier-{rank}").symlink_to(tier_dir)
    url = f"file://{tmp_path}/tier-{{tp_rank}}?capacity=64MiB"
    src = mla_host_pool(layout)
    fill(src, seed=9)
    keys = [page_key(i) for i in range(3)]
    rank0 = backend(storage_config(url, layout, tp_rank=0, tp_size=2, mla=True), src)
    assert rank0.batch_set_v1(keys, indices([1, 2, 3])) == [True] * 3
    rank0.close()
    dst = mla_host_pool(layout)
    rank1 = backend(storage_config(url, layout, tp_rank=1, tp_size=2, mla=True), dst)
    try:
        assert rank1.batch_exists(keys) == 3
        assert rank1.batch_get_v1(keys, indices([7, 8, 9])) == [True] * 3
        for s_, t in zip((1, 2, 3), (7, 8, 9)):
            assert page_bytes(dst, t) == page_bytes(src, s_)
    finally:
        rank1.close()
    with pytest.raises(ValueError, match="does not match is_mla_model"):
        backend(storage_config(url, layout, tp_rank=1, tp_size=2, mla=True), host_pool(layout))


def test_asymmetric_pool_round_trips_zero_copy_and_never_raises_into_hicache(tier):
    """SGLang's AsymmetricMHATokenToKVPoolHost (V head dim 8, K 16): 0.5.23 gives its pages' K and V
    pieces (get_page_buffer_meta), so the zero-copy path stores and loads them byte-exact; its flat-page
    calls raise NotImplementedError, which kvtier answers as a miss on the prefetch thread (issue 22: an
    exception there ended HiCache's thread). Its pages are not a symmetric pool's."""
    url, _ = tier
    pool = host_pool("page_first", v_head_dim=DIM // 2, cls=AsymmetricMHATokenToKVPoolHost)
    pool.k_buffer.view(torch.int16).copy_(torch.arange(pool.k_buffer.numel(), dtype=torch.int16).view_as(
        pool.k_buffer.view(torch.int16)))
    pool.v_buffer.view(torch.int16).fill_(7)
    store = backend(storage_config(url, "page_first"), pool)
    answers = []

    def prefetch_thread():  # what the controller's thread runs; an exception would end it
        try:
            answers.append(store.batch_set_v1([page_key(0)], indices([1])))
            answers.append(store.batch_exists([page_key(0)]))
            answers.append(store.batch_get_v1([page_key(0)], indices([2])))
            answers.append(store.batch_get([page_key(0)]))
        except BaseException as e:  # noqa: BLE001 - the test wants to see anything
            answers.append(e)

    try:
        t = threading.Thread(target=prefetch_thread)
        t.start()
        t.join()
        assert answers == [[True], 1, [True], [None]]
        assert page_bytes(pool, 2) == page_bytes(pool, 1)
        assert store.identity.get("v_head_dim") == str(DIM // 2)
    finally:
        store.close()
    symmetric = backend(storage_config(url, "page_first"), host_pool("page_first"))
    assert symmetric.batch_exists([page_key(0)]) == 0
    symmetric.close()
