"""CUDA graphs of batched decode steps, one per batch size of a ladder (1, 2, 4 ... 256).

A step of B sequences replays the graph of the smallest ladder size >= B; the rows past B are
padding: token 0 at position 0, every page the scratch page, so they write only there and
nobody reads them. The inputs live in one static device buffer, filled by one host-to-device
copy per step:

    [ ids (max batch) | positions (max batch) | seeds (max batch) | page tables (max batch x pages) ]

The linears are plain matmuls (cuBLAS for 16 rows and more, the step kernels below), the
attention is engine/kernels/batch_attention.py, and sampling ends the graph with each row's
own seed. Graphs are captured on first use per (size, sampling settings) into one memory pool;
the seed is an input, so one graph serves every sequence's.
"""

from __future__ import annotations

import torch

from engine.runtime.sampling import SamplingParams, sample_rows
from engine.runtime.step_graphs import capture
from engine.runtime.step_io import BatchLayout, StepContext

LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def ladder(max_batch: int) -> list[int]:
    """Batch sizes given graphs: the ladder's below max_batch, and max_batch itself."""
    return [b for b in LADDER if b < max_batch] + [max_batch]


class BatchGraphs:
    def __init__(self, model, pool, max_batch: int, max_pages: int):
        self.model = model
        self.pool = pool
        self.sizes = ladder(max_batch)
        self.scratch_page = pool.free.pop()  # padding rows and capture warm-ups write here
        self.max_batch, self.max_pages = max_batch, max_pages
        width = 3 * max_batch + max_batch * max_pages
        self.host = torch.zeros(width, dtype=torch.long).pin_memory()
        view = self.host.numpy()
        self.host_ids, self.host_positions, self.host_seeds = (view[i * max_batch : (i + 1) * max_batch]
                                                               for i in range(3))
        self.host_table = view[3 * max_batch :].reshape(max_batch, max_pages)
        self.inputs = torch.zeros(width, dtype=torch.long, device=model.device)
        self.ids, self.positions, self.seeds = (self.inputs[i * max_batch : (i + 1) * max_batch] for i in range(3))
        self.table = self.inputs[3 * max_batch :].view(max_batch, max_pages)
        self.rows = torch.arange(max_batch, device=model.device)
        self.loaded = torch.cuda.Event()
        self.mempool = torch.cuda.graph_pool_handle()
        self.graphs: dict = {}

    def size_for(self, b: int) -> int:
        return next(s for s in self.sizes if s >= b)

    def step(self, running, sampling: SamplingParams) -> torch.Tensor:
        """The token after each running sequence's latest one (its K/V slot already appended):
        [B] on the device."""
        b = len(running)
        size = self.size_for(b)
        graph, tokens = self.graph(size, sampling)
        self.loaded.synchronize()  # the previous copy has left the pinned buffer
        self.host_ids[:b] = [s.tokens[-1] for s in running]
        self.host_positions[:b] = [s.cache.length - 1 for s in running]
        self.host_seeds[:b] = [s.seed for s in running]
        for row, s in enumerate(running):
            pages = s.cache.pages
            self.host_table[row, : len(pages)] = pages
        self._pad(b, size)
        self.inputs.copy_(self.host, non_blocking=True)
        self.loaded.record()
        graph.replay()
        return tokens[:b]

    def graph(self, size: int, sampling: SamplingParams):
        """(graph, its sampled tokens [size]) for steps of `size` rows, captured on first use."""
        # the seed is an input: graphs are keyed by the other settings
        key = (size, "greedy" if sampling.greedy else (sampling.temperature, sampling.top_k, sampling.top_p))
        if key not in self.graphs:
            self.loaded.synchronize()
            self._pad(0, self.max_batch)
            self.inputs.copy_(self.host)
            self.graphs[key] = capture(lambda: self._body(size, sampling), self.mempool)
        return self.graphs[key]

    def _pad(self, first: int, end: int) -> None:
        self.host_ids[first:end] = 0
        self.host_positions[first:end] = 0
        self.host_seeds[first:end] = 0
        self.host_table[first:end] = self.scratch_page

    def _body(self, size: int, sampling: SamplingParams) -> torch.Tensor:
        decoder = self.model.decoder
        positions = self.positions[:size]
        ctx = StepContext(self.pool, None, None, True, "triton", self.table[:size], positions,
                          batch=BatchLayout(self.rows[:size]))
        logits = decoder.logits(decoder(self.ids[:size], positions, ctx))
        return sample_rows(logits, positions + 1, sampling, self.seeds[:size])
