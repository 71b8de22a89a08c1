"""A miniature of vLLM's v1 engine loop around a KV connector, for the KvtierConnector driver tests.

vLLM cannot be installed here. This drives the connector the way vLLM's scheduler
(vllm/v1/core/sched/scheduler.py) and worker (vllm/v1/worker/kv_connector_model_runner_mixin.py, the
attention layers' wait_for_layer_load / save_kv_layer) call it, with vLLM's argument shapes
(Request, KVCacheBlocks.get_block_ids(), SchedulerOutput with NewRequestData / CachedRequestData):

  scheduler: get_num_new_matched_tokens -> allocate -> update_state_after_alloc ->
             build_connector_meta -> (worker step) -> finished_recving / finished_sending /
             invalid blocks -> request_finished on completion or abort
  worker:    handle_preemptions -> bind_connector_metadata -> start_load_kv ->
             per layer wait_for_layer_load, compute, save_kv_layer -> wait_for_save ->
             get_finished -> get_block_ids_with_load_errors -> clear_connector_metadata

A request is a prompt prefill (in steps of at most ``step_tokens`` tokens) that ends when its prompt
is computed; it may carry vLLM's ``lora_request``, ``mm_features``, ``cache_salt`` and
``prompt_embeds``. As vLLM's scheduler (``_update_from_kv_xfer_finished``) does, the driver frees a
finished request's blocks at its first ``finished_recving`` or ``finished_sending`` report and fails
on any later report of it (in vLLM, ``assert req_id in self.requests`` ends EngineCore). ``compute`` writes the KV of tokens [start, end) into the paged cache: a caller's model
or the default ``reference_rows`` (a deterministic function of the token prefix).
"""

from __future__ import annotations

import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

WAITING, WAITING_FOR_REMOTE_KVS, RUNNING, FINISHED = "waiting", "remote", "running", "finished"
PREEMPTED = "preempted"



