"""`specchat train-dflash` (train a DFlash drafter for a model) and `specchat dflash-prompts`
(the training prompts, made from code installed here, for `specchat generate` to answer).

    specchat dflash-prompts --out prompts.jsonl --count 4000
    specchat generate --model M --prompts prompts.jsonl --out greedy.jsonl
    specchat train-dflash --model M --prompts prompts.jsonl --replies greedy.jsonl --minutes 20
"""

from __future__ import annotations

import json
import math
import sys
import time

from rich.progress import ProgressColumn
from rich.text import Text

from engine import PACKS, EngineError, TrainSettings, build_prompts, cached_drafter_dir, train_dflash
from specchat.options import load_target
from specchat.progress import counted_bar, message_progress


def dflash_prompts(args) -> int:
    if args.count < 1:
        raise EngineError(f"--count must be at least 1, got {args.count}")
    if args.long_chars is not None and args.long_chars < 500:
        raise EngineError(f"--long-chars must be at least 500, got {args.long_chars}")
    long = {} if args.long_chars is None else {"long_chars": args.long_chars}
    lines = build_prompts(args.count, args.seed, held_out=args.held_out, long_only=args.long_only, **long)
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    print(f"specchat: {len(lines)} prompts written to {args.out}", file=sys.stderr)
    return 0


MIN_LENGTH = 64  # tokens a sample may be cut to: a prompt and a block of drafts after it


def check_values(args) -> None:
    """Refuse a value that would train nothing or nonsense in one line, before the target loads
    (which takes a while on a large one)."""
    def option(name: str) -> str:
        return "--" + name.replace("_", "-")

    for name in ("layers", "batch_size", "anchors", "epochs", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise EngineError(f"{option(name)} must be at least 1, got {getattr(args, name)}")
    if args.draft_vocab < 0:
        raise EngineError(f"--draft-vocab must be at least 0 (0: the whole vocabulary), got {args.draft_vocab}")
    if args.warmup_steps < 0:
        raise EngineError(f"--warmup-steps must be at least 0, got {args.warmup_steps}")
    if args.max_length < MIN_LENGTH:
        raise EngineError(f"--max-length must be at least {MIN_LENGTH} tokens (a prompt and a block of drafts), "
                          f"got {args.max_length}")
    for name in ("learning_rate", "minutes", "stop_after", "checkpoint_minutes", "gamma"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise EngineError(f"{option(name)} must be a positive number, got {value}")
    if not 0.0 <= args.distill <= 1.0:
        raise EngineError(f"--distill must be between 0 and 1, got {args.distill}")


def train(args) -> int:
    out = args.out
    if out is None:
        if args.model not in PACKS:
            raise EngineError("--out DIR is needed for a model that is not a pack")
        out = cached_drafter_dir(args.model)
    check_values(args)
    settings = TrainSettings(num_layers=args.layers, batch_size=args.batch_size, anchors=args.anchors,
                             max_length=args.max_length, epochs=args.epochs, steps=args.steps,
                             minutes=args.minutes, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
                             checkpoint_minutes=args.checkpoint_minutes, seed=args.seed,
                             standardize_features=args.standardize_features,
                             start_from_target=args.start_from_target, start_from=args.start_from,
                             distill=args.distill,
                             draft_vocab=args.draft_vocab, gamma=args.gamma)
    args.max_context = max(args.max_context or 0, args.max_length + 16)
    with message_progress() as progress:
        target = load_target(args, progress)
    with counted_bar("steps", Figures()) as bar:
        task = bar.add_task("train", total=None, loss=float("nan"), tau=float("nan"), held=None, rate=0.0,
                            left=None)

        def show(report) -> None:
            left = report.seconds / report.step * (report.total - report.step)
            if args.minutes:
                left = min(left, args.minutes * 60 - report.seconds)
            bar.update(task, total=report.total, completed=report.step, loss=report.loss, tau=report.tau,
                       held=report.validation_tau, rate=report.samples / max(report.seconds, 1e-9),
                       left=max(left, 0.0))

        state = train_dflash(target, args.prompts, args.replies, out, settings, resume=args.resume, on_step=show,
                             stop_after_minutes=args.stop_after)
    print(f"specchat: drafter written to {out} after {state.step} steps, {state.samples} samples, "
          f"{state.seconds / 60:.1f} minutes (load it with --dflash {out})", file=sys.stderr)
    return 0


class Figures(ProgressColumn):
    """Loss, the acceptance estimate (expected tokens per step: on this step's blocks, and on the
    held-out samples once measured), samples/s and time left."""

    def render(self, task) -> Text:
        f = task.fields
        left = "-" if f["left"] is None else time.strftime("%H:%M:%S", time.gmtime(f["left"]))
        held = "" if f.get("held") is None else f"  held-out {f['held']:.2f}"
        return Text(f"loss {f['loss']:.3f}  tau~{f['tau']:.2f}{held}  {f['rate']:.1f} samples/s  {left} left",
                    style="progress.data.speed")
