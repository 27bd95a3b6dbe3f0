"""Paged attention for a batched decode step: one query token from each of B sequences (Triton).

One program per (sequence, KV head): it loads the query heads of that KV head's group (the
GQA group shares each K/V load), reads the sequence's row of the page table and walks its
context, which ends at the sequence's own position, in blocks of keys with an online softmax.
Lengths come from a device tensor, so one launch shape serves every mix of lengths and the
kernel can sit inside a CUDA graph. With B in the tens to hundreds there are programs enough
for every multiprocessor without splitting a context, so by default there is no merge pass;
`splits` > 1 cuts each context into that many slices, a program each, and a merge kernel
combines their log-sum-exps (for long contexts, where a few hundred programs walking 1-3K keys
each leave the memory system idle between their loads; bench/gpu/batch_attn_sweep.py measures).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from engine.errors import EngineError
from engine.kernels.attention import add_block_values, key_block_scores, merge_parts, split_result

BLOCK_N = 64  # keys per iteration


@functools.cache
def context_splits() -> int:
    """Context slices per sequence in a batched decode step: SPECCHAT_BATCH_SPLITS, a power of
    two, 1 (one pass, no merge) unless set, until the GPU measures slices faster end to end."""
    value = os.environ.get("SPECCHAT_BATCH_SPLITS", "1")
    if not value.isdigit() or int(value) < 1 or int(value) & (int(value) - 1):
        raise EngineError(f"SPECCHAT_BATCH_SPLITS must be a power of two (1, 2, 4, 8), got {value!r}")
    return int(value)


@triton.jit
def _batch_decode(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, positions_ptr, out_ptr, part_out_ptr, part_lse_ptr,
    table_stride, scale,
    G: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, M: tl.constexpr, PS: tl.constexpr,
    BLOCK_N: tl.constexpr, FP32: tl.constexpr, SPLITS: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    length = tl.load(positions_ptr + seq) + 1  # the step's token sees itself and everything before
    if SPLITS == 1:
        lo, hi = 0, length
    else:  # slices of whole key blocks; a slice past the context reads nothing
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        lo = split * chunk
        hi = tl.minimum(lo + chunk, length)
    table = page_table_ptr + seq * table_stride
    rows = tl.arange(0, M)  # query heads of the group, padded to the matrix units' tile
    real = rows < G
    head = kvh * G + rows
    d = tl.arange(0, D)
    q_off = ((seq * (KVH * G) + head) * D)[:, None] + d[None, :]
    q = tl.load(q_ptr + q_off, mask=real[:, None], other=0.0)

    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, D], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        valid = pos < hi
        s, kv_off = key_block_scores(q, k_cache_ptr, table, pos, valid, kvh, d, KVH, D, PS, FP32)
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite from the first block on: it holds a key
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = add_block_values(acc, alpha, p, v_cache_ptr, kv_off, valid, D, FP32)
        m_i = m_new
    if SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=real[:, None])
    else:  # this slice's output and log-sum-exp (-inf for an empty slice), for the merge
        out, lse = split_result(acc, m_i, l_i)
        part = (split * tl.num_programs(0) + seq) * (KVH * G) + head
        tl.store(part_out_ptr + (part * D)[:, None] + d[None, :], out, mask=real[:, None])
        tl.store(part_lse_ptr + part, lse, mask=real)


@triton.jit
def _batch_merge(part_out_ptr, part_lse_ptr, out_ptr, H: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr):
    """One (sequence, query head)'s attention from its context slices (the first always holds keys)."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    d = tl.arange(0, D)
    merged = merge_parts(part_out_ptr, part_lse_ptr, (tl.arange(0, SPLITS) * tl.num_programs(0) + seq) * H + head,
                         d, D)
    tl.store(out_ptr + (seq * H + head) * D + d, merged.to(out_ptr.dtype.element_ty))


def batch_decode_attention(
    q: torch.Tensor,  # [B, H, D]: sequence b's query at its position positions[b]
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool
    v_cache: torch.Tensor,
    page_table: torch.Tensor,  # [B, pages] int64, row b sequence b's pages in order
    positions: torch.Tensor,  # [B] int64: sequence b's context is positions 0..positions[b]
    page_size: int,
    scale: float,
    block_n: int = BLOCK_N,
    warps: int = 4,
    stages: int | None = None,
    splits: int = 1,
) -> torch.Tensor:
    """Each sequence's query attends to its own whole context (its K/V for this step already
    written). [B, H, D]. stages: the key loop's pipeline depth (None: Triton's default);
    splits: context slices per sequence (a power of two; 1: no merge pass)."""
    b, h, d = q.shape
    kvh = k_cache.shape[1]
    g = h // kvh
    assert splits >= 1 and splits & (splits - 1) == 0, splits
    out = torch.empty_like(q)
    if splits > 1:
        part_out = torch.empty((splits, b, h, d), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((splits, b, h), dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = out  # never touched
    _batch_decode[(b, kvh, splits)](
        q, k_cache, v_cache, page_table, positions, out, part_out, part_lse, page_table.stride(0), scale,
        G=g, KVH=kvh, D=d, M=max(16, triton.next_power_of_2(g)), PS=page_size, BLOCK_N=block_n,
        FP32=q.dtype == torch.float32, SPLITS=splits, num_warps=warps,
        **({} if stages is None else {"num_stages": stages}),
    )
    if splits > 1:
        _batch_merge[(b, h)](part_out, part_lse, out, H=h, D=d, SPLITS=splits, num_warps=4)
    return out
