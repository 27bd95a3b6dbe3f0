"""Cross-entropy and its gradient over a chunk of logits, in place, in one kernel (Triton, CUDA only).

A DFlash training step scores tens of thousands of rows against a 150 K vocabulary. Done with
torch ops, each row's logits are cast to float32 and then read and written again by the
log-sum-exp, the gather, the argmax, the subtraction, the exponential, the one-hot and the
weighting: some ten passes over gigabytes, which on the H200 took more device time than the
products around them (bench/RESULTS.md, sixth run). Here one program takes one row: a first
walk over its logits keeps the running maximum, the running sum of exponentials and the argmax;
a second writes weight * (softmax - one-hot) over the logits, in their own dtype, ready for the
product that takes the gradient back through lm_head. Two reads and one write of the logits as
they came from the product.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_V = 2048  # logits a program holds at once


@triton.jit
def _cross_entropy_grad(logits_ptr, stride, targets_ptr, weights_ptr, loss_ptr, hits_ptr, V,
                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride
    target = tl.load(targets_ptr + row)
    weight = tl.load(weights_ptr + row)
    cols = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)  # running maximum
    total = tl.zeros((), tl.float32)  # running sum of exp(logit - top)
    best = tl.zeros((), tl.int64)  # the first index of the maximum, as torch.argmax
    for start in range(0, V, BLOCK):
        at = start + cols
        z = tl.load(base + at, mask=at < V, other=float("-inf")).to(tl.float32)
        tile_top = tl.max(z, 0)
        tile_best = start + tl.argmax(z, 0).to(tl.int64)
        best = tl.where(tile_top > top, tile_best, best)  # strictly: an earlier tile keeps a tie
        new_top = tl.maximum(top, tile_top)
        total = total * tl.exp(top - new_top) + tl.sum(tl.exp(z - new_top), 0)
        top = new_top
    norm = top + tl.log(total)
    wanted = tl.load(base + target).to(tl.float32)
    tl.store(loss_ptr + row, weight * (norm - wanted))
    tl.store(hits_ptr + row, (best == target).to(tl.int8))
    for start in range(0, V, BLOCK):
        at = start + cols
        live = at < V
        z = tl.load(base + at, mask=live, other=0.0).to(tl.float32)
        g = tl.exp(z - norm) - (at == target).to(tl.float32)
        tl.store(base + at, (weight * g).to(logits_ptr.dtype.element_ty), mask=live)


def cross_entropy_grad_(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] (rows contiguous) become weights[r] * (softmax(logits[r]) - one-hot(targets[r])),
    in place and in their dtype. Returns each row's weighted cross-entropy [R] (float32) and whether
    its argmax (the first, as torch.argmax) is its target [R]."""
    rows, vocab = logits.shape
    assert logits.stride(1) == 1
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    hits = torch.empty(rows, dtype=torch.int8, device=logits.device)
    if rows:
        _cross_entropy_grad[(rows,)](logits, logits.stride(0), targets, weights, loss, hits, vocab,
                                     BLOCK=BLOCK_V, num_warps=8)
    return loss, hits.bool()
