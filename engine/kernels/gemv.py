"""Linear layers for steps of 1..16 tokens (Triton, CUDA only), with the layer's norm folded in.

A decode or verify step multiplies a handful of activation rows by each weight matrix once,
so its linears are bound by reading the weights. cuBLAS picks tiles made for larger batches
and leaves part of the bandwidth unused on the small matrices of a 1-4B model. These kernels
give each program a thin slab of output rows and stream it through K in wide contiguous
loads, so every SM has weight bytes in flight:

* one row (decode, draft chains): products summed in float32 registers;
* 2..16 rows (verify): the rows padded to 16 and multiplied on the tensor cores (tl.dot); the
  padding costs nothing, the weights are read once either way. Wide matrices put the weights
  on the product's left in 64-row tiles; K can be split, the last split to finish a tile adding
  the partial sums in a fixed order (measured no faster at the shapes here, so unused by them).
  The narrow matrices (o, down) cut K into splits and leave each split's float32 sums as they
  are (`linear_parts`): the residual add that reads the product adds them, so no program waits
  for the others of its tile, and there are enough programs for every multiprocessor.
  The widest matrices (gate/up, and a 4B model's lm_head) read faster this way than through
  the GEMV even for one row, so a decode step sends them here too.

For one row, the residual add + RMSNorm before q/k/v can ride in the product's input load
instead of running as a kernel of its own (PROLOGUE NORM): every program loads the whole row
and recomputes its norm, a few KB from L2, and the first program writes the new residual
stream. It rounds where the unfused kernel rounds, so the product sees the same input bit for
bit. It pays only where the matrix is small (measured on the H200: 1.5B's q/k/v 4.5 us against
5.1 us apart; larger matrices and SiLU folded into down lose, the recomputation costs more than
a launch), so `norm_linear` folds there and runs two kernels elsewhere.

An MLP's gate/up product can end in SiLU(gate) * up (`linear_silu`): each program's weight rows
pair a gate row with its up row, so its sums are the plain product's and the epilogue writes the
activation, half as wide. Both kernels can launch dependently (engine/kernels/overlap.py): the
GEMV loads its first weight tile before it waits on the kernel before it.

Both kernels accumulate in float32 and round once, as cuBLAS does; float32 weights multiply in
IEEE float32 (no TF32), so a float32 model stays exact enough for token-for-token tests. They
are not batch-invariant: a row's bf16 result can differ in the last bit between the one-row
and the 16-row kernel, so at a near-tie a verified token can differ from the decoded one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.ops import add_rms_norm, rms_norm_row, silu_mul, wait_for_previous
from engine.kernels.overlap import launch_options
from engine.limits import MAX_STEP

PLAIN, NORM = 0, 1  # what the input load computes


@triton.jit
def _gemv(x_ptr, r_ptr, nw_ptr, s_ptr, t_ptr, w_ptr, b_ptr, out_ptr, N, K, eps,
          PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr, TAP: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, GDC: tl.constexpr,
          SILU: tl.constexpr, lock_ptr, ADD_NORM: tl.constexpr, BLOCK_ROW: tl.constexpr):
    pid = tl.program_id(0)
    rows, w_index = _weight_rows(pid, N, BLOCK_N, SILU)
    live = rows < N
    y = _row_sums(x_ptr, r_ptr, nw_ptr, s_ptr, t_ptr, w_ptr + w_index[:, None].to(tl.int64) * K, live, pid, K, eps,
                  PROLOGUE, HAS_RES, TAP, BLOCK_N, BLOCK_K, EVEN_K, GDC)
    if SILU:  # y holds (gate, up) pairs: SiLU(gate) * up, one per output row
        y = _silu_times_up(tl.reshape(y, (BLOCK_N // 2, 2)), out_ptr.dtype.element_ty)
        rows = pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
        tl.store(out_ptr + rows, y, mask=rows < N)
    else:
        if HAS_BIAS:
            y += tl.load(b_ptr + rows, mask=live, other=0.0).to(tl.float32)
        if ADD_NORM:
            _add_norm_epilogue(y, rows, live, r_ptr, nw_ptr, t_ptr, out_ptr, lock_ptr, N, eps, TAP, BLOCK_ROW)
        else:
            tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _add_norm_epilogue(y, rows, live, r_ptr, nw_ptr, t_ptr, out_ptr, lock_ptr, N, eps, TAP: tl.constexpr,
                       BLOCK_ROW: tl.constexpr):
    """The residual add and RMSNorm after a one-row product (`linear_add_norm`): each program adds
    its rows of the product, rounded as the product's output, into the stream in place (and its
    tap); the last to arrive at the counter normalizes the whole row into out, as ops.add_rms_norm
    does, and resets the counter. The barrier orders every thread's stream stores before the
    counter's release."""
    dtype = r_ptr.dtype.element_ty
    stream = (y.to(dtype).to(tl.float32) + tl.load(r_ptr + rows, mask=live, other=0.0).to(tl.float32)).to(dtype)
    tl.store(r_ptr + rows, stream, mask=live)
    if TAP:  # the stream kept for a drafter as well
        tl.store(t_ptr + rows, stream, mask=live)
    tl.debug_barrier()
    if tl.atomic_add(lock_ptr, 1, sem="acq_rel") == tl.num_programs(0) - 1:
        cols = tl.arange(0, BLOCK_ROW)
        m = cols < N
        xf = tl.load(r_ptr + cols, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
        w = tl.load(nw_ptr + cols, mask=m, other=0.0)
        tl.store(out_ptr + cols, rms_norm_row(xf, w, N, eps, dtype), mask=m)
        tl.atomic_xchg(lock_ptr, 0)


@triton.jit
def _gemv_rope(x_ptr, r_ptr, nw_ptr, s_ptr, t_ptr, w_ptr, b_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
               page_table_ptr, pos_ptr, inv_freq_ptr, K, eps,
               PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr, TAP: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, GDC: tl.constexpr,
               H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, PS: tl.constexpr):
    """One token's q/k/v product with RoPE and the K/V stores in its epilogue (`norm_linear_rope`):
    each program's weight rows pair element d of a head with element d + D/2, the two RoPE
    mixes, so the epilogue rotates its own sums and writes q to q_ptr, k and v to the cache."""
    pid = tl.program_id(0)
    r = tl.arange(0, BLOCK_N)
    pair = pid * (BLOCK_N // 2) + r // 2
    w_index = (pair // (D // 2)) * D + pair % (D // 2) + (r % 2) * (D // 2)
    live = pair < (H + 2 * KVH) * (D // 2)
    y = _row_sums(x_ptr, r_ptr, nw_ptr, s_ptr, t_ptr, w_ptr + w_index[:, None].to(tl.int64) * K, live, pid, K, eps,
                  PROLOGUE, HAS_RES, TAP, BLOCK_N, BLOCK_K, EVEN_K, GDC)
    if HAS_BIAS:
        y += tl.load(b_ptr + w_index, mask=live, other=0.0).to(tl.float32)
    dtype = q_ptr.dtype.element_ty
    # the product rounds as the unfused kernel stores it; RoPE then rounds as ops._qk_rope_store
    x1, x2 = tl.split(tl.reshape(y.to(dtype).to(tl.float32), (BLOCK_N // 2, 2)))
    p = pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    head, d = p // (D // 2), p % (D // 2)
    pos = tl.load(pos_ptr)
    angle = pos.to(tl.float32) * tl.load(inv_freq_ptr + d)
    c = tl.cos(angle).to(dtype).to(tl.float32)
    s = tl.sin(angle).to(dtype).to(tl.float32)
    o1 = ((x1 * c).to(dtype).to(tl.float32) + (-x2 * s).to(dtype).to(tl.float32)).to(dtype)
    o2 = ((x2 * c).to(dtype).to(tl.float32) + (x1 * s).to(dtype).to(tl.float32)).to(dtype)
    ok = p < (H + 2 * KVH) * (D // 2)
    is_q, is_k = ok & (head < H), ok & (head >= H) & (head < H + KVH)
    is_v = ok & (head >= H + KVH)
    q_out = q_ptr + head * D + d
    tl.store(q_out, o1, mask=is_q)
    tl.store(q_out + D // 2, o2, mask=is_q)
    slot = tl.load(page_table_ptr + pos // PS) * PS + pos % PS
    j = tl.where(is_v, head - H - KVH, head - H)
    kv_out = (slot * KVH + j) * D + d
    tl.store(k_cache_ptr + kv_out, o1, mask=is_k)
    tl.store(k_cache_ptr + kv_out + D // 2, o2, mask=is_k)
    tl.store(v_cache_ptr + kv_out, x1.to(dtype), mask=is_v)
    tl.store(v_cache_ptr + kv_out + D // 2, x2.to(dtype), mask=is_v)


@triton.jit
def _row_sums(x_ptr, r_ptr, nw_ptr, s_ptr, t_ptr, w_rows, live, pid, K, eps,
              PROLOGUE: tl.constexpr, HAS_RES: tl.constexpr, TAP: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, GDC: tl.constexpr):
    """The float32 sums [BLOCK_N] of one activation row against the weight rows at w_rows
    ([BLOCK_N, 1] pointers), the input computed as PROLOGUE says (see the module's notes)."""
    cols = tl.arange(0, BLOCK_K)
    if PROLOGUE == 1:
        # the whole row in one tile (BLOCK_K >= K): the norm needs all of it, and the product
        # then reuses it from registers
        m = cols < K
        # the weights first: no step writes them, so they load while the kernel before runs
        w = tl.load(w_rows + cols[None, :], mask=live[:, None] & m[None, :], other=0.0)
        wait_for_previous(GDC)
        x = tl.load(x_ptr + cols, mask=m, other=0.0)
        if HAS_RES:
            x = (x.to(tl.float32) + tl.load(r_ptr + cols, mask=m, other=0.0).to(tl.float32)).to(x.dtype)
            tl.store(s_ptr + cols, x, mask=m & (pid == 0))
        if TAP:  # the stream kept for a drafter as well
            tl.store(t_ptr + cols, x, mask=m & (pid == 0))
        nw = tl.load(nw_ptr + cols, mask=m, other=0.0)
        xin = rms_norm_row(x.to(tl.float32), nw, K, eps, x.dtype).to(tl.float32)
        y = tl.sum(w.to(tl.float32) * xin[None, :], axis=1)
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        k_begin = 0
        if GDC:  # the first weight tile before the wait (see engine/kernels/overlap.py)
            w = tl.load(w_rows + cols[None, :], mask=live[:, None] & (cols[None, :] < K), other=0.0)
            wait_for_previous(GDC)
            x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
            acc += w.to(tl.float32) * x[None, :]
            k_begin = BLOCK_K
        for k0 in range(k_begin, K, BLOCK_K):
            c = k0 + cols
            x = tl.load(x_ptr + c, mask=c < K, other=0.0).to(tl.float32)
            if EVEN_K:
                w = tl.load(w_rows + c[None, :], mask=live[:, None], other=0.0)
            else:
                w = tl.load(w_rows + c[None, :], mask=live[:, None] & (c[None, :] < K), other=0.0)
            acc += w.to(tl.float32) * x[None, :]
        y = tl.sum(acc, axis=1)
    return y


@triton.jit
def _weight_rows(pid, N, BLOCK_N: tl.constexpr, SILU: tl.constexpr):
    """(the output row of each of a program's weight rows, the weight row's index). With SILU
    the weight is [gate; up] (2N rows) and a program's rows pair them: gate row j, then up row j."""
    r = tl.arange(0, BLOCK_N)
    if SILU:
        rows = pid * (BLOCK_N // 2) + r // 2
        w_index = rows + (r % 2) * N
    else:
        rows = pid * BLOCK_N + r
        w_index = rows
    return rows, w_index


@triton.jit
def _silu_times_up(pairs, dtype: tl.constexpr):
    """SiLU(gate) * up from float32 sums [..., 2] (gate, up), rounded where the unfused path rounds:
    each product to dtype, SiLU's result to dtype, then the product (ops.silu_mul)."""
    gate, up = tl.split(pairs)
    g = gate.to(dtype).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(dtype)
    return (s.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)


@triton.jit
def _gemm16(x_ptr, w_ptr, b_ptr, out_ptr, part_ptr, lock_ptr, T, N, K, x_stride, k_split,
            HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
            IEEE: tl.constexpr, SPLIT: tl.constexpr, SWAP: tl.constexpr, DEFER: tl.constexpr,
            GDC: tl.constexpr, SILU: tl.constexpr):
    pid = tl.program_id(0)
    rows, w_index = _weight_rows(pid, N, BLOCK_N, SILU)
    live = rows < N
    ts = tl.arange(0, 16)
    in_step = ts < T
    cols = tl.arange(0, BLOCK_K)[None, :]
    x_rows = x_ptr + ts[:, None] * x_stride
    w_rows = w_ptr + w_index[:, None].to(tl.int64) * K
    if SWAP:  # weights as the product's left operand: [BLOCK_N, 16]
        acc = tl.zeros((BLOCK_N, 16), dtype=tl.float32)
        tile = ts[None, :] * N + rows[:, None]
        keep = in_step[None, :] & live[:, None]
    else:
        acc = tl.zeros((16, BLOCK_N), dtype=tl.float32)
        tile = ts[:, None] * N + rows[None, :]
        keep = in_step[:, None] & live[None, :]
    if SPLIT == 1:
        k_lo = 0
        k_hi = K
    else:
        k_lo = tl.program_id(1) * k_split
        k_hi = tl.minimum(k_lo + k_split, K)  # the last split may be shorter
    # Waits before its first load: taking the first weight tile out of the pipelined loop, as the
    # GEMV does, cost the loop its prefetch (H200: verify steps 3-5 % slower on the 1.5B and 4B)
    wait_for_previous(GDC)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        c = k0 + cols
        if EVEN_K:
            x = tl.load(x_rows + c, mask=in_step[:, None], other=0.0)
            w = tl.load(w_rows + c, mask=live[:, None], other=0.0)
        else:
            x = tl.load(x_rows + c, mask=in_step[:, None] & (c < K), other=0.0)
            w = tl.load(w_rows + c, mask=live[:, None] & (c < K), other=0.0)
        acc = _multiply_add(acc, x, w, SWAP, IEEE)
    if SILU:  # (gate, up) pairs along the weight rows: one SiLU(gate) * up per output row
        half = tl.arange(0, BLOCK_N // 2)
        rows = pid * (BLOCK_N // 2) + half
        if SWAP:  # acc [BLOCK_N, 16]
            y = _silu_times_up(tl.permute(tl.reshape(acc, (BLOCK_N // 2, 2, 16)), (0, 2, 1)),
                               out_ptr.dtype.element_ty)
            tl.store(out_ptr + ts[None, :] * N + rows[:, None], y, mask=in_step[None, :] & (rows < N)[:, None])
        else:  # acc [16, BLOCK_N]
            y = _silu_times_up(tl.reshape(acc, (16, BLOCK_N // 2, 2)), out_ptr.dtype.element_ty)
            tl.store(out_ptr + ts[:, None] * N + rows[None, :], y, mask=in_step[:, None] & (rows < N)[None, :])
    elif DEFER:
        # each split's float32 sums as they are, out being [SPLIT, T, N]: the consumer adds them
        tl.store(out_ptr + tl.program_id(1) * T * N + tile, acc, mask=keep)
    elif SPLIT > 1:
        # split-K: each split leaves its float32 partial; the last to arrive at the tile's counter
        # adds all of them in split order (the rounding does not depend on who came last), writes
        # the tile and resets the counter for the next call. The barrier orders every thread's
        # partial store before the counter's release.
        tl.store(part_ptr + tl.program_id(1) * 16 * N + tile, acc, mask=keep)
        tl.debug_barrier()
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT - 1:
            acc = tl.load(part_ptr + tile, mask=keep, other=0.0, cache_modifier=".cg")
            for s in range(1, SPLIT):
                acc += tl.load(part_ptr + s * 16 * N + tile, mask=keep, other=0.0, cache_modifier=".cg")
            _bias_store(acc, b_ptr, rows, live, out_ptr, tile, keep, HAS_BIAS, SWAP)
            tl.atomic_xchg(lock_ptr + pid, 0)
    else:
        _bias_store(acc, b_ptr, rows, live, out_ptr, tile, keep, HAS_BIAS, SWAP)


@triton.jit
def _multiply_add(acc, x, w, SWAP: tl.constexpr, IEEE: tl.constexpr):
    """acc + the tile's product on the matrix units: weights on the left when SWAP. (One return
    at the end: Triton's compiler does not end a function at a return inside a branch.)"""
    if SWAP:
        if IEEE:
            acc = tl.dot(w, tl.trans(x), acc, input_precision="ieee")
        else:
            acc = tl.dot(w, tl.trans(x), acc)
    elif IEEE:
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    else:
        acc = tl.dot(x, tl.trans(w), acc)
    return acc


@triton.jit
def _bias_store(acc, b_ptr, rows, live, out_ptr, tile, keep, HAS_BIAS: tl.constexpr, SWAP: tl.constexpr):
    if HAS_BIAS:
        bias = tl.load(b_ptr + rows, mask=live, other=0.0).to(tl.float32)
        if SWAP:
            acc += bias[:, None]
        else:
            acc += bias[None, :]
    tl.store(out_ptr + tile, acc.to(out_ptr.dtype.element_ty), mask=keep)


_LOCKS: dict[torch.device, torch.Tensor] = {}
MAX_SPLIT_TILES = 4096


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def split_locks(device: torch.device) -> torch.Tensor:
    """One arrival counter per output tile, shared by every split-K product on the device (calls
    on one stream run one after another, and each leaves its counters at zero). Allocated on the
    first, uncaptured call: graph capture runs its body once before capturing."""
    locks = _LOCKS.get(device)
    if locks is None:
        if _capturing(device):
            raise RuntimeError("split-K counters must be allocated before graph capture")
        locks = _LOCKS[device] = torch.zeros(MAX_SPLIT_TILES, dtype=torch.int32, device=device)
    return locks


def gemv_config(n: int, k: int, prologue: int = 0) -> tuple[int, int, int, int]:
    """(rows per program, K per iteration, warps, stages) for one activation row, as measured on
    the H200 (bench/gpu/gemv_sweep.py): two-row slabs keep enough programs streaming on the
    narrow matrices, four-row ones suit the wide gate/up and lm_head."""
    block_n = 4 if n >= 16384 else 2
    if prologue == NORM:  # one tile holds the whole row
        block_k = triton.next_power_of_2(k)
        return block_n, block_k, 8 if block_n * block_k >= 8192 else 4, 1
    return block_n, min(512 if n >= 16384 else 1024, triton.next_power_of_2(k)), 4, 3


def gemm16_config(n: int, k: int, dtype: torch.dtype = torch.bfloat16, cublas: bool = True
                  ) -> tuple[int, ...] | None:
    """(rows per program, K per iteration, warps, stages[, splits of K, weights on the left])
    for 2..16 activation rows, as measured on the H200 (bench/gpu/splitk_sweep.py); None where
    cuBLAS does as well (few output rows over a long K leave too few programs), if allowed.
    Wide matrices take the weights as the product's left operand in 64-row tiles, the shape
    the matrix units are built for; narrow ones keep the rows on the left in wider K slabs.
    Splitting K measured no faster at these shapes (the kernel keeps it for others)."""
    if cublas and n <= 2048 and k >= 4096:
        return None
    block_k = triton.next_power_of_2(k)
    if dtype == torch.float32:  # tests only: tiles that fit shared memory at four bytes
        return 16, min(64, block_k), 4, 2
    if n > 4096:
        return 64, min(128, block_k), 4, 3 if n >= 16384 else 4, 1, True
    return (32 if n > 2048 else 16), min(512, block_k), 4, 4


PARTS_CONFIG: dict[tuple[int, int], tuple[int, ...]] = {  # (N, K): settings, as in gemm16_config
    (2560, 4096): (64, 128, 4, 4, 3, True, True),  # Qwen3-4B o: 7.56 us, whole 8.86
    (2560, 9728): (64, 128, 4, 4, 4, True, True),  # Qwen3-4B down: 14.48 us, whole 16.15
    (1536, 1536): (64, 128, 4, 4, 4, True, True),  # Qwen2.5-1.5B o: 3.64 us, whole 4.86
    (1536, 8960): (64, 128, 4, 4, 6, True, True),  # Qwen2.5-1.5B down: 9.50 us, cuBLAS 11.25
}


def parts_config(n: int, k: int, dtype: torch.dtype) -> tuple[int, ...] | None:
    """Settings for 2..16 rows left as per-split partial sums (`linear_parts`) where that measured
    faster on the H200 (`SWEEP_PARTS=1 bench/gpu/splitk_sweep.py`), the residual add's extra
    cost included (0.2-0.4 us at the warps it takes for partials): the narrow matrices, whose
    output rows alone make too few tiles for 132 multiprocessors. Not for float32 (tests)."""
    return None if dtype == torch.float32 else PARTS_CONFIG.get((n, k))


def invariant_config(n: int, k: int, dtype: torch.dtype) -> tuple[int, ...]:
    """The 16-row kernel's settings for every step length (cuBLAS's shapes too): a row's result
    then does not depend on how many rows share its step."""
    return gemm16_config(n, k, dtype, cublas=False)


def one_row_on_matrix_units(n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether one row is faster through the 16-row kernel (padded, weights on the left) than
    through the GEMV: wide matrices, but not a vocabulary over a short row. Measured on the H200
    (bench/results/gemv/splitk-sweep.log), us, 16-row kernel against GEMV: Qwen3-4B gate/up 25.70
    against 26.35 and lm_head 179.79 against 200.99, Qwen2.5-1.5B gate/up 15.41 against 16.04;
    decode steps 2.839 against 2.891 ms (4B) and 1.419 against 1.454 (1.5B). The GEMV stays
    where it measured faster: q/k/v 6144 x 2560, 10.36 against 9.99; Qwen2.5-1.5B's lm_head
    151936 x 1536, 112.32 against 108.80."""
    return n >= 16384 and (k >= 2048 or n < 65536) and dtype != torch.float32


def launch(x, weight, bias, out, prologue=PLAIN, residual=None, norm_weight=None, stream=None, eps=0.0,
           config=None, invariant=False, silu=False, tap=None):
    """Run the kernel for x's rows into out; config overrides the measured launch settings.
    Prologues only for one row (over 16 rows, folding costs the product more than it saves).
    invariant: one row too goes through the 16-row kernel (see `linear`).
    silu: weight is [gate; up] and out gets SiLU(gate) * up, half as wide (`linear_silu`); the
    settings, programs and each row's sums are those of the plain product over the whole weight."""
    t = x.shape[0]
    n, k = weight.shape
    width = n // 2 if silu else n  # the output's
    assert not silu or (bias is None and prologue == PLAIN and out.shape[-1] == width)
    b = bias if bias is not None else weight
    if invariant:
        config = config or invariant_config(n, k, x.dtype)
    if t == 1 and not invariant and (config is not None or prologue != PLAIN
                                     or not one_row_on_matrix_units(n, k, x.dtype)):
        block_n, block_k, warps, stages = config or gemv_config(n, k, prologue)
        _gemv[(triton.cdiv(n, block_n),)](
            x, residual if residual is not None else x, norm_weight if norm_weight is not None else weight,
            stream if stream is not None else x, tap if tap is not None else x, weight, b, out, width, k, eps,
            PROLOGUE=prologue, HAS_RES=residual is not None, HAS_BIAS=bias is not None,
            TAP=tap is not None, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0, SILU=silu,
            lock_ptr=x, ADD_NORM=False, BLOCK_ROW=1, num_warps=warps, num_stages=stages, **launch_options(x.device, t),
        )
    else:
        assert prologue == PLAIN
        config = tuple(config or gemm16_config(n, k, x.dtype))
        block_n, block_k, warps, stages, split, swap, defer = config + (1, False, False)[len(config) - 4 :]
        tiles = triton.cdiv(n, block_n)
        k_split, split = split_k(k, block_k, split)
        assert not silu or (split == 1 and not defer)
        if defer:  # out: [split, T, N] float32, one slice per split
            assert bias is None and out.shape == (split, t, n) and out.dtype == torch.float32
            parts = locks = out
        elif split > 1:
            assert tiles <= MAX_SPLIT_TILES
            parts, locks = torch.empty((split, 16, n), dtype=torch.float32, device=x.device), split_locks(x.device)
        else:
            parts = locks = out
        _gemm16[(tiles, split)](x, weight, b, out, parts, locks, t, width, k, x.stride(0), k_split,
                                HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k,
                                EVEN_K=k % block_k == 0, IEEE=x.dtype == torch.float32,
                                SPLIT=split, SWAP=swap, DEFER=defer, SILU=silu, num_warps=warps,
                                num_stages=stages, **launch_options(x.device, t, "gemm16"))
    return out


def split_k(k: int, block_k: int, split: int) -> tuple[int, int]:
    """(K per split, splits): whole iterations per split, so the last may be shorter."""
    k_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    return k_split, triton.cdiv(k, k_split)


def _fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    t = x.shape[0]
    n, k = weight.shape
    if not x.is_cuda or t > MAX_STEP:
        return False
    if t == 1:  # a vocabulary-wide product over a short row: cuBLAS measured faster (0.5B's lm_head)
        return not (n >= 16384 and k < 1024)
    return gemm16_config(n, k, x.dtype) is not None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           invariant: bool = False, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [T, K] @ weight[N, K].T (+ bias): [T, N]. Steps of more than 16 rows go to cuBLAS.

    invariant: every step of 1..16 rows through the 16-row kernel with the same settings, so a
    row's result is the same bits whatever the step's length (slower for one row than the GEMV).
    out_dtype: the kernels write their float32 sums in it (logits: no rounding to bf16 and no
    cast kernel after, which for a 16-token step's 16 x 152K logits is some 15 MB moved);
    cuBLAS's result is cast to it."""
    invariant = invariant and x.is_cuda and x.shape[0] <= MAX_STEP
    if not (invariant or _fits(x, weight)):
        out = torch.nn.functional.linear(x, weight, bias)
        return out if out_dtype is None else out.to(out_dtype)
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty((x.shape[0], weight.shape[0]), dtype=out_dtype or x.dtype, device=x.device)
    return launch(x, weight, bias, out, invariant=invariant)


def linear_silu(x: torch.Tensor, weight: torch.Tensor, invariant: bool = False) -> torch.Tensor:
    """SiLU(x @ gate.T) * (x @ up.T) for weight [gate; up] ([2I, K], the MLP's gate_up_proj):
    [T, I], the product and its activation in one kernel, bit for bit `silu_mul(linear(x,
    weight))` (the same programs and sums; the activation rounds where silu_mul does). It saves
    a launch a layer and the product's round trip through memory. Where the step kernels do not
    take x (more than 16 rows, cuBLAS's shapes), those two."""
    invariant = invariant and x.is_cuda and x.shape[0] <= MAX_STEP
    if not (invariant or _fits(x, weight)):
        return silu_mul(linear(x, weight))
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty((x.shape[0], weight.shape[0] // 2), dtype=x.dtype, device=x.device)
    return launch(x, weight, None, out, invariant=invariant, silu=True)


def linear_parts(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 invariant: bool = False) -> torch.Tensor:
    """x [T, K] @ weight[N, K].T for a verify step, left where it pays as the float32 partial
    sums of K splits, [S, T, N]: their sum in split order, rounded to x's dtype, is the product.
    The residual add that takes the output (`triton_ops.add_rms_norm`) adds them on its way, so
    no program waits at the end for the others that share its tile, and narrow matrices can be
    cut into enough programs. Otherwise (one row, a bias, no such setting, batch-invariant) `linear`."""
    t = x.shape[0]
    n, k = weight.shape
    verify = x.is_cuda and 1 < t <= MAX_STEP and bias is None and not invariant
    config = parts_config(n, k, x.dtype) if verify else None
    if config is None:
        return linear(x, weight, bias, invariant)
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty((split_k(k, config[1], config[4])[1], t, n), dtype=torch.float32, device=x.device)
    return launch(x, weight, None, out, config=config)


def folds_norm(x: torch.Tensor, weight: torch.Tensor) -> bool:
    n, k = weight.shape
    return x.is_cuda and x.shape == (1, k) and n <= 4096 and k <= 2048


def norm_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                weight: torch.Tensor, bias: torch.Tensor | None = None, invariant: bool = False,
                silu: bool = False, tap: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(residual + x) @ weight.T (+ bias), residual + x). Folded into one kernel, the
    stream is a new tensor (programs read the old one while the first writes the sum); x itself
    when residual is None, the stream's start. Otherwise residual is updated in place.
    silu: weight is an MLP's [gate; up] and the product SiLU(gate) * up (`linear_silu`).
    tap: a [T, K] view that gets residual + x as well (add_rms_norm's)."""
    if invariant or not folds_norm(x, weight):
        h, stream = add_rms_norm(x, residual, norm_weight, eps, tap)
        if silu:
            return linear_silu(h, weight, invariant), stream
        return linear(h, weight, bias, invariant), stream
    x = x.contiguous()
    stream = x if residual is None else torch.empty_like(x)
    out = torch.empty((1, weight.shape[0]), dtype=x.dtype, device=x.device)
    launch(x, weight, bias, out, NORM, residual, norm_weight, stream, eps, tap=tap)
    return (silu_mul(out) if silu else out), stream


def linear_add_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor,
                    norm_weight: torch.Tensor, eps: float, tap: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One row's (RMSNorm(residual + x @ weight.T (+ bias)), residual + ...) in one kernel, where
    `linear` and ops.add_rms_norm take two: the product's programs add their rows into the stream
    (residual, in place; and tap, a [1, N] view, where given) and the last to finish normalizes
    the row (`overlap.norm_after_o`, `overlap.norm_after_down`). The stream is the two kernels'
    bit for bit; the norm's sum may round its last bit otherwise."""
    n, k = weight.shape
    assert x.shape == (1, k) and residual.shape == (1, n) and residual.is_contiguous()
    assert tap is None or (tap.shape == (1, n) and tap.stride(1) == 1)
    x = x.contiguous()
    out = torch.empty_like(residual)
    block_n, block_k, warps, stages = gemv_config(n, k)
    _gemv[(triton.cdiv(n, block_n),)](
        x, residual, norm_weight, x, tap if tap is not None else x, weight, bias if bias is not None else weight,
        out, n, k, eps, PROLOGUE=PLAIN, HAS_RES=False, HAS_BIAS=bias is not None, TAP=tap is not None,
        BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0, SILU=False, lock_ptr=split_locks(x.device),
        ADD_NORM=True, BLOCK_ROW=triton.next_power_of_2(n), num_warps=warps, num_stages=stages,
        **launch_options(x.device, 1),
    )
    return out, residual


def norm_linear_rope(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                     weight: torch.Tensor, bias: torch.Tensor | None, positions: torch.Tensor,
                     inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, page_size: int, num_heads: int,
                     tap: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token's attention input in one kernel where norm_linear and ops.qk_rope_store take two:
    (RoPE'd queries [1, H, D], residual + x), its keys and values written into the cache at the
    token's slot. For models without q/k norms (the norm needs a whole head, a program has two
    of its elements); bit for bit the two kernels' (same sums, same roundings)."""
    n, k = weight.shape
    kvh, d = k_cache.shape[1], k_cache.shape[2]
    assert x.shape[-2] == 1 and n == (num_heads + 2 * kvh) * d  # one token (x may be split partials)
    if folds_norm(x, weight):
        prologue, x = NORM, x.contiguous()
        stream = x if residual is None else torch.empty_like(x)
    else:
        prologue, (x, stream) = PLAIN, add_rms_norm(x, residual, norm_weight, eps, tap)
        residual = tap = None
    q = torch.empty((1, num_heads, d), dtype=k_cache.dtype, device=x.device)
    block_n, block_k, warps, stages = gemv_config(n, k, prologue)
    _gemv_rope[(triton.cdiv(n, block_n),)](
        x, residual if residual is not None else x, norm_weight, stream, tap if tap is not None else x, weight,
        bias if bias is not None else weight, q, k_cache, v_cache, page_table, positions, inv_freq, k, eps,
        PROLOGUE=prologue, HAS_RES=residual is not None, HAS_BIAS=bias is not None, TAP=tap is not None,
        BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0, H=num_heads, KVH=kvh, D=d, PS=page_size,
        num_warps=warps, num_stages=stages, **launch_options(x.device, 1),
    )
    return q, stream
