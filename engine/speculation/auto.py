"""proposer = "auto": several proposers, of which each step drafts with the one expected to pay best.

Every member follows the whole reply, drafting or not: each is reset and observes every step
(so the n-gram index grows, a DFlash drafter receives the target's states of every token, or
after sitting out a while has those it missed computed again before it drafts), and
one that sits a step out is told so before the step (`idle`); a draft model rewinds to the
accepted context on its next proposal.
"""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.limits import AUTO
from engine.speculation.proposers.base import Proposal, Proposer


class AutoProposer(Proposer):
    name = "auto"

    def __init__(self, members: list[Proposer]):
        if not members:
            raise EngineError("proposer auto needs at least one proposer to choose from")
        super().__init__(AUTO)
        self._members = list(members)
        self.max_k = max(p.max_k for p in members)

    @property
    def members(self) -> list[Proposer]:
        return self._members

    def attach(self, target, sampling) -> None:
        for p in self._members:
            p.attach(target, sampling)

    def detach(self, target) -> None:
        for p in self._members:
            p.detach(target)

    def reset(self, context: list[int], states: torch.Tensor | None = None) -> None:
        for p in self._members:
            p.reset(context, states)

    def observe(self, context: list[int], states: torch.Tensor | None = None) -> None:
        for p in self._members:
            p.observe(context, states)

    def prime(self, context: list[int]) -> None:
        for p in self._members:
            p.prime(context)

    def warm_up(self, target, sampling, progress=None) -> None:
        told = {"progress": progress} if progress is not None else {}
        for p in self._members:
            p.warm_up(target, sampling, **told)
        self.warm_up_costs(target, progress=progress)

    def warm_up_costs(self, target, auto: bool = False, progress=None) -> None:
        for p in self._members:  # each is weighed by the policy, whatever its own k
            p.warm_up_costs(target, auto=True, progress=progress)

    def propose(self, context: list[int], k: int) -> Proposal:
        raise EngineError("proposer auto drafts through the generation's choice of a member each step")

    def describe(self) -> str:
        return "auto (" + ", ".join(p.describe() for p in self._members) + ")"
