"""Reload equals recompute through KvtierConnector: python/gpu_e2e's llama-shaped decoder at a small
size on the CPU, its paged KV in vLLM's FlashAttention layout (per layer [2, num_blocks, block_size,
kv_heads, head_dim], bf16), returning sessions served through the connector (vllm_v1_driver's engine
loop): greedy tokens identical to recomputing the same prefix."""

from __future__ import annotations

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps.sh)")

_HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parents[1]))   # python/: gpu_e2e
from connector_helpers import file_tier, requires_library  # noqa: E402,F401
from vllm_v1_driver import MiniEngine  # noqa: E402

from gpu_e2e.model import Model, PagedKv, Shape  # noqa: E402
from kvtier.connectors.vllm_v1 import KvtierConnectorCore, ModelSpec  # noqa: E402

pytestmark = requires_library

SHAPE = Shape(layers=2, hidden=64, q_heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=512)
BS, CHUNK, BLOCKS, DECODE = 16, 32, 96, 6
SPEC = ModelSpec(model="gpu_e2e/llama-tiny", revision="seed0", layers=SHAPE.layers, kv_heads=SHAPE.kv_heads,
                 head_dim=SHAPE.head_dim, kv_dtype="bfloat16", block_size=BS)
CPU = torch.device("cpu")


class FlashAttnPagedKv(PagedKv):
    """The model's PagedKv over vLLM FlashAttention tensors: K of layer l is tensors[l][0]."""

    def __init__(self, shape: Shape, num_blocks: int, block_tokens: int) -> None:
        self.shape, self.num_blocks, self.block_tokens = shape, num_blocks, block_tokens
        dims = (2, num_blocks, block_tokens, shape.kv_heads, shape.head_dim)
        self.tensors = {f"model.layers.{i}.self_attn.attn": torch.zeros(dims, dtype=torch.bfloat16)
                        for i in range(shape.layers)}
        self.k = [t[0] for t in self.tensors.values()]
        self.v = [t[1] for t in self.tensors.values()]
        self.names = list(self.tensors)
        self.block_size, self.kv_heads, self.head_dim = block_tokens, shape.kv_heads, shape.head_dim


class ModelEngine(MiniEngine):
    """MiniEngine whose compute is the model; a finished prefill decodes DECODE greedy tokens."""

    def __init__(self, model: Model, url: str, step_tokens: int) -> None:
        cfg = {"tiers": url, "chunk_tokens": CHUNK}
        self.model = model
        self.kvcache = FlashAttnPagedKv(SHAPE, BLOCKS, BS)
        self.answers: dict[str, list] = {}
        super().__init__(KvtierConnectorCore("scheduler", SPEC, cfg), KvtierConnectorCore("worker", SPEC, cfg),
                         self.kvcache, BLOCKS, step_tokens=step_tokens, compute=self._forward)
        self.check = lambda req: True   # the answers are what this test compares

    def _forward(self, req, start: int, end: int) -> None:
        tokens = torch.tensor(req.prompt_token_ids, dtype=torch.long)
        n = len(req.prompt_token_ids)
        extra = [self.free.pop() for _ in range(-(-DECODE // BS) + 1)] if end == n else []
        slots = self.kvcache.slots(req.block_ids + extra, 0, n + DECODE, CPU)
        first = self.model.forward(self.kvcache, tokens[start:end], start, slots)
        if end == n:
            self.answers[req.request_id] = self.model.decode(self.kvcache, first, n, slots, DECODE)
            self.free += extra

    def close(self) -> None:
        self.worker.shutdown()
        self.sched.shutdown()


def recompute(model: Model, tokens: list, hit: int, origin: list) -> list:
    """The same prefill without the connector: ``origin`` (the first visit, whose first ``hit``
    tokens are this session's) computed again from position 0, then this session's tokens after
    ``hit`` over that prefix."""
    kv = FlashAttnPagedKv(SHAPE, BLOCKS, BS)
    assert origin[:hit] == tokens[:hit]
    first_table = list(range(-(-len(origin) // BS)))
    model.forward(kv, torch.tensor(origin), 0, kv.slots(first_table, 0, len(origin), CPU))
    n = len(tokens)
    table = first_table[:hit // BS] + list(range(len(first_table), len(first_table) + -(-(n + DECODE) // BS)))
    slots = kv.slots(table, 0, n + DECODE, CPU)
    first = model.forward(kv, torch.tensor(tokens[hit:]), hit, slots)
    return model.decode(kv, first, n, slots, DECODE)


def test_returning_sessions_decode_as_recompute(file_tier):
    url, _ = file_tier
    model = Model(SHAPE, CPU, seed=0)
    g = torch.Generator().manual_seed(1)
    base = [torch.randint(0, SHAPE.vocab, (n,), generator=g).tolist() for n in (3 * CHUNK, 2 * CHUNK)]
    suffix = [torch.randint(0, SHAPE.vocab, (7,), generator=g).tolist() for _ in range(3)]
    # first visit: each context prefilled from position 0; its chunks saved through the connector
    first = ModelEngine(model, url, step_tokens=1 << 30)
    first.add("v0", base[0])
    first.add("v1", base[1])
    first.run()
    assert first.worker.stats()["saved_chunks"] == 3 + 2
    first.close()
    # returning sessions in a new engine: both contexts with new turns, and one sharing base[0]'s
    # first chunk only (a partial hit)
    returning = {"s0": (base[0] + suffix[0], 3 * CHUNK, base[0]),
                 "s1": (base[1] + suffix[1], 2 * CHUNK, base[1]),
                 "s2": (base[0][:CHUNK] + suffix[2] + base[1][:CHUNK], CHUNK, base[0])}
    second = ModelEngine(model, url, step_tokens=1 << 30)
    for sid, (tokens, hit, _) in returning.items():
        r = second.add(sid, tokens)
        assert second.sched.get_num_new_matched_tokens(r, 0) == (hit, False)
    second.run()
    stats = second.worker.stats()
    assert stats["loaded_chunks"] == 3 + 2 + 1 and stats["load_errors"] == 0
    for sid, (tokens, hit, origin) in returning.items():
        assert second.answers[sid] == recompute(model, tokens, hit, origin), sid
    second.close()
