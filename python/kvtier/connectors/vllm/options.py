"""``kv_connector_extra_config``: the options the connector knows, their defaults and checks, and
how kvtier's refusal of a configuration becomes ValueError at construction."""

from __future__ import annotations

import contextlib
from typing import Any, Mapping

import kvtier

from .. import STORE_OPTION_NAMES
from .spec import ROLES

SCHEDULER, WORKER = ROLES
OWN_OPTIONS = ("tiers", "chunk_tokens", "async_load", "tenant", "salt", "model_id", "model_revision",
               "kv_cache_layout", "layer_groups", "layout_spec", "load_timeout_s") + STORE_OPTION_NAMES
KV_CACHE_LAYOUTS = ("auto", "flash_attn", "flashinfer", "cpu_attn", "hnd")
DEFAULT_CHUNK_TOKENS = 256
DEFAULT_LOAD_TIMEOUT_S = 30.0


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



@contextlib.contextmanager
def configuration_errors() -> Any:
    """At construction, kvtier's refusal of a layout, an identity or a tier URL or option is bad
    configuration: ValueError, with kvtier's message."""
    try:
        yield
    except kvtier.KvtierError as e:
        raise ValueError(f"KvtierConnector: bad configuration: {e}") from e
