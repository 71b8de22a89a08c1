"""kvtier's SGLang backend: the identity matrix and the issue-22 regressions on SGLang 0.5.23's real host
pools and HiCacheStorageConfig (formerly python/tests/connectors/test_sglang_identity.py, over stand-ins).

Backends here are built as the dynamic factory builds them, ``KvtierHiCacheStorage(storage_config,
kwargs)``, with one kvtier Store shared where the test needs several configurations to see one pool at
once (a file:// tier's index is its own process's). Helpers: sglang_hicache.py, sglang_connector.py.
"""

from __future__ import annotations

import itertools
import logging

import pytest
import torch
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

import kvtier
from kvtier.connectors.sglang import KvtierHiCacheStorage
from sglang_connector import put
from sglang_hicache import PAGE, host_pool, indices, page_bytes, page_key, storage_config


def flat_bytes(page: torch.Tensor) -> bytes:
    return page.contiguous().view(torch.uint8).numpy().tobytes()


def write(b, pool, io_path, key, p, slot) -> bytes:
    """Stores page p from ``slot``; returns its bytes as this I/O path reads them back."""
    put(pool, slot, p)
    if io_path == "v1":
        assert b.batch_set_v1([key], indices([slot])) == [True]
        return page_bytes(pool, slot)
    page = pool.get_data_page(slot * PAGE, flat=True)
    assert b.batch_set([key], [page])
    return flat_bytes(page)


def read(b, pool, io_path, key, slot):
    """The page's bytes, or None on a miss (exists first, as the prefetch thread does)."""
    if b.batch_exists([key]) != 1:
        assert _load(b, pool, io_path, key, slot) is None  # a load finds nothing either
        return None
    return _load(b, pool, io_path, key, slot)


def _load(b, pool, io_path, key, slot):
    if io_path == "v1":
        put(pool, slot, 999)  # poison
        return page_bytes(pool, slot) if b.batch_get_v1([key], indices([slot])) == [True] else None
    target = pool.get_dummy_flat_data_page()
    got = b.batch_get([key], [target])
    return None if got[0] is None else flat_bytes(target)


def config(url, layout, io_path, revision="r1", tp_size=1, tp_rank=0):
    return storage_config(url, layout, interface_v1=(io_path == "v1"), tp_size=tp_size, tp_rank=tp_rank,
                          model_revision=revision)


def dtype_pool(layout, dtype):
    pool = host_pool(layout)
    if dtype != torch.bfloat16:  # same geometry in another KV dtype
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        device = MHATokenToKVPool(size=64, page_size=PAGE, dtype=dtype, head_num=pool.head_num,
                                  head_dim=pool.head_dim, layer_num=pool.layer_num, device="cpu",
                                  enable_memory_saver=False)
        pool = MHATokenToKVPoolHost(device._mha_buffer_info(), host_to_device_ratio=4.0, host_size=0,
                                    page_size=PAGE, layout=layout, pin_memory=False, device="cpu",
                                    device_capacity_tokens=64, start_layer=0, end_layer=pool.layer_num - 1)
    return pool


LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MATRIX = list(itertools.product(LAYOUTS, ("v1", "generic"), (torch.bfloat16, torch.float16), (1, 2),
                                ("r1", "r2")))


def test_cross_configuration_matrix_misses_unless_equal(tmp_path):
    """Write one page under each of 64 configurations X (layout x I/O path x KV dtype x TP size x
    revision), read it under every Y: X != Y is always a miss, X == Y a byte-exact hit. The two dtypes
    (bf16, fp16) give pages of one size: only the identity can tell them apart (the dangerous case;
    fp8 pages would differ in size already)."""
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    with kvtier.Store(["mem://?capacity=32MiB", url]) as store:
        backends = []
        for layout, io_path, dtype, tp, rev in MATRIX:
            b = KvtierHiCacheStorage(config(url, layout, io_path, rev, tp_size=tp), {}, store=store)
            b.register_mem_pool_host(dtype_pool(layout, dtype))
            backends.append((b, io_path))
        written = [write(b, b.mem_pool_host, io, page_key(x), x, slot=0) for x, (b, io) in enumerate(backends)]
        wrong = []
        for x, (y, (b, io_path)) in itertools.product(range(len(MATRIX)), enumerate(backends)):
            got = read(b, b.mem_pool_host, io_path, page_key(x), slot=1)
            if x == y:
                assert got == written[x], MATRIX[x]
            elif got is not None:
                wrong.append((MATRIX[x], MATRIX[y]))
        assert not wrong, f"{len(wrong)} pairs shared a page, e.g. {wrong[:3]}"
        for b, _ in backends:
            b.close()


