"""vLLM connector: identity matrix and the regression tests of issue 22.

Call conventions: vllm/v1/kv_offload/tiering/factory.py builds
``tier_cls(vllm_config=..., primary_kv_view=..., tier_type=..., **config)`` (other revisions pass
``offloading_spec=`` and extra engine arguments such as ``tier_name=`` or
``backpressure_detector=``; older ones key a registry by ``get_tier_type()`` or
``SecondaryTierFactory.register_tier``); the scheduler calls ``lookup(key, req_context)`` and asks
again while the answer is None/RETRY, ``submit_store`` / ``submit_load`` then polls
``get_finished`` each step, and ``shutdown`` on exit, after which vLLM closes its shared memory.
"""

from __future__ import annotations

import itertools
import mmap
import types

import numpy as np
import pytest

import kvtier
from connector_helpers import file_tier, requires_library, wait_for  # noqa: F401
from test_vllm import (BLOCK_BYTES, NUM_BLOCKS, Primary, TransferJob, block_data, is_hit, is_miss,
                       is_retry, offload_key)

pytestmark = requires_library

from kvtier.connectors import vllm as kv_vllm  # noqa: E402
from kvtier.connectors.vllm import KvtierSecondaryTier  # noqa: E402


def vllm_config(tp=1, dtype="auto", revision="main", mla=False, block_size=16, model="org/model"):
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(model=model, revision=revision, use_mla=mla),
        cache_config=types.SimpleNamespace(cache_dtype=dtype, block_size=block_size,
                                           prefix_caching_hash_algo="sha256"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                              decode_context_parallel_size=1))


def new_tier(primary, cfg, **config):
    """What the factory of vllm/v1/kv_offload/tiering/factory.py does."""
    return KvtierSecondaryTier(vllm_config=cfg, primary_kv_view=primary.view, tier_type="kvtier",
                               **config)


def settle(tier):
    results = {}
    wait_for(lambda: [results.update({r.job_id: r.success for r in tier.get_finished_jobs()})] and
             not tier.has_pending_work(), "jobs to finish")
    return results


def answer(tier, key):
    """lookup asked again while RETRY, as the scheduler does on later steps."""
    return wait_for(lambda: (lambda a: None if is_retry(a) else [a])(tier.lookup(key, None)),
                    "a lookup answer")[0]


MATRIX = list(itertools.product((1, 2), ("auto", "fp8"), ("main", "v2"), (False, True), (16, 32)))


def test_cross_configuration_matrix_misses_unless_equal(tmp_path):
    """TP size, KV dtype, revision, MLA and block tokens: rows of the same size under X and Y; X != Y
    is always a miss, X == Y a byte-exact hit."""
    url = f"file://{tmp_path}/pool?capacity=128MiB"
    with kvtier.Store(["mem://?capacity=64MiB", url]) as store:
        prims = [Primary() for _ in MATRIX]
        tiers = [new_tier(p, vllm_config(*c), store=store) for p, c in zip(prims, MATRIX)]
        for x, (tier, prim) in enumerate(zip(tiers, prims)):
            prim.fill(0, x)
            tier.submit_store(TransferJob(x, [offload_key(x)], np.array([0]), False))
        for tier in tiers:
            assert set(settle(tier).values()) == {True}
        wrong = []
        for x, (y, tier) in itertools.product(range(len(MATRIX)), enumerate(tiers)):
            a = answer(tier, offload_key(x))
            if x == y:
                assert is_hit(a), MATRIX[x]
                prims[y].array[5] = 0
                tier.submit_load(TransferJob(1000 + x, [offload_key(x)], np.array([5]), True))
                assert settle(tier) == {1000 + x: True}
                assert np.array_equal(prims[y].array[5], block_data(x))
            elif not is_miss(a):
                wrong.append((MATRIX[x], MATRIX[y]))
        assert not wrong, f"{len(wrong)} pairs shared a block, e.g. {wrong[:3]}"
        for tier in tiers:
            tier.shutdown()


