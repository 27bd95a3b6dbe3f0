"""A tiny target whose replies a drafter can learn in a few dozen steps, its self-distilled
corpus, and short training settings: shared by the DFlash training tests."""

import torch

from engine import SamplingParams, generate_batch, random_model
from engine.speculation.proposers.dflash.training.trainer import Sample, TrainSettings
from tests.conftest import tiny_config

BLOCK = 8


def make_target(seed=0):
    cfg = tiny_config("qwen2", vocab=32, num_layers=4)
    return random_model(cfg, seed=seed, std=0.3, max_context=256)


def looping_target():
    """A target whose attention adds nothing: each token's successor depends on that token alone,
    so its greedy replies fall into short loops, a pattern a drafter can learn in a few steps."""
    target = make_target()
    with torch.no_grad():
        for layer in target.decoder.layers:
            layer.self_attn.o_proj.weight.zero_()
    return target


def random_prompts(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 30, (int(torch.randint(6, 14, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def looping_corpus():
    """The target's own greedy replies to 48 random prompts (self-distillation), and 6 held-out
    prompts: the `corpus` fixture of conftest.py."""
    target = looping_target()
    prompts = random_prompts(48, seed=0)
    replies = generate_batch(target, prompts, SamplingParams(temperature=0.0, max_tokens=48), batch_size=48)
    samples = [Sample(p + r.tokens, len(p)) for p, r in zip(prompts, replies, strict=True)]
    return target, samples, random_prompts(6, seed=1)


def settings(**kw):
    base = {"num_layers": 2, "block_size": BLOCK, "anchors": 24, "batch_size": 4, "steps": 30,
            "learning_rate": 1e-2, "warmup_steps": 5, "max_length": 128, "init_std": 0.1, "validation_prompts": 0}
    return TrainSettings(**{**base, **kw})
