"""Pure-Python parts of the GPU end-to-end run: prompts, block allocation, statistics, results.

Nothing here imports torch, so it is tested on machines without a GPU.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable, Sequence

# Keys docs/gpu-results.json must carry (issue 12's acceptance), with their types.
REQUIRED_RESULTS = {
    "machine": str,
    "date": str,
    "paged_load_gbps": float,
    "h2d_reference_gbps": float,
    "file_to_gpu_gbps": float,
    "disk_to_host_gbps": float,
    "round_trips_identical": bool,
    "answers_identical": bool,
    "ttft_ratio_32k_c1": float,
}

# (context tokens, concurrency, rounds): every round brings `concurrency` new sessions at once. 32K at
# concurrency 1 first: it gives ttft_ratio_32k_c1, the figure the acceptance needs if time runs short.
LEVELS = [(32768, 1, 3), (8192, 1, 5), (8192, 4, 2), (8192, 16, 1), (32768, 4, 1)]
# --quick (a rerun with little device time left): the 32K figure first, then 8K, one or two rounds.
QUICK_LEVELS = [(32768, 1, 2), (8192, 1, 2), (8192, 4, 1)]


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside [0, 100]")
    s = sorted(values)
    rank = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(rank), math.ceil(rank)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def summarize(seconds: Sequence[float]) -> dict:
    """p50 / p90 / mean of TTFTs in seconds."""
    return {"n": len(seconds), "p50_s": percentile(seconds, 50), "p90_s": percentile(seconds, 90),
            "mean_s": sum(seconds) / len(seconds)}


def prompt(seed: int, tokens: int, vocab: int) -> list[int]:
    """A deterministic prompt of `tokens` token ids: the same (seed, tokens) always gives the same one."""
    rng = random.Random(seed * 1_000_003 + tokens)
    return [rng.randrange(vocab) for _ in range(tokens)]


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks that hold `tokens` tokens."""
    return -(-tokens // block_tokens)


class BlockAllocator:
    """Hands out blocks of a paged cache in a shuffled order, so that a request's blocks are scattered
    over the cache as in a long-running engine. Not thread-safe."""

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))
        random.Random(seed).shuffle(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise MemoryError(f"{n} blocks wanted, {len(self._free)} free of {self.num_blocks}")
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, blocks: Iterable[int]) -> None:
        self._free.extend(blocks)

    @property
    def free_count(self) -> int:
        return len(self._free)


