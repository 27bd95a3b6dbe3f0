"""A scripted engine for the app's tests: a session whose model is a script (see ScriptedSession).

ScriptedSession replaces the model with a script: each step accepts a known number of drafts,
so a test knows which token is an accepted draft, a bonus or a correction. Like the real
Generation, it reads `speculative` (and the proposer's k) afresh at every step and honours
`cancel()` at the next one."""

from __future__ import annotations

import threading
from argparse import Namespace
from types import SimpleNamespace

from engine import Detokenizer, DraftCheck, Inspection, Metrics, Proposer, Step
from specchat.app import SpecChat, make_app
from specchat.session import ChatSession
from specchat.settings import Settings

WORDS = (
    "The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    " and",
    " runs",
    " far",
    " away",
    " into",
    " the",
    " green",
    " hills",
    " where",
    " it",
    " sleeps",
    ".",
)
REFUSED = len(WORDS)  # the token every wrong draft guesses
EOS = REFUSED + 1
VOCAB = (*WORDS, " cat", "")


class ScriptedDraft(Proposer):
    name = "draft"

    def propose(self, context, k):
        raise AssertionError("the scripted generation never asks a proposer for drafts")


class ScriptedGeneration:
    """Emits WORDS then EOS; a step with a proposer of k accepts accepts[i] drafts (capped at k)."""

    def __init__(self, speculative, accepts: list[int], gate: threading.Semaphore | None):
        self.speculative = speculative
        self.accepts = accepts
        self.gate = gate
        self.metrics = Metrics()
        self.tokens: list[int] = []
        self._cancel = threading.Event()
        self.inspect = False

    def cancel(self) -> None:
        self._cancel.set()

    def wait_for_turn(self) -> None:
        while self.gate is not None and not self.gate.acquire(timeout=0.01):
            if self._cancel.is_set():
                return

    def __iter__(self):
        text = [*range(len(WORDS)), EOS]
        pos = 1
        yield self._emit(Step([0], [], 0, "plain", 0, "off", 0.0, 0.0, 3, prefill=True, prefill_s=0.02))
        i = 0
        while pos < len(text):
            self.wait_for_turn()
            if self._cancel.is_set():
                yield self._emit(Step([], [], 0, "plain", 0, "off", 0.0, 0.0, pos + 3, finished="cancelled"))
                return
            proposer = self.speculative
            if proposer is None:
                step = Step([text[pos]], [], 0, "plain", 0, "off", 0.0, 0.010, pos + 3)
            else:
                k = proposer.k
                accepted = min(self.accepts[i % len(self.accepts)], k, len(text) - pos - 1)
                drafts = text[pos : pos + accepted] + [REFUSED] * (k - accepted)
                kind = "bonus" if accepted == k else "correction"
                step = Step(
                    text[pos : pos + accepted + 1],
                    drafts,
                    accepted,
                    kind,
                    k,
                    proposer.name,
                    0.001,
                    0.012,
                    pos + 3,
                )
            i += 1
            pos += len(step.tokens)
            if step.tokens[-1] == EOS:
                step.finished = "stop"
            yield self._emit(step)

    def _emit(self, step: Step) -> Step:
        if self.inspect and step.tokens and not step.prefill:
            step.inspection = scripted_inspection(step)
        self.tokens += step.tokens
        self.metrics.add(step)
        return step


def scripted_inspection(step: Step) -> Inspection:
    """The model is sure (0.9) of its own tokens and gives a wrong draft 0.05."""
    checks = [DraftCheck(d, i < step.accepted, 0.9 if i < step.accepted else 0.05) for i, d in enumerate(step.drafts)]
    return Inspection(step.position, list(step.tokens), [0.9] * len(step.tokens), checks,
                      [(step.tokens[-1], 0.9), (REFUSED, 0.05)], greedy=True)


class ScriptedSession(ChatSession):
    """A ChatSession whose model is the script. `stepwise`: each step waits for `release()`.
    `words`: the text of the script's len(WORDS) tokens, to script a reply of other words."""

    def __init__(self, accepts=(2, 4, 0, 1), stepwise: bool = False, words: tuple[str, ...] = WORDS):
        super().__init__(Namespace(model="scripted", draft="scripted-draft", dflash=None))
        assert len(words) == len(WORDS)
        self.vocab = (*words, *VOCAB[len(WORDS) :])
        self.accepts = list(accepts)
        self.stepwise = stepwise
        self.gate = threading.Semaphore(0)
        self.prompts: list[list[dict]] = []

    @property
    def label(self) -> str:
        return "scripted · cpu"

    def load(self, progress) -> str:
        progress("reading the script")
        self.model = SimpleNamespace(name="scripted")
        return self.label

    def _build(self, name, progress):
        if name == "draft":
            progress("draft 100%")
            return ScriptedDraft(k=4)
        return super()._build(name, progress)

    def prompt_ids(self, history, system):
        self.prompts.append(history)
        return [1, 2, 3]

    def stream(self, ids, sampling, proposer):
        return ScriptedGeneration(proposer, self.accepts, self.gate if self.stepwise else None)

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)

    def detokenizer(self) -> Detokenizer:
        return Detokenizer(self.decode, {EOS})

    def release(self, steps: int = 1) -> None:
        for _ in range(steps):
            self.gate.release()


def scripted_app(settings: Settings | None = None, save: bool = False, **script) -> SpecChat:
    """The chat on a ScriptedSession(**script) (`app.session`), saving its settings only if `save`."""
    return make_app(ScriptedSession(**script), settings or Settings(), save=save)
