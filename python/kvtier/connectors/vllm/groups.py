"""vLLM's KV cache groups (its hybrid KV cache manager, ``SupportsHMA``) in kvtier's grouped layout.

With the hybrid KV cache manager on, vLLM puts full-attention layers, sliding-window layers and Mamba /
linear-attention layers in KV cache groups of their own, each with its own block ids
(``KVCacheBlocks.get_block_ids()``: one list per group); a sliding-window group's blocks before a
request's window are the null block (``SlidingWindowManager``), and so are a Mamba group's blocks before
the one holding the state of the last computed token (``MambaManager``, vllm/v1/core/
single_type_kv_cache_manager.py; docs/connectors.md names the revisions). The connector stores such a
model in kvtier's grouped layout (docs/models.md): per vLLM group a kvtier group, ``kv`` for full
attention, ``window`` for sliding-window layers (head-major), ``state`` for Mamba layers. Served for
HND caches (a head's rows of a block are one run: vLLM's CPU backend's ``[2, num_blocks, kv_heads,
block_size, head_dim]`` on the host path, and on CUDA through kvtier.gpu's pieces (``gpu_grouped``)
FlashAttention's or FlashInfer's cache in vLLM's HND stride order, ``kv_caches.HEAD_MAJOR``),
where a chunk's piece of (head, layer, K or V) is, block by block, whole regions of that layer's
blocks; a layer's blocks come from the block ids of that layer's vLLM group.

A Mamba layer's cache is a list of state tensors ``[num_blocks, *shape]`` (conv state, then SSM or
temporal state), views of one page per block (``MambaSpec.shapes`` / ``dtypes``, one after the other
in the page); with ``mamba_cache_mode='all'`` block ``i`` of a request's Mamba group holds the state as
of the end of its tokens. A chunk's ``state`` group holds, per Mamba layer, that layer's page bytes of
the block that ends the chunk: the state as of the chunk's end.

``CacheGroup`` describes one vLLM group; ``GroupedCache`` is the worker's plan of the registered
tensors, built of ``host_paged.PagedCache`` segments, one per group (a group's regions are one run
of the chunk, and their blocks come from one vLLM group's ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from ... import _lib
from ...store import Handle, Namespace, Store, _dtype
from .host_paged import PagedCache, _start
from .kv_caches import _layer_order, _layer_regions, _one

if TYPE_CHECKING:
    from .spec import ModelSpec

# bytes of one value of the state dtypes vLLM's Mamba layers keep (torch names without "torch.")
_STATE_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
                   "uint8": 1, "int8": 1}


@dataclass(frozen=True)
class StateSpec:
    """One Mamba layer's state as vLLM's ``MambaSpec`` gives it: the shape and dtype of each state
    tensor of one block (conv state, then SSM or temporal state), and the Mamba type."""

    shapes: tuple
    dtypes: tuple      # torch dtype names without "torch." ("bfloat16", "float32", ...)
    mamba_type: str = ""

    def __post_init__(self) -> None:
        if not self.shapes or len(self.shapes) != len(self.dtypes):
            raise ValueError(f"KvtierConnector: a Mamba state of shapes {self.shapes} and dtypes {self.dtypes}")
        unknown = sorted(set(self.dtypes) - set(_STATE_ITEMSIZE))
        if unknown:
            raise ValueError(f"KvtierConnector: Mamba state dtype(s) {unknown} not supported "
                             f"(known: {', '.join(sorted(_STATE_ITEMSIZE))})")

    def tensor_bytes(self) -> list:
        return [prod(s) * _STATE_ITEMSIZE[d] for s, d in zip(self.shapes, self.dtypes)]

    @property
    def state_bytes(self) -> int:
        """Bytes of one layer's state (every tensor, unpadded)."""
        return sum(self.tensor_bytes())

    def describe(self) -> str:
        shapes = ",".join("x".join(map(str, s)) for s in self.shapes)
        return f"{self.mamba_type}:{shapes}:{','.join(self.dtypes)}"


