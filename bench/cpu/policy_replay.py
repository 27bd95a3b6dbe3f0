"""k and proposer "auto" against every fixed k, replayed on the CPU with the H200's step costs.

No model runs: the real AdaptivePolicy chooses each step (engine/speculation/replay.py), texts
shaped like the bench's prompts say how many drafts each step keeps, and the H200's measured
costs (Qwen2.5-Coder-1.5B target, 0.5B draft model, bf16, 256 new tokens; bench/RESULTS.md) what
each step takes. The shapes are fitted to the fixed-k rows' tokens per step on the H200 (the draft
model on the explanation: 1.76, 2.30, 3.00 at k = 1, 2, 4; its k = 7 and 15 rows wrote another
text from token 108 on, so they are left out). Each row sums `--replies` replies of different
texts of the same shape; auto is set against the best fixed k of the same proposer (proposer auto
against every fixed row) and against plain decoding, then every setting over a conversation that
moves between copying, explaining and free text.

    PYTHONPATH=. python bench/cpu/policy_replay.py [--replies 40] [--verbose] [--stalls 0.02]

--stalls: a share of steps takes three plain steps' time more, as when the host stalls (a garbage
collection, another thread holding the GIL); the GPU runs' step times have such outliers.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

from engine import AUTO
from engine.speculation.replay import (
    DRAFT,
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

KS = [1, 2, 4, 7, 15]
LENGTH = 256
MAX_EXTRA = 32  # positions past the reply's end: a last step's drafts may reach them
MS = 1e-3


# The H200's steps, in ms. Greedy: 1.47 for 1 token, 1.62-1.68 for 2-8 (the draft rows' verify),
# 1.84 for 16; sampled: plain 1.78, the draft rows' verify 2.16, 2.18, 2.24, 2.35, 2.6 at k = 1, 2,
# 4, 7, 15. The 0.5B draft model: 1.1 for its first draft, 0.78 for each further one; a catch-up
# it runs op by op, 18 (not timed for the draft model: an op-by-op step of the 1.5B target takes
# 18-21, bench/results/steps-coder-1.5b-real.json). `host`: the policy's own time per choice on
# the H200's host (auto's wall time per step on the explanation less its propose and verify time).
GREEDY = Machine(verify=verify_cost({1: 1.47, 2: 1.62, 4: 1.63, 8: 1.68, 16: 1.84}), decode=1.48 * MS,
                 lookup=0.05 * MS, first=1.10 * MS, chained=0.78 * MS, eager=18.0 * MS, host=0.04 * MS)
SAMPLED = Machine(verify=verify_cost({1: 1.80, 2: 2.16, 3: 2.18, 5: 2.24, 8: 2.35, 16: 2.60}), decode=1.78 * MS,
                  lookup=0.05 * MS, first=1.10 * MS, chained=0.78 * MS, eager=18.0 * MS, host=0.04 * MS)

# What each proposer's drafts keep, fitted to the H200's fixed-k rows: the draft model agreeing
# in stretches (stay, enter), the n-gram proposer {match length: (share of positions, first
# draft kept, each further one kept)}.
SHAPES = {
    ("edit", "greedy"): ((0.9995, 0.9), {0: (0.01, 0, 0), 1: (0.05, 0.5, 0.8), 2: (0.09, 0.7, 0.9),
                                         3: (0.85, 0.84, 0.985)}),
    ("edit", "sampled"): ((0.98, 0.92), {0: (0.01, 0, 0), 1: (0.05, 0.5, 0.8), 2: (0.09, 0.7, 0.88),
                                         3: (0.85, 0.82, 0.95)}),
    ("explain", "greedy"): ((0.78, 0.74), {0: (0.35, 0, 0), 1: (0.40, 0.12, 0.25), 2: (0.15, 0.3, 0.35),
                                          3: (0.10, 0.55, 0.6)}),
    ("explain", "sampled"): ((0.8, 0.76), {0: (0.30, 0, 0), 1: (0.42, 0.2, 0.3), 2: (0.15, 0.35, 0.4),
                                           3: (0.13, 0.55, 0.5)}),
    # free text (a haiku, names for a cat): less to copy than in an explanation, the draft model as
    # there (not measured)
    ("chat", "greedy"): ((0.78, 0.74), {0: (0.5, 0, 0), 1: (0.4, 0.1, 0.2), 2: (0.1, 0.2, 0.3)}),
}
# The bench's conversation (specchat/bench/conversation.json), greedy: each turn's reply as the
# kinds of text it is made of, in tokens.
CONVERSATION = [
    [("explain", 256)],
    [("edit", 256)],
    [("explain", 256)],
    [("chat", 120)],
    [("edit", 60), ("explain", 40), ("edit", 80), ("explain", 40), ("edit", 36)],  # docstrings added
    [("explain", 256)],
    [("chat", 40)],
    [("edit", 256)],
]


def texts(kind: str, sampling: str, length: int, seed: int) -> tuple[Shape, Shape]:
    """(the draft model's shape, the n-gram proposer's) of one reply."""
    (stay, enter), buckets = SHAPES[kind, sampling]
    rng = random.Random(seed)
    return agreeing(length + MAX_EXTRA, stay, enter, rng), copying(length + MAX_EXTRA, buckets, rng)


def settings(draft: Shape, ngram: Shape):
    """(row name, proposer or None) of every row: plain, each proposer at each fixed k and at auto,
    proposer auto."""
    yield "plain", None
    for name, shape, model in (("n-gram", ngram, None), ("draft", draft, DRAFT)):
        for k in [*KS, AUTO]:
            yield f"{name} k={k}", Replayed(name, shape, k, model)
    yield "auto / auto", [Replayed("n-gram", ngram), Replayed("draft", draft, model=DRAFT)]


def prompt_rows(kind: str, sampling: str, replies: int, machine: Machine) -> dict[str, dict]:
    runs: dict[str, list] = {}
    for seed in range(replies):
        draft, ngram = texts(kind, sampling, LENGTH, seed)
        for name, proposer in settings(draft, ngram):
            runs.setdefault(name, []).append(replay(machine, proposer, LENGTH, random.Random(seed)))
    return {name: summary(rs) for name, rs in runs.items()}


def summary(runs) -> dict:
    """The figures of all replies together (as one long reply of that kind of text)."""
    steps = sum(r.metrics.steps for r in runs)
    drafted = sum(r.metrics.drafted for r in runs)
    return {"tok_s": sum(r.metrics.tokens for r in runs) / sum(r.seconds for r in runs),
            "tokens_step": sum(r.metrics.tokens for r in runs) / steps,
            "accepted": sum(r.metrics.accepted for r in runs) / drafted if drafted else 0.0,
            "propose_ms": 1e3 * sum(r.metrics.propose_s for r in runs) / steps,
            "verify_ms": 1e3 * sum(r.metrics.verify_s for r in runs) / steps,
            "probes": sum(c.probe for r in runs for c in r.choices) / len(runs)}


def print_rows(kind: str, sampling: str, rows: dict[str, dict]) -> None:
    plain = rows["plain"]["tok_s"]
    print(f"\n### {kind}, {sampling}\n")
    print("| row | tok/s | over plain | tokens/step | accepted | propose ms | verify ms | probes a reply |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['tok_s']:.1f} | {r['tok_s'] / plain:.3f} | {r['tokens_step']:.2f} | "
              f"{100 * r['accepted']:.0f} % | {r['propose_ms']:.2f} | {r['verify_ms']:.2f} | {r['probes']:.1f} |")


def print_auto(kind: str, sampling: str, rows: dict[str, dict]) -> None:
    """Each proposer at k auto (and proposer auto) against its best fixed k and against plain."""
    plain = rows["plain"]["tok_s"]
    fixed = {n: r for n, r in rows.items() if "auto" not in n and n != "plain"}
    for who in ("n-gram", "draft", "auto"):
        auto = rows["auto / auto" if who == "auto" else f"{who} k=auto"]["tok_s"]
        same = {n: r["tok_s"] for n, r in fixed.items() if who == "auto" or n.startswith(who)}
        best = max(same, key=same.get)
        print(f"| {kind} | {sampling} | {who} | {best} | {same[best]:.1f} | {auto:.1f} | {auto / same[best]:.3f} | "
              f"{auto / plain:.3f} | {auto / max(same[best], plain):.3f} |")


def conversation(replies: int, machine: Machine) -> None:
    """Every setting over the whole conversation, `replies` times over different texts: its
    proposers (and what the policy learnt of them) and the target's step costs kept from turn to
    turn, as a chat keeps them; the total time of the replies."""
    totals: dict[str, float] = {}
    for seed in range(replies):
        turns = [turn(parts, seed * 100 + i * 10) for i, parts in enumerate(CONVERSATION)]
        for index, (name, _) in enumerate(settings(*turns[0][:2])):
            proposer, step_cost = None, costs(machine)
            for draft, ngram, length in turns:
                proposer = follow(proposer, list(settings(draft, ngram))[index][1])
                run = replay(machine, proposer, length, random.Random(seed), step_cost)
                totals[name] = totals.get(name, 0.0) + run.seconds
    tokens = replies * sum(n for parts in CONVERSATION for _, n in parts)
    print(f"\n## the conversation ({len(CONVERSATION)} turns, greedy; {replies} conversations, {tokens} tokens)\n")
    print("| setting | seconds | tok/s | auto / auto faster by |")
    print("|---|---|---|---|")
    for name, seconds in totals.items():
        print(f"| {name} | {seconds:.3f} | {tokens / seconds:.1f} | {seconds / totals['auto / auto']:.3f}x |")
    fixed = {n: s for n, s in totals.items() if "auto" not in n}
    best = min(fixed, key=fixed.get)
    print(f"\nbest fixed: {best}; auto / auto over it: {fixed[best] / totals['auto / auto']:.3f}x (goal >= 1.10)")


def turn(parts: list[tuple[str, int]], seed: int) -> tuple[Shape, Shape, int]:
    """(the draft model's shape, the n-gram proposer's, length) of a reply made of `parts`."""
    shapes = [texts(kind, "greedy", n, seed + j) for j, (kind, n) in enumerate(parts)]
    draft = joined(*[trimmed(d, n) for (d, _), (_, n) in zip(shapes, parts)], trimmed(shapes[-1][0], MAX_EXTRA))
    ngram = joined(*[trimmed(g, n) for (_, g), (_, n) in zip(shapes, parts)], trimmed(shapes[-1][1], MAX_EXTRA))
    return draft, ngram, sum(n for _, n in parts)


def trimmed(shape: Shape, length: int) -> Shape:
    return Shape(shape.buckets[:length], shape.runs[:length])


def follow(before, fresh):
    """The proposers of the turn before, reading the new turn's text (a chat keeps its
    proposers, and with them what the policy learnt of them)."""
    if before is None or fresh is None:
        return fresh
    for old, new in zip(before if isinstance(before, list) else [before], fresh if isinstance(fresh, list) else [fresh]):
        old.shape, old.seen = new.shape, new.seen
    return before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=40)
    parser.add_argument("--verbose", action="store_true", help="every row of every prompt")
    parser.add_argument("--stalls", type=float, default=0.0, metavar="SHARE",
                        help="this share of steps stalls on the host for three plain steps' time")
    args = parser.parse_args()
    machines = {"greedy": GREEDY, "sampled": SAMPLED}
    if args.stalls:
        machines = {name: replace(m, stalls=args.stalls, stall=3 * m.decode) for name, m in machines.items()}
    tables = {(kind, sampling): prompt_rows(kind, sampling, args.replies, machines[sampling])
              for kind in ("edit", "explain") for sampling in ("greedy", "sampled")}
    print("| prompt | sampling | proposer | best fixed | its tok/s | auto tok/s | auto / best | auto / plain |"
          " auto / max(best, plain) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (kind, sampling), rows in tables.items():
        print_auto(kind, sampling, rows)
    if args.verbose:
        for (kind, sampling), rows in tables.items():
            print_rows(kind, sampling, rows)
    conversation(args.replies, machines["greedy"])


if __name__ == "__main__":
    main()
