"""The step inspector's numbers are the verify step's own: a fresh float32 forward pass over the
same tokens gives the same probabilities (to 1e-5), and its verdicts are the engine's."""

from __future__ import annotations

import torch

from engine import DraftProposer, Generation, NgramProposer, SamplingParams
from engine.runtime.sampling import ACCEPT, probabilities, uniform
from tests.conftest import tiny_model

PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4]  # repeats: the n-gram proposer finds drafts


def run(model, proposer, sampling, inspect=True):
    gen = Generation(model, PROMPT, sampling, speculative=proposer)
    gen.inspect = inspect
    steps = list(gen)
    return PROMPT + gen.tokens, steps


def fresh_logits(model, ids: list[int]) -> torch.Tensor:
    """Logits after every prefix of ids, from one forward pass of a new sequence."""
    seq = model.new_sequence()
    try:
        return model.step(seq, ids, SamplingParams()).logits.float()
    finally:
        seq.release()


def verify_rows(model, tokens: list[int], step) -> torch.Tensor:
    """The fresh logits at the step's verify inputs [last, d1..dk] (last sits at position - 1)."""
    ids = tokens[: step.position] + step.drafts
    return fresh_logits(model, ids)[step.position - 1 :]


def test_greedy_numbers_equal_a_fresh_forward_pass_and_verdicts_the_engine_s():
    model = tiny_model()
    tokens, steps = run(model, NgramProposer(k=3), SamplingParams(max_tokens=24))
    drafting = [s for s in steps if s.drafts]
    assert drafting and any(s.accepted for s in drafting) and any(s.kind == "correction" for s in drafting)
    for step in steps[1:]:
        view = step.inspection
        p = torch.softmax(verify_rows(model, tokens, step), dim=-1)
        own = p.argmax(-1)
        assert view.model_tokens == own.tolist()
        assert torch.allclose(torch.tensor(view.model_p), p[torch.arange(len(own)), own], atol=1e-5)
        for i, check in enumerate(view.drafts):
            assert abs(check.p - p[i, check.token].item()) < 1e-5
            assert check.kept == (i < step.accepted) == all(d == t for d, t in zip(step.drafts[: i + 1], own.tolist()))
        top = torch.topk(p[view.decided_at], 5)
        assert [t for t, _ in view.top] == top.indices.tolist()
        assert torch.allclose(torch.tensor([q for _, q in view.top]), top.values, atol=1e-5)


def test_sampled_drafts_show_q_p_the_ratio_and_the_uniform_that_decided():
    target, draft = tiny_model(seed=0), tiny_model(seed=1)
    sampling = SamplingParams(temperature=1.0, seed=7, max_tokens=24)
    tokens, steps = run(target, DraftProposer(draft, k=3, sample=True), sampling)
    checks = [(s, i, c) for s in steps if s.drafts for i, c in enumerate(s.inspection.drafts)]
    assert any(c.kept for _, _, c in checks) and any(not c.kept for _, _, c in checks)
    for step, i, check in checks:
        p = probabilities(verify_rows(target, tokens, step), sampling)
        assert abs(check.p - p[i, check.token].item()) < 1e-5
        assert abs(check.ratio - min(1.0, check.p / check.q)) < 1e-6
        u = uniform(sampling.seed, ACCEPT, torch.tensor([step.position + i]), 1)[0, 0].item()
        assert check.u == u
        if i <= step.accepted:  # drafts after the first refused one were never tested
            assert check.kept == (u * check.q < p[i, check.token].item())


def test_inspector_off_keeps_nothing_and_changes_no_token():
    model = tiny_model()
    on_tokens, on_steps = run(model, NgramProposer(k=3), SamplingParams(max_tokens=24))
    off_tokens, off_steps = run(model, NgramProposer(k=3), SamplingParams(max_tokens=24), inspect=False)
    assert on_tokens == off_tokens
    assert all(s.inspection is None for s in off_steps)


def test_plain_steps_are_inspected_too():
    model = tiny_model()
    tokens, steps = run(model, None, SamplingParams(max_tokens=6))
    assert tokens == run(model, None, SamplingParams(max_tokens=6), inspect=False)[0]
    for step in steps[1:]:
        p = torch.softmax(verify_rows(model, tokens, step), dim=-1)
        assert step.inspection.model_tokens == [tokens[step.position]]
        assert abs(step.inspection.model_p[0] - p[0].max().item()) < 1e-5
