"""kvtier as a vLLM ``KVConnectorBase_V1`` connector, loaded by module path::

    --kv-transfer-config '{"kv_connector":"KvtierConnector",
                           "kv_connector_module_path":"kvtier.connectors.vllm_v1",
                           "kv_role":"kv_both","kv_load_failure_policy":"recompute",
                           "kv_connector_extra_config":{"tiers":["file:///kv?capacity=64GiB"]}}'

Written against vLLM's vllm/distributed/kv_transfer/kv_connector/v1/base.py (docs/connectors.md
names the revision). ``KvtierConnectorCore`` holds the logic under vLLM's method names and
signatures and needs no vLLM; ``KvtierConnector`` is the thin adapter: a ``KVConnectorBase_V1``
subclass when vLLM is importable, which reads the model geometry from the ``VllmConfig``.
This module is the stable path users configure: a facade that re-exports them from the package
``kvtier.connectors.vllm``, one module per concept (its docstring lists them: ``spec``, ``config``,
``identity``, ``scheduler``, ``worker``, ``host_paged``, ``gpu_paged``, ``gpu_grouped``, ...).

Scheduler side (one process):

- ``get_num_new_matched_tokens`` computes kvtier's chained chunk keys of the prompt's token ids
  (``Namespace.chunk_keys``: chunks of ``chunk_tokens`` tokens, a multiple of the block size), mixed
  with the request's other inputs that change its KV (LoRA adapter, images, ``cache_salt``:
  ``request_keys``), and asks ``Store.lookup`` of every TP rank's namespace; the smallest answer
  counts. The keys depend only on the request and the namespace, never on ``PYTHONHASHSEED``, so hits
  hold across processes, hosts and restarts. At least one prompt token is always left to compute.
  Requests with prompt embeddings are not cached. The namespace's identity holds the weights' fields
  of vLLM's ModelConfig (``engine_identity``).
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
  ``host_paged.PagedCache``). With vLLM's hybrid KV cache manager (``KvtierHybridConnector``
  declares ``SupportsHMA``; ``KvtierConnector`` does not and serves one group), full-attention,
  sliding-window and Mamba / linear-attention layers in KV cache groups of their own, each with its
  own block ids, in HND caches (``cpu_attn`` on the CPU backend, ``hnd`` on CUDA through kvtier.gpu's
  pieces, ``gpu_grouped``): chunks of ``kv``, ``window`` and ``state`` groups
  (``groups``), the null blocks before a request's window never written, window blocks vLLM
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

CPU tensors (vLLM's CPU backend) go through kvtier's host paged path (``host_paged``); CUDA tensors
through kvtier.gpu (``gpu_paged``: FlashAttention caches and (K, V) pairs by its block-table plan,
FlashInfer, MLA and HND caches by the host path's piece lists with device addresses; several KV cache
groups by ``gpu_grouped``, one layer group, -1 blocks in device scratch): a load is read and
verified on the host before ``start_load_kv`` returns and lands on the GPU layer group by layer group
(``layer_groups``, default min(layers, 8)), ``wait_for_layer_load`` makes the engine's current stream
wait for that layer's group without blocking the host, and a save gathers the blocks on the GPU and is
in the top tier when ``wait_for_save`` returns. ``async_load`` is refused for CUDA caches.
"""

from .vllm.config import check_kv_cache_config, spec_of_vllm_config
from .vllm.connector import KvtierConnector, KvtierHybridConnector
from .vllm.core import KvtierConnectorCore
from .vllm.engine_api import HAVE_VLLM, REPORTS_FAILED_RECVING, KVConnectorRole, KVConnectorTransferResults
from .vllm.identity import identity_of, layout_of
from .vllm.metadata import KvtierConnectorMetadata, LoadSpec, SaveSpec
from .vllm.options import (DEFAULT_CHUNK_TOKENS, DEFAULT_LOAD_TIMEOUT_S, KV_CACHE_LAYOUTS, OWN_OPTIONS, SCHEDULER,
                           WORKER, check_options, chunk_tokens_of, load_timeout_of)
from .vllm.spec import DTYPES, ROLES, ModelSpec
from .vllm.stats import KvtierConnectorStats

__all__ = ["DEFAULT_CHUNK_TOKENS", "DEFAULT_LOAD_TIMEOUT_S", "DTYPES", "HAVE_VLLM", "KV_CACHE_LAYOUTS",
           "KVConnectorRole", "KVConnectorTransferResults", "KvtierConnector", "KvtierConnectorCore",
           "KvtierConnectorMetadata", "KvtierConnectorStats", "KvtierHybridConnector", "LoadSpec", "ModelSpec",
           "OWN_OPTIONS", "REPORTS_FAILED_RECVING", "ROLES", "SCHEDULER", "SaveSpec", "WORKER", "check_kv_cache_config", "check_options",
           "chunk_tokens_of", "identity_of", "layout_of", "load_timeout_of", "spec_of_vllm_config"]
