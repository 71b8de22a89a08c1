"""kvtier as an L2 adapter of the real LMCache (PyPI lmcache 0.5.6, its venv: scripts/engines-venv.sh lmcache).

Everything LMCache-side is the installed package: the ``--l2-adapter`` argument parser of its servers
(``add_l2_adapters_args`` / ``parse_args_to_l2_adapters_config``), its adapter factory
(``create_l2_adapter_from_registry``: type ``native_plugin`` imports kvtier's class and wraps it in
``NativeConnectorL2Adapter``, whose demux thread drains kvtier's completions), ``ObjectKey`` and memory
objects (``TensorMemoryObj``) allocated by its ``TensorMemoryAllocator``; the last test runs its
``lmcache bench l2`` command. Run: ``make test-engines`` (or pytest on this file with the venv's Python).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import select
import subprocess
import sys
import time

import pytest
import torch
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters.config import add_l2_adapters_args, parse_args_to_l2_adapters_config
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter
from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.platform import consume_fd

from kvtier.connectors import engine_key
from kvtier.connectors.lmcache import KvtierNativeConnector

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "connectors"))
from connector_helpers import corrupt_chunk, make_file_tier  # noqa: E402

FULL = torch.Size([2, 2, 256, 64])   # KV_2LTD: K/V, layers, tokens, head dim: a full chunk, bf16
TAIL = torch.Size([2, 2, 96, 64])    # a shorter last chunk: another object size
MODEL = "kvtier-test/tiny"
HERE = pathlib.Path(__file__).resolve().parent


def adapter_json(tier_url: str, **params) -> str:
    return json.dumps({"type": "native_plugin", "module_path": "kvtier.connectors.lmcache",
                       "class_name": "KvtierNativeConnector",
                       "adapter_params": {"tiers": [tier_url], **params}})


def make_adapter(tier_url: str, **params) -> NativeConnectorL2Adapter:
    """As LMCache's MP server builds it: the --l2-adapter flag parsed, then its factory."""
    parser = add_l2_adapters_args(argparse.ArgumentParser())
    args = parser.parse_args(["--l2-adapter", adapter_json(tier_url, **params)])
    (config,) = parse_args_to_l2_adapters_config(args).adapters
    adapter = create_l2_adapter_from_registry(config)
    assert isinstance(adapter, NativeConnectorL2Adapter), type(adapter)
    assert isinstance(adapter._client, KvtierNativeConnector), type(adapter._client)
    return adapter


@pytest.fixture
def tier(tmp_path):
    return make_file_tier(tmp_path, "256MiB")


@pytest.fixture
def allocator():
    return TensorMemoryAllocator(torch.empty(64 << 20, dtype=torch.uint8))


def key(i: int, **fields) -> ObjectKey:
    args = {"chunk_hash": hashlib.sha256(f"chunk-{i}".encode()).digest(), "model_name": MODEL,
            "kv_rank": 0}
    args.update(fields)
    return ObjectKey(**args)


def objects(allocator, shapes, seed: int | None):
    """LMCache memory objects of ``shapes`` (bf16); filled with random bits, or zeroed (seed None)."""
    out = []
    for j, shape in enumerate(shapes):
        obj = allocator.allocate(shape, torch.bfloat16, MemoryFormat.KV_2LTD)
        assert obj is not None
        raw = obj.raw_data.view(torch.uint8)
        if seed is None:
            raw.zero_()
        else:
            gen = torch.Generator().manual_seed(seed * 1000 + j)
            raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
        out.append(obj)
    return out


def raw(obj) -> bytes:
    return bytes(obj.byte_array)


