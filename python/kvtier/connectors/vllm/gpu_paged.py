"""KvtierConnector's path for KV caches in GPU memory: kvtier.gpu (include/kvtier/gpu.h).

kvtier reads and verifies each chunk on the host, copies it to the GPU in bulk and scatters its rows
into the blocks with one kernel per batch, layer group by layer group, each group with its own CUDA
event. One description of the cache serves both executors: ``device_paged_cache`` is the host path's
``PagedCache`` (``kv_caches.paged_cache_of``: the same shapes, refusals and ``auto`` rules) over
the CUDA tensors' addresses. From it, two ways to the GPU:

- the block-table plan (``gpu_cache_of``) when the cache is the classic one kvtier.gpu's own planner
  addresses: per layer one contiguous K and one contiguous V tensor ``[num_blocks, block_size,
  kv_heads, head_dim]`` -- vLLM's FlashAttention layout ``[2, num_blocks, block_size, kv_heads,
  head_dim]`` (K = ``t[0]``, V = ``t[1]``) or a (K, V) pair;
- caller-described pieces (``piece_plan``, kvtier.gpu ``load_pieces`` / ``save_pieces``) for every
  other layout the host path serves: FlashInfer's ``[num_blocks, 2, ...]`` (K and V interleaved block
  by block), MLA latent caches ``[num_blocks, block_size, latent_dim]`` (padded blocks too) and the
  head-major (HND) forms (``cpu_attn`` / ``hnd``: vLLM's CPU backend's ``[2, num_blocks, kv_heads,
  block_size, head_dim]``, FlashAttention's and FlashInfer's caches in vLLM's HND stride order). The pieces are
  exactly the host path's ``PagedCache.pieces()`` for the same blocks, with device addresses; each
  piece's layer group is its first region's layer's. A head-major chunk holds the layers once per head,
  so its loads have one layer group (every layer wait waits for the whole load).
- ``layer_group``: the group of a layer, as gpu.h defines groups (group g covers layers
  ``[g*L/G, (g+1)*L/G)``), so ``wait_for_layer_load(layer)`` makes the engine's stream wait for that
  group's event only.
- ``load_plan``: the chunks of a load that kvtier.gpu writes. It writes every block of a chunk, so a
  leading chunk that holds a block the engine's own prefix cache owns (-1 in the block table) is not
  loaded -- never written over a block another request may be reading -- and its own blocks are
  reported as load errors (recomputed).

Nothing here imports torch or needs a GPU: the tensors are read through their ``device``, ``shape``,
``stride()``, ``element_size()``, ``dtype`` and ``data_ptr()``.
"""

from __future__ import annotations

import logging
import types
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np

from ... import gpu
from .host_paged import PagedCache
from .kv_caches import _TORCH_DTYPES, HEAD_MAJOR, _layer_order, paged_cache_of

if TYPE_CHECKING:
    from .spec import ModelSpec

logger = logging.getLogger(__name__)


def is_cuda(t: Any) -> bool:
    first = t[0] if isinstance(t, (tuple, list)) else t
    return getattr(getattr(first, "device", None), "type", None) == "cuda"


def _check(t: Any, spec: ModelSpec, what: str) -> int:
    """ValueError unless ``t`` is a contiguous CUDA [num_blocks, block_size, kv_heads, head_dim] of the
    configuration's dtype; returns its device index."""
    dev = getattr(t, "device", None)
    if getattr(dev, "type", None) != "cuda":
        raise ValueError(f"KvtierConnector: {what}: a {getattr(dev, 'type', None)} tensor among CUDA ones")
    want = _TORCH_DTYPES[spec.dtype]
    if str(t.dtype) not in ((want,) if isinstance(want, str) else want):
        raise ValueError(f"KvtierConnector: {what}: dtype {t.dtype}, the configuration says {spec.kv_dtype}")
    shape = (spec.block_size, spec.kv_heads, spec.head_dim)
    row = spec.kv_heads * spec.head_dim
    if len(t.shape) != 4 or tuple(t.shape[1:]) != shape or tuple(t.stride()) != (
            spec.block_size * row, row, spec.head_dim, 1):
        raise ValueError(f"KvtierConnector: {what}: shape {tuple(t.shape)} strides {tuple(t.stride())}; "
                         f"kvtier.gpu needs one contiguous [num_blocks, {', '.join(map(str, shape))}] "
                         "tensor per layer for K and for V (FlashAttention layout, NHD)")
    return int(dev.index or 0)


