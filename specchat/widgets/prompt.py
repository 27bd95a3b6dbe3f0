"""The message box. On an empty box, + - and ? are commands; anywhere else they are text."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.widgets import Input

COMMAND_KEYS = ("plus", "equals_sign", "minus", "question_mark")


class PromptInput(Input):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("plus,equals_sign", "app.k(1)", "k+", key_display="+"),
        Binding("minus", "app.k(-1)", "k−", key_display="-"),
        Binding("question_mark", "app.help", "help", key_display="?"),
    ]

    async def _on_key(self, event: events.Key) -> None:
        if not self.value and event.key in COMMAND_KEYS:
            event.prevent_default()  # not typed: the key goes on to the bindings above
