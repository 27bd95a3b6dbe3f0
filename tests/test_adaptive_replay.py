"""The adaptive policy replayed on a GPU's step costs (engine/speculation/replay.py): what it does
with drafts that never pay, with a copy that pays far more than a draft model, and with text
where only the draft model pays. The costs are the H200's (Qwen2.5-Coder-1.5B, its 0.5B draft
model, bf16), the texts shaped like the bench's explanation and edit."""

import random
from dataclasses import replace
from itertools import pairwise

import pytest

from engine import AUTO
from engine.speculation.replay import DRAFT, Machine, Replayed, Shape, agreeing, copying, replay, verify_cost

MS = 1e-3
LENGTH = 256
REPLIES = 8


# no policy host time: the figures are the policy's choices alone
H200 = Machine(verify=verify_cost({1: 1.47, 2: 1.62, 8: 1.68, 16: 1.84}), decode=1.47 * MS, lookup=0.05 * MS,
               first=1.1 * MS, chained=0.78 * MS, eager=18 * MS, host=0.0)
# and with the host stalling in 2% of the steps for three plain steps' time, as GPU runs do
STALLING = replace(H200, stalls=0.02, stall=3 * 1.47 * MS)
NO_MATCH = {0: (1.0, 0, 0)}
COPY = {0: (0.03, 0, 0), 3: (0.97, 0.95, 0.98)}


def speed(make, shapes, machine: Machine = H200) -> float:
    """Tokens per second over the replies, `make(draft shape, n-gram shape)` the proposer of each."""
    tokens = seconds = 0.0
    for seed, (draft, ngram) in enumerate(shapes):
        run = replay(machine, make(draft, ngram), LENGTH, random.Random(seed))
        tokens, seconds = tokens + run.metrics.tokens, seconds + run.seconds
    return tokens / seconds


def texts(agree: float, buckets: dict) -> list[tuple[Shape, Shape]]:
    out = []
    for seed in range(REPLIES):
        rng = random.Random(seed)
        out.append((agreeing(LENGTH + 32, agree, agree, rng), copying(LENGTH + 32, buckets, rng)))
    return out


@pytest.mark.parametrize("machine", [H200, STALLING], ids=["steady", "stalling"])
def test_a_draft_model_that_never_pays_leaves_k_auto_within_2_percent_of_plain_decoding(machine):
    shapes = texts(0.76, NO_MATCH)  # the explanation: 1.76 tokens a step at k = 1, 2.3 at k = 2
    plain = speed(lambda d, g: None, shapes, machine)
    fixed = {k: speed(lambda d, g, k=k: Replayed("draft", d, k, DRAFT), shapes, machine) for k in (1, 2, 4, 7, 15)}
    assert max(fixed.values()) < plain  # the premise: no k pays
    auto = speed(lambda d, g: Replayed("draft", d, AUTO, DRAFT), shapes, machine)
    assert auto >= 0.98 * plain


def test_where_the_copy_pays_most_the_draft_model_stays_out_though_it_beats_plain_decoding():
    shapes = texts(1.0, COPY)  # the draft model always right: 1.7x plain decoding at k = 15
    assert speed(lambda d, g: Replayed("draft", d, 15, DRAFT), shapes) > 1.6 * speed(lambda d, g: None, shapes)
    ngram = speed(lambda d, g: Replayed("n-gram", g), shapes)
    both = speed(lambda d, g: [Replayed("n-gram", g), Replayed("draft", d, model=DRAFT)], shapes)
    assert both >= 0.97 * ngram
    draft, ngram_shape = shapes[0]
    run = replay(H200, [Replayed("n-gram", ngram_shape), Replayed("draft", draft, model=DRAFT)], LENGTH,
                 random.Random(0))
    assert not [c for c in run.choices[3:] if c.proposer is not None and c.proposer.name == "draft" and not c.probe]


def test_where_nothing_copies_the_same_draft_model_drafts_long():
    shapes = texts(1.0, NO_MATCH)
    best = speed(lambda d, g: Replayed("draft", d, 15, DRAFT), shapes)
    assert speed(lambda d, g: [Replayed("n-gram", g), Replayed("draft", d, model=DRAFT)], shapes) >= 0.95 * best


