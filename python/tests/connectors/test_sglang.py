"""Driver test of kvtier.connectors.sglang: calls the backend the way SGLang's HiCache does.

Sequence reproduced (SGLang's mem_cache/storage/backend_factory.py, managers/cache_controller.py and
mem_cache/hicache_storage.py):
  1. ``--hicache-storage-backend dynamic``: the factory imports ``module_path``/``class_name`` from
     the extra config and builds ``cls(storage_config, kwargs)``; the controller then calls
     ``register_mem_pool_host(host_pool)``; ``"interface_v1": 1`` selects the zero-copy calls;
  2. backup thread: ``batch_set_v1(hashes, host_indices, extra_info)``, success = all(result);
  3. prefetch thread: ``batch_exists(hashes, extra_info)`` -> leading hits, then
     ``batch_get_v1(hashes, host_indices, extra_info)`` counted up to the first False;
  4. without interface_v1: ``batch_set(keys, values=[flat page])`` and
     ``batch_get(keys, [host_pool.get_dummy_flat_data_page()])``; ``get``/``set``/``exists``.
Both threads run at once against one backend. host_indices are token slots, page_size per key.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
import types

import numpy as np

import kvtier

from connector_helpers import corrupt_chunk, file_tier, requires_library, tiny_file_tier  # noqa: F401

pytestmark = requires_library

PAGE = 4        # tokens per page
LAYERS = 2
HEADS = 2
DIM = 16
PAGES = 64      # pages in the host pool
ITEM = 2        # bytes per element (a bf16 stand-in)


class MHATokenToKVPoolHost:
    """A stand-in for SGLang's MHA host pool (same class name and attributes) in its page-first
    layout: kv_buffer[2, tokens, layers, heads, dim]. A page is two contiguous pieces (its K half and
    its V half), as get_page_buffer_meta says."""

    def __init__(self, layout="page_first"):
        self.page_size = PAGE
        self.size = PAGE * PAGES
        self.layout = layout
        self.dtype = "torch.bfloat16"
        self.layer_num, self.head_num, self.head_dim = LAYERS, HEADS, DIM
        self.kv_buffer = np.zeros((2, self.size, LAYERS, HEADS, DIM), dtype=np.uint16)
        self.token_bytes = LAYERS * HEADS * DIM * ITEM
        self.piece_bytes = PAGE * self.token_bytes

    def get_page_buffer_meta(self, indices):
        indices = [int(i) for i in indices]
        assert len(indices) % self.page_size == 0
        base = self.kv_buffer.ctypes.data
        v_offset = self.size * self.token_bytes
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            k = base + indices[i] * self.token_bytes
            ptrs += [k, k + v_offset]
        return ptrs, [self.piece_bytes] * len(ptrs)

    def get_dummy_flat_data_page(self):
        return np.zeros(2 * PAGE * LAYERS * HEADS * DIM, dtype=np.uint16)

    # test helpers
    def page(self, slot: int) -> np.ndarray:
        return self.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE].copy()

    def fill(self, slot: int, i: int):
        self.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE] = page_data(i)


def page_data(i: int) -> np.ndarray:
    rng = np.random.default_rng(500 + i)
    return rng.integers(1, 65535, (2, PAGE, LAYERS, HEADS, DIM), dtype=np.uint16)


def page_key(i: int) -> str:
    return hashlib.sha256(f"page-{i}".encode()).hexdigest()


def host_indices(slots) -> np.ndarray:
    return np.array([t for s in slots for t in range(s * PAGE, (s + 1) * PAGE)], dtype=np.int64)


def storage_config(tiers, interface_v1=True):
    extra = {"backend_name": "kvtier", "module_path": "kvtier.connectors.sglang",
             "class_name": "KvtierHiCacheStorage", "tiers": tiers}
    if interface_v1:
        extra["interface_v1"] = 1
    return types.SimpleNamespace(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="Qwen/Qwen3-8B", dp_rank=0, dp_size=1, tp_lcm_size=None,
        should_split_heads=False, extra_config=extra)


def make_backend(tiers, pool, interface_v1=True):
    """What the dynamic backend factory and the cache controller do."""
    cfg = storage_config(tiers, interface_v1)
    module = importlib.import_module(cfg.extra_config["module_path"])
    backend = getattr(module, cfg.extra_config["class_name"])(cfg, {})
    backend.register_mem_pool_host(pool)
    return backend


def backup(backend, pool, pages, slots):
    for p, s in zip(pages, slots):
        pool.fill(s, p)
    return backend.batch_set_v1([page_key(p) for p in pages], host_indices(slots), None)


def test_zero_copy_backup_and_prefetch_run_concurrently(file_tier):
    url, _ = file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend(["mem://?capacity=16MiB", url], pool)
    try:
        assert all(backup(backend, pool, range(8), range(8)))
        results = {}

        def backup_thread():  # pages 8..23 from slots 8..23, in batches like the controller's
            results["set"] = [all(backup(backend, pool, range(b, b + 4), range(b, b + 4)))
                              for b in range(8, 24, 4)]

        def prefetch_thread():  # pages 0..7 into slots 40..47
            keys = [page_key(p) for p in range(8)]
            hit = backend.batch_exists(keys, None)
            results["hit"] = hit
            results["get"] = backend.batch_get_v1(keys[:hit], host_indices(range(40, 48)), None)

        threads = [threading.Thread(target=backup_thread), threading.Thread(target=prefetch_thread)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["set"] == [True] * 4
        assert results["hit"] == 8 and results["get"] == [True] * 8
        for p in range(8):
            assert np.array_equal(pool.page(40 + p), page_data(p)), f"page {p}"
        keys = [page_key(p) for p in range(24)]
        assert backend.batch_exists(keys, None) == 24
        pool.kv_buffer[:] = 0
        assert backend.batch_get_v1(keys, host_indices(range(24)), None) == [True] * 24
        for p in range(24):
            assert np.array_equal(pool.page(p), page_data(p))
    finally:
        backend.close()


def test_batch_exists_counts_leading_keys_and_misses_load_nothing(file_tier):
    url, _ = file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend([url], pool)
    try:
        assert all(backup(backend, pool, [0, 1, 2, 4], [0, 1, 2, 4]))
        backend.store.flush()  # a file:// top tier is written in the background
        keys = [page_key(p) for p in range(5)]  # page 3 was never stored
        assert backend.batch_exists(keys, None) == 3
        assert backend.batch_exists([page_key(9)] + keys, None) == 0
        assert backend.exists(page_key(4)) and not backend.exists(page_key(3))
        pool.kv_buffer[:, 20 * PAGE:25 * PAGE] = 7
        got = backend.batch_get_v1(keys, host_indices(range(20, 25)), None)
        assert got == [True, True, True, False, False]
        for slot in (23, 24):
            for p in range(5):
                assert not np.array_equal(pool.page(slot), page_data(p))
        assert backend.batch_get_v1([], host_indices([]), None) == []
    finally:
        backend.close()


def test_corrupt_page_is_false_and_its_slots_hold_no_other_page(file_tier):
    url, tier_dir = file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend([url], pool)  # file tier only: the load reads the damaged file
    try:
        assert all(backup(backend, pool, [0, 1, 2], [0, 1, 2]))
        backend.store.flush()
        from kvtier.connectors import engine_key
        corrupt_chunk(tier_dir, engine_key(page_key(1)))
        pool.kv_buffer[:, 30 * PAGE:33 * PAGE] = 0xABAB
        got = backend.batch_get_v1([page_key(p) for p in range(3)], host_indices([30, 31, 32]), None)
        assert got == [True, False, False]
        assert np.array_equal(pool.page(30), page_data(0))
        assert not pool.page(31).any(), "the corrupt page's slots must be zeroed"
        for slot in (31, 32):
            for p in range(3):
                assert not np.array_equal(pool.page(slot), page_data(p))
        assert backend.batch_exists([page_key(0), page_key(1)], None) == 1  # removed
    finally:
        backend.close()


def test_full_tier_drops_pages_without_raising(tiny_file_tier):
    url, _ = tiny_file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend([url], pool)
    try:
        assert len(backup(backend, pool, [0, 1], [0, 1])) == 2  # answered, nothing raised
        assert backend.batch_set([page_key(5)], [pool.get_dummy_flat_data_page() + 1]) in (True, False)
        backend.store.flush()
        assert backend.batch_exists([page_key(0)], None) == 0
        assert not backend.exists(page_key(5))
        assert backend.store.stats()["dropped_saves"] >= 3
        assert backend.batch_get_v1([page_key(0)], host_indices([9]), None) == [False]
    finally:
        backend.close()


def test_tensor_interface_roundtrip(file_tier):
    url, _ = file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend([url], pool, interface_v1=False)
    try:
        flat = [page_data(p).reshape(-1) for p in range(3)]
        assert backend.batch_set([page_key(p) for p in range(3)], flat) is True
        assert backend.set(page_key(3), page_data(3).reshape(-1)) is True
        backend.store.flush()
        dst = [pool.get_dummy_flat_data_page() for _ in range(5)]
        got = backend.batch_get([page_key(p) for p in (0, 1, 2, 3, 7)], dst)
        assert [g is not None for g in got] == [True, True, True, True, False]
        for p in range(4):
            assert np.array_equal(got[p], page_data(p).reshape(-1))
        one = backend.get(page_key(2), pool.get_dummy_flat_data_page())
        assert np.array_equal(one, page_data(2).reshape(-1))
        assert backend.get(page_key(8), pool.get_dummy_flat_data_page()) is None
    finally:
        backend.close()


def test_ranks_do_not_share_pages(file_tier):
    url, _ = file_tier
    pool = MHATokenToKVPoolHost()
    from kvtier.connectors.sglang import KvtierHiCacheStorage
    with kvtier.Store([url]) as store:  # one pool seen by two ranks
        rank0 = KvtierHiCacheStorage(storage_config([url]), {}, store=store)
        rank0.register_mem_pool_host(pool)
        assert all(backup(rank0, pool, [0], [0]))
        cfg = storage_config([url])
        cfg.tp_rank, cfg.tp_size = 1, 2
        rank1 = KvtierHiCacheStorage(cfg, {}, store=store)
        rank1.register_mem_pool_host(pool)
        assert rank1.batch_exists([page_key(0)], None) == 0
        assert rank0.batch_exists([page_key(0)], None) == 1
        rank0.close()
        rank1.close()


def test_close_while_backup_thread_runs(file_tier):
    url, _ = file_tier
    pool = MHATokenToKVPoolHost()
    backend = make_backend(["mem://?capacity=16MiB", url], pool)
    outcomes = []
    started = threading.Event()

    def backup_thread():
        for b in range(0, 48, 4):
            outcomes.append(all(backup(backend, pool, range(b, b + 4), range(b, b + 4))))
            started.set()

    t = threading.Thread(target=backup_thread)
    t.start()
    started.wait()
    backend.close()  # waits for the call in progress; later calls report False
    t.join()
    assert outcomes[0] is True
    assert outcomes == sorted(outcomes, reverse=True)  # stored until the close, refused after
    assert backend.batch_get_v1([page_key(0)], host_indices([0]), None) == [False]
    assert backend.batch_exists([page_key(0)], None) == 0
    backend.close()  # idempotent
