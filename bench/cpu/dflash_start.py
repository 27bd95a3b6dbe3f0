"""Where a DFlash drafter's training starts, on the CPU: random weights against the target's last
layers (`--start-from-target`), on the same batches in the same order.

A small stand-in for the GPU run: the Coder-0.5B as the target, samples of at most 512 tokens
from the Coder-1.5B's greedy replies (the same tokenizer; bench/dflash-data), batch 1, 32
anchors, a two-layer drafter, `--steps` steps each. Prints the mean loss and training tau per
20 steps of each start, then their paired difference (start from the target minus random) with
its standard error.

    PYTHONPATH=. python bench/cpu/dflash_start.py GGUF_0.5B PROMPTS GREEDY [--steps 120]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from engine import load_model
from engine.speculation.proposers.dflash.training.data import read_samples
from engine.speculation.proposers.dflash.training.trainer import Trainer, TrainSettings


def run(target, samples, steps: int, start: bool) -> list:
    settings = TrainSettings(num_layers=2, batch_size=1, anchors=32, max_length=512, steps=steps, warmup_steps=10,
                             learning_rate=6e-4, checkpoint_minutes=1000, start_from_target=start)
    trainer = Trainer(target, samples, settings, tempfile.mkdtemp(prefix="dflash-start-"))
    trainer.run()
    return trainer.state.history  # [step, samples, seconds, loss, tau, curve]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target")
    p.add_argument("prompts")
    p.add_argument("replies")
    p.add_argument("--steps", type=int, default=120)
    args = p.parse_args()
    target = load_model(args.target, device="cpu", dtype="float32", max_context=1024)
    samples = [s for s in read_samples(target, args.prompts, [args.replies])
               if len(s.ids) <= 512 and len(s.ids) - s.reply_start >= 48]
    runs = {"random": run(target, samples, args.steps, False), "target": run(target, samples, args.steps, True)}
    for name, rows in runs.items():
        for a in range(0, len(rows), 20):
            part = rows[a : a + 20]
            print(f"{name:6} steps {a:3d}-{a + len(part):3d}: loss {statistics.mean(r[3] for r in part):.3f}"
                  f"  tau {statistics.mean(r[4] for r in part):.3f}")
    for a, b in [(0, 40), (40, len(runs["random"]))]:
        loss = [t[3] - r[3] for t, r in zip(runs["target"][a:b], runs["random"][a:b], strict=True)]
        tau = [t[4] - r[4] for t, r in zip(runs["target"][a:b], runs["random"][a:b], strict=True)]
        print(f"steps {a}-{b}, target start minus random: loss {statistics.mean(loss):+.3f} "
              f"+- {statistics.stdev(loss) / len(loss) ** 0.5:.3f}, tau {statistics.mean(tau):+.3f} "
              f"+- {statistics.stdev(tau) / len(tau) ** 0.5:.3f}")


if __name__ == "__main__":
    main()
