"""The learning rate at each step: a linear warm-up, then a cosine down to a tenth of the peak.
A function of the step and of how much of the run is done (by steps, or by time for a run with
a time budget), so a resumed run needs no scheduler state."""

from __future__ import annotations

import math


def learning_rate(step: int, done: float, peak: float, warmup: int) -> float:
    """`done`: the fraction of the run behind this step, 0..1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, max(0.0, done)))))
