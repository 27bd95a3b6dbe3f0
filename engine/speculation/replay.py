"""The adaptive policy replayed without a model: a reply described by what each proposer's drafts
would keep at every position, a machine by what its steps cost.

Each step runs as the generation loop runs it (loop.py): the policy (the real AdaptivePolicy, or
a fixed proposer and k) chooses, the text says how many drafts are kept, the machine what the
step costs, and the policy records the Step. So a bench on the CPU can set k "auto" against every
fixed k on a GPU's costs, and a test can pin what the policy does where drafting never pays.

In a greedy reply both proposers are deterministic: the draft model's drafts from position p are
kept up to the first position where it disagrees with the target, the n-gram proposer's up to
where its copy diverges. So a text is, per proposer, a `Shape`: a bucket (its reading of the
context: the n-gram proposer's match length, 0 for no match) and a run of kept drafts from each
position. A draft model that sits steps out catches up on the tokens it missed in its next
proposal, as DraftProposer does: in graph steps of MAX_STEP tokens, or op by op past
CATCH_UP_STEPS of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from engine.limits import AUTO, MAX_K, MAX_STEP
from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.loop import Step
from engine.speculation.metrics import Metrics
from engine.speculation.proposers.base import Proposer
from engine.speculation.proposers.dflash.proposer import CATCH_UP_SHARE, DRAFTING_SHARE
from engine.speculation.proposers.draft.proposer import CATCH_UP_STEPS, DraftProposer
from engine.speculation.step_costs import CostTable

PROMPT = 1600  # tokens before the reply: only the context's length is read


def verify_cost(points: dict[int, float]) -> Callable[[int], float]:
    """A target step's seconds by its length from milliseconds measured at some lengths: straight
    between them, the longest one's past it (a `Machine`'s `verify`)."""
    known = sorted(points)

    def cost(n: int) -> float:
        for lo, hi in pairwise(known):
            if n <= hi:
                return 1e-3 * (points[lo] + (points[hi] - points[lo]) * (n - lo) / (hi - lo))
        return 1e-3 * points[known[-1]]

    return cost


@dataclass
class Machine:
    """Seconds of each kind of step."""

    verify: Callable[[int], float]  # a target step of n tokens, its host read included (1: a plain step)
    decode: float  # a plain step in plain decoding's runs (no host wait between them)
    lookup: float  # an n-gram proposal
    first: float  # a draft model's first step: the tokens it has not seen (up to MAX_STEP), its first draft
    chained: float  # each further draft
    eager: float  # a first step of more than MAX_STEP tokens run op by op (no CUDA graph)
    host: float  # the policy's own time per step (k "auto")
    host_member: float = 0.0  # ... and more per member beyond the first (proposer "auto")
    block_pass: float = 0.0  # a DFlash drafter's pass, the extra cost of its verify step's states included
    block_catch_up: float = 0.0  # its catch-up on the states of more than a step's worth of tokens
    # a pass drafted behind the verify step before it (DFlashProposer.draft_ahead; None: every
    # pass is made after the host's read): what of it the host still waits for, and the device
    # time it adds to the verify step queued behind it
    block_ahead: float | None = None
    block_device: float = 0.0
    # the policy's host time where it takes the last choice again unweighed (AdaptivePolicy.repeat;
    # None: `host`)
    host_repeat: float | None = None
    # the host's wait for a witness's first draft (the pass drafted ahead, read before choosing:
    # AdaptivePolicy.reading), and what of the choice it can then no longer hide behind the pass
    peek: float = 0.0
    # the share of the policy's host time that follows that read (the chosen option's last
    # weighing, the members it watches, the proposal, the launches): with the device idle, not
    # hidden behind the pass
    after_read: float = 0.0
    noise: float = 0.02  # relative spread of every step's time
    stalls: float = 0.0  # share of steps the host stalls in (a collection, another thread)
    stall: float = 0.0  # seconds a stall adds to its step
    chunked: bool = True  # a catch-up of up to CATCH_UP_STEPS steps' tokens runs as graph steps


@dataclass
class Shape:
    """One proposer's view of a reply: bucket and kept-draft run at every position."""

    buckets: list[int]
    runs: list[int]
    firsts: list[int] | None = None  # its first draft at every position (-1: none), where traced
    sure: list[float] | None = None  # a drafter's probability of its first draft at every position, where traced


