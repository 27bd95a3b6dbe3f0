"""Attention for a step over several sequences at once (batched decoding, packed prefill).

A batched step's tokens belong to different sequences, each with its own page table and
length. `BatchLayout` says which: on CUDA the K/V write (`triton_ops.qk_rope_store`) finds each
token's page through its sequence's row of a [B, pages] page table. A decode step (one token
per sequence) reads every sequence's context in place with one kernel launch
(engine/triton_batch_attention.py); a packed prefill, and every step on the torch path, attends
sequence by sequence through the same call a single sequence's step makes, so each sequence's
output is what it would be alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention import StepContext, fused_attention


@dataclass
class BatchLayout:
    rows: torch.Tensor | None  # [T] int64 on the device: the page-table row (sequence) of each token
    queries: list[int] | None = None  # tokens of each sequence in the step, in order (None: one each)
    # each sequence's context slots, positions 0..L-1 (None on CUDA decode: the kernel reads the
    # page table and ctx.start, each sequence's position)
    contexts: list[torch.Tensor] | None = None


def per_sequence_attention(
    q: torch.Tensor,  # [T, H, D], each sequence's queries in turn, the last of its context
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool, this step's K/V written
    v_cache: torch.Tensor,
    batch: BatchLayout,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    counts = batch.queries or [1] * len(batch.contexts)
    out, first = [], 0
    for n, slots in zip(counts, batch.contexts, strict=True):
        out.append(fused_attention(q[first : first + n], k_cache[slots], v_cache[slots], causal, scale))
        first += n
    return torch.cat(out)


def batch_attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: StepContext,
                 scale: float) -> torch.Tensor:
    """The triton backend's batched attention, the step's K/V already in the cache. [T, H, D]."""
    if ctx.batch.contexts is not None:
        return per_sequence_attention(q, k_cache, v_cache, ctx.batch, ctx.causal, scale)
    from engine.triton_batch_attention import batch_decode_attention

    return batch_decode_attention(q, k_cache, v_cache, ctx.page_table, ctx.start, ctx.pool.page_size, scale)
