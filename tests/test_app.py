"""The chat app driven through Textual's Pilot, on the scripted engine."""

from __future__ import annotations

import json

from engine import EngineError
from specchat.app import make_app
from specchat.settings import Settings, data_dir
from specchat.widgets.panel import SpecPanel
from specchat.widgets.origins import STYLES
from specchat.widgets.reply import ReplyView
from tests.pilot import (
    answer,
    ask,
    chat,
    command,
    pilot_test,
    recorded_notes,
    reply,
    say,
    stepped,
    steps_shown,
    until,
)
from tests.scripted import WORDS, ScriptedGeneration, ScriptedSession, scripted_app


@pilot_test
async def test_each_token_is_styled_by_where_it_came_from():
    app = scripted_app(Settings(proposer="n-gram", k=4), accepts=[2, 4, 0])
    async with chat(app) as pilot:
        await ask(pilot, "tell me about a fox")
        view = reply(app)
        # prefill: plain; 2 accepted + correction; 4 accepted + bonus; correction with none accepted
        expected = (
            [(WORDS[0], "plain")]
            + [(w, "accepted") for w in WORDS[1:3]]
            + [(WORDS[3], "correction"), (" cat cat", "refused")]
            + [(w, "accepted") for w in WORDS[4:8]]
            + [(WORDS[8], "bonus")]
            + [(WORDS[9], "correction"), (" cat cat cat cat", "refused")]
        )
        assert view.pieces[: len(expected)] == expected
        assert view.text.startswith("".join(WORDS[:10]))
        # the rendered text carries each piece's style, and hides refused drafts until teaching is on
        content = view.content()
        for text, kind in expected:
            at = content.plain.find(text)
            if kind == "refused":
                assert " cat" not in content.plain
                continue
            styles = [str(s.style) for s in content.spans if s.start <= at < s.end]
            assert styles == ([STYLES[kind]] if STYLES[kind] else []), (text, kind)
        await pilot.press("ctrl+t")
        assert " cat" in view.content().plain
        assert app.settings.teaching


@pilot_test
async def test_switching_proposer_mid_reply_changes_the_next_step():
    app = scripted_app(Settings(proposer="n-gram", k=3), accepts=[1], stepwise=True)
    session = app.session
    async with chat(app) as pilot:
        await stepped(pilot, session, "go", 1)
        assert (app.stats.last.proposer, app.stats.last.k) == ("n-gram", 3)
        await pilot.press("ctrl+p")  # n-gram -> draft, which loads in the background first
        await until(pilot, lambda: app.proposer_name == "draft", "the draft model")
        await pilot.press("plus")  # the input is empty: + raises k
        session.release(1)
        await until(pilot, lambda: steps_shown(app) == 2, "the second step")
        assert (app.stats.last.proposer, app.stats.last.k) == ("draft", 4)
        await pilot.press("ctrl+p")  # draft -> off: plain decoding from the next step
        session.release(1)
        await until(pilot, lambda: steps_shown(app) == 3, "the third step")
        assert (app.stats.last.proposer, app.stats.last.kind) == ("off", "plain")
        assert app.gen is not None  # the same reply went on throughout
        await pilot.press("escape")
        await until(pilot, lambda: app.gen is None, "the stop")


@pilot_test
async def test_escape_stops_the_reply_keeps_its_text_and_the_chat_goes_on(home):
    app = scripted_app(Settings(proposer="n-gram", k=2), accepts=[1], stepwise=True)
    session = app.session
    async with chat(app) as pilot:
        await stepped(pilot, session, "first", 2)
        await pilot.press("escape")
        await until(pilot, lambda: app.gen is None, "the stop")
        first = reply(app)
        assert first.text == "".join(WORDS[:5])  # prefill + two steps of (1 accepted + correction)
        assert first.status.startswith("stopped")
        saved = json.loads(app.record.path.read_text())
        assert saved["messages"][-1] == {
            **saved["messages"][-1],
            "content": first.text,
            "finished": "cancelled",
        }

        session.stepwise = False
        await say(pilot, "second")
        await until(
            pilot, lambda: app.gen is None and reply(app) is not first and reply(app).status, "a reply"
        )
        assert reply(app).text == "".join(WORDS)
        assert [m["role"] for m in session.prompts[-1]] == ["user", "assistant", "user"]
        assert session.prompts[-1][1]["content"] == first.text


@pilot_test
async def test_quitting_mid_reply_keeps_what_was_written(home):
    app = scripted_app(Settings(proposer="n-gram", k=2), accepts=[1], stepwise=True)
    session = app.session
    async with chat(app) as pilot:
        await stepped(pilot, session, "first", 2)
    saved = json.loads(app.record.path.read_text())
    assert saved["messages"][-1]["content"] == "".join(WORDS[:5])
    assert saved["messages"][-1]["finished"] == "cancelled"


@pilot_test
async def test_every_reply_is_saved_and_export_writes_markdown(home):
    app = scripted_app()
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        saved = json.loads(app.record.path.read_text())
        assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
        assert saved["messages"][1]["content"] == "".join(WORDS)
        await say(pilot, "/export")
        markdown = (data_dir() / "exports" / f"{app.record.id}.md").read_text()
        assert "## You\n\nhello" in markdown and "".join(WORDS) in markdown


@pilot_test
async def test_new_chat_starts_empty_and_settings_are_saved(home):
    app = scripted_app(save=True)
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        old = app.record.path
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not app.query(ReplyView) and app.record.messages == []
        assert old.exists()
        await pilot.press("ctrl+s")
        temperature = app.screen.query_one("#temperature")
        temperature.value = "0.8"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.settings.temperature == 0.8
        assert Settings.load().temperature == 0.8
        await say(pilot, "/system be brief")
        assert Settings.load().system == "be brief"


