"""Fused elementwise kernels of a decoder layer (Triton, CUDA only).

Each replaces a run of small torch ops with one launch: residual add + RMSNorm, SiLU(gate) * up,
and q/k RMSNorm + RoPE + the K/V write into the paged cache. They round where the torch path
of engine/network/decoder.py rounds (every op's result to the model dtype), so in float32 they agree
with it to float32 rounding and in bfloat16 to the odd last-bit difference of a reduction.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.overlap import launch_options


@triton.jit
def wait_for_previous(GDC: tl.constexpr):
    """With dependent launch (engine/kernels/overlap.py): wait for the kernel before this one to
    finish and flush, then let the next one launch. Without it, nothing."""
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def rms_norm_row(xf, w, n, eps, dtype: tl.constexpr):
    """RMSNorm of one row's n float32 values xf (lanes past n zero) times weight w, with the torch
    path's roundings: in dtype. The residual adds' norms all round through here."""
    rstd = tl.rsqrt(tl.sum(xf * xf, 0) / n + eps)
    return (w.to(tl.float32) * (xf * rstd).to(dtype).to(tl.float32)).to(dtype)


@triton.jit
def _add_rms_norm(x_ptr, res_ptr, w_ptr, out_ptr, tap_ptr, n_cols, part_stride, tap_stride, eps,
                  HAS_RES: tl.constexpr, PARTS: tl.constexpr, BLOCK: tl.constexpr, TAP: tl.constexpr,
                  GDC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)  # a weight: safe before the wait
    wait_for_previous(GDC)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    for s in tl.static_range(1, PARTS):  # a product's split partials, added in split order
        x += tl.load(x_ptr + s * part_stride + row * n_cols + cols, mask=mask, other=0.0)
    dtype = res_ptr.dtype.element_ty
    x = x.to(dtype)  # a product rounds its sums once, here if it left them as partials
    if HAS_RES:
        r = tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(dtype)
        tl.store(res_ptr + row * n_cols + cols, x, mask=mask)
    if TAP:  # the stream kept for a drafter as well
        tl.store(tap_ptr + row * tap_stride + cols, x, mask=mask)
    y = rms_norm_row(x.to(tl.float32), w, n_cols, eps, dtype)
    tl.store(out_ptr + row * n_cols + cols, y, mask=mask)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
    tap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(residual + x), residual + x); the sum is written into `residual` in place.
    With residual None the stream starts at x: (RMSNorm(x), x). x may be a product's float32
    split partials [S, T, N] (`triton_gemv.linear_parts`): their sum, rounded to the stream's
    dtype, is added. tap: a [T, N] view (rows may be strided) that gets the sum too (the target's
    states a DFlash drafter reads), with no launch of its own."""
    parts = x.shape[0] if x.dim() == 3 else 1
    t, n = x.shape[-2:]
    assert x.dim() == 2 or residual is not None  # partials are never the stream's start
    out = torch.empty((t, n), dtype=x.dtype if residual is None else residual.dtype, device=x.device)
    block = triton.next_power_of_2(n)
    res = x if residual is None else residual
    # more warps keep more of the partials' loads in flight (H200, 16 rows: 3 partials of 2560
    # columns 1.97 us at 32 warps, 2.09 at 16, 2.32 at 8; a whole bf16 row 1.67 at 8 or 16)
    warps = (32 if block >= 4096 else 16) if parts > 1 else 8 if block >= 4096 else 4
    assert tap is None or (tap.shape == (t, n) and tap.stride(1) == 1)
    _add_rms_norm[(t,)](x, res, weight, out, out if tap is None else tap, n, t * n,
                        0 if tap is None else tap.stride(0), eps, HAS_RES=residual is not None, PARTS=parts,
                        BLOCK=block, TAP=tap is not None, num_warps=warps, **launch_options(x.device, t, "ops"))
    return out, res


@triton.jit
def _silu_mul(gu_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, GDC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    wait_for_previous(GDC)
    g = tl.load(gu_ptr + row * 2 * n_cols + cols, mask=mask, other=0.0)
    u = tl.load(gu_ptr + row * 2 * n_cols + n_cols + cols, mask=mask, other=0.0)
    gf = g.to(tl.float32)
    s = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)
    tl.store(out_ptr + row * n_cols + cols, (s.to(tl.float32) * u.to(tl.float32)).to(g.dtype), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up for gate_up [T, 2I] (gate first): [T, I]."""
    t, n2 = gate_up.shape
    n = n2 // 2
    out = torch.empty((t, n), dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    _silu_mul[(t, triton.cdiv(n, block))](gate_up, out, n, BLOCK=block, num_warps=4,
                                          **launch_options(gate_up.device, t, "ops"))
    return out


@triton.jit
def head_norm(x1, x2, w1, w2, eps, D: tl.constexpr):
    """A head's RMSNorm (Qwen3's q/k norm) over its two halves [..., D/2] (one head, or a row per
    head), with the torch path's roundings; the halves come back in their dtype."""
    dtype = x1.dtype
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    rstd = tl.rsqrt((tl.sum(a * a, -1, keep_dims=True) + tl.sum(b * b, -1, keep_dims=True)) / D + eps)
    a = (w1.to(tl.float32) * (a * rstd).to(dtype).to(tl.float32)).to(dtype)
    b = (w2.to(tl.float32) * (b * rstd).to(dtype).to(tl.float32)).to(dtype)
    return a, b


