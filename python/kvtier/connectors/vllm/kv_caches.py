"""vLLM's per-layer KV cache tensors -> the host paged cache of kvtier.connectors.vllm.host_paged.

Served (CPU tensors):
- NHD (each block's K and V is one contiguous run of block_size x kv_heads x head_dim values), chunks in
  the classic order: FlashAttention ``[2, num_blocks, block_size, kv_heads, head_dim]`` (layout
  ``flash_attn``), FlashInfer ``[num_blocks, 2, block_size, kv_heads, head_dim]`` (``flashinfer``), and
  a (K, V) pair of ``[num_blocks, block_size, kv_heads, head_dim]``;
- HND (each head's rows of a block are one contiguous run of block_size x head_dim values), chunks in
  the grouped head-major order (docs/models.md), so a region is one head's rows of one block (layouts
  ``cpu_attn`` and ``hnd``, ``HEAD_MAJOR``): vLLM's CPU backend ``[2, num_blocks, kv_heads, block_size,
  head_dim]`` (revisions before 0.32), and FlashAttention's ``[2, num_blocks, block_size, kv_heads,
  head_dim]`` or FlashInfer's ``[num_blocks, 2, block_size, kv_heads, head_dim]`` with vLLM's HND stride
  order (``get_kv_cache_stride_order`` (0, 1, 3, 2, 4): heads before tokens in memory; on CUDA);
- vLLM 0.32's CPU backend (layout ``cpu_attn`` only): ``KVCacheLayout.LBHNC``, one view per layer of
  logical shape ``[num_blocks, kv_heads, block_size, 2 x head_dim]``. The backend does not read the last
  dimension as each token's K then V: ``CPUAttentionBackendImpl`` views a (block, head) run as
  ``[2 x block_size, head_dim]`` and splits it in halves, so the run is the block's K of that head, then
  its V -- the two regions of the head-major chunk. Inside a half the kernel packs by its ISA (K
  transposed under ``vec``; docs/connectors.md): copied whole, a half reloads as written. The same logical
  shape on CUDA (FlashAttention splits C into K and V per token) is another memory order, not served.
- for an MLA model (``spec.attention == "mla"``) the MLA backends' one tensor per layer
  ``[num_blocks, block_size, latent_dim]`` (each block one contiguous run of block_size x latent_dim
  values; blocks may be padded apart).
The layout decides the namespace's chunk order before any tensor is seen, so ``auto`` only reads the
NHD shapes and refuses a tensor that would read as both (kv_heads == block_size) or as vLLM's CPU
backend's. Everything else is refused with ValueError: a latent cache for a model that is not MLA and
the other way round, other stride orders, a dtype other than the configuration's (CUDA caches:
``gpu_paged``).
``spec`` is a ``kvtier.connectors.vllm.spec.ModelSpec``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ...store import _dtype
from .host_paged import PagedCache

if TYPE_CHECKING:
    from .spec import ModelSpec

_LAYER_INDEX = re.compile(r"(\d+)")
# kv_cache_layout values whose chunks are in the grouped head-major order: vLLM's CPU backend's cache
# (cpu_attn) and the HND caches of its CUDA backends (hnd); both read every HND form (_hnd_regions).
HEAD_MAJOR = ("cpu_attn", "hnd")
# HND forms of a 5-dimensional cache: (name, K/V dim, block dim, head dim, token dim)
_HND_FORMS = (("cpu_attn [2, num_blocks, kv_heads, block_size, head_dim]", 0, 1, 2, 3),
              ("FlashAttention HND [2, num_blocks, block_size, kv_heads, head_dim]", 0, 1, 3, 2),
              ("FlashInfer HND [num_blocks, 2, block_size, kv_heads, head_dim]", 1, 0, 3, 2))


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


def _layer_regions(t: Any, spec: ModelSpec, layout: str, what: str) -> tuple[int, int, int, int, int]:
    """(K address, V address, block stride in bytes, num_blocks, head stride in bytes or 0 for NHD) of
    one layer's cache."""
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
        return k.data_ptr(), v.data_ptr(), k.stride(0) * k.element_size(), k.shape[0], 0
    _check_tensor(t, spec, what)
    shape = tuple(t.shape)
    if t.dim() == 3:
        raise ValueError(f"KvtierConnector: {what}: shape {shape} is an MLA latent cache, but the "
                         "configuration is not MLA (model_config.use_mla is false)")
    if t.dim() == 4:
        return _lbhnc_regions(t, spec, layout, what)
    if t.dim() != 5:
        raise ValueError(f"KvtierConnector: {what}: unknown KV cache shape {shape} (supported: "
                         "[2, num_blocks, block_size, kv_heads, head_dim], "
                         "[num_blocks, 2, block_size, kv_heads, head_dim], "
                         "[2, num_blocks, kv_heads, block_size, head_dim] (cpu_attn), "
                         "[num_blocks, kv_heads, block_size, 2 x head_dim] (cpu_attn, vLLM 0.32's CPU backend), "
                         "or a (K, V) pair)")
    es, base = t.element_size(), t.data_ptr()
    if layout in HEAD_MAJOR:
        return _hnd_regions(t, spec, what)
    if layout == "auto":
        layout = _nhd_layout_of(shape, spec, what)
    kv_dim, block_dim = (0, 1) if layout == "flash_attn" else (1, 0)
    if shape[kv_dim] != 2:
        raise ValueError(f"KvtierConnector: {what}: shape {shape} does not fit layout {layout}")
    _nhd_region(t, spec, what)
    return base, base + t.stride(kv_dim) * es, t.stride(block_dim) * es, shape[block_dim], 0


