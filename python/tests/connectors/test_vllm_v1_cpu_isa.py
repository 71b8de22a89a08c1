"""vLLM's CPU backend keeps each block's K in the packing of the attention kernel it picks for the host
(``vec``, ``amx``, ...; python/kvtier/connectors/cpu_kernel.py). kvtier copies those bytes whole,
so engines whose kernels pack differently must never share chunks: the packing is in the identity."""

from __future__ import annotations

import pathlib
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import vllm_config  # noqa: E402

from kvtier.connectors import vllm_v1  # noqa: E402
from kvtier.connectors.vllm import cpu_kernel  # noqa: E402

pytestmark = requires_library
BS, CHUNK, LAYERS, HEADS, DIM = 16, 32, 2, 2, 8
TOKENS = list(range(500, 500 + CHUNK))


def _engine(url, device="cpu"):
    cfg = vllm_config("test/llama-tiny", LAYERS, HEADS, DIM, BS, {"tiers": [url], "chunk_tokens": CHUNK},
                      device=device)
    return vllm_v1.KvtierConnector(cfg, types.SimpleNamespace(name="WORKER"))


def _probe(isa, seen):
    def probe(dtype, block_size, head_size, cache_dtype):
        seen.append((str(dtype), block_size, head_size, cache_dtype))
        return isa
    return probe


def test_cpu_engines_whose_kernels_pack_k_differently_never_share_chunks(file_tier, monkeypatch):
    url, _ = file_tier
    seen: list = []
    monkeypatch.setattr(cpu_kernel, "_vllm_isa_probe", lambda: _probe("vec", seen))
    vec, vec_again = _engine(url), _engine(url)
    monkeypatch.setattr(cpu_kernel, "_vllm_isa_probe", lambda: _probe("amx", seen))
    amx = _engine(url)
    # vLLM's own arguments: the model's dtype, the block size, the head size, the cache dtype as given
    assert seen[0] == ("torch.float32", BS, DIM, "auto")
    assert vec.namespace.id == vec_again.namespace.id != amx.namespace.id
    keys = vec.namespace.chunk_keys(TOKENS)
    vec.store.save(vec.namespace, keys, [bytes(vec.namespace.chunk_bytes)])
    vec.store.flush()
    assert vec_again.store.lookup(vec_again.namespace, vec_again.namespace.chunk_keys(TOKENS)) == 1
    assert amx.store.lookup(amx.namespace, amx.namespace.chunk_keys(TOKENS)) == 0
    ident = vllm_v1.identity_of(vllm_v1.spec_of_vllm_config(vllm_config(
        "test/llama-tiny", LAYERS, HEADS, DIM, BS, {}, device="cpu")), {}, 0)
    assert ident.get("cpu_attn_isa") == "amx"
    for conn in (vec, vec_again, amx):
        conn.shutdown()


def test_gpu_engines_carry_no_cpu_packing(monkeypatch):
    monkeypatch.setattr(cpu_kernel, "_vllm_isa_probe", lambda: _probe("vec", []))
    for device in ("cuda", None):
        spec = vllm_v1.spec_of_vllm_config(vllm_config("test/llama-tiny", LAYERS, HEADS, DIM, BS, {}, device=device))
        assert "cpu_attn_isa" not in dict(spec.model_fields)


def test_without_vllms_probe_the_hosts_cpu_features_decide(tmp_path, monkeypatch):
    def cpuinfo(name, flags):
        p = tmp_path / name
        p.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t: zzz\n")
        return str(p)
    a = cpu_kernel.host_signature(cpuinfo("a", "sse avx2 avx512f"))
    assert a == cpu_kernel.host_signature(cpuinfo("b", "avx512f sse avx2 sse"))
    assert a != cpu_kernel.host_signature(cpuinfo("c", "sse avx2 avx512f amx_tile amx_bf16"))
    assert cpu_kernel.host_signature(str(tmp_path / "missing")).endswith(":unknown")
    # a probe that fails (another revision's signature) falls back to the host's features too
    def broken(*args):
        raise TypeError("other signature")
    mc = types.SimpleNamespace(dtype=torch.bfloat16)
    assert cpu_kernel.cpu_attn_isa(mc, BS, DIM, "auto", probe=broken).startswith("host:")
    monkeypatch.setattr(cpu_kernel, "_vllm_isa_probe", lambda: None)
    assert cpu_kernel.cpu_attn_isa(mc, BS, DIM, "auto") == cpu_kernel.host_signature()
