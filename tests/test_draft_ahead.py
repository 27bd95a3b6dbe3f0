"""A DFlash pass drafted ahead: queued behind the verify step that decides its inputs, before the
host reads that step, it makes the drafts the next step would have made, and the reply stays
plain decoding's.

The pass takes in every state of the verify step, the refused drafts' too: their K/V sit where
the block's own go, which the block writes before it reads. These tests hold that on the CPU
reference path (op by op the host reads the count); tests/test_dflash_cuda.py holds it for the
graph, where the count stays on the device. The generation drafts ahead unless
SPECCHAT_DRAFT_AHEAD=0, which only the tests of that switch set.
"""

from itertools import pairwise

import pytest
import torch

from engine import (
    AUTO,
    DFlashProposer,
    Generation,
    SamplingParams,
    generate,
    load_drafter,
    write_random_drafter,
)
from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.step_costs import CostTable
from tests.dflash_target import DRAFT_LAYERS, PROMPT, foreseeing, make_target
from tests.scripted_policy import RUN, Scripted

# replies long enough to draft, sit out runs of plain steps and draft again
REPLIES = [SamplingParams(max_tokens=70), SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=70)]


@pytest.fixture(autouse=True)
def drafting_ahead(monkeypatch):
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "1")


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def checkpoint(target, tmp_path_factory):
    return write_random_drafter(tmp_path_factory.mktemp("random"), target, num_layers=DRAFT_LAYERS, std=0.3)


def counting(proposer: DFlashProposer) -> list[int]:
    """Record the context length at each pass drafted ahead."""
    calls = []
    ahead = proposer.draft_ahead

    def recording(drafts, targets, states):
        calls.append(proposer.drafter.context_length)
        return ahead(drafts, targets, states)

    proposer.draft_ahead = recording
    return calls


def steps_of(target, proposer, sampling) -> list[tuple]:
    return [(s.drafts, s.accepted, s.tokens) for s in Generation(target, PROMPT, sampling, (), speculative=proposer)]


@pytest.mark.parametrize("k", [1, 3, 8, 15])
def test_drafting_ahead_makes_the_drafts_the_next_step_would_make(target, checkpoint, k):
    sampling = SamplingParams(max_tokens=64)
    ahead = DFlashProposer(foreseeing(target, checkpoint), k)
    calls = counting(ahead)
    behind = DFlashProposer(foreseeing(target, checkpoint), k)
    behind.can_draft_ahead = lambda: False
    steps = steps_of(target, ahead, sampling)
    assert steps == steps_of(target, behind, sampling)
    # each drafting step drafts the next one ahead where the reply's budget leaves room for it
    emitted, roomy = 0, 0
    for drafts, _, tokens in steps:
        roomy += bool(drafts) and sampling.max_tokens - emitted > len(drafts) + 2
        emitted += len(tokens)
    assert len(calls) == roomy > 2
    assert max(s[1] for s in steps) >= min(k, 3), "steps that keep several drafts were exercised"
    assert [t for s in steps for t in s[2]] == generate(target, PROMPT, sampling).tokens


@pytest.mark.parametrize("sampling", [
    SamplingParams(max_tokens=32),
    SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=32),
], ids=["greedy", "sampled"])
def test_the_reply_drafted_ahead_is_plain_decodings(target, checkpoint, sampling):
    drafter = load_drafter(str(checkpoint), target)  # random weights: most drafts refused at once
    proposer = DFlashProposer(drafter, 6)
    calls = counting(proposer)
    assert generate(target, PROMPT, sampling, speculative=proposer).tokens == generate(target, PROMPT, sampling).tokens
    assert calls
    assert target.state_layers == ()


def test_the_context_after_a_pass_drafted_ahead_holds_the_kept_tokens_only(target, checkpoint):
    """At each proposal the drafter's cache holds the context but its last token, as after a pass
    made then: what draft_ahead held past it (a step's worth of rows) is given back."""
    proposer = DFlashProposer(foreseeing(target, checkpoint), 8)
    counting(proposer)
    seen = []
    propose = proposer.propose

    def checking(context, k):
        out = propose(context, k)
        seen.append((proposer.drafter.context_length, len(context) - 1))
        return out

    proposer.propose = checking
    generate(target, PROMPT, SamplingParams(max_tokens=40), speculative=proposer)
    assert len(seen) > 3 and all(have == want for have, want in seen), seen


