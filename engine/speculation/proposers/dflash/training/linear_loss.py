"""The lm_head and the weighted cross-entropy in one step that never keeps the logits.

A training step scores every block position of every sample against a 150 K vocabulary: tens of
thousands of rows of float32 logits, gigabytes per sample. Autograd would keep them (and their
gradient) for the backward pass; recomputing them there costs a third pass over lm_head. Here the
forward pass walks the rows a chunk at a time and, while a chunk's logits exist, also takes the
loss's gradient with respect to the rows (softmax minus the target distribution, times the row's
weight, through lm_head); the backward pass only scales what was kept: [rows, H]. lm_head is the
target's, frozen: no gradient for it.

With distillation the target distribution of a row is W * p_teacher + (1 - W) * one-hot, p_teacher
the target model's own next-token softmax there (its final hidden through the same lm_head). The
returned total stays the hard-label cross-entropy, so a run's loss reads the same whatever W; only
the gradient follows the soft target.

On CUDA, without distillation, a chunk's logits stay in lm_head's dtype and one kernel
(engine/kernels/cross_entropy.py) turns them into their gradient in place, with each row's loss
and argmax: the float32 passes of the torch ops took more device time than the products.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 8192  # rows whose logits exist at once (5 GB of float32 at 150 K tokens)


def softmax_(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, made in place of float32 logits (no second [rows, V])."""
    return logits.sub_(logits.logsumexp(dim=-1, keepdim=True)).exp_()


class LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
                chunk_rows: int, teacher: torch.Tensor | None, distill: float) -> tuple[torch.Tensor, torch.Tensor]:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad = torch.empty_like(hidden)
        hits = torch.empty(len(hidden), dtype=torch.bool, device=hidden.device)
        fused = hidden.is_cuda and teacher is None
        if fused:
            from engine.kernels.cross_entropy import cross_entropy_grad_  # Triton: CUDA only
        for start in range(0, len(hidden), chunk_rows):
            rows = slice(start, start + chunk_rows)
            if fused:
                logits = hidden[rows].to(weight.dtype) @ weight.T
                losses, hits[rows] = cross_entropy_grad_(logits, targets[rows], weights[rows])
                total += losses.sum()
                grad[rows] = (logits @ weight).to(hidden.dtype)
                continue
            logits = (hidden[rows].to(weight.dtype) @ weight.T).float()
            wanted = targets[rows]
            norm = logits.logsumexp(dim=-1)
            total += ((norm - logits.gather(1, wanted[:, None]).squeeze(1)) * weights[rows]).sum()
            hits[rows] = logits.argmax(dim=-1) == wanted
            # d(loss)/d(logits) = (softmax - soft target) * weight, made in place of the logits
            probs = logits.sub_(norm[:, None]).exp_()
            label_share = 1.0
            if teacher is not None:
                probs.sub_(softmax_((teacher[rows].to(weight.dtype) @ weight.T).float()).mul_(distill))
                label_share = 1.0 - distill
            probs[torch.arange(len(wanted), device=probs.device), wanted] -= label_share
            probs.mul_(weights[rows][:, None])
            grad[rows] = (probs.to(weight.dtype) @ weight).to(hidden.dtype)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(hits)
        return total, hits

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor, _grad_hits) -> tuple:
        (grad,) = ctx.saved_tensors
        return grad * grad_total.to(grad.dtype), None, None, None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         weights: torch.Tensor, chunk_rows: int | None = None, teacher: torch.Tensor | None = None,
                         distill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_r weights[r] * CE(hidden[r] @ weight.T, targets[r]), and where each row's argmax is its
    target. hidden [R, H], weight [V, H] (frozen), targets [R], weights [R].

    With teacher [R, H] (the target model's final hidden for each row) and distill W > 0, the
    gradient is that of sum_r weights[r] * CE against W * softmax(teacher[r] @ weight.T) + (1 - W)
    * one-hot(targets[r]); the total returned is still the hard-label one. The teacher's logits
    take a second chunk of [rows, V], so the chunk is halved by default to keep the peak."""
    if distill <= 0.0:
        teacher = None
    elif teacher is None:
        raise ValueError("distillation needs the teacher's hidden states")
    chunk_rows = chunk_rows or (CHUNK_ROWS if teacher is None else max(1, CHUNK_ROWS // 2))
    if teacher is not None:
        teacher = teacher.detach()
    return LinearCrossEntropy.apply(hidden, weight.detach(), targets, weights.float(), chunk_rows, teacher,
                                    float(distill))
