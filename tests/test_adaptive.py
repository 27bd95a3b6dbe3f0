"""The adaptive policy: which k it takes from given acceptance and costs, and how it follows the text."""

from itertools import pairwise

import pytest

from engine import (
    AUTO,
    AutoProposer,
    DraftProposer,
    Generation,
    NgramProposer,
    Proposer,
    SamplingParams,
    Step,
)
from engine.limits import MAX_STEP
from engine.speculation import step_costs as costs
from engine.speculation.acceptance import Acceptance, expected_curve, expected_tokens
from engine.speculation.adaptive import PROBE_SHARE, REPLY_CARRY, AdaptivePolicy, best_k, catch_up_key
from engine.speculation.step_costs import CostTable, RelativeCost
from tests.conftest import tiny_model

PLAIN = 1.0  # seconds of a plain step: costs below are in plain steps


def verify_cost(n: int) -> float:
    return PLAIN + 0.02 * (n - 1)  # a verify step of n tokens: a little more than a decode step


class Scripted(Proposer):
    """A proposer whose drafts the test decides; drafting k costs `per_draft` * k."""

    def __init__(self, per_draft: float, name: str = "scripted"):
        super().__init__(AUTO)
        self.name, self.per_draft = name, per_draft

    def drafting_seed(self, k, step_cost):
        return self.per_draft * k

    def proposing(self, k: int) -> float:
        """What proposing k drafts takes (as seeded)."""
        return self.per_draft * k


class BlockLike(Scripted):
    """A drafter whose one pass drafts the whole block (DFlash), whatever k: its pass first guessed
    at `seed`, and taking `cost` when it runs."""

    drafts_in_one_pass = True

    def __init__(self, seed: float = 0.6, cost: float = 0.0, name: str = "block"):
        super().__init__(per_draft=0.0, name=name)
        self.seed, self.cost = seed, cost

    def drafting_seed(self, k, step_cost):
        return self.seed

    def proposing(self, k):
        return self.cost


def fifth_of_a_step() -> BlockLike:
    """A drafter's pass of a fifth of a plain step (DFlash on the H200), with no measurement of itself."""
    return BlockLike(seed=0.2 * PLAIN, cost=0.2 * PLAIN, name="pass")


def policy() -> AdaptivePolicy:
    table = CostTable(verify_cost)
    return AdaptivePolicy(model=None, step_cost=lambda model: table)


def run(policy, proposers, steps: int, accept) -> list:
    """Play `steps` steps: accept(proposer, k) says how many of the chosen k drafts the model keeps;
    each step takes exactly its modelled cost. Returns the choices."""
    choices = []
    for i in range(steps):
        choice = policy.choose(proposers, [0] * (i + 2), 15)
        k, who = choice.k, choice.proposer
        accepted = accept(who, k) if k else 0
        step = Step(
            tokens=[1] * (accepted + 1),
            drafts=[1] * k,
            accepted=accepted,
            kind="plain",
            k=k,
            proposer=who.name if who else "off",
            propose_s=who.proposing(k) if who else 0.0,
            verify_s=verify_cost(k + 1),
            position=i,
        )
        policy.record(choice, step, proposers)
        choices.append(choice)
    return choices


def test_expected_tokens_count_each_surviving_run_plus_the_models_own_token():
    assert expected_tokens([1.0] * 15, 7) == 8
    assert expected_tokens([0.0] * 15, 7) == 1
    assert expected_tokens([0.8, 0.5, 0.1], 3) == pytest.approx(1 + 0.8 + 0.8 * 0.5 + 0.8 * 0.5 * 0.1)


