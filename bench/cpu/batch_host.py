"""The host's work per decode step of batched decoding, with the model left out.

    python bench/cpu/batch_host.py [--batch 256] [--prompt-tokens 512] [--new-tokens 256]

Between two runs of n decode steps the host takes every row's pages for the run
(`Rows.start_run`), keeps each row's tokens up to its end (`Rows.take`) and retires the rows
that ended (`Rows.retire`); the model's steps are replaced by random tokens here, so what is
timed is only that bookkeeping, which the GPU waits for. Printed per run and per decode step,
for runs of 1, 2, 4 and 8 steps.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from engine.batching.rows import Rows
from engine.runtime.kv_cache import PagePool, SeqCache


def host_time(batch: int, prompt_tokens: int, new_tokens: int, n: int) -> tuple[float, int]:
    """(seconds of host work, runs) to decode `batch` prompts in runs of n steps."""
    page = 16
    max_pages = -(-(prompt_tokens + new_tokens + n) // page)
    pool = PagePool(1, batch * max_pages, page, 1, 1, torch.float32, "cpu")
    rows = Rows(batch, max_pages, new_tokens + n, stop_ids=[-1])
    for i in range(batch):
        cache = SeqCache(pool)
        cache.append(prompt_tokens)
        rows.add(i, i, cache, 1, new_tokens)
    gen = np.random.default_rng(0)
    seconds, runs = 0.0, 0
    while rows.count:
        steps = min(n, rows.steps_left())
        tokens = gen.integers(0, 150_000, (steps, rows.count))
        t0 = time.perf_counter()
        rows.start_run(steps)
        rows.take(tokens)
        rows.retire()
        seconds += time.perf_counter() - t0
        runs += 1
    return seconds, runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=256)
    args = p.parse_args()
    print(f"batch {args.batch}, {args.prompt_tokens}-token prompts, {args.new_tokens} new tokens each")
    print("| steps per run | runs | host per run, ms | host per decode step, ms |")
    print("|---|---|---|---|")
    for n in (1, 2, 4, 8):
        seconds, runs = min((host_time(args.batch, args.prompt_tokens, args.new_tokens, n) for _ in range(3)),
                            key=lambda r: r[0])
        steps = args.new_tokens - 1
        print(f"| {n} | {runs} | {1000 * seconds / runs:.3f} | {1000 * seconds / steps:.3f} |")


if __name__ == "__main__":
    main()
