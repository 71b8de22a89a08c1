"""``KvtierConnectorStats``: the connector's counters of one interval, as vLLM's KVConnectorStats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .engine_api import StatsBase


@dataclass
class KvtierConnectorStats(StatsBase):  # type: ignore[misc,valid-type]
    """vLLM's KVConnectorStats for this connector: the counters of one interval (loads,
    loaded_chunks, load_errors, error_blocks, saves, saved_chunks, saves_failed, ...); workers'
    intervals add up."""

    data: dict = field(default_factory=dict)

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: Any) -> "KvtierConnectorStats":
        for name, value in (getattr(other, "data", None) or {}).items():
            self.data[name] = self.data.get(name, 0) + value
        return self

    def reduce(self) -> dict:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())
