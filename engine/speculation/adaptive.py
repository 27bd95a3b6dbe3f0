"""k = "auto" and proposer = "auto": each step, the drafts that maximise expected tokens per second.

A step of k drafts emits on average E(k) = 1 + sum_i prod_(j<=i) a_j tokens (acceptance.py) and
costs drafting(k) + verify(k + 1) seconds; a plain step emits 1 token for verify(1). Every step
the policy takes, over the proposers it may use and each k they allow, the option of highest
E(k) / cost, plain decoding included. Acceptance is estimated per proposer and per the
proposer's own reading of the context (its `bucket`: the n-gram proposer's match length), costs
from the run's own steps (step_costs.py).

A proposer that loses sits out, so its estimates would stop following the text: now and then
it gets a probe step with its best k. Probes are paid from a budget: each step sat out earns
PROBE_SHARE of a plain step's time, a probe spends what it cost beyond the plain steps that
would have made its tokens (a probe that pays refunds). So where a proposer never pays, probing
costs at most PROBE_SHARE of the time, and a cheap proposer (n-gram) probes far more often than
an expensive one (a draft model), and comes back as soon as the text turns its way. A proposer
starts with a full budget (MAX_CREDIT), so a draft model is tried in a reply's first steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.limits import AUTO, MAX_K
from engine.speculation.acceptance import Acceptance
from engine.speculation.proposers.base import Proposer
from engine.speculation.step_costs import CostTable, step_costs

PROBE_SHARE = 0.01  # of the time spent sitting out, what probes may cost
MAX_CREDIT = 4.0  # plain steps' time: no burst of probes after a long time out


@dataclass
class Choice:
    """What one step runs: `proposer` with k drafts (None, 0: a plain step), and why."""

    proposer: Proposer | None
    k: int
    tokens: float = 1.0  # expected tokens of the step
    seconds: float = 0.0  # its expected cost
    plain_seconds: float = 0.0  # a plain step's
    probe: bool = False  # taken to learn, not because it wins
    bucket: int = 1

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")

    @property
    def gain(self) -> float | None:
        """Expected tokens per second over plain decoding's (None where no costs are known)."""
        if self.seconds <= 0 or self.plain_seconds <= 0:
            return None
        return self.rate * self.plain_seconds


def best_k(tokens: list[float], drafting: list[float], verify: list[float], ks: range) -> tuple[int, float, float]:
    """(k, expected tokens, expected seconds) of the k in `ks` with the most tokens per second,
    from E(k) (`tokens`), the cost of drafting k and of a verify step of n, each indexed by k or n."""
    best, best_tokens, best_seconds = 0, 0.0, 1.0
    for k in ks:
        t, s = tokens[k], drafting[k] + verify[k + 1]
        if best_tokens * s < t * best_seconds:
            best, best_tokens, best_seconds = k, t, s
    return best, best_tokens, best_seconds


class Estimates:
    """What the policy knows of one proposer: acceptance per bucket, drafting costs, its probes."""

    def __init__(self, proposer: Proposer, step_cost: Callable[[object], CostTable], credit: float):
        self.buckets: dict[int, Acceptance] = {}
        self.drafting = CostTable(lambda k: proposer.drafting_seed(k, step_cost))
        self.credit = credit  # seconds probes may still cost (see PROBE_SHARE)
        # drafted on the step before: a proposal after sitting out may first catch up on the
        # context (a draft model runs every token it missed), which is not what drafting k costs
        # in a run of drafting steps, so its time goes to the probe's account only
        self.in_run = False

    def acceptance(self, bucket: int) -> Acceptance:
        found = self.buckets.get(bucket)
        if found is None:
            found = self.buckets[bucket] = Acceptance()
        return found


class AdaptivePolicy:
    """Chooses each step's proposer and k for a generation whose proposer or k is "auto".

    Estimates live on the proposers (so a chat's next reply starts from what this one learnt),
    step costs with the target model."""

    def __init__(self, model, step_cost: Callable[[object], CostTable] = step_costs):
        self.step_cost = step_cost
        self.verify = step_cost(model)

    def estimates(self, proposer: Proposer) -> Estimates:
        if proposer.estimates is None:
            # A proposer nothing is known of starts with a full budget, so it is tried at once:
            # on the prior alone a model drafter (a step of its own per draft) never looks worth
            # it, and a budget earned from zero would first let it try some 100 steps in, when a
            # short reply is over.
            credit = MAX_CREDIT * self.verify(1)
            proposer.estimates = Estimates(proposer, self.step_cost, credit)
        return proposer.estimates

    def choose(self, proposers: list[Proposer], context: list[int], limit: int) -> Choice:
        verify = self.verify.upto(MAX_K + 1)
        plain = verify[1]
        best = Choice(None, 0, 1.0, plain, plain)
        overdue: Choice | None = None
        for proposer in proposers:
            bucket = proposer.bucket(context)
            top = min(limit, proposer.max_k)
            if bucket == 0 or top < 1:  # nothing to propose here: not sitting out by choice
                continue
            est = self.estimates(proposer)
            fixed = min(proposer.k, top) if proposer.k != AUTO else 0
            ks = range(fixed, fixed + 1) if fixed else range(1, top + 1)
            tokens = est.acceptance(bucket).tokens()
            k, tokens, seconds = best_k(tokens, est.drafting.upto(MAX_K), verify, ks)
            option = Choice(proposer, k, tokens, seconds, plain, bucket=bucket)
            if option.rate > best.rate:
                best = option
            elif est.credit >= seconds - plain and (overdue is None or option.rate > overdue.rate):
                overdue = option
        if best.proposer is None and overdue is not None:
            overdue.probe = True
            return overdue
        return best

    def record(self, choice: Choice, step, proposers: list[Proposer]) -> None:
        """Learn from the step `choice` ran: its costs, and its proposer's acceptance."""
        if step.prefill or not step.tokens:
            return
        self.verify.add(len(step.drafts) + 1, step.verify_s)
        for proposer in proposers:
            if proposer is not choice.proposer and proposer.estimates is not None:
                est = proposer.estimates
                est.in_run = False
                est.credit = min(
                    est.credit + PROBE_SHARE * choice.plain_seconds, MAX_CREDIT * choice.plain_seconds
                )
        if choice.proposer is None:
            return
        est = self.estimates(choice.proposer)
        if est.in_run:
            est.drafting.add(choice.k, step.propose_s)
        est.in_run = choice.k > 0
        est.acceptance(choice.bucket).record(len(step.drafts), step.accepted)
        if choice.probe:
            cost = step.propose_s + step.verify_s
            est.credit -= cost - (step.accepted + 1) * choice.plain_seconds
