"""Block-table loads and saves for a paged KV cache in host memory.

The same plan as the GPU path (src/gpu/gpu_plan.h): a chunk of the classic layout is 2 x layers pieces
in the order layer 0 K, layer 0 V, layer 1 K, ...; a piece is tokens_per_chunk rows of one token's
kv_heads x head_dim values (src/core/chunk_geometry.h). A chunk of an MLA model (a grouped layout of
one ``latent`` group over every layer, docs/models.md) is layers pieces, layer 0's latents, layer 1's,
...; a piece is tokens_per_chunk rows of latent_dim values. Token t of a request lives in block
``block_table[t // block_tokens]``, row ``t % block_tokens``, so with chunks aligned to blocks the
bytes of (chunk, layer, part) -- a part is K or V, or the one latent -- are, block by block, whole
(block, part) regions of the paged cache. Each such region (or run of regions adjacent in memory) is
one kvtier piece: ``kvtier_load`` copies the verified chunk bytes straight into the block addresses
and ``kvtier_save`` reads them from there -- no staging buffer and no extra copy in Python. kvtier
streams a large copy into small pieces with non-temporal stores (src/tiers/mem/page_arena.cc), as it
does into one contiguous buffer. The piece lists are built with numpy (a few array operations per
call).

Any layout whose (block, part) region is one contiguous run of block_tokens rows is served:
``PagedCache`` holds, per region of a block in chunk order, the address of block 0's and the byte
stride between blocks. A third order is served for vLLM's CPU backend, whose block keeps each head's
rows together (HND): the grouped, head-major chunk of one ``kv`` group (docs/models.md "Chunk piece
order"), whose regions are head 0 layer 0 K, head 0 layer 0 V, head 0 layer 1 K, ..., head 1 ...,
each ``block_tokens`` rows of one head's ``head_dim`` values (``PagedCache.head_major``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ... import _lib
from ...store import Handle, Namespace, Store, _key_array

_SIZE_T = ctypes.c_size_t


@dataclass
class PagedCache:
    """Addresses of a registered paged cache in host memory (see the module docstring). A chunk is
    ``regions`` pieces of ``chunk_tokens x row_bytes`` bytes; piece r is, block by block, region r of
    each of the chunk's blocks: ``bases[r] + block x strides[r]``, ``block_tokens x row_bytes`` bytes."""

    bases: np.ndarray        # uint64 [regions]: address of region r in block 0, in chunk order
    strides: np.ndarray      # uint64 [regions]: bytes from block b's region r to block b + 1's
    region_layer: np.ndarray  # int64 [regions]: the layer (in chunk order) region r belongs to
    num_blocks: int
    block_tokens: int
    row_bytes: int           # one token's row of one region (a layer's K, V or latent)
    keepalive: Any = None    # the tensors
    layer_names: tuple = ()  # the engine's name of each layer, in chunk order

    @staticmethod
    def layer_major(bases: Any, strides: Any, num_blocks: int, block_tokens: int, row_bytes: int,
                    keepalive: Any = None, layer_names: tuple = ()) -> "PagedCache":
        """The cache of a layer-major chunk: ``bases`` [layers, parts] (K and V, or one latent, per
        layer), ``strides`` [layers]; region (l, p) is piece l x parts + p."""
        bases = np.asarray(bases, dtype=np.uint64)
        layers, parts = bases.shape
        return PagedCache(bases.ravel(), np.repeat(np.asarray(strides, dtype=np.uint64), parts),
                          np.repeat(np.arange(layers, dtype=np.int64), parts), num_blocks, block_tokens,
                          row_bytes, keepalive, layer_names)

    @staticmethod
    def head_major(k_base: Sequence[int], v_base: Sequence[int], strides: Sequence[int], head_stride: int,
                   heads: int, num_blocks: int, block_tokens: int, row_bytes: int, keepalive: Any = None,
                   layer_names: tuple = ()) -> "PagedCache":
        """The cache of a head-major chunk (HND blocks): per layer the address of block 0's K and V
        head 0, the stride between blocks and, common to every layer, the stride between a block's
        heads; region (h, l, p) is piece (h x layers + l) x 2 + p."""
        kv = np.stack([np.asarray(k_base, np.uint64), np.asarray(v_base, np.uint64)], axis=1)  # [L, 2]
        layers = kv.shape[0]
        heads_off = np.arange(heads, dtype=np.uint64) * np.uint64(head_stride)
        return PagedCache((heads_off[:, None, None] + kv[None, :, :]).ravel(),
                          np.tile(np.repeat(np.asarray(strides, np.uint64), 2), heads),
                          np.tile(np.repeat(np.arange(layers, dtype=np.int64), 2), heads), num_blocks,
                          block_tokens, row_bytes, keepalive, layer_names)

    @property
    def regions(self) -> int:
        return int(self.bases.shape[0])

    @property
    def region_bytes(self) -> int:
        return self.block_tokens * self.row_bytes

    def layer_end(self, layer: int, chunk_tokens: int) -> int:
        """Bytes of a chunk of ``chunk_tokens`` tokens up to the end of its last piece of a layer up
        to ``layer`` (what must have landed before that layer is usable)."""
        last = np.flatnonzero(self.region_layer <= layer)
        return (int(last[-1]) + 1 if last.size else 0) * chunk_tokens * self.row_bytes

    def pieces(self, blocks: np.ndarray, scratch: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """(kvtier_buf entries [n, 2] of (address, size), pieces per chunk [n_chunks]) for the chunks
        whose blocks are the rows of ``blocks`` (int [n_chunks, blocks_per_chunk]), in chunk byte
        order. Regions that follow each other in memory (consecutive block ids) are one piece. An
        entry of ``blocks`` that is -1 goes to ``scratch`` instead (a block the engine already holds:
        those bytes are read and dropped)."""
        out, per_chunk, _ = self._pieces(blocks, scratch)
        return out, per_chunk

    def pieces_and_layers(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``pieces(blocks)`` and, per piece, the layer (in chunk order) of the first region it holds
        (a piece that runs on into the next layer's region counts as the first: kvtier.gpu's layer-wise
        waits then wait for it with that layer, never before it lands)."""
        out, per_chunk, first = self._pieces(blocks, None)
        per_region = max(np.asarray(blocks).shape[1], 1)
        return out, per_chunk, self.region_layer[(first % (self.regions * per_region)) // per_region]

    def _pieces(self, blocks: np.ndarray, scratch: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        blocks = np.asarray(blocks, dtype=np.int64)
        if blocks.ndim != 2:
            raise ValueError("blocks must be [n_chunks, blocks_per_chunk]")
        if blocks.size and (blocks.max() >= self.num_blocks or blocks.min() < -1):
            raise ValueError(f"block table names a block outside [0, {self.num_blocks})")
        region = np.uint64(self.region_bytes)
        b = np.where(blocks < 0, 0, blocks).astype(np.uint64)
        addr = self.bases[None, :, None] + b[:, None, :] * self.strides[None, :, None]  # [chunks, R, blocks]
        skipped = np.broadcast_to((blocks < 0)[:, None, :], addr.shape)
        if skipped.any():
            address, size = _buffer(scratch)
            if size < int(skipped.sum()) * self.region_bytes:
                raise ValueError("skipped blocks need a scratch buffer of one region each")
            offsets = np.cumsum(skipped.ravel()) - 1
            base = np.uint64(address)
            scratch_addr = base + offsets.reshape(addr.shape).astype(np.uint64) * region
            addr = np.where(skipped, scratch_addr, addr)
        flat = addr.reshape(len(blocks), -1)                      # [n_chunks, regions per chunk]
        starts = np.ones(flat.shape, dtype=bool)                  # a region that begins a piece
        starts[:, 1:] = flat[:, 1:] != flat[:, :-1] + region
        first = np.flatnonzero(starts.ravel())
        out = np.empty((first.size, 2), dtype=np.uint64)
        out[:, 0] = flat.ravel()[first]
        out[:, 1] = np.diff(np.append(first, flat.size)).astype(np.uint64) * region
        return out, starts.sum(axis=1).astype(np.uint64), first


def _buffer(scratch: Any) -> tuple[int, int]:
    """(address, bytes) of a scratch buffer: a numpy array (host) or a tensor (kvtier.gpu's pieces: device
    memory); (0, 0) for None."""
    if scratch is None:
        return 0, 0
    if hasattr(scratch, "data_ptr"):
        return int(scratch.data_ptr()), int(scratch.numel()) * int(scratch.element_size())
    return int(scratch.ctypes.data), int(scratch.nbytes)


class _Keep:
    """What one operation keeps alive; Handle.close() calls release()."""

    def __init__(self, *objs: Any) -> None:
        self.objs: Optional[tuple] = objs

    def release(self) -> None:
        self.objs = None


def _start(fn: Any, store: Store, ns: Namespace, keys: Sequence[bytes], plan: tuple, extra: Any) -> Handle:
    pieces, per_chunk = plan
    arr, n = _key_array(keys)
    if n != len(per_chunk):
        raise ValueError(f"{n} keys for {len(per_chunk)} chunks")
    counts = np.ascontiguousarray(per_chunk, dtype=np.uint64)  # size_t on the 64-bit platforms kvtier runs on
    bufs = pieces.ctypes.data_as(ctypes.POINTER(_lib.KvBuf))
    op = ctypes.c_void_p()
    with store._use() as handle, ns._use() as ns_handle:
        _lib.check(fn(handle, ns_handle, arr, n, bufs, counts.ctypes.data_as(ctypes.POINTER(_SIZE_T)), -1,
                      ctypes.byref(op)))
    return Handle(op.value, (_Keep(pieces, counts, extra), arr, ns, store))


def load_async(store: Store, ns: Namespace, keys: Sequence[bytes], cache: PagedCache,
               blocks: np.ndarray) -> Handle:
    """Starts loading ``keys`` (one per row of ``blocks``) into the cache's blocks; Handle.wait()
    gives the verified leading chunks loaded. Blocks of -1 are read into a scratch buffer."""
    skipped = int((np.asarray(blocks) < 0).sum()) * cache.regions
    scratch = np.empty(skipped * cache.region_bytes, dtype=np.uint8) if skipped else None
    return _start(_lib.lib().kvtier_load_async, store, ns, keys, cache.pieces(blocks, scratch),
                  (scratch, cache.keepalive))


def save_async(store: Store, ns: Namespace, keys: Sequence[bytes], cache: PagedCache,
               blocks: np.ndarray) -> Handle:
    """Starts saving the chunks held by the cache's blocks (one row of ``blocks`` per key)."""
    return _start(_lib.lib().kvtier_save_async, store, ns, keys, cache.pieces(blocks), cache.keepalive)
