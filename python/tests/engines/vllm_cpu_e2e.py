"""kvtier inside real vLLM (CPU backend): a restarted engine reloads kvtier's KV and answers as recompute.

Run with the Python of the venv scripts/engines-venv.sh builds (``make test-engines`` does both):

    KVTIER_LIBRARY=build/src/capi/libkvtier.so $VENV/bin/python python/tests/engines/vllm_cpu_e2e.py

Each engine is vLLM's offline ``LLM`` in a process of its own (``engine`` subcommand), on a tiny Llama
built here (tiny_llama.py), float32, ``enforce_eager``, prefix caching off (so every hit is kvtier's),
the same ``VLLM_CPU_NUM_OF_RESERVED_CPU`` for every engine, LoRA enabled. Prompts go one per
``generate`` call, so each runs alone in its batch in every engine; some carry a ``cache_salt`` or a LoRA
adapter (``prompts``). The engines, in order:

1. ``recompute``: no connector; the reference tokens and logprobs.
2. ``save``: KvtierConnector on a fresh file:// tier; computes and saves every prompt's chunks.
3. ``load``: a new process on the same tier. Every prompt must show exactly its expected external hit
   (its whole chunks but the one holding the last prompt token; none under a salt or adapter the save
   engine never ran) in vLLM's ``num_cached_tokens`` and the
   ``vllm:external_prefix_cache_hits`` counter, and its greedy tokens must equal recompute's with
   every sampled token's float32 logprob within the tolerance (the larger of TOL_FLOOR and 10 x the
   difference between engines 1 and 2 on the prompts engine 2 computed itself).
4. ``shifted``: the deliberate break, on a copy of the tier: shifted_connector.py's connector lands
   every loaded row one token early. The same hits must show, and the comparison must FAIL; if it
   passes, the test cannot see wrong KV and fails.
5. ``damaged``: the real connector on another copy of the tier whose every chunk file has one byte
   flipped. kvtier's verification must refuse the chunks, vLLM must log its recovery ("Recovered from KV
   load failure", kv_load_failure_policy recompute) for some tokens, and every output must still equal
   recompute's.

Exit status 0 only when all of that holds. Prints one line per prompt and engine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHUNK_TOKENS = 256      # kvtier's default for block size 128: two blocks a chunk
MAX_TOKENS = 8
TOL_FLOOR = 2e-3        # float32 logprob difference allowed however close two recomputes are
RESERVED_CPUS = "1"     # vLLM's reserved cores, the same for every engine (ENGINES.md "Timing on CPU")


def prompts() -> dict:
    """name -> {ids, salt, lora, saved}: lengths below, at and above chunk multiples, shared prefixes, and
    the request-identity cases: the same tokens under a cache_salt or a LoRA adapter the save engine
    used (a hit from those chunks) and under one it never saw (``saved`` False: no hit allowed, since
    the tokens' unsalted / base-model chunks are in the tier)."""
    rng = random.Random(20261207)

    def draw(n: int) -> list:
        return [rng.randrange(3, 1024) for _ in range(n)]
    a, b, c = draw(300), draw(512), draw(700)
    plain = {
        "a300": a,                       # one chunk and 44 tokens
        "b512": b,                       # two whole chunks: the last is left to compute (one token must be)
        "c700": c,                       # two chunks and 188 tokens
        "d650_c520": c[:520] + draw(130),  # shares c's first 520 tokens: its two chunks are c's
        "e257_a256": a[:256] + draw(1),  # a's first chunk and one token: the shortest hit
        "f100": draw(100),               # under one chunk: never a hit
    }
    out = {n: dict(ids=ids, salt=None, lora=None, saved=True) for n, ids in plain.items()}
    out["g300_salt1"] = dict(ids=a, salt="tenant-1", lora=None, saved=True)
    out["h300_salt2"] = dict(ids=a, salt="tenant-2", lora=None, saved=False)
    out["i300_lora1"] = dict(ids=a, salt=None, lora=1, saved=True)
    out["j300_lora2"] = dict(ids=a, salt=None, lora=2, saved=False)
    return out


def expected_hit(p: dict) -> int:
    return (len(p["ids"]) - 1) // CHUNK_TOKENS * CHUNK_TOKENS if p["saved"] else 0


# ---- one engine (runs in its own process) -------------------------------------------------------

def make_llm(args: argparse.Namespace, **extra):
    """The offline engine every end-to-end script runs: float32, eager, no local prefix cache (so every hit
    is kvtier's), kvtier as its connector when ``args.connector`` names one; ``extra`` adds LLM options."""
    from vllm import LLM
    from vllm.config import KVTransferConfig

    kv = None
    if args.connector:
        kv = KVTransferConfig(kv_connector=args.connector, kv_connector_module_path=args.module,
                              kv_role="kv_both", kv_load_failure_policy="recompute",
                              kv_connector_extra_config={"tiers": [args.tier], "chunk_tokens": CHUNK_TOKENS})
    return LLM(model=args.model, tokenizer=args.model, dtype="float32", enforce_eager=True,
               enable_prefix_caching=False, max_model_len=1024, max_num_seqs=4, seed=0,
               disable_log_stats=False, kv_transfer_config=kv, **extra)


LORA_OPTIONS = {"enable_lora": True, "max_lora_rank": 8, "max_loras": 2}


def greedy_params():
    from vllm import SamplingParams
    return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=1)