def wait(fd: int, fetch, what: str):
    """Polls LMCache's event fd until ``fetch()`` answers; the limit only guards against a hang."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + 60
    while True:
        result = fetch()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        if poller.poll(50):
            consume_fd(fd)


def store(adapter, keys, objs) -> int:
    task = adapter.submit_store_task(keys, objs)
    result = wait(adapter.get_store_event_fd(), lambda: adapter.pop_completed_store_tasks().get(task), "store")
    assert result.is_successful(), int(result)
    return result.bytes_transferred()


def lookup(adapter, keys) -> list[bool]:
    task = adapter.submit_lookup_and_lock_task(keys, {})
    bitmap = wait(adapter.get_lookup_and_lock_event_fd(),
                  lambda: adapter.query_lookup_and_lock_result(task), "lookup")
    adapter.submit_unlock(keys)
    return [bool(bitmap.test(i)) for i in range(len(keys))]


def load(adapter, keys, objs) -> list[bool]:
    task = adapter.submit_load_task(keys, objs)
    bitmap = wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task), "load")
    return [bool(bitmap.test(i)) for i in range(len(keys))]


def test_store_lookup_load_round_trip_of_two_object_sizes(tier, allocator):
    url, _ = tier
    keys = [key(i) for i in range(6)]
    shapes = [FULL] * 5 + [TAIL]
    stored = objects(allocator, shapes, seed=1)
    adapter = make_adapter(url)
    try:
        assert store(adapter, keys, stored) == sum(o.get_size() for o in stored)
        assert lookup(adapter, keys + [key(99)]) == [True] * 6 + [False]
        loaded = objects(allocator, shapes, seed=None)
        assert load(adapter, keys, loaded) == [True] * 6
        assert [raw(o) for o in loaded] == [raw(o) for o in stored]
        assert adapter.report_status()["is_healthy"]
    finally:
        adapter.close()


def test_restarted_adapter_finds_and_loads_every_size_without_chunk_bytes(tier, allocator):
    url, _ = tier
    keys = [key(i) for i in range(3)]
    shapes = [FULL, FULL, TAIL]
    stored = objects(allocator, shapes, seed=2)
    first = make_adapter(url)
    store(first, keys, stored)
    first.close()
    second = make_adapter(url)  # another process's adapter on the same tier: the size registry
    try:
        assert lookup(second, keys) == [True] * 3
        loaded = objects(allocator, shapes, seed=None)
        assert load(second, keys, loaded) == [True] * 3
        assert [raw(o) for o in loaded] == [raw(o) for o in stored]
    finally:
        second.close()


def test_identity_other_keys_salts_models_and_sizes_miss(tier, allocator):
    url, _ = tier
    stored = objects(allocator, [FULL], seed=3)
    adapter = make_adapter(url, model_id="model-a")
    store(adapter, [key(0)], stored)
    others = [key(0, model_name="other/model"), key(0, kv_rank=1), key(0, object_group_id=1),
              key(0, cache_salt="tenant-1"), key(1)]
    assert lookup(adapter, [key(0)] + others) == [True] + [False] * len(others)
    wrong_size = objects(allocator, [TAIL], seed=None)  # the same key, another object size
    assert load(adapter, [key(0)], wrong_size) == [False]
    adapter.close()
    for params in ({"model_id": "model-b"}, {"model_id": "model-a", "salt": "s1"}):
        other = make_adapter(url, **params)  # kvtier's own identity: never the same namespace
        try:
            assert lookup(other, [key(0)]) == [False]
            target = objects(allocator, [FULL], seed=None)
            assert load(other, [key(0)], target) == [False]
            assert raw(target[0]) == bytes(len(raw(target[0])))
        finally:
            other.close()


def test_corrupt_object_fails_its_load_and_is_zeroed(tier, allocator):
    url, tier_dir = tier
    keys = [key(i) for i in range(3)]
    stored = objects(allocator, [FULL] * 3, seed=4)
    adapter = make_adapter(url, exists_threads=2)
    try:
        store(adapter, keys, stored)
        adapter._client.store.flush()  # the chunk files are on disk
        corrupt_chunk(tier_dir, engine_key(f"{MODEL}@00000000@0@{keys[1].chunk_hash.hex()}"))
        loaded = objects(allocator, [FULL] * 3, seed=9)  # poison: not zero, not the stored bytes
        assert load(adapter, keys, loaded) == [True, False, False]
        assert raw(loaded[0]) == raw(stored[0])
        assert raw(loaded[1]) == bytes(len(raw(loaded[1])))
        assert raw(loaded[1]) != raw(stored[1])
    finally:
        adapter.close()


def test_delete_removes_objects_and_usage_follows(tier, allocator):
    url, _ = tier
    keys = [key(i) for i in range(4)]
    stored = objects(allocator, [FULL] * 4, seed=5)
    adapter = make_adapter(url)
    try:
        size = store(adapter, keys, stored)
        assert adapter.get_usage().total_bytes_used == size  # LMCache's own accounting of the stores
        adapter._client.store.flush()  # kvtier counts a chunk once its write has landed
        kvtier_usage = adapter._client.get_usage()
        assert kvtier_usage["chunks"] >= 4 and kvtier_usage["usage_bytes"] >= size
        adapter.delete(keys[:2])
        assert lookup(adapter, keys) == [False, False, True, True]
        adapter._client.store.flush()
        assert adapter._client.get_usage()["chunks"] == kvtier_usage["chunks"] - 2
        assert adapter.get_usage().total_bytes_used == size // 2
    finally:
        adapter.close()


# ---- lmcache bench l2 --------------------------------------------------------------------------------

def bench(tier_url: str, adapter_module: str = "kvtier.connectors.lmcache",
          class_name: str = "KvtierNativeConnector") -> subprocess.CompletedProcess:
    spec = json.dumps({"type": "native_plugin", "module_path": adapter_module, "class_name": class_name,
                       "adapter_params": {"tiers": [tier_url]}})
    lmcache = pathlib.Path(sys.executable).parent / "lmcache"
    env = dict(os.environ, PYTHONPATH=f"{HERE}:{HERE.parent.parent}")  # this clone's kvtier, as pytest's
    return subprocess.run([str(lmcache), "bench", "l2", "--l2-adapter", spec, "--num-keys", "16",
                           "--data-size-kb", "256", "--rounds", "3", "--warmup-rounds", "1",
                           "--no-skip-verify"], env=env, capture_output=True, text=True, timeout=300)


def test_lmcache_bench_l2_round_trips_through_kvtier(tmp_path):
    run = bench(f"file://{tmp_path}?capacity=256MiB")
    out = run.stdout + run.stderr
    print(out)  # the bench's figures, for the report (pytest -s)
    assert run.returncode == 0, out[-4000:]
    assert "[Verify] All 16 keys data verified OK." in out, out[-4000:]


def test_lmcache_bench_l2_fails_when_a_loaded_byte_is_wrong(tmp_path):
    """The deliberate break: flipping_connector.py flips one byte of every loaded object."""
    run = bench(f"file://{tmp_path}?capacity=256MiB", "flipping_connector", "FlippingConnector")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-4000:]
    assert "MISMATCH" in out, out[-4000:]
