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
from vllm_v1_driver import FakeCuda, FlashAttnCache, LatentCache, MiniEngine  # noqa: E402

import kvtier  # noqa: E402
import kvtier.gpu  # noqa: E402
from kvtier.connectors.vllm import gpu_paged  # noqa: E402
from kvtier.connectors.vllm.host_paged import load_async, save_async  # noqa: E402
from kvtier.connectors.vllm.gpu_paged import (device_paged_cache, gpu_cache_of, is_classic, layer_group,  # noqa: E402
                                          layer_major, load_plan, piece_plan)
from kvtier.connectors.vllm.kv_caches import paged_cache_of  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

BS, CHUNK, LAYERS, HEADS, DIM, BLOCKS = 16, 32, 3, 2, 8, 64
SPEC = ModelSpec(model="test/llama-gpu", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                 kv_dtype="bfloat16", block_size=BS)


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


def test_layouts_the_block_table_plan_cannot_address_are_refused_by_it():
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


LATENT = 40
MLA_SPEC = ModelSpec(model="test/mla-gpu", revision="r1", layers=LAYERS, kv_heads=1, head_dim=LATENT,
                     kv_dtype="bfloat16", block_size=BS, attention="mla")
# (name, spec, kv_cache_layout, per-layer CPU tensor): the layouts that go by pieces on CUDA.
PIECE_LAYOUTS = [
    ("mla", MLA_SPEC, "auto", lambda: torch.randn(BLOCKS, BS, LATENT).to(torch.bfloat16)),
    ("mla_padded", MLA_SPEC, "auto", lambda: torch.randn(BLOCKS, BS + 2, LATENT).to(torch.bfloat16)[:, :BS]),
    ("flashinfer", SPEC, "auto", lambda: torch.randn(BLOCKS, 2, BS, HEADS, DIM).to(torch.bfloat16)),
    ("hnd", SPEC, "cpu_attn", lambda: torch.randn(2, BLOCKS, HEADS, BS, DIM).to(torch.bfloat16)),
]


def _blocks(n_chunks: int, seed: int) -> np.ndarray:
    """A block table of ``n_chunks`` chunks: shuffled blocks, with a run of consecutive ones (pieces that
    span several blocks)."""
    per = CHUNK // BS
    ids = np.random.default_rng(seed).permutation(BLOCKS)[:n_chunks * per]
    ids[:per] = [10 + i for i in range(per)]
    return ids.reshape(n_chunks, per)


@pytest.mark.parametrize("name,spec,layout,make", PIECE_LAYOUTS, ids=[p[0] for p in PIECE_LAYOUTS])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_gpu_piece_list_is_the_host_paths_list(name, spec, layout, make, groups):
    """One description, two executors: for an MLA, FlashInfer or head-major cache on CUDA, the pieces
    kvtier.gpu gets are exactly the host path's pieces for the same tensors and blocks, and each piece's
    layer group is gpu.h's group of the layer of its first region (non-decreasing within a chunk)."""
    cpu = {f"model.layers.{i}.attn": make() for i in range(LAYERS)}
    host = paged_cache_of(cpu, spec, layout)
    dev, device = device_paged_cache({k: FakeCuda(v, 1) for k, v in cpu.items()}, spec, layout)
    assert device == 1 and dev.layer_names == host.layer_names
    assert not is_classic(dev, spec, layout)
    blocks = _blocks(3, groups)
    want_pieces, want_counts = host.pieces(blocks)
    used = groups if layer_major(dev) else 1   # what GpuWorker opens its transfer with
    assert layer_major(dev) == (name != "hnd")
    pieces, counts, ids = piece_plan(dev, blocks, LAYERS, used)
    assert np.array_equal(pieces, want_pieces) and np.array_equal(counts, want_counts)
    assert int(pieces[:, 1].sum()) == 3 * kvtier_chunk_bytes(spec)
    if used == 1:
        assert ids is None
        return
    starts = np.concatenate([[0], np.cumsum(counts.astype(np.int64))])
    region = host.region_bytes
    for c in range(3):
        chunk_ids = ids[starts[c]:starts[c + 1]]
        assert np.all(np.diff(chunk_ids.astype(np.int64)) >= 0)
        offsets = np.concatenate([[0], np.cumsum(pieces[starts[c]:starts[c + 1], 1].astype(np.int64))])[:-1]
        for off, g in zip(offsets, chunk_ids):   # the piece's first region, from its chunk offset
            first_region = int(off) // (region * blocks.shape[1])
            assert g == layer_group(int(host.region_layer[first_region]), LAYERS, used)


def kvtier_chunk_bytes(spec: ModelSpec) -> int:
    return CHUNK * LAYERS * (spec.head_dim * 2 if spec.attention == "mla" else 2 * HEADS * DIM * 2)


