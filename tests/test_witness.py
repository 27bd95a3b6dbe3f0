"""A drafter witnessing a copy (proposer auto): its pass for the next step, drafted behind any
member's verify step, tells whether the n-gram proposer's copy agrees with it, and what each
member sitting a step out would have kept.

Where the copy's first draft is the drafter's, the copy runs on; where it is not, it seldom does
(bench/cpu/agreement.py); a drafter unsure of its first draft seldom sees it kept. So the copy's
acceptance is learnt apart for the two readings and the drafter's for whether it is sure, the
drafter drafts ahead behind the copy's steps while its reading pays for its device time, and a
member whose drafts are known without drafting (the copy's lookup, a pass drafted ahead) learns
from every step and needs no probes.
"""

import pytest
import torch

from engine import (
    AUTO,
    AutoProposer,
    DFlashProposer,
    Generation,
    NgramProposer,
    SamplingParams,
    generate,
    load_drafter,
    write_random_drafter,
)
from engine.limits import MAX_K
from engine.speculation.adaptive import (
    AGREES,
    DISAGREES,
    INSIGHT_START,
    SURE,
    SURE_AT,
    UNSURE,
    AdaptivePolicy,
    Choice,
)
from engine.speculation.loop import Step
from engine.speculation.replay import DRAFT, FLASH, Replayed, Shape
from engine.speculation.replay import PROMPT as REPLAY_PROMPT
from engine.speculation.step_costs import CostTable
from tests.dflash_target import DRAFT_LAYERS, PROMPT, foreseeing, make_target

LENGTH = 64


@pytest.fixture(autouse=True)
def witnessing(monkeypatch):
    """The witness is off unless SPECCHAT_WITNESS=1 (on the H200 it made the conversation slower):
    these tests specify it switched on."""
    monkeypatch.setenv("SPECCHAT_WITNESS", "1")


def verify_cost(n: int) -> float:
    return 1e-3 * (1.0 + 0.02 * (n - 1))


def policy() -> AdaptivePolicy:
    table = CostTable(verify_cost)
    return AdaptivePolicy(model=None, step_cost=lambda model: table)


def members(ngram_first: int, flash_first: int, ngram_run: int = 15, flash_run: int = 2):
    """An n-gram proposer with a 3-token match and a drafter whose pass for this step was drafted
    ahead, each with its first draft and the drafts it would keep at every position."""
    ngram = Replayed("n-gram", Shape([3] * LENGTH, [ngram_run] * LENGTH, [ngram_first] * LENGTH))
    flash = Replayed("dflash", Shape([1] * LENGTH, [flash_run] * LENGTH, [flash_first] * LENGTH), model=FLASH)
    flash.ahead_at = REPLAY_PROMPT + 1
    return ngram, flash


def context() -> list[int]:
    return [0] * (REPLAY_PROMPT + 1)


def step(tokens: int, drafts: int = 0) -> Step:
    return Step(tokens=[1] * tokens, drafts=[1] * drafts, accepted=tokens - 1, kind="plain", k=drafts,
                proposer="x", propose_s=0.0, verify_s=verify_cost(drafts + 1), position=0)


@pytest.mark.parametrize("agrees", [True, False])
def test_the_copy_is_weighed_on_its_estimates_for_whether_the_drafter_agrees(agrees):
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=7 if agrees else 8)
    for _ in range(3):
        p.choose([ngram, flash], context(), MAX_K)
    for _ in range(30):  # where they agree, the copy runs fifteen deep; where not, never
        ngram.estimates.acceptance(3 + AGREES).record(15, 15)
        ngram.estimates.acceptance(3 + DISAGREES).record(15, 0)
    choice = p.choose([ngram, flash], context(), MAX_K)
    assert choice.proposer is (ngram if agrees else flash)
    assert choice.after_pass, "the drafter's pass runs before the step, whichever member drafts"
    if agrees:
        assert choice.bucket == 3 + AGREES and choice.k == MAX_K
        assert choice.reading == "the drafter's first draft is the copy's"  # what the teaching view shows


