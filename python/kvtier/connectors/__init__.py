"""Connectors: thin adapters that let inference engines load kvtier as their storage.

Each submodule presents kvtier in the shape one engine loads (docs/connectors.md says how to
configure each engine):

- ``kvtier.connectors.vllm_v1`` -- a vLLM KV connector (``KvtierConnector``,
  ``KvtierHybridConnector``, named in ``kv_connector_module_path``).
- ``kvtier.connectors.vllm``    -- a secondary tier of vLLM's tiered CPU offloading
  (``KvtierSecondaryTier``); also the package of vLLM's modules, one per concept, behind both paths.
- ``kvtier.connectors.sglang``  -- a HiCache storage backend for SGLang
  (``KvtierHiCacheStorage``, loaded with ``--hicache-storage-backend dynamic``).
- ``kvtier.connectors.lmcache`` -- a native connector for LMCache's ``native_plugin`` L2 adapter
  (``KvtierNativeConnector``).

What they share lives here:

- Identity: each connector describes the configuration that writes a block -- engine, layout, I/O
  path, model and revision, dtype, geometry, parallel rank, hash scheme -- as a
  ``kvtier.EngineIdentity``; its namespace is made from that identity, so two configurations never
  share a chunk. A configuration a connector was not written for is refused at construction.
- Read-your-writes: ``kvtier.connectors._pending.PendingWrites``, the per-process in-flight set
  every connector's lookups consult (docs/connectors.md).
- Per-rank tier URLs: ``{tp_rank}``, ``{pp_rank}``, ``{rank}`` in a tier URL are replaced by the
  process's ranks (``tier_urls(value, ranks)``).
- Engine keys (bytes, str or int block hashes) become kvtier's 32-byte keys through
  ``kvtier.key_of``; the engine's key already names a whole prefix, so it is used as is.
- An engine block is an opaque run of bytes of a fixed size. kvtier sizes chunks from a
  ``Layout`` (2 x layers x kv_heads x head_dim x dtype size x tokens_per_chunk), so a block of
  N bytes is described by the one-dimensional layout ``byte_layout(N)``: 1 layer, 1 head, head
  dimension N/2, 1-byte dtype, 1 token per chunk. Its chunk size is exactly N. The engine's real
  geometry is in the identity.
- Buffers: anything with the buffer protocol is passed straight to kvtier (zero-copy); a
  torch-like tensor (``data_ptr()`` and a byte size) is passed as its address and size, so no
  engine object is copied in Python.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import difflib
import logging
import re

import kvtier

logger = logging.getLogger(__name__)

__all__ = [
    "byte_layout",
    "engine_key",
    "engine_keys",
    "as_buffer",
    "tier_urls",
    "open_store",
    "STORE_OPTION_NAMES",
    "split_engine_kwargs",
    "expand_ranks",
]

# Store constructor options a connector's configuration may carry next to its tier list.
STORE_OPTION_NAMES = (
    "promote_on_load",
    "admit_on_second_use",
    "save_queue_bytes",
    "save_queue_chunks",
    "background_threads",
    "async_threads",
    "key_file",
    "events",        # a ZeroMQ endpoint for the store's chunk events (docs/serve.md)
    "events_topic",
)

_INT_TAG = b"kvtier-int:"


def byte_layout(nbytes: int) -> kvtier.Layout:
    """The one-dimensional layout whose chunk is exactly ``nbytes`` bytes (``nbytes`` even, > 0)."""
    nbytes = int(nbytes)
    if nbytes <= 0 or nbytes % 2:
        raise ValueError(f"a block must be a positive even number of bytes, not {nbytes}")
    layout = kvtier.Layout(layers=1, kv_heads=1, head_dim=nbytes // 2, dtype="fp8",
                           tokens_per_chunk=1)
    if layout.chunk_bytes != nbytes:  # the contract fixes the formula; check it, never assume it
        raise ValueError(f"byte layout of {nbytes} bytes has chunks of {layout.chunk_bytes}")
    return layout


def engine_key(key: Any) -> bytes:
    """kvtier's 32-byte key for one engine key: bytes-like, str or int (a block hash)."""
    if isinstance(key, bool):
        raise TypeError("a bool is not a block key")
    if isinstance(key, int):
        length = max(1, (key.bit_length() + 8) // 8)
        return kvtier.key_of(_INT_TAG + key.to_bytes(length, "big", signed=True))
    if isinstance(key, str):
        return kvtier.key_of(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return kvtier.key_of(bytes(key))
    raise TypeError(f"unsupported block key type {type(key).__name__}")


def engine_keys(keys: Iterable[Any]) -> list[bytes]:
    return [engine_key(k) for k in keys]


def as_buffer(obj: Any) -> Any:
    """A kvtier buffer for ``obj`` without copying: torch-like tensors become (address, size)."""
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr) and hasattr(obj, "element_size") and hasattr(obj, "numel"):
        is_contiguous = getattr(obj, "is_contiguous", None)
        if callable(is_contiguous) and not is_contiguous():
            raise ValueError("a tensor buffer must be contiguous")
        device = getattr(obj, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise ValueError("a tensor buffer must be in host memory")
        return (int(data_ptr()), int(obj.numel()) * int(obj.element_size()))
    return obj


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
RANK_FIELDS = ("tp_rank", "pp_rank", "rank")


def expand_ranks(url: str, ranks: Mapping[str, int] | None) -> str:
    """``url`` with ``{tp_rank}``, ``{pp_rank}`` and ``{rank}`` replaced by ``ranks``; any other
    ``{name}`` is refused (ValueError), so a misspelt placeholder never becomes a shared path."""
    ranks = dict(ranks or {})

    def sub(m: "re.Match[str]") -> str:
        name = m.group(1)
        if name not in RANK_FIELDS:
            raise ValueError(f"tier URL {url!r}: unknown placeholder {{{name}}} "
                             f"(known: {', '.join('{' + f + '}' for f in RANK_FIELDS)})")
        if name not in ranks:
            raise ValueError(f"tier URL {url!r}: {{{name}}} is not known to this connector")
        return str(int(ranks[name]))

    return _PLACEHOLDER.sub(sub, url)


def split_engine_kwargs(kwargs: Mapping[str, Any], own: Sequence[str], where: str,
                        engine_names: Sequence[str] = ()) -> dict[str, Any]:
    """Separates kvtier's own options from arguments an engine revision passes on its own.

    Returns the options named in ``own``. An unknown name that is a close misspelling of one of
    ``own`` is refused (ValueError: kvtier's own unknown option); every other unknown argument is
    the engine's -- logged and ignored, so a new engine revision that passes one more argument
    still constructs the connector."""
    mine: dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in own:
            mine[name] = value
            continue
        if name not in engine_names and difflib.get_close_matches(name, own, n=1, cutoff=0.8):
            close = difflib.get_close_matches(name, own, n=1, cutoff=0.8)[0]
            raise ValueError(f"unknown kvtier option {name!r} for {where} (did you mean {close!r}?)")
        logger.info("%s: ignoring engine argument %s=%r", where, name,
                    value if isinstance(value, (str, int, float, bool)) else type(value).__name__)
    return mine


def tier_urls(value: Any, ranks: Mapping[str, int] | None = None) -> list[str]:
    """Tier URLs from a configuration value: one URL, a comma-separated list, or a list; rank
    placeholders replaced (``expand_ranks``)."""
    return [expand_ranks(u, ranks) for u in split_urls(value)]


def split_urls(value: Any) -> list[str]:
    """Tier URLs from a configuration value, placeholders left as they are."""
    if value is None:
        raise ValueError("the connector needs kvtier tier URLs (key 'tiers')")
    if isinstance(value, str):
        urls = [u.strip() for u in value.split(",") if u.strip()]
    else:
        urls = [str(u) for u in value]
    if not urls:
        raise ValueError("the connector needs at least one kvtier tier URL")
    return urls


def open_store(tiers: Any, options: Mapping[str, Any] | None = None,
               ranks: Mapping[str, int] | None = None) -> kvtier.Store:
    """Opens a Store over ``tiers`` with the known Store options found in ``options``."""
    opts = {k: v for k, v in (options or {}).items() if k in STORE_OPTION_NAMES}
    return kvtier.Store(tier_urls(tiers, ranks), **opts)


def group_by_size(sizes: Sequence[int]) -> dict[int, list[int]]:
    """Positions of each size, in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(int(size), []).append(i)
    return groups


def remove_keys(store: kvtier.Store, ns: kvtier.Namespace, keys: Sequence[bytes]) -> None:
    """Removes the chunks of ``keys`` (32-byte kvtier keys) from every tier of ``store``
    (kvtier_remove); KvtierError on a tier's failure."""
    from kvtier import _lib
    from kvtier.store import _key_array
    arr, n = _key_array(keys)
    _lib.check(_lib.lib().kvtier_remove(store.handle, ns.handle, arr, n))
