"""kvtier as a vLLM ``KVConnectorBase_V1`` connector, loaded by module path::

    --kv-transfer-config '{"kv_connector":"KvtierConnector",
                           "kv_connector_module_path":"kvtier.connectors.vllm_v1",
                           "kv_role":"kv_both","kv_load_failure_policy":"recompute",
                           "kv_connector_extra_config":{"tiers":["file:///kv?capacity=64GiB"]}}'

Written against vLLM's vllm/distributed/kv_transfer/kv_connector/v1/base.py (docs/connectors.md
names the revision). ``KvtierConnectorCore`` holds the logic under vLLM's method names and
signatures and needs no vLLM; ``KvtierConnector`` is the thin adapter: a ``KVConnectorBase_V1``
subclass when vLLM is importable, which reads the model geometry from the ``VllmConfig``.
Private modules beside it, one concept each: ``_vllm_spec`` (``ModelSpec``), ``_vllm_config`` (what
is read of vLLM's ``VllmConfig`` and ``KVCacheConfig``), ``_vllm_engine_identity`` (the weights'
identity fields), ``_vllm_request_keys`` (a request's key material beyond its tokens),
``_vllm_sched_output`` (``SchedulerOutput`` across revisions), ``_vllm_groups`` and
``_vllm_kv_caches`` (cache layouts), ``_host_paged`` / ``_gpu_*`` (the copies).

Scheduler side (one process):

- ``get_num_new_matched_tokens`` computes kvtier's chained chunk keys of the prompt's token ids
  (``Namespace.chunk_keys``: chunks of ``chunk_tokens`` tokens, a multiple of the block size), mixed
  with the request's other inputs that change its KV (LoRA adapter, images, ``cache_salt``:
  ``_vllm_request_keys``), and asks ``Store.lookup`` of every TP rank's namespace; the smallest answer
  counts. The keys depend only on the request and the namespace, never on ``PYTHONHASHSEED``, so hits
  hold across processes, hosts and restarts. At least one prompt token is always left to compute.
  Requests with prompt embeddings are not cached. The namespace's identity holds the weights' fields
  of vLLM's ModelConfig (``_vllm_engine_identity``).
- ``update_state_after_alloc`` records which chunks go to which blocks; ``build_connector_meta``
  hands the loads, the saves of newly completed prompt chunks and the preempted requests to the
  workers; ``request_finished`` answers True (hold the blocks) for a request with saves or a
  load handed to the workers, and the workers report it in ``finished_sending`` once
  kvtier stopped reading or writing its blocks.
- The connectors of one process share one Store per configuration (with TP 1 vLLM runs the
  scheduler and the worker in one process: every tier shows the scheduler the worker's saves at
  once). Across processes (TP > 1), a tier every process shares shows the scheduler what the workers
  saved while the engine runs: ``shm://`` as the first tier on one host (every rank and the
  scheduler map one pool), ``fs://`` across hosts; a ``file://`` tier's index is per process (hits
  after a restart), ``mem://`` per process.

Worker side (one per TP rank):

- ``register_kv_caches``: per layer the FlashAttention layout ``[2, num_blocks, block_size,
  kv_heads, head_dim]``, the FlashInfer layout ``[num_blocks, 2, block_size, kv_heads, head_dim]``
  (both NHD: each block's K and V is one contiguous run), a (K, V) pair of
  ``[num_blocks, block_size, kv_heads, head_dim]``, or, on the CPU, vLLM's CPU backend's HND layout
  ``[2, num_blocks, kv_heads, block_size, head_dim]`` (``kv_cache_layout: cpu_attn``, which the
  adapter sets on a CPU device: its chunks are in the grouped head-major order, another namespace),
  and FlashAttention's or FlashInfer's cache in vLLM's HND stride order (``kv_cache_layout: hnd``,
  which the adapter sets for ``KvtierHybridConnector`` on a CUDA device, where it asks vLLM for HND:
  the same head-major chunks);
  for an MLA model (``use_mla``) the MLA backends' ``[num_blocks, block_size, latent_dim]``,
  stored in the grouped layout of one ``latent`` group (chunks shared by every TP rank and
  degree: only rank 0 saves, every rank loads). The same shapes on CPU and CUDA (one description,
  ``_host_paged.PagedCache``). With vLLM's hybrid KV cache manager (``KvtierHybridConnector``
  declares ``SupportsHMA``; ``KvtierConnector`` does not and serves one group), full-attention,
  sliding-window and Mamba / linear-attention layers in KV cache groups of their own, each with its
  own block ids, in HND caches (``cpu_attn`` on the CPU backend, ``hnd`` on CUDA through kvtier.gpu's
  pieces, ``_gpu_grouped``): chunks of ``kv``, ``window`` and ``state`` groups
  (``_vllm_groups``), the null blocks before a request's window never written, window blocks vLLM
  freed before a save saved as zeros (no load of a prefix holding the chunk uses them); a Mamba
  group's state as of each chunk's end (vLLM's ``mamba_cache_mode='all'``: the block ending the chunk)
  saved with the chunk, and a prefix's last chunk's state loaded into the prefix's last block (the
  load ends before ``start_load_kv`` returns; a failed load reports every block it was to write).
  Anything else (another stride order, a cross-layer cache, window or Mamba groups on NHD caches,
  Mamba states in ``align`` or ``none`` mode: ``check_kv_cache_config``) is refused with ValueError.
- ``start_load_kv`` starts one kvtier load per request over its block table (kvtier copies verified
  chunk bytes straight into the blocks); ``wait_for_layer_load(layer)`` waits, for each synchronous
  load, only until that layer's bytes of every chunk are verified and in the blocks
  (``Handle.wait_bytes``: a classic chunk holds layer 0 K, layer 0 V, layer 1 K, ..., a head-major
  one (cpu_attn) finishes every layer only in its last head; file:// and fs://
  report each verified piece of the chunk format, mem:// each copied slice, other tiers whole
  chunks), so layer 0's attention runs while later layers are still being read. A chunk that fails
  after its first layers landed is zeroed and reported with the load errors like any other: the
  step's output for those tokens is dropped and they are recomputed. A synchronous load not done
  ``load_timeout_s`` (default 30) after it started fails (its blocks are load errors, the forward goes
  on) and stays in flight: its request's blocks are held (``request_finished`` answers True for every
  request with a load) until the read ends, and reported as load errors again then.
- ``save_kv_layer`` does nothing per layer (a chunk holds every layer); ``wait_for_save`` starts
  one background kvtier save per request and returns without waiting for storage.
- ``get_finished`` reports asynchronous loads that are done (``finished_recving``, also for a
  request aborted while loading, so its blocks are freed only after kvtier stopped writing them)
  and finished requests whose saves are done (``finished_sending``); a request is in at most one set
  per call, a finished one is reported once (vLLM forgets it at the first report).
- ``wait_for_save`` drops the saves of a request whose load failed in the step, or that holds a block
  that failed to load: those chunks were computed against KV that was not loaded.
- ``get_block_ids_with_load_errors``: the blocks of every chunk that was missing or failed
  verification (kvtier never reports such a chunk loaded), so vLLM recomputes those tokens
  (``kv_load_failure_policy: recompute``). With several KV cache groups (whose block ids vLLM's
  recovery cannot tell apart) loads are asynchronous and a failed one is reported per request in
  ``get_transfer_results``' ``failed_recving`` instead (vLLM 0.32 recomputes it from token 0);
  the adapter refuses several groups on revisions without ``failed_recving``. A failed save is counted and logged, never raised; a
  full tier drops the save softly (kvtier's ``dropped_saves``) and a later lookup misses.
- ``get_kv_connector_stats``: the counters of the interval since the last call (``KvtierConnectorStats``).
- ``handle_preemptions`` waits for the saves of preempted requests before their blocks are reused;
  ``shutdown`` waits for every operation in flight, then closes the store.

CPU tensors (vLLM's CPU backend) go through kvtier's host paged path (``_host_paged``); CUDA tensors
through kvtier.gpu (``_gpu_paged``: FlashAttention caches and (K, V) pairs by its block-table plan,
FlashInfer, MLA and HND caches by the host path's piece lists with device addresses; several KV cache
groups by ``_gpu_grouped``, one layer group, -1 blocks in device scratch): a load is read and
verified on the host before ``start_load_kv`` returns and lands on the GPU layer group by layer group
(``layer_groups``, default min(layers, 8)), ``wait_for_layer_load`` makes the engine's current stream
wait for that layer's group without blocking the host, and a save gathers the blocks on the GPU and is
in the top tier when ``wait_for_save`` returns. ``async_load`` is refused for CUDA caches.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

import kvtier

from . import STORE_OPTION_NAMES, open_store, split_urls
from ._gpu_grouped import GpuGroupedWorker
from ._gpu_paged import GpuWorker, is_cuda
from ._host_paged import PagedCache, load_async, save_async
from ._vllm_groups import (CacheGroup, GroupedCache, grouped_cache_of, layout_spec, load_grouped, save_grouped,
                           skipped_blocks, skipped_state_blocks, state_identity)
from ._vllm_config import (check_kv_cache_config, device_type, extra_of, role_name, spec_of_vllm_config, wants_hnd,
                           worker_tp_rank)
from ._vllm_kv_caches import HEAD_MAJOR, paged_cache_of
from ._vllm_request_keys import RequestKeys, chunk_keys, request_material
from ._vllm_sched_output import check_revision, resumed_ids
from ._vllm_spec import DTYPES, ROLES, ModelSpec  # noqa: F401 - DTYPES and ModelSpec are part of this module's surface

logger = logging.getLogger(__name__)

try:  # vLLM's own types when it is installed, local stand-ins otherwise
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1 as _Base, KVConnectorMetadata as _MetaBase, KVConnectorRole)
    HAVE_VLLM = True
except Exception:  # pragma: no cover - depends on the environment
    _Base = object  # type: ignore[assignment,misc]
    _MetaBase = object  # type: ignore[assignment,misc]
    KVConnectorRole = None  # type: ignore[assignment]
    HAVE_VLLM = False

try:  # vLLM's marker of connectors that take one block id list per KV cache group
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA as _HMA  # type: ignore
except Exception:  # pragma: no cover - depends on the environment

    class _HMA:  # type: ignore[no-redef]
        """Stand-in of vLLM's SupportsHMA (revisions without it, or no vLLM)."""

