"""Paged KV cache: a pool of fixed-size pages shared by the sequences of one model.

A sequence owns a page table (which pages hold its positions, in order) and a length.
Rolling back rejected drafts is `truncate`: it moves the length back and returns whole pages
past it to the pool. Nothing on the device changes: later appends overwrite the stale slots.
"""

from __future__ import annotations

from collections import deque

import torch

from engine.errors import EngineError


class PagePool:
    """K and V storage for every layer: [layers, pages * page_size, kv_heads, head_dim], slot-addressed."""

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        self.num_pages = num_pages
        self.page_size = page_size
        shape = (num_layers, num_pages * page_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.free: deque[int] = deque(range(num_pages))

    @property
    def num_free(self) -> int:
        return len(self.free)

    def allocate(self) -> int:
        if not self.free:
            raise EngineError(
                f"KV cache full: all {self.num_pages} pages of {self.page_size} tokens are in use "
                "(start a new chat or load the model with a larger --max-context)"
            )
        return self.free.popleft()

    def release(self, pages: list[int]) -> None:
        # to the front, in order: the next append takes the page a rollback just gave back, so a
        # sequence's pages stay one consecutive run (its K/V one view on the torch path)
        self.free.extendleft(reversed(pages))


class SeqCache:
    """One sequence's view of the pool: its page table and how many positions hold valid K/V."""

    def __init__(self, pool: PagePool):
        self.pool = pool
        self.pages: list[int] = []
        self.length = 0

    def pages_for(self, length: int) -> int:
        return -(-length // self.pool.page_size)

    def append(self, n: int) -> None:
        """Grow by n positions, taking pages from the pool as needed (all or nothing)."""
        need = self.pages_for(self.length + n) - len(self.pages)
        if need > self.pool.num_free:
            raise EngineError(
                f"KV cache full: {self.length + n} tokens need {need} more pages, "
                f"{self.pool.num_free} are free (start a new chat or raise --max-context)"
            )
        self.pages.extend(self.pool.allocate() for _ in range(need))
        self.length += n

    def truncate(self, n: int) -> None:
        """Keep the first n positions; pages wholly past them go back to the pool. No device work."""
        assert 0 <= n <= self.length, (n, self.length)
        keep = self.pages_for(n)
        self.pool.release(self.pages[keep:])
        del self.pages[keep:]
        self.length = n

    def release(self) -> None:
        self.truncate(0)

    def slots(self, start: int, end: int) -> torch.Tensor:
        """Flat pool slots of positions start..end-1 (a host-built index: the torch reference path)."""
        return page_slots(self.pages, start, end, self.pool.page_size)


def page_slots(pages: list[int], start: int, end: int, page_size: int) -> torch.Tensor:
    """Flat pool slots of positions start..end-1 of a sequence whose pages are `pages`, in order."""
    table = torch.tensor(pages, dtype=torch.long)
    pos = torch.arange(start, end, dtype=torch.long)
    return table[pos // page_size] * page_size + pos % page_size
