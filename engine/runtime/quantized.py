"""A model's weights also as int8, one scale per output row, for its one-token steps.

A draft model's chain of one-token steps reads every weight once a step, so its speed is the
bytes it reads. Its drafts only need to be likely (the target verifies every one of them, in its
own precision), so reading int8 copies instead of bf16 halves what a draft step moves: the
one-row products (`gemv._gemv`) load the int8 rows, turn them to float32 in registers, and
multiply each row's sums by its scale. Steps of several tokens (prefill, catch-ups), batches and
the CPU keep reading the bf16 weights, which stay as they are: a model so quantized runs every
path it ran before, its one-token steps within int8's rounding of the bf16 ones.

Off by default until measured on the GPU: `SPECCHAT_DRAFT_INT8=1` quantizes a draft model as it
loads (engine/speculation/proposers/draft/proposer.py).
"""

from __future__ import annotations

import os

import torch


def draft_int8() -> bool:
    return os.environ.get("SPECCHAT_DRAFT_INT8", "0") == "1"


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [N, K], float32 scales [N]): weight ~ int8 * scale[:, None], symmetric, per row."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous(), scale.contiguous()


@torch.no_grad()
def quantize_int8(model) -> int:
    """Give every linear weight of the model (the layers' products and lm_head) an int8 copy
    for the one-row products to read (gemv.int8_of). Returns the bytes the copies take."""
    added = 0
    for module in model.decoder.modules():
        if isinstance(module, torch.nn.Linear) and getattr(module.weight, "int8", None) is None:
            q, scale = int8_rows(module.weight)
            module.weight.int8 = (q, scale)
            added += q.numel() + 4 * scale.numel()
    return added
