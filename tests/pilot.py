"""Driving the chat app in tests: Pilot scenarios as plain tests, waiting on the app, typing into it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time

from specchat.widgets.reply import ReplyView


def pilot_test(scenario):
    """Run an async Pilot scenario as a plain test (no asyncio plugin needed)."""

    @functools.wraps(scenario)
    def test(*args, **kwargs):
        asyncio.run(scenario(*args, **kwargs))

    return test


async def until(pilot, condition, what: str = "the condition") -> None:
    """Let the app run until `condition()` holds (the engine thread posts at its own pace; a
    loaded machine can take minutes to load and run a real model, hence the generous limit)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"gave up waiting for {what}")


async def ready(pilot) -> None:
    await until(
        pilot,
        lambda: (
            pilot.app.session.model is not None
            and pilot.app.proposer_name != "off"
            and not pilot.app.query_one("#prompt").disabled
        ),
        "the model",
    )


async def say(pilot, text: str) -> None:
    pilot.app.query_one("#prompt").value = text
    await pilot.press("enter")


async def command(pilot, text: str) -> None:
    """Send a slash command (/export, /k 3, ...) and let the app act on it."""
    await say(pilot, text)
    await pilot.pause()


async def answer(pilot, text: str) -> str:
    """What the app says (its last notification) in answer to the slash command `text`."""
    notes = recorded_notes(pilot.app)
    await command(pilot, text)
    return notes[-1]


async def opened(pilot, key: str) -> None:
    """Press a key that opens a screen (ctrl+s, ?) and let the screen come up."""
    await pilot.press(key)
    await pilot.pause()


async def ask(pilot, text: str) -> None:
    """Send a message and wait until its reply has finished and is laid out as finished (the
    reply closes once its last tokens are painted: its final view comes at the next refresh)."""
    await say(pilot, text)
    await until(pilot, lambda: pilot.app.gen is None and reply(pilot.app).status, "the reply")
    await pilot.pause()


def steps_shown(app) -> int:
    return len(app.stats.history)


def reply(app) -> ReplyView:
    return app.query(ReplyView).last()


def recorded_notes(app) -> list[str]:
    """What the app tells the user in notifications, kept for the test to read."""
    notes = []
    app.notify = lambda message, **kw: notes.append(str(message))
    return notes


class LetterTokenizer:
    """Token i is one letter; enough of a tokenizer for the chat to encode and decode."""

    chat_template = None
    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) % 26 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)

    def get_vocab(self) -> dict:
        return {}


@contextlib.asynccontextmanager
async def chat(app, size: tuple[int, int] = (120, 40)):
    """The app running under Pilot with its model loaded: `async with chat(app) as pilot:`."""
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        yield pilot


async def stepped(pilot, session, text: str, steps: int) -> None:
    """Send `text` to a stepwise scripted session and let its reply run `steps` steps on screen."""
    await say(pilot, text)
    session.release(steps)
    await until(pilot, lambda: len(pilot.app.stats.history) == steps, f"{steps} steps")
