"""k and proposer "auto" never change the output: whatever k and proposer each step takes,
greedy and sampled replies are plain decoding's, token for token, in float32."""

import pytest

from engine import (
    AUTO,
    AutoProposer,
    DFlashProposer,
    DraftProposer,
    Generation,
    NgramProposer,
    SamplingParams,
    generate,
    load_drafter,
    write_random_drafter,
)
from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.step_costs import CostTable
from tests.conftest import tiny_model
from tests.dflash_target import DRAFT_LAYERS, make_target

REPEATING = [3, 14, 15, 9, 26, 5, 3, 14, 15, 9, 26, 5, 3, 14, 15]
SAMPLINGS = [
    SamplingParams(max_tokens=60),
    SamplingParams(temperature=1.0, seed=1, max_tokens=60),
    SamplingParams(temperature=0.7, top_k=8, top_p=0.9, seed=2, max_tokens=60),
]
KS = [0, 3, 1, 15, 7, 2, 0, 11]  # k=0 is a plain step taken with a proposer attached


class Cycling:
    """A policy that switches proposer and k every step, through every member and KS."""

    def __init__(self):
        self.steps = 0
        self.seen: list[tuple[str, int]] = []

    def choose(self, proposers, context, limit):
        i, self.steps = self.steps, self.steps + 1
        proposer = proposers[i % len(proposers)]
        k = min(KS[i % len(KS)], limit, proposer.max_k)
        self.seen.append((proposer.name, k))
        return Choice(proposer if k else None, k)

    def record(self, choice, step, proposers):
        pass

    def drafting_ahead(self, members, drafted):
        # the drafter drafts ahead after every step, its own or another's (a witness), and the
        # next step is always another's
        return next((m for m in members if m.can_draft_ahead()), None)


def flat_costs(model) -> CostTable:
    """Verify steps that cost as much whatever their length: drafting always looks worth it."""
    return CostTable(lambda n: 1e-3)


def reply(model, prompt, sampling, proposer, policy):
    gen = Generation(model, prompt, sampling, speculative=proposer, policy=policy)
    steps = list(gen)
    return gen.tokens, steps



@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("seed", [1, 4])
def test_k_switching_every_step_gives_plain_decodings_tokens(target, draft, sampling, seed):
    model = tiny_model("llama", seed=seed)
    prompt = generate(model, REPEATING, SamplingParams(max_tokens=30)).tokens * 2
    expected = generate(model, prompt, sampling).tokens
    for proposer in (NgramProposer(k=AUTO), AutoProposer([NgramProposer(k=AUTO), NgramProposer(k=4)])):
        policy = Cycling()
        tokens, steps = reply(model, prompt, sampling, proposer, policy)
        assert tokens == expected, proposer.describe()
        assert len({k for _, k in policy.seen}) >= 5  # it did switch
        assert any(s.accepted for s in steps)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_proposer_and_k_switching_every_step_with_a_draft_model(target, draft, sampling):
    expected = generate(target, REPEATING, sampling).tokens
    policy = Cycling()
    proposer = AutoProposer([DraftProposer(draft, k=AUTO), NgramProposer(k=AUTO)])
    tokens, steps = reply(target, REPEATING, sampling, proposer, policy)
    assert tokens == expected
    assert {s.proposer for s in steps} >= {"draft", "n-gram", "off"}


class Runs:
    """Drafts with the first member, then asks for a run of plain steps, in turn; counts the
    steps it is told of."""

    def __init__(self):
        self.choices = self.recorded = 0

    def choose(self, proposers, context, limit):
        self.choices += 1
        if self.choices % 2:
            return Choice(proposers[0], min(3, limit))
        return Choice(None, 0, steps=5)

    def record(self, choice, step, proposers):
        self.recorded += 1


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_runs_of_plain_steps_the_policy_asks_for_give_plain_decodings_tokens(target, draft, sampling):
    expected = generate(target, REPEATING, sampling).tokens
    for proposer in (NgramProposer(k=AUTO), DraftProposer(draft, k=AUTO)):
        policy = Runs()
        gen = Generation(target, REPEATING, sampling, speculative=proposer, policy=policy)
        gen.plain_run = 8  # as on CUDA
        steps = list(gen)[1:]
        assert gen.tokens == expected, proposer.describe()
        assert policy.recorded == len(steps) and policy.choices < 0.5 * len(steps)  # one choice a run


def test_a_draft_identical_to_the_target_keeps_every_draft_after_sitting_out(target):
    """Checks its rewind after steps it sat out: it must see exactly the target's context."""
    proposer = AutoProposer([DraftProposer(target, k=AUTO), NgramProposer(k=AUTO)])
    _, steps = reply(target, REPEATING, SamplingParams(max_tokens=60), proposer, Cycling())
    drafted = [s for s in steps if s.proposer == "draft"]
    assert len(drafted) > 5 and all(s.accepted == s.k for s in drafted)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_the_adaptive_policy_gives_plain_decodings_tokens(target, draft, sampling):
    expected = generate(target, REPEATING, sampling).tokens
    for proposer in (
        NgramProposer(k=AUTO),
        DraftProposer(draft, k=AUTO),
        AutoProposer([NgramProposer(k=AUTO), DraftProposer(draft, k=AUTO)]),
    ):
        tokens, steps = reply(target, REPEATING, sampling, proposer, AdaptivePolicy(target, flat_costs))
        assert tokens == expected, proposer.describe()
        assert all(s.gain is not None for s in steps[1:-1])
        if proposer.name != "draft":  # (a draft model's measured cost may keep it out all along)
            assert len({s.k for s in steps[1:]}) > 1  # k followed its estimates


@pytest.fixture(scope="module")
def dflash_target():
    return make_target(seed=3)


@pytest.fixture(scope="module")
def drafter(dflash_target, tmp_path_factory):
    path = write_random_drafter(
        tmp_path_factory.mktemp("drafter"), dflash_target, num_layers=DRAFT_LAYERS, std=0.3
    )
    return load_drafter(str(path), dflash_target)


@pytest.mark.parametrize("sampling", SAMPLINGS[:2])
def test_dflash_sitting_out_steps_keeps_its_context_and_the_output(dflash_target, drafter, sampling):
    """DFlash must hold the target's states of every token, including those of steps it sat out
    (its propose checks that its context is exactly the target's)."""
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    expected = generate(dflash_target, prompt, sampling).tokens
    proposer = AutoProposer([NgramProposer(k=AUTO), DFlashProposer(drafter, k=AUTO)])
    tokens, steps = reply(dflash_target, prompt, sampling, proposer, Cycling())
    assert tokens == expected
    names = [s.proposer for s in steps[1:]]
    assert "dflash" in names and "n-gram" in names and "off" in names