def test_refused_drafts_states_taken_in_change_no_draft(target, checkpoint):
    """draft_ahead takes in all k + 1 states of a step and keeps accepted + 1: its drafts are those
    of a pass given the kept states alone, for every count kept."""
    k = 6
    drafter = load_drafter(str(checkpoint), target)
    ids = PROMPT + [7, 2, 11, 4, 9, 1, 13]
    target.state_layers = drafter.state_layers
    seq = target.new_sequence()
    try:
        states = target.forward(seq, torch.tensor(ids))[1]
    finally:
        target.state_layers = ()
        seq.release()
    context, step = states[: len(PROMPT)], states[len(PROMPT):]
    assert step.shape[0] == k + 1
    for accepted in range(k + 1):
        anchor = torch.tensor([ids[len(PROMPT) + accepted]])
        drafter.clear()
        drafter.extend(context)
        want = drafter.draft([step[: accepted + 1]], anchor).clone()
        drafter.clear()
        drafter.extend(context)
        got = drafter.draft_ahead(step, torch.tensor([accepted]), anchor)
        assert drafter.context_length == len(PROMPT) + accepted + 1
        assert torch.equal(got, want), accepted


def test_sampled_drafts_are_not_drafted_ahead(target, checkpoint):
    """They are drawn from the pass's logits on the host's side."""
    proposer = DFlashProposer(load_drafter(str(checkpoint), target), 4, sample=True)
    calls = counting(proposer)
    result = generate(target, PROMPT, SamplingParams(temperature=0.9, seed=3, max_tokens=24), speculative=proposer)
    assert result.metrics.drafted > 0 and calls == []


@pytest.mark.parametrize("sampling", [
    SamplingParams(max_tokens=64),
    SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=64),
], ids=["greedy", "sampled"])
def test_k_auto_drafts_ahead_keeps_the_output_and_learns_that_cost_apart(target, checkpoint, sampling):
    """With k auto the policy may take another option after a pass made ahead (it was for
    nothing); where it drafts with it, it prices the pass as mostly paid, learnt apart from a
    pass made for the step."""
    proposer = DFlashProposer(foreseeing(target, checkpoint), AUTO)
    calls = counting(proposer)
    steps = list(Generation(target, PROMPT, sampling, (), speculative=proposer))
    assert [t for s in steps for t in s.tokens] == generate(target, PROMPT, sampling).tokens
    est = proposer.estimates
    assert calls and est.ahead.measured, "passes were made ahead and drafted from"
    assert est.drafting.measured, "the reply's first pass was made for its step"


def test_without_drafts_made_ahead_the_policy_prices_a_whole_pass(target, checkpoint, monkeypatch):
    """The policy's choice is unchanged where nothing is drafted ahead: no cost is learnt as
    made ahead."""
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "0")
    proposer = DFlashProposer(foreseeing(target, checkpoint), AUTO)
    generate(target, PROMPT, SamplingParams(max_tokens=64), speculative=proposer)
    assert proposer.estimates.drafting.measured and not proposer.estimates.ahead.measured


def test_a_proposer_switched_away_drops_what_it_drafted_ahead(target, checkpoint):
    """Switched off mid-reply and back on, the proposer drafts afresh from the context it is given."""
    sampling = SamplingParams(max_tokens=48)
    proposer = DFlashProposer(foreseeing(target, checkpoint), 5)
    counting(proposer)
    gen = Generation(target, PROMPT, sampling, (), speculative=proposer)
    who = []
    for step in gen:
        who.append(step.proposer)
        if len(who) == 4:
            gen.speculative = None
        if len(who) == 8:
            gen.speculative = proposer
    assert "off" in who[4:8] and "dflash" in who[8:]
    assert gen.tokens == generate(target, PROMPT, sampling).tokens
    assert proposer.ahead is None or proposer.ahead[0] is not None, "nothing drafted ahead is left unsettled"



def test_switched_off_no_pass_is_drafted_ahead(target, checkpoint, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "0")
    proposer = DFlashProposer(foreseeing(target, checkpoint), 4)
    calls = counting(proposer)
    result = generate(target, PROMPT, SamplingParams(max_tokens=32), speculative=proposer)
    assert result.metrics.accepted > 0 and calls == []


def test_an_inspected_step_is_not_drafted_ahead(target, checkpoint):
    """The inspector reads the verify step's logits after the step, which a pass queued behind it
    may overwrite on a GPU: inspected steps draft after the host reads them."""
    proposer = DFlashProposer(foreseeing(target, checkpoint), 4)
    calls = counting(proposer)
    gen = Generation(target, PROMPT, SamplingParams(max_tokens=32), (), speculative=proposer)
    gen.inspect = True
    steps = list(gen)
    assert any(s.inspection is not None and s.drafts for s in steps) and calls == []


