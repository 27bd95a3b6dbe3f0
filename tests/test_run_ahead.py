"""With no proposer, a GPU's generation queues its next run of plain steps before it reads the
one before (Generation.run_ahead, engine/speculation/runs.py). The host only reads later: the
tokens, the stops, the budget and everything a reply can meet midway stay those of plain decoding."""

import pytest

from engine import (
    AUTO,
    DFlashProposer,
    Generation,
    NgramProposer,
    SamplingParams,
    generate,
    load_drafter,
    random_model,
    stream,
    write_random_drafter,
)
from engine.speculation import runs
from tests.conftest import tiny_config, tiny_model
from tests.dflash_target import PROMPT as DFLASH_PROMPT
from tests.dflash_target import make_target
from tests.sits_out import SitsOut

PROMPT = [7, 1, 33, 20, 41, 2]
GREEDY = SamplingParams(max_tokens=60)
SAMPLED = SamplingParams(temperature=0.7, top_k=8, seed=2, max_tokens=60)


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen2", seed=1)


def ahead(model, sampling, run=8, stop_ids=()):
    gen = stream(model, PROMPT, sampling, stop_ids)
    gen.plain_run, gen.run_ahead = run, True
    return gen


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED, SamplingParams(max_tokens=37)])
@pytest.mark.parametrize("run", [3, 8])
def test_runs_queued_ahead_give_the_tokens_of_plain_decoding(target, sampling, run):
    gen = ahead(target, sampling, run)
    steps = list(gen)
    assert gen.tokens == generate(target, PROMPT, sampling).tokens
    assert len(gen.tokens) == sampling.max_tokens and steps[-1].finished == "length"
    assert target.pool.num_free == target.pool.num_pages  # the unread run's pages go back too


def test_the_next_run_is_queued_before_the_host_reads_one(target, monkeypatch):
    order, chain, read = [], target.chain, runs.QueuedRun.tokens
    monkeypatch.setattr(target, "chain", lambda seq, first, n, *a: order.append(f"queue {n}") or chain(seq, first, n, *a))
    monkeypatch.setattr(runs.QueuedRun, "tokens", lambda self: order.append(f"read {self.n}") or read(self))
    list(ahead(target, SamplingParams(max_tokens=21)))
    # 20 tokens after the prefill's: runs of 8, 8 and 4, each queued while the one before is unread
    assert order == ["queue 8", "queue 8", "read 8", "queue 4", "read 8", "read 4"]


def test_a_stop_inside_a_run_ends_the_reply_there(target):
    free = generate(target, PROMPT, GREEDY).tokens
    stop = free[11]  # inside the second run, while the third is already queued
    gen = ahead(target, GREEDY, stop_ids=[stop])
    steps = list(gen)
    assert gen.tokens == free[: free.index(stop) + 1] and steps[-1].finished == "stop"
    assert target.pool.num_free == target.pool.num_pages


def test_a_full_context_ends_the_reply_as_plain_decoding_does():
    model = random_model(tiny_config("qwen2"), seed=1, std=0.3, max_context=32)
    prompt = (PROMPT * 2)[:11]  # room for 21 more tokens: a run of 8 queued ahead gets 5
    plain = stream(model, prompt, GREEDY)
    plain.plain_run = 1
    expected = list(plain)
    gen = stream(model, prompt, GREEDY)
    gen.plain_run, gen.run_ahead = 8, True
    steps = list(gen)
    assert gen.tokens == [t for s in expected for t in s.tokens]
    assert steps[-1].finished == expected[-1].finished == "length"


def test_a_proposer_switched_on_midway_starts_after_the_queued_run(target):
    gen = ahead(target, GREEDY)
    proposers = []
    for step in gen:
        proposers.append(step.proposer)
        if len(gen.tokens) == 9:  # a run read, the next already queued
            gen.speculative = NgramProposer(k=4)
    assert gen.tokens == generate(target, PROMPT, GREEDY).tokens
    # the prefill and two runs of 8 plain steps, then the n-gram proposer's steps
    assert proposers[:17] == ["off"] * 17 and set(proposers[17:]) == {"n-gram"}


