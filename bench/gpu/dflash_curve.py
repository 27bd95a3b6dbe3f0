"""The training curves of DFlash drafters: loss and tau (expected tokens per step of each step's
blocks, measured before the step learns from them, so unseen text during the first epoch only;
and, as dots, on the run's held-out samples where it measured them) against training minutes,
one line per drafter. Prints the smoothed figures at each minute.

    python bench/gpu/dflash_curve.py history-l2.json history-l5.json --out dflash-training.png
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def smoothed(values: list[float], width: int = 50) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def describe(settings: dict) -> str:
    label = f"{settings['num_layers']} layers, batch {settings['batch_size']}, lr {settings['learning_rate']:g}"
    if settings.get("standardize_features"):
        label += ", standardized"
    if settings.get("start_from_target"):
        label += ", from the target's layers"
    return label


def read_history(path: Path) -> str:
    """A history as written, or gzipped as the recorded ones are (they are the tree's largest text)."""
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("histories", nargs="+")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    loaded = [(path, json.loads(read_history(Path(path)))) for path in args.histories]
    runs = {}
    for path, run in loaded:
        rows = run["history"]
        # the file names the run (history-l2-long-12min.json: "l2-long-12min"); the recipe and how far it went
        label = (f"{Path(path).stem.removeprefix('history-')}: {describe(run['settings'])}, "
                 f"{rows[-1][1]:,} samples in {rows[-1][2] / 60:.1f} min")
        held = run.get("validation") or []  # measured on held-out samples, every minute or so
        runs[label] = {"minutes": [r[2] / 60 for r in rows], "samples": [r[1] for r in rows],
                       "loss": smoothed([r[3] for r in rows]), "tau": smoothed([r[4] for r in rows]),
                       "curves": [r[5] for r in rows if len(r) > 5],
                       "held": [(r[2] / 60, r[1], r[3], r[4]) for r in held]}
    for label, run in runs.items():
        print(label)
        marks = [next((i for i, m in enumerate(run["minutes"]) if m >= minute), len(run["minutes"]) - 1)
                 for minute in range(1, int(run["minutes"][-1]) + 2)]
        for i in dict.fromkeys(marks):
            print(f"  {run['minutes'][i]:5.1f} min  {run['samples'][i]:6d} samples  loss {run['loss'][i]:.3f}"
                  f"  tau {run['tau'][i]:.2f}")
        for minutes, samples, loss, tau in run["held"]:
            print(f"  {minutes:5.1f} min  {samples:6d} samples  held-out samples: loss {loss:.3f}  tau {tau:.2f}")
        if run["curves"]:  # where the drafts go wrong: each position's survival, over the last 50 steps
            last = run["curves"][-50:]
            survival = [sum(c[i] for c in last) / len(last) for i in range(len(last[0]))]
            print("  drafts 1..i all right, last 50 steps: " + " ".join(f"{a:.2f}" for a in survival))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib here: no chart")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2 + 0.25 * len(runs)))
    for label, run in runs.items():
        (line,) = left.plot(run["minutes"], run["loss"], label=label)
        right.plot(run["minutes"], run["tau"], label=label)
        if run["held"]:  # the held-out samples' figures: dots of the run's colour
            minutes = [h[0] for h in run["held"]]
            left.plot(minutes, [h[2] for h in run["held"]], "o", color=line.get_color(), markersize=4)
            right.plot(minutes, [h[3] for h in run["held"]], "o", color=line.get_color(), markersize=4)
    left.set(xlabel="training minutes (one H200)", ylabel="loss (position-weighted CE)", title="loss")
    right.set(xlabel="training minutes (one H200)", ylabel="tau (tokens per step, block 16)",
              title="tau of each step's blocks before it learns them\n(dots: held-out samples)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    # one legend under both plots: long labels inside either plot hid the curves
    fig.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=1, frameon=False)
    fig.tight_layout(rect=(0, 0.07 * len(runs), 1, 1))
    fig.savefig(args.out, dpi=110)
    print(f"chart: {args.out}")


if __name__ == "__main__":
    main()
