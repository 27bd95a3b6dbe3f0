"""The generation loop: propose, verify, accept, truncate.

With `last` the latest token, sampled but not yet run through the model, one step is:
  1. propose drafts d1..dk to follow the context;
  2. verify: run [last, d1..dk] as one step and sample the model's own t1..t(k+1) on the device;
  3. accept while d_i == t_i: emit d1..da, then t(a+1), the bonus (all drafts kept) or the
     correction (where a draft went wrong), which becomes the next `last`;
  4. truncate the cache past the kept tokens: the rejected drafts' pages go back to the pool.
With no proposer (or k = 0) the same step with no drafts is plain decoding; with no proposer,
or where the adaptive policy asks for several plain steps, runs of such steps are queued
together, each taking its input token from the one before on the device, so the host does not
stand between them; on a GPU the next such run is queued before the host reads one (runs.py).
When k or the proposer is "auto", the adaptive policy (adaptive.py) chooses both at the start of
each step, and the plain steps it asks for at once run to their end before it chooses again.
A proposer that can (a DFlash drafter; SPECCHAT_DRAFT_AHEAD=0 turns it off) makes the next step's
drafts behind the verify step, before the host reads it (Proposer.draft_ahead): the step's
tokens come back through a pinned buffer the host waits for alone, while the device drafts on.
Under proposer auto it may do so behind another member's step too, as a witness of that
member's copy (AdaptivePolicy.drafting_ahead): that step's drafts then go to the device first.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from engine.errors import EngineError
from engine.limits import AUTO, MAX_K
from engine.runtime.sampling import TOKEN, SamplingParams, accept_tokens
from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.context_states import context_states
from engine.speculation.inspection import Inspection, inspect_step
from engine.speculation.metrics import Metrics
from engine.speculation.proposers.base import Proposal, Proposer
from engine.speculation.runs import QueuedRun


@dataclass
class Step:
    tokens: list[int]  # emitted by this step, in order
    drafts: list[int]  # what the proposer guessed
    accepted: int  # how many drafts were kept
    kind: str  # "plain" (no drafts), "bonus" (every draft kept) or "correction" (a draft refused)
    k: int  # drafts asked for
    proposer: str  # who drafted ("off" for plain decoding)
    propose_s: float  # drafting
    verify_s: float  # the model's step that decided the tokens: decode or verify (0 for the prefill)
    position: int  # sequence position of tokens[0]
    prefill: bool = False  # the reply's first Step: the prompt's step and the first token
    finished: str | None = None  # "stop", "length", "cancelled" on the last step
    prefill_s: float = 0.0  # the prompt's step, on the prefill Step
    gain: float | None = None  # k or proposer "auto": the expected speed of the choice over plain
    probe: bool = False  # k or proposer "auto": drafted to learn whether drafting pays again
    reading: str = ""  # proposer "auto": what a witness's pass said that the choice weighed
    inspection: Inspection | None = None  # the verify step's numbers, when Generation.inspect is on

    @property
    def rejected(self) -> list[int]:
        """Drafts refused at the rejection point and after it (the teaching view shows them)."""
        return self.drafts[self.accepted :]


def plain_step(tokens: list[int], position: int, verify_s: float = 0.0, **kw) -> Step:
    """A Step with no drafts: the prefill, a decode step, or the end of a cancelled reply."""
    return Step(tokens=tokens, drafts=[], accepted=0, kind="plain", k=0, proposer="off", propose_s=0.0,
                verify_s=verify_s, position=position, **kw)


@dataclass
class Result:
    tokens: list[int]
    steps: list[Step] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    finished: str | None = None


class Generation:
    """An iterator of Steps. `speculative` and `k` may be changed from another thread while it
    runs: the change takes effect at the next step (after a run of plain steps already queued on
    the device, on a GPU). `cancel()` stops at the next step.
    `policy` chooses the proposer and k of each step when they are "auto" (default:
    AdaptivePolicy, built at the first such step)."""

    def __init__(
        self,
        model,
        ids: list[int],
        sampling: SamplingParams | None = None,
        stop_ids: list[int] | tuple[int, ...] = (),
        speculative: Proposer | None = None,
        policy=None,
    ):
        if not ids:
            raise EngineError("the prompt is empty")
        self.model = model
        self.ids = list(ids)
        self.sampling = sampling or SamplingParams()
        self.stop_ids = set(stop_ids)
        self.speculative = speculative
        self.policy = policy
        self.metrics = Metrics()
        self.tokens: list[int] = []
        self._cancel = threading.Event()
        self._active: Proposer | None = None
        # plain steps queued per host wait: on a GPU the steps run ahead of the host (a reply's
        # last run may compute a few tokens nobody sees); on the CPU nothing would, and a chat
        # shows each token as it comes
        self.plain_run = 8 if model.device.type == "cuda" else 1
        # the next run queued before the host reads one (runs.py), with no proposer or within the
        # plain steps the policy asked for at once: on a GPU the device then does not wait for the
        # host between them; a reply's end may leave one queued run nobody reads (at most
        # plain_run steps of device time)
        self.run_ahead = model.device.type == "cuda"
        # that run (None: not queued yet), the policy's choice that asked for it (None: no
        # proposer) and the steps the choice asked for past it (None: no limit)
        self._ahead: tuple[QueuedRun | None, Choice | None, int | None] | None = None
        self._read_at = 0.0
        # the step inspector: keep each step's numbers (inspection.py); may be switched from
        # another thread, read at the next step
        self.inspect = False
        # where a step's tokens land when a pass follows them, and the event of their copy (_read)
        self._pinned: torch.Tensor | None = None
        self._copied = None
        # the next step's drafts made behind this step's verify step (Proposer.draft_ahead): on the
        # H200 as fast as a pass made after the host reads each step or up to 13 % faster
        # (bench/RESULTS.md, 2026-12-04); SPECCHAT_DRAFT_AHEAD=0 makes every pass after the read
        self.draft_ahead = os.environ.get("SPECCHAT_DRAFT_AHEAD", "1") != "0"

    def cancel(self) -> None:
        self._cancel.set()

    def __iter__(self) -> Iterator[Step]:
        model = self.model
        seq = model.new_sequence()
        model.check_room(seq, len(self.ids) + 1)  # before a proposer is attached: nothing to undo
        try:
            self._switch(self.speculative)
            yield from self._run(seq)
        finally:
            self._switch(None)
            seq.release()

    def _switch(self, proposer: Proposer | None, context: list[int] | None = None, seq=None) -> None:
        if proposer is self._active:
            return
        if self._active is not None:
            self._active.detach(self.model)
        self._active = proposer
        if proposer is not None:
            proposer.attach(self.model, self.sampling)
            if context is not None:
                # switched in mid-reply: a proposer that reads target states (DFlash) gets those
                # of the context so far, computed again (context[-1] has not run yet)
                states = context_states(self.model, seq, context[:-1]) if self.model.state_layers else None
                proposer.reset(context, states)

    def _run(self, seq) -> Iterator[Step]:
        model, sampling = self.model, self.sampling
        t0 = time.perf_counter()
        out = model.step(seq, self.ids, sampling, last_only=True)
        last = int(out.tokens[-1])
        context = self.ids + [last]
        if self._active is not None:
            self._active.reset(context, out.states)
        step = plain_step([last], len(self.ids), prefill=True, prefill_s=time.perf_counter() - t0)
        yield self._emit(step)
        while step.finished is None:
            if self._cancel.is_set():
                step = plain_step([], len(context), finished="cancelled")
                yield self._emit(step)
                return
            if self._ahead is not None and self._ahead[0] is None and self._switched():
                self._ahead = None  # the policy's steps not yet queued give way to the change
            if self._ahead is None:  # the policy's steps, or a run queued ahead, go first
                self._switch(self.speculative, context, seq)
            if self._ahead is None and self._active is None and self.inspect:
                steps, states = [self._inspected_plain_step(seq, context)], None
            elif self._ahead is not None or self._active is None:
                steps, states = self._decode(seq, context)
            else:
                steps, states = self._step(seq, context, last)
            for i, step in enumerate(steps):
                context.extend(step.tokens)
                last = context[-1]
                if self._active is not None:
                    self._active.observe(context, None if states is None else states[i])
                yield self._emit(step)
                if step.finished is not None:
                    break  # a stop inside a run of plain steps: the rest is never shown

    def _decode(self, seq, context: list[int], most: int | None = None, choice: Choice | None = None
                ) -> tuple[list[Step], list | None]:
        """Plain decoding: a run of one-token steps (at most `most`, the steps the policy's
        `choice` asked for), each fed on the device by the token the one before it sampled, so
        the host waits once per run instead of once per token (on CUDA the run is replays of one
        graph, queued back to back). With run_ahead the next run of the same kind is queued
        before this one is read. The tokens are those of single steps; steps past a stop are
        discarded with the reply. With a DFlash drafter attached, also each step's target states
        (views of the run's output: read them before the model's next step)."""
        model = self.model
        run, t0 = None, 0.0
        if self._ahead is not None:
            (run, choice, most), self._ahead = self._ahead, None
            t0 = self._read_at  # queued while the run before was read: its time runs from that read
        if run is None:
            t0 = time.perf_counter()
            n = max(1, self._run_length(len(context), len(self.tokens), most))
            start = device_mark(model.device)
            first = torch.tensor(context[-1:], device=model.device)
            run = QueuedRun(model.chain(seq, first, n, self.sampling, TOKEN), n, start)
            most = None if most is None else most - n
        n = run.n
        # more steps of this kind to come: with no proposer, or the policy's while nothing changed
        more = self.speculative is None if choice is None else most > 0 and not self._switched()
        if more:
            run.keep_states()  # the next run writes the same buffers, before a proposer reads these
        if more and self.run_ahead and not self.inspect:
            ahead = self._run_length(len(context) + n, len(self.tokens) + n, most)
            if ahead > 0:
                queued = QueuedRun(model.chain(seq, run.last, ahead, self.sampling, TOKEN), ahead, run.copied)
                self._ahead = (queued, choice, None if most is None else most - ahead)
        elif more and choice is not None:
            self._ahead = (None, choice, most)  # the policy's other steps, without asking it again
        tokens = run.tokens()
        self._read_at = time.perf_counter()
        # the device's time where it says (a run queued ahead ran while the host was elsewhere)
        seconds = run.seconds()
        each = (self._read_at - t0 if seconds is None else seconds) / n
        steps = [plain_step([token], len(context) + i, verify_s=each) for i, token in enumerate(tokens)]
        if choice is not None:
            for step in steps:
                step.gain, step.reading = choice.gain, choice.reading
                self.policy.record(choice, step, self._active.members)
        states = run.out.states
        return steps, None if states is None else [states[i : i + 1] for i in range(n)]

    def _switched(self) -> bool:
        """Whether the proposer, its k or the inspector changed since the policy asked for plain
        steps: those not yet queued give way at the next step."""
        active = self._active
        return self.inspect or self.speculative is not active or active is None or active.k != AUTO

    def _run_length(self, context_length: int, emitted: int, most: int | None = None) -> int:
        """Plain steps a run may take: plain_run, within `most`, the reply's budget and the cache's room."""
        remaining = self.sampling.max_tokens - emitted
        most = self.plain_run if most is None else most
        return min(self.plain_run, most, remaining, self.model.max_context - context_length)

    def _inspected_plain_step(self, seq, context: list[int]) -> Step:
        """One plain step run alone, so its logits can be read (a chained run keeps none)."""
        t0 = time.perf_counter()
        out = self.model.step(seq, context[-1:], self.sampling)
        token = int(out.tokens[0])
        step = plain_step([token], len(context), verify_s=time.perf_counter() - t0)
        step.inspection = inspect_step(out.logits, out.tokens, [], 0, None, len(context), self.sampling)
        return step

    def _choose(self, context: list[int]) -> Choice:
        """This step's proposer and k: the active proposer's own, or the policy's when "auto"."""
        remaining = self.sampling.max_tokens - len(self.tokens)
        room = self.model.max_context - len(context)
        limit = max(0, min(MAX_K, remaining - 1, room - 1))
        active = self._active
        if active.k != AUTO:
            return Choice(active, min(active.k, limit))
        if self.policy is None:
            self.policy = AdaptivePolicy(self.model)
        choice = self.policy.choose(active.members, context, limit)
        for member in active.members:
            if member is not choice.proposer or choice.k == 0:
                member.idle(context)
        return choice

    def _step(self, seq, context: list[int], last: int) -> tuple[list[Step], list | None]:
        """One step of the active proposer, or a run of plain steps the policy asked for; with
        each step's target states where a drafter reads them."""
        model, sampling = self.model, self.sampling
        choice = self._choose(context)
        # the host's wait for a pass drafted ahead that the policy read before choosing: the
        # pass's device time, which would otherwise sit in this step's verify window (a run of
        # plain steps is timed on the device from its own start: the pass was before it)
        waited = sum(m.take_waited() for m in self._active.members) if self._active.k == AUTO else 0.0
        if choice.proposer is None and choice.steps > 1 and not self.inspect:
            # plain steps the policy would take one by one anyway: runs, one host wait each
            return self._decode(seq, context, choice.steps, choice)
        proposer, k = choice.proposer, choice.k
        # read once: the chat may switch it mid-step, and a step drafted ahead must not be inspected
        # (the pass queued behind the verify step may reuse the memory of its logits)
        inspect = self.inspect
        t0 = time.perf_counter()
        start = device_mark(model.device)
        if k > 0:
            self._fill(seq, proposer, context)
        proposal = proposer.propose(context, k) if k > 0 else Proposal([])
        t1 = time.perf_counter()
        on_device = proposal.drafts_on(model.device)
        device_drafts = on_device is not None
        # the member whose pass for the next step is queued behind this verify step, if any (the
        # count of drafts left on the device read from their shape: reading them waits for them)
        count = min(k, on_device.shape[0] if device_drafts else len(proposal.drafts))
        ahead = None if inspect or not count else self._ahead_member(proposer, count)
        if ahead is not None and on_device is None:
            # a witness reads this step's drafts where the pass runs: copied there
            on_device = torch.tensor(proposal.drafts[:k], dtype=torch.long, device=model.device)
        if on_device is not None:
            # the drafts go from the drafter's output to the verify step's input on the device,
            # and come back to the host with the verified tokens: one wait, one copy, for the step
            drafted = device_mark(model.device)
            if ahead is not None:
                # a witness that sat steps out takes in what it missed ahead of the verify step:
                # behind it, the host would wait for the step before it could launch the pass
                # (after the drafting mark: it is not this step's drafts' time)
                ahead.prepare_ahead()
            head = torch.full((1,), last, dtype=torch.long, device=model.device)
            every = on_device  # all the drafts proposed: the copy brings back the list for later too
            on_device = on_device[:k]
            out = model.step(seq, torch.cat((head, on_device)), sampling)
            n, proposed = on_device.shape[0], every.shape[0]
            found = self._targets(out, n, proposal, on_device, len(context))
            then = None
            if ahead is not None and out.states is not None:
                def then():
                    ahead.draft_ahead(on_device, found, out.states)
            read = self._read(torch.cat((every, found)), then)
            if device_drafts:
                proposal.read_back(read[:proposed])
            drafts, targets = read[:n], read[proposed:]
            if start is not None and device_drafts:
                # the host did not wait for the drafter: the device says how long it took
                t1 = t0 + start.elapsed_time(drafted) / 1e3
        else:
            drafts = proposal.drafts[:k]
            out = model.step(seq, [last, *drafts], sampling)
            targets = self._targets(out, len(drafts), proposal, None, len(context)).tolist()
        t2 = time.perf_counter()
        accepted = 0
        while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
            accepted += 1
        seq.truncate(len(context) + accepted)
        tokens = drafts[:accepted] + [targets[accepted]]
        kind = "plain" if not drafts else ("bonus" if accepted == len(drafts) else "correction")
        name = proposer.name if proposer else "off"
        step = Step(tokens=tokens, drafts=drafts, accepted=accepted, kind=kind, k=k if proposer else 0, proposer=name,
                    propose_s=t1 - t0, verify_s=t2 - t1 + waited, position=len(context), gain=choice.gain,
                    probe=choice.probe,
                    reading=choice.reading)
        if inspect:  # after the clock: the inspector's reading is not the step's cost
            q = proposal.q if drafts else None
            step.inspection = inspect_step(out.logits, out.tokens, drafts, accepted, q, len(context), sampling)
        if self._active.k == AUTO:
            self.policy.record(choice, step, self._active.members)
        states = None if out.states is None else [out.states[: accepted + 1]]
        return [step], states

    def _ahead_member(self, proposer: Proposer, drafts: int) -> Proposer | None:
        """The member that drafts the next step's pass behind this verify step, before the host
        reads it (Proposer.draft_ahead), if any: on a step of `drafts` drafts that leaves the
        reply room for another and that the inspector does not read, the proposer alone where
        it can; of proposer "auto"'s members, the one the policy names
        (AdaptivePolicy.drafting_ahead): the step's own drafter where it expects it to draft the
        next step too, or a drafter witnessing a copy. A pass drafted ahead saves the next step
        some 0.06 ms of the pass made after the read and costs its 0.17 ms of device time for
        nothing where the next step takes another option (H200, twenty-first run). With k "auto"
        the policy may take a plain step instead; where it drafts again, it knows the pass mostly
        paid (AdaptivePolicy: `ahead`)."""
        if not self.draft_ahead or drafts == 0 or self.sampling.max_tokens - len(self.tokens) <= drafts + 2:
            return None
        members = self._active.members
        if len(members) == 1:
            return proposer if proposer.can_draft_ahead() else None
        return self.policy.drafting_ahead(members, proposer) if self.policy is not None else None

    def _read(self, values: torch.Tensor, then=None) -> list[int]:
        """values [n] on the host, with `then` queued on the device behind their copy: on a GPU
        the device runs it while the host reads them and writes the step out (the copy lands in
        a pinned buffer, and the host waits for that copy alone)."""
        if then is None or values.device.type != "cuda":
            read = values.tolist()
            if then is not None:
                then()
            return read
        if self._pinned is None:
            self._pinned = torch.empty(4 * MAX_K, dtype=torch.long, pin_memory=True)
            self._copied = torch.cuda.Event()
        host = self._pinned[: values.shape[0]]
        host.copy_(values, non_blocking=True)
        self._copied.record()
        then()
        self._copied.synchronize()
        return host.tolist()

    def _fill(self, seq, proposer: Proposer, context: list[int]) -> None:
        """The states a drafter missed while the target kept none for it, computed again from
        the cache: inside the step's drafting time, as the rest of its catch-up."""
        missing = proposer.missing(context)
        if missing > 0:
            first = len(context) - 1 - missing
            proposer.fill(context_states(self.model, seq, context[first:-1], first, proposer.state_layers))

    def _targets(self, out, k: int, proposal: Proposal, on_device: torch.Tensor | None, position: int
                 ) -> torch.Tensor:
        """The model's token after each prefix of the k drafts ([k + 1], on the device); with
        sampled drafts, the min(1, p/q) outcome. on_device: the drafts there, if they are."""
        if not k or proposal.q is None:
            return out.tokens
        device = out.logits.device
        p = self.model.probabilities(out.logits, self.sampling)
        d = on_device if on_device is not None else torch.tensor(proposal.drafts[:k], device=device)
        positions = torch.arange(position, position + k, device=device)
        q = proposal.q[:k].to(device)
        return accept_tokens(p, q, d, out.tokens[k], positions, self.sampling)

    def _emit(self, step: Step) -> Step:
        """Cut the step's tokens where plain decoding would have stopped, and count them."""
        budget = self.sampling.max_tokens - len(self.tokens)
        for i, token in enumerate(step.tokens):
            if token in self.stop_ids:
                step.tokens, step.finished = step.tokens[: i + 1], "stop"
                break
        if len(step.tokens) >= budget and step.finished is None:
            step.finished = "length"
        if step.finished is None and step.position + len(step.tokens) > self.model.max_context:
            # the context is full: the next step's input would have no room in the cache, so the
            # reply ends here as at its token budget, keeping what it wrote
            step.finished = "length"
        if len(step.tokens) > budget:
            step.tokens = step.tokens[:budget]
        self.tokens.extend(step.tokens)
        self.metrics.add(step)
        return step


def device_mark(device: torch.device):
    """A CUDA event recorded now on the device's stream (None elsewhere): where the device has
    got to, for timing work the host queued without waiting for it."""
    if device.type != "cuda":
        return None
    mark = torch.cuda.Event(enable_timing=True)
    mark.record()
    return mark


def stream(model, ids, sampling=None, stop_ids=(), speculative=None) -> Generation:
    """Iterate the Steps of one reply: `for step in stream(...)`. See `Generation`.
    speculative=NgramProposer(k="auto") lets each step choose k; AutoProposer([...]) the proposer too."""
    return Generation(model, ids, sampling, stop_ids, speculative)


def generate(model, ids, sampling=None, stop_ids=(), speculative=None) -> Result:
    """The whole reply: its tokens, every Step and the metrics. speculative=None is plain decoding."""
    gen = Generation(model, ids, sampling, stop_ids, speculative)
    steps = list(gen)
    return Result(gen.tokens, steps, gen.metrics, steps[-1].finished if steps else None)
