"""Sampled drafts: the min(1, p/q) rule makes emitted tokens follow the target's p exactly in
distribution (not token for token), so these tests compare distributions."""

import dataclasses
import itertools

import pytest
import torch

from engine import DraftProposer, SamplingParams, generate
from engine.runtime.sampling import DRAFT, accept_tokens, probabilities, sample
from engine.speculation.proposers.draft import proposer as draft_module
from tests.conftest import tiny_model

TRIALS = 100_000


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * (a - b).abs().sum().item()


def frequencies(tokens: torch.Tensor, width: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=width).float() / tokens.numel()


P_LOGITS = torch.tensor([[1.5, 0.2, -0.4, 0.9, -1.0]])
Q_LOGITS = torch.tensor([[-0.5, 1.2, 0.3, 0.9, 0.4]])  # a draft that likes other tokens


def emitted_first_tokens(p_logits, q_logits, q_reported_logits, params):
    """First token emitted by TRIALS independent one-draft steps, all computed in one batch:
    accept_tokens treats each row as a draft position with its own counter-keyed noise."""
    positions = torch.arange(TRIALS)
    drafts = sample(q_logits.expand(TRIALS, -1), positions, params, noise=DRAFT)
    p = probabilities(p_logits, params).expand(TRIALS + 1, -1)
    q = probabilities(q_reported_logits, params).expand(TRIALS, -1)
    out = accept_tokens(p, q, drafts, torch.tensor(0), positions, params)
    return drafts, out[:TRIALS]


def test_first_token_follows_p_including_the_residual_path():
    params = SamplingParams(temperature=1.0, seed=3)
    drafts, tokens = emitted_first_tokens(P_LOGITS, Q_LOGITS, Q_LOGITS, params)
    p = probabilities(P_LOGITS, params)[0]
    rejected = tokens != drafts
    assert 0.2 < rejected.float().mean().item() < 0.8  # both the accept and the residual path ran
    assert total_variation(frequencies(tokens, 5), p) < 0.01  # ~5 standard errors at n = 100,000


def test_with_top_k_and_top_p_the_rule_follows_the_filtered_p():
    params = SamplingParams(temperature=0.8, top_k=4, top_p=0.9, seed=4)
    _, tokens = emitted_first_tokens(P_LOGITS, Q_LOGITS, Q_LOGITS, params)
    p = probabilities(P_LOGITS, params)[0]
    assert total_variation(frequencies(tokens, 5), p) < 0.01


def test_with_top_k_the_residual_draw_is_the_whole_vocabularys():
    """Over p's k tokens, each with its own noise: the correction the vocabulary-wide draw makes."""
    from engine.runtime.sampling import RESIDUAL, gumbel

    gen = torch.Generator().manual_seed(2)
    params = SamplingParams(temperature=0.9, top_k=8, top_p=0.95, seed=6)
    p = probabilities(torch.randn(33, 400, generator=gen) * 2, params)
    q = probabilities(torch.randn(32, 400, generator=gen) * 2, params)
    positions = torch.arange(50, 82)
    drafts = sample(torch.log(q), positions, params, noise=DRAFT)
    out = accept_tokens(p, q, drafts, torch.tensor(0), positions, params)
    whole = (torch.log((p[:32] - q).clamp_min(0.0)) + gumbel(params.seed, RESIDUAL, positions, 400)).argmax(-1)
    rejected = out[:32] != drafts
    assert rejected.any()
    assert torch.equal(out[:32][rejected], whole[rejected])


def test_a_q_computed_with_other_sampling_settings_than_the_draft_used_is_caught():
    """The classic bug: drafts drawn at temperature 1 but q taken at temperature 0.3."""
    params = SamplingParams(temperature=1.0, seed=3)
    sharp = Q_LOGITS / 0.3  # what q at temperature 0.3 looks like at temperature 1
    _, tokens = emitted_first_tokens(P_LOGITS, Q_LOGITS, sharp, params)
    p = probabilities(P_LOGITS, params)[0]
    assert total_variation(frequencies(tokens, 5), p) > 0.05


