"""The chat's engine side: the model, its proposers, and a reply run as messages.

Everything here runs in background threads (the app's one engine worker, or a loader thread)
and talks to the app only through `post`, Textual's thread-safe `post_message`.
"""

from __future__ import annotations

from collections.abc import Callable

from engine import (
    MAX_K,
    Detokenizer,
    EngineError,
    Generation,
    Proposer,
    ProposerSpec,
    SamplingParams,
    find_spec,
    load_proposer,
    offered,
    stream,
)
from specchat.messages import ReplyDone, StepDone
from specchat.options import load_target, proposer_options, sources

Post = Callable[[object], object]


def clamp_k(k: int, proposer: Proposer | None = None) -> int:
    """k within 1..MAX_K, and within what the proposer can draft (a DFlash drafter's block)."""
    return proposer.clamp(k) if proposer is not None else max(1, min(MAX_K, k))


def chat_name(spec: ProposerSpec) -> str:
    """A proposer's name in the chat (its panel, /proposer, the saved settings): its label, lower case."""
    return spec.label.lower()


class ChatSession:
    """The target model and the proposers the chat can switch between.

    `args` are the chat's command-line options (model, device, dtype, max_context, draft,
    dflash, sample_drafts); `model` skips loading (tests pass a small model)."""

    def __init__(self, args, model=None):
        self.args = args
        self.model = model
        self._proposers: dict[str, Proposer] = {}

    @property
    def label(self) -> str:
        if self.model is None:
            return self.args.model
        return f"{self.model.name} · {self.model.device.type}"

    def load(self, progress: Callable[[str], None]) -> str:
        """Load the target model (slow: call from a thread). Returns its label."""
        if self.model is None:
            self.model = load_target(self.args, progress)
        return self.label

    def proposer_names(self) -> list[str]:
        """The proposers this chat can offer, in the order a key cycles through them: those that
        need nothing, and those whose need (a draft model, a drafter) was given or is in the cache
        for the loaded model (a DFlash drafter `specchat train-dflash` wrote)."""
        return ["off", *(chat_name(spec) for spec in offered(sources(self.args), self.model))]

    def needs_loading(self, name: str) -> bool:
        return name != "off" and find_spec(name).need is not None and name not in self._proposers

    def proposer(self, name: str, k: int, progress: Callable[[str], None] = print) -> Proposer | None:
        """The proposer called `name` with k drafts per step (None for "off"). Loads a draft
        model or drafter the first time (slow: call from a thread when `needs_loading`)."""
        if name == "off":
            return None
        if name not in self.proposer_names():
            raise EngineError(f"no proposer {name!r}; choose one of {', '.join(self.proposer_names())}")
        if name not in self._proposers:
            self._proposers[name] = self._build(name, progress)
        proposer = self._proposers[name]
        proposer.k = proposer.clamp(k)  # read by the generation at its next step
        return proposer

    def _build(self, name: str, progress) -> Proposer:
        return load_proposer(name, self.model, proposer_options(self.args, progress)).make()

    def prompt_ids(self, history: list[dict], system: str) -> list[int]:
        return self.model.encode_chat(history, system or None)

    def stream(self, ids: list[int], sampling: SamplingParams, proposer: Proposer | None) -> Generation:
        return stream(self.model, ids, sampling, stop_ids=self.model.stop_ids(), speculative=proposer)

    def decode(self, ids: list[int]) -> str:
        return self.model.tokenizer.decode(ids)

    def detokenizer(self) -> Detokenizer:
        return Detokenizer(self.decode, set(self.model.stop_ids()))

    def run_reply(self, reply: int, gen: Generation, post: Post) -> None:
        """Run a reply to its end, posting one StepDone per step, then ReplyDone."""
        detok = self.detokenizer()
        finished = "stop"
        try:
            for step in gen:
                pieces = [detok.add(t) for t in step.tokens]
                refused = self.decode(step.rejected) if step.rejected else ""
                post(StepDone(reply, step, pieces, refused))
                finished = step.finished or finished
        except EngineError as err:
            post(ReplyDone(reply, "error", str(err)))
            return
        except Exception as err:  # noqa: BLE001 - the chat outlives any engine failure
            post(ReplyDone(reply, "error", f"{type(err).__name__}: {err}"))
            return
        post(ReplyDone(reply, finished))
