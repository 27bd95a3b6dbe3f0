"""The host's time between a reply's steps, outside the propose and verify windows, per setting.

A tiny random target and a one-layer random DFlash drafter on the CPU, 300-token greedy replies to
a repeating prompt, every proposer primed off the clock as the bench primes it: the reply's wall
time less its steps' propose and verify windows, per step (the policy's choice, the proposers'
bookkeeping, the loop's own), the best of three replies. What k and proposer "auto" cost the host
beside a fixed k.

    PYTHONPATH=. python bench/cpu/host_between_steps.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from engine import (
    AUTO,
    AutoProposer,
    DFlashProposer,
    Generation,
    NgramProposer,
    SamplingParams,
    load_drafter,
    random_model,
    write_random_drafter,
)
from engine.network.config import ModelConfig

PROMPT = [i % 50 for i in range(300)]
GREEDY = SamplingParams(temperature=0.0, max_tokens=300)


def reply(model, proposer) -> tuple[int, float]:
    """(steps, host seconds outside the windows) of one reply after the prefill."""
    gen = Generation(model, PROMPT, GREEDY, (), speculative=proposer)
    steps = iter(gen)
    first = next(steps)
    proposer.prime([*PROMPT, *first.tokens])
    start = time.perf_counter()
    done = list(steps)
    wall = time.perf_counter() - start
    return len(done), wall - sum(s.propose_s + s.verify_s for s in done)


def main() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(model_type="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0, max_position=1024, qkv_bias=True)
    model = random_model(cfg, seed=0, std=0.3, max_context=1024)
    with tempfile.TemporaryDirectory() as tmp:
        drafter = load_drafter(str(write_random_drafter(Path(tmp) / "drafter", model, num_layers=1)), model)
    settings = [("n-gram k 15", lambda: NgramProposer(15)), ("n-gram k auto", lambda: NgramProposer(AUTO)),
                ("DFlash k 4", lambda: DFlashProposer(drafter, 4)), ("DFlash k auto", lambda: DFlashProposer(drafter, AUTO)),
                ("auto / auto (n-gram, DFlash)", lambda: AutoProposer([NgramProposer(AUTO),
                                                                       DFlashProposer(drafter, AUTO)]))]
    print("| setting | steps | outside the windows, µs a step |")
    print("|---|---|---|")
    for name, make in settings:
        reply(model, make())  # first-use costs off the figures
        runs = [reply(model, make()) for _ in range(3)]
        steps, outside = min(runs, key=lambda r: r[1] / r[0])
        print(f"| {name} | {steps} | {outside / steps * 1e6:.1f} |")


if __name__ == "__main__":
    main()
