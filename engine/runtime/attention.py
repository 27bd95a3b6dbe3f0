"""Paged attention: queries of one step against every cached position of the sequence.

A `StepContext` (engine/runtime/step_io.py) carries where this step's keys and values go (slot_mapping) and where the
whole context lives (context_slots), so `Decoder.forward(ids, positions, ctx)` stays clean.
The torch path reads the context's K/V through the page table (a view of the pool when the
sequence's pages are consecutive, a gather otherwise) into torch's fused attention;
`reference_attention` spells the same function out, for the kernels' tests.
With backend "triton" (CUDA) the layer writes K/V itself (engine/kernels/ops.qk_rope_store) and
`attend` reads them in place through a device page table (engine/triton_attention), which is
what lets a step be captured in a CUDA graph; it must match the reference.
"""

from __future__ import annotations

import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.limits import MAX_STEP
from engine.runtime.step_io import BatchLayout, PaddedPrompts, StepContext

# torch's fused attention without cuDNN's kernel, which torch prefers on Hopper: cuDNN builds or
# looks up an execution plan per call on the host, 2.3 ms a call in a batched prefill on the H200
# (torch 2.11), and a prompt, a recompute of past states or a training batch is a new shape nearly
# every time; without it that prefill ran 2.7x faster and a recompute of 32 tokens' states took
# 25 ms of host time for 4 of the GPU's (bench/RESULTS.md, sixteenth run). Its backward also
# failed mid-run on some of the DFlash trainer's masked shapes (an illegal address).
# SPECCHAT_CUDNN_ATTENTION=1 lets torch choose it again, for an A/B.
FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def allow_cudnn(on: bool = True) -> None:
    """Let torch choose cuDNN's kernel again (on), or leave it out (the default)."""
    if on and SDPBackend.CUDNN_ATTENTION not in FUSED_BACKENDS:
        FUSED_BACKENDS.append(SDPBackend.CUDNN_ATTENTION)
    elif not on and SDPBackend.CUDNN_ATTENTION in FUSED_BACKENDS:
        FUSED_BACKENDS.remove(SDPBackend.CUDNN_ATTENTION)


allow_cudnn(os.environ.get("SPECCHAT_CUDNN_ATTENTION") == "1")


def with_cudnn() -> list[SDPBackend]:
    """FUSED_BACKENDS and cuDNN's: for passes of few shapes and no backward, such as the DFlash
    trainer's frozen target over its length buckets, where a plan per shape is paid once."""
    return [*FUSED_BACKENDS, *([] if SDPBackend.CUDNN_ATTENTION in FUSED_BACKENDS else [SDPBackend.CUDNN_ATTENTION])]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backends: list[SDPBackend] | None = None,
         **kwargs) -> torch.Tensor:
    """torch's scaled_dot_product_attention, among `backends` (default FUSED_BACKENDS) on CUDA
    (on the CPU, where cuDNN has no kernel, the choice would only cost each call some 30 us of
    host time)."""
    if not q.is_cuda:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    with sdpa_kernel(FUSED_BACKENDS if backends is None else backends):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


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
    if ctx.batch is not None:
        return per_sequence_attention(q, k_cache, v_cache, ctx.batch, ctx.causal, scale)
    if ctx.context_start is not None:
        run = slice(ctx.context_start, ctx.context_start + ctx.context_slots.shape[0])
        keys, values = k_cache[run], v_cache[run]
    else:
        keys, values = k_cache[ctx.context_slots], v_cache[ctx.context_slots]
    return fused_attention(q, keys, values, ctx.causal, scale)


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


