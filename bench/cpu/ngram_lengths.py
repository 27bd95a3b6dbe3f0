"""How long a suffix the n-gram proposer should look up: its rows replayed per longest match.

Per trace (bench/cpu/conversation_trace.py's: the real target's replies, turn by turn) and per
longest suffix looked up (NgramProposer's max_n), the n-gram proposer's drafts along the real
replies (bench/cpu/policy_trace.py's `ngram_shape`), replayed at k 4, 15 and auto with the H200's
step costs (policy_trace's MACHINE), the policy's estimates carried from turn to turn: ms of decode
time a trace, the mean of --seeds replays.

    PYTHONPATH=. python bench/cpu/ngram_lengths.py TRACE.json.gz [...] [--lengths 3 5 8 12]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from bench.cpu.policy_replay import follow
from bench.cpu.policy_trace import MACHINE, ngram_shape
from engine import AUTO
from engine.speculation.replay import Replayed, costs, replay

KS = [4, 15, AUTO]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--lengths", type=int, nargs="+", default=[3, 5, 8, 12])
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    print("| trace | longest suffix | " + " | ".join(f"k {k} ms" for k in KS) + " |")
    print("|---|---|" + "---|" * len(KS))
    for path in args.traces:
        with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
            turns = json.load(f)["turns"]
        for max_n in args.lengths:
            shapes = [(ngram_shape(t["prompt"], t["reply"], max_n), len(t["reply"]) - 1) for t in turns]
            cells = []
            for k in KS:
                total = 0.0
                for seed in range(args.seeds):
                    kept, step_cost = None, costs(MACHINE)
                    for i, (ngram, length) in enumerate(shapes):
                        kept = follow(kept, Replayed("n-gram", ngram, k))
                        total += replay(MACHINE, kept, length, random.Random(seed * 1000 + i), step_cost).seconds
                cells.append(f"{1e3 * total / args.seeds:.1f}")
            print(f"| {Path(path).name.split('-s20')[0]} | {max_n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
