"""Driver test of kvtier.connectors.vllm: calls the secondary tier the way vLLM's tiering manager does.

Sequence reproduced (vllm/v1/kv_offload/tiering/base.py, spec.py and factory.py of vLLM):
  1. construction by the tier factory: tier_cls(offloading_spec=spec, primary_kv_view=view,
     tier_type=..., **tier_config) with view a 2-D (num_blocks, bytes_per_block) byte view;
  2. on_new_request(req_context), then lookup(key, req_context) per block, asked again on a
     later step while the answer is RETRY;
  3. submit_store(job) with the primary slots holding the blocks (cascade), submit_load(job) with
     freshly allocated slots (promotion); job = (job_id, keys, chunk_ids, is_promotion, req_context);
  4. get_finished_jobs() once per scheduler step, which must not block;
  5. touch(keys, req_context), on_request_finished(req_context);
  6. drain_jobs() on a cache reset, shutdown() on exit -- possibly with jobs in flight.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types

import numpy as np
import pytest

from connector_helpers import corrupt_chunk, wait_for, file_tier, requires_library, tiny_file_tier  # noqa: F401

pytestmark = requires_library

BLOCK_BYTES = 32 * 1024
NUM_BLOCKS = 64


@dataclasses.dataclass
class TransferJob:  # the fields vLLM's tiering manager hands to a tier
    job_id: int
    keys: list
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: object = None


def offload_key(i: int) -> bytes:
    """vLLM's OffloadKey: a block hash followed by the KV-cache group index (4 bytes)."""
    return hashlib.sha256(f"block-{i}".encode()).digest() + (0).to_bytes(4, "big")


def block_data(i: int) -> np.ndarray:
    return np.random.default_rng(1000 + i).integers(0, 256, BLOCK_BYTES, dtype=np.uint8)


class Primary:
    """A stand-in for the pinned CPU primary tier: NUM_BLOCKS rows of BLOCK_BYTES."""

    def __init__(self):
        self.array = np.zeros((NUM_BLOCKS, BLOCK_BYTES), dtype=np.uint8)
        self.view = memoryview(self.array)  # 2-D, format "B", strides[0] == BLOCK_BYTES

    def fill(self, slot: int, i: int):
        self.array[slot] = block_data(i)


def make_tier(tiers, primary, **config):
    from kvtier.connectors.vllm import KvtierSecondaryTier
    spec = types.SimpleNamespace(vllm_config=types.SimpleNamespace(
        model_config=types.SimpleNamespace(model="meta-llama/Llama-3.1-8B")))
    return KvtierSecondaryTier(offloading_spec=spec, primary_kv_view=primary.view,
                               tier_type="kvtier", tiers=tiers, **config)


def is_hit(answer) -> bool:
    return answer is True or getattr(answer, "name", None) == "HIT"


def is_miss(answer) -> bool:
    return answer is False or getattr(answer, "name", None) == "MISS"


def is_retry(answer) -> bool:
    return answer is None or getattr(answer, "name", None) == "RETRY"


def finish(tier, job_ids) -> dict:
    """Calls get_finished_jobs() once per 'step' until every job has reported."""
    results = {}

    def step():
        for r in tier.get_finished_jobs():
            assert r.job_id not in results, "a job reported twice"
            results[r.job_id] = r
        return set(job_ids) <= set(results)

    wait_for(step, f"jobs {sorted(job_ids)}")
    return results


def store_blocks(tier, primary, first_job, blocks, per_job=4):
    """Stores blocks from the primary tier in jobs of per_job, all submitted before polling."""
    ids = []
    for j, start in enumerate(range(0, len(blocks), per_job)):
        part = blocks[start:start + per_job]
        for b in part:
            primary.fill(b, b)  # block b lives in slot b
        tier.submit_store(TransferJob(first_job + j, [offload_key(b) for b in part],
                                      np.array(part), False))
        ids.append(first_job + j)
    return ids