def test_k_auto_on_a_copy_comes_near_the_longest_k():
    shapes = texts(0.0, COPY)
    longest = speed(lambda d, g: Replayed("n-gram", g, 15), shapes)
    assert speed(lambda d, g: Replayed("n-gram", g), shapes) >= 0.95 * longest


# the edit's copy: long matches whose first draft misses now and then (the n-gram proposer's
# match length 3), with short matches between them
BROKEN_COPY = {0: (0.01, 0, 0), 1: (0.05, 0.5, 0.8), 2: (0.09, 0.7, 0.9), 3: (0.85, 0.84, 0.985)}


@pytest.mark.parametrize("machine", [H200, STALLING], ids=["steady", "stalling"])
def test_k_auto_on_a_copy_that_breaks_now_and_then_keeps_drafting_deep(machine):
    # a miss at the first draft thins the evidence of the deep positions; nearly free drafts are
    # weighed by what they might keep there, so auto does not settle on short drafts
    shapes = texts(0.0, BROKEN_COPY)
    longest = speed(lambda d, g: Replayed("n-gram", g, 15), shapes, machine)
    assert speed(lambda d, g: Replayed("n-gram", g), shapes, machine) >= 0.97 * longest


def test_a_dflash_drafter_that_sat_out_pays_its_catch_up_once():
    """A block drafter takes a step's worth of missed states in within its pass; past that it
    catches up first, once, and is then in step with the reply again."""
    from engine.speculation.replay import FLASH

    machine = replace(H200, block_pass=0.5 * MS, block_catch_up=0.2 * MS)
    drafter = Replayed("dflash", Shape([1] * 64, [0] * 64), 3, model=FLASH)
    context = [0] * (1600 + 10)
    drafter.seen = len(context) - 1 - 16  # a step's worth behind: no catch-up
    assert drafter.behind(context) == 0
    assert drafter.propose_cost(machine, context, 3, 0) == pytest.approx(0.5 * MS)
    context += [0] * 40  # sat out 40 tokens
    assert drafter.behind(context) == 40
    assert drafter.propose_cost(machine, context, 15, 0) == pytest.approx(0.7 * MS)  # whatever k
    assert drafter.behind(context + [0]) == 0


def test_a_dflash_drafter_drafting_ahead_pays_the_hidden_pass_in_its_next_verify_step():
    """On a machine that drafts the next pass behind each verify step, a DFlash step after one of
    its own pays only what the host waits for of its pass, and its verify step runs after the
    pass's device time; the reply's first proposal, with nothing drafted before it, pays it all."""
    from engine.speculation.replay import FLASH

    machine = replace(H200, block_pass=0.25 * MS, block_ahead=0.02 * MS, block_device=0.17 * MS, noise=0.0)
    run = replay(machine, Replayed("dflash", Shape([1] * 64, [2] * 64), 4, model=FLASH), 40, random.Random(0))
    assert len(run.choices) == run.metrics.steps > 10
    # a pass is drafted behind each verify step that leaves the reply room for another
    produced, passes, propose = 0, [], 0.25 * MS
    for before, after in pairwise(run.choices):
        if 40 - produced > before.k + 2:
            passes.append(after)
            propose += 0.02 * MS if after.k else 0.0  # a step with no room for drafts: for nothing
        produced += min(before.k, 2) + 1
    assert len(passes) >= len(run.choices) - 3
    verify = sum(machine.verify(c.k + 1) for c in run.choices) + len(passes) * 0.17 * MS
    assert run.seconds == pytest.approx(propose + verify)
    assert run.metrics.propose_s == pytest.approx(propose)


def test_the_policy_chooses_while_a_pass_drafted_ahead_runs():
    """k "auto" costs its host time on every step but those whose pass was drafted ahead: the
    device runs that pass while the policy chooses."""
    from engine.speculation.replay import FLASH

    machine = replace(H200, block_pass=0.25 * MS, block_ahead=0.02 * MS, block_device=0.17 * MS,
                      host=0.04 * MS, noise=0.0)
    run = replay(machine, Replayed("dflash", Shape([1] * 300, [3] * 300), AUTO, model=FLASH), 200, random.Random(0))
    ahead = sum(1 for c in run.choices if c.ahead)
    assert 0 < ahead < len(run.choices)
    waited = run.seconds - run.metrics.propose_s - run.metrics.verify_s
    assert waited == pytest.approx((len(run.choices) - ahead) * 0.04 * MS)


