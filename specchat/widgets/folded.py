"""A line of entries that folds onto more lines between entries, never inside one, when the terminal
is too narrow for it (text wrapping would part a key from what it does)."""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget

GAP = "  "


def fold(entries: list[Content], width: int) -> list[Content]:
    """The entries in lines of at most `width` cells (an entry wider than that gets a line of its own)."""
    lines: list[Content] = []
    line = Content("")
    for entry in entries:
        if line.cell_length and line.cell_length + len(GAP) + entry.cell_length > width:
            lines.append(line)
            line = Content("")
        line = line + GAP + entry if line.cell_length else entry
    return [*lines, line]


class Folded(Widget):
    """Shows `entries` folded to its width; its height is as many lines as that takes."""

    DEFAULT_CSS = "Folded { height: auto; }"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.entries: list[Content] = []

    def set_entries(self, entries: list[Content]) -> None:
        self.entries = entries
        self.refresh(layout=True)

    def render(self) -> Content:
        return Content("\n").join(fold(self.entries, self.size.width))

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(fold(self.entries, width))
