"""The identity fields a registered KV host pool decides (docs/connectors.md): its class, layout and
geometry, the model, the ranks and the hash scheme."""

from __future__ import annotations

from typing import Any, Optional

from .options import HASH_SCHEME, HOST_POOLS, LAYOUTS, int_option
from .pools import STATE_POOLS, class_and_layout


def pool_identity(pool: Any, cfg: Any, *, config_layout: Optional[str], mla: bool, model_id: str,
                  revision: Any, salt: Optional[str]) -> dict[str, Any]:
    """The identity fields a host pool decides; ValueError for one this connector does not know."""
    cls = type(pool).__name__
    if cls == "HostPoolGroup":
        raise ValueError(
            "kvtier: SGLang passed its HostPoolGroup (a hybrid model's KV and state pools) to "
            "register_mem_pool_host; kvtier takes only the KV pool there (the group's anchor "
            "entry, as newer SGLang revisions pass it) and each other pool through "
            "register_mem_host_pool_v2(pool, name): a whole group is refused rather than "
            "guessing which entry's pages the page calls mean")
    if cls in STATE_POOLS.values():
        raise ValueError(
            f"kvtier: SGLang's {cls} holds per-request Mamba / linear-attention states, not KV "
            f"pages; it is served only as the 'mamba' pool of register_mem_host_pool_v2, beside a "
            f"KV pool registered with register_mem_pool_host")
    cls, layout = class_and_layout(
        pool, HOST_POOLS, LAYOUTS,
        f"kvtier: SGLang host pool {{cls}} is not one this connector was written for (known: "
        f"{', '.join(sorted(HOST_POOLS))})",
        "kvtier: unknown SGLang host layout {layout!r} of {cls} (known: {known})")
    if config_layout is not None and config_layout != layout:
        raise ValueError(f"kvtier: storage config says layout {config_layout!r} but the "
                         f"host pool has {layout!r}")
    attention = HOST_POOLS[cls]
    if (attention == "mla") != mla:
        raise ValueError(f"kvtier: host pool {cls} does not match is_mla_model={mla}")
    fields: dict[str, Any] = {
        "engine": "sglang", "host_pool": cls, "layout": layout, "model": model_id,
        "model_revision": revision, "kv_dtype": str(getattr(pool, "dtype", "")) or None,
        "attention": attention, "page_tokens": getattr(pool, "page_size", None),
        "layers": getattr(pool, "layer_num", None), "hash_scheme": HASH_SCHEME,
        "salt": salt,
        "tp_size": int_option(cfg, "tp_size", 1),
        "tp_rank": "replicated" if attention == "mla" else int_option(cfg, "tp_rank", 0),
        "pp_size": int_option(cfg, "pp_size", 1), "pp_rank": int_option(cfg, "pp_rank", 0),
        "cp_size": int_option(cfg, "attn_cp_size", 1), "cp_rank": int_option(cfg, "attn_cp_rank", 0),
    }
    if getattr(cfg, "should_split_heads", False):
        fields["split_heads"] = getattr(cfg, "tp_lcm_size", None) or "1"
    if attention == "mla":
        fields["k_head_dim"] = getattr(pool, "kv_lora_rank", None)
        fields["v_head_dim"] = getattr(pool, "qk_rope_head_dim", None)
    else:
        fields["kv_heads"] = getattr(pool, "head_num", None)
        fields["k_head_dim"] = getattr(pool, "head_dim", None)
        fields["v_head_dim"] = getattr(pool, "v_head_dim", None) or getattr(pool, "head_dim", None)
    return fields
