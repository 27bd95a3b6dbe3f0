"""The chat as people expect it: keys that work in every screen, flags that hold for one run, a
failed load that can be left, replies that survive a crash, and the last chat to go back to."""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace

import pytest
from textual.app import App

import engine
from specchat.app import make_app
from specchat.session import ChatSession
from specchat.settings import ChatRecord, Settings, config_dir
from specchat.widgets.reply import ReplyView
from tests.conftest import tiny_model
from tests.pilot import (
    LetterTokenizer,
    answer,
    ask,
    chat,
    opened,
    pilot_test,
    recorded_notes,
    reply,
    stepped,
    until,
)
from tests.scripted import WORDS, ScriptedSession, scripted_app


@pilot_test
async def test_tab_moves_through_the_settings_fields():
    app = scripted_app()
    async with chat(app) as pilot:
        await opened(pilot, "ctrl+s")
        assert app.screen.focused.id == "temperature"
        await pilot.press("tab")
        assert app.screen.focused.id == "top_k"
        await pilot.press("tab", "tab", "shift+tab")
        assert app.screen.focused.id == "top_p"


@pytest.mark.parametrize("screen_key", ["ctrl+s", "question_mark"])  # the settings, the help
@pilot_test
async def test_ctrl_q_quits_from_a_screen_over_the_chat(screen_key):
    app = scripted_app()
    async with chat(app) as pilot:
        await opened(pilot, screen_key)
        assert app.screen is not app.screen_stack[0]
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0


@pilot_test
async def test_command_line_settings_hold_for_this_run_are_shown_and_never_saved():
    Settings(temperature=0.3, system="").save()
    flags = {"temperature": 0.9, "system": "be terse"}
    app = make_app(ScriptedSession(), Settings(temperature=0.9, system="be terse"), save=True, this_run_only=flags)
    async with chat(app) as pilot:
        notes = [str(n.render()) for n in app.query("#chat .note")]
        assert any("this run only" in n and "temperature 0.9" in n and "be terse" in n for n in notes)
        await pilot.press("ctrl+t")  # a change of the user's own, which saves the settings
        await pilot.pause()
    saved = json.loads((config_dir() / "settings.json").read_text())
    assert (saved["temperature"], saved["system"], saved["teaching"]) == (0.3, "", True)


async def failed_app():
    class Unloadable(ScriptedSession):
        def load(self, progress):
            raise engine.EngineError("no model 'nope': not a file or directory")

    return make_app(Unloadable(), Settings(), save=False)


@pilot_test
async def test_a_model_that_fails_to_load_says_how_to_leave_and_quits_with_status_1():
    app = await failed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.load_error, "the failure")
        await pilot.pause()
        assert "ctrl+q quits" in app.query_one("#prompt").placeholder
        shown = [b.binding.description for b in app.active_bindings.values() if b.binding.show]
        assert "quit" in shown
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.return_code == 1


def test_the_chat_command_says_why_the_model_did_not_load_and_exits_with_status_1(monkeypatch, capsys):
    import specchat.app
    from specchat.__main__ import main

    async def quit_once_failed(pilot):
        await until(pilot, lambda: pilot.app.load_error, "the failure")
        await pilot.press("ctrl+q")

    unloadable = asyncio.run(failed_app()).session
    monkeypatch.setattr(specchat.app, "ChatSession", lambda args: unloadable)
    monkeypatch.setattr(specchat.app.SpecChat, "run", lambda app: App.run(app, headless=True, auto_pilot=quit_once_failed))
    assert main(["--model", "nope"]) == 1
    assert capsys.readouterr().err.strip() == "specchat: cannot load the model: no model 'nope': not a file or directory"


@pilot_test
async def test_a_draft_with_another_vocabulary_is_refused_at_load_and_the_chat_goes_on(monkeypatch):
    target, draft = tiny_model(vocab=64), tiny_model(vocab=80)
    target.tokenizer = draft.tokenizer = LetterTokenizer()
    monkeypatch.setattr("engine.speculation.proposers.draft.proposer.load_model", lambda *a, **kw: draft)
    session = ChatSession(Namespace(model="tiny", draft="other-vocab", dflash=None), model=target)
    app = make_app(session, Settings(proposer="draft", k=3, max_tokens=8), save=False)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: any("vocabulary" in n for n in notes), "the refusal")
        assert notes[-1].startswith("cannot load draft: draft ") and "\n" not in notes[-1]
        assert "draft" not in session.proposer_names()  # not offered again
        await pilot.press("ctrl+p")  # off -> n-gram, skipping the refused draft
        assert app.proposer_name == "n-gram"
        await ask(pilot, "abcabc")
        assert reply(app).status.startswith("length")
        assert [m["role"] for m in app.record.messages] == ["user", "assistant"]


@pilot_test
async def test_export_into_a_folder_writes_a_file_there(home):
    app = scripted_app()
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        assert await answer(pilot, f"/export {home}") == f"chat written to {home / app.record.id}.md"
        assert "".join(WORDS) in (home / f"{app.record.id}.md").read_text()


@pilot_test
async def test_an_export_that_fails_names_the_file_asked_for_not_a_temporary_one(home, monkeypatch):
    import specchat.settings

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    async with chat(scripted_app()) as pilot:
        await ask(pilot, "hello")
        monkeypatch.setattr(specchat.settings.os, "replace", refuse)
        said = await answer(pilot, f"/export {home}/chat.md")
        assert said == f"cannot write the chat to {home}/chat.md: Permission denied"


@pilot_test
async def test_a_reply_is_saved_as_it_streams_marked_unfinished():
    app = scripted_app(Settings(proposer="n-gram", k=2), accepts=[1], stepwise=True)
    async with chat(app) as pilot:
        await stepped(pilot, app.session, "first", 2)

        def saved_reply():
            messages = json.loads(app.record.path.read_text())["messages"]
            return messages[-1] if messages[-1]["role"] == "assistant" else None

        # no end of reply has come: what is on disk was saved as it streamed
        await until(pilot, lambda: saved_reply() and saved_reply()["content"] == reply(app).text, "the save")
        assert saved_reply() == {"role": "assistant", "content": "".join(WORDS[:5]), "finished": "unfinished"}
        await pilot.press("escape")
        await until(pilot, lambda: app.gen is None, "the stop")
        assert saved_reply()["finished"] == "cancelled"


@pilot_test
async def test_resume_reopens_the_last_chat_and_goes_on_with_it():
    ChatRecord("scripted", messages=[{"role": "user", "content": "older"}], id="20200101-000000-aaaaaa").save()
    last = ChatRecord(
        "scripted",
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "half a repl", "finished": "unfinished"},
        ],
        id="20300101-000000-bbbbbb",
    )
    last.save()
    session = ScriptedSession()
    app = make_app(session, Settings(), save=False, resume=True)
    async with chat(app) as pilot:
        await until(pilot, lambda: app.query(ReplyView), "the old chat")
        assert reply(app).text == "half a repl" and reply(app).status == "unfinished"
        assert app.record.id == last.id
        await ask(pilot, "go on")
        assert [m["content"] for m in session.prompts[-1]] == ["hello", "half a repl", "go on"]
        saved = json.loads(last.path.read_text())["messages"]
        assert [m["content"] for m in saved] == ["hello", "half a repl", "go on", "".join(WORDS)]


@pilot_test
async def test_resume_with_no_saved_chat_says_so():
    app = scripted_app()
    async with chat(app) as pilot:
        assert await answer(pilot, "/resume") == "no saved chat to reopen"
        assert not app.query(ReplyView)
