"""Where one DFlash training step spends its time: the target's batched states, the drafter's
forward (blocks and attention), the lm_head and loss, the backward pass and the optimizer step.
Timed with CUDA events (or the clock on the CPU) over a few steps after warm-up; prints a table.

    python bench/gpu/dflash_step_profile.py qwen2.5-coder-1.5b PROMPTS REPLIES [--layers 2] \
        [--batch-size 4] [--anchors 256] [--steps 10]

With --random, MODEL names a shape (qwen2.5-1.5b, ...) with random weights and no pack is needed:
the samples keep the lengths of the real ones (each reply's token count, its prompt's characters
at CHARS_PER_TOKEN) with random token ids, so the step costs what a real one does (its speed
does not depend on the values), and a machine can time drafters while the pack is still staged.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from engine import load_model, random_model
from engine.network.config import preset
from engine.runtime import attention
from engine.speculation.proposers.dflash.training.blocks import sample_anchors
from engine.speculation.proposers.dflash.training.data import read_jsonl, read_samples
from engine.speculation.proposers.dflash.training.forward import batch_states, block_loss
from engine.speculation.proposers.dflash.training.trainer import ANCHOR_STEP, Sample, Trainer, TrainSettings

CHARS_PER_TOKEN = 3.3  # Python source through the Qwen2.5 tokenizer, with the chat template's few tokens


def shaped_samples(target, prompts: str, replies: list[str], count: int) -> list[Sample]:
    """Samples with the real ones' lengths and random token ids (for a random-weight target)."""
    chars = {p["id"]: sum(len(m["content"]) for m in p["messages"]) for p in read_jsonl(prompts) if "messages" in p}
    g = torch.Generator().manual_seed(0)
    out = []
    for path in replies:
        for reply in read_jsonl(path):
            if len(out) == count:
                return out
            prompt = int(chars[reply["id"]] / CHARS_PER_TOKEN) + 20
            n = prompt + len(reply["tokens"])
            out.append(Sample(torch.randint(0, target.config.vocab_size - 1, (n,), generator=g).tolist(), prompt))
    return out


class Clock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((name, event))
        else:
            self.marks.append((name, time.perf_counter()))

    def parts(self) -> dict[str, float]:
        if self.cuda:
            torch.cuda.synchronize()
        out = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[name] = a.elapsed_time(b) if self.cuda else (b - a) * 1e3
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("prompts")
    p.add_argument("replies", nargs="+")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--anchors", type=int, default=256)
    p.add_argument("--max-length", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--draft-vocab", type=int, default=32768,
                   help="the drafter's vocabulary, as train-dflash's default (0: the target's whole vocabulary)")
    p.add_argument("--trace", type=int, default=0, metavar="N",
                   help="after the timed steps, profile two more and print the N kernels of most device time")
    p.add_argument("--random", action="store_true",
                   help="MODEL is a shape with random weights; the samples keep the real ones' lengths")
    p.add_argument("--cudnn", action="store_true",
                   help="cuDNN's attention among torch's choices (the engine leaves it out: a plan per new shape)")
    args = p.parse_args()
    if args.cudnn:
        attention.allow_cudnn()
    count = 64 * args.batch_size
    if args.random:
        cuda = torch.cuda.is_available()
        target = random_model(preset(args.model), device="cuda" if cuda else "cpu",
                              dtype=torch.bfloat16 if cuda else torch.float32, max_context=args.max_length + 16)
        samples = shaped_samples(target, args.prompts, args.replies, count)
    else:
        target = load_model(args.model, max_context=args.max_length + 16)
        samples = read_samples(target, args.prompts, args.replies)[:count]
    settings = TrainSettings(num_layers=args.layers, batch_size=args.batch_size, anchors=args.anchors,
                             max_length=args.max_length, steps=10**6, draft_vocab=args.draft_vocab)
    trainer = Trainer(target, samples, settings, "/tmp/dflash-profile")
    target.state_layers = trainer.drafter.state_layers
    autocast = torch.autocast("cuda", torch.bfloat16) if trainer.autocast else torch.autocast("cpu", enabled=False)
    rows = []
    for step in range(args.steps + 2):
        clock = Clock(trainer.device)
        batch = trainer._next_batch()
        clock.mark("start")
        ids, mask = trainer.padded(batch)
        clock.mark("host: batch")
        states = batch_states(target, ids)
        clock.mark("target states")
        blocks = sample_anchors(mask, args.anchors, trainer.generator, ANCHOR_STEP)  # as a training step
        blocks.anchors, blocks.keep = blocks.anchors.to(trainer.device), blocks.keep.to(trainer.device)
        clock.mark("anchors")
        with autocast:
            loss, _ = block_loss(trainer.drafter, target, states, ids, mask, blocks, settings.gamma,
                                 vocab=trainer.vocab)
        clock.mark("drafter + lm_head + loss")
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clock.mark("backward")
        torch.nn.utils.clip_grad_norm_(trainer.drafter.parameters(), settings.clip)
        trainer.optimizer.step()
        clock.mark("optimizer")
        if step >= 2:  # the first steps pay for kernel selection and the allocator's growth
            rows.append(clock.parts() | {"tokens": int(mask.numel())})
    names = [n for n in rows[0] if n != "tokens"]
    total = statistics.median(sum(r[n] for n in names) for r in rows)
    vocab = f"{args.draft_vocab:,}-token" if args.draft_vocab else "whole"
    print(f"\n{args.model}, {args.layers} drafter layers, {vocab} vocabulary, batch {args.batch_size} x {args.anchors} anchors, "
          f"median of {len(rows)} steps: {total:.1f} ms a step, {1e3 * args.batch_size / total:.1f} samples/s")
    for n in names:
        ms = statistics.median(r[n] for r in rows)
        print(f"  {n:<28}{ms:8.2f} ms  {100 * ms / total:5.1f} %")
    if torch.cuda.is_available():
        print(f"  peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    if args.trace:
        kernels(trainer, args.trace)


def kernels(trainer: Trainer, count: int) -> None:
    """The kernels that take the most device time over two whole training steps."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if trainer.device.type == "cuda" else [])
    with profile(activities=activities) as trace:
        for _ in range(2):
            trainer.step()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if trainer.device.type == "cuda" else "self_cpu_time_total"
    print(trace.key_averages().table(sort_by=key, row_limit=count, max_name_column_width=60))


if __name__ == "__main__":
    main()
