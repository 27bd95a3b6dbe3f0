"""The rows of a batch between runs: a run's pages taken ahead, its tokens kept up to each row's end."""

import numpy as np
import torch

from engine.batching.rows import Rows
from engine.runtime.kv_cache import PagePool, SeqCache

STOP = 99
PAGE = 4


def batch(prompts: list[int], firsts: list[int], limits: list[int]) -> tuple[Rows, PagePool]:
    """Rows of prompts of the given lengths, prefilled, each with its first token sampled."""
    pool = PagePool(1, 32, PAGE, 1, 2, torch.float32, "cpu")
    rows = Rows(len(prompts), 8, max(limits) + 8, stop_ids=[STOP])
    for i, (length, first, limit) in enumerate(zip(prompts, firsts, limits)):
        cache = SeqCache(pool)
        cache.append(length)
        rows.add(i, 100 + i, cache, first, limit)
    return rows, pool


def test_a_run_takes_every_rows_pages_ahead_and_starts_at_its_latest_token():
    rows, pool = batch([3, 7], [10, 20], [20, 20])
    ids, positions, seeds, table = rows.start_run(4)
    assert ids.tolist() == [10, 20]
    assert positions.tolist() == [3, 7]  # the prompt's positions are cached, the first token is not
    assert seeds.tolist() == [100, 101]
    assert [c.length for c in rows.caches] == [7, 11]
    for r, cache in enumerate(rows.caches):
        assert table[r, : len(cache.pages)].tolist() == cache.pages
    assert pool.num_free == 32 - 2 - 3


def test_each_row_keeps_its_tokens_up_to_its_end_and_the_rest_run_on():
    rows, pool = batch([3, 5, 2], [10, 20, 30], [20, 3, 20])
    rows.start_run(4)
    run = np.array([
        [11, 21, 31],
        [STOP, 22, 32],  # row 0 stops here
        [13, 23, 33],  # row 1 reaches its budget of 3 tokens one step before
        [14, 24, 34],
    ])
    rows.take(run)
    finished = rows.retire()
    assert [(f.index, f.tokens, f.reason) for f in finished] == [(0, [10, 11, STOP], "stop"), (1, [20, 21, 22], "length")]
    assert rows.count == 1 and rows.index[0] == 2  # the running row moved up to row 0
    assert pool.num_free == 32 - 2  # the finished rows' pages are back: the prompt's and the run's
    ids, positions, _, _ = rows.start_run(2)
    assert ids.tolist() == [34]
    assert positions.tolist() == [2 + 4]


def test_a_first_token_that_is_a_stop_id_or_fills_the_budget_ends_at_once():
    rows, _ = batch([3, 4, 5], [STOP, 7, 8], [10, 1, 10])
    assert [(f.index, f.tokens, f.reason) for f in rows.retire()] == [(0, [STOP], "stop"), (1, [7], "length")]
    assert rows.count == 1
    assert rows.steps_left() == 9
