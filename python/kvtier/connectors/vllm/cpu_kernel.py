"""The identity field of vLLM's CPU attention kernel packing (``cpu_attn_isa``).

vLLM 0.32's CPU backend (vllm/v1/attention/backends/cpu_attn.py, ``_get_attn_isa``) stores each block's
K in the packing of the kernel it picks for the host: ``vec`` (K transposed), ``amx`` (bf16 on CPUs with
AMX tiles, another packing), ``vec16``, ``neon``, ... kvtier copies those bytes whole, so a chunk saved
under one packing and loaded under another verifies and is wrong. Engines on a CPU device therefore
name the packing in their identity:

- the ISA vLLM itself picks for this model's dtype, block size, head size and KV cache dtype, when the
  installed vLLM has ``_get_attn_isa``;
- else (a revision without it, or one whose call fails) ``host:<machine>:<digest of the CPU's feature
  flags>``: only engines on CPUs of the same features share chunks, whatever packing they use.

Imports no other connector module. Deterministic on a host (no Python ``hash()``).
"""

from __future__ import annotations

import hashlib
import platform
from typing import Any, Callable, Optional


def _vllm_isa_probe() -> Optional[Callable[..., str]]:
    try:  # pragma: no cover - needs vLLM's CPU backend
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa  # type: ignore
    except Exception:
        return None
    return _get_attn_isa


def host_signature(cpuinfo: str = "/proc/cpuinfo") -> str:
    """``host:<machine>:<digest>`` of the first ``flags`` (x86) or ``Features`` (Arm) line's sorted
    words; ``host:<machine>:unknown`` where the file has none."""
    flags = ""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    flags = " ".join(sorted(set(value.split())))
                    break
    except OSError:
        pass
    digest = hashlib.sha256(flags.encode()).hexdigest()[:16] if flags else "unknown"
    return f"host:{platform.machine()}:{digest}"


def cpu_attn_isa(mc: Any, block_size: int, head_size: int, cache_dtype: Optional[str],
                 probe: Optional[Callable[..., str]] = None) -> str:
    """The ``cpu_attn_isa`` identity value of an engine on a CPU device (see the module docstring).
    ``probe`` stands in for vLLM's ``_get_attn_isa`` (tests); None looks it up in the installed vLLM."""
    probe = probe if probe is not None else _vllm_isa_probe()
    if probe is not None:
        try:
            return str(probe(getattr(mc, "dtype", None), int(block_size), int(head_size), cache_dtype))
        except Exception:  # noqa: BLE001 - a revision whose signature differs: the host's features
            pass
    return host_signature()
