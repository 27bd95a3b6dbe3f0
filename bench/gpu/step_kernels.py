"""Each kernel of a decode and a verify step, by name, on the GPU: what grows from 1 to 16 tokens.

Random weights of a preset shape, bf16, 1,024 tokens of context; profiled graph replays. Run with
SPECCHAT_PDL=0 for times that add up (with dependent launch each kernel's time includes its wait
for the one before it):

    SPECCHAT_PDL=0 PYTHONPATH=. python bench/gpu/step_kernels.py qwen3-4b [--lengths 1 16]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from engine import preset, random_model
from engine.profile import step_kernels


def kernels(model, context: int, t: int, replays: int = 20) -> dict[str, tuple[float, int]]:
    """{kernel name: (ms a step, launches a step)} of replays of the t-token step's graph."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in step_kernels(model, context, t, replays):
        name = e["name"][:60]
        out[name][0] += e["dur"] / 1e3 / replays
        out[name][1] += 1 / replays
    return {n: (ms, round(c)) for n, (ms, c) in out.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape")
    p.add_argument("--lengths", type=int, nargs="+", default=[1, 16])
    p.add_argument("--context", type=int, default=1024)
    args = p.parse_args()
    model = random_model(preset(args.shape), device="cuda", dtype=torch.bfloat16, max_context=args.context + 64)
    for cache in (model.pool.k, model.pool.v):
        cache.normal_()
    by_length = {t: kernels(model, args.context, t) for t in args.lengths}
    names = sorted({n for k in by_length.values() for n in k}, key=lambda n: -max(k.get(n, (0, 0))[0]
                                                                                   for k in by_length.values()))
    print(f"{args.shape}-shaped, {args.context} context: ms a step (launches) per kernel")
    print(f"{'kernel':60s} " + " ".join(f"{f'{t} token(s)':>16s}" for t in args.lengths))
    for n in names:
        print(f"{n:60s} " + " ".join(f"{by_length[t].get(n, (0, 0))[0]:9.4f} ({by_length[t].get(n, (0, 0))[1]:3d})"
                                     for t in args.lengths))
    print(f"{'total':60s} " + " ".join(f"{sum(v[0] for v in by_length[t].values()):9.4f} "
                                       f"({sum(v[1] for v in by_length[t].values()):3d})" for t in args.lengths))


if __name__ == "__main__":
    main()
