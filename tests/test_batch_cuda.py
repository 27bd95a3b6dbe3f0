"""Batched decoding on CUDA: the batched attention kernel, the graph ladder, runs of steps, bf16 near-ties (CUDA only).

float32: each sequence of a batch gets its batch-1 plain decoding's tokens, through the CUDA
graphs of the batch-size ladder (runs of several replays per host wait) and eagerly; a run
graph's tokens are those of one step at a time. bfloat16: a batched step multiplies B rows where
a batch-1 step multiplies one, through other kernels (cuBLAS tiles, the one-row GEMV), and a
packed prefill rounds differently from a single one, so a row's logits can differ in the last
bits. The tokens may then part where the two best logits are nearly tied, and only there:
the test checks that at the first token where they part.
"""

import copy
from dataclasses import replace

import pytest
import torch

from engine import BatchDecoder, SamplingParams, generate, generate_batch
from engine.batching.graphs import BatchGraphs
from engine.runtime.attention import reference_attention
from engine.runtime.model import Model
from tests.conftest import tiny_model

pytestmark = pytest.mark.gpu

PROMPTS = [[(11 * i + 5 * j) % 500 + 1 for j in range(n)] for i, n in enumerate((1, 7, 40, 16, 17, 3, 90, 33, 5, 64))]
SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=9, max_tokens=48)


def on_cuda(model: Model, eager: bool = False, dtype=torch.float32) -> Model:
    decoder = copy.deepcopy(model.decoder).to("cuda", dtype)
    return Model(decoder, model.config, name=model.name, max_context=model.max_context, eager=eager)


def wide_model(seed: int = 0) -> Model:
    """Heads wide enough (64) for the kernel's matrix-unit path, a GQA group of 4."""
    return tiny_model("qwen2", seed=seed, vocab=512, hidden_size=256, intermediate_size=512, num_heads=8,
                      num_kv_heads=2, head_dim=64, std=0.1)


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_kernel_equals_each_sequences_reference_attention(dtype, splits):
    """Whole contexts, or each cut into slices merged after (a sequence of one key leaves three of
    its four slices empty)."""
    from engine.kernels.batch_attention import batch_decode_attention

    torch.manual_seed(0)
    page_size, kvh, heads, d = 16, 2, 12, 128
    lengths = [1, 15, 16, 17, 200, 64, 777]
    pages = torch.randperm(128, device="cuda")  # scattered: no sequence's pages are consecutive
    k_cache = torch.randn(128 * page_size, kvh, d, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    table = torch.zeros(len(lengths), 64, dtype=torch.long, device="cuda")
    used = 0
    for b, n in enumerate(lengths):
        count = -(-n // page_size)
        table[b, :count] = pages[used : used + count]
        used += count
    q = torch.randn(len(lengths), heads, d, device="cuda", dtype=dtype)
    positions = torch.tensor(lengths, device="cuda") - 1
    out = batch_decode_attention(q, k_cache, v_cache, table, positions, page_size, d**-0.5, splits=splits)
    for b, n in enumerate(lengths):
        pos = torch.arange(n, device="cuda")
        slots = table[b, pos // page_size] * page_size + pos % page_size
        expected = reference_attention(q[b : b + 1], k_cache[slots], v_cache[slots], True, d**-0.5)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(out[b : b + 1], expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("splits", [1, 4])  # the batch's attention in one pass, or in context slices
@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("batch_size", [4, 24])  # 24: padded up from the ladder's 16 to its own graph
def test_float32_batch_equals_each_sequence_alone(eager, batch_size, splits, monkeypatch):
    from engine.kernels import batch_attention

    monkeypatch.setattr(batch_attention, "context_splits", lambda: splits)
    model = on_cuda(wide_model(1), eager)
    for sampling in (SamplingParams(max_tokens=48), SAMPLED):
        results = generate_batch(model, PROMPTS, sampling, batch_size=batch_size)
        for i, (prompt, result) in enumerate(zip(PROMPTS, results)):
            alone = generate(model, prompt, replace(sampling, seed=sampling.seed + i)).tokens
            assert result.tokens == alone, f"prompt {i}"


def test_run_graph_tokens_equal_one_step_at_a_time():
    model = on_cuda(wide_model(3))
    free = generate_batch(model, PROMPTS, SAMPLED, batch_size=6)
    stop = [free[0].tokens[10], free[3].tokens[4]]  # some replies end inside a run
    replies = {}
    for run_steps in (1, 8):
        decoder = BatchDecoder(model, 6, max(map(len, PROMPTS)) + SAMPLED.max_tokens, run_steps=run_steps)
        assert isinstance(decoder.runs, BatchGraphs)
        replies[run_steps] = [(r.tokens, r.reason) for r in decoder.run(PROMPTS, SAMPLED, stop)]
    assert replies[8] == replies[1]
    assert {reason for _, reason in replies[8]} == {"stop", "length"}
    for i, (prompt, (tokens, _)) in enumerate(zip(PROMPTS, replies[8])):
        assert tokens == generate(model, prompt, replace(SAMPLED, seed=SAMPLED.seed + i), stop).tokens


def test_prompts_of_like_lengths_prefill_in_one_attention_call_as_each_alone():
    model = on_cuda(wide_model(4))
    prompts = [[(13 * i + 7 * j) % 500 + 1 for j in range(n)] for i, n in enumerate((60, 64, 50, 61, 57, 64, 33, 40))]
    results = generate_batch(model, prompts, SAMPLED, batch_size=8)
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        assert result.tokens == generate(model, prompt, replace(SAMPLED, seed=SAMPLED.seed + i)).tokens


def test_bfloat16_batch_parts_from_alone_only_at_near_ties():
    model = on_cuda(wide_model(2), dtype=torch.bfloat16)
    greedy = SamplingParams(max_tokens=64)
    results = generate_batch(model, PROMPTS, greedy, batch_size=8)
    same = 0
    for prompt, result in zip(PROMPTS, results):
        alone = generate(model, prompt, greedy).tokens
        common = next((i for i, (a, b) in enumerate(zip(alone, result.tokens)) if a != b), None)
        if common is None:
            same += 1
            continue
        seq = model.new_sequence()
        logits = model.step(seq, prompt + alone[:common], greedy, last_only=True).logits[-1]
        seq.release()
        top2 = logits.topk(2).values
        assert (top2[0] - top2[1]).abs() < 0.05 * top2[0].abs(), "batched and alone differ away from a tie"
    assert same >= len(PROMPTS) // 2  # parting is the exception
