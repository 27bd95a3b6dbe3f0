"""The chat's engine side: the model, its proposers, and a reply run as messages.

Everything here runs in background threads (the app's one engine worker, or a loader thread)
and talks to the app only through `post`, Textual's thread-safe `post_message`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from engine import DraftProposer, EngineError, Generation, NgramProposer, Proposer, SamplingParams, stream
from engine.proposers.base import MAX_K
from specchat.feed import StepFeed, shown_step
from specchat.messages import ReplyDone

Post = Callable[[object], object]

PROPOSERS = ("off", "n-gram", "draft", "dflash")  # the order a key cycles through them


def clamp_k(k: int, proposer: Proposer | None = None) -> int:
    """k within 1..MAX_K, and within what a DFlash drafter's block gives."""
    drafter = getattr(proposer, "drafter", None)
    top = min(MAX_K, drafter.block_size - 1) if drafter is not None else MAX_K
    return max(1, min(top, k))


class Detokenizer:
    """Text of each token of a reply as it arrives, so every piece of text keeps its token's style.

    For a step's tokens it decodes a short window (from the token before the last complete piece)
    grown by one token at a time, in one batch, and takes the differences; a token that ends
    inside a multi-byte character yields "" and its bytes come out with the token that completes
    the character."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        skip: set[int] = frozenset(),
        decode_batch: Callable[[list[list[int]]], list[str]] | None = None,
    ):
        self.decode_batch = decode_batch or (lambda windows: [decode(ids) for ids in windows])
        self.skip = skip  # stop tokens: they end the reply, they show no text
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # tokens before this are already shown

    def add(self, tokens: list[int]) -> list[str]:
        """The text of each of `tokens` ("" for a stop token or an incomplete character)."""
        first = len(self.ids)
        self.ids += [t for t in tokens if t not in self.skip]
        ends = range(self.read, len(self.ids) + 1)
        texts = self.decode_batch([self.ids[self.prefix : end] for end in ends]) if len(ends) > 1 else []
        shown, prefix = (texts[0] if texts else ""), self.prefix
        pieces = {}
        for end, text in zip(ends[1:], texts[1:]):
            if len(text) > len(shown) and not text.endswith("\ufffd"):
                pieces[end - 1] = text[len(shown) :]
                shown, prefix, self.read = text, self.read, end
        self.prefix = prefix
        texts_by_token, at = [], first
        for t in tokens:
            if t in self.skip:
                texts_by_token.append("")
            else:
                texts_by_token.append(pieces.get(at, ""))
                at += 1
        return texts_by_token


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
        return names

    def needs_loading(self, name: str) -> bool:
        return name in ("draft", "dflash") and name not in self._proposers

    def proposer(self, name: str, k: int, progress: Callable[[str], None] = print) -> Proposer | None:
        """The proposer called `name` with k drafts per step (None for "off"). Loads a draft
        model or drafter the first time (slow: call from a thread when `needs_loading`)."""
        if name == "off":
            return None
        if name not in self._proposers:
            self._proposers[name] = self._build(name, progress)
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
        batch = getattr(self.model.tokenizer, "batch_decode", None)
        return Detokenizer(self.decode, set(self.model.stop_ids()), batch)

    def run_reply(self, gen: Generation, feed: StepFeed, post: Post) -> None:
        """Run a reply to its end, putting each step's text into `feed`, then post ReplyDone."""
        detok = self.detokenizer()
        finished = "stop"
        try:
            for step in gen:
                refused = self.decode(step.rejected) if step.kind == "correction" and step.rejected else ""
                feed.put(shown_step(step, detok.add(step.tokens), refused))
                finished = step.finished or finished
        except EngineError as err:
            post(ReplyDone(feed.reply, "error", str(err)))
            return
        except Exception as err:  # noqa: BLE001 - the chat outlives any engine failure
            post(ReplyDone(feed.reply, "error", f"{type(err).__name__}: {err}"))
            return
        post(ReplyDone(feed.reply, finished))
