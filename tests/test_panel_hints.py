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