@dataclass(frozen=True)
class CacheGroup:
    """One of vLLM's KV cache groups: its layer names, its sliding window in tokens (0: full attention
    or Mamba) and, for a Mamba group, its layers' state."""

    names: tuple
    window: int = 0
    state: Optional[StateSpec] = None


def layer_positions(groups: Sequence[CacheGroup]) -> dict:
    """Layer name -> the model layer index (kvtier's layer), by the layer index in the name."""
    names = [n for g in groups for n in g.names]
    if len(set(names)) != len(names):
        raise ValueError("KvtierConnector: a layer is in two KV cache groups")
    return {name: i for i, name in enumerate(_layer_order(names))}


def kvtier_groups(groups: Sequence[CacheGroup]) -> list:
    """kvtier's groups in chunk order, one per vLLM group, as (window, sorted layer indices, index of
    the vLLM group): full-attention groups (window 0) first, then by window, then Mamba (state) groups,
    each kind by first layer. One kvtier group per vLLM group keeps each group's regions one run of the
    chunk, so a load's piece list is built per group (a merged group would interleave vLLM groups head
    by head and layer by layer: gemma-3's window layers are in several vLLM groups)."""
    pos = layer_positions(groups)
    out = [(g.window, sorted(pos[n] for n in g.names), i) for i, g in enumerate(groups)]
    return sorted(out, key=lambda item: (groups[item[2]].state is not None, item[0], item[1]))


def layout_spec(spec: ModelSpec, chunk_tokens: int, groups: Sequence[CacheGroup]) -> str:
    """The kvtier layout spec of a model with these groups (docs/models.md "The layout spec"). A state
    group's dtype is ``fp8`` (bytes): its tensors' dtypes and shapes are in the engine identity
    (``state_identity``)."""
    out = [f"layers={spec.layers} tokens={chunk_tokens}"]
    for window, layers, index in kvtier_groups(groups):
        which = "+".join(map(str, layers))
        state = groups[index].state
        if state is not None:
            out.append(f"state:layers={which},bytes={state.state_bytes},dtype=fp8")
            continue
        kind = f"window:layers={which}" if window else f"kv:layers={which}"
        head = f"heads={spec.kv_heads},dim={spec.head_dim}"
        out.append(f"{kind},{head}" + (f",window={window}" if window else "") + f",dtype={spec.dtype}")
    return " ".join(out)


def state_identity(groups: Sequence[CacheGroup]) -> Optional[str]:
    """The engine identity field of the Mamba groups' states (type, shapes and dtypes per state group in
    chunk order), or None without Mamba groups."""
    states = [groups[i].state for _, _, i in kvtier_groups(groups) if groups[i].state is not None]
    return "|".join(s.describe() for s in states) if states else None


def skipped_blocks(window: int, computed_tokens: int, block_size: int) -> int:
    """Blocks of a window group that vLLM holds as the null block once ``computed_tokens`` are
    computed: ``SlidingWindowManager.get_num_skipped_tokens`` is ``computed - window + 1`` tokens, and
    whole blocks of those are freed (``remove_skipped_blocks``) or never allocated for a prefix hit
    (``allocate_new_computed_blocks``). 0 for a full-attention group."""
    if not window:
        return 0
    return max(0, computed_tokens - window + 1) // block_size


def skipped_state_blocks(computed_tokens: int, block_size: int) -> int:
    """Blocks of a Mamba group that vLLM holds as the null block once ``computed_tokens`` are computed:
    ``MambaManager.get_num_skipped_tokens`` is ``computed - 1`` (only the block of the last computed
    token's state is kept), freed by ``remove_skipped_blocks`` or never allocated for a prefix hit."""
    return max(0, computed_tokens - 1) // block_size