def _nhd_layout_of(shape: tuple, spec: ModelSpec, what: str) -> str:
    """The NHD layout a 5-dimensional shape has under ``auto``; ValueError where it could be another."""
    if spec.kv_heads == spec.block_size:
        raise ValueError(f"KvtierConnector: {what}: kv_heads == block_size ({spec.block_size}): an NHD "
                         "block and vLLM's CPU backend's HND block have the same shape; set "
                         "kv_cache_layout to 'flash_attn', 'flashinfer' or 'cpu_attn'")
    if shape[0] == 2 and shape[2:] == (spec.kv_heads, spec.block_size, spec.head_dim):
        raise ValueError(f"KvtierConnector: {what}: shape {shape} is vLLM's CPU backend's HND cache "
                         "[2, num_blocks, kv_heads, block_size, head_dim]; its chunks are in another order, "
                         "chosen with the namespace: set kv_cache_layout to 'cpu_attn' (the vLLM adapter "
                         "does on a CPU device)")
    if shape[0] == 2 and shape[1] != 2:
        return "flash_attn"
    if shape[1] == 2 and shape[0] != 2:
        return "flashinfer"
    raise ValueError(f"KvtierConnector: {what}: shape {shape} is ambiguous; set "
                     "kv_cache_layout to 'flash_attn' or 'flashinfer'")


def _lbhnc_regions(t: Any, spec: ModelSpec, layout: str, what: str) -> tuple[int, int, int, int, int]:
    """``_layer_regions`` of vLLM 0.32's CPU backend cache, ``[num_blocks, kv_heads, block_size, 2 x
    head_dim]`` (KVCacheLayout.LBHNC; see the module docstring): per (block, head) one run of the block's
    K, then its V, block_size x head_dim values each. ValueError for any other 4-dimensional cache or
    layout."""
    shape, strides, es = tuple(t.shape), tuple(t.stride()), t.element_size()
    want = (spec.kv_heads, spec.block_size, 2 * spec.head_dim)
    if layout != "cpu_attn":
        raise ValueError(f"KvtierConnector: {what}: a 4-dimensional KV cache {shape} (vLLM 0.32's [num_blocks, "
                         f"kv_heads, block_size, K+V content]) is served for vLLM's CPU backend only "
                         f"(kv_cache_layout 'cpu_attn', which the vLLM adapter sets on a CPU device), not "
                         f"{layout!r}: on CUDA the content dimension holds each token's K then V, another order")
    run = spec.block_size * spec.head_dim  # one head's K (or V) rows of a block, in elements
    if shape[1:] != want or strides[2:] != (2 * spec.head_dim, 1) or strides[1] < 2 * run:
        raise ValueError(f"KvtierConnector: {what}: shape {shape} strides {strides} is not vLLM's CPU backend "
                         f"cache [num_blocks, kv_heads, block_size, 2 x head_dim] = [*, {', '.join(map(str, want))}] "
                         "with each (block, head) one contiguous run")
    base = t.data_ptr()
    return base, base + run * es, strides[0] * es, shape[0], strides[1] * es


def _hnd_regions(t: Any, spec: ModelSpec, what: str) -> tuple[int, int, int, int, int]:
    """``_layer_regions`` of an HND cache: the one form of ``_HND_FORMS`` whose shape and strides ``t``
    has (each head's rows of a block one contiguous run); ValueError otherwise."""
    shape, strides, es = tuple(t.shape), tuple(t.stride()), t.element_size()
    for _, kv, block, head, token in _HND_FORMS:
        fits = (shape[kv], shape[head], shape[token], shape[4]) == (2, spec.kv_heads, spec.block_size, spec.head_dim)
        if fits and (strides[token], strides[4]) == (spec.head_dim, 1):
            base = t.data_ptr()
            return base, base + strides[kv] * es, strides[block] * es, shape[block], strides[head] * es
    forms = "; ".join(f[0] for f in _HND_FORMS)
    raise ValueError(f"KvtierConnector: {what}: shape {shape} strides {strides} is not an HND cache whose head's "
                     f"rows of a block are one contiguous run (kv_heads {spec.kv_heads}, block_size "
                     f"{spec.block_size}, head_dim {spec.head_dim}; served: {forms}, HND strides)")


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
    keep = dict(keepalive=dict(kv_caches), layer_names=tuple(names))
    row = spec.kv_heads * spec.head_dim * _dtype(spec.dtype)[1]  # bytes of one token's K, V or latent row
    if spec.attention == "mla":  # (address, stride, num_blocks): one part per layer
        latents = [_latent_region(kv_caches[n], spec, f"layer {n!r}") for n in names]
        return PagedCache.layer_major([(a,) for a, _, _ in latents], [s for _, s, _ in latents],
                                      _one(latents, 2, "num_blocks"), spec.block_size, row, **keep)
    regions = [_layer_regions(kv_caches[n], spec, layout, f"layer {n!r}") for n in names]
    num_blocks = _one(regions, 3, "num_blocks")
    if layout in HEAD_MAJOR:
        return PagedCache.head_major([r[0] for r in regions], [r[1] for r in regions], [r[2] for r in regions],
                                     _one(regions, 4, "head stride"), spec.kv_heads, num_blocks,
                                     spec.block_size, row // spec.kv_heads, **keep)
    return PagedCache.layer_major([(r[0], r[1]) for r in regions], [r[2] for r in regions], num_blocks,
                                  spec.block_size, row, **keep)


def _one(regions: list, field: int, what: str) -> int:
    """The value of ``field`` every layer's regions share; ValueError when layers differ."""
    values = {r[field] for r in regions}
    if len(values) != 1:
        raise ValueError(f"KvtierConnector: layers differ in {what}: {sorted(values)}")
    return values.pop()