def test_best_k_is_the_hand_computed_one():
    tokens = expected_curve([0.8, 0.5, 0.1])
    verify = [0.0] + [verify_cost(n) for n in range(1, 5)]

    def drafting(per_draft):
        return [per_draft * k for k in range(4)]

    # a second worth a plain step's token: k=1: 1.8 - (0.1 + 1.02) = 0.68; k=2: 2.2 - (0.2 + 1.04)
    # = 0.96; k=3: 2.24 - (0.3 + 1.06) = 0.88
    k, expected, seconds = best_k(tokens, drafting(0.1), verify, range(1, 4), 1.0)
    assert (k, expected, seconds) == (2, pytest.approx(2.2), pytest.approx(1.24))
    # free drafting and flat verify cost: every extra draft pays, however unlikely
    assert best_k(tokens, drafting(0.0), [1.0] * 5, range(1, 4), 1.0)[0] == 3
    # costly drafting: one draft only
    assert best_k(tokens, drafting(0.5), verify, range(1, 4), 1.0)[0] == 1
    # each draft costs 0.12 s: at 3 tokens a second (the reply has been running at three times
    # plain decoding's speed) the second draft's 0.4 tokens are worth it (0.36), at 5 not (0.6)
    assert best_k(tokens, drafting(0.1), verify, range(1, 4), 3.0)[0] == 2
    assert best_k(tokens, drafting(0.1), verify, range(1, 4), 5.0)[0] == 1


def test_acceptance_follows_the_text_and_deep_positions_lean_on_shallow_ones():
    acc = Acceptance()
    for _ in range(30):
        acc.record(drafted=8, accepted=8)
    assert min(acc.rates()[:8]) > 0.9
    for _ in range(30):
        acc.record(drafted=8, accepted=0)
    assert acc.rates()[0] < 0.15
    for _ in range(30):  # good again, but drafted one at a time: position 5 was last seen failing
        acc.record(drafted=1, accepted=1)
    assert acc.rates()[4] > 0.8


def test_a_step_the_host_stalled_in_moves_the_cost_of_its_length_little():
    table = CostTable(verify_cost)
    for _ in range(20):
        table.add(1, 1.0)
    table.add(1, 5.0)  # a collection ran in this one
    assert table(1) <= 1.05
    for _ in range(30):  # the machine got slower for good: followed, a step at a time
        table.add(1, 2.0)
    assert table(1) > 1.9


def test_a_few_drafts_move_the_estimate_less_than_a_reply_of_them():
    lucky = Acceptance()
    lucky.record(drafted=1, accepted=1)
    lucky.record(drafted=1, accepted=1)
    assert lucky.tokens()[15] < 6  # two drafts kept are not yet a proposer right 15 deep
    unlucky = Acceptance()
    unlucky.record(drafted=4, accepted=0)
    unlucky.record(drafted=4, accepted=0)
    assert unlucky.rates()[0] > 0.15  # nor two misses one that is never right
    for _ in range(60):
        unlucky.record(drafted=4, accepted=0)
    assert unlucky.rates()[0] < 0.02  # a reply of misses is


def test_choice_is_plain_when_drafting_cannot_pay_and_the_best_k_when_it_can():
    p = policy()
    cheap = Scripted(per_draft=0.0)
    always = run(p, [cheap], 40, lambda who, k: k)
    assert all(c.k == 15 for c in always[-10:])  # every draft accepted, drafts free: the longest
    costly = Scripted(per_draft=0.7)
    p = policy()
    never = run(p, [costly], 200, lambda who, k: 0)
    assert all(c.k == 0 for c in never[-20:] if not c.probe)


@pytest.mark.parametrize("per_draft", [0.0, 0.3, 0.7])
def test_falls_back_to_plain_when_drafts_never_match_probing_within_its_budget(per_draft):
    proposer = Scripted(per_draft)
    choices = run(policy(), [proposer], 2000, lambda who, k: 0)[20:]  # its estimate has fallen by then
    lost = sum(c.seconds - PLAIN for c in choices if c.k)  # beyond the plain step each draft step replaced
    assert lost <= 1.2 * PROBE_SHARE * len(choices) * PLAIN
    assert sum(1 for c in choices if c.k) >= 2  # but it keeps probing


