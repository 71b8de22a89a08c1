"""kvtier's LMCache connector under the real LMCache bridge: concurrency, misses, a full tier, bad arguments,
close with operations in flight, read-your-writes and the identity matrix (formerly
python/tests/connectors/test_lmcache*.py, which drove the connector through a transcription of the bridge).

LMCache's ``NativeConnectorL2Adapter`` (0.5.6) is built by its factory from the real
``NativePluginL2AdapterConfig``; its demux thread drains kvtier's completions. Objects are
``TensorMemoryObj``s from LMCache's ``TensorMemoryAllocator``. Helpers: lmcache_l2_adapter.py.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import pytest
import torch
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter import NativePluginL2AdapterConfig

import kvtier
from lmcache_l2_adapter import FULL, TAIL, allocator, key, load, lookup, make_adapter, objects, raw, store  # noqa: F401
from lmcache_l2_adapter import wait


def adapter_with(**params):
    """The factory with a config object, as the server builds it after parsing (params may hold objects)."""
    config = NativePluginL2AdapterConfig("kvtier.connectors.lmcache", "KvtierNativeConnector", params)
    return create_l2_adapter_from_registry(config)


def submit_and_wait_store(adapter, keys, objs):
    """A store's L2StoreResult (success or failure), never an exception."""
    task = adapter.submit_store_task(keys, objs)
    return wait(adapter.get_store_event_fd(), lambda: adapter.pop_completed_store_tasks().get(task), "store")


