"""A proposer that sits steps out (k "auto" chose plain steps) costs what plain decoding costs.

The plain steps the policy asks for run as chained target runs, one host read a run, drafter
attached or not; nothing runs for the proposer until it drafts again. A DFlash drafter then takes
in the target states it missed with its next pass (not op by op after every plain step), and
says how far behind it is, so the policy prices that catch-up and learns it as catching up, not
as the cost of drafting. One that sits out long lets the target stop keeping its states (they
cost every step); those it then missed are computed again from the cache before it drafts, and
draft what kept ones would have. The output stays plain decoding's, greedy and sampled.

These pin passes made for their step (SPECCHAT_DRAFT_AHEAD=0): a pass drafted ahead takes a
drafting step's states in behind its verify step, outside the next proposal, and is priced apart
(tests/test_draft_ahead.py).
"""

import pytest
import torch

from engine import (
    AUTO,
    DFlashProposer,
    DraftProposer,
    Generation,
    SamplingParams,
    generate,
    load_drafter,
    write_random_drafter,
)
from engine.limits import MAX_STEP
from engine.speculation import context_states as recompute
from engine.speculation.adaptive import catch_up_key
from engine.speculation.proposers.dflash import proposer as dflash
from tests.conftest import tiny_model
from tests.dflash_target import DRAFT_LAYERS, PROMPT, make_target
from tests.scripted_policy import RUN, Scripted

SAMPLINGS = [SamplingParams(max_tokens=70), SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=70)]


@pytest.fixture(autouse=True)
def passes_made_for_their_step(monkeypatch):
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "0")


@pytest.fixture(scope="module")
def target():
    return make_target(seed=3)


@pytest.fixture(scope="module")
def drafter(target, tmp_path_factory):
    path = write_random_drafter(tmp_path_factory.mktemp("drafter"), target, num_layers=DRAFT_LAYERS, std=0.3)
    return load_drafter(str(path), target)


def reply(target, proposer, sampling):
    policy = Scripted(target)
    gen = Generation(target, PROMPT, sampling, speculative=proposer, policy=policy)
    gen.plain_run = RUN
    steps = list(gen)[1:]
    return gen, steps, policy


def counted(monkeypatch, obj, name, calls, what=lambda *a: 1):
    """Record what(args) of each call of obj.name."""
    original = getattr(obj, name)
    monkeypatch.setattr(obj, name, lambda *a, **k: calls.append(what(*a)) or original(*a, **k))


def within(monkeypatch, proposer, inside, outside):
    """Calls recorded in `outside` while `proposer` proposes go to `inside` instead."""
    propose = proposer.propose

    def proposing(*args):
        before = len(outside)
        out = propose(*args)
        inside.extend(outside[before:])
        del outside[before:]
        return out

    monkeypatch.setattr(proposer, "propose", proposing)


def test_a_chained_run_keeps_each_tokens_states_as_one_token_steps_do(target):
    greedy = SamplingParams()
    target.state_layers = (1, 4)
    chained, stepped = target.new_sequence(), target.new_sequence()
    try:
        target.step(chained, PROMPT, greedy)
        target.step(stepped, PROMPT, greedy)
        run = target.chain(chained, torch.tensor([3]), 6, greedy)
        token = 3
        for i in range(6):
            out = target.step(stepped, [token], greedy)
            torch.testing.assert_close(run.states[i : i + 1], out.states)
            token = int(out.tokens[0])
            assert token == int(run.tokens[i])
    finally:
        target.state_layers = ()
        chained.release()
        stepped.release()


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_plain_steps_with_a_drafter_attached_run_chained_and_keep_plain_decodings_tokens(
        target, drafter, sampling, monkeypatch):
    expected = generate(target, PROMPT, sampling).tokens
    runs = []
    counted(monkeypatch, target, "chain", runs, lambda seq, first, n, *a: n)
    gen, steps, _ = reply(target, DFlashProposer(drafter, k=AUTO), sampling)
    assert gen.tokens == expected
    plain = [s for s in steps if not s.drafts]
    assert sum(runs) == len(plain) > 4 * RUN  # every plain step in a chained run
    assert max(runs) == RUN


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_drafter_takes_in_the_states_it_missed_with_its_next_pass_only(target, drafter, sampling, monkeypatch):
    proposer = DFlashProposer(drafter, k=AUTO)
    inside, outside = [], []
    counted(monkeypatch, drafter, "extend", outside, lambda states: states.shape[0])
    within(monkeypatch, proposer, inside, outside)
    gen, _, _ = reply(target, proposer, sampling)
    assert gen.tokens == generate(target, PROMPT, sampling).tokens
    assert inside and not outside  # no op-by-op extension while it sat out