class GroupedCache:
    """The plan of an HND cache whose layers are in several vLLM groups (see the module docstring):
    ``segments`` in chunk order, each (index of the vLLM group, PagedCache, whether it is a state
    group). ``pieces`` takes per vLLM group a block table ``[n_chunks, blocks_per_chunk]`` (-1: not
    written, read into scratch on a load); a state segment reads the last block of each chunk's row."""

    def __init__(self, segments: list, groups: int, keepalive: Any, layer_names: tuple,
                 chunk_tokens: int) -> None:
        self.segments, self.groups, self.keepalive = segments, groups, keepalive
        self.layer_names = layer_names
        sizes = [np.full(seg.regions, seg.region_bytes if state else chunk_tokens * seg.row_bytes, np.int64)
                 for _, seg, state in segments]
        self._ends = np.cumsum(np.concatenate(sizes)) if sizes else np.zeros(0, np.int64)
        self._layers = np.concatenate([seg.region_layer for _, seg, _ in segments]) if segments else \
            np.zeros(0, np.int64)
        self.has_state = any(state for _, _, state in segments)

    def layer_end(self, layer: int, chunk_tokens: int) -> int:
        """Bytes of a chunk up to the end of its last region of a layer up to ``layer``."""
        last = np.flatnonzero(self._layers <= layer)
        return int(self._ends[last[-1]]) if last.size else 0

    def pieces(self, tables: np.ndarray, zeros: bool = False, alloc: Any = None) -> tuple[np.ndarray, np.ndarray, list]:
        """(kvtier_buf entries [n, 2], pieces per chunk, scratch buffers to keep alive) for the
        chunks of ``tables`` (int [groups, n_chunks, blocks_per_chunk]), in chunk byte order; -1
        blocks are scratch (zero-filled with ``zeros``): host memory, or ``alloc(bytes, zeros)``'s
        buffer (device memory for kvtier.gpu: ``gpu_grouped``)."""
        tables = np.asarray(tables, dtype=np.int64)
        if tables.ndim != 3 or tables.shape[0] != self.groups:
            raise ValueError(f"block tables must be [{self.groups} groups, n_chunks, blocks_per_chunk]")
        n = tables.shape[1]
        entries, counts, scratch = [], [], []
        for group, seg, state in self.segments:
            table = tables[group][:, -1:] if state else tables[group]  # a chunk's state: its last block's
            skipped = int((table < 0).sum()) * seg.regions
            buf = None
            if skipped:
                nbytes = skipped * seg.region_bytes
                buf = alloc(nbytes, zeros) if alloc else (np.zeros if zeros else np.empty)(nbytes, dtype=np.uint8)
            e, c = seg.pieces(table, buf)
            entries.append(e)
            counts.append(c.astype(np.int64))
            scratch.append(buf)
        chunk_of = np.concatenate([np.repeat(np.arange(n), c) for c in counts])
        seg_of = np.concatenate([np.full(len(e), s) for s, e in enumerate(entries)])
        order = np.lexsort((seg_of, chunk_of))  # stable: chunk, then segment, then region order
        out = np.ascontiguousarray(np.concatenate(entries)[order])
        return out, np.sum(counts, axis=0).astype(np.uint64), scratch


def grouped_cache_of(kv_caches: Mapping[str, Any], spec: ModelSpec, groups: Sequence[CacheGroup],
                     chunk_tokens: int, layout: str = "hnd") -> GroupedCache:
    """The plan of vLLM's HND ``kv_caches`` whose layers are in ``groups`` (a Mamba layer's entry: its
    list of state tensors): CPU tensors, or CUDA ones seen through ``gpu_paged._Geometry``. ``layout``
    ``cpu_attn`` (vLLM's CPU backend) also reads vLLM 0.32's 4-dimensional CPU cache."""
    pos = layer_positions(groups)
    if set(kv_caches) != set(pos):
        raise ValueError(f"KvtierConnector: the KV caches' layers {sorted(kv_caches)} are not the layers "
                         f"of the KV cache groups {sorted(pos)}")
    names = _layer_order(list(pos))
    if len(names) != spec.layers:
        raise ValueError(f"KvtierConnector: {len(names)} KV cache layers, the model has {spec.layers}")
    attn = {pos[n] for g in groups if g.state is None for n in g.names}
    regions = {l: _layer_regions(kv_caches[names[l]], spec, layout, f"layer {names[l]!r}") for l in sorted(attn)}
    segments = []
    for _, layers, group in kvtier_groups(groups):
        state = groups[group].state
        if state is not None:
            segments.append((group, _state_segment(kv_caches, names, layers, state), True))
        else:
            segments.append((group, _kv_segment([regions[l] for l in layers], layers, spec), False))
    return GroupedCache(segments, len(groups), dict(kv_caches), tuple(names), chunk_tokens)


