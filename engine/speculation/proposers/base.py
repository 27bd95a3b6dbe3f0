"""What a proposer is: something that guesses the next k tokens of a context."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.limits import AUTO, MAX_K, check_k
from engine.runtime.sampling import GREEDY
from engine.speculation.step_costs import step_costs


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens a and b share: the drafts a list of tokens keeps."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class Proposal:
    drafts: list[int]
    q: torch.Tensor | None = None  # [len(drafts), V]: the distribution each draft was sampled from

    def drafts_on(self, device: torch.device) -> torch.Tensor | None:
        """The drafts as a tensor already on `device`, if the proposer left them there."""
        return None


class DeviceProposal(Proposal):
    """Drafts left where the drafter sampled them. The verify step takes them from there, and
    the host copies them out (`drafts`) only when it needs the list, after the verify step is
    queued: a step then waits for the device once, for drafts and verified tokens together.
    So on_device must outlive the target's verify step: not a graph's output buffer, which the
    step's own replay may reuse (proposers copy such outputs out first)."""

    def __init__(self, on_device: torch.Tensor, q: torch.Tensor | None = None):
        self.on_device = on_device  # [n] token ids
        self.q = q
        self._drafts: list[int] | None = None

    def drafts_on(self, device: torch.device) -> torch.Tensor | None:
        return self.on_device if self.on_device.device == device else None

    @property
    def drafts(self) -> list[int]:
        if self._drafts is None:
            self._drafts = self.on_device.tolist()
        return self._drafts

    def read_back(self, drafts: list[int]) -> None:
        """The drafts as the step's one copy brought them back: a proposer that asks for the list
        later (a draft model's next rewind) then waits for no copy of its own."""
        self._drafts = drafts


