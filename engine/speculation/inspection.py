"""What one verify step decided with, read from its own logits, for the step inspector.

Only a Generation with `inspect` on builds these: the numbers come off the device once per step
(a few floats per position, not the logits), so with it off nothing is computed or copied.

The probability shown for the model's token at a position is that of the distribution the step
drew from: softmax(logits) when decoding greedily (the greedy token is its argmax, and its
probability says how sure the model was), the filtered, tempered distribution otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.runtime.sampling import ACCEPT, SamplingParams, probabilities, uniform

TOP = 5  # tokens listed at the rejection point


@dataclass
class DraftCheck:
    token: int  # the draft
    kept: bool  # the engine's verdict
    p: float  # the draft's probability under the model at its position
    q: float | None = None  # sampled drafts: the drafter's probability of it
    ratio: float | None = None  # sampled drafts: min(1, p / q), the chance it is kept
    u: float | None = None  # sampled drafts: the uniform number; kept when u < ratio


@dataclass
class Inspection:
    position: int  # sequence position of the step's first token
    model_tokens: list[int]  # the model's own token after each prefix [last, d1..di]
    model_p: list[float]  # its probability
    drafts: list[DraftCheck]
    top: list[tuple[int, float]]  # the five likeliest tokens where the step decided its last token
    greedy: bool
    read_s: float = 0.0  # what reading these numbers cost, after the step's clock stopped

    @property
    def decided_at(self) -> int:
        """Index of the position whose token ended the step (the refusal, or the bonus)."""
        return next((i for i, d in enumerate(self.drafts) if not d.kept), len(self.drafts))


def shown_distribution(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """[T, V] float32: what each position's token was drawn from (see the module's docstring)."""
    if sampling.greedy:
        return torch.softmax(logits.float(), dim=-1)
    return probabilities(logits, sampling)


def inspect_step(logits: torch.Tensor, model_tokens: torch.Tensor, drafts: list[int], accepted: int,
                 q: torch.Tensor | None, position: int, sampling: SamplingParams) -> Inspection:
    """logits [k + 1, V] and model_tokens [k + 1] of the verify step over [last, d1..dk]; q [k, V]
    the drafter's distributions when the drafts were sampled (None: compared to the model's own)."""
    started = time.perf_counter()
    k = len(drafts)
    p = shown_distribution(logits[: k + 1], sampling)
    rows = torch.arange(k + 1, device=p.device)
    own = model_tokens[: k + 1].to(p.device)
    model_p = p[rows, own]
    d = torch.tensor(drafts, dtype=torch.long, device=p.device)
    p_d = p[rows[:k], d]
    decided = min(accepted, k)
    top = torch.topk(p[decided], min(TOP, p.shape[-1]))
    sampled = q is not None and k > 0
    if sampled:
        q_d = q[:k].to(p.device).float()[rows[:k], d]
        ratio = torch.clamp(p_d / q_d, max=1.0)
        u = uniform(sampling.seed, ACCEPT, torch.arange(position, position + k, device=p.device), 1)[:, 0]
        extra = torch.stack((q_d, ratio, u)).tolist()
    # one copy to the host for the whole step
    own_l, model_p_l, p_d_l = own.tolist(), model_p.tolist(), p_d.tolist()
    checks = []
    for i, token in enumerate(drafts):
        check = DraftCheck(token, i < accepted, p_d_l[i])
        if sampled:
            check.q, check.ratio, check.u = extra[0][i], extra[1][i], extra[2][i]
        checks.append(check)
    top_l = list(zip(top.indices.tolist(), top.values.tolist()))
    return Inspection(position, own_l, model_p_l, checks, top_l, sampling.greedy, time.perf_counter() - started)
