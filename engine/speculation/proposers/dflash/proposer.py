"""DFlash: a block-diffusion drafter reads the target's hidden states and drafts a whole block in one pass.

The target keeps the residual stream after the drafter's target layers on every step (attach
sets `state_layers`); the states of verified tokens become the drafter's context. Each step
is one drafter pass over [last token, mask x (B-1)], whatever k: the first k of its B-1 greedy
drafts are proposed. Drafts are deterministic given the context, so verification is the
exact-match rule and sampled output equals plain sampled output.

With sampled drafts (`sample`, --sample-drafts) and sampled decoding, each of the k drafts is
drawn from the drafter's own distribution at its block position, filtered as the target's
sampling is (temperature, top-k, top-p), with noise of its own; the verify step keeps draft i
with chance min(1, p/q) and draws a refused one's replacement from the residual, so the reply
follows the target's distribution exactly, though no longer plain sampling's tokens one for one.
The block's positions are drafted in one pass, none reading the drafts before it: q of draft i
is its position's distribution whatever was drawn before it, which is what the rule needs.
Where the target's p spreads over a few tokens, a draft drawn from a q like it is kept more often
than its most likely token would be (sum of min(p, q) against p of that one token).

The drafts stay on the device: propose hands them to the verify step's input as a tensor
(DeviceProposal.on_device); the host reads the list with the verify step's tokens. On CUDA
the whole drafter pass is one graph replay (engine/speculation/proposers/dflash/graphs.py).

The next step's pass can be queued behind the verify step, before the host reads it
(`draft_ahead`; SPECCHAT_DRAFT_AHEAD=0 turns it off): the count of drafts kept and the anchor are found
on the device, the pass takes in every state of the step (the refused drafts' K/V sit where the
block's own go, which the block writes first), and the host's `observe` settles the context once
it has read the step. The device then runs the pass while the host reads the step, writes it out
and launches the next; a step waited on the host for all of that before (the twentieth run: the
same rows 10-20 % slower minutes apart as the host's pace drifted, plain decoding's unchanged).
With k "auto" the policy may then choose another option, and that pass was for nothing.

A drafter that sits steps out (k "auto" chose plain steps or another proposer) keeps the states
of the tokens it missed and takes them in with its next pass: up to a step's worth inside the
pass's graph, more by an extension of their own first (on CUDA context-only graph replays,
`DrafterGraphs.extend`). That catch-up is what `behind` reports, so the adaptive policy prices it.
Keeping states cost the target's chained steps some 2 % once (0.02 ms a token on the H200's
Coder-1.5B; since the fused layers keep them, 0.1 % or less: eighteenth run), so a drafter could
let the target stop keeping them after TAPS_OFF_AFTER tokens sat out in a row (now never, by
default); the states of the tokens it then misses (`missing`) are computed again, from the
cache, just before it drafts next (the generation's `fill`, part of the catch-up): on CUDA a
replay of the target's 16-token step graph per 16 tokens (some 0.1 ms a token), op by op where
the target has no graphs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.limits import MAX_STEP
from engine.runtime.sampling import DRAFT, GREEDY, probabilities, sample
from engine.speculation.context_states import recompute_seconds
from engine.speculation.proposers.base import DeviceProposal, Proposer
from engine.speculation.proposers.dflash import RANDOM
from engine.speculation.proposers.dflash.files import load_drafter, write_random_drafter
from engine.speculation.proposers.dflash.network import DFlashDrafter
from engine.speculation.proposers.spec import ProposerOptions

# A catch-up of held states (more than a step's worth taken in before a pass) replays the
# drafter's context-only graphs (graphs.py): 0.25 ms for 32 tokens, 0.34 for 128 on the H200
# (Coder-1.5B target, 2-layer drafter; bench/gpu/dflash_costs.py, sixteenth run), a fifth of a
# plain step. It is only the seed for a drafter that sat out, until the run's own catch-ups are timed.
CATCH_UP_SHARE = 0.2
# One pass over a block, whatever k: about half a target step until it is timed.
DRAFTING_SHARE = 0.5
# States kept for a drafter sitting out, at most: past this many tokens it takes them in at once,
# by one extension (memory stays bounded in a long reply; the launches come once per HOLD tokens).
HOLD = 16 * MAX_STEP
# Tokens sat out in a row before the target stops keeping states for the drafter (see above):
# keeping them cost 0.02 ms a token and computing them again some 27 ms a chunk, the price of
# keeping them for over a thousand tokens, so only a drafter left out that long lets them go (at
# 32, the sixteenth run's proposer auto lost 18 % on the conversation to comebacks priced as
# cheap). Now keeping them costs next to nothing (8 chained steps 9.39 ms with, 9.42 without, on
# the H200's 1.5B shape) and computing them again 0.095 ms a token: letting them go saves nothing
# a comeback does not pay back, so the target keeps them (None: never let go).
TAPS_OFF_AFTER: int | None = None


class DFlashProposer(Proposer):
    """Drafts the first k of the drafter's B-1 block positions (k defaults to B-1)."""

    name = "dflash"
    drafts_in_one_pass = True

    def __init__(self, drafter: DFlashDrafter, k: int | str | None = None, sample: bool = False):
        self.max_k = drafter.block_size - 1  # one pass drafts a block: the anchor, then B - 1 drafts
        self.max_k_why = f"this drafter's block of {drafter.block_size} gives at most {self.max_k} drafts"
        super().__init__(self.max_k if k is None else k)
        self.drafter = drafter
        self.sample = sample
        # target states not yet in the drafter's cache, oldest first: copies of its own (`held`),
        # then the latest steps' (`fresh`: views of the target's outputs, which its next step
        # may overwrite)
        self.held: list[torch.Tensor] = []
        self.fresh: list[torch.Tensor] = []
        self.pending = 0  # tokens in held and fresh: asked every step, so counted, not summed
        self.drafted_at = 0  # the context's length at the drafter's latest pass (or reset)
        self.target = None
        # a pass drafted ahead (draft_ahead): the context's length its drafts follow (None until
        # observe has read the step and settled the drafter's context), and the drafts
        # and the drafter's probability of the first
        self.ahead: tuple[int | None, torch.Tensor, torch.Tensor] | None = None
        # those read (peek): which, the drafts, its probability of the first
        self.peeked: tuple[tuple, list[int], float] | None = None
        self.waited = 0.0  # seconds the host waited in peek for a pass drafted ahead (take_waited)

    def attach(self, target, sampling) -> None:
        if target is not self.drafter.target:
            raise EngineError(
                f"this DFlash drafter was loaded for another target model: load it for {target.name}"
            )
        self.target = target
        self.keep_states(True)
        self.sampling = sampling if self.sample else GREEDY

    @property
    def state_layers(self) -> tuple[int, ...]:
        return self.drafter.state_layers

    def keep_states(self, on: bool) -> None:
        """Whether the target's steps keep the drafter's states (the target reads this per step)."""
        self.target.state_layers = self.state_layers if on else ()

    def detach(self, target) -> None:
        target.state_layers = ()
        self.drafter.clear()
        self.held, self.fresh, self.pending = [], [], 0
        self.ahead = None

    def reset(self, context: list[int], states: torch.Tensor | None = None) -> None:
        # context[-1] has not run through the target yet: states cover context[:-1]
        if states is None or states.shape[0] != len(context) - 1:
            raise EngineError("DFlash needs the target's hidden states of the whole context")
        self.drafter.clear()
        self.held, self.fresh, self.pending = [], [states], states.shape[0]
        self.drafted_at = len(context)
        self.ahead = None
        self.keep_states(True)

    def can_draft_ahead(self) -> bool:
        """Whether the next pass can be queued behind this step's verify step (draft_ahead):
        greedy drafts (sampled ones are drawn from the pass's logits on the host's side), from
        the drafter's graph where it runs on a GPU (op by op there, the host would wait for the
        count it reads before queuing the pass: no gain)."""
        on_gpu = self.drafter.fc.weight.device.type == "cuda"
        return not self.sampled_drafts and (self.drafter.graphs is not None or not on_gpu)

    def drafted_ahead(self, context: list[int]) -> bool:
        return self.ahead is not None and self.ahead[0] == len(context) and not self.pending

    def peek(self, context: list[int]) -> list[int] | None:
        # read from the device once: the host waits for the pass drafted ahead here
        if not self.drafted_ahead(context):
            return None
        if self.peeked is None or self.peeked[0] is not self.ahead:
            # one copy for both (token ids are exact in float32 up to 2^24)
            t0 = time.perf_counter()
            *drafts, sure = torch.cat((self.ahead[1].float(), self.ahead[2])).tolist()
            self.waited += time.perf_counter() - t0
            self.peeked = (self.ahead, [int(d) for d in drafts], sure)
        return self.peeked[1]

    def take_waited(self) -> float:
        waited, self.waited = self.waited, 0.0
        return waited

    def sureness(self, context: list[int]) -> float | None:
        return self.peeked[2] if self.peek(context) else None

    def draft_ahead(self, drafts: torch.Tensor, targets: torch.Tensor, states: torch.Tensor) -> None:
        """Queue the next step's pass behind the verify step just queued, before the host reads
        it: drafts [k] as verified, the model's tokens targets [k + 1] and the step's states
        [k + 1, ...], all on the device. The count of drafts kept, the anchor and the new context
        are found there; the host's own reading of the step (observe) then settles the context,
        and the next proposal is these drafts. So the device runs the pass while the host reads
        the step and writes it out, instead of waiting for the host to launch it."""
        # a witness that sat steps out (proposer auto): what it missed goes in first; the loop
        # has it taken in before the verify step (prepare_ahead), this is for callers that do not
        self.prepare_ahead()
        k = drafts.shape[0]
        accepted = (drafts == targets[:k]).int().cumprod(0).sum().view(1)
        anchor = targets.gather(0, accepted)
        drafts = self.drafter.draft_ahead(states, accepted, anchor)
        self.ahead = (None, drafts, self.drafter.ahead_sure)

    def prepare_ahead(self) -> None:
        # The states a witness missed sitting steps out go in before the verify step is queued:
        # behind it, each extension's input copy (graphs._load) waits for that step, so the host
        # could launch neither them nor the pass until the step was done. The held ones are
        # copies; the fresh ones (the target's graph outputs, which the verify step overwrites)
        # are read here, before it runs, as idle copies them.
        if self.pending:
            self.held, self.fresh = self.held + self.fresh, []
            self.take_in_held()

    def observe(self, context: list[int], states: torch.Tensor | None = None) -> None:
        if self.ahead is not None and self.ahead[0] is None:
            # the pass drafted ahead took this step's states in (their memory may be reused by
            # now): the drafter's context is the context but its last token, as after any pass
            self.drafter.settle(len(context) - 1)
            self.ahead = (len(context), *self.ahead[1:])
            return
        if states is None:  # a step the target kept no states for: `missing` counts its tokens
            return
        self.fresh.append(states)
        self.pending += states.shape[0]

    def missing(self, context: list[int]) -> int:
        """Tokens before the context's latest whose states the drafter neither took in nor holds:
        those of the steps run while the target kept none (after TAPS_OFF_AFTER tokens sat out)."""
        return len(context) - 1 - self.drafter.context_length - self.pending

    def fill(self, states: torch.Tensor) -> None:
        """The states of the `missing` tokens, computed again; the target keeps them from now on."""
        self.fresh.append(states)
        self.pending += states.shape[0]
        self.keep_states(True)

    def idle(self, context: list[int]) -> None:
        # The fresh states may sit in the target's graph outputs, which the step about to run
        # overwrites: one device copy keeps them for the next pass. (Taking them in here each
        # step sat out cost more than half a plain step when it ran op by op.)
        self.ahead = None  # drafts for a step this proposer does not draft
        if self.fresh:
            self.held.append(torch.cat(self.fresh))
            self.fresh = []
        if self.pending >= HOLD:
            self.take_in_held()
        sat_out = len(context) - self.drafted_at
        if TAPS_OFF_AFTER is not None and sat_out >= TAPS_OFF_AFTER and self.target.state_layers:
            self.keep_states(False)
            # what it holds goes in now: a drafter holding nothing of the reply reads it as its
            # prefill (the policy's `prompt`), which a comeback computing states again is not
            if self.held:
                self.take_in_held()

    def take_in_held(self) -> None:
        """The held states into the drafter's cache, by one extension."""
        held, self.held, self.pending = self.held, [], 0
        self.drafter.take_in(torch.cat(held))

    def waiting(self) -> int:
        """Tokens whose states the drafter has not taken in yet."""
        return self.pending

    def behind(self, context: list[int]) -> int:
        # a pass takes in up to a step's worth of new states within its graph, as after any
        # drafting step; more (steps sat out) it takes in by an extension of their own first, and
        # states let go are computed again first however few: that is the catch-up
        missing = self.missing(context)
        waiting = self.waiting() + missing
        return waiting if waiting > MAX_STEP or missing else 0

    def catch_up_seed(self, behind: int, step_cost) -> float:
        # held states go in through the drafter's graphs; let-go ones (a key below zero) are
        # computed again first (context_states: step graphs' replays, or a pass op by op a chunk)
        target = self.drafter.target
        costs = step_cost(target)
        seconds = CATCH_UP_SHARE * costs(1)
        if behind < 0:
            seconds += recompute_seconds(target, -behind, costs)
        return seconds

    def known_acceptance(self) -> list[float] | None:
        return self.drafter.measured

    def drafting_seed(self, k: int, step_cost) -> float:
        return DRAFTING_SHARE * step_cost(self.drafter.target)(1)

    def propose(self, context: list[int], k: int) -> DeviceProposal:
        # The context extension runs here, not in observe, so the loop's propose time is the
        # whole drafter pass, a catch-up included. The fresh states are read before the target's
        # next step, which may overwrite them (CUDA graph output buffers).
        assert self.missing(context) == 0, "the generation fills the missing states before a proposal"
        if self.drafted_ahead(context):
            drafts, self.ahead = self.ahead[1], None
            self.drafted_at = len(context)  # the pass already ran, behind the last verify step
            return DeviceProposal(drafts[:k])
        self.ahead = None
        self.drafted_at = len(context)
        states, self.held, self.fresh, self.pending = self.held + self.fresh, [], [], 0
        if self.sampled_drafts:
            # drafts and q are new tensors made from the graph's logits before the verify step
            # is queued, which may reuse that output's memory
            logits = self.drafter.draft(states, context[-1], logits=True)[:k]
            positions = torch.arange(len(context), len(context) + k, device=logits.device)
            drafts = sample(logits, positions, self.sampling, noise=DRAFT)
            proposal = DeviceProposal(drafts, probabilities(logits, self.sampling))
        else:
            # copied out of the drafter's graph output: that buffer sits in the target's graph
            # memory pool, and the verify step, replayed before the host reads the drafts, may reuse it
            proposal = DeviceProposal(self.drafter.draft(states, context[-1])[:k].clone())
        assert self.drafter.context_length == len(context) - 1, (self.drafter.context_length, len(context))
        return proposal

    def warm_up(self, target, sampling, progress=None) -> None:
        # the target's steps keep the drafter's states while it drafts: those are other graphs
        target.warm_up(sampling, state_layers=self.drafter.state_layers, progress=progress)
        # and those that keep none, for the steps it sits out long enough to let them go
        target.warm_up(sampling, state_layers=(), progress=progress)
        if self.drafter.graphs is not None:
            self.drafter.graphs.warm_up()
        self.warm_up_costs(target, progress=progress)

    def describe(self) -> str:
        return f"dflash {self.drafter.name} k={self.k}" + (" sampled" if self.sample else "")


def load(target, options: ProposerOptions) -> DFlashDrafter:
    source = options.sources["dflash"]
    if source != RANDOM:
        drafter = load_drafter(source, target)
    else:
        with tempfile.TemporaryDirectory(prefix="specchat-dflash-") as tmp:
            drafter = load_drafter(str(write_random_drafter(Path(tmp) / "random-drafter", target)), target)
    drafter.random = source == RANDOM
    drafter.sample_drafts = options.sample_drafts
    return drafter


def make(drafter: DFlashDrafter, k: int) -> DFlashProposer:
    return DFlashProposer(drafter, k=k, sample=getattr(drafter, "sample_drafts", False))
