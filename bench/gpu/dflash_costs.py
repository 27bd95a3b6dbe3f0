"""Where a DFlash step's time goes, host against device: the drafter's pass and the target's
verify step with and without the drafter's states, each timed three ways over 50 calls in a row:
the host's time to issue a call (nothing waited for), the wall time per call (the slower of host
and device sets it), and the device's own time from the profiler's kernels. The drafter's pass
is timed taking in 1, 16, 32 and 128 new tokens' states: past 16, a drafter that sat steps out
catching up; a run of 8 chained plain steps with and without those states; the states of 32 to
512 tokens computed again (a drafter that let the target stop keeping them). A call whose wall
time is its host time leaves the GPU waiting; one whose wall time is its kernels' is bound by
the GPU. Then the generation loop's own figures for DFlash k = 3 beside n-gram k = 3 (propose and
verify ms a step), which the bench reports.

    python bench/gpu/dflash_costs.py qwen2.5-coder-1.5b [DRAFTER_DIR] [--context 1600]
    PYTHONPATH=. python bench/gpu/dflash_costs.py random:qwen2.5-1.5b   # random weights of a shape, no
                                                   # pack needed (the timings only, no generation loop)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType

from engine import (
    DFlashProposer,
    NgramProposer,
    SamplingParams,
    generate,
    load_drafter,
    load_model,
    preset,
    random_model,
    write_random_drafter,
)
from engine.speculation.context_states import context_states
from specchat.bench.prompts import builtin_prompts

CALLS = 50
CATCH_UPS = (16, 32, 128)  # states taken in by one pass: a step's worth, then after steps sat out
RECOMPUTED = (32, 128, 256, 512)  # missed tokens whose states are computed again
GREEDY = SamplingParams(max_tokens=128)


def timed(call, calls: int = CALLS) -> tuple[float, float, float]:
    """(host ms, wall ms, device ms) per call of `call`."""
    call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    host = (time.perf_counter() - t0) / calls * 1e3
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / calls * 1e3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    device = sum(e.self_device_time_total for e in kernels) / calls / 1e3  # us -> ms
    return host, wall, device


@torch.inference_mode()
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("drafter", nargs="?", default=None, help="a drafter's folder (default: a random 2-layer one)")
    p.add_argument("--context", type=int, default=1600)
    args = p.parse_args()
    if args.model.startswith("random:"):
        shape = args.model.removeprefix("random:")
        target = random_model(preset(shape), device="cuda", dtype=torch.bfloat16, max_context=4096)
        target.warm_up(SamplingParams())
    else:
        target = load_model(args.model, max_context=4096)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.drafter or str(write_random_drafter(Path(tmp) / "drafter", target, num_layers=2))
        drafter = load_drafter(folder, target)
    ids = [(37 * i + 11) % 30000 + 100 for i in range(args.context)]
    rows = []

    # the drafter's pass: new tokens' states taken in, a block drafted. Up to a step's worth go in
    # within the pass's graph (after a drafting step); more are a drafter that sat steps out and
    # takes them in first (the catch-up the adaptive policy prices, seeded at CATCH_UP_SHARE of a
    # plain step until it has timed one)
    target.state_layers = drafter.state_layers
    seq = target.new_sequence()
    states = target.forward(seq, torch.tensor(ids, device=target.device))[1]
    drafter.clear()
    drafter.extend(states[:-CATCH_UPS[-1]])
    base = drafter.seq.length
    for new in (1, *CATCH_UPS):
        def drafter_pass(new=new):
            drafter.draft([states[-new:]], 7)
            drafter.seq.truncate(base)  # the context stays as long
        label = f"drafter pass ({new} new state{'s' if new > 1 else ''}, block of 16)"
        rows.append((label, *timed(drafter_pass)))

    # the target's verify step of 4 tokens (k = 3), with and without the drafter's states
    for layers, label in ((drafter.state_layers, "verify step of 4, with states"), ((), "verify step of 4, plain")):
        target.state_layers = layers
        target.warm_up(GREEDY, state_layers=layers)
        length = seq.length

        def verify(length=length):
            target.step(seq, [5, 6, 7, 8], GREEDY)
            seq.truncate(length)

        rows.append((label, *timed(verify)))

    # a run of 8 plain steps (a drafter sitting out, or k auto's plain steps), with and without the
    # states a DFlash drafter keeps: the eighth run saw 0.065 ms a token more with them
    first = torch.tensor([5], device=target.device)
    for layers, label in ((drafter.state_layers, "8 chained plain steps, with states"),
                          ((), "8 chained plain steps, plain")):
        target.state_layers = layers
        length = seq.length

        def chained(length=length):
            target.chain(seq, first, 8, GREEDY)
            seq.truncate(length)

        rows.append((label, *timed(chained)))
    # the states a drafter missed while the target kept none, computed again from the cache
    # (context_states through the fused layers; the catch-up of a drafter that sat out 32+ tokens)
    target.state_layers = ()
    for n in RECOMPUTED:
        def recompute(n=n):
            context_states(target, seq, ids[-n - 1 : -1], len(ids) - n - 1, drafter.state_layers)

        rows.append((f"states of {n} tokens computed again", *timed(recompute, calls=10)))
    seq.release()

    print(f"\n{target.name}, {args.context}-token context, {CALLS} calls in a row (ms a call)")
    print(f"{'':44} {'host':>7} {'wall':>7} {'kernels':>8}")
    for label, host, wall, device in rows:
        print(f"{label:44} {host:7.3f} {wall:7.3f} {device:8.3f}")

    if target.tokenizer is None:  # random weights: no prompt to write
        return
    prompt = target.encode_chat([{"role": "user", "content": builtin_prompts()["explain"].text}])
    stop = target.stop_ids()
    print("\nthe generation loop, explanation prompt, greedy, 128 tokens (ms a step):")
    for name, make in (("n-gram k=3", lambda: NgramProposer(3)), ("DFlash k=3", lambda: DFlashProposer(drafter, 3))):
        generate(target, prompt, GREEDY, stop_ids=stop, speculative=make())  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = generate(target, prompt, GREEDY, stop_ids=stop, speculative=make())
        wall = time.perf_counter() - t0
        m = result.metrics
        print(f"  {name:12} propose {m.propose_s / m.steps * 1e3:6.3f}  verify {m.verify_s / m.steps * 1e3:6.3f}  "
              f"tokens/step {m.tokens / m.steps:5.2f}  wall {wall * 1e3 / m.steps:6.3f} a step (prefill included)")


if __name__ == "__main__":
    main()
