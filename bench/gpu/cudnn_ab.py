"""cuDNN's fused attention against torch's other fused kernels, where the engine calls torch's
attention: a prompt's prefill (each length new, as a chat's prompts are) and the states of past
tokens computed again for a DFlash drafter (context_states). Random weights of the Coder-1.5B's
shape, no pack needed. Host time (the call issued) and wall time (synchronised) per call.

    python bench/gpu/cudnn_ab.py [--shape qwen2.5-1.5b] [--context 1600]
"""

from __future__ import annotations

import argparse
import time

import torch

from engine import SamplingParams, random_model
from engine.network.config import preset
from engine.runtime import attention
from engine.speculation.context_states import context_states

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = (301, 517, 733, 1049, 1601, 2213)  # lengths never run before in the process
RECOMPUTED = (32, 128, 512)


def timed(call) -> tuple[float, float]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return 1e3 * host, 1e3 * (time.perf_counter() - t0)


def measure(model, offset: int, context: int) -> list[tuple[str, float, float]]:
    rows = []
    for n in PROMPTS:  # a new length each: the first call of its shape, as a chat's next prompt
        n += offset
        seq = model.new_sequence()
        rows.append((f"prefill of {n} tokens, first of its shape",
                     *timed(lambda n=n, seq=seq: model.step(seq, list(range(100, 100 + n)), GREEDY, last_only=True))))
        seq.release()
    seq = model.new_sequence()
    ids = [(37 * i + 11) % 30000 + 100 for i in range(context)]
    model.step(seq, ids, GREEDY, last_only=True)
    for n in RECOMPUTED:
        for label in ("first", "again"):
            rows.append((f"states of {n} tokens computed again ({label})",
                         *timed(lambda n=n: context_states(model, seq, ids[-n - 1 : -1], context - n - 1, (1, 7, 13)))))
    seq.release()
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen2.5-1.5b")
    p.add_argument("--context", type=int, default=1600)
    args = p.parse_args()
    model = random_model(preset(args.shape), device="cuda", dtype=torch.bfloat16, max_context=4096)
    model.warm_up(GREEDY)
    measure(model, 3, args.context)  # every kernel compiled once, at lengths not timed below
    without = measure(model, 0, args.context)
    attention.allow_cudnn()
    measure(model, 5, args.context)
    with_cudnn = measure(model, 1, args.context)
    print(f"{args.shape}, random weights, bf16 ({torch.__version__}): ms a call, host / wall")
    print(f"{'':52} {'without cuDNN':>16} {'with cuDNN':>16}")
    for (label, h0, w0), (_, h1, w1) in zip(without, with_cudnn, strict=True):
        print(f"{label:52} {h0:7.2f} {w0:8.2f} {h1:7.2f} {w1:8.2f}")


if __name__ == "__main__":
    main()