try:  # vLLM's per-request load failures (revisions whose scheduler recovers several KV cache groups)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults  # type: ignore
    REPORTS_FAILED_RECVING = "failed_recving" in getattr(KVConnectorTransferResults, "__dataclass_fields__", {})
except Exception:  # pragma: no cover - depends on the environment
    REPORTS_FAILED_RECVING = not HAVE_VLLM  # without vLLM: the stand-in below, as vLLM 0.32 declares it

    @dataclass
    class KVConnectorTransferResults:  # type: ignore[no-redef]
        """Stand-in of vLLM 0.32's KVConnectorTransferResults (a failed receive is also finished)."""

        finished_sending: set = field(default_factory=set)
        finished_recving: set = field(default_factory=set)
        failed_recving: set = field(default_factory=set)

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats as _StatsBase  # type: ignore
except Exception:  # pragma: no cover - depends on the environment

    @dataclass
    class _StatsBase:  # type: ignore[no-redef]
        """vLLM's KVConnectorStats fields: a serialisable dict of observations."""

        data: dict = field(default_factory=dict)


@dataclass
class KvtierConnectorStats(_StatsBase):  # type: ignore[misc,valid-type]
    """vLLM's KVConnectorStats for this connector: the counters of one interval (loads,
    loaded_chunks, load_errors, error_blocks, saves, saved_chunks, saves_failed, ...); workers'
    intervals add up."""

    data: dict = field(default_factory=dict)

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: Any) -> "KvtierConnectorStats":
        for name, value in (getattr(other, "data", None) or {}).items():
            self.data[name] = self.data.get(name, 0) + value
        return self

    def reduce(self) -> dict:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())


SCHEDULER, WORKER = ROLES
OWN_OPTIONS = ("tiers", "chunk_tokens", "async_load", "tenant", "salt", "model_id", "model_revision",
               "kv_cache_layout", "layer_groups", "layout_spec", "load_timeout_s") + STORE_OPTION_NAMES
KV_CACHE_LAYOUTS = ("auto", "flash_attn", "flashinfer", "cpu_attn", "hnd")
DEFAULT_CHUNK_TOKENS = 256
DEFAULT_LOAD_TIMEOUT_S = 30.0


@dataclass
class LoadSpec:
    req_id: str
    tokens: list           # the prompt tokens of the chunks [0, last_chunk)
    first_chunk: int       # chunks before it are held by the engine already
    blocks: list           # block ids of the chunks [first_chunk, last_chunk); -1: not written (held
                           # already, or a window group's null block); one list per KV cache group
                           # when there are several
    is_async: bool
    extras: Optional[RequestKeys] = None  # key material besides the tokens (_vllm_request_keys)


@dataclass
class SaveSpec:
    req_id: str
    tokens: list           # prompt tokens of the chunks [0, last_chunk)
    first_chunk: int
    blocks: list           # block ids of the chunks [first_chunk, last_chunk) (per group as in LoadSpec;
                           # -1: a window block vLLM freed, saved as zeros)
    extras: Optional[RequestKeys] = None
    context: list = field(default_factory=list)  # every block id of the request (all groups): a save
                                                 # is dropped when one of them failed to load this step


@dataclass
class KvtierConnectorMetadata(_MetaBase):  # type: ignore[misc,valid-type]
    """Scheduler -> workers, once per step."""

    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    preempted: set = field(default_factory=set)


@dataclass
class _ReqState:
    tokens: list
    block_ids: list        # one list of block ids per KV cache group
    saved_chunks: int      # chunks [0, saved_chunks) are in kvtier or being saved
    held: bool = False     # a save or an asynchronous load was handed to the workers
    stopped: bool = False  # a chunk's window blocks were gone before its save: no more saves
    extras: Optional[RequestKeys] = None


