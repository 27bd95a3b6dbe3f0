"""Batched prefill of prompts of mixed lengths: the padded prompts' attention with the causal
flag alone (today) against an explicit [B, 1, L, L] mask (before), and the decode runs after.

    python bench/gpu/prefill_ab.py [--shape qwen2.5-1.5b] [--prompts 512] [--batch 256]

Random weights of the shape (no pack needed: speed ignores the values), prompts of random ids
with lengths drawn from 300 to 1,500 tokens (the DFlash training prompts' range), decoded by
`generate_batch` for --new-tokens tokens each; prints each variant's BatchTimes line.
"""

from __future__ import annotations

import argparse

import torch

from engine import BatchTimes, SamplingParams, generate_batch, random_model
from engine.network.config import preset
from engine.runtime import attention
from engine.runtime.attention import padded_prompt_attention


def masked(q, k_cache, v_cache, padded, scale):
    """The padded prompts' attention as it was: an explicit mask of each prompt's real keys."""
    h = q.shape[1]
    keys, values = k_cache[padded.slots], v_cache[padded.slots]
    group = h // keys.shape[2]
    keys, values = keys.repeat_interleave(group, dim=2), values.repeat_interleave(group, dim=2)
    longest = padded.gather.shape[1]
    places = torch.arange(longest, device=q.device)
    lengths = torch.bincount(padded.scatter // longest, minlength=padded.gather.shape[0])
    real = places[None, :] < lengths[:, None]
    mask = ((places[None, :] <= places[:, None])[None] & real[:, None, :])[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q[padded.gather].transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask, scale=scale)
    return out.transpose(1, 2).reshape(-1, h, q.shape[2])[padded.scatter]


def random_prompts(vocab: int, count: int, shortest: int, longest: int) -> list[list[int]]:
    """`count` prompts of random ids, of lengths drawn from shortest..longest (seeded: the same
    prompts every run)."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(shortest, longest, (count,), generator=gen).tolist()
    return [torch.randint(100, vocab - 100, (n,), generator=gen).tolist() for n in lengths]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen2.5-1.5b")
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=64)
    args = p.parse_args()
    model = random_model(preset(args.shape), device="cuda", dtype=torch.bfloat16, max_context=2048)
    prompts = random_prompts(model.config.vocab_size, args.prompts, 300, 1500)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.new_tokens)
    generate_batch(model, prompts[: args.batch], sampling, batch_size=args.batch)  # warm-up: kernels, graphs
    outputs = {}
    for name, fn in (("causal flag", padded_prompt_attention), ("explicit mask", masked), ("causal flag", None)):
        attention.padded_prompt_attention = fn or padded_prompt_attention
        times = BatchTimes()
        results = generate_batch(model, prompts, sampling, batch_size=args.batch, times=times)
        outputs.setdefault(name, [r.tokens for r in results])
        print(f"{name:>13}: {times.summary()}", flush=True)
    same = outputs["causal flag"] == outputs["explicit mask"]
    print(f"the same tokens either way: {same}")


if __name__ == "__main__":
    main()
