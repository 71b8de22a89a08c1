"""The GPU path of kvtier (include/kvtier/gpu.h) through the C API's kvtier_gpu_* functions.

    import kvtier, kvtier.gpu
    if kvtier.gpu.available():                       # False (with kvtier.gpu.why_not()) without a GPU
        cache = kvtier.gpu.PagedCache(device=0, num_blocks=n, block_tokens=16,
                                      k=[t.data_ptr() for t in k_tensors], v=[t.data_ptr() for t in v_tensors])
        with kvtier.gpu.Transfer(ns, cache, layer_groups=4) as gpu:
            stream = torch.cuda.current_stream().cuda_stream
            loaded = gpu.load(store, ns, keys, block_table, after_stream=stream)  # verified, queued on the GPU
            gpu.wait_layers(0)                               # layer group 0 has landed
            gpu.wait()
            gpu.save(store, ns, keys, block_table, after_stream=torch.cuda.current_stream().cuda_stream)

Tensors are passed as device addresses (e.g. torch's data_ptr()): each layer's K and V is one contiguous
[num_blocks][block_tokens][kv_heads][head_dim] tensor of the namespace's dtype. No torch import here.

Any other layout (an MLA latent cache, FlashInfer's interleaved blocks, head-major blocks, any grouped
namespace) goes by caller-described places: per chunk, the (device address, size) pieces its bytes go to,
in chunk byte order -- the list kvtier.connectors.vllm.host_paged.PagedCache.pieces() builds -- and, for
layer-wise waits, each piece's layer group:

        with kvtier.gpu.Transfer(ns, None, device=0, layer_groups=4) as gpu:
            loaded = gpu.load_pieces(store, ns, keys, pieces, pieces_per_chunk, groups, after_stream=stream)
            gpu.save_pieces(store, ns, keys, pieces, pieces_per_chunk, after_stream=stream)
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from . import _lib
from ._lib import KvtierError, Status, check
from .store import Namespace, Store, _Handle, _key_array


class KvGpuCache(Structure):
    """kvtier_gpu_cache."""

    _fields_ = [("device", c_int32), ("num_blocks", c_uint32), ("block_tokens", c_uint32),
                ("layers", c_uint32), ("k", POINTER(c_void_p)), ("v", POINTER(c_void_p))]


_GPU = c_void_p
_SIGNATURES = {
    "kvtier_gpu_available": (c_int, [c_int]),
    "kvtier_gpu_open": (c_int, [c_void_p, POINTER(KvGpuCache), c_uint64, c_uint32, c_uint32, POINTER(_GPU)]),
    "kvtier_gpu_close": (None, [_GPU]),
    "kvtier_gpu_load_after": (c_int, [_GPU, c_void_p, c_void_p, POINTER(_lib.KvKey), c_size_t,
                                      POINTER(c_uint32), c_size_t, c_void_p, POINTER(c_size_t)]),
    "kvtier_gpu_wait_layers": (c_int, [_GPU, c_uint32]),
    "kvtier_gpu_wait": (c_int, [_GPU]),
    "kvtier_gpu_stream_wait_layers": (c_int, [_GPU, c_uint32, c_void_p]),
    "kvtier_gpu_save": (c_int, [_GPU, c_void_p, c_void_p, POINTER(_lib.KvKey), c_size_t, POINTER(c_uint32),
                                c_size_t, c_void_p]),
    "kvtier_gpu_open_pieces": (c_int, [c_void_p, c_int32, c_uint64, c_uint32, c_uint32, POINTER(_GPU)]),
    "kvtier_gpu_load_pieces": (c_int, [_GPU, c_void_p, c_void_p, POINTER(_lib.KvKey), c_size_t, POINTER(_lib.KvBuf),
                                       c_size_t, POINTER(c_size_t), POINTER(c_uint32), c_void_p, POINTER(c_size_t)]),
    "kvtier_gpu_save_pieces": (c_int, [_GPU, c_void_p, c_void_p, POINTER(_lib.KvKey), c_size_t, POINTER(_lib.KvBuf),
                                       c_size_t, POINTER(c_size_t), POINTER(c_uint32), c_void_p]),
    "kvtier_store_pin_host_memory": (c_int, [c_void_p, c_int, POINTER(c_void_p), POINTER(c_size_t)]),
    "kvtier_host_pins_free": (None, [c_void_p]),
}
_bound: Optional[ctypes.CDLL] = None


def _gpu_lib() -> ctypes.CDLL:
    """libkvtier.so with the kvtier_gpu_* signatures bound (NOT_SUPPORTED if it predates them)."""
    global _bound
    if _bound is None:
        lib = _lib.lib()
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is None:
                raise KvtierError(Status.NOT_SUPPORTED, f"libkvtier.so has no {name}: rebuild it")
            fn.restype, fn.argtypes = restype, argtypes
        _bound = lib
    return _bound


def why_not(device: int = 0) -> str:
    """"" when `device` is usable, else the reason kvtier gives (built without CUDA, no driver, ...)."""
    lib = _gpu_lib()
    if lib.kvtier_gpu_available(device) == Status.OK:
        return ""
    return _lib.last_error()


def available(device: int = 0) -> bool:
    """Whether this libkvtier.so has CUDA and `device` is usable."""
    return why_not(device) == ""


@dataclass
class PagedCache:
    """The engine's paged KV cache: device addresses of each layer's K and V tensor."""

    device: int
    num_blocks: int
    block_tokens: int
    k: Sequence[int] = field(default_factory=list)
    v: Sequence[int] = field(default_factory=list)


def _table(block_table: Sequence[int]) -> tuple[Any, int]:
    n = len(block_table)
    arr = (c_uint32 * max(n, 1))(*block_table)
    return arr, n


def _pieces(pieces: Any, per_chunk: Any, groups: Any, n_keys: int) -> tuple:
    """ctypes views of a piece list: pieces uint64 [n, 2] of (address, size), counts per chunk, groups
    (None: every piece in group 0), and the arrays they point into."""
    p = np.ascontiguousarray(pieces, dtype=np.uint64).reshape(-1, 2)
    c = np.ascontiguousarray(per_chunk, dtype=np.uint64)  # size_t on the 64-bit platforms kvtier runs on
    if c.shape != (n_keys,):
        raise KvtierError(Status.INVALID_ARGUMENT, f"{c.size} piece counts for {n_keys} keys")
    g = None if groups is None else np.ascontiguousarray(groups, dtype=np.uint32)
    if g is not None and g.shape != (len(p),):
        raise KvtierError(Status.INVALID_ARGUMENT, f"{g.size} layer groups for {len(p)} pieces")
    return (p.ctypes.data_as(POINTER(_lib.KvBuf)), len(p), c.ctypes.data_as(POINTER(c_size_t)),
            None if g is None else g.ctypes.data_as(POINTER(c_uint32)), (p, c, g))


class Transfer(_Handle):
    """A kvtier_gpu: staging buffers and a stream bound to one PagedCache and the namespace's layout, or,
    with ``cache`` None, to no cache (``device`` then names the GPU): for ``load_pieces`` and
    ``save_pieces`` only.

    One thread at a time. close() (or the context manager) waits for transfers in flight.
    """

    def __init__(self, ns: Namespace, cache: Optional[PagedCache], *, staging_bytes: int = 0,
                 layer_groups: int = 1, host_threads: int = 0, device: int = 0) -> None:
        lib = _gpu_lib()
        self.layer_groups = max(layer_groups, 1)
        if cache is None:
            handle = c_void_p()
            check(lib.kvtier_gpu_open_pieces(ns.handle, device, staging_bytes, layer_groups, host_threads,
                                             ctypes.byref(handle)))
            self._handle: Optional[int] = handle.value
            return
        if len(cache.k) != len(cache.v):
            raise KvtierError(Status.INVALID_ARGUMENT, "PagedCache: k and v differ in length")
        layers = len(cache.k)
        self._k = (c_void_p * max(layers, 1))(*cache.k)
        self._v = (c_void_p * max(layers, 1))(*cache.v)
        c = KvGpuCache(cache.device, cache.num_blocks, cache.block_tokens, layers,
                       ctypes.cast(self._k, POINTER(c_void_p)), ctypes.cast(self._v, POINTER(c_void_p)))
        handle = c_void_p()
        check(lib.kvtier_gpu_open(ns.handle, ctypes.byref(c), staging_bytes, layer_groups, host_threads,
                                  ctypes.byref(handle)))
        self._handle = handle.value

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise KvtierError(Status.INVALID_ARGUMENT, "GPU transfer is closed")
        return self._handle

    def load(self, store: Store, ns: Namespace, keys: Sequence[bytes], block_table: Sequence[int],
             after_stream: Optional[int] = None) -> int:
        """Reads and verifies the leading cached chunks, queues them for the blocks; returns how many.
        after_stream: the CUDA stream (address) whose queued work must finish before any byte reaches the
        blocks (attention still reading them); None or 0 waits for nothing. A stream being captured into
        a CUDA graph is refused (INVALID_ARGUMENT)."""
        arr, n = _key_array(keys)
        table, nb = _table(block_table)
        loaded = c_size_t(0)
        check(_gpu_lib().kvtier_gpu_load_after(self.handle, store.handle, ns.handle, arr, n, table, nb,
                                               after_stream, ctypes.byref(loaded)))
        return loaded.value

    def load_pieces(self, store: Store, ns: Namespace, keys: Sequence[bytes], pieces: Any, pieces_per_chunk: Any,
                    groups: Any = None, after_stream: Optional[int] = None) -> int:
        """As ``load``, into caller-described places: chunk i's bytes go, in chunk byte order, to its
        ``pieces_per_chunk[i]`` rows of ``pieces`` (uint64 [n, 2]: device address, size); ``groups``: None
        or each piece's layer group (non-decreasing within a chunk). INVALID_ARGUMENT for a list that does
        not describe the chunks (include/kvtier/gpu.h, DevicePieces)."""
        arr, n = _key_array(keys)
        bufs, n_pieces, counts, ids, keep = _pieces(pieces, pieces_per_chunk, groups, n)
        loaded = c_size_t(0)
        check(_gpu_lib().kvtier_gpu_load_pieces(self.handle, store.handle, ns.handle, arr, n, bufs, n_pieces,
                                                counts, ids, after_stream, ctypes.byref(loaded)))
        del keep
        return loaded.value

    def save_pieces(self, store: Store, ns: Namespace, keys: Sequence[bytes], pieces: Any, pieces_per_chunk: Any,
                    groups: Any = None, after_stream: Optional[int] = None) -> None:
        """As ``save``, from caller-described places (see ``load_pieces``)."""
        arr, n = _key_array(keys)
        bufs, n_pieces, counts, ids, keep = _pieces(pieces, pieces_per_chunk, groups, n)
        check(_gpu_lib().kvtier_gpu_save_pieces(self.handle, store.handle, ns.handle, arr, n, bufs, n_pieces,
                                                counts, ids, after_stream))
        del keep

    def wait_layers(self, group: int) -> None:
        """Blocks until layer group `group` of the last load has landed."""
        check(_gpu_lib().kvtier_gpu_wait_layers(self.handle, group))

    def stream_wait_layers(self, group: int, stream: int) -> None:
        """Makes the CUDA stream `stream` (an address, e.g. torch's cuda_stream) wait for the group."""
        check(_gpu_lib().kvtier_gpu_stream_wait_layers(self.handle, group, stream))

    def wait(self) -> None:
        """Blocks until every layer of the last load has landed."""
        check(_gpu_lib().kvtier_gpu_wait(self.handle))

    def save(self, store: Store, ns: Namespace, keys: Sequence[bytes], block_table: Sequence[int],
             after_stream: Optional[int] = None) -> None:
        """Gathers the request's chunks from the blocks and saves them (top tier before returning).
        after_stream: the CUDA stream (address) whose queued work the gather waits for; None or 0 waits
        for nothing, so synchronise the legacy default stream (address 0) first."""
        arr, n = _key_array(keys)
        table, nb = _table(block_table)
        check(_gpu_lib().kvtier_gpu_save(self.handle, store.handle, ns.handle, arr, n, table, nb, after_stream))

    def _free(self, handle: Any) -> None:
        _gpu_lib().kvtier_gpu_close(handle)


class HostPins(_Handle):
    """This process's page-locking of the host memory ``store``'s tiers lend chunks from (a shm:// pool's
    whole mapping): while it is open, Transfer loads copy that pool's chunks straight to the GPU, with no
    staging copy. Each region is registered once per process, however many holders; the last one to close
    unregisters it. Close it before the store. ``regions``: how many regions it holds (0 when no tier
    offers any). Raises KvtierError NOT_SUPPORTED without CUDA or a device."""

    _what = "host memory pins"

    def __init__(self, store: Store, device: int = 0) -> None:
        lib = _gpu_lib()
        handle = c_void_p()
        regions = c_size_t(0)
        with store._use() as store_handle:
            check(lib.kvtier_store_pin_host_memory(store_handle, device, ctypes.byref(handle),
                                                   ctypes.byref(regions)))
        self.regions = regions.value
        self._set_handle(handle.value)

    def _free(self, handle: Any) -> None:
        _gpu_lib().kvtier_host_pins_free(handle)
