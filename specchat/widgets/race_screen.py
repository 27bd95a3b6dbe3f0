"""The race's result: one column per entrant, its reply coloured by origin under its figures."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.race import Race
from specchat.widgets.reply import styled


def verdict(same: bool | None) -> tuple[str, str]:
    if same is None:
        return "same text as plain: —", "$text-muted"
    return ("same text as plain: yes", "$text-success") if same else ("same text as plain: NO", "$text-error bold")


def header(race: Race, i: int) -> Content:
    row, figures = race.rows[i], race.figures()[i]
    name = "plain decoding" if row.name == "off" else f"{row.name}, k = {row.k}"
    if row.error:
        return Content.assemble((name, "bold"), "\n", (row.error, "$text-error"))
    speedup = figures["speedup"]
    lines = [
        Content.styled(name, "bold"),
        Content(f"{figures['tokens_per_step']:.2f} tokens/step, {figures['tokens_per_second']:.1f} tok/s"),
        Content(f"acceptance {100 * figures['draft_acceptance_rate']:.0f}%" if row.name != "off" else "no drafts"),
        Content(f"speedup {speedup:.2f}x" if speedup is not None else "speedup —"),
        Content.styled(*verdict(figures["same_text_as_plain"])),
    ]
    if row.finished == "cancelled":
        lines.append(Content.styled("cancelled", "$text-warning"))
    return Content("\n").join(lines)


class RaceScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,q", "dismiss", "close"),
        Binding("e", "export", "export"),
    ]

    def __init__(self, race: Race, export) -> None:
        super().__init__()
        self.race = race
        self.export = export  # the app's: writes the files and says where

    def compose(self):
        with Horizontal(id="race"):
            for i, row in enumerate(self.race.rows):
                with VerticalScroll(classes="race-row"):
                    yield Static(header(self.race, i), classes="race-figures")
                    yield Static(styled(row.pieces, teaching=True), classes="race-text")
        yield Static(Content.styled("e exports the table (JSON and CSV) · esc closes", "$text-muted"),
                     id="race-keys")

    def action_export(self) -> None:
        self.export(self.race)