@pytest.mark.parametrize("per_draft", [0.0, 0.3])
def test_comes_back_when_drafts_match_again(per_draft):
    proposer = Scripted(per_draft)
    p = policy()
    run(p, [proposer], 500, lambda who, k: 0)
    choices = run(p, [proposer], 300, lambda who, k: k)
    back = next(i for i, c in enumerate(choices) if c.k >= 8 and not c.probe)
    assert back < 250
    assert all(c.k >= 8 for c in choices[back + 10 :])


def test_a_new_reply_starts_from_part_of_what_the_last_one_showed():
    """Estimates carry from reply to reply (a chat keeps its proposers), but a new reply's text may be
    of another kind: it starts from REPLY_CARRY of the evidence, once, so its first steps count more."""
    proposer = Scripted(0.05)
    run(policy(), [proposer], 60, lambda who, k: k)  # a reply where every draft is kept
    before = list(proposer.estimates.acceptance(1).reached)
    following = policy()  # the next reply's
    following.estimates(proposer)
    following.estimates(proposer)  # asked again within the reply: no second cut
    assert 0 < REPLY_CARRY < 1
    assert proposer.estimates.acceptance(1).reached == pytest.approx([REPLY_CARRY * r for r in before])


def test_after_a_reply_where_drafts_paid_one_where_none_are_kept_sits_out_within_a_few_steps():
    proposer = Scripted(0.3)  # drafting costs about a third of a step: each missed proposal hurts
    run(policy(), [proposer], 80, lambda who, k: k)
    choices = run(policy(), [proposer], 20, lambda who, k: 0)
    drafting = [i for i, c in enumerate(choices) if c.k and not c.probe]
    assert drafting and max(drafting) < 10, drafting


def test_auto_proposer_takes_the_member_whose_drafts_pay():
    ngram, draft = Scripted(0.0, "n-gram"), Scripted(0.3, "draft")
    p = policy()
    copying = run(p, [ngram, draft], 60, lambda who, k: k if who is ngram else 0)
    assert all(c.proposer is ngram for c in copying[-20:])
    prose = run(p, [ngram, draft], 300, lambda who, k: 0 if who is ngram else min(k, 3))
    assert sum(c.proposer is draft for c in prose[-50:]) >= 45


class DraftLike(Scripted):
    """A drafter that runs a step of its own per draft: the first `first`, each chained one after
    it `chained`; a proposal after sitting out first runs the tokens it missed, in one step of
    `catch_up`. Its seed is the real draft proposer's, from its one-token step `first`."""

    def __init__(self, first: float, chained: float, catch_up: float = 0.0):
        super().__init__(per_draft=first, name="draft")
        self.first, self.chained, self.catch_up = first, chained, catch_up
        self.missed = 0
        self.model = object()

    drafting_seed = DraftProposer.drafting_seed

    def behind(self, context) -> int:
        return self.missed

    def cost(self, k: int) -> float:
        missed, self.missed = self.missed, 0
        return self.first + self.chained * (k - 1) + (self.catch_up if missed > 1 else 0.0)


def run_drafts(policy, proposer: DraftLike, steps: int, accept) -> list:
    """run() with the drafter's costs: sitting out a step leaves it tokens to catch up on."""
    choices = []
    for i in range(steps):
        choice = policy.choose([proposer], [0] * (i + 2), 15)
        k = choice.k
        accepted = accept(k) if k else 0
        if not k:
            proposer.missed += 1
        step = Step(tokens=[1] * (accepted + 1), drafts=[1] * k, accepted=accepted, kind="plain", k=k,
                    proposer="draft" if k else "off", propose_s=proposer.cost(k) if k else 0.0,
                    verify_s=verify_cost(k + 1), position=i)
        policy.record(choice, step, [proposer])
        choices.append(choice)
    return choices


def draft_policy(first: float) -> AdaptivePolicy:
    verify, drafts = CostTable(verify_cost), CostTable(lambda n: first)
    return AdaptivePolicy(model="target", step_cost=lambda model: verify if model == "target" else drafts)


