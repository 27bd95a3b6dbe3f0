"""The road from the engine thread to the screen: the engine's steps, turned into styled text per frame.

The engine thread only appends each `Step` to the reply's `StepFeed`, so its host loop, which the
device waits on, does no display work and never waits for the app. The app takes all the steps
since its last look once per frame and only then decodes their text and names each token's
origin (`ShownStep`): a frame's steps in one pass, off the engine's path.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from engine import Detokenizer, Step

REFUSED_BREAK = "⏎"  # a refused line break, kept on one line so it does not reflow the reply


def token_kinds(step: Step) -> list[str]:
    """The origin of each token a step emitted: drafts kept, then its bonus or correction."""
    if step.kind == "plain":
        return ["plain"] * len(step.tokens)
    kinds = ["accepted"] * step.accepted + [step.kind]
    return kinds[: len(step.tokens)]  # a stop token or the length limit may cut the step short


@dataclass
class ShownStep:
    """One engine step as the reply shows it."""

    step: Step
    pieces: list[tuple[str, str]]  # (text, origin) per token with text, then the refused drafts
    origins: list[Step] | None = None  # each piece's step, where a refused draft waited for a word's end


def shown_step(step: Step, texts: list[str], refused: str) -> ShownStep:
    """`texts`: the text of each of step.tokens ("" while a character is incomplete);
    `refused`: the text of the refused drafts (the teaching view shows it after the correction)."""
    pieces = [(text, kind) for text, kind in zip(texts, token_kinds(step)) if text]
    if refused and step.kind == "correction":
        pieces.append((refused.replace("\n", REFUSED_BREAK), "refused"))
    return ShownStep(step, pieces)


class StepFeed:
    """The steps of one reply that the screen has not shown yet, and the reply's detokenizer.

    `put` (engine thread) and `take` (app) may run at the same time: a deque's append and
    popleft are atomic, so neither side locks or waits for the other."""

    def __init__(self, reply: int, detokenizer: Detokenizer) -> None:
        from specchat.refused import RefusedAtWordEnd  # it places ShownSteps: defined here

        self.reply = reply
        self.detokenizer = detokenizer
        self.words = RefusedAtWordEnd()
        self._steps: deque[Step] = deque()
        # perf_counter stamps of the engine thread (see specchat.timeline): its start, first step, last step
        self.began: float | None = None
        self.first_at: float | None = None
        self.last_at: float | None = None

    def put(self, step: Step) -> None:
        self._steps.append(step)
        self.last_at = time.perf_counter()
        if self.first_at is None:
            self.first_at = self.last_at

    def take(self) -> list[ShownStep]:
        """Every step put since the last take, in order, with its text."""
        taken = []
        while self._steps:
            taken.append(self._shown(self._steps.popleft()))
        return taken

    def _shown(self, step: Step) -> ShownStep:
        detok = self.detokenizer
        refused = detok.text(step.rejected) if step.kind == "correction" and step.rejected else ""
        return self.words.place(shown_step(step, detok.add(step.tokens), refused), final=bool(step.finished))
