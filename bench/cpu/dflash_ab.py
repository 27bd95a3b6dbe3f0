"""Two settings of a DFlash drafter's training on the same batches in the same order, on the CPU
(what dflash_start.py and dflash_distill.py compare).

A small stand-in for the GPU run: the Coder-0.5B as the target, samples of at most 512 tokens
from the Coder-1.5B's greedy replies (the same tokenizer; bench/dflash-data), batch 1, 32
anchors, a two-layer drafter, `--steps` steps each. Prints the mean loss and training tau per
WINDOW steps of each run, then their paired difference (the second run minus the first) with its
standard error over each span of steps.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from engine import load_model
from engine.speculation.proposers.dflash.training.data import read_samples
from engine.speculation.proposers.dflash.training.trainer import Trainer, TrainSettings

WINDOW = 20  # steps per printed mean


def arguments(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("target")
    p.add_argument("prompts")
    p.add_argument("replies", help="plain JSON lines (read_samples reads no gzip)")
    p.add_argument("--steps", type=int, default=120)
    return p


def samples_of(args) -> tuple:
    """(the target, its training samples: at most 512 tokens, at least 48 of them reply)."""
    target = load_model(args.target, device="cpu", dtype="float32", max_context=1024)
    samples = [s for s in read_samples(target, args.prompts, [args.replies])
               if len(s.ids) <= 512 and len(s.ids) - s.reply_start >= 48]
    return target, samples


def run(target, samples, steps: int, **setting) -> list:
    """The history of one run ([step, samples, seconds, loss, tau, curve] per step)."""
    settings = TrainSettings(num_layers=2, batch_size=1, anchors=32, max_length=512, steps=steps, warmup_steps=10,
                             learning_rate=6e-4, checkpoint_minutes=1000, **setting)
    trainer = Trainer(target, samples, settings, tempfile.mkdtemp(prefix="dflash-ab-"))
    trainer.run()
    return trainer.state.history


def paired(name: str, second: list, first: list, column: int) -> str:
    diff = [b[column] - a[column] for b, a in zip(second, first, strict=True)]
    error = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
    return f"{name} {statistics.mean(diff):+.3f} +- {error:.3f}"


def compare(runs: dict[str, list], difference: str, spans: list[tuple[int, int | None]]) -> None:
    """Print each run's means per WINDOW steps, then `difference` (second run minus first) per span."""
    for name, rows in runs.items():
        for a in range(0, len(rows), WINDOW):
            part = rows[a : a + WINDOW]
            print(f"{name:6} steps {a:3d}-{a + len(part):3d}: loss {statistics.mean(r[3] for r in part):.3f}"
                  f"  tau {statistics.mean(r[4] for r in part):.3f}  ({part[-1][2]:.0f} s in)")
    first, second = runs.values()
    for a, b in spans:
        b = len(first) if b is None else min(b, len(first))
        if b > a:
            print(f"steps {a}-{b}, {difference}: {paired('loss', second[a:b], first[a:b], 3)}, "
                  f"{paired('tau', second[a:b], first[a:b], 4)}")