def test_tp_sizes_never_share_rows(file_tier):
    """Issue 22: TP=1 and TP=2 rows have the same size and a different byte order; the namespace
    was model + row size + a fixed salt."""
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        p1, p2 = Primary(), Primary()
        tp1, tp2 = new_tier(p1, vllm_config(tp=1), store=store), new_tier(p2, vllm_config(tp=2), store=store)
        p1.fill(0, 7)
        tp1.submit_store(TransferJob(1, [offload_key(7)], np.array([0]), False))
        assert settle(tp1) == {1: True}
        assert is_hit(answer(tp1, offload_key(7)))
        assert is_miss(answer(tp2, offload_key(7)))
        assert tp1.identity.get("tp_size") == "1" and tp2.identity.get("tp_size") == "2"
        tp1.shutdown()
        tp2.shutdown()


@pytest.mark.parametrize("scheme", ["file", "fs"])
def test_lookup_right_after_a_successful_store_is_never_a_miss(tmp_path, scheme):
    """Issue 22: a store job reported success once kvtier had a copy; an immediate lookup said miss
    (or RETRY, MISS, then HIT on fs://). Now every answer after success is RETRY until HIT."""
    url = f"{scheme}://{tmp_path}/t?capacity=64MiB"
    primary = Primary()
    tier = new_tier(primary, vllm_config(), tiers=[url])  # fs://: lookups on a thread (async_lookup)
    try:
        for job in range(3 if scheme == "file" else 1):  # one job of every primary slot, written in the background
            keys = [offload_key(100 + NUM_BLOCKS * job + i) for i in range(NUM_BLOCKS)]
            for i in range(NUM_BLOCKS):
                primary.fill(i, 100 + NUM_BLOCKS * job + i)
            tier.submit_store(TransferJob(job, keys, np.arange(NUM_BLOCKS), False))
            assert settle(tier) == {job: True}
            for k in reversed(keys):  # the last written first: the least likely to be visible yet
                answers = []
                while not answers or is_retry(answers[-1]):
                    answers.append(tier.lookup(k, None))
                assert is_hit(answers[-1]), answers  # RETRY..., HIT: never a MISS in between
    finally:
        tier.shutdown()


def test_unknown_engine_arguments_are_ignored_and_old_revisions_register(file_tier):
    """Issue 22: a factory revision passing tier_name= broke construction; older revisions need
    get_tier_type() and SecondaryTierFactory.register_tier."""
    url, _ = file_tier
    tier = new_tier(Primary(), vllm_config(), tiers=[url], tier_name="cold",
                    backpressure_detector=object(), some_future_argument=3)
    assert tier.tier_name == "cold"
    tier.shutdown()
    assert KvtierSecondaryTier.get_tier_type() == "kvtier"

    class Factory:  # the shape of factory.py's SecondaryTierFactory
        _registry: dict = {}

        @classmethod
        def register_tier(cls, tier_type, module_path, class_name):
            if tier_type in cls._registry:
                raise ValueError("already registered")
            cls._registry[tier_type] = (module_path, class_name)

    kv_vllm.register(Factory)
    kv_vllm.register(Factory)  # twice is a no-op
    assert Factory._registry == {"kvtier": ("kvtier.connectors.vllm", "KvtierSecondaryTier")}
    old = types.SimpleNamespace(_TIER_REGISTRY={})  # the revision keyed by get_tier_type()
    kv_vllm.register(old)
    assert old._TIER_REGISTRY == {"kvtier": KvtierSecondaryTier}
    with pytest.raises(ValueError, match="unknown vLLM block layout"):
        new_tier(Primary(), vllm_config(), tiers=[url], layout="block_major")


