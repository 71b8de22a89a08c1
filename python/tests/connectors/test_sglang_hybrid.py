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

import dataclasses
import enum
import types
from typing import Any, List, Optional

import numpy as np
import pytest

import kvtier
from connector_helpers import (CHUNK_SUFFIX, HEADER_BYTES, file_tier, flip_payload_byte,  # noqa: F401
                               requires_library)
from sglang_standin import MHATokenToKVPoolHost, host_indices, page_data, page_key, storage_config

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
        flip_payload_byte(state_file(tier_dir, 5), 7)
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
    from sglang_standin import MLATokenToKVPoolHost
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
        with pytest.raises(ValueError, match="'indexer' .* DSA indexer pool is not served"):
            backend.register_mem_host_pool_v2(MHATokenToKVPoolHost(), "indexer")
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


# ---- hybrid sliding-window (SWA) models: the "swa" pool beside the KV pool -------------------------
#
# Call conventions (docs/connectors.md names the SGLang files and revisions): the hybrid SWA pool group
# is the KV host pool of the full-attention layers ("kv", the anchor) and a second KV host pool of the
# same class, page size and layout over the sliding-window layers ("swa"). SWAComponent's storage
# backup sends PoolTransfer("swa", host_indices=<its last num_pages pages>, keys=node.hash_value[-
# num_pages:], trailing_pages) to batch_set_v2 before the node's KV pages go to batch_set_v1; its
# prefetch asks batch_exists_v2 with keys=["__placeholder__"] x window pages; the controller loads the
# KV pages, re-keys the transfer to the last hit pages (_sync_trailing_keys, shrinking host_indices) and
# calls batch_get_v2; a window with fewer leading True than its pages is dropped whole.

try:  # SGLang's host pools hold torch tensors; so do these stand-ins
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
requires_torch = pytest.mark.skipif(torch is None, reason="python3-torch is not installed "
                                    "(scripts/install-deps.sh)")

SWA_PAGE = 4              # tokens per page (both pools)
SWA_PAGES = 16            # pages per host pool
FULL_LAYERS, WINDOW_LAYERS, SWA_HEADS, SWA_DIM = 2, 3, 2, 64  # a page: 4 KiB of KV, 6 KiB of window KV


class PoolName(str, enum.Enum):
    """SGLang's PoolName (hicache_storage.py), the members these tests use."""
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, enum.Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclasses.dataclass
class PoolTransfer:
    """SGLang's PoolTransfer (the fields a storage backend reads)."""
    name: PoolName
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES


class torch_host:  # noqa: N801 - a namespace: SGLang's class names over torch tensors
    class MHATokenToKVPoolHost:
        """SGLang's MHA host pool in its layouts: kv_buffer [2, tokens, layers, heads, dim]
        (page_first), [2, layers, tokens, heads, dim] (layer_first) or [2, pages, layers, page,
        heads, dim] (page_first_direct); get_page_buffer_meta gives per page its K and V pieces (per
        layer for layer_first), as SGLang's pool does."""

        def __init__(self, layers, layout="page_first", page=SWA_PAGE):
            self.page_size, self.layout, self.layer_num = page, layout, layers
            self.head_num, self.head_dim, self.dtype = SWA_HEADS, SWA_DIM, torch.bfloat16
            self.size, self.page_num = page * SWA_PAGES, SWA_PAGES
            self.size_per_token = 2 * layers * SWA_HEADS * SWA_DIM * 2
            dims = {"page_first": (2, self.size, layers, SWA_HEADS, SWA_DIM),
                    "layer_first": (2, layers, self.size, SWA_HEADS, SWA_DIM),
                    "page_first_direct": (2, SWA_PAGES, layers, page, SWA_HEADS, SWA_DIM)}[layout]
            self.kv_buffer = torch.zeros(dims, dtype=self.dtype)

        def get_page_buffer_meta(self, indices):
            row = self.head_num * self.head_dim * 2      # one token of one layer
            v_offset = self.layer_num * self.size * row
            base, ptrs, sizes = self.kv_buffer.data_ptr(), [], []
            for first in indices.tolist()[::self.page_size]:
                if self.layout == "layer_first":
                    for layer in range(self.layer_num):
                        k = base + (layer * self.size + first) * row
                        ptrs += [k, k + v_offset]
                        sizes += [self.page_size * row] * 2
                else:
                    k = base + first * self.layer_num * row
                    ptrs += [k, k + v_offset]
                    sizes += [self.page_size * self.layer_num * row] * 2
            return ptrs, sizes

        # test helpers
        def _page(self, slot):
            t = slice(slot * self.page_size, (slot + 1) * self.page_size)
            return {"page_first": lambda: self.kv_buffer[:, t],
                    "layer_first": lambda: self.kv_buffer[:, :, t],
                    "page_first_direct": lambda: self.kv_buffer[:, slot]}[self.layout]()

        def fill(self, slot, seed):
            gen = torch.Generator().manual_seed(seed)
            view = self._page(slot)
            view.copy_(torch.randn(view.shape, generator=gen).to(self.dtype))

        def page_bytes(self, slot):
            return self._page(slot).contiguous().view(torch.int16).numpy().tobytes()

    class MLATokenToKVPoolHost(MHATokenToKVPoolHost):
        """SGLang's MLA host pool in page_first: kv_buffer [tokens, layers, 1, kv_lora_rank +
        qk_rope_head_dim]; one piece per page."""

        def __init__(self, layers, layout="page_first", page=SWA_PAGE):
            super().__init__(layers, "page_first", page)
            self.layout, self.kv_lora_rank, self.qk_rope_head_dim = layout, 96, 32
            self.size_per_token = layers * 128 * 2
            self.kv_buffer = torch.zeros((self.size, layers, 1, 128), dtype=self.dtype)

        def get_page_buffer_meta(self, indices):
            row = self.size_per_token
            firsts = indices.tolist()[::self.page_size]
            return [self.kv_buffer.data_ptr() + f * row for f in firsts], [self.page_size * row] * len(firsts)

        def _page(self, slot):
            return self.kv_buffer[slot * self.page_size:(slot + 1) * self.page_size]


