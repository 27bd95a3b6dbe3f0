"""The conversation: your messages, and replies whose every token shows where it came from."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from specchat.widgets.live import LiveArea
from specchat.widgets.reply import ReplyView


class UserMessage(Static):
    """What you said."""


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

    def add_reply(self, teaching: bool, markdown: bool = False, live: LiveArea | None = None) -> ReplyView:
        """A new reply; given a live area, its unfinished end streams there (see ReplyView)."""
        reply = ReplyView(teaching, markdown, live)
        self.mount(reply)
        if live is not None:
            scrolls = self.will_scroll()
            if scrolls:  # now, not after the next layout: the chat's lines are drawn once, at their width
                self.show_vertical_scrollbar = True
            reply.block_lines = live.start(self, reply.blocks[0], scrolls)
        self.anchor()
        return reply

    def will_scroll(self) -> bool:
        """Whether the chat scrolls once your messages mounted since its last layout are laid out
        (counted at a line per line and the margin above: wrapping only adds more)."""
        laid = max((child.virtual_region_with_margin.bottom for child in self.children if child.size), default=0)
        coming = sum(m.content.plain.count("\n") + 2 for m in self.query_children(UserMessage) if not m.size)
        return laid + coming > self.container_size.height - self.scrollbar_size_horizontal

    def set_teaching(self, teaching: bool) -> None:
        for reply in self.query(ReplyView):
            reply.set_teaching(teaching)

    def set_markdown(self, markdown: bool) -> None:
        for reply in self.query(ReplyView):
            reply.set_markdown(markdown)

    def clear(self) -> None:
        for reply in self.query(ReplyView):
            if reply.live is not None:
                reply.live.stop()
        self.query(UserMessage).remove()
        self.query(ReplyView).remove()
