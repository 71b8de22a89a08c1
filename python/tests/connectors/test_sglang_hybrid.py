"""SGLang connector: hybrid (Mamba / linear-attention) models -- the state pool beside the KV pool.

Call conventions (read from SGLang, docs/connectors.md names the files and revisions): the hybrid
cache controller registers the KV pool with ``register_mem_pool_host`` and then every entry of its
HostPoolGroup with ``register_mem_host_pool_v2(pool, name)`` ("kv", "mamba"). Backup of a radix node:
``batch_set_v2([PoolTransfer("mamba", host_indices=[slot], keys=[hash of the node's last page],
trailing_pages)])`` and the node's KV pages with ``batch_set_v1``. Prefetch: ``batch_exists_v2(hashes,
[PoolTransfer("mamba", keys=["__placeholder__"], trailing_pages)])`` -> ``kv_hit_pages``; the KV pages
with ``batch_get_v1``, then ``batch_get_v2`` of the state at the last hit page (the radix cache keeps
the loaded pages without a state when that load fails).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import kvtier
from connector_helpers import CHUNK_SUFFIX, HEADER_BYTES, file_tier, requires_library  # noqa: F401
from test_sglang import MHATokenToKVPoolHost, host_indices, page_data, page_key, storage_config

pytestmark = requires_library

from kvtier.connectors import engine_key  # noqa: E402
from kvtier.connectors.sglang import KvtierHiCacheStorage  # noqa: E402

SLOTS = 8                 # state slots of the host pool
MAMBA_LAYERS = 3
TEMPORAL = (16, 32)       # fp32 SSM state per layer
CONV = (4, 3)             # bf16 conv state per layer
STATE_BYTES = MAMBA_LAYERS * (16 * 32 * 4 + 4 * 3 * 2)  # 6216: a state file is larger than a page's


class MambaPoolHost:
    """A stand-in for SGLang's MambaPoolHost (same class name and attributes) in its page-first
    layout: one slot per request state, temporal_buffer[slot, layer, 1, *TEMPORAL] and
    conv_buffer[0][slot, layer, 1, *CONV]; get_page_buffer_meta gives the temporal piece, then the
    conv piece, of each slot."""

    def __init__(self, layout="page_first"):
        self.page_size, self.layout, self.size = 1, layout, SLOTS
        self.num_mamba_layers = MAMBA_LAYERS
        self.temporal_state_shape, self.conv_state_shapes = TEMPORAL, [CONV]
        self.temporal_dtype, self.conv_dtype = "torch.float32", "torch.bfloat16"
        self.size_per_token = STATE_BYTES
        self.temporal = np.zeros((SLOTS, MAMBA_LAYERS, 1) + TEMPORAL, dtype=np.float32)
        self.conv = np.zeros((SLOTS, MAMBA_LAYERS, 1) + CONV, dtype=np.uint16)

    def get_page_buffer_meta(self, indices):
        ptrs, sizes = [], []
        for i in (int(x) for x in indices):
            for buf in (self.temporal, self.conv):
                ptrs.append(buf.ctypes.data + i * buf[0].nbytes)
                sizes.append(buf[0].nbytes)
        return ptrs, sizes

    # test helpers
    def fill(self, slot: int, i: int):
        rng = np.random.default_rng(900 + i)
        self.temporal[slot] = rng.standard_normal(self.temporal[slot].shape)
        self.conv[slot] = rng.integers(1, 65535, self.conv[slot].shape, dtype=np.uint16)

    def state(self, slot: int) -> bytes:
        return self.temporal[slot].tobytes() + self.conv[slot].tobytes()


class HostPoolGroup:
    """SGLang's group of a hybrid model's host pools, as an older controller hands it over whole."""


def transfer(keys, slots=None, name="mamba"):
    return types.SimpleNamespace(name=name, keys=list(keys), hit_policy="trailing_pages",
                                 host_indices=None if slots is None else np.array(slots, dtype=np.int64))


def hybrid_backend(tiers, kv=None, mamba=None, cfg=None, store=None):
    """What the hybrid cache controller does when it attaches the backend."""
    kv, mamba = kv or MHATokenToKVPoolHost(), mamba or MambaPoolHost()
    backend = KvtierHiCacheStorage(cfg or storage_config(tiers), {}, store=store)
    backend.register_mem_pool_host(kv)
    backend.register_mem_host_pool_v2(kv, "kv")
    backend.register_mem_host_pool_v2(mamba, "mamba")
    return backend, kv, mamba


def backup_node(backend, kv, mamba, pages, state_slot):
    """A radix node's write to storage: its last page's state, then its KV pages."""
    mamba.fill(state_slot, pages[-1])
    assert backend.batch_set_v2([transfer([page_key(pages[-1])], [state_slot])]) == \
        {"mamba": [True]}
    for p in pages:
        kv.fill(p, p)
    assert backend.batch_set_v1([page_key(p) for p in pages], host_indices(pages), None) == \
        [True] * len(pages)


def hit_pages(backend, n):
    result = backend.batch_exists_v2([page_key(p) for p in range(n)], [transfer(["__placeholder__"])])
    return result.kv_hit_pages, result.extra_pool_hit_pages


def load_state(backend, page, slot):
    return backend.batch_get_v2([transfer([page_key(page)], [slot])])["mamba"]


def state_file(tier_dir, page):
    """The file of the state stored under ``page``'s key (its KV page has the same key, in the KV
    namespace's folder, and another size)."""
    name = engine_key(page_key(page)).hex() + CHUNK_SUFFIX
    found = [p for p in tier_dir.rglob(name) if p.stat().st_size >= HEADER_BYTES + STATE_BYTES]
    assert len(found) == 1, found
    return found[0]