@pytest.mark.parametrize("first, chained, policy, steps, within", [
    (0.3, 0.3, 0.3, 200, 5),  # cheap drafts, always right: long within a handful of steps
    # the H200's figures in target steps: the 0.5B draft's first step 0.81, each chained one
    # 0.54; its k = 15 drafts, always right, give 1.6x plain decoding: tried at once, then long
    (0.81, 0.54, 0.85, 256, 10),
])
def test_a_drafter_whose_drafts_are_always_right_drafts_long_and_stays_there(first, chained, policy, steps, within):
    drafter = DraftLike(first=first, chained=chained)
    choices = run_drafts(draft_policy(policy), drafter, steps, lambda k: k)
    first_long = next(i for i, c in enumerate(choices) if c.k >= 7)
    assert first_long <= within
    assert all(c.k >= 7 for c in choices[first_long:])


def test_catching_up_after_sitting_out_is_learnt_as_such_not_as_the_cost_of_drafting():
    drafter = DraftLike(first=0.3, chained=0.3, catch_up=0.9)
    p = draft_policy(0.3)
    out = run_drafts(p, drafter, 400, lambda k: 0)  # sits out nearly every step, missing the tokens
    back = run_drafts(p, drafter, 600, lambda k: k)
    assert all(c.k >= 7 for c in back[-50:])
    est = drafter.estimates
    assert est.drafting(15) == pytest.approx(0.3 * 15, rel=0.1)
    returns = [c for c in out + back if c.k and c.behind > 1]
    assert returns  # it did come back after sitting out, and each return paid the catch-up once:
    assert est.catching_up(returns[-1].behind) == pytest.approx(0.9, rel=0.1)


def test_the_cost_of_coming_back_is_part_of_the_choice():
    drafter = DraftLike(first=0.3, chained=0.3)
    p = draft_policy(0.3)
    run_drafts(p, drafter, 100, lambda k: k)  # drafting 15 a step: 16 tokens for 5.8 plain steps' time
    est = drafter.estimates
    est.catch_up.add(catch_up_key(20), 0.5)  # coming back 20 tokens behind has cost half a plain step
    est.catch_up.add(catch_up_key(60), 12.0)  # 60 tokens behind, 12
    in_run = p.choose([drafter], [0] * 200, 15)
    drafter.missed = 20
    back = p.choose([drafter], [0] * 200, 15)
    assert back.k == in_run.k == 15 and back.seconds == pytest.approx(in_run.seconds + 0.5)
    drafter.missed = 60  # 16 tokens for 17.8 plain steps' time: plain steps are faster
    assert p.choose([drafter], [0] * 200, 15).k == 0


def test_reading_the_prompt_is_a_draft_models_prefill_not_a_cost_of_coming_back():
    drafter = DraftLike(first=0.3, chained=0.3)
    p = draft_policy(0.3)
    context = [0] * 200
    drafter.missed = len(context) - 1  # a chat's reply: the draft model holds nothing of it yet
    first = p.choose([drafter], context, 15)
    assert first.k and first.prompt and first.seconds < 2  # tried at once all the same
    drafter.estimates.catch_up.add(catch_up_key(50), 12.0)
    drafter.missed = 50  # sat out 50 tokens: coming back costs what it costs
    assert p.choose([drafter], context, 15).k == 0


def test_a_costly_drafter_right_on_its_first_drafts_goes_deeper_step_by_step():
    drafter = DraftLike(first=0.81, chained=0.54)  # the H200's 0.5B draft, in plain steps
    choices = run_drafts(draft_policy(0.85), drafter, 8, lambda k: k)
    drafted = [c.k for c in choices if c.k]
    for before, after in pairwise(drafted):
        assert after <= 2 * before + 1  # no jump to k = 15 on a lucky draft or two
    cheap = Scripted(per_draft=0.0)  # free drafts: as deep as its estimates say at once
    assert max(c.k for c in run(policy(), [cheap], 3, lambda who, k: k)) == 15


