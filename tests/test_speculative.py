"""Speculative decoding leaves the output unchanged: every claim checked token for token."""

import random

import pytest
import torch

from engine import MAX_K, DraftProposer, EngineError, NgramProposer, SamplingParams, generate, stream
from tests.conftest import tiny_model

GREEDY = SamplingParams(max_tokens=60)
# A prompt that repeats, so n-gram drafts are long and often right, and one that does not.
REPEATING = [3, 14, 15, 9, 26, 5, 3, 14, 15, 9, 26, 5, 3, 14, 15]
PLAIN_PROMPT = [7, 1, 33, 20, 41, 2]
SAMPLINGS = [
    SamplingParams(temperature=1.0, seed=1, max_tokens=60),
    SamplingParams(temperature=0.7, top_k=8, seed=2, max_tokens=60),
    SamplingParams(temperature=1.3, top_p=0.8, seed=3, max_tokens=60),
    SamplingParams(temperature=0.5, top_k=20, top_p=0.9, seed=4, max_tokens=60),
]



def plain(model, prompt, sampling=GREEDY):
    return generate(model, prompt, sampling).tokens


@pytest.mark.parametrize("prompt", [REPEATING, PLAIN_PROMPT])
@pytest.mark.parametrize("seed", [1, 5])
def test_greedy_ngram_output_equals_plain_for_every_k(prompt, seed):
    model = tiny_model("llama", seed=seed)
    expected = plain(model, prompt)
    for k in range(1, MAX_K + 1):
        result = generate(model, prompt, GREEDY, speculative=NgramProposer(k=k))
        assert result.tokens == expected, f"k={k}"
    assert result.metrics.drafted > 0


def test_repeating_text_makes_ngram_steps_emit_several_tokens():
    # A model whose weights make it repeat: build it by feeding its own output back as prompt.
    model = tiny_model("llama", seed=3)
    prompt = plain(model, REPEATING, SamplingParams(max_tokens=40)) * 3
    result = generate(model, prompt, GREEDY, speculative=NgramProposer(k=8))
    assert result.tokens == plain(model, prompt)
    assert result.metrics.mean_acceptance_length > 1.0


@pytest.mark.parametrize("prompt", [REPEATING, PLAIN_PROMPT])
def test_greedy_draft_model_output_equals_plain_for_every_k(target, draft, prompt):
    expected = plain(target, prompt)
    for k in range(1, MAX_K + 1):
        result = generate(target, prompt, GREEDY, speculative=DraftProposer(draft, k=k))
        assert result.tokens == expected, f"k={k}"
    assert 0 < result.metrics.accepted < result.metrics.drafted  # both paths exercised


def test_a_draft_identical_to_the_target_has_every_draft_accepted(target):
    """Checks the draft's rewind and feed: it must see exactly the target's context."""
    result = generate(target, PLAIN_PROMPT, GREEDY, speculative=DraftProposer(target, k=5))
    assert result.tokens == plain(target, PLAIN_PROMPT)
    assert result.metrics.draft_acceptance_rate == 1.0
    assert all(s.kind == "bonus" for s in result.steps if not s.prefill and s.drafts)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_sampled_output_with_deterministic_proposers_equals_plain_sampled(target, draft, sampling):
    expected = plain(target, REPEATING, sampling)
    for k in (1, 3, 7, 15):
        for proposer in (NgramProposer(k=k), DraftProposer(draft, k=k)):
            got = generate(target, REPEATING, sampling, speculative=proposer).tokens
            assert got == expected, f"{proposer.describe()}"


def test_steps_report_drafts_accepted_and_bonus_or_correction(target, draft):
    result = generate(target, PLAIN_PROMPT, GREEDY, speculative=DraftProposer(draft, k=4))
    first, *steps = result.steps
    assert first.prefill and first.kind == "plain" and len(first.tokens) == 1
    for step in steps:
        assert step.tokens[: step.accepted] == step.drafts[: step.accepted]
        if step.kind == "bonus":
            assert step.accepted == len(step.drafts)
        else:
            assert step.kind == "correction" and step.accepted < len(step.drafts)
            assert step.tokens[-1] != step.drafts[step.accepted]  # the model refused this draft
            assert step.rejected == step.drafts[step.accepted :]
    assert {s.kind for s in steps} == {"bonus", "correction"}
    m = result.metrics
    assert m.tokens == sum(len(s.tokens) for s in steps)
    assert m.mean_acceptance_length == pytest.approx(m.tokens / m.steps)
    assert sum(m.histogram.values()) == m.steps
    assert m.per_position_acceptance[0] >= m.per_position_acceptance[-1]


