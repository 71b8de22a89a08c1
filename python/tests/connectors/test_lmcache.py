"""Driver test of kvtier.connectors.lmcache: calls the connector the way LMCache's native bridge does.

Sequence reproduced (LMCache's lmcache/v1/distributed/l2_adapters/native_connector_l2_adapter.py and
its native_plugin factory):
  1. ``--l2-adapter '{"type": "native_plugin", "module_path": ..., "class_name": ...,
     "adapter_params": {...}}'``: the factory imports the class, builds ``cls(**adapter_params)``
     and checks the six methods;
  2. the bridge reads ``event_fd()`` once and runs a demux thread: poll(fd, POLLIN), then
     ``drain_completions()`` -> [(future_id, ok, error, per_key_bools | None)];
  3. stores: ``submit_batch_set(key_strings, memoryviews)``; lookups: ``submit_batch_exists(keys)``
     (a key counts when ok and its bool is True); loads: ``submit_batch_get(keys, memoryviews)``;
  4. ``close()`` after the demux thread stops, with operations possibly in flight.
Keys are the bridge's strings "<model>@<kv_rank hex>@<group hex>@<chunk hash hex>".
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import os
import select
import threading
import time

import pytest

import kvtier  # noqa: E402

from connector_helpers import corrupt_chunk, wait_for, file_tier, requires_library, tiny_file_tier  # noqa: F401

pytestmark = requires_library

CHUNK = 64 * 1024   # a full chunk's object
TAIL = 24 * 1024    # a shorter last chunk's object


def object_key(i: int) -> str:
    chunk_hash = hashlib.sha256(f"chunk-{i}".encode()).hexdigest()
    return f"Qwen/Qwen3-8B@{0:08x}@{0:x}@{chunk_hash}"


def payload(i: int, size: int) -> bytes:
    return hashlib.shake_256(f"obj-{i}".encode()).digest(size)


def byte_array(size: int, fill: int = 0) -> memoryview:
    """Like LMCache's MemoryObj.byte_array: a ctypes-backed, writable byte view."""
    arr = (ctypes.c_ubyte * size)()
    if fill:
        ctypes.memset(arr, fill, size)
    return memoryview(arr).cast("B")


def filled(data: bytes) -> memoryview:
    view = byte_array(len(data))
    view[:] = data
    return view


def make_connector(**adapter_params):
    """What the native_plugin factory does."""
    config = {"type": "native_plugin", "module_path": "kvtier.connectors.lmcache",
              "class_name": "KvtierNativeConnector", "adapter_params": adapter_params}
    cls = getattr(importlib.import_module(config["module_path"]), config["class_name"])
    conn = cls(**config["adapter_params"])
    for name in ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
                 "drain_completions", "close"):
        assert callable(getattr(conn, name)), name
    return conn


class Demux:
    """The bridge's demux loop: poll the connector's eventfd, drain, route by future id."""

    def __init__(self, conn):
        self.conn = conn
        self.poller = select.poll()
        self.poller.register(conn.event_fd(), select.POLLIN)
        self.results = {}

    def step(self):
        if self.poller.poll(50):
            for future_id, ok, error, bools in self.conn.drain_completions():
                assert future_id not in self.results, "a future completed twice"
                self.results[future_id] = (ok, error, bools)

    def wait(self, *future_ids):
        def done():
            self.step()
            return all(f in self.results for f in future_ids)
        wait_for(done, f"futures {future_ids}")
        return [self.results[f] for f in future_ids]


def test_concurrent_sets_exists_and_gets_of_two_sizes(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=["mem://?capacity=16MiB", url], chunk_bytes=CHUNK)
    demux = Demux(conn)
    try:
        sizes = [CHUNK, CHUNK, TAIL, CHUNK, CHUNK, TAIL]
        sets = [conn.submit_batch_set([object_key(i) for i in range(j, j + 2)],
                                      [filled(payload(i, sizes[i])) for i in range(j, j + 2)])
                for j in (0, 2, 4)]
        assert len(set(sets)) == 3
        for ok, error, bools in demux.wait(*sets):
            assert ok and error == "" and bools == [True, True]
        exists = conn.submit_batch_exists([object_key(i) for i in (0, 2, 9, 5)])
        (ok, _, bools), = demux.wait(exists)
        assert ok and bools == [True, True, False, True]
        dsts = [byte_array(s) for s in sizes]
        gets = [conn.submit_batch_get([object_key(i)], [dsts[i]]) for i in range(6)]
        for ok, _, bools in demux.wait(*gets):
            assert ok and bools == [True]
        for i, size in enumerate(sizes):
            assert bytes(dsts[i]) == payload(i, size), f"object {i}"
    finally:
        conn.close()


