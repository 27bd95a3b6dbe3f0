"""The panel explains what it cannot show: a speedup with no plain step timed, a step without drafts."""

from __future__ import annotations

from engine import Step
from specchat.widgets.panel import Stats, figures, last_step


def draft_step(accepted: int, k: int = 3) -> Step:
    drafts = [1] * accepted + [2] * (k - accepted)
    return Step([1] * accepted + [3], drafts, accepted, "correction", k, "draft", 0.001, 0.01, 10)


def test_with_a_drafter_on_every_step_the_panel_says_how_to_get_a_speedup():
    stats = Stats()
    for _ in range(5):
        stats.add(draft_step(2))
    shown = figures(stats).plain
    assert "ctrl+p to off for one reply" in shown
    stats.add(Step([4], [], 0, "plain", 0, "off", 0.0, 0.01, 20))
    shown = figures(stats).plain
    assert "ctrl+p to off" not in shown and "plain step" in shown and "x" in shown


def test_a_step_without_drafts_says_why():
    no_match = Step([5], [], 0, "plain", 4, "n-gram", 0.0, 0.01, 12)
    assert "n-gram found no match" in last_step(no_match).plain
    off = Step([5], [], 0, "plain", 0, "off", 0.0, 0.01, 12)
    assert last_step(off).plain.strip() == "last step   plain decode"


def test_a_step_auto_chose_says_what_it_chose_and_what_it_expected():
    from specchat.widgets.inspector import auto_why
    from specchat.widgets.panel import choices

    drafted = Step([1, 2, 3], [1, 2, 9], 2, "correction", 3, "n-gram", 0.0, 0.01, 10, gain=1.8)
    plain = Step([4], [], 0, "plain", 0, "off", 0.0, 0.01, 13, gain=1.0)
    probe = Step([5, 6], [5], 1, "bonus", 1, "dflash", 0.0, 0.01, 14, gain=0.9, probe=True)
    shown = [last_step(s).plain for s in (drafted, plain, probe)]
    assert "auto chose  n-gram k 3" in shown[0] and "x1.80 plain expected" in shown[0]
    assert "auto chose  plain step" in shown[1] and "drafts not worth it" in shown[1]
    assert "auto chose  dflash k 1" in shown[2] and "a probe" in shown[2]
    assert len({s.count("\n") for s in shown}) == 1  # one height: no layout as plain and drafting steps alternate
    assert "expected x1.80 the tokens a second of plain steps" in auto_why(drafted)
    assert "as a probe" in auto_why(probe) and "plain step" in auto_why(plain)
    bars, key = choices([drafted, plain, probe]).plain.split("\n")
    assert len(bars) == 3 and "n-gram" in key and "dflash" in key and "draft " not in key


def test_the_inspector_says_what_a_witness_told_the_choice():
    from specchat.widgets.inspector import auto_why

    copied = Step([1, 2, 3], [1, 2, 3], 3, "bonus", 3, "n-gram", 0.0, 0.01, 10, gain=3.1,
                  reading="the drafter's first draft is the copy's")
    plain = Step([4], [], 0, "plain", 0, "off", 0.0, 0.01, 13, gain=1.0,
                 reading="the drafter is unsure of its first draft")
    assert "expected x3.10" in auto_why(copied) and "the drafter's first draft is the copy's" in auto_why(copied)
    assert "plain step" in auto_why(plain) and "unsure of its first draft" in auto_why(plain)


def test_a_step_of_a_fixed_k_adds_no_auto_lines():
    from specchat.widgets.inspector import auto_why
    from specchat.widgets.panel import choices

    fixed = draft_step(2)
    assert "auto" not in last_step(fixed).plain and auto_why(fixed) == "" and choices([fixed]) is None
