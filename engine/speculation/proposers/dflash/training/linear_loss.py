"""The lm_head and the weighted cross-entropy in one step that never keeps the logits.

A training step scores every block position of every sample against a 150 K vocabulary: tens of
thousands of rows of float32 logits, gigabytes per sample. Autograd would keep them (and their
gradient) for the backward pass; recomputing them there costs a third pass over lm_head. Here the
forward pass walks the rows a chunk at a time and, while a chunk's logits exist, also takes the
loss's gradient with respect to the rows (softmax minus one-hot, times the row's weight, through
lm_head); the backward pass only scales what was kept: [rows, H]. lm_head is the target's,
frozen: no gradient for it.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 8192  # rows whose logits exist at once (5 GB of float32 at 150 K tokens)


class LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
                chunk_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad = torch.empty_like(hidden)
        hits = torch.empty(len(hidden), dtype=torch.bool, device=hidden.device)
        for start in range(0, len(hidden), chunk_rows):
            rows = slice(start, start + chunk_rows)
            logits = (hidden[rows].to(weight.dtype) @ weight.T).float()
            wanted = targets[rows]
            norm = logits.logsumexp(dim=-1)
            total += ((norm - logits.gather(1, wanted[:, None]).squeeze(1)) * weights[rows]).sum()
            hits[rows] = logits.argmax(dim=-1) == wanted
            # d(loss)/d(logits) = (softmax - one-hot) * weight, made in place of the logits
            probs = logits.sub_(norm[:, None]).exp_()
            probs[torch.arange(len(wanted), device=probs.device), wanted] -= 1.0
            probs.mul_(weights[rows][:, None])
            grad[rows] = (probs.to(weight.dtype) @ weight).to(hidden.dtype)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(hits)
        return total, hits

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor, _grad_hits) -> tuple:
        (grad,) = ctx.saved_tensors
        return grad * grad_total.to(grad.dtype), None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         weights: torch.Tensor, chunk_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_r weights[r] * CE(hidden[r] @ weight.T, targets[r]), and where each row's argmax is its
    target. hidden [R, H], weight [V, H] (frozen), targets [R], weights [R]."""
    return LinearCrossEntropy.apply(hidden, weight.detach(), targets, weights.float(), chunk_rows or CHUNK_ROWS)