def test_shutdown_releases_the_view_so_shared_memory_can_close(tmp_path):
    """Issue 22: the connector kept a view over vLLM's shared memory, so mmap.close() raised
    BufferError."""
    mm = mmap.mmap(-1, NUM_BLOCKS * BLOCK_BYTES)
    view = memoryview(mm).cast("B", (NUM_BLOCKS, BLOCK_BYTES))
    primary = types.SimpleNamespace(view=view)
    tier = new_tier(primary, vllm_config(), tiers=[f"file://{tmp_path}?capacity=16MiB"])
    mm[0:BLOCK_BYTES] = bytes(block_data(1))
    tier.submit_store(TransferJob(1, [offload_key(1)], np.array([0]), False))
    tier.submit_load(TransferJob(2, [offload_key(1)], np.array([3]), True))
    tier.shutdown()
    view.release()  # vLLM's own view
    mm.close()  # raised BufferError while kvtier held a view


def test_hash_seed_is_part_of_the_identity(file_tier, monkeypatch):
    url, _ = file_tier
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    a = new_tier(Primary(), vllm_config(), tiers=[url])
    monkeypatch.setenv("PYTHONHASHSEED", "1")
    b = new_tier(Primary(), vllm_config(), tiers=[url])
    monkeypatch.delenv("PYTHONHASHSEED")
    c = new_tier(Primary(), vllm_config(), tiers=[url])
    assert a.identity.get("hash_seed") == "0" and b.identity.get("hash_seed") == "1"
    assert c.identity.get("hash_seed").startswith("per-process-")
    assert len({a.namespace.id, b.namespace.id, c.namespace.id}) == 3
    for t in (a, b, c):
        t.shutdown()


def test_events_stats_and_medium(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = new_tier(primary, vllm_config(), tiers=[url], medium="kvtier-file")
    try:
        primary.fill(0, 3)
        tier.submit_store(TransferJob(1, [offload_key(3)], np.array([0]), False))
        assert settle(tier) == {1: True}
        events = list(tier.take_events())
        assert [(e.keys, e.removed, e.medium) for e in events] == [([offload_key(3)], False, "kvtier-file")]
        assert list(tier.take_events()) == []
        assert tier.remove([offload_key(3)])
        assert [e.removed for e in tier.take_events()] == [True]
        assert is_miss(answer(tier, offload_key(3)))
        stats = tier.get_stats()
        assert stats["medium"] == "kvtier-file" and stats["saves"] >= 1 and stats["lookups"] >= 1
    finally:
        tier.shutdown()


@pytest.mark.parametrize("a, b", [
    ({"quantization": "awq", "dtype": "torch.float16"}, {"quantization": None, "dtype": "torch.float16"}),
    ({"dtype": "torch.bfloat16"}, {"dtype": "torch.float16"}),
])
def test_rows_of_engines_whose_weights_differ_never_match(file_tier, a, b):
    """Issue 43: vLLM's block hashes carry the adapter, images and salt but not the weights; AWQ and
    unquantized engines, and bf16- and fp16-weight engines with the same --kv-cache-dtype, had one
    namespace. A row one stores is a miss for the other, a hit for its own configuration."""
    url, _ = file_tier

    def cfg(fields):
        c = vllm_config(dtype="bfloat16")
        for name, value in fields.items():
            setattr(c.model_config, name, value)
        return c

    with kvtier.Store([url]) as store:
        prims = [Primary() for _ in range(3)]
        first, other, same = (new_tier(p, cfg(f), store=store) for p, f in zip(prims, (a, b, a)))
        prims[0].fill(0, 7)
        first.submit_store(TransferJob(1, [offload_key(7)], np.array([0]), False))
        assert settle(first) == {1: True}
        store.flush()  # in the file:// tier: the other tier objects have no read-your-writes of first's rows
        assert is_miss(answer(other, offload_key(7)))
        assert is_hit(answer(same, offload_key(7)))
        assert first.identity.get("weight_dtype") == a["dtype"].replace("torch.", "")
        for tier in (first, other, same):
            tier.shutdown()