def test_concurrent_store_then_promote_roundtrip(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = make_tier(["mem://?capacity=16MiB", url], primary)
    try:
        tier.on_new_request(None)
        assert is_miss(tier.lookup(offload_key(0), None))
        ids = store_blocks(tier, primary, 1, list(range(16)))
        # While a store of a key is in flight the answer is "ask again later".
        assert is_retry(tier.lookup(offload_key(3), None))
        results = finish(tier, ids)
        assert all(results[i].success for i in ids)
        assert all(is_hit(tier.lookup(offload_key(b), None)) for b in range(16))
        # Promotion into other slots, two concurrent jobs.
        primary.array[32:48] = 0
        tier.submit_load(TransferJob(100, [offload_key(b) for b in range(8)],
                                     np.arange(32, 40), True))
        tier.submit_load(TransferJob(101, [offload_key(b) for b in range(8, 16)],
                                     np.arange(40, 48), True))
        tier.touch([offload_key(0)], None)
        results = finish(tier, [100, 101])
        assert results[100].success and results[101].success
        for b in range(16):
            assert np.array_equal(primary.array[32 + b], block_data(b)), f"block {b}"
        tier.on_request_finished(None)
    finally:
        tier.shutdown()


def test_missing_block_fails_the_load_and_leaves_no_foreign_bytes(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = make_tier([url], primary)
    try:
        finish(tier, store_blocks(tier, primary, 1, [0, 1]))
        tier.store.flush()  # a file:// top tier is written in the background
        primary.array[10:13] = 0xAB
        keys = [offload_key(0), offload_key(99), offload_key(1)]
        assert is_miss(tier.lookup(offload_key(99), None))
        tier.submit_load(TransferJob(7, keys, np.array([10, 11, 12]), True))
        r = finish(tier, [7])[7]
        assert not r.success
        if getattr(r, "successful_keys", None) is not None:
            assert list(r.successful_keys) == [offload_key(0)]
        assert np.array_equal(primary.array[10], block_data(0))
        for slot in (11, 12):  # never another block's data
            for b in (0, 1):
                assert not np.array_equal(primary.array[slot], block_data(b))
    finally:
        tier.shutdown()


def test_corrupt_chunk_fails_the_load_with_zeroed_slot(file_tier):
    url, tier_dir = file_tier
    primary = Primary()
    tier = make_tier([url], primary)  # no mem:// tier: the load must read the file
    try:
        assert all(r.success for r in finish(tier, store_blocks(tier, primary, 1, [0, 1, 2])).values())
        tier.store.flush()
        from kvtier.connectors import engine_key
        corrupt_chunk(tier_dir, engine_key(offload_key(1)))
        primary.array[20:23] = 0xCD
        keys = [offload_key(b) for b in (0, 1, 2)]
        tier.submit_load(TransferJob(9, keys, np.array([20, 21, 22]), True))
        r = finish(tier, [9])[9]
        assert not r.success
        if getattr(r, "successful_keys", None) is not None:
            assert list(r.successful_keys) == [offload_key(0)]
        assert np.array_equal(primary.array[20], block_data(0))
        assert not primary.array[21].any(), "the corrupt block's slot must be zeroed"
        for slot in (21, 22):
            for b in (0, 1, 2):
                assert not np.array_equal(primary.array[slot], block_data(b))
        # The corrupt chunk is gone: the tier now reports a miss for it.
        assert is_miss(tier.lookup(offload_key(1), None))
    finally:
        tier.shutdown()


def test_full_tier_drops_the_store_softly(tiny_file_tier):
    url, _ = tiny_file_tier
    primary = Primary()
    tier = make_tier([url], primary)
    try:
        ids = store_blocks(tier, primary, 1, [0, 1, 2, 3])
        assert set(finish(tier, ids)) == set(ids)  # every job reported, nothing raised
        tier.store.flush()
        assert all(is_miss(tier.lookup(offload_key(b), None)) for b in range(4))
        assert tier.store.stats()["dropped_saves"] >= 4
        primary.array[8] = 0xAB
        tier.submit_load(TransferJob(9, [offload_key(0)], np.array([8]), True))
        assert not finish(tier, [9])[9].success
        assert not np.array_equal(primary.array[8], block_data(0))
    finally:
        tier.shutdown()


def test_bad_block_ids_fail_the_job_not_the_scheduler(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = make_tier([url], primary)
    try:
        tier.submit_store(TransferJob(5, [offload_key(0)], np.array([NUM_BLOCKS + 3]), False))
        tier.submit_load(TransferJob(6, [offload_key(0), offload_key(1)], np.array([1]), True))
        results = finish(tier, [5, 6])
        assert not results[5].success and not results[6].success
    finally:
        tier.shutdown()


def test_async_lookup_answers_retry_until_the_check_ends(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = make_tier([url], primary, async_lookup=True)
    try:
        finish(tier, store_blocks(tier, primary, 1, [0]))
        tier.store.flush()
        assert is_retry(tier.lookup(offload_key(0), None))  # the check has only been started
        assert is_retry(tier.lookup(offload_key(5), None))
        tier.drain_jobs()  # waits for the checks too
        assert is_hit(tier.lookup(offload_key(0), None))
        assert is_miss(tier.lookup(offload_key(5), None))
    finally:
        tier.shutdown()


def test_shutdown_with_jobs_in_flight(file_tier):
    url, _ = file_tier
    primary = Primary()
    tier = make_tier(["mem://?capacity=16MiB", url], primary)
    finish(tier, store_blocks(tier, primary, 1, list(range(8))))
    store_ids = store_blocks(tier, primary, 10, list(range(8, 32)))
    primary.array[40:48] = 0
    tier.submit_load(TransferJob(50, [offload_key(b) for b in range(8)], np.arange(40, 48), True))
    tier.shutdown()  # returns once kvtier has finished with every primary slot
    results = {r.job_id: r for r in tier.get_finished_jobs()}
    assert set(results) == set(store_ids) | {50}
    assert results[50].success
    for b in range(8):
        assert np.array_equal(primary.array[40 + b], block_data(b))
    tier.shutdown()  # idempotent
    assert is_miss(tier.lookup(offload_key(0), None))
    tier.submit_store(TransferJob(60, [offload_key(0)], np.array([0]), False))
    assert [r.success for r in tier.get_finished_jobs()] == [False]


def test_unknown_option_is_refused(file_tier):
    url, _ = file_tier
    with pytest.raises(ValueError, match="did you mean 'async_lookup'"):
        make_tier([url], Primary(), async_lookpu=True)  # kvtier's own option, misspelt
