"""Past chats: every saved transcript, the latest first, one line each; enter reopens the one picked.

A file that cannot be read as a chat is listed with why, greyed out, and left on disk as it is."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from specchat.settings import ChatRecord, data_dir

FIRST_WORDS = 8


def first_words(record: ChatRecord) -> str:
    said = next((m["content"] for m in record.messages if m["role"] == "user"), "")
    words = said.split()
    return " ".join(words[:FIRST_WORDS]) + (" …" if len(words) > FIRST_WORDS else "")


def chat_line(record: ChatRecord) -> Content:
    """When, on what model, how long, and how it began."""
    turns = sum(1 for m in record.messages if m["role"] == "user")
    length = f"{turns} message{'s' if turns != 1 else ''}" + (
        f", {len(record.unsent)} unsent" if record.unsent else ""
    )
    return Content.assemble(
        (record.started[:16], "$text-accent"),
        "  ",
        (record.model, "$text-muted"),
        "  ",
        (length, "$text-muted"),
        "  ",
        first_words(record),
    )


def unreadable_line(path: Path, why: str) -> Content:
    return Content.styled(f"{path.name}: {why} (the file is kept as it is)", "$text-error")


class ChatsScreen(ModalScreen[ChatRecord | None]):
    """The saved chats but the one open now (`skip`); dismissed with the record picked, or None."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,ctrl+o", "dismiss(None)", "close"),
    ]

    def __init__(self, skip: str = "") -> None:
        super().__init__()
        self.records: dict[str, ChatRecord] = {}
        self.lines: list[Option] = []
        for path in ChatRecord.saved():
            if path.stem == skip:
                continue
            try:
                record = ChatRecord.read(path)
            except ValueError as err:
                self.lines.append(Option(unreadable_line(path, str(err)), disabled=True))
                continue
            if record.messages:
                self.records[path.stem] = record
                self.lines.append(Option(chat_line(record), id=path.stem))

    @property
    def note(self) -> str:
        if not self.records:
            return f"no saved chat to reopen yet: each chat is saved as you talk, in {data_dir() / 'transcripts'}"
        return "enter reopens the chat picked · esc closes"

    def compose(self):
        with Vertical(id="chats"):
            yield Static(Content.styled("Past chats", "bold"), classes="heading")
            yield Static(Content.styled(self.note, "$text-muted"), id="chats-note")
            if self.lines:
                yield OptionList(*self.lines, id="chats-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.records[event.option.id])
