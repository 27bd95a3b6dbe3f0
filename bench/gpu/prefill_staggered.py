"""Where batched prefill's time goes when rows end at different times, as real replies do.

    python bench/gpu/prefill_staggered.py [--shape qwen2.5-1.5b] [--prompts 1500] [--batch 256]

`specchat generate` on the training prompts spent three quarters of its time in prefill, about
105 ms a forward of some 1,500 prompt tokens, while prefill_ab.py (rows that all end together,
admissions of 8,000 tokens) took 52 ms a forward of 7,500. Here random weights of the shape (no
pack needed) decode random prompts of 150-1,400 tokens, sampled at temperature 1 with a few
hundred stop ids, so replies end one by one (about 400 tokens on average) and prompts are
admitted a few at a time, as in the real runs. Each prefill forward is timed alone (synchronised
before and after), and a few in the middle of the run are profiled: the tables say whether a
small forward's time is its kernels, the host launching them, or something else (allocation,
compilation, a cuDNN plan per shape: the run is repeated with cuDNN's attention among torch's
choices, which the engine leaves out).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from prefill_ab import random_prompts  # bench/gpu/, this script's folder

from engine import BatchTimes, SamplingParams, generate_batch, random_model
from engine.batching import decode
from engine.network.config import preset
from engine.runtime import attention

PROFILED = (40, 45)  # prefill forwards (after the warm-up run) traced by the profiler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen2.5-1.5b")
    p.add_argument("--prompts", type=int, default=1500)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--mean-reply", type=int, default=400, help="tokens a reply runs on average")
    args = p.parse_args()
    model = random_model(preset(args.shape), device="cuda", dtype=torch.bfloat16, max_context=2304)
    vocab = model.config.vocab_size
    prompts = random_prompts(vocab, args.prompts, 150, 1400)
    stops = list(range(50, vocab, args.mean_reply))  # about one token in mean_reply ends a reply
    sampling = SamplingParams(temperature=1.0, max_tokens=768, seed=1)
    generate_batch(model, prompts[: args.batch], sampling, stop_ids=stops, batch_size=args.batch)  # warm-up

    forwards = []  # (prompts, tokens, ms, rows already running)
    original = decode.BatchDecoder._prefill_chunk
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])

    def timed(self, rows, prompts_, chunk, seeds, sampling_):
        n = len(forwards)
        if n == PROFILED[0]:
            profiler.start()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        original(self, rows, prompts_, chunk, seeds, sampling_)
        torch.cuda.synchronize()
        forwards.append((len(chunk), sum(len(prompts_[i]) for i in chunk), 1e3 * (time.perf_counter() - t0),
                         rows.count - len(chunk)))
        if n + 1 == PROFILED[1]:
            profiler.stop()

    decode.BatchDecoder._prefill_chunk = timed
    times = BatchTimes()
    generate_batch(model, prompts, sampling, stop_ids=stops, batch_size=args.batch, times=times)
    decode.BatchDecoder._prefill_chunk = original
    print(times.summary())
    # the same run with cuDNN's attention among torch's choices (the engine leaves it out: it
    # builds a plan per call shape on the host, and prefill shapes rarely repeat)
    attention.allow_cudnn()
    cudnn = BatchTimes()
    generate_batch(model, prompts, sampling, stop_ids=stops, batch_size=args.batch, times=cudnn)
    attention.allow_cudnn(False)
    print(f"with cuDNN attention: {cudnn.summary()}")

    print("\nprefill forwards by prompt tokens (timed alone)")
    print(f"{'tokens':>12} {'forwards':>9} {'prompts':>8} {'ms each':>9} {'ms / 1k tokens':>15} {'rows running':>13}")
    buckets = defaultdict(list)
    for f in forwards:
        buckets[min(f[1] // 1000, 8)].append(f)
    for b in sorted(buckets):
        fs = buckets[b]
        tokens = sum(f[1] for f in fs) / len(fs)
        ms = sum(f[2] for f in fs) / len(fs)
        label = f"{b}k-{b + 1}k" if b < 8 else "8k+"
        print(f"{label:>12} {len(fs):>9} {sum(f[0] for f in fs) / len(fs):>8.1f} {ms:>9.1f} "
              f"{1e3 * ms / tokens:>15.1f} {sum(f[3] for f in fs) / len(fs):>13.0f}")
    print(f"\nforwards {PROFILED[0]}..{PROFILED[1] - 1}: "
          + ", ".join(f"{f[1]} tokens {f[2]:.1f} ms" for f in forwards[PROFILED[0]:PROFILED[1]]))
    table = profiler.key_averages()
    print(table.table(sort_by="device_time_total", row_limit=15, max_name_column_width=60))
    print(table.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    main()
