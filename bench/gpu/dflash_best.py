"""Which of several training runs ended best on its held-out samples: prints a line per run on
stderr and the best's name, peak learning rate and held-out tau, tab-separated, on stdout, so a
script can train the long run with the recipe an equal-time A/B picked:

    lr=$(python3 bench/gpu/dflash_best.py history-l2-a.json history-l2-b.json | cut -f2)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dflash_curve import read_history  # same folder: the recorded histories may be gzipped


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("histories", nargs="+")
    args = p.parse_args()
    runs = []
    for path in args.histories:
        h = json.loads(read_history(Path(path)))
        if not h.get("validation"):
            print(f"{path}: no held-out rows, left out", file=sys.stderr)
            continue
        _, samples, seconds, loss, tau, _ = h["validation"][-1]
        name = Path(path).name.removeprefix("history-").removesuffix(".gz").removesuffix(".json")
        lr = h["settings"]["learning_rate"]
        runs.append((tau, name, lr))
        print(f"{name:<24} lr {lr:<8g} {samples:>7} samples in {seconds / 60:.1f} min  held-out loss {loss:.3f}"
              f"  tau {tau:.2f}", file=sys.stderr)
    if not runs:
        sys.exit("no run with held-out rows")
    tau, name, lr = max(runs)
    print(f"{name}\t{lr:g}\t{tau:.3f}")


if __name__ == "__main__":
    main()
