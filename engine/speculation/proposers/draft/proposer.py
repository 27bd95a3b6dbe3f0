"""A smaller model with the target's vocabulary drafts k tokens on its own paged cache."""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.limits import MAX_STEP
from engine.loading.loader import load_model
from engine.runtime.sampling import DRAFT, GREEDY, SamplingParams, probabilities
from engine.speculation.proposers.base import DeviceProposal, Proposer, common_prefix
from engine.speculation.proposers.spec import ProposerOptions

# A chained draft step (a replay queued behind the one before, no host wait between them) against
# the first, timed with its host round trip: on the H200 a 0.5B draft's k = 1 proposal took
# 1.19 ms and each further draft 0.79 ms (bench/results/adaptive-prompts.txt). The run's own
# proposals replace this guess as soon as they are timed.
CHAINED_SHARE = 0.66
# With CUDA graphs, a catch-up of up to this many steps' worth of tokens (the draft model sat
# steps out) runs as graph steps of MAX_STEP tokens, about 1 ms each for the 0.5B draft on the
# H200, instead of one op-by-op step of 15-20 ms (an eager step of the 1.5B target took 18-21 ms,
# bench/results/steps-coder-1.5b-real.json); past it, one op-by-op step is the cheaper.
CATCH_UP_STEPS = 8


class DraftProposer(Proposer):
    """sample=False: greedy drafts (the default; with a deterministic proposer sampled
    speculative decoding reproduces plain sampling token for token). sample=True: drafts drawn
    from the draft's q with the target's temperature / top-k / top-p, verified by min(1, p/q)."""

    name = "draft"

    def __init__(self, model, k: int | str = 4, sample: bool = False):
        super().__init__(k)
        self.model = model
        self.sample = sample
        self.seq = model.new_sequence()
        # the tokens whose K/V are in the draft's cache, in order: the context of the last
        # proposal, then its drafts but the last, read from the proposal when next needed
        self.context: list[int] = []
        self.last: DeviceProposal | None = None

    def attach(self, target, sampling: SamplingParams) -> None:
        check_same_vocabulary(target, self.model)
        self.sampling = sampling if self.sample else GREEDY

    def reset(self, context: list[int], states: torch.Tensor | None = None) -> None:
        self.seq.release()
        self.context, self.last = [], None

    def detach(self, target) -> None:
        self.reset([])

    @property
    def seen(self) -> list[int]:
        return self.context + (self.last.drafts[:-1] if self.last is not None else [])

    def kept(self, context: list[int]) -> int:
        """How many leading tokens of `context` the draft's cache holds."""
        n = len(self.context)
        if self.last is None or context[:n] != self.context:  # a context it did not draft for
            return common_prefix(self.seen, context)
        drafts = self.last.drafts[:-1]
        return n + common_prefix(drafts, context[n : n + len(drafts)])

    def behind(self, context: list[int]) -> int:
        return len(context) - 1 - min(self.kept(context), len(context) - 1)

    def catch_up_seed(self, behind: int, step_cost) -> float:
        # the first step runs behind + 1 tokens where a run's runs one or two: in graph steps of
        # MAX_STEP tokens as propose does, or op by op, about in proportion to the tokens
        table, n = step_cost(self.model), behind + 1
        if self.model.graphs is not None and n <= CATCH_UP_STEPS * MAX_STEP:
            full, rest = divmod(n, MAX_STEP)
            seconds = full * table(MAX_STEP) + (table(rest) if rest else 0.0)
        else:
            seconds = table(min(n, MAX_STEP)) * max(1.0, n / MAX_STEP)
        return max(0.0, seconds - table(2))

    def propose(self, context: list[int], k: int) -> DeviceProposal:
        # Rewind to what the target accepted; then run the accepted tokens not yet seen (at least
        # the last one, whose logits give the first draft), then a chain of k - 1 one-token
        # steps, each fed on the device by the one before. Nothing is read back here: the drafts
        # go to the verify step on the device, and the host reads them with its results.
        keep = min(self.kept(context), len(context) - 1)
        self.seq.truncate(keep)
        unseen = context[keep:]
        if self.model.graphs is not None and len(unseen) <= CATCH_UP_STEPS * MAX_STEP:
            while len(unseen) > MAX_STEP:  # a catch-up: graph steps, the last of them the shortest
                self.model.step(self.seq, unseen[:MAX_STEP], self.sampling, last_only=True, noise=DRAFT)
                unseen = unseen[MAX_STEP:]
        out = self.model.step(self.seq, unseen, self.sampling, last_only=True, noise=DRAFT)
        # Copied out before the chain runs: on CUDA the step's outputs are a graph's buffers, and
        # the chain graph, captured into the same memory pool, may overwrite them as it replays.
        tokens, logits = [out.tokens[-1:].clone()], [out.logits[-1:].clone()]
        if k > 1:
            rest = self.model.chain(self.seq, tokens[0], k - 1, self.sampling, DRAFT)
            tokens.append(rest.tokens)
            logits.append(rest.logits)
        q = probabilities(torch.cat(logits), self.sampling) if self.sampled_drafts else None
        self.context, self.last = list(context), DeviceProposal(torch.cat(tokens), q)
        return self.last

    def warm_up(self, target, sampling: SamplingParams, progress=None) -> None:
        self.model.warm_up(sampling if self.sample else GREEDY, noise=DRAFT, progress=progress)
        self.warm_up_costs(target, progress=progress)

    def priced_models(self, target) -> list:
        return [target, self.model]  # its drafting: a step of its own per draft

    def drafting_seed(self, k: int, step_cost) -> float:
        # the first draft: a step of the accepted tokens not yet seen (after a bonus, the last
        # draft and the bonus), then k - 1 chained one-token steps
        first = step_cost(self.model)(2)
        return first * (1 + CHAINED_SHARE * (k - 1))

    def describe(self) -> str:
        return f"draft {self.model.name} k={self.k}" + (" sampled" if self.sample else "")


def check_same_vocabulary(target, draft) -> None:
    if target.config.vocab_size != draft.config.vocab_size:
        raise EngineError(
            f"draft {draft.name} has a vocabulary of {draft.config.vocab_size} tokens, the target "
            f"{target.name} {target.config.vocab_size}: a draft model must share the target's tokenizer"
        )
    tt, dt = target.tokenizer, draft.tokenizer
    if tt is not None and dt is not None and tt.get_vocab() != dt.get_vocab():
        raise EngineError(
            f"draft {draft.name} and target {target.name} use different tokenizers: "
            "a draft model must share the target's vocabulary"
        )


def load_draft(target, options: ProposerOptions):
    """The draft model on the target's device, dtype, context and graph setting, checked at load."""
    draft = load_model(options.sources["draft"], device=str(target.device), dtype=target.dtype,
                       max_context=target.max_context, progress=options.progress, eager=options.eager)
    check_same_vocabulary(target, draft)
    draft.sample_drafts = options.sample_drafts
    return draft


def make(draft, k: int) -> DraftProposer:
    return DraftProposer(draft, k=k, sample=draft.sample_drafts)
