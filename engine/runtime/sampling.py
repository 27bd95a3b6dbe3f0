"""Sampling on the device, with counter-based randomness.

The noise for the token at sequence position p is a hash of (seed, p, vocabulary index): the
token sampled at p does not depend on how many tokens the step computed, nor on what was
sampled before. Plain decoding and a verify step therefore draw the very same token at p from
the same logits, which is what makes sampled speculative decoding reproduce plain sampling.

Sampling is the Gumbel-max trick over the filtered logits: argmax(logits / T + g) with
g = -log(-log(u)) is an exact draw from softmax(logits / T), and needs no host round trip.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from engine.errors import EngineError

MASK32 = 0xFFFFFFFF
# Streams of independent noise: the target's own tokens, a drafter's sampled drafts, the
# accept test and the residual draw of the min(1, p/q) rule.
TOKEN, DRAFT, ACCEPT, RESIDUAL = 0, 0x2545F491, 0x6A09E667, 0x3C6EF372


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    seed: int = 0
    max_tokens: int = 256

    def __post_init__(self):
        if not (self.temperature >= 0.0 and self.temperature <= 100.0):
            raise EngineError(f"temperature must be between 0 and 100, got {self.temperature}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise EngineError(f"top-k must be a whole number >= 0 (0 turns it off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise EngineError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise EngineError(f"max tokens must be at least 1, got {self.max_tokens}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise EngineError(f"seed must be a whole number >= 0, got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()  # argmax: plain greedy decoding, and the drafts of a proposer that does not sample


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply), in int64 so every product stays below 2**63."""
    x = x & MASK32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & MASK32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & MASK32
    return x ^ (x >> 16)


def uniform(seed: int | torch.Tensor, noise: int, positions: torch.Tensor, width: int) -> torch.Tensor:
    """u in (0, 1) for every (position, index < width): [T, width], a pure function of its key.
    seed: one for every row, or a tensor [T] of each row's own (a batch of sequences)."""
    return uniform_at(seed, noise, positions, torch.arange(width, device=positions.device, dtype=torch.long))


