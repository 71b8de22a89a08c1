"""KvtierHybridConnector inside real vLLM (CPU backend) on a model with a sliding-window layer.

Run like vllm_cpu_e2e.py (``make test-engines`` does)::

    PYTHONPATH=python KVTIER_LIBRARY=build/src/capi/libkvtier.so $VENV/bin/python python/tests/engines/vllm_cpu_window_e2e.py

The tiny Llama of tiny_llama.py with ``layer_types`` ["full_attention", "sliding_attention"] and
``sliding_window`` 128 in its config.json (vLLM's Llama reads both): vLLM's hybrid KV cache manager
keeps two KV cache groups, one full-attention, one sliding-window, each with its own block ids, and
KvtierHybridConnector (``SupportsHMA``) saves and loads both. Engine settings and helpers as in
vllm_cpu_e2e.py and vllm_cpu_identity_e2e.py (imported). Prompts: 300, 600 and 550 token ids (the 550
sharing the 600's first 400), all longer than the window. Engines, each a process of its own:

1. ``recompute``: no connector; the reference.
2. ``save``: KvtierHybridConnector on a fresh file:// tier.
3. ``load``: a new process on the same tier: each prompt must show its whole chunks but the one
   holding its last token as external hits (256, 512, 512; the counter their sum) and equal recompute
   (tokens, float32 logprobs within vllm_cpu_e2e's tolerance).
4. ``blind``: the deliberate break, on a copy of the tier: window_blind_connector.py loads only the
   first KV cache group's blocks. The same hits must show and the comparison must FAIL.

Exit status 0 only when all of that holds.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_cpu_e2e import (CHUNK_TOKENS, TOL_FLOOR, engine,  # noqa: E402
                          compare, generated, greedy_params, hit_metrics, make_llm, remove_work,
                          script_main, use_library, verdict)

WINDOW = 128
CONNECTOR = "KvtierHybridConnector"


def prompts() -> dict:
    rng = random.Random(20261209)

    def draw(n: int) -> list:
        return [rng.randrange(3, 1024) for _ in range(n)]
    a, c = draw(300), draw(600)
    return {"a300": a, "c600": c, "d550_c400": c[:400] + draw(150)}


def expected_hit(ids: list) -> int:
    return (len(ids) - 1) // CHUNK_TOKENS * CHUNK_TOKENS


def run_engine(args: argparse.Namespace) -> None:
    from vllm.inputs import TokensPrompt

    llm = make_llm(args)
    hma = not llm.llm_engine.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
    out = {"prompts": {}, "hma": hma}
    for name, ids in prompts().items():
        res = llm.generate([TokensPrompt(prompt_token_ids=ids)], greedy_params(), use_tqdm=False)
        out["prompts"][name] = generated(res[0])
        time.sleep(0.5)
    out["metrics"] = hit_metrics(llm)
    Path(args.out).write_text(json.dumps(out))


def hits_ok(run: dict, tag: str) -> bool:
    want = {n: expected_hit(ids) for n, ids in prompts().items()}
    got = {n: p["cached"] for n, p in run["prompts"].items()}
    counter = run["metrics"].get("vllm:external_prefix_cache_hits")
    ok = got == want and counter == float(sum(want.values())) and run["hma"]
    if not ok:
        print(f"  {tag}: num_cached_tokens {got}, expected {want}; vllm:external_prefix_cache_hits {counter}; "
              f"hybrid KV cache manager on: {run['hma']}")
    return ok


def main() -> int:
    use_library()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kvtier-vllm-window-"))
    try:
        import tiny_llama
        model = tiny_llama.build(work / "model")
        cfg_path = model / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.update(layer_types=["full_attention", "sliding_attention"], sliding_window=WINDOW)
        cfg_path.write_text(json.dumps(cfg, indent=2))
        me = str(Path(__file__).resolve())
        failures = []

        ref = engine("recompute", model, work, script=me)
        outs = [tuple(p["tokens"]) for p in ref["prompts"].values()]
        if len(set(outs)) != len(outs) or any(len(set(t)) == 1 for t in outs):
            print(f"FAIL: degenerate reference output: {ref['prompts']}")
            return 1
        tier_dir = work / "tier"
        saved = engine("save", model, work, f"file://{tier_dir}?capacity=1GiB", CONNECTOR, script=me)
        own = [n for n, p in saved["prompts"].items() if p["cached"] == 0]
        same, noise, _ = compare({"prompts": {n: ref["prompts"][n] for n in own}},
                                 {"prompts": {n: saved["prompts"][n] for n in own}}, float("inf"))
        tol = max(TOL_FLOOR, 10 * noise)
        print(f"save engine's own prompts {own} vs recompute: max |dlogprob| {noise:.2e}; tolerance {tol:.2e}")
        if not own or not same:
            failures.append("the save engine's own computations differ from recompute")
        shutil.copytree(tier_dir, work / "tier-copy")

        loaded = engine("load", model, work, f"file://{tier_dir}?capacity=1GiB", CONNECTOR, script=me)
        hits = hits_ok(loaded, "load")
        equal, worst, lines = compare(ref, loaded, tol)
        print(f"load (new process, same tier): external hits {loaded['metrics']}")
        print("\n".join(lines))
        if not hits:
            failures.append("the reloading engine did not show the expected external hits")
        if not equal:
            failures.append(f"reloaded output differs from recompute (max |dlogprob| {worst:.2e} > {tol:.2e})")

        blind = engine("blind", model, work, f"file://{work / 'tier-copy'}?capacity=1GiB",
                       "WindowBlindKvtierConnector", "window_blind_connector", script=me)
        blind_hits = hits_ok(blind, "blind")
        blind_equal, blind_worst, lines = compare(ref, blind, tol)
        print(f"blind (deliberate break: only the first KV cache group loaded): external hits {blind['metrics']}")
        print("\n".join(lines))
        if not blind_hits:
            failures.append("the broken engine did not load (no hits): the break proves nothing")
        if blind_equal:
            failures.append("loading only one KV cache group was NOT detected: the comparison cannot see it")
        return verdict(failures, started,
                       "PASS: with a sliding-window layer (hybrid KV cache manager, two groups) "
                       "reload equals recompute inside vLLM, hits shown; loading one group only "
                       f"is detected (max |dlogprob| {blind_worst:.2e})")
    finally:
        remove_work(work)


if __name__ == "__main__":
    script_main(__doc__, run_engine, main)