# End to end through the generation loop: the joint distribution of the first N tokens of
# sampled-draft decoding against the exact one of plain sampling, enumerated from the model.
VOCAB, N, RUNS = 3, 4, 3000
PROMPT = [0, 2, 1]


def exact_joint(model, params) -> dict[tuple[int, ...], float]:
    probs: dict[tuple[int, ...], float] = {(): 1.0}
    for length in range(N):
        nxt = {}
        for prefix, mass in probs.items():
            seq = model.new_sequence()
            logits = model.step(seq, PROMPT + list(prefix), params, last_only=True).logits
            seq.release()
            p = probabilities(logits, params)[0]
            for token in range(VOCAB):
                nxt[prefix + (token,)] = mass * p[token].item()
        probs = nxt
    return probs


def sampled_joint(target, proposer, params) -> tuple[dict[tuple[int, ...], float], int]:
    """The empirical joint distribution of the first N tokens over RUNS seeds, a fresh proposer()
    each, and how many drafts were refused in all."""
    counts = dict.fromkeys(itertools.product(range(VOCAB), repeat=N), 0)
    rejections = 0
    for seed in range(RUNS):
        run = dataclasses.replace(params, seed=seed)
        result = generate(target, PROMPT, run, speculative=proposer())
        counts[tuple(result.tokens)] += 1
        rejections += result.metrics.drafted - result.metrics.accepted
    return {key: n / RUNS for key, n in counts.items()}, rejections


def empirical_joint(target, draft, params) -> dict[tuple[int, ...], float]:
    joint, rejections = sampled_joint(target, lambda: DraftProposer(draft, k=3, sample=True), params)
    assert rejections > RUNS // 4  # the residual path ran often
    return joint


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama", vocab=VOCAB, seed=5, std=0.5)
    draft = tiny_model("llama", vocab=VOCAB, seed=6, std=0.5)
    return target, draft


def tv(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a[key] - b[key]) for key in a)


PARAMS = SamplingParams(temperature=1.0, max_tokens=N)
# 81 outcomes, 3000 runs: the empirical TV of a correct sampler stays near 0.05 (its mean is
# about 0.5 * sum(sqrt(2 p / (pi n)))); 0.09 leaves room, and the bug below lands far above.
BOUND = 0.09


def test_sampled_draft_decoding_follows_the_targets_joint_distribution(pair):
    target, draft = pair
    assert tv(empirical_joint(target, draft, PARAMS), exact_joint(target, PARAMS)) < BOUND


def mismatch_q(monkeypatch, module) -> None:
    """The proposer's q computed at a third of the reply's temperature: no longer the distribution
    its drafts are drawn from."""
    right = module.probabilities

    def mismatched(logits, params):
        return right(logits, dataclasses.replace(params, temperature=params.temperature * 0.3))

    monkeypatch.setattr(module, "probabilities", mismatched)


def test_the_same_run_with_a_mismatched_q_fails_the_bound(pair, monkeypatch):
    target, draft = pair
    mismatch_q(monkeypatch, draft_module)
    assert tv(empirical_joint(target, draft, PARAMS), exact_joint(target, PARAMS)) > BOUND


# DFlash's sampled drafts: each of a block's drafts drawn from the drafter's own distribution at
# its position (none reads the drafts before it), kept with chance min(1, p/q).
def random_flash(target, folder):
    """A one-layer random DFlash drafter for the three-token target, loaded (token 2 its mask)."""
    from engine import load_drafter, write_random_drafter

    path = write_random_drafter(folder, target, num_layers=1, block_size=4, mask_token_id=VOCAB - 1, seed=7,
                                std=0.5)
    return load_drafter(str(path), target)


@pytest.fixture(scope="module")
def flash(pair, tmp_path_factory):
    target, _ = pair
    return target, random_flash(target, tmp_path_factory.mktemp("flash"))


