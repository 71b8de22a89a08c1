"""Returning sessions served through KvtierConnector (kvtier.connectors.vllm_v1), against recompute.

    python3 -m gpu_e2e.connector_run --out connector.json --dir /abs/scratch [--quick] [--device cpu --small]

(run from python/, kvtier importable, libkvtier.so built with CUDA for --device cuda). For each context
length (8K and 32K; --quick: 8K) and each tier (mem://, file://) a session of the llama-shaped model
(gpu_e2e.model, llama-3.1-8b geometry; --small: a tiny one) is served three ways, its paged KV in
vLLM's FlashAttention layout (per layer [2, num_blocks, block_size, kv_heads, head_dim], bf16):
  1. first visit: prefill the context, then save its chunks through the connector's worker side
     (metadata with a SaveSpec, wait_for_save; on CUDA tensors kvtier.gpu gathers the blocks);
  2. recompute: a fresh cache, the context and `--suffix` new tokens prefilled; TTFT = until the first
     token;
  3. hit: a fresh cache, the context loaded through the connector (start_load_kv; the model calls
     wait_for_layer_load before each layer), then only the suffix prefilled;
then both decode `--decode` greedy tokens, which must be equal. Writes one JSON object (rewritten after
every level, "complete": false until the end). With --device cuda and no usable GPU: exit 2 with
{"skipped": reason}. --device cpu runs the same logic on the connector's host path (the CPU smoke run
of python/tests/connectors/test_vllm_v1_gpu.py).
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from . import logic


def _skip(out: str, reason: str) -> int:
    Path(out).write_text(json.dumps({"skipped": reason}) + "\n")
    print(f"gpu_e2e connector: skipped: {reason}")
    return 2


class FlashAttnKv:
    """gpu_e2e.model.PagedKv over vLLM FlashAttention tensors (K of layer l is tensors[name][0])."""

    def __init__(self, shape, num_blocks: int, block_tokens: int, device) -> None:
        import torch
        from .model import PagedKv
        self._paged = PagedKv.__new__(PagedKv)
        self._paged.shape, self._paged.num_blocks, self._paged.block_tokens = shape, num_blocks, block_tokens
        dims = (2, num_blocks, block_tokens, shape.kv_heads, shape.head_dim)
        self.tensors = {f"model.layers.{i}.self_attn.attn": torch.zeros(dims, dtype=torch.bfloat16, device=device)
                        for i in range(shape.layers)}
        self._paged.k = [t[0] for t in self.tensors.values()]
        self._paged.v = [t[1] for t in self.tensors.values()]
        self.names = list(self.tensors)

    def __getattr__(self, name):
        return getattr(self._paged, name)


def _worker(spec, url: str, chunk: int, kv: FlashAttnKv):
    from kvtier.connectors.vllm_v1 import KvtierConnectorCore
    w = KvtierConnectorCore("worker", spec, {"tiers": url, "chunk_tokens": chunk, "layer_groups": 4})
    w.register_kv_caches(kv.tensors)
    return w


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def serve(model, shape, spec, url: str, context: int, args, device) -> dict:
    """One level: first visit (save), recompute, hit; the figures and whether the tokens agree."""
    import torch
    from kvtier.connectors.vllm_v1 import KvtierConnectorMetadata, LoadSpec, SaveSpec
    bs, chunk = args.block_tokens, args.chunk_tokens
    text = logic.prompt(context, context + args.suffix, shape.vocab)
    blocks = logic.blocks_for(context + args.suffix + args.decode, bs)
    table = list(range(blocks))

    def run(kv, worker, load: bool) -> tuple[float, list]:
        slots = kv.slots(table, 0, context + args.suffix + args.decode, device)
        _sync(device)
        t0 = time.perf_counter()
        start = 0
        if load:
            worker.bind_connector_metadata(KvtierConnectorMetadata(
                loads=[LoadSpec("s", text[:context], 0, table[:context // bs], False)]))
            worker.start_load_kv(None)
            start = context
        wait = (lambda layer: worker.wait_for_layer_load(kv.names[layer])) if load else None
        first = model.forward(kv, torch.tensor(text[start:], device=device), start, slots, before_layer=wait)
        _sync(device)
        ttft = time.perf_counter() - t0
        if load:
            worker.wait_for_save()
            worker.clear_connector_metadata()
        return ttft, model.decode(kv, first, context + args.suffix, slots, args.decode)

    kv = FlashAttnKv(shape, blocks, bs, device)
    w = _worker(spec, url, chunk, kv)
    slots = kv.slots(table, 0, context, device)
    model.forward(kv, torch.tensor(text[:context], device=device), 0, slots)
    _sync(device)
    w.bind_connector_metadata(KvtierConnectorMetadata(
        saves=[SaveSpec("s", text[:context], 0, table[:context // bs])]))
    w.wait_for_save()
    w.clear_connector_metadata()
    w.handle_preemptions(KvtierConnectorMetadata(preempted={"s"}))  # waits for the request's saves
    ttft_recompute, want = run(FlashAttnKv(shape, blocks, bs, device), None, False)
    kv = FlashAttnKv(shape, blocks, bs, device)
    hit = _worker(spec, url, chunk, kv)  # the same Store (one per process and configuration): mem:// too
    ttft_hit, got = run(kv, hit, True)
    stats = hit.stats()
    hit.shutdown()
    w.shutdown()
    return {"context": context, "tier": url.split(":")[0], "ttft_recompute_s": ttft_recompute,
            "ttft_hit_s": ttft_hit, "speedup": ttft_recompute / ttft_hit if ttft_hit else None,
            "loaded_chunks": stats["loaded_chunks"], "load_errors": stats["load_errors"],
            "tokens_equal": got == want}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dir", required=True, help="absolute scratch folder for the file:// tier")
    p.add_argument("--quick", action="store_true", help="8K only")
    p.add_argument("--device", default="cuda")
    p.add_argument("--small", action="store_true", help="a tiny model and contexts (the CPU smoke run)")
    p.add_argument("--contexts", default="", help="comma-separated context tokens (default 8192,32768)")
    p.add_argument("--suffix", type=int, default=32)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--chunk-tokens", type=int, default=256)
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        return _skip(args.out, "no PyTorch")
    import kvtier.gpu
    from kvtier.connectors.vllm_v1 import ModelSpec
    from .model import LLAMA_3_1_8B, Model, Shape
    device = torch.device(args.device)
    if device.type == "cuda":
        reason = "" if torch.cuda.is_available() else "torch has no CUDA device"
        reason = reason or kvtier.gpu.why_not(device.index or 0)
        if reason:
            return _skip(args.out, reason)
    shape = Shape(layers=2, hidden=64, q_heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512) if args.small \
        else LLAMA_3_1_8B
    contexts = [int(c) for c in args.contexts.split(",") if c] or ([8192] if args.quick else [8192, 32768])
    spec = ModelSpec(model="gpu_e2e/llama" + ("-tiny" if args.small else "-3.1-8b"), revision="seed0",
                     layers=shape.layers, kv_heads=shape.kv_heads, head_dim=shape.head_dim, kv_dtype="bfloat16",
                     block_size=args.block_tokens)
    model = Model(shape, device, seed=0)
    scratch = Path(args.dir)
    scratch.mkdir(parents=True, exist_ok=True)
    gib = max(1, 2 * max(contexts) * 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 >> 30)
    urls = [f"mem://?capacity={gib}GiB", f"file://{scratch / 'file'}?capacity={gib}GiB"]
    result = {"device": str(device), "shape": "tiny" if args.small else "llama-3.1-8b", "levels": [],
              "complete": False}
    for context in contexts:
        for url in urls:
            level = serve(model, shape, spec, url, context, args, device)
            result["levels"].append(level)
            print(f"gpu_e2e connector: {json.dumps(level)}")
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(scratch / "file", ignore_errors=True)
    result["complete"] = True
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(lv["tokens_equal"] and not lv["load_errors"] for lv in result["levels"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
