"""Each kernel of a decode and a verify step, by name, on the GPU: what grows from 1 to 16 tokens,
and what keeping a DFlash drafter's states adds to them.

Random weights of a preset shape, bf16, 1,024 tokens of context; profiled graph replays. Run with
SPECCHAT_PDL=0 for times that add up (with dependent launch each kernel's time includes its wait
for the one before it). --taps: the steps keep the residual stream after five layers (z-lab's
rule), as the target's do for a DFlash drafter, and two columns more profile chained runs of 8
plain steps, greedy and sampled (what a drafter sitting out costs the target), per step:

    SPECCHAT_PDL=0 PYTHONPATH=. python bench/gpu/step_kernels.py qwen3-4b [--lengths 1 16] [--taps]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from engine import preset, random_model
from engine.profile import kernel_events, step_kernels
from engine.runtime.sampling import GREEDY, SamplingParams
from engine.speculation.proposers.dflash.network import distinct_target_layer_ids

RUN = 8  # plain steps a chained run (the generation's plain_run on CUDA)
SAMPLED = SamplingParams(temperature=0.7, top_p=0.8, top_k=20)  # the bench's sampled rows


def kernels(model, context: int, t: int, replays: int = 20) -> dict[str, tuple[float, int]]:
    """{kernel name: (ms a step, launches a step)} of replays of the t-token step's graph."""
    return table(step_kernels(model, context, t, replays), replays)


def chain_kernels(model, context: int, sampling=GREEDY, replays: int = 5) -> dict[str, tuple[float, int]]:
    """The same per step of chained runs of RUN plain steps, sampling so."""
    seq = model.new_sequence()
    seq.append(context)
    first = torch.zeros(1, dtype=torch.long, device=model.device)

    def run():
        model.chain(seq, first, RUN, sampling)
        seq.truncate(context)

    run()
    events = kernel_events(run, replays)
    seq.release()
    return table(events, replays * RUN)


def table(events: list[dict], per: int) -> dict[str, tuple[float, int]]:
    """{kernel name: (ms, launches)} of events, per `per` steps."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        name = e["name"][:60]
        out[name][0] += e["dur"] / 1e3 / per
        out[name][1] += 1 / per
    return {n: (ms, round(c)) for n, (ms, c) in out.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape")
    p.add_argument("--lengths", type=int, nargs="+", default=[1, 16])
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--taps", action="store_true", help="keep a DFlash drafter's states; add a chained run")
    args = p.parse_args()
    model = random_model(preset(args.shape), device="cuda", dtype=torch.bfloat16, max_context=args.context + 64)
    for cache in (model.pool.k, model.pool.v):
        cache.normal_()
    by_length = {}
    for taps in (False, True) if args.taps else (False,):
        if taps:
            model.state_layers = tuple(distinct_target_layer_ids(model.config.num_layers, 5))
        label = " +states" if taps else ""
        for t in args.lengths:
            by_length[f"{t}{label}"] = kernels(model, args.context, t)
        if args.taps:
            by_length[f"run{label}"] = chain_kernels(model, args.context)
            by_length[f"sampled run{label}"] = chain_kernels(model, args.context, SAMPLED)
    names = sorted({n for k in by_length.values() for n in k}, key=lambda n: -max(k.get(n, (0, 0))[0]
                                                                                   for k in by_length.values()))
    print(f"{args.shape}-shaped, {args.context} context: ms a step (launches) per kernel")
    print(f"{'kernel':60s} " + " ".join(f"{t:>16s}" for t in by_length))
    for n in names:
        print(f"{n:60s} " + " ".join(f"{k.get(n, (0, 0))[0]:9.4f} ({k.get(n, (0, 0))[1]:3d})" for k in by_length.values()))
    print(f"{'total':60s} " + " ".join(f"{sum(v[0] for v in k.values()):9.4f} ({sum(v[1] for v in k.values()):3d})"
                                       for k in by_length.values()))


if __name__ == "__main__":
    main()