def test_prefix_hit_needs_kv_pages_and_the_state_at_its_last_page(file_tier):
    url, _ = file_tier
    backend, kv, mamba = hybrid_backend([url])
    try:
        backup_node(backend, kv, mamba, [0, 1, 2], state_slot=0)   # node A: pages 0-2, state at 2
        backup_node(backend, kv, mamba, [3, 4, 5], state_slot=1)   # node B: pages 3-5, state at 5
        assert hit_pages(backend, 8) == (6, {"kv": 6, "mamba": 6})
        kv.kv_buffer[:] = 0
        assert backend.batch_get_v1([page_key(p) for p in range(6)], host_indices(range(6)), None) \
            == [True] * 6
        assert load_state(backend, 5, slot=6) == [True]
        assert mamba.state(6) == mamba.state(1)
        assert all(np.array_equal(kv.page(p), page_data(p)) for p in range(6))
        # KV pages past the last state are no hit: pages 6-7 stored without a state
        for p in (6, 7):
            kv.fill(p, p)
        assert backend.batch_set_v1([page_key(6), page_key(7)], host_indices([6, 7]), None) == [True] * 2
        assert hit_pages(backend, 8) == (6, {"kv": 8, "mamba": 6})
        # a state whose KV pages are missing is no hit either
        mamba.fill(2, 20)
        assert backend.batch_set_v2([transfer([page_key(20)], [2])]) == {"mamba": [True]}
        assert backend.batch_exists_v2([page_key(20)], [transfer(["x"])]).kv_hit_pages == 0
    finally:
        backend.close()


def test_corrupt_state_is_a_miss_of_its_prefix_never_a_stale_hit(file_tier):
    url, tier_dir = file_tier
    backend, kv, mamba = hybrid_backend([url])  # file:// only: the load reads the damaged file
    try:
        backup_node(backend, kv, mamba, [0, 1, 2], state_slot=0)
        backup_node(backend, kv, mamba, [3, 4, 5], state_slot=1)
        backend.store.flush()
        path = state_file(tier_dir, 5)
        with open(path, "r+b") as f:
            f.seek(HEADER_BYTES + 7)
            b = f.read(1)
            f.seek(HEADER_BYTES + 7)
            f.write(bytes([b[0] ^ 0x5A]))
        mamba.fill(5, 99)
        assert load_state(backend, 5, slot=5) == [False]
        assert not any(mamba.state(5)), "the corrupt state's slot must be zeroed"
        assert hit_pages(backend, 6) == (3, {"kv": 6, "mamba": 3})  # the state at page 2 is next
        assert load_state(backend, 2, slot=5) == [True]
        assert mamba.state(5) == mamba.state(0)
        assert load_state(backend, 4, slot=5) == [False]  # never stored: a miss, not a stale state
    finally:
        backend.close()


