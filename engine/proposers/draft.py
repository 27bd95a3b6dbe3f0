"""A smaller model with the target's vocabulary drafts k tokens on its own paged cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.errors import EngineError
from engine.proposers.base import Proposal, Proposer
from engine.sampling import DRAFT, SamplingParams, probabilities

GREEDY = SamplingParams()


@dataclass
class DeviceProposal(Proposal):
    on_device: torch.Tensor | None = None  # the drafts where the drafter sampled them [k]


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
        # the last one, whose logits give the first draft), then a chain of k - 1 one-token
        # steps, each fed on the device by the one before: the host waits once, at the end.
        keep = min(common_prefix(self.seen, context), len(context) - 1)
        self.seq.truncate(keep)
        out = self.model.step(self.seq, context[keep:], self.sampling, last_only=True, stream=DRAFT)
        # Copied out before the chain runs: on CUDA the step's outputs are a graph's buffers, and
        # the chain graph, captured into the same memory pool, may overwrite them as it replays.
        tokens, logits = [out.tokens[-1:].clone()], [out.logits[-1:].clone()]
        if k > 1:
            rest = self.model.chain(self.seq, tokens[0], k - 1, self.sampling, DRAFT)
            tokens.append(rest.tokens)
            logits.append(rest.logits)
        on_device = torch.cat(tokens)
        drafts = on_device.tolist()
        q = probabilities(torch.cat(logits), self.sampling) if self.sampled_drafts else None
        self.seen = context + drafts[:-1]
        return DeviceProposal(drafts, q, on_device)

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