@pytest.mark.parametrize("sure", [0.9, 0.2])
def test_the_drafter_is_weighed_on_its_estimates_for_whether_it_is_sure_of_its_first_draft(sure):
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=8, ngram_run=0)
    flash.shape.sure = [sure] * LENGTH
    for _ in range(3):
        p.choose([ngram, flash], context(), MAX_K)
    for _ in range(30):  # sure of its first draft, it runs four deep; unsure, never
        flash.estimates.acceptance(1 + SURE).record(4, 4)
        flash.estimates.acceptance(1 + UNSURE).record(4, 0)
    choice = p.choose([ngram, flash], context(), MAX_K)
    if sure >= SURE_AT:
        assert choice.proposer is flash and choice.bucket == 1 + SURE and choice.k >= 4
    else:
        assert choice.proposer is not flash


def test_without_a_pass_drafted_ahead_the_copy_is_weighed_on_its_match_alone():
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=7)
    flash.ahead_at = -1
    choice = p.choose([ngram, flash], context(), MAX_K)
    assert choice.proposer is not ngram or choice.bucket == 3
    assert set(ngram.estimates.buckets) == {3}


def test_a_member_sitting_a_step_out_learns_what_its_known_drafts_would_have_kept():
    """The copy sits out a step of the drafter's that keeps 2 drafts: its own drafts, known from
    its lookup, would have kept 3 of the step's tokens (all of them), so its estimates for that
    reading count 3 kept; a plain step tells of its first draft."""
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=8, ngram_run=5)
    choice = Choice(flash, 2, plain_seconds=1e-3, ahead=True, after_pass=True)
    choice.watched = p.watching([p.choose([ngram, flash], context(), MAX_K)], choice, context())
    assert [(w[0], w[1]) for w in choice.watched] == [(ngram, 3 + DISAGREES)]
    before = list(ngram.estimates.acceptance(3 + DISAGREES).kept)
    p.record(choice, step(tokens=3, drafts=2), [ngram, flash])
    after = ngram.estimates.acceptance(3 + DISAGREES).kept
    assert [a - 0.92 * b for a, b in zip(after[:4], before[:4])] == pytest.approx([1, 1, 1, 0])
    assert choice.watched == [], "learnt from once"


def peeks(proposer) -> list[int]:
    """Counts the proposer's peeks (its first_draft and sureness go through them too)."""
    counted, peek = [], proposer.peek

    def counting(context):
        counted.append(len(context))
        return peek(context)

    proposer.peek = counting
    return counted


@pytest.mark.parametrize("beside", ["alone", "a draft model"])
def test_a_pass_drafted_ahead_that_no_reading_waited_for_is_not_peeked(beside):
    """A drafter whose pass was drafted ahead sits a plain step out, with no copy beside it
    (alone, with k auto; beside a draft model): its drafts would go to the verify step unread,
    so they are not read for what it would have kept either (the host would wait for the pass)."""
    p = policy()
    _, flash = members(ngram_first=7, flash_first=7, flash_run=0)
    draft = Replayed("draft", Shape([1] * LENGTH, [0] * LENGTH, [7] * LENGTH), model=DRAFT)
    proposers = [flash] if beside == "alone" else [draft, flash]
    for proposer in proposers:
        for _ in range(30):  # never kept: plain steps win
            p.estimates(proposer).acceptance(1).record(15, 0)
        proposer.estimates.credit = -1.0  # and none is probed
    counted = peeks(flash)
    choice = p.choose(proposers, context(), MAX_K)
    assert choice.proposer is None and not choice.probe
    assert counted == [] and choice.watched == []


def test_a_witness_beside_the_copy_is_read_and_learns_while_it_sits_out():
    """Beside the copy the witness's pass is read for the copy's reading anyway: sitting the
    copy's step out, the witness learns what its drafts would have kept."""
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=7)
    p.choose([ngram, flash], context(), MAX_K)
    for _ in range(30):
        ngram.estimates.acceptance(3 + AGREES).record(15, 15)
    counted = peeks(flash)
    choice = p.choose([ngram, flash], context(), MAX_K)
    assert choice.proposer is ngram and counted
    assert [w[0] for w in choice.watched] == [flash]


