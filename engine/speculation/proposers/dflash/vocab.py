"""A drafter vocabulary: the tokens a drafter may draft, the ones its target writes most.

A drafter's pass reads the whole lm_head it shares with the target (152 K rows for Qwen2.5: 467 MB
in bf16, a large share of a two-layer pass), and a training step's loss is two products over all
of its rows. Drafting over only the N tokens the target's own replies use most (FR-Spec's idea)
cuts both, at the price of never drafting the rest: on the Coder-1.5B's replies 32 K tokens hold
99.3 % of them (bench/RESULTS-cpu.md). Exactness does not depend on it: a draft is still checked
by the target, and sampled drafts' q is zero outside the vocabulary, which the min(1, p/q) rule
takes as it is.

Kept beside a drafter's z-lab files as draft_vocab.json (the token ids, ascending); a drafter
without it drafts over the target's whole vocabulary, as z-lab's do.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from engine.errors import EngineError

FILE = "draft_vocab.json"


def frequent_tokens(replies: list[list[int]], size: int) -> list[int]:
    """The `size` tokens most frequent in `replies` (ties to the smaller id), ascending: a
    function of the replies alone, so a resumed run finds the same."""
    counts = Counter(t for reply in replies for t in reply)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    return sorted(ranked[:size])


class DraftVocab:
    """The drafter's tokens `ids` [N] (ascending), where each target token sits among them
    (`index` [V], -1 for a token outside), and the lm_head rows of those tokens (`head` [N, H])."""

    def __init__(self, ids: list[int], lm_head: torch.Tensor):
        vocab_size = lm_head.shape[0]
        if not ids or min(ids) < 0 or max(ids) >= vocab_size or sorted(set(ids)) != list(ids):
            raise EngineError(f"a drafter vocabulary must be distinct ascending token ids under {vocab_size}")
        device = lm_head.device
        self.ids = torch.tensor(ids, dtype=torch.long, device=device)
        self.index = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
        self.index[self.ids] = torch.arange(len(ids), device=device)
        self.head = lm_head.detach()[self.ids].contiguous()  # its own copy: N rows of the target's

    def __len__(self) -> int:
        return len(self.ids)

    def to_tokens(self, picked: torch.Tensor) -> torch.Tensor:
        """Token ids of positions `picked` among the drafter's tokens."""
        return self.ids[picked]

    def spread(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Logits [..., N] over the drafter's tokens as logits [..., V] over the target's, -inf
        outside: what sampling and the min(1, p/q) rule read."""
        full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
        full[..., self.ids] = logits
        return full


def write_vocab(folder: str | Path, ids: list[int]) -> None:
    (Path(folder) / FILE).write_text(json.dumps({"token_ids": list(ids)}))


def read_vocab(folder: str | Path) -> list[int] | None:
    """The drafter's token ids if its folder keeps a vocabulary, else None (the whole vocabulary)."""
    path = Path(folder) / FILE
    if not path.exists():
        return None
    try:
        ids = json.loads(path.read_text())["token_ids"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EngineError(f"{path} cannot be read as a drafter vocabulary: {err}") from None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise EngineError(f"{path} cannot be read as a drafter vocabulary: token_ids is not a list of ids")
    return ids