def lora_request(model: str, number: int):
    """Adapter ``number`` of the tiny model (tiny_llama.build_lora's folder beside it), or None for 0."""
    if not number:
        return None
    from vllm.lora.request import LoRARequest
    return LoRARequest(f"adapter{number}", number, str(Path(model).parent / f"lora{number}"))


def generated(res) -> dict:
    """One request's greedy tokens, their float32 logprobs, and the prompt tokens vLLM found cached."""
    comp = res.outputs[0]
    return {"tokens": list(comp.token_ids),
            "logprobs": [float(step[tok].logprob) for tok, step in zip(comp.token_ids, comp.logprobs)],
            "cached": int(res.num_cached_tokens or 0)}


def hit_metrics(llm) -> dict:
    return {m.name: float(getattr(m, "value", 0)) for m in llm.get_metrics()
            if m.name in ("vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries",
                          "vllm:prefix_cache_hits")}


def run_engine(args: argparse.Namespace) -> None:
    from vllm.inputs import TokensPrompt

    llm = make_llm(args, **LORA_OPTIONS)
    out = {"prompts": {}}
    for name, p in prompts().items():
        if args.phase == "save" and not p["saved"]:
            continue
        prompt = TokensPrompt(prompt_token_ids=p["ids"])
        if p["salt"]:
            prompt["cache_salt"] = p["salt"]
        res = llm.generate([prompt], greedy_params(), use_tqdm=False, lora_request=lora_request(args.model, p["lora"]))
        out["prompts"][name] = generated(res[0])
    out["metrics"] = hit_metrics(llm)
    Path(args.out).write_text(json.dumps(out))


# ---- the test -----------------------------------------------------------------------------------

def check_installed_kvtier() -> None:
    """The venv's kvtier must be this clone's (scripts/engines-venv.sh installs it): same sources."""
    import kvtier
    installed, clone = Path(kvtier.__file__).parent, REPO / "python" / "kvtier"
    stale = [str(p.relative_to(clone)) for p in sorted(clone.rglob("*.py"))
             if not (installed / p.relative_to(clone)).is_file()
             or hashlib.sha256(p.read_bytes()).digest() != hashlib.sha256(
                 (installed / p.relative_to(clone)).read_bytes()).digest()]
    if installed.resolve() != clone.resolve() and stale:
        sys.exit(f"FAIL: the venv's kvtier ({installed}) differs from this clone's in {stale}; "
                 "run scripts/engines-venv.sh vllm")


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


