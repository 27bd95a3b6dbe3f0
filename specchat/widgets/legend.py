"""The line under the input that says what each token style means; it folds between entries."""

from __future__ import annotations

from textual.content import Content

from specchat.widgets.folded import Folded
from specchat.widgets.origins import STYLES, TINTS

ENTRIES = (
    ("accepted", "accepted draft"),
    ("bonus", "bonus"),
    ("correction", "correction"),
    ("plain", "plain"),
)


def legend(teaching: bool, markdown: bool = False) -> list[Content]:
    """Each origin in its style; in the Markdown view with the tint that marks it there too (a reply
    being written stays raw: the colour and the cue match it, the tint the finished ones)."""
    entries = [
        Content.styled(name, f"{STYLES[kind]} {TINTS[kind] if markdown else ''}".strip())
        for kind, name in ENTRIES
    ]
    teaching_state = Content.styled(f" teaching {'on' if teaching else 'off'}", "$text-muted")
    view = Content.styled("markdown view" if markdown else "raw view", "$text-muted")
    return [*entries, Content.styled("refused", STYLES["refused"]) + teaching_state, view]


class Legend(Folded):
    def show(self, teaching: bool, markdown: bool = False) -> None:
        self.set_entries(legend(teaching, markdown))
