"""``KvtierHiCacheStorage``: the class SGLang's ``--hicache-storage-backend dynamic`` builds as
``KvtierHiCacheStorage(storage_config, kwargs)`` (re-exported as ``kvtier.connectors.sglang``'s)."""

from __future__ import annotations

from .hybrid import HybridPools
from .storage import HiCacheStorageCore


class KvtierHiCacheStorage(HybridPools, HiCacheStorageCore):
    """HiCache storage backed by a kvtier Store (see the package docstring): the KV pages' calls of
    ``storage`` and the hybrid models' v2 calls of ``hybrid``."""
