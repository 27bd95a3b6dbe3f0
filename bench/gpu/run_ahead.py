"""Plain decoding with and without the next run queued before the host reads one (runs.py), on
the GPU: ms a token of whole replies, runs read one by one against runs queued ahead, rounds
alternating; the tokens of both must be the same. Random weights of the bench's shapes.

    PYTHONPATH=. python bench/gpu/run_ahead.py [--shapes qwen2.5-0.5b qwen2.5-1.5b qwen3-4b] [--tokens 512]

--save FILE keeps each row's tokens (JSON), for an A/B across processes: the fused top-k draw
(SPECCHAT_FUSED_SAMPLING=0 / 1, `session.sh sampling-ab`) is chosen when the graphs are captured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from engine import SamplingParams, preset, random_model, stream

SAMPLED = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "seed": 1}


def reply(model, ids, sampling, run_ahead: bool) -> tuple[float, list[int]]:
    gen = stream(model, ids, sampling)
    gen.run_ahead = run_ahead
    steps = iter(gen)
    next(steps)  # the prefill's step: not a decode step
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in steps:
        pass
    wall = time.perf_counter() - t0
    return 1e3 * wall / (len(gen.tokens) - 1), gen.tokens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen3-4b"])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--save", help="each row's tokens, as JSON")
    args = p.parse_args()
    saved = {}
    print(f"{'shape':14s} {'sampling':8s} {'read one by one':>16s} {'queued ahead':>13s} {'ratio':>6s}  same tokens")
    for shape in args.shapes:
        model = random_model(preset(shape), device="cuda", dtype=torch.bfloat16, max_context=4096)
        ids = torch.randint(0, model.config.vocab_size - 2, (args.prompt,),
                            generator=torch.Generator().manual_seed(0)).tolist()
        for name, sampling in (("greedy", SamplingParams(max_tokens=args.tokens)),
                               ("sampled", SamplingParams(max_tokens=args.tokens, **SAMPLED))):
            model.warm_up(sampling)
            reply(model, ids, sampling, True)
            times, tokens = {False: [], True: []}, {}
            for _ in range(args.rounds):
                for ahead in (False, True):
                    ms, tokens[ahead] = reply(model, ids, sampling, ahead)
                    times[ahead].append(ms)
            one, queued = statistics.median(times[False]), statistics.median(times[True])
            print(f"{shape:14s} {name:8s} {one:13.3f} ms {queued:10.3f} ms {one / queued:6.3f}  "
                  f"{tokens[False] == tokens[True]}", flush=True)
            saved[f"{shape} {name}"] = tokens[True]
        del model
        torch.cuda.empty_cache()
    if args.save:
        with open(args.save, "w") as f:
            json.dump(saved, f)


if __name__ == "__main__":
    main()