def swa_slots(pages):
    """Token slots of host pages ``pages`` (SGLang's host_indices: a torch int64 tensor)."""
    return torch.tensor([t for p in pages for t in range(p * SWA_PAGE, (p + 1) * SWA_PAGE)],
                        dtype=torch.int64)


def swa_backend(tiers, layout="page_first", store=None, cfg=None, pool_class=None):
    pool_class = pool_class or torch_host.MHATokenToKVPoolHost
    kv, swa = pool_class(FULL_LAYERS, layout), pool_class(WINDOW_LAYERS, layout)
    backend = KvtierHiCacheStorage(cfg or storage_config(tiers), {}, store=store)
    backend.register_mem_pool_host(kv)
    backend.register_mem_host_pool_v2(kv, PoolName.KV)
    backend.register_mem_host_pool_v2(swa, PoolName.SWA)
    return backend, kv, swa


def swa_backup(backend, kv, swa, pages, window_pages):
    """A radix node's write to storage: the window pages it holds on the host (its last
    ``window_pages``; none once evicted), then its KV pages. Host page p holds page p."""
    for p in pages:
        kv.fill(p, 100 + p)
        swa.fill(p, 200 + p)
    keys = [page_key(p) for p in pages]
    if window_pages:
        tail = pages[-window_pages:]
        done = backend.batch_set_v2([PoolTransfer(PoolName.SWA, swa_slots(tail), keys=keys[-window_pages:],
                                                  hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        assert done == {PoolName.SWA: [True] * window_pages}
    assert backend.batch_set_v1(keys, swa_slots(pages), None) == [True] * len(pages)


def swa_prefetch(backend, n_pages, window_pages, kv_first, swa_first):
    """The controller's prefetch of pages 0..n-1: the hit, the KV pages into host pages kv_first...,
    the window re-keyed to the last hit pages into host pages swa_first...; (hit result, KV bools,
    window bools)."""
    hashes = [page_key(p) for p in range(n_pages)]
    window = PoolTransfer(PoolName.SWA, swa_slots(range(swa_first, swa_first + window_pages)),
                          keys=["__placeholder__"] * window_pages,
                          hit_policy=PoolHitPolicy.TRAILING_PAGES)
    result = backend.batch_exists_v2(hashes, [window])
    hit = result.kv_hit_pages
    if not hit:
        return result, [], []
    got_kv = backend.batch_get_v1(hashes[:hit], swa_slots(range(kv_first, kv_first + hit)), None)
    window.keys = hashes[max(0, hit - window_pages):hit]
    window.host_indices = window.host_indices[:len(window.keys) * SWA_PAGE]
    return result, got_kv, backend.batch_get_v2([window])[PoolName.SWA]


@requires_torch
@pytest.mark.parametrize("layout", ["page_first", "layer_first", "page_first_direct"])
def test_swa_prefix_loads_its_kv_pages_and_only_its_last_window(file_tier, layout):
    url, _ = file_tier
    saver, kv, swa = swa_backend([url], layout)
    swa_backup(saver, kv, swa, [0, 1, 2, 3], window_pages=4)
    swa_backup(saver, kv, swa, [4, 5, 6, 7], window_pages=4)
    saver.close()
    with kvtier.Store([url]) as store:  # another process: fresh host pools, a cold store
        loader, kv2, swa2 = swa_backend([url], layout, store=store)
        result, got_kv, got_window = swa_prefetch(loader, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (8, {"kv": 8, "swa": 8})
        assert got_kv == [True] * 8 and got_window == [True] * 3
        assert all(kv2.page_bytes(8 + p) == kv.page_bytes(p) for p in range(8))
        assert [swa2.page_bytes(12 + i) for i in range(3)] == [swa.page_bytes(p) for p in (5, 6, 7)]
        assert not any(any(swa2.page_bytes(s)) for s in range(SWA_PAGES) if s not in (12, 13, 14))
        assert store.stats()["load_chunks"] == 8 + 3  # window pages 0..4 are not read
        loader.close()


@requires_torch
def test_swa_hit_needs_the_window_pages_of_its_last_pages(file_tier):
    url, _ = file_tier
    backend, kv, swa = swa_backend([url])
    try:
        swa_backup(backend, kv, swa, [0, 1, 2, 3], window_pages=2)  # window pages 2, 3 only
        swa_backup(backend, kv, swa, [4, 5, 6, 7], window_pages=0)  # its window evicted before backup
        result, _, got_window = swa_prefetch(backend, 8, window_pages=2, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (4, {"kv": 8, "swa": 4})
        assert got_window == [True, True]
        assert swa.page_bytes(12) == swa.page_bytes(2) and swa.page_bytes(13) == swa.page_bytes(3)
        # a 3-page window needs page 1 too: no prefix of these has one
        result, _, _ = swa_prefetch(backend, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (0, {"kv": 8})
        # a 2-page prefix at the root is its own window: pages 0-1 have none stored
        assert swa_prefetch(backend, 2, window_pages=2, kv_first=8, swa_first=12)[0].kv_hit_pages == 0
        # window pages without their KV pages are no hit either
        swa.fill(9, 9)
        assert backend.batch_set_v2([PoolTransfer(PoolName.SWA, swa_slots([9]), keys=[page_key(30)],
                                                  hit_policy=PoolHitPolicy.TRAILING_PAGES)]) == \
            {PoolName.SWA: [True]}
        assert backend.batch_exists_v2([page_key(30)], [PoolTransfer(
            PoolName.SWA, keys=["x"], hit_policy=PoolHitPolicy.TRAILING_PAGES)]).kv_hit_pages == 0
    finally:
        backend.close()


@requires_torch
def test_mla_window_pages_are_shared_across_ranks_as_the_kv_pages(file_tier):
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        ranks = []
        for rank in (0, 1):
            cfg = storage_config([url])
            cfg.tp_size, cfg.tp_rank, cfg.is_mla_model = 2, rank, True
            ranks.append(swa_backend([url], store=store, cfg=cfg, pool_class=torch_host.MLATokenToKVPoolHost))
        (r0, kv0, swa0), (r1, _, swa1) = ranks
        swa_backup(r0, kv0, swa0, [0, 1, 2], window_pages=3)  # only rank 0 backs them up (should_backup)
        store.flush()
        result, got_kv, got_window = swa_prefetch(r1, 3, window_pages=2, kv_first=8, swa_first=12)
        assert result.kv_hit_pages == 3 and got_kv == [True] * 3 and got_window == [True] * 2
        assert [swa1.page_bytes(12 + i) for i in range(2)] == [swa0.page_bytes(p) for p in (1, 2)]
        r0.close()
        r1.close()


def window_file(tier_dir, page):
    """The file of the window page stored under ``page``'s key (its KV page has the same key, in the
    KV namespace's folder, and a smaller file)."""
    name = engine_key(page_key(page)).hex() + CHUNK_SUFFIX
    found = sorted(tier_dir.rglob(name), key=lambda p: p.stat().st_size)
    assert len(found) == 2 and found[0].stat().st_size < found[1].stat().st_size, found
    return found[1]


@requires_torch
def test_corrupt_window_page_is_a_miss_of_its_prefix_never_a_wrong_window(file_tier):
    url, tier_dir = file_tier
    backend, kv, swa = swa_backend([url])  # file:// only: the load reads the damaged file
    try:
        swa_backup(backend, kv, swa, list(range(8)), window_pages=8)
        backend.store.flush()
        flip_payload_byte(window_file(tier_dir, 7), 11)
        swa.fill(14, 999)  # what the slot held before the load
        result, got_kv, got_window = swa_prefetch(backend, 8, window_pages=3, kv_first=8, swa_first=12)
        assert result.kv_hit_pages == 8 and got_kv == [True] * 8  # lookups count, loads verify
        assert got_window == [True, True, False]  # 2 of 3 leading: SGLang drops the window
        assert not any(swa.page_bytes(14)), "the corrupt page's host slots must be zeroed"
        # the tier dropped the page: the next hit is the 7-page prefix, whose window is intact
        result, _, got_window = swa_prefetch(backend, 8, window_pages=3, kv_first=8, swa_first=12)
        assert (result.kv_hit_pages, result.extra_pool_hit_pages) == (7, {"kv": 8, "swa": 7})
        assert got_window == [True] * 3
        assert [swa.page_bytes(12 + i) for i in range(3)] == [swa.page_bytes(p) for p in (4, 5, 6)]
    finally:
        backend.close()


@requires_torch
def test_swa_deployment_and_plain_deployment_never_read_each_others_pages(file_tier):
    url, _ = file_tier
    with kvtier.Store([url]) as store:
        hybrid, kv, swa = swa_backend([url], store=store)
        swa_backup(hybrid, kv, swa, [0, 1], window_pages=2)
        plain = KvtierHiCacheStorage(storage_config([url]), {}, store=store)
        plain.register_mem_pool_host(torch_host.MHATokenToKVPoolHost(FULL_LAYERS))
        store.flush()
        assert hybrid.batch_exists([page_key(0), page_key(1)], None) == 2
        assert plain.batch_exists([page_key(0), page_key(1)], None) == 0
        assert hybrid.identity.get("window_pools") == "swa" and plain.identity.get("window_pools") is None
        hybrid.close()
        plain.close()


@requires_torch
def test_swa_pools_it_was_not_written_for_are_refused_with_the_reason(file_tier):
    url, _ = file_tier
    backend = KvtierHiCacheStorage(storage_config([url]), {})
    try:
        window = torch_host.MHATokenToKVPoolHost(WINDOW_LAYERS)
        with pytest.raises(ValueError, match="'swa' pool came before a KV pool"):
            backend.register_mem_host_pool_v2(window, PoolName.SWA)
        kv = torch_host.MHATokenToKVPoolHost(FULL_LAYERS)
        backend.register_mem_pool_host(kv)
        with pytest.raises(ValueError, match="'swa' pool is the KV pool itself"):
            backend.register_mem_host_pool_v2(kv, PoolName.SWA)
        with pytest.raises(ValueError, match="page_tokens 8 but the KV pool has 4"):
            backend.register_mem_host_pool_v2(torch_host.MHATokenToKVPoolHost(WINDOW_LAYERS, page=8), "swa")
        with pytest.raises(ValueError, match="layout 'layer_first' but the KV pool has 'page_first'"):
            backend.register_mem_host_pool_v2(torch_host.MHATokenToKVPoolHost(3, "layer_first"), "swa")
        with pytest.raises(ValueError, match="MLATokenToKVPoolHost does not match is_mla_model=False"):
            backend.register_mem_host_pool_v2(torch_host.MLATokenToKVPoolHost(WINDOW_LAYERS), "swa")
        with pytest.raises(ValueError, match="MambaPoolHost holds per-request"):
            backend.register_mem_host_pool_v2(MambaPoolHost(), PoolName.SWA)
        with pytest.raises(ValueError, match="'draft_swa' .* draft model"):
            backend.register_mem_host_pool_v2(window, PoolName.DRAFT_SWA)
        with pytest.raises(ValueError, match="'indexer' .* DSA indexer"):
            backend.register_mem_host_pool_v2(window, PoolName.INDEXER)
        # nothing was registered as "swa": its transfers are False, never raised
        assert backend.batch_get_v2([PoolTransfer(PoolName.SWA, swa_slots([0]), keys=[page_key(0)])]) \
            == {PoolName.SWA: [False]}
        backend.register_mem_host_pool_v2(window, PoolName.SWA)
        # slots that do not match the keys are False
        assert backend.batch_set_v2([PoolTransfer(PoolName.SWA, swa_slots([0, 1]), keys=[page_key(0)])]) \
            == {PoolName.SWA: [False]}
    finally:
        backend.close()
