"""Sampling: counter-based, so the token at a position depends only on (seed, position, logits)."""

import math
from dataclasses import replace

import pytest
import torch

from engine import EngineError, SamplingParams, generate
from engine.runtime.sampling import TOKEN, filtered, probabilities, sample, uniform
from tests.conftest import tiny_model

HOT = SamplingParams(temperature=1.0, seed=7, max_tokens=48)


def test_same_seed_same_tokens_other_seed_other_tokens():
    model = tiny_model()
    a = generate(model, [1, 2, 3], HOT).tokens
    b = generate(model, [1, 2, 3], HOT).tokens
    c = generate(model, [1, 2, 3], SamplingParams(temperature=1.0, seed=8, max_tokens=48)).tokens
    assert a == b
    assert a != c


def test_token_at_a_position_does_not_depend_on_the_step_length():
    """Sampling after each of 10 tokens in one step draws what 10 one-token steps draw."""
    model = tiny_model()
    ids = torch.tensor([4, 9, 1, 33, 2, 8, 8, 15, 60, 21, 5])
    one = model.step(model.new_sequence(), ids, HOT).tokens
    seq = model.new_sequence()
    model.step(seq, ids[:1], HOT)
    singles = [model.step(seq, ids[i : i + 1], HOT).tokens for i in range(1, len(ids))]
    assert one[1:].tolist() == torch.cat(singles).tolist()


def test_noise_is_a_pure_function_of_its_key():
    u = uniform(3, TOKEN, torch.tensor([10, 11, 10]), 5)
    assert torch.equal(u[0], u[2])
    assert not torch.equal(u[0], u[1])
    assert bool(((u > 0) & (u < 1)).all())


def test_samples_follow_the_softmax():
    """Gumbel-max over hashed noise: empirical frequencies over many positions match softmax."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).repeat(20000, 1)
    params = SamplingParams(temperature=0.8, seed=11)
    tokens = sample(logits, torch.arange(20000), params)
    freq = torch.bincount(tokens, minlength=5).float() / 20000
    expected = torch.softmax(logits[0] / 0.8, -1)
    assert (freq - expected).abs().max().item() < 0.015  # ~4 standard errors at n = 20000


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    params = SamplingParams(temperature=1.0, top_k=2)
    assert torch.isinf(filtered(logits, params)).tolist() == [[False, False, True, True]]
    p = torch.softmax(logits, -1)[0]  # 0.64, 0.24, 0.09, 0.03
    keep_two = SamplingParams(temperature=1.0, top_p=float(p[0] + 0.01))
    assert torch.isinf(filtered(logits, keep_two)).tolist() == [[False, False, True, True]]
    assert torch.allclose(probabilities(logits, keep_two)[0, :2].sum(), torch.tensor(1.0))
    top1 = SamplingParams(temperature=1.0, top_k=1, seed=5)
    assert sample(logits.repeat(50, 1), torch.arange(50), top1).tolist() == [0] * 50


@pytest.mark.parametrize(
    "bad",
    [dict(temperature=-1.0), dict(temperature=math.nan), dict(top_k=-3), dict(top_p=0.0), dict(top_p=1.5),
     dict(max_tokens=0), dict(seed=-1)],
)
def test_bad_sampling_values_are_clear_errors(bad):
    with pytest.raises(EngineError):
        SamplingParams(**bad)


def whole_vocabulary_draw(logits, positions, params, seeds):
    """The definition: Gumbel-max over every token of the filtered vocabulary."""
    from engine.runtime.sampling import gumbel

    return (filtered(logits, params) + gumbel(seeds, TOKEN, positions, logits.shape[-1])).argmax(-1)


def test_sampling_among_the_top_k_draws_what_the_whole_vocabulary_draws():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 500, generator=gen) * 3
    positions = torch.arange(100, 164)
    seeds = torch.arange(64) * 7 + 1
    for params in (SamplingParams(temperature=0.8, top_k=20), SamplingParams(temperature=1.2, top_k=50, top_p=0.7)):
        expected = whole_vocabulary_draw(logits, positions, params, seeds)
        rows = torch.stack([sample(logits[i : i + 1], positions[i : i + 1], replace(params, seed=int(seeds[i])))[0]
                            for i in range(64)])
        assert torch.equal(rows, expected)
        assert torch.equal(sample(logits, positions, params, seeds=seeds), expected)


def test_top_k_probabilities_are_the_filtered_softmax():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 300, generator=gen) * 2
    for params in (SamplingParams(temperature=0.7, top_k=20), SamplingParams(temperature=0.7, top_k=20, top_p=0.8)):
        p = probabilities(logits, params)
        assert torch.allclose(p, torch.softmax(filtered(logits, params), dim=-1), atol=1e-6)
        assert ((p > 0).sum(-1) <= 20).all()


def test_equal_scores_inside_the_top_k_keep_the_whole_vocabularys_top_p_cut():
    """Exactly equal logits among the k best (bf16-rounded ones often are) are summed for top-p in
    the vocabulary's order, by index among equals, as the whole-vocabulary filter sums them."""
    gen = torch.Generator().manual_seed(3)
    rows = 400
    best = torch.randint(0, 5, (rows, 48), generator=gen).float() / 2  # five values: many ties
    rest = -10.0 - torch.arange(16).float().expand(rows, -1)  # far below, all distinct
    order = torch.stack([torch.randperm(64, generator=gen) for _ in range(rows)])
    logits = torch.cat([best, rest], dim=-1).gather(-1, order)
    positions, seeds = torch.arange(rows), torch.arange(rows) * 3 + 1
    for top_p in (0.3, 0.5, 0.8):
        params = SamplingParams(temperature=1.0, top_k=48, top_p=top_p)
        assert torch.equal(sample(logits, positions, params, seeds=seeds),
                           whole_vocabulary_draw(logits, positions, params, seeds))
        assert torch.allclose(probabilities(logits, params), torch.softmax(filtered(logits, params), -1), atol=1e-6)
