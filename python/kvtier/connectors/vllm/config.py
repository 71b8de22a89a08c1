"""What the vLLM connector reads of vLLM's configuration: the ``ModelSpec`` of a ``VllmConfig``
(model_config, cache_config, parallel_config; the weights' identity fields by ``engine_identity``,
on a CPU device the attention kernel's packing by ``cpu_kernel``),
the KV cache groups of a ``KVCacheConfig`` it serves (``check_kv_cache_config``), the connector's
options, role, device and TP rank. ValueError for what is not served. Imports no module that imports
it (no import cycle).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .cpu_kernel import cpu_attn_isa
from .engine_identity import model_identity_fields
from .groups import CacheGroup, mamba_state_of, refusal
from .spec import ROLES, ModelSpec


def spec_of_vllm_config(vllm_config: Any) -> ModelSpec:
    """The ModelSpec of a VllmConfig (model_config, cache_config, parallel_config)."""
    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    if getattr(pc, "pipeline_parallel_size", 1) != 1:
        raise ValueError("KvtierConnector: pipeline parallelism is not supported by this connector")
    for name in ("decode_context_parallel_size", "prefill_context_parallel_size"):
        if int(getattr(pc, name, 1) or 1) != 1:
            raise ValueError(f"KvtierConnector: context parallelism ({name} > 1: each rank holds some of "
                             "every block's tokens) is not supported by this connector")
    cache_dtype = str(getattr(cc, "cache_dtype", "auto"))
    if cache_dtype == "auto":
        cache_dtype = str(mc.dtype).replace("torch.", "")
    if cache_dtype.startswith("fp8") and getattr(cc, "calculate_kv_scales", False):
        # The scales that turn the fp8 bytes back into K and V are then computed by each engine from the
        # first batch it sees: chunks saved by one engine would be read with another's scales, wrong
        # values that verify. Scales from the checkpoint are the weights' (model, revision, quant_config
        # in the identity), and without any the scale is 1.0 everywhere.
        raise ValueError("KvtierConnector: an fp8 KV cache with calculate_kv_scales: every engine computes "
                         "its own K/V scales from its first batch, so chunks saved under one engine's scales "
                         "would be read under another's; use the checkpoint's scales (no "
                         "--calculate-kv-scales) or a bf16/fp16 KV cache")
    mla = bool(getattr(mc, "use_mla", False))
    fields = model_identity_fields(mc)
    if device_type(vllm_config) == "cpu":  # K's bytes are in the CPU kernel's packing (cpu_kernel)
        isa = cpu_attn_isa(mc, int(cc.block_size), int(mc.get_head_size()), getattr(cc, "cache_dtype", None))
        fields = tuple(sorted(fields + (("cpu_attn_isa", isa),)))
    # MLA: vLLM's ModelConfig gives 1 KV head and a head size of kv_lora_rank + qk_rope_head_dim
    return ModelSpec(model=str(mc.model), revision=getattr(mc, "revision", None),
                     layers=int(mc.get_num_layers(pc)), kv_heads=1 if mla else int(mc.get_num_kv_heads(pc)),
                     head_dim=int(mc.get_head_size()), kv_dtype=cache_dtype, block_size=int(cc.block_size),
                     tp_size=int(pc.tensor_parallel_size), attention="mla" if mla else "mha",
                     model_fields=fields)


def check_kv_cache_config(kv_cache_config: Any, spec: ModelSpec) -> Optional[list]:
    """The KV cache groups of vLLM's KVCacheConfig as the connector serves them: None for one group of
    full attention (the single-group path; also for None, revisions that pass no KVCacheConfig), else
    one CacheGroup per group, each of full attention, of one sliding window, or of Mamba layers whose
    state vLLM keeps as of every block's end (``mamba_cache_mode='all'``) (vLLM's hybrid KV cache
    manager, SupportsHMA). ValueError for anything else (vllm/v1/kv_cache_interface.py's spec classes,
    matched by name: Mamba states in another mode, sliding-window MLA, chunked local attention; an MLA
    spec exactly when the configuration is MLA; another block size), naming the reason."""
    out = []
    for group in list(getattr(kv_cache_config, "kv_cache_groups", None) or ()) if kv_cache_config else []:
        top = getattr(group, "kv_cache_spec", None)
        inner = getattr(top, "kv_cache_specs", None)  # UniformTypeKVCacheSpecs: per-layer specs
        kinds = {kind_of(s, spec) for s in (inner.values() if isinstance(inner, Mapping) else [top])}
        if len(kinds) != 1:
            raise ValueError(f"KvtierConnector: a KV cache group mixes sliding windows or Mamba states "
                             f"{sorted(map(str, kinds))}")
        size = getattr(top, "block_size", None)
        if size is not None and int(size) != spec.block_size:
            raise ValueError(f"KvtierConnector: a KV cache group of block size {size}, the cache config's "
                             f"is {spec.block_size}")
        window, state = kinds.pop()
        out.append(CacheGroup(tuple(getattr(group, "layer_names", None) or ()), window, state))
    if len(out) <= 1 and not any(g.window or g.state for g in out):
        return None
    if all(g.state for g in out):  # a layout of state groups alone: no test drives one
        raise ValueError("KvtierConnector: a model of Mamba / linear-attention layers only (no attention KV "
                         "cache group) is not served")
    if spec.attention == "mla":
        raise ValueError("KvtierConnector: an MLA model in several KV cache groups is not served")
    return out


def kind_of(layer_spec: Any, spec: ModelSpec) -> tuple:
    """(sliding window, Mamba state) of one layer's KV cache spec: (0, None) for full attention, (W,
    None) for a window of W tokens, (0, StateSpec) for a Mamba layer; ValueError for a spec that is not
    served."""
    kinds = [c.__name__ for c in type(layer_spec).__mro__]
    for kind in kinds:
        why = refusal(kind)
        if why:
            raise ValueError(f"KvtierConnector: {why}")
    if "MambaSpec" in kinds:
        return 0, mamba_state_of(layer_spec)
    if ("MLAAttentionSpec" in kinds) != (spec.attention == "mla"):
        raise ValueError(f"KvtierConnector: KV cache spec {type(layer_spec).__name__} for a "
                         f"configuration whose attention is {spec.attention!r}")
    if "SlidingWindowSpec" not in kinds:
        return 0, None
    window = int(getattr(layer_spec, "sliding_window", 0) or 0)
    if window <= 0:
        raise ValueError(f"KvtierConnector: a SlidingWindowSpec with sliding_window {window}")
    return window, None


def extra_of(vllm_config: Any) -> dict:
    return dict(getattr(getattr(vllm_config, "kv_transfer_config", None), "kv_connector_extra_config", None) or {})


def wants_hnd(vllm_config: Any) -> bool:
    """Whether KvtierHybridConnector asks vLLM for the HND layout: on a CUDA device, for a model that is
    not MLA, unless the configuration names another kv_cache_layout than ``auto`` or ``hnd``."""
    mla = bool(getattr(getattr(vllm_config, "model_config", None), "use_mla", False))
    return (device_type(vllm_config) == "cuda" and not mla
            and extra_of(vllm_config).get("kv_cache_layout", "auto") in ("auto", "hnd"))


def role_name(role: Any) -> str:
    name = getattr(role, "name", role)
    return {"SCHEDULER": ROLES[0], "WORKER": ROLES[1]}.get(str(name).upper(), str(name))


def device_type(vllm_config: Any) -> str:
    return str(getattr(getattr(vllm_config, "device_config", None), "device_type", "") or "")


def worker_tp_rank(vllm_config: Any) -> int:
    try:  # pragma: no cover - needs vLLM
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank  # type: ignore
        return int(get_tensor_model_parallel_rank())
    except Exception:
        return int(getattr(vllm_config.parallel_config, "rank", 0)) % max(
            1, int(vllm_config.parallel_config.tensor_parallel_size))