def test_a_watched_member_is_not_probed():
    """The copy's lookup shows every step what it would have kept: it is never probed, however
    long it sits out; a drafter with nothing drafted ahead is."""
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=8, ngram_run=0, flash_run=4)
    flash.ahead_at = -1
    probed = set()
    for i in range(200):
        here = [0] * (REPLAY_PROMPT + 1 + i % 8)
        choice = p.choose([ngram, flash], here, MAX_K)
        if choice.probe:
            probed.add(choice.proposer.name)
        kept = min(choice.k, 4) if choice.proposer is flash else 0
        p.record(choice, step(tokens=kept + 1, drafts=choice.k), [ngram, flash])
    assert "n-gram" not in probed


def test_the_drafter_witnesses_while_its_reading_pays_and_comes_back_to_it_by_degrees():
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=7)
    p.choose([ngram, flash], context(), MAX_K)
    est = flash.estimates
    est.joins = 0.0  # the copy's steps are never followed by one of the drafter's
    est.insight = 2.0
    assert p.drafting_ahead([ngram, flash], ngram) is flash
    est.insight = 0.0  # its reading changed nothing of late
    assert p.drafting_ahead([ngram, flash], ngram) is None
    asked = 1
    while p.drafting_ahead([ngram, flash], ngram) is not flash:
        asked += 1
        assert asked < 500, "never given the benefit of the doubt back"
    assert asked > 10, "by degrees, not at once"
    assert 0.0 < est.insight <= INSIGHT_START
    assert p.drafting_ahead([ngram, flash], None) is None, "a plain step: nothing to witness"


def test_a_reading_that_changes_the_choice_is_worth_what_the_usual_reading_would_have_lost():
    p = policy()
    ngram, flash = members(ngram_first=7, flash_first=8, flash_run=6)
    p.choose([ngram, flash], context(), MAX_K)
    for _ in range(30):
        ngram.estimates.acceptance(3 + AGREES).record(15, 15)
        ngram.estimates.acceptance(3 + DISAGREES).record(15, 0)
    est = flash.estimates
    est.agreeing, est.insight = 0.9, 0.0  # they mostly agree: disagreeing is the news
    p.choose([ngram, flash], context(), MAX_K)
    assert est.insight > 0.0
    moved = est.insight
    flash.shape.firsts = [7] * LENGTH  # they agree: the usual reading, nothing learnt from it
    p.choose([ngram, flash], context(), MAX_K)
    assert est.insight == pytest.approx(0.9 * moved)


# The generation: a witness's pass behind the copy's steps


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def checkpoint(target, tmp_path_factory):
    return write_random_drafter(tmp_path_factory.mktemp("random"), target, num_layers=DRAFT_LAYERS, std=0.3)


class Copying(AdaptivePolicy):
    """Proposer auto on a script: mostly the n-gram member's steps, now and then the drafter's or
    a plain step; the drafter drafts ahead behind every drafting step (a witness), and each
    reading of it is kept."""

    SCRIPT = ((0, 4), (0, 2), (0, 6), (1, 3), (0, 3), (None, 0), (0, 5), (0, 1), (1, 2), (0, 4))

    def __init__(self, model):
        super().__init__(model, lambda m: CostTable(lambda n: 1e-3))
        self.choices = 0
        self.read: list[tuple[int, list[int]]] = []  # (context length, the witness's drafts)

    def choose(self, proposers, context, limit):
        member, k = self.SCRIPT[self.choices % len(self.SCRIPT)]
        self.choices += 1
        for p in proposers:
            self.estimates(p)
        witness = proposers[1]
        if witness.drafted_ahead(context):
            self.read.append((len(context), list(witness.peek(context))))
        if member is None or not min(k, limit):
            return Choice(None, 0, plain_seconds=1e-3)
        chosen = proposers[member]
        return Choice(chosen, min(k, limit), plain_seconds=1e-3, ahead=chosen.drafted_ahead(context))

    def drafting_ahead(self, members, drafted):
        return members[1] if drafted is not None else None


