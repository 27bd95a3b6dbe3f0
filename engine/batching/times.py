"""Where a batched run's wall time went: prefills, decode runs, and the host's work between them.

Each phase ends in a read back to the host (the prefill's first tokens, a run's n x B tokens),
so timing it on the host's clock needs no extra synchronisation: what is left of the whole
(`other`) is host work the GPU waited on (admitting and retiring rows, the caller's on_finish).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class BatchTimes:
    prefill_s: float = 0.0
    prompt_tokens: int = 0
    prefills: int = 0  # prefill forwards (admitted prompts are packed a few thousand tokens each)
    decode_s: float = 0.0
    steps: int = 0
    row_steps: int = 0  # rows x steps: the tokens the decode steps sampled, kept or not
    kept: int = 0  # new tokens kept (those past a sequence's end inside a run are dropped)
    finished: int = 0  # sequences ended (each one's first token came from its prefill)
    started: float = field(default_factory=time.perf_counter)

    @contextmanager
    def prefill(self, tokens: int):
        t0 = time.perf_counter()
        yield
        self.prefill_s += time.perf_counter() - t0
        self.prompt_tokens += tokens
        self.prefills += 1

    @contextmanager
    def decode(self, rows: int, steps: int):
        t0 = time.perf_counter()
        yield
        self.decode_s += time.perf_counter() - t0
        self.steps += steps
        self.row_steps += rows * steps

    def ended(self, tokens: int) -> None:
        """A sequence ended with `tokens` new tokens kept."""
        self.kept += tokens
        self.finished += 1

    def summary(self) -> str:
        total = time.perf_counter() - self.started
        other = total - self.prefill_s - self.decode_s
        parts = [f"{self.kept:,} new tokens in {total:.1f} s ({self.kept / max(total, 1e-9):,.0f} tok/s)"]
        if self.prefills:
            parts.append(f"prefill {self.prefill_s:.1f} s ({self.prompt_tokens:,} prompt tokens in "
                         f"{self.prefills} forwards, {self.prompt_tokens / max(self.prefill_s, 1e-9):,.0f} tok/s)")
        if self.steps:
            parts.append(f"decode {self.decode_s:.1f} s ({self.steps:,} steps of {self.row_steps / self.steps:.0f} "
                         f"rows on average, {1e3 * self.decode_s / self.steps:.2f} ms a step, "
                         f"{(self.kept - self.finished) / max(self.row_steps, 1):.0%} of their tokens kept)")
        parts.append(f"other {other:.1f} s")
        return "; ".join(parts)
