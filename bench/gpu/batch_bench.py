"""Batched decoding throughput: new tokens/s against batch size, ours and transformers'.

    python bench/gpu/batch_bench.py MODEL.gguf [--batch 16 64 128 256] [--hf-batch 64 256] [--run-steps 8]

MODEL: anything `engine.load_model` takes (a GGUF file, an HF directory, a pack name), loaded
in bf16 on CUDA. Every run has its own prompts of --prompt-tokens random token ids and samples
--new-tokens tokens for each (temperature 0.7, top-k 20, top-p 0.8), stop ids off, so every
sequence writes all of them. A run of batch B decodes --waves x B prompts through
`BatchDecoder` (continuous batching; the graphs of B are captured in a warm-up run first).
Columns: end to end (prefill included), decode alone (the run's time less a run of the same
prompts with one new token: the prefills), the prefills' seconds, and the time of one decode
step of the whole batch (decode time over the steps of a wave). --run-steps: decode steps per
host wait (1: the host looks at every step, for an A/B). transformers' `generate` runs on a model built from
the same weights (engine/bench/steps.transformers_model), the prompts of the same size.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import replace

import torch

from engine import BatchDecoder, SamplingParams, load_model
from engine.batching.decode import RUN_STEPS
from engine.profile import transformers_model

SAMPLING = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, seed=1)


def prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Random ids from the vocabulary's middle (clear of special tokens at either end)."""
    gen = torch.Generator().manual_seed(seed)
    margin = vocab // 100
    return torch.randint(margin, vocab - margin, (count, length), generator=gen).tolist()


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def ours(model, batch: int, args) -> tuple[float, float, float, float]:
    """(new tokens/s end to end, decode tokens/s, prefill seconds, ms per decode step) for batch
    size `batch`."""
    decoder = BatchDecoder(model, batch, args.prompt_tokens + args.new_tokens, run_steps=args.run_steps)
    vocab = model.config.vocab_size
    warm = prompts(batch, args.prompt_tokens, vocab, seed=batch)
    decoder.run(warm, replace(SAMPLING, max_tokens=4))
    work = prompts(batch * args.waves, args.prompt_tokens, vocab, seed=batch + 1)
    results = []
    whole = timed(lambda: results.extend(decoder.run(work, replace(SAMPLING, max_tokens=args.new_tokens))))
    prefill = timed(lambda: decoder.run(work, replace(SAMPLING, max_tokens=1)))
    new = sum(len(r.tokens) for r in results)
    assert new == len(work) * args.new_tokens, "a sequence ended early"
    del decoder
    gc.collect()
    torch.cuda.empty_cache()
    steps = args.waves * (args.new_tokens - 1)
    return new / whole, (new - len(work)) / (whole - prefill), prefill, 1000 * (whole - prefill) / steps


@torch.inference_mode()
def transformers_rate(hf, batch: int, args, vocab: int) -> float:
    ids = torch.tensor(prompts(batch, args.prompt_tokens, vocab, seed=10_000 + batch), device=hf.device)
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, temperature=SAMPLING.temperature,
              top_k=SAMPLING.top_k, top_p=SAMPLING.top_p, pad_token_id=0)
    hf.generate(ids[:, :32], max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
    seconds = timed(lambda: hf.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **kw))
    return batch * args.new_tokens / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, nargs="+", default=[16, 64, 128, 256])
    p.add_argument("--hf-batch", type=int, nargs="*", default=[64, 256])
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--waves", type=int, default=2, help="prompts per run, in batches (2: the batch refills once)")
    p.add_argument("--run-steps", type=int, default=RUN_STEPS, help="decode steps per host wait")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    model = load_model(args.model, device=args.device, dtype="bfloat16",
                       max_context=args.prompt_tokens + args.new_tokens)
    print(f"{model.name}, bf16, {args.prompt_tokens}-token prompts, {args.new_tokens} new tokens, "
          f"sampled (T {SAMPLING.temperature}, top-k {SAMPLING.top_k}, top-p {SAMPLING.top_p}), "
          f"{args.run_steps} decode steps per host wait")
    print("| batch | ours, new tok/s | ours, decode tok/s | prefill, s | decode step, ms | transformers, new tok/s "
          "| ours / transformers |")
    print("|---|---|---|---|---|---|---|")
    rates = {b: ours(model, b, args) for b in args.batch}
    hf = transformers_model(model) if args.hf_batch else None
    peers = {b: transformers_rate(hf, b, args, model.config.vocab_size) for b in args.hf_batch}
    for b in sorted(set(rates) | set(peers)):
        new, decode, prefill, step = rates.get(b, (None, None, None, None))
        peer = peers.get(b)
        cells = [f"{new:,.0f}" if new else "-", f"{decode:,.0f}" if decode else "-",
                 f"{prefill:.2f}" if prefill else "-", f"{step:.2f}" if step else "-",
                 f"{peer:,.0f}" if peer else "-", f"{new / peer:.1f}x" if new and peer else "-"]
        print(f"| {b} | " + " | ".join(cells) + " |")
    best = max(rates.items(), key=lambda kv: kv[1][0])
    print(f"best: batch {best[0]}, {best[1][0]:,.0f} new tokens/s end to end")


if __name__ == "__main__":
    main()
