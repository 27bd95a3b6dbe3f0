"""A policy whose choices follow a script: the real policy's bookkeeping on them, for tests of
what a proposer does as it drafts and sits steps out."""

from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.step_costs import CostTable

RUN = 8  # plain steps per run, as on CUDA
# per choice: k drafts, or 0 for a run of RUN plain steps; four runs in a row sit out more than
# a step's worth of tokens, one run less
SCRIPT = [3, 2, 0, 3, 0, 0, 0, 0, 3, 3]


class Scripted(AdaptivePolicy):
    """The real policy's bookkeeping (record) on choices a script makes; how far behind the
    proposer says it is when it drafts is kept."""

    script = SCRIPT

    def __init__(self, model):
        super().__init__(model, lambda m: CostTable(lambda n: 1e-3))
        self.choices = 0
        self.drafted: list[tuple[int, int]] = []  # (k, behind) of each drafting choice
        self.recomputed: list[int] = []  # behind of each that computed let-go states again first

    def choose(self, proposers, context, limit):
        proposer = proposers[0]
        k = min(self.script[self.choices % len(self.script)], limit)
        self.choices += 1
        self.estimates(proposer)
        if not k:
            return Choice(None, 0, plain_seconds=1e-3, steps=RUN)
        behind, recompute = proposer.behind(context), proposer.missing(context) > 0
        self.drafted.append((k, behind))
        if recompute:
            self.recomputed.append(behind)
        return Choice(proposer, k, plain_seconds=1e-3, behind=behind, prompt=behind >= len(context) - 1,
                      recompute=recompute)
