"""Paged KV cache: pages come from one pool, truncate gives them back, rollback is exact."""

import pytest
import torch

from engine import EngineError, SamplingParams, generate
from engine.runtime.kv_cache import PagePool, SeqCache
from tests.conftest import tiny_model


def pool(pages=8, page_size=4):
    return PagePool(num_layers=1, num_pages=pages, page_size=page_size, num_kv_heads=1, head_dim=2,
                    dtype=torch.float32, device="cpu")


def test_append_takes_whole_pages_and_truncate_returns_them():
    p = pool()
    seq = SeqCache(p)
    seq.append(5)  # 5 positions need 2 pages of 4
    assert (len(seq.pages), p.num_free) == (2, 6)
    seq.append(7)  # 12 positions: 3 pages
    assert (len(seq.pages), p.num_free) == (3, 5)
    seq.truncate(4)  # page 2 and 3 go back; page 1 is still full
    assert (seq.length, len(seq.pages), p.num_free) == (4, 1, 7)
    seq.truncate(0)
    assert p.num_free == 8


def test_sequences_share_the_pool():
    p = pool()
    a, b = SeqCache(p), SeqCache(p)
    a.append(9)
    b.append(9)
    assert p.num_free == 2
    assert not set(a.pages) & set(b.pages)
    a.release()
    assert p.num_free == 5


def test_exhausted_pool_is_a_clear_error_and_loses_nothing():
    p = pool(pages=2)
    seq = SeqCache(p)
    seq.append(6)
    with pytest.raises(EngineError, match="KV cache full"):
        seq.append(3)
    assert (seq.length, len(seq.pages), p.num_free) == (6, 2, 0)


def test_slots_follow_the_page_table():
    p = pool()
    other, seq = SeqCache(p), SeqCache(p)
    other.append(4)  # takes page 0, so seq starts on page 1
    seq.append(6)
    assert seq.slots(0, 6).tolist() == [4, 5, 6, 7, 8, 9]


def test_truncate_then_reappend_gives_identical_logits():
    model = tiny_model()
    ids = torch.arange(3, 30)
    seq = model.new_sequence()
    model.step(seq, ids[:20], SamplingParams())
    first = model.step(seq, ids[20:], SamplingParams()).logits
    model.step(seq, torch.tensor([7, 7, 7, 7, 7]), SamplingParams())  # junk past the end, then roll back
    seq.truncate(20)
    again = model.step(seq, ids[20:], SamplingParams()).logits
    assert torch.equal(first, again)


def test_a_page_a_rollback_gives_back_is_the_next_handed_out():
    # so a sequence that drafts and rolls back keeps one consecutive run of pages
    p = pool()
    seq = SeqCache(p)
    seq.append(10)  # pages 0, 1, 2
    seq.truncate(7)  # page 2 goes back
    seq.append(6)  # 13 positions: page 2 again, then 3
    assert seq.pages == [0, 1, 2, 3]


def test_scattered_pages_give_the_same_tokens_as_consecutive_ones():
    # consecutive pages are read as a view of the pool, scattered ones through a gather
    model = tiny_model("qwen2", seed=2)
    prompt, sampling = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], SamplingParams(max_tokens=40)
    consecutive = generate(model, prompt, sampling).tokens
    holes = [SeqCache(model.pool) for _ in range(3)]
    for hole in holes:
        hole.append(1)  # takes a page between the ones the reply gets
    spacer = SeqCache(model.pool)
    spacer.append(model.pool.page_size * 2)
    holes[1].release()
    assert generate(model, prompt, sampling).tokens == consecutive
