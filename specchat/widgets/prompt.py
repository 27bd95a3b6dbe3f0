"""The message box: several lines (shift+enter or ctrl+j), enter sends, up and down walk back through
the messages sent. On an empty box, + - and ? are commands; anywhere else they are text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

COMMAND_KEYS = ("plus", "equals_sign", "minus", "question_mark")
NEW_LINE_KEYS = ("shift+enter", "ctrl+j")  # terminals without shift+enter send ctrl+j for it


class PromptInput(TextArea):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("plus,equals_sign", "app.k(1)", "k+", key_display="+"),
        Binding("minus", "app.k(-1)", "k−", key_display="-"),
        Binding("question_mark", "app.help", "help", key_display="?"),
    ]

    @dataclass
    class Submitted(Message):
        """Enter was pressed: `value` is the box's text."""

        input: PromptInput
        value: str

        @property
        def control(self) -> PromptInput:
            return self.input

    def __init__(self, placeholder: str = "", **kw) -> None:
        super().__init__(placeholder=placeholder, compact=True, highlight_cursor_line=False, **kw)
        self.sent: list[str] = []  # the messages sent from this box, oldest first
        self.back = 0  # how far up the history the box shows (0: the text being written)
        self.draft = ""  # the text being written, kept while the history is browsed

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.text = text
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        if not self.text and event.key in COMMAND_KEYS:
            event.prevent_default()  # not typed: the key goes on to the bindings above
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.submit()
        elif event.key in NEW_LINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
        else:
            await super()._on_key(event)

    def submit(self) -> None:
        text = self.text
        if text.strip() and (not self.sent or self.sent[-1] != text):
            self.sent.append(text)
        self.back, self.draft = 0, ""
        self.post_message(self.Submitted(self, text))

    def action_cursor_up(self, select: bool = False) -> None:
        if select or not self.cursor_at_first_line or self.back == len(self.sent):
            super().action_cursor_up(select)
            return
        if self.back == 0:
            self.draft = self.text
        self.back += 1
        self.value = self.sent[-self.back]

    def action_cursor_down(self, select: bool = False) -> None:
        if select or not self.cursor_at_last_line or self.back == 0:
            super().action_cursor_down(select)
            return
        self.back -= 1
        self.value = self.sent[-self.back] if self.back else self.draft
