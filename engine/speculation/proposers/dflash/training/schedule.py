"""The learning rate at each step: a linear warm-up, then a cosine down to a tenth of the peak.
A function of the step alone, so a resumed run needs no scheduler state."""

from __future__ import annotations

import math


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    done = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * done)))
