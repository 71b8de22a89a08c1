"""kvtier: a tiered store for the attention KV cache of LLM inference, through libkvtier.so (ctypes).

    import kvtier
    with kvtier.Store(["mem://?capacity=4GiB", "file:///var/lib/kvtier?capacity=200GiB"]) as store:
        ns = store.namespace("meta-llama/Llama-3.1-8B", kvtier.Layout(32, 8, 128))
        keys = ns.chunk_keys(prompt_tokens)              # one 32-byte key per full chunk
        store.save(ns, keys, chunk_buffers)              # any buffer-protocol objects, no copy in Python
        hit = store.lookup(ns, keys)
        loaded = store.load(ns, keys[:hit], destinations[:hit])

Only the standard library is needed. See README.md ("Python") for building and installing.
"""
from __future__ import annotations

from ._lib import ABI_VERSION, KEY_BYTES, KvtierError, Status
from .store import Handle, Layout, Namespace, Store, key_of
from .identity import EngineIdentity


def _version() -> str:
    from . import _lib
    try:
        return _lib.lib().kvtier_version().decode()
    except KvtierError:
        return "unknown (libkvtier.so not found)"


def __getattr__(name: str):
    # __version__ asks the library, so that importing kvtier works before libkvtier.so is found.
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'kvtier' has no attribute {name!r}")


__all__ = ["ABI_VERSION", "KEY_BYTES", "EngineIdentity", "Handle", "KvtierError", "Layout", "Namespace", "Status", "Store",
           "key_of", "__version__"]
