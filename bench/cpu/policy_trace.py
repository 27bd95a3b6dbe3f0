"""k and proposer "auto" replayed on a traced conversation: the real target's replies and what a
real DFlash drafter and the n-gram proposer keep at every position, with the H200's step costs.

bench/cpu/conversation_trace.py writes the trace (each turn's greedy reply, and the drafts the
target keeps after each of its positions). Here each turn becomes a `Shape` per proposer (the
n-gram proposer's from the real NgramProposer reading the same tokens), and every setting replays
the turns in order, the policy's estimates carried from turn to turn as a chat's are. Rows: ms a
token per turn for plain decoding, each proposer at each fixed k and at k auto, and proposer auto
over both; the figure #17 asks of: auto / auto against the best fixed setting and against plain.

    PYTHONPATH=. python bench/cpu/policy_trace.py TRACE.json[.gz] [--drafter DIR] [--seeds 5]

Traces of the bench's conversation: bench/results/session-19/conversation-trace-*.json.gz; of the
conversation, a second one, the bench's edit and explanation and three held-out prompts with the
thirty-minute drafter, keeping its drafts and its probability of each (what a witness reads):
bench/results/session-23/*-s20-sure.json.gz.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from bench.cpu.policy_replay import follow
from engine import AUTO
from engine.speculation.proposers.dflash.files import measured_acceptance
from engine.speculation.proposers.ngram.proposer import NgramProposer
from engine.speculation.replay import FLASH, Machine, Replayed, Shape, costs, replay, verify_cost

KS = [1, 2, 4, 7, 15]  # bench/gpu/adaptive.py's
MS = 1e-3
# The H200, nineteenth run (bench/RESULTS.md; Coder-1.5B, the trained drafter): a plain step 1.23 ms
# read one by one, 1.215 in runs queued ahead; verify steps 1.37-1.49 at 5 tokens, 1.50 at 9; a
# drafter pass 0.23-0.25 (0.33 taking in 128 states), its verify steps' states free; a pass drafted
# behind the verify step before it (the default since the twenty-first run): 0.02 ms of the host's,
# its verify step 0.17 ms longer. The host's time between steps, beyond a fixed k's (twenty-first
# run's bench rows, wall time less the steps' windows): k auto 0.06-0.07 ms a step, proposer auto
# over two members 0.13; replayed so, the twentieth run's policy took the conversation to 1.014-1.050x
# its best fixed setting where the GPU measured 1.037x. Since 2026-12-05 the policy does more a
# step (the members it watches learn from every step; proposer auto's also reads a witness and
# weighs every option under each reading before): 0.01 ms more of the host's for k auto, 0.02
# more a member for proposer auto (bench/cpu/host_between_steps.py on this CPU, outside the
# steps' windows: n-gram k auto 57 -> 61-70 us a step, auto / auto 79 -> 98-99), and where it
# reads a witness's drafts, 0.02 ms it cannot hide behind the pass (the read's wait, the choice
# after it). Within a run of copy steps that keep every draft the policy takes the last choice
# again unweighed (AdaptivePolicy.repeat): on this CPU 3-6 us against 25-50 for a choice it
# weighs (replaying these traces), so 0.03 ms less than k auto's host time. Of the policy's time
# around a read pass, a quarter follows the read (on this CPU 230 us before it, 80 after, the
# twenty-second run's code reading): the device idles through it.
MACHINE = Machine(verify=verify_cost({1: 1.23, 3: 1.33, 5: 1.42, 9: 1.50, 16: 1.60}), decode=1.215 * MS,
                  lookup=0.03 * MS, first=0.0, chained=0.0, eager=0.0, host=0.08 * MS, host_member=0.08 * MS,
                  block_pass=0.25 * MS, block_catch_up=0.1 * MS, block_ahead=0.02 * MS, block_device=0.17 * MS,
                  peek=0.02 * MS, host_repeat=0.05 * MS, after_read=0.25)


def ngram_shape(prompt: list[int], reply: list[int], max_n: int | None = None) -> Shape:
    """The n-gram proposer's bucket and kept run at each reply position after the first token
    (looking up suffixes of up to `max_n` tokens, default its own)."""
    proposer = NgramProposer(k=15) if max_n is None else NgramProposer(k=15, max_n=max_n)
    proposer.reset(prompt + reply[:1])
    buckets, runs, firsts = [], [], []
    for i in range(len(reply) - 1):
        context = prompt + reply[: i + 1]
        buckets.append(proposer.bucket(context))
        drafts = proposer.propose(context, 15).drafts
        run = 0
        while run < len(drafts) and i + 1 + run < len(reply) and drafts[run] == reply[i + 1 + run]:
            run += 1
        runs.append(run)
        firsts.append(drafts[0] if drafts else -1)
    return Shape(buckets, runs, firsts)


def flash_shape(turn: dict) -> Shape:
    """The drafter's view: it always drafts (bucket 1); runs[0] of the trace is its draft after the
    prompt, which the prefill's token makes moot."""
    runs = turn["dflash"][1:]
    # traces since 2026-12-05 keep the drafts themselves, and the drafter's probability of each
    drafted, sure = turn.get("dflash_drafts"), turn.get("dflash_sure")
    return Shape([1] * len(runs), runs, None if drafted is None else [d[0] for d in drafted[1:]],
                 None if sure is None else [p[0] for p in sure[1:]])


