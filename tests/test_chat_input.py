"""The message box as in other chats: several lines, enter sends, up and down bring back what was
sent, ctrl+c stops a reply (and never quits)."""

from __future__ import annotations

import pytest

from specchat.app import make_app
from specchat.settings import Settings
from tests.pilot import ask, chat, pilot_test, reply, until
from tests.scripted import ScriptedSession


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))


def box(app):
    return app.query_one("#prompt")


@pilot_test
async def test_shift_enter_and_ctrl_j_start_a_new_line_and_enter_sends_all_lines():
    session = ScriptedSession()
    app = make_app(session, Settings(), save=False)
    async with chat(app) as pilot:
        await pilot.press("a", "shift+enter", "b", "ctrl+j", "c")
        assert box(app).value == "a\nb\nc"
        assert not session.prompts
        await pilot.press("enter")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        assert session.prompts[-1][-1] == {"role": "user", "content": "a\nb\nc"}
        assert box(app).value == ""


@pilot_test
async def test_up_and_down_walk_through_the_messages_sent_and_back_to_the_draft():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "first")
        await ask(pilot, "second")
        await pilot.press("x")
        await pilot.press("up")
        assert box(app).value == "second"
        await pilot.press("up")
        assert box(app).value == "first"
        await pilot.press("up")  # nothing older: it stays
        assert box(app).value == "first"
        await pilot.press("down", "down")
        assert box(app).value == "x"  # what was being written comes back


@pilot_test
async def test_up_moves_inside_a_message_of_several_lines_before_the_history():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "sent")
        await pilot.press("a", "ctrl+j", "b")
        await pilot.press("up")
        assert box(app).value == "a\nb" and box(app).cursor_location[0] == 0
        await pilot.press("up")
        assert box(app).value == "sent"


@pilot_test
async def test_ctrl_c_stops_the_reply_and_leaves_the_app_running():
    session = ScriptedSession(stepwise=True)
    app = make_app(session, Settings(), save=False)
    async with chat(app) as pilot:
        box(app).value = "go on"
        await pilot.press("enter")
        session.release(2)
        await until(pilot, lambda: app.gen is not None, "the reply to start")
        await pilot.press("ctrl+c")
        session.release(50)
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply to stop")
        assert "stopped" in reply(app).status
        await pilot.press("ctrl+c")  # nothing to stop: a word, and still running
        await pilot.pause()
        assert app.is_running
        assert app.record.messages[-1]["finished"] == "cancelled"