def agreeing(length: int, stay: float, enter: float, rng: random.Random) -> Shape:
    """A draft model's view: position i agrees with the target with probability `stay` after an
    agreeing position and `enter` after one that does not (agreement comes in stretches)."""
    agree, now = [], True
    for _ in range(length):
        now = rng.random() < (stay if now else enter)
        agree.append(now)
    return Shape([1] * length, runs_of(agree))


def copying(length: int, buckets: dict[int, tuple[float, float, float]], rng: random.Random) -> Shape:
    """An n-gram proposer's view: at each position a bucket drawn by weight from `buckets`
    {bucket: (weight, first, stay)}; its copy keeps a first draft with probability `first` and
    each further one with probability `stay` (bucket 0: no match)."""
    names = list(buckets)
    weights = [buckets[b][0] for b in names]
    found, runs = [], []
    for _ in range(length):
        bucket = rng.choices(names, weights)[0]
        _, first, stay = buckets[bucket]
        run = 0
        if bucket and rng.random() < first:
            run = 1
            while run < MAX_STEP and rng.random() < stay:
                run += 1
        found.append(bucket)
        runs.append(run)
    return Shape(found, runs)


def runs_of(agree: list[bool]) -> list[int]:
    runs, run = [0] * len(agree), 0
    for i in range(len(agree) - 1, -1, -1):
        run = run + 1 if agree[i] else 0
        runs[i] = run
    return runs


def joined(*shapes: Shape) -> Shape:
    """Shapes one after the other: a reply that turns from one kind of text to another."""
    return Shape([b for s in shapes for b in s.buckets], [r for s in shapes for r in s.runs])


class DraftModel:
    """What DraftProposer's seeds read of its model, besides its step costs: it runs CUDA graphs."""

    graphs = True


DRAFT = DraftModel()


class BlockDrafter:
    """A DFlash drafter: one pass drafts a whole block, whatever k (`Machine.block_pass`); one that
    sat steps out takes the target's states it missed in first (`Machine.block_catch_up`), past a
    step's worth of them, as DFlashProposer does."""


FLASH = BlockDrafter()


