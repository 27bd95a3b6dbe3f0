"""The tiny DFlash setting the DFlash tests share: a small Qwen3 target and the drafter shape beside it."""

from engine import ModelConfig, random_model

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
