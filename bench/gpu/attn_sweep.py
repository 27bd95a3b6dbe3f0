"""Attention launch settings swept on the lent GPU: 36 layers' paged attention as one graph.

Prints ms per step's worth of calls (every layer's attention) for each (splits, block_n) at 1
and 16 query tokens, 1K, 2K and 8K context, for Qwen3-4B's attention shape or, with the
argument qwen2.5-1.5b, that of Qwen2.5-1.5B (2 KV heads).
With `groups`: 16 query tokens at 1K..8K context, each program taking all of a KV head's
query rows (64 for Qwen3-4B, 96 padded to 128 for Qwen2.5-1.5B) or a group of them.
With `stages`: warps and pipeline stages of the split kernel.
With `lengths`: every verify length's query block (2..16 tokens) at 1K, 4K and 8K context, by
split count and pipeline stages.
Usage there: python3 bench/gpu/attn_sweep.py [qwen3-4b|qwen2.5-1.5b] [verify|groups|stages|lengths]
"""

import functools
import itertools
import statistics
import sys

import torch

from engine.kernels.attention import num_splits, paged_decode_attention

SHAPES = {"qwen3-4b": (36, 8, 32, 128), "qwen2.5-1.5b": (28, 2, 12, 128)}  # layers, KV heads, heads, head dim
PAGE = 16


def time_graph(fn, reps=30):
    fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        g.replay()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def paged_context(context, LAYERS, KVH, D):
    """Every layer's K/V cache for `context` tokens, and a shuffled page table over it."""
    pages = -(-(context + 16) // PAGE)
    k = torch.randn(LAYERS, pages * PAGE, KVH, D, device="cuda", dtype=torch.bfloat16)
    return k, torch.randn_like(k), torch.randperm(pages, device="cuda")


def every_layer(q, k, v, table, start, splits, block_n, warps=None, group_rows=None, stages=None):
    for layer in range(k.shape[0]):
        paged_decode_attention(q, k[layer], v[layer], table, start, PAGE, 0.08, True, splits=splits,
                               block_n=block_n, warps=warps, group_rows=group_rows, stages=stages)


def stages_sweep(LAYERS, KVH, H, D):
    """1 and 16 query tokens: warps (2 keep the 16-token block off the warp-group products) and
    pipeline stages of the split kernel, at the default split count and half of it."""
    for context in (1024, 8192):
        k, v, table = paged_context(context, LAYERS, KVH, D)
        start = torch.tensor([context], device="cuda")
        for t in (1, 16):
            q = torch.randn(t, H, D, device="cuda", dtype=torch.bfloat16)
            base = num_splits(KVH, max(16, t * H // KVH))
            row = []
            for splits, warps, stages in itertools.product((base // 2, base), (2, 4), (1, 2, 3, 4)):
                run = functools.partial(every_layer, q, k, v, table, start, splits, 32, warps, None, stages)
                row.append(f"s{splits}/w{warps}/st{stages} {time_graph(run):.3f}")
            print(f"context {context} tokens {t}: " + "  ".join(row), flush=True)


def groups_sweep(LAYERS, KVH, H, D):
    """16 query tokens: split counts around the default, each program taking all of a KV head's
    query rows or groups of 16, 32 or 64 of them."""
    base = num_splits(KVH, max(16, 16 * H // KVH))
    for context in (1024, 2048, 4096, 8192):
        k, v, table = paged_context(context, LAYERS, KVH, D)
        start = torch.tensor([context], device="cuda")
        q = torch.randn(16, H, D, device="cuda", dtype=torch.bfloat16)
        row = []
        for splits, rows in itertools.product((base // 2, base, base * 2), (None, 16, 32, 64)):
            run = functools.partial(every_layer, q, k, v, table, start, splits, 32, None, rows)
            row.append(f"s{splits}/m{rows or 'all'} {time_graph(run):.3f}")
        print(f"context {context} tokens 16: " + "  ".join(row), flush=True)


def verify_sweep(LAYERS, KVH, H, D):
    """16 query tokens only, with the warps per program as a third setting."""
    for context in (1024, 8192):
        k, v, table = paged_context(context, LAYERS, KVH, D)
        q = torch.randn(16, H, D, device="cuda", dtype=torch.bfloat16)
        start = torch.tensor([context], device="cuda")
        row = []
        for splits, block_n, warps in itertools.product((16, 32, 64), (16, 32), (4, 8)):
            run = functools.partial(every_layer, q, k, v, table, start, splits, block_n, warps)
            row.append(f"s{splits}/b{block_n}/w{warps} {time_graph(run):.3f}")
        print(f"context {context} tokens 16: " + "  ".join(row), flush=True)


def lengths_sweep(LAYERS, KVH, H, D):
    """Each step length's query block: split counts and pipeline stages (the kernel's choice is
    marked *), so a length whose rows pad to a block of its own can get settings of its own."""
    for context in (1024, 4096, 8192):
        k, v, table = paged_context(context, LAYERS, KVH, D)
        start = torch.tensor([context], device="cuda")
        for t in (2, 4, 8, 12, 16):
            q = torch.randn(t, H, D, device="cuda", dtype=torch.bfloat16)
            m = max(16, 1 << (t * H // KVH - 1).bit_length())
            chosen = (num_splits(KVH, m), 2 if m > 16 else 3)
            row = []
            for splits, stages in itertools.product((16, 32, 64, 128), (2, 3)):
                run = functools.partial(every_layer, q, k, v, table, start, splits, 32, None, None, stages)
                mark = "*" if (splits, stages) == chosen else ""
                row.append(f"s{splits}/st{stages}{mark} {time_graph(run):.3f}")
            print(f"context {context} tokens {t}: " + "  ".join(row), flush=True)


def main():
    LAYERS, KVH, H, D = SHAPES[sys.argv[1] if len(sys.argv) > 1 else "qwen3-4b"]
    if "lengths" in sys.argv:
        return lengths_sweep(LAYERS, KVH, H, D)
    if "verify" in sys.argv:
        return verify_sweep(LAYERS, KVH, H, D)
    if "groups" in sys.argv:
        return groups_sweep(LAYERS, KVH, H, D)
    if "stages" in sys.argv:
        return stages_sweep(LAYERS, KVH, H, D)
    print("default splits:", {t: num_splits(KVH, max(16, t * H // KVH)) for t in (1, 16)})
    for context in (1024, 2048, 8192):
        k, v, table = paged_context(context, LAYERS, KVH, D)
        for t in (1, 16):
            q = torch.randn(t, H, D, device="cuda", dtype=torch.bfloat16)
            start = torch.tensor([context], device="cuda")
            row = []
            for splits, block_n in itertools.product((8, 16, 32, 64, 128), (32, 64)):
                run = functools.partial(every_layer, q, k, v, table, start, splits, block_n)
                row.append(f"s{splits}/b{block_n} {time_graph(run):.3f}")
            print(f"context {context} tokens {t}: " + "  ".join(row), flush=True)

if __name__ == "__main__":
    main()
