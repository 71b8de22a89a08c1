"""SGLang connector: identity matrix and the regression tests of issue 22.

Call conventions as in python/tests/engines/sglang_connector.py (SGLang's backend_factory.py builds
``cls(storage_config, kwargs)``, cache_controller.py calls ``register_mem_pool_host`` and then
``batch_set_v1`` / ``batch_exists`` / ``batch_get_v1`` on its backup and prefetch threads, or
``batch_set`` / ``batch_get`` without ``interface_v1``).
"""

from __future__ import annotations

import itertools
import logging
import threading

import numpy as np
import pytest

import kvtier
from connector_helpers import file_tier, requires_library  # noqa: F401
from sglang_standin import (DIM, HEADS, LAYERS, PAGE, MHATokenToKVPoolHost, host_indices, page_data,
                            page_key, storage_config)

pytestmark = requires_library

from kvtier.connectors.sglang import KvtierHiCacheStorage  # noqa: E402


class MLATokenToKVPoolHost(MHATokenToKVPoolHost):
    """Stand-in for SGLang's MLA host pool (only the class name and MLA attributes differ here)."""

    def __init__(self, layout="page_first"):
        super().__init__(layout)
        self.kv_lora_rank, self.qk_rope_head_dim = 512, 64


class AsymmetricMHATokenToKVPoolHost(MHATokenToKVPoolHost):
    """Stand-in for SGLang's pool with V head dim != K head dim: like the real one, its flat-page
    calls raise NotImplementedError."""

    def __init__(self, layout="page_first"):
        super().__init__(layout)
        self.v_head_dim = DIM // 2
        self.size_per_token = 2 * LAYERS * HEADS * DIM * 2

    def get_dummy_flat_data_page(self):
        raise NotImplementedError("flat pages are not supported for asymmetric K/V")

    def get_page_buffer_meta(self, indices):
        raise NotImplementedError("zero-copy pages are not supported for asymmetric K/V")


class SomeNewHostPool(MHATokenToKVPoolHost):
    pass


def config(tiers, layout, io_path, revision="r1", tp_size=1, tp_rank=0, mla=False):
    cfg = storage_config(tiers, interface_v1=(io_path == "v1"))
    cfg.is_page_first_layout = layout != "layer_first"  # all it says about the layout
    cfg.tp_size, cfg.tp_rank, cfg.is_mla_model = tp_size, tp_rank, mla
    cfg.extra_config["model_revision"] = revision
    return cfg


def write(backend, pool, io_path, key, data, slot):
    pool.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE] = data
    if io_path == "v1":
        return all(backend.batch_set_v1([key], host_indices([slot]), None))
    return backend.batch_set([key], [pool.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE].copy()])


def read(backend, pool, io_path, key, slot):
    """The page read back, or None on a miss (exists first, as the prefetch thread does)."""
    if backend.batch_exists([key], None) != 1:
        assert _load(backend, pool, io_path, key, slot) is None  # a load finds nothing either
        return None
    return _load(backend, pool, io_path, key, slot)


def _load(backend, pool, io_path, key, slot):
    pool.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE] = 0
    if io_path == "v1":
        if backend.batch_get_v1([key], host_indices([slot]), None) != [True]:
            return None
        return pool.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE].copy()
    target = np.zeros((2, PAGE, LAYERS, HEADS, DIM), dtype=np.uint16)
    got = backend.batch_get([key], [target])
    return None if got[0] is None else target


LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MATRIX = list(itertools.product(LAYOUTS, ("v1", "generic"), ("torch.bfloat16", "torch.float8_e4m3fn"),
                                (1, 2), ("r1", "r2")))