def test_optimism_raises_the_positions_drafted_little_of_late_and_leaves_settled_ones():
    acc = Acceptance()
    for _ in range(40):  # drafts 1..3 always kept, then proposals stopped at 3
        acc.record(drafted=3, accepted=3)
    hoped, rates = acc.rates(1.0), acc.rates()
    assert hoped[:3] == rates[:3]  # settled: many recent steps reached them
    assert all(h > r for h, r in zip(hoped[3:], rates[3:]))  # never reached of late: might keep more
    assert acc.tokens(1.0)[15] > acc.tokens()[15] and acc.tokens(1.0)[3] == acc.tokens()[3]
    for _ in range(40):
        acc.record(drafted=1, accepted=0)
    assert acc.rates(1.0)[0] == acc.rates()[0]  # a first draft that keeps missing is not tried on hope



class Measured(Scripted):
    """A drafter with a training measurement of each position (as a DFlash drafter trained here
    carries), one pass for any k: a fifth of a plain step, under the nearly-free bound."""

    def __init__(self, known):
        super().__init__(per_draft=0.0, name="measured")
        self.known = known

    def known_acceptance(self):
        return self.known

    def drafting_seed(self, k, step_cost):
        return 0.2


def test_a_measured_drafter_is_weighed_by_its_estimates_not_raised_on_hope():
    """Its first draft kept, the second never: a drafter with a measurement of every position
    stays at a few drafts. (Raised on hope where the reply had not reached, its deep positions,
    which the measurement says are kept a third of the time, took it to 15.)"""
    drafter = Measured([0.6, 0.5, 0.4, 0.35] + [0.3] * 11)
    choices = run(policy(), [drafter], 40, lambda who, k: min(k, 1))
    assert all(1 <= c.k <= 4 for c in choices[-10:])


def test_a_pass_that_costs_a_fifth_of_a_step_is_not_weighed_on_hope():
    """Drafts nearly free to make (an n-gram lookup) are weighed by their hopes; a drafter's pass,
    with no measurement of itself, is not: whose drafts are never kept, it stops within a few
    steps. (Weighed on hope, such a drafter drafted its first 7 steps of a reply, replayed.)"""
    p = policy()
    assert p.choose([Scripted(per_draft=0.0)], [0, 0], 15).hoped is not None
    assert p.choose([fifth_of_a_step()], [0, 0], 15).hoped is None
    choices = run(policy(), [fifth_of_a_step()], 12, lambda who, k: 0)
    first = next(i for i, c in enumerate(choices) if c.k == 0)
    assert first <= 3 and all(c.k == 0 for c in choices[first:] if not c.probe)


def test_the_first_credit_has_a_proposer_tried_and_is_dropped_once_it_drafts():
    """A proposer starts with a budget for one failed probe so it is tried at once; taken on its
    estimates instead, it drafts, and once its drafts miss no run of probes follows: it probes
    again when sitting out has earned one. (With the first budget kept, four probes in a row.)"""
    choices = run(policy(), [fifth_of_a_step()], 60, lambda who, k: 0)
    first = next(i for i, c in enumerate(choices) if c.k == 0)
    probed = [i for i, c in enumerate(choices) if c.probe]
    assert not choices[0].probe and choices[0].k > 0
    assert not probed or probed[0] - first >= 10


def test_warming_up_k_auto_times_the_steps_it_prices_so_the_first_reply_does_not(monkeypatch):
    timed = []
    monkeypatch.setattr(costs, "seed_costs", lambda model: timed.append(model) or [1e-3] * MAX_STEP)
    monkeypatch.setattr(costs, "_tables", {})
    target, draft = tiny_model(), tiny_model(seed=1)
    sampling = SamplingParams(max_tokens=8)

    DraftProposer(draft, k=3).warm_up(target, sampling)
    assert timed == []  # a fixed k never asks what steps cost
    DraftProposer(draft, k=AUTO).warm_up(target, sampling)
    assert timed == [target, draft]  # the target's verify steps, and the draft's own steps
    AutoProposer([NgramProposer(k=4), DraftProposer(draft, k=4)]).warm_up(target, sampling)
    assert timed == [target, draft]  # once per model for the life of the process

    gen = Generation(target, [1, 2, 3, 4], sampling, speculative=DraftProposer(draft, k=AUTO))
    list(gen)
    assert timed == [target, draft]  # the reply found them timed