def test_concurrent_stores_lookups_and_loads_of_two_sizes(tmp_path, allocator):
    adapter = make_adapter(f"file://{tmp_path}?capacity=64MiB", chunk_bytes=FULL.numel() * 2)
    shapes = [FULL, FULL, TAIL, FULL, FULL, TAIL]
    stored = objects(allocator, shapes, seed=11)
    keys = [key(i) for i in range(6)]
    results, done = {}, {}
    lock = threading.Lock()  # pop_completed_store_tasks hands out every finished store, whoever asks

    def finished(task):
        with lock:
            done.update(adapter.pop_completed_store_tasks())
            return done.get(task)

    def store_pair(j):
        task = adapter.submit_store_task(keys[j:j + 2], stored[j:j + 2])
        results[j] = wait(adapter.get_store_event_fd(), lambda: finished(task), "store")

    threads = [threading.Thread(target=store_pair, args=(j,)) for j in (0, 2, 4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(results[j].is_successful() for j in (0, 2, 4)), results
        assert lookup(adapter, [keys[0], keys[2], key(9), keys[5]]) == [True, True, False, True]
        loaded = objects(allocator, shapes, seed=None)
        assert load(adapter, keys, loaded) == [True] * 6
        assert [raw(o) for o in loaded] == [raw(o) for o in stored]
    finally:
        adapter.close()


def test_missing_object_is_false_and_its_buffer_holds_no_other_object(tmp_path, allocator):
    adapter = make_adapter(f"file://{tmp_path}?capacity=64MiB")
    try:
        stored = objects(allocator, [FULL], seed=12)
        store(adapter, [key(0)], stored)
        adapter._client.store.flush()
        loaded = objects(allocator, [FULL, FULL], seed=13)
        assert load(adapter, [key(0), key(7)], loaded) == [True, False]
        assert raw(loaded[0]) == raw(stored[0])
        assert raw(loaded[1]) != raw(stored[0])
        assert lookup(adapter, [key(7)]) == [False]
    finally:
        adapter.close()


def test_full_tier_drops_the_store_softly(tmp_path, allocator):
    adapter = make_adapter(f"file://{tmp_path}?capacity=64KiB")  # smaller than one object
    try:
        submit_and_wait_store(adapter, [key(0), key(1)], objects(allocator, [FULL, FULL], seed=14))
        adapter._client.store.flush()
        assert lookup(adapter, [key(0), key(1)]) == [False, False]
        assert adapter._client.store.stats()["dropped_saves"] >= 2
        assert load(adapter, [key(0)], objects(allocator, [FULL], seed=None)) == [False]
    finally:
        adapter.close()


def test_wrong_arguments_fail_the_task_and_misspelt_options_are_refused(tmp_path, allocator):
    url = f"file://{tmp_path}?capacity=64MiB"
    adapter = make_adapter(url)
    try:
        result = submit_and_wait_store(adapter, [key(0)], [])  # one key, no object
        assert not result.is_successful()
        assert adapter.report_status()["is_healthy"]
    finally:
        adapter.close()
    with pytest.raises(ValueError, match="did you mean 'tiers'"):
        adapter_with(tierz=[url])  # kvtier's own option, misspelt: refused at start-up
    adapter_with(tiers=[url], lmcache_instance_id="x").close()  # an engine's argument: ignored


def test_close_with_operations_in_flight(tmp_path, allocator):
    adapter = make_adapter(f"file://{tmp_path}?capacity=64MiB", chunk_bytes=FULL.numel() * 2)
    first = objects(allocator, [FULL] * 4, seed=15)
    store(adapter, [key(i) for i in range(4)], first)
    more = objects(allocator, [FULL] * 24, seed=16)
    loaded = objects(allocator, [FULL] * 4, seed=None)
    for i in range(24):
        adapter.submit_store_task([key(4 + i)], [more[i]])
    adapter.submit_load_task([key(i) for i in range(4)], loaded)
    adapter.submit_lookup_and_lock_task([key(0)], {})
    client = adapter._client
    adapter.close()  # stops the demux thread, then closes kvtier, which finishes with every buffer
    assert [raw(o) for o in loaded] == [raw(o) for o in first]
    client.close()  # idempotent
    # A submit after close fails its task; nothing raises into LMCache's thread.
    adapter.submit_store_task([key(0)], first[:1])
    adapter.submit_lookup_and_lock_task([key(0)], {})
    done = [f for f, ok, err, _ in client.drain_completions() if not ok and "closed" in err]
    assert len(done) == 2


class BackgroundWrites:
    """A Store whose object writes reach the tier a while after the save reported done, as kvtier's
    background tiers do (file://, fs://: the save completes once kvtier took a copy; its write queue,
    ``queue_chunks_now``, drains later). Everything else is the real Store's."""

    def __init__(self, real, delay_s=0.3):
        self._store, self._delay_s = real, delay_s
        self._queued, self._lock, self._threads = 0, threading.Lock(), []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def save_async(self, ns, keys, bufs, notify_fd=None):
        copies = [bytes(memoryview(b)) for b in bufs]  # kvtier's copy
        with self._lock:
            self._queued += len(keys)

        def write():
            time.sleep(self._delay_s)
            handle = self._store.save_async(ns, keys, copies)
            handle.wait()
            handle.close()
            with self._lock:
                self._queued -= len(keys)

        thread = threading.Thread(target=write)
        thread.start()
        self._threads.append(thread)
        return _Accepted(len(keys), notify_fd)

    def stats(self):
        out = dict(self._store.stats())
        with self._lock:
            out["queue_chunks_now"] = int(out.get("queue_chunks_now", 0)) + self._queued
        return out

    def join(self):
        for thread in self._threads:
            thread.join()


class _Accepted:
    """A save's handle once kvtier took its copy: done, every key accepted; signals the eventfd."""

    def __init__(self, n, notify_fd):
        self._n = n
        if notify_fd is not None:
            os.eventfd_write(notify_fd, 1)

    def done(self):
        return True

    def wait(self, timeout=None):
        return self._n

    def close(self):
        pass


def test_load_right_after_a_completed_store_reads_it(tmp_path, allocator):
    """Store, wait for the store's completion, then load the same key (what LMCache's adapter test
    test_load_existing_key_copies_data[file] does): the load once reported a miss while the write was
    still on its way to the tier."""
    real = kvtier.Store([f"file://{tmp_path}?capacity=64MiB"])
    slow = BackgroundWrites(real)
    adapter = adapter_with(tiers=[f"file://{tmp_path}?capacity=64MiB"], store=slow)
    try:
        stored = objects(allocator, [FULL], seed=17)
        store(adapter, [key(1)], stored)
        loaded = objects(allocator, [FULL], seed=None)
        assert load(adapter, [key(1)], loaded) == [True]
        assert raw(loaded[0]) == raw(stored[0])
        assert load(adapter, [key(2)], objects(allocator, [FULL], seed=None)) == [False]
    finally:
        adapter.close()
        slow.join()
        real.close()


def test_lookup_right_after_store_finds_it(tmp_path, allocator):
    adapter = make_adapter(f"file://{tmp_path}?capacity=64MiB")
    try:
        for i in range(10):
            store(adapter, [key(100 + i)], objects(allocator, [FULL], seed=100 + i))
            assert lookup(adapter, [key(100 + i)]) == [True]
    finally:
        adapter.close()


MATRIX = list(itertools.product(("org/a", "org/b"), ("", "s1"), (FULL, TAIL)))


def test_cross_configuration_matrix_misses_unless_equal(tmp_path, allocator):
    """8 configurations (kvtier's model id x salt x object size) on one file:// pool: an object written
    under X is read under every Y; X != Y is always a miss of the load (a lookup, which carries no size,
    finds it where only the size differs), X == Y a byte-exact hit. The readers start
    after the writers closed: a file:// tier's index is its own process's, so readers opened beside the
    writers would miss every object whatever the identity (the transcribed test's flaw)."""
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    stored = [objects(allocator, [shape], seed=200 + x)[0] for x, (_, _, shape) in enumerate(MATRIX)]
    for x, (model, salt, _) in enumerate(MATRIX):
        writer = make_adapter(url, model_id=model, salt=salt)
        store(writer, [key(x)], [stored[x]])
        writer.close()
    adapters = [make_adapter(url, model_id=model, salt=salt) for model, salt, _ in MATRIX]
    try:
        wrong = []
        for x, (y, adapter) in itertools.product(range(len(MATRIX)), enumerate(adapters)):
            target = objects(allocator, [MATRIX[y][2]], seed=None)  # Y reads objects of its size
            hit = load(adapter, [key(x)], target) == [True]
            found = lookup(adapter, [key(x)]) == [True]
            if x == y:
                assert hit and found and raw(target[0]) == raw(stored[x])
            elif hit or found != (MATRIX[x][:2] == MATRIX[y][:2]):
                # a lookup carries no size: the same model and salt find the object in any size
                wrong.append((x, y))
        assert not wrong, f"{len(wrong)} pairs shared an object, e.g. {wrong[:3]}"
    finally:
        for adapter in adapters:
            adapter.close()


def test_lookup_after_restart_finds_three_sizes_without_chunk_bytes(tmp_path, allocator):
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    first = make_adapter(url)
    store(first, [key(1), key(2)], objects(allocator, [FULL, TAIL], seed=18))
    store(first, [key(3)], objects(allocator, [torch.Size([2, 2, 8, 64])], seed=19))
    first.close()
    again = make_adapter(url)  # a new process: no chunk_bytes, no sizes seen
    try:
        assert lookup(again, [key(i) for i in (1, 2, 3, 4)]) == [True, True, True, False]
    finally:
        again.close()
