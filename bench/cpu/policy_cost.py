"""What the adaptive policy (k and proposer "auto") costs the host per step, without a model.

A realistic state: a 1,600-token prompt of code-like tokens, the n-gram proposer (its buckets are
its match lengths) and two model-like drafters of set costs, a reply of 2,000 steps whose text
turns from copying to new prose and back every 100 steps. Each step times the policy's choice
(`AdaptivePolicy.choose`, as the generation calls it) and its update from the step
(`AdaptivePolicy.record`); the n-gram proposer's own match, run inside the choice to find its
bucket, is timed apart. Costs are those of the H200 table (bench/results/adaptive-prompts.txt).

    PYTHONPATH=. python bench/cpu/policy_cost.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from engine import AUTO, NgramProposer, Proposer, Step
from engine.speculation.adaptive import AdaptivePolicy
from engine.speculation.step_costs import CostTable

TARGET_STEP = 1.5e-3  # seconds of a one-token target step


class Drafter(Proposer):
    """Stands for a draft model: drafting k costs `first` + (k - 1) * `chained` seconds."""

    def __init__(self, name: str, first: float, chained: float):
        super().__init__(AUTO)
        self.name, self.first, self.chained = name, first, chained

    def drafting_seed(self, k, step_cost):
        return self.first + (k - 1) * self.chained


def verify_seed(n: int) -> float:
    return TARGET_STEP * (1 + 0.02 * (n - 1))


def accepted(rng: random.Random, who, k: int, copying: bool) -> int:
    """How many of k drafts the text keeps: the n-gram proposer's while copying, the drafters'
    mostly in prose."""
    rate = {"n-gram": 0.95 if copying else 0.1}.get(who.name, 0.9 if copying else 0.7)
    n = 0
    while n < k and rng.random() < rate:
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(0)
    prompt = [rng.randrange(2000) for _ in range(1600)]
    ngram = NgramProposer(k=AUTO)
    members = [ngram, Drafter("draft", 1.2e-3, 0.8e-3), Drafter("dflash", 0.7e-3, 0.0)]
    table = CostTable(verify_seed)
    policy = AdaptivePolicy(model=None, step_cost=lambda model: table)
    context = list(prompt)
    ngram.reset(context)
    choose_s, record_s, match_s = [], [], []
    for i in range(args.steps):
        copying = (i // 100) % 2 == 0
        t0 = time.perf_counter()
        choice = policy.choose(members, context, 15)
        t1 = time.perf_counter()
        ngram.match(context)
        t2 = time.perf_counter()
        k, who = choice.k, choice.proposer
        kept = accepted(rng, who, k, copying) if k else 0
        drafts = context[-k - 5 : -5] if k else []
        tokens = drafts[:kept] + [rng.randrange(2000)] if copying else [rng.randrange(2000) for _ in range(kept + 1)]
        step = Step(tokens=tokens, drafts=drafts, accepted=kept, kind="plain", k=k, proposer=who.name if who else "off",
                    propose_s=who.drafting_seed(k, None) if who else 0.0, verify_s=verify_seed(k + 1), position=len(context))
        t3 = time.perf_counter()
        policy.record(choice, step, members)
        t4 = time.perf_counter()
        context.extend(tokens)
        ngram.observe(context)
        choose_s.append(t1 - t0)
        match_s.append(t2 - t1)
        record_s.append(t4 - t3)
    print(f"{args.steps} steps, {len(members)} proposers, {len(context) - len(prompt)} tokens written")
    print("| part | median µs | mean µs | p99 µs |")
    print("|---|---|---|---|")
    total = [a + b for a, b in zip(choose_s, record_s)]
    for name, times in (("choose", choose_s), ("record", record_s), ("choose + record", total),
                        ("of which n-gram match", match_s)):
        ordered = sorted(times)
        print(f"| {name} | {statistics.median(times) * 1e6:.1f} | {statistics.fmean(times) * 1e6:.1f} | "
              f"{ordered[int(0.99 * len(ordered))] * 1e6:.1f} |")


if __name__ == "__main__":
    main()
