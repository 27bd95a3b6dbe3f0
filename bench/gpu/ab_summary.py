"""Two settings' bench runs side by side: each row's decode tokens a second, the median over the
rounds of each setting, and B's over A's. For an A/B run as alternating rounds (dflash.sh
ahead-ab writes ahead-0-R/bench.json and ahead-1-R/bench.json), read where they were fetched:

    python bench/gpu/ab_summary.py --a OUT/ahead-0-*/bench.json --b OUT/ahead-1-*/bench.json

Rows whose text differs between the settings are marked: their speeds compare other tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def rows(paths: list[str]) -> dict[tuple, list[dict]]:
    """Each row's runs over the files: (prompt, sampling, method, k) -> [row of each file]."""
    found = defaultdict(list)
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["rows"]:
                found[row["prompt"], row["sampling"], row["method"], str(row["k"])].append(row)
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", nargs="+", required=True, help="setting A's bench.json files (one a round)")
    p.add_argument("--b", nargs="+", required=True, help="setting B's bench.json files")
    args = p.parse_args()
    a, b = rows(args.a), rows(args.b)
    print("| prompt | sampling | method | k | A tok/s | B tok/s | B / A | A runs | B runs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(a.keys() & b.keys()):
        speed_a = statistics.median(r["tok_s"] for r in a[key])
        speed_b = statistics.median(r["tok_s"] for r in b[key])
        same = {tuple(r["tokens"]) for r in a[key] + b[key] if r.get("tokens")}
        mark = "" if len(same) <= 1 else " (texts differ)"
        runs = [" ".join(f"{r['tok_s']:.0f}" for r in side[key]) for side in (a, b)]
        print(f"| {' | '.join(key)} | {speed_a:.1f} | {speed_b:.1f} | {speed_b / speed_a:.3f}x{mark} | "
              f"{runs[0]} | {runs[1]} |")


if __name__ == "__main__":
    main()
