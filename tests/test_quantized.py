"""A model's weights with int8 copies (engine/runtime/quantized.py): what one-token steps on the
GPU read for a draft model. Drafts only propose; the output stays plain decoding's."""

import copy

import pytest
import torch

from engine import DraftProposer, SamplingParams, generate, quantize_int8
from engine.runtime.model import Model
from engine.runtime.quantized import int8_rows
from tests.conftest import tiny_model

PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3, 5, 9, 2, 7, 5, 9]


def test_int8_rows_hold_each_weight_row_within_half_a_step_of_its_scale():
    torch.manual_seed(0)
    weight = torch.randn(48, 40) * torch.logspace(-3, 1, 48)[:, None]  # rows of very different sizes
    weight[7] = 0.0  # a row of zeros stays zeros
    q, scale = int8_rows(weight)
    assert q.dtype == torch.int8 and scale.shape == (48,)
    assert q.abs().max() <= 127 and (q[:, :].abs().amax(dim=1)[torch.arange(48) != 7] == 127).all()
    error = (q.float() * scale[:, None] - weight).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()
    assert (q[7] == 0).all()


def test_every_linear_weight_gets_one_copy_and_the_cpu_path_ignores_them():
    model = tiny_model("qwen2", seed=2)
    greedy = SamplingParams(max_tokens=20)
    before = generate(model, PROMPT, greedy).tokens
    added = quantize_int8(model)
    linears = [m for m in model.decoder.modules() if isinstance(m, torch.nn.Linear)]
    weights = {id(m.weight): m.weight for m in linears}  # a tied lm_head is the embedding's, once
    assert all(getattr(w, "int8", None) is not None for w in weights.values())
    assert added == sum(w.numel() + 4 * w.shape[0] for w in weights.values())
    assert quantize_int8(model) == 0  # already done
    assert generate(model, PROMPT, greedy).tokens == before  # the CPU reads the float weights


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA only")
@pytest.mark.parametrize("eager", [False, True])
def test_an_int8_draft_model_leaves_the_output_plain_decodings(eager):
    target_cpu, draft_cpu = tiny_model("qwen3", seed=3), tiny_model("qwen3", seed=4)

    def on_cuda(model, eager):
        decoder = copy.deepcopy(model.decoder).to("cuda", torch.float32)
        return Model(decoder, model.config, name=model.name, max_context=model.max_context, eager=eager)

    target = on_cuda(target_cpu, eager=False)
    draft = on_cuda(draft_cpu, eager=eager)
    quantize_int8(draft)
    for sampling in (SamplingParams(max_tokens=40), SamplingParams(temperature=0.8, seed=7, max_tokens=40)):
        plain = generate(target, PROMPT, sampling).tokens
        for k in (1, 4, 15):
            assert generate(target, PROMPT, sampling, speculative=DraftProposer(draft, k=k)).tokens == plain
