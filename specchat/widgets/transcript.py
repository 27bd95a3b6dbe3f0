"""The conversation: your messages, and replies whose every token shows where it came from."""

from __future__ import annotations

from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Label, LoadingIndicator, Static

# One style per origin of a token: a theme colour, and a cue that survives without colour.
STYLES = {
    "accepted": "$text-success underline",  # a draft the model agreed with
    "bonus": "$text-primary bold",  # the model's own token after every draft of a step was kept
    "correction": "$text-warning reverse",  # the model's token where it refused a draft
    "plain": "",  # decoded one token per step, no drafts
    "refused": "$text-error dim strike",  # drafts refused at a correction (teaching view only)
}
BLOCK_LINES = 24  # lines of a reply per block: a full block is not wrapped again as tokens arrive


class UserMessage(Static):
    """What you said."""


def styled(pieces: list[tuple[str, str]], teaching: bool) -> Content:
    return Content.assemble(*((t, STYLES[k]) for t, k in pieces if teaching or k != "refused"))


class ReplyView(Vertical):
    """A reply as (text, origin) pieces, each rendered in its origin's style.

    The text is shown in blocks of about BLOCK_LINES whole lines. Only the last block changes
    while tokens arrive, so each frame re-wraps the reply's last lines, not the whole reply."""

    def __init__(self, teaching: bool = False) -> None:
        self.blocks = [Static(Content.styled("…", "$text-muted"))]
        self.status_line = Static(classes="status")
        self.status_line.display = False
        super().__init__(*self.blocks, self.status_line)
        self.pieces: list[tuple[str, str]] = []
        self.teaching = teaching
        self.status = ""
        self.block_pieces: list[list[tuple[str, str]]] = [[]]
        self.block_breaks = 0  # line breaks in the last block

    @property
    def text(self) -> str:
        """The reply as the model wrote it (refused drafts left out)."""
        return "".join(text for text, kind in self.pieces if kind != "refused")

    def add(self, pieces: list[tuple[str, str]]) -> None:
        """Append the pieces of one or more steps."""
        self.pieces += pieces
        for text, kind in pieces:
            breaks = text.count("\n")
            if breaks and self.block_breaks + breaks >= BLOCK_LINES and self.is_attached:
                # the block ends at this piece's last line break, which the next block's start implies
                head, _, tail = text.rpartition("\n")
                self.block_pieces[-1] += [(head, kind)] if head else []
                self.show_block(-1)
                self.start_block()
                text, breaks = tail, 0
            if text:
                self.block_pieces[-1].append((text, kind))
            self.block_breaks += breaks
        self.show_block(-1)

    def start_block(self) -> None:
        self.block_pieces.append([])
        self.blocks.append(Static())
        self.block_breaks = 0
        self.mount(self.blocks[-1], before=self.status_line)

    def show_block(self, i: int) -> None:
        self.blocks[i].update(styled(self.block_pieces[i], self.teaching))

    def set_teaching(self, teaching: bool) -> None:
        self.teaching = teaching
        if self.pieces:
            for i in range(len(self.blocks)):
                self.show_block(i)

    def finish(self, status: str) -> None:
        self.status = status
        self.status_line.update(Content.styled(status, "$text-muted italic"))
        self.status_line.display = True
        self.blocks[0].display = bool(self.pieces)

    def content(self) -> Content:
        """The whole reply as styled text, the status line included."""
        parts = [styled(self.pieces, self.teaching)]
        if self.status:
            parts.append(Content.styled(("\n" if self.pieces else "") + self.status, "$text-muted italic"))
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
