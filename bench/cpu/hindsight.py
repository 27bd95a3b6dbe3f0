"""The most any per-step choice of proposer and k could make of a traced reply: a choice that knows,
at every position, how many drafts each proposer would have kept (hindsight), on the H200's costs.

k and proposer "auto" guess from what the reply did so far; this knows. Each turn of the trace is
solved backwards (the fastest way from every position to the reply's end: a plain step, an n-gram
step or a DFlash step of each k from 1 to 15), the DFlash pass priced drafted ahead where the step
before was the drafter's too, as the loop runs it, and no host time charged to any choice. Rows:
plain, each proposer's best fixed k, both proposers in hindsight (each alone and together), and
what policy_trace.py replays auto / auto at; so the gap a better guess could close is the hindsight
row against the auto row, and what no guess can pass is the hindsight row against the best fixed.

    PYTHONPATH=. python bench/cpu/hindsight.py TRACE.json[.gz] [--drafter DIR]
"""

from __future__ import annotations

import argparse
import random

from bench.cpu.policy_replay import follow
from bench.cpu.policy_trace import MACHINE, read_turns, settings
from engine.limits import MAX_K
from engine.speculation.replay import Shape, costs, replay


def hindsight(length: int, ngram: Shape | None, flash: Shape | None) -> float:
    """Seconds of the fastest way through `length` tokens with these proposers, knowing their runs."""
    m = MACHINE
    # best[p][after_flash]: seconds from position p to the end, the step before p the drafter's or not
    best = [[0.0, 0.0] for _ in range(length + 1)]
    for p in range(length - 1, -1, -1):
        for after_flash in (0, 1):
            options = [m.decode + best[p + 1][0]]
            for shape, is_flash in ((ngram, False), (flash, True)):
                if shape is None or (not is_flash and not shape.buckets[p]):
                    continue
                if is_flash:
                    drafting = m.block_ahead + m.block_device if after_flash else m.block_pass
                else:
                    drafting = m.lookup
                for k in range(1, min(MAX_K, length - p - 1) + 1):
                    kept = min(k, shape.runs[p])
                    options.append(drafting + m.verify(k + 1) + best[p + kept + 1][int(is_flash)])
            best[p][after_flash] = min(options)
    return best[0][0]


def hindsight_fixed(length: int, ngram: Shape | None, flash: Shape | None, k: int) -> float:
    """Seconds of one proposer at a fixed k (no noise, no host time): as the loop runs it."""
    m, p, seconds, after_flash = MACHINE, 0, 0.0, False
    shape = ngram or flash
    while p < length:
        depth = min(k, length - p - 1)
        if depth <= 0 or (ngram is not None and not shape.buckets[p]):
            seconds += m.lookup + m.verify(1) if ngram is not None else m.decode
            p += 1
            continue
        drafting = m.lookup if ngram is not None else (
            m.block_ahead + m.block_device if after_flash else m.block_pass)
        seconds += drafting + m.verify(depth + 1)
        p += min(depth, shape.runs[p]) + 1
        after_flash = flash is not None
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--drafter", default=None, help="the traced drafter's folder (for the auto row's start)")
    p.add_argument("--seeds", type=int, default=3, help="replays of the auto row")
    args = p.parse_args()
    turns, known = read_turns(args.trace, args.drafter)
    rows: dict[str, float] = {"plain": sum(n * MACHINE.decode for _, _, n in turns)}
    for name, index in (("ngram", 0), ("dflash", 1)):
        fixed = {}
        for k in range(1, MAX_K + 1):
            seconds = 0.0
            for t, turn in enumerate(turns):
                only = [None, None]
                only[index] = turn[1 - index]
                seconds += hindsight_fixed(turn[2], only[0], only[1], k)
            fixed[k] = seconds
        k = min(fixed, key=fixed.get)
        rows[f"{name} best fixed k ({k}), no noise"] = fixed[k]
    rows["ngram in hindsight"] = sum(hindsight(n, ngram, None) for _, ngram, n in turns)
    rows["dflash in hindsight"] = sum(hindsight(n, None, flash) for flash, _, n in turns)
    rows["both in hindsight"] = sum(hindsight(n, ngram, flash) for flash, ngram, n in turns)
    names = [name for name, _ in settings(turns[0][0], turns[0][1], known)]
    auto = 0.0
    for seed in range(args.seeds):
        kept, step_cost = None, costs(MACHINE)
        for t, (flash, ngram, length) in enumerate(turns):
            kept = follow(kept, list(settings(flash, ngram, known))[names.index("auto / auto")][1])
            auto += replay(MACHINE, kept, length, random.Random(seed * 1000 + t), step_cost).seconds / args.seeds
    rows["auto / auto (replayed, host time included)"] = auto
    fixed_best = min(v for n, v in rows.items() if "best fixed" in n)
    tokens = sum(n for _, _, n in turns)
    print(f"trace: {args.trace} ({len(turns)} turns, {tokens} tokens)\n")
    print("| setting | s | ms a token | against the best fixed |")
    print("|---|---|---|---|")
    for name, seconds in rows.items():
        print(f"| {name} | {seconds:.3f} | {1e3 * seconds / tokens:.3f} | {fixed_best / seconds:.3f}x |")


if __name__ == "__main__":
    main()
