"""Returning sessions served by recompute or by loading their prefix through kvtier's GPU path.

    python3 -m gpu_e2e.run --out e2e.json --dir /abs/scratch [--quick] [--deadline 300]

--out is rewritten after every level ("complete": false until the end), so a run cut short by a timeout
keeps the levels it finished.

(run from python/, with kvtier importable and libkvtier.so built with CUDA). For every level of
logic.LEVELS (context tokens, concurrency, rounds), each round brings `concurrency` new sessions at once:
  1. first visit: prefill the context into the paged cache, save its chunks through kvtier (GPU gather)
     into a mem:// store and a file:// store;
  2. recompute: the session returns with `--suffix` new tokens; prefill the context again, then the
     suffix; TTFT = until its first token (sessions served first come, first served);
  3. hit from mem://, then from file:// (page cache dropped when possible): load the context's KV into
     the blocks through kvtier (verified on the host; the load waits for the compute stream's earlier work
     through after_stream, and the compute stream waits for each layer group), then prefill only the
     suffix;
then every path decodes `--decode` greedy tokens, which must equal recompute's. Writes one JSON object.
Needs PyTorch with CUDA; exits 2 with {"skipped": reason} without.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from . import logic


def _skip(out: str, reason: str) -> int:
    Path(out).write_text(json.dumps({"skipped": reason}) + "\n")
    print(f"gpu_e2e: skipped: {reason}")
    return 2


def drop_caches() -> bool:
    """Drops the page cache (root only) so that file:// reads come from the disk."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Session:
    def __init__(self, ns, seed: int, tokens: int, suffix: int, decode: int, alloc, kv, device, vocab: int):
        import torch
        text = logic.prompt(seed, tokens + suffix, vocab)
        self.tokens = tokens
        self.prefix = torch.tensor(text[:tokens], dtype=torch.long, device=device)
        self.suffix = torch.tensor(text[tokens:], dtype=torch.long, device=device)
        self.keys = ns.chunk_keys(text[:tokens])
        self.table = alloc.alloc(logic.blocks_for(tokens + suffix + decode, kv.block_tokens))
        self.slots = kv.slots(self.table, 0, tokens + suffix + decode, device)


