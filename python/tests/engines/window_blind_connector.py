"""A deliberately broken KvtierHybridConnector, for the engine tests only: its loads write only the first
KV cache group's blocks (every other group's table is -1, read into scratch), so a sliding-window
group keeps whatever its blocks held. vLLM loads it through ``kv_connector_module_path`` (the test
puts this folder on the engine's PYTHONPATH). Saves are untouched. Nothing of this is in kvtier's
product code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvtier.connectors.vllm_v1 import KvtierHybridConnector


class WindowBlindKvtierConnector(KvtierHybridConnector):
    def _start_io(self, is_load: bool, keys: list, tables: np.ndarray) -> Any:
        if is_load:
            tables = np.array(tables, dtype=np.int64, copy=True)
            tables[1:] = -1
        return super()._start_io(is_load, keys, tables)
