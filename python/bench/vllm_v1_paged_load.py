"""Loading 32 MiB chunks through KvtierConnector into CPU paged blocks vs Store.load into one contiguous
buffer, in the same run.

The chunks (llama-3.1-8b geometry: 32 layers, 8 KV heads, head_dim 128, bf16, 256 tokens = 32 MiB) are
saved once into a mem:// tier. Each round loads them (a) with Store.load into one contiguous buffer and
(b) through the connector's worker side (start_load_kv, wait_for_layer_load of every layer,
wait_for_save) into the paged tensors of one of vLLM's layouts, once with a shuffled block table and
once with consecutive block ids (a fresh engine's free list: adjacent regions are one piece), which
kvtier fills straight from the verified chunk. ``--layout cpu_attn`` (the default) is vLLM's CPU
backend, [2, num_blocks, 8, block_size, 128] per layer (vllm/v1/attention/backends/cpu_attn.py), at
its default block size of 128 tokens (vllm/platforms/cpu.py); a region is one head's rows of one block
(32 KiB), 8 x 32 x 2 x 2 of them per chunk. ``--layout flash_attn`` is FlashAttention's NHD
[2, num_blocks, block_size, 8, 128] (a region is one block's K or V: 32 KiB at ``--block-size 16``). Both destinations are torch tensors (one allocator, no huge pages for
either). Every round runs each case once, in an order that rotates from round to round (no case always
follows another); the median of each case is printed with its ratio to (a), and so is the median of
the per-round ratios (a round's cases ran within a fraction of a second of each other, so on a shared,
loaded machine that figure moves less than the ratio of medians).

``--model deepseek-v3``: the same with DeepSeek-V3's MLA cache (61 layers of one 576-value latent, bf16,
256 tokens = 17.2 MiB a chunk, kvtier's grouped latent layout) into vLLM's MLA tensors
[num_blocks, block_size, 576] per layer (default block size 16 there): per chunk 61 x 16 block regions
of 18 KiB; ``--layout`` does not apply.

    PYTHONPATH=python KVTIER_LIBRARY=build/src/capi/libkvtier.so python3 python/bench/vllm_v1_paged_load.py
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kvtier  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, KvtierConnectorMetadata, LoadSpec, ModelSpec  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--block-size", type=int, default=0, help="default: 128 (vLLM's CPU default), MLA 16")
    ap.add_argument("--layout", choices=("cpu_attn", "flash_attn"), default="cpu_attn")
    ap.add_argument("--model", choices=("llama-3.1-8b", "deepseek-v3"), default="llama-3.1-8b")
    args = ap.parse_args(argv)
    mla = args.model == "deepseek-v3"
    T, bs = 256, args.block_size or (16 if mla else 128)
    if mla:
        spec = ModelSpec(model="bench/deepseek-v3", layers=61, kv_heads=1, head_dim=576, kv_dtype="bfloat16",
                         block_size=bs, attention="mla")
    else:
        spec = ModelSpec(model="bench/llama-3.1-8b", layers=32, kv_heads=8, head_dim=128, kv_dtype="bfloat16",
                         block_size=bs)
    n = args.chunks
    store = kvtier.Store([f"mem://?capacity={(n + 2) * 32}MiB"])  # a chunk is at most 32 MiB
    worker = KvtierConnectorCore("worker", spec, {"tiers": "mem://", "chunk_tokens": T,
                                                  "kv_cache_layout": args.layout}, store=store)
    ns = worker.namespace
    chunk_bytes = ns.layout.chunk_bytes
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 128000, n * T).tolist()
    keys = ns.chunk_keys(tokens)
    payload = [rng.integers(0, 255, chunk_bytes, dtype=np.uint8) for _ in range(n)]
    store.save(ns, keys, payload)
    store.flush()
    del payload

    per = T // bs
    num_blocks = n * per + 4
    shape = ((num_blocks, bs, 576) if mla else
             (2, num_blocks, 8, bs, 128) if args.layout == "cpu_attn" else (2, num_blocks, bs, 8, 128))
    caches = {f"model.layers.{i}.self_attn.attn": torch.zeros(shape, dtype=torch.bfloat16)
              for i in range(spec.layers)}
    worker.register_kv_caches(caches)
    shuffled = list(range(num_blocks))
    random.Random(0).shuffle(shuffled)
    tables = {"shuffled": shuffled[:n * per], "consecutive": list(range(4, 4 + n * per))}
    # Both destinations from torch's allocator: numpy would madvise its large buffer into huge pages,
    # torch's tensors (vLLM's cache) get none, and the comparison would measure the TLB, not kvtier.
    contiguous = torch.zeros(n * chunk_bytes, dtype=torch.uint8).numpy()
    views = [memoryview(contiguous)[i * chunk_bytes:(i + 1) * chunk_bytes] for i in range(n)]

    def plain() -> float:
        t = time.perf_counter()
        got = store.load(ns, keys, views)
        dt = time.perf_counter() - t
        assert got == n, got
        return dt

    def connector(table) -> float:
        meta = KvtierConnectorMetadata(loads=[LoadSpec("r", tokens, 0, table, False)])
        t = time.perf_counter()
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        for name in caches:  # as vLLM's attention layers do; the last one returns once every byte landed
            worker.wait_for_layer_load(name)
        worker.wait_for_save()  # the step's end: the loads are accounted for
        dt = time.perf_counter() - t
        worker.clear_connector_metadata()
        assert not worker.get_block_ids_with_load_errors()
        return dt

    cases = {"contiguous": plain}
    cases.update({name: (lambda table=table: connector(table)) for name, table in tables.items()})
    for run in cases.values():  # warm: page faults of the destinations
        run()
    times = {name: [] for name in cases}
    order = list(cases)
    for r in range(args.rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            times[name].append(cases[name]())
    a = times.pop("contiguous")
    gb = n * chunk_bytes / 1e9
    pa = gb / statistics.median(a)
    # spot-check the first region of a connector load against the contiguous copy (the chunk's first
    # bytes: layer 0 K of head 0 in head-major chunks, of every head in classic ones)
    table = tables["consecutive"]
    connector(table)
    layer0 = caches["model.layers.0.self_attn.attn"]
    k0 = layer0[table[0]] if mla else layer0[0, table[0]]
    k0 = (k0[0] if args.layout == "cpu_attn" and not mla else k0).contiguous().view(torch.uint8).numpy().ravel()
    assert np.array_equal(k0, contiguous[:k0.size]), "connector load differs from Store.load"
    layout = "mla" if mla else args.layout
    print(f"{args.model}: chunks {n} x {chunk_bytes / 2**20:.1f} MiB, layout {layout}, block {bs} tokens, "
          f"{args.rounds} rounds, loadavg "
          f"{open('/proc/loadavg').read().split()[:3]}")
    print(f"Store.load into one contiguous buffer: median {pa:.2f} GB/s (best {gb / min(a):.2f})")
    for name, t in times.items():
        pb = gb / statistics.median(t)
        paired = statistics.median(x / y for x, y in zip(a, t))
        print(f"KvtierConnector into CPU paged blocks, {name} block table: median {pb:.2f} GB/s "
              f"(best {gb / min(t):.2f}); ratio to contiguous {pb / pa:.3f} (median of per-round ratios "
              f"{paired:.3f})")
    worker.shutdown()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
