"""A duck-typed SGLang HiCacheStorageConfig for test_sglang_package.py, which runs on the system python
without SGLang. Every test of SGLang's host pools runs on SGLang 0.5.23's real classes
(python/tests/engines/sglang_*.py, ``make test-engines``).
"""

from __future__ import annotations

import types


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