def test_the_catch_up_after_sitting_out_is_reported_priced_and_learnt_as_catching_up(target, drafter):
    proposer = DFlashProposer(drafter, k=AUTO)
    _, _, policy = reply(target, proposer, SAMPLINGS[0])
    returns = [b for _, b in policy.drafted if b]
    in_run = [k for k, b in policy.drafted if not b]
    assert returns and in_run
    # behind after four runs: their tokens, and those of the drafting step before them
    assert all(4 * RUN < b <= 4 * RUN + MAX_STEP for b in returns)
    est = proposer.estimates
    assert all(est.catch_up.seeded(catch_up_key(b)) > 0 for b in returns)  # priced before it is timed
    assert set(est.catch_up.measured) == {catch_up_key(b) for b in returns}
    assert set(est.drafting.measured) == {1}  # the proposals in runs: one pass, whatever k (OnePassCost)


def test_states_held_past_hold_are_taken_in_at_once(target, drafter, monkeypatch):
    monkeypatch.setattr(dflash, "HOLD", 20)
    proposer = DFlashProposer(drafter, k=AUTO)
    inside, outside = [], []
    counted(monkeypatch, drafter, "extend", outside, lambda states: states.shape[0])
    within(monkeypatch, proposer, inside, outside)
    gen, _, _ = reply(target, proposer, SAMPLINGS[0])
    assert gen.tokens == generate(target, PROMPT, SAMPLINGS[0]).tokens
    # while it sat out four runs: once it held 20 states, and before another run's were added
    assert outside and all(20 <= n < 20 + RUN for n in outside)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_draft_model_runs_nothing_while_it_sits_out(sampling, monkeypatch):
    model, draft = tiny_model("qwen2", seed=1), tiny_model("qwen2", seed=9)
    expected = generate(model, PROMPT, sampling).tokens
    proposer = DraftProposer(draft, k=AUTO)
    inside, outside, runs = [], [], []
    counted(monkeypatch, draft, "step", outside)
    counted(monkeypatch, draft, "chain", outside)
    counted(monkeypatch, model, "chain", runs, lambda seq, first, n, *a: n)
    within(monkeypatch, proposer, inside, outside)
    gen, steps, _ = reply(model, proposer, sampling)
    assert gen.tokens == expected
    assert inside and not outside
    assert sum(runs) == sum(1 for s in steps if not s.drafts)


class LongSitOut(Scripted):
    """Drafts, sits out six runs (past TAPS_OFF_AFTER tokens), drafts again, and so on."""

    script = [3, 0, 0, 0, 0, 0, 0, 3, 3]


def long_reply(target, proposer, sampling, monkeypatch, kept: list, taps_off_after: int = 2 * MAX_STEP):
    """A reply of LongSitOut's choices; `kept` gets, per target step or run, its kind ("verify"
    for a step of drafts, "prefill", or "run") and whether the target kept states for it. The
    target stops keeping states after `taps_off_after` tokens sat out (within LongSitOut's six runs)."""
    monkeypatch.setattr(dflash, "TAPS_OFF_AFTER", taps_off_after)
    def step_kind(seq, ids, *a, **k):
        kind = "prefill" if len(ids) == len(PROMPT) else "verify" if len(ids) > 1 else "step"
        return kind, bool(target.state_layers), len(ids)

    counted(monkeypatch, target, "step", kept, step_kind)
    counted(monkeypatch, target, "chain", kept, lambda seq, first, n, *a: ("run", bool(target.state_layers), n))
    policy = LongSitOut(target)
    gen = Generation(target, PROMPT, sampling, speculative=proposer, policy=policy)
    gen.plain_run = RUN
    return gen, list(gen)[1:], policy


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_drafter_sitting_out_long_lets_the_target_stop_keeping_its_states(target, drafter, sampling, monkeypatch):
    expected, kept = generate(target, PROMPT, sampling).tokens, []
    gen, steps, _ = long_reply(target, DFlashProposer(drafter, k=AUTO), sampling, monkeypatch, kept)
    assert gen.tokens == expected
    runs = [keeps for kind, keeps, _ in kept if kind == "run"]
    assert runs[0] and not all(runs)  # the first runs sat out kept states, the later ones none
    assert all(keeps for kind, keeps, _ in kept if kind in ("prefill", "verify"))  # drafting keeps them again


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_the_states_it_missed_are_computed_again_and_draft_what_kept_ones_would(target, drafter, sampling,
                                                                                monkeypatch):
    """The same choices, with the target keeping the states all along: the same drafts."""
    proposer = DFlashProposer(drafter, k=AUTO)
    filled, kept = [], []
    counted(monkeypatch, proposer, "fill", filled, lambda states: states.shape[0])
    gen, steps, policy = long_reply(target, proposer, sampling, monkeypatch, kept)
    first_reply = list(kept)  # the next reply's calls are counted in `kept` as well
    kept_gen, kept_steps, _ = long_reply(target, DFlashProposer(drafter, k=AUTO), sampling, monkeypatch, [],
                                         taps_off_after=10**9)
    assert filled and all(n > 0 for n in filled)
    assert [s.drafts for s in steps] == [s.drafts for s in kept_steps]
    assert gen.tokens == kept_gen.tokens
    # every token a run kept no states for was computed again, once, before the drafter's next
    # proposal (those after its last one never were: the reply ended)
    last = max(i for i, (kind, _, _) in enumerate(first_reply) if kind == "verify")
    assert sum(filled) == sum(n for kind, keeps, n in first_reply[:last] if kind == "run" and not keeps) > 0


