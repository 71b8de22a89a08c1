"""vLLM's per-layer KV cache tensors -> the host paged cache of kvtier.connectors._host_paged.

Served (CPU tensors, NHD stride order: each block's K and V is one contiguous run of block_size x
kv_heads x head_dim values): FlashAttention ``[2, num_blocks, block_size, kv_heads, head_dim]``,
FlashInfer ``[num_blocks, 2, block_size, kv_heads, head_dim]``, and a (K, V) pair of
``[num_blocks, block_size, kv_heads, head_dim]``; for an MLA model (``spec.attention == "mla"``) the
MLA backends' one tensor per layer ``[num_blocks, block_size, latent_dim]`` (each block one
contiguous run of block_size x latent_dim values; blocks may be padded apart). Everything else is
refused with ValueError: a latent cache for a model that is not MLA and the other way round, HND
stride orders, a dtype other than the configuration's (CUDA caches: ``_gpu_paged``).
``spec`` is a ``kvtier.connectors.vllm_v1.ModelSpec``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..store import _dtype
from ._host_paged import PagedCache

if TYPE_CHECKING:
    from .vllm_v1 import ModelSpec

_LAYER_INDEX = re.compile(r"(\d+)")


def _layer_order(names: Sequence[str]) -> list:
    def key(item: tuple[int, str]) -> tuple:
        nums = _LAYER_INDEX.findall(item[1])
        return (int(nums[-1]) if nums else item[0], item[0])
    return [name for _, name in sorted(enumerate(names), key=key)]


def _nhd_region(t: Any, spec: ModelSpec, what: str) -> None:
    """ValueError unless the last three dimensions of ``t`` are one contiguous NHD block."""
    tail = tuple(t.shape[-3:])
    want = (spec.block_size, spec.kv_heads, spec.head_dim)
    if tail != want:
        raise ValueError(f"KvtierConnector: {what}: block shape {tail}, expected (block_size, "
                         f"kv_heads, head_dim) = {want}")
    if tuple(t.stride()[-3:]) != (spec.kv_heads * spec.head_dim, spec.head_dim, 1):
        raise ValueError(f"KvtierConnector: {what}: a block is not one contiguous NHD run (strides "
                         f"{tuple(t.stride())}); HND and other stride orders are not supported")


def _layer_regions(t: Any, spec: ModelSpec, layout: str, what: str) -> tuple[int, int, int, int]:
    """(K address, V address, block stride in bytes, num_blocks) of one layer's cache."""
    if isinstance(t, (tuple, list)):
        if len(t) != 2:
            raise ValueError(f"KvtierConnector: {what}: a tuple of {len(t)} tensors, not (K, V)")
        k, v = t
        for x, name in ((k, "K"), (v, "V")):
            _check_tensor(x, spec, f"{what} {name}")
            if x.dim() != 4:
                raise ValueError(f"KvtierConnector: {what} {name}: shape {tuple(x.shape)} is not "
                                 "[num_blocks, block_size, kv_heads, head_dim]")
            _nhd_region(x, spec, f"{what} {name}")
        if k.shape != v.shape or k.stride() != v.stride():
            raise ValueError(f"KvtierConnector: {what}: K and V differ in shape or strides")
        return k.data_ptr(), v.data_ptr(), k.stride(0) * k.element_size(), k.shape[0]
    _check_tensor(t, spec, what)
    shape = tuple(t.shape)
    if t.dim() == 3:
        raise ValueError(f"KvtierConnector: {what}: shape {shape} is an MLA latent cache, but the "
                         "configuration is not MLA (model_config.use_mla is false)")
    if t.dim() != 5:
        raise ValueError(f"KvtierConnector: {what}: unknown KV cache shape {shape} (supported: "
                         "[2, num_blocks, block_size, kv_heads, head_dim], "
                         "[num_blocks, 2, block_size, kv_heads, head_dim], or a (K, V) pair)")
    if layout == "auto":
        if shape[0] == 2 and shape[1] != 2:
            layout = "flash_attn"
        elif shape[1] == 2 and shape[0] != 2:
            layout = "flashinfer"
        else:
            raise ValueError(f"KvtierConnector: {what}: shape {shape} is ambiguous; set "
                             "kv_cache_layout to 'flash_attn' or 'flashinfer'")
    kv_dim, block_dim = (0, 1) if layout == "flash_attn" else (1, 0)
    if shape[kv_dim] != 2:
        raise ValueError(f"KvtierConnector: {what}: shape {shape} does not fit layout {layout}")
    _nhd_region(t, spec, what)
    es = t.element_size()
    base = t.data_ptr()
    return (base, base + t.stride(kv_dim) * es, t.stride(block_dim) * es, shape[block_dim])