def test_plain_steps_run_back_to_back_to_the_end_of_the_reply():
    p = policy()
    never = Scripted(per_draft=0.7)
    run(p, [never], 300, lambda who, k: 0)  # its drafts never kept: plain steps from here on
    runs = {}
    for limit in (15, 9, 2, 0):  # tokens left in the reply: limit + 1
        choice = p.choose([never], [0] * 400, limit)
        assert choice.proposer is None and not choice.probe
        runs[limit] = choice.steps
    assert runs[15] > 1 and runs[9] == 10 and runs[2] == 3 and runs[0] == 1  # to the reply's last token


def test_plain_steps_are_asked_for_at_once_up_to_the_next_probe_past_a_verify_steps_length():
    """Each time the policy chooses again the device waits for the host, so where only the probe
    budget changes it asks for every plain step until a probe could be paid for, many runs' worth
    where that is far off, and then probes."""
    p = policy()
    never = Scripted(per_draft=0.7)
    run(p, [never], 300, lambda who, k: 0)
    choice = p.choose([never], [0] * 400, 15)
    assert choice.proposer is None and choice.steps > MAX_STEP
    for i in range(choice.steps):
        p.record(choice, Step(tokens=[1], drafts=[], accepted=0, kind="plain", k=0, proposer="off",
                              propose_s=0.0, verify_s=PLAIN, position=400 + i), [never])
    assert p.choose([never], [0] * (400 + choice.steps), 15).probe


def test_a_block_drafters_pass_measured_at_one_k_prices_every_k():
    """One pass drafts the whole block, so its cost measured at one k is every k's at once.
    Priced per k, every other k would stay near its seed until the drift caught up (some 20
    steps: half a bench reply), the k measured first looking cheaper than the rest for that alone;
    so would a pass made behind the verify step, whose hidden cost is far below its seed."""
    block = BlockLike()
    p = policy()
    choice = p.choose([block], [0, 0], 15)
    choice.k = 9
    p.record(choice, Step(tokens=[1] * 4, drafts=[1] * 9, accepted=3, kind="correction", k=9, proposer="block",
                          propose_s=0.25, verify_s=verify_cost(10), position=0), [block])
    assert block.estimates.drafting_costs()[1:] == [0.25] * 15
    choice.ahead = True
    p.record(choice, Step(tokens=[1] * 2, drafts=[1] * 9, accepted=1, kind="correction", k=9, proposer="block",
                          propose_s=0.02, verify_s=verify_cost(10), position=4), [block])
    assert block.estimates.drafting_costs(ahead=True)[1:] == [0.02] * 15
    scripted = Scripted(per_draft=0.1)  # a draft model: a step of its own per draft, priced per k
    choice = p.choose([scripted], [0, 0], 15)
    choice.k = 9
    p.record(choice, Step(tokens=[1] * 4, drafts=[1] * 9, accepted=3, kind="correction", k=9, proposer="scripted",
                          propose_s=0.9, verify_s=verify_cost(10), position=0), [scripted])
    assert scripted.estimates.drafting(9) == 0.9 and scripted.estimates.drafting(4) == pytest.approx(0.4)


