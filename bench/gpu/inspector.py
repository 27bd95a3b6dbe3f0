"""The step inspector's price on the GPU (issue 20): decode speed with Generation.inspect off and
on, plain / n-gram / the draft model, greedy, on the bench's edit prompt; rounds alternate so drift
hits both alike. It checks first that the inspector changes no token and that its probabilities
are those of the verify step's logits (the model's own token is the likeliest when greedy).

Run on this tree and on one without the inspector (`.oldtree`) to see that off costs nothing:
the old tree has no `inspect`, so its rows are the "off" of before (bench/gpu/session.sh inspector).

    python bench/gpu/inspector.py [--model qwen2.5-coder-1.5b] [--draft qwen2.5-coder-0.5b] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from engine import Generation, ProposerOptions, SamplingParams, load_model, load_proposer
from specchat.bench.prompts import builtin_prompts


def decode(target, ids, sampling, proposer, inspect: bool):
    gen = Generation(target, ids, sampling, target.stop_ids(), proposer)
    gen.inspect = inspect  # a tree without the inspector ignores it
    steps = list(gen)
    return gen, steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--label", default="this tree")
    p.add_argument("--max-context", type=int, default=8192)
    p.add_argument("--prompt", default=None, help="instead of the bench's edit prompt (a CPU smoke run)")
    args = p.parse_args()
    target = load_model(args.model, max_context=args.max_context)
    sampling = SamplingParams(max_tokens=args.max_new_tokens)
    target.warm_up(sampling)
    options = ProposerOptions({"draft": args.draft})
    setups = [("plain", None)]
    for name, k in (("ngram", 4), ("draft", 4)):
        loaded = load_proposer(name, target, options)
        proposer = loaded.make(k)
        proposer.warm_up(target, sampling)
        setups.append((f"{name} k={k}", proposer))
    text = args.prompt or builtin_prompts()["edit"].text
    ids = target.encode_chat([{"role": "user", "content": text}])
    has_inspector = "inspect" in vars(Generation(target, ids, sampling))

    if has_inspector:  # checks before figures: the same tokens, the verify step's own numbers
        for name, proposer in setups:
            off, _ = decode(target, ids, sampling, proposer, False)
            on, steps = decode(target, ids, sampling, proposer, True)
            if off.tokens != on.tokens:
                sys.exit(f"{name}: the inspector changed the reply")
            for step in steps[1:]:
                view = step.inspection
                if view.model_tokens[view.decided_at] != view.top[0][0] or step.tokens[-1] != view.top[0][0]:
                    sys.exit(f"{name}: step at {step.position}: the model's token is not its likeliest")
        print("checks: same tokens with the inspector on and off; the model's token is its likeliest")

    modes = [False, True] if has_inspector else [False]
    times = {(name, m): [] for name, _ in setups for m in modes}
    for _ in range(args.rounds):
        for name, proposer in setups:
            for inspect in modes:
                gen, _ = decode(target, ids, sampling, proposer, inspect)
                m = gen.metrics
                times[(name, inspect)].append((m.decode_s / max(m.steps, 1), m.tokens_per_second))
    print(f"\n## {args.label}: {args.model}, greedy, {args.max_new_tokens} tokens, median of {args.rounds}\n")
    print("| setting | inspector | ms per step | tok/s | on / off |")
    print("|---|---|---|---|---|")
    for name, _ in setups:
        base = statistics.median(t for t, _ in times[(name, False)])
        for inspect in modes:
            step_s = statistics.median(t for t, _ in times[(name, inspect)])
            rate = statistics.median(r for _, r in times[(name, inspect)])
            print(f"| {name} | {'on' if inspect else 'off'} | {1000 * step_s:.3f} | {rate:.1f} | {step_s / base:.3f} |")


if __name__ == "__main__":
    main()