def test_the_inspector_switched_on_midway_reads_steps_after_the_queued_run(target):
    gen = ahead(target, GREEDY)
    inspected = []
    for step in gen:
        inspected.append(step.inspection is not None)
        if len(gen.tokens) == 9:
            gen.inspect = True
    assert gen.tokens == generate(target, PROMPT, GREEDY).tokens
    # the prefill and two runs of 8 were queued before the switch; every step after is inspected
    assert inspected == [False] * 17 + [True] * (len(inspected) - 17)


def test_cancel_keeps_what_was_shown_and_drops_the_queued_run(target):
    gen = ahead(target, GREEDY)
    steps = []
    for step in gen:
        steps.append(step)
        if len(gen.tokens) == 9:
            gen.cancel()
    assert steps[-1].finished == "cancelled" and len(gen.tokens) == 9
    assert gen.tokens == generate(target, PROMPT, GREEDY).tokens[:9]
    assert target.pool.num_free == target.pool.num_pages


def sitting_out(proposer, sampling, run_ahead):
    target = proposer.drafter.target
    gen = Generation(target, DFLASH_PROMPT, sampling, speculative=proposer, policy=SitsOut(target))
    gen.plain_run, gen.run_ahead = 6, run_ahead
    return gen, list(gen)


@pytest.fixture(scope="module")
def drafter(tmp_path_factory):
    target = make_target(seed=3)
    return load_drafter(str(write_random_drafter(tmp_path_factory.mktemp("drafter"), target, num_layers=2,
                                                 std=0.3)), target)


@pytest.mark.parametrize("sampling", [SamplingParams(max_tokens=70),
                                      SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=70)])
def test_plain_steps_the_policy_asked_for_at_once_run_ahead_and_change_nothing(drafter, sampling, monkeypatch):
    target = drafter.target
    apart, apart_steps = sitting_out(DFlashProposer(drafter, k=AUTO), sampling, run_ahead=False)
    order, chain, read = [], target.chain, runs.QueuedRun.tokens
    monkeypatch.setattr(target, "chain", lambda seq, first, n, *a: order.append(f"queue {n}") or chain(seq, first, n, *a))
    monkeypatch.setattr(runs.QueuedRun, "tokens", lambda self: order.append(f"read {self.n}") or read(self))
    gen, steps = sitting_out(DFlashProposer(drafter, k=AUTO), sampling, run_ahead=True)
    assert gen.tokens == apart.tokens == generate(target, DFLASH_PROMPT, sampling).tokens
    assert [s.drafts for s in steps] == [s.drafts for s in apart_steps]  # the drafter read the same states
    # 16 plain steps asked for, in runs of 6: each queued before the one before it is read
    assert order[:6] == ["queue 6", "queue 6", "read 6", "queue 4", "read 6", "read 4"]
    plain = [s for s in steps[1:] if not s.drafts]
    assert [s.gain for s in plain[:16]] == [0.5] * 16  # each step of the runs is the choice's


def test_a_change_midway_through_the_policys_plain_steps_takes_effect_at_the_next_step(drafter):
    """The policy asked for 16 plain steps; k set to 3 after the first of them: the next step
    drafts 3 (what is not yet queued gives way)."""
    target = drafter.target
    proposer = DFlashProposer(drafter, k=AUTO)
    gen = Generation(target, DFLASH_PROMPT, SamplingParams(max_tokens=40), speculative=proposer,
                     policy=SitsOut(target))
    gen.plain_run, gen.run_ahead = 1, False  # the CPU's: one step a run, read at once
    seen, changed_at = [], None
    for step in gen:
        seen.append(step)
        if changed_at is None and len(seen) > 2 and not step.drafts:  # inside the policy's plain steps
            proposer.k, changed_at = 3, len(seen)
    assert changed_at is not None
    assert len(seen[changed_at].drafts) == 3 and all(s.drafts for s in seen[changed_at:-1])  # no plain step left
    assert gen.tokens == generate(target, DFLASH_PROMPT, SamplingParams(max_tokens=40)).tokens
