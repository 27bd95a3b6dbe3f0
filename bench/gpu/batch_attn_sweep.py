"""The batched decode step's attention swept on the lent GPU: launch settings against bandwidth.

    python3 bench/gpu/batch_attn_sweep.py [--batch 64 256] [--context 640 1500]

One layer of Qwen2.5-1.5B's attention shape (2 KV heads, 12 query heads, head dim 128) for a
batch of sequences whose lengths are spread evenly over [context / 2, 3 context / 2] (a batch of
`specchat generate` mixes them so), their pages shuffled through the pool. For each setting
(context slices, keys per iteration, warps, pipeline stages) it prints the median time of a graph of the call
and the K/V bytes read per second against the copy bandwidth (about 4.2 TB/s): how far the
kernel is from the floor that `generate` on long prompts pays every step.
"""

from __future__ import annotations

import argparse
import functools
import itertools

import torch
from attn_sweep import time_graph  # same folder: graphs timed as the other attention sweep times them
from triton.runtime.errors import OutOfResources

from engine.kernels.batch_attention import batch_decode_attention

KVH, H, D, PAGE = 2, 12, 128, 16


def batch(b: int, context: int):
    """Queries, one layer's K/V pool, page tables and last positions for b sequences."""
    gen = torch.Generator().manual_seed(b * 7919 + context)
    lengths = torch.randint(context // 2, 3 * context // 2 + 1, (b,), generator=gen)
    pages = (lengths + PAGE - 1) // PAGE
    width = int(pages.max())
    order = torch.randperm(int(pages.sum()), generator=gen)
    table = torch.zeros(b, width, dtype=torch.long)
    start = 0
    for i, n in enumerate(pages.tolist()):
        table[i, :n] = order[start:start + n]
        start += n
    slots = int(pages.sum()) * PAGE
    k = torch.randn(slots, KVH, D, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(b, H, D, device="cuda", dtype=torch.bfloat16)
    return q, k, torch.randn_like(k), table.cuda(), (lengths - 1).cuda(), int(lengths.sum())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    p.add_argument("--context", type=int, nargs="+", default=[640, 1500])
    args = p.parse_args()
    print("batch context splits block_n warps stages      us    TB/s")
    for b, context in itertools.product(args.batch, args.context):
        q, k, v, table, positions, tokens = batch(b, context)
        kv_bytes = 2 * tokens * KVH * D * k.element_size()
        rows = []
        for splits, block_n, warps, stages in itertools.product((1, 2, 4, 8), (64, 128), (4, 8), (None, 2, 4)):
            call = functools.partial(batch_decode_attention, q, k, v, table, positions, PAGE, 0.088,
                                     block_n=block_n, warps=warps, stages=stages, splits=splits)
            try:
                ms = time_graph(call)
            except OutOfResources:  # more shared memory than a multiprocessor has
                print(f"{b:5d} {context:7d} {splits:6d} {block_n:7d} {warps:5d} {stages!s:>6}  out of resources")
                continue
            rows.append((ms, splits, block_n, warps, stages))
            print(f"{b:5d} {context:7d} {splits:6d} {block_n:7d} {warps:5d} {stages!s:>6} {1000 * ms:7.1f} "
                  f"{kv_bytes / ms / 1e9:7.2f}")
        default = next(row for row in rows if row[1:] == (1, 64, 4, None))
        best = min(rows, key=lambda row: row[0])
        print(f"batch {b}, context {context}: today's launch {1000 * default[0]:.1f} us, best: splits {best[1]}, "
              f"block_n {best[2]}, warps {best[3]}, stages {best[4]}: {1000 * best[0]:.1f} us, "
              f"{kv_bytes / best[0] / 1e9:.2f} TB/s")


if __name__ == "__main__":
    main()
