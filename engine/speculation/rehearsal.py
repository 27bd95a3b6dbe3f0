"""A short reply rehearsed at load, so that the user's first reply runs as fast as later ones.

The warm-ups capture every CUDA graph a reply replays, but a reply also runs work around them
that only a reply runs: the acceptance of drafts, a proposer's own bookkeeping, the first
allocations of their tensors, the first launch of each of their kernels (which, with CUDA's lazy
module loading, loads it), the one-off timing of step costs that k "auto" starts from. On the H200
that made a chat's first n-gram reply at k 15 take 31 ms more than the next (0.171 s against
0.140 s). So once a proposer (or the plain model) is ready, it writes a reply of REHEARSAL_TOKENS
to a prompt that repeats itself, where the n-gram proposer finds a copy at once and every
proposer drafts at its deepest k. What an adaptive proposer learnt of that text is forgotten
afterwards: the user's reply starts from nothing, as it would have.
"""

from __future__ import annotations

from dataclasses import replace

from engine.limits import AUTO, MAX_STEP
from engine.runtime.sampling import SamplingParams
from engine.speculation.loop import stream

REHEARSAL_TOKENS = 2 * MAX_STEP


def prompt(vocab_size: int) -> list[int]:
    """Eight ordinary token ids (past the few special ones a vocabulary starts with), six times
    over: a copy for the n-gram proposer from the first step."""
    first = min(100, vocab_size - 8)
    return list(range(first, first + 8)) * 6


def rehearse(model, proposer=None, sampling: SamplingParams | None = None) -> int:
    """Run one short reply on `model` with `proposer` (None: plain decoding) under `sampling`,
    its tokens thrown away; a fixed k is raised to the proposer's deepest for it. Leaves the
    proposer's k as it was and its adaptive estimates (and its members') unset. Returns how
    many steps drafted."""
    ids = prompt(model.config.vocab_size)
    # within a small context too (a verify step may reach MAX_STEP past the reply): a rehearsal
    # that does not fit is skipped, never a refusal of the proposer
    tokens = min(REHEARSAL_TOKENS, model.max_context - len(ids) - MAX_STEP)
    if tokens < 2:
        return 0
    sampling = replace(sampling or SamplingParams(), max_tokens=tokens)
    k = None if proposer is None else proposer.k
    if proposer is not None and k != AUTO:
        proposer.k = proposer.max_k
    drafted = 0
    try:
        for step in stream(model, ids, sampling, stop_ids=(), speculative=proposer):
            drafted += bool(step.drafts)
    finally:
        if proposer is not None:
            proposer.k = k
            for p in (proposer, *proposer.members):  # proposer auto's members learn too
                p.estimates = None
    return drafted