def use_library() -> None:
    """Checks the venv runs this clone's kvtier and points KVTIER_LIBRARY at a built libkvtier.so (the
    build's, unless the caller set one); exits with FAIL otherwise."""
    check_installed_kvtier()
    if not os.environ.get("KVTIER_LIBRARY"):
        os.environ["KVTIER_LIBRARY"] = str(REPO / "build" / "src" / "capi" / "libkvtier.so")
    if not Path(os.environ["KVTIER_LIBRARY"]).is_file():
        sys.exit(f"FAIL: no libkvtier.so at {os.environ['KVTIER_LIBRARY']} (build it: make build)")


def compare(ref: dict, got: dict, tol: float) -> tuple[bool, float, list]:
    """(all equal within tol, the largest logprob difference, one line per prompt)."""
    ok, worst, lines = True, 0.0, []
    for name, g in got["prompts"].items():
        r = ref["prompts"][name]
        same = r["tokens"] == g["tokens"]
        # logprobs are comparable up to and including the first differing token (same context)
        upto = next((i + 1 for i, (x, y) in enumerate(zip(r["tokens"], g["tokens"])) if x != y), len(r["tokens"]))
        diff = max((abs(x - y) for x, y in zip(r["logprobs"][:upto], g["logprobs"][:upto])), default=0.0)
        worst = max(worst, diff)
        good = same and diff <= tol
        ok &= good
        lines.append(f"  {name:10s} cached {g['cached']:4d}  tokens {'equal' if same else 'DIFFER'}  "
                     f"max |dlogprob| {diff:.2e}  {'ok' if good else 'MISMATCH'}")
    return ok, worst, lines


def hits_ok(run: dict, tag: str) -> bool:
    ok = True
    for name, p in prompts().items():
        want, got = expected_hit(p), run["prompts"][name]["cached"]
        if got != want:
            print(f"  {tag} {name}: num_cached_tokens {got}, expected {want}")
            ok = False
    total = sum(expected_hit(p) for p in prompts().values())
    counter = run["metrics"].get("vllm:external_prefix_cache_hits")
    if counter != total:
        print(f"  {tag}: vllm:external_prefix_cache_hits {counter}, expected {total}")
        ok = False
    return ok and total > 0