def test_flash_attention_on_cuda_keeps_the_block_table_plan():
    cpu = caches((2, BLOCKS, BS, HEADS, DIM))
    dev, _ = device_paged_cache({k: FakeCuda(v) for k, v in cpu.items()}, SPEC)
    assert is_classic(dev, SPEC, "auto") and layer_major(dev)
    assert np.array_equal(dev.pieces(_blocks(2, 0))[0], paged_cache_of(cpu, SPEC).pieces(_blocks(2, 0))[0])


def test_cuda_descriptions_keep_the_host_paths_refusals():
    """Unknown shapes, a dtype other than the configuration's, a cache that auto would have to guess,
    and tensors on two devices (or a CPU one among CUDA ones) are refused before any transfer."""
    def fake(shape, dtype=torch.bfloat16, index=0):
        return {f"model.layers.{i}.attn": FakeCuda(torch.zeros(shape, dtype=dtype), index) for i in range(LAYERS)}
    with pytest.raises(ValueError, match="unknown KV cache shape"):
        device_paged_cache(fake((BLOCKS, BS, HEADS, DIM, 1, 1)), SPEC)
    with pytest.raises(ValueError, match="dtype"):
        device_paged_cache(fake((2, BLOCKS, BS, HEADS, DIM), torch.float32), SPEC)
    with pytest.raises(ValueError, match="cpu_attn"):     # vLLM's CPU backend's shape: never read as NHD
        device_paged_cache(fake((2, BLOCKS, HEADS, BS, DIM)), SPEC)
    same = ModelSpec(model="m", layers=LAYERS, kv_heads=BS, head_dim=DIM, kv_dtype="bfloat16", block_size=BS)
    with pytest.raises(ValueError, match="kv_cache_layout"):  # kv_heads == block_size: auto never guesses
        device_paged_cache(fake((2, BLOCKS, BS, BS, DIM)), same)
    with pytest.raises(ValueError, match="MLA latent cache"):
        device_paged_cache(fake((BLOCKS, BS, LATENT)), SPEC)
    mixed = fake((2, BLOCKS, BS, HEADS, DIM))
    mixed["model.layers.1.attn"] = FakeCuda(torch.zeros(2, BLOCKS, BS, HEADS, DIM, dtype=torch.bfloat16), 1)
    with pytest.raises(ValueError, match="devices"):
        device_paged_cache(mixed, SPEC)
    mixed["model.layers.1.attn"] = torch.zeros(2, BLOCKS, BS, HEADS, DIM, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a cpu tensor"):
        device_paged_cache(mixed, SPEC)


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


@pytest.mark.parametrize("layout", ["flash_attn", "flashinfer", "mla", "cpu_attn"])
def test_cuda_caches_reload_equals_recompute(file_tier, layout):
    """Through the connector on a GPU: FlashAttention by the block-table plan, FlashInfer, MLA (padded
    blocks) and head-major (cpu_attn) caches by pieces; the second engine's blocks are handed out in
    reverse, so the chunks land in other blocks than they were saved from."""
    reason = _gpu_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    url = file_tier[0]

    mla = layout == "mla"
    spec = ModelSpec(model=f"test/gpu-{layout}", revision="r1", layers=LAYERS, kv_heads=1 if mla else HEADS,
                     head_dim=LATENT if mla else DIM, kv_dtype="float32", block_size=BS,
                     attention="mla" if mla else "mha")   # the driver's reference rows are fp32

    def engine(reverse=False):
        cfg = {"tiers": url, "chunk_tokens": CHUNK, "layer_groups": 2, "kv_cache_layout": "auto" if mla else layout}
        sched, worker = KvtierConnectorCore("scheduler", spec, cfg), KvtierConnectorCore("worker", spec, cfg)
        cache = LatentCache(LAYERS, BLOCKS, BS, LATENT, pad=8, device="cuda") if mla else \
            FlashAttnCache(LAYERS, BLOCKS, BS, HEADS, DIM, device="cuda", flashinfer=layout == "flashinfer",
                           cpu_attn=layout == "cpu_attn")
        eng = MiniEngine(sched, worker, cache, BLOCKS)
        if reverse:
            eng.free.reverse()
        return eng

    tokens = [(7919 + i * 31) % 32000 for i in range(3 * CHUNK + 5)]
    first = engine()
    first.add("a", tokens)
    first.run()
    first.worker.shutdown()
    second = engine(reverse=True)
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


# ---- a failed load after a successful one in the same step (kvtier.gpu played by the host path) -------
STREAM = 0x5EED
F32_SPEC = ModelSpec(model="test/llama-gpu-f32", revision="r1", layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                     kv_dtype="float32", block_size=BS)  # the driver's reference rows are fp32


class _CudaLooking(FlashAttnCache):
    """A FlashAttnCache on the CPU whose registered tensors say they are on CUDA (FakeCuda)."""

    def __init__(self) -> None:
        super().__init__(LAYERS, BLOCKS, BS, HEADS, DIM)
        self.real = self.tensors
        self.tensors = {k: FakeCuda(v) for k, v in self.real.items()}

    def kv(self, layer: int, kv: int):
        return self.real[self.names[layer]][kv]


class _HostTransfer:
    """kvtier.gpu.Transfer's block-table calls run by kvtier's host path over the same blocks, with the C
    API's bookkeeping of the last load for the waits: a load that succeeds replaces it; a load that fails
    raises and, with ``drops_last`` (the C API before this fix), drops it too, so a wait then answers
    INVALID_ARGUMENT "no load to wait for". Loads listed in ``fail`` (by call number) fail."""

    drops_last, fail, made = False, set(), []

    def __init__(self, ns, cache, layer_groups=1, **_) -> None:
        self.groups, self.calls, self.last, self.waits = layer_groups, 0, None, []
        self.host = None  # set by the test: the host path's PagedCache over the same tensors
        _HostTransfer.made.append(self)

    def load(self, store, ns, keys, table, after_stream=None) -> int:
        assert after_stream == STREAM
        self.calls += 1
        if self.calls in self.fail:
            if self.drops_last:
                self.last = None
            raise kvtier.KvtierError(kvtier.Status.IO_ERROR, f"load {self.calls} failed")
        handle = load_async(store, ns, keys, self.host, np.asarray(table).reshape(len(keys), -1))
        try:
            done = handle.wait()
        finally:
            handle.close()
        self.last = self.calls
        return done

    def save(self, store, ns, keys, table, after_stream=None) -> None:
        assert after_stream == STREAM
        handle = save_async(store, ns, keys, self.host, np.asarray(table).reshape(len(keys), -1))
        try:
            handle.wait()
        finally:
            handle.close()

    def _need_load(self) -> None:
        if self.last is None:
            raise kvtier.KvtierError(kvtier.Status.INVALID_ARGUMENT, "kvtier_gpu_wait_layers: no load to wait for")

    def stream_wait_layers(self, group, stream) -> None:
        self._need_load()
        self.waits.append((self.last, group, stream))

    def wait_layers(self, group) -> None:
        self._need_load()

    def close(self) -> None:
        pass


@pytest.mark.parametrize("drops_last", [True, False], ids=["library_drops_the_last_load", "library_keeps_it"])
def test_a_failed_load_after_a_good_one_in_the_same_step_is_a_miss_not_an_exception(file_tier, monkeypatch,
                                                                                    drops_last):
    """Two requests load in one step on CUDA caches; the second's load fails. The engine sees a per-request
    miss (the second request's blocks are load errors and recomputed), never an exception from a layer
    wait, and the engine's stream still waits for the whole of the first request's load before the forward
    reads it, whatever the library does with the failed load's slot."""
    monkeypatch.setattr(gpu_paged.gpu, "why_not", lambda device=0: "")
    monkeypatch.setattr(gpu_paged.gpu, "Transfer", _HostTransfer)
    monkeypatch.setattr(gpu_paged.gpu, "HostPins", lambda store, device=0: types.SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(gpu_paged, "_current_stream", lambda: STREAM)
    monkeypatch.setattr(_HostTransfer, "drops_last", drops_last)
    monkeypatch.setattr(_HostTransfer, "made", [])
    cfg = {"tiers": file_tier[0], "chunk_tokens": CHUNK, "layer_groups": 2}

    def engine():
        sched, worker = KvtierConnectorCore("scheduler", F32_SPEC, cfg), KvtierConnectorCore("worker", F32_SPEC, cfg)
        cache = _CudaLooking()
        eng = MiniEngine(sched, worker, cache, BLOCKS)
        transfer = _HostTransfer.made[-1]
        transfer.host = paged_cache_of(cache.real, F32_SPEC)
        return eng, transfer

    a = [(7919 + i * 31) % 32000 for i in range(2 * CHUNK + 3)]
    b = [(104729 + i * 17) % 32000 for i in range(2 * CHUNK + 5)]
    first, _ = engine()
    first.add("a", a)
    first.add("b", b)
    first.run()
    assert first.worker.stats()["saved_chunks"] == 4
    first.worker.shutdown()
    first.sched.shutdown()

    monkeypatch.setattr(_HostTransfer, "fail", {2})  # the step's second load: request b's
    second, transfer = engine()
    second.add("a", a)
    second.add("b", b)
    second.run()                                      # no exception into the engine
    assert transfer.calls == 2
    assert second.kv_ok == {"a": True, "b": True}     # b recomputed
    assert second.worker.stats()["loaded_chunks"] == 2
    assert second.load_error_blocks                   # b's blocks, reported as load errors
    # the engine's stream waited for the last layer group of a's load (load 1) before the forward
    assert (1, transfer.groups - 1, STREAM) in transfer.waits
    second.worker.shutdown()
    second.sched.shutdown()