def _kv_segment(regions: list, layers: list, spec: ModelSpec) -> PagedCache:
    """One kv or window group, head-major: head 0 layer a K, V, layer b K, V, ..., head 1, ..."""
    num_blocks, head_stride = _one(regions, 3, "num_blocks"), _one(regions, 4, "head stride")
    bases, strides, layer_of = [], [], []
    for h in range(spec.kv_heads):
        for l, (k, v, stride) in zip(layers, (r[:3] for r in regions)):
            for base in (k, v):
                bases.append(base + h * head_stride)
                strides.append(stride)
                layer_of.append(l)
    return PagedCache(np.asarray(bases, np.uint64), np.asarray(strides, np.uint64), np.asarray(layer_of, np.int64),
                      num_blocks, spec.block_size, spec.head_dim * _dtype(spec.dtype)[1])


def _state_segment(kv_caches: Mapping[str, Any], names: list, layers: list, state: StateSpec) -> PagedCache:
    """One Mamba group, layer-major: a region is one layer's state in one block (its state tensors one
    after the other in the block's page), read from the last block of each chunk."""
    parts = [_state_region(kv_caches[names[l]], state, f"layer {names[l]!r}") for l in layers]
    num_blocks = _one(parts, 2, "num_blocks")
    return PagedCache(np.asarray([p[0] for p in parts], np.uint64), np.asarray([p[1] for p in parts], np.uint64),
                      np.asarray(layers, np.int64), num_blocks, 1, state.state_bytes)


def _state_region(t: Any, state: StateSpec, what: str) -> tuple[int, int, int]:
    """(address of block 0's state, bytes between blocks, num_blocks) of one Mamba layer's cache: a
    list of CPU tensors ``[num_blocks, *shape]`` of ``state``'s shapes and dtypes, each block's rows
    contiguous, the tensors one after the other in a page (vLLM's ``_reshape_kv_cache_tensors``)."""
    if not isinstance(t, (list, tuple)) or len(t) != len(state.shapes):
        raise ValueError(f"KvtierConnector: {what}: a Mamba layer's cache is a list of {len(state.shapes)} "
                         f"state tensors (MambaSpec.shapes), not {type(t).__name__}")
    sizes = state.tensor_bytes()
    base = t[0].data_ptr() if hasattr(t[0], "data_ptr") else 0
    offset, page, blocks = 0, None, None
    for x, shape, dtype, size in zip(t, state.shapes, state.dtypes, sizes):
        device = getattr(getattr(x, "device", None), "type", None)
        if device != "cpu":  # CUDA caches are described through gpu_paged._Geometry, which reads as CPU
            raise ValueError(f"KvtierConnector: {what}: a {device} state tensor among CPU tensors")
        if str(x.dtype).replace("torch.", "") != dtype or tuple(x.shape[1:]) != tuple(shape):
            raise ValueError(f"KvtierConnector: {what}: a state tensor {tuple(x.shape)} {x.dtype}, the "
                             f"MambaSpec says [num_blocks, {', '.join(map(str, shape))}] {dtype}")
        if not _rows_contiguous(tuple(x.shape[1:]), tuple(x.stride()[1:])):
            raise ValueError(f"KvtierConnector: {what}: a block's state is not contiguous (strides {x.stride()})")
        if x.data_ptr() != base + offset:
            raise ValueError(f"KvtierConnector: {what}: the state tensors are not one after the other in a "
                             "block's page")
        stride = x.stride(0) * x.element_size()
        if page not in (None, stride) or blocks not in (None, x.shape[0]):
            raise ValueError(f"KvtierConnector: {what}: the state tensors differ in page size or block count")
        page, blocks, offset = stride, int(x.shape[0]), offset + size
    if page < offset:
        raise ValueError(f"KvtierConnector: {what}: a page of {page} bytes holds a state of {offset}")
    return base, page, blocks