def real(target, checkpoint):
    return load_drafter(str(checkpoint), target)


@pytest.mark.parametrize("sampling,make", [(SamplingParams(max_tokens=70), foreseeing),
                                           (SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=70), foreseeing),
                                           (SamplingParams(max_tokens=70), real)],
                         ids=["greedy", "sampled", "greedy, its own drafts"])
def test_a_witness_behind_the_copys_steps_drafts_what_a_pass_of_its_own_would(target, checkpoint, sampling, make):
    """Behind each of the n-gram member's steps the drafter drafts the next step's block, taking
    in first what it sat out: its drafts are the ones it would make drafting for that step itself
    (a drafter that drafts the reply's next tokens, wrong at set positions, shows which block it
    drafts; the drafter's own drafts, from the states it took in, show those states are the
    context's), and the reply stays plain decoding's."""
    plain = generate(target, PROMPT, sampling).tokens
    drafter = DFlashProposer(make(target, checkpoint), AUTO)
    policy = Copying(target)
    gen = Generation(target, PROMPT, sampling, speculative=AutoProposer([NgramProposer(AUTO), drafter]), policy=policy)
    steps = list(gen)
    assert gen.tokens == plain
    after_copy = [i for i, s in enumerate(steps[:-1]) if s.proposer == "n-gram" and s.drafts]
    assert len(after_copy) > 5 and len(policy.read) >= len(after_copy) - 2
    # a fresh drafter drafting for the same contexts itself
    fresh = DFlashProposer(make(target, checkpoint), AUTO)
    reply = PROMPT + plain
    for length, drafts in policy.read:
        fresh.attach(target, SamplingParams(max_tokens=1))
        states = target_states(target, reply[:length], fresh.drafter)
        fresh.reset(reply[:length], states)
        assert drafts == fresh.propose(reply[:length], drafter.max_k).drafts, length
        fresh.detach(target)


def test_a_witness_takes_in_what_it_sat_out_before_the_verify_step(target, checkpoint, monkeypatch):
    """A witness that sat steps out (the prompt, the script's plain step) takes in the states
    it missed before the copy's verify step is queued, not behind it with its pass: there each
    extension's input copy would wait for the verify step, and the host with it. The reply
    stays plain decoding's."""
    sampling = SamplingParams(max_tokens=70)
    plain = generate(target, PROMPT, sampling).tokens
    drafter = DFlashProposer(foreseeing(target, checkpoint), AUTO)
    events = []
    step, take_in, draft_ahead = target.step, drafter.drafter.take_in, drafter.draft_ahead

    def verifying(*args, **kw):
        events.append("verify")
        return step(*args, **kw)

    def taking_in(states):
        events.append("take in" if events[-1:] != ["draft ahead"] else "take in within the pass")
        take_in(states)

    def drafting_ahead(*args):
        events.append("draft ahead")
        draft_ahead(*args)
        events.append("drafted")

    drafter.drafter.take_in, drafter.draft_ahead = taking_in, drafting_ahead
    monkeypatch.setattr(target, "step", verifying)
    gen = Generation(target, PROMPT, sampling, speculative=AutoProposer([NgramProposer(AUTO), drafter]),
                     policy=Copying(target))
    list(gen)
    assert gen.tokens == plain
    assert "take in within the pass" not in events, events
    taken = [i for i, e in enumerate(events) if e == "take in"]
    assert len(taken) >= 3, events
    for i in taken:  # taken in, then the verify step, then the pass behind it
        assert events[i + 1 : i + 4] == ["verify", "draft ahead", "drafted"], (i, events)


