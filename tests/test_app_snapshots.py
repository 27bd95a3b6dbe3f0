"""What the app looks like, compared with committed snapshots (pytest --snapshot-update to renew)."""

from __future__ import annotations

from specchat.app import make_app
from specchat.settings import Settings
from tests.pilot import ask, ready, reply, stepped, until
from tests.scripted import ScriptedSession

FOX = "Tell me about the quick brown fox."


def looks_as_committed(snap_compare, size: tuple[int, int], scenario, stepwise: bool = False) -> bool:
    """The chat on a scripted model (teaching view on, n-gram k 4), once the model is ready and
    `scenario(pilot, session)` has run, against its committed snapshot."""
    session = ScriptedSession(accepts=[2, 4, 0, 3, 1], stepwise=stepwise)
    app = make_app(session, Settings(proposer="n-gram", k=4, teaching=True), save=False)
    app.clock = lambda: 0.0  # the rate seen on the screen is the one figure that wall time sets

    async def run_before(pilot):
        await ready(pilot)
        await scenario(pilot, session)
        await pilot.pause()

    return snap_compare(app, terminal_size=size, run_before=run_before)


def test_main_screen_mid_reply(snap_compare):
    async def five_steps(pilot, session):
        await stepped(pilot, session, FOX, 5)
        await until(pilot, lambda: not pilot.app.panel_stale, "the panel")

    assert looks_as_committed(snap_compare, (110, 32), five_steps, stepwise=True)


def test_help_screen(snap_compare):
    assert looks_as_committed(snap_compare, (100, 36), lambda pilot, _: pilot.press("f1"))


def test_narrow_screen_folds_the_legend_and_the_keys(snap_compare):
    # a finished reply: mid-reply, which keys are live depends on timing
    assert looks_as_committed(snap_compare, (60, 20), lambda pilot, _: ask(pilot, FOX))


def test_step_inspector_on_a_correction(snap_compare):
    async def inspect_the_first_correction(pilot, _):
        await pilot.press("f4")
        await ask(pilot, FOX)
        pilot.app.inspected = reply(pilot.app)
        reply(pilot.app).set_cursor(True, 4)
        pilot.app.action_move_cursor(-1)  # onto the first step's correction

    assert looks_as_committed(snap_compare, (110, 40), inspect_the_first_correction)


def test_race_side_by_side(snap_compare):
    async def race(pilot, _):
        await ask(pilot, FOX)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: type(pilot.app.screen).__name__ == "RaceScreen", "the race")

    assert looks_as_committed(snap_compare, (110, 32), race)