def _rows_contiguous(shape: tuple, strides: tuple) -> bool:
    """Whether a tensor of ``shape`` and ``strides`` (elements) is one contiguous row-major run
    (dimensions of size 1 may have any stride)."""
    want = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1 and stride != want:
            return False
        want *= size
    return True


def load_grouped(store: Store, ns: Namespace, keys: Sequence[bytes], cache: GroupedCache,
                 tables: np.ndarray) -> Handle:
    """Starts loading ``keys`` into the blocks of ``tables`` ([groups, n_chunks, per]); -1 blocks
    (held by the engine already, a window group's null blocks, a Mamba group's blocks other than the
    prefix's last) are read into scratch, if at all."""
    entries, counts, scratch = cache.pieces(tables)
    return _start(_lib.lib().kvtier_load_async, store, ns, keys, (entries, counts), (scratch, cache.keepalive))


def save_grouped(store: Store, ns: Namespace, keys: Sequence[bytes], cache: GroupedCache,
                 tables: np.ndarray) -> Handle:
    """Starts saving the chunks held by the blocks of ``tables``; a -1 block (a window block vLLM
    freed, which no load of a prefix holding the chunk uses) is saved as zeros."""
    entries, counts, zeros = cache.pieces(tables, zeros=True)
    return _start(_lib.lib().kvtier_save_async, store, ns, keys, (entries, counts), (zeros, cache.keepalive))


def refusal(kind: str) -> Optional[str]:
    """Why vLLM's KV cache spec class ``kind`` is not served, or None when it is."""
    return _REFUSED.get(kind)


_REFUSED = {
    "SlidingWindowMLASpec": "sliding-window MLA layers in their own KV cache group are not served",
    "ChunkedLocalAttentionSpec": "chunked local attention layers in their own KV cache group are not served",
}

_MAMBA_MODES = {
    "align": "vLLM keeps a state at a block boundary only where a scheduler step ends (and frees it two "
             "steps later), so the state as of a chunk's end is missing for a chunk that ends inside a step",
    "none": "vLLM keeps one state per request, overwritten in place each step, so no state as of a "
            "chunk's end is kept",
}


def mamba_state_of(layer_spec: Any) -> StateSpec:
    """The state of a vLLM ``MambaSpec`` group; ValueError unless vLLM keeps the state as of every
    block's end in that block (``mamba_cache_mode='all'``, no speculative blocks)."""
    mode = getattr(layer_spec, "mamba_cache_mode", None)
    if mode != "all":
        why = _MAMBA_MODES.get(str(mode), "this vLLM's MambaSpec names no mamba_cache_mode")
        raise ValueError(f"KvtierConnector: a Mamba / linear-attention KV cache group with mamba_cache_mode "
                         f"{mode!r} is not served: {why}; a prefix hit needs the state as of that prefix's end. "
                         "Run vLLM with mamba_cache_mode 'all' (--mamba-cache-mode all: a state page per "
                         "block, the state as of the block's end)")
    spec_blocks = int(getattr(layer_spec, "num_speculative_blocks", 0) or 0)
    if spec_blocks:
        raise ValueError(f"KvtierConnector: a Mamba KV cache group with {spec_blocks} speculative blocks "
                         "(speculative decoding) is not served")
    shapes = tuple(tuple(int(x) for x in s) for s in getattr(layer_spec, "shapes", ()) or ())
    dtypes = tuple(str(d).replace("torch.", "") for d in getattr(layer_spec, "dtypes", ()) or ())
    return StateSpec(shapes, dtypes, str(getattr(layer_spec, "mamba_type", "") or ""))
