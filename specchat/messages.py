"""Messages the background threads post to the app: they never touch widgets themselves."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from engine import Proposer


@dataclass
class LoadProgress(Message):
    """A model (the target or a draft) is loading: what it is doing now."""

    what: str
    text: str


@dataclass
class ModelReady(Message):
    label: str  # "smollm2-135m · cpu"


@dataclass
class LoadFailed(Message):
    what: str
    error: str


@dataclass
class ProposerReady(Message):
    """A proposer that needed loading (a draft model, a drafter) can draft now."""

    name: str
    proposer: Proposer


@dataclass
class ReplyDone(Message):
    """A reply's engine thread has put its last step into the reply's StepFeed."""

    reply: int
    finished: str  # "stop", "length", "cancelled" or "error"
    error: str = ""


@dataclass
class RaceDone(Message):
    """The race (/compare) has run every entrant, or was stopped."""

    race: object  # specchat.race.Race
