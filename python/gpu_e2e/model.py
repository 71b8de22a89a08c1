"""A llama-3.1-8b-shaped decoder in PyTorch over a real paged KV cache in GPU memory.

Random bf16 weights; one layer's weights serve every layer (the FLOPs and the KV are those of the full
model, the weights' memory is not). The KV cache is vLLM's layout: per layer one K and one V tensor
[num_blocks][block_tokens][kv_heads][head_dim]; a request's token t is in block table[t // block_tokens],
row t % block_tokens. Attention runs through torch's scaled_dot_product_attention (written out on a torch
without it). Runs on CUDA at full size and on the CPU at a small Shape (the connector tests).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    layers: int = 32
    hidden: int = 4096
    q_heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 14336
    vocab: int = 128256
    rope_theta: float = 500000.0
    eps: float = 1e-5


LLAMA_3_1_8B = Shape()


class PagedKv:
    """Per layer a K and a V tensor [num_blocks][block_tokens][kv_heads][head_dim] (bf16)."""

    def __init__(self, shape: Shape, num_blocks: int, block_tokens: int, device: torch.device) -> None:
        self.shape, self.num_blocks, self.block_tokens = shape, num_blocks, block_tokens
        dims = (num_blocks, block_tokens, shape.kv_heads, shape.head_dim)
        self.k = [torch.zeros(dims, dtype=torch.bfloat16, device=device) for _ in range(shape.layers)]
        self.v = [torch.zeros(dims, dtype=torch.bfloat16, device=device) for _ in range(shape.layers)]

    def slots(self, table: Sequence[int], start: int, end: int, device: torch.device) -> torch.Tensor:
        """Flat slot ids of tokens [start, end) of a request with block table `table`."""
        t = torch.arange(start, end, device=device)
        blocks = torch.tensor(table, dtype=torch.long, device=device)
        return blocks[t // self.block_tokens] * self.block_tokens + t % self.block_tokens

    def _flat(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.view(-1, self.shape.kv_heads, self.shape.head_dim)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self._flat(self.k[layer]).index_copy_(0, slots, k)
        self._flat(self.v[layer]).index_copy_(0, slots, v)

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._flat(self.k[layer]).index_select(0, slots), self._flat(self.v[layer]).index_select(0, slots)

    def addresses(self) -> tuple[list[int], list[int]]:
        return [t.data_ptr() for t in self.k], [t.data_ptr() for t in self.v]


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [T, heads, head_dim]; rotate-half form of llama.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
          attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """torch's scaled_dot_product_attention; on a torch without it (Debian's 1.13, CPU runs) the
    same attention written out in fp32."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_square: bool, offset: int) -> torch.Tensor:
    """q [T, qh, d], k/v [S, kvh, d] -> [T, qh*d]. `causal_square`: S == T from position 0; else the
    queries are the last T positions of S (query i sees keys j <= offset + i)."""
    T, qh, d = q.shape
    S, kvh, _ = k.shape
    qt, kt, vt = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    # K/V heads repeated for the query heads (GQA as MHA): every SDPA backend takes that, so a long
    # prefill never falls back to the math kernel's S x S matrix.
    rep = qh // kvh
    kt, vt = kt.repeat_interleave(rep, dim=1), vt.repeat_interleave(rep, dim=1)
    if causal_square:
        out = _sdpa(qt, kt, vt, is_causal=True)
    else:
        mask = None
        if T > 1:
            qpos = torch.arange(offset, offset + T, device=q.device)[:, None]
            mask = torch.arange(S, device=q.device)[None, :] <= qpos
        out = _sdpa(qt, kt, vt, attn_mask=mask)
    return out[0].transpose(0, 1).reshape(T, qh * d)


class Model:
    """The decoder. forward() writes the new tokens' K and V into the paged cache and returns the
    greedy next token (a 0-dim tensor on the GPU: no host sync)."""

    def __init__(self, shape: Shape, device: torch.device, seed: int = 0) -> None:
        self.shape, self.device = shape, device
        g = torch.Generator(device=device)
        g.manual_seed(seed)

        def w(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, generator=g, device=device, dtype=torch.bfloat16) * 0.02

        s = shape
        self.embed = w(s.vocab, s.hidden)
        self.lm_head = w(s.vocab, s.hidden)
        self.wqkv = w((s.q_heads + 2 * s.kv_heads) * s.head_dim, s.hidden)
        self.wo = w(s.hidden, s.q_heads * s.head_dim)
        self.w_gate_up = w(2 * s.ffn, s.hidden)
        self.w_down = w(s.hidden, s.ffn)
        ones = torch.ones(s.hidden, dtype=torch.bfloat16, device=device)
        self.ln1, self.ln2, self.ln_f = ones, ones.clone(), ones.clone()
        self.inv_freq = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=device).float() / s.head_dim))

    @torch.inference_mode()
    def forward(self, kv: PagedKv, tokens: torch.Tensor, start: int, slots_all: torch.Tensor,
                before_layer: Optional[Callable[[int], None]] = None) -> torch.Tensor:
        """Tokens [T] at positions [start, start + T) of a request whose first start tokens' KV is in
        the cache at slots_all[:start]; slots_all covers at least start + T tokens."""
        s = self.shape
        T = tokens.shape[0]
        x = self.embed.index_select(0, tokens)
        pos = torch.arange(start, start + T, device=self.device).float()
        ang = pos[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos(), ang.sin()
        new = slots_all[start:start + T]
        qd, kd = s.q_heads * s.head_dim, s.kv_heads * s.head_dim
        for layer in range(s.layers):
            if before_layer is not None:
                before_layer(layer)
            h = _rms_norm(x, self.ln1, s.eps)
            qkv = h @ self.wqkv.t()
            q = _rope(qkv[:, :qd].view(T, s.q_heads, s.head_dim), cos, sin)
            k = _rope(qkv[:, qd:qd + kd].view(T, s.kv_heads, s.head_dim), cos, sin)
            v = qkv[:, qd + kd:].reshape(T, s.kv_heads, s.head_dim)
            kv.write(layer, new, k, v)
            if start == 0:
                o = _attention(q, k, v, True, 0)
            else:
                kk, vv = kv.read(layer, slots_all[:start + T])
                o = _attention(q, kk, vv, False, start)
            x = x + o @ self.wo.t()
            h = _rms_norm(x, self.ln2, s.eps)
            gate, up = (h @ self.w_gate_up.t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ self.w_down.t()
        last = _rms_norm(x[-1:], self.ln_f, s.eps)
        return (last @ self.lm_head.t())[0].argmax()

    @torch.inference_mode()
    def decode(self, kv: PagedKv, first: torch.Tensor, start: int, slots_all: torch.Tensor, n: int) -> list[int]:
        """Greedy tokens: `first` (at position start) and n - 1 more; the cache's slots cover them."""
        out = [first]
        tok = first
        for i in range(n - 1):
            tok = self.forward(kv, tok.view(1), start + i, slots_all)
            out.append(tok)
        return [int(t) for t in out]
