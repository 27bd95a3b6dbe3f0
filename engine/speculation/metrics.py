"""Speculation metrics in vLLM's vocabulary, accumulated step by step.

`vllm()` gives them under the names vLLM's spec-decode metrics use (its Prometheus counters
`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
`..._num_accepted_tokens_per_pos`, and the mean acceptance length / draft acceptance rate /
per-position acceptance rate its logger derives from them), so figures from specchat and from a
vLLM server can be read side by side. vLLM has no counters for drafting and verify time; those
keep specchat's own names under the same prefix.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Metrics:
    steps: int = 0  # model steps after the prefill (decode or verify)
    drafting_steps: int = 0  # of those, the ones that verified drafts (vLLM's "drafts")
    tokens: int = 0  # tokens they emitted
    drafted: int = 0
    accepted: int = 0
    propose_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0
    histogram: Counter = field(default_factory=Counter)  # accepted drafts per step -> steps
    position_drafted: list[int] = field(default_factory=list)  # per draft position 1..k
    position_accepted: list[int] = field(default_factory=list)

    def add(self, step) -> None:
        if step.prefill:
            self.prefill_s += step.prefill_s
            return
        if not step.tokens and not step.drafts:  # a cancellation marker, no model step
            return
        self.steps += 1
        self.tokens += len(step.tokens)
        self.drafted += len(step.drafts)
        self.accepted += step.accepted
        self.propose_s += step.propose_s
        self.verify_s += step.verify_s
        self.histogram[step.accepted] += 1
        self.drafting_steps += bool(step.drafts)
        for i in range(len(step.drafts)):
            if i == len(self.position_drafted):
                self.position_drafted.append(0)
                self.position_accepted.append(0)
            self.position_drafted[i] += 1
            self.position_accepted[i] += i < step.accepted

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens per step, the bonus / correction token included (1.0 for plain decoding)."""
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def draft_acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / d for a, d in zip(self.position_accepted, self.position_drafted)]

    @property
    def vllm_mean_acceptance_length(self) -> float:
        """vLLM's: 1 + accepted drafts per drafting step (steps with no drafts left out)."""
        return 1 + self.accepted / self.drafting_steps if self.drafting_steps else 1.0

    def vllm(self) -> dict:
        """The figures under vLLM's spec-decode metric names (see the module's docstring)."""
        return {
            "vllm:spec_decode_num_drafts": self.drafting_steps,
            "vllm:spec_decode_num_draft_tokens": self.drafted,
            "vllm:spec_decode_num_accepted_tokens": self.accepted,
            "vllm:spec_decode_num_accepted_tokens_per_pos": list(self.position_accepted),
            "mean_acceptance_length": self.vllm_mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "per_position_acceptance_rate": self.per_position_acceptance,
            "accepted_per_step_histogram": {str(n): c for n, c in sorted(self.histogram.items())},
            "spec_decode_drafting_time_s": self.propose_s,
            "spec_decode_verify_time_s": self.verify_s,
            "num_steps": self.steps,
            "num_output_tokens": self.tokens,
            "tokens_per_second": self.tokens_per_second,
        }

    @property
    def decode_s(self) -> float:
        return self.propose_s + self.verify_s

    @property
    def tokens_per_second(self) -> float:
        """Decode speed: tokens after the first over the time of the steps that made them."""
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    def summary(self) -> str:
        line = (
            f"{self.tokens + 1} tokens, {self.steps} steps, {self.mean_acceptance_length:.2f} tokens/step, "
            f"{self.tokens_per_second:.1f} tok/s"
        )
        if self.drafted:
            line += f", acceptance {100 * self.draft_acceptance_rate:.0f}% of {self.drafted} drafts"
        if self.steps:
            ms = 1000 / self.steps
            line += f", propose {ms * self.propose_s:.2f} ms + verify {ms * self.verify_s:.2f} ms per step"
        return line

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "per_position_acceptance": self.per_position_acceptance,
            "histogram": dict(sorted(self.histogram.items())),
            "propose_s": self.propose_s,
            "verify_s": self.verify_s,
            "prefill_s": self.prefill_s,
            "tokens_per_second": self.tokens_per_second,
        }
