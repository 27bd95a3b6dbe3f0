"""Copying a reply, or its last code block, to the clipboard."""

from __future__ import annotations

import pytest

from specchat.app import make_app
from specchat.copying import code_blocks, last_code_block
from specchat.settings import Settings
from tests.pilot import ask, chat, pilot_test, recorded_notes, reply
from tests.scripted import ScriptedSession

REPLY = "Two ways:\n```python\nprint(1)\n```\nor\n```\nx = 2\ny = 3\n```\ndone."


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))


def test_code_blocks_are_found_in_order_without_their_fences():
    assert code_blocks(REPLY) == ["print(1)", "x = 2\ny = 3"]


def test_a_block_cut_off_before_its_closing_fence_still_counts():
    assert last_code_block("Here:\n```sh\nls -l\necho") == "ls -l\necho"


def test_text_without_a_fence_has_no_code_block():
    assert last_code_block("use `x` inline, ``` not at a line start") is None


@pilot_test
async def test_f2_copies_the_last_reply():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "hello")
        await pilot.press("f2")
        assert app.clipboard == reply(app).text and app.clipboard


@pilot_test
async def test_f3_copies_the_last_code_block_and_says_when_there_is_none():
    app = make_app(ScriptedSession(), Settings(), save=False)
    async with chat(app) as pilot:
        notes = recorded_notes(app)
        await ask(pilot, "hello")
        await pilot.press("f3")
        assert "no code block" in notes[-1] and app.clipboard == ""
        app.chat.add_reply(False).add([(REPLY, "plain")])
        await pilot.press("f3")
        assert app.clipboard == "x = 2\ny = 3"
