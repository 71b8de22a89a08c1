#!/usr/bin/python3
"""Load throughput through Python (kvtier package) next to the C++ Store, in the same run.

Loads 32 MiB chunks (llama-3.1-8b layout: 32 layers x 8 kv heads x 128 dims, bf16, 256 tokens = 128 KiB
per token) from mem:// and file:// through kvtier.Store.load, each chunk as 32 pieces (one per layer) of
one contiguous buffer, and runs build/bench/kvtier_load_reference (C++ Store::Load) on the same data set:
the same namespace, keys, bytes and piece layout. file:// runs twice: on a tmpfs folder (--dir, default
/dev/shm; tmpfs refuses O_DIRECT, so the tier reads buffered, from memory) and on a disk folder
(--disk-dir, default /var/tmp; the tier reads with O_DIRECT, from the device every time, so the figure
moves with the disk). Both sides load every chunk once untimed first. Each round runs both sides back to
back, alternating which goes first; the headline ratio is the median of the rounds' ratios, so a
disturbance hits one round's pair rather than one side. Best rounds are printed next to it.

    /usr/bin/python3 python/bench/load_throughput.py [--chunks 8] [--reps 5] [--rounds 5] [--json]

Needs `make python` (or KVTIER_LIBRARY) and the kvtier_load_reference target built.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import kvtier  # noqa: E402

LAYOUT = kvtier.Layout(32, 8, 128, "bf16", 256)
MODEL, TENANT, FIRST_TOKEN = "bench/llama-3.1-8b", "bench", 1


def pattern(chunk: int) -> int:
    return (chunk * 7 + 1) % 251  # the same bytes as kvtier_load_reference --populate


class Dataset:
    """Keys of the bench's tokens, one buffer of `chunks` chunks and its per-chunk piece lists."""

    def __init__(self, ns: kvtier.Namespace, chunks: int, pieces: int) -> None:
        n_tokens = chunks * LAYOUT.tokens_per_chunk
        self.keys = ns.chunk_keys(range(FIRST_TOKEN, FIRST_TOKEN + n_tokens))
        size = LAYOUT.chunk_bytes
        self.buffer = bytearray(chunks * size)
        view = memoryview(self.buffer)
        piece = size // pieces
        self.chunks = [[view[c * size + p * piece:c * size + (p + 1) * piece] for p in range(pieces)]
                       for c in range(chunks)]

    def fill(self) -> None:
        size = LAYOUT.chunk_bytes
        for c in range(len(self.keys)):
            self.buffer[c * size:(c + 1) * size] = bytes([pattern(c)]) * size

    def check(self) -> None:
        size = LAYOUT.chunk_bytes
        for c in range(len(self.keys)):
            if self.buffer[c * size] != pattern(c) or self.buffer[(c + 1) * size - 1] != pattern(c):
                raise SystemExit(f"chunk {c} has other bytes than saved")


def python_gbps(url: str, chunks: int, reps: int, pieces: int, populate: bool) -> float:
    with kvtier.Store([url]) as store, kvtier.Namespace(MODEL, LAYOUT, TENANT) as ns:
        data = Dataset(ns, chunks, pieces)
        if populate:
            data.fill()
            store.save(ns, data.keys, data.chunks)
            store.flush()
        data.buffer[:] = bytes(len(data.buffer))
        if store.load(ns, data.keys, data.chunks) != chunks:  # warm, untimed
            raise SystemExit(f"{url}: warm-up load did not load every chunk")
        data.check()
        start = time.perf_counter()
        for _ in range(reps):
            if store.load(ns, data.keys, data.chunks) != chunks:
                raise SystemExit(f"{url}: timed load did not load every chunk")
        seconds = time.perf_counter() - start
    return LAYOUT.chunk_bytes * chunks * reps / seconds / 1e9


def cpp_gbps(reference: Path, url: str, chunks: int, reps: int, pieces: int, populate: bool) -> float:
    cmd = [str(reference), "--tier", url, "--chunks", str(chunks), "--reps", str(reps), "--pieces",
           str(pieces), "--first-token", str(FIRST_TOKEN)] + (["--populate"] if populate else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["gbps"]


def measure(args: argparse.Namespace, name: str, url: str, in_memory: bool) -> dict:
    py, cpp = [], []
    for r in range(args.rounds):  # alternating which side goes first
        run_py = lambda: py.append(python_gbps(url, args.chunks, args.reps, args.pieces, in_memory))  # noqa
        run_cpp = lambda: cpp.append(cpp_gbps(args.reference, url, args.chunks, args.reps, args.pieces,  # noqa
                                              in_memory))
        for run in ((run_py, run_cpp) if r % 2 == 0 else (run_cpp, run_py)):
            run()
    pb, cb = max(py), max(cpp)
    pm, cm = statistics.median(py), statistics.median(cpp)
    ratio = statistics.median(p / c for p, c in zip(py, cpp))
    return {"tier": name, "ratio": round(ratio, 3), "median_python_gbps": round(pm, 3),
            "median_cpp_gbps": round(cm, 3), "best_python_gbps": round(pb, 3), "best_cpp_gbps": round(cb, 3),
            "python_rounds": [round(x, 3) for x in py], "cpp_rounds": [round(x, 3) for x in cpp]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=8, help="32 MiB chunks per load (default 8)")
    ap.add_argument("--reps", type=int, default=5, help="timed loads per round (default 5)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--pieces", type=int, default=32, help="pieces per chunk (default 32: one per layer)")
    ap.add_argument("--dir", default="/dev/shm", help="tmpfs parent of a file:// tier (default /dev/shm)")
    ap.add_argument("--disk-dir", default="/var/tmp", help="disk parent of a file:// tier (default /var/tmp)")
    ap.add_argument("--reference", type=Path, default=ROOT / "build" / "bench" / "kvtier_load_reference")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if not args.reference.is_file():
        raise SystemExit(f"{args.reference} not found: build the kvtier_load_reference target")
    capacity = f"{max(1, (args.chunks * LAYOUT.chunk_bytes) >> 30) + 1}GiB"
    results = [measure(args, "mem", f"mem://?capacity={capacity}", in_memory=True)]
    for name, parent in (("file (tmpfs, buffered)", args.dir), ("file (disk, O_DIRECT)", args.disk_dir)):
        with tempfile.TemporaryDirectory(prefix="kvtier-pybench.", dir=parent) as tmp:
            url = f"file://{tmp}/tier"
            Path(f"{tmp}/tier").mkdir()
            python_gbps(url, args.chunks, 1, args.pieces, populate=True)  # written once, then read
            results.append(measure(args, name, url, in_memory=False))
    report = {"chunk_bytes": LAYOUT.chunk_bytes, "chunks": args.chunks, "reps": args.reps,
              "rounds": args.rounds, "pieces": args.pieces, "target_ratio": 0.9, "results": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.chunks} x 32 MiB chunks, {args.pieces} pieces each, {args.reps} loads x {args.rounds} rounds; "
          "ratio = median of the rounds' python/C++ ratios")
    for r in results:
        verdict = "ok" if r["ratio"] >= 0.9 else "below target"
        print(f"{r['tier']:<24} python {r['median_python_gbps']:6.2f} GB/s   C++ {r['median_cpp_gbps']:6.2f} GB/s "
              f"(medians)   ratio {r['ratio']:.3f} (target >= 0.9: {verdict});   best rounds "
              f"{r['best_python_gbps']:.2f} / {r['best_cpp_gbps']:.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
