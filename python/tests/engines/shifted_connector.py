"""A deliberately broken KvtierConnector, for the engine test only: it shows that the test sees wrong KV.

vLLM loads it through ``kv_connector_module_path`` like the real one (the test puts this folder on the
engine's PYTHONPATH). Every load lands one token row early: each piece of a chunk is copied to its
block address minus one row, so token t's K and V sit where token t - 1's belong (the first row of a
region goes to the end of the region before it, which vLLM never hands out as block 0 is its null
block). Saves are untouched. Nothing of this is in kvtier's product code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from kvtier.connectors.vllm import host_paged
from kvtier.connectors.vllm_v1 import KvtierConnector


class ShiftedKvtierConnector(KvtierConnector):
    def _start_io(self, is_load: bool, keys: list, tables: np.ndarray) -> Any:
        if not is_load:
            return super()._start_io(is_load, keys, tables)
        self._require_cache()
        cache = self._cache
        if int(np.asarray(tables).min(initial=1)) < 1:
            raise RuntimeError("ShiftedKvtierConnector: a load into block 0 would be shifted out of the cache")
        shifted = dataclasses.replace(cache, bases=cache.bases - np.uint64(cache.row_bytes))
        return host_paged.load_async(self._store, self.namespace, keys, shifted, tables[0])
