"""kvtier as an SGLang HiCache storage backend (the L3 under HiCache's host memory pool), one module
per concept.

SGLang loads it with ``--hicache-storage-backend dynamic`` and a JSON
``--hicache-storage-backend-extra-config`` naming ``backend_name``, ``module_path``
(``kvtier.connectors.sglang``) and ``class_name`` (``KvtierHiCacheStorage``). Its backend factory
builds the class as ``KvtierHiCacheStorage(storage_config, kwargs)`` and HiCache's controller
then calls ``register_mem_pool_host(host_pool)``. With ``"interface_v1": 1`` in the extra config the
controller uses the zero-copy calls ``batch_get_v1`` / ``batch_set_v1(keys, host_indices)``;
without it, ``batch_get`` / ``batch_set`` with one flat page tensor per key.

Pages: one key names one page (``page_size`` tokens). In the page-first host layouts a page is a
few contiguous pieces of the host pool -- the K and V halves for MHA, one piece for MLA -- whose
addresses and sizes come from ``host_pool.get_page_buffer_meta(host_indices)``; kvtier reads and
writes those pieces in place (a chunk made of pieces), nothing is copied in Python. The page's
byte size fixes the kvtier layout (``kvtier.connectors.byte_layout``); the model name, the ranks
and that size fix the namespace.

Return conventions (HiCacheStorage's):
- ``exists`` -> bool; ``batch_exists`` -> how many leading keys are present.
- ``get`` -> the target, or None on a miss; ``batch_get`` -> one target-or-None per key.
- ``set`` -> bool; ``batch_set`` -> True only when every page was stored. "Stored" means kvtier
  took a copy: when a tier (or its write queue) is full kvtier drops the page softly, counted in
  the store's ``dropped_saves``, and a later ``batch_exists`` does not count it.
- ``batch_get_v1`` / ``batch_set_v1`` -> one bool per key. A load stops at the first page that is
  missing or fails verification: that page and the ones after it are False, and a corrupt page's
  host slots are zeroed, never left holding another page's bytes.
Errors never raise into HiCache's threads: a failure is reported as False / None.

Identity (``kvtier.EngineIdentity``, docs/connectors.md): the namespace of a page is made from
engine ``sglang``, the host pool's class and ``layout`` (``layer_first``, ``page_first``,
``page_first_direct``, ``page_head``), the I/O path (``v1`` for batch_*_v1, ``generic`` for
batch_get/batch_set: they order a page's bytes differently), the model id and revision, the KV
dtype, attention kind, page tokens, K and V head dims, KV heads, layers, TP/PP/CP size and rank
(``replicated`` for MLA, whose pages are the same on every TP rank), split heads and the hash
scheme. A host pool class or layout this connector was not written for is refused when it is
registered (ValueError), never mapped to a default.

Hybrid models (Mamba / linear attention, sliding-window attention; docs/connectors.md "Hybrid
models"): SGLang's hybrid cache controller registers each entry of its HostPoolGroup with
``register_mem_host_pool_v2(pool, name)``. "kv" is the KV pool registered above (for a hybrid SWA
model: the full-attention layers). Two side pools are served by ``batch_set_v2`` / ``batch_get_v2`` /
``batch_exists_v2`` (``hybrid``, ``pools``), each in a namespace of its own, keyed by the hash of a KV page:
"mamba" (a ``MambaPoolHost``, one request state per slot; a state is one chunk, keyed by the page it
follows; its namespace carries the real TP rank) and "swa" (the KV host pool of the sliding-window
layers, paged as the KV pool; a window page is one chunk of the page's bytes, keyed by its KV page,
split or replicated across TP ranks as the KV pages are). ``batch_exists_v2`` answers the longest
prefix whose KV pages and the trailing pages each transfer asks for (the state at its last page; the
pages of its last window) are stored; a side page that fails verification is False (slots zeroed) and
the next lookup ends before it. With side pools registered, the KV pages' identity names them
(``state_pools``, ``window_pools``), so a deployment without them never reads those pages. Any other
pool name ("indexer", "draft_swa", ...) is refused when registered.

Read-your-writes: stored keys stay in a per-process in-flight set (``_pending.PendingWrites``);
``batch_exists`` waits (bounded) for a key of that set to settle, so a page a set reported stored
is counted by the next ``batch_exists`` of this process.

Extra-config keys read here: ``tiers`` (required; ``{tp_rank}``, ``{pp_rank}`` and ``{rank}`` are
replaced by this process's ranks; one file:// directory shared by several ranks is refused),
``model_id`` (default: the server's model name), ``model_revision``, ``tenant``, ``salt``,
``interface_v1`` and the Store options (``kvtier.connectors.STORE_OPTION_NAMES``).

This package's own name is the public module path SGLang's config names, so it re-exports the backend
and the constants the module had before it became a package. Its modules:

- ``engine_api`` -- SGLang's ``HiCacheStorage`` and ``PoolTransferResult``, or stand-ins (a leaf)
- ``options``    -- the host pool classes and layouts known, the ranks, the tier checks (a leaf)
- ``pools``      -- the side pools of hybrid models: their checks and identity fields (a leaf)
- ``guard``      -- ``while_open``: no store call after close, none raising into HiCache (a leaf)
- ``identity``   -- the identity fields of a registered KV host pool
- ``storage``    -- the KV pages: register_mem_pool_host, the v1 and tensor calls, batch_exists, close
- ``hybrid``     -- the v2 interface: register_mem_host_pool_v2, batch_{exists,get,set}_v2
- ``backend``    -- ``KvtierHiCacheStorage``, the class SGLang builds (``hybrid`` over ``storage``)
"""

from .backend import KvtierHiCacheStorage
from .options import HASH_SCHEME, HOST_POOLS, IO_PATHS, LAYOUTS
from .pools import STATE_POOLS, WINDOW_POOLS

__all__ = ["HASH_SCHEME", "HOST_POOLS", "IO_PATHS", "LAYOUTS", "STATE_POOLS", "WINDOW_POOLS",
           "KvtierHiCacheStorage"]