def _layer_kv(t: Any, spec: ModelSpec, layout: str, what: str) -> tuple:
    if isinstance(t, (tuple, list)):
        if len(t) != 2:
            raise ValueError(f"KvtierConnector: {what}: a tuple of {len(t)} tensors, not (K, V)")
        return t[0], t[1]
    if len(t.shape) != 5:
        raise ValueError(f"KvtierConnector: {what}: shape {tuple(t.shape)} is not a FlashAttention cache "
                         "[2, num_blocks, block_size, kv_heads, head_dim] (MLA and other layouts are not "
                         "supported)")
    if layout == "flashinfer" or (layout == "auto" and t.shape[0] != 2):
        raise ValueError(f"KvtierConnector: {what}: shape {tuple(t.shape)}: the block-table plan needs K "
                         "and V each contiguous (FlashAttention [2, num_blocks, ...]); FlashInfer's "
                         "[num_blocks, 2, ...] goes by pieces (device_paged_cache)")
    return t[0], t[1]


class _Geometry:
    """A CUDA tensor as the host path's description reads it (shape, strides, dtype, address), so that
    ``paged_cache_of`` describes CUDA caches with its own shapes, checks and refusals. It reports the
    CPU device that description accepts: ``device_paged_cache`` has checked the real device first."""

    _CPU = types.SimpleNamespace(type="cpu", index=None)

    def __init__(self, t: Any) -> None:
        self._t, self.device, self.shape, self.dtype = t, self._CPU, t.shape, t.dtype

    def dim(self) -> int:
        return len(self.shape)

    def stride(self, *dim: int) -> Any:
        return self._t.stride(*dim)

    def element_size(self) -> int:
        return self._t.element_size()

    def data_ptr(self) -> int:
        return self._t.data_ptr()


def _cuda_device(kv_caches: Mapping[str, Any]) -> int:
    """The one CUDA device every tensor of ``kv_caches`` is on; ValueError otherwise."""
    devices = set()
    for name, value in kv_caches.items():
        for t in value if isinstance(value, (tuple, list)) else (value,):
            dev = getattr(t, "device", None)
            if getattr(dev, "type", None) != "cuda":
                raise ValueError(f"KvtierConnector: layer {name!r}: a {getattr(dev, 'type', None)} tensor among "
                                 "CUDA ones")
            devices.add(int(dev.index or 0))
    if len(devices) != 1:
        raise ValueError(f"KvtierConnector: the KV cache layers are on devices {sorted(devices)}, not one")
    return devices.pop()


def device_paged_cache(kv_caches: Mapping[str, Any], spec: ModelSpec, layout: str = "auto") -> tuple:
    """(the host path's PagedCache over the CUDA tensors' device addresses, the device index): one
    description for both executors (``kv_caches.paged_cache_of`` decides shapes and refusals)."""
    device = _cuda_device(kv_caches)
    views = {name: tuple(_Geometry(x) for x in t) if isinstance(t, (tuple, list)) else _Geometry(t)
             for name, t in kv_caches.items()}
    cache = paged_cache_of(views, spec, layout)
    cache.keepalive = dict(kv_caches)
    return cache, device


def is_classic(cache: PagedCache, spec: ModelSpec, layout: str) -> bool:
    """Whether kvtier.gpu's block-table plan addresses the cache: a K/V model, chunks in the classic
    order, every region's blocks back to back (one contiguous K and V tensor per layer)."""
    return (spec.attention != "mla" and layout not in HEAD_MAJOR and cache.regions == 2 * spec.layers
            and bool(np.all(cache.strides == np.uint64(cache.region_bytes))))


