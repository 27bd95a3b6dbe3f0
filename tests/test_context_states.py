"""States computed again from the cache (context_states): on CUDA a short chunk replays the
model's step graphs, 16 tokens a replay, over a page table of the sequence's pages and then
scratch ones. Here each replay is the same step run op by op over that page table (the graph
replay itself is checked on the GPU, tests/test_dflash_cuda.py): the states are those the
sequence's steps kept, the sequence's K/V are left as they were, and the replays walk the chunk
in steps of at most 16 tokens, each reading what the ones before it wrote."""

import pytest
import torch

from engine import random_model
from engine.limits import MAX_STEP
from engine.runtime.kv_cache import page_slots
from engine.runtime.step_io import StepContext
from engine.speculation import context_states as recompute
from engine.speculation.context_states import context_states
from tests.dflash_target import PROMPT, make_target

LAYERS = (0, 2)


class OpByOpGraphs:
    """StepGraphs.states with each replay run op by op: the torch path over the same page table."""

    def __init__(self, model):
        self.model, self.replays = model, []

    def states(self, pages, start, ids, layers):
        assert 1 <= len(ids) <= MAX_STEP
        self.replays.append((start, len(ids)))
        model, t = self.model, len(ids)
        slots = page_slots(pages, 0, start + t, model.pool.page_size)
        ctx = StepContext(model.pool, slots[start:], slots)
        _, states = model.decoder(torch.tensor(ids), torch.arange(start, start + t), ctx, state_layers=layers)
        return states


@pytest.fixture(scope="module")
def target():
    return random_model(make_target().config, seed=0, std=0.3, max_context=1024)  # room for 300 and scratch


@pytest.mark.parametrize("first,count", [(0, 40), (7, 3), (16, 20), (21, 128)])
def test_short_chunks_replay_step_graphs_and_give_the_kept_states(target, first, count, monkeypatch):
    ids = (PROMPT * 20)[: first + count + 1]
    seq = target.new_sequence()
    target.state_layers = LAYERS
    try:
        kept = torch.cat([target.forward(seq, torch.tensor([t]))[1] for t in ids])  # one-token steps
        slots = seq.slots(0, len(ids))
        k_before, v_before = target.pool.k[:, slots].clone(), target.pool.v[:, slots].clone()
        graphs = OpByOpGraphs(target)
        monkeypatch.setattr(target, "backend", "triton")  # the paged path, which graphs replace
        monkeypatch.setattr(target, "graphs", graphs)
        again = context_states(target, seq, ids[first : first + count], first)
    finally:
        target.state_layers = ()
    torch.testing.assert_close(again, kept[first : first + count], atol=1e-4, rtol=1e-4)
    assert torch.equal(target.pool.k[:, slots], k_before) and torch.equal(target.pool.v[:, slots], v_before)
    starts = list(range(first, first + count, MAX_STEP))
    assert graphs.replays == [(s, min(MAX_STEP, first + count - s)) for s in starts]
    seq.release()


def test_chunks_longer_than_graphed_are_not_replays(target, monkeypatch):
    monkeypatch.setattr(recompute, "GRAPHED", 32)
    seq = target.new_sequence()
    seq.append(50)
    graphs = OpByOpGraphs(target)
    monkeypatch.setattr(target, "backend", "triton")
    monkeypatch.setattr(target, "graphs", graphs)
    ran = []
    monkeypatch.setattr(recompute, "run_paged", lambda model, seq, scratch, ids, *a: ran.append(len(ids))
                        or torch.zeros(len(ids), 1))
    context_states(target, seq, [1] * 33, 0, LAYERS)
    assert ran == [33] and graphs.replays == []
    seq.release()


def test_every_chunk_replays_where_graphs_exist(target, monkeypatch):
    """Replays were the quicker at every length measured, so no chunk runs op by op on a graphed model."""
    monkeypatch.setattr(target, "backend", "triton")
    monkeypatch.setattr(target, "graphs", OpByOpGraphs(target))
    assert all(recompute.replayed(target, n) for n in (1, MAX_STEP, recompute.CHUNK))


def test_a_recompute_is_priced_as_it_runs(target, monkeypatch):
    """Replays of the 16-token step where a chunk goes through graphs, a pass op by op a chunk
    where it cannot (the CPU, long chunks)."""
    cost = {1: 1.0, MAX_STEP: 1.25}.get
    assert recompute.recompute_seconds(target, 32, cost) == recompute.EAGER_STEPS  # the CPU: op by op
    monkeypatch.setattr(target, "backend", "triton")
    monkeypatch.setattr(target, "graphs", OpByOpGraphs(target))
    assert recompute.recompute_seconds(target, 32, cost) == 2 * 1.25
    assert recompute.recompute_seconds(target, 20, cost) == 2 * 1.25
    chunk = recompute.CHUNK
    assert recompute.recompute_seconds(target, chunk + 40, cost) == (chunk // MAX_STEP + 3) * 1.25
    monkeypatch.setattr(recompute, "GRAPHED", 128)
    assert recompute.recompute_seconds(target, chunk + 40, cost) == recompute.EAGER_STEPS + 3 * 1.25
