"""Exactness with a trained DFlash drafter: float32 target and drafter on the GPU, every reply of
DFlash at several k (auto among them), and proposer and k switching every step between DFlash and
n-gram (plain steps among them: a drafter that sits steps out must catch up exactly, and drops the
pass it drafted ahead of a step it does not draft), greedy and
sampled, token for token against plain decoding of the same model, on the bench's prompts and
held-out ones. In float32 no near-tie of bf16
rounding can part them, so any difference is a bug. Prints one line per case and a verdict;
exits non-zero on a difference.

    python bench/gpu/dflash_exact.py qwen2.5-coder-1.5b DRAFTER_DIR --held-out eval.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine import (
    AUTO,
    AutoProposer,
    DFlashProposer,
    Generation,
    NgramProposer,
    SamplingParams,
    generate,
    load_drafter,
    load_model,
)
from engine.speculation.adaptive import Choice
from specchat.bench.prompts import builtin_prompts

SWITCHING = "switching"
KS = [1, 4, 15, AUTO, SWITCHING]
# k a step for the switching case, 0 a plain step: runs of sitting out longer than a step's worth
# make the drafter catch up (context-only graph replays, then its pass)
SWITCH_KS = [15, 0, 3, 0, 0, 0, 7, 1, 15, 0, 0, 2]
SAMPLINGS = {"greedy": {}, "sampled": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "seed": 3}}


class Switching:
    """A policy that takes DFlash and n-gram in turn with k from SWITCH_KS, whatever they earn."""

    def __init__(self):
        self.steps = 0

    def choose(self, proposers, context, limit):
        i, self.steps = self.steps, self.steps + 1
        proposer = proposers[(i // 3) % len(proposers)]
        k = min(SWITCH_KS[i % len(SWITCH_KS)], limit, proposer.max_k)
        return Choice(proposer if k else None, k)

    def record(self, choice, step, proposers):
        pass

    def drafting_ahead(self, members, drafted):
        # the drafter drafts the next pass ahead after every step, its own or the n-gram's (a
        # witness), which the next step often drops
        return next((m for m in members if m.can_draft_ahead()), None)


def reply(target, ids, sampling, stop, drafter, k):
    if k != SWITCHING:
        return generate(target, ids, sampling, stop_ids=stop, speculative=DFlashProposer(drafter, k=k))
    proposer = AutoProposer([DFlashProposer(drafter, k=AUTO), NgramProposer(k=AUTO)])
    gen = Generation(target, ids, sampling, stop, proposer, policy=Switching())
    for _ in gen:
        pass
    return gen


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("drafter")
    p.add_argument("--held-out", required=True)
    p.add_argument("--held-out-count", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args()
    target = load_model(args.model, dtype="float32", max_context=4096)
    drafter = load_drafter(args.drafter, target)
    builtin = builtin_prompts()
    prompts = {name: target.encode_chat([{"role": "user", "content": builtin[name].text}])
               for name in ("edit", "explain")}
    lines = [json.loads(x) for x in Path(args.held_out).read_text().splitlines() if x.strip()]
    for i, line in enumerate(lines[: args.held_out_count]):
        prompts[f"held-out {i}"] = target.encode_chat(line["messages"])
    stop = target.stop_ids()
    differences = 0
    for sampling_name, settings in SAMPLINGS.items():
        sampling = SamplingParams(max_tokens=args.max_tokens, **settings)
        for name, ids in prompts.items():
            plain = generate(target, ids, sampling, stop_ids=stop).tokens
            for k in KS:
                result = reply(target, ids, sampling, stop, drafter, k)
                same = result.tokens == plain
                differences += not same
                at = next((i for i, (a, b) in enumerate(zip(result.tokens, plain)) if a != b), None)
                tau = result.metrics.tokens / max(result.metrics.steps, 1)
                print(f"{sampling_name:8} {name:12} k={k!s:9} tokens {len(plain):4d}  tokens/step {tau:5.2f}  "
                      f"same text: {'yes' if same else f'NO (token {at})'}")
    print(f"\nfloat32, {len(prompts)} prompts x {len(KS)} k x {len(SAMPLINGS)} samplings: "
          f"{'every reply equals plain decoding' if not differences else f'{differences} replies differ'}")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