@dataclass
class _Op:
    req_id: str
    handle: Any
    blocks: np.ndarray     # [n_chunks, groups x blocks_per_chunk], -1 for blocks not written
    is_load: bool
    is_async: bool = False
    landed: float = 0      # a synchronous load: bytes of every chunk known to be in place (inf: ended)
    keys: list = field(default_factory=list)  # a load's keys: the first one not loaded is removed
    deadline: float = math.inf  # a synchronous load: given up at this time.monotonic()
    given_up: bool = False  # a synchronous load past its deadline: failed, its request busy until it ends


def chunk_tokens_of(extra: Mapping[str, Any], block_size: int) -> int:
    """The chunk size in tokens: ``chunk_tokens`` of the configuration (a multiple of the block
    size), else the multiple of the block size nearest below 256 (at least one block)."""
    value = extra.get("chunk_tokens")
    if value is None:
        return block_size * max(1, DEFAULT_CHUNK_TOKENS // block_size)
    try:
        value = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"KvtierConnector: chunk_tokens {value!r} is not an integer") from None
    if value <= 0 or value % block_size:
        raise ValueError(f"KvtierConnector: chunk_tokens {value} is not a positive multiple of the "
                         f"block size {block_size}")
    return value


def load_timeout_of(extra: Mapping[str, Any]) -> float:
    """``load_timeout_s``: seconds the forward waits for a synchronous load before the load fails
    (default 30; ``inf``: no deadline); ValueError unless a positive number."""
    value = extra.get("load_timeout_s", DEFAULT_LOAD_TIMEOUT_S)
    try:
        if isinstance(value, bool):
            raise TypeError
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"KvtierConnector: load_timeout_s {value!r} is not a number of seconds") from None
    if not seconds > 0:  # NaN too
        raise ValueError(f"KvtierConnector: load_timeout_s {value!r} is not a positive number of seconds")
    return seconds


def check_options(extra: Mapping[str, Any]) -> None:
    unknown = sorted(set(extra) - set(OWN_OPTIONS))
    if unknown:
        raise ValueError(f"KvtierConnector: unknown kv_connector_extra_config key(s) {unknown} "
                         f"(known: {', '.join(OWN_OPTIONS)})")
    if "tiers" not in extra:
        raise ValueError("KvtierConnector: kv_connector_extra_config needs 'tiers' (kvtier tier URLs)")
    layout = extra.get("kv_cache_layout", "auto")
    if layout not in KV_CACHE_LAYOUTS:
        raise ValueError(f"KvtierConnector: kv_cache_layout {layout!r} is not one of {KV_CACHE_LAYOUTS}")


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


