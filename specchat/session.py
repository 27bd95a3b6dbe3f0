"""The chat's engine side: the model, its proposers, and a reply run as messages.

Everything here runs in background threads (the app's one engine worker, or a loader thread)
and talks to the app only through `post`, Textual's thread-safe `post_message`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from engine import (
    AUTO,
    MAX_K,
    Detokenizer,
    EngineError,
    Generation,
    Proposer,
    ProposerSpec,
    SamplingParams,
    find_spec,
    load_proposer,
    missing,
    offered,
    rehearse,
    stream,
)
from specchat.feed import StepFeed
from specchat.messages import ReplyDone
from specchat.options import load_target, proposer_options, sources

Post = Callable[[object], object]


def clamp_k(k: int | str, proposer: Proposer | None = None) -> int | str:
    """k within 1..MAX_K, and within what the proposer can draft (a DFlash drafter's block);
    "auto" stays "auto"."""
    if k == AUTO:
        return k
    return proposer.clamp(k) if proposer is not None else max(1, min(MAX_K, k))


def k_position(k: int | str) -> int:
    """Where k sits on the chat's k control: 1 .. MAX_K, then "auto" (chosen each step)."""
    return MAX_K + 1 if k == AUTO else k


def next_k(k: int | str, change: int) -> int | str:
    """The k control's value `change` places from k: one past MAX_K is "auto"; further is out of
    range (clamp_k brings it back to MAX_K)."""
    if k == AUTO and change >= 0:
        return AUTO
    position = k_position(k) + change
    return AUTO if position == MAX_K + 1 else position


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
        self.refused: dict[str, str] = {}  # proposers that failed to load, and why: not offered again
        self.sampling = SamplingParams()  # the chat's settings: warm-ups capture graphs for them

    @property
    def label(self) -> str:
        if self.model is None:
            return self.args.model
        return f"{self.model.name} · {self.model.device.type}"

    def load(self, progress: Callable[[str], None]) -> str:
        """Load the target model and make it ready for the first reply (slow: call from a thread).
        Returns its label."""
        if self.model is None:
            self.model = load_target(self.args, progress)
            # the detokenizer's byte table and the stop tokens it reads, worked out once here
            # rather than on the first reply's Enter
            self.detokenizer()
            self.warm_up(None, progress)
        return self.label

    def warm_up(self, proposer: Proposer | None, progress: Callable[[str], None]) -> None:
        """Compile the kernels and capture the CUDA graphs that replies with the chat's sampling
        settings will run (the target's, or a proposer's once it loads), then rehearse a short
        reply with them, so the first reply is as fast as later ones; on the CPU there is nothing
        to do."""
        if getattr(self.model, "graphs", None) is None:
            return
        progress("compiling kernels and capturing CUDA graphs (once per start)")
        if proposer is None:
            self.model.warm_up(self.sampling, progress=progress)
        else:
            proposer.warm_up(self.model, self.sampling, progress)
        # what the graphs leave out (drafts' acceptance, first allocations and kernel loads) runs
        # once now, not in the user's first reply
        progress("rehearsing a reply")
        rehearse(self.model, proposer, self.sampling)

    def proposer_names(self) -> list[str]:
        """The proposers this chat can offer, in the order a key cycles through them: those that
        need nothing, and those whose need (a draft model, a drafter) was given or is in the cache
        for the loaded model (a DFlash drafter `specchat train-dflash` wrote), less those refused at load."""
        names = ["off", *(chat_name(spec) for spec in offered(sources(self.args), self.model))]
        return [name for name in names if name not in self.refused]

    def missing_proposers(self) -> dict[str, str]:
        """Why each proposer left out of `proposer_names` is not offered (label -> reason)."""
        failed = {name: f"did not load: {why}" for name, why in self.refused.items()}
        return {**missing(sources(self.args), self.model), **failed}

    def needs_loading(self, name: str) -> bool:
        return name != "off" and find_spec(name).need is not None and name not in self._proposers

    def proposer(self, name: str, k: int | str, progress: Callable[[str], None] = print) -> Proposer | None:
        """The proposer called `name` with k drafts per step or "auto" (None for "off"). Loads a draft
        model or drafter the first time (slow: call from a thread when `needs_loading`)."""
        if name == "off":
            return None
        if name not in self.proposer_names():
            raise EngineError(f"no proposer {name!r}; choose one of {', '.join(self.proposer_names())}")
        if name not in self._proposers:
            try:
                self._proposers[name] = self._build(name, progress)
                self.warm_up(self._proposers[name], progress)
            except EngineError as err:
                self.refused[name] = str(err)
                raise
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
        """The text of `ids`, special tokens (`<|im_end|>`) written out (the inspector names them)."""
        return self.model.tokenizer.decode(ids)

    def detokenizer(self) -> Detokenizer:
        return Detokenizer.of(self.model)

    def run_reply(self, gen: Generation, feed: StepFeed, post: Post) -> None:
        """Run a reply to its end, putting each step into `feed` (the app decodes their text
        frame by frame), then post ReplyDone."""
        feed.began = time.perf_counter()
        finished = "stop"
        try:
            for step in gen:
                feed.put(step)
                finished = step.finished or finished
        except EngineError as err:
            post(ReplyDone(feed.reply, "error", str(err)))
            return
        except Exception as err:  # noqa: BLE001 - the chat outlives any engine failure
            post(ReplyDone(feed.reply, "error", f"{type(err).__name__}: {err}"))
            return
        post(ReplyDone(feed.reply, finished))
