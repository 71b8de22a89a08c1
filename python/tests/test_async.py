"""Asynchronous handles: wait, done, timeout, eventfd notification, buffers kept alive.

Deterministic blocking: with one async thread, an operation whose notify eventfd is at its maximum
counter (2^64 - 2) finishes its work and then blocks writing the notification until the test reads the
eventfd, so the next operation provably has not started."""
import gc
import os
import threading
import weakref

import numpy as np
import pytest

import kvtier
from conftest import CHUNK, LAYOUT, chunk_bytes, tokens

EVENTFD_MAX = 0xFFFFFFFFFFFFFFFE


def test_load_async_wait_and_done(saved):
    store, ns, keys = saved
    dsts = [bytearray(CHUNK) for _ in keys]
    with store.load_async(ns, keys, dsts) as h:
        assert h.wait() == 4
        assert h.done()
        assert h.result() == 4
    assert [bytes(d) for d in dsts] == [chunk_bytes(i) for i in range(4)]
    assert h.done() and h.wait() == 4  # the result stays after close


def test_save_async_then_load(mem_store, ns):
    keys = ns.chunk_keys(tokens(3, first=600))
    h = mem_store.save_async(ns, keys, [chunk_bytes(i) for i in range(3)])
    assert h.wait(timeout=60) == 3
    h.close()
    dst = np.zeros((3, CHUNK), dtype=np.uint8)
    assert mem_store.load(ns, keys, dst) == 3
    assert dst.tobytes() == b"".join(chunk_bytes(i) for i in range(3))


def test_async_miss_and_error(saved):
    store, ns, keys = saved
    missing = ns.chunk_keys(tokens(1, first=123456))
    with store.load_async(ns, missing + keys[:1], [bytearray(CHUNK), bytearray(CHUNK)]) as h:
        assert h.wait() == 0
    with pytest.raises(kvtier.KvtierError) as e:
        store.load_async(ns, keys[:1], [bytearray(CHUNK - 1)])
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT


def test_eventfd_notify(saved):
    store, ns, keys = saved
    fd = os.eventfd(0)
    try:
        dsts = [bytearray(CHUNK) for _ in keys]
        h = store.load_async(ns, keys, dsts, notify_fd=fd)
        assert os.eventfd_read(fd) == 1  # blocks until kvtier writes
        assert h.done()
        assert h.wait() == 4
        h.close()
        assert [bytes(d) for d in dsts] == [chunk_bytes(i) for i in range(4)]
    finally:
        os.close(fd)


class _BlockedPool:
    """A store with one async thread held by an operation whose notification cannot be written yet."""

    def __init__(self):
        self.store = kvtier.Store(["mem://?capacity=16MiB"], async_threads=1)
        self.ns = kvtier.Namespace("test/model", LAYOUT, tenant="t")
        self.keys = self.ns.chunk_keys(tokens(2, first=31))
        self.store.save(self.ns, self.keys, [chunk_bytes(0), chunk_bytes(1)])
        self.fd = os.eventfd(0)
        os.eventfd_write(self.fd, EVENTFD_MAX)
        self.blocker = self.store.load_async(self.ns, self.keys[:1], [bytearray(CHUNK)], notify_fd=self.fd)
        self.released = False

    def release(self):
        self.released = True
        assert os.eventfd_read(self.fd) >= EVENTFD_MAX  # lets the blocked notification through

    def close(self):
        if not self.released:
            self.release()
        assert self.blocker.wait() == 1
        self.blocker.close()
        os.close(self.fd)
        self.store.close()


def test_wait_timeout_is_busy():
    pool = _BlockedPool()
    try:
        dst = bytearray(CHUNK)
        h = pool.store.load_async(pool.ns, pool.keys[1:], [dst])
        with pytest.raises(kvtier.KvtierError) as e:
            h.wait(timeout=0.05)
        assert e.value.status == kvtier.Status.BUSY
        assert not h.done()
        pool.release()
        assert h.wait(timeout=600) == 1
        assert h.done() and bytes(dst) == chunk_bytes(1)
        h.close()
    finally:
        pool.close()


def test_wait_releases_the_gil():
    """The main thread blocks in kvtier_op_wait; only another Python thread can unblock it, which it
    can do only while the GIL is free. A second load runs in that thread meanwhile."""
    pool = _BlockedPool()
    try:
        dst = bytearray(CHUNK)
        h = pool.store.load_async(pool.ns, pool.keys[1:], [dst])
        other = {}

        def helper():
            d = bytearray(CHUNK)
            other["loaded"] = pool.store.load(pool.ns, pool.keys[:1], [d])
            other["bytes"] = bytes(d)
            other["pending"] = not h.done()
            pool.release()

        t = threading.Thread(target=helper)
        t.start()
        assert h.wait() == 1  # returns only after helper() ran
        t.join()
        assert other == {"loaded": 1, "bytes": chunk_bytes(0), "pending": True}
        h.close()
    finally:
        pool.close()


def test_handle_keeps_buffers_alive():
    pool = _BlockedPool()
    try:
        dst = np.zeros(CHUNK, dtype=np.uint8)
        ref = weakref.ref(dst)
        backing = bytearray(CHUNK)
        h = pool.store.load_async(pool.ns, pool.keys[1:], [dst])
        h2 = pool.store.load_async(pool.ns, pool.keys[1:], [backing])
        del dst
        gc.collect()
        assert ref() is not None  # the handle holds it while the operation may write
        with pytest.raises(BufferError):
            backing.extend(b"x")  # pinned: cannot move under kvtier
        pool.release()
        assert h.wait() == 1 and h2.wait() == 1
        assert ref().tobytes() == chunk_bytes(1) and bytes(backing) == chunk_bytes(1)
        h.close()
        h2.close()
        gc.collect()
        assert ref() is None
        backing.extend(b"x")  # released at close
    finally:
        pool.close()


def test_dropped_handle_waits_before_freeing(saved):
    store, ns, keys = saved
    dsts = [bytearray(CHUNK) for _ in keys]
    store.load_async(ns, keys, dsts)  # dropped at once: its finaliser waits for the operation
    gc.collect()
    assert [bytes(d) for d in dsts] == [chunk_bytes(i) for i in range(4)]
