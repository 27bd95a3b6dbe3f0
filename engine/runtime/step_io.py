"""What a step takes besides its tokens (StepContext: where its keys and values go and where the
context lives) and what it gives back (StepOutput), on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.runtime.kv_cache import PagePool


@dataclass
class PaddedPrompts:
    """Packed prompts that all start at position 0 (a fresh prefill), laid out for one attention
    call over [B, longest] padded rows instead of one call per prompt.

    Each prompt is padded on the right, so the causal mask alone keeps a real query off its
    padding (its keys j <= i < length are all real): the call needs no mask of its own, which
    lets CUDA take its flash kernel (with an explicit [B, 1, L, L] mask it fell back to slower
    ones, the prefill of 830-token prompts running at a tenth of its speed)."""

    slots: torch.Tensor  # [B, longest] the K/V slot of each padded place (padding: the first token's)
    gather: torch.Tensor  # [B, longest] the packed token at each padded place (padding: the prompt's first)
    scatter: torch.Tensor  # [T] the padded place (b * longest + i) of each packed token

    @classmethod
    def of(cls, counts: list[int], slots: torch.Tensor) -> PaddedPrompts:
        """counts: each prompt's tokens; slots [T]: their K/V slots, packed in the step's order."""
        device = slots.device
        lengths = torch.tensor(counts, device=device)
        longest = max(counts)
        places = torch.arange(longest, device=device)
        real = places[None, :] < lengths[:, None]  # [B, longest]
        starts = lengths.cumsum(0) - lengths
        # padding reads the prompt's first token and key (finite values): its queries are dropped
        gather = torch.where(real, starts[:, None] + places[None, :], starts[:, None])
        scatter = (torch.arange(len(counts), device=device)[:, None] * longest + places[None, :])[real]
        return cls(slots[gather], gather, scatter)


@dataclass
class BatchLayout:
    rows: torch.Tensor | None  # [T] int64 on the device: the page-table row (sequence) of each token
    queries: list[int] | None = None  # tokens of each sequence in the step, in order (None: one each)
    # each sequence's context slots, positions 0..L-1 (None on CUDA decode: the kernel reads the
    # page table and ctx.start, each sequence's position)
    contexts: list[torch.Tensor] | None = None
    padded: PaddedPrompts | None = None  # a fresh prefill of several prompts: attention in one call


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
