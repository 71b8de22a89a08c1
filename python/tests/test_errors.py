"""Wrong input is KvtierError(INVALID_ARGUMENT) (or NOT_SUPPORTED), never a crash or a partial write."""
import numpy as np
import pytest

import kvtier
from conftest import CHUNK, chunk_bytes

INVALID = kvtier.Status.INVALID_ARGUMENT


def _status(fn, *args):
    with pytest.raises(kvtier.KvtierError) as e:
        fn(*args)
    return e.value.status


def test_wrong_destination_size(saved):
    store, ns, keys = saved
    assert _status(store.load, ns, keys[:1], [bytearray(CHUNK - 1)]) == INVALID
    assert _status(store.load, ns, keys[:1], [bytearray(CHUNK + 1)]) == INVALID
    assert _status(store.load, ns, keys[:1], [[bytearray(CHUNK // 2), bytearray(CHUNK // 2 - 1)]]) == INVALID


def test_wrong_source_size(mem_store, ns):
    keys = ns.chunk_keys(list(range(16)))
    assert _status(mem_store.save, ns, keys, [b"x" * (CHUNK - 1)]) == INVALID
    assert mem_store.lookup(ns, keys) == 0


def test_count_mismatch(saved):
    store, ns, keys = saved
    assert _status(store.load, ns, keys, [bytearray(CHUNK)]) == INVALID
    assert _status(store.save, ns, keys[:1], [chunk_bytes(0), chunk_bytes(1)]) == INVALID
    assert _status(store.load, ns, keys[:1], bytearray(CHUNK)) == INVALID  # not a sequence of buffers


def test_bad_keys(saved):
    store, ns, keys = saved
    assert _status(store.lookup, ns, [b"short"]) == INVALID
    assert _status(store.load, ns, [keys[0] + b"x"], [bytearray(CHUNK)]) == INVALID
    assert _status(store.lookup, ns, keys[0]) == INVALID  # one key, not a list


def test_read_only_destination(saved):
    store, ns, keys = saved
    assert _status(store.load, ns, keys[:1], [bytes(CHUNK)]) == INVALID
    ro = np.zeros(CHUNK, dtype=np.uint8)
    ro.flags.writeable = False
    assert _status(store.load, ns, keys[:1], [ro]) == INVALID


def test_non_contiguous_and_non_buffers(saved):
    store, ns, keys = saved
    strided = np.zeros(2 * CHUNK, dtype=np.uint8)[::2]
    assert _status(store.load, ns, keys[:1], [strided]) == INVALID
    assert _status(store.load, ns, keys[:1], [object()]) == INVALID
    assert _status(store.load, ns, keys[:1], [(0, CHUNK)]) == INVALID


def test_cuda_array_interface_not_supported(saved):
    store, ns, keys = saved

    class FakeGpuArray:
        __cuda_array_interface__ = {"shape": (CHUNK,), "typestr": "|u1", "data": (1 << 40, False), "version": 3}

    assert _status(store.load, ns, keys[:1], [FakeGpuArray()]) == kvtier.Status.NOT_SUPPORTED


def test_bad_store_options(tmp_path):
    assert _status(kvtier.Store, []) == INVALID
    assert _status(kvtier.Store, ["nope://x"]) == INVALID
    assert _status(kvtier.Store, ["file://relative/dir"]) == INVALID


def test_error_text():
    e = kvtier.KvtierError(kvtier.Status.NO_SPACE, "NoSpace: tier full")
    assert str(e) == "NoSpace: tier full" and e.message == "tier full" and e.status == 5
