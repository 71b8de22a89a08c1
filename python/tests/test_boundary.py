"""Issue 23: every value crossing the Python -> C boundary is checked. A property/fuzz test over random
integers (against each C type's range), strings holding NUL and buffers of the wrong size, plus the
Store.close() race: close() while other threads are inside load() never crashes.

Seeded (KVTIER_FUZZ_SEED, default 23) so a failure can be replayed."""
from __future__ import annotations

import os
import random
import threading
import time

import pytest

import kvtier
from kvtier._lib import KvtierOverflowError
from conftest import CHUNK, LAYOUT, chunk_bytes, tokens

SEED = int(os.environ.get("KVTIER_FUZZ_SEED", "23"))
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1


def _ints(rng: random.Random, n: int) -> list[int]:
    """Integers around every edge that matters: 0, the uint32/int/uint64 limits, negatives, huge."""
    edges = [0, 1, -1, U32, U32 + 1, 1 << 31, (1 << 31) - 1, U64, U64 + 1, -(1 << 63), 1 << 100]
    out = list(edges)
    for _ in range(n):
        bits = rng.choice([8, 31, 32, 33, 63, 64, 65, 200])
        out.append(rng.randrange(-(1 << bits), 1 << bits))
    return out


def test_layout_fields_are_uint32_never_wrapped():
    rng = random.Random(SEED)
    for v in _ints(rng, 200):
        lay = kvtier.Layout(v, 2, 8, "fp16", 16)
        if 0 <= v <= U32:
            try:
                ns = kvtier.Namespace("m", lay)
            except kvtier.KvtierError as e:  # zero, or a chunk over 4 GiB: refused by validation
                assert e.status == kvtier.Status.INVALID_ARGUMENT
                assert not isinstance(e, OverflowError)
            else:
                assert ns.chunk_bytes == lay.chunk_bytes
                ns.close()
        else:
            with pytest.raises(OverflowError):
                kvtier.Namespace("m", lay)


def test_a_wrapping_layout_never_shares_a_namespace():
    one = kvtier.Namespace("m", kvtier.Layout(1, 2, 8, "fp16", 16))
    with pytest.raises(KvtierOverflowError):
        kvtier.Namespace("m", kvtier.Layout(2 ** 32 + 1, 2, 8, "fp16", 16))
    # 2^31 layers x 2^31 heads: the byte count wraps to 0 in 64 bits; refused, not a 0-byte chunk.
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Namespace("m", kvtier.Layout(2 ** 31, 2 ** 31, 128, "bf16", 256))
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    one.close()


def test_strings_with_nul_are_refused_everywhere():
    rng = random.Random(SEED + 1)
    for _ in range(50):
        head = "".join(rng.choice("abc/-_") for _ in range(rng.randrange(1, 6)))
        tail = "".join(rng.choice("xyz") for _ in range(rng.randrange(1, 4)))
        bad = head + "\0" + tail
        for kwargs in ({"model_id": bad}, {"model_id": "m", "tenant": bad}, {"model_id": "m", "salt": bad}):
            with pytest.raises(kvtier.KvtierError) as e:
                kvtier.Namespace(layout=LAYOUT, **kwargs)
            assert e.value.status == kvtier.Status.INVALID_ARGUMENT
        with pytest.raises(kvtier.KvtierError):
            kvtier.Store(["mem://?capacity=1MiB" + bad])
        with pytest.raises(kvtier.KvtierError):
            kvtier.Store(["mem://?capacity=1MiB"], key_file="/tmp/k" + bad)
    # Different tenants are different namespaces, however alike their prefixes.
    a = kvtier.Namespace("m", LAYOUT, "t-x")
    b = kvtier.Namespace("m", LAYOUT, "t-y")
    assert a.id != b.id
    a.close()
    b.close()


@pytest.mark.parametrize("name,ctype", [("save_queue_bytes", "uint64"), ("save_queue_chunks", "uint32"),
                                        ("background_threads", "uint32"), ("async_threads", "uint32")])
def test_store_options_are_range_checked(name, ctype):
    rng = random.Random(SEED + 2)
    hi = U64 if ctype == "uint64" else U32
    for v in _ints(rng, 30):
        if 0 <= v <= hi:
            continue  # in range: the C side judges it (some are valid, some InvalidArgument)
        with pytest.raises(OverflowError):
            kvtier.Store(["mem://?capacity=1MiB"], **{name: v})
    with pytest.raises(kvtier.KvtierError):
        kvtier.Store(["mem://?capacity=1MiB"], **{name: "4"})


def test_buffers_of_the_wrong_size_are_refused(mem_store, ns):
    rng = random.Random(SEED + 3)
    keys = ns.chunk_keys(tokens(1))
    mem_store.save(ns, keys, [chunk_bytes(0)])
    for _ in range(40):
        size = rng.choice([0, 1, CHUNK - 1, CHUNK + 1, 2 * CHUNK, rng.randrange(0, 3 * CHUNK)])
        if size == CHUNK:
            continue
        with pytest.raises(kvtier.KvtierError) as e:
            mem_store.load(ns, keys, [bytearray(size)])
        assert e.value.status == kvtier.Status.INVALID_ARGUMENT
        with pytest.raises(kvtier.KvtierError):
            mem_store.save(ns, keys, [bytes(size)])
    for bad in [(0, CHUNK), (-1, CHUNK), (1 << 64, CHUNK), (4096, -1), (4096, 1 << 64)]:
        with pytest.raises(kvtier.KvtierError):
            mem_store.load(ns, keys, [bad])
    for fd in [-2, 1 << 31, 1 << 40]:
        with pytest.raises(OverflowError):
            mem_store.load_async(ns, keys, [bytearray(CHUNK)], notify_fd=fd)
    dst = bytearray(CHUNK)
    assert mem_store.load(ns, keys, [dst]) == 1 and bytes(dst) == chunk_bytes(0)


BIG = kvtier.Layout(layers=8, kv_heads=4, head_dim=64, dtype="fp16", tokens_per_chunk=64)  # 512 KiB


@pytest.mark.parametrize("tier", ["mem", "file"])
def test_close_while_other_threads_load_never_crashes(tmp_path, tier):
    """Before: close() freed the store under three loading threads (SIGSEGV in 5 of 12 runs)."""
    for round_ in range(8):
        url = "mem://?capacity=64MiB" if tier == "mem" else f"file://{tmp_path}/t{round_}?capacity=64MiB"
        store = kvtier.Store([url])
        ns = kvtier.Namespace("m", BIG)
        keys = ns.chunk_keys(list(range(4 * BIG.tokens_per_chunk)))
        store.save(ns, keys, [bytes([i + 1]) * BIG.chunk_bytes for i in range(4)])
        store.flush()
        started = threading.Barrier(4)
        outcomes: list[str] = []

        def loader():
            started.wait()
            try:
                for _ in range(200):
                    store.load(ns, keys, [bytearray(BIG.chunk_bytes) for _ in range(4)])
                outcomes.append("done")
            except kvtier.KvtierError as e:
                outcomes.append("closed" if "closed" in str(e) else f"other: {e}")

        threads = [threading.Thread(target=loader) for _ in range(3)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.002 * (round_ % 4))  # let some loads get inside C first
        store.close()
        for t in threads:
            t.join()
        assert len(outcomes) == 3 and all(o in ("done", "closed") for o in outcomes), outcomes
        with pytest.raises(kvtier.KvtierError):
            store.load(ns, keys, [bytearray(BIG.chunk_bytes) for _ in range(4)])
        ns.close()
