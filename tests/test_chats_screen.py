"""Past chats: the chats screen lists the saved ones and reopens the one picked; a file that is not a
chat gets one line and stays on disk; messages queued behind a reply at quit are kept, not lost."""

from __future__ import annotations

import json

from specchat.app import make_app
from specchat.settings import ChatRecord, Settings
from specchat.widgets.chats_screen import ChatsScreen
from specchat.widgets.help import KEYS
from specchat.widgets.keys import KeyLine
from specchat.widgets.reply import ReplyView
from specchat.widgets.transcript import UserMessage
from tests.pilot import chat, pilot_test, recorded_notes, reply, say, stepped, until
from tests.scripted import ScriptedSession


def saved_chat(id_: str, model: str, *said: str) -> ChatRecord:
    messages = []
    for text in said:
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": f"re: {text}"}]
    record = ChatRecord(
        model,
        messages=messages,
        started=f"{id_[:4]}-{id_[4:6]}-{id_[6:8]} 10:00:00",
        id=f"{id_}-100000-abcdef",
    )
    record.save()
    return record


def listed(app) -> list[str]:
    options = app.screen.query_one("#chats-list")
    return [options.get_option_at_index(i).prompt.plain for i in range(options.option_count)]


@pilot_test
async def test_the_chats_screen_lists_saved_chats_latest_first_and_reopens_the_one_picked():
    older = saved_chat(
        "20300101", "smollm2-135m · cpu", "Rename the class throughout this file please now", "thanks"
    )
    saved_chat("20300202", "qwen2.5-coder-1.5b · cuda", "Explain the code")
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, ChatsScreen), "the chats screen")
        lines = listed(app)
        assert len(lines) == 2
        assert lines[0].startswith("2030-02-02 10:00") and "qwen2.5-coder-1.5b" in lines[0]
        assert "Explain the code" in lines[0] and "1 message" in lines[0]
        assert "smollm2-135m" in lines[1] and "2 messages" in lines[1] and "Rename the class" in lines[1]
        await pilot.press("down", "enter")
        await until(pilot, lambda: not isinstance(app.screen, ChatsScreen), "the screen to close")
        assert app.record.id == older.id
        assert [m.content.plain for m in app.query(UserMessage)] == [
            "Rename the class throughout this file please now",
            "thanks",
        ]
        assert [r.text for r in app.query(ReplyView)] == [
            "re: Rename the class throughout this file please now",
            "re: thanks",
        ]


@pilot_test
async def test_with_no_saved_chat_the_screen_says_so_and_esc_closes_it():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await say(pilot, "/chats")
        await until(pilot, lambda: isinstance(app.screen, ChatsScreen), "the chats screen")
        assert str(app.screen.query_one("#chats-note").render()).startswith("no saved chat to reopen yet")
        assert not app.screen.query("#chats-list")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ChatsScreen), "the screen to close")
        assert not app.query(ReplyView)


@pilot_test
async def test_a_file_that_is_not_a_chat_gets_one_line_and_is_kept_as_it_is(home):
    saved_chat("20300101", "smollm2-135m · cpu", "hello")
    folder = home / "data" / "transcripts"
    broken, alien = folder / "20300303-000000-badbad.json", folder / "20300404-000000-alien0.json"
    broken.write_bytes(b'{"model": "half a fi')
    alien.write_text(json.dumps({"model": "x", "started": "now", "messages": "not a list of messages"}))
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, ChatsScreen), "the chats screen")
        lines = listed(app)
        assert lines[0].startswith(alien.name) and "not a specchat transcript" in lines[0]
        assert lines[1].startswith(broken.name) and "not JSON" in lines[1]
        assert all("\n" not in line and "kept" in line for line in lines[:2])
        options = app.screen.query_one("#chats-list")
        assert options.get_option_at_index(0).disabled and options.get_option_at_index(1).disabled
        await pilot.press("enter")  # the highlight starts on the first chat that can be opened
        await until(pilot, lambda: not isinstance(app.screen, ChatsScreen), "the screen to close")
        assert reply(app).text == "re: hello"
    assert broken.read_bytes() == b'{"model": "half a fi'


@pilot_test
async def test_the_chats_key_is_in_the_footer_and_in_the_help():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        keys = [entry.plain for entry in app.query_one(KeyLine).entries]
        assert "^o chats" in keys
        assert any(key == "ctrl+o" and "/chats" in what for key, what in KEYS)
        await pilot.press("f1")
        await pilot.press("ctrl+o")  # the chat's keys stay out of another screen's way
        await pilot.pause()
        assert not isinstance(app.screen, ChatsScreen)


@pilot_test
async def test_messages_queued_at_quit_are_kept_unsent_and_come_back_in_the_box_when_the_chat_reopens():
    session = ScriptedSession(stepwise=True)
    app = make_app(session, Settings(proposer="n-gram", k=2), save=False)
    async with chat(app) as pilot:
        await stepped(pilot, session, "first", 2)
        await say(pilot, "second")
        await say(pilot, "third\nwith two lines")
        assert app.queued == ["second", "third\nwith two lines"]
        await pilot.press("ctrl+q")
    saved = json.loads(app.record.path.read_text())
    assert saved["unsent"] == ["second", "third\nwith two lines"]
    assert [m["content"] for m in saved["messages"] if m["role"] == "user"] == ["first"]
    assert "## You (not sent)" in ChatRecord.read(app.record.path).markdown()

    again = make_app(ScriptedSession(), Settings(), save=False, resume=True)
    notes = recorded_notes(again)
    async with chat(again) as pilot:
        await until(pilot, lambda: again.query(ReplyView), "the old chat")
        assert again.prompt.value == "second\nthird\nwith two lines"
        assert not json.loads(again.record.path.read_text())["unsent"]  # in the box now, not twice
        assert not notes
