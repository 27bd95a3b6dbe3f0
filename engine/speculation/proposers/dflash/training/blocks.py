"""Where a training step puts its blocks, and what each block position must predict.

A sample is one token sequence (prompt, then the target's reply); the loss covers reply tokens.
Each step drafts many blocks per sample at once. A block sits at an anchor position a: its
first position holds the token at a (the last verified token, at serving time), the other
B-1 the mask token, at positions a..a+B-1; position i predicts the token at a + i. Its queries
see the context strictly before a (the target's states exist only for tokens already run) and
the whole block, with no causal mask; blocks never see each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Blocks:
    anchors: torch.Tensor  # [b, N] anchor positions (0 where not kept)
    keep: torch.Tensor  # [b, N] bool: a real block (a sample with few reply tokens has fewer)


def sample_anchors(loss_mask: torch.Tensor, count: int, generator: torch.Generator, multiple: int = 1
                   ) -> Blocks:
    """Up to `count` distinct random anchors per sample among the positions whose next token is a
    reply token (loss_mask [b, S], on the CPU: the generator decides, whatever the device).
    The block count is rounded up to a multiple of `multiple` (within count and S) with blocks
    that are not kept, so that steps share a few shapes."""
    b, s = loss_mask.shape
    valid = torch.zeros(b, s, dtype=torch.bool)
    valid[:, :-1] = loss_mask[:, 1:].cpu() > 0
    most = int(valid.sum(dim=1).max())
    n = max(1, min(count, s, -(-most // multiple) * multiple))
    # random keys for valid positions, 2 for the others: the n smallest are a uniform draw
    keys = torch.where(valid, torch.rand(b, s, generator=generator), torch.full((b, s), 2.0))
    order = keys.argsort(dim=1)[:, :n]
    keep = torch.gather(valid, 1, order)
    anchors = torch.where(keep, order, torch.zeros_like(order))
    anchors, sort = anchors.sort(dim=1)
    return Blocks(anchors, torch.gather(keep, 1, sort))


def block_ids(ids: torch.Tensor, blocks: Blocks, block_size: int, mask_token_id: int) -> torch.Tensor:
    """The blocks' input tokens [b, N * B]: the anchor's token, then B-1 mask tokens."""
    b, n = blocks.anchors.shape
    out = torch.full((b, n, block_size), mask_token_id, dtype=ids.dtype, device=ids.device)
    out[:, :, 0] = torch.gather(ids, 1, blocks.anchors)
    return out.view(b, n * block_size)


def block_positions(blocks: Blocks, block_size: int) -> torch.Tensor:
    """Positions [b, N * B] of the blocks' tokens: a, a+1, .., a+B-1."""
    offsets = torch.arange(block_size, device=blocks.anchors.device)
    return (blocks.anchors[:, :, None] + offsets).flatten(1)


def attention_mask(blocks: Blocks, context_length: int, block_size: int, first: int = 0,
                   count: int | None = None) -> torch.Tensor:
    """[b, 1, n * B, S + n * B] bool, True where a block query may attend: context keys before
    its anchor, and its own block's keys; for the n = count blocks from `first` on (all by
    default), whose own keys follow the context's."""
    b, total = blocks.anchors.shape
    n = total - first if count is None else count
    device = blocks.anchors.device
    q_block = torch.arange(n * block_size, device=device) // block_size  # [Q], 0..n-1
    anchor = blocks.anchors[:, first + q_block]  # [b, Q]
    context = torch.arange(context_length, device=device)[None, None, :] < anchor[:, :, None]
    context = context & blocks.keep[:, first + q_block][:, :, None]  # a dropped block sees only itself (no NaN)
    own = q_block[:, None] == q_block[None, :]  # [Q, Q]
    mask = torch.cat([context, own.expand(b, -1, -1)], dim=2)
    return mask[:, None]


def labels(ids: torch.Tensor, loss_mask: torch.Tensor, blocks: Blocks, block_size: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """What block positions 1..B-1 must predict, [b, N, B-1] token ids, and where that counts
    [b, N, B-1] bool (a kept block, inside the sequence, a reply token)."""
    s = ids.shape[1]
    at = blocks.anchors[:, :, None] + torch.arange(1, block_size, device=ids.device)  # [b, N, B-1]
    inside = at < s
    at = at.clamp(max=s - 1)
    b = ids.shape[0]
    targets = torch.gather(ids, 1, at.view(b, -1)).view_as(at)
    counted = torch.gather(loss_mask > 0, 1, at.view(b, -1)).view_as(at) & inside & blocks.keep[:, :, None]
    return targets, counted


def teacher_rows(final: torch.Tensor, blocks: Blocks, block_size: int) -> torch.Tensor:
    """The target's final hidden state where it predicts each label, [b * N * (B-1), H] from
    final [b, S, H]: position a + i - 1 for block position i (the target's next-token
    distribution there is over the token at a + i), in block_loss's row order. Positions past the
    sequence are clamped: labels() leaves those rows uncounted."""
    b, s, h = final.shape
    at = blocks.anchors[:, :, None] + torch.arange(block_size - 1, device=final.device)  # [b, N, B-1]
    at = at.clamp(max=s - 1).view(b, -1, 1).expand(-1, -1, h)
    return torch.gather(final, 1, at).flatten(0, 1)


def position_weights(block_size: int, gamma: float, device=None) -> torch.Tensor:
    """exp(-(i-1)/gamma) for block positions i = 1..B-1: an early draft matters more, since a
    wrong one ends the run of accepted drafts behind it."""
    i = torch.arange(1, block_size, device=device, dtype=torch.float32)
    return torch.exp(-(i - 1) / gamma)


def acceptance_curve(correct: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """For each block position i = 1..B-1, the share of kept blocks whose drafts 1..i are all
    right [B-1], left on the device (a training step reads it back after its optimizer step, not
    between its forward and backward passes): the acceptance curve a verify step would see,
    whose sum plus one is tau (the mean tokens per step of the blocks' greedy drafts, the bonus
    included). correct [b, N, B-1] bool, keep [b, N]."""
    run = correct.int().cumprod(dim=-1).float()  # [b, N, B-1]
    kept = keep.float()[:, :, None]
    return (run * kept).sum(dim=(0, 1)) / kept.sum().clamp(min=1.0)


def accepted_at(correct: torch.Tensor, keep: torch.Tensor) -> list[float]:
    """acceptance_curve, read back."""
    return acceptance_curve(correct, keep).tolist()