def attend(q: torch.Tensor, layer: int, ctx: StepContext, scale: float) -> torch.Tensor:
    """Attention for the triton backend, the step's K/V already in the cache. [T, H, D]."""
    k_cache, v_cache = ctx.pool.k[layer], ctx.pool.v[layer]
    if ctx.batch is not None:
        return batch_attend(q, k_cache, v_cache, ctx, scale)
    if q.shape[0] <= MAX_STEP:
        from engine.kernels.attention import paged_decode_attention

        return paged_decode_attention(
            q, k_cache, v_cache, ctx.page_table, ctx.start, ctx.pool.page_size, scale, ctx.causal,
            chunk=ctx.invariant_chunk,
        )
    return fused_attention(q, k_cache[ctx.context_slots], v_cache[ctx.context_slots], ctx.causal, scale)


def fused_attention(
    q: torch.Tensor,  # [T, H, D], the last T positions of the context
    keys: torch.Tensor,  # [L, KVH, D]
    values: torch.Tensor,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    """`reference_attention` through torch's fused attention: the torch path's every step, and a
    long step (a prompt) on CUDA. No [H, T, L] score matrix is kept."""
    t, h, _ = q.shape
    n, group = keys.shape[0], h // keys.shape[1]
    grouped = q.device.type == "cpu"
    if not grouped:  # CUDA's fused kernels take grouped heads only without a mask: copy K/V per head
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    mask = None
    if causal and t < n:
        mask = torch.arange(n, device=q.device)[None, :] <= torch.arange(n - t, n, device=q.device)[:, None]
    out = sdpa(
        q.transpose(0, 1)[None], keys.transpose(0, 1)[None], values.transpose(0, 1)[None], attn_mask=mask,
        is_causal=causal and t == n, scale=scale, enable_gqa=grouped,
    )
    return out[0].transpose(0, 1)


def per_sequence_attention(
    q: torch.Tensor,  # [T, H, D], each sequence's queries in turn, the last of its context
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool, this step's K/V written
    v_cache: torch.Tensor,
    batch: BatchLayout,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    if batch.padded is not None:
        return padded_prompt_attention(q, k_cache, v_cache, batch.padded, scale)
    counts = batch.queries or [1] * len(batch.contexts)
    out, first = [], 0
    for n, slots in zip(counts, batch.contexts, strict=True):
        out.append(fused_attention(q[first : first + n], k_cache[slots], v_cache[slots], causal, scale))
        first += n
    return torch.cat(out)


def padded_prompt_attention(
    q: torch.Tensor,  # [T, H, D], the prompts' tokens packed, every prompt from position 0
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool, the prompts' K/V written
    v_cache: torch.Tensor,
    padded: PaddedPrompts,
    scale: float,
) -> torch.Tensor:
    """`per_sequence_attention` of a fresh prefill in one fused call: each prompt a row of the
    longest one's length, causal (so a real query never reaches its padding), the padding's
    queries dropped. [T, H, D]."""
    h = q.shape[1]
    keys, values = k_cache[padded.slots], v_cache[padded.slots]  # [B, L, KVH, D]
    grouped = q.device.type == "cpu"
    if not grouped:  # as in fused_attention: copy K/V per head for CUDA's fused kernels
        group = h // keys.shape[2]
        keys, values = keys.repeat_interleave(group, dim=2), values.repeat_interleave(group, dim=2)
    out = sdpa(
        q[padded.gather].transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), is_causal=True,
        scale=scale, enable_gqa=grouped,
    )  # [B, H, L, D]
    return out.transpose(1, 2).reshape(-1, h, q.shape[2])[padded.scatter]


def batch_attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: StepContext,
                 scale: float) -> torch.Tensor:
    """The triton backend's batched attention, the step's K/V already in the cache. [T, H, D]."""
    if ctx.batch.contexts is not None:
        return per_sequence_attention(q, k_cache, v_cache, ctx.batch, ctx.causal, scale)
    from engine.kernels.batch_attention import batch_decode_attention, context_splits  # Triton: CUDA only

    return batch_decode_attention(q, k_cache, v_cache, ctx.page_table, ctx.start, ctx.pool.page_size, scale,
                                  splits=context_splits())