def test_cross_configuration_matrix_misses_unless_equal(tmp_path):
    """Write one page under each configuration X, read it under every Y: X != Y is always a miss,
    X == Y a byte-exact hit. All configurations have pages of the same size (the dangerous case)."""
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    with kvtier.Store(["mem://?capacity=32MiB", url]) as store:
        backends = []
        for i, (layout, io_path, dtype, tp, rev) in enumerate(MATRIX):
            pool = MHATokenToKVPoolHost(layout)
            pool.dtype = dtype
            b = KvtierHiCacheStorage(config([url], layout, io_path, rev, tp_size=tp), {}, store=store)
            b.register_mem_pool_host(pool)
            backends.append((b, pool, io_path))
        for x, (b, pool, io_path) in enumerate(backends):
            assert write(b, pool, io_path, page_key(x), page_data(x), slot=0)
        wrong = []
        for (x, _), (y, (b, pool, io_path)) in itertools.product(enumerate(MATRIX), enumerate(backends)):
            got = read(b, pool, io_path, page_key(x), slot=1)
            if x == y:
                assert got is not None and np.array_equal(got, page_data(x)), MATRIX[x]
            elif got is not None:
                wrong.append((MATRIX[x], MATRIX[y]))
        assert not wrong, f"{len(wrong)} pairs shared a page, e.g. {wrong[:3]}"
        for b, _, _ in backends:
            b.close()


def test_page_first_direct_writer_and_layer_first_reader_do_not_share(file_tier):
    """Issue 22: the old salt only told page_first from the rest, so a layer_first reader got hits
    holding a page_first_direct writer's bytes."""
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        writer = KvtierHiCacheStorage(config([url], "page_first_direct", "v1"), {}, store=store)
        writer.register_mem_pool_host(MHATokenToKVPoolHost("page_first_direct"))
        reader = KvtierHiCacheStorage(config([url], "layer_first", "v1"), {}, store=store)
        reader.register_mem_pool_host(MHATokenToKVPoolHost("layer_first"))
        assert write(writer, writer.mem_pool_host, "v1", page_key(1), page_data(1), 0)
        assert read(reader, reader.mem_pool_host, "v1", page_key(1), 0) is None
        assert np.array_equal(read(writer, writer.mem_pool_host, "v1", page_key(1), 0), page_data(1))
        writer.close()
        reader.close()


def test_layer_first_v1_writer_and_generic_reader_do_not_share(file_tier):
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        pool = MHATokenToKVPoolHost("layer_first")
        v1 = KvtierHiCacheStorage(config([url], "layer_first", "v1"), {}, store=store)
        v1.register_mem_pool_host(pool)
        generic = KvtierHiCacheStorage(config([url], "layer_first", "generic"), {}, store=store)
        generic.register_mem_pool_host(pool)
        assert write(v1, pool, "v1", page_key(2), page_data(2), 0)
        assert read(generic, pool, "generic", page_key(2), 1) is None
        assert v1.identity != generic.identity
        v1.close()
        generic.close()


def test_unknown_layout_or_host_pool_is_refused_at_construction(file_tier):
    url, _ = file_tier
    cfg = config([url], "page_first", "v1")
    cfg.layout = "page_diagonal"  # a revision that names its layout: an unknown name is refused
    with pytest.raises(ValueError, match="unknown SGLang host layout 'page_diagonal'"):
        KvtierHiCacheStorage(cfg, {})
    backend = KvtierHiCacheStorage(config([url], "page_first", "v1"), {})
    try:
        with pytest.raises(ValueError, match="SomeNewHostPool is not one"):
            backend.register_mem_pool_host(SomeNewHostPool())
        with pytest.raises(ValueError, match="unknown SGLang host layout 'page_sideways'"):
            backend.register_mem_pool_host(MHATokenToKVPoolHost("page_sideways"))
        with pytest.raises(ValueError, match="does not match is_mla_model"):
            backend.register_mem_pool_host(MLATokenToKVPoolHost())
        with pytest.raises(ValueError, match="host pool SomeNewHostPool"):
            KvtierHiCacheStorage(config([url], "page_first", "v1"), {"mem_pool_host": SomeNewHostPool()})
    finally:
        backend.close()