@pilot_test
async def test_settings_screen_refuses_a_bad_value():
    app = scripted_app()
    async with chat(app) as pilot:
        await pilot.press("ctrl+s")
        app.screen.query_one("#top_p").value = "2"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "top-p" in str(app.screen.query_one("#settings-error").render())
        await pilot.press("escape")
        assert app.settings.top_p == 1.0


@pilot_test
async def test_the_panel_folds_away_on_a_narrow_terminal():
    app = scripted_app()
    async with chat(app, (80, 24)) as pilot:
        panel = app.query_one(SpecPanel)
        assert not panel.display
        await pilot.press("ctrl+b")
        assert panel.display
        await pilot.resize_terminal(120, 30)
        await pilot.press("ctrl+b")
        assert not panel.display


@pilot_test
async def test_typed_plus_and_question_mark_are_text_not_keys():
    app = scripted_app(Settings(k=4))
    async with chat(app) as pilot:
        await pilot.press("a", "plus", "question_mark")
        assert app.query_one("#prompt").value == "a+?"
        assert app.settings.k == 4 and app.screen is app.screen_stack[0]
        app.query_one("#prompt").value = ""
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen is not app.screen_stack[0]  # the help screen
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]


class FailingGeneration(ScriptedGeneration):
    def __iter__(self):
        raise EngineError("context full: start a new chat")
        yield  # a generator, like the real one


class FailingSession(ScriptedSession):
    """Loads, then fails every reply the way a full context does."""

    def stream(self, ids, sampling, proposer):
        return FailingGeneration(proposer, self.accepts, None)


@pilot_test
async def test_an_engine_error_ends_the_reply_with_its_message_and_the_chat_goes_on():
    app = make_app(FailingSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await say(pilot, "hello")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the error")
        assert reply(app).status == "error: context full: start a new chat"
        assert app.record.messages == []  # the failed turn is not part of the conversation
        assert not app.query_one("#prompt").disabled


async def shown_when_load_fails(error: Exception) -> tuple[str, bool]:
    """The loading screen's text once a model load that raises `error` has failed, and whether
    the message box is still disabled."""

    class Unloadable(ScriptedSession):
        def load(self, progress):
            raise error

    app = make_app(Unloadable(), Settings(), save=False)
    async with app.run_test(size=(120, 40)) as pilot:
        loading = app.query_one("#loading-text")
        await until(pilot, lambda: "cannot load" in str(loading.render()), "the error")
        return str(loading.render()), app.query_one("#prompt").disabled


@pilot_test
async def test_a_model_that_cannot_load_says_why():
    shown, disabled = await shown_when_load_fails(EngineError("no model 'nope': not a file or directory"))
    assert "no model 'nope'" in shown
    assert disabled


@pilot_test
async def test_a_model_load_that_fails_unexpectedly_says_why_instead_of_loading_forever():
    error = RuntimeError("Expected one of cpu, cuda device type at start of device string: tpu\nmore")
    shown, _ = await shown_when_load_fails(error)
    assert "RuntimeError: Expected one of cpu, cuda" in shown and "more" not in shown


@pilot_test
async def test_export_to_a_path_it_cannot_write_says_so_and_the_chat_goes_on(home):
    app = scripted_app()
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        (home / "a-file").write_text("")
        said = await answer(pilot, f"/export {home}/a-file/chat.md")  # a folder that is a file
        assert said.startswith(f"cannot write the chat to {home}/a-file/chat.md:")
        await ask(pilot, "again")
        assert len(app.query(ReplyView)) == 2 and reply(app).text == "".join(WORDS)


@pilot_test
async def test_messages_sent_while_a_reply_is_written_are_queued_and_sent_in_turn():
    app = scripted_app(Settings(proposer="n-gram", k=2), accepts=[1], stepwise=True)
    session = app.session
    async with chat(app) as pilot:
        await say(pilot, "first")
        await say(pilot, "second")
        await say(pilot, "third")
        assert app.query_one("#prompt").value == ""  # nothing piles up in the box
        assert app.queued == ["second", "third"]
        session.stepwise = False
        await pilot.press("escape")
        await until(pilot, lambda: app.gen is None and not app.queued and len(app.query(ReplyView)) == 3
                    and reply(app).status, "the queued replies")
        assert [p[-1]["content"] for p in session.prompts] == ["first", "second", "third"]
        assert [m["content"] for m in app.record.messages if m["role"] == "user"] == ["first", "second", "third"]


@pilot_test
async def test_a_settings_folder_that_cannot_be_written_is_reported_not_fatal(home, monkeypatch):
    blocked = home / "blocked"
    blocked.write_text("a file where the folder should be")
    monkeypatch.setenv("SPECCHAT_HOME", str(blocked))
    app = scripted_app(save=True)
    notes = recorded_notes(app)
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        assert any(n.startswith("cannot save the settings") for n in notes)
        assert any(n.startswith("cannot save the transcript") for n in notes)
        assert reply(app).text == "".join(WORDS)


@pilot_test
async def test_k_out_of_range_is_said_not_silently_changed():
    app = scripted_app(Settings(proposer="n-gram", k=4))
    notes = recorded_notes(app)
    async with chat(app) as pilot:
        await command(pilot, "/k 99")
        assert app.settings.k == 15 and notes[-1] == "k = 99 is out of range here: k is 15"
        await command(pilot, "/k 3")
        assert app.settings.k == 3 and notes[-1].startswith("k = 99")  # nothing more to say