def vllm_config(model: str, layers: int, kv_heads: int, head_size: int, block_size: int, extra: dict,
                use_mla: bool = False, device: Optional[str] = None, model_fields: Optional[dict] = None,
                cache_dtype: str = "auto", **parallel: Any) -> Any:
    """The fields of vLLM's VllmConfig that the connector's adapter reads: a float32 model of revision
    "r1" with these dimensions, one TP rank unless ``parallel`` says otherwise (parallel_config fields),
    ``extra`` as kv_connector_extra_config, and a device_config when ``device`` is given.
    ``model_fields``: other ModelConfig fields (dtype, quantization, hf_config, ...);
    ``cache_dtype``: CacheConfig.cache_dtype (--kv-cache-dtype)."""
    import types

    class ModelConfig:  # what vLLM's ModelConfig answers
        revision, dtype = "r1", "torch.float32"

        def __init__(self) -> None:
            self.model, self.use_mla = model, use_mla
            for name, value in (model_fields or {}).items():
                setattr(self, name, value)

        def get_num_layers(self, pc: Any) -> int:
            return layers

        def get_num_kv_heads(self, pc: Any) -> int:
            return kv_heads

        def get_head_size(self) -> int:
            return head_size

    cfg = types.SimpleNamespace(
        model_config=ModelConfig(), cache_config=types.SimpleNamespace(block_size=block_size, cache_dtype=cache_dtype),
        parallel_config=types.SimpleNamespace(**{"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                                                 "rank": 0, **parallel}),
        kv_transfer_config=types.SimpleNamespace(kv_connector_extra_config=extra))
    if device is not None:
        cfg.device_config = types.SimpleNamespace(device_type=device)
    return cfg

@dataclass
class Request:
    request_id: str
    prompt_token_ids: list
    num_computed_tokens: int = 0
    status: str = WAITING
    block_ids: list = field(default_factory=list)
    local_hit_tokens: int = 0   # tokens the engine's own prefix cache holds (block-aligned)
    aborted: bool = False
    # vLLM's Request fields that change the KV of the same tokens (vllm/v1/request.py)
    lora_request: Any = None    # LoRARequest: lora_name, lora_int_id, lora_path
    mm_features: Any = None     # [MultiModalFeatureSpec]: identifier, mm_position (offset, length)
    cache_salt: Optional[str] = None
    prompt_embeds: Any = None   # a [n, hidden] tensor; prompt_token_ids then None


def lora(name: str, int_id: int = 1, path: Optional[str] = None) -> Any:
    """vLLM's LoRARequest fields (vllm/lora/request.py)."""
    return types.SimpleNamespace(lora_name=name, lora_int_id=int_id, lora_path=path or f"/adapters/{name}")


def image(identifier: str, offset: int, length: int) -> Any:
    """vLLM's MultiModalFeatureSpec fields the prefix cache reads (identifier, mm_position)."""
    return types.SimpleNamespace(identifier=identifier, modality="image",
                                 mm_position=types.SimpleNamespace(offset=offset, length=length, is_embed=None))


class KVCacheBlocks:
    def __init__(self, ids: list) -> None:
        self._ids = list(ids)

    def get_block_ids(self) -> tuple:
        return (list(self._ids),)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list
    block_ids: tuple
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list = field(default_factory=list)
    resumed_req_ids: set = field(default_factory=set)
    new_block_ids: list = field(default_factory=list)
    num_computed_tokens: list = field(default_factory=list)


@dataclass
class KVConnectorOutput:
    finished_sending: set
    finished_recving: set
    invalid_block_ids: set


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict
    finished_req_ids: set
    preempted_req_ids: set
    kv_connector_metadata: Any = None


def reference_rows(tokens: list, start: int, end: int, layer: int, kv: int, width: int) -> torch.Tensor:
    """[end - start, width] fp32 rows: a function of (token prefix, layer, K/V) only."""
    rows = []
    for t in range(start, end):
        seed = hash(tuple(tokens[:t + 1])) % 9973  # ints and tuples of ints hash without a seed
        rows.append(seed + layer * 0.5 + kv * 0.25 + torch.arange(width, dtype=torch.float32) * 1e-3)
    return torch.stack(rows) if rows else torch.empty(0, width)


class FakeCuda:
    """A CPU tensor that reports a CUDA device: what the connector reads of a CUDA tensor (its
    device, shape, dtype, strides and address: device pointer arithmetic checked on host memory)."""

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


class FlashAttnCache:
    """Per layer one tensor [2, num_blocks, block_size, kv_heads, head_dim] (FlashAttention),
    [num_blocks, 2, ...] (FlashInfer) with ``flashinfer=True``, or vLLM's CPU backend's HND
    [2, num_blocks, kv_heads, block_size, head_dim] with ``cpu_attn=True``."""

    parts = (0, 1)  # K and V

    def __init__(self, layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, flashinfer: bool = False, device: str = "cpu",
                 cpu_attn: bool = False) -> None:
        self.block_size, self.kv_heads, self.head_dim = block_size, kv_heads, head_dim
        self.flashinfer, self.cpu_attn = flashinfer, cpu_attn
        shape = ((num_blocks, 2) if flashinfer else (2, num_blocks)) + (
            (kv_heads, block_size) if cpu_attn else (block_size, kv_heads)) + (head_dim,)
        self.tensors = {f"model.layers.{i}.self_attn.attn": torch.zeros(shape, dtype=dtype, device=device)
                        for i in range(layers)}
        self.names = list(self.tensors)

    def kv(self, layer: int, kv: int) -> torch.Tensor:
        t = self.tensors[self.names[layer]]
        return t[:, kv] if self.flashinfer else t[kv]

    def write_rows(self, layer: int, kv: int, block_ids: list, start: int, rows: torch.Tensor) -> None:
        dst = self.kv(layer, kv)
        for i in range(rows.shape[0]):
            t = start + i
            block = dst[block_ids[t // self.block_size]]
            row = rows[i].view(self.kv_heads, self.head_dim)
            if self.cpu_attn:
                block[:, t % self.block_size] = row
            else:
                block[t % self.block_size] = row

    def read_rows(self, layer: int, kv: int, block_ids: list, start: int, end: int) -> torch.Tensor:
        src = self.kv(layer, kv)
        at = (lambda b, r: src[b][:, r]) if self.cpu_attn else (lambda b, r: src[b][r])
        return torch.stack([at(block_ids[t // self.block_size], t % self.block_size).reshape(-1)
                            for t in range(start, end)]).cpu()


class LatentCache:
    """vLLM's MLA backends' cache: per layer one tensor [num_blocks, block_size, latent_dim]
    (vllm/v1/attention/backends/mla/common.py, get_kv_cache_shape), each block ``pad`` values apart
    from the next when ``pad`` (vLLM's page_size_padded)."""

    parts = (0,)  # one latent per token and layer

    def __init__(self, layers: int, num_blocks: int, block_size: int, latent_dim: int,
                 dtype: torch.dtype = torch.float32, pad: int = 0, device: str = "cpu") -> None:
        self.block_size, self.kv_heads, self.head_dim = block_size, 1, latent_dim
        page = block_size * latent_dim + pad
        self.raw = {f"model.layers.{i}.self_attn.attn": torch.zeros(num_blocks * page, dtype=dtype, device=device)
                    for i in range(layers)}
        self.tensors = {n: t.as_strided((num_blocks, block_size, latent_dim), (page, latent_dim, 1))
                        for n, t in self.raw.items()}
        self.names = list(self.tensors)

    def kv(self, layer: int, kv: int) -> torch.Tensor:
        return self.tensors[self.names[layer]]

    def write_rows(self, layer: int, kv: int, block_ids: list, start: int, rows: torch.Tensor) -> None:
        dst = self.kv(layer, kv)
        for i in range(rows.shape[0]):
            t = start + i
            dst[block_ids[t // self.block_size], t % self.block_size] = rows[i]

    def read_rows(self, layer: int, kv: int, block_ids: list, start: int, end: int) -> torch.Tensor:
        src = self.kv(layer, kv)
        return torch.stack([src[block_ids[t // self.block_size], t % self.block_size]
                            for t in range(start, end)]).cpu()


class MiniEngine:
    """One scheduler connector and one worker connector (TP 1) over one FlashAttnCache (or
    LatentCache)."""

    def __init__(self, scheduler: Any, worker: Any, cache: FlashAttnCache, num_blocks: int,
                 step_tokens: int = 1 << 30,
                 compute: Optional[Callable[[Request, int, int], None]] = None) -> None:
        self.sched, self.worker, self.cache = scheduler, worker, cache
        self.free = list(range(num_blocks))
        self.step_tokens = step_tokens
        self.compute = compute or self._reference_compute
        self.reqs: dict[str, Request] = {}
        self.held: dict[str, list] = {}        # blocks kept for the connector after finishing
        self.forgotten: set = set()            # finished requests vLLM freed and forgot
        self.finished_ids: set = set()         # finished since the last step (to the worker)
        self.preempted: set = set()
        self.load_error_blocks: set = set()
        self.recving_done: set = set()
        self.sending_done: set = set()
        self.layer_waits = 0
        self.kv_ok: dict[str, bool] = {}      # request -> its KV equalled the reference at the end
        self.check: Callable[[Request], bool] = self.kv_matches_reference
        worker.register_kv_caches(cache.tensors)

    # ---- the model ------------------------------------------------------------------------------

    def _reference_compute(self, req: Request, start: int, end: int) -> None:
        width = self.cache.kv_heads * self.cache.head_dim
        for layer in range(len(self.cache.names)):
            for kv in self.cache.parts:
                self.cache.write_rows(layer, kv, req.block_ids, start,
                                      reference_rows(req.prompt_token_ids, start, end, layer, kv, width))

    def kv_matches_reference(self, req: Request) -> bool:
        width = self.cache.kv_heads * self.cache.head_dim
        n = len(req.prompt_token_ids)
        return all(torch.equal(self.cache.read_rows(l, kv, req.block_ids, 0, n),
                               reference_rows(req.prompt_token_ids, 0, n, l, kv, width))
                   for l in range(len(self.cache.names)) for kv in self.cache.parts)

    # ---- requests -------------------------------------------------------------------------------

    def add(self, req_id: str, tokens: list, local_hit_tokens: int = 0, **fields: Any) -> Request:
        req = Request(req_id, list(tokens), local_hit_tokens=local_hit_tokens, **fields)
        self.reqs[req_id] = req
        return req

    def _alloc(self, req: Request, tokens: int) -> None:
        need = -(-tokens // self.cache.block_size) - len(req.block_ids)
        if need > len(self.free):
            raise RuntimeError("out of blocks")
        req.block_ids += [self.free.pop(0) for _ in range(max(0, need))]

    def _release(self, req: Request) -> None:
        self.free += req.block_ids
        req.block_ids = []

    def abort(self, req_id: str) -> None:
        req = self.reqs[req_id]
        req.aborted = True
        self._finish(req)

    def preempt(self, req_id: str) -> None:
        """vLLM's preemption: blocks freed now (the worker is told in this step's metadata, before
        the blocks are written again), the request recomputed from scratch later."""
        req = self.reqs[req_id]
        assert req.status == RUNNING
        self._release(req)
        req.num_computed_tokens, req.status = 0, PREEMPTED   # waits again from the next step on
        self.preempted.add(req_id)

    def _finish(self, req: Request) -> None:
        if not req.aborted:   # the prefill is complete: its KV, checked before the blocks go back
            self.kv_ok[req.request_id] = self.check(req)
        hold, _ = self.sched.request_finished(req, list(req.block_ids))
        req.status = FINISHED
        self.finished_ids.add(req.request_id)
        if hold:
            self.held[req.request_id] = req.block_ids
            req.block_ids = []
        else:
            self._release(req)
            self.forgotten.add(req.request_id)

    # ---- one engine step ------------------------------------------------------------------------

    def step(self) -> None:
        new_reqs, cached, scheduled = [], CachedRequestData(), {}
        for req in list(self.reqs.values()):
            if req.status == PREEMPTED:
                req.status = WAITING
            elif req.status == WAITING:
                self._schedule_waiting(req, new_reqs, cached, scheduled)
            elif req.status == RUNNING:
                n = min(self.step_tokens, len(req.prompt_token_ids) - req.num_computed_tokens)
                had = len(req.block_ids)
                self._alloc(req, req.num_computed_tokens + n)
                cached.req_ids.append(req.request_id)
                cached.new_block_ids.append((req.block_ids[had:],) if len(req.block_ids) > had else None)
                cached.num_computed_tokens.append(req.num_computed_tokens)
                scheduled[req.request_id] = n
        out = SchedulerOutput(new_reqs, cached, scheduled, self.finished_ids, self.preempted)
        self.finished_ids, self.preempted = set(), set()
        out.kv_connector_metadata = self.sched.build_connector_meta(out)
        invalid, recving, sending = self._worker_step(out)
        self._after_step(out, invalid, recving, sending)

    def _schedule_waiting(self, req: Request, new_reqs: list, cached: CachedRequestData,
                          scheduled: dict) -> None:
        resumed = bool(req.block_ids)   # back from an async load: vLLM asks the connector no more
        if resumed:
            local, ext, is_async = req.num_computed_tokens, 0, False
        else:
            local = req.local_hit_tokens
            ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
        assert not (is_async and ext == 0)
        if is_async:
            self._alloc(req, local + ext)
            self.sched.update_state_after_alloc(req, KVCacheBlocks(req.block_ids), ext)
            req.num_computed_tokens = local + ext
            req.status = WAITING_FOR_REMOTE_KVS
            return
        done = local + ext
        n = min(self.step_tokens, len(req.prompt_token_ids) - done)
        self._alloc(req, done + n)
        self.sched.update_state_after_alloc(req, KVCacheBlocks(req.block_ids), ext)
        if local and not resumed:
            self._reference_compute(req, 0, local)  # the engine's own prefix cache holds these
        req.num_computed_tokens = done
        req.status = RUNNING
        new_reqs.append(NewRequestData(req.request_id, req.prompt_token_ids, (list(req.block_ids),), done))
        scheduled[req.request_id] = n

    def _worker_step(self, out: SchedulerOutput) -> tuple[set, set, set]:
        w = self.worker
        meta = out.kv_connector_metadata
        w.handle_preemptions(meta)
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        for layer, name in enumerate(self.cache.names):
            w.wait_for_layer_load(name)
            self.layer_waits += 1
            w.save_kv_layer(name, self.cache.tensors[name], None)
        for rid, n in out.num_scheduled_tokens.items():
            req = self.reqs[rid]
            self.compute(req, req.num_computed_tokens, req.num_computed_tokens + n)
        w.wait_for_save()
        sending, recving = w.get_finished(out.finished_req_ids)
        invalid = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        return set(invalid), set(recving or ()), set(sending or ())

    def _free_held(self, rid: str) -> None:
        self.free += self.held.pop(rid, [])
        self.forgotten.add(rid)

    def _first_invalid_token(self, req: Request, invalid: set) -> Optional[int]:
        for i, b in enumerate(req.block_ids):
            if b in invalid:
                return i * self.cache.block_size
        return None

    def _after_step(self, out: SchedulerOutput, invalid: set, recving: set, sending: set) -> None:
        self.sched.update_connector_output(KVConnectorOutput(sending, recving, invalid))
        self.load_error_blocks |= invalid
        self.recving_done |= recving
        self.sending_done |= sending
        # vLLM: recving first, then sending; a finished request is freed and forgotten by the first
        # report, and any later report of it fails vLLM's `assert req_id in self.requests`
        for rid in recving:
            req = self.reqs[rid]
            assert rid not in self.forgotten, f"{rid} reported after vLLM forgot it (EngineCore dies)"
            if req.status == WAITING_FOR_REMOTE_KVS:
                bad = self._first_invalid_token(req, invalid)
                if bad is not None:   # vLLM's recompute policy: computed prefix cut at the bad block
                    req.num_computed_tokens = bad
                req.status = WAITING
            else:
                assert req.status == FINISHED, f"{rid} reported received in status {req.status}"
                self._free_held(rid)
        for rid in sending:
            assert rid not in self.forgotten, f"{rid} reported after vLLM forgot it (EngineCore dies)"
            self._free_held(rid)
        for rid, n in out.num_scheduled_tokens.items():
            req = self.reqs[rid]
            bad = self._first_invalid_token(req, invalid)
            if bad is not None and bad < req.num_computed_tokens:
                req.num_computed_tokens = bad     # this step's output is dropped, recomputed from bad
                continue
            req.num_computed_tokens += n
            if req.num_computed_tokens >= len(req.prompt_token_ids):
                self._finish(req)

    def run(self, limit_s: float = 60.0) -> None:
        """Steps until every request finished and the connector reported every held request (idle
        steps, while kvtier works in the background, 1 ms apart; the limit only guards a hang)."""
        deadline = time.monotonic() + limit_s
        while not (all(r.status == FINISHED for r in self.reqs.values()) and not self.held
                   and not self.finished_ids):
            if time.monotonic() > deadline:
                raise AssertionError("engine did not finish")
            busy = any(r.status in (WAITING, RUNNING, PREEMPTED) for r in self.reqs.values())
            self.step()
            if not busy:
                time.sleep(0.001)


class HungRead:
    """A fault hook: a kvtier load whose tier read hangs (a stalled NFS under fs://) until ``release``;
    it answers as kvtier's Handle does meanwhile (done() False, a timed wait raises KvtierError(BUSY), close()
    waits). Released, the real load starts and writes its blocks, as the late read would."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self._start, self._real, self._released = start, None, threading.Event()

    def release(self) -> None:
        self._real = self._start()
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def _after_release(self, timeout: Optional[float]) -> Any:
        import kvtier
        if not self._released.wait(timeout):
            raise kvtier.KvtierError(kvtier.Status.BUSY, "the tier read hangs")
        return self._real

    def done(self) -> bool:
        return self.released and self._real.done()

    def wait(self, timeout: Optional[float] = None) -> int:
        return self._after_release(timeout).wait(timeout)

    def wait_bytes(self, nbytes: int, timeout: Optional[float] = None) -> int:
        return self._after_release(timeout).wait_bytes(nbytes, timeout)

    def close(self) -> None:
        assert self._released.wait(60), "a hung read was closed before the test released it"
        self._real.close()


def hang_loads(worker: Any, count: int = 1 << 30) -> list:
    """Makes the next ``count`` loads of ``worker`` (a KvtierConnectorCore on the host path) HungReads;
    the list of them, in start order."""
    hung: list = []
    start = worker._start_io

    def start_io(is_load: bool, keys: list, tables: Any) -> Any:
        if not is_load or len(hung) >= count:
            return start(is_load, keys, tables)
        hung.append(HungRead(lambda: start(is_load, keys, tables)))
        return hung[-1]

    worker._start_io = start_io
    return hung


def step_within(engine: Any, hung: list, limit_s: float = 30.0) -> None:
    """engine.step() in a thread: fails (after releasing the hung reads, so the thread ends) when the
    step has not returned within ``limit_s`` -- a forward blocked by a hung read."""
    errors: list = []

    def run() -> None:
        try:
            engine.step()
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        for h in hung:
            if not h.released:
                h.release()
        t.join(limit_s)
        raise AssertionError(f"the step did not return within {limit_s} s: the forward waited for a hung read")
    if errors:
        raise errors[0]
