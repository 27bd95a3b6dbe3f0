"""A smaller model with the target's vocabulary drafts k tokens on its own paged cache."""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.proposers.base import Proposal, Proposer
from engine.sampling import DRAFT, SamplingParams, probabilities

GREEDY = SamplingParams()


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class DraftProposer(Proposer):
    """sample=False: greedy drafts (the default; with a deterministic proposer sampled
    speculative decoding reproduces plain sampling token for token). sample=True: drafts drawn
    from the draft's q with the target's temperature / top-k / top-p, verified by min(1, p/q)."""

    name = "draft"

    def __init__(self, model, k: int = 4, sample: bool = False):
        super().__init__(k)
        self.model = model
        self.sample = sample
        self.sampling = GREEDY
        self.seq = model.new_sequence()
        self.seen: list[int] = []  # tokens whose K/V are in the draft's cache, in order

    @property
    def sampled_drafts(self) -> bool:
        return self.sample and not self.sampling.greedy

    def attach(self, target, sampling: SamplingParams) -> None:
        check_same_vocabulary(target, self.model)
        self.sampling = sampling if self.sample else GREEDY

    def reset(self, context: list[int], captured: torch.Tensor | None = None) -> None:
        self.seq.release()
        self.seen = []

    def detach(self, target) -> None:
        self.reset([])

    def propose(self, context: list[int], k: int) -> Proposal:
        # Rewind to what the target accepted; then run the accepted tokens not yet seen (at least
        # the last one, whose logits give the first draft), then k - 1 one-token steps.
        keep = min(common_prefix(self.seen, context), len(context) - 1)
        self.seq.truncate(keep)
        feed = context[keep:]
        drafts: list[int] = []
        qs = []
        for i in range(k):
            out = self.model.step(self.seq, feed, self.sampling, last_only=True, stream=DRAFT)
            drafts.append(int(out.tokens[-1]))
            if self.sampled_drafts:
                qs.append(probabilities(out.logits[-1:], self.sampling))
            feed = drafts[-1:]
        self.seen = context + drafts[:-1]
        return Proposal(drafts, torch.cat(qs) if qs else None)

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
