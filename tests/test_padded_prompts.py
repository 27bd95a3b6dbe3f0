"""A fresh prefill of several prompts attends in one call over padded rows, as one call per prompt would."""

from dataclasses import replace

import torch

from engine import SamplingParams, generate, generate_batch
from engine.runtime import attention
from engine.runtime.attention import padded_prompt_attention, per_sequence_attention
from engine.runtime.step_io import BatchLayout, PaddedPrompts
from tests.conftest import tiny_model


def test_padded_attention_equals_one_call_per_prompt():
    torch.manual_seed(0)
    counts, heads, kv_heads, d = [5, 1, 12, 7], 6, 2, 16
    k_cache = torch.randn(64, kv_heads, d)
    v_cache = torch.randn_like(k_cache)
    # the prompts' slots scattered over the cache, as pages hand them out
    order = torch.randperm(64)
    contexts, used = [], 0
    for n in counts:
        contexts.append(order[used : used + n])
        used += n
    q = torch.randn(sum(counts), heads, d)
    padded = PaddedPrompts.of(counts, torch.cat(contexts))
    out = padded_prompt_attention(q, k_cache, v_cache, padded, d**-0.5)
    expected = per_sequence_attention(q, k_cache, v_cache, BatchLayout(None, counts, contexts), True, d**-0.5)
    torch.testing.assert_close(out, expected)
    # each prompt attends to its own keys only: changing another prompt's keys leaves it alone
    k_cache[contexts[2]] += 1.0
    again = padded_prompt_attention(q, k_cache, v_cache, padded, d**-0.5)
    first = sum(counts[:2])
    torch.testing.assert_close(again[:first], out[:first])
    assert not torch.allclose(again[first : first + counts[2]], out[first : first + counts[2]])


def test_prompts_of_like_lengths_prefilled_together_decode_as_each_alone(monkeypatch):
    calls = []

    def counted(*args):
        calls.append(args[3].gather.shape)
        return padded_prompt_attention(*args)

    monkeypatch.setattr(attention, "padded_prompt_attention", counted)
    model = tiny_model("qwen3", seed=6)
    prompts = [[(3 * i + 5 * j) % 60 + 1 for j in range(n)] for i, n in enumerate((9, 12, 10, 11, 7, 12))]
    sampling = SamplingParams(temperature=0.8, seed=5, max_tokens=12)
    results = generate_batch(model, prompts, sampling, batch_size=6)
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        assert result.tokens == generate(model, prompt, replace(sampling, seed=5 + i), speculative=None).tokens
    assert calls and all(shape == (6, 12) for shape in calls)  # the prefill took the padded path
