"""The fields of vLLM's ModelConfig (vllm/config/model.py) that change the KV of the same tokens, as
engine identity fields of the KvtierConnector's namespace (beside the geometry and KV dtype).

- ``weight_dtype``: ``dtype``, the weights' and activations' dtype. Always, also when the KV cache
  dtype is given explicitly (``--kv-cache-dtype``): bf16 and fp16 weights compute different K and V.
- ``quantization``: the weight quantization method (AWQ, GPTQ, FP8, ...), None when unquantized.
- ``quant_config``: SHA-256 of the canonical JSON of the checkpoint's ``quantization_config``
  (``hf_config``), e.g. group size and bits: two AWQ checkpoints of one model differ there.
- ``code_revision``: the revision of remote model code (``trust_remote_code``), when given.
- ``hf_overrides``: SHA-256 of the canonical JSON of a dict of overrides of the Hugging Face config
  (rope scaling, ...); a callable's module and qualified name (its effect cannot be hashed).
- ``attention_dtype``: ``override_attention_dtype``, when given.

A field that does not apply is left out. Deterministic (no Python ``hash()``). Imports no other
connector module.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _dtype_name(dtype: Any) -> Optional[str]:
    if dtype is None:
        return None
    return str(dtype).replace("torch.", "")


def _quant_config(mc: Any) -> Optional[str]:
    hf = getattr(mc, "hf_config", None)
    cfg = getattr(hf, "quantization_config", None) if hf is not None else None
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        to_dict = getattr(cfg, "to_dict", None)
        cfg = to_dict() if callable(to_dict) else vars(cfg) if hasattr(cfg, "__dict__") else str(cfg)
    return _digest(cfg)


def _overrides(mc: Any) -> Optional[str]:
    value = getattr(mc, "hf_overrides", None)
    if not value:
        return None
    if callable(value):
        return "callable:" + f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
    return _digest(value)


def model_identity_fields(mc: Any) -> tuple:
    """(name, value) pairs of the identity fields of one ModelConfig, sorted by name, None-free (none
    for None)."""
    if mc is None:
        return ()
    quant = getattr(mc, "quantization", None)
    fields = {
        "weight_dtype": _dtype_name(getattr(mc, "dtype", None)),
        "quantization": str(quant) if quant else None,
        "quant_config": _quant_config(mc),
        "code_revision": getattr(mc, "code_revision", None) or None,
        "hf_overrides": _overrides(mc),
        "attention_dtype": getattr(mc, "override_attention_dtype", None) or None,
    }
    return tuple(sorted((k, str(v)) for k, v in fields.items() if v is not None))