def test_non_hybrid_deployment_never_reads_hybrid_pages(file_tier):
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        hybrid, kv, mamba = hybrid_backend([url], store=store)
        backup_node(hybrid, kv, mamba, [0, 1], state_slot=0)
        plain = KvtierHiCacheStorage(storage_config([url]), {}, store=store)
        plain.register_mem_pool_host(MHATokenToKVPoolHost())
        plain.batch_set_v1([page_key(7)], host_indices([7]), None)
        store.flush()
        assert hybrid.batch_exists([page_key(0), page_key(1)], None) == 2
        assert plain.batch_exists([page_key(0), page_key(1)], None) == 0
        assert hybrid.batch_exists([page_key(7)], None) == 0
        assert hybrid.identity.get("state_pools") == "mamba" and plain.identity.get("state_pools") is None
        hybrid.close()
        plain.close()


def test_mla_pages_are_shared_across_ranks_but_states_are_not(file_tier):
    from test_sglang_identity import MLATokenToKVPoolHost
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        ranks = []
        for rank in (0, 1):
            cfg = storage_config([url])
            cfg.tp_size, cfg.tp_rank, cfg.is_mla_model = 2, rank, True
            ranks.append(hybrid_backend([url], kv=MLATokenToKVPoolHost(), cfg=cfg, store=store))
        (r0, kv0, m0), (r1, kv1, m1) = ranks
        backup_node(r0, kv0, m0, [0, 1], state_slot=0)
        store.flush()
        assert r1.batch_exists([page_key(0), page_key(1)], None) == 2  # latents: one copy
        assert hit_pages(r1, 2)[0] == 0  # rank 1's state shard was never stored
        backup_node(r1, kv1, m1, [0, 1], state_slot=3)
        assert hit_pages(r1, 2)[0] == 2 and hit_pages(r0, 2)[0] == 2
        assert load_state(r0, 1, slot=4) == [True] and m0.state(4) == m0.state(0)
        r0.close()
        r1.close()


def test_pools_it_was_not_written_for_are_refused_with_the_reason(file_tier):
    url, _ = file_tier
    backend = KvtierHiCacheStorage(storage_config([url]), {})
    try:
        with pytest.raises(ValueError, match="HostPoolGroup .* to register_mem_pool_host"):
            backend.register_mem_pool_host(HostPoolGroup())
        with pytest.raises(ValueError, match="MambaPoolHost holds per-request .* states, not KV"):
            backend.register_mem_pool_host(MambaPoolHost())
        kv = MHATokenToKVPoolHost()
        backend.register_mem_pool_host(kv)
        with pytest.raises(ValueError, match="'swa' .* sliding-window"):
            backend.register_mem_host_pool_v2(MHATokenToKVPoolHost(), "swa")
        with pytest.raises(ValueError, match="'kv' pool is not the host pool registered"):
            backend.register_mem_host_pool_v2(MHATokenToKVPoolHost(), "kv")
        with pytest.raises(ValueError, match="layout 'layer_first' has no page buffers"):
            backend.register_mem_host_pool_v2(MambaPoolHost("layer_first"), "mamba")
        with pytest.raises(ValueError, match="'mamba' pool is a MHATokenToKVPoolHost"):
            backend.register_mem_host_pool_v2(kv, "mamba")
        # nothing was registered: a state transfer is answered False, never raised
        assert backend.batch_set_v2([transfer([page_key(0)], [0])]) == {"mamba": [False]}
        assert backend.batch_exists_v2([page_key(0)], [transfer(["x"])]).kv_hit_pages == 0
    finally:
        backend.close()
    assert backend.batch_get_v2([transfer([page_key(0)], [0])]) == {"mamba": [False]}
