"""One Store per process and configuration, shared by the connectors of that process."""

from __future__ import annotations

import threading
from typing import Any, Mapping

import kvtier

from .. import STORE_OPTION_NAMES, open_store, split_urls

# One Store per process and configuration, shared by the connectors of that process: with TP 1 vLLM
# runs the scheduler and the worker in one process, and a shared Store lets the scheduler see the
# worker's saves at once on every tier (file:// and mem:// keep their index in the Store).
_STORES: dict = {}
_STORES_LOCK = threading.Lock()


def acquire_store(extra: Mapping[str, Any]) -> tuple[kvtier.Store, tuple]:
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


def release_store(key: tuple) -> None:
    with _STORES_LOCK:
        entry = _STORES[key]
        entry[1] -= 1
        if entry[1]:
            return
        del _STORES[key]
    entry[0].close()
