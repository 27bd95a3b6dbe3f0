"""Batched decoding: each sequence of a batch gets the tokens it would get decoded alone."""

from dataclasses import replace

import pytest
import torch

from engine import (
    BatchDecoder,
    BatchTimes,
    EngineError,
    SamplingParams,
    generate,
    generate_batch,
    random_model,
)
from engine.batching.decode import RUN_STEPS
from tests.conftest import tiny_config, tiny_model

# Lengths from 1 to 23 tokens, so the sequences of a batch sit at different positions and cross
# page boundaries (16 positions) at different steps.
PROMPTS = [
    [(7 * i + 3 * j) % 60 + 1 for j in range(n)] for i, n in enumerate((1, 5, 17, 3, 23, 9, 12, 2, 16))
]
SAMPLINGS = [
    SamplingParams(temperature=1.0, seed=1, max_tokens=24),
    SamplingParams(temperature=0.7, top_k=8, seed=2, max_tokens=24),
    SamplingParams(temperature=0.5, top_k=20, top_p=0.9, seed=40, max_tokens=24),
]


def alone(model, prompt, sampling, stop_ids=()):
    """The reference: one sequence, plain decoding."""
    return generate(model, prompt, sampling, stop_ids, speculative=None)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_greedy_batch_equals_each_sequence_alone(family):
    model = tiny_model(family, seed=3)
    greedy = SamplingParams(max_tokens=30)
    results = generate_batch(model, PROMPTS, greedy, batch_size=4)
    assert [r.index for r in results] == list(range(len(PROMPTS)))
    for prompt, result in zip(PROMPTS, results):
        assert result.tokens == alone(model, prompt, greedy).tokens
        assert result.reason == "length"


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_sampled_batch_equals_each_sequence_alone_with_its_seed(sampling):
    model = tiny_model("qwen2", seed=1)
    results = generate_batch(model, PROMPTS, sampling, batch_size=3)
    for i, (prompt, result) in enumerate(zip(PROMPTS, results)):
        assert result.tokens == alone(model, prompt, replace(sampling, seed=sampling.seed + i)).tokens


def test_given_seeds_are_each_sequences_own():
    model = tiny_model("llama", seed=2)
    sampling = SAMPLINGS[0]
    seeds = [11, 11, 5, 900, 3, 3, 70, 1, 2]
    results = generate_batch(model, PROMPTS, sampling, seeds=seeds, batch_size=5)
    for prompt, seed, result in zip(PROMPTS, seeds, results):
        assert result.tokens == alone(model, prompt, replace(sampling, seed=seed)).tokens
    # the same prompt with another seed samples another reply: the seed is used
    other = generate_batch(model, PROMPTS[:1], sampling, seeds=[12])
    assert other[0].tokens != results[0].tokens


def test_stop_ids_end_some_sequences_early_and_the_rest_run_on():
    model = tiny_model("llama", seed=5)
    sampling = SamplingParams(temperature=1.0, seed=7, max_tokens=24)
    # the stop id: a token the first reply samples, so at least that one ends early
    free = generate_batch(model, PROMPTS, sampling, batch_size=4)
    stop = [free[0].tokens[5]]
    times = BatchTimes()
    results = generate_batch(model, PROMPTS, sampling, stop_ids=stop, batch_size=4, times=times)
    reasons = {r.reason for r in results}
    # the time accounting counts what ran: every prompt token prefilled once, every reply kept,
    # and the steps past a stop inside a run sampled but dropped
    assert times.prompt_tokens == sum(map(len, PROMPTS)) and times.finished == len(PROMPTS)
    assert times.kept == sum(len(r.tokens) for r in results)
    assert times.row_steps > times.kept - len(PROMPTS)
    assert "prefill" in times.summary() and "decode" in times.summary()
    assert reasons == {"stop", "length"}
    for i, (prompt, result) in enumerate(zip(PROMPTS, results)):
        expected = alone(model, prompt, replace(sampling, seed=sampling.seed + i), stop)
        assert result.tokens == expected.tokens
        assert result.reason == expected.finished
        if result.reason == "stop":
            assert result.tokens[-1] in stop and len(result.tokens) < 24


def test_a_sequence_that_fills_the_context_ends_there_as_alone():
    model = random_model(tiny_config("qwen3"), seed=4, std=0.3, max_context=40)
    prompts = [[(5 * j) % 60 + 1 for j in range(n)] for n in (30, 4, 38)]
    sampling = SamplingParams(max_tokens=20)
    for prompt, result in zip(prompts, generate_batch(model, prompts, sampling, batch_size=2)):
        expected = alone(model, prompt, sampling)
        assert (result.tokens, result.reason) == (expected.tokens, expected.finished)
    assert len(prompts[2]) + len(result.tokens) == 41  # ended by the context, not the budget


class Recording(BatchDecoder):
    """Notes the number of sequences and of steps of every decode run."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.sizes, self.steps = [], []

    def _decode(self, rows, n, sampling):
        self.sizes.append(rows.count)
        self.steps.append(n)
        super()._decode(rows, n, sampling)


@pytest.mark.parametrize("run_steps", [1, RUN_STEPS])
def test_finished_sequences_give_their_pages_back_and_waiting_prompts_take_their_place(run_steps):
    model = tiny_model("llama", seed=3)
    sampling = SamplingParams(temperature=1.0, seed=3, max_tokens=24)
    # the pool holds 3 sequences of the longest prompt, its budget and a run, no more: 9 prompts
    # only get through if every finished sequence's pages come back
    decoder = Recording(model, 3, max(map(len, PROMPTS)) + 24, run_steps=run_steps)
    total = decoder.pool.num_free
    stop = [decoder.run(PROMPTS, sampling)[1].tokens[2]]  # a token that ends the second reply early
    decoder.sizes.clear()
    finished = []
    results = decoder.run(PROMPTS, sampling, stop_ids=stop, on_finish=finished.append)
    assert decoder.pool.num_free == total
    assert sorted(f.index for f in finished) == list(range(len(PROMPTS)))
    assert finished[0].reason == "stop"  # heard as it ends, before the others' budgets run out
    assert [f.tokens for f in sorted(finished, key=lambda f: f.index)] == [r.tokens for r in results]
    # while prompts wait, the batch is full
    runs_while_waiting = len(decoder.sizes) - decoder.sizes[::-1].index(3)
    assert all(n == 3 for n in decoder.sizes[:runs_while_waiting])
    assert max(decoder.steps) == run_steps
    # a second run on the same decoder starts from a full pool and gives the same replies
    again = decoder.run(PROMPTS, sampling, stop_ids=stop)
    assert [r.tokens for r in again] == [r.tokens for r in results]


def test_bad_prompts_are_refused_with_their_index():
    model = tiny_model("llama")
    with pytest.raises(EngineError, match="prompt 1 is empty"):
        generate_batch(model, [[1, 2], []])
    with pytest.raises(EngineError, match="prompt 0 has 600 tokens"):
        generate_batch(model, [[1] * 600])
    with pytest.raises(EngineError, match="2 seeds for 1 prompts"):
        generate_batch(model, [[1]], seeds=[1, 2])
    assert generate_batch(model, []) == []
    with pytest.raises(EngineError, match="steps per run must be at least 1, got 0"):
        BatchDecoder(model, 2, 32, run_steps=0)


def test_the_models_own_pool_is_left_alone():
    model = tiny_model("llama")
    before = model.pool.num_free
    generate_batch(model, PROMPTS, SamplingParams(max_tokens=8), batch_size=4)
    assert model.pool.num_free == before
    assert torch.equal(model.pool.k, torch.zeros_like(model.pool.k))
