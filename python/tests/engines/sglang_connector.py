"""kvtier's SGLang backend on the real host pool as HiCache's threads drive it: backup and prefetch at
once, leading-key counts and misses, a full tier, close while the backup thread runs (formerly
python/tests/connectors/test_sglang.py, over a transcribed host pool).

SGLang 0.5.23's ``MHATokenToKVPoolHost`` (page_first, pin_memory=False) and ``StorageBackendFactory``;
the call order is the cache controller's (managers/cache_controller.py: the backup thread's
``batch_set_v1``, the prefetch thread's ``batch_exists`` then ``batch_get_v1``), which itself needs CUDA.
Helpers: sglang_hicache.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading

from sglang_hicache import backend, host_pool, indices, page_bytes, page_key, storage_config


def page_data(p: int, size: int) -> bytes:
    return hashlib.shake_256(f"page-data-{p}".encode()).digest(size)


def put(pool, slot: int, p: int) -> None:
    """Writes page p's bytes into the host slots of ``slot``, piece by piece as the pool lays them."""
    ptrs, sizes = pool.get_page_buffer_meta(indices([slot]))
    data, at = page_data(p, sum(int(n) for n in sizes)), 0
    for ptr, n in zip(ptrs, sizes):
        ctypes.memmove(int(ptr), data[at:at + int(n)], int(n))
        at += int(n)


def holds(pool, slot: int, p: int) -> bool:
    b = page_bytes(pool, slot)
    return b == page_data(p, len(b))


def backup(store, pool, pages, slots):
    for p, s in zip(pages, slots):
        put(pool, s, p)
    return store.batch_set_v1([page_key(p) for p in pages], indices(list(slots)))


def attach(tiers, pool):
    return backend(storage_config(tiers, "page_first"), pool)


def test_zero_copy_backup_and_prefetch_run_concurrently(tmp_path):
    pool = host_pool("page_first")
    store = attach(["mem://?capacity=16MiB", f"file://{tmp_path}?capacity=64MiB"], pool)
    try:
        assert all(backup(store, pool, range(8), range(8)))
        results = {}

        def backup_thread():  # pages 8..23 from slots 8..23, in batches like the controller's
            results["set"] = [all(backup(store, pool, range(b, b + 4), range(b, b + 4)))
                              for b in range(8, 24, 4)]

        def prefetch_thread():  # pages 0..7 into slots 40..47
            keys = [page_key(p) for p in range(8)]
            hit = store.batch_exists(keys)
            results["hit"] = hit
            results["get"] = store.batch_get_v1(keys[:hit], indices(range(40, 48)))

        threads = [threading.Thread(target=backup_thread), threading.Thread(target=prefetch_thread)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results["set"] == [True] * 4
        assert results["hit"] == 8 and results["get"] == [True] * 8
        for p in range(8):
            assert holds(pool, 40 + p, p), f"page {p}"
        keys = [page_key(p) for p in range(24)]
        assert store.batch_exists(keys) == 24
        pool.kv_buffer.zero_()
        assert store.batch_get_v1(keys, indices(range(24))) == [True] * 24
        assert all(holds(pool, p, p) for p in range(24))
    finally:
        store.close()


def test_batch_exists_counts_leading_keys_and_misses_load_nothing(tmp_path):
    pool = host_pool("page_first")
    store = attach(f"file://{tmp_path}?capacity=64MiB", pool)
    try:
        assert all(backup(store, pool, [0, 1, 2, 4], [0, 1, 2, 4]))
        store.store.flush()  # a file:// top tier is written in the background
        keys = [page_key(p) for p in range(5)]  # page 3 was never stored
        assert store.batch_exists(keys) == 3
        assert store.batch_exists([page_key(9)] + keys) == 0
        assert store.exists(page_key(4)) and not store.exists(page_key(3))
        for slot in range(20, 25):
            put(pool, slot, 100)  # poison
        assert store.batch_get_v1(keys, indices(range(20, 25))) == [True, True, True, False, False]
        assert all(holds(pool, 20 + p, p) for p in range(3))
        assert not any(holds(pool, slot, p) for slot in (23, 24) for p in range(5))
        assert store.batch_get_v1([], indices([])) == []
    finally:
        store.close()


def test_full_tier_drops_pages_without_raising(tmp_path):
    pool = host_pool("page_first")
    store = attach(f"file://{tmp_path}?capacity=4KiB", pool)  # smaller than one page file
    try:
        assert len(backup(store, pool, [0, 1], [0, 1])) == 2  # answered, nothing raised
        store.store.flush()
        assert store.batch_exists([page_key(0)]) == 0
        assert store.store.stats()["dropped_saves"] >= 2
        assert store.batch_get_v1([page_key(0)], indices([9])) == [False]
    finally:
        store.close()


def test_close_while_backup_thread_runs(tmp_path):
    pool = host_pool("page_first")
    store = attach(["mem://?capacity=16MiB", f"file://{tmp_path}?capacity=64MiB"], pool)
    outcomes = []
    started = threading.Event()

    def backup_thread():
        for b in range(0, 32, 4):
            outcomes.append(all(backup(store, pool, range(b, b + 4), range(b, b + 4))))
            started.set()

    t = threading.Thread(target=backup_thread)
    t.start()
    started.wait()
    store.close()  # waits for the call in progress; later calls report False
    t.join()
    assert outcomes[0] is True
    assert outcomes == sorted(outcomes, reverse=True)  # stored until the close, refused after
    assert store.batch_get_v1([page_key(0)], indices([0])) == [False]
    assert store.batch_exists([page_key(0)]) == 0
    store.close()  # idempotent
