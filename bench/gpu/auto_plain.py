"""What k "auto" costs where it mostly takes plain steps, against plain decoding, on the GPU.

Random-weight models of the bench's shapes (Qwen2.5-1.5B target, 0.5B draft model, a 2-layer
DFlash drafter): their drafts are never right, so k "auto" sits out nearly every step, which is
the case where it must cost what plain decoding costs. Per generated token: the wall time, the
time inside the steps' propose and verify windows, the time the loop spends choosing (the
policy, and what each proposer sitting out does then), and what ran: target steps by length (and
whether they kept hidden states), chained runs, draft-model and drafter calls, host reads.

    SPECCHAT_CACHE=/tmp/sc python bench/gpu/auto_plain.py [--tokens 256] [--prompt 1576]
    PYTHONPATH=. python bench/gpu/auto_plain.py --cpu   # the same counts with small shapes
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter

import torch

from engine import (
    AUTO,
    DFlashProposer,
    DraftProposer,
    Generation,
    ModelConfig,
    SamplingParams,
    load_drafter,
    preset,
    random_model,
    write_random_drafter,
)

SAMPLED = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
calls: Counter = Counter()


def counted(obj, name: str, label):
    """Count each call of obj.name under label(args)."""
    original = getattr(obj, name)

    def call(*args, **kwargs):
        calls[label(*args, **kwargs)] += 1
        return original(*args, **kwargs)

    setattr(obj, name, call)


class Timed(Generation):
    """The loop, with the time it spends choosing each step's proposer and k kept."""

    choosing = 0.0

    def _choose(self, context):
        t0 = time.perf_counter()
        try:
            return super()._choose(context)
        finally:
            self.choosing += time.perf_counter() - t0


def reply(model, ids, sampling, proposer) -> None:
    model.warm_up(sampling)
    if proposer is not None:
        proposer.warm_up(model, sampling)
    gen = Timed(model, ids, sampling, speculative=proposer)
    gen.plain_run = 8  # as on CUDA (the CPU's default is 1, for a chat's screen)
    steps = iter(gen)
    first = next(steps)
    if proposer is not None:
        proposer.prime([*ids, *first.tokens])
    calls.clear()
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    kinds = Counter("run" if s.propose_s == 0 and not s.drafts else ("plain" if not s.drafts else "drafts")
                    for s in steps)
    wall = time.perf_counter() - t0
    m, n = gen.metrics, gen.metrics.tokens
    what = proposer.describe() if proposer is not None else "plain"
    print(f"{what} {'greedy' if sampling.greedy else 'sampled'}: {n / wall:.1f} tok/s, "
          f"{1e3 * wall / n:.3f} ms a token, in windows {1e3 * m.decode_s / n:.3f}, choosing "
          f"{1e3 * gen.choosing / n:.3f}, tokens/step {m.mean_acceptance_length:.2f}, steps {dict(kinds)}")
    for key, count in sorted(calls.items()):
        print(f"    {key:36s} {count / n:6.3f} a token")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--prompt", type=int, default=1576)
    p.add_argument("--cpu", action="store_true", help="a smoke run: small shapes on the CPU")
    args = p.parse_args()
    if args.cpu:
        small = ModelConfig("qwen2", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=4,
                            num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True)
        on = {"device": "cpu", "dtype": torch.float32, "max_context": 1024}
        target, draft = random_model(small, **on), random_model(small, seed=1, **on)
        args.prompt = min(args.prompt, 600)
    else:
        on = {"device": "cuda", "dtype": torch.bfloat16, "max_context": 4096}
        target = random_model(preset("qwen2.5-1.5b"), **on)
        draft = random_model(preset("qwen2.5-0.5b"), seed=1, **on)
    drafter = load_drafter(str(write_random_drafter(tempfile.mkdtemp(), target, num_layers=2)), target)
    prompt = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size - 2, (args.prompt,), generator=prompt).tolist()
    counted(target, "step", lambda seq, ids, *a, **k: f"target step {len(ids)}"
            + (" +states" if target.state_layers else ""))
    counted(target, "chain", lambda seq, first, n, *a, **k: f"target run of {n}"
            + (" +states" if target.state_layers else ""))
    counted(draft, "step", lambda seq, ids, *a, **k: f"draft model step {len(ids)}")
    counted(draft, "chain", lambda seq, first, n, *a, **k: f"draft model chain {n}")
    counted(drafter, "extend", lambda states: f"drafter extend {states.shape[0]} (op by op)")
    counted(drafter, "draft", lambda states, anchor: "drafter pass")
    tolist = torch.Tensor.tolist

    def read(self):
        calls["host reads"] += 1
        return tolist(self)

    torch.Tensor.tolist = read
    for sampled in (False, True):
        sampling = SamplingParams(max_tokens=args.tokens, **(SAMPLED if sampled else {}))
        makers = (lambda: None, lambda: DraftProposer(draft, k=AUTO), lambda: DFlashProposer(drafter, k=AUTO))
        for make in makers:
            reply(target, ids, sampling, make())  # graphs and step costs settle
            reply(target, ids, sampling, make())


if __name__ == "__main__":
    main()