def test_missing_object_is_false_and_its_buffer_holds_no_other_object(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=[url])
    demux = Demux(conn)
    try:
        (ok, _, _), = demux.wait(conn.submit_batch_set([object_key(0)], [filled(payload(0, CHUNK))]))
        assert ok
        conn.store.flush()  # a file:// top tier is written in the background
        dsts = [byte_array(CHUNK, 0xEE) for _ in range(2)]
        (ok, error, bools), = demux.wait(conn.submit_batch_get([object_key(0), object_key(7)], dsts))
        assert not ok and error and bools == [True, False]
        assert bytes(dsts[0]) == payload(0, CHUNK)
        assert bytes(dsts[1]) != payload(0, CHUNK)
        (ok, _, bools), = demux.wait(conn.submit_batch_exists([object_key(7)]))
        assert ok and bools == [False]
    finally:
        conn.close()


def test_corrupt_object_fails_with_a_zeroed_buffer(file_tier):
    url, tier_dir = file_tier
    conn = make_connector(tiers=[url], chunk_bytes=CHUNK)  # file only: the get reads the file
    demux = Demux(conn)
    try:
        keys = [object_key(i) for i in range(3)]
        (ok, _, _), = demux.wait(conn.submit_batch_set(keys, [filled(payload(i, CHUNK))
                                                               for i in range(3)]))
        assert ok
        conn.store.flush()
        from kvtier.connectors import engine_key
        corrupt_chunk(tier_dir, engine_key(keys[1]))
        dsts = [byte_array(CHUNK, 0xAB) for _ in range(3)]
        (ok, error, bools), = demux.wait(conn.submit_batch_get(keys, dsts))
        assert not ok and error and bools == [True, False, False]
        assert bytes(dsts[0]) == payload(0, CHUNK)
        assert not any(dsts[1]), "the corrupt object's buffer must be zeroed"
        for d in dsts[1:]:
            assert all(bytes(d) != payload(i, CHUNK) for i in range(3))
        (ok, _, bools), = demux.wait(conn.submit_batch_exists(keys))
        assert ok and bools == [True, False, True]  # the corrupt chunk was removed
    finally:
        conn.close()


def test_full_tier_drops_the_set_softly(tiny_file_tier):
    url, _ = tiny_file_tier
    conn = make_connector(tiers=[url])
    demux = Demux(conn)
    try:
        (ok, error, bools), = demux.wait(
            conn.submit_batch_set([object_key(0), object_key(1)],
                                  [filled(payload(i, CHUNK)) for i in range(2)]))
        assert len(bools) == 2 and ok == all(bools)  # answered, nothing raised
        conn.store.flush()
        (ok, _, bools), = demux.wait(conn.submit_batch_exists([object_key(0), object_key(1)]))
        assert ok and bools == [False, False]
        assert conn.store.stats()["dropped_saves"] >= 2
        dst = byte_array(CHUNK, 0xEE)
        (ok, _, bools), = demux.wait(conn.submit_batch_get([object_key(0)], [dst]))
        assert not ok and bools == [False] and bytes(dst) != payload(0, CHUNK)
    finally:
        conn.close()


def test_wrong_arguments_complete_with_a_failure(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=[url])
    try:
        demux = Demux(conn)
        (ok, error, bools), = demux.wait(conn.submit_batch_set([object_key(0)], []))
        assert not ok and "1 keys but 0 buffers" in error and bools == [False]
        (ok, error, _), = demux.wait(conn.submit_batch_get([object_key(0)], [object()]))
        assert not ok and error
    finally:
        conn.close()
    with pytest.raises(ValueError, match="did you mean 'tiers'"):
        make_connector(tierz=[url])  # kvtier's own option, misspelt: refused
    make_connector(tiers=[url], lmcache_instance_id="x").close()  # an engine's argument: ignored