def test_stop_inside_accepted_drafts_cuts_exactly_where_plain_decoding_stops():
    model = tiny_model("llama", seed=3)
    prompt = plain(model, REPEATING, SamplingParams(max_tokens=40)) * 3
    full = plain(model, prompt)
    stop = full[25]  # a token the n-gram drafts will carry inside an accepted run
    expected = generate(model, prompt, GREEDY, stop_ids=[stop]).tokens
    assert expected == full[: full.index(stop) + 1]
    for k in (2, 5, 9, 15):
        result = generate(model, prompt, GREEDY, stop_ids=[stop], speculative=NgramProposer(k=k))
        assert result.tokens == expected
        assert result.finished == "stop"


def test_max_tokens_inside_an_accepted_run_cuts_exactly():
    model = tiny_model("llama", seed=3)
    prompt = plain(model, REPEATING, SamplingParams(max_tokens=40)) * 3
    for n in (1, 2, 7, 13):
        sampling = SamplingParams(max_tokens=n)
        result = generate(model, prompt, sampling, speculative=NgramProposer(k=15))
        assert result.tokens == plain(model, prompt, sampling)
        assert len(result.tokens) == n and result.finished == "length"


def test_pages_in_use_match_the_context_after_every_step(target, draft):
    pool = target.pool
    gen = stream(target, REPEATING, SamplingParams(max_tokens=200), speculative=DraftProposer(draft, k=7))
    rejections = 0
    for step in gen:
        cached = len(REPEATING) + len(gen.tokens) - 1  # every token but the newest is in the cache
        assert pool.num_pages - pool.num_free == -(-cached // pool.page_size)
        rejections += step.kind == "correction"
    assert rejections > 10
    assert pool.num_free == pool.num_pages  # the finished generation released its pages


def test_switching_proposer_mid_reply_takes_effect_at_the_next_step(target, draft):
    gen = stream(target, REPEATING, GREEDY, speculative=NgramProposer(k=3))
    names = []
    for i, step in enumerate(gen):
        names.append(step.proposer)
        if i == 5:
            gen.speculative = DraftProposer(draft, k=6)
        if i == 10:
            gen.speculative = None
    assert names[1:6] == ["n-gram"] * 5
    assert names[6:11] == ["draft"] * 5
    assert set(names[11:]) == {"off"}
    assert gen.tokens == plain(target, REPEATING)


def test_cancel_stops_at_the_next_step_and_keeps_what_was_emitted(target):
    gen = stream(target, REPEATING, GREEDY, speculative=NgramProposer(k=4))
    steps = []
    for step in gen:
        steps.append(step)
        if len(steps) == 3:
            gen.cancel()
    assert steps[-1].finished == "cancelled" and steps[-1].tokens == []
    assert gen.tokens == plain(target, REPEATING)[: len(gen.tokens)]
    assert target.pool.num_free == target.pool.num_pages


@pytest.mark.parametrize("k", [0, 16, -1])
def test_k_out_of_range_is_a_clear_error(k):
    with pytest.raises(EngineError, match="k must be"):
        NgramProposer(k=k)


def test_prompt_over_the_context_is_a_clear_error(target):
    with pytest.raises(EngineError, match="context full"):
        generate(target, [1] * (target.max_context + 1), GREEDY)


def test_a_reply_that_fills_the_context_ends_there_as_plain_decoding_does(target, draft):
    """The cache holds max_context tokens: the reply keeps every token it can, and ends as at
    its token budget, whatever the proposer (drafts never run past the room left)."""
    model = tiny_model("qwen2", seed=1)
    model.max_context = 64
    prompt = (REPEATING * 4)[:50]
    expect = generate(model, prompt, SamplingParams(max_tokens=100))
    assert len(expect.tokens) == 64 + 1 - len(prompt)  # the last token needs no room of its own
    assert expect.finished == "length"
    for proposer in (NgramProposer(k=15), DraftProposer(draft, k=7)):
        result = generate(model, prompt, SamplingParams(max_tokens=100), speculative=proposer)
        assert result.tokens == expect.tokens and result.finished == "length"


def test_draft_with_another_vocabulary_is_refused(target):
    other = tiny_model("llama", vocab=80)
    with pytest.raises(EngineError, match="vocabulary"):
        generate(target, PLAIN_PROMPT, GREEDY, speculative=DraftProposer(other, k=2))


def test_ngram_drafts_what_followed_the_latest_earlier_occurrence():
    def drafts(context, k):
        ngram = NgramProposer(k=k)
        ngram.reset(context)
        return ngram.propose(context, k).drafts

    assert drafts([1, 2, 3, 9, 9, 1, 2, 3, 7, 7, 5, 2, 3], 4) == [7, 7, 5, 2]  # "2 3" last followed by 7 7 5 2
    assert drafts([4, 5, 6, 4], 3) == [5, 6, 4]  # one-token match, copied onwards
    assert drafts([8, 1, 8], 5) == [1, 8, 1, 8, 1]  # a cycle keeps drafting k
    assert drafts([1, 2, 3], 4) == []  # no earlier occurrence: no drafts


def test_ngram_index_grows_with_the_context():
    ngram = NgramProposer(k=2)
    context = [5, 6, 7]
    ngram.reset(context)
    assert ngram.propose(context, 2).drafts == []
    context += [5]
    ngram.observe(context)
    assert ngram.propose(context, 2).drafts == [6, 7]


def test_the_ngram_index_holds_each_ngrams_latest_earlier_occurrence_however_the_context_grew():
    rng = random.Random(0)
    for max_n in (1, 3, 8):
        ngram, context = NgramProposer(k=4, max_n=max_n), []
        ngram.reset(context)
        for grow in (1, 1, 5, 2, 30, 1, 17, 3, 100, 2, 70):  # one by one, and in bulk (past BULK)
            context += [rng.randrange(4) for _ in range(grow)]
            ngram.observe(context)
            latest = {}  # by its definition: each n-gram with a token after it -> that token's position
            for end in range(len(context) - 1):
                for n in range(1, min(max_n, end + 1) + 1):
                    latest[tuple(context[end - n + 1 : end + 1])] = end + 1
            assert ngram.index == latest


def test_a_longer_match_copies_from_where_it_was_seen_not_from_the_latest_short_one():
    ngram = NgramProposer(k=3)
    context = [1, 2, 3, 4, 10, 11, 9, 3, 4, 20, 21, 1, 2, 3, 4]  # "3 4" last seen before 20, "1 2 3 4" before 10
    ngram.reset(context)
    assert ngram.bucket(context) == 4 and ngram.propose(context, 3).drafts == [10, 11, 9]


def test_the_summary_line_reports_steps_acceptance_and_step_times(target, draft):
    result = generate(target, PLAIN_PROMPT, GREEDY, speculative=DraftProposer(draft, k=4))
    line = result.metrics.summary()
    m = result.metrics
    assert f"{m.steps} steps" in line and f"{m.mean_acceptance_length:.2f} tokens/step" in line
    assert f"of {m.drafted} drafts" in line and "ms per step" in line


def stepped(model, prompt, sampling):
    """Plain decoding written out: one model step per token, each read back before the next."""
    seq = model.new_sequence()
    token = int(model.step(seq, prompt, sampling, last_only=True).tokens[-1])
    tokens = [token]
    while len(tokens) < sampling.max_tokens:
        token = int(model.step(seq, [token], sampling).tokens[-1])
        tokens.append(token)
    seq.release()
    return tokens


def plain_in_runs(model, prompt, sampling, stop_ids=(), run=8):
    """Plain decoding with runs of `run` steps queued per host wait, as on a GPU."""
    gen = stream(model, prompt, sampling, stop_ids)
    gen.plain_run = run
    steps = list(gen)
    return gen, steps


@pytest.mark.parametrize("sampling", [GREEDY, *SAMPLINGS[:2]])
def test_plain_decoding_runs_are_single_steps(target, sampling):
    # runs of plain steps fed on the device draw the tokens that single steps draw
    gen, _ = plain_in_runs(target, PLAIN_PROMPT, sampling)
    assert gen.tokens == stepped(target, PLAIN_PROMPT, sampling) == plain(target, PLAIN_PROMPT, sampling)


def test_plain_runs_keep_only_the_shown_tokens_cached(target):
    pool = target.pool
    gen = stream(target, PLAIN_PROMPT, SamplingParams(max_tokens=37))
    gen.plain_run = 8
    for _ in gen:
        cached = len(PLAIN_PROMPT) + len(gen.tokens) - 1
        assert pool.num_pages - pool.num_free >= -(-cached // pool.page_size)
    assert len(gen.tokens) == 37  # a budget that ends inside a run is cut exactly
    assert pool.num_free == pool.num_pages


def test_a_stop_inside_a_plain_run_ends_the_reply_there(target):
    free = plain(target, PLAIN_PROMPT, GREEDY)
    stop = free[11]  # the 12th token: inside the second run of plain steps
    first = free.index(stop)
    gen, steps = plain_in_runs(target, PLAIN_PROMPT, GREEDY, stop_ids=[stop])
    assert gen.tokens == free[: first + 1] and steps[-1].finished == "stop"


def test_the_verify_step_takes_the_drafts_before_the_host_reads_them(target, draft, monkeypatch):
    # drafts left on the device go into the verify step as they are; the host reads them with
    # the verified tokens, so a step waits for the device once
    proposer = DraftProposer(draft, k=4)
    proposals, unread = [], []
    propose, step = proposer.propose, target.step

    def spy_propose(context, k):
        proposals.append(propose(context, k))
        return proposals[-1]

    def spy_step(seq, ids, *args, **kwargs):
        if proposals and len(ids) > 1:
            unread.append(isinstance(ids, torch.Tensor) and proposals[-1]._drafts is None)
        return step(seq, ids, *args, **kwargs)

    monkeypatch.setattr(proposer, "propose", spy_propose)
    monkeypatch.setattr(target, "step", spy_step)
    result = generate(target, REPEATING, GREEDY, speculative=proposer)
    assert unread and all(unread)
    assert result.tokens == plain(target, REPEATING)