def test_mla_pages_are_shared_across_tp_ranks_and_mha_pages_are_not(file_tier):
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        def backend(mla, rank):
            b = KvtierHiCacheStorage(config([url], "page_first", "v1", tp_size=2, tp_rank=rank, mla=mla),
                                     {}, store=store)
            b.register_mem_pool_host(MLATokenToKVPoolHost() if mla else MHATokenToKVPoolHost())
            return b
        mla0, mla1, mha0, mha1 = backend(True, 0), backend(True, 1), backend(False, 0), backend(False, 1)
        assert mla0.identity.get("tp_rank") == "replicated"
        assert write(mla0, mla0.mem_pool_host, "v1", page_key(3), page_data(3), 0)
        store.flush()  # another rank is another process: it sees the page once the tier holds it
        assert np.array_equal(read(mla1, mla1.mem_pool_host, "v1", page_key(3), 1), page_data(3))
        assert write(mha0, mha0.mem_pool_host, "v1", page_key(4), page_data(4), 0)
        assert read(mha1, mha1.mem_pool_host, "v1", page_key(4), 1) is None
        for b in (mla0, mla1, mha0, mha1):
            b.close()


def test_batch_exists_right_after_set_counts_every_page(tmp_path):
    """Issue 22: batch_exists right after a successful batch_set_v1 counted 0-3 of 4 pages when the
    pages were still being written to a background tier."""
    url = f"file://{tmp_path}/t?capacity=64MiB"
    for round_ in range(20):
        pool = MHATokenToKVPoolHost()
        backend = KvtierHiCacheStorage(config([url], "page_first", "v1"), {})
        backend.register_mem_pool_host(pool)
        try:
            keys = [page_key(1000 + 4 * round_ + i) for i in range(4)]
            for i in range(4):
                pool.kv_buffer[:, i * PAGE:(i + 1) * PAGE] = page_data(i)
            assert backend.batch_set_v1(keys, host_indices(range(4)), None) == [True] * 4
            assert backend.batch_exists(keys, None) == 4
        finally:
            backend.close()


def test_asymmetric_pool_never_raises_into_the_prefetch_thread(file_tier):
    """Issue 22: get_dummy_flat_data_page raised NotImplementedError through batch_exists and killed
    HiCache's prefetch thread (it catches only queue.Empty)."""
    url, _ = file_tier
    backend = KvtierHiCacheStorage(config([url], "page_first", "v1"), {})
    backend.register_mem_pool_host(AsymmetricMHATokenToKVPoolHost())
    errors = []

    def prefetch_thread():  # what the controller's thread runs; an exception would end it
        try:
            errors.append(backend.batch_exists([page_key(0)], None))
            errors.append(backend.batch_get_v1([page_key(0)], host_indices([0]), None))
            errors.append(backend.batch_set_v1([page_key(0)], host_indices([0]), None))
            errors.append(backend.batch_get([page_key(0)]))
        except BaseException as e:  # noqa: BLE001 - the test wants to see anything
            errors.append(e)

    t = threading.Thread(target=prefetch_thread)
    t.start()
    t.join()
    backend.close()
    assert errors == [0, [False], [False], [None]]
    assert backend.identity.get("v_head_dim") == str(DIM // 2)


def test_ranks_get_their_own_file_directory(tmp_path):
    """Issue 22: every TP rank received the same extra config and opened one file:// directory."""
    shared = f"file://{tmp_path}/shared?capacity=16MiB"
    with pytest.raises(ValueError, match="would share the file:// directory"):
        KvtierHiCacheStorage(config([shared], "page_first", "v1", tp_size=2, tp_rank=1), {})
    per_rank = f"file://{tmp_path}/rank{{tp_rank}}?capacity=16MiB"
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
        b = KvtierHiCacheStorage(config([per_rank], "page_first", "v1", tp_size=2, tp_rank=rank), {})
        b.register_mem_pool_host(MHATokenToKVPoolHost())
        assert write(b, b.mem_pool_host, "v1", page_key(rank), page_data(rank), 0)
        b.close()
    for rank in (0, 1):
        assert list((tmp_path / f"rank{rank}").rglob("*.kvc")), f"rank {rank} wrote nothing"
    with pytest.raises(ValueError, match="unknown placeholder"):
        KvtierHiCacheStorage(config([f"file://{tmp_path}/r{{tp}}"], "page_first", "v1"), {})


def test_unknown_engine_argument_in_kwargs_is_ignored(file_tier, caplog):
    url, _ = file_tier
    with caplog.at_level(logging.INFO):
        b = KvtierHiCacheStorage(config([url], "page_first", "v1"), {"some_new_engine_arg": 1})
    b.close()
