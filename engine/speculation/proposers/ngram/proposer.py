"""Prompt lookup: draft what followed the latest earlier occurrence of the context's longest
suffix seen before, of up to MAX_N tokens."""

from __future__ import annotations

import torch

from engine.speculation.proposers.base import Proposal, Proposer

# The longest suffix looked up. The latest occurrence of a short one is often not the place the
# reply copies from (code repeats `self.x = ` and `return `); a longer one pins it down. On the
# twenty-first run's traces of the real target (bench/cpu/ngram_lengths.py, replayed with the
# H200's costs) n-gram k 15 took 3 % less time on the bench's conversation than with 3 (the same
# on a second), 16-20 % less on two of five single replies, the same on the others; past 8
# little changes.
MAX_N = 8
BULK = 64  # tokens past which the index takes new ones in per length (observe)


class NgramProposer(Proposer):
    name = "n-gram"
    bucket_follows_text = True

    def __init__(self, k: int | str = 4, max_n: int = MAX_N):
        super().__init__(k)
        self.max_n = max_n
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> position right after its latest occurrence
        self.indexed = 0  # n-grams ending before this position are in the index

    def reset(self, context: list[int], states: torch.Tensor | None = None) -> None:
        self.index.clear()
        self.indexed = 0
        self.observe(context)

    def observe(self, context: list[int], states: torch.Tensor | None = None) -> None:
        # Index every n-gram that has a following token, i.e. ending at or before len - 2; the
        # context's own suffix stays out, so a lookup finds an *earlier* occurrence. Grows with
        # the context: no step rescans it. A step's few tokens go in one by one; a prompt's
        # thousands (a chat's, at each reply) per length by zips, the n-grams ending at
        # `first`..`last` with the positions after them, in order (a later occurrence replaces
        # an earlier one): a Python loop per token and length took 1.5-2 times as long.
        last = len(context) - 2
        if last - self.indexed < BULK:
            for end in range(self.indexed, last + 1):
                for n in range(1, min(self.max_n, end + 1) + 1):
                    self.index[tuple(context[end - n + 1 : end + 1])] = end + 1
        else:
            for n in range(1, self.max_n + 1):
                first = max(self.indexed, n - 1)
                count, start = last - first + 1, first - n + 1
                grams = zip(*(context[start + i : start + i + count] for i in range(n)))
                self.index.update(zip(grams, range(first + 1, last + 2)))
        self.indexed = max(self.indexed, len(context) - 1)

    def match(self, context: list[int]) -> tuple[int, int | None]:
        """(n, where the continuation starts) for the longest suffix of n tokens seen earlier."""
        self.observe(context)
        for n in range(min(self.max_n, len(context)), 0, -1):
            start = self.index.get(tuple(context[-n:]))
            if start is not None:
                return n, start
        return 0, None

    def bucket(self, context: list[int]) -> int:
        # a 3-token match is followed by what followed it far more often than a 1-token one
        return self.match(context)[0]

    def peek(self, context: list[int]) -> list[int] | None:
        return self.propose(context, self.max_k).drafts or None

    def first_draft(self, context: list[int]) -> int | None:
        _, start = self.match(context)
        return None if start is None else context[start]

    def propose(self, context: list[int], k: int) -> Proposal:
        _, start = self.match(context)
        if start is None:
            return Proposal([])
        # Copy forward from the match; past the end of the context keep copying from the drafts
        # themselves, so a repeating pattern still yields k drafts.
        drafts: list[int] = []
        for i in range(k):
            j = start + i
            drafts.append(context[j] if j < len(context) else drafts[j - len(context)])
        return Proposal(drafts)


def make(_, k: int) -> NgramProposer:
    return NgramProposer(k=k)
