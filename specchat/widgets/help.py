"""The help screen: what the colours mean, what speculative decoding does, and the keys."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from engine import proposer_specs
from specchat.widgets.transcript import STYLES

KEYS = (
    ("enter", "send the message"),
    ("shift+enter", "a new line in the message (or ctrl+j)"),
    ("up / down", "the messages sent before, from the first / last line"),
    ("esc / ctrl+c", "stop the reply (what was written stays)"),
    ("f2 / f3", "copy the last reply / its last code block"),
    ("ctrl+p", "next proposer: off, {proposers} (those given)"),
    ("+ / -", "more or fewer drafts per step (k), with the input empty"),
    ("ctrl+t", "teaching view: show refused drafts"),
    ("ctrl+b", "show or hide the speculation panel"),
    ("ctrl+s", "settings: sampling, system prompt, theme"),
    ("ctrl+n", "new chat"),
    ("f1 / ?", "this help"),
    ("ctrl+q", "quit"),
    ("/export", "write the chat as Markdown (/export FILE to choose where)"),
    ("/system", "/system TEXT sets the system prompt; /new, /k N, /proposer NAME"),
)


def explanation() -> Content:
    s = STYLES
    return Content.assemble(
        "Speculative decoding lets a cheap proposer guess the next few tokens and has the model check "
        "all of those drafts in one step, keeping each one it would have written itself, so one step "
        "can yield several tokens and the text is still the model's own.\n\n",
        "Tokens styled ",
        ("like this", s["accepted"]),
        " are drafts the model accepted, ",
        ("like this", s["bonus"]),
        " the bonus token it adds when it accepted every draft of a step, ",
        ("like this", s["correction"]),
        " its correction where it refused a draft, and ",
        ("like this", s["plain"]),
        " plain decoding, one token per step with no drafts.\n\n",
        "The teaching view (ctrl+t) shows each step's refused drafts ",
        ("like this", s["refused"]),
        " right after the correction, so you read what was guessed and what the model wanted instead.",
    )


def proposers() -> Content:
    """Every proposer the engine has, one line each (the registry's own words)."""
    return Content("\n").join(
        Content.assemble((f"{spec.label:>9}  ", "bold $text-accent"), spec.summary) for spec in proposer_specs()
    )


def keys() -> Content:
    names = ", ".join(spec.label for spec in proposer_specs())
    return Content("\n").join(
        Content.assemble((f"{key:>12}  ", "bold $text-accent"), what.format(proposers=names)) for key, what in KEYS
    )


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,f1,q,question_mark", "dismiss", "close", show=True)]

    def compose(self):
        with VerticalScroll(id="help"):
            yield Static(Content.styled("What you are looking at", "bold"), classes="heading")
            yield Static(explanation(), id="help-text")
            yield Static(Content.styled("Proposers", "bold"), classes="heading")
            yield Static(proposers(), id="help-proposers")
            yield Static(Content.styled("Keys", "bold"), classes="heading")
            yield Static(keys(), id="help-keys")
            yield Static(Content.styled("esc closes this screen", "$text-muted"))
