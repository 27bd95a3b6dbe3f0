"""Where a DFlash drafter's k "auto" goes, step by step, against fixed k on the same prompts.

Each setting runs as the bench runs it (a fresh proposer a reply, its warm-up off the clock, the
prompt primed), --repeats replies a setting in rounds. Per setting: decode tok/s (median), tokens
a step, the k chosen (mean and histogram), propose and verify ms a step. For k auto, at the end of
its last reply: the policy's own view of the costs (verify steps by length, the drafter's pass
made for its step and made ahead) and of the acceptance per position, beside what the reply kept.
"auto, costs per k" prices the pass of every k apart, as the policy did before one-pass costs
(step_costs.OnePassCost), for the A/B.

    python bench/gpu/auto_k_steps.py --dflash DIR [--prompts edit explain] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch

from engine import AUTO, SamplingParams, load_drafter, load_model
from engine.speculation import adaptive
from engine.speculation.loop import Generation
from engine.speculation.proposers.dflash.proposer import DFlashProposer
from engine.speculation.step_costs import CostTable, OnePassCost, step_costs
from specchat.bench.prompts import load_prompts

SETTINGS = [4, 8, AUTO, "auto, costs per k"]


def reply(target, drafter, ids, stop, sampling, k):
    """One timed reply: (decode seconds, its steps after the prefill, the proposer)."""
    proposer = DFlashProposer(drafter, AUTO if k == "auto, costs per k" else k)
    target.warm_up(sampling)
    proposer.warm_up(target, sampling)
    adaptive.OnePassCost = CostTable if k == "auto, costs per k" else OnePassCost
    try:
        gen = Generation(target, ids, sampling, stop, speculative=proposer)
        steps = iter(gen)
        first = next(steps)
        proposer.prime([*ids, *first.tokens])
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        done = list(steps)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    finally:
        adaptive.OnePassCost = OnePassCost
    return seconds, done, proposer


def kept_per_position(steps) -> list[str]:
    """a_j as the reply showed it: drafts kept at position j of those reached."""
    out = []
    for j in range(8):
        reached = sum(1 for s in steps if len(s.drafts) > j and s.accepted >= j)
        kept = sum(1 for s in steps if len(s.drafts) > j and s.accepted > j)
        out.append(f"{kept / reached:.2f}/{reached}" if reached else "-")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--dflash", required=True)
    p.add_argument("--prompts", nargs="+", default=["edit", "explain"])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_grad_enabled(False)
    target = load_model(args.model, max_context=8192)
    drafter = load_drafter(args.dflash, target)
    stop = target.stop_ids()
    sampling = SamplingParams(max_tokens=args.tokens)
    for prompt in load_prompts(args.prompts):
        ids = target.encode_chat([{"role": "user", "content": prompt.text}])
        runs = {k: [] for k in SETTINGS}
        reply(target, drafter, ids, stop, sampling, AUTO)  # warm-up: every graph captured
        for _ in range(args.repeats):
            for k in SETTINGS:
                runs[k].append(reply(target, drafter, ids, stop, sampling, k))
        print(f"\n## {prompt.name}: {len(ids)} prompt tokens, {args.tokens} new, greedy\n")
        print("| k | tok/s (median) | runs | tokens a step | mean k | k chosen | propose ms | verify ms |")
        print("|---|---|---|---|---|---|---|---|")
        for k, done in runs.items():
            rates = [sum(len(s.tokens) for s in steps) / seconds for seconds, steps, _ in done]
            steps = [s for _, run, _ in done for s in run]
            ks = Counter(s.k for s in steps)
            hist = " ".join(f"{n}:{c}" for n, c in sorted(ks.items()))
            print(f"| {k} | {statistics.median(rates):.1f} | {' '.join(f'{r:.0f}' for r in rates)} | "
                  f"{sum(len(s.tokens) for s in steps) / len(steps):.2f} | "
                  f"{sum(s.k for s in steps) / len(steps):.1f} | {hist} | "
                  f"{1e3 * statistics.mean(s.propose_s for s in steps):.3f} | "
                  f"{1e3 * statistics.mean(s.verify_s for s in steps):.3f} |")
        for k in (AUTO, "auto, costs per k"):
            _, steps, proposer = runs[k][-1]
            est = proposer.estimates
            print(f"\n{k}, the policy at the end of its last reply:")
            print(f"  a plain step, ms: {1e3 * step_costs(target)(1):.3f}")
            for label, ahead in (("after a pass made for the step", False), ("after a pass drafted ahead", True)):
                costs = est.verify_costs(ahead).upto(16)[1:]
                print(f"  its verify steps {label}, ms by length 1..16:", " ".join(f"{1e3 * c:.3f}" for c in costs))
            print("  pass made for its step, ms by k:", " ".join(f"{1e3 * c:.3f}" for c in est.drafting_costs()[1:]))
            print("  pass made ahead, ms by k:", " ".join(f"{1e3 * c:.3f}" for c in est.drafting_costs(True)[1:]))
            print("  a_j estimated:", " ".join(f"{a:.2f}" for a in est.acceptance(1).rates()[:10]))
            print("  a_j in the reply (kept/reached):", " ".join(kept_per_position(steps)))


if __name__ == "__main__":
    main()
