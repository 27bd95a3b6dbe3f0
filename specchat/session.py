"""The chat's engine side: the model, its proposers, and a reply run as messages.

Everything here runs in background threads (the app's one engine worker, or a loader thread)
and talks to the app only through `post`, Textual's thread-safe `post_message`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from engine import (
    DraftProposer,
    EngineError,
    Generation,
    NgramProposer,
    Proposer,
    SamplingParams,
    check_same_vocabulary,
    stream,
)
from engine.proposers.base import MAX_K
from specchat.messages import ReplyDone, StepDone

Post = Callable[[object], object]

PROPOSERS = ("off", "n-gram", "draft", "dflash")  # the order a key cycles through them


def clamp_k(k: int, proposer: Proposer | None = None) -> int:
    """k within 1..MAX_K, and within what a DFlash drafter's block gives."""
    drafter = getattr(proposer, "drafter", None)
    top = min(MAX_K, drafter.block_size - 1) if drafter is not None else MAX_K
    return max(1, min(top, k))


class Detokenizer:
    """Text of each token of a reply as it arrives, so every piece of text keeps its token's style.

    Decodes a short window (the tokens since the last complete piece) twice, with and without
    the new tokens, and takes the difference; a token that ends inside a multi-byte character
    yields "" and its bytes come out with the token that completes the character."""

    def __init__(self, decode: Callable[[list[int]], str], skip: set[int] = frozenset()):
        self.decode = decode
        self.skip = skip  # stop tokens: they end the reply, they show no text
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # tokens before this are already shown

    def add(self, token: int) -> str:
        if token in self.skip:
            return ""
        self.ids.append(token)
        before = self.decode(self.ids[self.prefix : self.read])
        after = self.decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return after[len(before) :]


class ChatSession:
    """The target model and the proposers the chat can switch between.

    `args` are the chat's command-line options (model, device, dtype, max_context, draft,
    dflash, sample_drafts); `model` skips loading (tests pass a small model)."""

    def __init__(self, args, model=None):
        self.args = args
        self.model = model
        self._proposers: dict[str, Proposer] = {}
        self.refused: dict[str, str] = {}  # proposers that failed to load, and why: not offered again

    @property
    def label(self) -> str:
        if self.model is None:
            return self.args.model
        return f"{self.model.name} · {self.model.device.type}"

    def load(self, progress: Callable[[str], None]) -> str:
        """Load the target model (slow: call from a thread). Returns its label."""
        if self.model is None:
            from specchat.options import load_target

            self.model = load_target(self.args, progress)
        return self.label

    def proposer_names(self) -> list[str]:
        """The proposers this chat can offer: a draft or a drafter only when one was given."""
        names = ["off", "n-gram"]
        if self.args.draft:
            names.append("draft")
        if self.args.dflash and importlib.util.find_spec("engine.proposers.dflash"):
            names.append("dflash")
        return [name for name in names if name not in self.refused]

    def needs_loading(self, name: str) -> bool:
        return name in ("draft", "dflash") and name not in self._proposers

    def proposer(self, name: str, k: int, progress: Callable[[str], None] = print) -> Proposer | None:
        """The proposer called `name` with k drafts per step (None for "off"). Loads a draft
        model or drafter the first time (slow: call from a thread when `needs_loading`)."""
        if name == "off":
            return None
        if name not in self._proposers:
            try:
                self._proposers[name] = self._build(name, progress)
            except EngineError as err:
                self.refused[name] = str(err)
                raise
        proposer = self._proposers[name]
        proposer.k = clamp_k(k, proposer)  # read by the generation at its next step
        return proposer

    def _build(self, name: str, progress) -> Proposer:
        if name == "n-gram":
            return NgramProposer(k=4)
        if name == "draft":
            from engine import load_model

            target = self.model
            draft = load_model(
                self.args.draft,
                device=str(target.device),
                dtype=target.dtype,
                max_context=target.max_context,
                progress=progress,
            )
            check_same_vocabulary(target, draft)  # at load: not as every reply starts
            return DraftProposer(draft, k=4, sample=bool(getattr(self.args, "sample_drafts", False)))
        if name == "dflash":
            from engine.proposers.dflash import DFlashProposer, load_drafter

            drafter = load_drafter(self.args.dflash, self.model)
            return DFlashProposer(drafter, k=clamp_k(drafter.block_size - 1))
        raise EngineError(f"no proposer {name!r}; choose one of {', '.join(self.proposer_names())}")

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
