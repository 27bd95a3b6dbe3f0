"""Bad input, swept: every case ends in one line or one notification, no traceback, no message
lost, and the app or command still works afterwards."""

from __future__ import annotations

import pytest

from specchat.__main__ import main
from specchat.app import make_app
from specchat.settings import Settings
from tests.pilot import ask, chat, pilot_test, recorded_notes, reply, say, until
from tests.scripted import WORDS, ScriptedSession


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    return tmp_path


COMMANDS = [  # typed into the message box
    "/k 99",
    "/k lots",
    "/proposer nope",
    "/resume",
    "/nonsense",
    "/export {home}/a-file/chat.md",
]
SETTINGS = [("temperature", "hot"), ("top_p", "5"), ("top_k", "-3"), ("max_tokens", "0"), ("seed", "1.5")]


@pilot_test
async def test_bad_input_in_the_chat_is_one_notification_each_and_the_chat_goes_on(home):
    (home / "a-file").write_text("")
    session = ScriptedSession(accepts=[1], stepwise=True)
    app = make_app(session, Settings(), save=False)
    notes = recorded_notes(app)
    async with chat(app) as pilot:
        for command in COMMANDS:
            before = len(notes)
            await say(pilot, command.format(home=home))
            await pilot.pause()
            assert len(notes) == before + 1 and "\n" not in notes[-1], command
        for field, value in SETTINGS:
            await pilot.press("ctrl+s")
            await pilot.pause()
            app.screen.query_one(f"#{field}").value = value
            await pilot.press("ctrl+s")
            await pilot.pause()
            error = str(app.screen.query_one("#settings-error").render())
            assert error and "\n" not in error, (field, value)
            await pilot.press("escape")
            await pilot.pause()
            assert app.screen is app.screen_stack[0]
        await say(pilot, "first")  # then a message while its reply is written
        before = len(notes)
        await say(pilot, "second")
        assert len(notes) == before + 1 and notes[-1].startswith("queued")
        session.stepwise = False
        session.release(100)
        await until(pilot, lambda: app.gen is None and not app.queued and reply(app).status, "the replies")
        await ask(pilot, "third")
        users = [m["content"] for m in app.record.messages if m["role"] == "user"]
        assert users == ["first", "second", "third"] and reply(app).text == "".join(WORDS)


CLI_CASES = [
    ["run", "--model", "{gguf}", "--prompt", "hi", "--max-context", "99999999"],
    ["run", "--model", "{gguf}", "--prompt", "hi", "--max-context", "0"],
    ["run", "--model", "{gguf}", "--prompt", "hi", "--speculate", "0"],
    ["run", "--model", "{gguf}", "--prompt", "hi", "--temperature", "-1"],
    ["run", "--model", "{gguf}", "--prompt-file", "/no/such/file"],
    ["run", "--model", "/no/such/model", "--prompt", "hi"],
    ["chat", "--model", "{gguf}", "-k", "99"],
    ["chat", "--model", "{gguf}", "--speculate", "3", "--draft", "x"],
    ["compare", "--model", "{gguf}", "--prompt", "hi", "--max-tokens", "1"],
    ["pull", "no-such-pack"],
]


@pytest.mark.parametrize("argv", CLI_CASES, ids=lambda argv: " ".join(argv[:1] + argv[3:]))
def test_bad_input_to_a_command_is_one_line_and_status_1(gguf, capsys, argv):  # noqa: F811
    assert main([a.format(gguf=gguf) for a in argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specchat: ") and "Traceback" not in "\n".join(err)
