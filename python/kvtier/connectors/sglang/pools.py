"""The side pools of SGLang's hybrid models that the HiCache backend serves (``kvtier.connectors.sglang``).

SGLang's hybrid cache controller registers every entry of its ``HostPoolGroup`` with
``register_mem_host_pool_v2(pool, name)``; besides the KV pool ("kv"), the backend serves two kinds:

- ``mamba``: a ``MambaPoolHost``, one per-request Mamba / linear-attention state per slot; a state is
  stored under the hash of the page it follows (a radix node's last page);
- ``swa``: the KV host pool of a hybrid sliding-window model's window layers (an
  ``MHATokenToKVPoolHost`` or ``MLATokenToKVPoolHost`` built over the device pool of those layers, with
  the KV pool's page size and layout); a window page is stored under the hash of its KV page, and
  SGLang asks only for the trailing pages of a prefix (its last window).

This module checks a registered side pool and gives the identity fields of what it stores; the
backend keeps each side pool's pages in a namespace of its own (docs/connectors.md, "Hybrid models").
"""

from __future__ import annotations

from typing import Any, Mapping

# Per-request state pools: name -> the SGLang class this backend was written for.
STATE_POOLS = {"mamba": "MambaPoolHost"}
STATE_LAYOUTS = ("page_first", "page_first_direct")  # MambaPoolHost's page buffers need them
# Sliding-window KV pools: pages of the window layers, one per KV page key.
WINDOW_POOLS = ("swa",)
# Why the other pools of SGLang's PoolName are refused.
NOT_SERVED = {
    "indexer": "SGLang's DSA indexer pool is not served (only 'kv', 'mamba' and 'swa' are)",
    "draft_swa": "the sliding-window pool of a speculative-decoding draft model is not served",
}
DEFAULT_REFUSAL = "only the 'kv', 'mamba' and 'swa' pools are served"
# The window pool's identity fields, taken from its own KV-pool identity under a "window_" prefix.
_WINDOW_GEOMETRY = ("host_pool", "layers", "kv_dtype", "kv_heads", "k_head_dim", "v_head_dim")


def pool_name(name: Any) -> str:
    """SGLang's PoolName (a str enum) or plain name as text."""
    return str(getattr(name, "value", name))


def class_and_layout(pool: Any, classes: Any, layouts: tuple, class_error: str,
                     layout_error: str) -> tuple[str, str]:
    """The pool's class name and layout; ValueError (the message templates filled in with
    ``cls``, ``layout`` and ``known``) for a class or layout not among those given."""
    cls = type(pool).__name__
    if cls not in classes:
        raise ValueError(class_error.format(cls=cls))
    layout = str(getattr(pool, "layout", "") or "")
    if layout not in layouts:
        raise ValueError(layout_error.format(cls=cls, layout=layout, known=", ".join(layouts)))
    return cls, layout


def state_fields(name: str, pool: Any) -> dict[str, Any]:
    """Identity fields of a state pool's states; ValueError for a pool this backend was not
    written for (class, layout, page size, no page buffers)."""
    cls, layout = class_and_layout(
        pool, (STATE_POOLS[name],), STATE_LAYOUTS,
        f"kvtier: SGLang's {name!r} pool is a {{cls}}, not the {STATE_POOLS[name]} this connector "
        f"was written for",
        "kvtier: {cls} layout {layout!r} has no page buffers for zero-copy storage (known: {known})")
    if int(getattr(pool, "page_size", 0) or 0) != 1 or not callable(
            getattr(pool, "get_page_buffer_meta", None)):
        raise ValueError(f"kvtier: {cls} without one state per slot and get_page_buffer_meta")
    state_bytes = int(getattr(pool, "size_per_token", 0) or 0)
    layers = int(getattr(pool, "num_mamba_layers", 0) or 0)
    if state_bytes <= 0 or layers <= 0:
        raise ValueError(f"kvtier: {cls} reports no state size or no Mamba layers")
    conv = getattr(pool, "conv_state_shapes", None)
    return {
        "pool": name, "host_pool": cls, "layout": layout, "state_bytes": state_bytes,
        "state_layers": layers,
        "state_dtypes": f"{getattr(pool, 'temporal_dtype', '')},{getattr(pool, 'conv_dtype', '')}",
        "state_shapes": f"{tuple(getattr(pool, 'temporal_state_shape', ()))};"
                        + ";".join(str(tuple(c)) for c in (conv or [])),
    }


def window_fields(name: str, pool: Any, own: Mapping[str, Any], kv: Mapping[str, Any]) -> dict[str, Any]:
    """Identity fields of a sliding-window pool's pages. ``own`` is the pool's identity as a KV host
    pool (its class, layout and attention already checked), ``kv`` the registered KV pool's.
    ValueError where the window pages would not pair with the KV pages one to one: another
    attention kind, page size or layout, no page buffers, no page size in bytes."""
    for field in ("attention", "page_tokens", "layout"):
        if str(own.get(field)) != str(kv.get(field)):
            raise ValueError(
                f"kvtier: SGLang's {name!r} pool has {field} {own.get(field)!r} but the KV pool has "
                f"{kv.get(field)!r}; a window page is stored under its KV page's key, so both pools "
                f"must page tokens alike")
    page_bytes = int(getattr(pool, "size_per_token", 0) or 0) * int(getattr(pool, "page_size", 0) or 0)
    if page_bytes <= 0 or page_bytes % 2 or not callable(getattr(pool, "get_page_buffer_meta", None)):
        raise ValueError(f"kvtier: SGLang's {name!r} pool ({type(pool).__name__}) reports no even page "
                         f"size in bytes (size_per_token x page_size) or no get_page_buffer_meta")
    fields: dict[str, Any] = {"pool": name, "block_bytes": page_bytes, "io_path": "v1"}
    for field in _WINDOW_GEOMETRY:
        fields["window_" + field] = own.get(field)
    return fields
