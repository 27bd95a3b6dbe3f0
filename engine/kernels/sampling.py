"""A top-k draw in two kernels (Triton, CUDA only): `sampling.sample` with top-k on.

With torch ops a sampled step's draw is a radix top-k over the vocabulary (some ten kernels),
the k-wide sorts of top-p, and a hash, a log and an argmax of a few kernels each: 80-odd
launches that cost a Qwen2.5-1.5B-shaped decode step 0.12 ms over its greedy argmax on the H200
(9 %; bench/gpu/step_kernels.py, eighteenth run). Here:

1. `_block_top_k`: each program takes a block of one row's logits, scales them by 1/T as torch
   does (a product with the float32 reciprocal), and keeps its k best (by score, then by index);
2. `_draw`: one program a row takes the blocks' candidates, keeps the row's k best, sorts them
   into the whole-vocabulary order that `top_k_scores` sorts into, cuts top-p by the softmax's
   running sum, and draws argmax(score + Gumbel noise) with each token's own counter-based noise,
   the hash of `sampling.uniform_at` in the same int64 arithmetic.

The token is the one `sampling.sample` draws, but where float rounding decides: the top-p cut at
a near-tie of the running sum (the sums add in another order) and scores a last bit apart.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

BLOCK = 4096  # logits a program of the first kernel keeps in registers
MASK32 = 0xFFFFFFFF
NONE = tl.constexpr(-(1 << 63))  # the key of no token: below every score


@triton.jit
def _mix(x):
    """sampling._mix: a 32-bit xor-shift-multiply hash, in int64."""
    x = x & 0xFFFFFFFF
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@triton.jit
def _keys(vals, idxs):
    """(score, index) as one int64 that orders as the pair does, by score and then by the
    smaller index: the score's float bits made to compare as signed integers, above the index
    counted down. -0.0 ranks below +0.0, as in torch's radix top-k on CUDA (its bits' order)."""
    bits = vals.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) | (0xFFFFFFFF - idxs.to(tl.int64))


@triton.jit
def _unkeys(keys):
    ordered = (keys >> 32).to(tl.int32)
    bits = tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True), 0xFFFFFFFF - (keys & 0xFFFFFFFF)


@triton.jit
def _block_top_k(logits_ptr, stride, inv_t, V, cand_ptr, BLOCK: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    blocks = tl.num_programs(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    live = cols < V
    x = tl.load(logits_ptr + row * stride + cols, mask=live, other=0.0).to(tl.float32)
    keys = tl.where(live, _keys(x * inv_t, cols), NONE)
    out = (row * blocks + block) * KP + tl.arange(0, KP)
    tl.store(cand_ptr + out, tl.topk(keys, KP))


# an integer argument equal to 1 would be compiled in as a constant, which has no .to()
@triton.jit(do_not_specialize=["seed", "noise"])
def _draw(cand_ptr, positions_ptr, seeds_ptr, seed, noise, top_p, out_ptr, CANDS: tl.constexpr,
          CP: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, ROW_SEEDS: tl.constexpr, TOP_P: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    at = tl.arange(0, CP)
    keys = tl.load(cand_ptr + row * CANDS + at, mask=at < CANDS, other=NONE)
    vals, idxs = _unkeys(tl.topk(keys, KP))  # the row's best
    slots = tl.arange(0, KP)
    # the k kept, in the order top-p sums them: by score as torch's sort compares (-0.0 equal to
    # +0.0), then by index
    keys = tl.where(slots < K, _keys(tl.where(vals == 0.0, 0.0, vals), idxs), NONE)
    vals, idxs = _unkeys(tl.sort(keys, 0, descending=True))
    vals = tl.where(slots < K, vals, float("-inf"))
    if TOP_P:
        # keep the fewest best tokens whose mass reaches top_p: those with less before them
        probs = tl.exp(vals - tl.max(vals, 0))
        probs = probs / tl.sum(probs, 0)
        before = tl.cumsum(probs, 0) - probs
        vals = tl.where(before >= top_p, float("-inf"), vals)
    if ROW_SEEDS:
        seed = tl.load(seeds_ptr + row)
    key = (seed.to(tl.int64) ^ noise.to(tl.int64)) & 0xFFFFFFFF
    position = tl.load(positions_ptr + row).to(tl.int64)
    hashed = _mix(_mix(_mix(key) + position * 0x9E3779B1) + idxs * 0x7FEB352D)
    u = ((hashed >> 8).to(tl.float32) + 0.5) * (1.0 / (1 << 24))
    scores = tl.where(slots < K, vals - tl.log(-tl.log(u)), float("-inf"))
    tl.store(out_ptr + row, tl.sum(tl.where(slots == tl.argmax(scores, 0), idxs, 0), 0))


@functools.cache
def reciprocal(temperature: float) -> float:
    """1/T as torch scales by it: a tensor divided by a scalar is, on CUDA, a product with the
    scalar's float32 reciprocal."""
    return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(temperature, dtype=torch.float32))


def sample_top_k(logits: torch.Tensor, positions: torch.Tensor, temperature: float, top_k: int,
                 top_p: float, seed: int, noise: int, seeds: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of logits [R, V] (each row's last dimension contiguous), drawn among its
    top_k best of logits / temperature, top-p cut, with the noise of (seed or seeds[r], noise,
    positions[r], token). Returns [R] int64."""
    rows, vocab = logits.shape
    if rows == 0:
        return torch.empty(0, dtype=torch.int64, device=logits.device)
    kp = max(2, triton.next_power_of_2(top_k))
    blocks = triton.cdiv(vocab, BLOCK)
    cands = torch.empty((rows, blocks * kp), dtype=torch.int64, device=logits.device)
    inv_t = reciprocal(temperature)
    _block_top_k[(rows, blocks)](logits, logits.stride(0), inv_t, vocab, cands, BLOCK=BLOCK, KP=kp, num_warps=4)
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    positions = positions.to(torch.int64)
    _draw[(rows,)](cands, positions, positions if seeds is None else seeds.to(torch.int64),
                   seed & MASK32 if seeds is None else 0, noise, float(top_p), out, CANDS=blocks * kp,
                   CP=triton.next_power_of_2(blocks * kp), K=top_k, KP=kp, ROW_SEEDS=seeds is not None,
                   TOP_P=top_p < 1.0, num_warps=4)
    return out
