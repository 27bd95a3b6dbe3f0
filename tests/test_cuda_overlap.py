"""Dependent launch (engine/kernels/overlap.py) changes when kernels start, never what they compute.

Two copies of one bf16 model with the layer shapes of Qwen2.5-1.5B (so every kernel variant a real
step uses runs: the norm folded into q/k/v, gate/up on the matrix units, o and down as split
partials, the split attention), one captured with dependent launch and one without: every
step, decode and verify, must give the same logits bit for bit.
"""

import copy

import pytest
import torch

from engine import SamplingParams
from engine.network.config import ModelConfig
from engine.runtime.model import Model, random_model

pytestmark = pytest.mark.gpu
overlap = pytest.importorskip("engine.kernels.overlap", reason="needs Triton")

SHAPE = {"model_type": "qwen2", "vocab_size": 4096, "hidden_size": 1536, "intermediate_size": 8960,
         "num_layers": 2, "num_heads": 12, "num_kv_heads": 2, "head_dim": 128, "rope_theta": 1e6,
         "tie_word_embeddings": True, "qkv_bias": True, "max_position": 4096}


@pytest.fixture(scope="module")
def hopper():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("dependent launch needs compute capability 9 or later")


def steps(model: Model) -> list[torch.Tensor]:
    """A prefill, decode steps, then verify steps of every length: each step's logits."""
    greedy, seq = SamplingParams(), model.new_sequence()
    prompt = [(7 * i + 3) % 4096 for i in range(300)]
    out = [model.step(seq, prompt, greedy, last_only=True).logits.clone()]
    for t in (1, 1, 1, 2, 4, 7, 8, 15, 16, 1):
        ids = [(11 * i + t) % 4096 for i in range(t)]
        out.append(model.step(seq, ids, greedy).logits.clone())
    seq.release()
    return out


def test_dependent_launch_leaves_every_steps_logits_bit_for_bit(hopper, monkeypatch):
    base = random_model(ModelConfig(**SHAPE), device="cuda", dtype=torch.bfloat16, max_context=1024)
    assert base.graphs is not None
    monkeypatch.setattr(overlap, "dependent_launch", lambda device: False)
    plain = steps(base)
    monkeypatch.setattr(overlap, "dependent_launch", lambda device: device.type == "cuda")
    overlapped = Model(copy.deepcopy(base.decoder), base.config, name=base.name, max_context=1024)
    assert overlap.launch_options(torch.device("cuda")) == {"GDC": True, "launch_pdl": True}
    for a, b in zip(plain, steps(overlapped), strict=True):
        assert torch.equal(a, b)