class SomeNewHostPool(MHATokenToKVPoolHost):
    """A host pool class kvtier was not written for (the real pool under another name)."""


def test_unknown_layout_or_host_pool_is_refused_at_construction(tmp_path):
    url = f"file://{tmp_path}?capacity=16MiB"
    cfg = config(url, "page_first", "v1")
    cfg.layout = "page_diagonal"  # a revision that names its layout: an unknown name is refused
    with pytest.raises(ValueError, match="unknown SGLang host layout 'page_diagonal'"):
        KvtierHiCacheStorage(cfg, {})
    b = KvtierHiCacheStorage(config(url, "page_first", "v1"), {})
    try:
        with pytest.raises(ValueError, match="SomeNewHostPool is not one"):
            b.register_mem_pool_host(host_pool("page_first", cls=SomeNewHostPool))
    finally:
        b.close()
    with pytest.raises(ValueError, match="host pool SomeNewHostPool"):
        KvtierHiCacheStorage(config(url, "page_first", "v1"),
                             {"mem_pool_host": host_pool("page_first", cls=SomeNewHostPool)})


def test_batch_exists_right_after_set_counts_every_page(tmp_path):
    """Issue 22: batch_exists right after a successful batch_set_v1 counted 0-3 of 4 pages when the
    pages were still being written to a background tier."""
    url = f"file://{tmp_path}/t?capacity=64MiB"
    pool = host_pool("page_first")
    for round_ in range(20):
        b = KvtierHiCacheStorage(config(url, "page_first", "v1"), {})
        b.register_mem_pool_host(pool)
        try:
            keys = [page_key(1000 + 4 * round_ + i) for i in range(4)]
            for i in range(4):
                put(pool, i, 4 * round_ + i)
            assert b.batch_set_v1(keys, indices(range(4))) == [True] * 4
            assert b.batch_exists(keys) == 4
        finally:
            b.close()


def test_ranks_get_their_own_file_directory(tmp_path):
    """Issue 22: every TP rank received the same extra config and opened one file:// directory."""
    shared = f"file://{tmp_path}/shared?capacity=16MiB"
    with pytest.raises(ValueError, match="would share the file:// directory"):
        KvtierHiCacheStorage(config(shared, "page_first", "v1", tp_size=2, tp_rank=1), {})
    per_rank = f"file://{tmp_path}/rank{{tp_rank}}?capacity=16MiB"
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
        b = KvtierHiCacheStorage(config(per_rank, "page_first", "v1", tp_size=2, tp_rank=rank), {})
        b.register_mem_pool_host(host_pool("page_first"))
        write(b, b.mem_pool_host, "v1", page_key(rank), rank, 0)
        b.close()
    for rank in (0, 1):
        assert list((tmp_path / f"rank{rank}").rglob("*.kvc")), f"rank {rank} wrote nothing"
    with pytest.raises(ValueError, match="unknown placeholder"):
        KvtierHiCacheStorage(config(f"file://{tmp_path}/r{{tp}}", "page_first", "v1"), {})


def test_unknown_engine_argument_in_kwargs_is_ignored(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        b = KvtierHiCacheStorage(config(f"file://{tmp_path}?capacity=16MiB", "page_first", "v1"),
                                 {"some_new_engine_arg": 1})
    b.close()
