"""What of a vLLM request, besides its prompt's token ids, decides the KV of those tokens.

vLLM's own prefix cache keys a block by its tokens and by "extra keys" (vllm/v1/core/kv_cache_utils.py,
``generate_block_hash_extra_keys``): the LoRA adapter, the multimodal inputs whose placeholders overlap
the block, the request's ``cache_salt`` and its prompt embeddings. kvtier's chunk keys must be at least
as strict, or a request is served another request's KV for the same tokens:

- LoRA (``request.lora_request``): the adapter's name and the path its weights were loaded from
  (``lora_name``, ``lora_path``); its integer id is assigned per process and is left out. Every chunk.
- ``cache_salt``: every chunk (vLLM salts the first block, which its chained hash carries on).
- Multimodal inputs (``request.mm_features``: ``identifier``, the content hash vLLM computes, and
  ``mm_position.offset`` / ``.length``; older revisions: ``mm_positions`` beside ``mm_hashes``): a
  chunk's key covers every input whose placeholder starts before the chunk's end, in order of
  offset, with its offset and length: the inputs in or before it. An input without a hash makes the
  request uncacheable (ValueError here; the connector then computes it).
- Prompt embeddings (``request.prompt_embeds`` set, or no ``prompt_token_ids``): not cached. Such a
  request is never looked up nor saved (``RequestKeys.cacheable`` False); its tokens are computed.

The key of chunk i is the SHA-256 of a fixed tag, the token-chained key kvtier computes for chunk i
(``Namespace.chunk_keys``, which already covers every token before the chunk's end) and the canonical
JSON of the extra material that applies to chunk i. A request without extras keeps the plain
token-chained keys. Nothing here uses Python's ``hash()``: keys agree across processes and hosts.
This module imports no other connector module.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

_TAG = b"kvtier-vllm-request-extras-v1\0"


@dataclass(frozen=True)
class RequestKeys:
    """The key material of one request that travels to the workers in the connector metadata
    (picklable: plain tuples and strings)."""

    whole: tuple = ()              # material of every chunk: (("lora", name, path), ("salt", s))
    mm: tuple = field(default=())  # ((offset, length, identifier), ...) sorted by offset

    @property
    def plain(self) -> bool:
        return not self.whole and not self.mm

    def chunk_material(self, chunk: int, chunk_tokens: int) -> Optional[bytes]:
        """The extra material of chunk ``chunk`` (None: none applies, the plain key stands)."""
        end = (chunk + 1) * chunk_tokens
        mm = [list(m) for m in self.mm if m[0] < end]
        if not self.whole and not mm:
            return None
        return json.dumps([[list(w) for w in self.whole], mm], separators=(",", ":"),
                          ensure_ascii=True).encode()


def cacheable_tokens(request: Any) -> Optional[list]:
    """The prompt's token ids, or None for a request kvtier does not cache (prompt embeddings, or no
    token ids at all)."""
    if getattr(request, "prompt_embeds", None) is not None:
        return None
    tokens = getattr(request, "prompt_token_ids", None)
    if tokens is None:
        return None
    return [int(t) for t in tokens]


def request_material(request: Any) -> tuple[Optional[list], Optional[RequestKeys]]:
    """(prompt token ids, extra key material or None) of a vLLM request; (None, None) for a request
    kvtier does not cache (prompt embeddings). ValueError for a request whose extras cannot be keyed."""
    tokens = cacheable_tokens(request)
    if tokens is None:
        return None, None
    extras = request_keys(request)
    return tokens, None if extras.plain else extras


def request_keys(request: Any) -> RequestKeys:
    """The extra key material of a vLLM ``Request`` (see the module docstring)."""
    whole: list = []
    lora = getattr(request, "lora_request", None)
    if lora is not None:
        whole.append(("lora", str(getattr(lora, "lora_name", "") or ""),
                      str(getattr(lora, "lora_path", None) or getattr(lora, "lora_local_path", None) or "")))
    salt = getattr(request, "cache_salt", None)
    if salt:
        whole.append(("salt", str(salt)))
    mm = []
    for pos, ident in _mm_inputs(request):
        if pos is None or ident is None:
            raise ValueError("a multimodal input without a placeholder range or a content hash")
        mm.append((int(pos.offset), int(pos.length), str(ident)))
    return RequestKeys(tuple(whole), tuple(sorted(mm)))


def _mm_inputs(request: Any) -> list:
    """(placeholder range, content hash) of each multimodal input: ``mm_features`` (``mm_position``,
    ``identifier``), or, in older revisions, ``mm_positions`` beside ``mm_hashes``."""
    features = getattr(request, "mm_features", None)
    if features:
        return [(getattr(f, "mm_position", None), getattr(f, "identifier", None)) for f in features]
    positions = list(getattr(request, "mm_positions", None) or ())
    hashes = list(getattr(request, "mm_hashes", None) or ())
    if len(hashes) < len(positions):
        hashes += [None] * (len(positions) - len(hashes))
    return list(zip(positions, hashes))


def chunk_keys(token_keys: Sequence[bytes], extras: Optional[RequestKeys], chunk_tokens: int,
               first: int = 0) -> list:
    """The request's chunk keys from the token-chained keys of its chunks [first, first + n)."""
    if extras is None or extras.plain:
        return list(token_keys)
    out = []
    for i, key in enumerate(token_keys, start=first):
        material = extras.chunk_material(i, chunk_tokens)
        out.append(key if material is None else hashlib.sha256(_TAG + bytes(key) + material).digest())
    return out
