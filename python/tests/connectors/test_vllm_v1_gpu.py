"""KvtierConnector over CUDA KV caches (kvtier.gpu): the plan tests run everywhere (fake CUDA tensors:
CPU tensors that say they are on a CUDA device; nothing reaches a GPU); the end-to-end test needs a
GPU and a libkvtier.so built with CUDA, and is skipped with the reason otherwise."""

from __future__ import annotations

import pathlib
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from connector_helpers import file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import FlashAttnCache, MiniEngine  # noqa: E402

import kvtier.gpu  # noqa: E402
from kvtier.connectors._gpu_paged import gpu_cache_of, layer_group, load_plan  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

BS, CHUNK, LAYERS, HEADS, DIM, BLOCKS = 16, 32, 3, 2, 8, 64
SPEC = ModelSpec(model="test/llama-gpu", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="bfloat16", block_size=BS)


class FakeCuda:
    """A CPU tensor that reports a CUDA device: what gpu_cache_of reads of a tensor."""

    def __init__(self, t, index=0):
        self._t, self.device = t, types.SimpleNamespace(type="cuda", index=index)
        self.shape, self.dtype = t.shape, t.dtype

    def __getitem__(self, i):
        return FakeCuda(self._t[i], self.device.index)

    def stride(self, *a):
        return self._t.stride(*a)

    def data_ptr(self):
        return self._t.data_ptr()

    def element_size(self):
        return self._t.element_size()


def caches(shape, n=LAYERS):
    return {f"model.layers.{i}.self_attn.attn": torch.zeros(shape, dtype=torch.bfloat16) for i in range(n)}


def test_flash_attention_layers_give_one_k_and_one_v_address_per_layer():
    cpu = caches((2, BLOCKS, BS, HEADS, DIM))
    cache, names = gpu_cache_of({k: FakeCuda(v) for k, v in cpu.items()}, SPEC)
    assert names == tuple(cpu)
    assert (cache.num_blocks, cache.block_tokens, cache.device) == (BLOCKS, BS, 0)
    assert list(cache.k) == [t[0].data_ptr() for t in cpu.values()]
    assert list(cache.v) == [t[1].data_ptr() for t in cpu.values()]
    pairs = {k: (FakeCuda(v[0]), FakeCuda(v[1])) for k, v in cpu.items()}
    assert gpu_cache_of(pairs, SPEC)[0] == cache


def test_layouts_kvtier_gpu_cannot_address_are_refused():
    flashinfer = {k: FakeCuda(v) for k, v in caches((BLOCKS, 2, BS, HEADS, DIM)).items()}
    with pytest.raises(ValueError, match="FlashInfer"):
        gpu_cache_of(flashinfer, SPEC)
    mla = {k: FakeCuda(torch.zeros(BLOCKS, BS, 576, dtype=torch.bfloat16)) for k in caches((1,))}
    with pytest.raises(ValueError, match="MLA"):
        gpu_cache_of(mla, SPEC)
    hnd = {k: FakeCuda(v.transpose(2, 3)) for k, v in caches((2, BLOCKS, HEADS, BS, DIM)).items()}
    with pytest.raises(ValueError, match="contiguous"):
        gpu_cache_of(hnd, SPEC)
    wrong = {k: FakeCuda(v.float()) for k, v in caches((2, BLOCKS, BS, HEADS, DIM)).items()}
    with pytest.raises(ValueError, match="dtype"):
        gpu_cache_of(wrong, SPEC)


@pytest.mark.parametrize("layers,groups", [(32, 8), (3, 2), (5, 5), (7, 3), (1, 1)])
def test_layer_group_is_gpu_h_grouping(layers, groups):
    for layer in range(layers):
        g = layer_group(layer, layers, groups)
        assert g * layers // groups <= layer < (g + 1) * layers // groups   # include/kvtier/gpu.h


def test_load_plan_never_writes_a_block_the_engine_holds():
    first, skipped = load_plan(np.array([[-1, 4], [5, 6], [7, 8]]))
    assert first == 1 and skipped.tolist() == [4]          # chunk 0 shares a block: recomputed
    first, skipped = load_plan(np.array([[5, 6], [7, 8]]))
    assert first == 0 and skipped.size == 0
    first, skipped = load_plan(np.array([[-1, -1]]))
    assert first == 1 and skipped.size == 0


def test_without_a_gpu_cuda_caches_are_refused_with_the_reason(file_tier):
    if kvtier.gpu.available():
        pytest.skip("a GPU is usable here: the refusal path does not apply")
    worker = KvtierConnectorCore("worker", SPEC, {"tiers": file_tier[0], "chunk_tokens": CHUNK})
    fake = {k: FakeCuda(v) for k, v in caches((2, BLOCKS, BS, HEADS, DIM)).items()}
    with pytest.raises(ValueError, match="GPU path") as e:
        worker.register_kv_caches(fake)
    assert kvtier.gpu.why_not() in str(e.value)
    worker.shutdown()


def _gpu_reason():
    if not torch.cuda.is_available():
        return "torch has no CUDA device here (Debian's CPU build of torch, or no GPU)"
    return kvtier.gpu.why_not()


def test_cuda_caches_reload_equals_recompute(file_tier):
    reason = _gpu_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    url = file_tier[0]

    spec = ModelSpec(model="test/llama-gpu", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                     kv_dtype="float32", block_size=BS)   # the driver's reference rows are fp32

    def engine():
        cfg = {"tiers": url, "chunk_tokens": CHUNK, "layer_groups": 2}
        sched, worker = KvtierConnectorCore("scheduler", spec, cfg), KvtierConnectorCore("worker", spec, cfg)
        cache = FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM, device="cuda")
        return MiniEngine(sched, worker, cache, BLOCKS)

    tokens = [(7919 + i * 31) % 32000 for i in range(3 * CHUNK + 5)]
    first = engine()
    first.add("a", tokens)
    first.run()
    first.worker.shutdown()
    second = engine()
    second.add("b", tokens)
    second.run()
    assert second.kv_ok["b"] and not second.load_error_blocks
    assert second.worker.stats()["loaded_chunks"] == 3
    second.worker.shutdown()
    second.sched.shutdown()
    first.sched.shutdown()


def test_connector_run_of_gpu_e2e_smoke_on_cpu(tmp_path):
    """scripts/gpu-e2e.sh's connector step (python/gpu_e2e/connector_run.py) on the host path: the
    same logic as on a GPU, a tiny model: loaded through the connector, tokens equal to recompute."""
    import json
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))   # python/: gpu_e2e
    from gpu_e2e import connector_run
    out = tmp_path / "connector.json"
    assert connector_run.main(["--out", str(out), "--dir", str(tmp_path / "scratch"), "--device", "cpu",
                               "--small", "--contexts", "64", "--chunk-tokens", "32", "--decode", "4"]) == 0
    result = json.loads(out.read_text())
    assert result["complete"] and [lv["tier"] for lv in result["levels"]] == ["mem", "file"]
    assert all(lv["tokens_equal"] and lv["loaded_chunks"] == 2 for lv in result["levels"])
