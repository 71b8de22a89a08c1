"""vLLM's KV connector API types when vLLM is importable, local stand-ins otherwise: the base classes
of the connector, its metadata and its stats, the ``SupportsHMA`` marker and the transfer results
(``failed_recving`` on revisions that have it). A leaf: it imports no other module of this package."""

from __future__ import annotations

from dataclasses import dataclass, field

try:  # vLLM's own types when it is installed, local stand-ins otherwise
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1 as ConnectorBase, KVConnectorMetadata as MetadataBase, KVConnectorRole)
    HAVE_VLLM = True
except Exception:  # pragma: no cover - depends on the environment
    ConnectorBase = object  # type: ignore[assignment,misc]
    MetadataBase = object  # type: ignore[assignment,misc]
    KVConnectorRole = None  # type: ignore[assignment]
    HAVE_VLLM = False

try:  # vLLM's marker of connectors that take one block id list per KV cache group
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA  # type: ignore
except Exception:  # pragma: no cover - depends on the environment

    class SupportsHMA:  # type: ignore[no-redef]
        """Stand-in of vLLM's SupportsHMA (revisions without it, or no vLLM)."""

try:  # vLLM's per-request load failures (revisions whose scheduler recovers several KV cache groups)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults  # type: ignore
    REPORTS_FAILED_RECVING = "failed_recving" in getattr(KVConnectorTransferResults, "__dataclass_fields__", {})
except Exception:  # pragma: no cover - depends on the environment
    REPORTS_FAILED_RECVING = not HAVE_VLLM  # without vLLM: the stand-in below, as vLLM 0.32 declares it

    @dataclass
    class KVConnectorTransferResults:  # type: ignore[no-redef]
        """Stand-in of vLLM 0.32's KVConnectorTransferResults (a failed receive is also finished)."""

        finished_sending: set = field(default_factory=set)
        finished_recving: set = field(default_factory=set)
        failed_recving: set = field(default_factory=set)

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats as StatsBase  # type: ignore
except Exception:  # pragma: no cover - depends on the environment

    @dataclass
    class StatsBase:  # type: ignore[no-redef]
        """vLLM's KVConnectorStats fields: a serialisable dict of observations."""

        data: dict = field(default_factory=dict)