def slots(block_table: Sequence[int], block_tokens: int, start: int, end: int) -> list[int]:
    """Flat slot ids (block * block_tokens + row) of tokens [start, end) of a request."""
    return [block_table[t // block_tokens] * block_tokens + t % block_tokens for t in range(start, end)]


def pool_blocks(levels: Sequence[tuple[int, int, int]], extra_tokens: int, block_tokens: int) -> int:
    """Blocks the paged cache needs so that every session of the largest level fits at once."""
    return max(c * blocks_for(n + extra_tokens, block_tokens) for n, c, _ in levels)


def check_results(results: dict) -> list[str]:
    """Problems with a results dict against REQUIRED_RESULTS (empty when it is complete)."""
    problems = []
    for key, kind in REQUIRED_RESULTS.items():
        if key not in results:
            problems.append(f"missing {key}")
        elif kind is float:
            if isinstance(results[key], bool) or not isinstance(results[key], (int, float)):
                problems.append(f"{key} is not a number")
        elif not isinstance(results[key], kind):
            problems.append(f"{key} is not {kind.__name__}")
    return problems


@dataclass
class Verdict:
    """Issue 12's acceptance figures against their thresholds."""

    name: str
    value: float | bool
    target: str
    met: bool


def verdicts(r: dict) -> list[Verdict]:
    """The acceptance checks issue 12 names, from a complete results dict."""
    out = [
        Verdict("paged_load_gbps", r["paged_load_gbps"], ">= 45", r["paged_load_gbps"] >= 45),
        Verdict("paged_load / h2d_reference", r["paged_load_gbps"] / r["h2d_reference_gbps"], ">= 0.80",
                r["paged_load_gbps"] >= 0.8 * r["h2d_reference_gbps"]),
        Verdict("file_to_gpu / disk_to_host", r["file_to_gpu_gbps"] / r["disk_to_host_gbps"], ">= 0.90",
                r["file_to_gpu_gbps"] >= 0.9 * r["disk_to_host_gbps"]),
        Verdict("round_trips_identical", r["round_trips_identical"], "true", r["round_trips_identical"] is True),
        Verdict("answers_identical", r["answers_identical"], "true", r["answers_identical"] is True),
        Verdict("ttft_ratio_32k_c1", r["ttft_ratio_32k_c1"], "<= 0.25", r["ttft_ratio_32k_c1"] <= 0.25),
    ]
    if "layer0_before_last" in r:
        out.append(Verdict("layer0_before_last", r["layer0_before_last"], "true", r["layer0_before_last"] is True))
    if "layer_wise_overlap" in r:
        out.append(Verdict("layer_wise_overlap (layer group 0 usable / last group)", r["layer_wise_overlap"],
                           "< 0.50", r["layer_wise_overlap"] < 0.5))
    return out


def markdown_table(r: dict) -> str:
    """The results table of docs/gpu.md."""
    lines = [f"Measured {r['date']} on {r['machine']} (scripts/gpu-e2e.sh).", "",
             "| figure | value | target | met |", "|---|---|---|---|"]
    for v in verdicts(r):
        value = ("true" if v.value else "false") if isinstance(v.value, bool) else f"{v.value:.3f}"
        lines.append(f"| {v.name} | {value} | {v.target} | {'yes' if v.met else 'NO'} |")
    ttft = r.get("ttft", {})
    if ttft:
        lines += ["", "| context | concurrency | recompute p50 / p90 s | mem:// hit p50 / p90 s | "
                  "file:// hit p50 / p90 s | load GB/s | load share of TTFT |", "|---|---|---|---|---|---|---|"]
        for key in sorted(ttft, key=lambda k: (ttft[k]["tokens"], ttft[k]["concurrency"])):
            t = ttft[key]
            row = [str(t["tokens"]), str(t["concurrency"])]
            for path in ("recompute", "mem", "file"):
                s = t[path]
                row.append(f"{s['p50_s']:.3f} / {s['p90_s']:.3f}")
            row += [f"{t.get('load_gbps', 0):.1f}", f"{t.get('load_share', 0):.2f}"]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def merge(bench: dict, e2e: dict, round_trips_identical: bool, machine: str, date: str) -> dict:
    """docs/gpu-results.json from the bench's JSON, the e2e's JSON and the device tests' verdict."""
    r = {"machine": machine, "date": date, "round_trips_identical": bool(round_trips_identical)}
    for key in ("paged_load_gbps", "h2d_reference_gbps", "file_to_gpu_gbps", "disk_to_host_gbps"):
        if key in bench:
            r[key] = float(bench[key])
    if "layer_wise" in bench:
        r["layer_wise"] = bench["layer_wise"]
        r["layer0_before_last"] = bool(bench["layer_wise"].get("layer0_before_last", False))
        if "layer0_over_all" in bench["layer_wise"]:  # time to layer group 0 usable / to the last group
            r["layer_wise_overlap"] = float(bench["layer_wise"]["layer0_over_all"])
    if "complete" in bench:
        r["bench_complete"] = bool(bench["complete"])
    if "complete" in e2e:
        r["e2e_complete"] = bool(e2e["complete"])
    if "page_cache_dropped" in bench:
        r["page_cache_dropped"] = bool(bench["page_cache_dropped"])
    for key in ("answers_identical", "kv_identical", "ttft_ratio_32k_c1", "ttft", "model"):
        if key in e2e:
            r[key] = e2e[key]
    if "ttft_ratio_32k_c1" in r:
        r["ttft_ratio_32k_c1"] = float(r["ttft_ratio_32k_c1"])
    return r
