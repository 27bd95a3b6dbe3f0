"""The order a training epoch takes its samples in: shuffled, with each batch's samples of
similar length.

A batch is padded to its longest sample, and the target's pass and the drafter's attention run
over the padding too. Samples here vary from a few hundred to 2,048 tokens, so a batch of
random ones is mostly padding. The epoch's shuffle is cut into pools of POOL_BATCHES batches;
a pool is sorted by length and cut into batches, and the batches of the whole epoch are then
shuffled again, so the order of lengths carries no pattern from one step to the next. The
order is a function of (lengths, batch size, seed, epoch): a resumed run takes the same one.
"""

from __future__ import annotations

import torch

POOL_BATCHES = 32  # batches per pool sorted by length: wide enough to match lengths, still random


def epoch_order(lengths: list[int], batch_size: int, seed: int, epoch: int) -> list[int]:
    """Every sample index once, batch_size at a time in length-matched batches."""
    generator = torch.Generator().manual_seed(seed * 7919 + epoch)
    shuffled = torch.randperm(len(lengths), generator=generator).tolist()
    pool = batch_size * POOL_BATCHES
    batches = []
    for start in range(0, len(shuffled), pool):
        ranked = sorted(shuffled[start : start + pool], key=lambda i: lengths[i])
        batches += [ranked[i : i + batch_size] for i in range(0, len(ranked), batch_size)]
    return [i for b in torch.randperm(len(batches), generator=generator).tolist() for i in batches[b]]
