"""kvtier inside real vLLM (CPU backend): a request's cache_salt and LoRA adapter are part of its identity.

Run like vllm_cpu_e2e.py (``make test-engines`` does)::

    PYTHONPATH=python KVTIER_LIBRARY=build/src/capi/libkvtier.so $VENV/bin/python python/tests/engines/vllm_cpu_identity_e2e.py

The same tiny Llama, engine settings and helpers as vllm_cpu_e2e.py (imported from it). One prompt P of
300 token ids (one 256-token chunk reusable) under five identities: plain, cache_salt "tenant-1" (s1),
"tenant-2" (s2), LoRA adapter 1 (l1) and adapter 2 (l2) (PEFT folders from ``tiny_llama.build_lora``,
random q/k/v adapters: l1's KV differs from the base model's). Engines, each a process of its own:

1. ``recompute``: no connector; the reference for all five.
2. ``save``: KvtierConnector on a fresh file:// tier; computes and saves P under s1 and under l1 only.
3. ``load``: a new process on the same tier. s2, plain and l2 must show 0 external hit tokens (in
   ``num_cached_tokens``); s1 and l1 must show 256 and the counter ``vllm:external_prefix_cache_hits``
   512; every output must equal recompute's (tokens, float32 logprobs within vllm_cpu_e2e's tolerance).
4. ``blind``: the deliberate break, on the same tier (which now also holds the chunks engine 3
   computed and saved: plain P under its key, the base model's KV): identity_blind_connector.py keys
   requests by their tokens alone (kvtier's salt / LoRA mixing removed). l1, l2, s1 and s2 must then
   all show 256-token hits (else the test fails: the break would prove nothing), and l1 and l2, given
   the base model's KV, must differ from their recompute (else the comparison could not see another
   identity's KV). (A break that saves and loads in one engine would show no hit: vLLM's CPU worker
   is another process than its scheduler, and a file:// index is per process.)

Exit status 0 only when all of that holds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_cpu_e2e import engine as e2e_engine  # noqa: E402
from vllm_cpu_e2e import (CHUNK_TOKENS, TOL_FLOOR,  # noqa: E402
                          LORA_OPTIONS, compare, generated, greedy_params,
                          hit_metrics, lora_request, make_llm, remove_work, script_main, use_library, verdict)

# identity -> (cache_salt, LoRA adapter number)
IDENTITIES = {"s1": ("tenant-1", None), "l1": (None, 1), "s2": ("tenant-2", None), "plain": (None, None),
              "l2": (None, 2)}
PHASE_PROMPTS = {"recompute": list(IDENTITIES), "save": ["s1", "l1"], "load": ["s2", "plain", "l2", "s1", "l1"],
                 "blind": ["l1", "l2", "s1", "s2"]}
SAVED = ("s1", "l1")


def prompt_ids() -> list:
    rng = random.Random(20261208)
    return [rng.randrange(3, 1024) for _ in range(300)]


HIT = (len(prompt_ids()) - 1) // CHUNK_TOKENS * CHUNK_TOKENS   # 256


def run_engine(args: argparse.Namespace) -> None:
    from vllm.inputs import TokensPrompt

    llm = make_llm(args, **LORA_OPTIONS)
    out = {"prompts": {}}
    for name in PHASE_PROMPTS[args.phase]:
        salt, lora_no = IDENTITIES[name]
        prompt = TokensPrompt(prompt_token_ids=prompt_ids())
        if salt:
            prompt["cache_salt"] = salt
        res = llm.generate([prompt], greedy_params(), use_tqdm=False, lora_request=lora_request(args.model, lora_no))
        out["prompts"][name] = generated(res[0])
        time.sleep(0.5)   # the save of this prompt's chunk (in the background) lands before the next lookup
    out["metrics"] = hit_metrics(llm)
    Path(args.out).write_text(json.dumps(out))


def engine(*args, **kwargs) -> dict:
    """vllm_cpu_e2e.engine running this script's engines."""
    return e2e_engine(*args, script=__file__, **kwargs)


def cached(run: dict) -> dict:
    return {n: p["cached"] for n, p in run["prompts"].items()}


def main() -> int:
    use_library()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kvtier-vllm-identity-"))
    try:
        import tiny_llama
        model = tiny_llama.build(work / "model")
        for i in (1, 2):
            tiny_llama.build_lora(work / f"lora{i}", seed=i)
        failures = []

        ref = engine("recompute", model, work)
        lp = {n: tuple(p["logprobs"]) for n, p in ref["prompts"].items()}
        if len({lp["plain"], lp["l1"], lp["l2"]}) != 3 or lp["s1"] != lp["plain"] or lp["s2"] != lp["plain"]:
            print(f"FAIL: the adapters do not change the output, or a salt does: {ref['prompts']}")
            return 1

        saved = engine("save", model, work, f"file://{work / 'tier'}?capacity=1GiB", "KvtierConnector")
        same, noise, _ = compare(ref, saved, float("inf"))
        tol = max(TOL_FLOOR, 10 * noise)
        print(f"save engine (computes s1, l1) vs recompute: max |dlogprob| {noise:.2e}; tolerance {tol:.2e}; "
              f"cached {cached(saved)}")
        if not same or any(cached(saved).values()):
            failures.append("the save engine's own computations differ from recompute, or it found hits")

        loaded = engine("load", model, work, f"file://{work / 'tier'}?capacity=1GiB", "KvtierConnector")
        equal, worst, lines = compare(ref, loaded, tol)
        want = {n: HIT if n in SAVED else 0 for n in IDENTITIES}
        print(f"load (new process, same tier): external hits {loaded['metrics']}")
        print("\n".join(lines))
        if cached(loaded) != want:
            failures.append(f"external hits {cached(loaded)}, expected {want}")
        if loaded["metrics"].get("vllm:external_prefix_cache_hits") != float(HIT * len(SAVED)):
            failures.append(f"vllm:external_prefix_cache_hits {loaded['metrics']}, expected {HIT * len(SAVED)}")
        if not equal:
            failures.append(f"reloaded output differs from recompute (max |dlogprob| {worst:.2e} > {tol:.2e})")

        blind = engine("blind", model, work, f"file://{work / 'tier'}?capacity=1GiB",
                       "IdentityBlindKvtierConnector", "identity_blind_connector")
        _, blind_worst, lines = compare(ref, blind, tol)
        print(f"blind (deliberate break: salt / LoRA not in the keys): external hits {blind['metrics']}")
        print("\n".join(lines))
        others, adapters = ("l1", "l2", "s1", "s2"), ("l1", "l2")
        leaked = [n for n in others if blind["prompts"][n]["cached"] == HIT]
        wrong = [n for n in adapters if blind["prompts"][n]["cached"] > 0 and not
                 compare({"prompts": {n: ref["prompts"][n]}}, {"prompts": {n: blind["prompts"][n]}}, tol)[0]]
        if len(leaked) != len(others):
            failures.append(f"the identity-blind engine showed hits only for {leaked}: the break proves nothing")
        if len(wrong) != len(adapters):
            failures.append(f"another identity's KV changed the output only for {wrong}: the comparison "
                            "cannot see it")
        return verdict(failures, started,
                       "PASS: salt and LoRA keep requests apart inside vLLM "
                       f"(0 hits across identities, {HIT} within, equal to recompute); "
                       f"keyed by tokens alone, hits leak to {leaked} and {wrong} differ "
                       f"(max |dlogprob| {blind_worst:.2e})")
    finally:
        remove_work(work)


if __name__ == "__main__":
    script_main(__doc__, run_engine, main)
