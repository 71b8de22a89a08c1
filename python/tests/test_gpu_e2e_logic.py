"""The pure-Python parts of the GPU end-to-end run (python/gpu_e2e/logic.py), without torch."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_e2e import logic  # noqa: E402


def test_percentile_matches_linear_interpolation():
    assert logic.percentile([3.0], 50) == 3.0
    assert logic.percentile([1, 2, 3, 4], 50) == 2.5
    assert logic.percentile([10, 1, 5], 0) == 1
    assert logic.percentile([10, 1, 5], 100) == 10
    assert logic.percentile(list(range(11)), 90) == pytest.approx(9.0)
    with pytest.raises(ValueError):
        logic.percentile([], 50)
    with pytest.raises(ValueError):
        logic.percentile([1], 101)


def test_summarize():
    s = logic.summarize([0.1, 0.2, 0.3, 0.4, 1.0])
    assert s["n"] == 5 and s["p50_s"] == 0.3 and s["p90_s"] == pytest.approx(0.76)


def test_prompt_is_deterministic_and_distinct():
    a = logic.prompt(1, 300, 128256)
    assert a == logic.prompt(1, 300, 128256)
    assert a != logic.prompt(2, 300, 128256)
    assert len(a) == 300 and all(0 <= t < 128256 for t in a)


def test_block_allocator_hands_out_distinct_blocks_and_takes_them_back():
    alloc = logic.BlockAllocator(100, seed=3)
    a, b = alloc.alloc(40), alloc.alloc(60)
    assert len(set(a) | set(b)) == 100
    assert a != sorted(a)  # scattered over the cache
    with pytest.raises(MemoryError):
        alloc.alloc(1)
    alloc.free(a)
    assert alloc.free_count == 40


def test_slots_follow_the_block_table():
    table = [7, 2, 5]
    s = logic.slots(table, 16, 0, 40)
    assert s[0] == 7 * 16 and s[15] == 7 * 16 + 15 and s[16] == 2 * 16 and s[39] == 5 * 16 + 7
    assert logic.blocks_for(40, 16) == 3 and logic.blocks_for(48, 16) == 3 and logic.blocks_for(49, 16) == 4


def test_pool_fits_the_largest_level():
    n = logic.pool_blocks(logic.LEVELS, 48, 16)
    assert n == max(c * logic.blocks_for(t + 48, 16) for t, c, _ in logic.LEVELS)
    assert n >= 4 * 32768 // 16


def _complete() -> dict:
    return {"machine": "m", "date": "2026-12-01", "paged_load_gbps": 47.0, "h2d_reference_gbps": 55.0,
            "file_to_gpu_gbps": 1.8, "disk_to_host_gbps": 1.9, "round_trips_identical": True,
            "answers_identical": True, "ttft_ratio_32k_c1": 0.1}


def test_check_results_names_what_is_missing_or_mistyped():
    assert logic.check_results(_complete()) == []
    r = _complete()
    del r["machine"]
    r["answers_identical"] = 1
    r["paged_load_gbps"] = True
    assert sorted(logic.check_results(r)) == ["answers_identical is not bool", "missing machine",
                                              "paged_load_gbps is not a number"]


def test_verdicts_apply_the_issue_thresholds():
    v = {x.name: x.met for x in logic.verdicts(_complete())}
    assert all(v.values()), v
    r = _complete()
    r["ttft_ratio_32k_c1"] = 0.3
    r["file_to_gpu_gbps"] = 1.6  # < 0.9 x 1.9
    r["paged_load_gbps"] = 44.0  # < 45 but >= 0.8 x 55
    v = {x.name: x.met for x in logic.verdicts(r)}
    assert not v["ttft_ratio_32k_c1"] and not v["file_to_gpu / disk_to_host"] and not v["paged_load_gbps"]
    assert v["paged_load / h2d_reference"]


def test_merge_takes_bench_and_e2e_figures():
    bench = {"paged_load_gbps": 47, "h2d_reference_gbps": 55.0, "file_to_gpu_gbps": 1.8,
             "disk_to_host_gbps": 1.9, "layer_wise": {"layer0_before_last": True}}
    e2e = {"answers_identical": True, "ttft_ratio_32k_c1": 0.1, "ttft": {}}
    r = logic.merge(bench, e2e, True, "m", "2026-12-01")
    assert logic.check_results(r) == []
    assert r["layer0_before_last"] is True
    assert isinstance(r["paged_load_gbps"], float)
    assert logic.check_results(logic.merge({}, {}, False, "m", "d"))  # incomplete without figures


def test_merge_takes_the_layer_wise_overlap_and_completeness():
    bench = {"layer_wise": {"layer0_before_last": True, "layer0_over_all": 0.3}, "complete": False}
    r = logic.merge(bench, {"complete": True}, True, "m", "d")
    assert r["layer_wise_overlap"] == 0.3 and r["bench_complete"] is False and r["e2e_complete"] is True
    full = _complete()
    full["layer_wise_overlap"] = 0.6  # group 0 usable only after 60% of the load's time
    v = {x.name: x.met for x in logic.verdicts(full)}
    assert v["layer_wise_overlap (layer group 0 usable / last group)"] is False


def test_quick_levels_start_with_the_32k_figure_and_are_smaller():
    assert logic.QUICK_LEVELS[0][:2] == (32768, 1)
    assert sum(n * c * r for n, c, r in logic.QUICK_LEVELS) < sum(n * c * r for n, c, r in logic.LEVELS) / 2


def test_markdown_table_lists_every_verdict():
    r = _complete()
    r["ttft"] = {"8192_c1": {"tokens": 8192, "concurrency": 1,
                             "recompute": {"p50_s": 0.25, "p90_s": 0.26},
                             "mem": {"p50_s": 0.03, "p90_s": 0.04},
                             "file": {"p50_s": 0.6, "p90_s": 0.7}, "load_gbps": 40.0, "load_share": 0.8}}
    text = logic.markdown_table(r)
    for v in logic.verdicts(r):
        assert f"| {v.name} |" in text
    assert "| 8192 | 1 | 0.250 / 0.260 |" in text
