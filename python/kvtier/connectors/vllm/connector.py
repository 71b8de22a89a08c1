"""The vLLM adapters over ``KvtierConnectorCore``: ``KvtierConnector`` (one KV cache group) and
``KvtierHybridConnector`` (vLLM's hybrid KV cache manager), which read the model geometry from the
``VllmConfig``. Users name them through ``kvtier.connectors.vllm_v1``."""

from __future__ import annotations

from typing import Any, Optional

from .config import check_kv_cache_config, device_type, extra_of, role_name, spec_of_vllm_config, wants_hnd, worker_tp_rank
from .core import KvtierConnectorCore
from .engine_api import HAVE_VLLM, REPORTS_FAILED_RECVING, ConnectorBase, SupportsHMA
from .options import WORKER
from .sched_output import check_revision


class KvtierConnector(KvtierConnectorCore, ConnectorBase):  # type: ignore[misc,valid-type]
    """vLLM's ``KVConnectorBase_V1`` over ``KvtierConnectorCore``; constructed by vLLM's factory as
    ``KvtierConnector(vllm_config, role[, kv_cache_config])``. It does not declare ``SupportsHMA``: vLLM
    then turns its hybrid KV cache manager off and hands one KV cache group, which every backend (GPU
    and CPU) is served in. A configuration of several groups is refused, naming the two ways out."""

    _asks_hnd = False  # KvtierHybridConnector asks vLLM for the HND layout on a CUDA device

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            try:
                ConnectorBase.__init__(self, vllm_config, role, kv_cache_config)
            except TypeError:  # revisions whose base takes (vllm_config, role)
                ConnectorBase.__init__(self, vllm_config, role)
        extra = extra_of(vllm_config)
        if extra.get("kv_cache_layout", "auto") == "auto" and device_type(vllm_config) == "cpu":
            extra["kv_cache_layout"] = "cpu_attn"  # vLLM's CPU platform always runs its CPU_ATTN backend
        elif self._asks_hnd and wants_hnd(vllm_config):
            extra["kv_cache_layout"] = "hnd"  # what get_required_kvcache_layout asked vLLM for
        role_text = role_name(role)
        tp_rank = worker_tp_rank(vllm_config) if role_text == WORKER else 0
        check_revision()
        spec = spec_of_vllm_config(vllm_config)
        groups = check_kv_cache_config(kv_cache_config, spec)
        if groups is not None and not isinstance(self, SupportsHMA):
            raise ValueError(f"KvtierConnector: {len(groups)} KV cache groups (vLLM's hybrid KV cache manager is "
                             "on); KvtierConnector serves one: run with --disable-hybrid-kv-cache-manager, or, on "
                             "vLLM's CPU backend, name KvtierHybridConnector (sliding-window groups served)")
        if groups is not None and len(groups) > 1 and not REPORTS_FAILED_RECVING:
            raise ValueError(f"KvtierHybridConnector: {len(groups)} KV cache groups on a vLLM revision whose "
                             "KVConnectorTransferResults has no failed_recving: its scheduler cannot recover a "
                             "failed load of several groups (it unpacks one group's block ids in "
                             "_update_requests_with_invalid_blocks and _update_waiting_for_remote_kv: EngineCore "
                             "would die on the first load error). Use vLLM 0.32 or later, or "
                             "--disable-hybrid-kv-cache-manager with KvtierConnector")
        KvtierConnectorCore.__init__(self, role_text, spec, extra, tp_rank, groups=groups)
        self._vllm_role = role

    @property
    def role(self) -> Any:
        return self._vllm_role

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        KvtierConnectorCore.bind_connector_metadata(self, connector_metadata)
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        KvtierConnectorCore.clear_connector_metadata(self)
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            self._connector_metadata = None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return "HND" if cls._asks_hnd and wants_hnd(vllm_config) else "NHD"

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Any = None) -> bool:
        """True: on a CUDA device every attention layer's ``wait_for_layer_load`` makes the engine's
        stream wait for that layer's bytes. A full CUDA graph replays a step without running those
        calls, so a step whose batch looks like a decode batch (a prefix hit that leaves one prompt
        token to compute) would read KV before it landed; vLLM then runs its piecewise graphs, which
        run attention, and the waits in it, eagerly."""
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """False: kvtier is a cache, and a save lost to a preemption is a later miss, never bytes
        read from freed blocks: a save reads the blocks of tokens computed in its own step, and
        ``handle_preemptions`` waits for a preempted request's saves before vLLM reuses its blocks.
        So vLLM keeps (does not drop and recompute) a preempted request's in-flight output."""
        return False


class KvtierHybridConnector(KvtierConnector, SupportsHMA):  # type: ignore[misc,valid-type]
    """``KvtierConnector`` that declares vLLM's ``SupportsHMA`` (one block id list per KV cache group):
    vLLM keeps its hybrid KV cache manager on, and full-attention, sliding-window and Mamba groups (the
    last with ``mamba_cache_mode='all'``) are served in HND caches: on vLLM's CPU backend (``cpu_attn``)
    by the host path, and on a CUDA device, where it asks vLLM for the HND layout
    (``get_required_kvcache_layout``: FlashAttention's and FlashInfer's stride order (0, 1, 3, 2, 4)) and
    sets ``kv_cache_layout: hnd``, by kvtier.gpu's pieces (``_gpu_grouped``); Mamba groups in another
    mode and NHD caches with several groups are refused. Named in ``--kv-transfer-config`` as
    ``"kv_connector": "KvtierHybridConnector"``; opt-in: on a GPU every model then runs in vLLM's HND
    layout and in kvtier's head-major chunks (one layer group: a layer wait waits for the whole load;
    MLA models are not asked for HND)."""

    _asks_hnd = True
