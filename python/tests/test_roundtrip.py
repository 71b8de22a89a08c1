"""Save and load through every buffer form; misses; corruption on file://."""
import ctypes
import mmap

import numpy as np
import kvtier
from conftest import CHUNK, LAYOUT, chunk_bytes, tokens


def test_bytearray_round_trip(saved):
    store, ns, keys = saved
    dsts = [bytearray(CHUNK) for _ in keys]
    assert store.load(ns, keys, dsts) == 4
    assert [bytes(d) for d in dsts] == [chunk_bytes(i) for i in range(4)]


def test_numpy_round_trip(mem_store, ns):
    keys = ns.chunk_keys(tokens(2, first=5))
    src = np.random.default_rng(1).integers(0, 2**16, size=(2, CHUNK // 2), dtype=np.uint16)
    mem_store.save(ns, keys, [src[0], src[1]])
    src.flags.writeable = False  # a read-only source is pinned without a copy too
    mem_store.save(ns, keys, list(src))
    dst = np.zeros_like(src)
    assert mem_store.load(ns, keys, [dst[0], dst[1]]) == 2
    np.testing.assert_array_equal(dst, src)
    dst2 = np.zeros((2, LAYOUT.layers * 2, CHUNK // (LAYOUT.layers * 4)), dtype=np.float16)
    assert mem_store.load(ns, keys, dst2) == 2  # a 2-D sequence of chunk rows
    assert dst2.tobytes() == src.tobytes()


def test_memoryview_round_trip(saved):
    store, ns, keys = saved
    backing = bytearray(4 * CHUNK)
    view = memoryview(backing)
    assert store.load(ns, keys, [view[i * CHUNK:(i + 1) * CHUNK] for i in range(4)]) == 4
    assert bytes(backing) == b"".join(chunk_bytes(i) for i in range(4))


def test_read_only_sources(mem_store, ns):
    keys = ns.chunk_keys(tokens(3, first=77))
    with mmap.mmap(-1, CHUNK) as m:
        m.write(chunk_bytes(2))
        srcs = [chunk_bytes(0), memoryview(chunk_bytes(1)).toreadonly(), m]
        mem_store.save(ns, keys, srcs)
    dsts = [bytearray(CHUNK) for _ in keys]
    assert mem_store.load(ns, keys, dsts) == 3
    assert [bytes(d) for d in dsts] == [chunk_bytes(i) for i in range(3)]


def test_address_size_round_trip(saved):
    store, ns, keys = saved
    raw = (ctypes.c_char * (4 * CHUNK))()
    base = ctypes.addressof(raw)
    assert store.load(ns, keys, [(base + i * CHUNK, CHUNK) for i in range(4)]) == 4
    assert raw.raw == b"".join(chunk_bytes(i) for i in range(4))


def test_piece_lists(mem_store, ns):
    keys = ns.chunk_keys(tokens(2, first=300))
    srcs = [[chunk_bytes(i)[:100], chunk_bytes(i)[100:1000], chunk_bytes(i)[1000:]] for i in range(2)]
    mem_store.save(ns, keys, srcs)
    pieces = [[bytearray(CHUNK // 2), bytearray(CHUNK // 2)], (bytearray(CHUNK // 4), bytearray(3 * CHUNK // 4))]
    assert mem_store.load(ns, keys, pieces) == 2
    assert [b"".join(bytes(p) for p in c) for c in pieces] == [chunk_bytes(0), chunk_bytes(1)]


def test_misses(saved):
    store, ns, keys = saved
    missing = ns.chunk_keys(tokens(1, first=999999))
    assert store.lookup(ns, keys) == 4
    assert store.lookup(ns, missing + keys) == 0
    assert store.lookup(ns, keys[:2] + missing + keys[2:]) == 2
    dsts = [bytearray(b"\xaa" * CHUNK) for _ in range(4)]
    assert store.load(ns, keys[:2] + missing + keys[3:], dsts) == 2
    assert [bytes(d) for d in dsts[:2]] == [chunk_bytes(0), chunk_bytes(1)]
    assert bytes(dsts[2]) in (bytes(CHUNK), b"\xaa" * CHUNK)  # never another chunk's bytes
    assert store.load(ns, [], []) == 0


def _save_to_file_tier(directory, ns, keys):
    with kvtier.Store([f"file://{directory}"]) as store:
        store.save(ns, keys, [chunk_bytes(i) for i in range(len(keys))])
        store.flush()


def test_corrupt_chunk_on_file_tier(file_dir, ns):
    keys = ns.chunk_keys(tokens(3, first=4242))
    _save_to_file_tier(file_dir, ns, keys)
    (path,) = file_dir.rglob(f"{keys[1].hex()}*")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x5A  # a payload byte
    path.write_bytes(data)
    with kvtier.Store([f"file://{file_dir}"]) as store:
        dsts = [bytearray(b"\xaa" * CHUNK) for _ in keys]
        assert store.load(ns, keys, dsts) == 1
        assert bytes(dsts[0]) == chunk_bytes(0)
        assert bytes(dsts[1]) in (bytes(CHUNK), b"\xaa" * CHUNK)  # zeroed if read, never wrong bytes
        assert bytes(dsts[2]) in (bytes(CHUNK), b"\xaa" * CHUNK, chunk_bytes(2))


def test_file_tier_reopen_round_trip(file_dir, ns):
    keys = ns.chunk_keys(tokens(3, first=11))
    _save_to_file_tier(file_dir, ns, keys)
    with kvtier.Store([f"file://{file_dir}"]) as store:
        dst = np.zeros((3, CHUNK), dtype=np.uint8)
        assert store.lookup(ns, keys) == 3
        assert store.load(ns, keys, dst) == 3
        assert dst.tobytes() == b"".join(chunk_bytes(i) for i in range(3))


def test_two_tier_load_after_restart(file_dir, ns):
    keys = ns.chunk_keys(tokens(2, first=50))
    tiers = ["mem://?capacity=16MiB", f"file://{file_dir}"]
    with kvtier.Store(tiers) as store:
        store.save(ns, keys, [chunk_bytes(0), chunk_bytes(1)])
        store.flush()
    with kvtier.Store(tiers) as store:  # a fresh mem:// tier: the chunks come from file://
        dsts = [bytearray(CHUNK), bytearray(CHUNK)]
        assert store.load(ns, keys, dsts) == 2
        assert [bytes(d) for d in dsts] == [chunk_bytes(0), chunk_bytes(1)]
