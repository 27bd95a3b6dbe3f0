"""Where the teaching view puts a step's refused drafts: at the end of the word the correction is
in, so struck-through guesses never cut a word of the reply in two ("qu~~ack~~ick").

Whether a word ends after a correction is known only from the text that follows, so the guesses
are held (the step's tokens show at once) and come with the first piece that begins a new word,
in whichever step that is. Each piece keeps the step it came from, for the step inspector."""

from __future__ import annotations

from specchat.feed import ShownStep

Pieces = list[tuple[str, str]]


def joins(before: str, after: str) -> bool:
    """Whether `after` goes on the word that `before` ends in."""
    return bool(before) and bool(after) and is_word(before[-1]) and is_word(after[0])


def is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class RefusedAtWordEnd:
    """One per reply, fed every step in order (feed.shown_step's: its tokens, then its guesses)."""

    def __init__(self) -> None:
        # guesses waiting for a word's end, each with its step
        self.held: list[tuple[tuple[str, str], object]] = []
        self.last = ""  # the reply's last piece of text so far

    def place(self, shown: ShownStep, final: bool = False) -> ShownStep:
        """`shown` with the guesses held so far, and its own, at word ends (`origins` set where a
        piece came from an earlier step); `final`: the reply's last step, nothing stays held."""
        placed: list[tuple[tuple[str, str], object]] = []
        for text, kind in shown.pieces:
            if kind == "refused":
                self.held.append(((text, kind), shown.step))
                continue
            if self.held and not joins(self.last, text):
                placed += self.held
                self.held = []
            placed.append(((text, kind), shown.step))
            self.last = text
        if self.held and (final or not is_word(self.last[-1:] or " ")):
            placed += self.held
            self.held = []
        shown.pieces = [piece for piece, _ in placed]
        if any(step is not shown.step for _, step in placed):
            shown.origins = [step for _, step in placed]
        return shown