def watched(proposer) -> list[tuple[bool, int, int]]:
    """At each of its proposals from now on: (drafts made ahead used, the drafter's context
    length, the context's but its last token)."""
    seen = []
    propose = proposer.propose

    def checking(context, k):
        ahead = proposer.drafted_ahead(context)
        out = propose(context, k)
        seen.append((ahead, proposer.drafter.context_length, len(context) - 1))
        return out

    proposer.propose = checking
    return seen


@pytest.mark.parametrize("sampling", REPLIES, ids=["greedy", "sampled"])
def test_sitting_out_after_drafting_ahead_drops_those_drafts_and_catches_up(target, checkpoint, sampling):
    """A scripted policy drafts, sits out runs of plain steps, drafts again: the drafts made
    ahead of a step it sat out are dropped, the states it missed are taken in with its next pass,
    and the reply stays plain decoding's."""
    proposer = DFlashProposer(load_drafter(str(checkpoint), target), AUTO)
    calls = counting(proposer)
    seen = watched(proposer)
    policy = Scripted(target)
    gen = Generation(target, PROMPT, sampling, speculative=proposer, policy=policy)
    gen.plain_run = RUN
    list(gen)
    assert gen.tokens == generate(target, PROMPT, sampling).tokens
    assert calls and any(ahead for ahead, _, _ in seen), "drafting steps drafted the next ahead"
    assert any(behind for _, behind in policy.drafted), "a comeback caught up on what it held"
    assert all(have == want for _, have, want in seen), seen


class Alternating(AdaptivePolicy):
    """Proposer auto's bookkeeping on a script of (member, k) choices (None: a run of plain
    steps), drafting ahead after every drafting step: the next step may then take another member
    or a plain run, and the pass ran for nothing."""

    def __init__(self, model):
        super().__init__(model, lambda m: CostTable(lambda n: 1e-3))
        self.choices = 0
        self.script = [(1, 3), (1, 4), (0, 2), (1, 3), (None, 0), (1, 5), (1, 2), (0, 3), (0, 1), (1, 4)]

    def choose(self, proposers, context, limit):
        member, k = self.script[self.choices % len(self.script)]
        self.choices += 1
        for p in proposers:
            self.estimates(p)
        if member is None or not min(k, limit):
            return Choice(None, 0, plain_seconds=1e-3, steps=RUN)
        return Choice(proposers[member], min(k, limit), plain_seconds=1e-3, ahead=proposers[member].drafted_ahead(context))

    def drafts_ahead(self, proposer):
        return True


@pytest.mark.parametrize("sampling", REPLIES, ids=["greedy", "sampled"])
def test_proposer_auto_drafts_ahead_and_a_step_of_another_member_drops_the_drafts(target, checkpoint, sampling):
    """A member of proposer "auto" drafts the next pass ahead where the policy expects to draft
    with it again; where the next step goes to the n-gram member or to plain steps instead, those
    drafts are dropped and the drafter's next pass drafts from the context as it is then: the
    reply stays plain decoding's."""
    from engine import AutoProposer, NgramProposer

    drafter = DFlashProposer(load_drafter(str(checkpoint), target), AUTO)
    calls = counting(drafter)
    seen = watched(drafter)
    auto = AutoProposer([NgramProposer(AUTO), drafter])
    gen = Generation(target, PROMPT, sampling, speculative=auto, policy=Alternating(target))
    gen.plain_run = RUN
    steps = list(gen)
    assert gen.tokens == generate(target, PROMPT, sampling).tokens
    assert calls and any(ahead for ahead, _, _ in seen), "steps of the drafter drafted the next ahead"
    after = [b.proposer for a, b in pairwise(steps) if a.proposer == "dflash" and a.drafts]
    assert "n-gram" in after and "off" in after, "some passes made ahead were for nothing"
    assert all(have == want for _, have, want in seen), seen


def test_proposer_auto_drafts_ahead_only_where_the_policy_expects_the_drafter_again(target, checkpoint):
    """The real policy: a member drafts ahead where the share of its steps followed by another
    of its own makes the pass worth its device time."""
    drafter = DFlashProposer(load_drafter(str(checkpoint), target), AUTO)
    policy = AdaptivePolicy(target, lambda m: CostTable(lambda n: 1e-3))
    est = policy.estimates(drafter)
    est.verify_ahead.ratio = 1.1  # a pass ahead adds 0.1 of a step to the verify step behind it
    est.again = 0.9
    assert policy.drafts_ahead(drafter)
    est.again = 0.1
    assert not policy.drafts_ahead(drafter)
