"""SGLang's HiCache types the backend builds on, or stand-ins without SGLang (a leaf: imports no
module of this package)."""

from __future__ import annotations

import types
from typing import Any

try:  # the engine's base class when SGLang is installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as Base
except Exception:  # pragma: no cover - depends on the environment
    Base = object  # type: ignore[assignment,misc]
try:  # batch_exists_v2's answer type (SGLang revisions with hybrid-model pools)
    from sglang.srt.mem_cache.hicache_storage import PoolTransferResult as PoolResult
except Exception:  # pragma: no cover - depends on the environment
    PoolResult = None


def pool_result(kv_hit_pages: int, hits: dict) -> Any:
    """batch_exists_v2's answer: SGLang's PoolTransferResult, or the same fields without SGLang."""
    if PoolResult is not None:
        return PoolResult(kv_hit_pages, hits)
    return types.SimpleNamespace(kv_hit_pages=kv_hit_pages, extra_pool_hit_pages=hits)
