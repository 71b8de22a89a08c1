"""What the backend reads of SGLang's storage config and extra config: the host pool classes and
layouts it knows, the ranks and the tier checks (a leaf: imports no module of this package)."""

from __future__ import annotations

from typing import Any, List, Optional

from .. import RANK_FIELDS

# The host pool layouts whose page bytes this connector knows how to name (memory_pool_host.py).
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
# The host pool classes it was written for, and their attention kind.
HOST_POOLS = {
    "MHATokenToKVPoolHost": "mha",
    "AsymmetricMHATokenToKVPoolHost": "mha",
    "MLATokenToKVPoolHost": "mla",
}
IO_PATHS = ("v1", "generic")
HASH_SCHEME = "sglang-page-sha256"  # HiCache's page keys: SHA-256 chained over token ids


def int_option(cfg: Any, name: str, default: int) -> int:
    value = getattr(cfg, name, None)
    return default if value is None else int(value)


def ranks(cfg: Any) -> dict[str, int]:
    tp_rank, tp_size = int_option(cfg, "tp_rank", 0), max(1, int_option(cfg, "tp_size", 1))
    pp_rank = int_option(cfg, "pp_rank", 0)
    return {"tp_rank": tp_rank, "pp_rank": pp_rank, "rank": pp_rank * tp_size + tp_rank}


def config_layout(cfg: Any) -> Optional[str]:
    """The layout the storage config names (newer revisions), or None where it only says
    page-first or not (is_page_first_layout), which the host pool then decides."""
    layout = getattr(cfg, "layout", None)
    if layout is None:
        return None
    layout = str(getattr(layout, "value", layout))
    if layout not in LAYOUTS:
        raise ValueError(f"kvtier: unknown SGLang host layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return layout


def refuse_shared_file_dir(urls: List[str], cfg: Any) -> None:
    processes = max(1, int_option(cfg, "tp_size", 1)) * max(1, int_option(cfg, "pp_size", 1)) * \
        max(1, int_option(cfg, "attn_cp_size", 1))
    if processes <= 1:
        return
    for url in urls:
        if url.startswith("file://") and not any("{" + f + "}" in url for f in RANK_FIELDS):
            raise ValueError(
                f"kvtier: {processes} SGLang ranks would share the file:// directory of {url!r}, each "
                "with the full capacity; put {tp_rank} (and {pp_rank}) or {rank} in its path, or use "
                "an fs:// pool, which is made to be shared")
