"""The engine's fixed sizes, each defined once.

A step is the unit the runtime captures as a CUDA graph and the product kernels are tuned for:
decode (1 token), verify (the last token and its drafts) and the draft chain all run steps of at
most MAX_STEP tokens; longer runs (prefill) take the general path. So k, the drafts per verify
step, is at most MAX_STEP - 1, or "auto": chosen each step.
"""

from engine.errors import EngineError

MAX_STEP = 16  # longest verify step: the last token and up to 15 drafts
MAX_K = MAX_STEP - 1  # drafts per step
PAGE_SIZE = 16  # tokens per KV cache page
AUTO = "auto"  # k chosen each step by the adaptive policy (engine/speculation/adaptive.py)
# A DFlash drafter trained here drafts over the tokens its target's replies use most, this many
# by default (train-dflash --draft-vocab): faster to train and better in equal time on the H200
# (bench/RESULTS.md, twelfth run); see engine/speculation/proposers/dflash/vocab.py
DEFAULT_DRAFT_VOCAB = 32768


def check_k(k: int | str, max_k: int = MAX_K, why: str = "") -> int | str:
    """k itself, or one clear error: drafts per step are 1..max_k (a proposer's own limit, at most
    MAX_K, for the reason `why`), or "auto"."""
    if k == AUTO:
        return k
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= max_k:
        raise EngineError(
            f"k must be a whole number from 1 to {max_k}{f' ({why})' if why else ''} or auto, got {k!r}"
        )
    return k
