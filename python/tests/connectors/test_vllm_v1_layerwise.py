"""Layer-wise loads of KvtierConnector: ``wait_for_layer_load(layer)`` waits only for that layer's
bytes (kvtier reports each verified piece of a chunk as it lands: Handle.wait_bytes), and a chunk whose
late layer fails verification after its first layers landed is still a load error, recomputed.

The library side (a chunk's first bytes reported before the rest lands, with the tier held at a gate,
and a chunk that fails after reporting never read again from a slower tier) is tested in C++:
tests/store/store_progress_test.cc."""

from __future__ import annotations

import pathlib
import sys
import threading

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import corrupt_chunk, file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import FlashAttnCache, MiniEngine, reference_rows  # noqa: E402

import kvtier  # noqa: E402
from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import worker as vllm_worker  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

# 4 MiB chunks (4 layers x 1 MiB): the chunk format cuts them into 1 MiB pieces, one per layer.
BS, CHUNK, LAYERS, HEADS, DIM, BLOCKS = 16, 128, 4, 8, 128, 24
SPEC = ModelSpec(model="test/llama-layerwise", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="float32", block_size=BS)
LAYER_BYTES = 2 * CHUNK * HEADS * DIM * 4


def engine(url):
    cfg = {"tiers": url, "chunk_tokens": CHUNK}
    sched, worker = KvtierConnectorCore("scheduler", SPEC, cfg), KvtierConnectorCore("worker", SPEC, cfg)
    return MiniEngine(sched, worker, FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM), BLOCKS)


def close(eng):
    eng.worker.shutdown()
    eng.sched.shutdown()


def prompt(seed, n):
    return [(seed * 7919 + i * 31) % 32000 for i in range(n)]


def saved(url, tokens):
    first = engine(url)
    first.add("first", tokens)
    first.run()
    close(first)


class GatedHandle:
    """A real load's handle whose waits for more than layer 0's bytes are held until ``gate`` is set:
    a storage device still reading the later layers."""

    def __init__(self, handle, gate, asked):
        self._h, self._gate, self._asked = handle, gate, asked

    def wait_bytes(self, nbytes, timeout=None):
        self._asked.append(nbytes)
        if nbytes > LAYER_BYTES:
            self._gate.wait()
        return self._h.wait_bytes(nbytes, timeout)

    def __getattr__(self, name):
        return getattr(self._h, name)


@pytest.mark.parametrize("kind", ["file", "shm"])
def test_layer_waits_ask_for_that_layers_bytes_and_layer0_is_usable_first(kind, file_tier, tmp_path,
                                                                          monkeypatch):
    url = file_tier[0] if kind == "file" else f"shm://layerwise?dir={tmp_path}&capacity=32MiB"
    tokens = prompt(1, 2 * CHUNK + 1)
    saved(url, tokens)
    eng = engine(url)
    gate, asked, layer0_ok = threading.Event(), [], []
    real_load = vllm_worker.load_async
    monkeypatch.setattr(vllm_worker, "load_async", lambda *a: GatedHandle(real_load(*a), gate, asked))
    req = eng.add("a", tokens)
    real_wait = eng.worker.wait_for_layer_load

    def wait(name):
        real_wait(name)
        if name == eng.cache.names[0] and not gate.is_set():
            # Layer 0 of both chunks is verified and in the blocks; the later layers' waits are held.
            layer0_ok.append(all(torch.equal(eng.cache.read_rows(0, kv, req.block_ids, 0, 2 * CHUNK),
                                             reference_rows(tokens, 0, 2 * CHUNK, 0, kv, HEADS * DIM))
                                 for kv in (0, 1)))
            gate.set()

    monkeypatch.setattr(eng.worker, "wait_for_layer_load", wait)
    eng.run()
    assert layer0_ok == [True]
    assert asked == [LAYER_BYTES * (i + 1) for i in range(LAYERS)]
    assert eng.kv_ok["a"] and not eng.load_error_blocks
    assert eng.worker.stats()["loaded_chunks"] == 2
    close(eng)


def test_corrupt_piece_in_the_last_layer_is_a_load_error_and_recomputed(file_tier):
    url, tier_dir = file_tier
    tokens = prompt(2, 2 * CHUNK + 1)
    saved(url, tokens)
    eng = engine(url)
    key0 = eng.worker.namespace.chunk_keys(tokens[:CHUNK])[0]
    corrupt_chunk(tier_dir, key0, payload_offset=LAYERS * LAYER_BYTES - 100)  # chunk 0, last layer's V
    eng.add("a", tokens)
    eng.run()
    assert eng.kv_ok["a"]                     # recomputed, never served
    stats = eng.worker.stats()
    assert stats["loaded_chunks"] == 0 and stats["load_errors"] == 1
    assert stats["error_blocks"] == 2 * (CHUNK // BS)   # chunk 0 failed late; chunk 1 is past it
    assert len(eng.load_error_blocks) == 2 * (CHUNK // BS)
    close(eng)


def test_handle_wait_bytes_counts_the_leading_chunks_that_landed():
    layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp32", tokens_per_chunk=16)
    store = kvtier.Store(["mem://?capacity=1MiB"])
    ns = kvtier.Namespace("test/wait-bytes", layout)
    keys = ns.chunk_keys(list(range(4 * 16)))
    cb = layout.chunk_bytes
    data = [bytes([i + 1]) * cb for i in range(4)]
    store.save(ns, [keys[0], keys[1], keys[3]], [data[0], data[1], data[3]])   # chunk 2 missing
    bufs = [bytearray(cb) for _ in range(4)]
    with store.load_async(ns, keys, bufs) as h:
        assert h.wait_bytes(cb // 2) == 2       # the load ends at the missing chunk
        assert h.wait_bytes(10 * cb) == 2       # more than a chunk counts as the whole chunk
        assert h.wait() == 2
    assert bytes(bufs[0]) == data[0] and bytes(bufs[1]) == data[1]
    with store.save_async(ns, keys[:1], [data[0]]) as s:
        with pytest.raises(kvtier.KvtierError):
            s.wait_bytes(1)
    store.close()
