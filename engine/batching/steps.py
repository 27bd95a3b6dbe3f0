"""A batched decode step, and runs of them op by op (the CPU, and CUDA with eager=True).

`decode_step` is the one step both paths run: every row's token at its position, its K/V
written through the row's page table, the next token sampled with the row's seed. The CUDA
graphs (engine/batching/graphs.py) capture it; `EagerRuns` calls it n times, feeding each step
the tokens the previous one sampled, and reads the n x B tokens back once, as the graphs do.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.runtime.sampling import SamplingParams, sample
from engine.runtime.step_io import BatchLayout, StepContext


def decode_step(model, pool, ids: torch.Tensor, positions: torch.Tensor, seeds: torch.Tensor, table: torch.Tensor,
                rows: torch.Tensor, sampling: SamplingParams, contexts: list[torch.Tensor] | None = None
                ) -> torch.Tensor:
    """The token after each row's ids [B] at positions [B]: [B] on the device. table [B, pages];
    rows: arange(B) on the device. The torch backend also takes each row's context slots."""
    decoder = model.decoder
    if model.backend == "torch":
        slots = _slots(table, positions, pool.page_size)
        ctx = StepContext(pool, slots, None, batch=BatchLayout(None, None, contexts))
    else:
        ctx = StepContext(pool, None, None, True, "triton", table, positions, batch=BatchLayout(rows))
    logits = decoder.logits(decoder(ids, positions, ctx))
    # the token after position p is drawn with the noise of p + 1, as a sequence alone draws it
    return sample(logits, positions + 1, sampling, seeds=seeds)


def _slots(table: torch.Tensor, positions: torch.Tensor, page_size: int) -> torch.Tensor:
    page = table.gather(1, (positions // page_size)[:, None])[:, 0]
    return page * page_size + positions % page_size


class EagerRuns:
    def __init__(self, model, pool):
        self.model = model
        self.pool = pool

    def run(self, ids: np.ndarray, positions: np.ndarray, seeds: np.ndarray, table: np.ndarray, n: int,
            sampling: SamplingParams) -> np.ndarray:
        """n steps of every row from its latest token ids [B] at positions [B]: tokens [n, B]."""
        device = self.model.device
        b = len(ids)
        token = torch.from_numpy(ids).to(device)
        start = torch.from_numpy(positions).to(device)
        row_seeds = torch.from_numpy(seeds).to(device)
        pages = torch.from_numpy(np.ascontiguousarray(table)).to(device)
        rows = torch.arange(b, device=device)
        every_slot = None
        if self.model.backend == "torch":  # each row's slots of positions 0.. in order
            ps = self.pool.page_size
            every_slot = (pages[:, :, None] * ps + torch.arange(ps, device=device)).view(b, -1)
        out = []
        for j in range(n):
            contexts = None
            if every_slot is not None:
                contexts = [every_slot[r, : p + j + 1] for r, p in enumerate(positions.tolist())]
            token = decode_step(self.model, self.pool, token, start + j, row_seeds, pages, rows, sampling, contexts)
            out.append(token)
        return torch.stack(out).cpu().numpy()
