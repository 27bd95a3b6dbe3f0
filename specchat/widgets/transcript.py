"""The conversation: your messages, and replies whose every token shows where it came from."""

from __future__ import annotations

from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.widgets import Label, LoadingIndicator, Static

from engine import Step

# One style per origin of a token: a theme colour, and a cue that survives without colour.
STYLES = {
    "accepted": "$text-success underline",  # a draft the model agreed with
    "bonus": "$text-primary bold",  # the model's own token after every draft of a step was kept
    "correction": "$text-warning reverse",  # the model's token where it refused a draft
    "plain": "",  # decoded one token per step, no drafts
    "refused": "$text-error dim strike",  # drafts refused at a correction (teaching view only)
}


def token_kinds(step: Step) -> list[str]:
    """The origin of each token a step emitted: drafts kept, then its bonus or correction."""
    if step.kind == "plain":
        return ["plain"] * len(step.tokens)
    kinds = ["accepted"] * step.accepted + [step.kind]
    return kinds[: len(step.tokens)]  # a stop token or the length limit may cut the step short


class UserMessage(Static):
    """What you said."""


class ReplyView(Static):
    """A reply as (text, origin) pieces, rendered with the origin's style."""

    def __init__(self, teaching: bool = False) -> None:
        super().__init__("")
        self.pieces: list[tuple[str, str]] = []
        self.teaching = teaching
        self.status = ""

    @property
    def text(self) -> str:
        """The reply as the model wrote it (refused drafts left out)."""
        return "".join(text for text, kind in self.pieces if kind != "refused")

    def add_step(self, step: Step, pieces: list[str], refused: str) -> None:
        for text, kind in zip(pieces, token_kinds(step)):
            if text:
                self.pieces.append((text, kind))
        if refused and step.kind == "correction":
            # kept on one line: a refused line break would reflow the reply around it
            self.pieces.append((refused.replace("\n", "⏎"), "refused"))
        self.update(self.content())

    def set_teaching(self, teaching: bool) -> None:
        self.teaching = teaching
        self.update(self.content())

    def finish(self, status: str) -> None:
        self.status = status
        self.update(self.content())

    def content(self) -> Content:
        shown = [(t, STYLES[k]) for t, k in self.pieces if self.teaching or k != "refused"]
        if not shown and not self.status:
            return Content.styled("…", "$text-muted")
        parts = [Content.assemble(*shown)]
        if self.status:
            parts.append(Content.styled(("\n" if shown else "") + self.status, "$text-muted italic"))
        return Content.assemble(*parts)


class Loading(Horizontal):
    """A spinner and the loader's latest progress line."""

    def compose(self):
        yield LoadingIndicator()
        yield Label("loading the model…", id="loading-text")

    def say(self, text: str) -> None:
        self.query_one("#loading-text", Label).update(text)


class Transcript(VerticalScroll):
    """The conversation; it follows a streaming reply unless you scroll up."""

    def on_mount(self) -> None:
        self.anchor()

    def add_note(self, text: str) -> None:
        self.mount(Static(Content(text), classes="note"))

    def add_user(self, text: str) -> UserMessage:
        message = UserMessage(Content(text))
        self.mount(message)
        return message

    def add_reply(self, teaching: bool) -> ReplyView:
        reply = ReplyView(teaching)
        self.mount(reply)
        self.anchor()
        return reply

    def set_teaching(self, teaching: bool) -> None:
        for reply in self.query(ReplyView):
            reply.set_teaching(teaching)

    def clear(self) -> None:
        self.query(UserMessage).remove()
        self.query(ReplyView).remove()
