"""What both sides of the vLLM connector know of the engine: its KV cache geometry (``ModelSpec``), the
KV cache dtypes it serves and the connector roles. A leaf module: imports no other connector module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ROLES = ("scheduler", "worker")

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16",
          "fp32": "fp32", "half": "fp16", "float": "fp32", "fp8": "fp8", "fp8_e4m3": "fp8",
          "fp8_e5m2": "fp8"}


@dataclass(frozen=True)
class ModelSpec:
    """What both sides know of the engine: the geometry of one TP rank's KV cache."""

    model: str
    layers: int
    kv_heads: int        # per TP rank (MLA: 1)
    head_dim: int        # MLA: the latent's width, kv_lora_rank + qk_rope_head_dim
    kv_dtype: str        # the engine's name (bfloat16, fp8_e4m3, ...)
    block_size: int
    tp_size: int = 1
    revision: Optional[str] = None
    attention: str = "mha"  # "mha" (K and V per layer) or "mla" (one latent per layer, every rank alike)
    model_fields: tuple = ()  # (name, value) identity fields of the weights (engine_identity)

    def __post_init__(self) -> None:
        for name in ("layers", "kv_heads", "head_dim", "block_size", "tp_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"KvtierConnector: {name} {value!r} is not a positive integer")
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"KvtierConnector: attention {self.attention!r} is neither 'mha' nor 'mla'")
        if self.attention == "mla" and self.kv_heads != 1:
            raise ValueError(f"KvtierConnector: an MLA cache has one latent per token (kv_heads 1), "
                             f"not {self.kv_heads}")

    @property
    def dtype(self) -> str:
        try:
            return DTYPES[self.kv_dtype]
        except KeyError:
            raise ValueError(f"KvtierConnector: KV cache dtype {self.kv_dtype!r} is not supported "
                             f"(known: {', '.join(sorted(DTYPES))})") from None
