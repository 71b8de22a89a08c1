"""vLLM's KV cache groups (its hybrid KV cache manager, ``SupportsHMA``) in kvtier's grouped layout.

With the hybrid KV cache manager on, vLLM puts full-attention layers and sliding-window layers in KV
cache groups of their own, each with its own block ids (``KVCacheBlocks.get_block_ids()``: one list
per group), and a sliding-window group's blocks before a request's window are the null block
(``SlidingWindowManager``, vllm/v1/core/single_type_kv_cache_manager.py; docs/connectors.md names the
revision). The connector stores such a model in kvtier's grouped layout (docs/models.md): per vLLM
group a kvtier group, ``kv`` for full attention and ``window`` for sliding-window layers, head-major. Served for vLLM's CPU backend's HND cache
(``[2, num_blocks, kv_heads, block_size, head_dim]``: a head's rows of a block are one run), where a
chunk's piece of (head, layer, K or V) is, block by block, whole regions of that layer's blocks; a
layer's blocks come from the block ids of that layer's vLLM group.

``CacheGroup`` describes one vLLM group; ``GroupedCache`` is the worker's plan of the registered
tensors, built of ``_host_paged.PagedCache`` segments, one per group (a group's regions are one run
of the chunk, and their blocks come from one vLLM group's ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from .. import _lib
from ..store import Handle, Namespace, Store, _dtype
from ._host_paged import PagedCache, _start
from ._vllm_kv_caches import _layer_order, _layer_regions, _one

if TYPE_CHECKING:
    from .vllm_v1 import ModelSpec


@dataclass(frozen=True)
class CacheGroup:
    """One of vLLM's KV cache groups: its layer names and its sliding window in tokens (0: full
    attention)."""

    names: tuple
    window: int = 0


def layer_positions(groups: Sequence[CacheGroup]) -> dict:
    """Layer name -> the model layer index (kvtier's layer), by the layer index in the name."""
    names = [n for g in groups for n in g.names]
    if len(set(names)) != len(names):
        raise ValueError("KvtierConnector: a layer is in two KV cache groups")
    return {name: i for i, name in enumerate(_layer_order(names))}


def kvtier_groups(groups: Sequence[CacheGroup]) -> list:
    """kvtier's groups in chunk order, one per vLLM group, as (window, sorted layer indices, index of
    the vLLM group): full-attention groups (window 0) first, then by window, then by first layer. One
    kvtier group per vLLM group keeps each group's regions one run of the chunk, so a load's piece list
    is built per group (a merged group would interleave vLLM groups head by head and layer by layer:
    gemma-3's window layers are in several vLLM groups)."""
    pos = layer_positions(groups)
    out = [(g.window, sorted(pos[n] for n in g.names), i) for i, g in enumerate(groups)]
    return sorted(out, key=lambda item: (item[0], item[1]))


def layout_spec(spec: ModelSpec, chunk_tokens: int, groups: Sequence[CacheGroup]) -> str:
    """The kvtier layout spec of a model with these groups (docs/models.md "The layout spec")."""
    out = [f"layers={spec.layers} tokens={chunk_tokens}"]
    for window, layers, _ in kvtier_groups(groups):
        kind = f"window:layers={'+'.join(map(str, layers))}" if window else \
            f"kv:layers={'+'.join(map(str, layers))}"
        head = f"heads={spec.kv_heads},dim={spec.head_dim}"
        out.append(f"{kind},{head}" + (f",window={window}" if window else "") + f",dtype={spec.dtype}")
    return " ".join(out)


def skipped_blocks(window: int, computed_tokens: int, block_size: int) -> int:
    """Blocks of a window group that vLLM holds as the null block once ``computed_tokens`` are
    computed: ``SlidingWindowManager.get_num_skipped_tokens`` is ``computed - window + 1`` tokens, and
    whole blocks of those are freed (``remove_skipped_blocks``) or never allocated for a prefix hit
    (``allocate_new_computed_blocks``). 0 for a full-attention group."""
    if not window:
        return 0
    return max(0, computed_tokens - window + 1) // block_size


class GroupedCache:
    """The plan of an HND cache whose layers are in several vLLM groups (see the module docstring).
    ``pieces`` takes per vLLM group a block table ``[n_chunks, blocks_per_chunk]`` (-1: not written,
    read into scratch on a load)."""

    def __init__(self, whole: PagedCache, region_group: np.ndarray, groups: int) -> None:
        self.whole, self.groups = whole, groups
        cuts = [0, *(np.flatnonzero(np.diff(region_group)) + 1).tolist(), len(region_group)]
        self.segments = [(int(region_group[a]), PagedCache(
            whole.bases[a:b], whole.strides[a:b], whole.region_layer[a:b], whole.num_blocks,
            whole.block_tokens, whole.row_bytes)) for a, b in zip(cuts, cuts[1:])]

    @property
    def layer_names(self) -> tuple:
        return self.whole.layer_names

    def layer_end(self, layer: int, chunk_tokens: int) -> int:
        return self.whole.layer_end(layer, chunk_tokens)

    def pieces(self, tables: np.ndarray, zeros: bool = False) -> tuple[np.ndarray, np.ndarray, list]:
        """(kvtier_buf entries [n, 2], pieces per chunk, scratch buffers to keep alive) for the
        chunks of ``tables`` (int [groups, n_chunks, blocks_per_chunk]), in chunk byte order; -1
        blocks are scratch (zero-filled with ``zeros``)."""
        tables = np.asarray(tables, dtype=np.int64)
        if tables.ndim != 3 or tables.shape[0] != self.groups:
            raise ValueError(f"block tables must be [{self.groups} groups, n_chunks, blocks_per_chunk]")
        n = tables.shape[1]
        entries, counts, scratch = [], [], []
        for group, seg in self.segments:
            skipped = int((tables[group] < 0).sum()) * seg.regions
            buf = (np.zeros if zeros else np.empty)(skipped * seg.region_bytes, dtype=np.uint8) if skipped else None
            e, c = seg.pieces(tables[group], buf)
            entries.append(e)
            counts.append(c.astype(np.int64))
            scratch.append(buf)
        chunk_of = np.concatenate([np.repeat(np.arange(n), c) for c in counts])
        seg_of = np.concatenate([np.full(len(e), s) for s, e in enumerate(entries)])
        order = np.lexsort((seg_of, chunk_of))  # stable: chunk, then segment, then region order
        out = np.ascontiguousarray(np.concatenate(entries)[order])
        return out, np.sum(counts, axis=0).astype(np.uint64), scratch


def grouped_cache_of(kv_caches: Mapping[str, Any], spec: ModelSpec,
                     groups: Sequence[CacheGroup]) -> GroupedCache:
    """The plan of vLLM's CPU-backend (HND) ``kv_caches`` whose layers are in ``groups``."""
    pos = layer_positions(groups)
    if set(kv_caches) != set(pos):
        raise ValueError(f"KvtierConnector: the KV caches' layers {sorted(kv_caches)} are not the layers "
                         f"of the KV cache groups {sorted(pos)}")
    names = _layer_order(list(pos))
    if len(names) != spec.layers:
        raise ValueError(f"KvtierConnector: {len(names)} KV cache layers, the model has {spec.layers}")
    regions = [_layer_regions(kv_caches[n], spec, "cpu_attn", f"layer {n!r}") for n in names]
    num_blocks, head_stride = _one(regions, 3, "num_blocks"), _one(regions, 4, "head stride")
    bases, strides, layer_of, group_ix = [], [], [], []
    for _, layers, group in kvtier_groups(groups):
        for h in range(spec.kv_heads):
            for l in layers:
                k, v, stride = regions[l][:3]
                for base in (k, v):
                    bases.append(base + h * head_stride)
                    strides.append(stride)
                    layer_of.append(l)
                    group_ix.append(group)
    row = spec.head_dim * _dtype(spec.dtype)[1]
    whole = PagedCache(np.asarray(bases, np.uint64), np.asarray(strides, np.uint64),
                       np.asarray(layer_of, np.int64), num_blocks, spec.block_size, row,
                       dict(kv_caches), tuple(names))
    return GroupedCache(whole, np.asarray(group_ix, np.int64), len(groups))


def load_grouped(store: Store, ns: Namespace, keys: Sequence[bytes], cache: GroupedCache,
                 tables: np.ndarray) -> Handle:
    """Starts loading ``keys`` into the blocks of ``tables`` ([groups, n_chunks, per]); -1 blocks
    (held by the engine already, or a window group's null blocks) are read into scratch, if at all."""
    entries, counts, scratch = cache.pieces(tables)
    return _start(_lib.lib().kvtier_load_async, store, ns, keys, (entries, counts),
                  (scratch, cache.whole.keepalive))


def save_grouped(store: Store, ns: Namespace, keys: Sequence[bytes], cache: GroupedCache,
                 tables: np.ndarray) -> Handle:
    """Starts saving the chunks held by the blocks of ``tables``; a -1 block (a window block vLLM
    freed, which no load of a prefix holding the chunk uses) is saved as zeros."""
    entries, counts, zeros = cache.pieces(tables, zeros=True)
    return _start(_lib.lib().kvtier_save_async, store, ns, keys, (entries, counts),
                  (zeros, cache.whole.keepalive))


def refusal(kind: str) -> Optional[str]:
    """Why vLLM's KV cache spec class ``kind`` is not served, or None when it is."""
    return _REFUSED.get(kind)


_REFUSED = {
    "MambaSpec": (
        "a Mamba / linear-attention layer (MambaSpec) keeps a per-request state in a KV cache group of "
        "its own; vLLM keeps that state as of block boundaries only with mamba_cache_mode 'all' (a state "
        "page per block of the Mamba group) or 'align' (the boundary of each scheduler step's last "
        "token), in the Mamba group's blocks, and overwrites one state in place with 'none'; saving and "
        "loading those pages as kvtier's state group at chunk boundaries is not built, so hybrid models "
        "are not served (a prefix hit needs the state as of that prefix's end)"),
    "SlidingWindowMLASpec": "sliding-window MLA layers in their own KV cache group are not served",
    "ChunkedLocalAttentionSpec": "chunked local attention layers in their own KV cache group are not served",
}
