"""The line under the input that says what each token style means."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from specchat.widgets.transcript import STYLES

ENTRIES = (
    ("accepted", "accepted draft"),
    ("bonus", "bonus"),
    ("correction", "correction"),
    ("plain", "plain"),
)


def legend(teaching: bool) -> Content:
    parts: list = []
    for kind, name in ENTRIES:
        parts += [(name, STYLES[kind]), "  "]
    parts += [("refused", STYLES["refused"]), (f" teaching {'on' if teaching else 'off'}", "$text-muted")]
    return Content.assemble(*parts)


class Legend(Static):
    def show(self, teaching: bool) -> None:
        self.update(legend(teaching))
