"""Context managers, stats() and metrics_text()."""
import os
import subprocess

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


def _prom_check(text):
    """Checks text with tests/metrics' strict Prometheus parser (prom_check, set by ctest)."""
    tool = os.environ.get("KVTIER_PROM_CHECK")
    if not tool:
        pytest.skip("KVTIER_PROM_CHECK not set (ctest sets it to build/tests/metrics/prom_check)")
    return subprocess.run([tool], input=text.encode(), capture_output=True)


def test_metrics_text(saved):
    store, ns, keys = saved
    store.lookup(ns, keys)
    assert store.load(ns, keys, [bytearray(CHUNK) for _ in keys]) == 4
    text = store.metrics_text()
    checked = _prom_check(text)
    assert checked.returncode == 0, checked.stderr.decode()
    label = 'namespace="%s"' % ns.id[:16]
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line and not line.startswith("#")}
    assert samples["kvtier_load_chunks_total{%s}" % label] == 4
    assert samples["kvtier_lookup_hit_tokens_total{%s}" % label] == 4 * LAYOUT.tokens_per_chunk
    assert samples['kvtier_load_latency_seconds_count{%s}' % label] == 1


def test_prom_check_rejects_malformed_text():
    """The checker above can fail: a counter sample without its TYPE line is refused."""
    checked = _prom_check("kvtier_loads_total 1\n")
    assert checked.returncode == 1 and b"F1" in checked.stderr
