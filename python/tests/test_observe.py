"""Context managers, stats() and metrics_text()."""
import pytest

import kvtier
from conftest import CHUNK, LAYOUT, chunk_bytes, tokens


def test_context_managers_close():
    with kvtier.Store(["mem://?capacity=16MiB"]) as store:
        with store.namespace("test/model", LAYOUT) as ns:
            keys = ns.chunk_keys(tokens(1))
            store.save(ns, keys, [chunk_bytes(0)])
            assert store.lookup(ns, keys) == 1
        with pytest.raises(kvtier.KvtierError):
            store.lookup(ns, keys)  # namespace closed
    with pytest.raises(kvtier.KvtierError) as e:
        store.flush()
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    store.close()  # idempotent


def test_stats_counts_loads(saved):
    store, ns, keys = saved
    before = store.stats()
    assert store.load(ns, keys, [bytearray(CHUNK) for _ in keys]) == 4
    after = store.stats()
    assert after["loads"] == before["loads"] + 1
    assert after["load_chunks"] == before["load_chunks"] + 4
    assert isinstance(after["tiers"], list) and len(after["tiers"]) == 1


def test_prefetch_and_flush(saved):
    store, ns, keys = saved
    store.prefetch(ns, keys)
    store.flush()


def test_metrics_text(saved):
    store, ns, keys = saved
    store.load(ns, keys, [bytearray(CHUNK) for _ in keys])
    text = store.metrics_text()
    if not text:
        pytest.skip("kvtier_store_metrics_text returns no text yet (Prometheus metrics not in this build)")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines and all(line.startswith("kvtier_") for line in lines)
