"""The line under the input that says what each token style means; it folds between entries."""

from __future__ import annotations

from textual.content import Content

from specchat.widgets.folded import Folded
from specchat.widgets.transcript import STYLES

ENTRIES = (
    ("accepted", "accepted draft"),
    ("bonus", "bonus"),
    ("correction", "correction"),
    ("plain", "plain"),
)


def legend(teaching: bool) -> list[Content]:
    entries = [Content.styled(name, STYLES[kind]) for kind, name in ENTRIES]
    teaching_state = Content.styled(f" teaching {'on' if teaching else 'off'}", "$text-muted")
    return [*entries, Content.styled("refused", STYLES["refused"]) + teaching_state]


class Legend(Folded):
    def show(self, teaching: bool) -> None:
        self.set_entries(legend(teaching))