def witnessed_texts(replies: int = 4, length: int = 300) -> list[tuple[Shape, Shape]]:
    """Replies that turn between a copy the drafter agrees with (the copy runs on, 12 drafts a
    position; the drafter's first draft is the copy's) and prose where the copy still has a match
    but its first draft is wrong and the drafter's right half the time (2 drafts when it is)."""
    out = []
    for seed in range(replies):
        rng = random.Random(seed)
        copy_runs, copy_firsts, flash_runs, flash_firsts = [], [], [], []
        for stretch in range(length // 20):
            copying_here = stretch % 2 == 0
            for _ in range(20):
                right = rng.random() < 0.5
                copy_runs.append(12 if copying_here else 0)
                copy_firsts.append(1 if copying_here else 7)
                flash_runs.append(2 if copying_here or right else 0)
                flash_firsts.append(1 if copying_here or right else 9)
        out.append((Shape([1] * length, flash_runs, flash_firsts), Shape([3] * length, copy_runs, copy_firsts)))
    return out


def test_a_drafter_witnessing_the_copy_tells_proposer_auto_where_the_copy_goes_on(monkeypatch):
    """Where the copy's match says the same whether it runs on or not, the drafter's pass, read
    before the step, tells them apart: proposer auto with the witness drafts with the copy where
    they agree and with the drafter where not, faster than with passes drafted ahead only behind
    the drafter's own steps (SPECCHAT_WITNESS=0)."""
    from engine.speculation.replay import FLASH

    machine = replace(H200, block_pass=0.25 * MS, block_ahead=0.02 * MS, block_device=0.17 * MS, noise=0.0)

    def seconds(witnessing: str) -> tuple[float, list]:
        monkeypatch.setenv("SPECCHAT_WITNESS", witnessing)
        total, choices = 0.0, []
        for seed, (flash, copy) in enumerate(witnessed_texts()):
            run = replay(machine, [Replayed("n-gram", copy), Replayed("dflash", flash, model=FLASH)], 280,
                         random.Random(seed))
            total, choices = total + run.seconds, choices + run.choices
        return total, choices

    with_witness, choices = seconds("1")
    without, _ = seconds("0")
    copy_steps = [c.reading for c in choices if c.proposer and c.proposer.name == "n-gram"]
    agreed = sum(r == "the drafter's first draft is the copy's" for r in copy_steps)
    disagreed = sum(r == "the drafter's first draft is not the copy's" for r in copy_steps)
    assert agreed > 5 * disagreed, "the copy drafts where the drafter agrees with it"
    assert sum(1 for c in choices if c.proposer and c.proposer.name == "dflash") > 100, "the drafter where not"
    assert with_witness < 0.8 * without


def test_the_policys_time_after_reading_a_pass_is_not_hidden_behind_it(monkeypatch):
    """Where the policy reads a pass drafted ahead before choosing, what it does after the read
    (Machine.after_read, a share of its host time) runs with the device idle: the same replies
    take that much longer, and without a read nothing changes."""
    from engine.speculation.replay import FLASH

    machine = replace(H200, block_pass=0.25 * MS, block_ahead=0.02 * MS, block_device=0.17 * MS, noise=0.0,
                      host=0.1 * MS, host_member=0.05 * MS)

    def seconds(after_read: float, witnessing: str) -> float:
        monkeypatch.setenv("SPECCHAT_WITNESS", witnessing)
        flash, copy = witnessed_texts(replies=1)[0]
        members = [Replayed("n-gram", copy), Replayed("dflash", flash, model=FLASH)]
        return replay(replace(machine, after_read=after_read), members, 280, random.Random(0)).seconds

    assert seconds(1.0, "1") > seconds(0.0, "1")
    alone = replace(machine, after_read=1.0)
    flash, _ = witnessed_texts(replies=1)[0]
    assert replay(alone, Replayed("dflash", flash, model=FLASH), 280, random.Random(0)).seconds == replay(
        machine, Replayed("dflash", flash, model=FLASH), 280, random.Random(0)).seconds, "a drafter alone is not read"