class Proposer:
    """propose(context, k) -> Proposal; observe(context) after each step; reset(context) at the start.

    k is a number of drafts per step, or "auto": then the generation chooses k (0 included)
    every step, from `estimates` the adaptive policy keeps on the proposer.

    `context` is the whole token list: prompt, then every emitted token; its last element is the
    token the target will run next. A proposer may return fewer than k drafts (or none).
    `states` (when the proposer asked the target for hidden states, as DFlash does) holds the
    target's states for the context tokens the step made final, in order."""

    name = "proposer"
    max_k = MAX_K  # the most drafts one proposal can hold (a DFlash drafter's block sets its own)
    max_k_why = ""  # why, when a proposer's own limit is below MAX_K

    estimates = None  # what the adaptive policy has learnt of this proposer (k = "auto")
    # whether `bucket` changes with the context (then k "auto" chooses afresh every step)
    bucket_follows_text = False
    # one pass drafts every k at one cost (a DFlash block): k "auto" learns that cost once for
    # all k, not per k (step_costs.OnePassCost)
    drafts_in_one_pass = False
    # a proposer that can draw its drafts from its own distribution (--sample-drafts) sets
    # `sample`, and takes the reply's sampling in `attach`
    sample = False
    sampling = GREEDY

    def __init__(self, k: int | str):
        self.k = check_k(k, self.max_k, self.max_k_why)

    def clamp(self, k: int | str) -> int | str:
        """k brought within 1..max_k (the chat's k control moves freely across proposers)."""
        return k if k == AUTO else max(1, min(self.max_k, k))

    @property
    def sampled_drafts(self) -> bool:
        """Drafts drawn from the proposer's own distribution, verified by min(1, p/q): asked for,
        and the reply is sampled."""
        return self.sample and not self.sampling.greedy

    @property
    def members(self) -> list[Proposer]:
        """The proposers a step may draft with (several for proposer "auto")."""
        return [self]

    def bucket(self, context: list[int]) -> int:
        """Which acceptance estimates fit the next proposal from `context` (the n-gram proposer:
        the length of its match); 0 when there is nothing to propose."""
        return 1

    def known_acceptance(self) -> list[float] | None:
        """a_1.. of this proposer as something it carries measured (a DFlash drafter's own
        training), which its acceptance estimates start from and lean on; None: nothing known."""
        return None

    def drafting_seed(self, k: int, step_cost) -> float:
        """A first guess of the seconds drafting k tokens takes, before any were timed;
        step_cost(model) gives a model's table of step costs."""
        return 0.0

    def behind(self, context: list[int]) -> int:
        """Tokens of the context before its latest that a proposal now would first have to read
        (a draft model that sat steps out runs the tokens it missed): 0 for a proposer that
        follows the context as it grows, 0 or 1 within a run of drafting steps."""
        return 0

    state_layers: tuple[int, ...] = ()  # the target layers whose states it reads (a DFlash drafter's)

    def missing(self, context: list[int]) -> int:
        """Tokens before the context's latest whose target states this proposer reads but was not
        given (a DFlash drafter that let the target stop keeping them while it sat out): the
        generation computes them again and hands them to `fill` before the next proposal."""
        return 0

    def fill(self, states: torch.Tensor) -> None:
        """The target's states of the `missing` tokens, in order."""
        raise NotImplementedError

    def catch_up_seed(self, behind: int, step_cost) -> float:
        """A first guess of the seconds a proposal `behind` tokens behind takes beyond one in a
        run of drafting steps, before any catch-up was timed; `behind` below zero: -behind tokens
        whose states are computed again first (adaptive.catch_up_key)."""
        return 0.0

    def can_draft_ahead(self) -> bool:
        """Whether draft_ahead can make the next step's drafts on the device, unread."""
        return False

    def drafted_ahead(self, context: list[int]) -> bool:
        """Whether drafts for `context` were made behind the last verify step (draft_ahead): a
        proposal now costs what of that pass the host did not hide."""
        return False

    def draft_ahead(self, drafts: torch.Tensor, targets: torch.Tensor, states: torch.Tensor) -> None:
        """Queue the next step's proposal behind the verify step just queued (drafts [k] as
        verified, the model's tokens [k + 1], the step's states), before the host reads it; the
        host's observe then settles what it found, and the next propose returns it."""
        raise NotImplementedError

    def prepare_ahead(self) -> None:
        """Called on the member that will draft_ahead behind this step's verify step, before that
        step is queued: what it must read first (a drafter's states from steps it sat out) goes
        in now, ahead of the verify step, not behind it where its launch would wait for it."""

    def peek(self, context: list[int]) -> list[int] | None:
        """The drafts (up to max_k) a proposal from `context` would make, where they are known for
        next to nothing (an n-gram lookup, a pass drafted ahead); None otherwise. Deterministic
        drafts only: proposer auto learns from them what a member sitting the step out would have
        kept (AdaptivePolicy: `watched`)."""
        return None

    def take_waited(self) -> float:
        """Seconds the host waited in `peek` since last asked (a pass drafted ahead read before
        its step): device time of the pass the loop counts in the step the reading chose, as it
        would have been had the host not read it."""
        return 0.0

    def sureness(self, context: list[int]) -> float | None:
        """The proposer's own probability of the first of `peek`'s drafts, where it has one (a
        DFlash drafter's pass drafted ahead): proposer auto learns its acceptance apart where it
        is sure and where not (AdaptivePolicy: SURE, UNSURE)."""
        return None

    def first_draft(self, context: list[int]) -> int | None:
        """The first of `peek`'s drafts: proposer auto reads whether a copy agrees with a
        drafter's (AdaptivePolicy.reading)."""
        drafts = self.peek(context)
        return drafts[0] if drafts else None

    def prime(self, context: list[int]) -> None:
        """Read the context ahead of the first step (the bench does this off the clock)."""
        self.propose(context, 1)

    def idle(self, context: list[int]) -> None:
        """Called instead of propose on a step this proposer sits out (k = "auto" chose plain
        decoding or another proposer), before that step runs."""

    def reset(self, context: list[int], states: torch.Tensor | None = None) -> None:
        pass

    def propose(self, context: list[int], k: int) -> Proposal:
        raise NotImplementedError

    def observe(self, context: list[int], states: torch.Tensor | None = None) -> None:
        pass

    def attach(self, target, sampling) -> None:
        """Called with the target model and the sampling settings before the first proposal."""

    def detach(self, target) -> None:
        """Called when the generation ends or the proposer is switched away."""

    def warm_up(self, target, sampling, progress=None) -> None:
        """Compile and capture, now, what drafting for `target` with these sampling settings will
        run (a draft model's steps, a drafter's pass), so the first reply is as fast as later ones;
        `progress` is told as the graphs are captured, as Model.warm_up tells it."""
        self.warm_up_costs(target, progress=progress)

    def priced_models(self, target) -> list:
        """The models whose step costs k "auto" weighs this proposer's drafts by."""
        return [target]

    def warm_up_costs(self, target, auto: bool = False, progress=None) -> None:
        """With k "auto" (or `auto`: a member of proposer auto), time the steps the policy prices
        drafts by now, or read them from the cache: else the first reply's first step waits
        for it (0.5 s for the Coder-1.5B target and its 0.5B draft on the H200)."""
        if auto or self.k == AUTO:
            if progress is not None:
                progress("the step costs k auto weighs (timed once per model and machine)")
            for model in self.priced_models(target):
                step_costs(model)

    def describe(self) -> str:
        return f"{self.name} k={self.k}"
