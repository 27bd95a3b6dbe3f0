"""A policy the run-ahead tests share: the real policy's bookkeeping on a fixed script."""

from engine.speculation.adaptive import AdaptivePolicy, Choice
from engine.speculation.step_costs import CostTable


class SitsOut(AdaptivePolicy):
    """The real policy's bookkeeping on a script: 3 drafts, then 16 plain steps asked for at once
    (two runs of 8)."""

    def __init__(self, model):
        super().__init__(model, lambda m: CostTable(lambda n: 1e-3))
        self.choices = 0

    def choose(self, proposers, context, limit):
        self.choices += 1
        proposer = proposers[0]
        self.estimates(proposer)
        if self.choices % 2 == 0:
            return Choice(None, 0, seconds=2e-3, plain_seconds=1e-3, steps=min(16, limit + 1))
        behind = proposer.behind(context)
        return Choice(proposer, min(3, limit), plain_seconds=1e-3, behind=behind, prompt=behind >= len(context) - 1)