def layer_major(cache: PagedCache) -> bool:
    """Whether the layers come in order in the cache's chunks (not a head-major chunk)."""
    return bool(np.all(np.diff(cache.region_layer) >= 0))


def piece_plan(cache: PagedCache, blocks: np.ndarray, layers: int, groups: int) -> tuple:
    """(pieces uint64 [n, 2], pieces per chunk, layer group per piece or None) of kvtier.gpu's
    ``load_pieces`` / ``save_pieces`` for the chunks whose blocks are the rows of ``blocks``: the host
    path's pieces, and each piece's group (gpu.h's grouping) from the layer of its first region."""
    if groups == 1:
        pieces, per_chunk = cache.pieces(blocks)
        return pieces, per_chunk, None
    pieces, per_chunk, layer = cache.pieces_and_layers(blocks)
    firsts = np.array([g * layers // groups for g in range(groups)], dtype=np.int64)
    return pieces, per_chunk, (np.searchsorted(firsts, layer, side="right") - 1).astype(np.uint32)


def gpu_cache_of(kv_caches: Mapping[str, Any], spec: ModelSpec, layout: str = "auto") -> tuple:
    """(kvtier.gpu.PagedCache, layer names in chunk order) of vLLM's CUDA ``kv_caches`` for the
    block-table plan: FlashAttention caches or (K, V) pairs; every other layout is refused here (it goes
    by pieces: ``device_paged_cache``)."""
    if spec.attention == "mla":
        raise ValueError("KvtierConnector: MLA KV caches have no block-table form in kvtier.gpu (one K and "
                         "one V tensor per layer); they go by pieces (device_paged_cache)")
    names = _layer_order(list(kv_caches))
    if len(names) != spec.layers:
        raise ValueError(f"KvtierConnector: {len(names)} KV cache layers, the model has {spec.layers}")
    ks, vs, blocks, devices = [], [], set(), set()
    for name in names:
        k, v = _layer_kv(kv_caches[name], spec, layout, f"layer {name!r}")
        for x, which in ((k, "K"), (v, "V")):
            devices.add(_check(x, spec, f"layer {name!r} {which}"))
            blocks.add(int(x.shape[0]))
        ks.append(int(k.data_ptr()))
        vs.append(int(v.data_ptr()))
    if len(blocks) != 1 or len(devices) != 1:
        raise ValueError(f"KvtierConnector: layers differ in num_blocks {sorted(blocks)} or device "
                         f"{sorted(devices)}")
    cache = gpu.PagedCache(device=devices.pop(), num_blocks=blocks.pop(), block_tokens=spec.block_size,
                           k=ks, v=vs)
    return cache, tuple(names)


def layer_group(layer: int, layers: int, groups: int) -> int:
    """The layer group (gpu.h: group g covers layers [g*L/G, (g+1)*L/G)) that holds ``layer``."""
    if not 0 <= layer < layers or not 1 <= groups <= layers:
        raise ValueError(f"layer {layer} of {layers} in {groups} groups")
    g = layer * groups // layers
    while g + 1 < groups and (g + 1) * layers // groups <= layer:
        g += 1
    while g * layers // groups > layer:
        g -= 1
    return g


def load_plan(blocks: np.ndarray) -> tuple[int, np.ndarray]:
    """(first chunk kvtier.gpu loads, blocks of the chunks before it that the connector owns) for a
    load over ``blocks`` ([n_chunks, blocks_per_chunk], -1 for blocks the engine holds already)."""
    held = (blocks < 0).any(axis=1)
    first = int(np.argmin(held)) if not held.all() else len(blocks)
    if held[first:].any():
        raise ValueError("KvtierConnector: a block the engine holds after a block it loads")
    skipped = blocks[:first]
    return first, skipped[skipped >= 0]


def _current_stream() -> int:
    import torch  # only with CUDA caches, which come from torch

    return int(torch.cuda.current_stream().cuda_stream)


class GpuWorker:
    """The worker side of KvtierConnector over kvtier.gpu: one Transfer for the registered cache (the
    block-table plan for FlashAttention caches, pieces for every other layout the host path serves).
    Loads are read and verified on the host before ``load`` returns and land on the GPU layer group by
    layer group; ``wait_layer`` makes the engine's current stream wait for a layer's group without
    blocking the host. Saves gather the blocks on the GPU and are in the top tier when ``save``
    returns (the lower tiers are written in the background)."""

    def __init__(self, kv_caches: Mapping[str, Any], spec: ModelSpec, layout: str, layer_groups: int,
                 ns: Any, store: Any) -> None:
        host, device = device_paged_cache(kv_caches, spec, layout)
        self.names = host.layer_names
        why = gpu.why_not(device)
        if why:
            raise ValueError(f"KvtierConnector: CUDA KV caches need kvtier's GPU path, which is not usable "
                             f"here: {why}")
        # A head-major chunk holds every layer once per head: one group, whatever was asked.
        self.groups = max(1, min(int(layer_groups), spec.layers)) if layer_major(host) else 1
        self._layers, self._ns, self._store = spec.layers, ns, store
        self._pieces: Optional[PagedCache] = None
        if is_classic(host, spec, layout):
            cache, _ = gpu_cache_of(kv_caches, spec, layout)
            self._transfer = gpu.Transfer(ns, cache, layer_groups=self.groups)
        else:
            self._pieces = host
            self._transfer = gpu.Transfer(ns, None, device=device, layer_groups=self.groups)
        # A shm:// pool shared by the host's engine processes is page-locked once in this process, so its
        # chunks are copied straight to the GPU (no staging copy); without such a tier this holds nothing.
        self._pins = gpu.HostPins(store, device)
        self._keep = dict(kv_caches)
        self._loaded_this_step = False

    def load(self, keys: list, blocks: np.ndarray) -> tuple[int, np.ndarray]:
        """Loads what ``load_plan`` allows; returns (chunks loaded, owned blocks not loaded)."""
        first, skipped = load_plan(blocks)
        done = 0
        if first < len(keys):
            stream = _current_stream()
            self._after_earlier_load()
            if self._pieces is None:
                done = self._transfer.load(self._store, self._ns, keys[first:], blocks[first:].ravel().tolist(),
                                           after_stream=stream)
            else:
                plan = piece_plan(self._pieces, blocks[first:], self._layers, self.groups)
                done = self._transfer.load_pieces(self._store, self._ns, keys[first:], *plan, after_stream=stream)
            self._loaded_this_step = True
        rest = blocks[first + done:]
        return done, np.concatenate([skipped, rest[rest >= 0]])

    def _after_earlier_load(self) -> None:
        """Before a step's next load: the engine's stream waits for the whole of the step's last load. The
        next load is queued after it on the transfer's one stream, so its first layer group lands after
        every group of this one anyway (no order is added), and the step's layer waits then depend on
        the next load alone: one that fails (a per-request miss, reported as load errors) leaves nothing
        to wait for, instead of a wait on a load the transfer may no longer hold."""
        if self._loaded_this_step:
            self.wait_layer(self._layers - 1)
            self._loaded_this_step = False

    def wait_layer(self, index: int) -> None:
        if not self._loaded_this_step:
            return
        group = layer_group(index, self._layers, self.groups)
        try:
            self._transfer.stream_wait_layers(group, _current_stream())
        except gpu.KvtierError as e:  # e.g. a stream being captured: wait on the host instead
            logger.warning("KvtierConnector: stream wait for layer group %d refused (%s); waiting on the host",
                           group, e)
            self._transfer.wait_layers(group)  # a GPU error here is the engine's to handle: raised

    def end_step(self) -> None:
        self._loaded_this_step = False

    def save(self, keys: list, blocks: np.ndarray) -> None:
        if self._pieces is None:
            self._transfer.save(self._store, self._ns, keys, blocks.ravel().tolist(), after_stream=_current_stream())
            return
        pieces, per_chunk, _ = piece_plan(self._pieces, blocks, self._layers, 1)
        self._transfer.save_pieces(self._store, self._ns, keys, pieces, per_chunk, after_stream=_current_stream())

    def close(self) -> None:
        self._transfer.close()
        self._pins.close()
        self._keep = {}