_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32",
                 "fp8": ("torch.float8_e4m3fn", "torch.float8_e5m2", "torch.uint8")}


def _check_tensor(t: Any, spec: ModelSpec, what: str) -> None:
    device = getattr(getattr(t, "device", None), "type", None)
    if device != "cpu":
        raise ValueError(f"KvtierConnector: {what}: a {device} tensor among CPU ones; the host path "
                         "serves CPU tensors (CUDA caches, every layer on the GPU, go through kvtier.gpu)")
    want = _TORCH_DTYPES[spec.dtype]
    if str(t.dtype) not in ((want,) if isinstance(want, str) else want):
        raise ValueError(f"KvtierConnector: {what}: dtype {t.dtype}, the configuration says {spec.kv_dtype}")


def _latent_region(t: Any, spec: ModelSpec, what: str) -> tuple[int, int, int]:
    """(address, block stride in bytes, num_blocks) of one MLA layer's cache
    ``[num_blocks, block_size, latent_dim]`` (vLLM's MLA backends, get_kv_cache_shape)."""
    if isinstance(t, (tuple, list)) or t.dim() != 3:
        shape = [tuple(x.shape) for x in t] if isinstance(t, (tuple, list)) else tuple(t.shape)
        raise ValueError(f"KvtierConnector: {what}: shape {shape} is not an MLA latent cache "
                         f"[num_blocks, block_size, latent_dim], which this MLA configuration needs")
    _check_tensor(t, spec, what)
    tail = tuple(t.shape[1:])
    if tail != (spec.block_size, spec.head_dim):
        raise ValueError(f"KvtierConnector: {what}: block shape {tail}, expected (block_size, latent_dim) "
                         f"= {(spec.block_size, spec.head_dim)}")
    if tuple(t.stride()[1:]) != (spec.head_dim, 1) or t.stride(0) < spec.block_size * spec.head_dim:
        raise ValueError(f"KvtierConnector: {what}: a block is not one contiguous run of block_size x "
                         f"latent_dim values (strides {tuple(t.stride())})")
    return t.data_ptr(), t.stride(0) * t.element_size(), int(t.shape[0])


def paged_cache_of(kv_caches: Mapping[str, Any], spec: ModelSpec, layout: str = "auto") -> PagedCache:
    """The host paged cache of vLLM's ``kv_caches`` (layer name -> tensor), layers in name order
    (the layer index in the name)."""
    names = _layer_order(list(kv_caches))
    if len(names) != spec.layers:
        raise ValueError(f"KvtierConnector: {len(names)} KV cache layers, the model has {spec.layers}")
    if spec.attention == "mla":  # (address, stride, num_blocks) -> one part per layer
        regions = [((a,), s, n) for a, s, n in
                   (_latent_region(kv_caches[n], spec, f"layer {n!r}") for n in names)]
    else:                        # (K, V, stride, num_blocks) -> two parts per layer
        regions = [((k, v), s, n) for k, v, s, n in
                   (_layer_regions(kv_caches[n], spec, layout, f"layer {n!r}") for n in names)]
    blocks = {r[2] for r in regions}
    if len(blocks) != 1:
        raise ValueError(f"KvtierConnector: layers differ in num_blocks: {sorted(blocks)}")
    row = spec.kv_heads * spec.head_dim * _dtype(spec.dtype)[1]  # bytes of one token's K, V or latent row
    return PagedCache.layer_major([r[0] for r in regions], [r[1] for r in regions], blocks.pop(),
                                  spec.block_size, row, keepalive=dict(kv_caches), layer_names=tuple(names))
