"""The settings screen: sampling, the system prompt and the theme."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from textual import on
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from engine import EngineError
from specchat.settings import Settings

FIELDS = (  # attribute, label, type
    ("temperature", "temperature", float),
    ("top_k", "top-k", int),
    ("top_p", "top-p", float),
    ("seed", "seed", int),
    ("max_tokens", "max tokens", int),
    ("system", "system prompt", str),
)


class SettingsScreen(ModalScreen[Settings | None]):
    """Edits a copy of the settings; dismisses with the new settings, or None to keep the old."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "dismiss(None)", "cancel"),
        Binding("ctrl+s", "save", "save"),
    ]

    def __init__(self, settings: Settings, themes: list[str]):
        super().__init__()
        self.settings = settings
        self.themes = themes

    def compose(self):
        with Vertical(id="settings"):
            yield Label("Settings · sampling applies from the next reply", classes="heading")
            with Grid(id="settings-grid"):
                for name, label, _ in FIELDS:
                    yield Label(label)
                    yield Input(str(getattr(self.settings, name)), id=name, compact=True)
                yield Label("theme")
                yield Select(
                    [(t, t) for t in self.themes],
                    value=self.settings.theme,
                    allow_blank=False,
                    id="theme",
                    compact=True,
                )
            yield Label("", id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="save", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def edited(self) -> Settings:
        """The settings as typed (EngineError naming the field that is not a valid value)."""
        values = {}
        for name, label, kind in FIELDS:
            text = self.query_one(f"#{name}", Input).value.strip()
            try:
                values[name] = kind(text)
            except ValueError:
                raise EngineError(
                    f"{label}: {text!r} is not a {'whole number' if kind is int else 'number'}"
                ) from None
        values["theme"] = self.query_one("#theme", Select).value
        settings = replace(self.settings, **values)
        settings.sampling()  # checks the ranges
        return settings

    @on(Input.Submitted)
    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        try:
            self.dismiss(self.edited())
        except EngineError as err:
            self.query_one("#settings-error", Label).update(str(err))

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