def test_the_hosts_wait_for_a_pass_it_read_counts_in_the_step_it_chose(target, checkpoint):
    """Reading a pass drafted ahead before choosing waits for the pass: that wait (the pass's
    device time, which unread would have run in the next verify step's window) counts in the
    verify time of the step the reading chose, once per pass read."""
    drafter = DFlashProposer(foreseeing(target, checkpoint), AUTO)
    peek = drafter.peek

    def waiting_peek(context):
        fresh = drafter.peeked is None or drafter.peeked[0] is not drafter.ahead
        drafts = peek(context)
        if fresh and drafts is not None:
            drafter.waited += 1.0  # as if the host had waited a second for the pass
        return drafts

    drafter.peek = waiting_peek
    policy = Copying(target)
    gen = Generation(target, PROMPT, SamplingParams(max_tokens=70),
                     speculative=AutoProposer([NgramProposer(AUTO), drafter]), policy=policy)
    steps = list(gen)
    assert len(policy.read) > 5
    assert sum(1.0 <= s.verify_s < 2.0 for s in steps) == len(policy.read)


def test_a_pass_drafted_ahead_says_how_sure_the_drafter_is_of_its_first_draft(target, checkpoint):
    """The drafter's probability of its first draft, read with the drafts of its pass drafted
    ahead, is the one a pass of its own from that context gives."""
    proposer = DFlashProposer(load_drafter(str(checkpoint), target), 5)
    read = []
    propose = proposer.propose

    def reading(context, k):
        if proposer.drafted_ahead(context):
            read.append((len(context), proposer.sureness(context)))
        return propose(context, k)

    proposer.propose = reading
    sampling = SamplingParams(max_tokens=40)
    reply = PROMPT + generate(target, PROMPT, sampling, speculative=proposer).tokens
    assert len(read) > 3 and len({round(sure, 4) for _, sure in read}) > 1
    fresh = load_drafter(str(checkpoint), target)
    for length, sure in read:
        fresh.clear()
        logits = fresh.draft([target_states(target, reply[:length], fresh)], reply[length - 1], logits=True)
        assert sure == pytest.approx(float(torch.softmax(logits.float(), dim=-1)[0].max()), abs=1e-5)


def target_states(target, ids: list[int], drafter) -> torch.Tensor:
    """The target's states of every token of ids but the last that `drafter` reads, as a prefill leaves them."""
    seq, kept = target.new_sequence(), target.state_layers
    target.state_layers = drafter.state_layers
    try:
        return target.step(seq, ids[:-1], SamplingParams(max_tokens=1)).states
    finally:
        seq.release()
        target.state_layers = kept


@pytest.mark.parametrize("switch", ["0", None])
def test_the_witness_switch_leaves_passes_drafted_ahead_to_the_drafters_own_steps(target, checkpoint, monkeypatch,
                                                                                   switch):
    """SPECCHAT_WITNESS=0, or unset (the default): no pass behind the copy's steps."""
    if switch is None:
        monkeypatch.delenv("SPECCHAT_WITNESS")
    else:
        monkeypatch.setenv("SPECCHAT_WITNESS", switch)
    p = AdaptivePolicy(target)
    drafter = DFlashProposer(load_drafter(str(checkpoint), target), AUTO)
    ngram = NgramProposer(AUTO)
    p.estimates(drafter)
    assert p.drafting_ahead([ngram, drafter], ngram) is None
    monkeypatch.setenv("SPECCHAT_WITNESS", "1")
    assert AdaptivePolicy(target).drafting_ahead([ngram, drafter], ngram) is drafter, "switched on, it witnesses"


def test_a_drafter_alone_is_not_read_before_its_step():
    """With no copy beside it, a drafter's pass drafted ahead goes to the verify step unread (the
    host does not wait for it); beside a copy, it is read for the copy and for itself."""
    ngram, flash = members(ngram_first=7, flash_first=7)
    assert AdaptivePolicy.readings(flash, flash, [flash]) == ()
    assert AdaptivePolicy.readings(flash, flash, [ngram, flash]) == (SURE, UNSURE)
    assert AdaptivePolicy.readings(ngram, flash, [ngram, flash]) == (AGREES, DISAGREES)
    assert AdaptivePolicy.readings(ngram, None, [ngram, flash]) == ()
