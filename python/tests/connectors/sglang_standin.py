"""Stand-ins of SGLang's MHA and MLA host pools (numpy, page_first) and a duck-typed storage config,
used by test_sglang_hybrid.py: a miniature that remains although SGLang 0.5.23's real classes run on CPU
here (python/tests/engines/sglang_*.py use those). Converting test_sglang_hybrid.py to the real host pools
and MambaPoolHost is still to do (docs/connectors.md, Tests). The driver and identity tests that used
these stand-ins now run against the real classes in python/tests/engines/sglang_connector.py,
sglang_hicache.py and sglang_identity.py.
"""

from __future__ import annotations

import hashlib
import types

import numpy as np

PAGE = 4        # tokens per page
LAYERS = 2
HEADS = 2
DIM = 16
PAGES = 64      # pages in the host pool
ITEM = 2        # bytes per element (a bf16 stand-in)


class MHATokenToKVPoolHost:
    """A stand-in for SGLang's MHA host pool (same class name and attributes) in its page-first
    layout: kv_buffer[2, tokens, layers, heads, dim]. A page is two contiguous pieces (its K half and
    its V half), as get_page_buffer_meta says."""

    def __init__(self, layout="page_first"):
        self.page_size = PAGE
        self.size = PAGE * PAGES
        self.layout = layout
        self.dtype = "torch.bfloat16"
        self.layer_num, self.head_num, self.head_dim = LAYERS, HEADS, DIM
        self.kv_buffer = np.zeros((2, self.size, LAYERS, HEADS, DIM), dtype=np.uint16)
        self.token_bytes = LAYERS * HEADS * DIM * ITEM
        self.piece_bytes = PAGE * self.token_bytes

    def get_page_buffer_meta(self, indices):
        indices = [int(i) for i in indices]
        assert len(indices) % self.page_size == 0
        base = self.kv_buffer.ctypes.data
        v_offset = self.size * self.token_bytes
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            k = base + indices[i] * self.token_bytes
            ptrs += [k, k + v_offset]
        return ptrs, [self.piece_bytes] * len(ptrs)

    def get_dummy_flat_data_page(self):
        return np.zeros(2 * PAGE * LAYERS * HEADS * DIM, dtype=np.uint16)

    # test helpers
    def page(self, slot: int) -> np.ndarray:
        return self.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE].copy()

    def fill(self, slot: int, i: int):
        self.kv_buffer[:, slot * PAGE:(slot + 1) * PAGE] = page_data(i)


def page_data(i: int) -> np.ndarray:
    rng = np.random.default_rng(500 + i)
    return rng.integers(1, 65535, (2, PAGE, LAYERS, HEADS, DIM), dtype=np.uint16)


def page_key(i: int) -> str:
    return hashlib.sha256(f"page-{i}".encode()).hexdigest()


def host_indices(slots) -> np.ndarray:
    return np.array([t for s in slots for t in range(s * PAGE, (s + 1) * PAGE)], dtype=np.int64)


def storage_config(tiers, interface_v1=True):
    extra = {"backend_name": "kvtier", "module_path": "kvtier.connectors.sglang",
             "class_name": "KvtierHiCacheStorage", "tiers": tiers}
    if interface_v1:
        extra["interface_v1"] = 1
    return types.SimpleNamespace(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="Qwen/Qwen3-8B", dp_rank=0, dp_size=1, tp_lcm_size=None,
        should_split_heads=False, extra_config=extra)


class MLATokenToKVPoolHost(MHATokenToKVPoolHost):
    """Stand-in for SGLang's MLA host pool (only the class name and MLA attributes differ here)."""

    def __init__(self, layout="page_first"):
        super().__init__(layout)
        self.kv_lora_rank, self.qk_rope_head_dim = 512, 64