@triton.jit
def rope_halves(x1, x2, pos, inv_freq):
    """Rotate-half RoPE of a head's halves [..., D/2] at position pos, with the torch path's
    roundings (x * cos + rotate(x) * sin): the rotated halves, in the input's dtype."""
    dtype = x1.dtype
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    angle = pos.to(tl.float32) * inv_freq
    c = tl.cos(angle).to(dtype).to(tl.float32)
    s = tl.sin(angle).to(dtype).to(tl.float32)
    o1 = ((a * c).to(dtype).to(tl.float32) + (-b * s).to(dtype).to(tl.float32)).to(dtype)
    o2 = ((b * c).to(dtype).to(tl.float32) + (a * s).to(dtype).to(tl.float32)).to(dtype)
    return o1, o2


@triton.jit
def _qk_rope_store(
    qkv_ptr, pos_ptr, inv_freq_ptr, qw_ptr, kw_ptr, q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr,
    rows_ptr, table_stride, qkv_stride, eps,
    H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, QK_NORM: tl.constexpr,
    BATCHED: tl.constexpr, GDC: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    half = tl.arange(0, D // 2)
    inv_freq = tl.load(inv_freq_ptr + half)  # constant: safe before the wait
    wait_for_previous(GDC)
    # q heads, then k heads: head h of either starts at h * D in the fused qkv row
    base = qkv_ptr + t * qkv_stride + h * D
    x1 = tl.load(base + half)
    x2 = tl.load(base + D // 2 + half)
    if QK_NORM:
        is_q = h < H
        w1 = tl.where(is_q, tl.load(qw_ptr + half), tl.load(kw_ptr + half))
        w2 = tl.where(is_q, tl.load(qw_ptr + D // 2 + half), tl.load(kw_ptr + D // 2 + half))
        x1, x2 = head_norm(x1, x2, w1, w2, eps, D)
    pos = tl.load(pos_ptr + t)
    o1, o2 = rope_halves(x1, x2, pos, inv_freq)
    if h < H:
        out = q_ptr + (t * H + h) * D
        tl.store(out + half, o1)
        tl.store(out + D // 2 + half, o2)
    else:
        j = h - H
        table = page_table_ptr
        if BATCHED:  # the token's own sequence's row of the page table
            table += tl.load(rows_ptr + t) * table_stride
        slot = tl.load(table + pos // PS) * PS + pos % PS
        k_out = k_cache_ptr + (slot * KVH + j) * D
        tl.store(k_out + half, o1)
        tl.store(k_out + D // 2 + half, o2)
        full = tl.arange(0, D)
        v = tl.load(qkv_ptr + t * qkv_stride + (H + KVH + j) * D + full)
        tl.store(v_cache_ptr + (slot * KVH + j) * D + full, v)


def qk_rope_store(
    qkv: torch.Tensor,  # [T, (H + 2 KVH) * D]
    positions: torch.Tensor,  # [T] int64
    inv_freq: torch.Tensor,  # [D / 2] float32
    q_norm: torch.Tensor | None,  # [D] or None (no q/k RMSNorm)
    k_norm: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,  # [slots, KVH, D] one layer of the pool
    v_cache: torch.Tensor,
    page_table: torch.Tensor,  # [pages] int64, or [B, pages] with `rows`
    page_size: int,
    num_heads: int,
    rows: torch.Tensor | None = None,  # [T] int64: the page-table row (sequence) of each token
) -> torch.Tensor:
    """RoPE'd (and q-normed) queries [T, H, D]; the step's keys and values go into the cache."""
    t = qkv.shape[0]
    kvh, d = k_cache.shape[1], k_cache.shape[2]
    q = torch.empty((t, num_heads, d), dtype=qkv.dtype, device=qkv.device)
    norm = q_norm is not None
    _qk_rope_store[(t, num_heads + kvh)](
        qkv, positions, inv_freq, q_norm if norm else qkv, k_norm if norm else qkv, q, k_cache, v_cache,
        page_table, page_table if rows is None else rows, page_table.stride(0) if rows is not None else 0,
        qkv.stride(0), eps, H=num_heads, KVH=kvh, D=d, PS=page_size, QK_NORM=norm, BATCHED=rows is not None,
        num_warps=1, **launch_options(qkv.device, t, "ops"),
    )
    return q
