#!/usr/bin/python3
"""Saves numpy arrays as KV chunks by token ids, reloads them and checks they are identical.

Run from the repository root after `make python`:  /usr/bin/python3 examples/save_load.py
"""
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))  # the package in ./python
import kvtier  # noqa: E402

layout = kvtier.Layout(layers=4, kv_heads=2, head_dim=64, dtype="fp16", tokens_per_chunk=16)
tokens = list(range(100, 100 + 3 * layout.tokens_per_chunk))  # a prompt of 3 full chunks
shape = (2, layout.layers, layout.kv_heads, layout.tokens_per_chunk, layout.head_dim)  # K/V x layers x ...
kv = [np.random.default_rng(i).standard_normal(shape).astype(np.float16) for i in range(3)]

with tempfile.TemporaryDirectory() as tmp:
    tiers = ["mem://?capacity=64MiB", f"file://{tmp}/kv"]
    with kvtier.Store(tiers) as store, store.namespace("example/model", layout) as ns:
        keys = ns.chunk_keys(tokens)  # one key per full chunk, chained over the prefix
        store.save(ns, keys, kv)      # zero-copy from the arrays; file:// written in the background
        store.flush()
    with kvtier.Store(tiers) as store, store.namespace("example/model", layout) as ns:  # a restart
        keys = ns.chunk_keys(tokens)
        hit = store.lookup(ns, keys)
        out = [np.empty(shape, dtype=np.float16) for _ in range(hit)]
        loaded = store.load(ns, keys[:hit], out)  # verified, straight into the arrays (from file://)

same = loaded == 3 and all(np.array_equal(a, b) for a, b in zip(kv, out))
print(f"kvtier {kvtier.__version__}: saved 3 chunks, loaded {loaded}, identical: {same}")
sys.exit(0 if same else 1)
