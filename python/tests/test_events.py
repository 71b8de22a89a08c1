"""Chunk events from the Python package (Store(events=...)): a subscriber decodes the msgpack batches
(vLLM's KV event batch shape, docs/serve.md) and sees every stored, evicted and removed chunk of a
scripted workload, in order, per medium."""
from __future__ import annotations

import socket
import time

import pytest

import kvtier

from conftest import LAYOUT, chunk_bytes, tokens

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")


def open_with_subscriber(tiers, **options):
    """A store publishing on a free loopback port, and a SUB socket connected to it."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            store = kvtier.Store(tiers, events=f"tcp://127.0.0.1:{port}", **options)
            break
        except kvtier.KvtierError:  # taken meanwhile: another port
            continue
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 60000)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://127.0.0.1:{port}")
    return store, sub


def wait_subscribed(store: kvtier.Store) -> None:
    # Until the publisher has the subscription ZeroMQ would drop what it sends. No time is asserted:
    # 60 s only guards against a hang.
    for _ in range(6000):
        if store.stats()["events"]["subscribers"] >= 1:
            return
        time.sleep(0.01)
    raise AssertionError("the publisher never saw the subscriber")


def receive(sub, count: int) -> list[tuple[str, bytes, str, list]]:
    """(kind, key, medium, fields) of the next `count` events; checks topic and sequence frames."""
    out, seq = [], None
    while len(out) < count:
        topic, seq_frame, payload = sub.recv_multipart()
        assert topic == b"kvtier"
        n = int.from_bytes(seq_frame, "big")
        assert seq is None or n == seq + 1, "sequence numbers are consecutive"
        seq = n
        ts, events = msgpack.unpackb(payload, raw=False)
        assert isinstance(ts, float)
        for e in events:
            assert len(e[1]) == 1
            medium = e[6] if e[0] == "BlockStored" else e[2]
            out.append((e[0], e[1][0], medium, e))
    return out


def save_each(store, ns, n):
    keys = ns.chunk_keys(tokens(n))
    for i, k in enumerate(keys):
        store.save(ns, [k], [chunk_bytes(i)])
    return keys


def of(events, kind, medium):
    return [key for k, key, m, _ in events if k == kind and m == medium]


def test_stored_and_evicted_chunks_in_order(file_dir):
    # A file:// tier of room for four 2 KiB chunks (8 KiB each on disk) under a memory tier that keeps
    # all twelve: one background writer, so the file tier stores them in save order and evicts the
    # oldest eight.
    tiers = ["mem://?capacity=64KiB&page=2048", f"file://{file_dir}?capacity=32KiB"]
    store, sub = open_with_subscriber(tiers, background_threads=1)
    with store:
        wait_subscribed(store)
        ns = store.namespace("test/events", LAYOUT)
        keys = save_each(store, ns, 12)
        store.flush()
        told = store.stats()["events"]["told"]
        events = receive(sub, told)
        assert of(events, "BlockStored", "CPU") == keys
        assert of(events, "BlockStored", "DISK") == keys
        assert of(events, "BlockRemoved", "DISK") == keys[:8]
        assert of(events, "BlockRemoved", "CPU") == []
        stats = store.stats()
        assert stats["tiers"][1]["evictions"] == 8
        assert stats["events"]["published"] == told and stats["events"]["dropped"] == 0
        stored = [e for k, _, _, e in events if k == "BlockStored"]
        assert all(e[4] == LAYOUT.tokens_per_chunk for e in stored)           # block_size
        assert all(e[8] == [[bytes.fromhex(ns.id)]] for e in stored)          # extra_keys: the namespace
        assert "kvtier_events_published_total" in store.metrics_text()
    sub.close()


def test_memory_evictions_and_removals_in_order():
    store, sub = open_with_subscriber(["mem://?capacity=16KiB&page=2048"])  # room for eight
    with store:
        wait_subscribed(store)
        ns = store.namespace("test/events", LAYOUT)
        keys = save_each(store, ns, 12)
        store.remove(ns, [keys[11]])
        events = receive(sub, store.stats()["events"]["told"])
        assert [(k, key) for k, key, _, _ in events] == (
            [("BlockStored", k) for k in keys[:8]]
            + [x for i in range(8, 12) for x in (("BlockRemoved", keys[i - 8]), ("BlockStored", keys[i]))]
            + [("BlockRemoved", keys[11])])
    sub.close()


def test_bad_endpoint_is_refused():
    with pytest.raises(kvtier.KvtierError):
        kvtier.Store(["mem://?capacity=1MiB"], events="not-an-endpoint")
