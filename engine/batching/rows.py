"""The running sequences of a batch, one row each, as numpy arrays the host updates once per run.

A run is n decode steps of every row with no host work between them. Before it, every row's
cache grows by n positions at once (`grow`); after it, the n x B sampled tokens come back in one
array and `take` keeps, for each row, the tokens up to the one that ended it (a stop id, its
budget, the context): those after it were never produced by plain decoding, so they are
dropped. `retire` hands back the rows that ended and closes the gaps, so rows 0..count-1 are
always the running ones.

Positions: a row that has sampled `produced` tokens after a prompt of P has K/V for P +
produced - 1 positions in its cache (its latest token has not been run yet); a run's step j
runs position P + produced - 1 + j.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.runtime.kv_cache import SeqCache

RUNNING, STOP, LENGTH = 0, 1, 2
REASONS = {STOP: "stop", LENGTH: "length"}


@dataclass
class Finished:
    index: int  # the prompt's place in the list given
    tokens: list[int]  # the reply, a stop id that ended it included
    reason: str  # "stop" or "length" (its token budget, or the model's context)


class Rows:
    def __init__(self, capacity: int, max_pages: int, width: int, stop_ids=()):
        """capacity rows of up to max_pages pages and `width` sampled tokens (budget + a run)."""
        self.count = 0
        self.stop_ids = np.array(sorted(set(stop_ids)), dtype=np.int64)
        self.index = np.zeros(capacity, dtype=np.int64)
        self.seed = np.zeros(capacity, dtype=np.int64)
        self.length = np.zeros(capacity, dtype=np.int64)  # positions with K/V in the row's cache
        self.produced = np.zeros(capacity, dtype=np.int64)  # tokens sampled so far
        self.limit = np.zeros(capacity, dtype=np.int64)  # tokens it may sample before it ends by length
        self.state = np.zeros(capacity, dtype=np.int64)  # RUNNING, STOP or LENGTH
        self.tokens = np.zeros((capacity, width), dtype=np.int64)
        self.table = np.zeros((capacity, max_pages), dtype=np.int64)  # each row's pages, in order
        self.caches: list[SeqCache] = []

    def add(self, index: int, seed: int, cache: SeqCache, first: int, limit: int) -> None:
        """A prefilled sequence: its cache holds the prompt, `first` is its first sampled token."""
        r = self.count
        self.count += 1
        self.caches.append(cache)
        self.index[r], self.seed[r], self.length[r], self.limit[r] = index, seed, cache.length, limit
        self.table[r, : len(cache.pages)] = cache.pages
        self.produced[r] = 0
        self._end(np.array([[first]]), slice(r, r + 1))

    def steps_left(self) -> int:
        """Steps until every row has ended by length (stops aside): a run need not be longer."""
        b = self.count
        return int((self.limit[:b] - self.produced[:b]).max())

    def start_run(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A run of n steps: every row's cache takes the pages of n more positions at once.
        Returns the run's inputs: each row's latest token, its position, the row's seed and
        page table."""
        b = self.count
        latest = self.tokens[np.arange(b), self.produced[:b] - 1]
        positions = self.length[:b].copy()
        for r, cache in enumerate(self.caches):
            old = len(cache.pages)
            cache.append(n)
            if len(cache.pages) > old:
                self.table[r, old : len(cache.pages)] = cache.pages[old:]
        self.length[:b] += n
        return latest, positions, self.seed[:b].copy(), self.table[:b]

    def take(self, run: np.ndarray) -> None:
        """The tokens [n, count] a run of n steps sampled, step by step."""
        self._end(run, slice(0, self.count))

    def retire(self) -> list[Finished]:
        """The rows that ended, their pages given back; the running rows close up to 0..count-1."""
        b = self.count
        ended = np.flatnonzero(self.state[:b] != RUNNING)
        if not len(ended):
            return []
        out = []
        for r in ended.tolist():
            self.caches[r].release()
            out.append(Finished(int(self.index[r]), self.tokens[r, : self.produced[r]].tolist(),
                             REASONS[int(self.state[r])]))
        kept = np.flatnonzero(self.state[:b] == RUNNING)
        for column in (self.index, self.seed, self.length, self.produced, self.limit, self.state, self.tokens,
                       self.table):
            column[: len(kept)] = column[kept]
        self.caches = [self.caches[r] for r in kept.tolist()]
        self.count = len(kept)
        return out

    def _end(self, run: np.ndarray, rows: slice) -> None:
        """Append run [n, rows] to those rows' tokens, each only up to the token that ends it."""
        n = run.shape[0]
        produced, limit = self.produced[rows].copy(), self.limit[rows]
        cols = produced[None, :] + np.arange(n)[:, None]  # [n, rows]
        self.tokens[np.arange(rows.start, rows.stop)[None, :], cols] = run
        hits = np.isin(run, self.stop_ids)
        first_stop = np.where(hits.any(0), hits.argmax(0) + 1, n + 1)  # tokens kept through the stop id
        room = limit - produced
        keep = np.minimum(np.minimum(first_stop, room), n)
        self.produced[rows] = produced + keep
        state = np.where(first_stop <= keep, STOP, np.where(produced + keep >= limit, LENGTH, RUNNING))
        self.state[rows] = state