def test_each_proposer_prices_verify_steps_by_its_own():
    """A DFlash step keeps the target's states and runs the next pass before it; an n-gram step
    of the same length does neither. Priced from one table, the n-gram's cheap 16-token steps
    made a DFlash k 15 look cheaper than the 5-token steps it had run. Each proposer learns its
    own, from the target's seed until it has run some; plain steps teach the target's table."""
    block, copier = BlockLike(), Scripted(per_draft=0.0, name="copier")
    p = policy()
    for who, k, seconds in ((copier, 15, verify_cost(16)), (block, 4, 1.5 * verify_cost(5)), (None, 0, 1.0)):
        choice = p.choose([block, copier], [0, 0], 15)
        choice.proposer, choice.k = who, k
        p.record(choice, Step(tokens=[1], drafts=[1] * k, accepted=0, kind="correction" if k else "plain", k=k,
                              proposer=who.name if who else "off", propose_s=0.25 if who is block else 0.0,
                              verify_s=seconds, position=0), [block, copier])
    assert copier.estimates.verify(16) == verify_cost(16)
    assert block.estimates.verify(5) == 1.5 * verify_cost(5)
    assert block.estimates.verify(16) > copier.estimates.verify(16)  # its seed, at its own drift
    assert set(p.verify.measured) == {1}


def test_a_table_relative_to_another_follows_both_between_reads():
    """The policy reads a proposer's verify costs every step: the list is kept until a step is
    measured, the base's or its own, and then reflects it."""
    base = CostTable(lambda n: 1.0 + 0.1 * n)
    relative = RelativeCost(base)
    assert relative.upto(4) is relative.upto(4)
    base.add(2, 2.4)
    assert relative.upto(4)[2] == pytest.approx(2.4)
    relative.add(3, 3.0)
    assert relative.upto(4)[3] == 3.0
    assert relative.upto(4)[1] > 1.1  # the rest moved with how much dearer its own steps ran


def test_the_share_of_a_members_steps_followed_by_its_own_follows_the_reply():
    """What a pass drafted ahead is worth to one of proposer auto's members: how often its step
    is followed by another of its own, moving with the reply."""
    p = policy()
    a, b = Scripted(per_draft=0.0, name="a"), Scripted(per_draft=0.0, name="b")

    def step(who):
        choice = p.choose([a, b], [0, 0], 15)
        choice.proposer, choice.k = who, 2 if who else 0
        p.record(choice, Step(tokens=[1], drafts=[1] * choice.k, accepted=0, kind="plain", k=choice.k,
                              proposer=who.name if who else "off", propose_s=0.0, verify_s=PLAIN, position=0), [a, b])

    for _ in range(30):
        step(a)
    together = a.estimates.again
    for _ in range(15):
        step(a)
        step(b)
    assert together > 0.9 and a.estimates.again < 0.25
    step(a)
    step(None)  # a plain step after it: not its own either
    assert a.estimates.again < 0.25


class Copy(Scripted):
    """A nearly free proposer whose bucket follows the text (a copy: the n-gram proposer)."""

    bucket_follows_text = True

    def bucket(self, context):
        return 3


def test_a_copy_that_keeps_every_draft_is_taken_again_unweighed_until_it_misses():
    """Within a run of copy steps at its deepest k that keep every draft, the policy takes the last
    choice again without weighing the options (the host's time between a copy's steps is what the
    device waits for), REPEATS in a row at most; a step that misses a draft ends the run."""
    from engine.speculation.adaptive import REPEATS

    p = policy()
    copy = Copy(per_draft=0.0, name="copy")
    weighed = []
    weigh = p.weigh
    p.weigh = lambda *a, **kw: weighed.append(1) or weigh(*a, **kw)
    choices = run(p, [copy], 40, lambda who, k: k)  # every draft kept
    deep = [c for c in choices if c.k == 15]
    assert deep and sum(c.repeats > 0 for c in choices) > 20
    assert max(c.repeats for c in choices) == REPEATS, "weighed again after REPEATS in a row"
    assert len(weighed) < 40 - 20
    assert all(c.proposer is copy and c.k == 15 for c in choices if c.repeats)
    run(p, [copy], 1, lambda who, k: k - 1)  # a miss
    assert p.streak is None
    assert run(p, [copy], 1, lambda who, k: k)[0].repeats == 0
