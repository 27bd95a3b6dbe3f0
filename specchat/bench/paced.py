"""A scripted engine that keeps a device's pace: the chat's display measured without a model.

Each step spends PYTHON_S of Python (holding the GIL, as the real engine's host loop does), then
sleeps for the rest of the step's time (releasing it, as the real engine does while it waits for
the device). Steps emit `step_tokens` tokens at `tok_s` tokens per second, so a display that keeps
up shows `tokens` tokens in tokens / tok_s seconds.
"""

from __future__ import annotations

import inspect
import re
import textwrap
import threading
import time
from argparse import Namespace
from types import SimpleNamespace

from engine import Metrics, Proposer, Step
from specchat.session import ChatSession

PYTHON_S = 0.0004  # host work per step
CORRECTION_EVERY = 5  # every fifth speculative step refuses its last draft
EOS = 0


def vocabulary() -> list[str]:
    """Tokens of real code (textwrap's source) in pieces of a few characters, as a BPE cuts it."""
    source = inspect.getsource(textwrap)
    return ["", *re.findall(r" ?\w{1,6}|\n +|\n|[^\w\n]{1,3}", source)]


VOCAB = vocabulary()


class PacedProposer(Proposer):
    """Stands for any proposer: the paced generation drafts by script, never by asking it."""

    def __init__(self, name: str, k: int) -> None:
        super().__init__(k=k)
        self.name = name

    def propose(self, context, k):
        raise AssertionError("a paced generation drafts by script")


class PacedGeneration:
    """`tokens` tokens after the prefill's one, `step_tokens` per step, at `tok_s` tokens per second."""

    def __init__(self, tokens: int, step_tokens: int, tok_s: float, speculative: Proposer | None = None):
        self.tokens, self.step_tokens, self.tok_s = tokens, step_tokens, tok_s
        self.speculative = speculative
        self.metrics = Metrics()
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def __iter__(self):
        yield self._emit(Step([1], [], 0, "plain", 0, "off", 0.0, 0.0, 0, prefill=True))
        position = 1
        while position <= self.tokens:
            if self._cancel.is_set():
                yield self._emit(Step([], [], 0, "plain", 0, "off", 0.0, 0.0, position, finished="cancelled"))
                return
            n = min(self.step_tokens, self.tokens - position + 1)
            step = self._step(position, n)
            position += n
            if position > self.tokens:
                step.finished = "length"
            yield self._emit(step)

    def _step(self, position: int, n: int) -> Step:
        began = time.perf_counter()
        while time.perf_counter() - began < PYTHON_S:
            pass  # the host's Python: holds the GIL but for the interpreter's switches
        python_s = time.perf_counter() - began
        time.sleep(max(self.step_tokens / self.tok_s - python_s, 0.0))  # the device's share
        device_s = time.perf_counter() - began - python_s
        tokens = [1 + (position + i) % (len(VOCAB) - 1) for i in range(n)]
        if self.step_tokens == 1:
            return Step(tokens, [], 0, "plain", 0, "off", python_s, device_s, position)
        name = getattr(self.speculative, "name", "paced")
        if (position // self.step_tokens) % CORRECTION_EVERY == CORRECTION_EVERY - 1:
            drafts = tokens[:-1] + [tokens[-1] % (len(VOCAB) - 1) + 1, tokens[-1]]
            return Step(tokens, drafts, n - 1, "correction", n, name, python_s, device_s, position)
        return Step(tokens, tokens[:-1], n - 1, "bonus", n - 1, name, python_s, device_s, position)

    def _emit(self, step: Step) -> Step:
        self.metrics.add(step)
        return step


class PacedSession(ChatSession):
    """A chat session whose replies come from PacedGeneration: `tokens` per reply, `step_tokens`
    per step (1: plain decoding), `tok_s` tokens per second."""

    def __init__(self, tokens: int, step_tokens: int, tok_s: float) -> None:
        super().__init__(Namespace(model="paced", draft=None, dflash=None))
        self.tokens, self.step_tokens, self.tok_s = tokens, step_tokens, tok_s
        self.model = SimpleNamespace(
            name="paced",
            device=SimpleNamespace(type="cpu"),
            tokenizer=SimpleNamespace(decode=self.decode),
            stop_ids=lambda: [EOS],
        )

    def _build(self, name: str, progress) -> Proposer:
        return PacedProposer(name, k=4)

    def prompt_ids(self, history: list[dict], system: str) -> list[int]:
        return [1, 2, 3]

    def stream(self, ids, sampling, proposer) -> PacedGeneration:
        return PacedGeneration(self.tokens, self.step_tokens, self.tok_s, proposer)

    def decode(self, ids: list[int], specials: bool = True) -> str:
        return "".join(VOCAB[i] for i in ids)
