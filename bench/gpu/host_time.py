"""Where the host's time between steps goes, fixed k against k and proposer "auto".

Between reading one verify step and queuing the next the device waits for the host, unless a pass
drafted ahead keeps it busy. Per setting and prompt, per step: the time outside the steps' propose
and verify windows (wall less windows), and within it what the loop spends choosing (the policy's
choose, and what members sitting the step out do: `idle`), learning (the policy's record), the
proposers' reading of each step (`observe`) and writing it out (`_emit`); plus tokens a step and
tok/s. Each setting runs as the bench runs it (a fresh proposer a reply, warm-up off the clock,
the prompt primed), --repeats replies in rounds. On a GPU, one more reply a setting under the
profiler gives the share of its wall time the device ran nothing, and that idle time a step.

    python bench/gpu/host_time.py --dflash DIR [--prompts edit explain] [--repeats 2]
    PYTHONPATH=. python bench/gpu/host_time.py --cpu   # small random shapes: the same counts
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict

import torch

from engine import (
    AUTO,
    AutoProposer,
    DFlashProposer,
    ModelConfig,
    NgramProposer,
    SamplingParams,
    load_drafter,
    load_model,
    random_model,
    write_random_drafter,
)
from engine.profile import kernel_events
from engine.speculation import adaptive
from engine.speculation.loop import Generation

PARTS = ["choose", "idle", "record", "observe", "emit"]
spent: dict[str, float] = defaultdict(float)


def timed(owner, name: str, part: str) -> None:
    """Add the seconds of each call of owner.name (a class's method) to spent[part]."""
    original = getattr(owner, name)

    def call(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - t0

    setattr(owner, name, call)


def settings(drafter):
    """(label, a fresh proposer) of each setting."""
    yield "n-gram k=4", lambda: NgramProposer(4)
    yield "n-gram k=auto", lambda: NgramProposer(AUTO)
    yield "dflash k=4", lambda: DFlashProposer(drafter, 4)
    yield "dflash k=auto", lambda: DFlashProposer(drafter, AUTO)
    yield "auto / auto", lambda: AutoProposer([NgramProposer(AUTO), DFlashProposer(drafter, AUTO)])


def started(target, ids, stop, sampling, proposer):
    """A reply past its prefill, as the bench runs one: warm-up off the clock, the proposer primed;
    the iterator of its remaining steps."""
    target.warm_up(sampling)
    proposer.warm_up(target, sampling)
    steps = iter(Generation(target, ids, sampling, stop, speculative=proposer))
    proposer.prime([*ids, *next(steps).tokens])
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    return steps


def reply(target, ids, stop, sampling, proposer) -> dict[str, float]:
    steps = started(target, ids, stop, sampling, proposer)
    spent.clear()
    t0 = time.perf_counter()
    done = list(steps)
    wall = time.perf_counter() - t0
    windows = sum(s.propose_s + s.verify_s for s in done)
    out = {part: spent[part] / len(done) for part in PARTS}
    out.update(steps=len(done), tokens=sum(len(s.tokens) for s in done), wall=wall, between=(wall - windows) / len(done))
    return out


def busy(events: list[dict]) -> float:
    """Seconds the device ran anything: the union of the events' [ts, ts + dur) (chrome-trace us)."""
    total, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e["ts"]):
        start, stop = e["ts"], e["ts"] + e["dur"]
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total / 1e6


def device_idle(target, ids, stop, sampling, proposer) -> tuple[float, float]:
    """(share of the reply's wall time the device ran no kernel, that idle ms a step), from one
    reply under the profiler (which adds a little host time of its own; the steps' small copies
    of tokens to the host count as idle)."""
    steps = started(target, ids, stop, sampling, proposer)
    done, timed = [], []

    def run():
        t0 = time.perf_counter()
        done.extend(steps)
        torch.cuda.synchronize()
        timed.append(time.perf_counter() - t0)

    events = kernel_events(run, 1)
    idle = max(0.0, timed[0] - busy(events))
    return idle / timed[0], idle / len(done)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--dflash", help="a trained drafter's folder (default: a random two-layer one)")
    p.add_argument("--prompts", nargs="+", default=["edit", "explain"])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cpu", action="store_true", help="a smoke run: small random shapes on the CPU")
    p.add_argument("--no-idle", action="store_true", help="leave out the profiled reply (device idle time)")
    args = p.parse_args()
    torch.set_grad_enabled(False)
    if args.cpu:
        small = ModelConfig("qwen3", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=4,
                            num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)
        target = random_model(small, device="cpu", dtype=torch.float32, max_context=1024)
        stop, rows = [], [("repeating", (list(range(40)) * 6)[:200])]
    else:
        from specchat.bench.prompts import load_prompts

        target = load_model(args.model, max_context=8192)
        stop = target.stop_ids()
        rows = [(q.name, target.encode_chat([{"role": "user", "content": q.text}])) for q in load_prompts(args.prompts)]
    folder = args.dflash or str(write_random_drafter(tempfile.mkdtemp(), target, num_layers=2))
    drafter = load_drafter(folder, target)
    timed(adaptive.AdaptivePolicy, "choose", "choose")
    timed(adaptive.AdaptivePolicy, "record", "record")
    timed(Generation, "_emit", "emit")
    for cls in (NgramProposer, DFlashProposer):
        timed(cls, "idle", "idle")
        timed(cls, "observe", "observe")
    sampling = SamplingParams(max_tokens=args.tokens)
    print(f"target {args.model if not args.cpu else 'random (cpu)'}, drafter {args.dflash or 'random, 2 layers'}, "
          f"{args.tokens} new tokens, greedy; ms a step (median of {args.repeats})\n")
    profiled = target.device.type == "cuda" and not args.no_idle
    print("| prompt | setting | tok/s | tokens/step | between steps | choose | idle | record | observe | emit |"
          + (" device idle | idle a step |" if profiled else ""))
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if profiled else ""))
    for name, ids in rows:
        runs = defaultdict(list)
        for _ in range(args.repeats):
            for label, make in settings(drafter):
                runs[label].append(reply(target, ids, stop, sampling, make()))
        for label, done in runs.items():
            med = {key: statistics.median(r[key] for r in done) for key in ["between", *PARTS]}
            rate = statistics.median(r["tokens"] / r["wall"] for r in done)
            per = statistics.median(r["tokens"] / r["steps"] for r in done)
            cells = " | ".join(f"{1e3 * med[key]:.3f}" for key in ["between", *PARTS])
            if profiled:
                make = dict(settings(drafter))[label]
                try:
                    share, each = device_idle(target, ids, stop, sampling, make())
                    cells += f" | {100 * share:.1f} % | {1e3 * each:.3f}"
                except Exception as err:  # noqa: BLE001 - a diagnostic: the table goes on without it
                    cells += f" | n/a ({type(err).__name__}) | n/a"
            print(f"| {name} | {label} | {rate:.0f} | {per:.2f} | {cells} |")


if __name__ == "__main__":
    main()
