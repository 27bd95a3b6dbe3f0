"""What a step takes besides its tokens (StepContext: where its keys and values go and where the
context lives) and what it gives back (StepOutput), on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.runtime.kv_cache import PagePool


@dataclass
class BatchLayout:
    rows: torch.Tensor | None  # [T] int64 on the device: the page-table row (sequence) of each token
    queries: list[int] | None = None  # tokens of each sequence in the step, in order (None: one each)
    # each sequence's context slots, positions 0..L-1 (None on CUDA decode: the kernel reads the
    # page table and ctx.start, each sequence's position)
    contexts: list[torch.Tensor] | None = None


@dataclass
class StepContext:
    pool: PagePool
    slot_mapping: torch.Tensor | None  # [T] pool slots this step's K/V are written to
    context_slots: torch.Tensor | None  # [L] pool slots of positions 0..L-1 (L = context after this step)
    causal: bool = True  # False: the step's queries see each other both ways (DFlash block)
    backend: str = "torch"
    page_table: torch.Tensor | None = None  # triton: [pages] int64, the sequence's pages in order
    start: torch.Tensor | None = None  # triton: [1] int64, position of the step's first token
    # triton: keys per attention split when the step must be batch-invariant (0: splits sized to
    # the context, the fastest); with it, the linears too compute every row the same way
    invariant_chunk: int = 0
    # torch: slot of position 0 when the context's slots are one consecutive run (its K/V are then
    # read as a view of the pool, not gathered)
    context_start: int | None = None
    # a step over several sequences (batched decoding): which sequence each token is of, and
    # where each one's context lives
    batch: BatchLayout | None = None


@dataclass
class StepOutput:
    tokens: torch.Tensor  # [T] sampled after each input token (device)
    logits: torch.Tensor  # [T, V] (device; the sampled-drafts rule needs them)
    states: torch.Tensor | None = None  # [T, n * H] target states for a DFlash drafter
