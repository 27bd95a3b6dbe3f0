"""How likely a proposer's drafts are to be accepted, per draft position, following the text.

a_j is the chance that draft j is accepted given drafts 1..j-1 were. Each is a ratio of
exponentially weighted counts (drafts that reached position j, drafts kept there), so older
steps fade and the estimate follows the text from copying to new prose and back. Where a
position has little recent evidence it leans on the position before it (a_1 on a neutral
prior): a position last drafted long ago, in other text, fades towards what the shallower
positions say now instead of keeping its stale value, so a proposer that turns good again
is trusted with long drafts as soon as its first drafts land.
"""

from __future__ import annotations

from engine.limits import MAX_K

FADE = 0.92  # weight left to earlier steps at each new step (about 12 steps' memory)
PRIOR = 0.5  # a_1 with no evidence
PRIOR_WEIGHT = 0.25  # in steps' worth of evidence: the text soon outweighs it


class Acceptance:
    def __init__(self, fade: float = FADE):
        self.fade = fade
        self.reached = [0.0] * MAX_K  # weighted steps whose drafts 1..j-1 were all accepted
        self.kept = [0.0] * MAX_K  # ... and draft j too
        self._tokens: list[float] | None = None  # tokens(), until the next record

    def tokens(self) -> list[float]:
        """[E(0) .. E(MAX_K)]: what a step of each k emits on average. The policy reads this
        every step; it changes only when a proposal of this bucket is recorded."""
        if self._tokens is None:
            self._tokens = expected_curve(self.rates())
        return self._tokens

    def rates(self) -> list[float]:
        """[a_1 .. a_MAX_K]."""
        out, prior = [], PRIOR
        for reached, kept in zip(self.reached, self.kept):
            prior = (kept + PRIOR_WEIGHT * prior) / (reached + PRIOR_WEIGHT)
            out.append(prior)
        return out

    def record(self, drafted: int, accepted: int) -> None:
        """One verified proposal: `drafted` drafts, the first `accepted` of them kept."""
        self._tokens = None
        self.reached = [self.fade * r for r in self.reached]
        self.kept = [self.fade * c for c in self.kept]
        for j in range(min(drafted, accepted + 1)):  # draft j was reached: all before it were kept
            self.reached[j] += 1.0
            self.kept[j] += j < accepted


def expected_tokens(rates: list[float], k: int) -> float:
    """Tokens a step of k drafts emits on average: each run of accepted drafts, plus the model's
    own token after them (bonus or correction)."""
    return expected_curve(rates[:k])[-1]


def expected_curve(rates: list[float]) -> list[float]:
    """expected_tokens for every k from 0 to len(rates), in one pass."""
    out, total, survive = [1.0], 1.0, 1.0
    for a in rates:
        survive *= a
        total += survive
        out.append(total)
    return out
