"""The step inspector in the chat: f4 turns it on, a cursor (keys or a click) picks a token and
the panel shows that token's step."""

from __future__ import annotations

from specchat.app import make_app
from specchat.settings import Settings
from specchat.widgets.reply import Block, TokenPicked
from tests.pilot import ask, chat, pilot_test, reply
from tests.scripted import WORDS, ScriptedSession


def panel_text(app) -> str:
    return app.inspector.render().plain if hasattr(app.inspector.render(), "plain") else str(app.inspector.render())


@pilot_test
async def test_the_inspector_shows_the_step_of_the_token_under_the_cursor():
    app = make_app(ScriptedSession(accepts=[2, 4, 0]), Settings(proposer="n-gram", k=4), save=False)
    async with chat(app, (120, 50)) as pilot:
        await pilot.press("f4")
        assert app.inspector.display
        await ask(pilot, "tell me about a fox")
        view = reply(app)
        # pieces: the prefill's word, 2 accepted, the correction, the refused drafts, ...
        assert view.pieces[3] == (WORDS[3], "correction")
        app.post_message(TokenPicked(view, 3))
        await pilot.pause()
        text = panel_text(app)
        step = view.steps[3]
        assert (step.accepted, step.kind) == (2, "correction")
        assert f"step at position {step.position}: n-gram, k = 4, correction" in text
        assert text.count(" kept") == 2 and " refused" in text and "not tested" in text
        assert "p 0.0500" in text and "top 2 at the rejection point" in text
        assert "a plain step" not in text  # none timed in this reply: nothing to compare with
        await pilot.press("alt+left")
        assert view.cursor == 2 and view.steps[2] is step  # a kept draft of the same step
        assert f"token {WORDS[2]!r}" in panel_text(app)


@pilot_test
async def test_a_click_on_a_token_picks_it():
    # in the raw view (test_markdown_view.py clicks in the Markdown view)
    app = make_app(ScriptedSession(accepts=[2, 4, 0]), Settings(proposer="n-gram", k=4, markdown=False), save=False)
    async with chat(app, (120, 50)) as pilot:
        await pilot.press("f4")
        await ask(pilot, "tell me about a fox")
        view = reply(app)
        await pilot.click(view.query_one(Block), offset=(0, 0))  # the reply's first token
        await pilot.pause()
        assert view.cursor == 0
        assert f"token {WORDS[0]!r}" in panel_text(app)


@pilot_test
async def test_with_the_inspector_off_steps_keep_no_numbers():
    app = make_app(ScriptedSession(accepts=[2, 4, 0]), Settings(proposer="n-gram", k=4), save=False)
    async with chat(app, (120, 50)) as pilot:
        await ask(pilot, "one")
        assert not app.inspector.display
        assert all(step.inspection is None for step in reply(app).steps)
        await pilot.press("f4")  # on after the reply: its steps were not inspected, and it says so
        app.post_message(TokenPicked(reply(app), 3))
        await pilot.pause()
        assert "the inspector was off when this step ran" in panel_text(app)


@pilot_test
async def test_the_help_explains_one_step_and_points_at_the_inspector_and_the_race():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app, (120, 50)) as pilot:
        await pilot.press("f1")
        how = str(app.screen.query_one("#help-how").render())
        keys = str(app.screen.query_one("#help-keys").render())
        assert "min(1, p/q)" in how and "f4 opens the step inspector" in how and "ctrl+r races" in how
        assert "step inspector" in keys and "/compare" in keys and "/stats" in keys
