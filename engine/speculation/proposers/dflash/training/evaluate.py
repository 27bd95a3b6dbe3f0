"""What a drafter buys: mean tokens per step (tau, the bonus included) when it drafts for its
target at k, over a list of prompts, greedy. The same loop that serves (generate with a
DFlashProposer), so the figure is what the chat and the bench will see."""

from __future__ import annotations

from engine.runtime.sampling import SamplingParams
from engine.speculation.loop import generate
from engine.speculation.proposers.dflash.proposer import DFlashProposer


def measure_tau(target, drafter, prompts: list[list[int]], max_tokens: int = 128, k: int | None = None,
                stop_ids=None) -> float:
    """Tokens per step over all the prompts' replies together (steps after the prefill)."""
    stop = target.stop_ids() if stop_ids is None and target.tokenizer is not None else (stop_ids or [])
    tokens = steps = 0
    for ids in prompts:
        result = generate(target, ids, SamplingParams(temperature=0.0, max_tokens=max_tokens), stop_ids=stop,
                          speculative=DFlashProposer(drafter, k=k))
        tokens += result.metrics.tokens
        steps += result.metrics.steps
    return tokens / max(steps, 1)