def uniform_at(seed: int | torch.Tensor, noise: int, positions: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """`uniform` at chosen vocabulary indices only: cols [width] for every row or [T, width]."""
    keys = (seed ^ noise) & MASK32
    base = _mix(keys if isinstance(keys, torch.Tensor) else torch.full_like(positions, keys))
    row = _mix(base + positions * 0x9E3779B1)  # [T]
    h = _mix(row[:, None] + cols * 0x7FEB352D)
    return ((h >> 8).float() + 0.5) * (1.0 / (1 << 24))


def gumbel(seed: int | torch.Tensor, noise: int, positions: torch.Tensor, width: int) -> torch.Tensor:
    return -torch.log(-torch.log(uniform(seed, noise, positions, width)))


def gumbel_at(seed: int | torch.Tensor, noise: int, positions: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """`gumbel` at chosen vocabulary indices only (see `uniform_at`)."""
    return -torch.log(-torch.log(uniform_at(seed, noise, positions, cols)))


def filtered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits / T with everything outside top-k and top-p set to -inf. [T, V] float32."""
    scores = logits.float() / params.temperature
    if params.top_k and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True, stable=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the better tokens
        drop = before >= params.top_p  # keep the fewest top tokens whose mass reaches top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return scores


def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution `sample` draws from: softmax of the filtered logits (one-hot when greedy).
    With top-k on, computed over the k best tokens and scattered into the vocabulary's zeros."""
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    if among_top_k(logits, params):
        values, index = top_k_scores(logits, params)
        return torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, index, torch.softmax(values, dim=-1))
    return torch.softmax(filtered(logits, params), dim=-1)


def among_top_k(logits: torch.Tensor, params: SamplingParams) -> bool:
    return 0 < params.top_k < logits.shape[-1]


def top_k_scores(logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, vocabulary indices) of the k best tokens of each row, best first: logits / T,
    top-p's cut set to -inf. `filtered` at those indices, with top-p's sums over k values
    instead of the vocabulary (a cut can differ only at a near-tie of cumulative probability, or
    where several tokens share the k-th logit exactly: which of them topk keeps is open)."""
    values, index = torch.topk(logits.float() / params.temperature, params.top_k, dim=-1)
    if params.top_p < 1.0:
        # top-p's sums run in the whole-vocabulary order: by score, then by index among equal
        # scores (topk leaves their order open); two k-wide sorts
        index, by_index = index.sort(dim=-1)
        values, by_score = values.gather(-1, by_index).sort(dim=-1, descending=True, stable=True)
        index = index.gather(-1, by_score)
        probs = torch.softmax(values, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the better tokens
        values = values.masked_fill(before >= params.top_p, float("-inf"))
    return values, index


FUSED_MAX_K = 64  # top-k the fused draw takes (engine/kernels/sampling.py); past it, torch's


def fused_top_k(logits: torch.Tensor, params: SamplingParams) -> bool:
    """Whether a top-k draw runs as the two fused kernels: on CUDA, for k up to FUSED_MAX_K, with
    SPECCHAT_FUSED_SAMPLING=1 (off by default until timed on the GPU against torch's ops)."""
    return (logits.is_cuda and params.top_k <= FUSED_MAX_K and logits.stride(-1) == 1
            and os.environ.get("SPECCHAT_FUSED_SAMPLING", "0") == "1")


def sample(
    logits: torch.Tensor, positions: torch.Tensor, params: SamplingParams, noise: int = TOKEN,
    seeds: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token per row: logits [T, V] predict the tokens at `positions` [T]. Returns [T] long.
    seeds [T]: each row's own seed in place of params.seed (rows of different sequences).
    With top-k on, the draw is taken among the k best tokens with each one's own noise: the
    same token as over the whole filtered vocabulary (see `top_k_scores`), for a top-k and a few
    k-wide kernels instead of a sort, a hash and some ten passes over V (on the H200 a quarter
    of a 1.5B's decode step); on CUDA two fused kernels (`fused_top_k`) in place of those 80-odd
    launches, once measured."""
    if params.greedy:
        return logits.argmax(-1)
    seed = params.seed if seeds is None else seeds
    if among_top_k(logits, params):
        if fused_top_k(logits, params):
            from engine.kernels.sampling import sample_top_k  # Triton: CUDA only

            return sample_top_k(logits, positions, params.temperature, params.top_k, params.top_p, params.seed,
                                noise, seeds)
        values, index = top_k_scores(logits, params)
        drawn = gumbel_at(seed, noise, positions, index)
        return index.gather(-1, (values + drawn).argmax(-1, keepdim=True)).squeeze(-1)
    scores = filtered(logits, params)
    return (scores + gumbel(seed, noise, positions, scores.shape[-1])).argmax(-1)


def accept_tokens(
    p: torch.Tensor,  # [k + 1, V] target distribution after each prefix
    q: torch.Tensor,  # [k, V] the distribution each draft was drawn from
    drafts: torch.Tensor,  # [k]
    bonus: torch.Tensor,  # [] the target's own sample after all k drafts
    positions: torch.Tensor,  # [k] positions of the drafts
    params: SamplingParams,
) -> torch.Tensor:
    """The min(1, p/q) rule for sampled drafts, on the device. Returns [k + 1] tokens: position i
    holds d_i where d_i is accepted, else a draw from max(p_i - q_i, 0) renormalised; the last
    holds the bonus. The host keeps tokens while they equal the drafts, then one more: a
    residual draw never equals its rejected draft, since p(d) < q(d) zeroes it."""
    k = drafts.shape[0]
    rows = torch.arange(k, device=drafts.device)
    p_d, q_d = p[rows, drafts], q[rows, drafts]
    u = uniform(params.seed, ACCEPT, positions, 1)[:, 0]
    accepted = u * q_d < p_d
    if among_top_k(p, params):
        # the residual is zero where p is: the draw is taken over p's k tokens, each with the
        # noise it has in the whole vocabulary (the same token, for k-wide work instead of V-wide)
        support = torch.topk(p[:k], params.top_k, dim=-1).indices
        residual = (p[:k].gather(-1, support) - q.gather(-1, support)).clamp_min(0.0)
        noise = gumbel_at(params.seed, RESIDUAL, positions, support)
        corrections = support.gather(-1, (torch.log(residual) + noise).argmax(-1, keepdim=True)).squeeze(-1)
    else:
        residual = (p[:k] - q).clamp_min(0.0)
        noise = gumbel(params.seed, RESIDUAL, positions, residual.shape[-1])
        corrections = (torch.log(residual) + noise).argmax(-1)
    return torch.cat([torch.where(accepted, drafts, corrections), bonus.view(1)])
