"""k and proposer "auto" with a trained DFlash drafter beside the n-gram proposer, replayed on the CPU.

As bench/cpu/policy_replay.py, with a DFlash drafter in place of the draft model: one pass drafts a
block whatever k, its cost and the verify step's extra for the target's states measured on the H200
(eighth run: a two-layer drafter trained 4.5 minutes on the Coder-1.5B; bench/RESULTS.md), and
what it keeps shaped like that drafter's rows there (the explanation: a first draft kept half the
time, each further one about a fifth; the edit: 1.35 tokens a step at k 15). The n-gram shapes are
policy_replay's. Rows: each proposer at fixed k and at k auto, proposer auto over both; then the
conversation.

    PYTHONPATH=. python bench/cpu/policy_replay_dflash.py [--replies 40] [--drafter eighth|ninth] [--no-known]
"""

from __future__ import annotations

import argparse
import random

from bench.cpu.policy_replay import CONVERSATION, LENGTH, MAX_EXTRA, MS, SHAPES, follow, trimmed
from engine import AUTO
from engine.speculation.replay import (
    FLASH,
    Machine,
    Replayed,
    Shape,
    agreeing,
    copying,
    costs,
    joined,
    replay,
    verify_cost,
)

KS = [1, 2, 3, 4, 8, 15]
# The H200's steps with the trained drafter, in ms (eighth run, explanation, greedy): plain 1.27,
# the n-gram rows' verify 1.34 at k 2, 1.42 at 4, 1.50 at 8, 1.61 at 15; the drafter's pass 0.45
# and its verify steps 0.12 longer than the n-gram's (the states): 0.57 a proposal; a catch-up of
# the states of a run of plain steps through the fused extension, about a decode step's tenth.
MACHINE = Machine(verify=verify_cost({1: 1.27, 3: 1.34, 5: 1.42, 9: 1.50, 16: 1.61}), decode=1.25 * MS,
                  lookup=0.03 * MS, first=0.0, chained=0.0, eager=0.0, host=0.04 * MS,
                  block_pass=0.57 * MS, block_catch_up=0.15 * MS)
# The drafter agreeing in stretches (stay, enter): a_1 = enter / (1 - stay + enter), a_j = stay.
# "eighth": the eighth run's drafter (4.5 minutes of training). "ninth": the ninth run's checkpoint
# (its bench's acceptance curves, the timings of that run being void): the explanation's first
# draft kept 56 % of the time and each further one some 42 %; the edit's 66 % and 45 % (the
# shape's ceiling for a first draft at that stay); free chat like the explanation, a little better.
DRAFTERS = {
    "eighth": {"explain": (0.2, 0.8), "edit": (0.15, 0.35), "chat": (0.25, 0.8)},
    "ninth": {"explain": (0.42, 0.74), "edit": (0.45, 1.0), "chat": (0.45, 0.8)},
}


# What a drafter's own training measured of it (engine/speculation/proposers/dflash/files.py,
# measured_acceptance), which k auto starts from and leans on: the eighth run's, from its last 50
# training steps (bench/results/session-8/history-l2-long.json.gz), the only run whose history came
# back; it is more hopeful than the drafters' serving on the explanation. --no-known: none.
KNOWN = [0.67, 0.56, 0.46, 0.38, 0.33, 0.34, 0.35, 0.37, 0.33, 0.13, 0.02, 0.02, 0.02, 0.02, 0.02]


def text(kind: str, length: int, seed: int, shapes: dict) -> tuple[Shape, Shape]:
    """(the drafter's shape, the n-gram proposer's) of `length` tokens of one kind of text."""
    rng = random.Random(seed)
    stay, enter = shapes[kind]
    return agreeing(length, stay, enter, rng), copying(length, SHAPES[kind, "greedy"][1], rng)


def settings(flash: Shape, ngram: Shape, known: list[float] | None):
    yield "plain", None
    for name, shape, model in (("n-gram", ngram, None), ("dflash", flash, FLASH)):
        for k in [*KS, AUTO]:
            yield f"{name} k={k}", Replayed(name, shape, k, model, known if model is FLASH else None)
    yield "auto / auto", [Replayed("n-gram", ngram), Replayed("dflash", flash, model=FLASH, known=known)]


def rows_of(kind: str, replies: int, shapes: dict, known: list[float] | None) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for seed in range(replies):
        flash, ngram = text(kind, LENGTH + MAX_EXTRA, seed, shapes)
        for name, proposer in settings(flash, ngram, known):
            run = replay(MACHINE, proposer, LENGTH, random.Random(seed))
            seconds[name] = seconds.get(name, 0.0) + run.seconds
    return {name: replies * LENGTH / s for name, s in seconds.items()}


def conversation(replies: int, shapes: dict, known: list[float] | None) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for seed in range(replies):
        turns = []
        for i, parts in enumerate(CONVERSATION):
            texts = [text(kind, n + MAX_EXTRA, seed * 100 + i * 10 + j, shapes) for j, (kind, n) in enumerate(parts)]
            cut = [(trimmed(f, n), trimmed(g, n)) for (f, g), (_, n) in zip(texts, parts)]
            flash = joined(*[f for f, _ in cut], texts[-1][0])
            ngram = joined(*[g for _, g in cut], texts[-1][1])
            turns.append((flash, ngram, sum(n for _, n in parts)))
        names = [name for name, _ in settings(*turns[0][:2], known)]
        for index, name in enumerate(names):
            step_cost = costs(MACHINE)
            kept = None
            for flash, ngram, length in turns:
                kept = follow(kept, list(settings(flash, ngram, known))[index][1])
                run = replay(MACHINE, kept, length, random.Random(seed), step_cost)
                seconds[name] = seconds.get(name, 0.0) + run.seconds
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replies", type=int, default=40)
    p.add_argument("--drafter", choices=sorted(DRAFTERS), default="eighth",
                   help="whose acceptance the drafter's shapes follow (default: the eighth run's)")
    p.add_argument("--no-known", action="store_true", help="k auto knows nothing of the drafter at first")
    args = p.parse_args()
    shapes, known = DRAFTERS[args.drafter], None if args.no_known else KNOWN
    print("| prompt | plain tok/s | n-gram best fixed | n-gram auto | dflash best fixed | dflash auto | auto / auto |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("edit", "explain", "chat"):
        rows = rows_of(kind, args.replies, shapes, known)
        plain = rows["plain"]
        cells = []
        for who in ("n-gram", "dflash"):
            fixed = {n: r for n, r in rows.items() if n.startswith(who) and not n.endswith("auto")}
            best = max(fixed, key=fixed.get)
            cells += [f"{best.split('=')[1]}: {fixed[best] / plain:.3f}x", f"{rows[f'{who} k=auto'] / plain:.3f}x"]
        print(f"| {kind} | {plain:.1f} | " + " | ".join(cells) + f" | {rows['auto / auto'] / plain:.3f}x |")
    seconds = conversation(args.replies, shapes, known)
    fixed = {n: s for n, s in seconds.items() if "auto" not in n}
    best = min(fixed, key=fixed.get)
    print(f"\nconversation: best fixed {best} {fixed[best]:.3f} s; n-gram auto {fixed[best] / seconds['n-gram k=auto']:.3f}x, "
          f"dflash auto {fixed[best] / seconds['dflash k=auto']:.3f}x, auto / auto {fixed[best] / seconds['auto / auto']:.3f}x "
          "its speed (goal >= 1.10)")


if __name__ == "__main__":
    main()
