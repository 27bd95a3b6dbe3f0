"""Distillation against hard labels for a DFlash drafter's training, on the CPU: the same batches
in the same order, trained on the reply's tokens alone (--distill 0) and towards W * the target's
own next-token distribution + (1 - W) * the reply's token (`--distill W`, default 1).

A small stand-in for the GPU run, as dflash_start.py: the Coder-0.5B as the target, samples of at
most 512 tokens from the greedy replies in bench/dflash-data, batch 1, 32 anchors, a two-layer
drafter, `--steps` steps each. Prints the mean hard-label loss (what both runs report) and
training tau per 20 steps of each, then their paired difference (distilled minus hard) with its
standard error.

    PYTHONPATH=. python bench/cpu/dflash_distill.py GGUF_0.5B PROMPTS GREEDY [--steps 120] [--distill 1.0]

GREEDY is plain JSON lines (read_samples does not read gzip: zcat greedy.jsonl.gz first).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from engine import load_model
from engine.speculation.proposers.dflash.training.data import read_samples
from engine.speculation.proposers.dflash.training.trainer import Trainer, TrainSettings

WINDOW = 20  # steps per printed mean


def run(target, samples, steps: int, distill: float) -> list:
    settings = TrainSettings(num_layers=2, batch_size=1, anchors=32, max_length=512, steps=steps, warmup_steps=10,
                             learning_rate=6e-4, checkpoint_minutes=1000, distill=distill)
    trainer = Trainer(target, samples, settings, tempfile.mkdtemp(prefix="dflash-distill-"))
    trainer.run()
    return trainer.state.history  # [step, samples, seconds, loss, tau, curve]


def paired(name: str, distilled: list, hard: list, column: int) -> str:
    diff = [d[column] - h[column] for d, h in zip(distilled, hard, strict=True)]
    error = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
    return f"{name} {statistics.mean(diff):+.3f} +- {error:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target")
    p.add_argument("prompts")
    p.add_argument("replies")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--distill", type=float, default=1.0)
    args = p.parse_args()
    target = load_model(args.target, device="cpu", dtype="float32", max_context=1024)
    samples = [s for s in read_samples(target, args.prompts, [args.replies])
               if len(s.ids) <= 512 and len(s.ids) - s.reply_start >= 48]
    runs = {"hard": run(target, samples, args.steps, 0.0), f"W={args.distill:g}": run(target, samples, args.steps,
                                                                                       args.distill)}
    for name, rows in runs.items():
        for a in range(0, len(rows), WINDOW):
            part = rows[a : a + WINDOW]
            print(f"{name:6} steps {a:3d}-{a + len(part):3d}: loss {statistics.mean(r[3] for r in part):.3f}"
                  f"  tau {statistics.mean(r[4] for r in part):.3f}  ({part[-1][2]:.0f} s in)")
    hard, distilled = runs.values()
    for a in range(0, len(hard), 2 * WINDOW):
        b = min(a + 2 * WINDOW, len(hard))
        print(f"steps {a}-{b}, distilled minus hard: {paired('loss', distilled[a:b], hard[a:b], 3)}, "
              f"{paired('tau', distilled[a:b], hard[a:b], 4)}")


if __name__ == "__main__":
    main()
