"""The help screen: what the colours mean, what speculative decoding does, and the keys."""

from __future__ import annotations

import re
from typing import ClassVar

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from engine import proposer_specs
from specchat.widgets.origins import STYLES

KEYS = (
    ("enter", "send the message"),
    ("shift+enter", "a new line in the message (or ctrl+j)"),
    ("up / down", "the messages sent before, from the first / last line"),
    ("esc / ctrl+c", "stop the reply (what was written stays)"),
    ("f2 / f3", "copy the last reply / its last code block"),
    ("ctrl+p", "next proposer: off, {proposers} (those given)"),
    ("+ / -", "more or fewer drafts per step (k), with the input empty"),
    ("ctrl+t", "teaching view: show refused drafts"),
    ("f5", "finished replies as Markdown or as raw text (both keep each token's origin)"),
    ("ctrl+b", "show or hide the speculation panel"),
    ("ctrl+s", "settings: sampling, system prompt, theme"),
    ("ctrl+n", "new chat"),
    ("ctrl+o", "past chats: browse the saved chats and reopen one (/chats; /resume reopens the last)"),
    ("f4", "step inspector: alt+← / alt+→ or a click picks a token, the panel shows its step"),
    ("ctrl+r", "race: your last prompt through plain decoding and every ready proposer (/compare)"),
    ("f1 / ?", "this help"),
    ("ctrl+q", "quit"),
    ("/export", "write the chat as Markdown (/export FILE to choose where)"),
    ("/stats", "write the reply's and the session's figures as JSON and CSV (vLLM's names; /stats FILE)"),
    ("/system", "/system TEXT sets the system prompt; /new, /k N, /proposer NAME"),
)


STYLED = re.compile(r"\{(\w+):([^}]*)\}")  # {accepted:like this}: words in the style of that kind of token

EXPLANATION = (
    "Speculative decoding lets a cheap proposer guess the next few tokens and has the model check "
    "all of those drafts in one step, keeping each one it would have written itself, so one step "
    "can yield several tokens and the text is still the model's own.\n\n"
    "Tokens styled {accepted:like this} are drafts the model accepted, {bonus:like this} the bonus token it "
    "adds when it accepted every draft of a step, {correction:like this} its correction where it refused a "
    "draft, and {plain:like this} plain decoding, one token per step with no drafts.\n\n"
    "The teaching view (ctrl+t) shows each step's refused drafts {refused:like this} right after the "
    "correction, so you read what was guessed and what the model wanted instead.\n\n"
    "A finished reply shows as Markdown (f5 switches to raw text and back): there the Markdown sets "
    "the colours, of highlighted code too, and each token also has a tint behind it in its origin's "
    "colour, with the same underline, bold or italic."
)

# One step, told against what is on the screen.
HOW_IT_WORKS = (
    "1. The proposer guesses k tokens (the drafts) from the text so far; cheap, and often right "
    "in code that repeats itself.\n"
    "2. The model runs once over the last token and all k drafts: one step computes its own choice "
    "after every prefix, at about the cost of one plain step.\n"
    "3. Drafts are kept while they equal the model's choice ({accepted:accepted}); at the first that does "
    "not, the model's own token replaces it ({correction:correction}), and when all are kept the model adds "
    "one more ({bonus:bonus}). With sampling, a draft is kept with chance min(1, p/q), which keeps the text "
    "the model's own in distribution.\n"
    "4. The refused drafts' cache entries are dropped, and the next step starts from the new last token.\n\n"
    "See it: f4 opens the step inspector; put the cursor on a {correction:correction} to read the model's "
    "probability of each draft, the top five it wanted instead, and what the step cost against a plain "
    "step. ctrl+r races your last prompt through every proposer: the same text as plain decoding in every "
    "column, at different speeds. The panel's tokens/step is step 3's average; its speedup is that gain "
    "less what drafting and the longer verify step cost.\n\n"
    "With k past 15 (auto) or the proposer on auto, each step is chosen from the acceptance and step "
    "costs measured so far: the panel's \"auto chose\" names the proposer and k (or a plain step) and the "
    "speed over plain steps it expected, \"drafts asked per step\" draws the choices in each proposer's "
    "colour, and the inspector says why a step was taken, a probe included (a proposer that sat out, "
    "tried again to see whether it pays)."
)


def told(text: str) -> Content:
    """Prose with its {kind:words} in the style of that kind of token, as replies show them."""
    parts = STYLED.split(text)  # prose, kind, words, prose, kind, words, ..., prose
    pieces: list[str | tuple[str, str]] = [parts[0]]
    for kind, words, prose in zip(parts[1::3], parts[2::3], parts[3::3]):
        pieces += [(words, STYLES[kind]), prose]
    return Content.assemble(*pieces)


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
            yield Static(told(EXPLANATION), id="help-text")
            yield Static(Content.styled("How speculative decoding works", "bold"), classes="heading")
            yield Static(told(HOW_IT_WORKS), id="help-how")
            yield Static(Content.styled("Proposers", "bold"), classes="heading")
            yield Static(proposers(), id="help-proposers")
            yield Static(Content.styled("Keys", "bold"), classes="heading")
            yield Static(keys(), id="help-keys")
            yield Static(Content.styled("esc closes this screen", "$text-muted"))
