"""The tiny DFlash setting the DFlash tests share: a small Qwen3 target and the drafter shape beside it."""

import torch
import torch.nn.functional as F

from engine import ModelConfig, SamplingParams, generate, load_drafter, random_model

VOCAB, HIDDEN, TARGET_LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 16, 32, 6, 4, 2, 8, 48
DRAFT_LAYERS, BLOCK, MASK = 2, 16, 15
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]


def make_target(seed=0, **kw):
    """A tiny Qwen3 target; a vocabulary of 16 lets random drafts be accepted now and then."""
    shape = ModelConfig(
        "qwen3",
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_layers=TARGET_LAYERS,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        qk_norm=True,
        **kw,
    )
    return random_model(shape, seed=seed, std=0.3, max_context=256)


def foreseeing(target, checkpoint, wrong_every: int = 7):
    """A drafter whose pass runs but whose drafts are the plain reply's next tokens, wrong wherever
    the position is a multiple of `wrong_every`: whole blocks kept, others refused part-way. Given
    an anchor that is not the reply's token at its position, every draft is wrong."""
    drafter = load_drafter(str(checkpoint), target)
    full = PROMPT + generate(target, PROMPT, SamplingParams(max_tokens=80)).tokens
    block = drafter.block

    def foreseen(anchor):
        block(anchor)
        start = drafter.context_length  # the anchor's position
        token = int(anchor.view(-1)[-1]) if isinstance(anchor, torch.Tensor) else anchor
        miss = start < len(full) and token != full[start]
        drafts = [((full[p] if p < len(full) else 0) + (p % wrong_every == 0) + miss) % VOCAB
                  for p in range(start + 1, start + BLOCK)]
        return F.one_hot(torch.tensor(drafts), VOCAB).float()

    drafter.block = foreseen
    return drafter