class Replayed(Proposer):
    """A proposer whose drafts `shape` decides; `model` DRAFT: a draft model (its seeds are
    DraftProposer's, and it catches up on what it missed)."""

    def __init__(self, name: str, shape: Shape, k: int | str = AUTO, model: object = None,
                 known: list[float] | None = None):
        super().__init__(k)
        self.name, self.shape, self.model, self.known = name, shape, model, known
        self.bucket_follows_text = model is None  # an n-gram proposer's match changes with the text
        self.seen = PROMPT  # the draft model's cache holds this much of the context (primed)
        self.ahead_at = -1  # the context's length at which a pass drafted ahead waits (DFlash)

    @property
    def drafts_in_one_pass(self) -> bool:
        return self.model is FLASH

    def drafted_ahead(self, context: list[int]) -> bool:
        return len(context) == self.ahead_at

    def can_draft_ahead(self) -> bool:
        return self.model is FLASH

    def peek(self, context: list[int]) -> list[int] | None:
        """Drafts that keep as many of the replay's tokens (all 1) as the text says."""
        position = self.at(context)
        if self.shape.firsts is None or position >= len(self.shape.runs) or not self.bucket(context) or (
                self.model is FLASH and not self.drafted_ahead(context)) or self.model not in (None, FLASH):
            return None
        run = min(self.shape.runs[position], MAX_K)
        return ([1] * run + [0] * MAX_K)[:MAX_K]

    def sureness(self, context: list[int]) -> float | None:
        position = self.at(context)
        if self.shape.sure is None or position >= len(self.shape.sure) or not self.drafted_ahead(context):
            return None
        return self.shape.sure[position]

    def first_draft(self, context: list[int]) -> int | None:
        position = self.at(context)
        if self.shape.firsts is None or position >= len(self.shape.firsts):
            return None
        if self.model is FLASH and not self.drafted_ahead(context) or not self.bucket(context):
            return None
        first = self.shape.firsts[position]
        return None if first < 0 else first

    def at(self, context: list[int]) -> int:
        return len(context) - PROMPT

    def known_acceptance(self) -> list[float] | None:
        return self.known  # a DFlash drafter's training measurement, when the replay gives one

    def bucket(self, context: list[int]) -> int:
        position = self.at(context)
        return self.shape.buckets[position] if position < len(self.shape.buckets) else 0

    def drafting_seed(self, k: int, step_cost) -> float:
        if self.model is FLASH:
            return DRAFTING_SHARE * step_cost("target")(1)  # DFlashProposer's seed
        return DraftProposer.drafting_seed(self, k, step_cost) if self.model is not None else 0.0

    def behind(self, context: list[int]) -> int:
        missed = len(context) - 1 - min(self.seen, len(context) - 1) if self.model is not None else 0
        if self.model is FLASH:  # up to a step's worth of states goes in within the pass
            return missed if missed > MAX_STEP else 0
        return missed

    def catch_up_seed(self, behind: int, step_cost) -> float:
        if self.model is FLASH:
            return CATCH_UP_SHARE * step_cost("target")(1)  # DFlashProposer's seed
        return DraftProposer.catch_up_seed(self, behind, step_cost) if self.model is not None else 0.0

    def propose_cost(self, machine: Machine, context: list[int], k: int, accepted: int) -> float:
        """Seconds of proposing k drafts here; a draft model's cache then holds the context and
        its drafts but the last, a DFlash drafter's the context."""
        if self.model is None:
            return machine.lookup
        if self.model is FLASH:
            behind, ahead = self.behind(context), self.drafted_ahead(context)
            self.seen = len(context) - 1
            if ahead:
                return machine.block_ahead
            return machine.block_pass + (machine.block_catch_up if behind else 0.0)
        unseen = self.behind(context) + 1
        self.seen = len(context) + min(accepted, k - 1)
        if unseen <= MAX_STEP:
            first = machine.first
        elif machine.chunked and unseen <= CATCH_UP_STEPS * MAX_STEP:
            first = machine.first * -(-unseen // MAX_STEP)
        else:
            first = machine.eager
        return first + machine.chained * (k - 1)


@dataclass
class Replay:
    """What one reply did: the loop's metrics, and its wall time (steps, plus the policy's host time)."""

    metrics: Metrics
    seconds: float
    choices: list[Choice]

    @property
    def tokens_per_second(self) -> float:
        return self.metrics.tokens / self.seconds


def replay(
    machine: Machine,
    proposer: Replayed | list[Replayed] | None,
    length: int,
    rng: random.Random,
    step_cost: Callable[[object], CostTable] | None = None,
) -> Replay:
    """`length` tokens of the reply, after its first: plain decoding (None), one proposer at its
    own k (an int, or "auto"), or several (proposer auto, k auto). The same `step_cost` keeps the
    target's step costs from reply to reply (as step_costs does for a model), new ones by default."""
    metrics, seconds, choices = Metrics(), 0.0, []
    if proposer is None:
        metrics.steps = metrics.tokens = length
        metrics.verify_s = seconds = sum(plain(machine, i, rng).verify_s for i in range(length))
        return Replay(metrics, seconds, choices)
    members = proposer if isinstance(proposer, list) else [proposer]
    auto = len(members) > 1 or members[0].k == AUTO
    policy = AdaptivePolicy("target", step_cost or costs(machine))
    context = [0] * PROMPT
    for m in members:  # a new reply: nothing drafted ahead for it (a chat's proposers carry over)
        m.ahead_at = -1
    while len(context) - PROMPT < length:
        limit = max(0, min(MAX_K, length - (len(context) - PROMPT) - 1))
        if auto:
            choice = policy.choose(members, context, limit)
        else:
            choice = Choice(members[0], min(members[0].k, limit))
        # a pass drafted behind the last verify step runs on the device before this step's own,
        # whatever this step does; unless its proposer drafts now, it was for nothing
        ahead = [m for m in members if m.drafted_ahead(context)]
        if choice.proposer is None and choice.steps > 1:
            # the plain steps asked for at once, as the loop runs them on CUDA: runs queued back
            # to back, the policy's host time once
            run = min(choice.steps, length - (len(context) - PROMPT))
            steps = [plain(machine, len(context) - PROMPT + i, rng) for i in range(run)]
        else:
            steps = [run_step(machine, choice, context, rng)]
        steps[0].verify_s += machine.block_device * len(ahead)
        # the member that drafts the next step's pass behind this verify step: the drafter of
        # this one, alone; of proposer auto's, the one the policy names; none behind a step that
        # leaves the reply no room for another (Generation._ahead_member)
        room = length - (len(context) - PROMPT) > len(steps[0].drafts) + 2
        drafted = choice.proposer if choice.k and len(steps) == 1 else None
        if len(members) > 1:
            next_ahead = policy.drafting_ahead(members, drafted)
        else:
            next_ahead = drafted if drafted is not None and drafted.can_draft_ahead() else None
        if not room or machine.block_ahead is None:
            next_ahead = None
        if next_ahead is not None and next_ahead is not choice.proposer and next_ahead.seen < len(context) - 1:
            steps[0].verify_s += machine.block_catch_up  # a witness takes in what it sat out first
        if auto:
            # the policy chooses while the device runs a pass drafted ahead, if one is queued;
            # where it reads that pass's drafts (a witness), it waits for the pass first
            hidden = machine.block_device if ahead else 0.0
            host = machine.host + machine.host_member * (len(members) - 1)
            if choice.repeats and machine.host_repeat is not None:
                host = machine.host_repeat
            peeked = ahead and any(m.bucket_follows_text and m.bucket(context) for m in members)
            if peeked:
                seconds += max(0.0, host * (1.0 - machine.after_read) - hidden) + host * machine.after_read + machine.peek
            else:
                seconds += max(0.0, host - hidden)
        for step in steps:
            if auto:
                policy.record(choice, step, members)
            choices.append(choice)
            metrics.add(step)
            seconds += step.propose_s + step.verify_s
            context.extend(step.tokens)
        for m in members:
            m.ahead_at = len(context) if m is next_ahead else -1
            if m is next_ahead and m.model is FLASH:
                m.seen = len(context) - 1
    return Replay(metrics, seconds, choices)


def plain(machine: Machine, position: int, rng: random.Random) -> Step:
    """A step of a plain run: no host wait of its own."""
    return Step(tokens=[1], drafts=[], accepted=0, kind="plain", k=0, proposer="off", propose_s=0.0,
                verify_s=machine.decode * spread(machine, rng) + stalled(machine, rng), position=position)


def run_step(machine: Machine, choice: Choice, context: list[int], rng: random.Random) -> Step:
    who, k = choice.proposer, choice.k
    position = len(context) - PROMPT
    propose_s, drafts, accepted = 0.0, 0, 0
    if who is not None and k > 0:
        if who.bucket(context):  # an n-gram proposer with no match drafts nothing
            drafts = k
            accepted = min(k, who.shape.runs[position])
        propose_s = who.propose_cost(machine, context, k, accepted) * spread(machine, rng)
    return Step(tokens=[1] * (accepted + 1), drafts=[1] * drafts, accepted=accepted,
                kind="plain" if not drafts else ("bonus" if accepted == drafts else "correction"),
                k=k if who else 0, proposer=who.name if who else "off", propose_s=propose_s,
                verify_s=machine.verify(drafts + 1) * spread(machine, rng) + stalled(machine, rng),
                position=position,
                gain=choice.gain, probe=choice.probe)


def spread(machine: Machine, rng: random.Random) -> float:
    return max(0.5, 1.0 + machine.noise * rng.gauss(0.0, 1.0))


def stalled(machine: Machine, rng: random.Random) -> float:
    return machine.stall if machine.stalls and rng.random() < machine.stalls else 0.0


def costs(machine: Machine) -> Callable[[object], CostTable]:
    """The policy's step_cost: the target's verify steps seeded with the machine's own (as a
    timed seed would be), the draft model's steps with its first step."""
    target, draft = CostTable(machine.verify), CostTable(lambda n: machine.first)
    return lambda model: target if model == "target" else draft