class KvtierConnectorCore:
    """The connector without vLLM (see the module docstring). ``role`` is "scheduler" or "worker";
    ``tp_rank`` is the worker's rank (the scheduler looks up every rank's namespace)."""

    def __init__(self, role: str, spec: ModelSpec, extra: Mapping[str, Any], tp_rank: int = 0,
                 store: Optional[kvtier.Store] = None, groups: Optional[Sequence[CacheGroup]] = None) -> None:
        if role not in (SCHEDULER, WORKER):
            raise ValueError(f"KvtierConnector: role {role!r} is neither {SCHEDULER!r} nor {WORKER!r}")
        extra = dict(extra or {})
        check_options(extra)
        if spec.tp_size < 1 or not 0 <= tp_rank < spec.tp_size:
            raise ValueError(f"KvtierConnector: TP rank {tp_rank} of size {spec.tp_size}")
        self._core_role, self._spec, self._extra, self._tp_rank = role, spec, extra, tp_rank
        # vLLM's KV cache groups when there are several, a sliding window or Mamba states (None: one
        # full-attention group)
        self._groups = list(groups) if groups and (len(groups) > 1 or groups[0].window or groups[0].state) else None
        self._windows = [g.window for g in self._groups] if self._groups else [0]
        self._states = [g.state is not None for g in self._groups] if self._groups else [False]
        self._has_state = any(self._states)
        self._chunk_tokens = chunk_tokens_of(extra, spec.block_size)
        with _configuration_errors():
            self._layout = layout_of(spec, self._chunk_tokens, extra, self._groups)
        # An MLA latent is the same on every rank: one namespace for all of them, and only rank 0 saves.
        ranks = range(spec.tp_size) if role == SCHEDULER and spec.attention != "mla" else [tp_rank]
        self._saves = spec.attention != "mla" or tp_rank == 0
        tenant = str(extra.get("tenant", ""))
        state = state_identity(self._groups) if self._groups else None
        with _configuration_errors():
            self._namespaces = [identity_of(spec, extra, r, state).namespace(self._layout, tenant) for r in ranks]
        self._store_key = None
        if store is None:
            with _configuration_errors():
                store, self._store_key = _acquire_store(extra)
        self._store = store
        # Several KV cache groups: vLLM recovers a failed load only as a failed asynchronous one
        # (get_transfer_results' failed_recving), never by block ids (unique within a group only)
        self._several_groups = bool(self._groups) and len(self._groups) > 1
        self._async_load = bool(extra.get("async_load", False)) or self._several_groups
        self._load_timeout = load_timeout_of(extra)
        self._lock = threading.Lock()
        self._closed = False
        self._meta: Optional[KvtierConnectorMetadata] = None
        # scheduler state
        self._reqs: dict[str, _ReqState] = {}
        self._hits: dict[str, int] = {}          # req id -> chunks found by the last lookup
        self._load_failed: set[str] = set()      # requests whose load failed (failed_recving): no more hits
        self._pending_loads: list[LoadSpec] = []
        # worker state
        self._cache: Optional[PagedCache | GroupedCache] = None
        self._gpu: Optional[GpuWorker] = None
        self._layer_index: dict[str, int] = {}
        self._ops: list[_Op] = []
        self._sync_loads: list[_Op] = []
        self._load_errors: set[int] = set()
        self._held: set[str] = set()             # requests with saves or async loads, not yet reported
        self._finished_seen: set[str] = set()
        self._late_recving: set[str] = set()     # async loads ended while another op of theirs ran
        self._failed_loads: set[str] = set()     # requests with a load error in this step
        self._recv_failed: set[str] = set()      # several groups: async loads that failed, not yet reported
        self._step_errors: set[int] = set()      # blocks that failed to load in this step
        self._stats = {"lookups": 0, "hit_tokens": 0, "loads": 0, "loaded_chunks": 0, "load_errors": 0,
                       "error_blocks": 0, "saves": 0, "saved_chunks": 0, "saves_failed": 0,
                       "window_saves_skipped": 0, "state_saves_skipped": 0, "load_timeouts": 0,
                       "late_load_ends": 0}
        self._reported: dict[str, int] = {}

    # ---- properties ----------------------------------------------------------------------------

    @property
    def chunk_tokens(self) -> int:
        return self._chunk_tokens

    @property
    def namespace(self) -> kvtier.Namespace:
        """This worker's namespace (the scheduler's: rank 0's)."""
        return self._namespaces[0]

    @property
    def store(self) -> kvtier.Store:
        return self._store

    # ---- metadata (the base class's methods when vLLM is there) --------------------------------

    def bind_connector_metadata(self, connector_metadata: KvtierConnectorMetadata) -> None:
        """Binds the step's metadata; first waits for the operations of requests preempted in this
        step (as ``handle_preemptions`` does; revisions that do not call it still never have a preempted
        request's freed blocks rewritten while kvtier reads them: this runs before the forward)."""
        if self._core_role == WORKER:
            self._end_preempted(connector_metadata)
            self._failed_loads, self._step_errors = set(), set()  # a new step
        self._meta = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._meta = None

    def _metadata(self) -> KvtierConnectorMetadata:
        if self._meta is None:
            raise RuntimeError("KvtierConnector: no connector metadata bound for this step")
        return self._meta

    # ---- scheduler side ------------------------------------------------------------------------

    def _usable_chunks(self, tokens: Sequence[int]) -> int:
        # at least one prompt token is left for the engine to compute
        return max(0, (len(tokens) - 1) // self._chunk_tokens)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        try:
            tokens, extras = request_material(request)
        except Exception as e:  # a request kvtier cannot key is computed, never an error in vLLM's scheduler
            logger.warning("KvtierConnector: request %s not cached: %s", getattr(request, "request_id", "?"), e)
            tokens = None
        if tokens is None:  # prompt embeddings: not cached (_vllm_request_keys)
            self._hits.pop(request.request_id, None)
            return 0, False
        usable = self._usable_chunks(tokens)
        hit = 0
        # A request vLLM restarts after its load failed (failed_recving) is computed: this process's
        # tiers may still list the chunk the worker could not use (a file:// index is per process), and
        # another hit would fail the same way, again and again.
        if usable and not self._closed and request.request_id not in self._load_failed:
            prefix = tokens[:usable * self._chunk_tokens]
            try:
                hit = min(self._store.lookup(ns, chunk_keys(ns.chunk_keys(prefix), extras, self._chunk_tokens))
                          for ns in self._namespaces)
            except kvtier.KvtierError as e:  # a tier that cannot answer is a miss, never an error
                logger.warning("KvtierConnector: lookup failed (%s); treated as a miss", e)
                hit = 0
        self._hits[request.request_id] = hit
        self._stats["lookups"] += 1
        new = hit * self._chunk_tokens - num_computed_tokens
        if new <= 0:
            return 0, False
        return new, self._async_load

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        rid = request.request_id
        state = self._reqs.get(rid)
        tokens, extras = None, None
        if state is None:
            try:
                tokens, extras = request_material(request)
            except Exception:  # logged by the lookup: computed, never cached
                tokens = None
            if tokens is None:  # prompt embeddings: not cached
                self._hits.pop(rid, None)
                return
        block_ids = self._group_lists(blocks.get_block_ids() if blocks is not None else None)
        hit = self._hits.pop(rid, 0)
        if state is None:
            state = self._reqs[rid] = _ReqState(list(tokens or ()), block_ids, hit, extras=extras)
        elif any(block_ids):
            state.block_ids = block_ids
        state.saved_chunks = max(state.saved_chunks, hit)  # chunks found are in kvtier already
        if num_external_tokens <= 0:
            return
        end_tokens = hit * self._chunk_tokens
        local = end_tokens - num_external_tokens        # tokens the engine holds already
        first = local // self._chunk_tokens
        bs = self._spec.block_size
        tables = []
        for ids, window, has_state in zip(block_ids, self._windows, self._states):
            gone = skipped_blocks(window, end_tokens, bs)  # a window group's null blocks: never written
            if has_state:  # only the prefix's last block takes a state: the state as of the prefix's end
                gone = end_tokens // bs - 1
            tables.append([-1 if b < local // bs or b < gone else int(ids[b])
                           for b in range(first * self._chunk_tokens // bs, end_tokens // bs)])
        self._stats["hit_tokens"] += num_external_tokens
        self._pending_loads.append(LoadSpec(rid, list(state.tokens[:end_tokens]), first, self._per_group(tables),
                                            self._async_load, state.extras))

    def _group_lists(self, block_ids: Any) -> list:
        """vLLM's block ids (a tuple of one list per KV cache group, or one plain list) as one list
        per group; ValueError when the number of groups is not the configuration's."""
        if block_ids is None:
            return [[] for _ in self._windows]
        if not isinstance(block_ids, tuple):
            block_ids = (block_ids,)
        if len(block_ids) != len(self._windows):
            raise ValueError(f"KvtierConnector: {len(block_ids)} KV cache groups; the connector was "
                             f"configured with {len(self._windows)}")
        return [list(ids) for ids in block_ids]

    def _per_group(self, tables: list) -> list:
        """The block tables of a load or save as metadata: one flat list with one KV cache group (the
        single-group form), else one list per group."""
        return tables if self._groups else tables[0]

    def _kv_lost(self, chunk: int, computed_tokens: int) -> Optional[str]:
        """Which counter to raise when vLLM, with ``computed_tokens`` computed, freed (or never held) a
        block of ``chunk`` that a prefix load ending at or after that chunk needs, else None.
        Window groups: the blocks a save finds freed are saved as zeros: a chunk's blocks freed before
        the step that completes it hold only tokens before the window of the shortest prefix ending with
        it (the window moved on from a point inside the chunk), which every load of a prefix holding the
        chunk leaves to vLLM's null block. A chunk saved later (vLLM's own prefix cache held it) may have
        lost more: not saved. Mamba groups: the block that ends the chunk holds its state; vLLM keeps
        only the block of the last computed token's state, so a chunk saved after vLLM moved past that
        block has no state to save."""
        bs, end = self._spec.block_size, (chunk + 1) * self._chunk_tokens
        if any(skipped_blocks(w, computed_tokens, bs) > max(chunk * self._chunk_tokens // bs,
                                                            skipped_blocks(w, end, bs))
               for w in self._windows):
            return "window_saves_skipped"
        if self._has_state and end // bs - 1 < skipped_state_blocks(computed_tokens, bs):
            return "state_saves_skipped"
        return None

    def build_connector_meta(self, scheduler_output: Any) -> KvtierConnectorMetadata:
        meta = KvtierConnectorMetadata(loads=self._pending_loads,
                                       preempted=set(getattr(scheduler_output, "preempted_req_ids", None) or ()))
        self._pending_loads = []
        for spec in meta.loads:  # held at its end until the workers' reads of it ended (finished_sending):
            if spec.req_id in self._reqs:  # a synchronous load given up at its deadline may still write
                self._reqs[spec.req_id].held = True
        computed: dict[str, int] = {}
        for new in scheduler_output.scheduled_new_reqs:
            state = self._reqs.get(new.req_id)
            if state is not None:
                state.block_ids = self._group_lists(new.block_ids)
                computed[new.req_id] = new.num_computed_tokens
        cached = scheduler_output.scheduled_cached_reqs
        resumed = resumed_ids(cached)
        for i, rid in enumerate(cached.req_ids):
            state = self._reqs.get(rid)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                ids = self._group_lists(new_ids)
                state.block_ids = ids if rid in resumed else [a + b for a, b in zip(state.block_ids, ids)]
            computed[rid] = cached.num_computed_tokens[i]
        for rid, done_before in computed.items():
            state = self._reqs[rid]
            done = done_before + scheduler_output.num_scheduled_tokens.get(rid, 0)
            full = min(done, len(state.tokens)) // self._chunk_tokens
            if full <= state.saved_chunks or state.stopped:
                continue
            first = state.saved_chunks
            lost = self._kv_lost(first, done_before)
            if lost:  # nothing after the chunk is reachable either
                state.stopped = True
                self._stats[lost] += 1
                continue
            bs = self._spec.block_size
            lo, hi = (c * self._chunk_tokens // bs for c in (first, full))
            tables = [[-1 if b < skipped_blocks(w, done_before, bs) else int(ids[b]) for b in range(lo, hi)]
                      for ids, w in zip(state.block_ids, self._windows)]  # -1: freed window blocks, zeros
            # (a Mamba group's table: its chunks' last blocks hold the states, which _kv_lost found held)
            meta.saves.append(SaveSpec(rid, state.tokens[:full * self._chunk_tokens], first,
                                       self._per_group(tables), state.extras,
                                       [int(b) for ids in state.block_ids for b in ids]))
            state.saved_chunks, state.held = full, True
        return meta

    def update_connector_output(self, connector_output: Any) -> None:
        """Blocks that failed to load are recomputed by the engine: their chunks are saved again (a
        request whose asynchronous load failed, ``failed_recving``: all of them, from token 0)."""
        for rid in getattr(connector_output, "failed_recving", None) or ():
            if rid in self._reqs:
                self._reqs[rid].saved_chunks = 0
                self._load_failed.add(rid)
        invalid = set(getattr(connector_output, "invalid_block_ids", None) or ())
        if not invalid:
            return
        per_chunk = self._chunk_tokens // self._spec.block_size
        for state in self._reqs.values():
            bad = [i for ids in state.block_ids for i, b in enumerate(ids) if b in invalid]
            if bad:
                state.saved_chunks = min(state.saved_chunks, min(bad) // per_chunk)

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> tuple[bool, Optional[dict]]:
        rid = request.request_id
        self._hits.pop(rid, None)
        self._load_failed.discard(rid)
        self._pending_loads = [s for s in self._pending_loads if s.req_id != rid]
        state = self._reqs.pop(rid, None)
        return (state is not None and state.held), None

    def request_finished_all_groups(self, request: Any, block_ids: tuple) -> tuple[bool, Optional[dict]]:
        """vLLM's SupportsHMA call at a request's end (one block id list per KV cache group):
        request_finished's answer, for every group's blocks."""
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---- worker side ---------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        layout = self._extra.get("kv_cache_layout", "auto")
        if self._groups:  # several KV cache groups: an HND cache (layout_of checked the layout)
            if kv_caches and is_cuda(next(iter(kv_caches.values()))):
                self._gpu = GpuGroupedWorker(kv_caches, self._spec, self._groups, self._chunk_tokens,
                                             self.namespace, self._store)
                self._layer_index = {name: i for i, name in enumerate(self._gpu.names)}
                return
            self._host_cache(grouped_cache_of(kv_caches, self._spec, self._groups, self._chunk_tokens, layout))
            return
        if kv_caches and is_cuda(next(iter(kv_caches.values()))):
            if self._async_load:
                raise ValueError("KvtierConnector: async_load is not supported for CUDA KV caches "
                                 "(kvtier.gpu reads and verifies a load before start_load_kv returns)")
            groups = int(self._extra.get("layer_groups", min(self._spec.layers, 8)))
            self._gpu = GpuWorker(kv_caches, self._spec, layout, groups, self.namespace, self._store)
            self._layer_index = {name: i for i, name in enumerate(self._gpu.names)}
            return
        self._host_cache(paged_cache_of(kv_caches, self._spec, layout))

    def _host_cache(self, cache: Any) -> None:
        """Registers a cache in host memory: its layers' indices and, per layer, the bytes of a chunk that
        must have landed before the layer is usable (wait_for_layer_load)."""
        self._cache = cache
        self._layer_index = {name: i for i, name in enumerate(cache.layer_names)}
        self._layer_end = [cache.layer_end(i, self._chunk_tokens) for i in range(len(self._layer_index))]

    def _keys(self, spec: Any) -> list:
        """The keys of a load's or save's chunks [first_chunk, end): tokens and extra key material."""
        tail = self.namespace.chunk_keys(spec.tokens)[spec.first_chunk:]
        return chunk_keys(tail, getattr(spec, "extras", None), self._chunk_tokens, spec.first_chunk)

    def _chunk_blocks(self, blocks: Sequence[int], n_chunks: int) -> np.ndarray:
        per = self._chunk_tokens // self._spec.block_size
        arr = np.asarray(blocks, dtype=np.int64)
        if arr.size != n_chunks * per:
            raise ValueError(f"KvtierConnector: {arr.size} blocks for {n_chunks} chunks of {per} blocks")
        return arr.reshape(n_chunks, per)

    def _tables(self, blocks: Sequence[Any], n_chunks: int) -> np.ndarray:
        """The block tables of a load or save, [groups, n_chunks, blocks_per_chunk]."""
        per_group = blocks if self._groups else [blocks]
        return np.stack([self._chunk_blocks(b, n_chunks) for b in per_group])

    def _start_io(self, is_load: bool, keys: list, tables: np.ndarray) -> Any:
        """Starts a host-path load or save of ``keys`` over the block tables; its Handle."""
        self._require_cache()
        if isinstance(self._cache, GroupedCache):
            return (load_grouped if is_load else save_grouped)(self._store, self.namespace, keys,
                                                               self._cache, tables)
        return (load_async if is_load else save_async)(self._store, self.namespace, keys, self._cache,
                                                       tables[0])

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._metadata()
        for spec in meta.loads:
            keys = self._keys(spec)
            tables = self._tables(spec.blocks, len(keys))
            if self._gpu is not None and not spec.is_async:
                self._held.add(spec.req_id)  # the scheduler holds every loading request (reported at its end)
                self._load_gpu(spec.req_id, keys, tables if self._groups else tables[0])
                continue
            op = _Op(spec.req_id, None, tables.transpose(1, 0, 2).reshape(len(keys), -1), True, spec.is_async,
                     keys=keys)
            if self._gpu is not None:  # several groups on CUDA: read before this returns, reported as async
                op.handle = self._ended_gpu_load(spec.req_id, keys, tables)
                self._stats["loads"] += 1
                self._held.add(spec.req_id)
                with self._lock:
                    self._ops.append(op)
                continue
            try:
                op.handle = self._start_io(True, keys, tables)
            except (kvtier.KvtierError, ValueError, RuntimeError) as e:
                logger.warning("KvtierConnector: load of %s not started (%s); its tokens are recomputed",
                               spec.req_id, e)
            self._stats["loads"] += 1
            self._held.add(spec.req_id)  # the scheduler holds every loading request's blocks at its end
            if not spec.is_async:
                op.deadline = time.monotonic() + self._load_timeout
            with self._lock:
                self._ops.append(op)
            if self._has_state and not spec.is_async:  # a Mamba layer may read its state before any
                self._end_sync_load(op)  # attention layer waits: the load ends before the forward starts
            elif not spec.is_async:
                self._sync_loads.append(op)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Returns once ``layer_name``'s bytes of every synchronous load have landed (or the load
        ended); a name that is not a registered layer waits for the whole loads and accounts for them.
        Whether a chunk finally loaded is decided when the load ends (wait_for_save)."""
        index = self._layer_index.get(layer_name)
        if self._gpu is not None:
            if index is not None:
                self._gpu.wait_layer(index)  # the engine's stream waits; the host does not
            return
        if index is None or self._cache is None:
            self._end_sync_loads()
            return
        need = self._layer_end[index]
        for op in list(self._sync_loads):
            # A layer whose bytes an earlier wait already saw in place (with head-major chunks, every
            # layer after the first) costs no call: vLLM waits once per layer per step.
            if op.handle is None or op.landed >= need:
                continue
            try:
                ready = op.handle.wait_bytes(need, timeout=max(0.0, op.deadline - time.monotonic()))
            except kvtier.KvtierError as e:  # accounted for when the load is finished
                if e.status == kvtier.Status.BUSY and not op.handle.done():  # its deadline passed
                    self._sync_loads.remove(op)
                    self._give_up(op)
                    continue
                logger.warning("KvtierConnector: waiting for layer %s of %s failed: %s", layer_name,
                               op.req_id, e)
                ready = -1
            # Every chunk has `need` bytes in place, or the load ended (nothing more to wait for).
            op.landed = need if ready == len(op.blocks) else float("inf")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None  # a chunk holds every layer: saved whole in wait_for_save

    def wait_for_save(self) -> None:
        self.wait_for_layer_load("")  # a step whose layers never waited still finishes its loads
        meta = self._metadata()
        if self._gpu is not None:
            self._gpu.end_step()
        for spec in meta.saves:
            self._held.add(spec.req_id)
            keys = self._keys(spec)
            if not keys or not self._saves:  # MLA ranks other than 0: rank 0 saves the same latents
                continue
            if self._computed_on_failed_load(spec):
                continue
            tables = self._tables(spec.blocks, len(keys))
            if self._gpu is not None:
                self._save_gpu(spec.req_id, keys, tables if self._groups else tables[0])
                continue
            op = _Op(spec.req_id, None, tables.transpose(1, 0, 2).reshape(len(keys), -1), False)
            try:
                op.handle = self._start_io(False, keys, tables)
            except (kvtier.KvtierError, ValueError, RuntimeError) as e:
                self._stats["saves_failed"] += 1
                logger.warning("KvtierConnector: save of %s not started (%s)", spec.req_id, e)
                continue
            self._stats["saves"] += 1
            with self._lock:
                self._ops.append(op)
            if self._groups:  # vLLM frees window blocks as the window moves on, mid-request: the
                self._finish(op)  # save has read them before the next step may write them again

    def _computed_on_failed_load(self, spec: SaveSpec) -> bool:
        """Whether a save's chunks may have been computed against KV a load of this step failed to
        write (its own load, or a block it shares with a request whose load failed): such a save is
        dropped. vLLM recomputes those tokens, and the scheduler saves them again
        (update_connector_output)."""
        if spec.req_id in self._failed_loads:
            return True
        errors = self._step_errors
        if not errors:
            return False
        if any(b in errors for b in spec.context):
            return True
        return any(int(b) in errors for b in np.asarray(spec.blocks, dtype=np.int64).ravel())

    def handle_preemptions(self, kv_connector_metadata: KvtierConnectorMetadata) -> None:
        self._end_preempted(kv_connector_metadata)

    def _end_preempted(self, kv_connector_metadata: Any) -> None:
        """Waits for the operations of the step's preempted requests: vLLM freed their blocks."""
        preempted = set(getattr(kv_connector_metadata, "preempted", ()) or ())
        if preempted:
            for op in self._ops_of(lambda o: o.req_id in preempted):
                self._finish(op)

    def get_finished(self, finished_req_ids: set) -> tuple[Optional[set], Optional[set]]:
        """(finished_sending, finished_recving). A request is in at most one of them per call, and a
        finished request is reported once: vLLM frees a finished request's blocks for either set and
        forgets it (a second report fails its ``assert req_id in self.requests``). A request whose
        operations still run is not reported: kvtier may still read or write its blocks."""
        self._end_sync_loads()  # their errors belong to this step (get_block_ids_with_load_errors)
        self._finished_seen |= set(finished_req_ids)
        recving: set = set()
        for op in self._ops_of(lambda o: o.handle is None or o.handle.done()):
            self._finish(op)
            if op.is_load and op.is_async:
                recving.add(op.req_id)
        with self._lock:
            busy = {o.req_id for o in self._ops}
        late = recving & busy  # another operation of the request still uses its blocks: later
        recving = (recving - busy) | {r for r in self._late_recving if r not in busy}
        self._late_recving = (self._late_recving | late) - recving
        done_finished = recving & self._finished_seen  # vLLM frees these for finished_recving
        self._held -= done_finished
        sending = {r for r in self._held if r in self._finished_seen and r not in busy}
        self._held -= sending
        self._finished_seen &= self._held  # only ids that may still be reported
        return (sending or None), (recving or None)

    def get_transfer_results(self, finished_req_ids: set) -> Any:
        """vLLM's KVConnectorTransferResults: ``get_finished``'s two sets and, with several KV cache
        groups, the finished asynchronous loads that failed (``failed_recving``, each also in
        ``finished_recving``, as vLLM asks): vLLM recomputes such a request from its first token (its
        recovery by block ids cannot tell the groups' blocks apart)."""
        sending, recving = self.get_finished(finished_req_ids)
        failed = self._recv_failed & set(recving or ())
        self._recv_failed -= failed
        results = KVConnectorTransferResults(finished_sending=set(sending or ()), finished_recving=set(recving or ()))
        if failed:
            results.failed_recving = failed
        return results

    def get_block_ids_with_load_errors(self) -> set:
        """The blocks that failed to load since the last call. The step's synchronous loads are ended
        first, so their errors are reported in the step that used them, whichever of its calls vLLM
        makes first (the errors must reach vLLM before it keeps the step's output)."""
        self._end_sync_loads()
        errors, self._load_errors = self._load_errors, set()
        return errors

    def _end_sync_loads(self) -> None:
        while self._sync_loads:
            self._end_sync_load(self._sync_loads.pop())

    def _end_sync_load(self, op: _Op) -> None:
        """Waits for a synchronous load until its deadline (``load_timeout_s``), then accounts for it;
        past the deadline the load is given up (``_give_up``) and the forward goes on."""
        if op.handle is not None and not op.handle.done():
            try:
                op.handle.wait(timeout=max(0.0, op.deadline - time.monotonic()))
            except kvtier.KvtierError as e:
                if e.status == kvtier.Status.BUSY and not op.handle.done():
                    self._give_up(op)
                    return
        self._finish(op)

    def _give_up(self, op: _Op) -> None:
        """A synchronous load past its deadline (a tier read that hangs: a stalled NFS under fs://) has
        failed: every block it was to write is a load error of this step (vLLM recomputes them, or fails
        the request with kv_load_failure_policy 'fail'), and its saves are dropped. kvtier may still
        write those blocks until the read ends, so the operation stays in flight: its request is not
        reported finished (vLLM keeps its blocks) until then, and when it ends its blocks are reported
        again (get_finished), so that vLLM recomputes what the late read wrote over."""
        op.given_up = True
        self._stats["load_timeouts"] += 1
        logger.warning("KvtierConnector: load of %s not done after load_timeout_s %s s; its tokens are "
                       "recomputed, its blocks held until the read ends", op.req_id, self._load_timeout)
        self._note_load(op.req_id, 0, op.blocks[op.blocks >= 0])

    def get_kv_connector_stats(self) -> Optional[KvtierConnectorStats]:
        """The counters since the last call (None when nothing changed), for vLLM's stats logger."""
        delta = {k: v - self._reported.get(k, 0) for k, v in self._stats.items()}
        self._reported = dict(self._stats)
        stats = KvtierConnectorStats(data={k: v for k, v in delta.items() if v})
        return None if stats.is_empty() else stats

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict] = None) -> KvtierConnectorStats:
        return KvtierConnectorStats(data=dict(data or {}))

    def stats(self) -> dict:
        """The connector's counters and the store's statistics (``store``)."""
        out: dict[str, Any] = dict(self._stats)
        if not self._closed:
            out["store"] = self._store.stats()
        return out

    def shutdown(self) -> None:
        """Waits for every load and save in flight, then closes the store it opened; idempotent."""
        if self._closed:
            return
        for op in self._ops_of(lambda o: True):
            self._finish(op)
        self._sync_loads = []
        if self._gpu is not None:
            self._gpu.close()
        self._closed = True
        if self._store_key is not None:
            _release_store(self._store_key)

    # ---- internals -----------------------------------------------------------------------------

    def _note_load(self, req_id: str, loaded: int, bad: np.ndarray) -> None:
        """Accounts for a finished load: ``bad`` are the blocks it did not fill (recomputed)."""
        self._stats["loaded_chunks"] += loaded
        if bad.size:
            self._failed_loads.add(req_id)
            self._step_errors |= {int(b) for b in bad}
            self._stats["load_errors"] += 1
            self._stats["error_blocks"] += int(bad.size)
            if self._several_groups:  # the whole request, in failed_recving (get_transfer_results)
                self._recv_failed.add(req_id)
            else:
                self._load_errors |= {int(b) for b in bad}

    def _load_gpu(self, req_id: str, keys: list, blocks: np.ndarray) -> None:
        self._stats["loads"] += 1
        try:
            self._require_cache()
            loaded, bad = self._gpu.load(keys, blocks)  # type: ignore[union-attr]
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            logger.warning("KvtierConnector: GPU load of %s failed (%s); its tokens are recomputed", req_id, e)
            loaded, bad = 0, blocks[blocks >= 0]
        self._note_load(req_id, loaded, bad)

    def _ended_gpu_load(self, req_id: str, keys: list, tables: np.ndarray) -> Optional["_Ended"]:
        """An asynchronous load of kvtier.gpu's grouped path: read and verified now, the engine's stream
        made to wait for it; its result as an ended operation (accounted for by get_finished)."""
        try:
            self._require_cache()
            loaded, _ = self._gpu.load(keys, tables)  # type: ignore[union-attr]
            self._gpu.wait_layer(0)  # type: ignore[union-attr]  # one layer group: the whole load
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            logger.warning("KvtierConnector: GPU load of %s failed (%s); its tokens are recomputed", req_id, e)
            return None
        return _Ended(loaded)

    def _save_gpu(self, req_id: str, keys: list, blocks: np.ndarray) -> None:
        try:
            self._require_cache()
            self._gpu.save(keys, blocks)  # type: ignore[union-attr]
        except (kvtier.KvtierError, ValueError, RuntimeError) as e:
            self._stats["saves_failed"] += 1
            logger.warning("KvtierConnector: GPU save of %s failed: %s", req_id, e)
            return
        self._stats["saves"] += 1
        self._stats["saved_chunks"] += len(keys)

    def _forget_chunk(self, key: bytes) -> None:
        """Removes the first chunk a load could not use (missing, or failing verification) from the
        tiers, so that the save after vLLM recomputed it is written (a tier keeps the copy it holds
        under a key: a corrupt one would otherwise stay, a miss for every later request)."""
        try:
            self._store.remove(self.namespace, [key])
        except kvtier.KvtierError as e:
            logger.warning("KvtierConnector: removing a chunk that failed to load: %s", e)

    def _require_cache(self) -> None:
        if self._closed:
            raise RuntimeError("the connector is shut down")
        if self._cache is None and self._gpu is None:
            raise RuntimeError("register_kv_caches was not called")

    def _ops_of(self, pred: Any) -> list:
        with self._lock:
            picked = [o for o in self._ops if pred(o)]
        return picked

    def _finish(self, op: _Op) -> None:
        """Waits for one operation, accounts for it and forgets it (idempotent per op)."""
        with self._lock:
            if op not in self._ops:
                return
            self._ops.remove(op)
        if op.given_up:  # failed at its deadline already; its late writes are recomputed as well
            op.handle.close()
            self._stats["late_load_ends"] += 1
            if not self._several_groups:
                self._load_errors |= {int(b) for b in op.blocks[op.blocks >= 0]}
            return
        done, answered = 0, False
        if op.handle is not None:
            try:
                done, answered = op.handle.wait(), True
            except kvtier.KvtierError as e:
                logger.warning("KvtierConnector: %s of %s failed: %s", "load" if op.is_load else "save",
                               op.req_id, e)
            finally:
                op.handle.close()
        if op.is_load:
            if answered and done < len(op.keys):  # that chunk is missing or failed verification
                self._forget_chunk(op.keys[done])
            if self._has_state and done < len(op.blocks):  # the state as of the last good chunk is not
                done = 0  # in a block (only the prefix's last block takes one): recompute the whole load
            bad = op.blocks[done:]
            self._note_load(op.req_id, done, bad[bad >= 0])
        elif op.handle is None or done < len(op.blocks):
            self._stats["saved_chunks"] += done
            self._stats["saves_failed"] += 0 if op.handle is None else 1
        else:
            self._stats["saved_chunks"] += done


class _Ended:
    """A Handle's answers for an operation that ended before it was recorded (kvtier.gpu's loads)."""

    def __init__(self, count: int) -> None:
        self._count = count

    def done(self) -> bool:
        return True

    def wait(self, timeout: Optional[float] = None) -> int:
        return self._count

    def wait_bytes(self, nbytes: int, timeout: Optional[float] = None) -> int:
        return self._count

    def close(self) -> None:
        return None


@contextlib.contextmanager
def _configuration_errors() -> Any:
    """At construction, kvtier's refusal of a layout, an identity or a tier URL or option is bad
    configuration: ValueError, with kvtier's message."""
    try:
        yield
    except kvtier.KvtierError as e:
        raise ValueError(f"KvtierConnector: bad configuration: {e}") from e


# One Store per process and configuration, shared by the connectors of that process: with TP 1 vLLM
# runs the scheduler and the worker in one process, and a shared Store lets the scheduler see the
# worker's saves at once on every tier (file:// and mem:// keep their index in the Store).
_STORES: dict = {}
_STORES_LOCK = threading.Lock()


def _acquire_store(extra: Mapping[str, Any]) -> tuple[kvtier.Store, tuple]:
    urls = split_urls(extra["tiers"])
    if any("{" in u for u in urls):
        raise ValueError("KvtierConnector: per-rank tier URLs ({tp_rank}, {rank}) are not supported: "
                         "the scheduler looks up every rank's chunks in the same tiers")
    key = (tuple(urls), tuple(sorted((k, repr(extra[k])) for k in STORE_OPTION_NAMES if k in extra)))
    with _STORES_LOCK:
        entry = _STORES.get(key)
        if entry is None:
            entry = _STORES[key] = [open_store(urls, extra), 0]
        entry[1] += 1
        return entry[0], key


def _release_store(key: tuple) -> None:
    with _STORES_LOCK:
        entry = _STORES[key]
        entry[1] -= 1
        if entry[1]:
            return
        del _STORES[key]
    entry[0].close()


# ---- the vLLM adapter ----------------------------------------------------------------------------


class KvtierConnector(KvtierConnectorCore, _Base):  # type: ignore[misc,valid-type]
    """vLLM's ``KVConnectorBase_V1`` over ``KvtierConnectorCore``; constructed by vLLM's factory as
    ``KvtierConnector(vllm_config, role[, kv_cache_config])``. It does not declare ``SupportsHMA``: vLLM
    then turns its hybrid KV cache manager off and hands one KV cache group, which every backend (GPU
    and CPU) is served in. A configuration of several groups is refused, naming the two ways out."""

    _asks_hnd = False  # KvtierHybridConnector asks vLLM for the HND layout on a CUDA device

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            try:
                _Base.__init__(self, vllm_config, role, kv_cache_config)
            except TypeError:  # revisions whose base takes (vllm_config, role)
                _Base.__init__(self, vllm_config, role)
        extra = extra_of(vllm_config)
        if extra.get("kv_cache_layout", "auto") == "auto" and device_type(vllm_config) == "cpu":
            extra["kv_cache_layout"] = "cpu_attn"  # vLLM's CPU platform always runs its CPU_ATTN backend
        elif self._asks_hnd and wants_hnd(vllm_config):
            extra["kv_cache_layout"] = "hnd"  # what get_required_kvcache_layout asked vLLM for
        role_text = role_name(role)
        tp_rank = worker_tp_rank(vllm_config) if role_text == WORKER else 0
        check_revision()
        spec = spec_of_vllm_config(vllm_config)
        groups = check_kv_cache_config(kv_cache_config, spec)
        if groups is not None and not isinstance(self, _HMA):
            raise ValueError(f"KvtierConnector: {len(groups)} KV cache groups (vLLM's hybrid KV cache manager is "
                             "on); KvtierConnector serves one: run with --disable-hybrid-kv-cache-manager, or, on "
                             "vLLM's CPU backend, name KvtierHybridConnector (sliding-window groups served)")
        if groups is not None and len(groups) > 1 and not REPORTS_FAILED_RECVING:
            raise ValueError(f"KvtierHybridConnector: {len(groups)} KV cache groups on a vLLM revision whose "
                             "KVConnectorTransferResults has no failed_recving: its scheduler cannot recover a "
                             "failed load of several groups (it unpacks one group's block ids in "
                             "_update_requests_with_invalid_blocks and _update_waiting_for_remote_kv: EngineCore "
                             "would die on the first load error). Use vLLM 0.32 or later, or "
                             "--disable-hybrid-kv-cache-manager with KvtierConnector")
        KvtierConnectorCore.__init__(self, role_text, spec, extra, tp_rank, groups=groups)
        self._vllm_role = role

    @property
    def role(self) -> Any:
        return self._vllm_role

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        KvtierConnectorCore.bind_connector_metadata(self, connector_metadata)
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        KvtierConnectorCore.clear_connector_metadata(self)
        if HAVE_VLLM:  # pragma: no cover - needs vLLM
            self._connector_metadata = None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return "HND" if cls._asks_hnd and wants_hnd(vllm_config) else "NHD"

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Any = None) -> bool:
        """True: on a CUDA device every attention layer's ``wait_for_layer_load`` makes the engine's
        stream wait for that layer's bytes. A full CUDA graph replays a step without running those
        calls, so a step whose batch looks like a decode batch (a prefix hit that leaves one prompt
        token to compute) would read KV before it landed; vLLM then runs its piecewise graphs, which
        run attention, and the waits in it, eagerly."""
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """False: kvtier is a cache, and a save lost to a preemption is a later miss, never bytes
        read from freed blocks: a save reads the blocks of tokens computed in its own step, and
        ``handle_preemptions`` waits for a preempted request's saves before vLLM reuses its blocks.
        So vLLM keeps (does not drop and recompute) a preempted request's in-flight output."""
        return False


class KvtierHybridConnector(KvtierConnector, _HMA):  # type: ignore[misc,valid-type]
    """``KvtierConnector`` that declares vLLM's ``SupportsHMA`` (one block id list per KV cache group):
    vLLM keeps its hybrid KV cache manager on, and full-attention, sliding-window and Mamba groups (the
    last with ``mamba_cache_mode='all'``) are served in HND caches: on vLLM's CPU backend (``cpu_attn``)
    by the host path, and on a CUDA device, where it asks vLLM for the HND layout
    (``get_required_kvcache_layout``: FlashAttention's and FlashInfer's stride order (0, 1, 3, 2, 4)) and
    sets ``kv_cache_layout: hnd``, by kvtier.gpu's pieces (``_gpu_grouped``); Mamba groups in another
    mode and NHD caches with several groups are refused. Named in ``--kv-transfer-config`` as
    ``"kv_connector": "KvtierHybridConnector"``; opt-in: on a GPU every model then runs in vLLM's HND
    layout and in kvtier's head-major chunks (one layer group: a layer wait waits for the whole load;
    MLA models are not asked for HND)."""

    _asks_hnd = True

