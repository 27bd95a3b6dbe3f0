import pytest
import torch

from engine import ModelConfig, random_model

# One thread: the tests' models are small, where a second thread costs more in handoffs than it
# gains, and a busy machine stalls multi-threaded steps badly.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def tiny_config(family: str = "llama", vocab: int = 64, **kw) -> ModelConfig:
    """A decoder small enough to run hundreds of steps in a test, of the given family."""
    base = dict(
        model_type=family, vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0, max_position=1024,
        qkv_bias=family == "qwen2", qk_norm=family == "qwen3",
    )
    base.update(kw)
    return ModelConfig(**base)


def tiny_model(family: str = "llama", seed: int = 0, std: float = 0.3, **kw):
    """Weights spread wide (std 0.3) so logits are far apart: no float32 near-ties between
    a verify step and a decode step, whose kernels round differently."""
    return random_model(tiny_config(family, **kw), seed=seed, std=std, max_context=512)


@pytest.fixture
def model():
    return tiny_model()
