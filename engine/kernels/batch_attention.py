"""Paged attention for a batched decode step: one query token from each of B sequences (Triton).

One program per (sequence, KV head): it loads the query heads of that KV head's group (the
GQA group shares each K/V load), reads the sequence's row of the page table and walks its
context, which ends at the sequence's own position, in blocks of keys with an online softmax.
Lengths come from a device tensor, so one launch shape serves every mix of lengths and the
kernel can sit inside a CUDA graph. With B in the tens to hundreds there are programs enough
for every multiprocessor without splitting a context, so there is no merge pass.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.attention import add_block_values, key_block_scores

BLOCK_N = 64  # keys per iteration


@triton.jit
def _batch_decode(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, positions_ptr, out_ptr, table_stride, scale,
    G: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, M: tl.constexpr, PS: tl.constexpr,
    BLOCK_N: tl.constexpr, FP32: tl.constexpr,
):
    seq = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    length = tl.load(positions_ptr + seq) + 1  # the step's token sees itself and everything before
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
    for n0 in range(0, length, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        valid = pos < length
        s, kv_off = key_block_scores(q, k_cache_ptr, table, pos, valid, kvh, d, KVH, D, PS, FP32)
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite from the first block on: it holds key 0
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = add_block_values(acc, alpha, p, v_cache_ptr, kv_off, valid, D, FP32)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + q_off, out.to(out_ptr.dtype.element_ty), mask=real[:, None])


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
) -> torch.Tensor:
    """Each sequence's query attends to its own whole context (its K/V for this step already
    written). [B, H, D]. stages: the key loop's pipeline depth (None: Triton's default)."""
    b, h, d = q.shape
    kvh = k_cache.shape[1]
    g = h // kvh
    out = torch.empty_like(q)
    _batch_decode[(b, kvh)](
        q, k_cache, v_cache, page_table, positions, out, page_table.stride(0), scale,
        G=g, KVH=kvh, D=d, M=max(16, triton.next_power_of_2(g)), PS=page_size, BLOCK_N=block_n,
        FP32=q.dtype == torch.float32, num_warps=warps, **({} if stages is None else {"num_stages": stages}),
    )
    return out
