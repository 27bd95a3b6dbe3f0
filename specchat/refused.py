"""Where the teaching view puts a step's refused drafts: at the end of the word the correction is
in, so struck-through guesses never cut a word of the reply in two ("qu~~ack~~ick")."""

from __future__ import annotations

Pieces = list[tuple[str, str]]


def joins(before: str, after: str) -> bool:
    """Whether `after` goes on the word that `before` ends in."""
    return bool(before) and bool(after) and is_word(before[-1]) and is_word(after[0])


def is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class RefusedAtWordEnd:
    """Holds refused drafts back while the reply is inside a word; one per reply, fed every step's
    pieces in order (feed.shown_step's: the step's tokens, then its refused drafts)."""

    def __init__(self) -> None:
        self.held: Pieces = []
        self.last = ""  # the reply's text so far, its last piece

    def place(self, pieces: Pieces, final: bool = False) -> Pieces:
        """The pieces with refused drafts moved to the next word end; `final`: the reply's last step,
        whatever is still held goes at its end."""
        placed: Pieces = []
        for text, kind in pieces:
            if kind == "refused":
                self.held.append((text, kind))
                continue
            if self.held and not joins(self.last, text):
                placed += self.held
                self.held = []
            placed.append((text, kind))
            self.last = text
        if self.held and (final or (self.last and not is_word(self.last[-1]))):
            placed += self.held
            self.held = []
        return placed
