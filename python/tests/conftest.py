"""Shared fixtures. The package is imported from ../ (python/), the library from $KVTIER_LIBRARY (ctest
sets it to the build's libkvtier.so) or the package's own lookup order."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kvtier  # noqa: E402

# A small layout: 2 x 2 layers x 2 heads x 8 dims x 2 bytes x 16 tokens = 2048 bytes per chunk.
LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp16", tokens_per_chunk=16)
CHUNK = LAYOUT.chunk_bytes


def chunk_bytes(i: int) -> bytes:
    """Distinct, recognisable content of chunk i (no zero bytes, so a zeroed destination shows)."""
    return bytes(((i * 37 + j) % 251) + 1 for j in range(CHUNK))


def tokens(n_chunks: int, first: int = 1000) -> list[int]:
    return list(range(first, first + n_chunks * LAYOUT.tokens_per_chunk))


@pytest.fixture
def mem_store():
    with kvtier.Store(["mem://?capacity=64MiB"]) as store:
        yield store


@pytest.fixture
def file_dir(tmp_path):
    d = tmp_path / "tier"
    d.mkdir()
    return d


@pytest.fixture
def ns():
    with kvtier.Namespace("test/model", LAYOUT, tenant="t") as namespace:
        yield namespace


@pytest.fixture
def saved(mem_store, ns):
    """(store, ns, keys) with 4 chunks saved."""
    keys = ns.chunk_keys(tokens(4))
    mem_store.save(ns, keys, [chunk_bytes(i) for i in range(4)])
    return mem_store, ns, keys
