"""A drafter that carries its own measured acceptance (a DFlash drafter trained here: its training
history) starts k auto from it and leans on it, so a few misses by chance do not send a drafter
known to be good out for good; one without it starts from the neutral prior as before."""

import json
import random

import pytest

from engine import AUTO
from engine.speculation.acceptance import Acceptance, expected_curve
from engine.speculation.proposers.dflash.files import measured_acceptance
from engine.speculation.replay import FLASH, Machine, Replayed, agreeing, replay, verify_cost

MS = 1e-3


def write_history(folder, curves):
    (folder / "training").mkdir(parents=True)
    rows = [[i + 1, 8 * (i + 1), 1.0 * i, 5.0, 1 + sum(c), c] for i, c in enumerate(curves)]
    (folder / "training" / "history.json").write_text(json.dumps({"settings": {}, "total": len(rows), "history": rows}))


def test_the_training_history_gives_each_drafts_chance_given_the_ones_before(tmp_path):
    # share of blocks with drafts 1..j all right: 0.6, 0.3, 0.15, then none
    write_history(tmp_path, [[0.6, 0.3, 0.15, 0.0]] * 10)
    rates = measured_acceptance(tmp_path, block_size=5)
    assert [round(r, 3) for r in rates] == [0.6, 0.5, 0.5, 0.02]  # 0.3 / 0.6, 0.15 / 0.3, kept above zero


def test_the_last_steps_of_the_run_count_not_its_start(tmp_path):
    write_history(tmp_path, [[0.1, 0.0]] * 100 + [[0.8, 0.4]] * 50)
    assert [round(r, 3) for r in measured_acceptance(tmp_path, block_size=3)] == [0.8, 0.5]


def test_a_drafter_without_a_training_history_knows_nothing_of_itself(tmp_path):
    assert measured_acceptance(tmp_path, block_size=16) is None
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "history.json").write_text("{not json")
    assert measured_acceptance(tmp_path, block_size=16) is None


def test_estimates_start_from_what_is_known_and_follow_the_evidence():
    known = [0.6, 0.5, 0.4] + [0.3] * 12
    acceptance = Acceptance(known=known)
    assert acceptance.rates() == pytest.approx(known)
    assert acceptance.tokens() == pytest.approx(expected_curve(known))
    for _ in range(20):  # the text turns: first drafts miss
        acceptance.record(drafted=4, accepted=0)
    rates = acceptance.rates()
    assert rates[0] < 0.2
    # deeper positions, never reached now, keep the known shape at the first draft's new level
    assert abs(rates[1] / rates[0] - known[1] / known[0]) < 0.05


def test_without_a_measurement_the_start_is_the_neutral_prior():
    assert Acceptance().rates() == Acceptance(known=None).rates()
    assert Acceptance().rates()[0] == 0.5


# The H200's step costs with a DFlash drafter (eighth run: plain 1.27 ms, a pass 0.57 with its
# states, the verify steps by length), no host time: the policy's choices alone
MACHINE = Machine(verify=verify_cost({1: 1.27, 3: 1.34, 5: 1.42, 9: 1.50, 16: 1.61}), decode=1.25 * MS,
                  lookup=0.03 * MS, first=0.0, chained=0.0, eager=0.0, host=0.0,
                  block_pass=0.57 * MS, block_catch_up=0.15 * MS)


def speed(make, replies=24, length=256) -> float:
    tokens = seconds = 0.0
    for seed in range(replies):
        shape = agreeing(length + 32, 0.42, 0.74, random.Random(seed))  # a first draft kept 56 % of the time
        run = replay(MACHINE, make(shape), length, random.Random(seed))
        tokens, seconds = tokens + run.metrics.tokens, seconds + run.seconds
    return tokens / seconds


def test_a_drafter_known_to_be_good_keeps_k_auto_near_its_best_fixed_k():
    # what a two-layer drafter's training measured over its last 50 steps (bench/RESULTS.md,
    # eighth run: bench/results/session-8/history-l2-long.json.gz), more hopeful than this text
    known = [0.67, 0.56, 0.46, 0.38, 0.33, 0.34, 0.35, 0.37, 0.33, 0.13, 0.02, 0.02, 0.02, 0.02, 0.02]
    best = max(speed(lambda s, k=k: Replayed("dflash", s, k, FLASH)) for k in (2, 3, 4, 8))
    told = speed(lambda s: Replayed("dflash", s, AUTO, FLASH, known=known))
    untold = speed(lambda s: Replayed("dflash", s, AUTO, FLASH))
    assert told >= 0.97 * best
    assert told > untold  # the measurement is what keeps it in
