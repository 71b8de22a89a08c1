"""The namespace of one TP rank's chunks: the chunk layout of its cache (``layout_of``) and its
engine identity (``identity_of``)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import kvtier

from .groups import CacheGroup, layout_spec
from .kv_caches import HEAD_MAJOR
from .spec import ModelSpec


def layout_of(spec: ModelSpec, chunk_tokens: int, extra: Mapping[str, Any],
              groups: Optional[Sequence[CacheGroup]] = None) -> kvtier.Layout:
    """The chunk layout of one rank's cache: the classic K/V layout for NHD caches; the grouped
    head-major layout of one ``kv`` group for vLLM's CPU backend (``kv_cache_layout: cpu_attn``, HND),
    whose block holds each head's rows as one run; for MLA the grouped layout of one ``latent`` group
    over every layer; with vLLM's KV cache ``groups`` (sliding-window layers in groups of their own) a
    kvtier group per vLLM group, ``kv`` or ``window`` (docs/models.md, ``_vllm_groups.kvtier_groups``).
    ``layout_spec`` in the configuration, when given, must name that same layout (ValueError
    otherwise: a cache is never read as another)."""
    layers = "0" if spec.layers == 1 else f"0-{spec.layers - 1}"
    if groups:
        _check_grouped(spec, extra, groups)
        layout = kvtier.Layout.from_spec(layout_spec(spec, chunk_tokens, groups))
    elif spec.attention == "mla":
        layout = kvtier.Layout.from_spec(f"layers={spec.layers} tokens={chunk_tokens} "
                                         f"latent:layers={layers},dim={spec.head_dim},dtype={spec.dtype}")
    elif extra.get("kv_cache_layout", "auto") in HEAD_MAJOR:
        layout = kvtier.Layout.from_spec(f"layers={spec.layers} tokens={chunk_tokens} kv:layers={layers},"
                                         f"heads={spec.kv_heads},dim={spec.head_dim},dtype={spec.dtype}")
    else:
        layout = kvtier.Layout(layers=spec.layers, kv_heads=spec.kv_heads, head_dim=spec.head_dim,
                               dtype=spec.dtype, tokens_per_chunk=chunk_tokens)
    text = extra.get("layout_spec")
    if text is not None:
        try:
            given = kvtier.Layout.from_spec(str(text))
        except kvtier.KvtierError as e:
            raise ValueError(f"KvtierConnector: layout_spec {text!r}: {e}") from None
        if given != layout:
            raise ValueError(f"KvtierConnector: layout_spec {given.spec or text!r} is not the layout of "
                             f"this engine's cache, {layout.spec or _classic_spec(layout)!r}")
    return layout


def _check_grouped(spec: ModelSpec, extra: Mapping[str, Any], groups: Sequence[CacheGroup]) -> None:
    """ValueError unless a model whose layers are in several KV cache groups can be served."""
    if spec.attention != "mha":
        raise ValueError("KvtierConnector: an MLA model in several KV cache groups is not served")
    layout = extra.get("kv_cache_layout", "auto")
    if layout not in HEAD_MAJOR:
        kinds = "Mamba / linear-attention" if any(g.state for g in groups) else "sliding-window"
        raise ValueError(
            f"KvtierConnector: {kinds} KV cache groups (vLLM's hybrid KV cache manager) are served for HND "
            f"caches only, not kv_cache_layout {layout!r}: kvtier's kv, window and state groups are "
            "head-major, and an NHD block (a row holds every head of a token) would be copied as one piece per "
            "token and head. Ways out: vLLM's CPU backend (kv_cache_layout 'cpu_attn', which the vLLM adapter "
            "sets on a CPU device); on CUDA, FlashAttention or FlashInfer in vLLM's HND layout "
            "(kv_cache_layout 'hnd', which KvtierHybridConnector sets and asks vLLM for on a CUDA device; "
            "VLLM_KV_CACHE_LAYOUT=HND); or --disable-hybrid-kv-cache-manager (one group, the classic layout, "
            "every layer's KV of every token)")
    if len(groups) > 1 and "async_load" in extra and not extra["async_load"]:
        raise ValueError("KvtierConnector: async_load false with several KV cache groups is refused: vLLM "
                         "recovers a failed load of several groups only as a failed asynchronous load "
                         "(failed_recving; block-level load errors end EngineCore there), so loads are "
                         "asynchronous (docs/connectors.md)")


def _classic_spec(layout: kvtier.Layout) -> str:
    return (f"layers={layout.layers} tokens={layout.tokens_per_chunk} "
            f"classic:heads={layout.kv_heads},dim={layout.head_dim},dtype={layout.dtype}")


def identity_of(spec: ModelSpec, extra: Mapping[str, Any], tp_rank: int,
                state: Optional[str] = None) -> kvtier.EngineIdentity:
    """The engine identity of one TP rank's chunks. The chunk bytes are in kvtier's own order
    (layout ``chunk``), whatever the attention backend's layout, so FlashAttention and FlashInfer
    engines of one model share chunks. An MLA latent is the same on every TP rank: its identity
    leaves the TP size and rank out, so a chunk saved at one TP degree loads at any other. ``state``:
    a hybrid model's Mamba states (``_vllm_groups.state_identity``), kept by vLLM with
    ``mamba_cache_mode='all'``."""
    if spec.attention == "mla":
        return kvtier.EngineIdentity(
            engine="vllm", io_path="kv_connector_v1", layout="chunk", attention="mla",
            model=extra.get("model_id") or spec.model,
            model_revision=extra.get("model_revision") or spec.revision,
            kv_dtype=spec.kv_dtype, page_tokens=spec.block_size, latent_dim=spec.head_dim,
            layers=spec.layers, hash_scheme="kvtier_chunk_chain", salt=extra.get("salt") or None,
            **dict(spec.model_fields))
    return kvtier.EngineIdentity(
        engine="vllm", io_path="kv_connector_v1", layout="chunk", attention="mha",
        model=extra.get("model_id") or spec.model,
        model_revision=extra.get("model_revision") or spec.revision,
        kv_dtype=spec.kv_dtype, page_tokens=spec.block_size, kv_heads=spec.kv_heads,
        k_head_dim=spec.head_dim, v_head_dim=spec.head_dim, layers=spec.layers,
        tp_size=spec.tp_size, tp_rank=tp_rank, hash_scheme="kvtier_chunk_chain",
        salt=extra.get("salt") or None, state_spec=state, mamba_cache_mode="all" if state else None,
        **dict(spec.model_fields))
