"""What the n-gram proposer's copy agreeing with a DFlash drafter's first draft says, on traced replies.

At every reply position where the n-gram proposer has a match, its first draft is set against the
drafter's (traces since 2026-12-05 keep the drafter's drafts and its probability of each:
bench/cpu/conversation_trace.py): how often they agree, and in each case how often each one's
first draft is kept and how many of its drafts are kept on average (up to 15). Where the trace
keeps the drafter's probabilities, also how often its first draft is kept by that probability,
at every position and where the copy has no match.

    PYTHONPATH=. python bench/cpu/agreement.py TRACE.json.gz [TRACE ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.cpu.conversation_trace import read_trace
from engine.limits import MAX_K
from engine.speculation.proposers.ngram.proposer import NgramProposer

SURE = [0.0, 0.3, 0.5, 0.7, 0.9, 1.01]  # the drafter's probability of its first draft, in bands


def kept(drafts: list[int], reply: list[int], at: int) -> int:
    run = 0
    while run < min(len(drafts), MAX_K) and at + run < len(reply) and drafts[run] == reply[at + run]:
        run += 1
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    args = p.parse_args()
    print("| trace | no match | agree | copy's 1st kept / mean kept | drafter's | disagree | copy's | drafter's |")
    print("|---|---|---|---|---|---|---|---|")
    bands = {b: [0, 0] for b in range(len(SURE) - 1)}  # band: [positions, first draft kept]
    for path in args.traces:
        counts = {"none": 0, "agree": [0, 0, 0, 0, 0], "disagree": [0, 0, 0, 0, 0]}
        for turn in read_trace(path)["turns"]:
            prompt, reply = turn["prompt"], turn["reply"]
            drafted, sure = turn["dflash_drafts"], turn.get("dflash_sure")
            ngram = NgramProposer(k=MAX_K)
            ngram.reset(prompt + reply[:1])
            for i in range(len(reply) - 1):
                context = prompt + reply[: i + 1]
                flash = drafted[i + 1]  # the trace's first entry follows the prompt's last token
                flash_run = kept(flash, reply, i + 1)
                if sure is not None:
                    band = next(b for b in range(len(SURE) - 1) if sure[i + 1][0] < SURE[b + 1])
                    bands[band][0] += 1
                    bands[band][1] += flash_run > 0
                copy = ngram.peek(context)
                if not copy:
                    counts["none"] += 1
                    continue
                copy_run = kept(copy, reply, i + 1)
                c = counts["agree" if copy[0] == flash[0] else "disagree"]
                c[0] += 1
                c[1] += copy_run > 0
                c[2] += copy_run
                c[3] += flash_run > 0
                c[4] += flash_run
        cells = [str(counts["none"])]
        for reading in ("agree", "disagree"):
            n, copy_first, copy_mean, flash_first, flash_mean = counts[reading]
            n = max(n, 1)
            cells += [str(counts[reading][0]), f"{copy_first / n:.0%} / {copy_mean / n:.1f}",
                      f"{flash_first / n:.0%} / {flash_mean / n:.1f}"]
        print(f"| {Path(path).name} | " + " | ".join(cells) + " |")
    if any(n for n, _ in bands.values()):
        print("\nThe drafter's first draft kept, by its probability of it (all traces, every position):\n")
        print("| probability | positions | kept |")
        print("|---|---|---|")
        for b, (n, hits) in bands.items():
            print(f"| {SURE[b]:.1f}-{min(SURE[b + 1], 1.0):.1f} | {n} | {hits / max(n, 1):.0%} |")


if __name__ == "__main__":
    main()
