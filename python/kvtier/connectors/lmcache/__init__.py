"""kvtier as a native connector for LMCache's ``native_plugin`` L2 adapter, one module per concept.

LMCache builds the class named by an ``--l2-adapter`` JSON of type ``native_plugin`` as
``KvtierNativeConnector(**adapter_params)`` and wraps it in its native-connector bridge, which
polls ``event_fd()`` and then calls ``drain_completions()``. The connector's surface:

- ``event_fd() -> int``: an eventfd that becomes readable when an operation has finished.
- ``submit_batch_get(keys, memoryviews) -> int``, ``submit_batch_set(keys, memoryviews) -> int``,
  ``submit_batch_exists(keys) -> int``: start an operation and return its future id at once.
- ``submit_batch_delete(keys) -> int``: removes the objects from every kvtier tier (LMCache's L2
  eviction), in every object size this connector knows.
- ``drain_completions() -> list[(future_id, ok, error, per_key_results)]``: the operations that
  finished since the last call; never blocks.
  kvtier marks an operation done before it writes the descriptor it was given, so a drain that
  follows a wake-up always sees the operation that caused it.
- ``close()``: waits for the operations in flight (their buffers stay in use until kvtier ends
  them), then releases the store. Idempotent. A submit after close returns a future id whose
  completion (in the next drain) is a failure, "closed"; it never raises.
- ``get_usage() -> dict``: bytes and chunks kvtier holds, and its capacity, summed over the tiers.

Keys are LMCache's object-key strings (model, KV rank, group and chunk hash, maybe a salt);
``kvtier.key_of`` maps each to a 32-byte kvtier key. An object's byte size fixes its kvtier
namespace (``byte_layout(size)``): a full chunk and a shorter last chunk live in two namespaces.
``submit_batch_exists`` carries no size, so it asks the namespace of every object size the pool
has seen: the sizes are kept in the pool itself (a size registry of up to ``max_sizes`` slots,
each an 8-byte chunk of its own namespace), so after a restart exists finds the objects of every
size earlier processes wrote, without ``chunk_bytes`` (still accepted, as a size known at once).
Identity (``kvtier.EngineIdentity``): engine ``lmcache``, layout ``object``, the model id, the
object's byte size and the salt; LMCache's object keys already carry its model, KV rank and
chunk hash. Read-your-writes: an exists right after a set of this process waits for that set
to become visible (``_pending.PendingWrites``).

Results: a get reports True for each leading object loaded and verified; a missing or corrupt
object and those after it in the same size run are False, and a corrupt object's buffer is
zeroed, never left holding another object's bytes. A set reports per key whether kvtier accepted
it (took a copy). kvtier never waits for slow storage: when a tier or its write queue is full it
drops the object softly (counted in the store's ``dropped_saves``) and a later exists check says
False; a save it refuses outright is False. Nothing raises into LMCache. ``ok`` is True when every key succeeded (for
exists: when the check ran).

``adapter_params``: ``tiers`` (required), ``model_id`` (default ``"lmcache"``), ``tenant``,
``salt``, ``chunk_bytes``, ``max_sizes`` (default 64), ``exists_threads`` and the Store options
(``kvtier.connectors.STORE_OPTION_NAMES``). Other parameters are logged and ignored unless they
are a close misspelling of one of these (refused).

This package's own name is the public module path LMCache's ``native_plugin`` JSON names, so it
re-exports the connector and what the module exported before it became a package. Its modules:

- ``options``    -- the adapter parameters read, the size registry's slot format (a leaf)
- ``ops``        -- an operation in flight and the completion LMCache drains (a leaf)
- ``identity``   -- identity, namespaces per object size and the size registry kept in the pool
- ``submission`` -- I/O submission: the gets and sets kvtier runs, the exists checks and deletes on a
  thread pool, and their completions
- ``connector``  -- ``KvtierNativeConnector``: the surface LMCache's native-connector bridge calls
"""

from .connector import KvtierNativeConnector
from .ops import Completion
from .options import OWN_OPTIONS

__all__ = ["OWN_OPTIONS", "Completion", "KvtierNativeConnector"]
