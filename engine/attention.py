"""Paged attention: queries of one step against every cached position of the sequence.

`StepContext` carries where this step's keys and values go (slot_mapping) and where the
whole context lives (context_slots), so `Decoder.forward(ids, positions, ctx)` stays clean.
The torch path here is the reference: it gathers the context's K/V through the page table.
Faster kernels plug in through `ctx.backend` and must match it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.kv_cache import PagePool


@dataclass
class StepContext:
    pool: PagePool
    slot_mapping: torch.Tensor  # [T] pool slots this step's K/V are written to
    context_slots: torch.Tensor  # [L] pool slots of positions 0..L-1 (L = context after this step)
    causal: bool = True  # False: the step's queries see each other both ways (DFlash block)
    backend: str = "torch"


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    layer: int,
    ctx: StepContext,
    scale: float,
) -> torch.Tensor:  # [T, H, D]
    k_cache, v_cache = ctx.pool.k[layer], ctx.pool.v[layer]
    k_cache.index_copy_(0, ctx.slot_mapping, k)
    v_cache.index_copy_(0, ctx.slot_mapping, v)
    return reference_attention(q, k_cache[ctx.context_slots], v_cache[ctx.context_slots], ctx.causal, scale)


def reference_attention(
    q: torch.Tensor,  # [T, H, D], the last T positions of the context
    keys: torch.Tensor,  # [L, KVH, D]
    values: torch.Tensor,  # [L, KVH, D]
    causal: bool,
    scale: float,
) -> torch.Tensor:
    t, h, _ = q.shape
    n = keys.shape[0]
    group = h // keys.shape[1]
    keys = keys.repeat_interleave(group, dim=1).transpose(0, 1)  # [H, L, D]
    values = values.repeat_interleave(group, dim=1).transpose(0, 1)
    scores = torch.matmul(q.transpose(0, 1).float(), keys.float().transpose(1, 2)) * scale  # [H, T, L]
    if causal and t > 1:
        # query i sits at position n - t + i and sees keys 0..n - t + i
        qpos = torch.arange(n - t, n, device=q.device)[:, None]
        kpos = torch.arange(n, device=q.device)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, values.float())  # [H, T, D]
    return out.transpose(0, 1).to(q.dtype)
