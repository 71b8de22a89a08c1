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
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_cpu_e2e import (CHUNK_TOKENS, MAX_TOKENS, RESERVED_CPUS, TOL_FLOOR,  # noqa: E402
                          check_installed_kvtier, compare)

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
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    kv = None
    if args.connector:
        kv = KVTransferConfig(kv_connector=args.connector, kv_connector_module_path=args.module,
                              kv_role="kv_both", kv_load_failure_policy="recompute",
                              kv_connector_extra_config={"tiers": [args.tier], "chunk_tokens": CHUNK_TOKENS})
    llm = LLM(model=args.model, tokenizer=args.model, dtype="float32", enforce_eager=True,
              enable_prefix_caching=False, max_model_len=1024, max_num_seqs=4, seed=0,
              disable_log_stats=False, kv_transfer_config=kv, enable_lora=True, max_lora_rank=8, max_loras=2)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=1)
    out = {"prompts": {}, "metrics": {}}
    for name in PHASE_PROMPTS[args.phase]:
        salt, lora_no = IDENTITIES[name]
        prompt = TokensPrompt(prompt_token_ids=prompt_ids())
        if salt:
            prompt["cache_salt"] = salt
        lora = None
        if lora_no:
            lora = LoRARequest(f"adapter{lora_no}", lora_no, str(Path(args.model).parent / f"lora{lora_no}"))
        res = llm.generate([prompt], params, use_tqdm=False, lora_request=lora)[0]
        comp = res.outputs[0]
        out["prompts"][name] = {
            "tokens": list(comp.token_ids),
            "logprobs": [float(step[tok].logprob) for tok, step in zip(comp.token_ids, comp.logprobs)],
            "cached": int(res.num_cached_tokens or 0),
        }
        time.sleep(0.5)   # the save of this prompt's chunk (in the background) lands before the next lookup
    for m in llm.get_metrics():
        if m.name in ("vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries"):
            out["metrics"][m.name] = float(getattr(m, "value", 0))
    Path(args.out).write_text(json.dumps(out))


def engine(tag: str, model: Path, work: Path, tier: str = "", connector: str = "",
           module: str = "kvtier.connectors.vllm_v1", script: str = __file__) -> dict:
    """Runs ``script``'s ``engine`` subcommand in a process of its own (phase ``tag``); its JSON."""
    out, log = work / f"{tag}.json", work / f"{tag}.log"
    env = dict(os.environ, VLLM_CPU_NUM_OF_RESERVED_CPU=RESERVED_CPUS, VLLM_CPU_KVCACHE_SPACE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    cmd = [sys.executable, script, "engine", "--model", str(model), "--out", str(out), "--phase", tag]
    if connector:
        cmd += ["--tier", tier, "--connector", connector, "--module", module]
    start = time.monotonic()
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not out.is_file():
        sys.stdout.write(log.read_text(errors="replace")[-6000:])
        sys.exit(f"FAIL: engine {tag} exited with {rc} (log above, {log})")
    print(f"engine {tag}: {time.monotonic() - start:.0f} s", flush=True)
    return json.loads(out.read_text())


def cached(run: dict) -> dict:
    return {n: p["cached"] for n, p in run["prompts"].items()}


def main() -> int:
    check_installed_kvtier()
    lib = os.environ.get("KVTIER_LIBRARY") or str(HERE.parents[2] / "build" / "src" / "capi" / "libkvtier.so")
    os.environ["KVTIER_LIBRARY"] = lib
    if not Path(lib).is_file():
        sys.exit(f"FAIL: no libkvtier.so at {lib} (build it: make build)")
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
        print(f"total {time.monotonic() - started:.0f} s")
        for f in failures:
            print(f"FAIL: {f}")
        if not failures:
            print(f"PASS: salt and LoRA keep requests apart inside vLLM (0 hits across identities, {HIT} within, "
                  f"equal to recompute); keyed by tokens alone, hits leak to {leaked} and {wrong} differ "
                  f"(max |dlogprob| {blind_worst:.2e})")
        return 1 if failures else 0
    finally:
        if os.environ.get("KVTIER_E2E_KEEP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    e = sub.add_parser("engine")
    for a in ("--model", "--out", "--tier", "--connector", "--module", "--phase"):
        e.add_argument(a, default="")
    ns = parser.parse_args()
    if ns.cmd == "engine":
        run_engine(ns)
    else:
        sys.exit(main())