def test_close_with_operations_in_flight(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=["mem://?capacity=16MiB", url], chunk_bytes=CHUNK)
    demux = Demux(conn)
    (ok, _, _), = demux.wait(conn.submit_batch_set([object_key(i) for i in range(4)],
                                                   [filled(payload(i, CHUNK)) for i in range(4)]))
    assert ok
    # What the bridge does on close: stop its demux thread, then close the connector.
    srcs = [filled(payload(i, CHUNK)) for i in range(4, 36)]
    dsts = [byte_array(CHUNK) for _ in range(4)]
    in_flight = [conn.submit_batch_set([object_key(i)], [srcs[i - 4]]) for i in range(4, 36)]
    in_flight.append(conn.submit_batch_get([object_key(i) for i in range(4)], dsts))
    in_flight.append(conn.submit_batch_exists([object_key(0)]))
    conn.close()  # returns once kvtier is done with every buffer
    results = {f: (ok, bools) for f, ok, _, bools in conn.drain_completions()}
    assert set(results) == set(in_flight)
    assert results[in_flight[-2]] == (True, [True] * 4)
    for i in range(4):
        assert bytes(dsts[i]) == payload(i, CHUNK)
    conn.close()  # idempotent
    # A submit after close completes with a failure; it does not raise into LMCache's thread.
    late = [conn.submit_batch_get([object_key(0)], [byte_array(CHUNK)]),
            conn.submit_batch_set([object_key(0)], [filled(payload(0, CHUNK))]),
            conn.submit_batch_exists([object_key(0)]), conn.submit_batch_delete([object_key(0)])]
    done = {f: (ok, err) for f, ok, err, _ in conn.drain_completions()}
    assert set(done) == set(late)
    assert all(not ok and "closed" in err for ok, err in done.values())


def test_eventfd_signals_each_completion(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=[url])
    try:
        poller = select.poll()
        poller.register(conn.event_fd(), select.POLLIN)
        assert poller.poll(0) == []  # nothing submitted: not readable
        assert conn.drain_completions() == []
        future = conn.submit_batch_exists([object_key(0)])
        wait_for(lambda: poller.poll(50), "the eventfd to become readable")
        done = wait_for(lambda: conn.drain_completions(), "the completion")
        assert [d[0] for d in done] == [future]
        assert poller.poll(0) == []  # drained: quiet again
    finally:
        conn.close()


def test_demux_thread_and_submitters_run_concurrently(file_tier):
    url, _ = file_tier
    conn = make_connector(tiers=["mem://?capacity=32MiB", url], chunk_bytes=CHUNK)
    demux = Demux(conn)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [demux.step() for _ in iter(stop.is_set, True)])
    thread.start()
    try:
        futures = [conn.submit_batch_set([object_key(i)], [filled(payload(i, CHUNK))])
                   for i in range(40)]
        wait_for(lambda: all(f in demux.results for f in futures), "all sets")
        assert all(demux.results[f][0] for f in futures)
    finally:
        stop.set()
        thread.join()
        conn.close()


class BackgroundWrites:
    """A Store whose object writes reach the tier a while after the save reported done, as kvtier's
    background tiers do (file://, fs://: the save completes once kvtier took a copy; its write queue,
    ``queue_chunks_now``, drains later). Everything else is the real Store's."""

    def __init__(self, store, delay_s=0.3):
        self._store, self._delay_s = store, delay_s
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


def test_load_right_after_a_completed_store_reads_it(file_tier):
    """LMCache's own adapter test (test_load_existing_key_copies_data[file]): store, wait for the
    store's completion, then load the same key. The load reported a miss while the write was still
    on its way to the tier; a store reported complete is now loadable by the next load."""
    url, _ = file_tier
    store = kvtier.Store([url])
    slow = BackgroundWrites(store)
    conn = make_connector(tiers=[url], store=slow)
    demux = Demux(conn)
    try:
        (ok, _, bools), = demux.wait(conn.submit_batch_set([object_key(1)], [filled(payload(1, CHUNK))]))
        assert ok and bools == [True]
        dst = byte_array(CHUNK)
        (ok, error, bools), = demux.wait(conn.submit_batch_get([object_key(1)], [dst]))
        assert ok and bools == [True], error
        assert bytes(dst) == payload(1, CHUNK)
        missing = byte_array(CHUNK)  # a key never stored is still a plain miss
        (ok, _, bools), = demux.wait(conn.submit_batch_get([object_key(2)], [missing]))
        assert not ok and bools == [False]
    finally:
        conn.close()
        slow.join()
        store.close()
