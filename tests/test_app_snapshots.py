"""What the app looks like, compared with committed snapshots (pytest --snapshot-update to renew)."""

from __future__ import annotations

from specchat.app import make_app
from specchat.settings import Settings
from tests.pilot import ready, reply, say, until
from tests.scripted import ScriptedSession


def scripted_app(stepwise: bool = True):
    session = ScriptedSession(accepts=[2, 4, 0, 3, 1], stepwise=stepwise)
    app = make_app(session, Settings(proposer="n-gram", k=4, teaching=True), save=False)
    app.clock = lambda: 0.0  # the rate seen on the screen is the one figure that wall time sets
    return session, app


def test_main_screen_mid_reply(snap_compare, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    session, app = scripted_app()

    async def mid_reply(pilot):
        await ready(pilot)
        await say(pilot, "Tell me about the quick brown fox.")
        session.release(5)
        await until(pilot, lambda: len(app.stats.history) == 5 and not app.panel_stale, "five steps")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(110, 32), run_before=mid_reply)


def test_help_screen(snap_compare, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    _, app = scripted_app(stepwise=False)

    async def help_screen(pilot):
        await ready(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 36), run_before=help_screen)


def test_narrow_screen_folds_the_legend_and_the_keys(snap_compare, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    _, app = scripted_app(stepwise=False)

    async def narrow(pilot):  # a finished reply: mid-reply, which keys are live depends on timing
        await ready(pilot)
        await say(pilot, "Tell me about the quick brown fox.")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(60, 20), run_before=narrow)


def test_step_inspector_on_a_correction(snap_compare, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    _, app = scripted_app(stepwise=False)

    async def inspect_correction(pilot):
        await ready(pilot)
        await pilot.press("f4")
        await say(pilot, "Tell me about the quick brown fox.")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        app.inspected = reply(app)
        reply(app).set_cursor(True, 4)
        app.action_move_cursor(-1)  # onto the first step's correction
        await pilot.pause()

    assert snap_compare(app, terminal_size=(110, 40), run_before=inspect_correction)


def test_race_side_by_side(snap_compare, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    _, app = scripted_app(stepwise=False)

    async def race(pilot):
        await ready(pilot)
        await say(pilot, "Tell me about the quick brown fox.")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: type(app.screen).__name__ == "RaceScreen", "the race")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(110, 32), run_before=race)