def damage(tier: Path) -> int:
    """Flips one byte in the middle of every chunk file under ``tier``; how many."""
    files = sorted(tier.rglob("*.kvc"))
    for f in files:
        with open(f, "r+b") as fh:
            fh.seek(f.stat().st_size // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0x5A]))
    return len(files)


def recovered_tokens(log: Path) -> int:
    """Tokens vLLM's scheduler says it rescheduled after KV load failures (its warning lines)."""
    return sum(int(m.group(1)) for m in re.finditer(r"Recovered from KV load failure: \d+ request\(s\) "
                                                    r"rescheduled \((\d+) tokens affected\)", log.read_text()))


def verdict(failures: list, started: float, passed: str) -> int:
    """Prints the run's time and each failure, or ``passed`` when there is none; the exit status."""
    print(f"total {time.monotonic() - started:.0f} s")
    for f in failures:
        print(f"FAIL: {f}")
    if not failures:
        print(passed)
    return 1 if failures else 0


def remove_work(work: Path) -> None:
    """Removes a run's scratch folder, or keeps it (and says where) with KVTIER_E2E_KEEP set."""
    if os.environ.get("KVTIER_E2E_KEEP"):
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def script_main(doc: str, run_engine, main) -> None:
    """The command line of an end-to-end script: ``engine ...`` runs one engine (in its own process),
    no argument runs the whole test and exits with its status."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    e = sub.add_parser("engine")
    for a in ("--model", "--out", "--tier", "--connector", "--module", "--phase"):
        e.add_argument(a, default="")
    ns = parser.parse_args()
    if ns.cmd == "engine":
        run_engine(ns)
    else:
        sys.exit(main())


def main() -> int:
    use_library()
    import importlib.metadata as md
    print(f"vllm-cpu {md.version('vllm-cpu')}, torch {md.version('torch')}, transformers "
          f"{md.version('transformers')}", flush=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kvtier-vllm-e2e-"))
    try:
        import tiny_llama
        model = tiny_llama.build(work / "model")
        for i in (1, 2):
            tiny_llama.build_lora(work / f"lora{i}", seed=i)
        tier_dir = work / "tier"
        tier = f"file://{tier_dir}?capacity=1GiB"
        conn = "KvtierConnector"

        ref = engine("recompute", model, work)
        plain = [ref["prompts"][n] for n, p in prompts().items() if not p["salt"] and not p["lora"]]
        outs = {tuple(p["tokens"]) for p in plain}
        lora_changes = ref["prompts"]["i300_lora1"]["logprobs"] != ref["prompts"]["a300"]["logprobs"]
        if len(outs) != len(plain) or any(len(set(p["tokens"])) == 1 for p in plain) or not lora_changes:
            print(f"FAIL: degenerate reference output (the model ignores its prompt, or the LoRA adapter changes nothing): {ref['prompts']}")
            return 1
        saved = engine("save", model, work, tier, conn)
        own = [n for n, p in saved["prompts"].items() if p["cached"] == 0]  # computed by engine 2 itself
        sub = {"prompts": {n: ref["prompts"][n] for n in own}}
        same, noise, _ = compare(sub, {"prompts": {n: saved["prompts"][n] for n in own}}, float("inf"))
        tol = max(TOL_FLOOR, 10 * noise)
        print(f"recompute vs recompute (engine 2's own prompts {own}): max |dlogprob| {noise:.2e}; "
              f"tolerance {tol:.2e}")
        if not own or not same:
            print("FAIL: the save engine's own computations differ in tokens from recompute")
            return 1
        shifted_tier, damaged_tier = work / "tier-copy", work / "tier-damaged"
        shutil.copytree(tier_dir, shifted_tier)
        shutil.copytree(tier_dir, damaged_tier)
        damaged_files = damage(damaged_tier)

        loaded = engine("load", model, work, tier, conn)
        hits = hits_ok(loaded, "load")
        equal, worst, lines = compare(ref, loaded, tol)
        print(f"load (new process, same tier): external hits {loaded['metrics']}")
        print("\n".join(lines))

        broken = engine("shifted", model, work, f"file://{shifted_tier}?capacity=1GiB",
                        "ShiftedKvtierConnector", "shifted_connector")
        broken_hits = hits_ok(broken, "shifted")
        broken_equal, broken_worst, lines = compare(ref, broken, tol)
        print(f"shifted (deliberate break: loads one row early): external hits {broken['metrics']}")
        print("\n".join(lines))

        damaged = engine("damaged", model, work, f"file://{damaged_tier}?capacity=1GiB", conn)
        damaged_equal, damaged_worst, lines = compare(ref, damaged, tol)
        recovered = recovered_tokens(work / "damaged.log")
        print(f"damaged ({damaged_files} chunk files with a flipped byte): vLLM recovered {recovered} tokens "
              f"from load failures; external hits {damaged['metrics']}")
        print("\n".join(lines))

        failures = []
        if not hits:
            failures.append("the reloading engine did not show the expected external hits")
        if not equal:
            failures.append(f"reloaded output differs from recompute (max |dlogprob| {worst:.2e} > {tol:.2e})")
        if not broken_hits:
            failures.append("the broken engine did not load (no hits): the break proves nothing")
        if broken_equal:
            failures.append("the deliberate one-row shift was NOT detected: the comparison cannot see wrong KV")
        if not damaged_equal:
            failures.append(f"damaged chunks changed the output (max |dlogprob| {damaged_worst:.2e})")
        if recovered <= 0 or damaged_files == 0:
            failures.append("the damaged chunks were never loaded (no recovery logged): that case proves nothing")
        return verdict(failures, started,
                       "PASS: reload equals recompute inside vLLM, hits shown by vLLM; "
                       f"the one-row shift is detected (max |dlogprob| {broken_worst:.2e})")
    finally:
        remove_work(work)


if __name__ == "__main__":
    script_main(__doc__, run_engine, main)
