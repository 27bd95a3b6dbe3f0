"""k "auto" where no draft is ever kept, against plain decoding, replayed with the H200's costs.

#17 asks that k auto be never more than 2 % slower than plain decoding, on any prompt, those where
every fixed k loses included: there it must fall back to plain steps, and what it pays is its
first steps (before its estimates fall), its probes, and its own time choosing. Each row replays
--replies replies of --tokens tokens in which every draft is wrong: a draft model (the 0.5B's
costs, greedy and sampled), a DFlash drafter with no measurement of itself (a random or foreign
one), and one whose training measured it good (the traced drafter's measurement, if --drafter
is given: text unlike anything it learnt). The n-gram proposer drafts only where the text repeats,
so a text it never gets right is one where it rarely drafts; it is left out.

    PYTHONPATH=. python bench/cpu/never_kept.py [--drafter DIR] [--tokens 256] [--replies 20]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench.cpu.policy_replay import GREEDY, SAMPLED
from bench.cpu.policy_trace import MACHINE
from engine import AUTO
from engine.speculation.proposers.dflash.files import measured_acceptance
from engine.speculation.replay import DRAFT, FLASH, Replayed, Shape, replay


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drafter", help="a trained drafter's folder: its measurement of itself")
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--replies", type=int, default=20)
    args = p.parse_args()
    rows = [("draft model, greedy", GREEDY, DRAFT, None), ("draft model, sampled", SAMPLED, DRAFT, None),
            ("DFlash, no measurement", MACHINE, FLASH, None)]
    if args.drafter:
        known = measured_acceptance(Path(args.drafter), args.block)
        rows.append(("DFlash, measured good", MACHINE, FLASH, known))
    print(f"{args.replies} replies of {args.tokens} tokens, no draft ever kept\n")
    print("| proposer | k auto / plain, time | drafting steps a reply | probes a reply |")
    print("|---|---|---|---|")
    for name, machine, model, known in rows:
        plain = auto = 0.0
        drafting = probes = 0
        for seed in range(args.replies):
            never = Shape([1] * (args.tokens + 32), [0] * (args.tokens + 32))
            plain += replay(machine, None, args.tokens, random.Random(seed)).seconds
            run = replay(machine, Replayed(name, never, AUTO, model, known), args.tokens, random.Random(seed))
            auto += run.seconds
            steps = {id(c): c for c in run.choices}.values()
            drafting += sum(1 for c in steps if c.k)
            probes += sum(1 for c in steps if c.probe)
        print(f"| {name} | {auto / plain:.4f} | {drafting / args.replies:.1f} | {probes / args.replies:.1f} |")


if __name__ == "__main__":
    main()
