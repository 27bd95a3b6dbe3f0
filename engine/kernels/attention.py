"""Paged attention for decode and verify steps (1..16 query tokens), in Triton.

K/V are read in place through the sequence's page table: no gather copy of the cache. The
context length comes from a device scalar (the step's start position), so one launch shape
serves every length and the kernel can sit inside a CUDA graph.

Flash-decoding: the context is cut into a fixed number of splits, each program attends one KV
head's query group (all T tokens x G heads as one matrix, so the GQA group shares each K/V
load) to one split, and a second kernel merges the splits by their log-sum-exp. At batch 1 a
1K..8K context thus keeps every multiprocessor busy. For a decode step (one query group of at
most 16 rows) the merge can instead be done by the split program that finishes last
(`overlap.merge_in_attention`): one launch a layer fewer, where the merge itself is a few KB.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels import overlap
from engine.kernels.gemv import split_locks
from engine.kernels.ops import head_norm, rope_halves, wait_for_previous
from engine.kernels.overlap import launch_options

BLOCK_N = 32  # keys per inner iteration (swept on an H200: 32 beat 64 at 1K context, tied at 8K)


@triton.jit
def key_block_scores(q, k_cache_ptr, table_ptr, pos, valid, kvh, d, KVH: tl.constexpr, D: tl.constexpr,
                     PS: tl.constexpr, FP32: tl.constexpr):
    """q [M, D] against the keys at positions `pos` of one KV head, read in place through the page
    table: (scores [M, BLOCK_N], unscaled, and the block's K/V offsets for its values)."""
    page = tl.load(table_ptr + pos // PS, mask=valid, other=0)
    slot = page * PS + pos % PS
    kv_off = ((slot * KVH + kvh) * D)[:, None] + d[None, :]
    k = tl.load(k_cache_ptr + kv_off, mask=valid[:, None], other=0.0)
    if D < 16:  # too narrow for the matrix units (tiny test models)
        s = tl.sum(q[:, None, :].to(tl.float32) * k[None, :, :].to(tl.float32), 2)
    elif FP32:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    return s, kv_off


@triton.jit
def add_block_values(acc, alpha, p, v_cache_ptr, kv_off, valid, D: tl.constexpr, FP32: tl.constexpr):
    """The online softmax's accumulator rescaled by alpha plus p [M, BLOCK_N] times the block's values."""
    v = tl.load(v_cache_ptr + kv_off, mask=valid[:, None], other=0.0)
    if D < 16:
        pv = tl.sum(p[:, :, None] * v[None, :, :].to(tl.float32), 1)
    elif FP32:
        pv = tl.dot(p, v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return acc * alpha[:, None] + pv


@triton.jit
def split_result(acc, m_i, l_i):
    """A split's rows' attention over its keys and their log-sum-exps, from the online softmax's
    accumulator, running max and sum; a row that saw no key gives lse -inf, which the merge
    weighs 0."""
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    return out, tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))


@triton.jit
def merge_parts(part_out_ptr, part_lse_ptr, part, d, D: tl.constexpr):
    """One row's attention [D] float32 from its splits' outputs and log-sum-exps at `part` (one
    index a split): each weighted by exp(lse - max lse), a split that saw no key (lse -inf) by 0
    and left unread. Some split always saw a key, so the max is finite."""
    lse = tl.load(part_lse_ptr + part)
    live = lse > float("-inf")
    w = tl.where(live, tl.exp(lse - tl.max(lse, 0)), 0.0)
    o = tl.load(part_out_ptr + (part * D)[:, None] + d[None, :], mask=live[:, None], other=0.0)
    return tl.sum(o * w[:, None], 0) / tl.sum(w, 0)


@triton.jit
def _attend_split(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, start_ptr, part_out_ptr, part_lse_ptr, scale,
    out_ptr, lock_ptr, qkv_ptr, inv_freq_ptr, qw_ptr, kw_ptr, eps,
    T: tl.constexpr, G: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, M: tl.constexpr, ROWS: tl.constexpr,
    PS: tl.constexpr, SPLITS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    FP32: tl.constexpr, GDC: tl.constexpr, MERGE: tl.constexpr, ROPE: tl.constexpr, QK_NORM: tl.constexpr,
):
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    group = tl.program_id(2)  # which M rows of the ROWS (one group unless the split is fixed)
    wait_for_previous(GDC)
    start = tl.load(start_ptr)
    length = start + T
    if CHUNK > 0:  # fixed: a key's split does not depend on the step's length
        chunk = CHUNK
    else:
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        if MERGE:  # at least 4 blocks of keys a split: the merging program walks the live splits
            chunk = tl.maximum(chunk, 4 * BLOCK_N)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, length)

    rows = group * M + tl.arange(0, M)  # row r: token r // G, query head kvh * G + r % G
    real = rows < T * G
    token = rows // G
    head = kvh * G + rows % G
    d = tl.arange(0, D)
    if ROPE:  # a decode step's q/k/v row, not yet rotated (`rope_store_attend`)
        q = _roped_queries(qkv_ptr, inv_freq_ptr, qw_ptr, head, real, start, eps, D, QK_NORM)
        if (lo <= start) & (start < hi):  # the split holding the new token stores its key and value first
            _store_new_kv(qkv_ptr, inv_freq_ptr, kw_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, start, kvh, eps,
                          G, KVH, D, PS, QK_NORM)
            tl.debug_barrier()  # every thread's stores before any thread's loads of that slot
    else:
        q = tl.load(q_ptr + ((token * (KVH * G) + head) * D)[:, None] + d[None, :], mask=real[:, None], other=0.0)
    qpos = start + token

    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, D], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        valid = pos < hi
        s, kv_off = key_block_scores(q, k_cache_ptr, page_table_ptr, pos, valid, kvh, d, KVH, D, PS, FP32)
        s = s * scale
        see = valid[None, :]
        if CAUSAL:
            see = see & (pos[None, :] <= qpos[:, None])
        s = tl.where(see, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = add_block_values(acc, alpha, p, v_cache_ptr, kv_off, valid, D, FP32)
        m_i = m_new

    out, lse = split_result(acc, m_i, l_i)
    part = (split * KVH + kvh) * ROWS + rows
    # a split past the context writes only its log-sum-exp (-inf): the merge skips it unread
    tl.store(part_out_ptr + (part * D)[:, None] + d[None, :], out, mask=(real & (rows * 0 + lo < hi))[:, None])
    tl.store(part_lse_ptr + part, lse, mask=real)
    if MERGE:
        # the last split of this KV head to arrive merges them all, in split order (the result
        # does not depend on which came last), and resets the counter for the next call. The
        # barrier orders every thread's stores before the counter's release.
        tl.debug_barrier()
        arrived = tl.atomic_add(lock_ptr + kvh, 1, sem="acq_rel")
        if arrived == SPLITS - 1:
            _merge_rows(part_out_ptr, part_lse_ptr, out_ptr, rows, real, tl.cdiv(length, chunk), kvh,
                        G, KVH, D, M, ROWS)
            tl.atomic_xchg(lock_ptr + kvh, 0)


@triton.jit
def _roped_queries(qkv_ptr, inv_freq_ptr, qw_ptr, head, real, pos, eps, D: tl.constexpr, QK_NORM: tl.constexpr):
    """The query rows [M, D] of one token's q/k/v row (q heads first), q-normed where the model
    has q/k norms and rotated at pos, rounded as ops.qk_rope_store rounds them."""
    half = tl.arange(0, D // 2)
    at = qkv_ptr + (head * D)[:, None] + half[None, :]
    x1 = tl.load(at, mask=real[:, None], other=0.0)
    x2 = tl.load(at + D // 2, mask=real[:, None], other=0.0)
    if QK_NORM:
        x1, x2 = head_norm(x1, x2, tl.load(qw_ptr + half)[None, :], tl.load(qw_ptr + D // 2 + half)[None, :], eps, D)
    o1, o2 = rope_halves(x1, x2, pos, tl.load(inv_freq_ptr + half)[None, :])
    return tl.reshape(tl.permute(tl.join(o1, o2), (0, 2, 1)), (x1.shape[0], D))  # [o1 | o2] along a row


@triton.jit
def _store_new_kv(qkv_ptr, inv_freq_ptr, kw_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, pos, kvh, eps,
                  G: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, QK_NORM: tl.constexpr):
    """KV head kvh's key (k-normed where the model has q/k norms, rotated at pos) and value of one
    token's q/k/v row into the cache at pos's slot, as ops.qk_rope_store writes them."""
    half = tl.arange(0, D // 2)
    k_at = qkv_ptr + (KVH * G + kvh) * D
    x1 = tl.load(k_at + half)
    x2 = tl.load(k_at + D // 2 + half)
    if QK_NORM:
        x1, x2 = head_norm(x1, x2, tl.load(kw_ptr + half), tl.load(kw_ptr + D // 2 + half), eps, D)
    o1, o2 = rope_halves(x1, x2, pos, tl.load(inv_freq_ptr + half))
    slot = tl.load(page_table_ptr + pos // PS) * PS + pos % PS
    k_out = k_cache_ptr + (slot * KVH + kvh) * D
    tl.store(k_out + half, o1)
    tl.store(k_out + D // 2 + half, o2)
    full = tl.arange(0, D)
    tl.store(v_cache_ptr + (slot * KVH + kvh) * D + full, tl.load(qkv_ptr + (KVH * G + KVH + kvh) * D + full))


@triton.jit
def _merge_rows(part_out_ptr, part_lse_ptr, out_ptr, rows, real, live, kvh, G: tl.constexpr, KVH: tl.constexpr,
                D: tl.constexpr, M: tl.constexpr, ROWS: tl.constexpr):
    """The rows' attention from the first `live` splits' outputs and log-sum-exps (the splits past
    the context wrote none): an online softmax over the splits in order, SB splits at a time.
    One program does this while the rest of the GPU waits, so each block of splits is loaded at
    once (one trip to memory, not one per split: at 1K context some 33 splits are live)."""
    SB: tl.constexpr = 8192 // (M * D)  # splits a block: [SB, M, D] in registers (M <= 16, D <= 256)
    d = tl.arange(0, D)
    sb = tl.arange(0, SB)
    top = tl.where(real, float("-inf"), 0.0)
    total = tl.where(real, 0.0, 1.0)
    acc = tl.zeros([M, D], tl.float32)
    for first in range(0, live, SB):
        split = first + sb
        part = (split[:, None] * KVH + kvh) * ROWS + rows[None, :]  # [SB, M]
        seen = (split < live)[:, None] & real[None, :]
        lse = tl.load(part_lse_ptr + part, mask=seen, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(part_out_ptr + (part * D)[:, :, None] + d[None, None, :], mask=seen[:, :, None], other=0.0,
                    cache_modifier=".cg")
        new_top = tl.maximum(top, tl.max(lse, 0))  # finite for real rows: split 0 is always live
        alpha = tl.exp(top - new_top)  # 0 at the first block, whose top is -inf
        w = tl.exp(lse - new_top[None, :])  # 0 for splits past `live`
        total = total * alpha + tl.sum(w, 0)
        acc = acc * alpha[:, None] + tl.sum(o * w[:, :, None], 0)
        top = new_top
    merged = acc / total[:, None]
    token = rows // G
    head = kvh * G + rows % G
    tl.store(out_ptr + ((token * (KVH * G) + head) * D)[:, None] + d[None, :], merged.to(out_ptr.dtype.element_ty),
             mask=real[:, None])


@triton.jit
def _merge_splits(
    part_out_ptr, part_lse_ptr, out_ptr,
    G: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, ROWS: tl.constexpr, SPLITS: tl.constexpr,
    GDC: tl.constexpr,
):
    kvh = tl.program_id(0)
    row = tl.program_id(1)
    wait_for_previous(GDC)
    splits = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    merged = merge_parts(part_out_ptr, part_lse_ptr, (splits * KVH + kvh) * ROWS + row, d, D)
    token = row // G
    head = kvh * G + row % G
    tl.store(out_ptr + (token * (KVH * G) + head) * D + d, merged.to(out_ptr.dtype.element_ty))


def num_splits(num_kv_heads: int, rows: int) -> int:
    """Splits per KV head: about four programs per multiprocessor of an H200 at long context for
    query blocks of up to 32 rows (a decode step, short verify steps), two for larger blocks, whose
    splits cost more to merge. Qwen3-4B's 8-token step (32 rows), 36 layers' attention, ms, 32
    against 64 splits: 0.364 / 0.361 at 1K, 0.635 / 0.562 at 4K, 0.974 / 0.843 at 8K; its 16-token
    step (64 rows) keeps 32: 0.384 against 0.431 at 1K (bench/results/attn-sweep-lengths.txt)."""
    programs = 512 if rows <= 32 else 256
    return max(8, min(128, triton.next_power_of_2(-(-programs // num_kv_heads))))


def paged_decode_attention(
    q: torch.Tensor,  # [T, H, D], the last T positions of the context, T <= 16
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool
    v_cache: torch.Tensor,
    page_table: torch.Tensor,  # [pages] int64, the sequence's pages in order
    start: torch.Tensor,  # [1] int64: position of q's first token (context = start + T)
    page_size: int,
    scale: float,
    causal: bool = True,
    splits: int | None = None,
    block_n: int = BLOCK_N,
    chunk: int = 0,
    warps: int | None = None,
    group_rows: int | None = None,
    stages: int | None = None,
) -> torch.Tensor:
    """Attention of T <= 16 new queries to the whole context ([T, H, D]); causal within the step
    (query i sees keys up to start + i) or, with causal=False, every key of the context.

    chunk > 0 makes a query's result independent of how many queries the step has (batch
    invariance): every split covers `chunk` keys wherever the context ends (chunk x splits must
    cover the longest context), and the query rows go in groups of 16, the tile a decode step
    uses, so a verified token's attention is the decoded one's bit for bit.

    Launch settings measured on the H200 (bench/gpu/attn_sweep.py): 4 warps up to 64 x 128 query
    values, 8 above; a query block of more than 16 rows (a verify step) pipelines two key blocks
    deep, not three (1K context, Qwen3-4B: 0.383 against 0.388 ms a step; 8K: 0.900 against
    0.922), and the step bench agrees (16-token step 3.187 against 3.197 ms). The arguments
    splits, block_n, warps, group_rows (query rows per program) and stages override them, for
    the sweeps."""
    return _attend(q, None, k_cache, v_cache, page_table, start, page_size, scale, causal, splits, block_n, chunk,
                   warps, group_rows, stages)


def rope_store_attend(
    qkv: torch.Tensor,  # [1, (H + 2 KVH) * D]: one token's q/k/v product, not yet rotated
    inv_freq: torch.Tensor,  # [D / 2] float32
    q_norm: torch.Tensor | None,  # [D] or None (no q/k RMSNorm)
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    start: torch.Tensor,  # [1] int64: the token's position
    page_size: int,
    num_heads: int,
    scale: float,
) -> torch.Tensor:
    """A decode step's attention [1, H, D] from its q/k/v row in one kernel, where ops.qk_rope_store
    and paged_decode_attention take two: each program rotates its query heads itself, and the
    program whose split holds the token stores the token's key and value before it reads them
    (`overlap.rope_in_attention`). The cache ends as qk_rope_store leaves it, bit for bit."""
    kvh, d = k_cache.shape[1], k_cache.shape[2]
    assert qkv.shape == (1, (num_heads + 2 * kvh) * d) and qkv.is_contiguous()
    q = qkv.new_empty((1, num_heads, d))  # the shape and dtype of the queries, never written
    rope = (qkv, inv_freq, q_norm, k_norm, eps)
    return _attend(q, rope, k_cache, v_cache, page_table, start, page_size, scale, True)


def _attend(q, rope, k_cache, v_cache, page_table, start, page_size, scale, causal, splits=None, block_n=BLOCK_N,
            chunk=0, warps=None, group_rows=None, stages=None) -> torch.Tensor:
    """Launch the split kernel (and the merge kernel where the last split does not merge):
    paged_decode_attention's, or with rope = (qkv, inv_freq, q_norm, k_norm, eps) rope_store_attend's."""
    t, h, d = q.shape
    kvh = k_cache.shape[1]
    g = h // kvh
    m = 16 if chunk else group_rows or max(16, triton.next_power_of_2(t * g))
    groups = -(-(t * g) // m)
    splits = splits or num_splits(kvh, m)
    rows = m * groups
    part_out = torch.empty((splits, kvh, rows, d), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((splits, kvh, rows), dtype=torch.float32, device=q.device)
    out = torch.empty_like(q)
    fp32 = q.dtype == torch.float32
    # one query group, not batch-invariant (whose rows must merge alike in steps of any length)
    merge = overlap.merge_in_attention() and groups == 1 and m <= 16 and not chunk
    qkv, inv_freq, q_norm, k_norm, eps = rope or (q, part_lse, None, None, 0.0)
    norm = q_norm is not None
    _attend_split[(kvh, splits, groups)](
        q, k_cache, v_cache, page_table, start, part_out, part_lse, scale, out,
        split_locks(q.device) if merge else part_lse, qkv, inv_freq, q_norm if norm else q,
        k_norm if norm else q, eps,
        T=t, G=g, KVH=kvh, D=d, M=m, ROWS=rows, PS=page_size, SPLITS=splits, CHUNK=chunk, BLOCK_N=block_n,
        CAUSAL=causal, FP32=fp32, MERGE=merge, ROPE=rope is not None, QK_NORM=norm,
        num_warps=warps or (4 if m * d <= 64 * 128 else 8), num_stages=stages or (2 if m > 16 else 3),
        **launch_options(q.device, t, "attention"),
    )
    if not merge:
        _merge_splits[(kvh, t * g)](part_out, part_lse, out, G=g, KVH=kvh, D=d, ROWS=rows, SPLITS=splits,
                                    num_warps=4, **launch_options(q.device, t, "attention"))
    return out


def invariant_chunk(max_context: int, num_kv_heads: int, block_n: int = BLOCK_N) -> int:
    """Keys per split for batch-invariant attention: the decode step's split count spread over
    the longest context the pool holds (a multiple of the keys per iteration)."""
    splits = num_splits(num_kv_heads, 16)
    return -(-(-(-max_context // splits)) // block_n) * block_n