def test_a_comeback_that_computes_states_again_is_priced_and_learnt_as_a_pass_of_the_target(
        target, drafter, monkeypatch):
    """Not as states kept for it: that catch-up costs a fifth of a step, this one a pass of the
    target a chunk (op by op, as on the CPU), however few its tokens."""
    proposer = DFlashProposer(drafter, k=AUTO)
    _, _, policy = long_reply(target, proposer, SAMPLINGS[0], monkeypatch, [])
    assert policy.recomputed and all(b > 0 for b in policy.recomputed)
    est, step = proposer.estimates, 1e-3  # the scripted policy's plain step
    for b in policy.recomputed:
        assert est.catch_up.seeded(catch_up_key(b, recompute=True)) >= recompute.EAGER_STEPS * step
        assert est.catch_up.seeded(catch_up_key(b)) < step
    assert {catch_up_key(b, recompute=True) for b in policy.recomputed} <= set(est.catch_up.measured)


def test_missing_counts_the_tokens_run_without_states(target, drafter, monkeypatch):
    monkeypatch.setattr(dflash, "TAPS_OFF_AFTER", 2 * MAX_STEP)
    proposer = DFlashProposer(drafter, k=AUTO)
    proposer.attach(target, SamplingParams())
    try:
        context = list(PROMPT) + [5]
        width = len(drafter.state_layers) * target.config.hidden_size
        states = torch.zeros(len(PROMPT), width)
        proposer.reset(context, states)
        assert proposer.missing(context) == 0
        longer = context + [7] * (dflash.TAPS_OFF_AFTER + 1)
        proposer.idle(longer)
        assert target.state_layers == ()  # sat out long enough: the target keeps none now
        assert proposer.missing(longer) == dflash.TAPS_OFF_AFTER + 1
        # what it held went in as the target stopped: behind is the tokens it missed, no prompt
        assert proposer.drafter.context_length == len(PROMPT)
        assert proposer.behind(longer) == dflash.TAPS_OFF_AFTER + 1
        proposer.fill(torch.zeros(dflash.TAPS_OFF_AFTER + 1, width))
        assert proposer.missing(longer) == 0 and target.state_layers == drafter.state_layers
    finally:
        proposer.detach(target)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_states_are_computed_again_with_the_cache_all_but_full(target, drafter, sampling, monkeypatch):
    """A drafter coming back at the end of the context: the states it missed fit the pages left."""
    prompt = (PROMPT * 20)[: target.max_context - 60]
    sampling = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed,
                              max_tokens=60)
    expected = generate(target, prompt, sampling)
    filled = []
    monkeypatch.setattr(dflash, "TAPS_OFF_AFTER", 2 * MAX_STEP)
    proposer = DFlashProposer(drafter, k=AUTO)
    counted(monkeypatch, proposer, "fill", filled, lambda states: states.shape[0])
    policy = LongSitOut(target)
    gen = Generation(target, prompt, sampling, speculative=proposer, policy=policy)
    gen.plain_run = RUN
    steps = list(gen)
    assert gen.tokens == expected.tokens and steps[-1].finished == "length"
    assert filled and target.pool.num_free == target.pool.num_pages  # every page back
