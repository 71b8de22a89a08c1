"""KvtierConnector's path for several vLLM KV cache groups (full attention, sliding window, Mamba states)
in GPU memory: the host path's grouped plan (``groups.GroupedCache``) over the CUDA tensors'
device addresses, moved by kvtier.gpu's caller-described pieces (``Transfer.load_pieces`` /
``save_pieces``).

Served where the piece list is exact and whole regions: HND caches (``kv_caches.HEAD_MAJOR``),
whose head's rows of a block are one run -- FlashAttention's ``[2, num_blocks, block_size, kv_heads,
head_dim]`` and FlashInfer's ``[num_blocks, 2, block_size, kv_heads, head_dim]`` in vLLM's HND stride
order (0, 1, 3, 2, 4), and the CPU backend's form -- and Mamba layers' state tensors (one page per
block). An NHD cache is refused before any tensor is seen (``identity._check_grouped``): kvtier's groups
are head-major, and an NHD block would be one piece per token and head.

Blocks of -1 (a window group's null blocks, a Mamba group's blocks other than a chunk's last, blocks
vLLM freed) are device scratch: a load reads them there and drops them, a save writes zeros from
there, as the host path does with host scratch. A head-major chunk finishes every layer only in its
last head, so a load has one layer group: ``wait_layer`` makes the engine's stream wait for the whole
load, and a load of a model with Mamba groups makes it wait before ``load`` returns (a Mamba layer
reads its state without a layer wait). The scratch of a load is kept until the engine's stream has
waited for the load (``end_step``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ... import gpu
from .gpu_paged import GpuWorker, _cuda_device, _current_stream, _Geometry
from .groups import CacheGroup, GroupedCache, grouped_cache_of

if TYPE_CHECKING:
    from .spec import ModelSpec

Alloc = Callable[[int, bool], Any]


def _views(kv_caches: Mapping[str, Any]) -> dict:
    return {name: [_Geometry(x) for x in t] if isinstance(t, (tuple, list)) else _Geometry(t)
            for name, t in kv_caches.items()}


def device_grouped_cache(kv_caches: Mapping[str, Any], spec: ModelSpec, groups: Sequence[CacheGroup],
                         chunk_tokens: int) -> tuple[GroupedCache, int]:
    """(the host path's GroupedCache over the CUDA tensors' device addresses, the device index): the
    same shapes, refusals and piece lists as on the CPU."""
    device = _cuda_device(kv_caches)
    cache = grouped_cache_of(_views(kv_caches), spec, groups, chunk_tokens)
    cache.keepalive = dict(kv_caches)
    return cache, device


def device_alloc(device: int) -> Alloc:
    """Scratch in device memory: ``alloc(bytes, zeros)``, a uint8 tensor on CUDA device ``device``."""
    def alloc(nbytes: int, zeros: bool) -> Any:
        import torch  # only with CUDA caches, which come from torch

        return (torch.zeros if zeros else torch.empty)(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    return alloc


def bad_blocks(tables: np.ndarray, done: int, has_state: bool) -> tuple[int, np.ndarray]:
    """(chunks counted loaded, blocks of every group to report as load errors) of a load of ``tables``
    ([groups, n_chunks, per]) whose first ``done`` chunks loaded. With Mamba groups only the prefix's last
    block takes a state: a load that stopped early reports all its blocks (as the host path does)."""
    if has_state and done < tables.shape[1]:
        done = 0
    rest = tables[:, done:]
    return done, rest[rest >= 0]


class GpuGroupedWorker(GpuWorker):
    """``GpuWorker``'s interface (load, wait_layer, end_step, save, close) over a GroupedCache; ``load``
    and ``save`` take the block tables of every group, [groups, n_chunks, blocks_per_chunk]."""

    def __init__(self, kv_caches: Mapping[str, Any], spec: ModelSpec, groups: Sequence[CacheGroup],
                 chunk_tokens: int, ns: Any, store: Any, alloc: Optional[Alloc] = None) -> None:
        self.cache, device = device_grouped_cache(kv_caches, spec, groups, chunk_tokens)
        self.names = self.cache.layer_names
        why = gpu.why_not(device)
        if why:
            raise ValueError(f"KvtierConnector: CUDA KV caches need kvtier's GPU path, which is not usable "
                             f"here: {why}")
        self.groups, self._layers, self._ns, self._store = 1, spec.layers, ns, store
        self._pieces = None
        self._transfer = gpu.Transfer(ns, None, device=device, layer_groups=1)
        self._pins = gpu.HostPins(store, device)
        self._keep = dict(kv_caches)
        self._alloc = alloc or device_alloc(device)
        self._scratch: list = []
        self._loaded_this_step = False

    def load(self, keys: list, tables: np.ndarray) -> tuple[int, np.ndarray]:  # type: ignore[override]
        entries, counts, scratch = self.cache.pieces(tables, alloc=self._alloc)
        stream = _current_stream()
        self._after_earlier_load()  # a failed load leaves the step nothing to wait for (GpuWorker)
        self._scratch += [s for s in scratch if s is not None]
        done = self._transfer.load_pieces(self._store, self._ns, keys, entries, counts, after_stream=stream)
        self._loaded_this_step = True
        if self.cache.has_state:  # a Mamba layer reads its state with no layer wait before it
            self.wait_layer(0)
        return bad_blocks(tables, done, self.cache.has_state)

    def end_step(self) -> None:
        if self._loaded_this_step and self._scratch:
            self.wait_layer(0)  # the engine's stream is after the loads: their scratch may be reused
        self._scratch = []
        self._loaded_this_step = False

    def save(self, keys: list, tables: np.ndarray) -> None:  # type: ignore[override]
        entries, counts, zeros = self.cache.pieces(tables, zeros=True, alloc=self._alloc)
        # the zeros are written on the engine's stream, which the save waits for; it returns once the
        # blocks are gathered, so the scratch may go then
        self._transfer.save_pieces(self._store, self._ns, keys, entries, counts, after_stream=_current_stream())
        del zeros
