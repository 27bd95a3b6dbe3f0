"""CUDA graphs of runs of batched decode steps, one per batch size of a ladder (1, 2, 4 ... 256).

A run of n steps over B rows is n replays of the graph of the smallest ladder size >= B with
nothing on the host between them: the graph reads each row's token and position from device
buffers, samples (engine/batching/steps.decode_step), writes the sampled token back as the
next replay's input and into the run's output [RUN_STEPS, max batch] at row `counter`, and
advances the positions and the counter. The host writes the inputs once before a run, in one
host-to-device copy, and reads the n x B tokens back once after it:

    [ ids (max batch) | positions (max batch) | seeds (max batch) | counter | page tables (max batch x pages) ]

The rows past B are padding: token 0 at position 0, every page the scratch page, so they write
only there and nobody reads them. Graphs are captured on first use per (size, sampling
settings) into one memory pool; the seed is an input, so one graph serves every sequence's.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.batching.steps import decode_step
from engine.runtime.sampling import SamplingParams
from engine.runtime.step_graphs import capture

LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def ladder(max_batch: int) -> list[int]:
    """Batch sizes given graphs: the ladder's below max_batch, and max_batch itself."""
    return [b for b in LADDER if b < max_batch] + [max_batch]


class BatchGraphs:
    def __init__(self, model, pool, max_batch: int, max_pages: int, run_steps: int):
        self.model = model
        self.pool = pool
        self.sizes = ladder(max_batch)
        self.scratch_page = pool.free.pop()  # padding rows and capture warm-ups write here
        self.max_batch, self.max_pages = max_batch, max_pages
        counter = 3 * max_batch
        width = counter + 1 + max_batch * max_pages
        self.host = torch.zeros(width, dtype=torch.long).pin_memory()
        view = self.host.numpy()
        self.host_ids, self.host_positions, self.host_seeds = (view[i * max_batch : (i + 1) * max_batch]
                                                               for i in range(3))
        self.host_counter = view[counter : counter + 1]
        self.host_table = view[counter + 1 :].reshape(max_batch, max_pages)
        self.inputs = torch.zeros(width, dtype=torch.long, device=model.device)
        self.ids, self.positions, self.seeds = (self.inputs[i * max_batch : (i + 1) * max_batch] for i in range(3))
        self.counter = self.inputs[counter : counter + 1]
        self.table = self.inputs[counter + 1 :].view(max_batch, max_pages)
        self.rows = torch.arange(max_batch, device=model.device)
        # one row of max_batch tokens per step of a run, written at row `counter`
        self.out = torch.zeros(run_steps * max_batch, dtype=torch.long, device=model.device)
        self.run_steps = run_steps
        self.loaded = torch.cuda.Event()
        self.mempool = torch.cuda.graph_pool_handle()
        self.graphs: dict = {}

    def size_for(self, b: int) -> int:
        return next(s for s in self.sizes if s >= b)

    def run(self, ids: np.ndarray, positions: np.ndarray, seeds: np.ndarray, table: np.ndarray, n: int,
            sampling: SamplingParams) -> np.ndarray:
        """n steps of every row from its latest token ids [B] at positions [B] (the pages of the
        n positions already in its table): tokens [n, B]."""
        assert 1 <= n <= self.run_steps, n
        b = len(ids)
        size = self.size_for(b)
        graph = self.graph(size, sampling)
        self.loaded.synchronize()  # the previous copy has left the pinned buffer
        self.host_ids[:b], self.host_positions[:b], self.host_seeds[:b] = ids, positions, seeds
        self.host_table[:b, : table.shape[1]] = table
        self._pad(b, size)
        self.host_counter[0] = 0
        self.inputs.copy_(self.host, non_blocking=True)
        self.loaded.record()
        for _ in range(n):
            graph.replay()
        return self.out.view(self.run_steps, self.max_batch)[:n, :b].cpu().numpy()

    def graph(self, size: int, sampling: SamplingParams):
        """The graph of one step of `size` rows, captured on first use."""
        # the seed is an input: graphs are keyed by the other settings
        key = (size, "greedy" if sampling.greedy else (sampling.temperature, sampling.top_k, sampling.top_p))
        if key not in self.graphs:
            self.loaded.synchronize()
            self._pad(0, self.max_batch)
            self.host_counter[0] = 0
            self.inputs.copy_(self.host)
            self.graphs[key], _ = capture(lambda: self._body(size, sampling), self.mempool)
        return self.graphs[key]

    def _pad(self, first: int, end: int) -> None:
        self.host_ids[first:end] = 0
        self.host_positions[first:end] = 0
        self.host_seeds[first:end] = 0
        self.host_table[first:end] = self.scratch_page

    def _body(self, size: int, sampling: SamplingParams) -> None:
        ids, positions, rows = self.ids[:size], self.positions[:size], self.rows[:size]
        token = decode_step(self.model, self.pool, ids, positions, self.seeds[:size], self.table[:size], rows,
                            sampling)
        ids.copy_(token)
        self.out.index_copy_(0, self.counter * self.max_batch + rows, token)
        positions.add_(1)
        self.counter.add_(1)