@pytest.fixture(scope="module")
def flash_two_tokens(pair, tmp_path_factory):
    """A drafter that drafts over tokens 0 and 1 only (a drafter vocabulary, vocab.py)."""
    target, _ = pair
    drafter = random_flash(target, tmp_path_factory.mktemp("flash2"))
    drafter.use_vocab([0, 1])
    return target, drafter


def flash_joint(target, drafter, params) -> tuple[dict[tuple[int, ...], float], int]:
    from engine import DFlashProposer

    return sampled_joint(target, lambda: DFlashProposer(drafter, k=3, sample=True), params)


def test_dflash_sampled_drafts_follow_the_targets_joint_distribution(flash):
    target, drafter = flash
    joint, rejections = flash_joint(target, drafter, PARAMS)
    assert rejections > RUNS // 4  # the residual path ran often
    assert tv(joint, exact_joint(target, PARAMS)) < BOUND


def test_dflash_sampled_drafts_with_a_mismatched_q_fail_the_bound(flash, monkeypatch):
    from engine.speculation.proposers.dflash import proposer as flash_module

    target, drafter = flash
    mismatch_q(monkeypatch, flash_module)
    assert tv(flash_joint(target, drafter, PARAMS)[0], exact_joint(target, PARAMS)) > BOUND


def test_dflash_sampled_drafts_over_a_drafter_vocabulary_follow_the_targets_joint_distribution(flash_two_tokens):
    """q is zero outside the drafter's tokens: drafts never leave them, and the residual carries
    the target's mass there."""
    target, drafter = flash_two_tokens
    joint, rejections = flash_joint(target, drafter, PARAMS)
    assert rejections > RUNS // 4
    exact = exact_joint(target, PARAMS)
    assert tv(joint, exact) < BOUND
    assert sum(p for key, p in joint.items() if 2 in key) > 0.1  # token 2, never drafted, is still written


def test_dflash_drafts_stay_greedy_unless_sampling_is_asked_for(flash):
    """Without --sample-drafts (or with greedy decoding) the drafts are the drafter's argmax and
    the reply is plain decoding's token for token, sampled or not."""
    from engine import DFlashProposer

    target, drafter = flash
    for params in (dataclasses.replace(PARAMS, seed=4), SamplingParams(max_tokens=N)):
        plain = generate(target, PROMPT, params)
        assert generate(target, PROMPT, params, speculative=DFlashProposer(drafter, k=3)).tokens == plain.tokens
    greedy = SamplingParams(max_tokens=N)
    assert generate(target, PROMPT, greedy, speculative=DFlashProposer(drafter, k=3, sample=True)).tokens == \
        generate(target, PROMPT, greedy).tokens


def test_bench_rows_with_sampled_drafts_need_the_plain_text_only_when_greedy(flash):
    """A sampled row whose drafts are sampled follows the model's distribution, not plain
    sampling's tokens, so the bench does not call a different text there a failure; greedy rows
    and rows of greedy drafts still must match."""
    from engine import AutoProposer, DFlashProposer, NgramProposer
    from specchat.bench.runs import Case, Method, our_jobs, samples_drafts

    target, drafter = flash
    assert samples_drafts(DFlashProposer(drafter, 3, sample=True)) and not samples_drafts(DFlashProposer(drafter, 3))
    assert samples_drafts(AutoProposer([NgramProposer(3), DFlashProposer(drafter, 3, sample=True)]))
    assert not samples_drafts(None)
    cases = [Case(None, "greedy", SamplingParams(), PROMPT), Case(None, "sampled", PARAMS, PROMPT)]
    methods = [Method("dflash", 3, "sampled drafts", lambda: DFlashProposer(drafter, 3, sample=True)),
               Method("dflash", 3, "greedy drafts", lambda: DFlashProposer(drafter, 3))]
    must_match = {(j.case.sampling_name, j.label): j.deterministic for j in our_jobs(target, cases, methods)}
    assert must_match == {("greedy", "sampled drafts"): True, ("sampled", "sampled drafts"): False,
                          ("greedy", "greedy drafts"): True, ("sampled", "greedy drafts"): True}