class Runner:
    def __init__(self, args) -> None:
        import torch
        import kvtier
        import kvtier.gpu
        from .model import LLAMA_3_1_8B, Model, PagedKv

        self.torch, self.kvtier, self.args = torch, kvtier, args
        self.device = torch.device("cuda")
        self.shape = LLAMA_3_1_8B
        # Every tensor is made and used on this stream (not the legacy default stream, whose handle 0
        # kvtier takes for "no stream to wait for").
        self.compute = torch.cuda.Stream()
        self.levels = logic.QUICK_LEVELS if args.quick else logic.LEVELS
        extra = args.suffix + args.decode
        with torch.cuda.stream(self.compute):
            self.model = Model(self.shape, self.device)
            self.kv = PagedKv(self.shape, logic.pool_blocks(self.levels, extra, args.block_tokens),
                              args.block_tokens, self.device)
        self.layout = kvtier.Layout(self.shape.layers, self.shape.kv_heads, self.shape.head_dim, "bf16", 256)
        self.ns = kvtier.Namespace("e2e/llama-3.1-8b-random-bf16", self.layout, "e2e")
        k, v = self.kv.addresses()
        cache = kvtier.gpu.PagedCache(0, self.kv.num_blocks, args.block_tokens, k, v)
        self.transfer = kvtier.gpu.Transfer(self.ns, cache, staging_bytes=args.staging_mib << 20,
                                            layer_groups=args.layer_groups, host_threads=args.host_threads)
        self.alloc = logic.BlockAllocator(self.kv.num_blocks, seed=1)
        self.dropped = True

    def stream(self) -> int:
        return self.torch.cuda.current_stream().cuda_stream

    def first_visit(self, sessions, stores) -> None:
        for s in sessions:
            self.model.forward(self.kv, s.prefix, 0, s.slots)
            for store in stores:
                self.transfer.save(store, self.ns, s.keys, s.table, after_stream=self.stream())
        for store in stores:
            store.flush()

    def _timed(self, sessions, serve) -> tuple[list[float], list]:
        torch = self.torch
        torch.cuda.synchronize()  # timing only: every session arrives at t0 on an idle GPU
        t0 = torch.cuda.Event(enable_timing=True)
        t0.record()
        done, firsts = [], []
        for s in sessions:
            firsts.append(serve(s))
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            done.append(e)
        torch.cuda.synchronize()
        return [t0.elapsed_time(e) / 1e3 for e in done], firsts

    def recompute(self, sessions):
        def serve(s):
            self.model.forward(self.kv, s.prefix, 0, s.slots)
            return self.model.forward(self.kv, s.suffix, s.tokens, s.slots)
        return self._timed(sessions, serve)

    def hit(self, sessions, store):
        per = self.shape.layers // self.args.layer_groups

        def serve(s):
            # Read + verified on the host; no byte reaches the blocks before the compute stream's earlier
            # work (the zeroing of the cache, an earlier session's attention) has finished.
            n = self.transfer.load(store, self.ns, s.keys, s.table, after_stream=self.stream())
            if n != len(s.keys):
                raise RuntimeError(f"kvtier loaded {n} of {len(s.keys)} chunks")
            stream = self.stream()

            def before_layer(layer: int) -> None:
                if layer % per == 0:  # the compute stream waits for this layer group, the host does not
                    self.transfer.stream_wait_layers(layer // per, stream)
            return self.model.forward(self.kv, s.suffix, s.tokens, s.slots, before_layer=before_layer)
        return self._timed(sessions, serve)

    def answers(self, sessions, firsts):
        a = self.args
        return [self.model.decode(self.kv, f, s.tokens + a.suffix, s.slots, a.decode) for s, f in zip(sessions, firsts)]

    def reference_kv(self, s):
        layers = (0, self.shape.layers - 1)
        idx = s.slots[:s.tokens]
        return [t.clone() for layer in layers for t in self.kv.read(layer, idx)]

    def load_seconds(self, s, store) -> float:
        self.torch.cuda.synchronize()
        t = time.perf_counter()
        self.transfer.load(store, self.ns, s.keys, s.table, after_stream=self.stream())
        self.transfer.wait()
        return time.perf_counter() - t

    def level(self, tokens: int, concurrency: int, rounds: int, scratch: Path) -> dict:
        a, torch, kvtier = self.args, self.torch, self.kvtier
        paths = {"recompute": [], "mem": [], "file": []}
        loads, same, kv_same = [], True, True
        gib = -(-concurrency * tokens * self.layout.chunk_bytes // 256 // (1 << 30)) + 2
        for r in range(rounds):
            sessions = [Session(self.ns, hash((tokens, concurrency, r, i)) & 0xffffffff, tokens, a.suffix, a.decode,
                                self.alloc, self.kv, self.device, self.shape.vocab) for i in range(concurrency)]
            folder = scratch / f"r{tokens}-{concurrency}-{r}"
            mem = kvtier.Store([f"mem://?capacity={gib}GiB"])
            fil = kvtier.Store([f"file://{folder}?capacity={gib}GiB"], promote_on_load=False)
            try:
                self.first_visit(sessions, [mem, fil])
                t, firsts = self.recompute(sessions)
                paths["recompute"] += t
                want = self.answers(sessions, firsts)
                ref = self.reference_kv(sessions[0])
                for store, name in ((mem, "mem"), (fil, "file")):
                    for layer in range(self.shape.layers):  # the hit must write every byte itself
                        self.kv.k[layer].zero_()
                        self.kv.v[layer].zero_()
                    if name == "file":
                        self.dropped = drop_caches() and self.dropped
                    t, firsts = self.hit(sessions, store)
                    paths[name] += t
                    kv_same = kv_same and all(torch.equal(x, y) for x, y in zip(ref, self.reference_kv(sessions[0])))
                    got = self.answers(sessions, firsts)
                    same = same and got == want
                    if name == "mem":
                        loads.append(self.load_seconds(sessions[0], mem))
            finally:
                mem.close()
                fil.close()
                shutil.rmtree(folder, ignore_errors=True)
                for s in sessions:
                    self.alloc.free(s.table)
        out = {"tokens": tokens, "concurrency": concurrency, "rounds": rounds,
               "answers_identical": same, "kv_identical": kv_same}
        for name, values in paths.items():
            out[name] = logic.summarize(values)
        load_s = logic.percentile(loads, 50)
        out["load_seconds_p50"] = load_s
        out["load_gbps"] = (tokens // 256) * self.layout.chunk_bytes / load_s / 1e9
        out["load_share"] = load_s / out["mem"]["p50_s"]
        out["ttft_ratio"] = out["mem"]["p50_s"] / out["recompute"]["p50_s"]
        return out

    def run(self) -> dict:
        with self.torch.cuda.stream(self.compute):
            return self._run()

    def _run(self) -> dict:
        a = self.args
        scratch = Path(a.dir)
        scratch.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        # Warm-up: kernels, cuBLAS handles, kvtier's staging.
        warm = Session(self.ns, 7, 512, a.suffix, a.decode, self.alloc, self.kv, self.device, self.shape.vocab)
        self.model.forward(self.kv, warm.prefix, 0, warm.slots)
        self.model.forward(self.kv, warm.suffix, warm.tokens, warm.slots)
        self.alloc.free(warm.table)
        self.torch.cuda.synchronize()
        ttft, skipped = {}, []
        self.write(ttft, skipped, start, False)
        for tokens, concurrency, rounds in self.levels:
            if time.monotonic() - start > a.deadline:
                skipped.append(f"{tokens}_c{concurrency}")
                continue
            key = f"{tokens}_c{concurrency}"
            ttft[key] = self.level(tokens, concurrency, rounds, scratch)
            self.write(ttft, skipped, start, False)
            t = ttft[key]
            print(f"gpu_e2e: {tokens:6d} tokens c{concurrency:<2d}: recompute p50 {t['recompute']['p50_s']:.3f} s, "
                  f"mem hit {t['mem']['p50_s']:.3f} s, file hit {t['file']['p50_s']:.3f} s, "
                  f"load {t['load_gbps']:.1f} GB/s ({100 * t['load_share']:.0f}% of the hit TTFT), "
                  f"answers {'identical' if t['answers_identical'] else 'DIFFER'}", flush=True)
        self.transfer.close()
        return self.write(ttft, skipped, start, True)

    def write(self, ttft: dict, skipped: list, start: float, complete: bool) -> dict:
        """The results so far, written to --out (whole JSON at every moment: a temporary file renamed)."""
        a = self.args
        props = self.torch.cuda.get_device_properties(0)
        out = {"model": "llama-3.1-8b shape, random bf16 weights (one layer's reused), torch SDPA",
               "gpu": f"{props.name}, {props.total_memory >> 20} MiB", "torch": self.torch.__version__,
               "block_tokens": a.block_tokens, "layer_groups": a.layer_groups, "host_threads": a.host_threads,
               "staging_mib": a.staging_mib, "suffix_tokens": a.suffix,
               "decode_tokens": a.decode, "ttft": ttft, "skipped_levels": skipped,
               "page_cache_dropped": self.dropped,
               "answers_identical": bool(ttft) and all(t["answers_identical"] for t in ttft.values()),
               "kv_identical": bool(ttft) and all(t["kv_identical"] for t in ttft.values()),
               "seconds": time.monotonic() - start, "quick": a.quick, "complete": complete}
        if "32768_c1" in ttft:
            out["ttft_ratio_32k_c1"] = ttft["32768_c1"]["ttft_ratio"]
        tmp = Path(a.out + ".tmp")
        tmp.write_text(json.dumps(out, indent=2) + "\n")
        os.replace(tmp, a.out)
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dir", required=True, help="absolute scratch folder for the file:// tier")
    p.add_argument("--quick", action="store_true", help="logic.QUICK_LEVELS: 32K c1 and 8K c1 twice, 8K c4 once")
    p.add_argument("--deadline", type=float, default=300, help="seconds after which no new level starts")
    p.add_argument("--suffix", type=int, default=32)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--layer-groups", type=int, default=4)
    # 9 slots (host threads + 1) of 512 MiB hold a 32K-token llama-3.1-8b prefix (4 GiB) at once: one
    # wave, so a layer-wise load lands layer group 0 first (include/kvtier/gpu.h).
    p.add_argument("--staging-mib", type=int, default=512)
    p.add_argument("--host-threads", type=int, default=8)
    args = p.parse_args(argv)
    if not os.path.isabs(args.dir):
        p.error("--dir must be absolute")
    if 32 % args.layer_groups:
        p.error("--layer-groups must divide 32")
    try:
        import torch
    except ImportError as e:
        return _skip(args.out, f"PyTorch is not installed: {e}")
    if not torch.cuda.is_available():
        return _skip(args.out, "torch.cuda.is_available() is False")
    import kvtier.gpu
    if not kvtier.gpu.available(0):
        return _skip(args.out, "kvtier has no GPU path here: " + kvtier.gpu.why_not(0))
    result = Runner(args).run()
    return 0 if result["answers_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