def after_hit_or_miss(shapes: list[Shape], k: int = 15) -> tuple[float, float]:
    """Drafting k at every step along the replies: the share of steps that keep their first draft
    after a step that kept one, and after a step that kept none."""
    counts = {True: [0, 0], False: [0, 0]}  # the last step kept one: [steps, steps that kept one]
    for shape in shapes:
        p, last = 0, None
        while p < len(shape.runs):
            kept = shape.runs[p] >= 1
            if last is not None:
                counts[last][0] += 1
                counts[last][1] += kept
            last, p = kept, p + min(shape.runs[p], k) + 1
    return tuple(hits / max(1, steps) for steps, hits in (counts[True], counts[False]))


def settings(flash: Shape, ngram: Shape, known):
    yield "plain", None
    for name, shape, model in (("ngram", ngram, None), ("dflash", flash, FLASH)):
        for k in [*KS, AUTO]:
            yield f"{name} k={k}", Replayed(name, shape, k, model, known if model is FLASH else None)
    yield "auto / auto", [Replayed("n-gram", ngram), Replayed("dflash", flash, model=FLASH, known=known)]


def read_turns(path: str, drafter: str | None) -> tuple[list[tuple[Shape, Shape, int]], list[float] | None]:
    """A trace's turns, each (the drafter's shape, the n-gram proposer's, tokens after the first),
    and the drafter's own measurement k auto starts from (its folder's, else the trace's)."""
    opened = gzip.open if path.endswith(".gz") else open
    with opened(path, "rt") as f:
        trace = json.load(f)
    folder = Path(drafter or trace["drafter"])
    known = measured_acceptance(folder, trace["block"]) if folder.exists() else trace.get("known")
    turns = [(flash_shape(t), ngram_shape(t["prompt"], t["reply"]), len(t["reply"]) - 1) for t in trace["turns"]]
    return turns, known


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--drafter", default=None, help="the traced drafter's folder (its training's measurement: "
                   "what k auto starts from; default: the trace's folder, else the measurement the trace keeps)")
    p.add_argument("--seeds", type=int, default=5, help="replays of the conversation (step times vary 2 %%)")
    args = p.parse_args()
    turns, known = read_turns(args.trace, args.drafter)
    names = [name for name, _ in settings(turns[0][0], turns[0][1], known)]
    per_turn = {name: [0.0] * len(turns) for name in names}
    for seed in range(args.seeds):
        for index, name in enumerate(names):
            kept, step_cost = None, costs(MACHINE)
            for t, (flash, ngram, length) in enumerate(turns):
                kept = follow(kept, list(settings(flash, ngram, known))[index][1])
                run = replay(MACHINE, kept, length, random.Random(seed * 1000 + t), step_cost)
                per_turn[name][t] += run.seconds / args.seeds
    tokens = [n for _, _, n in turns]
    print(f"trace: {args.trace} ({len(turns)} turns, {sum(tokens)} tokens); drafter's own measurement "
          f"{'used' if known else 'absent'}; {args.seeds} replays\n")
    print("| setting | " + " | ".join(f"turn {i + 1} ({n})" for i, n in enumerate(tokens)) + " | total s |")
    print("|---|" + "---|" * (len(turns) + 1))
    for name in names:
        cells = " | ".join(f"{1e3 * s / n:.3f}" for s, n in zip(per_turn[name], tokens))
        print(f"| {name} | {cells} | {sum(per_turn[name]):.3f} |")
    totals = {name: sum(v) for name, v in per_turn.items()}
    fixed = {n: s for n, s in totals.items() if "auto" not in n}
    best = min(fixed, key=fixed.get)
    auto = per_turn["auto / auto"]
    worst = max(range(len(turns)), key=lambda t: auto[t] / per_turn["plain"][t])
    print(f"\nms a token per turn. Best fixed: {best} ({totals[best]:.3f} s); auto / auto {totals['auto / auto']:.3f} s, "
          f"{totals[best] / totals['auto / auto']:.3f}x its speed (#17: >= 1.10); n-gram auto "
          f"{totals[best] / totals['ngram k=auto']:.3f}x, dflash auto {totals[best] / totals['dflash k=auto']:.3f}x. "
          f"Auto / auto's worst turn against plain: turn {worst + 1}, {auto[worst] / per_turn['plain'][worst]:.3f}x "
          "plain's time (#17: <= 1.02)")
    for who in ("ngram", "dflash"):
        own = {n: s for n, s in fixed.items() if n.startswith(who)}
        mine = min(own, key=own.get)
        print(f"{who} k auto against its best fixed k ({mine}): {totals[mine] / totals[f'{who} k=auto']:.3f}x (#17: >= 0.97)")
    after_hit, after_miss = after_hit_or_miss([flash for flash, _, _ in turns])
    print(f"The drafter at k 15 every step: its first draft kept {after_hit:.0%} of the time after a step that "
          f"kept one, {after_miss:.0%} after one that kept none")


if __name__ == "__main__":
    main()
