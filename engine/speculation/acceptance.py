"""How likely a proposer's drafts are to be accepted, per draft position, following the text.

a_j is the chance that draft j is accepted given drafts 1..j-1 were. Each is a ratio of
exponentially weighted counts (drafts that reached position j, drafts kept there), so older
steps fade and the estimate follows the text from copying to new prose and back. Where a
position has little recent evidence it leans on the position before it (a_1 on a neutral
prior): a position last drafted long ago, in other text, fades towards what the shallower
positions say now instead of keeping its stale value, so a proposer that turns good again
is trusted with long drafts as soon as its first drafts land. That lean weighs a step's worth
of evidence (LEAN), and a_1 of a proposer nothing is known of starts as a step at the prior
(START_WEIGHT), fading with the text's steps: one or two lucky drafts do not yet make a proposer
that is right fifteen drafts deep, nor one or two misses a proposer that is never right.

A proposer that carries a measurement of itself (a DFlash drafter's training: `known`) starts
from it instead, and every position leans on it with KNOWN_WEIGHT steps' worth: a few misses by
chance then do not take a drafter known to be good under its break-even, where it would sit out
and, learning nothing while out, stay out.
"""

from __future__ import annotations

from engine.limits import MAX_K

FADE = 0.92  # weight left to earlier steps at each new step (about 12 steps' memory)
PRIOR = 0.5  # a_1 with no evidence
PRIOR_WEIGHT = 0.25  # a_1's pull towards PRIOR, in steps' worth of evidence
START_WEIGHT = 1.0  # steps' worth of PRIOR in a_1 of a proposer nothing is known of, fading
LEAN = 1.0  # a deeper position's pull towards the one before it, in steps' worth of evidence
SETTLED = 0.5 / (1 - FADE)  # steps' worth of recent evidence (half the fade's window) past which a share is settled
KNOWN_WEIGHT = 3.0  # steps' worth of a proposer's own measurement in each a_j (a quarter of the fade's memory)


class Acceptance:
    def __init__(self, fade: float = FADE, known: list[float] | None = None):
        self.fade = fade
        self.known = None if known is None else [known[min(j, len(known) - 1)] for j in range(MAX_K)]
        self.reached = [0.0] * MAX_K  # weighted steps whose drafts 1..j-1 were all accepted
        self.kept = [0.0] * MAX_K  # ... and draft j too
        start = PRIOR if self.known is None else self.known[0]
        self.reached[0], self.kept[0] = START_WEIGHT, START_WEIGHT * start  # fades like the text's steps
        self._tokens: dict[float, list[float]] = {}  # tokens(optimism), until the next record
        self.explored = self.count_explored()

    def tokens(self, optimism: float = 0.0) -> list[float]:
        """[E(0) .. E(MAX_K)]: what a step of each k emits on average, each a_j raised by
        `optimism` standard errors of its estimate (see `rates`). The policy reads this every
        step (the plain curve and a raised one); both change only when a proposal of this bucket
        is recorded, and are found in one pass."""
        found = self._tokens.get(optimism)
        if found is None:
            plain, raised = self._rates(optimism)
            self._tokens[0.0] = expected_curve(plain)
            found = self._tokens[optimism] = expected_curve(raised) if optimism else self._tokens[0.0]
        return found

    def count_explored(self) -> int:
        """How many leading positions have at least half a step's worth of recent evidence."""
        for j, reached in enumerate(self.reached):
            if reached < 0.5:
                return j
        return MAX_K

    def rates(self, optimism: float = 0.0) -> list[float]:
        """[a_1 .. a_MAX_K]; with `optimism` z, each position with less than SETTLED steps of
        recent evidence raised by z standard errors of a share measured on it, sqrt(a (1 - a) /
        (reached + 1)), at most 1: as much as a position drafted little of late might be better
        than it looks. A settled one is not: drafts that keep missing stop being tried."""
        return self._rates(optimism)[1]

    def _rates(self, optimism: float) -> tuple[list[float], list[float]]:
        """(the rates, the rates raised by `optimism`), in one pass: the policy asks for both
        every step, on the host between the GPU's steps (so conditionals, not min(): a call
        each costs more than the arithmetic here)."""
        plain, raised = [], []
        prior, weight, level, known = PRIOR, PRIOR_WEIGHT, 1.0, self.known
        for j, (reached, kept) in enumerate(zip(self.reached, self.kept)):
            if known is not None:  # the proposer's own measurement of this position, at the
                # level the first draft's evidence shows now (deeper ones are seldom reached)
                prior, weight = known[j] * level, KNOWN_WEIGHT
                if prior > 0.98:  # noqa: PLR1730
                    prior = 0.98
            prior = (kept + weight * prior) / (reached + weight)
            if j == 0 and known is not None:
                level = prior / known[0]
            rate = prior if prior < 1.0 else 1.0  # noqa: FURB136
            plain.append(rate)
            if optimism and reached < SETTLED:
                rate = prior + optimism * (prior * (1.0 - prior) / (reached + 1.0)) ** 0.5
                if rate > 1.0:  # noqa: PLR1730
                    rate = 1.0
            raised.append(rate)
            weight = LEAN
        return plain, raised

    def shrink(self, share: float) -> None:
        """Keep `share` of the evidence: the next steps' weigh more against it."""
        self._tokens = {}
        self.reached = [share * r for r in self.reached]
        self.kept = [share * c for c in self.kept]
        self.explored = self.count_explored()

    def record(self, drafted: int, accepted: int) -> None:
        """One verified proposal: `drafted` drafts, the first `accepted` of them kept."""
        self._tokens = {}
        self.reached = [self.fade * r for r in self.reached]
        self.kept = [self.fade * c for c in self.kept]
        for j in range(min(drafted, accepted + 1)):  # draft j was reached: all before it were kept
            self.reached[j] += 1.0
            self.kept[j] += j < accepted
        self.explored = self.count_explored()


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
